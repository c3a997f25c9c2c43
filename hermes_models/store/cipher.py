"""Encryption at rest: the key of a file, and every connection to a file opened with it.

A store is encrypted with SQLCipher (the ``sqlcipher3`` module, the
``encryption`` extra; :mod:`hermes_models.driver` makes it the process's
module when it is installed). Every page of the file and of its ``-wal`` is
encrypted; the ``-shm`` index holds no content. A connection is given the key
before its first read (``PRAGMA key``); SQLCipher derives the page key from it
(PBKDF2, 256,000 rounds: about a tenth of a second per connection opened).

Where the key comes from, first found: the ``key=`` a library caller gave for
the file (:func:`set_key`: ``connect(key=...)``, ``SessionDB(key=...)``), the
environment variable :data:`KEY_VARIABLE`, the file :data:`KEY_FILE_VARIABLE`
names (this user's, unreadable by others, like the store itself). Never a
command-line argument: ``ps`` shows those to every user.

A key applies to a file that is encrypted, and to a new (missing or empty)
file, which is created encrypted. An existing plain file opened with a key is
opened plain, with one warning (``hermes-models encrypt`` converts it). An
encrypted file opened without a key, or with a key that does not open it, raises
:class:`~hermes_models.errors.EncryptedStoreError` naming the file: nothing is
written to it.

:func:`open_file` opens every connection the package makes to a file (the
store's, the probes', the checks', backups', migrations'); :func:`convert`
encrypts, decrypts or re-keys a file in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import tempfile
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_to_bytes

from .. import driver
from ..driver import sqlite3
from ..errors import (
    EncryptedStoreError,
    MissingDriverError,
    NotADatabaseError,
    UnsafeFileError,
    VerificationError,
)
from . import sqlite_sql

if TYPE_CHECKING:
    from collections.abc import Iterator

logger = logging.getLogger("hermes_models")

#: The environment variable holding the key (a passphrase).
KEY_VARIABLE = "HERMES_MODELS_KEY"
#: The environment variable naming a file that holds the key (its first line).
KEY_FILE_VARIABLE = "HERMES_MODELS_KEY_FILE"
#: The two for the key ``encrypt`` and ``rekey`` encrypt a file under.
NEW_KEY_VARIABLE = "HERMES_MODELS_NEW_KEY"
NEW_KEY_FILE_VARIABLE = "HERMES_MODELS_NEW_KEY_FILE"

#: What a plain SQLite file starts with.
_MAGIC = b"SQLite format 3\x00"
#: SQLCipher 4's key derivation (its defaults): PBKDF2-HMAC-SHA512, these rounds, 32 bytes.
KDF_ROUNDS = 256_000
#: A raw key that opens nothing: a connection given it reads the file's salt.
_ANY_RAW_KEY = "00" * 32
#: Keys derived from a passphrase and a file's salt (each derivation costs ~0.1 s).
_derived: dict[tuple[str, str], str] = {}

#: Keys given by library callers, by the file's absolute path.
_given: dict[str, str] = {}
#: Files opened plain although a key was given (said once each).
_plain_despite_key: set[str] = set()
#: Files a connection of this process opened with a key: the key, by absolute path.
_opened_with: dict[str, str] = {}
_lock = threading.Lock()
#: The module's connect, as it was when the package was imported.
_connect = sqlite3.connect


def check_key(key: object, argument: str = "key") -> str:
    """``key`` checked: non-empty text without NUL or line breaks.

    Raises:
        TypeError: ``key`` is not text.
        ValueError: ``key`` is empty or holds NUL or a line break.
    """
    if not isinstance(key, str):
        raise TypeError(f"{argument} must be text, not {type(key).__name__}")
    if not key:
        raise ValueError(f"{argument} is empty")
    if any(c in key for c in "\x00\r\n"):
        raise ValueError(f"{argument} holds NUL or a line break")
    return key


def set_key(path: str, key: str | None) -> None:
    """Use ``key`` for every connection this process opens to the file ``path`` (an
    absolute path); None forgets a key given before (the environment's applies again).

    Raises:
        MissingDriverError: a key is given and sqlcipher3 is not installed.
    """
    if key is None:
        with _lock:
            _given.pop(path, None)
        return
    check_key(key)
    require_encryption(path)
    with _lock:
        _given[path] = key
        _plain_despite_key.discard(path)


def require_encryption(path: str) -> None:
    """Refuse a key where connections cannot encrypt (plain SQLite ignores ``PRAGMA key``:
    the file would be written in the clear).

    Raises:
        MissingDriverError: sqlcipher3 is not the module connections run on.
    """
    if not driver.ENCRYPTION:
        raise MissingDriverError(
            f"{path}: a key was given, but connections run on {driver.MODULE_NAME}, which"
            " cannot encrypt: pip install 'hermes_models[encryption]' (sqlcipher3)"
            f" and leave {driver.MODULE_VARIABLE} unset or set it to sqlcipher3"
        )


def read_key_file(name: str, variable: str = KEY_FILE_VARIABLE) -> str:
    """The key in the file ``name``: its first line, without the line break.

    Raises:
        UnsafeFileError: the file is not a regular file of this user's, or others
            may read or write it.
        ValueError: the file holds no key.
        OSError: it cannot be read.
    """
    info = os.stat(name)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(f"{variable}: {name} is not a regular file")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise UnsafeFileError(f"{variable}: {name} belongs to another user")
    if info.st_mode & 0o077:
        raise UnsafeFileError(
            f"{variable}: {name} can be read by others (mode"
            f" {stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
        )
    with open(name, encoding="utf-8") as file:
        first = file.readline().rstrip("\r\n")
    if not first:
        raise ValueError(f"{variable}: {name} holds no key (its first line is empty)")
    return check_key(first, variable)


def environment_key(*, new: bool = False) -> tuple[str, str] | None:
    """The key the environment gives, and where from (``"HERMES_MODELS_KEY"`` or the
    key file's variable); None when neither is set. With ``new``, the key a file is
    to be encrypted under (:data:`NEW_KEY_VARIABLE`, :data:`NEW_KEY_FILE_VARIABLE`).

    Raises:
        UnsafeFileError, ValueError, OSError: see :func:`read_key_file`.
    """
    variable, file_variable = (
        (NEW_KEY_VARIABLE, NEW_KEY_FILE_VARIABLE) if new else (KEY_VARIABLE, KEY_FILE_VARIABLE)
    )
    value = os.environ.get(variable)
    if value:
        return check_key(value, variable), variable
    name = os.environ.get(file_variable)
    if name:
        return read_key_file(name, file_variable), f"{file_variable} ({name})"
    return None


def key_for(path: str) -> tuple[str, str] | None:
    """The key for the file ``path`` and where it came from; None when none is given."""
    with _lock:
        given = _given.get(path)
    if given is not None:
        return given, "the key given"
    return environment_key()


def file_path(database: str, uri: bool) -> str | None:
    """The file a connection's ``database`` argument names; None for a database in memory."""
    if not uri:
        return None if database in ("", ":memory:") else os.path.abspath(database)
    if not database.startswith("file:"):
        return None
    name = database[len("file:") :].split("?", 1)[0].split("#", 1)[0]
    if not name or name == ":memory:":
        return None
    return os.path.abspath(os.fsdecode(unquote_to_bytes(name)))


def looks_encrypted(path: str) -> bool:
    """True when ``path`` holds pages that do not start as an SQLite file does: an
    SQLCipher file (its first bytes are a random salt).

    Reads the file directly: only where no connection of this process holds it
    (closing a descriptor drops the POSIX locks the process holds on the file),
    which is where a connection just failed to read it.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as file:
            head = file.read(len(_MAGIC))
    except OSError:
        return False
    return size >= 512 and size % 512 == 0 and head != _MAGIC and head.strip(b"\x00") != b""


def encrypted_error(path: str, *, key_source: str | None) -> EncryptedStoreError:
    """The error for a file that looks encrypted (its first bytes are not SQLite's) and
    that no key given opens: a random file looks the same, so the words say both."""
    if not driver.ENCRYPTION:
        return EncryptedStoreError(
            f"{path} is not an SQLite database, or is encrypted (then install the"
            " encryption extra, pip install 'hermes_models[encryption]', and set"
            f" {KEY_VARIABLE} or {KEY_FILE_VARIABLE})"
        )
    if key_source is None:
        return EncryptedStoreError(
            f"{path} is encrypted, or not an SQLite database; set {KEY_VARIABLE} or"
            f" {KEY_FILE_VARIABLE} (or --key-prompt on the command line, key= in Python)"
        )
    return EncryptedStoreError(
        f"{path} is encrypted and {key_source} does not open it, or is not an SQLite database"
    )


def _starts_as_sqlite(path: str) -> bool:
    """True when the file ``path`` begins as a plain SQLite file does (read directly:
    see :func:`looks_encrypted` for where that is safe)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def not_a_database(path: str) -> NotADatabaseError:
    """The error for a file SQLite read as "not a database": encrypted, or not SQLite."""
    if looks_encrypted(path):
        try:
            found = key_for(path)
        except (OSError, ValueError, UnsafeFileError):
            found = None
        return encrypted_error(path, key_source=None if found is None else found[1])
    return NotADatabaseError(f"{path} is not an SQLite database")


def _is_not_a_database(exc: BaseException) -> bool:
    return "not a database" in str(exc)


_KEEP = object()


def open_file(database: str, key: Any = _KEEP, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(database, **kwargs)`` (the driver's module), given the file's key
    where one applies (see the module's docstring); ``key`` (a key, or None for none)
    instead of the one :func:`key_for` finds.

    Raises:
        EncryptedStoreError: the file is encrypted and the key does not open it.
        MissingDriverError: a key applies and sqlcipher3 is not installed.
    """
    path = file_path(database, bool(kwargs.get("uri")))
    found: tuple[str, str] | None
    if key is _KEEP:
        found = None if path is None or path in _plain_despite_key else key_for(path)
    else:
        found = None if key is None else (check_key(key), "the key given")
    conn: sqlite3.Connection = _connect(database, **kwargs)
    if found is None:
        return conn
    assert path is not None
    try:
        require_encryption(path)
        conn.execute(sqlite_sql.CIPHER_LOG_NONE).fetchall()
        raw = _raw_key(path, found[0])
        if raw == "":  # the file is plain: opened as it is
            _plain_despite(path, found[1], key is _KEEP)
            return conn
        conn.execute(sqlite_sql.set_key(found[0]) if raw is None else sqlite_sql.set_raw_key(raw))
        try:
            conn.execute(sqlite_sql.READ_FIRST_PAGE).fetchone()
        except sqlite3.DatabaseError as exc:
            # The key opened the first page and its schema does not parse: a file to
            # repair (repair_state_db_schema edits sqlite_master on this connection).
            if "malformed database schema" not in str(exc).lower():
                raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        if not _is_not_a_database(exc):
            raise
        if looks_encrypted(path):
            raise encrypted_error(path, key_source=found[1]) from None
        # A plain file: opened as it is (one that is not SQLite at all is refused by
        # the first read, without a word about keys; read as looks_encrypted reads).
        if _starts_as_sqlite(path):
            _plain_despite(path, found[1], key is _KEEP)
        plain: sqlite3.Connection = _connect(database, **kwargs)
        return plain
    except BaseException:
        conn.close()
        raise
    with _lock:
        _opened_with[path] = found[0]
    return conn


def _plain_despite(path: str, source: str, remember: bool) -> None:
    """Note that the plain file ``path`` is opened without the key from ``source``."""
    if not remember:
        return
    with _lock:
        first = path not in _plain_despite_key
        _plain_despite_key.add(path)
    if first:
        logger.warning(
            "%s is not encrypted: opened without the key from %s"
            " (hermes-models encrypt converts it)",
            path,
            source,
        )


def _raw_key(path: str, passphrase: str) -> str | None:
    """The raw key (key and salt, hex) that opens the existing file ``path`` under
    ``passphrase``, derived once per process and salt: a connection given the
    passphrase itself derives it again (~0.1 s, and a store's open makes several).
    ``""`` when the file is plain; None for a new file, or when the salt cannot be
    read (the passphrase is used then)."""
    try:
        if os.path.getsize(path) == 0:
            return None
    except OSError:
        return None
    # A connection of its own (never one of a shared cache, as yoyo's are), read-only.
    probe = _connect(f"file:{quote(os.fsencode(path), safe='/')}?mode=ro", uri=True)
    try:
        probe.execute(sqlite_sql.set_raw_key(_ANY_RAW_KEY))
        row = probe.execute(sqlite_sql.CIPHER_SALT).fetchone()
    except sqlite3.Error:
        return None
    finally:
        probe.close()
    salt = "" if row is None or row[0] is None else str(row[0]).lower()
    if len(salt) != 32:
        return None
    if bytes.fromhex(salt) == _MAGIC:
        return ""
    with _lock:
        derived = _derived.get((passphrase, salt))
    if derived is None:
        derived = hashlib.pbkdf2_hmac(
            "sha512", passphrase.encode("utf-8"), bytes.fromhex(salt), KDF_ROUNDS, 32
        ).hex()
        with _lock:
            _derived[(passphrase, salt)] = derived
    return derived + salt


def opened_key(path: str) -> str | None:
    """The key a connection of this process opened the file ``path`` with; None when
    its connections opened it plain (or none has opened it yet)."""
    with _lock:
        return None if path in _plain_despite_key else _opened_with.get(path)


def is_open_encrypted(path: str) -> bool:
    """True when this process opened the file ``path`` with a key (it is encrypted)."""
    return opened_key(path) is not None


def is_encrypted(path: str) -> bool:
    """True when the file ``path`` is encrypted (see :func:`looks_encrypted`: for a
    file no connection of this process holds)."""
    return looks_encrypted(path)


def cipher_version() -> str | None:
    """The SQLCipher release connections run (``"4.19.0 community"``); None without it."""
    conn = _connect(":memory:")
    try:
        row = conn.execute(sqlite_sql.CIPHER_VERSION).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


# -- converting a file in place ---------------------------------------------------------


@contextlib.contextmanager
def _private_temporary(path: str, label: str) -> Iterator[str]:
    """A new empty file 0600 beside ``path``, removed on the way out unless renamed."""
    folder, name = os.path.split(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.{label}-", dir=folder)
    os.close(fd)
    os.chmod(temporary, 0o600)
    try:
        yield temporary
    finally:
        for leftover in (temporary, f"{temporary}-journal", f"{temporary}-wal", f"{temporary}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _counts(conn: Any) -> dict[str, int]:
    """Rows by table of ``conn``'s main database."""
    names = [str(row[0]) for row in conn.execute(sqlite_sql.TABLES_TO_COUNT)]
    counts = {}
    for name in names:
        counts[name] = int(conn.execute(sqlite_sql.count_table_rows(name)).fetchone()[0])
    return counts


def convert(path: str, *, old_key: str | None, new_key: str | None) -> dict[str, Any]:
    """Encrypt (``old_key`` None), decrypt (``new_key`` None) or re-key the store ``path``
    in place, and return what was done: ``tables`` (rows by table), ``pages``, ``bytes``.

    The converted copy is written (``sqlcipher_export``) into a private temporary
    file in the same folder while this connection holds the file's write lock, synced,
    checked (``integrity_check``, and every table's rows counted against the
    original's), then renamed over the original; the ``-wal`` and ``-shm`` of the
    original go just before the rename. The original's bytes are not overwritten:
    the file system may keep its old blocks (see docs/encryption.md). A failure
    leaves the original as it was.

    It needs the file alone: a store another connection holds open (a gateway)
    is refused, since that process would go on writing into the replaced file.

    Raises:
        EncryptedStoreError: ``old_key`` does not open the file (or it is encrypted
            and ``old_key`` is None).
        NotADatabaseError: the file is not an SQLite database.
        OperationalError: another connection has the file open or locked.
        VerificationError: the converted copy did not check out (the original stays).
    """
    if old_key is None and new_key is None:
        raise ValueError("nothing to do: neither an old nor a new key")
    require_encryption(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    conn = open_file(path, key=old_key, isolation_level=None, timeout=0)
    try:
        try:
            conn.execute(sqlite_sql.READ_FIRST_PAGE).fetchone()
        except sqlite3.DatabaseError as exc:
            if _is_not_a_database(exc):
                raise not_a_database(path) from None
            raise
        if old_key is None and looks_encrypted(path):
            raise encrypted_error(path, key_source=None)
        # Out of WAL: SQLite allows it only to the one connection that has the file
        # open, so a store a gateway holds is refused here; the -wal is merged and goes.
        was = str(conn.execute(sqlite_sql.JOURNAL_MODE).fetchone()[0]).lower()
        try:
            mode = str(conn.execute(sqlite_sql.JOURNAL_MODE_DELETE).fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            raise sqlite3.OperationalError(
                f"{path} is open in another process ({exc}); stop the programs using it"
                " (a gateway, Hermes) and run again"
            ) from None
        if mode != "delete":
            raise sqlite3.OperationalError(f"{path}: its journal could not leave {mode}")
        # Hold the file from here until the connection closes, after the rename: no
        # other connection reads or writes it meanwhile.
        conn.execute(sqlite_sql.LOCKING_MODE_EXCLUSIVE).fetchone()
        conn.execute(sqlite_sql.BEGIN_EXCLUSIVE)
        conn.execute(sqlite_sql.COMMIT)
        before = _counts(conn)
        version = int(conn.execute(sqlite_sql.CONVERTED_USER_VERSION).fetchone()[0])
        label = "encrypt" if old_key is None else "decrypt" if new_key is None else "rekey"
        with _private_temporary(path, label) as temporary:
            conn.execute(sqlite_sql.ATTACH_CONVERTED, (temporary, new_key or ""))
            try:
                conn.execute(sqlite_sql.EXPORT_CONVERTED).fetchone()
                conn.execute(sqlite_sql.set_converted_user_version(version))
            finally:
                conn.execute(sqlite_sql.DETACH_CONVERTED)
            _sync(temporary)
            check = open_file(temporary, key=new_key, isolation_level=None)
            try:
                found = [str(row[0]) for row in check.execute(sqlite_sql.INTEGRITY_CHECK)]
                after = _counts(check)
                pages = int(check.execute(sqlite_sql.PAGE_COUNT).fetchone()[0])
            finally:
                check.close()
            if found != ["ok"]:
                raise VerificationError(f"{path}: the converted copy failed: {found[:5]}")
            if after != before:
                raise VerificationError(f"{path}: the converted copy's rows differ")
            # The original's sidecars go while this connection still holds it (out of
            # WAL there is no -wal; a -shm of its WAL days may be left). Never after the
            # rename: a process that opens the new file at once owns its sidecars then.
            for sidecar in (f"{path}-wal", f"{path}-shm", f"{path}-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(sidecar)
            os.replace(temporary, path)
            _sync(os.path.dirname(path) or ".")
    finally:
        conn.close()
    if was == "wal":  # the converted file keeps the journal mode the original had
        again = open_file(path, key=new_key, isolation_level=None)
        try:
            again.execute(sqlite_sql.JOURNAL_MODE_WAL).fetchone()
        finally:
            again.close()
    with _lock:
        _plain_despite_key.discard(path)
        _opened_with.pop(path, None)
        if new_key is None:
            _given.pop(path, None)
        elif path in _given:
            _given[path] = new_key
    return {"tables": before, "pages": pages, "bytes": os.path.getsize(path)}


__all__ = [
    "KEY_FILE_VARIABLE",
    "KEY_VARIABLE",
    "NEW_KEY_FILE_VARIABLE",
    "NEW_KEY_VARIABLE",
    "check_key",
    "cipher_version",
    "convert",
    "encrypted_error",
    "environment_key",
    "file_path",
    "is_encrypted",
    "is_open_encrypted",
    "key_for",
    "looks_encrypted",
    "not_a_database",
    "open_file",
    "opened_key",
    "read_key_file",
    "require_encryption",
    "set_key",
]
