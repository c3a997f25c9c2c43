"""The schema as SQL text, read from the migrations.

Hermes' own module publishes its schema as strings (``SCHEMA_SQL``,
``FTS_SQL``, ...), and some callers build scratch databases from them. Here
the schema lives in ``migrations/`` and nowhere else, so these strings are
read from the migration files, never kept as a second copy:

* the table and index statements come from the text of the v16 schema
  migration; the indexes on columns older Hermes files lack (``active``,
  ``platform_message_id``, ``title``) are kept apart, as Hermes keeps them,
  so the rest runs on such a file;
* the full-text statements are the ones the search migration creates,
  captured by running it on an empty in-memory database.

Every statement is written ``IF NOT EXISTS``, so running a text twice is
harmless. The texts are built on first use and cached.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import ModuleType
from typing import cast

from ..driver import sqlite3
from . import sqlite_sql
from .schema import migrations_dir

#: The migration holding the tables and indexes of the v16 layout.
SCHEMA_MIGRATION = "0002_hermes_v16_schema.sql"
#: The migration creating the full-text tables and their triggers.
SEARCH_MIGRATION = "0003_message_search.py"
#: Indexes over columns added after Hermes' first schema (created after them).
DEFERRED_INDEXES = frozenset(
    {"idx_messages_session_active", "idx_messages_platform_msg_id", "idx_sessions_title_unique"}
)

_CREATE = re.compile(
    r"^CREATE\s+(?P<kind>UNIQUE\s+INDEX|INDEX|TABLE|VIRTUAL\s+TABLE|TRIGGER)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>\w+)",
    re.IGNORECASE,
)


def migration_module(filename: str, folder: Path | None = None) -> ModuleType:
    """A Python migration loaded by yoyo, as a module (its step functions are public)."""
    from yoyo.migrations import Migration  # yoyo only when a migration is first read

    path = (folder or migrations_dir()) / filename
    migration = Migration(path.stem, str(path), source_dir=str(path.parent))
    migration.load()
    return cast("ModuleType", migration.module)


def _idempotent(statement: str) -> str:
    """``statement`` (one CREATE) with ``IF NOT EXISTS`` after the object kind."""
    match = _CREATE.match(statement)
    if match is None:  # pragma: no cover - only CREATE statements reach here
        raise ValueError(f"not a CREATE statement: {statement[:40]!r}")
    kind = " ".join(match.group("kind").upper().split())
    return sqlite_sql.if_not_exists(kind, match.group("name"), statement[match.end() :])


def _join(statements: list[str]) -> str:
    return "".join(f"{statement};\n\n" for statement in statements)


@functools.cache
def _schema_statements() -> tuple[list[str], list[str]]:
    import sqlparse  # a yoyo dependency; only needed when the texts are first asked for

    text = (migrations_dir() / SCHEMA_MIGRATION).read_text(encoding="utf-8")
    now: list[str] = []
    later: list[str] = []
    for raw in sqlparse.split(text):
        statement = sqlparse.format(raw, strip_comments=True).strip().rstrip(";").strip()
        match = _CREATE.match(statement)
        if match is None:
            continue  # the version row is data, not schema
        (later if match.group("name") in DEFERRED_INDEXES else now).append(_idempotent(statement))
    return now, later


def schema_sql() -> str:
    """The tables of the v16 layout and the indexes every Hermes version can carry."""
    return _join(_schema_statements()[0])


def deferred_index_sql() -> str:
    """The indexes over columns older Hermes files lack until they are added."""
    return _join(_schema_statements()[1])


@functools.cache
def _search_statements() -> dict[str, list[str]]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema_sql() + deferred_index_sql())
        migration_module(SEARCH_MIGRATION).apply_step(conn)
        rows = conn.execute(sqlite_sql.SEARCH_SCHEMA).fetchall()
    finally:
        conn.close()
    texts: dict[str, list[str]] = {"messages_fts": [], "messages_fts_trigram": []}
    for name, sql in rows:
        table = (
            "messages_fts_trigram" if name.startswith("messages_fts_trigram") else "messages_fts"
        )
        texts[table].append(_idempotent(sql))
    return texts


def fts_sql() -> str:
    """The word index ``messages_fts`` and its three triggers."""
    return _join(_search_statements()["messages_fts"])


def fts_trigram_sql() -> str:
    """The trigram index ``messages_fts_trigram`` and its triggers; empty where this
    SQLite build has no trigram tokenizer (the migration skips it there too)."""
    return _join(_search_statements()["messages_fts_trigram"])
