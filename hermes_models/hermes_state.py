"""The public names of Hermes' ``hermes_state`` module, in one place.

Code written against Hermes imports its store from ``hermes_state``; point
that name here and the imports keep working::

    import hermes_models.hermes_state as hermes_state
    from hermes_models.hermes_state import SessionDB, SCHEMA_VERSION

Every name is also importable from ``hermes_models`` itself. The schema
texts are read from the migrations on first use (see :mod:`hermes_models.store.ddl`)
and ``DEFAULT_DB_PATH`` is computed when it is read, from ``$HERMES_HOME`` at
that moment, which is the file ``SessionDB()`` opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import is_malformed_db_error
from .sessiondb import SessionDB
from .store import (
    SCHEMA_VERSION,
    apply_wal_with_fallback,
    ddl,
    format_session_db_unavailable,
    get_last_init_error,
    repair_state_db_schema,
    resolve_path,
)

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFERRED_INDEX_SQL",
    "FTS_SQL",
    "FTS_TRIGRAM_SQL",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "SessionDB",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_malformed_db_error",
    "repair_state_db_schema",
]

# Declared for type checkers; the values come from __getattr__ when read.
DEFAULT_DB_PATH: Path
SCHEMA_SQL: str
DEFERRED_INDEX_SQL: str
FTS_SQL: str
FTS_TRIGRAM_SQL: str


def _schema_text(name: str) -> str:

    return str(getattr(ddl, name)())


#: Names whose values are computed when read.
COMPUTED = {
    "DEFAULT_DB_PATH": lambda: resolve_path(None),
    "SCHEMA_SQL": lambda: _schema_text("schema_sql"),
    "DEFERRED_INDEX_SQL": lambda: _schema_text("deferred_index_sql"),
    "FTS_SQL": lambda: _schema_text("fts_sql"),
    "FTS_TRIGRAM_SQL": lambda: _schema_text("fts_trigram_sql"),
}


def __getattr__(name: str) -> Any:
    compute = COMPUTED.get(name)
    if compute is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return compute()
