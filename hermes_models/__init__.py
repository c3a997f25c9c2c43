"""hermes_models: the Hermes agent session store as peewee models.

Sessions, their messages, token counts and titles live in one SQLite file
shared by several processes. This package gives that file peewee models with
lineage queries, yoyo migrations that own the schema, FTS5 search, a
dict-returning ``SessionDB`` for code written against Hermes, and the
``hermes-models`` command line.
"""

from __future__ import annotations

from pathlib import Path

from . import hermes_state
from .binding import using, write
from .connection import connect
from .db import (
    HermesDatabase,
    apply_wal_with_fallback,
    format_db_unavailable,
    format_session_db_unavailable,
    get_last_init_error,
)
from .errors import (
    BackupError,
    BundleError,
    CompressionInProgressError,
    HermesModelsError,
    ImportConflictError,
    MigrationError,
    MissingDriverError,
    NotADatabaseError,
    PoolTimeoutError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    UnsafeFileError,
    WriteConflictError,
)
from .files import SCHEMA_VERSION
from .hints import TYPE_CHECKING
from .models import CompressionLock, Message, SchemaVersion, Session, StateMeta, SystemPrompt
from .repair import is_malformed_db_error, repair_state_db_schema
from .schema import migrate
from .store import SessionDB

if TYPE_CHECKING:
    from typing import Any

    from .search import search_sql

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFERRED_INDEX_SQL",
    "FTS_SQL",
    "FTS_TRIGRAM_SQL",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "BackupError",
    "BundleError",
    "CompressionInProgressError",
    "CompressionLock",
    "HermesDatabase",
    "HermesModelsError",
    "ImportConflictError",
    "Message",
    "MigrationError",
    "MissingDriverError",
    "NotADatabaseError",
    "PoolTimeoutError",
    "ReadOnlyDatabaseError",
    "SchemaTooNewError",
    "SchemaVersion",
    "Session",
    "SessionDB",
    "StateMeta",
    "SystemPrompt",
    "UnsafeFileError",
    "WriteConflictError",
    "apply_wal_with_fallback",
    "connect",
    "format_db_unavailable",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_malformed_db_error",
    "migrate",
    "repair_state_db_schema",
    "search_sql",
    "using",
    "write",
]

# Hermes' module-level schema texts and default path, computed when read
# (see hermes_models.hermes_state); declared here for type checkers.
DEFAULT_DB_PATH: Path
SCHEMA_SQL: str
DEFERRED_INDEX_SQL: str
FTS_SQL: str
FTS_TRIGRAM_SQL: str


def __getattr__(name: str) -> Any:
    if name in hermes_state.COMPUTED:
        return getattr(hermes_state, name)
    if name == "search_sql":
        from .search import search_sql  # loaded on first use: the package imports faster

        return search_sql
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
