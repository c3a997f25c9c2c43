"""hermes_models: the Hermes agent session store as peewee models.

Sessions, their messages, token counts and titles live in one SQLite file
shared by several processes. This package gives that file peewee models with
lineage queries, yoyo migrations that own the schema, FTS5 search, a
dict-returning ``SessionDB`` for code written against Hermes, and the
``hermes-models`` command line.

The package is built in parts, each a subpackage with one public face
(docs/architecture.md): ``store`` (opening a file or a server, the write
path, migrations), ``models``, ``conversations`` (the rules), ``search``,
``transfer`` (bundles, imports, copies, backups) and ``cli``, with
``SessionDB`` (``sessiondb``) and Hermes' module names (``hermes_state``)
on top. The names below are the package's public face.
"""

from __future__ import annotations

from typing import Any

from . import conversations, hermes_state, models, search
from .driver import sqlite_info
from .errors import (
    BackupError,
    BundleError,
    CompressionInProgressError,
    EncryptedStoreError,
    HermesModelsError,
    ImportConflictError,
    MigrationError,
    MissingDriverError,
    NotADatabaseError,
    PoolTimeoutError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    UnsafeFileError,
    UnsupportedServerError,
    WriteConflictError,
    is_malformed_db_error,
)
from .models import CompressionLock, Message, SchemaVersion, Session, StateMeta, SystemPrompt
from .search import search_sql
from .sessiondb import SessionDB
from .store import (
    SCHEMA_VERSION,
    HermesDatabase,
    apply_wal_with_fallback,
    connect,
    decrypt_store,
    encrypt_store,
    format_db_unavailable,
    format_session_db_unavailable,
    get_last_init_error,
    migrate,
    rekey_store,
    repair_state_db_schema,
    using,
    write,
)
from .version import __version__ as __version__

#: Hermes' module-level schema texts and default path, computed each time they are
#: read (``DEFAULT_DB_PATH`` follows ``$HERMES_HOME``): see hermes_models.hermes_state.
_COMPUTED = frozenset(
    ("DEFAULT_DB_PATH", "SCHEMA_SQL", "DEFERRED_INDEX_SQL", "FTS_SQL", "FTS_TRIGRAM_SQL")
)


# The models' actions (Session.append, Message.search, ...) run the rules of the parts
# built on them; the package hands those over here, where every part is known.
models.use_rules(
    models.Rules(
        append_message=conversations.append_message,
        branch=conversations.branch,
        compress=conversations.compress,
        delegate=conversations.delegate,
        rewind_to_message=conversations.rewind_to_message,
        restore_rewound=conversations.restore_rewound,
        search_messages=search.search_messages,
        matching=search.matching,
    )
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
    "EncryptedStoreError",
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
    "UnsupportedServerError",
    "WriteConflictError",
    "apply_wal_with_fallback",
    "connect",
    "decrypt_store",
    "encrypt_store",
    "format_db_unavailable",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_malformed_db_error",
    "migrate",
    "rekey_store",
    "repair_state_db_schema",
    "search_sql",
    "sqlite_info",
    "using",
    "write",
]


def __getattr__(name: str) -> Any:
    if name in _COMPUTED:
        return getattr(hermes_state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_COMPUTED})
