"""How a store file is doing: counts and sizes (:func:`stats`), and a check-up (:func:`doctor`).

The check-up runs SQLite's own checks (``PRAGMA integrity_check``, FTS5
``'integrity-check'`` on each search index, ``PRAGMA foreign_key_check``) and
three of this package's invariants: the schema version is 16, each search
index has its three triggers, and each index holds exactly one entry per
message with the text the triggers write. It changes nothing in the file.
Both functions return plain dicts; printing them is the CLI's job.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import peewee

from .db import SCHEMA_VERSION, HermesDatabase, current, stored_schema_version, using

#: The text the search-index triggers put in each index.
_INDEXED = (
    "COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' || "
    "COALESCE(m.tool_calls, '')"
)
_TRIGGERS = ("insert", "delete", "update")


def _rows(db: HermesDatabase, sql: str) -> list[tuple[Any, ...]]:
    handle: Any = db
    return cast(list[tuple[Any, ...]], handle.execute_sql(sql).fetchall())


def _version(db: HermesDatabase) -> int | None:
    handle: Any = db
    return stored_schema_version(cast(sqlite3.Connection, handle.connection()))


def _one(db: HermesDatabase, sql: str) -> Any:
    return _rows(db, sql)[0][0]


def _names(db: HermesDatabase, kind: str) -> set[str]:
    return {row[0] for row in _rows(db, f"SELECT name FROM sqlite_master WHERE type = '{kind}'")}


def present_fts_tables(db: HermesDatabase) -> list[str]:
    """The message search indexes the file has."""
    from .fts import present_indexes

    with using(db):
        return [model._meta.table_name for model in present_indexes()]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def stats(db: HermesDatabase | None = None) -> dict[str, Any]:
    """Counts and sizes: sessions, messages (active/inactive), file and WAL bytes, index rows."""
    db = db or current()
    messages = int(_one(db, "SELECT COUNT(*) FROM messages"))
    active = int(_one(db, "SELECT COUNT(*) FROM messages WHERE active = 1"))
    fts = {
        table: int(_one(db, f"SELECT COUNT(*) FROM {table}")) for table in present_fts_tables(db)
    }
    return {
        "path": str(db.path),
        "schema_version": _version(db),
        "journal_mode": str(_one(db, "PRAGMA journal_mode")),
        "sessions": int(_one(db, "SELECT COUNT(*) FROM sessions")),
        "messages": messages,
        "active_messages": active,
        "inactive_messages": messages - active,
        "file_bytes": _size(db.path),
        "wal_bytes": _size(Path(f"{db.path}-wal")),
        "fts_rows": fts,
        "fts_in_step": all(rows == messages for rows in fts.values()),
    }


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _integrity(db: HermesDatabase) -> dict[str, Any]:
    found = [str(row[0]) for row in _rows(db, "PRAGMA integrity_check")]
    if found == ["ok"]:
        return _check("integrity_check", True, "ok")
    return _check("integrity_check", False, "; ".join(found[:5]))


def _foreign_keys(db: HermesDatabase) -> dict[str, Any]:
    found = _rows(db, "PRAGMA foreign_key_check")
    if not found:
        return _check("foreign_key_check", True, "no dangling references")
    sample = ", ".join(f"{table} row {rowid} -> {parent}" for table, rowid, parent, _ in found[:5])
    return _check("foreign_key_check", False, f"{len(found)} dangling reference(s): {sample}")


def _fts_integrity(db: HermesDatabase, table: str) -> dict[str, Any]:
    name = f"fts integrity-check {table}"
    try:
        db.write(lambda: _rows(db, f"INSERT INTO {table}({table}) VALUES ('integrity-check')"))
    except (sqlite3.Error, peewee.PeeweeException) as exc:
        return _check(name, False, str(exc))
    return _check(name, True, "ok")


def _fts_triggers(db: HermesDatabase, table: str) -> dict[str, Any]:
    missing = [f"{table}_{op}" for op in _TRIGGERS if f"{table}_{op}" not in _names(db, "trigger")]
    if missing:
        return _check(f"{table} triggers", False, "missing " + ", ".join(missing))
    return _check(f"{table} triggers", True, "insert, delete and update triggers present")


def _fts_in_step(db: HermesDatabase, table: str) -> dict[str, Any]:
    missing = _one(
        db,
        f"SELECT COUNT(*) FROM messages m WHERE NOT EXISTS "
        f"(SELECT 1 FROM {table} f WHERE f.rowid = m.id)",
    )
    extra = _one(db, f"SELECT COUNT(*) FROM {table} WHERE rowid NOT IN (SELECT id FROM messages)")
    stale = _one(
        db,
        f"SELECT COUNT(*) FROM messages m JOIN {table} f ON f.rowid = m.id "
        f"WHERE f.content IS NOT {_INDEXED}",
    )
    name = f"{table} matches messages"
    if missing or extra or stale:
        return _check(
            name, False, f"{missing} message(s) not indexed, {extra} stray, {stale} out of date"
        )
    return _check(name, True, "one entry per message, text up to date")


def doctor(db: HermesDatabase | None = None) -> dict[str, Any]:
    """Check the file; returns ``{"path", "ok", "checks": [{"name", "ok", "detail"}]}``."""
    db = db or current()
    version = _version(db)
    checks = [
        _check(
            "schema_version",
            version == SCHEMA_VERSION,
            f"{version}"
            if version == SCHEMA_VERSION
            else f"{version}: expected {SCHEMA_VERSION} (run `hermes-models migrate`)",
        ),
        _integrity(db),
        _foreign_keys(db),
    ]
    tables = present_fts_tables(db)
    if not tables:
        built_in = any("FTS5" in str(row[0]) for row in _rows(db, "PRAGMA compile_options"))
        detail = "none in the file" + ("" if built_in else " (this SQLite lacks FTS5: LIKE search)")
        checks.append(_check("search indexes", not built_in, detail))
    for table in tables:
        checks.append(_fts_integrity(db, table))
        if version == SCHEMA_VERSION:
            checks.append(_fts_triggers(db, table))
            checks.append(_fts_in_step(db, table))
    return {"path": str(db.path), "ok": all(c["ok"] for c in checks), "checks": checks}
