"""Adding whole sessions to a PostgreSQL store while other clients keep writing.

The same rules as :mod:`hermes_models.transfer.staging` (sessions appear complete or
not at all, one import per store at a time, nothing left behind by a failure),
reached the server's way. A message row cannot exist there before its session
(the foreign key is checked at once, and no client may turn it off), so the
messages wait in a staging table of the import's own connection:

1. **A lock.** The import holds an advisory lock of its store (its schema)
   for its connection's session, where the SQLite path keeps a lease row. A
   second import is refused while it is held. The server releases it when the
   connection ends, however the import's process ends: there is no stale lease
   to take over.
2. **The messages**, in transactions of at most :data:`~.staging.BATCH_ROWS`
   rows, go to a temporary table of the connection
   (``pg_temp.hermes_import_messages``): no other client sees it or waits for
   it, and it is gone when the connection ends, so an import whose process
   dies leaves nothing. If the connection changes midway (it was lost, say),
   the import stops: nothing was added.
3. **The sessions and their messages**, in one transaction: the sessions are
   added (titles settled with one query, parents set once all exist), staged
   rows whose session has a message id the store already uses take fresh ids
   of the identity, in their order, the rows are copied into ``messages``, and
   the counters are computed from them. The transaction writes new rows only:
   on PostgreSQL it locks out no other writer (no table lock, no row of another
   session), so its length does not stop an appender as SQLite's write lock
   would. Readers see it all at its commit.

Every transaction of an import adds rows no other client sees before it
commits, and runs at ``REPEATABLE READ``
(:meth:`~hermes_models.store.postgres.PostgresDatabase.write_new_rows`), not
``SERIALIZABLE``: a transaction that long, reading the tables appenders write
and adding to them, is refused by the server again and again while appenders
commit around it (it would be the middle of a read/write cycle each time). The
clashes an import looks for are guarded by unique indexes instead: a session
id, title or message id another client takes after the import looked fails the
transaction, which runs again, sees the row, and refuses the session, numbers
the title or renumbers the messages.

Message ids the import keeps are reserved first, as on SQLite: the identity
of ``messages.id`` is moved past the largest (``setval``), and moved back when
the import fails and no id was handed out since.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..conversations import counter_totals
from ..errors import ImportConflictError
from ..models import Message, Session
from ..store import Backend, among, current, postgres_sql
from .bundle import MESSAGE_COLUMNS, chunks, raw
from .staging import (
    BATCH_BYTES,
    BATCH_ROWS,
    SESSION_ROWS,
    SessionSource,
    redact_rows,
    redact_source,
    refuse_present,
    statement_sizes,
    title_changes,
)

if TYPE_CHECKING:
    from ..store import PostgresDatabase

logger = logging.getLogger("hermes_models")

T = TypeVar("T")

_SESSIONS = Session._meta.table_name
#: The columns of ``messages`` the staging table has (a PostgreSQL store's: v16).
STAGED_COLUMNS = tuple(MESSAGE_COLUMNS)
#: How long a large import waits for small imports (each holds the lock for its one
#: transaction) before it says another import is running.
LOCK_WAIT_SECONDS = 2.0


def _write(db: Backend, fn: Callable[[], T]) -> T:
    """``fn`` in a write that adds rows only (:meth:`.PostgresDatabase.write_new_rows`)."""
    return cast("PostgresDatabase", db).write_new_rows(fn)


def _conflict(db: Backend) -> ImportConflictError:
    return ImportConflictError(
        f"{db.path}: another import into this store is running; try again when it is done"
    )


def _insert(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` with multi-row INSERTs of :func:`~.staging.statement_sizes`."""
    start = 0
    for size in statement_sizes(len(rows)):
        chunk = rows[start : start + size]
        start += size
        raw(
            postgres_sql.multi_row_insert(table, columns, size),
            [v for row in chunk for v in row],
        )


def stage_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Add message rows to the import's staging table (inside a write)."""
    _insert(postgres_sql.STAGED_MESSAGES, columns, rows)


def _add_sessions(
    source: SessionSource,
    session_ids: Sequence[str],
    columns_staged: Sequence[str],
    rename_titles: bool,
) -> tuple[int, int]:
    """Add the sessions and the staged messages (``columns_staged`` of them: the others
    take their defaults) inside a write; returns how many titles changed and how many
    messages took fresh ids."""
    refuse_present_here(session_ids)
    titles, changed = title_changes(source.titles, rename_titles)
    parents: dict[str, str] = {}
    batch: list[list[Any]] = []
    columns: list[str] = []
    for row in source.rows():
        values = dict(row)
        if values["id"] in titles:
            values["title"] = titles[values["id"]]
        # Parents are set once every session of the import exists (a parent may come
        # later in the bundle, or two sessions may name each other).
        parent = values.get("parent_session_id")
        if parent is not None:
            parents[values["id"]] = parent
            values["parent_session_id"] = None
        values["message_count"] = values["tool_call_count"] = 0
        columns = columns or list(values)
        batch.append([values[c] for c in columns])
        if len(batch) >= SESSION_ROWS:
            _insert(_SESSIONS, columns, batch)
            batch = []
    if batch:
        _insert(_SESSIONS, columns, batch)
    if parents:
        raw(postgres_sql.SET_PARENTS, [list(parents), list(parents.values())])
    moved = sorted(row[0] for row in raw(postgres_sql.STAGED_CLASHING_SESSIONS).fetchall())
    # Appenders, and the fresh ids below, take ids after every id kept.
    raw(postgres_sql.SEQUENCE_PAST_STAGED)
    fresh = int(raw(postgres_sql.STAGED_NEEDING_IDS, [moved]).fetchone()[0])
    if fresh:
        raw(postgres_sql.RENUMBER_STAGED, [moved, fresh])
    if columns_staged:
        staged = [c for c in columns_staged if c != "id"]
        raw(postgres_sql.move_staged_messages(["id", *staged]))
    for chunk in chunks(list(session_ids), 5000):
        totals = raw(counter_totals().where(among(Message.session, chunk))).fetchall()
        if totals:
            raw(
                postgres_sql.SET_COUNTERS,
                [[t[0] for t in totals], [int(t[1]) for t in totals], [int(t[2]) for t in totals]],
            )
    renumbered = 0
    if moved:
        renumbered = int(raw(postgres_sql.STAGED_NEEDING_IDS, [moved]).fetchone()[0])
    return changed, renumbered


def refuse_present_here(session_ids: Sequence[str]) -> None:
    """:func:`~.staging.refuse_present` for the store the models use."""
    refuse_present(current().path, session_ids)


class ServerStaging:
    """One import into a PostgreSQL store: use as a context manager (see the module text).

    The interface of :class:`hermes_models.transfer.staging.Staging`, but message rows keep
    the ids they come with: the rows of a session one of whose ids is taken take
    fresh ones in :meth:`finish` (:attr:`renumbered` counts them).
    """

    def __init__(self, db: Backend, session_ids: Sequence[str], *, reserve_upto: int = 0) -> None:
        self.db = db
        self.session_ids = list(session_ids)
        self.renumbered = 0
        self._reserve_upto = reserve_upto
        self._pid: int | None = None
        self._locked = False
        self._sequence: tuple[Any, int] | None = None
        self._columns: list[str] = []

    def __enter__(self) -> ServerStaging:
        self.db.refuse_writes()
        try:
            self._pid = self._backend()
            deadline = time.monotonic() + LOCK_WAIT_SECONDS
            while not raw(postgres_sql.TRY_IMPORT_LOCK).fetchone()[0]:
                if time.monotonic() >= deadline:
                    raise _conflict(self.db)
                time.sleep(0.05)
            self._locked = True
            raw(postgres_sql.DROP_STAGED_MESSAGES)
            raw(postgres_sql.create_staged_messages(STAGED_COLUMNS, at_commit_drop=False))
            raw(postgres_sql.ADD_STAGED_ORDER)
            if self._reserve_upto:
                self._reserve(self._reserve_upto)
        except BaseException:
            self._end(failed=True)
            raise
        return self

    def _backend(self) -> int:
        return int(raw(postgres_sql.BACKEND_PID).fetchone()[0])

    def _write(self, fn: Callable[[], T]) -> T:
        """``fn`` in a write on the connection the import began on (a write run again on
        a new connection, after the old one was lost, finds no staged rows there)."""

        def run() -> T:
            self._same_connection()
            return fn()

        return _write(self.db, run)

    def _same_connection(self) -> None:
        if self._backend() != self._pid:
            raise ImportConflictError(
                f"{self.db.path}: the connection to the server was lost during the import;"
                " nothing was imported - run the import again"
            )

    def _reserve(self, upto: int) -> None:
        """Move the identity of ``messages.id`` past ``upto`` (ids the import keeps).

        Other clients take ids meanwhile: the identity is set only in a short
        transaction that holds their inserts off and reads it again, else it could
        be set below an id it just handed out (and hand that id out twice)."""
        if upto <= self._taken():
            return  # already past it: nothing to set, no lock

        def run() -> tuple[Any, int] | None:
            raw(postgres_sql.LOCK_MESSAGE_INSERTS)
            old = raw(postgres_sql.MESSAGE_SEQUENCE).fetchone()[0]
            if upto <= self._taken(old):
                return None
            raw(postgres_sql.SET_MESSAGE_SEQUENCE, [upto])
            return (old, upto)

        self._sequence = self._write(run)

    @staticmethod
    def _taken(sequence: Any = None) -> int:
        """The highest message id in use: handed out by the identity (``sequence``, read
        when not given) or stored."""
        if sequence is None:
            sequence = raw(postgres_sql.MESSAGE_SEQUENCE).fetchone()[0]
        return max(int(sequence or 0), int(raw(postgres_sql.HIGHEST_MESSAGE_ID).fetchone()[0]))

    def insert_messages(
        self,
        rows: Iterable[Sequence[Any]],
        columns: Sequence[str],
        done: Callable[[int], None] | None = None,
    ) -> int:
        """Stage message rows (``session_id`` among ``columns``), a batch a transaction."""
        if self._columns and list(columns) != self._columns:
            raise ValueError("every message row of one import has the same columns")
        self._columns = list(columns)
        rows = redact_rows(self.db, columns, rows)
        batch: list[Sequence[Any]] = []
        size, total = 0, 0

        def flush() -> None:
            nonlocal batch, size, total
            rows_now = batch
            self._write(lambda: stage_rows(columns, rows_now))
            total += len(rows_now)
            if done is not None:
                done(len(rows_now))
            batch, size = [], 0

        for row in rows:
            batch.append(row)
            size += sum(len(v) for v in row if isinstance(v, (str, bytes)))
            if len(batch) >= BATCH_ROWS or size >= BATCH_BYTES:
                flush()
        if batch:
            flush()
        return total

    def finish(
        self, sessions: Sequence[dict[str, Any]] | SessionSource, *, rename_titles: bool = True
    ) -> int:
        """Add the sessions and their staged messages in one transaction (see the module
        text); returns how many titles changed."""
        source = sessions if isinstance(sessions, SessionSource) else SessionSource.of(sessions)
        source = redact_source(self.db, source)
        changed, self.renumbered = self._write(
            lambda: _add_sessions(source, self.session_ids, self._columns, rename_titles)
        )
        self._sequence = None
        return changed

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._end(failed=exc_type is not None)

    def _end(self, *, failed: bool) -> None:
        """Drop the staging table, put the identity back after a failure, release the lock."""
        try:
            if self._pid is not None and self._backend() == self._pid:
                raw(postgres_sql.DROP_STAGED_MESSAGES)
                if failed and self._sequence is not None:
                    self._write(functools.partial(_restore_sequence, *self._sequence))
                if self._locked:
                    raw(postgres_sql.IMPORT_UNLOCK)
        except Exception as cleanup:  # the original error matters more
            logger.warning(
                "%s: could not end the import cleanly (%s); the server drops its staging"
                " table and lock with the connection",
                self.db.path,
                cleanup,
            )
        finally:
            self._locked = False


def _restore_sequence(old: Any, reserved: int) -> None:
    """Put the identity of ``messages.id`` back to ``old`` (None: none handed out) when
    it still stands at ``reserved``: no client took an id since the import set it.
    Other clients' inserts are held off while it looks and sets (a short transaction)."""
    raw(postgres_sql.LOCK_MESSAGE_INSERTS)
    if old is None:
        raw(postgres_sql.RESTORE_MESSAGE_SEQUENCE, [1, False, reserved])
    else:
        raw(postgres_sql.RESTORE_MESSAGE_SEQUENCE, [old, True, reserved])


def write_at_once_server(
    db: Backend,
    sessions: list[dict[str, Any]],
    columns: Sequence[str],
    rows: Callable[[], Sequence[Sequence[Any]]],
    *,
    rename_titles: bool,
) -> tuple[int, int]:
    """A small import in one transaction: the sessions, and the message rows staged
    and moved at once (as :meth:`ServerStaging.finish` does). Returns how many titles
    changed and how many messages took fresh ids.

    Raises:
        ImportConflictError: a large import into the store is running, or one of
            the sessions appeared meanwhile.
    """

    def run() -> tuple[int, int]:
        if not raw(postgres_sql.TRY_IMPORT_LOCK_SHARED).fetchone()[0]:
            raise _conflict(db)
        raw(postgres_sql.DROP_STAGED_MESSAGES)
        raw(postgres_sql.create_staged_messages(STAGED_COLUMNS, at_commit_drop=True))
        raw(postgres_sql.ADD_STAGED_ORDER)
        stage_rows(columns, list(redact_rows(db, columns, rows())))
        ids = [values["id"] for values in sessions]
        source = redact_source(db, SessionSource.of(sessions))
        return _add_sessions(source, ids, columns, rename_titles)

    return _write(db, run)
