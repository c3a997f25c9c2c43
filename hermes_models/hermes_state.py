"""The public names of Hermes' ``hermes_state`` module, in one place.

Code written against Hermes imports its store from ``hermes_state``; point
that name here and the imports keep working::

    import hermes_models.hermes_state as hermes_state
    from hermes_models.hermes_state import SessionDB, SCHEMA_VERSION

Every public name is also importable from ``hermes_models`` itself. The schema
texts are read from the migrations on first use (see :mod:`hermes_models.store.ddl`)
and ``DEFAULT_DB_PATH`` is computed when it is read, from ``$HERMES_HOME`` at
that moment, which is the file ``SessionDB()`` opens; ``from hermes_state import
DEFAULT_DB_PATH`` reads it too.

Three private names of Hermes' module are here as well, for Hermes' own code
that imports them (its ``hermes sessions repair`` imports ``_db_opens_cleanly``):
``_db_opens_cleanly``, ``_set_last_init_error`` and ``_WAL_INCOMPAT_MARKERS``.
With :mod:`hermes_models.hermes_shim` installed, Hermes' processes import this
module as ``hermes_state``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import is_malformed_db_error
from .sessiondb import SessionDB
from .store import (
    SCHEMA_VERSION,
    WAL_INCOMPAT_MARKERS,
    apply_wal_with_fallback,
    ddl,
    format_session_db_unavailable,
    get_last_init_error,
    health_problem,
    repair_state_db_schema,
    resolve_path,
    set_last_init_error,
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

#: Hermes' private helpers under their names there: the reason a file does not open
#: cleanly on a fresh connection (None when it does), setting or clearing the last
#: open error, and the error texts of a file system without WAL.
_db_opens_cleanly = health_problem
_set_last_init_error = set_last_init_error
_WAL_INCOMPAT_MARKERS = WAL_INCOMPAT_MARKERS

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
