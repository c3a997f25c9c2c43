"""Moving a whole store to another one, checked: SQLite file or PostgreSQL schema, either way.

:func:`copy_store` reads the source in one snapshot (SQLite: a read
transaction on a ``mode=ro`` handle; PostgreSQL: one ``REPEATABLE READ READ
ONLY`` transaction), migrates the target, and copies every table the store
owns: ``sessions`` (parents before children), ``messages`` (ids kept),
``state_meta`` and ``compression_locks``; ``schema_version`` is the
migrations' own and must agree. Then it checks the target against the same
snapshot (:func:`verify_copy` does that on its own): row counts, every
session row, and a digest of each session's messages computed in Python the
same way on both sides.

**Batches.** Sessions go in parent-first order, a few hundred at a time with
all their messages, one transaction per batch (``COPY`` on PostgreSQL, one
prepared ``INSERT`` on SQLite); messages are streamed from the source
(a server-side cursor on PostgreSQL), so memory grows with the number of
sessions (their ids and parents, a few hundred bytes each), not with the
messages. A merge into a file, whose write lock every other writer of the
file waits for, paces its batches as an import paces its steps
(:mod:`hermes_models.transfer.staging`): the first holds :data:`FIRST_FILE_BATCH`
messages, each next one as many as the last one's speed fits in
:data:`~hermes_models.transfer.staging.TRANSACTION_SECONDS`, and a pause of
:data:`~hermes_models.transfer.staging.PAUSE_SECONDS` follows each, so a process
appending meanwhile (a gateway, Hermes with its 1 s busy timeout) gets the
lock between batches. A session is never split: one with more messages than
fit holds the lock for as long as its messages take. A copy into an empty
file or a server is not paced.

**Restart.** The copy writes a marker into the target's ``state_meta``
(key :data:`MARKER_KEY`) before its first batch and removes it once the
target has been verified. A target holding the marker of the same source is
not "non-empty": the copy goes on where the killed one stopped (a session
present in the target came with all its messages, in one transaction).

**Merge.** Without ``merge`` the target must be empty. With it, the rules of
the bundle import apply: a session the target has is left exactly as it is,
messages included; a new session keeps its message ids unless one of them is
taken, and then all its messages get ids after every id in use; ``state_meta``
keys and compression locks the target has are kept; a new session whose title a
session of the target holds gets the next free ``"title #N"`` (``titles_renamed``),
as an import does. The target's id counter is
moved past every source id before the first batch, and renumbered messages take
their ids from it inside their batch: clients writing to the target meanwhile
never get an id the copy uses. Sessions the target had
that differ from the source are counted (``sessions_differing``), not errors;
a session this run added must match exactly.

Parent links that form a loop (a damaged file) are copied without the link
first and set once the whole loop is in, in one transaction; a parent that is
in neither store is dropped (``parents_dropped``), and messages whose session
does not exist are not copied (``orphan_messages``): the target's foreign
keys would refuse both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar, cast

from ..conversations import telegram
from ..errors import CopyError, TargetNotEmptyError, VerificationError
from ..models import order_sessions
from ..store import (
    SCHEMA_VERSION,
    Redactor,
    connect,
    database,
    grams,
    postgres,
    postgres_sql,
    redaction,
    resolve_path,
    sqlite_sql,
    using,
)
from .bundle import MESSAGE_COLUMNS, SESSION_COLUMNS, Progress, added_among
from .staging import PAUSE_SECONDS, TRANSACTION_SECONDS, settled_titles

log = logging.getLogger("hermes_models")

T = TypeVar("T")

#: The ``state_meta`` key of a copy under way in the target (JSON: source, merge, start).
MARKER_KEY = "hermes_models.transfer.copy"
#: ``state_meta`` keys that belong to one store and are never copied: the copy's
#: marker and the lease of an import running on the source.
LOCAL_META = frozenset({MARKER_KEY, "hermes_models.import"})
#: A batch ends after this many sessions, or once it holds this many messages.
BATCH_SESSIONS = 200
BATCH_MESSAGES = 20_000
#: Messages of the first batch into a file; later ones are sized by its speed.
FIRST_FILE_BATCH = 1_000
#: Ids per presence query; sessions per verification step.
_ID_CHUNK = 5000
_VERIFY_SESSIONS = 500
#: Progress is reported every this many rows.
_PROGRESS_EVERY = 2000

META_COLUMNS = ("key", "value")
LOCK_COLUMNS = ("session_id", "holder", "acquired_at", "expires_at")
#: The tables a copy owns, in the order they are reported.
TABLES = ("sessions", "messages", "state_meta", "compression_locks")
#: The Telegram topic tables (an opt-in migration set) a copy carries when the source
#: has them: their columns, and how many of the first make a row's key.
TOPIC_TABLES: dict[str, tuple[tuple[str, ...], int]] = {
    model._meta.table_name: (tuple(f.column_name for f in model._meta.sorted_fields), keys)
    for model, keys in ((telegram.TelegramTopicMode, 1), (telegram.TelegramTopicBinding, 2))
}

_PARENT = SESSION_COLUMNS.index("parent_session_id")
_TITLE = SESSION_COLUMNS.index("title")
_SESSION_OF = MESSAGE_COLUMNS.index("session_id")


# -- the two kinds of store ---------------------------------------------------------------------


class _Side:
    """One store of a copy, SQLite or PostgreSQL: the reads and writes a copy makes."""

    label: str
    identity: tuple[str, ...]
    #: The store's handle (a file's or a server's).
    db: Any
    #: Whether a write transaction here makes every other writer wait (a file's
    #: write lock), so that the copy writes in short, paced batches.
    paced: bool
    #: What a source's rows are redacted with as they are read (``copy --redact``):
    #: the copy writes, and its check compares, the redacted rows. None: as stored.
    redactor: Redactor | None = None

    def close(self) -> None:
        raise NotImplementedError

    def read_sessions(self, ids: list[str]) -> list[tuple[Any, ...]]:
        """:meth:`session_rows`, titles redacted when the side redacts."""
        rows = self.session_rows(ids)
        if self.redactor is None:
            return rows
        return [tuple(self.redactor.row(SESSION_COLUMNS, row)) for row in rows]

    def read_messages(self, ids: list[str], columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """:meth:`message_rows`, text and tool calls redacted when the side redacts."""
        rows = self.message_rows(ids, columns)
        if self.redactor is None:
            return rows
        redactor = self.redactor
        return (tuple(redactor.row(columns, row)) for row in rows)

    def index_grams(self) -> None:
        """Index what the copy wrote in the file's gram index (a server keeps its own)."""

    def check_grams(self) -> grams.GramCheck | None:
        """The file's gram index checked by what it holds; None: none to check."""
        return None

    def refresh_statistics(self) -> None:
        """Have the planner count what the copy wrote (a file's planner needs nothing)."""

    def set_up_topics(self) -> None:
        """Create the Telegram topic tables here (the opt-in migration set)."""
        with using(self.db):
            telegram.apply()

    def shape(self) -> Any:
        raise NotImplementedError

    def begin_read(self) -> None:
        raise NotImplementedError

    def end_read(self) -> None:
        raise NotImplementedError

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def stream(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        raise NotImplementedError

    def write(self, fn: Callable[[], T]) -> T:
        raise NotImplementedError

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def insert_ignore(
        self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> None:
        raise NotImplementedError

    def raise_sequence(self, value: int) -> None:
        raise NotImplementedError

    def take_ids(self, count: int, floor: int) -> list[int]:
        """``count`` message ids above ``floor`` that no other writer of this store
        gets, in increasing order (inside a write)."""
        raise NotImplementedError

    # Statements differ by dialect; each side names its module.
    sql: Any

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.all(sql, params)
        return rows[0][0] if rows else None

    def present(self, table: str, ids: Sequence[Any]) -> set[Any]:
        raise NotImplementedError

    def session_rows(self, ids: list[str]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def message_rows(self, ids: list[str], columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        raise NotImplementedError

    def count(self, table: str) -> int:
        return int(self.one(self.sql.count_rows(table)))

    def meta(self, key: str) -> str | None:
        value = self.one(self.sql.META_VALUE, (key,))
        return None if value is None else str(value)

    def set_meta(self, key: str, value: str) -> None:
        self.all_nothing(self.sql.UPSERT_META, (key, value))

    def delete_meta(self, key: str) -> None:
        self.all_nothing(self.sql.DELETE_META, (key,))

    def all_nothing(self, sql: str, params: Sequence[Any]) -> None:
        raise NotImplementedError

    def sequence(self) -> int:
        """The highest message id this store handed out (0: none)."""
        handed = self.one(self.sql.MESSAGE_SEQUENCE)
        highest = self.one(self.sql.HIGHEST_MESSAGE_ID)
        return max(int(handed or 0), int(highest or 0))


class _SqliteSide(_Side):
    sql = sqlite_sql
    paced = True

    def __init__(self, target: str | os.PathLike[str], *, write: bool) -> None:
        path = resolve_path(target, argument="store")
        self.label = str(path)
        self.identity = ("sqlite", os.path.realpath(path))
        self.db = connect(path) if write else connect(path, read_only=True, migrate=False)

    def close(self) -> None:
        self.db.close()

    def index_grams(self) -> None:
        """Index what the copy wrote (listed as changed by the file's triggers) in the
        gram index, in short transactions, so that its verification reads it."""
        if grams.present(self.db.connection()) and grams.usable(self.db.connection()):
            grams.catch_up(self.db)

    def check_grams(self) -> grams.GramCheck | None:
        """The gram index checked by what it holds (as ``doctor`` checks it)."""
        if not grams.present(self.db.connection()) or not grams.usable(self.db.connection()):
            return None
        return grams.check(self.db)

    def shape(self) -> Any:
        return self.db.shape

    def begin_read(self) -> None:
        self.db.cursor().execute(sqlite_sql.BEGIN)

    def end_read(self) -> None:
        if not self.db.is_closed() and self.db.connection().in_transaction:
            self.db.cursor().execute(sqlite_sql.ROLLBACK)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.db.cursor().execute(sql, tuple(params)).fetchall())

    def all_nothing(self, sql: str, params: Sequence[Any]) -> None:
        self.db.cursor().execute(sql, tuple(params))

    def stream(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        cursor = self.db.cursor()
        cursor.execute(sql, tuple(params))
        try:
            while rows := cursor.fetchmany(1000):
                yield from rows
        finally:
            cursor.close()

    def write(self, fn: Callable[[], T]) -> T:
        return cast(T, self.db.write(fn))

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        self.db.cursor().executemany(sqlite_sql.multi_row_insert(table, columns, 1), rows)

    def insert_ignore(
        self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> None:
        self.db.cursor().executemany(sqlite_sql.insert_or_ignore(table, columns), rows)

    def raise_sequence(self, value: int) -> None:
        current = self.all(sqlite_sql.MESSAGE_SEQUENCE)
        if not current:
            self.all_nothing(sqlite_sql.INSERT_SEQUENCE, ("messages", value))
        elif int(current[0][0] or 0) < value:
            self.all_nothing(sqlite_sql.SET_SEQUENCE, (value, "messages"))

    def take_ids(self, count: int, floor: int) -> list[int]:
        # The write lock is held: ids after the highest this file handed out are free
        # (rows inserted with them move AUTOINCREMENT's sequence on).
        base = max(floor, self.sequence())
        return list(range(base + 1, base + count + 1))

    def present(self, table: str, ids: Sequence[Any]) -> set[Any]:
        found: set[Any] = set()
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = json.dumps(list(ids[start : start + _ID_CHUNK]))
            found.update(row[0] for row in self.all(sqlite_sql.ids_in_list(table), (chunk,)))
        return found

    def session_rows(self, ids: list[str]) -> list[tuple[Any, ...]]:
        return self.all(sqlite_sql.copy_sessions_in_list(SESSION_COLUMNS), (json.dumps(ids),))

    def message_rows(self, ids: list[str], columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        return self.stream(sqlite_sql.copy_messages_of_sessions(columns), (json.dumps(ids),))


class _PostgresSide(_Side):
    sql = postgres_sql
    paced = False  # other clients' inserts do not wait for the copy's

    def __init__(self, url: str, *, write: bool) -> None:
        target = postgres.parse_url(url)
        self.label = target.label()
        self.identity = ("postgresql", target.label())
        self.db = postgres.open_database(url, migrate_first=write, read_only=not write)
        self._cursors = 0

    def close(self) -> None:
        self.db.close()

    def refresh_statistics(self) -> None:
        # A role that does not own the tables gets a warning from the server, not an error.
        self.db.execute_sql(postgres_sql.ANALYZE)

    def shape(self) -> Any:
        self.db.connection()
        return self.db.shape

    def begin_read(self) -> None:
        self.db.connection().execute(postgres_sql.BEGIN_SNAPSHOT)

    def end_read(self) -> None:
        if not self.db.is_closed():
            self.db.connection().execute(postgres_sql.ROLLBACK)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.db.connection().cursor() as cursor:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall()) if cursor.description else []

    def all_nothing(self, sql: str, params: Sequence[Any]) -> None:
        self.db.connection().execute(sql, tuple(params))

    def stream(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        # A server-side cursor: rows come 2,000 at a time, whatever the session holds.
        self._cursors += 1
        with self.db.connection().cursor(name=f"hermes_models_copy_{self._cursors}") as cursor:
            cursor.itersize = 2000
            cursor.execute(sql, tuple(params))
            yield from cursor

    def write(self, fn: Callable[[], T]) -> T:
        with self.db.atomic():
            return fn()

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        with (
            self.db.connection().cursor() as cursor,
            cursor.copy(postgres_sql.copy_into(table, columns)) as copy,
        ):
            for row in rows:
                copy.write_row(row)

    def insert_ignore(
        self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> None:
        if rows:
            with self.db.connection().cursor() as cursor:
                cursor.executemany(postgres_sql.insert_or_ignore(table, columns), rows)

    def raise_sequence(self, value: int) -> None:
        if value <= 0 or int(self.one(postgres_sql.MESSAGE_SEQUENCE) or 0) >= value:
            return  # already past it: nothing to set, no lock
        # Other clients take ids meanwhile: set the identity only with their inserts
        # held off, else it could be set below an id it just handed out (and hand
        # that id out again). Held until the transaction ends: a short one.
        self.all_nothing(postgres_sql.LOCK_MESSAGE_INSERTS, ())
        if int(self.one(postgres_sql.MESSAGE_SEQUENCE) or 0) < value:
            self.all(postgres_sql.SET_MESSAGE_SEQUENCE, (value,))

    def take_ids(self, count: int, floor: int) -> list[int]:
        # From the identity itself: other clients take ids from it meanwhile, so the
        # ids are unique though maybe not consecutive.
        self.raise_sequence(floor)
        return sorted(int(row[0]) for row in self.all(postgres_sql.TAKE_MESSAGE_IDS, (count,)))

    def present(self, table: str, ids: Sequence[Any]) -> set[Any]:
        sql = (
            postgres_sql.COPY_SESSIONS_PRESENT
            if table == "sessions"
            else postgres_sql.COPY_MESSAGES_PRESENT
        )
        found: set[Any] = set()
        for start in range(0, len(ids), _ID_CHUNK):
            found.update(row[0] for row in self.all(sql, (list(ids[start : start + _ID_CHUNK]),)))
        return found

    def session_rows(self, ids: list[str]) -> list[tuple[Any, ...]]:
        return self.all(postgres_sql.copy_sessions_in_list(SESSION_COLUMNS), (ids,))

    def message_rows(self, ids: list[str], columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        return self.stream(postgres_sql.copy_messages_of_sessions(columns), (ids,))


def _open(store: str | os.PathLike[str], *, write: bool) -> _Side:
    if postgres.is_postgres_url(store):
        return _PostgresSide(str(store), write=write)
    return _SqliteSide(store, write=write)


def _identity(store: str | os.PathLike[str]) -> tuple[str, ...]:
    if postgres.is_postgres_url(store):
        return ("postgresql", postgres.parse_url(str(store)).label())
    return ("sqlite", os.path.realpath(resolve_path(store, argument="store")))


def _beyond_v16(side: _Side, shape: Any) -> list[str]:
    """What a source holds that a v16 store cannot: its added columns (``table.column``)
    and added tables (see :func:`hermes_models.transfer.bundle.added_among`)."""
    columns = [
        f"{table}.{column}"
        for table, v16 in (("sessions", SESSION_COLUMNS), ("messages", MESSAGE_COLUMNS))
        for column in shape.columns.get(table, ())
        if column not in v16
    ]
    if shape.dialect != "sqlite":
        return columns
    added = added_among(side.all(sqlite_sql.TABLES_WITH_SQL))
    return columns + [f"table {name}" for name in added if name not in TOPIC_TABLES]


def _check_source(side: _Side) -> None:
    shape = side.shape()
    if shape is None or not {"sessions", "messages"} <= set(shape.tables):
        raise CopyError(f"{side.label} holds no Hermes session store (nothing to copy)")
    beyond = _beyond_v16(side, shape)
    if shape.newer or beyond:
        named = ", ".join(beyond[:6]) + (f" and {len(beyond) - 6} more" if len(beyond) > 6 else "")
        what = (
            f"has Hermes schema version {shape.describe_version()}, newer than {SCHEMA_VERSION}"
            if shape.newer
            else f"has what a version {SCHEMA_VERSION} store cannot hold"
        )
        raise CopyError(
            f"{side.label} {what}: a copy would lose "
            + (named if beyond else "what the later Hermes added")
            + "; nothing was copied (`hermes-models export` keeps all of it in a bundle)"
        )
    missing = [
        f"{table}.{column}"
        for table, columns in (("sessions", SESSION_COLUMNS), ("messages", MESSAGE_COLUMNS))
        for column in columns
        if not shape.has(table, column)
    ]
    tables = {"state_meta", "compression_locks"} - set(shape.tables)
    if shape.version != SCHEMA_VERSION or missing or tables:
        lacking = ", ".join([*missing, *sorted(tables)][:3])
        raise CopyError(
            f"{side.label} has Hermes schema version {shape.describe_version()}"
            + (f" (without {lacking})" if lacking else "")
            + f"; migrate it to {SCHEMA_VERSION} first (hermes-models migrate --db ...)"
        )


def _check_target(side: _Side) -> None:
    shape = side.shape()
    if shape is not None and shape.newer:
        raise CopyError(
            f"{side.label} has Hermes schema version {shape.describe_version()}, newer than "
            f"{SCHEMA_VERSION}, which this package writes: it cannot be the target of a copy"
        )


# -- order and digests --------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as both backends give it back: an integral float is an integer."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _digests(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[int, str, str]]:
    """Per session: (messages, digest of every column but the id, digest of the ids), over
    rows ordered by session and id (``MESSAGE_COLUMNS``, id first)."""
    found: dict[str, tuple[int, str, str]] = {}
    current: str | None = None
    count = 0
    values = hashlib.sha256()
    ids = hashlib.sha256()

    def close() -> None:
        if current is not None:
            found[current] = (count, values.hexdigest(), ids.hexdigest())

    for row in rows:
        session_id = row[_SESSION_OF]
        if session_id != current:
            close()
            current, count = session_id, 0
            values, ids = hashlib.sha256(), hashlib.sha256()
        count += 1
        ids.update(b"%d," % row[0])
        values.update(repr(tuple(map(_plain, row[1:]))).encode("utf-8", "surrogatepass"))
        values.update(b"\n")
    close()
    return found


# -- the report ---------------------------------------------------------------------------------


@dataclass
class CopyReport:
    """What a copy did, and what the target holds after it (``verified``)."""

    source: str
    target: str
    merge: bool = False
    #: True when the copy went on from a killed one (its marker was in the target).
    resumed: bool = False
    sessions_copied: int = 0
    #: Sessions the target had already (merge; or copied before a restart).
    sessions_skipped: int = 0
    messages_copied: int = 0
    messages_skipped: int = 0
    #: Messages of new sessions given new ids, because one of their ids was taken (merge).
    messages_renumbered: int = 0
    state_meta_copied: int = 0
    compression_locks_copied: int = 0
    #: Rows of the Telegram topic tables copied (0 when the source has none).
    topic_rows_copied: int = 0
    #: Messages of the source whose session does not exist (not copied).
    orphan_messages: int = 0
    #: Parent links to a session in neither store (copied as no parent).
    parents_dropped: int = 0
    #: New sessions whose title a session of the target had: given the next free
    #: ``"title #N"``, as an import does (merge).
    titles_renamed: int = 0
    #: Sessions, state_meta keys and locks the target had, different from the source (merge).
    rows_differing: int = 0
    #: Rows per table in the target, checked against the source.
    verified: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """One flat record (``verified_<table>`` for the counts), for ``--json``."""
        record = asdict(self)
        verified = record.pop("verified")
        record.update({f"verified_{table}": rows for table, rows in verified.items()})
        return record


# -- copying ------------------------------------------------------------------------------------


class _Copy:
    def __init__(self, src: _Side, dst: _Side, merge: bool, progress: Progress | None) -> None:
        self.src, self.dst, self.merge = src, dst, merge
        self.progress = progress
        self.report = CopyReport(src.label, dst.label, merge=merge)
        self.parents: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}
        self.cut: set[str] = set()
        self.added: set[str] = set()
        #: New titles of the sessions renamed because the target held theirs (merge).
        self.renamed: dict[str, str] = {}
        self.done = 0
        self.total = 0
        self.next_id = 0
        #: Whether batches are short and paused between (a merge into a file: the
        #: target may be in use; an empty target is not) and the messages one may hold.
        self.paced = merge and dst.paced
        self.batch_messages = FIRST_FILE_BATCH if self.paced else BATCH_MESSAGES

    def step(self, rows: int) -> None:
        self.done += rows
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total)

    def start(self) -> None:
        """Refuse a target that is not empty, unless it holds this copy's marker or
        ``merge`` is given; then mark the target."""
        marker = self.dst.meta(MARKER_KEY)
        source = None
        if marker is not None:
            try:
                source = json.loads(marker).get("source")
            except (ValueError, AttributeError):
                source = None
        if source == self.src.label:
            self.report.resumed = True
            log.info("resuming the unfinished copy of %s into %s", self.src.label, self.dst.label)
        elif marker is not None and not self.merge:
            raise TargetNotEmptyError(
                f"{self.dst.label} holds an unfinished copy of {source or 'another store'}: "
                "run that copy again to finish it, or pass merge=True to add to it"
            )
        elif not self.merge:
            held = {table: self.dst.count(table) for table in TABLES if table != "state_meta"}
            held["state_meta"] = sum(
                1 for (key, _) in self.dst.all(self.dst.sql.COPY_META_ROWS) if key != MARKER_KEY
            )
            rows = ", ".join(f"{table}: {n}" for table, n in held.items() if n)
            if rows:
                raise TargetNotEmptyError(
                    f"{self.dst.label} is not empty ({rows}): copy into an empty store, "
                    "or pass merge=True to add the sessions it lacks"
                )
        value = json.dumps({"source": self.src.label, "merge": self.merge, "at": time.time()})
        self.dst.write(lambda: self.dst.set_meta(MARKER_KEY, value))

    def plan(self) -> None:
        self.parents = {row[0]: row[1] for row in self.src.all(self.src.sql.COPY_SESSION_LINKS)}
        counts = dict(self.src.all(self.src.sql.COPY_MESSAGE_COUNTS))
        self.counts = {s: int(counts.get(s, 0)) for s in self.parents}
        self.report.orphan_messages = int(self.src.one(self.src.sql.COPY_ORPHAN_MESSAGES) or 0)
        if self.report.orphan_messages:
            log.warning(
                "%s: %d messages belong to no session; they are not copied",
                self.src.label,
                self.report.orphan_messages,
            )
        rows = len(self.parents) + sum(self.counts.values())
        self.total = 2 * rows  # copied, then verified
        # Ids given to renumbered messages come after every id of both stores.
        self.next_id = max(self.src.sequence(), self.dst.sequence())

    def batches(self, ordered: list[str]) -> Iterator[list[str]]:
        batch: list[str] = []
        messages = 0
        for session_id in ordered:
            batch.append(session_id)
            messages += self.counts[session_id]
            if len(batch) >= BATCH_SESSIONS or messages >= self.batch_messages:
                yield batch
                batch, messages = [], 0
        if batch:
            yield batch

    def run(self) -> CopyReport:
        started = time.monotonic()
        self.src.begin_read()
        try:
            self.start()
            self.plan()
            # Writers of the target take ids above every id the copy keeps, from now on
            # (on a server they would otherwise take those ids while the copy runs).
            self.dst.write(lambda: self.dst.raise_sequence(self.src.sequence()))
            ordered, looped, self.cut = order_sessions(self.parents)
            if looped:
                log.warning(
                    "%s: %d sessions are in or below a loop of parent links; copied in one step",
                    self.src.label,
                    len(looped),
                )
            for batch in self.batches(ordered):
                self.copy_batch(batch)
            if looped:
                self.copy_batch(looped)
            self.dst.write(self.finish)
            self.copy_topics()
            self.dst.index_grams()
            self.dst.refresh_statistics()
            self.report.titles_renamed = sum(1 for s in self.renamed if s in self.added)
            checked = _Verifier(
                self.src, self.dst, self.merge, self.added, self.step, renamed=self.renamed
            )
            self.dst.begin_read()
            try:
                self.report.verified = checked.run(self.parents)
            finally:
                self.dst.end_read()
            self.report.rows_differing = checked.differing
            self.dst.write(lambda: self.dst.delete_meta(MARKER_KEY))
        finally:
            self.src.end_read()
        self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def copy_batch(self, ids: list[str]) -> None:
        # A first look, without the write lock, so that a batch the target has whole
        # (a resumed copy) takes no lock; the write looks again (see _write_batch).
        there = self.dst.present("sessions", ids)  # once: not once a session (quadratic)
        candidates = [s for s in ids if s not in there]
        new: list[str] = []
        renumbered = dropped = 0
        if candidates:
            started = time.monotonic()
            new, (renumbered, dropped) = self.dst.write(lambda: self._write_batch(candidates))
            if self.paced and new:  # a batch that found all present wrote nothing to size by
                self._pace(sum(self.counts[s] for s in new), time.monotonic() - started)
        added = set(new)
        skipped = [s for s in ids if s not in added]
        self.report.sessions_skipped += len(skipped)
        self.report.messages_skipped += sum(self.counts[s] for s in skipped)
        self.step(sum(1 + self.counts[s] for s in skipped))
        if not new:
            return
        self.added.update(new)
        self.report.sessions_copied += len(new)
        self.report.messages_copied += sum(self.counts[s] for s in new)
        self.report.messages_renumbered += renumbered
        self.report.parents_dropped += dropped

    def _pace(self, messages: int, seconds: float) -> None:
        """Size the next batch by this one's speed, then let waiting writers have the lock."""
        fit = int(max(messages, 1) * TRANSACTION_SECONDS / max(seconds, 1e-3))
        self.batch_messages = max(1, min(BATCH_MESSAGES, fit))
        time.sleep(PAUSE_SECONDS)

    def _write_batch(self, candidates: list[str]) -> tuple[list[str], tuple[int, int]]:
        """Write the sessions of ``candidates`` (parent-first) the target still lacks,
        and their messages; returns those sessions and (messages renumbered, parents
        dropped). Runs in one transaction, and again from the start if SQLite's write
        lock was not had. In a file the look at what the target has is exact here,
        under the write lock: a session another writer added since the first look is
        skipped, not refused by the target's unique index."""
        taken = self.dst.present("sessions", candidates)
        new = [s for s in candidates if s not in taken]
        if not new:
            return new, (0, 0)
        by_id = {row[0]: row for row in self.src.read_sessions(new)}
        dangling = {p for s in new if (p := self.parents[s]) is not None and p not in self.parents}
        known = self.dst.present("sessions", sorted(dangling)) if dangling else set()
        rows = []
        dropped = 0
        for session_id in new:
            row = by_id[session_id]
            parent = row[_PARENT]
            if session_id in self.cut or (parent in dangling and parent not in known):
                dropped += parent is not None and session_id not in self.cut
                row = (*row[:_PARENT], None, *row[_PARENT + 1 :])
            rows.append(row)
        if self.merge:
            rows = self._settle_titles(rows)
        self.dst.insert("sessions", SESSION_COLUMNS, rows)
        self.step(len(new))
        moved = self._clashing(new) if self.merge else set()
        fresh = self.dst.take_ids(sum(self.counts[s] for s in moved), self.next_id) if moved else []
        state = {"next": self.next_id, "renumbered": 0, "rows": 0}
        self.dst.insert("messages", MESSAGE_COLUMNS, self._messages(new, moved, state, fresh))
        self.step(state["rows"] % _PROGRESS_EVERY)
        cut = [(by_id[s][_PARENT], s) for s in new if s in self.cut and by_id[s][_PARENT]]
        for parent, session_id in cut:
            self.dst.all_nothing(self.dst.sql.COPY_SET_PARENT, (parent, session_id))
        self.next_id = state["next"]
        return new, (state["renumbered"], dropped)

    def _settle_titles(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` with each title a session of the target holds renamed to the next
        free ``"title #N"`` (inside the batch's transaction, so the look is exact)."""
        titles = [(row[0], row[_TITLE]) for row in rows]
        wanted = sorted({title for _, title in titles if title is not None})
        if not wanted:
            return rows
        param: Any = wanted if isinstance(self.dst, _PostgresSide) else json.dumps(wanted)
        taken = {title for (title,) in self.dst.all(self.dst.sql.TITLES_FROM_LIST, [param])}
        changes, _ = settled_titles(titles, taken, rename=True)
        out = []
        for row in rows:
            if row[0] in changes:
                title = str(changes[row[0]])  # renamed, never dropped (rename=True)
                self.renamed[row[0]] = title
                row = (*row[:_TITLE], title, *row[_TITLE + 1 :])
            out.append(row)
        return out

    def _clashing(self, new: list[str]) -> set[str]:
        """The sessions of ``new`` with a message id the target already uses."""
        ids = [(row[0], row[1]) for row in self.src.message_rows(new, ("id", "session_id"))]
        taken = self.dst.present("messages", [i for i, _ in ids])
        return {session_id for message_id, session_id in ids if message_id in taken}

    def _messages(
        self, new: list[str], moved: set[str], state: dict[str, int], fresh: list[int]
    ) -> Iterator[tuple[Any, ...]]:
        """The message rows of ``new``; those of ``moved`` take the ids ``fresh``, in order."""
        check_blobs = isinstance(self.dst, _PostgresSide)
        for row in self.src.read_messages(new, MESSAGE_COLUMNS):
            if row[_SESSION_OF] in moved:
                if state["renumbered"] == len(fresh):  # the counts come from the same snapshot
                    raise CopyError(f"{self.src.label}: more messages than counted; nothing kept")
                state["next"] = fresh[state["renumbered"]]
                state["renumbered"] += 1
                row = (state["next"], *row[1:])
            if check_blobs and any(type(v) is bytes for v in row):
                column = MESSAGE_COLUMNS[[type(v) is bytes for v in row].index(True)]
                raise CopyError(
                    f"message {row[0]} of session {row[_SESSION_OF]!r} holds a BLOB in "
                    f"{column}, which a PostgreSQL text column cannot hold"
                )
            state["rows"] += 1
            if state["rows"] % _PROGRESS_EVERY == 0:
                self.step(_PROGRESS_EVERY)
            yield row

    def finish(self) -> None:
        """``state_meta`` and compression locks the target lacks, and the id sequence."""
        meta = [
            tuple(row)
            for row in self.src.all(self.src.sql.COPY_META_ROWS)
            if row[0] not in LOCAL_META
        ]
        have = {row[0] for row in self.dst.all(self.dst.sql.COPY_META_ROWS)}
        self.dst.insert_ignore("state_meta", META_COLUMNS, [r for r in meta if r[0] not in have])
        self.report.state_meta_copied = sum(1 for r in meta if r[0] not in have)
        locks = [tuple(row) for row in self.src.all(self.src.sql.COPY_LOCK_ROWS)]
        held = {row[0] for row in self.dst.all(self.dst.sql.COPY_LOCK_ROWS)}
        self.dst.insert_ignore(
            "compression_locks", LOCK_COLUMNS, [r for r in locks if r[0] not in held]
        )
        self.report.compression_locks_copied = sum(1 for r in locks if r[0] not in held)
        # New messages in the target get ids above every id either store handed out.
        self.dst.raise_sequence(max(self.next_id, self.src.sequence()))

    def copy_topics(self) -> None:
        """The rows of the Telegram topic tables the target lacks (by key), when the
        source has the tables; the target gets them first. A binding of a session the
        target does not hold is left out (the foreign key would refuse it)."""
        tables = [t for t in TOPIC_TABLES if t in (self.src.shape().tables or ())]
        if not tables:
            return
        self.dst.set_up_topics()

        def write() -> None:
            for table in tables:
                columns, keys = TOPIC_TABLES[table]
                rows = [tuple(r) for r in self.src.all(self.src.sql.table_rows(table, columns))]
                if "session_id" in columns:
                    at = columns.index("session_id")
                    held = self.dst.present("sessions", sorted({r[at] for r in rows}))
                    rows = [r for r in rows if r[at] in held]
                have = {r[:keys] for r in self.dst.all(self.dst.sql.table_rows(table, columns))}
                missing = [r for r in rows if r[:keys] not in have]
                self.dst.insert_ignore(table, columns, missing)
                self.report.topic_rows_copied += len(missing)

        self.dst.write(write)


# -- verifying ----------------------------------------------------------------------------------


class _Verifier:
    """The target checked against the source: counts, session rows, message digests."""

    def __init__(
        self,
        src: _Side,
        dst: _Side,
        merge: bool,
        added: set[str] | None,
        step: Callable[[int], None] | None = None,
        *,
        renamed: dict[str, str] | None = None,
    ) -> None:
        self.src, self.dst, self.merge = src, dst, merge
        #: Sessions this run added: they must match even in a merge.
        self.added = added or set()
        #: Titles this run gave added sessions instead of the source's.
        self.renamed = renamed or {}
        self.step = step or (lambda rows: None)
        self.differing = 0

    def differ(self, what: str, key: Any, strict: bool) -> None:
        if strict or not self.merge:
            raise VerificationError(f"{what} differs between {self.src.label} and {self.dst.label}")
        self.differing += 1
        log.info("merge: %s was kept as the target had it (%r)", what, key)

    def run(self, parents: dict[str, str | None]) -> dict[str, int]:
        ids = sorted(parents)
        for start in range(0, len(ids), _VERIFY_SESSIONS):
            self.sessions(ids[start : start + _VERIFY_SESSIONS], parents)
        for table, columns in (("state_meta", META_COLUMNS), ("compression_locks", LOCK_COLUMNS)):
            statement = "COPY_META_ROWS" if table == "state_meta" else "COPY_LOCK_ROWS"
            mine = {
                r[0]: tuple(map(_plain, r))
                for r in self.src.all(getattr(self.src.sql, statement))
                if r[0] not in LOCAL_META
            }
            theirs = {
                r[0]: tuple(map(_plain, r))
                for r in self.dst.all(getattr(self.dst.sql, statement))
                if r[0] not in LOCAL_META
            }
            self.same_rows(table, f"{columns[0]} ", mine, theirs)
        topics = self.topics()
        found = self.dst.check_grams()
        if found is not None and not found.ok:
            wrong = sorted({*found.wrong, *found.stray})
            raise VerificationError(
                f"the gram index of {self.dst.label} holds wrong grams for messages "
                f"{', '.join(map(str, wrong[:10]))}"
                + (f" (FTS5: {found.index_detail})" if found.index_detail else "")
            )
        verified = {table: self.dst.count(table) for table in TABLES}
        verified["state_meta"] -= self.dst.meta(MARKER_KEY) is not None
        verified.update({table: self.dst.count(table) for table in topics})
        versions = (
            self.src.one(self.src.sql.SCHEMA_VERSION),
            self.dst.one(self.dst.sql.SCHEMA_VERSION),
        )
        if versions[0] != versions[1]:
            raise VerificationError(
                f"schema_version: {self.src.label} has {versions[0]}, "
                f"{self.dst.label} {versions[1]}"
            )
        if not self.merge:
            expected = {
                "sessions": len(parents),
                "messages": self.src.count("messages")
                - int(self.src.one(self.src.sql.COPY_ORPHAN_MESSAGES) or 0),
                "state_meta": len(
                    [r for r in self.src.all(self.src.sql.COPY_META_ROWS) if r[0] not in LOCAL_META]
                ),
                "compression_locks": self.src.count("compression_locks"),
                **topics,
            }
            for table, rows in expected.items():
                if verified[table] != rows:
                    raise VerificationError(
                        f"{table}: {self.src.label} has {rows} rows, "
                        f"{self.dst.label} {verified[table]}"
                    )
        return verified

    def topics(self) -> dict[str, int]:
        """Check the Telegram topic rows of the source against the target's, by key;
        returns how many rows of each table the target should hold in a plain copy
        (a binding of a session the target lacks was left out)."""
        expected: dict[str, int] = {}
        for table, (columns, keys) in TOPIC_TABLES.items():
            if table not in (self.src.shape().tables or ()):
                continue
            statement = self.src.sql.table_rows(table, columns)
            mine = {tuple(r[:keys]): tuple(map(_plain, r)) for r in self.src.all(statement)}
            statement = self.dst.sql.table_rows(table, columns)
            theirs = {tuple(r[:keys]): tuple(map(_plain, r)) for r in self.dst.all(statement)}
            if "session_id" in columns:
                at = columns.index("session_id")
                held = self.dst.present("sessions", sorted({r[at] for r in mine.values()}))
                mine = {k: r for k, r in mine.items() if r[at] in held}
            self.same_rows(table, "", mine, theirs)
            expected[table] = len(mine)
        return expected

    def same_rows(
        self, table: str, named: str, mine: dict[Any, tuple[Any, ...]], theirs: dict[Any, Any]
    ) -> None:
        """Each row of the source (by key) is in the target; a row that differs is an
        error, or in a merge kept as the target has it. ``named`` prefixes the key."""
        for key, row in mine.items():
            if key not in theirs:
                raise VerificationError(f"{table}: {named}{key!r} is missing from {self.dst.label}")
            if theirs[key] != row:
                self.differ(f"{table}: the row of {named}{key!r}", key, strict=False)

    def sessions(self, ids: list[str], parents: dict[str, str | None]) -> None:
        mine = {row[0]: row for row in self.src.read_sessions(ids)}
        theirs = {row[0]: row for row in self.dst.session_rows(ids)}
        dangling = sorted({p for s in ids if (p := parents[s]) is not None and p not in parents})
        known = self.dst.present("sessions", dangling) if dangling else set()
        for session_id in ids:
            if session_id not in theirs:
                raise VerificationError(
                    f"sessions: session {session_id!r} is missing from {self.dst.label}"
                )
            row = mine[session_id]
            if row[_PARENT] in dangling and row[_PARENT] not in known:
                row = (*row[:_PARENT], None, *row[_PARENT + 1 :])
            if session_id in self.renamed and session_id in self.added:
                row = (*row[:_TITLE], self.renamed[session_id], *row[_TITLE + 1 :])
            if tuple(map(_plain, row)) != tuple(map(_plain, theirs[session_id])):
                self.differ(
                    f"sessions: the row of session {session_id!r}",
                    session_id,
                    strict=session_id in self.added,
                )
        source = _digests(self.src.read_messages(ids, MESSAGE_COLUMNS))
        target = _digests(self.dst.message_rows(ids, MESSAGE_COLUMNS))
        for session_id in ids:
            want = source.get(session_id, (0, "", ""))
            got = target.get(session_id, (0, "", ""))
            # In a merge, a new session's messages may have been given new ids.
            same = want[:2] == got[:2] and (want[2] == got[2] or self.merge)
            if not same:
                what = "number of" if want[0] != got[0] else "content of the"
                self.differ(
                    f"messages: the {what} messages of session {session_id!r} "
                    f"({want[0]} in the source, {got[0]} in the target)",
                    session_id,
                    strict=session_id in self.added,
                )
            self.step(1 + want[0])


# -- the public functions -----------------------------------------------------------------------


def _sides(
    source: str | os.PathLike[str], target: str | os.PathLike[str], *, write: bool
) -> tuple[_Side, _Side]:
    if _identity(source) == _identity(target):
        raise CopyError(f"the source and the target are the same store ({source})")
    src = _open(source, write=False)
    try:
        _check_source(src)
        dst = _open(target, write=write)
    except BaseException:
        src.close()
        raise
    return src, dst


def copy_store(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    merge: bool = False,
    progress: Progress | None = None,
    redact: bool | Redactor | None = None,
) -> CopyReport:
    """Copy the store ``source`` into ``target`` and check the result.

    Each is an SQLite path (or ``sqlite:///`` URL) or a ``postgresql://`` URL
    (``?schema=`` for a profile). The source is read in one snapshot and never
    written; the target is created or migrated first. ``progress(done,
    total)`` is called as rows are copied and then verified. ``redact`` (True or a
    :class:`~hermes_models.store.redaction.Redactor`; None: ``HERMES_MODELS_REDACT``)
    writes the source's messages, tool calls and titles with their secrets redacted,
    and checks the target against the redacted rows.

    Raises:
        TargetNotEmptyError: ``target`` holds rows, ``merge`` is not given, and it
            is not an unfinished copy of ``source`` (which is finished instead).
        VerificationError: the target differs from the source after the copy.
        CopyError: the source holds no store, or one of another schema version;
            the two are the same store; a value cannot be stored in the target.
    """
    saved = database.obj
    redactor = redaction.settings(redact)
    src, dst = _sides(source, target, write=True)
    src.redactor = redactor
    try:
        _check_target(dst)
        return _Copy(src, dst, merge, progress).run()
    finally:
        dst.close()
        src.close()
        database.initialize(saved)


def verify_copy(
    source: str | os.PathLike[str], target: str | os.PathLike[str], *, merge: bool = False
) -> dict[str, int]:
    """Check that ``target`` holds what ``source`` holds (both read-only), as
    :func:`copy_store` does after copying; returns the rows of each table of the
    target. With ``merge``, rows the target has that differ from the source are
    allowed (counted in the log), missing ones are not.

    Raises:
        VerificationError: a table or a session differs (the message names it).
    """
    saved = database.obj
    src, dst = _sides(source, target, write=False)
    try:
        src.begin_read()
        dst.begin_read()
        try:
            parents = {row[0]: row[1] for row in src.all(src.sql.COPY_SESSION_LINKS)}
            return _Verifier(src, dst, merge, None).run(parents)
        finally:
            dst.end_read()
            src.end_read()
    finally:
        dst.close()
        src.close()
        database.initialize(saved)
