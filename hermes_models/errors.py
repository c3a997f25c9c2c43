"""The exceptions hermes_models raises on its own account, and what SQLite's say."""

from __future__ import annotations

import peewee

from .driver import sqlite3


class HermesModelsError(Exception):
    """Base class of every error hermes_models raises on its own account."""


class NotADatabaseError(HermesModelsError):
    """The file exists but is not an SQLite database."""


class EncryptedStoreError(NotADatabaseError):
    """The file is encrypted (SQLCipher) and no key given opens it, or this install
    cannot decrypt (the ``encryption`` extra is missing)."""


class MigrationError(HermesModelsError):
    """Migrations could not be found, locked or applied."""


class WriteConflictError(HermesModelsError, sqlite3.OperationalError):
    """A write stayed locked out by other writers for the whole retry budget."""


class UnsupportedServerError(HermesModelsError):
    """The PostgreSQL server is older than the release this package needs."""


class PoolTimeoutError(HermesModelsError, sqlite3.OperationalError):
    """Every connection of a PostgreSQL handle's pool stayed in use for the whole
    ``pool_timeout`` (the server's counterpart of a file locked too long)."""


class ReadOnlyDatabaseError(HermesModelsError, sqlite3.OperationalError):
    """A write was refused: the handle is read-only, or the file or its folder is."""


class SchemaTooNewError(ReadOnlyDatabaseError):
    """A write or migration was refused: the file has a newer Hermes schema than the
    v16 this package writes (such files are opened read-only and never changed)."""


class UnsafeFileError(ReadOnlyDatabaseError):
    """A database file or sidecar is owned by another user, or cannot be made private."""


class CompressionInProgressError(HermesModelsError):
    """Another holder owns the compression lock of this session."""


class BundleError(HermesModelsError, ValueError):
    """An export bundle or transcript file cannot be read (a ``ValueError``, like
    ``json.JSONDecodeError``)."""


class BackupError(HermesModelsError):
    """A backup could not be made, or the copy failed its checks (nothing was kept)."""


class ImportConflictError(HermesModelsError):
    """Another import into the same file, or a session created meanwhile, stops an import."""


class CopyError(HermesModelsError):
    """A store cannot be copied: the source cannot be read as one, or the target refuses it."""


class TargetNotEmptyError(CopyError):
    """The target of a copy holds rows already (and no unfinished copy of the same source)."""


class VerificationError(CopyError):
    """A copied store differs from its source; the message names the table and session."""


class MissingDriverError(HermesModelsError, ModuleNotFoundError):
    """A store on a PostgreSQL server was asked for, and psycopg (the ``postgresql``
    extra) is not installed."""


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


#: Error texts SQLite gives when it cannot parse a file's schema or pages.
MALFORMED_MARKERS = ("malformed database schema", "database disk image is malformed")


def is_malformed_db_error(exc: BaseException) -> bool:
    """True for an ``sqlite3.DatabaseError`` saying the schema or file is malformed."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in MALFORMED_MARKERS)


#: sqlite3's exception classes by DB-API name: what a driver's or peewee's error of
#: that class becomes for code written against Hermes' store.
SQLITE_ERRORS: dict[str, type[sqlite3.Error]] = {
    "IntegrityError": sqlite3.IntegrityError,
    "OperationalError": sqlite3.OperationalError,
    "ProgrammingError": sqlite3.ProgrammingError,
    "InterfaceError": sqlite3.InterfaceError,
    "DataError": sqlite3.DataError,
    "NotSupportedError": sqlite3.NotSupportedError,
    "InternalError": sqlite3.InternalError,
}


__all__ = [
    "MALFORMED_MARKERS",
    "SQLITE_ERRORS",
    "BackupError",
    "BundleError",
    "CompressionInProgressError",
    "CopyError",
    "EncryptedStoreError",
    "HermesModelsError",
    "ImportConflictError",
    "MigrationError",
    "MissingDriverError",
    "NotADatabaseError",
    "PoolTimeoutError",
    "ReadOnlyDatabaseError",
    "SchemaTooNewError",
    "TargetNotEmptyError",
    "UnsafeFileError",
    "VerificationError",
    "WriteConflictError",
    "is_lock_error",
    "is_malformed_db_error",
    "is_read_only_error",
]
