"""The store's file: where it is, what it is, who may touch it, and which schema it holds.

A ``connect()`` target becomes a path (:func:`resolve_path`), a path a
``file:`` URI (:func:`sqlite_uri`). Before SQLite writes anything to a file,
the checks here refuse what would be unsafe to open: anything but a regular
file or an SQLite database (:func:`check_header`), a file or ``-wal``/``-shm``
sidecar owned by another user or that cannot be made private (:func:`check_ownership`),
a file SQLite could only open read-only (:func:`check_writable`), and a file
of a newer Hermes schema than this package writes (:func:`probe_file`,
:func:`check_schema_version`). An existing file is only read through SQLite,
and changed only with ``chmod`` on its path, never opened directly: closing a
descriptor of our own would drop the POSIX locks this process's SQLite
connections hold on the file.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from ..checks import expand_user
from ..driver import sqlite3
from ..errors import (
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    UnsafeFileError,
    is_read_only_error,
)
from . import sqlite_sql
from .caches import BoundedSet
from .cipher import not_a_database, open_file
from .shape import WRITES_VERSION, FileShape, probe

if TYPE_CHECKING:
    from typing import TypeAlias

    #: A file's name as these functions take it: text, or a path object.
    StrPath: TypeAlias = "str | os.PathLike[str]"

logger = logging.getLogger("hermes_models")

#: The Hermes schema version this package writes (files of later versions are read only).
SCHEMA_VERSION = WRITES_VERSION

#: URL schemes that name a PostgreSQL database.
SCHEMES = ("postgresql", "postgres")


def is_postgres_url(target: object) -> bool:
    """True when ``target`` is a ``postgresql://`` (or ``postgres://``) URL.

    It lives here, beside :func:`resolve_path`, so that telling a server from a
    file does not load the PostgreSQL backend (:mod:`.postgres`)."""
    return (
        isinstance(target, str) and target.split("://", 1)[0].lower() in SCHEMES and "://" in target
    )


def read_only_file_error(path: StrPath) -> ReadOnlyDatabaseError:
    """The error that refuses to write ``path``: SQLite cannot write it or its folder."""
    return ReadOnlyDatabaseError(
        f"{path} cannot be written here (the file or its folder is read-only); "
        "open it with read_only=True to read it"
    )


def resolve_path(target: str | os.PathLike[str] | None = None, *, argument: str = "target") -> Path:
    """The database file a ``connect()`` target names, as a :class:`~pathlib.Path`
    (see :func:`resolve_file`, which gives it as text).

    Raises:
        TypeError: ``target`` is not a string or path.
        ValueError: ``target`` is empty, in-memory, a URL of another scheme, or
            starts with ``~`` where no home folder is known.
    """

    return Path(resolve_file(target, argument=argument))


def resolve_file(target: str | os.PathLike[str] | None = None, *, argument: str = "target") -> str:
    """The database file a ``connect()`` target names: an absolute path, as text.

    ``None`` means ``$HERMES_HOME/state.db`` (``HERMES_HOME`` defaults to
    ``~/.hermes``), read at call time. A ``sqlite:///`` URL names a path
    (``sqlite:////abs/path.db`` for absolute paths). ``~`` is expanded, and the
    path made absolute and normal (``a/./b//c`` is ``a/b/c``).

    Raises:
        TypeError: ``target`` is not a string or path.
        ValueError: ``target`` is empty, in-memory, a URL of another scheme, or
            starts with ``~`` where no home folder is known.
    """
    if target is None:
        home = os.environ.get("HERMES_HOME")
        where = _expand_home(home, "HERMES_HOME") if home else _expand_home("~/.hermes", argument)
        return os.path.join(where, "state.db")
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a path or sqlite:/// URL, not {type(target).__name__}")
    text = os.fspath(target)
    if not isinstance(text, str):
        raise TypeError(f"{argument} must be a text path, not bytes")
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme.lower() != "sqlite":
            raise ValueError(
                f"{argument}: unsupported URL scheme {parts.scheme!r};"
                " only sqlite:/// and postgresql:// are supported"
            )
        if parts.netloc:  # sqlite://name.db: the file would be read as a host name
            raise ValueError(
                f"{argument}: {text!r} names no file (the part after 'sqlite://' is a host);"
                " a file is sqlite:///relative.db or sqlite:////absolute/path.db"
            )
        # %FF is the byte 0xFF, as in a file name that is not UTF-8 (not U+FFFD).
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        text = unquote(path, errors="surrogateescape")
    if not text.strip():
        raise ValueError(f"{argument}: empty database path")
    if text == ":memory:" or text.startswith("file::memory:"):
        raise ValueError(f"{argument}: in-memory databases are not supported (WAL needs a file)")
    if "\x00" in text:
        raise ValueError(f"{argument}: path contains a NUL character")
    return _expand_home(text, argument)


def _expand_home(text: str, argument: str) -> str:
    """``text`` with a leading ``~`` or ``~user`` expanded, made absolute and normal.

    Raises:
        ValueError: ``text`` starts with ``~`` and that home folder is not known
            (the ``~`` is never taken as a folder's name).
    """
    return os.path.abspath(expand_user(text, argument))


def _has_content(path: StrPath) -> bool:
    """Whether ``path`` exists (a link followed) and is not empty."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


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


def check_header(path: StrPath) -> None:
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
        conn = open_file(sqlite_uri(path, mode="ro"), uri=True, timeout=0)
    except sqlite3.Error:
        return  # unreadable here: the caller's own open reports why
    try:
        check_pages(path, conn)
    finally:
        conn.close()


#: What an SQLite file starts with.
_MAGIC = b"SQLite format 3\x00"
#: The journal mode an SQLite file's header records in bytes 18 and 19 (the file
#: format's write and read versions): 2 and 2 in WAL mode, 1 and 1 otherwise.
_HEADER_JOURNAL = {b"\x02\x02": "wal", b"\x01\x01": "delete"}


def header_journal_mode(path: StrPath) -> str | None:
    """The journal mode the header of the SQLite file ``path`` records: ``"wal"`` or
    ``"delete"``; None when it cannot be read or is not an SQLite header.

    For a handle that reads the file as an immutable snapshot, whose SQLite says
    ``delete`` whatever the file is in. The file is opened directly, and closing
    a descriptor drops every POSIX lock this process holds on the file (see
    :func:`check_header`): only for a file no connection of this process locks,
    which is what an immutable snapshot is read without.
    """
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except OSError:
        return None
    if not header.startswith(_MAGIC):
        return None
    return _HEADER_JOURNAL.get(header[18:20])


def check_file_kind(path: StrPath) -> bool:
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


def check_pages(path: StrPath, conn: sqlite3.Connection) -> None:
    """The part of :func:`check_header` read through ``conn``, a connection to the
    non-empty regular file ``path``: refuse it unless SQLite sees pages in it.

    Raises:
        NotADatabaseError: the file is not an SQLite database.
    """
    try:
        pages = conn.execute(sqlite_sql.PAGE_COUNT).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise not_a_database(os.fspath(path)) from exc
        return  # locked, or a read-only folder: not a question of what the file is
    if not pages:
        # SQLite reads a few stray bytes as an empty database, and would overwrite them.
        raise NotADatabaseError(f"{path} is not an SQLite database")


def make_private_folder(folder: StrPath) -> None:
    """Create ``folder`` and any missing parents with mode 0700 (whatever the umask)."""
    missing = []
    candidate = os.path.abspath(folder)
    while not os.path.exists(candidate):
        missing.append(candidate)
        parent = os.path.dirname(candidate)
        if parent == candidate:
            break
        candidate = parent
    for candidate in reversed(missing):
        try:
            os.mkdir(candidate, 0o700)
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to change
        os.chmod(candidate, 0o700)


_owner_warned: BoundedSet[str] = BoundedSet("file ownership warnings", 256)

#: The files SQLite keeps beside a database, by the suffix of their names.
SIDECARS = ("-wal", "-shm", "-journal")

#: What a refused sidecar's message says to do.
_REMOVE_IT = (
    "it is not a file SQLite made for this store: have its owner (or root) remove it,"
    " then open the store again"
)
#: What a refused database's message says to do.
_READ_IT = "Open the store with read_only=True to read it"


def real_file(path: StrPath) -> str:
    """The file SQLite opens for ``path``: every symbolic link followed, of the file and
    of each folder on the way. SQLite keeps the ``-wal``, ``-shm`` and ``-journal``
    files beside this name, not beside ``path``."""
    return os.path.realpath(path)


def user_name(uid: int) -> str:
    """How messages name the user ``uid``: ``"nobody (uid 65534)"``, or ``"uid 1234"``
    for a number the system has no name for."""

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_ownership(path: StrPath, *, read_only: bool) -> None:
    """Refuse a database, or a ``-wal``, ``-shm`` or ``-journal`` beside it, that another
    user could read or change the store through.

    The files checked are the ones SQLite uses: the database's real path
    (:func:`real_file`: links followed) and the sidecars beside it. A sidecar
    must be a regular file (not a link) with one name (a hard link would send
    the store's pages into another file too), owned by this process's user or
    the database's (:func:`refuse_planted`, which an open runs before SQLite
    opens anything). The database and its sidecars must be this user's. The
    database's mode is never changed (the package creates its files 0600; a file
    it did not create keeps the mode its owner gave it: ``doctor`` warns when others
    can read it, and ``doctor --fix`` tightens it); a sidecar that lets others
    read more than the database does is tightened to the database's mode with
    ``chmod`` on the path (only taking bits away). With ``read_only`` nothing is
    changed, and a file of the database's owner is read with a warning (logged once
    per file); a planted sidecar is refused all the same.

    Raises:
        UnsafeFileError: a file is owned by another user, is not a regular
            file, has another name, or keeps group/other permissions after ``chmod``.
    """
    real = _check_files(path, read_only=read_only, planted_only=False)
    if real is not None and not read_only:
        _warn_shared_folder(real)


def refuse_planted(path: StrPath) -> None:
    """Refuse a ``-wal``, ``-shm`` or ``-journal`` beside ``path``'s real file that is
    not a file SQLite made for the store: a link, a file with a second name, or a file
    of a user who is neither this process's nor the database's. Nothing is changed.

    Run before SQLite opens anything, a read-only probe included: SQLite running as
    root takes a sidecar it finds over (it gives it the database's owner and mode),
    so after one open a planted file looks like the store's own, while the user who
    planted it keeps reading and writing it through the descriptor they hold.

    Raises:
        UnsafeFileError: a sidecar was planted, or the database is not a regular file.
    """
    _check_files(path, read_only=True, planted_only=True)


def _check_files(path: StrPath, *, read_only: bool, planted_only: bool) -> str | None:
    """:func:`check_ownership` and :func:`refuse_planted`; the real file checked (None
    where nothing is checked)."""
    if os.name == "nt":
        return None
    me = os.geteuid()
    real = real_file(path)
    try:
        info: os.stat_result | None = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        info = None
    owner = me if info is None else info.st_uid
    allowed = 0o600 if info is None else stat.S_IMODE(info.st_mode) | 0o600
    checks = [] if info is None else [(real, info, False)]
    for suffix in SIDECARS:
        try:
            checks.append((real + suffix, os.lstat(real + suffix), True))
        except (FileNotFoundError, NotADirectoryError):
            continue
    for candidate, found, sidecar in checks:
        _judge(
            candidate,
            found,
            me=me,
            owner=owner,
            sidecar=sidecar,
            read_only=read_only,
            planted_only=planted_only,
            allowed=allowed,
        )
    return real


def _judge(
    candidate: str,
    info: os.stat_result,
    *,
    me: int,
    owner: int,
    sidecar: bool,
    read_only: bool,
    planted_only: bool,
    allowed: int = 0o600,
) -> None:
    """:func:`check_ownership` of one file: ``info`` is its ``lstat`` (a sidecar) or
    ``stat`` (the database), ``owner`` the database's owner, ``allowed`` the bits a
    sidecar may keep (the database's)."""
    planted = None  # refused even for a read
    problem = None  # refused for a write, read with a warning
    if not stat.S_ISREG(info.st_mode):
        planted = f"is {_file_kind(info.st_mode)}, not a file SQLite made"
    elif sidecar and info.st_nlink > 1:
        planted = (
            f"has {info.st_nlink} names (hard links), so SQLite would write into another file too"
        )
    elif info.st_uid != me:
        whose = f"is owned by another user, {user_name(info.st_uid)},"
        if sidecar and info.st_uid != owner:
            planted = f"{whose} not by the store's owner, {user_name(owner)}"
        else:
            problem = f"{whose} not by {user_name(me)}, who runs this process"
    elif sidecar and stat.S_IMODE(info.st_mode) & ~allowed & 0o077 and not read_only:
        problem = _make_private(candidate, stat.S_IMODE(info.st_mode), allowed)
    if planted is None and (problem is None or planted_only):
        return
    if planted is None and read_only:
        if _owner_warned.add(candidate):
            logger.warning("%s %s; reading it anyway (opened read-only)", candidate, problem)
        return
    advice = _REMOVE_IT if sidecar else _READ_IT
    raise UnsafeFileError(
        f"{candidate} {planted or problem}; refusing to use it (anyone who can change it"
        f" could read or alter the store). {advice[0].upper()}{advice[1:]}"
    )


def _make_private(candidate: str, mode: int, allowed: int = 0o600) -> str | None:
    """Take the group and other permissions ``allowed`` lacks away from ``candidate``
    (mode ``mode``); None when done, else why it cannot be done."""
    try:
        os.chmod(candidate, mode & allowed)
        mode = stat.S_IMODE(os.stat(candidate).st_mode)
    except OSError as exc:
        return f"cannot be made private ({exc.strerror})"
    if mode & ~allowed & 0o077:
        return f"cannot be made private (its mode stays {mode:04o})"
    return None


def exposure(path: StrPath) -> list[tuple[str, int]]:
    """The store's files others may read (the database and its sidecars, by their real
    path) and its folder when others may write it: ``(path, mode)`` of each."""
    if os.name == "nt":
        return []
    real = real_file(path)
    found: list[tuple[str, int]] = []
    for candidate in (real, *(real + suffix for suffix in SIDECARS)):
        try:
            mode = stat.S_IMODE(os.lstat(candidate).st_mode)
        except OSError:
            continue
        if mode & 0o044:
            found.append((candidate, mode))
    folder = os.path.dirname(real)
    try:
        mode = stat.S_IMODE(os.stat(folder).st_mode)
    except OSError:
        return found
    if mode & 0o022:
        found.append((folder, mode))
    return found


def make_store_private(path: StrPath) -> list[tuple[str, int, int]]:
    """Take group and other permissions away from the database and its sidecars (the
    files of this user; a folder is left as it is): ``(path, old mode, new mode)`` of
    each file changed.

    Raises:
        UnsafeFileError: a file keeps group or other permissions after ``chmod``.
    """
    changed: list[tuple[str, int, int]] = []
    if os.name == "nt":
        return changed
    real = real_file(path)
    for candidate in (real, *(real + suffix for suffix in SIDECARS)):
        try:
            info = os.lstat(candidate)
        except OSError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or not mode & 0o077:
            continue
        problem = _make_private(candidate, mode)
        if problem is not None:
            raise UnsafeFileError(f"{candidate} {problem}")
        changed.append((candidate, mode, mode & 0o600))
    return changed


_shared_warned: BoundedSet[str] = BoundedSet("shared folder warnings", 256)


def _warn_shared_folder(real: str) -> None:
    """Log once per file that the folder of the store ``real`` can be written by others:
    they can make its ``-wal``, ``-shm`` or ``-journal`` between this check and
    SQLite's open, or while no connection has it (SQLite removes the ``-wal`` and
    ``-shm`` when the last one closes). A private folder (``~/.hermes``) shuts that out."""
    folder = os.path.dirname(real)
    try:
        info = os.stat(folder)
    except OSError:
        return
    mode = stat.S_IMODE(info.st_mode)
    shared = mode & 0o002 or (mode & 0o020 and info.st_gid != os.getegid())
    if shared and _shared_warned.add(real):
        logger.warning(
            "%s is in a folder other users can write (%s, mode %04o): they could plant"
            " its -wal, -shm or -journal while no connection has it open; keep the"
            " store in a private folder",
            real,
            folder,
            mode,
        )


def writable_sidecars(path: StrPath) -> None:
    """Give the owner back write access to ``path``'s ``-wal``/``-shm`` files that this
    process owns and cannot write: SQLite makes them with the file's mode, so a reader
    of a read-only file leaves them read-only, and a writer that opened such a ``-shm``
    could not write the store until every connection of its process closed. Run before
    a writable open's first connection; a file another user owns is left to
    :func:`check_ownership`."""
    if os.name == "nt":
        return
    for sidecar in (f"{path}-wal", f"{path}-shm"):
        try:
            info = os.lstat(sidecar)
        except OSError:
            continue
        if (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == os.geteuid()
            and not stat.S_IMODE(info.st_mode) & stat.S_IWUSR
        ):
            try:
                os.chmod(sidecar, 0o600)
            except OSError:
                pass  # the write that follows says what is wrong
            else:
                logger.info("%s was read-only; made writable (0600) again", sidecar)


def secure_files(path: StrPath, *, create: bool) -> None:
    """Create ``path`` with mode 0600 (its folders 0700) if asked, and check it and its sidecars.

    See :func:`check_ownership`. Existing files are changed with ``chmod`` on
    the path: opening and closing a descriptor would drop the POSIX locks
    SQLite holds on the file.
    """
    if os.name == "nt":
        return
    if create:
        make_private_folder(os.path.dirname(os.path.abspath(path)))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.close(os.open(path, flags, 0o600))
        except FileExistsError:
            pass
    check_ownership(path, read_only=False)


def stored_schema_version(conn: sqlite3.Connection) -> int | None:
    """The version row of ``schema_version``, or None when there is none."""
    try:
        row = conn.execute(sqlite_sql.SCHEMA_VERSION).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None or row[0] is None else int(row[0])


def newer_schema_error(path: StrPath, shape: FileShape, doing: str) -> SchemaTooNewError:
    """The error that refuses ``doing`` on a file newer than the schema this package writes."""
    return SchemaTooNewError(
        f"{path} has Hermes schema version {shape.describe_version()}, newer than "
        f"{SCHEMA_VERSION}, the highest hermes_models writes: {doing} refused "
        "(the file is read, never changed)"
    )


def refuse_newer_schema(path: StrPath, shape: FileShape | None, doing: str = "writing") -> None:
    """Raise when ``shape`` is newer than the schema this package writes."""
    if shape is not None and shape.newer:
        raise newer_schema_error(path, shape, doing)


def probe_file(
    path: StrPath, params: dict[str, str] | None = None, *, pages: bool = False
) -> FileShape | None:
    """The structure of ``path`` (:func:`hermes_models.store.shape.probe`), read without any write.

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
    return probe_file_held(path, params, pages=pages, hold=False)[0]


def probe_file_held(
    path: StrPath, params: dict[str, str] | None = None, *, pages: bool = False, hold: bool = True
) -> tuple[FileShape | None, sqlite3.Connection | None]:
    """:func:`probe_file`, and with ``hold`` its read-only connection, left open when
    the file is in WAL mode (None otherwise); the caller closes it.

    While any connection has a WAL file open, SQLite keeps its ``-wal`` and
    ``-shm`` files; when the last one closes, it deletes them. An open that
    holds the probe's connection until its own connection has read the file
    spares the file system deleting the two files and creating them again,
    about half of what opening a store costs. A file not in WAL mode is never
    held: its journal mode may be about to change, which needs the file alone.
    """
    if not _has_content(path):
        return None, None
    try:
        conn = open_file(sqlite_uri(path, **(params or {"mode": "ro"})), uri=True)
    except sqlite3.OperationalError:
        return None, None
    held = False
    try:
        if pages:
            check_pages(path, conn)
        shape = probe(conn)
        held = hold and str(conn.execute(sqlite_sql.JOURNAL_MODE).fetchone()[0]).lower() == "wal"
        return shape, (conn if held else None)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise not_a_database(os.fspath(path)) from exc
        if is_read_only_error(exc):
            raise read_only_file_error(path) from exc
        raise
    finally:
        if not held:
            conn.close()


def check_schema_version(path: StrPath, params: dict[str, str] | None = None) -> None:
    """Refuse to migrate ``path`` when it is newer than v16, reading it without any write.

    Raises:
        NotADatabaseError: the file is not an SQLite database.
        SchemaTooNewError: the file has structure beyond the v16 schema.
        ReadOnlyDatabaseError: see :func:`probe_file`.
    """
    refuse_newer_schema(path, probe_file(path, params), "migrating")


def check_writable(path: StrPath) -> None:
    """Refuse at once a file SQLite could only open read-only (file mode, folder, mount).

    Without this check the first write would wait out every lock retry
    before failing with a misleading "locked" error.

    Raises:
        ReadOnlyDatabaseError: the file or its folder cannot be written.
    """
    if not os.path.isfile(path) or not _has_content(path):
        return
    try:
        # An encrypted file is read as its key is given (its first page): on a
        # read-only file that read may be what SQLite refuses.
        conn = open_file(sqlite_uri(path), uri=True, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        if is_read_only_error(exc):
            raise read_only_file_error(path) from exc
        return  # the open that follows says what is wrong, in its own words
    try:
        # Changing a page is what SQLite refuses on a read-only file; rolled back,
        # the change never reaches the file.
        conn.execute(sqlite_sql.BEGIN_IMMEDIATE)
        version = int(conn.execute(sqlite_sql.USER_VERSION).fetchone()[0])
        conn.execute(sqlite_sql.set_user_version(version))
        conn.execute(sqlite_sql.ROLLBACK)
    except sqlite3.Error as exc:
        if is_read_only_error(exc):
            raise read_only_file_error(path) from exc
        # Busy (another process is writing, so the file can be written), or a
        # failure the open that follows reports in its own words.
    finally:
        conn.close()


def roll_back_hot_journal(path: StrPath) -> None:
    """Roll back what a writer left in ``path``'s rollback journal when it stopped in
    the middle of a transaction (a *hot* journal), as SQLite does on the first read of
    a connection that may write. A read-only connection cannot: the probes of an open
    would fail as if the file could not be written. A journal of a writer still at
    work is not hot; SQLite leaves it alone."""
    if not _has_content(f"{path}-journal"):
        return
    conn = open_file(sqlite_uri(path), uri=True, timeout=5.0, isolation_level=None)
    try:
        conn.execute(sqlite_sql.READ_SCHEMA).fetchone()
    except sqlite3.Error:
        pass  # the open that follows says what is wrong, in its own words
    finally:
        conn.close()


def read_only_params(path: StrPath) -> dict[str, str]:
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
        conn = open_file(sqlite_uri(path, **params), uri=True)
    except sqlite3.Error as exc:
        error = exc
    else:
        try:
            conn.execute(sqlite_sql.READ_SCHEMA).fetchone()
            return params
        except sqlite3.Error as exc:
            error = exc
        finally:
            conn.close()
    journal = f"{path}-journal"
    if is_read_only_error(error) and _has_content(journal):
        name = os.path.basename(journal)
        raise sqlite3.OperationalError(
            f"{path} cannot be read read-only: {name} holds a transaction a writer"
            " left unfinished, which only a writable open rolls back (open it once without"
            " read_only=True, or where it can be written)"
        )
    wal = f"{path}-wal"
    unmerged = _has_content(wal)
    if not is_read_only_error(error) and not (unmerged and "unable to open" in str(error)):
        return params
    if unmerged:
        name = os.path.basename(wal)
        raise sqlite3.OperationalError(
            f"{path} cannot be read here: its folder is read-only and {name} holds "
            "changes not yet merged into the file (open it once where the folder is writable)"
        )
    logger.warning(
        "%s: the folder is read-only and the file has no -shm index; reading it as an "
        "immutable snapshot (later changes by other processes are not seen)",
        path,
    )
    return {**params, "immutable": "1"}


def uri_path(path: str | os.PathLike[str]) -> str:
    """``path`` for a ``file:`` URI, where SQLite decodes ``%XX`` escapes and stops the
    name at ``?`` or ``#``: every byte of its file-system encoding but ASCII letters,
    digits and ``/._-~`` percent-encoded."""
    return quote(os.fsencode(path), safe="/")


def sqlite_uri(path: str | os.PathLike[str], **params: str) -> str:
    """A ``file:`` URI for ``path`` with ``params`` (``mode=ro``, ``immutable=1``) after it."""
    uri = "file:" + uri_path(path)
    if params:
        uri += "?" + "&".join(f"{key}={value}" for key, value in params.items())
    return uri
