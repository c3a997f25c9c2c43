"""The write path: how a write waits for the lock, and how the ``-wal`` file stays short.

Writes run in ``BEGIN IMMEDIATE`` transactions (:func:`run_immediate`, what
:meth:`HermesDatabase.write <hermes_models.store.db.HermesDatabase.write>` calls).
When another writer holds the lock, the transaction is rolled back and the
whole callback runs again after a random 20-150 ms pause (random pauses
spread competing writers out instead of waking them in step), until the
write's patience (:data:`WRITE_PATIENCE_S`) has run out.

Every 50 successful writes of a handle a PASSIVE checkpoint copies the WAL
into the database; when the ``-wal`` file has grown past
:data:`WAL_TRUNCATE_ABOVE_BYTES` a write also tries a short TRUNCATE
checkpoint, which empties it unless a reader still needs it
(:class:`Checkpoints`).

Each setting is read when it is used (the busy timeout when a connection
opens), so a process can change it here.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import peewee

from ..driver import sqlite3
from ..errors import WriteConflictError, is_lock_error, is_read_only_error
from . import sqlite_sql
from .files import read_only_file_error

if TYPE_CHECKING:  # the handle calls this module: it is only a type here
    from typing import Any, TypeVar

    T = TypeVar("T")

    from .backend import SqliteFile

logger = logging.getLogger("hermes_models")


#: How long a statement waits for another connection's lock (SQLite's busy timeout).
BUSY_TIMEOUT_S = 1.0
#: How long :meth:`HermesDatabase.write` (and :func:`retry_locked`) keeps retrying a
#: locked-out write before raising :class:`WriteConflictError`: a time, not a count of
#: attempts, so the patience does not shrink or grow with how long each attempt waited.
#: Hermes' later releases give ordinary writes 20 s and transcript writes 60 s; nearly
#: every write here is a transcript write (a message), and with 16 writers beside 4
#: searching processes on a 2-core machine single writes waited up to 24 s.
WRITE_PATIENCE_S = 60.0
WRITE_RETRY_MIN_S = 0.020
WRITE_RETRY_MAX_S = 0.150
CHECKPOINT_EVERY_N_WRITES = 50
#: After a write, a ``-wal`` file larger than this is emptied (``wal_checkpoint(TRUNCATE)``)
#: when no reader keeps it; PASSIVE checkpoints alone never shrink the file.
WAL_TRUNCATE_ABOVE_BYTES = 4 * 1024 * 1024
#: Larger than this, the TRUNCATE is tried even while readers keep old frames: it then
#: waits for them, holding the other writers up: :data:`WAL_TRUNCATE_WAIT_S` times the
#: file's size over this one, at most the 1 s busy timeout (at 4x this size).
WAL_FORCE_TRUNCATE_ABOVE_BYTES = 16 * 1024 * 1024
#: How long that TRUNCATE may wait for readers to leave the WAL. It holds the write lock
#: meanwhile, so this is also how long it can hold other writers up.
WAL_TRUNCATE_WAIT_S = 0.25
#: The least time between two such TRUNCATE attempts of one handle (a random 0.5-1.5x of it).
WAL_TRUNCATE_EVERY_S = 1.0


def _jitter() -> None:

    time.sleep(random.uniform(WRITE_RETRY_MIN_S, WRITE_RETRY_MAX_S))


def retry_locked(fn: Callable[[], T], patience: float | None = None) -> T:
    """Run ``fn``, sleeping a random 20-150 ms and retrying while it is locked out.

    Retries until ``patience`` seconds (default :data:`WRITE_PATIENCE_S`) have
    passed since the first try; the lock error of the last try is then raised.
    """
    give_up_at = time.monotonic() + (WRITE_PATIENCE_S if patience is None else patience)
    while True:
        try:
            return fn()
        except (sqlite3.OperationalError, peewee.OperationalError) as exc:
            if not is_lock_error(exc) or time.monotonic() >= give_up_at:
                raise
        _jitter()


class _Immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` on this thread's connection.

    A lean stand-in for ``atomic('IMMEDIATE')`` on the write path: it sits on
    peewee's transaction stack, so ``atomic()`` blocks inside it become
    savepoints as usual.
    """

    __slots__ = ("conn", "db")

    def __init__(self, db: SqliteFile) -> None:
        self.db = db
        self.conn: sqlite3.Connection = db.connection()

    def __enter__(self) -> _Immediate:
        self.conn.execute(sqlite_sql.BEGIN_IMMEDIATE)
        self.db.push_transaction(self)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        db: Any = self.db  # peewee's commit-callback hooks are not in its stubs
        db.pop_transaction()
        if exc_type is not None:
            self.conn.rollback()
            db._clear_commit_callbacks()
            return
        try:
            self.conn.execute(sqlite_sql.COMMIT)
        except BaseException:
            self.conn.rollback()
            db._clear_commit_callbacks()
            raise
        db._run_commit_callbacks()


def run_immediate(db: SqliteFile, fn: Callable[[], T], before_commit: Callable[[], None]) -> T:
    """Run ``fn``, then ``before_commit``, in one ``BEGIN IMMEDIATE`` transaction on
    ``db``, retrying the whole while another writer holds the lock.

    On a locked/busy error the transaction is rolled back, the thread sleeps
    20-150 ms and ``fn`` runs again, until :data:`WRITE_PATIENCE_S` have passed
    since the first try; ``fn`` must be safe to re-run. Outside any transaction
    of ``db`` only: :meth:`HermesDatabase.write` runs ``fn`` in a savepoint inside one.

    Raises:
        ReadOnlyDatabaseError: SQLite cannot write the file or its folder.
        WriteConflictError: still locked out when the patience ran out (the
            message says how long it waited and how many attempts it made).
    """
    started = time.monotonic()
    give_up_at = started + WRITE_PATIENCE_S
    for attempt in itertools.count(1):
        try:
            with _Immediate(db):
                result = fn()
                before_commit()
        except (sqlite3.OperationalError, peewee.OperationalError) as exc:
            if is_read_only_error(exc):
                raise read_only_file_error(db.path) from exc
            if not is_lock_error(exc):
                raise
            now = time.monotonic()
            if now >= give_up_at:
                raise WriteConflictError(
                    f"database is locked: {db.path} stayed locked by other writers "
                    f"for {now - started:.1f} s ({attempt} attempts; patience "
                    f"{WRITE_PATIENCE_S:g} s)"
                ) from exc
            logger.debug("write locked out (attempt %d): %s", attempt, exc)
            _jitter()
            continue
        return result
    raise AssertionError("unreachable")  # pragma: no cover


def checkpoint(db: SqliteFile, mode: str = "PASSIVE") -> None:
    """Run ``PRAGMA wal_checkpoint(mode)`` on ``db``, ignoring any error."""
    if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
        raise ValueError(f"mode: unknown checkpoint mode {mode!r}")
    if db.read_only or db.journal != "wal" or (db.shape and db.shape.newer):
        return
    try:
        db.execute_sql(sqlite_sql.wal_checkpoint(mode))
    except (sqlite3.Error, peewee.PeeweeException) as exc:
        logger.debug("wal_checkpoint(%s) failed: %s", mode, exc)


#: A loop of short writes made beside other writers (an index merged in steps,
#: retention's batches) pauses for :data:`YIELD_PAUSE_S` each time it has held the
#: write lock for :data:`YIELD_AFTER_S` in all: longer than the longest sleep of
#: SQLite's busy handler (100 ms), so a writer waiting for the lock gets it between
#: two steps (back to back, the next step would take it again first).
YIELD_AFTER_S = 0.25
YIELD_PAUSE_S = 0.12


class Pacer:
    """Counts how long a loop of writes held the lock, and pauses it (see
    :data:`YIELD_AFTER_S`)."""

    __slots__ = ("after_s", "db", "held")

    def __init__(self, after_s: float = YIELD_AFTER_S, db: SqliteFile | None = None) -> None:
        #: The lock held this long in all, the loop pauses (0: after every write).
        self.after_s = after_s
        #: A file whose WAL each pause checkpoints (PASSIVE: without the write lock),
        #: so the frames the loop wrote are not left for another process's commit to
        #: copy (SQLite's automatic checkpoint runs in whichever commit passes it).
        self.db = db
        self.held = 0.0

    def run(self, write: Callable[[], T]) -> T:
        """``write()``, timed; a pause after it when the loop held the lock long enough."""
        started = time.monotonic()
        try:
            return write()
        finally:
            self.held += time.monotonic() - started
            if self.held >= self.after_s:
                paused = time.monotonic()
                if self.db is not None:
                    checkpoint(self.db, "PASSIVE")
                time.sleep(max(0.0, YIELD_PAUSE_S - (time.monotonic() - paused)))
                self.held = 0.0


#: How long the checkpoint that ends an erase keeps trying while readers still read
#: older frames of the WAL (or another checkpoint runs) before it reports them as
#: blocking it; each try waits up to :data:`ERASE_CHECKPOINT_TRY_S` (holding the
#: write lock meanwhile, so other writers wait at most that long).
ERASE_CHECKPOINT_WAIT_S = 5.0
ERASE_CHECKPOINT_TRY_S = 0.2


def truncate_wal(db: SqliteFile, wait_s: float = ERASE_CHECKPOINT_WAIT_S) -> tuple[bool, bool]:
    """Checkpoint every frame of the WAL into the file and empty the ``-wal`` file
    (``wal_checkpoint(TRUNCATE)``), trying for at most about ``wait_s`` while readers
    still read older frames; returns ``(truncated, blocked)``.

    ``truncated``: every frame written before the call is in the file and the ``-wal``
    file was emptied (others may have written new frames since). ``blocked``: a reader
    or another checkpoint kept it from finishing; the WAL then still holds frames
    until the next checkpoint that finishes. A file not in WAL mode has no WAL to
    empty: ``(False, False)``. Never raises for a lock.
    """
    if db.read_only or db.journal != "wal":
        return False, False
    conn = db.connection()
    give_up_at = time.monotonic() + wait_s
    conn.execute(sqlite_sql.set_busy_timeout(int(ERASE_CHECKPOINT_TRY_S * 1000)))
    try:
        # Most frames first without the write lock (writers go on meanwhile), so the
        # TRUNCATE that follows, which holds it, has little left to copy.
        try:
            conn.execute(sqlite_sql.WAL_CHECKPOINT_PASSIVE).fetchone()
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
                raise
        while True:
            try:
                row = conn.execute(sqlite_sql.WAL_CHECKPOINT_TRUNCATE).fetchone()
                if row is not None and int(row[0]) == 0:
                    return True, False
            except sqlite3.OperationalError as exc:
                if not is_lock_error(exc):
                    raise
            if time.monotonic() >= give_up_at:
                return False, True
            _jitter()
    finally:
        conn.execute(sqlite_sql.set_busy_timeout(int(BUSY_TIMEOUT_S * 1000)))


class Checkpoints:
    """When one handle checkpoints its file after a write, and empties its ``-wal`` file."""

    __slots__ = ("next_truncate", "wal_path", "writes")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.wal_path = f"{path}-wal"
        self.writes = itertools.count(1)  # next() is atomic under the GIL
        #: The earliest time of the next TRUNCATE attempt (``time.monotonic()``).
        self.next_truncate = 0.0

    def after_write(self, db: SqliteFile) -> None:
        """A PASSIVE checkpoint every :data:`CHECKPOINT_EVERY_N_WRITES` writes, then
        :meth:`bound_wal`."""
        if next(self.writes) % CHECKPOINT_EVERY_N_WRITES == 0:
            db.checkpoint("PASSIVE")
        self.bound_wal(db)

    def bound_wal(self, db: SqliteFile) -> bool:
        """Empty the ``-wal`` file when it is larger than :data:`WAL_TRUNCATE_ABOVE_BYTES`;
        True when it was emptied.

        Called after every write; costs one ``stat`` while the file is small. A
        PASSIVE checkpoint first copies what it can without the write lock. When it
        copied every frame (no reader needs an older snapshot), or the file is over
        :data:`WAL_FORCE_TRUNCATE_ABOVE_BYTES`, ``wal_checkpoint(TRUNCATE)`` runs
        with a busy timeout of :data:`WAL_TRUNCATE_WAIT_S` (past the forcing size,
        that times the size over it, at most :data:`BUSY_TIMEOUT_S`): it holds the
        other writers up for at most about that long, and gives up while a reader
        keeps the WAL longer. One handle tries at most once per
        :data:`WAL_TRUNCATE_EVERY_S` (a random 0.5-1.5x of it). Errors are logged
        at DEBUG and never raised: the write has committed.
        """
        if db.read_only or db.journal != "wal" or (db.shape and db.shape.newer):
            return False
        if db.in_transaction():
            return False
        try:
            size = os.stat(self.wal_path).st_size
        except OSError:
            return False
        if size <= WAL_TRUNCATE_ABOVE_BYTES:
            return False
        now = time.monotonic()
        if now < self.next_truncate:
            return False

        self.next_truncate = now + WAL_TRUNCATE_EVERY_S * random.uniform(0.5, 1.5)
        return _truncate_wal(db.connection(), size)


def _truncate_wal(conn: sqlite3.Connection, size: int) -> bool:
    """A PASSIVE checkpoint, then a TRUNCATE one when readers allow (see
    :meth:`Checkpoints.bound_wal`); True when the ``-wal`` file was emptied."""
    try:
        busy, frames, copied = conn.execute(sqlite_sql.WAL_CHECKPOINT_PASSIVE).fetchone()
        if (busy or copied < frames) and size <= WAL_FORCE_TRUNCATE_ABOVE_BYTES:
            # A reader still needs frames from before the last commits: TRUNCATE
            # would hold the writers up waiting for it. Try again later.
            logger.debug(
                "WAL of %d bytes left: readers keep %d of %d frames",
                size,
                frames - copied,
                frames,
            )
            return False
        # Past the forcing size the wait grows with the file, up to the busy
        # timeout of a write (what Hermes' own TRUNCATE waits): a bigger WAL is
        # worth holding the writers up a little longer.
        wait = WAL_TRUNCATE_WAIT_S * max(1.0, size / max(1, WAL_FORCE_TRUNCATE_ABOVE_BYTES))
        wait = min(wait, max(BUSY_TIMEOUT_S, WAL_TRUNCATE_WAIT_S))
        previous = int(conn.execute(sqlite_sql.BUSY_TIMEOUT).fetchone()[0])
        conn.execute(sqlite_sql.set_busy_timeout(int(wait * 1000)))
        try:
            busy, frames, copied = conn.execute(sqlite_sql.WAL_CHECKPOINT_TRUNCATE).fetchone()
        finally:
            conn.execute(sqlite_sql.set_busy_timeout(previous))
    except sqlite3.Error as exc:
        logger.debug("wal_checkpoint(TRUNCATE) of a %d-byte WAL failed: %s", size, exc)
        return False
    if busy:
        logger.debug(
            "WAL of %d bytes not truncated: readers kept it (%d of %d frames copied)",
            size,
            copied,
            frames,
        )
        return False
    logger.debug("WAL of %d bytes truncated", size)
    return True
