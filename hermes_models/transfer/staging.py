"""Adding whole sessions while other processes keep writing: messages first, sessions last.

Writing a large import in one transaction would hold the write lock for
its whole length, longer than a gateway appending meanwhile waits for it. An
import therefore writes in steps:

1. **A lease.** A row in ``state_meta`` (key :data:`LEASE_KEY`) names the
   importing process and the sessions it adds. One import per file runs at
   a time; a lease whose process is provably gone (see
   :mod:`hermes_models.store.holders`) or that was not renewed for
   :data:`LEASE_SECONDS` is taken over, and what that import left is
   removed first.
2. **The messages**, in transactions that each hold the lock for about
   :data:`TRANSACTION_SECONDS`. Whenever the lock was held that long in
   total, the import pauses for :data:`PAUSE_SECONDS` — longer than the
   longest sleep of SQLite's busy handler (100 ms), so a writer waiting for
   the lock gets it. The messages belong to sessions that do not exist yet
   (this connection writes them with foreign keys off), so no listing,
   lookup or search shows them: search joins every hit to its session.
3. **The sessions**, in one short transaction that also computes their
   counters from the messages now stored, settles their titles with one
   query and ends the lease. Foreign keys are checked as it commits.

Readers therefore see an imported session complete or not at all. If the
import fails, its messages are removed; if its process dies, they stay out
of sight until the next import into the file removes them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..conversations import counter_totals
from ..errors import ImportConflictError
from ..models import Message, Session
from ..store import (
    Backend,
    SqliteFile,
    among,
    current,
    holder_is_gone,
    local_holder,
    sqlite_sql,
)
from .bundle import CHUNK_ROWS, chunks, existing_ids, raw

logger = logging.getLogger("hermes_models")

#: The ``state_meta`` key of the lease of the import running on a file.
LEASE_KEY = "hermes_models.import"
#: A lease not renewed for this long is taken over.
LEASE_SECONDS = 120.0
#: How long one transaction of an import holds the write lock, at most (about).
TRANSACTION_SECONDS = 0.25
#: The pause after the lock was held for :data:`TRANSACTION_SECONDS` in total.
PAUSE_SECONDS = 0.12
#: Most message rows, and most bytes of their text, held in memory at once: the
#: rows read ahead of a transaction. An import's memory does not grow past them.
BATCH_ROWS = 20_000
BATCH_BYTES = 8 * 1024 * 1024
#: Session rows held at once while a :class:`SessionSource` is added.
SESSION_ROWS = 16

_MESSAGES = Message._meta.table_name
_SESSIONS = Session._meta.table_name


def statement_sizes(count: int) -> list[int]:
    """How many rows each INSERT of ``count`` rows takes: :data:`CHUNK_ROWS`, then powers of
    two. A compiled multi-row INSERT is large (about 1 KB a row) and sqlite3 keeps up to 128
    of them per connection, so an import uses a few sizes only (at most nine)."""
    sizes = [CHUNK_ROWS] * (count // CHUNK_ROWS)
    rest = count % CHUNK_ROWS
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


def insert_rows(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> int:
    """Insert ``rows`` with multi-row INSERTs of :func:`statement_sizes` (inside a write);
    returns the rowid of the last row."""
    last, start = 0, 0
    for size in statement_sizes(len(rows)):
        chunk = rows[start : start + size]
        start += size
        cursor = raw(
            sqlite_sql.multi_row_insert(table, columns, size), [v for row in chunk for v in row]
        )
        last = int(cursor.lastrowid or 0)
    return last


class _Pacer(threading.local):
    """How long this thread's imports held the write lock since they last paused."""

    held = 0.0

    def after(self, seconds: float, *, nested: bool) -> None:
        self.held += seconds
        if self.held >= TRANSACTION_SECONDS and not nested:
            time.sleep(PAUSE_SECONDS)
            self.held = 0.0


_pacer = _Pacer()


def refuse_present(path: Any, ids: Iterable[str]) -> None:
    """Refuse an import whose sessions another writer added meanwhile."""
    present = existing_ids(_SESSIONS, sorted(set(ids)))
    if present:
        shown = ", ".join(repr(i) for i in sorted(present)[:5])
        raise ImportConflictError(
            f"{path}: session(s) {shown} appeared while they were being imported; "
            "nothing was imported — run the import again"
        )


def _alive(lease: dict[str, Any]) -> bool:
    """Whether the import holding ``lease`` may still run: its lease has not expired and
    its process is not provably gone (:func:`hermes_models.store.holders.holder_is_gone`)."""
    try:
        expires = float(lease.get("expires", 0))
    except (TypeError, ValueError):
        return False
    holder = lease.get("holder")
    return expires >= time.time() and not (isinstance(holder, str) and holder_is_gone(holder))


@dataclass(frozen=True)
class SessionSource:
    """Sessions to add without holding their rows: ``(id, title)`` of each, in order, and
    ``rows()``, which gives their rows (column -> value) each time it is called."""

    titles: Sequence[tuple[str, str | None]]
    rows: Callable[[], Iterable[dict[str, Any]]]

    @classmethod
    def of(cls, sessions: Sequence[dict[str, Any]]) -> SessionSource:
        """A source of rows already in memory."""
        return cls([(s["id"], s.get("title")) for s in sessions], lambda: sessions)


def redact_source(db: Backend, source: SessionSource) -> SessionSource:
    """``source`` with its titles redacted when ``db`` redacts what it stores
    (:mod:`hermes_models.store.redaction`): before titles are settled, so a redacted
    title is numbered as any other."""
    redactor = db.redactor
    if redactor is None:
        return source

    def title(value: Any) -> Any:
        return redactor.text(value) if isinstance(value, str) else value

    def rows() -> Iterable[dict[str, Any]]:
        for row in source.rows():
            yield {**row, "title": title(row["title"])} if "title" in row else row

    return SessionSource([(i, title(t)) for i, t in source.titles], rows)


def redact_rows(
    db: Backend, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> Iterable[Sequence[Any]]:
    """Message rows (``columns`` of them) with their text, tool calls and reasoning
    redacted when ``db`` redacts what it stores; as they are otherwise."""
    redactor = db.redactor
    return rows if redactor is None else redactor.rows(columns, rows)


def refuse_server(db: Backend) -> None:
    """Refuse to run the steps above on a PostgreSQL store: they are SQLite's (its id
    sequence, foreign keys off, ``PRAGMA``s); :mod:`hermes_models.transfer.pg_staging` is the
    server's way.

    Raises:
        NotImplementedError: ``db`` is a PostgreSQL store.
    """
    if not isinstance(db, SqliteFile):
        raise NotImplementedError(
            "staging.Staging writes into SQLite files; a PostgreSQL store imports through"
            " hermes_models.transfer.pg_staging"
        )


class Staging:
    """One import into the current database: use as a context manager (see the module text).

    ``reserve_upto``: message ids up to it are kept for this import (the id
    sequence is moved past them), so appenders running meanwhile take others.
    """

    def __init__(self, db: Backend, session_ids: Sequence[str], *, reserve_upto: int = 0) -> None:
        refuse_server(db)
        self.db = db
        self.session_ids = list(session_ids)
        self.token = uuid.uuid4().hex
        self.holder = local_holder("hermes_models-import")
        self._reserve_upto = reserve_upto
        self._foreign_keys: int | None = None

    # -- the lease --------------------------------------------------------------------------

    def _lease(self) -> dict[str, Any] | None:
        row = raw(sqlite_sql.META_VALUE, [LEASE_KEY]).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except (TypeError, ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}

    def _store_lease(self, sessions: list[str], sequence: list[Any] | None) -> None:
        value = {
            "token": self.token,
            "holder": self.holder,
            "pid": os.getpid(),
            "expires": time.time() + LEASE_SECONDS,
            "sessions": sessions,
            "sequence": sequence,
            "ranges": [],
        }
        raw(sqlite_sql.UPSERT_META, [LEASE_KEY, json.dumps(value)])

    def _renew(self, inserted: tuple[int, int] | None = None) -> dict[str, Any]:
        """Extend the lease (refusing one another import took over), noting ``inserted`` ids."""
        lease = self._lease()
        if lease is None or lease.get("token") != self.token:
            raise ImportConflictError(
                f"{self.db.path}: this import's lease was taken over by another import "
                f"(not renewed for {LEASE_SECONDS:.0f} s); nothing of it was kept"
            )
        lease["expires"] = time.time() + LEASE_SECONDS
        if inserted is not None:
            ranges = lease.setdefault("ranges", [])
            if ranges and ranges[-1][1] + 1 == inserted[0]:
                ranges[-1][1] = inserted[1]
            else:
                ranges.append(list(inserted))
        raw(sqlite_sql.SET_META_VALUE, [json.dumps(lease), LEASE_KEY])
        return lease

    def __enter__(self) -> Staging:
        def take() -> dict[str, Any] | None:
            lease = self._lease()
            if lease is not None and lease.get("token") and _alive(lease):
                raise ImportConflictError(
                    f"{self.db.path}: another import into this file is running (process "
                    f"{lease.get('pid')}); try again when it is done"
                )
            self._store_lease([], None)
            return lease

        stale = self._timed(take)
        try:
            if stale:
                logger.warning(
                    "%s: an earlier import (process %s) did not finish; removing what it left",
                    self.db.path,
                    stale.get("pid"),
                )
                self._remove(stale)
            self._timed(self._reserve_ids)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _reserve_ids(self) -> None:
        """Record the sessions, and move the id sequence past ``reserve_upto``."""
        sequence = None
        if self._reserve_upto:
            row = raw(sqlite_sql.SEQUENCE_OF, [_MESSAGES]).fetchone()
            old = None if row is None else int(row[0])
            highest = int(raw(sqlite_sql.HIGHEST_MESSAGE_ID).fetchone()[0])
            if self._reserve_upto > max(old or 0, highest):
                self._set_sequence(old, self._reserve_upto)
                sequence = [old, self._reserve_upto]
        self._store_lease(self.session_ids, sequence)

    def _set_sequence(self, old: int | None, value: int) -> None:
        if old is None:
            raw(sqlite_sql.INSERT_SEQUENCE, [_MESSAGES, value])
        else:
            raw(sqlite_sql.SET_SEQUENCE, [value, _MESSAGES])

    def reserve(self, count: int) -> int:
        """Take ``count`` fresh message ids after every id used so far; returns the one before."""

        def run() -> int:
            lease = self._renew()
            row = raw(sqlite_sql.SEQUENCE_OF, [_MESSAGES]).fetchone()
            seq = None if row is None else int(row[0])
            highest = int(raw(sqlite_sql.HIGHEST_MESSAGE_ID).fetchone()[0])
            base = max(seq or 0, highest)
            self._set_sequence(seq, base + count)
            old = lease["sequence"][0] if lease.get("sequence") else seq
            lease["sequence"] = [old, base + count]
            raw(sqlite_sql.SET_META_VALUE, [json.dumps(lease), LEASE_KEY])
            return base

        base: int = self._timed(run)
        return base

    # -- writing ----------------------------------------------------------------------------

    def _timed(self, fn: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return self.db.write(fn)
        finally:
            _pacer.after(time.monotonic() - started, nested=self.db.in_transaction())

    def _foreign_keys_off(self) -> None:
        if self._foreign_keys is None and not self.db.in_transaction():
            self._foreign_keys = int(raw(sqlite_sql.FOREIGN_KEYS).fetchone()[0])
            raw(sqlite_sql.FOREIGN_KEYS_OFF)

    def _foreign_keys_back(self) -> None:
        if self._foreign_keys is not None and not self.db.in_transaction():
            raw(sqlite_sql.set_foreign_keys(self._foreign_keys))
            self._foreign_keys = None

    def _refuse_present(self, ids: Iterable[str]) -> None:
        refuse_present(self.db.path, ids)

    def insert_messages(
        self,
        rows: Iterable[Sequence[Any]],
        columns: Sequence[str],
        done: Callable[[int], None] | None = None,
    ) -> int:
        """Insert message rows (``session_id`` among ``columns``) in paced transactions."""
        at = list(columns).index("session_id")
        rows = redact_rows(self.db, columns, rows)
        batch: list[Sequence[Any]] = []
        size, limit, total = 0, min(1000, BATCH_ROWS), 0
        self._foreign_keys_off()

        def flush() -> None:
            nonlocal batch, size, limit, total
            while batch:
                started = time.monotonic()
                written: int = self._timed(
                    functools.partial(self._insert_batch, batch, columns, at, started)
                )
                spent = max(time.monotonic() - started, 1e-3)
                fit = max(CHUNK_ROWS, int(written * TRANSACTION_SECONDS / spent))
                limit = min(BATCH_ROWS, fit)
                total += written
                if done is not None:
                    done(written)
                batch = batch[written:]
            size = 0

        for row in rows:
            batch.append(row)
            size += sum(len(v) for v in row if isinstance(v, (str, bytes)))
            if len(batch) >= limit or size >= BATCH_BYTES:
                flush()
        if batch:
            flush()
        return total

    def _insert_batch(
        self, batch: list[Sequence[Any]], columns: Sequence[str], at: int, started: float
    ) -> int:
        """Insert rows of ``batch`` from the first until half of :data:`TRANSACTION_SECONDS`
        has passed since ``started`` (the commit writes as much again); returns how many."""
        raw(sqlite_sql.DEFER_FOREIGN_KEYS_ON)
        self._refuse_present({row[at] for row in batch})
        written, last = 0, 0
        while written < len(batch) and (
            written == 0 or time.monotonic() - started < TRANSACTION_SECONDS / 2
        ):
            chunk = batch[written : written + CHUNK_ROWS]
            last = insert_rows(_MESSAGES, columns, chunk)
            written += len(chunk)
        if "id" in columns:
            where = list(columns).index("id")
            ids = [row[where] for row in batch[:written]]
            inserted = (min(ids), max(ids))
        else:
            # One writer at a time: the rows of this transaction took consecutive ids.
            inserted = (last - written + 1, last)
        self._renew(inserted)
        return written

    def _counters(self) -> dict[str, tuple[int, int]]:
        """``(message_count, tool_call_count)`` of the sessions, by the one counting rule."""
        out: dict[str, tuple[int, int]] = {}
        for chunk in chunks(self.session_ids, 5000):
            for session_id, messages, calls in raw(
                counter_totals().where(among(Message.session, chunk))
            ):
                out[session_id] = (int(messages), int(calls))
        return out

    def finish(
        self, sessions: Sequence[dict[str, Any]] | SessionSource, *, rename_titles: bool = True
    ) -> int:
        """Add the sessions (counters computed, titles settled) and end the lease.

        A title another session holds becomes the next free ``"title #N"``
        (``rename_titles``) or is left out. A :class:`SessionSource` is read
        inside the transaction, :data:`SESSION_ROWS` rows at a time. Returns how
        many titles changed.
        """
        source = sessions if isinstance(sessions, SessionSource) else SessionSource.of(sessions)
        source = redact_source(self.db, source)
        counters = self._counters()
        self._foreign_keys_back()

        def run() -> int:
            raw(sqlite_sql.DEFER_FOREIGN_KEYS_ON)
            self._renew()
            self._refuse_present(self.session_ids)
            titles, changed = title_changes(source.titles, rename_titles)
            batch: list[list[Any]] = []
            columns: list[str] = []
            for row in source.rows():
                values = dict(row)
                if values["id"] in titles:
                    values["title"] = titles[values["id"]]
                messages, calls = counters.get(values["id"], (0, 0))
                values["message_count"], values["tool_call_count"] = messages, calls
                columns = columns or list(values)
                batch.append([values[c] for c in columns])
                if len(batch) >= SESSION_ROWS:
                    insert_rows(_SESSIONS, columns, batch)
                    batch = []
            if batch:
                insert_rows(_SESSIONS, columns, batch)
            raw(sqlite_sql.DELETE_META, [LEASE_KEY])
            return changed

        changed: int = self._timed(run)
        return changed

    # -- failure ------------------------------------------------------------------------------

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._foreign_keys_back()
        if exc_type is None:
            return
        try:
            lease = self._lease()
            if lease is not None and lease.get("token") == self.token:
                self._remove(lease)
        except Exception as cleanup:  # the original error matters more
            logger.warning(
                "%s: could not remove what a failed import wrote (%s); the next import "
                "into the file will",
                self.db.path,
                cleanup,
            )

    def _remove(self, lease: dict[str, Any]) -> None:
        """Delete the messages the lease's import wrote, put the id sequence back, end the lease."""
        ids = [i for i in lease.get("sessions") or [] if isinstance(i, str)]
        ranges = [
            r
            for r in lease.get("ranges") or []
            if isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) for v in r)
        ]
        for chunk in chunks(ids, 5000):
            for low, high in ranges:
                while self._timed(functools.partial(self._delete_some, chunk, low, high)):
                    pass

        def end() -> None:
            sequence = lease.get("sequence")
            if isinstance(sequence, list) and len(sequence) == 2:
                self._restore_sequence(*sequence)
            if self._lease_token() == lease.get("token"):
                raw(sqlite_sql.DELETE_META, [LEASE_KEY])

        self._timed(end)

    def _lease_token(self) -> Any:
        lease = self._lease()
        return None if lease is None else lease.get("token")

    def _delete_some(self, session_ids: Sequence[str], low: int, high: int) -> int:
        """Delete up to 2,000 messages of those sessions with ids in ``low..high``."""
        cursor = raw(
            sqlite_sql.DELETE_STAGED_MESSAGES,
            [low, high, json.dumps(list(session_ids))],
        )
        return int(cursor.rowcount)

    def _restore_sequence(self, old: Any, reserved: Any) -> None:
        """Put the id sequence back where it was, if nothing took an id since."""
        if not isinstance(reserved, int) or not (old is None or isinstance(old, int)):
            return
        if old is None:
            raw(sqlite_sql.DELETE_UNUSED_SEQUENCE, [_MESSAGES, reserved, 0])
        else:
            raw(sqlite_sql.LOWER_UNUSED_SEQUENCE, [old, _MESSAGES, reserved, old])


#: Messages up to which an import is written in one transaction instead (tens of
#: milliseconds of lock at most): all or nothing by itself, no lease, no pause.
SMALL_IMPORT = 1000


def write_at_once(
    db: Backend,
    sessions: list[dict[str, Any]],
    columns: Sequence[str],
    rows: Callable[[], Sequence[Sequence[Any]]],
    *,
    rename_titles: bool,
) -> int | None:
    """Add sessions and their messages in one write: a small import.

    ``rows`` makes the message rows inside the write (it may read the file,
    e.g. to give taken ids new ones) and must be safe to run again. Counters
    are computed and titles settled as in :meth:`Staging.finish`. Returns how
    many titles changed, or None (nothing written) when an earlier import left
    its lease behind: :class:`Staging` then removes what it left.

    Raises:
        ImportConflictError: a large import into the file is running, or one
            of the sessions appeared meanwhile.
    """
    refuse_server(db)
    ids = [values["id"] for values in sessions]
    sessions = list(redact_source(db, SessionSource.of(sessions)).rows())

    def run() -> int | None:
        raw(sqlite_sql.DEFER_FOREIGN_KEYS_ON)
        row = raw(sqlite_sql.META_VALUE, [LEASE_KEY]).fetchone()
        try:
            lease = json.loads(row[0]) if row is not None else None
        except (TypeError, ValueError, RecursionError):
            lease = None
        if isinstance(lease, dict) and lease.get("token") and _alive(lease):
            raise ImportConflictError(
                f"{db.path}: another import into this file is running (process "
                f"{lease.get('pid')}); try again when it is done"
            )
        if row is not None:
            return None  # an import left work behind: the staged path cleans it up
        refuse_present(db.path, ids)
        settled, changed = _settle_titles(sessions, rename_titles)
        for values in settled:
            values["message_count"] = values["tool_call_count"] = 0
        names = list(settled[0])
        insert_rows(_SESSIONS, names, [[values[c] for c in names] for values in settled])
        insert_rows(_MESSAGES, columns, list(redact_rows(db, columns, rows())))
        for chunk in chunks(ids, 5000):
            totals = raw(counter_totals().where(among(Message.session, chunk))).fetchall()
            for session_id, messages, calls in totals:
                raw(sqlite_sql.SET_SESSION_COUNTERS, [messages, calls, session_id])
        return changed

    started = time.monotonic()
    try:
        changed: int | None = db.write(run)
    finally:
        _pacer.after(time.monotonic() - started, nested=db.in_transaction())
    return changed


def title_changes(
    titles: Sequence[tuple[str, str | None]], rename: bool
) -> tuple[dict[str, str | None], int]:
    """The new title (or None) of each session whose title another session holds, by id,
    found with one query; and how many changed."""
    wanted = [title for _, title in titles if title is not None]
    if not wanted:
        return {}, 0
    return settled_titles(titles, current().titles_beginning(wanted), rename)


def settled_titles(
    titles: Sequence[tuple[str, str | None]], taken: set[str], rename: bool
) -> tuple[dict[str, str | None], int]:
    """:func:`title_changes` once the titles held (``taken``: the wanted ones and their
    ``"#N"`` variants that other sessions have) are known."""
    taken = set(taken)
    used = {title for _, title in titles if title is not None}
    out: dict[str, str | None] = {}
    for session_id, title in titles:
        if title is not None and title in taken:
            if rename:
                number = 2
                while f"{title} #{number}" in taken or f"{title} #{number}" in used:
                    number += 1
                out[session_id] = f"{title} #{number}"
                taken.add(f"{title} #{number}")
            else:
                out[session_id] = None
    return out, len(out)


def _settle_titles(
    sessions: list[dict[str, Any]], rename: bool
) -> tuple[list[dict[str, Any]], int]:
    """The sessions with titles other sessions hold renamed (or dropped); how many changed."""
    changes, changed = title_changes([(s["id"], s.get("title")) for s in sessions], rename)
    out = []
    for session in sessions:
        values = dict(session)
        if values["id"] in changes:
            values["title"] = changes[values["id"]]
        out.append(values)
    return out, changed
