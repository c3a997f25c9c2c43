"""Importing this module makes every new sqlite3 connection of the process behave
like a SQLite build without FTS5: creating or dropping an FTS5 table fails, and
so does any read or write of the full-text tables (a trigger writing to one
included). Tests run code under it in a child process:
``python -c "import no_fts5; ..."`` with this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Any

from hermes_models.driver import sqlite3
from hermes_models.store import cipher as _cipher

_connect = sqlite3.connect
_TOUCH = (sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)


def _full_text(table: str) -> bool:
    """True for the FTS5 tables and their shadow tables (the gram index's held grams
    and list of changed rows - and migration 0007's mark and list - are plain tables,
    which any build reads)."""
    if table.startswith("messages_fts") or table == "messages_cjk":
        return True
    return table.startswith("messages_cjk_") and table not in (
        "messages_cjk_grams",
        "messages_cjk_changed",
        "messages_cjk_mark",
        "messages_cjk_gone",
    )


def _authorize(action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
    if action in (sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE):
        if str(arg2).lower() == "fts5":
            return sqlite3.SQLITE_DENY
    if action in _TOUCH and _full_text(str(arg1)):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn = _connect(*args, **kwargs)
    conn.set_authorizer(_authorize)
    return conn


sqlite3.connect = connect  # type: ignore[assignment]
# The package opens every connection to a file through store.cipher, which kept the
# module's connect when it was imported (before this module ran).
_cipher.__dict__["_connect"] = connect
