"""hermes_models: the Hermes agent session store as peewee models.

Sessions, their messages, token counts and titles live in one SQLite file
shared by several processes. This package gives that file peewee models with
lineage queries, yoyo migrations that own the schema, FTS5 search, a
dict-returning ``SessionDB`` for code written against Hermes, and the
``hermes-models`` command line.

Every public name is loaded from its module on first use (PEP 562):
``import hermes_models`` itself loads nothing but this module, so the
``hermes-models`` command can answer a listing without loading peewee.
``from hermes_models import SessionDB`` costs what it always did.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from .binding import using, write
    from .connection import connect
    from .db import (
        HermesDatabase,
        format_db_unavailable,
        format_session_db_unavailable,
        get_last_init_error,
    )
    from .driver import sqlite_info
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
        is_malformed_db_error,
    )
    from .files import SCHEMA_VERSION
    from .journal import apply_wal_with_fallback
    from .models import CompressionLock, Message, SchemaVersion, Session, StateMeta, SystemPrompt
    from .repair import repair_state_db_schema
    from .schema import migrate
    from .search import search_sql
    from .store import SessionDB

    # Hermes' module-level schema texts and default path, computed when read
    # (see hermes_models.hermes_state).
    DEFAULT_DB_PATH: Path
    SCHEMA_SQL: str
    DEFERRED_INDEX_SQL: str
    FTS_SQL: str
    FTS_TRIGRAM_SQL: str

__version__ = "0.1.0"

#: Where each public name lives (its module, relative to this package).
_HOMES = {
    "using": "binding",
    "write": "binding",
    "connect": "connection",
    "HermesDatabase": "db",
    "apply_wal_with_fallback": "journal",
    "sqlite_info": "driver",
    "format_db_unavailable": "db",
    "format_session_db_unavailable": "db",
    "get_last_init_error": "db",
    **dict.fromkeys(
        (
            "BackupError",
            "BundleError",
            "CompressionInProgressError",
            "HermesModelsError",
            "ImportConflictError",
            "MigrationError",
            "MissingDriverError",
            "NotADatabaseError",
            "PoolTimeoutError",
            "ReadOnlyDatabaseError",
            "SchemaTooNewError",
            "UnsafeFileError",
            "WriteConflictError",
        ),
        "errors",
    ),
    "SCHEMA_VERSION": "files",
    **dict.fromkeys(
        ("CompressionLock", "Message", "SchemaVersion", "Session", "StateMeta", "SystemPrompt"),
        "models",
    ),
    "is_malformed_db_error": "errors",
    "repair_state_db_schema": "repair",
    "migrate": "schema",
    "search_sql": "search",
    "SessionDB": "store",
    **dict.fromkeys(
        ("DEFAULT_DB_PATH", "SCHEMA_SQL", "DEFERRED_INDEX_SQL", "FTS_SQL", "FTS_TRIGRAM_SQL"),
        "hermes_state",
    ),
}

#: Names computed each time they are read (``DEFAULT_DB_PATH`` follows ``$HERMES_HOME``).
_COMPUTED = frozenset(
    ("DEFAULT_DB_PATH", "SCHEMA_SQL", "DEFERRED_INDEX_SQL", "FTS_SQL", "FTS_TRIGRAM_SQL")
)

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
    "sqlite_info",
    "using",
    "write",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__ (a builtin) rather than importlib: the package itself loads nothing.
    value = getattr(__import__(f"{__name__}.{home}", fromlist=(name,)), name)
    if name not in _COMPUTED:
        globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
