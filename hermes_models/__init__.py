"""hermes_models: the Hermes agent session store as peewee models.

Sessions, their messages, token counts and titles live in one SQLite file
shared by several processes. This package gives that file peewee models with
lineage queries, yoyo migrations that own the schema, FTS5 search, a
dict-returning ``SessionDB`` for code written against Hermes, and the
``hermes-models`` command line.
"""

from __future__ import annotations

from .db import (
    SCHEMA_VERSION,
    HermesDatabase,
    connect,
    format_db_unavailable,
    get_last_init_error,
    using,
    write,
)
from .errors import (
    BackupError,
    BundleError,
    CompressionInProgressError,
    HermesModelsError,
    MigrationError,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    WriteConflictError,
)
from .models import CompressionLock, Message, SchemaVersion, Session, StateMeta
from .schema import migrate
from .store import SessionDB

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "BackupError",
    "BundleError",
    "CompressionInProgressError",
    "CompressionLock",
    "HermesDatabase",
    "HermesModelsError",
    "Message",
    "MigrationError",
    "NotADatabaseError",
    "ReadOnlyDatabaseError",
    "SchemaTooNewError",
    "SchemaVersion",
    "Session",
    "SessionDB",
    "StateMeta",
    "WriteConflictError",
    "connect",
    "format_db_unavailable",
    "get_last_init_error",
    "migrate",
    "using",
    "write",
]
