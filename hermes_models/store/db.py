"""The database handle: one SQLite file shared by several processes, and how each of
its connections is set up.

Several processes (a gateway, CLIs, worker agents) share one SQLite file.
Each connection is opened with the SQLite module :mod:`hermes_models.driver`
chose, turns foreign keys on, waits at most one second on a busy lock, and
follows the journal policy of :mod:`hermes_models.store.journal` (WAL, so readers
never wait for a writer, where the SQLite is safe; DELETE where WAL cannot
work). Why the last open failed is kept for Hermes' module helpers
(:func:`format_db_unavailable`).

What is checked about the file before it is opened lives in
:mod:`hermes_models.store.files`; how a write waits for the lock and when the WAL
is checkpointed, in :mod:`hermes_models.store.writes` (:meth:`HermesDatabase.write`
runs it); which handle the models use, in :mod:`hermes_models.store.binding`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import peewee

from .. import driver
from ..driver import sqlite3
from ..errors import ReadOnlyDatabaseError, is_lock_error, is_read_only_error
from . import cipher, content, grams, journal, sqlite_sql, writes
from .binding import using
from .dialect import SqliteDialect
from .files import check_ownership, newer_schema_error, refuse_newer_schema, sqlite_uri
from .fts import gram_index_ready, present_indexes
from .journal import WAL_INCOMPAT_MARKERS, JournalSettings
from .redaction import Redactor
from .shape import FileShape
from .writes import WRITE_PATIENCE_S  # named here by earlier docs: still importable from here

if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

logger = logging.getLogger("hermes_models")
# peewee logs every statement it runs at DEBUG here; :meth:`HermesDatabase.run` keeps that.
_PEEWEE_LOG = logging.getLogger("peewee")
_DEBUG = logging.DEBUG


def _share_peewee_adapters() -> None:
    """Register on the package's SQLite module the adapters peewee registered on the
    one it chose (dates, times, decimals), when the two differ: values are stored
    alike whichever module runs."""
    chosen_by_peewee: Any = getattr(peewee, "sqlite3", None)
    if chosen_by_peewee is None or chosen_by_peewee is sqlite3:
        return
    for (kind, protocol), adapt in list(chosen_by_peewee.adapters.items()):
        if protocol is chosen_by_peewee.PrepareProtocol:
            sqlite3.register_adapter(kind, adapt)
    for name, convert in list(chosen_by_peewee.converters.items()):
        sqlite3.register_converter(name, convert)


_share_peewee_adapters()


#: First words of the statements that write.
_WRITING = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "VACUUM", "REINDEX")


class LenientCursor(sqlite3.Cursor):
    """A cursor that, meeting text that is not UTF-8 (another program's truncated write),
    switches its database to reading text with U+FFFD replacement characters
    (:meth:`HermesDatabase.read_leniently`, which logs the damaged rows) and reads on,
    losing no row: ``fetchone`` reads the same row again where sqlite3 keeps it (the
    standard library's module); where the module read a row ahead and lost it
    (pysqlite3: :func:`hermes_models.driver.keeps_failed_row`), and for ``fetchall``,
    the query runs again and the rows already handed over are passed over (the same
    rows: an export reads in one transaction). So a stream of rows - a peewee query,
    an export - never stops at such a value."""

    db: HermesDatabase | None = None
    _ran: tuple[str, Any] | None = None
    #: Rows ``fetchone`` handed over since the statement ran.
    _returned = 0

    def execute(self, sql: str, parameters: Any = (), /) -> LenientCursor:
        self._ran, self._returned = (sql, parameters), 0
        super().execute(sql, parameters)
        return self

    def _lenient(self, exc: sqlite3.OperationalError) -> bool:
        """True when ``exc`` was text that is not UTF-8 and reading it so is now on."""
        if not content.is_decode_error(exc) or self.db is None:
            return False
        if self.connection.text_factory is content.lenient_text:
            return False  # read so already: another fault
        self.db.read_leniently()
        return True

    def _reads(self) -> bool:
        ran = self._ran
        return ran is not None and ran[0].lstrip()[:6].upper() in ("SELECT", "WITH")

    def _run_again(self) -> None:
        """Run the statement again and pass over the rows ``fetchone`` handed over."""
        assert self._ran is not None
        super().execute(*self._ran)
        for _ in range(self._returned):
            super().fetchone()

    def fetchone(self) -> Any:
        while True:
            try:
                row = super().fetchone()
            except sqlite3.OperationalError as exc:
                if not self._lenient(exc):
                    raise
                if not driver.keeps_failed_row():
                    if not self._reads():
                        raise
                    self._run_again()
                continue
            if row is not None:
                self._returned += 1
            return row

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.OperationalError as exc:
            if not self._reads() or not self._lenient(exc):
                raise
            self._run_again()
            return super().fetchall()


class NewerFileConnection:
    """``SessionDB._conn`` on a file newer than v16: the connection, except that raw SQL
    that writes raises :class:`SchemaTooNewError`, as the package's own writes do,
    before SQLite prepares it (by its first word), or when SQLite refuses it (any
    other form: the file is open read-only). Everything else is the connection's."""

    def __init__(self, conn: sqlite3.Connection, file: str, shape: FileShape) -> None:
        self._conn = conn
        self._refusal = newer_schema_error(file, shape, "writing")

    def _refuse(self, sql: object) -> None:
        if isinstance(sql, str) and sql.lstrip()[:7].upper().startswith(_WRITING):
            raise self._refusal

    def _run(self, method: Callable[..., Any], sql: object, *args: Any) -> Any:
        self._refuse(sql)
        try:
            return method(sql, *args)
        except sqlite3.OperationalError as exc:
            if is_read_only_error(exc):
                raise self._refusal from None
            raise

    def execute(self, sql: str, *args: Any) -> Any:
        return self._run(self._conn.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._run(self._conn.executemany, sql, *args)

    def executescript(self, script: str) -> Any:
        return self._run(self._conn.executescript, script)

    def cursor(self, *args: Any) -> Any:
        return _NewerFileCursor(self._conn.cursor(*args), self)

    def __enter__(self) -> NewerFileConnection:
        self._conn.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._conn.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _NewerFileCursor:
    """A cursor of :class:`NewerFileConnection`: its writes are refused the same way."""

    def __init__(self, cursor: sqlite3.Cursor, owner: NewerFileConnection) -> None:
        self._cursor = cursor
        self._owner = owner

    def execute(self, sql: str, *args: Any) -> Any:
        self._owner._run(self._cursor.execute, sql, *args)
        return self

    def executemany(self, sql: str, *args: Any) -> Any:
        self._owner._run(self._cursor.executemany, sql, *args)
        return self

    def executescript(self, script: str) -> Any:
        self._owner._run(self._cursor.executescript, script)
        return self

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class HermesDatabase(SqliteDialect, peewee.SqliteDatabase):
    """An SQLite file shared by several processes, set up the Hermes way.

    Use :func:`hermes_models.connect` rather than building one directly: it migrates the
    file first and keeps one handle per file per process.
    """

    #: The SQL dialect (:mod:`hermes_models.store.dialect`).
    dialect = "sqlite"
    #: Whether connections come from a pool that :meth:`release` hands them back to.
    pooled = False
    #: The SQLite every connection runs (peewee asks for features by it).
    server_version = driver.SQLITE_VERSION_INFO

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        params: dict[str, str] | None = None,
        journal_settings: JournalSettings | None = None,
    ) -> None:
        #: The file, an absolute path as text (:func:`hermes_models.store.files.resolve_file`).
        self.file = path = os.fspath(path)
        self._path: Path | None = None
        self.read_only = read_only
        #: The ``file:`` URI parameters a read-only handle opens the file with (``mode=ro``,
        #: or an immutable snapshot: :func:`~hermes_models.store.files.read_only_params`);
        #: None for a handle that writes.
        self.uri_params: dict[str, str] | None = (
            dict(params or {"mode": "ro"}) if read_only else None
        )
        #: The journal mode the file was in when this thread's connection opened.
        self.journal: str | None = None
        #: The journal settings every connection follows (:mod:`hermes_models.store.journal`).
        self.journal_settings = journal_settings or JournalSettings()
        #: The redaction applied to what this handle writes (None: off; set by connect()).
        self.redactor: Redactor | None = None
        #: The structure of the file (set by :func:`hermes_models.connect`; None until then).
        self.shape: FileShape | None = None
        #: Which full-text tables this SQLite build runs (set on first use).
        self.search_support: dict[str, bool] | None = None
        #: True when this handle's connections keep the gram index in step
        #: (:mod:`hermes_models.store.grams`; known once a connection has written).
        self.grams = False
        #: Counts writes that changed messages: one in
        #: :data:`hermes_models.store.grams.CATCH_UP_EVERY` also refreshes ids others changed.
        self._gram_writes = itertools.count()
        #: When this handle checkpoints after a write
        #: (:class:`hermes_models.store.writes.Checkpoints`).
        self.checkpoints = writes.Checkpoints(path)
        self._thread_tokens = threading.local()
        if self.uri_params is not None:
            uri = sqlite_uri(path, **self.uri_params)
            super().__init__(uri, timeout=writes.BUSY_TIMEOUT_S, uri=True)
        else:
            super().__init__(path, timeout=writes.BUSY_TIMEOUT_S)

    @property
    def path(self) -> Path:
        """The file, as a :class:`~pathlib.Path` (:attr:`file` is the same as text).
        Made on first use: opening a store needs no :mod:`pathlib`."""
        if self._path is None:
            self._path = Path(self.file)
        return self._path

    def _connect(self) -> sqlite3.Connection:
        # The module driver chose, which need not be the one peewee chose.
        handle: Any = self  # peewee's attributes, untyped
        conn = cipher.open_file(
            self.database,
            timeout=handle._timeout,
            isolation_level=None,
            factory=driver.Connection,
            **self.connect_params,
        )
        try:
            self._add_conn_hooks(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "not a database" in str(exc):  # encrypted (no key opens it), or not SQLite
                raise cipher.not_a_database(self.file) from exc
            raise
        except Exception:
            conn.close()
            raise
        # peewee keeps one connection per thread. A thread that ends without
        # closing its own would leave it to the garbage collector (Python 3.13
        # warns "unclosed database"), so it is closed when the thread's state
        # goes away; replacing the token on a reconnect closes the previous one.
        token = _ThreadToken()
        finalizer = weakref.finalize(token, _close_owned, conn, os.getpid())
        finalizer.atexit = False
        self._thread_tokens.token = token
        return conn

    def _add_conn_hooks(self, conn: sqlite3.Connection) -> None:
        # SQLite opens the -wal and -shm files at the first statement: check them first.
        check_ownership(self.file, read_only=self.read_only)
        super()._add_conn_hooks(conn)  # type: ignore[misc]
        # Raw SQL through the DB-API connection gets rows addressable by
        # column name, as Hermes' own connection gives them; peewee's
        # cursors (see cursor()) keep returning plain tuples.
        conn.row_factory = sqlite3.Row
        if self.file in content.LENIENT_FILES:  # it holds text that is not UTF-8
            conn.text_factory = content.lenient_text
        conn.execute(sqlite_sql.FOREIGN_KEYS_ON)
        conn.execute(sqlite_sql.set_busy_timeout(int(writes.BUSY_TIMEOUT_S * 1000)))
        journal.set_connection_defaults(conn)
        if self.read_only:
            self.journal = journal.journal_mode(conn)
            if self.journal_settings.synchronous is not None:
                conn.execute(sqlite_sql.set_synchronous(self.journal_settings.synchronous))
        else:
            self.journal = journal.apply(
                conn, self.file, self.journal_settings, vulnerable=driver.WAL_RESET_BUG
            )

    def execute_sql(self, sql: str, params: Any = None, commit: Any = None) -> Any:
        """Run ``sql``; on a file newer than v16 a write raises :class:`SchemaTooNewError`
        (whichever path it took), before SQLite prepares it: preparing a write compiles
        the file's triggers, and a newer Hermes' may need a tokenizer plain SQLite lacks."""
        if self.shape is not None and self.shape.newer:
            if sql.lstrip()[:7].upper().startswith(_WRITING):
                raise newer_schema_error(self.file, self.shape, "writing")
        try:
            return super().execute_sql(sql, params)
        except (sqlite3.OperationalError, peewee.OperationalError) as exc:
            cause = getattr(exc, "orig", exc)
            if self.shape is not None and self.shape.newer and is_read_only_error(cause):
                raise newer_schema_error(self.file, self.shape, "writing") from exc
            raise

    def run(self, sql: str, params: Any) -> sqlite3.Cursor:
        """:meth:`execute_sql` for the statements rendered once (:class:`Prepared`),
        without peewee's per-call work when it has nothing to do.

        It skips peewee's generic path (the query log, the exception wrapper as a
        context manager, the connection checks) where it can. When this thread's connection is
        open, no query
        hook is registered, peewee's query log is off and the file is not newer
        than v16, the statement runs on the connection directly and an error is
        turned into the same peewee exception :meth:`execute_sql` raises.
        Otherwise it is :meth:`execute_sql`.
        """
        conn: sqlite3.Connection | None = self._state.conn  # type: ignore[attr-defined]
        if (
            conn is None  # closed (peewee drops it then)
            or self.query_hooks
            or (self.shape is not None and self.shape.newer)
            or _PEEWEE_LOG.isEnabledFor(_DEBUG)
        ):
            return cast("sqlite3.Cursor", self.execute_sql(sql, params))
        cursor = conn.cursor()
        cursor.row_factory = None
        try:
            cursor.execute(sql, params)
        except Exception:
            with peewee.__exception_wrapper__:  # type: ignore[attr-defined]
                raise
        return cursor

    def cursor(self, named_cursor: Any = None) -> sqlite3.Cursor:
        """A cursor of this thread's connection that returns rows as tuples and reads
        text another program stored that is not UTF-8 (:class:`LenientCursor`)."""
        conn = cast("sqlite3.Connection", self.connection())
        cursor = conn.cursor(LenientCursor)
        cursor.row_factory = None
        cursor.db = self
        return cursor

    def write(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction, retrying while locked.

        On a locked/busy error the transaction is rolled back, the thread
        sleeps 20-150 ms and ``fn`` runs again, until
        :data:`~hermes_models.store.writes.WRITE_PATIENCE_S` (60 s) have passed since the
        first try; ``fn`` must be safe to re-run.
        Inside an open transaction ``fn`` runs in a savepoint and the outermost
        write does the retrying. After the commit, :meth:`bound_wal` keeps the
        ``-wal`` file short.

        Raises:
            SchemaTooNewError: the file is newer than the v16 schema this package
                writes (a :class:`ReadOnlyDatabaseError` too).
            ReadOnlyDatabaseError: the handle was opened read-only, or SQLite cannot
                write the file or its folder.
            WriteConflictError: still locked out when the patience ran out (the
                message says how long it waited and how many attempts it made).
        """
        self.refuse_writes()
        self.ensure_grams()
        if self.in_transaction():
            with self.atomic():
                return fn()
        result = writes.run_immediate(self, fn, self._before_commit)
        self.checkpoints.after_write(self)
        return result

    def write_deletion(self, fn: Callable[[], T]) -> T:
        """:meth:`write` (on a file, one writer at a time keeps every rule)."""
        return self.write(fn)

    def refuse_writes(self) -> None:
        """Raise what :meth:`write` raises before it starts when this handle cannot write.

        Raises:
            SchemaTooNewError: the file is newer than the schema this package writes.
            ReadOnlyDatabaseError: the handle was opened read-only.
        """
        refuse_newer_schema(self.file, self.shape)
        if self.read_only:
            raise ReadOnlyDatabaseError(f"{self.file} was opened read-only; writes are refused")

    def ensure_grams(self) -> bool:
        """Install the gram index's TEMP triggers on this thread's connection unless it
        has them; True when the file has the index and this build can keep it."""
        # Installed at a connection's first write, not when it opens: opening stays
        # short, and rows written without the triggers are listed as changed by the
        # file's own triggers all the same (a later write or optimize indexes them).
        conn = cast("sqlite3.Connection", self.connection())
        token: _ThreadToken = self._thread_tokens.token
        if token.grams is None:
            try:
                token.grams = self.grams = grams.install(conn, token.noted.add)
            except (sqlite3.OperationalError, peewee.OperationalError) as exc:
                if not is_lock_error(exc):
                    raise
                # Another process holds the file (creating it, say): this write goes
                # on without the triggers (its rows are caught up later); the next
                # write tries again.
                logger.debug("gram index triggers not installed yet: %s", exc)
                return False
        return bool(token.grams)

    def install_once(self, name: str, install: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``install`` on this thread's connection unless it ran there already (under
        ``name``): for the SQL functions a module defines on first use.

        Defining or removing a function makes SQLite expire every statement the
        connection has prepared, so a function defined for each call (and removed
        after it) would have every later statement prepared again: a search paid
        0.8 ms for that. Define it once, and let it call what the moment needs.
        """
        self.connection()
        token: _ThreadToken = self._thread_tokens.token
        if name not in token.installed:
            install(cast("sqlite3.Connection", self.connection()))
            token.installed.add(name)

    def while_unchanged(self, key: Hashable, compute: Callable[[], T]) -> T:
        """What ``compute()`` gave for ``key`` on this thread's connection, while nothing
        has been committed to the file since, by any connection or process (SQLite's
        ``data_version`` and this connection's count of changes are as they were then);
        else ``compute()`` now, kept.

        For the counts that choose how a search runs: the same search again, or its
        next page, does not count again. At most :data:`MEMO_ENTRIES` values are kept
        a connection; any commit to the file forgets them all. Inside a transaction
        (whose changes may yet be rolled back) nothing is kept or reused. A
        ``compute`` that asks for another kept value does not read the file's state
        again: it was read just before.
        """
        conn = cast("sqlite3.Connection", self.connection())
        if conn.in_transaction:
            # What it reads may include changes that are rolled back later, which the
            # change count would not tell: inside a transaction nothing is kept.
            return compute()
        token: _ThreadToken = self._thread_tokens.token
        if not token.computing:
            _look_at_the_file(conn, token)
        if key in token.memo:
            return cast("T", token.memo[key])
        token.computing += 1
        try:
            value = compute()
        finally:
            token.computing -= 1
        if len(token.memo) >= MEMO_ENTRIES:
            token.memo.clear()
        token.memo[key] = value
        return value

    def _reading_once(self) -> _ReadingOnce:
        """A block (``with``) of reads in which :meth:`while_unchanged` looks at the
        file's state once, on entering: one search's choices, read as of its start.

        For the package's searches only: a value kept before the block is reused
        inside it even when another process commits during the block, so a block
        held around more than one search could miss rows written meanwhile.
        """
        return _ReadingOnce(self)

    def forget_kept(self) -> None:
        """Forget what :meth:`while_unchanged` keeps on this thread's connection (the next
        search counts again, as the first search of a query does)."""
        self.connection()
        self._thread_tokens.token.memo.clear()

    def _before_commit(self) -> None:
        """What a write does last in its transaction: refresh the gram index for the
        messages it changed (and, one such write in
        :data:`~hermes_models.store.grams.CATCH_UP_EVERY`, for up to
        :data:`~hermes_models.store.grams.CATCH_UP_ROWS` ids others changed)."""
        token: _ThreadToken = self._thread_tokens.token
        if token.grams and token.noted:
            self._refresh_grams(token, next(self._gram_writes) % grams.CATCH_UP_EVERY == 0)

    def _refresh_grams(self, token: _ThreadToken, others: bool) -> None:
        """:func:`hermes_models.store.grams.refresh` in this write's transaction, in a savepoint:
        a failure there never fails the write (the ids stay listed as changed, and a
        search reads those rows itself)."""
        conn = self.connection()
        noted = sorted(token.noted)
        token.noted.clear()
        conn.execute(sqlite_sql.SAVEPOINT_GRAMS)
        try:
            grams.refresh(conn, noted)
            if others:
                grams.refresh_changed(conn, grams.CATCH_UP_ROWS)
        except sqlite3.Error as exc:
            conn.execute(sqlite_sql.ROLLBACK_TO_GRAMS)
            logger.debug("gram index refresh failed: %s", exc)
        finally:
            conn.execute(sqlite_sql.RELEASE_GRAMS)

    def read_leniently(self) -> None:
        """Read text that is not UTF-8 with U+FFFD replacement characters from now on, on
        every connection of this process to this file
        (:func:`hermes_models.store.content.lenient_text`),
        and log one warning naming the rows that hold such text. Called where a read
        met such text; reading every value so costs ~75 ns, so no file is read so before."""
        conn = cast("sqlite3.Connection", self.connection())
        conn.text_factory = content.lenient_text
        if self.file in content.LENIENT_FILES:
            return
        content.LENIENT_FILES.add(self.file)
        try:
            found, total = content.damaged_text(conn)
        except sqlite3.Error as exc:  # naming the rows is a courtesy; reading goes on
            logger.warning("%s: text that is not UTF-8 (%s)", self.file, exc)
            return
        logger.warning("%s", content.describe_damage(self.file, found, total))

    def bound_wal(self) -> bool:
        """Empty the ``-wal`` file when it has grown too large; True when it was emptied
        (see :meth:`hermes_models.store.writes.Checkpoints.bound_wal`). Never raises."""
        return self.checkpoints.bound_wal(self)

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Run ``PRAGMA wal_checkpoint(mode)``, ignoring any error."""
        writes.checkpoint(self, mode)

    def close(self) -> bool:
        """Checkpoint (TRUNCATE) and close this thread's connection."""
        if not self.is_closed() and not self.in_transaction():
            self.checkpoint("TRUNCATE")
        return bool(super().close())

    def release(self) -> None:
        """Nothing to do: each thread keeps its own connection to the file (a pool
        is for a server; see :meth:`hermes_models.store.postgres.PostgresDatabase.release`)."""

    # -- maintenance (the file's side of the Backend interface) -------------------------

    def titles_beginning(self, titles: Sequence[str]) -> set[str]:
        """The session titles that are one of ``titles``, or one of them followed by a
        space and more (``"x"`` and ``"x #2"``)."""
        rows = self.execute_sql(sqlite_sql.TITLES_FROM_LIST, (json.dumps(sorted(set(titles))),))
        return {title for (title,) in rows.fetchall()}

    def optimize_indexes(self) -> int:
        """Merge each full-text index's segments, and the gram index's in short steps;
        returns how many of Hermes' two (words, trigrams) were optimized."""
        with using(self):
            models = present_indexes()
            self.write(lambda: [model.optimize() for model in models])
            if gram_index_ready():
                # What others changed or deleted is indexed again first: a merged index
                # holds the grams of the messages as they are, never a deleted one's.
                grams.catch_up(self)
                grams.merge(self)
        return len(models)

    def erase_traces(self) -> dict[str, Any]:
        """After a deletion: leave none of the deleted text in the file's indexes or
        its WAL. The gram index takes out what it holds of every message deleted or
        changed (by anyone) since it was indexed; each full-text index (words,
        trigrams, grams) is merged into one segment, so no older segment still
        holds a deleted term (the pages they leave are zeroed: ``secure_delete``);
        then the WAL is checkpointed and emptied unless a reader blocks it
        (:func:`hermes_models.store.writes.truncate_wal`).

        Returns ``indexes_merged`` (the tables, in that order), ``wal_truncated``,
        ``wal_blocked``, ``vacuumed`` (always empty here: see :meth:`compact`) and
        ``notes`` (what could not be done, as sentences).

        Raises:
            ReadOnlyDatabaseError: the handle cannot write.
        """
        self.refuse_writes()
        merged: list[str] = []
        notes: list[str] = []
        with using(self):
            ready = gram_index_ready()
            if ready:
                grams.catch_up(self)
            # Merged a step at a time (a short write each), so a gateway writing beside
            # an erase waits for one step, not for a whole index to be rewritten.
            tables = [str(model._meta.table_name) for model in present_indexes()]
            for table in [*tables, *([sqlite_sql.GRAM_TABLE] if ready else [])]:
                grams.merge_in_steps(self, table)
                merged.append(table)
        truncated, blocked = writes.truncate_wal(self)
        if blocked:
            notes.append(
                "a reader kept the WAL checkpoint from finishing: erased text may remain in "
                f"{self.file}-wal until the next checkpoint that finishes (run erase again "
                "once no process reads the store)"
            )
        elif self.journal != "wal":
            notes.append(f"the file is in {self.journal} journal mode: no WAL to empty")
        return {
            "indexes_merged": merged,
            "wal_truncated": truncated,
            "wal_blocked": blocked,
            "vacuumed": [],
            "notes": notes,
        }

    def update_grams(
        self, *, rebuild: bool | None = None, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, Any]:
        """Bring the gram index up to date (:func:`hermes_models.store.grams.update`)."""
        self.refuse_writes()
        return grams.update(self, again=bool(rebuild), progress=progress)

    def message_sequence(self) -> int | None:
        """The last message id handed out (``sqlite_sequence``), None before any."""
        tables = self.execute_sql(sqlite_sql.TABLE_NAMES).fetchall()
        if not any(row[0] == "sqlite_sequence" for row in tables):
            return None
        row = self.execute_sql(sqlite_sql.MESSAGE_SEQUENCE).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def set_message_sequence(self, top: int) -> None:
        """Make the message id sequence stand at ``top`` (0: as if no id was handed out)."""
        self.execute_sql(sqlite_sql.set_message_sequence(top))

    def hold_message_inserts(self) -> None:
        """Nothing to do: the write transaction (``BEGIN IMMEDIATE``) already holds
        every other writer off."""

    def inserted_id(self, cursor: Any) -> int:
        """The id of the row the INSERT run on ``cursor`` added."""
        return int(cursor.lastrowid or 0)

    def compact(self) -> None:
        """Checkpoint the WAL, rebuild the file compactly (``VACUUM``), checkpoint again."""
        self.checkpoint("TRUNCATE")
        self.execute_sql(sqlite_sql.VACUUM)
        self.checkpoint("TRUNCATE")

    def forget_connections(self) -> None:
        """Drop, without closing them, the connections a forked child inherited.

        After fork() the child must neither use nor close the parent's
        connections: closing one could checkpoint or unlink the parent's WAL.
        """
        handle: Any = self
        _abandoned.append(handle._state)
        handle._state = peewee._ConnectionLocal()


#: Values :meth:`HermesDatabase.while_unchanged` keeps a connection, at most.
MEMO_ENTRIES = 256


class _ThreadToken:
    """Lives as long as one thread's connection may: see HermesDatabase._connect."""

    __slots__ = ("__weakref__", "computing", "grams", "installed", "memo", "memo_mark", "noted")

    def __init__(self) -> None:
        #: Whether the gram index's TEMP triggers are on this connection (None: not
        #: looked at yet).
        self.grams: bool | None = None
        #: The message ids this connection's writes changed since its last refresh of
        #: the gram index (noted by its TEMP triggers).
        self.noted: set[int] = set()
        #: What :meth:`HermesDatabase.install_once` has installed on this connection.
        self.installed: set[str] = set()
        #: :meth:`HermesDatabase.while_unchanged`: values, and the state of the file
        #: they were read in.
        self.memo: dict[Hashable, Any] = {}
        self.memo_mark: tuple[int, int] | None = None
        #: How many :meth:`HermesDatabase.while_unchanged` computations (and
        #: :meth:`HermesDatabase._reading_once` blocks) are running: inside them the
        #: file's state was looked at just before.
        self.computing = 0


def _look_at_the_file(conn: sqlite3.Connection, token: _ThreadToken) -> None:
    """Forget what :meth:`HermesDatabase.while_unchanged` keeps when anything was
    committed to the file since it was kept."""
    mark = (int(conn.execute(sqlite_sql.DATA_VERSION).fetchone()[0]), conn.total_changes)
    if token.memo_mark != mark:
        token.memo.clear()
        token.memo_mark = mark


class _ReadingOnce:
    """:meth:`HermesDatabase._reading_once`."""

    __slots__ = ("db", "token")

    def __init__(self, db: HermesDatabase) -> None:
        self.db = db
        self.token: _ThreadToken | None = None

    def __enter__(self) -> None:
        conn = cast("sqlite3.Connection", self.db.connection())
        if conn.in_transaction:
            return  # nothing is kept inside a transaction (while_unchanged)
        token: _ThreadToken = self.db._thread_tokens.token
        _look_at_the_file(conn, token)
        token.computing += 1
        self.token = token

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            self.token.computing -= 1
            self.token = None


def _close_owned(conn: sqlite3.Connection, pid: int) -> None:
    # A forked child must not close (and so checkpoint) its parent's connection.
    if os.getpid() != pid:
        return
    try:
        conn.close()
    except sqlite3.Error:
        pass


_abandoned: list[Any] = []


_last_init_error: str | None = None
_last_init_error_lock = threading.Lock()


def record_init_error(exc: BaseException) -> None:
    """Remember why opening a database failed, for :func:`get_last_init_error`."""
    global _last_init_error
    cause = getattr(exc, "orig", None) or exc
    with _last_init_error_lock:
        _last_init_error = f"{type(cause).__name__}: {cause}"


def set_last_init_error(message: str | None) -> None:
    """Set (a message) or clear (None) what :func:`get_last_init_error` returns."""
    global _last_init_error
    with _last_init_error_lock:
        _last_init_error = message


def get_last_init_error() -> str | None:
    """``"<ExcType>: <message>"`` of the last failed open in this process, or None."""
    return _last_init_error


def format_db_unavailable(prefix: str = "Session database not available") -> str:
    """A one-line user message saying the database is unavailable, and why if known.

    Word for word what Hermes' ``format_session_db_unavailable`` says,
    including its hint when the cause names a WAL-incompatible file system.
    """
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    hint = ""
    if any(marker in cause.lower() for marker in WAL_INCOMPAT_MARKERS):
        hint = " (state.db may be on NFS/SMB/FUSE \u2014 see https://www.sqlite.org/wal.html)"
    return f"{prefix}: {cause}{hint}."


#: Hermes' name for :func:`format_db_unavailable`.
format_session_db_unavailable = format_db_unavailable


__all__ = [
    "MEMO_ENTRIES",
    "WRITE_PATIENCE_S",
    "HermesDatabase",
    "format_db_unavailable",
    "format_session_db_unavailable",
    "get_last_init_error",
    "record_init_error",
    "set_last_init_error",
]
