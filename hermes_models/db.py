"""The database handle: where the file is, how connections are set up, and
the one path every write takes.

Several processes (a gateway, CLIs, worker agents) share one SQLite file.
Each connection turns foreign keys on, waits at most one second on a busy
lock, and keeps the file in WAL mode so readers never wait for a writer. On
file systems where WAL cannot work (NFS, SMB, some FUSE mounts, WSL1) the
file falls back to DELETE mode with one warning.

Writes run in ``BEGIN IMMEDIATE`` transactions through :func:`write`. When
another writer holds the lock, the transaction is rolled back and the whole
callback runs again after a random 20-150 ms pause (random pauses spread
competing writers out instead of waking them in step), until the write's
patience (:data:`WRITE_PATIENCE_S`) has run out. Every 50 successful writes a
PASSIVE checkpoint copies the WAL into the database; when the ``-wal`` file
has grown past :data:`WAL_TRUNCATE_ABOVE_BYTES` a write also tries a short
TRUNCATE checkpoint, which empties it unless a reader still needs it.

Models are bound to :data:`database`, a proxy that points at the database
most recently opened by :func:`hermes_models.connect`, or, inside :func:`using`, at the
database a piece of code asked for (``SessionDB`` uses that to keep two open
files apart).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import os
import random
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote, urlsplit

import peewee

from . import grams
from .caches import BoundedSet
from .errors import (
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    UnsafeFileError,
    WriteConflictError,
)
from .shape import WRITES_VERSION, FileShape, probe

logger = logging.getLogger("hermes_models")
# peewee logs every statement it runs at DEBUG here; :meth:`HermesDatabase.run` keeps that.
_PEEWEE_LOG = logging.getLogger("peewee")
_DEBUG = logging.DEBUG

T = TypeVar("T")

#: The Hermes schema version this package writes (files of later versions are read only).
SCHEMA_VERSION = WRITES_VERSION

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

#: Error texts of ``PRAGMA journal_mode=WAL`` on file systems without WAL support.
WAL_INCOMPAT_MARKERS = ("locking protocol", "not authorized")


def is_lock_error(exc: BaseException) -> bool:
    """True when ``exc`` says another connection holds a lock."""
    if not isinstance(exc, (sqlite3.OperationalError, peewee.OperationalError)):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_read_only_error(exc: BaseException) -> bool:
    """True when ``exc`` says SQLite cannot write the file, or the folder it lives in."""
    if not isinstance(exc, sqlite3.Error):
        return False
    name = str(getattr(exc, "sqlite_errorname", ""))
    return name.startswith("SQLITE_READONLY") or "readonly database" in str(exc).lower()


def _refuse_read_only(path: Path) -> ReadOnlyDatabaseError:
    return ReadOnlyDatabaseError(
        f"{path} cannot be written here (the file or its folder is read-only); "
        "open it with read_only=True to read it"
    )


def resolve_path(target: str | os.PathLike[str] | None = None, *, argument: str = "target") -> Path:
    """The database file a ``connect()`` target names.

    ``None`` means ``$HERMES_HOME/state.db`` (``HERMES_HOME`` defaults to
    ``~/.hermes``), read at call time. A ``sqlite:///`` URL names a path
    (``sqlite:////abs/path.db`` for absolute paths).

    Raises:
        TypeError: ``target`` is not a string or path.
        ValueError: ``target`` is empty, in-memory, or a URL of another scheme.
    """
    if target is None:
        home = os.environ.get("HERMES_HOME") or "~/.hermes"
        return Path(os.path.abspath(Path(home).expanduser() / "state.db"))
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a path or sqlite:/// URL, not {type(target).__name__}")
    text = os.fspath(target)
    if not isinstance(text, str):
        raise TypeError(f"{argument} must be a text path, not bytes")
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme.lower() != "sqlite":
            raise ValueError(
                f"{argument}: unsupported URL scheme {parts.scheme!r}; only sqlite:/// is supported"
            )
        text = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not text.strip():
        raise ValueError(f"{argument}: empty database path")
    if text == ":memory:" or text.startswith("file::memory:"):
        raise ValueError(f"{argument}: in-memory databases are not supported (WAL needs a file)")
    if "\x00" in text:
        raise ValueError(f"{argument}: path contains a NUL character")
    return Path(os.path.abspath(Path(text).expanduser()))


def sqlite_uri(path: Path, **params: str) -> str:
    """A ``file:`` URI for ``path`` with ``#``, ``?``, ``%`` and spaces escaped."""
    uri = "file:" + quote(str(path), safe="/")
    if params:
        uri += "?" + "&".join(f"{key}={value}" for key, value in params.items())
    return uri


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_header(path: Path) -> None:
    """Refuse anything but a missing path or a regular file that is empty or an SQLite database.

    A symbolic link is followed: a link to a database is fine, a link to
    ``/dev/null`` is not. The file is read through SQLite, never opened
    directly: closing a descriptor of our own would drop every POSIX lock
    this process's SQLite connections hold on the file, and another process
    could then take the file for unused and delete the WAL they are writing to.
    """
    if not check_file_kind(path):
        return
    try:
        conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=0)
    except sqlite3.Error:
        return  # unreadable here: the caller's own open reports why
    try:
        check_pages(path, conn)
    finally:
        conn.close()


def check_file_kind(path: Path) -> bool:
    """The part of :func:`check_header` that needs no SQLite: True when ``path`` is a
    regular file with content (False: missing or empty).

    Raises:
        NotADatabaseError: ``path`` is not a regular file.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        raise NotADatabaseError(f"{path} is {_file_kind(info.st_mode)}, not an SQLite database")
    return info.st_size > 0


def check_pages(path: Path, conn: sqlite3.Connection) -> None:
    """The part of :func:`check_header` read through ``conn``, a connection to the
    non-empty regular file ``path``: refuse it unless SQLite sees pages in it.

    Raises:
        NotADatabaseError: the file is not an SQLite database.
    """
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise NotADatabaseError(f"{path} is not an SQLite database") from exc
        return  # locked, or a read-only folder: not a question of what the file is
    if not pages:
        # SQLite reads a few stray bytes as an empty database, and would overwrite them.
        raise NotADatabaseError(f"{path} is not an SQLite database")


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and any missing parents with mode 0700 (whatever the umask)."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        try:
            os.mkdir(candidate, 0o700)
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to change
        os.chmod(candidate, 0o700)


_owner_warned: BoundedSet[str] = BoundedSet("file ownership warnings", 256)


def check_ownership(path: Path, *, read_only: bool) -> None:
    """Refuse a database, ``-wal`` or ``-shm`` another user owns, or that is not private.

    Sidecars must be regular files (not links); files with group or other
    permission bits are tightened to 0600 with ``chmod`` on the path (only
    taking bits away). With ``read_only`` nothing is changed or refused: a
    warning is logged once per file instead.

    Raises:
        UnsafeFileError: a file is owned by another user, is not a regular
            file, or keeps group/other permissions after ``chmod``.
    """
    if os.name == "nt":
        return
    me = os.geteuid()
    for candidate, follow in (
        (path, True),
        (Path(f"{path}-wal"), False),
        (Path(f"{path}-shm"), False),
    ):
        try:
            info = os.stat(candidate) if follow else os.lstat(candidate)
        except FileNotFoundError:
            continue
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = f"is {_file_kind(info.st_mode)}, not a file SQLite made"
        elif info.st_uid != me:
            problem = (
                f"is owned by another user (uid {info.st_uid}), not by this process (uid {me})"
            )
        elif stat.S_IMODE(info.st_mode) & 0o077 and not read_only:
            mode = stat.S_IMODE(info.st_mode)
            try:
                os.chmod(candidate, mode & 0o600)
                mode = stat.S_IMODE(os.stat(candidate).st_mode)
            except OSError as exc:
                problem = f"cannot be made private ({exc.strerror})"
            else:
                if mode & 0o077:
                    problem = f"cannot be made private (its mode stays {mode:04o})"
        if problem is None:
            continue
        if read_only:
            if _owner_warned.add(str(candidate)):
                logger.warning("%s %s; reading it anyway (opened read-only)", candidate, problem)
            continue
        raise UnsafeFileError(
            f"{candidate} {problem}; refusing to use it (anyone who can change it could "
            "read or alter the store). Open the store with read_only=True to read it"
        )


def secure_files(path: Path, *, create: bool) -> None:
    """Create ``path`` with mode 0600 (its folders 0700) if asked, and check it and its sidecars.

    See :func:`check_ownership`. Existing files are changed with ``chmod`` on
    the path: opening and closing a descriptor would drop the POSIX locks
    SQLite holds on the file.
    """
    if os.name == "nt":
        return
    if create:
        make_private_folder(path.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.close(os.open(path, flags, 0o600))
        except FileExistsError:
            pass
    check_ownership(path, read_only=False)


def stored_schema_version(conn: sqlite3.Connection) -> int | None:
    """The version row of ``schema_version``, or None when there is none."""
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None or row[0] is None else int(row[0])


def newer_schema_error(path: Path, shape: FileShape, doing: str) -> SchemaTooNewError:
    """The error that refuses ``doing`` on a file newer than the schema this package writes."""
    return SchemaTooNewError(
        f"{path} has Hermes schema version {shape.describe_version()}, newer than "
        f"{SCHEMA_VERSION}, the highest hermes_models writes: {doing} refused "
        "(the file is read, never changed)"
    )


def refuse_newer_schema(path: Path, shape: FileShape | None, doing: str = "writing") -> None:
    """Raise when ``shape`` is newer than the schema this package writes."""
    if shape is not None and shape.newer:
        raise newer_schema_error(path, shape, doing)


def probe_file(
    path: Path, params: dict[str, str] | None = None, *, pages: bool = False
) -> FileShape | None:
    """The structure of ``path`` (:func:`hermes_models.shape.probe`), read without any write.

    ``params`` are the URI parameters of the read (default ``mode=ro``). None
    for a missing or empty file, and for one SQLite cannot open here (the
    caller's own open then reports why). With ``pages`` the same connection
    first runs :func:`check_pages` (with :func:`check_file_kind` before the
    call, what :func:`check_header` does, on one connection fewer).

    Raises:
        NotADatabaseError: the file is not an SQLite database.
        ReadOnlyDatabaseError: the folder is read-only, so SQLite cannot read
            the file in WAL mode without ``params`` from :func:`read_only_params`.
    """
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        conn = sqlite3.connect(sqlite_uri(path, **(params or {"mode": "ro"})), uri=True)
    except sqlite3.OperationalError:
        return None
    try:
        if pages:
            check_pages(path, conn)
        return probe(conn)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise NotADatabaseError(f"{path} is not an SQLite database") from exc
        if is_read_only_error(exc):
            raise _refuse_read_only(path) from exc
        raise
    finally:
        conn.close()


def check_schema_version(path: Path, params: dict[str, str] | None = None) -> None:
    """Refuse to migrate ``path`` when it is newer than v16, reading it without any write.

    Raises:
        NotADatabaseError: the file is not an SQLite database.
        SchemaTooNewError: the file has structure beyond the v16 schema.
        ReadOnlyDatabaseError: see :func:`probe_file`.
    """
    refuse_newer_schema(path, probe_file(path, params), "migrating")


def check_writable(path: Path) -> None:
    """Refuse at once a file SQLite could only open read-only (file mode, folder, mount).

    Without this check the first write would wait out every lock retry
    before failing with a misleading "locked" error.

    Raises:
        ReadOnlyDatabaseError: the file or its folder cannot be written.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    conn = sqlite3.connect(sqlite_uri(path), uri=True, timeout=0, isolation_level=None)
    try:
        # Changing a page is what SQLite refuses on a read-only file; rolled back,
        # the change never reaches the file.
        conn.execute("BEGIN IMMEDIATE")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        if is_read_only_error(exc):
            raise _refuse_read_only(path) from exc
        # Busy (another process is writing, so the file can be written), or a
        # failure the open that follows reports in its own words.
    finally:
        conn.close()


def read_only_params(path: Path) -> dict[str, str]:
    """URI parameters that read the existing file ``path`` without writing anything.

    Reading a WAL file needs its ``-shm`` index, which SQLite creates next to
    the file. In a read-only folder without that index the file is read as
    an immutable snapshot (``immutable=1``): changes made later by processes
    that can write the folder are not seen by this handle.

    Raises:
        sqlite3.OperationalError: the folder is read-only and the ``-wal`` file
            holds changes not yet in the database file (a snapshot would miss them).
    """
    params = {"mode": "ro"}
    error: sqlite3.Error
    try:
        conn = sqlite3.connect(sqlite_uri(path, **params), uri=True)
    except sqlite3.Error as exc:
        error = exc
    else:
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return params
        except sqlite3.Error as exc:
            error = exc
        finally:
            conn.close()
    wal = Path(f"{path}-wal")
    unmerged = wal.exists() and wal.stat().st_size > 0
    if not is_read_only_error(error) and not (unmerged and "unable to open" in str(error)):
        return params
    if unmerged:
        raise sqlite3.OperationalError(
            f"{path} cannot be read here: its folder is read-only and {wal.name} holds "
            "changes not yet merged into the file (open it once where the folder is writable)"
        )
    logger.warning(
        "%s: the folder is read-only and the file has no -shm index; reading it as an "
        "immutable snapshot (later changes by other processes are not seen)",
        path,
    )
    return {**params, "immutable": "1"}


def _request_wal(conn: sqlite3.Connection) -> str:
    row = conn.execute("PRAGMA journal_mode=WAL").fetchone()
    return str(row[0]).lower()


def _journal_mode(conn: sqlite3.Connection) -> str | None:
    """The journal mode ``conn`` reports, lower-cased; None when it cannot be read."""
    try:
        row = conn.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None or row[0] is None else str(row[0]).lower()


_wal_warned: BoundedSet[str] = BoundedSet("WAL fallback warnings", 256)


def _set_journal_mode(conn: sqlite3.Connection, db_label: str) -> str:
    """Put ``conn``'s file in WAL mode, or DELETE mode where WAL cannot work.

    Returns the mode SQLite reports after the change. A file already in WAL
    is left alone (setting the pragma again has side effects on files other
    connections hold open), and a file another process put in WAL is never
    downgraded.
    """
    if _journal_mode(conn) == "wal":
        return "wal"
    try:
        return retry_locked(lambda: _request_wal(conn))
    except sqlite3.OperationalError as exc:
        text = str(exc).lower()
        if not any(marker in text for marker in WAL_INCOMPAT_MARKERS):
            raise
        if _journal_mode(conn) == "wal":
            raise
        if _wal_warned.add(db_label):
            logger.warning(
                "%s: WAL is not supported on this file system (%s); using "
                "journal_mode=DELETE, which works on NFS/SMB/FUSE but lets writers "
                "block readers",
                db_label,
                exc,
            )
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Set ``journal_mode=WAL`` on ``conn``, falling back to DELETE; ``"wal"`` or ``"delete"``.

    Hermes' helper of the same name, for any DB-API connection: a file
    already in WAL is not touched; an error naming a WAL-incompatible file
    system (``locking protocol``, ``not authorized``) switches to DELETE mode
    with one warning per ``db_label`` in this process, unless the file is
    already in WAL on disk, in which case the error propagates, as does
    any other error.
    """
    return "delete" if _set_journal_mode(conn, db_label) == "delete" else "wal"


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


#: First words of the statements that write.
_WRITING = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "VACUUM", "REINDEX")


class HermesDatabase(peewee.SqliteDatabase):
    """An SQLite file shared by several processes, set up the Hermes way.

    Use :func:`hermes_models.connect` rather than building one directly: it migrates the
    file first and keeps one handle per file per process.
    """

    def __init__(
        self, path: Path, *, read_only: bool = False, params: dict[str, str] | None = None
    ) -> None:
        self.path = path
        self.read_only = read_only
        self.journal: str | None = None
        #: The structure of the file (set by :func:`hermes_models.connect`; None until then).
        self.shape: FileShape | None = None
        #: Which full-text tables this SQLite build runs (set on first use).
        self.search_support: dict[str, bool] | None = None
        self._writes = itertools.count(1)  # next() is atomic under the GIL
        #: True when this handle's connections keep the gram index in step
        #: (:mod:`hermes_models.grams`; known once a connection has written).
        self.grams = False
        #: Set by the gram index's TEMP trigger: a message we inserted could not be
        #: indexed (others' rows lie below it), so the write catches up before it commits.
        self.grams_behind = False
        self._behind_writes = itertools.count()
        self._wal_path = f"{path}-wal"
        self._next_truncate = 0.0
        self._thread_tokens = threading.local()
        if read_only:
            uri = sqlite_uri(path, **(params or {"mode": "ro"}))
            super().__init__(uri, timeout=BUSY_TIMEOUT_S, uri=True)
        else:
            super().__init__(str(path), timeout=BUSY_TIMEOUT_S)

    def _connect(self) -> sqlite3.Connection:
        conn = cast(sqlite3.Connection, super()._connect())  # type: ignore[misc]
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
        check_ownership(self.path, read_only=self.read_only)
        super()._add_conn_hooks(conn)  # type: ignore[misc]
        # Raw SQL through the DB-API connection gets rows addressable by
        # column name, as Hermes' own connection gives them; peewee's
        # cursors (see cursor()) keep returning plain tuples.
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if self.read_only:
            self.journal = _journal_mode(conn)
        else:
            self.journal = _set_journal_mode(conn, str(self.path))

    def execute_sql(self, sql: str, params: Any = None, commit: Any = None) -> Any:
        """Run ``sql``; on a file newer than v16 a write raises :class:`SchemaTooNewError`
        (whichever path it took), before SQLite prepares it: preparing a write compiles
        the file's triggers, and a newer Hermes' may need a tokenizer plain SQLite lacks."""
        if self.shape is not None and self.shape.newer:
            if sql.lstrip()[:7].upper().startswith(_WRITING):
                raise newer_schema_error(self.path, self.shape, "writing")
        try:
            return super().execute_sql(sql, params)
        except (sqlite3.OperationalError, peewee.OperationalError) as exc:
            cause = getattr(exc, "orig", exc)
            if self.shape is not None and self.shape.newer and is_read_only_error(cause):
                raise newer_schema_error(self.path, self.shape, "writing") from exc
            raise

    def run(self, sql: str, params: Any) -> sqlite3.Cursor:
        """:meth:`execute_sql` for the statements rendered once (:class:`Prepared`),
        without peewee's per-call work when it has nothing to do.

        A call that takes 5 µs in SQLite cost 2–3 µs more through peewee's
        generic path (the query log, the exception wrapper as a context manager,
        the connection checks). When this thread's connection is open, no query
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
            return cast(sqlite3.Cursor, self.execute_sql(sql, params))
        cursor = conn.cursor()
        cursor.row_factory = None
        try:
            cursor.execute(sql, params)
        except Exception:
            with peewee.__exception_wrapper__:  # type: ignore[attr-defined]
                raise
        return cursor

    def cursor(self, named_cursor: Any = None) -> sqlite3.Cursor:
        """A cursor of this thread's connection that returns rows as tuples."""
        cursor = cast(sqlite3.Cursor, super().cursor(named_cursor))
        cursor.row_factory = None
        return cursor

    def write(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction, retrying while locked.

        On a locked/busy error the transaction is rolled back, the thread
        sleeps 20-150 ms and ``fn`` runs again, until :data:`WRITE_PATIENCE_S`
        (60 s) have passed since the first try; ``fn`` must be safe to re-run.
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
        started = time.monotonic()
        give_up_at = started + WRITE_PATIENCE_S
        for attempt in itertools.count(1):
            try:
                with _Immediate(self):
                    result = fn()
                    if self.grams_behind:
                        self.grams_behind = False
                        if next(self._behind_writes) % grams.CATCH_UP_EVERY == 0:
                            self._catch_up_grams()
            except (sqlite3.OperationalError, peewee.OperationalError) as exc:
                if is_read_only_error(exc):
                    raise _refuse_read_only(self.path) from exc
                if not is_lock_error(exc):
                    raise
                now = time.monotonic()
                if now >= give_up_at:
                    raise WriteConflictError(
                        f"database is locked: {self.path} stayed locked by other writers "
                        f"for {now - started:.1f} s ({attempt} attempts; patience "
                        f"{WRITE_PATIENCE_S:g} s)"
                    ) from exc
                logger.debug("write locked out (attempt %d): %s", attempt, exc)
                _jitter()
                continue
            self._count_write()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def refuse_writes(self) -> None:
        """Raise what :meth:`write` raises before it starts when this handle cannot write.

        Raises:
            SchemaTooNewError: the file is newer than the schema this package writes.
            ReadOnlyDatabaseError: the handle was opened read-only.
        """
        refuse_newer_schema(self.path, self.shape)
        if self.read_only:
            raise ReadOnlyDatabaseError(f"{self.path} was opened read-only; writes are refused")

    def ensure_grams(self) -> bool:
        """Install the gram index's TEMP triggers on this thread's connection unless it
        has them; True when the file has the index and this build can keep it."""
        # Installed at a connection's first write, not when it opens: opening stays
        # short, and rows written without the triggers are caught up later, never missed.
        conn = cast(sqlite3.Connection, self.connection())
        token: _ThreadToken = self._thread_tokens.token
        if token.grams is None:
            try:
                token.grams = self.grams = grams.install(conn, self._note_grams_behind)
            except (sqlite3.OperationalError, peewee.OperationalError) as exc:
                if not is_lock_error(exc):
                    raise
                # Another process holds the file (creating it, say): this write goes
                # on without the triggers (its rows are caught up later); the next
                # write tries again.
                logger.debug("gram index triggers not installed yet: %s", exc)
                return False
        return bool(token.grams)

    def _note_grams_behind(self) -> None:
        self.grams_behind = True

    def _catch_up_grams(self) -> None:
        """Index a few messages others wrote above the gram index's mark, in this
        write's transaction; a failure there never fails the write."""
        conn = self.connection()
        conn.execute("SAVEPOINT hermes_models_grams")
        try:
            grams.index_rows_above(conn, grams.CATCH_UP_ROWS)
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK TO hermes_models_grams")
            logger.debug("gram index catch-up failed: %s", exc)
        finally:
            conn.execute("RELEASE hermes_models_grams")

    def _count_write(self) -> None:
        if next(self._writes) % CHECKPOINT_EVERY_N_WRITES == 0:
            self.checkpoint("PASSIVE")
        self.bound_wal()

    def bound_wal(self) -> bool:
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
        if self.read_only or self.journal != "wal" or (self.shape and self.shape.newer):
            return False
        if self.in_transaction():
            return False
        try:
            size = os.stat(self._wal_path).st_size
        except OSError:
            return False
        if size <= WAL_TRUNCATE_ABOVE_BYTES:
            return False
        now = time.monotonic()
        if now < self._next_truncate:
            return False
        self._next_truncate = now + WAL_TRUNCATE_EVERY_S * random.uniform(0.5, 1.5)
        return self._truncate_wal(size)

    def _truncate_wal(self, size: int) -> bool:
        conn = self.connection()
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
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
            previous = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
            conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            try:
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {previous}")
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

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Run ``PRAGMA wal_checkpoint(mode)``, ignoring any error."""
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"mode: unknown checkpoint mode {mode!r}")
        if self.read_only or self.journal != "wal" or (self.shape and self.shape.newer):
            return
        try:
            self.execute_sql(f"PRAGMA wal_checkpoint({mode})")
        except (sqlite3.Error, peewee.PeeweeException) as exc:
            logger.debug("wal_checkpoint(%s) failed: %s", mode, exc)

    def close(self) -> bool:
        """Checkpoint (TRUNCATE) and close this thread's connection."""
        if not self.is_closed() and not self.in_transaction():
            self.checkpoint("TRUNCATE")
        return bool(super().close())

    def forget_connections(self) -> None:
        """Drop, without closing them, the connections a forked child inherited.

        After fork() the child must neither use nor close the parent's
        connections: closing one could checkpoint or unlink the parent's WAL.
        """
        handle: Any = self
        _abandoned.append(handle._state)
        handle._state = peewee._ConnectionLocal()


class _ThreadToken:
    """Lives as long as one thread's connection may: see HermesDatabase._connect."""

    __slots__ = ("__weakref__", "grams")

    def __init__(self) -> None:
        #: Whether the gram index's TEMP triggers are on this connection (None: not
        #: looked at yet).
        self.grams: bool | None = None


def _close_owned(conn: sqlite3.Connection, pid: int) -> None:
    # A forked child must not close (and so checkpoint) its parent's connection.
    if os.getpid() != pid:
        return
    try:
        conn.close()
    except sqlite3.Error:
        pass


class _Immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` on this thread's connection.

    A lean stand-in for ``atomic('IMMEDIATE')`` on the write path: it sits on
    peewee's transaction stack, so ``atomic()`` blocks inside it become
    savepoints as usual.
    """

    __slots__ = ("conn", "db")

    def __init__(self, db: HermesDatabase) -> None:
        self.db = db
        self.conn: sqlite3.Connection = db.connection()

    def __enter__(self) -> _Immediate:
        self.conn.execute("BEGIN IMMEDIATE")
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
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.rollback()
            db._clear_commit_callbacks()
            raise
        db._run_commit_callbacks()


_abandoned: list[Any] = []

_current: contextvars.ContextVar[HermesDatabase | None] = contextvars.ContextVar(
    "hermes_models_database", default=None
)


class _Binding(peewee.DatabaseProxy):
    """The proxy models are bound to: :func:`using` first, else the last connect()."""

    __slots__ = ("_default",)

    def __init__(self) -> None:
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "_default", None)

    @property
    def obj(self) -> HermesDatabase | None:
        return _current.get() or self._default

    def initialize(self, obj: Any) -> None:
        object.__setattr__(self, "_default", obj)
        for callback in self._callbacks:
            callback(obj)

    def __setattr__(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)


#: What every model's ``Meta.database`` points at.
database = _Binding()


#: ``bind_current(db)`` routes the models to ``db`` here until
#: ``unbind_current(token)`` (see :func:`using`). They are the context variable's
#: own methods: every ``SessionDB`` call runs them, and a Python function around
#: each would cost more than the variable itself.
bind_current: Callable[[HermesDatabase], contextvars.Token[HermesDatabase | None]] = _current.set
unbind_current: Callable[[contextvars.Token[HermesDatabase | None]], None] = _current.reset


@contextlib.contextmanager
def using(db: HermesDatabase) -> Iterator[HermesDatabase]:
    """Make the models use ``db`` in this thread (or task) inside the block."""
    token = _current.set(db)
    try:
        yield db
    finally:
        _current.reset(token)


def current() -> HermesDatabase:
    """The database the models use here.

    Raises:
        RuntimeError: nothing was connected yet.
    """
    db = _current.get() or database.obj  # the first is the common case, and cheaper
    if db is None:
        raise RuntimeError("no database: call hermes_models.connect() first")
    return db


def file_key() -> tuple[Any, ...]:
    """What SQL built for the bound file depends on (:attr:`FileShape.key`; ``()`` unknown)."""
    shape = current().shape
    return () if shape is None else shape.key


def newer_file() -> bool:
    """True when the bound file is newer than v16 (read with Hermes' later rules)."""
    shape = current().shape
    return shape is not None and shape.newer


def file_has(table: str, column: str) -> bool:
    """True when ``table`` of the bound file has ``column`` (as probed at open)."""
    shape = current().shape
    return shape is not None and shape.has(table, column)


def write(fn: Callable[[], T], *, db: HermesDatabase | None = None) -> T:
    """Run ``fn`` as one retried ``BEGIN IMMEDIATE`` write (see :meth:`HermesDatabase.write`)."""
    return (db or current()).write(fn)


_last_init_error: str | None = None
_last_init_error_lock = threading.Lock()


def record_init_error(exc: BaseException) -> None:
    """Remember why opening a database failed, for :func:`get_last_init_error`."""
    global _last_init_error
    cause = getattr(exc, "orig", None) or exc
    with _last_init_error_lock:
        _last_init_error = f"{type(cause).__name__}: {cause}"


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
    "BUSY_TIMEOUT_S",
    "CHECKPOINT_EVERY_N_WRITES",
    "SCHEMA_VERSION",
    "WAL_FORCE_TRUNCATE_ABOVE_BYTES",
    "WAL_INCOMPAT_MARKERS",
    "WAL_TRUNCATE_ABOVE_BYTES",
    "WAL_TRUNCATE_EVERY_S",
    "WAL_TRUNCATE_WAIT_S",
    "WRITE_PATIENCE_S",
    "WRITE_RETRY_MAX_S",
    "WRITE_RETRY_MIN_S",
    "HermesDatabase",
    "apply_wal_with_fallback",
    "bind_current",
    "check_file_kind",
    "check_header",
    "check_ownership",
    "check_pages",
    "check_schema_version",
    "check_writable",
    "current",
    "database",
    "file_has",
    "format_db_unavailable",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_lock_error",
    "is_read_only_error",
    "make_private_folder",
    "newer_file",
    "newer_schema_error",
    "probe_file",
    "read_only_params",
    "record_init_error",
    "refuse_newer_schema",
    "resolve_path",
    "retry_locked",
    "secure_files",
    "sqlite_uri",
    "stored_schema_version",
    "unbind_current",
    "using",
    "write",
]
