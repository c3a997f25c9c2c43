"""Hermes-shaped database files of older schema versions, built with plain sqlite3.

Each builder writes what a Hermes process of that schema version would have
left on disk: the tables and columns of that version, its indexes, its
full-text layout (external-content tables over ``content`` up to v10, inline
tables over content + tool_name + tool_calls from v11) and its
``schema_version`` row, plus a fixed set of conversations: a compression
chain, a /branch fork, subagent children, English and Chinese messages,
tool calls, and (where the version has the columns) titles, costs,
reasoning, soft-deleted messages and platform ids.

Nothing here imports hermes_models: these files stand for data written by
another program.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hermes_models.driver import sqlite3

#: Versions the tests build files for.
VERSIONS = (2, 3, 6, 10, 11, 12, 15, 16)

#: Start of the fixture clock.
T0 = 1_700_000_000.0

# (column, declaration, schema version that introduced it). The order is the
# order of a file created fresh at v16.
SESSION_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("id", "TEXT PRIMARY KEY", 1),
    ("source", "TEXT NOT NULL", 1),
    ("user_id", "TEXT", 1),
    ("model", "TEXT", 1),
    ("model_config", "TEXT", 1),
    ("system_prompt", "TEXT", 1),
    ("parent_session_id", "TEXT", 1),
    ("started_at", "REAL NOT NULL", 1),
    ("ended_at", "REAL", 1),
    ("end_reason", "TEXT", 1),
    ("message_count", "INTEGER DEFAULT 0", 1),
    ("tool_call_count", "INTEGER DEFAULT 0", 1),
    ("input_tokens", "INTEGER DEFAULT 0", 1),
    ("output_tokens", "INTEGER DEFAULT 0", 1),
    ("cache_read_tokens", "INTEGER DEFAULT 0", 5),
    ("cache_write_tokens", "INTEGER DEFAULT 0", 5),
    ("reasoning_tokens", "INTEGER DEFAULT 0", 5),
    ("cwd", "TEXT", 14),
    ("git_branch", "TEXT", 16),
    ("billing_provider", "TEXT", 5),
    ("billing_base_url", "TEXT", 5),
    ("billing_mode", "TEXT", 5),
    ("estimated_cost_usd", "REAL", 5),
    ("actual_cost_usd", "REAL", 5),
    ("cost_status", "TEXT", 5),
    ("cost_source", "TEXT", 5),
    ("pricing_version", "TEXT", 5),
    ("title", "TEXT", 3),
    ("api_call_count", "INTEGER DEFAULT 0", 8),
    ("handoff_state", "TEXT", 14),
    ("handoff_platform", "TEXT", 14),
    ("handoff_error", "TEXT", 14),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0", 13),
    ("archived", "INTEGER NOT NULL DEFAULT 0", 14),
)

MESSAGE_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT", 1),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)", 1),
    ("role", "TEXT NOT NULL", 1),
    ("content", "TEXT", 1),
    ("tool_call_id", "TEXT", 1),
    ("tool_calls", "TEXT", 1),
    ("tool_name", "TEXT", 1),
    ("timestamp", "REAL NOT NULL", 1),
    ("token_count", "INTEGER", 1),
    ("finish_reason", "TEXT", 2),
    ("reasoning", "TEXT", 6),
    ("reasoning_content", "TEXT", 7),
    ("reasoning_details", "TEXT", 6),
    ("codex_reasoning_items", "TEXT", 6),
    ("codex_message_items", "TEXT", 9),
    ("platform_message_id", "TEXT", 15),
    ("observed", "INTEGER DEFAULT 0", 15),
    ("active", "INTEGER NOT NULL DEFAULT 1", 12),
)

# (name, statement, version that introduced it)
INDEXES: tuple[tuple[str, str, int], ...] = (
    ("idx_sessions_source", "CREATE INDEX idx_sessions_source ON sessions(source)", 1),
    ("idx_sessions_source_id", "CREATE INDEX idx_sessions_source_id ON sessions(source, id)", 15),
    ("idx_sessions_parent", "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)", 1),
    ("idx_sessions_started", "CREATE INDEX idx_sessions_started ON sessions(started_at DESC)", 1),
    (
        "idx_sessions_title_unique",
        "CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL",
        4,
    ),
    (
        "idx_messages_session",
        "CREATE INDEX idx_messages_session ON messages(session_id, timestamp)",
        1,
    ),
    (
        "idx_messages_session_active",
        "CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp)",
        12,
    ),
    (
        "idx_messages_platform_msg_id",
        "CREATE INDEX idx_messages_platform_msg_id ON messages(session_id, platform_message_id)"
        " WHERE platform_message_id IS NOT NULL",
        15,
    ),
    (
        "idx_compression_locks_expires",
        "CREATE INDEX idx_compression_locks_expires ON compression_locks(expires_at)",
        15,
    ),
)

FTS_TABLES = ("messages_fts", "messages_fts_trigram")

_CONCAT = (
    "COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || "
    "COALESCE({r}.tool_calls, '')"
)


def columns_at(table: str, version: int) -> list[str]:
    """The columns ``table`` has at schema ``version``."""
    spec = SESSION_COLUMNS if table == "sessions" else MESSAGE_COLUMNS
    return [name for name, _, since in spec if since <= version]


def _create_table(
    name: str, spec: Iterable[tuple[str, str, int]], version: int, tail: str = ""
) -> str:
    body = ",\n    ".join(f"{col} {decl}" for col, decl, since in spec if since <= version)
    return f"CREATE TABLE {name} (\n    {body}{tail}\n)"


def _fts_sql(version: int) -> list[str]:
    statements = []
    tables = FTS_TABLES if version >= 10 else FTS_TABLES[:1]
    for table in tables:
        trigram = ", tokenize='trigram'" if table.endswith("trigram") else ""
        if version < 11:
            # External-content layout over content only.
            statements.append(
                f"CREATE VIRTUAL TABLE {table} USING fts5(content, content=messages, "
                f"content_rowid=id{trigram})"
            )
            add = f"INSERT INTO {table}(rowid, content) VALUES (new.id, new.content);"
            drop = (
                f"INSERT INTO {table}({table}, rowid, content)"
                " VALUES ('delete', old.id, old.content);"
            )
        else:
            statements.append(f"CREATE VIRTUAL TABLE {table} USING fts5(\n    content{trigram}\n)")
            add = f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT.format(r='new')});"
            drop = f"DELETE FROM {table} WHERE rowid = old.id;"
        statements += [
            f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN\n    {add}\nEND",
            f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN\n    {drop}\nEND",
            f"CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN\n"
            f"    {drop}\n    {add}\nEND",
        ]
    return statements


def schema_statements(version: int) -> list[str]:
    """The DDL a Hermes process of ``version`` runs on an empty file."""
    statements = [
        "CREATE TABLE schema_version (\n    version INTEGER NOT NULL\n)",
        _create_table(
            "sessions",
            SESSION_COLUMNS,
            version,
            ",\n    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)",
        ),
        _create_table("messages", MESSAGE_COLUMNS, version),
        "CREATE TABLE state_meta (\n    key TEXT PRIMARY KEY,\n    value TEXT\n)",
    ]
    if version >= 15:
        statements.append(
            "CREATE TABLE compression_locks (\n    session_id TEXT PRIMARY KEY,\n"
            "    holder TEXT NOT NULL,\n    acquired_at REAL NOT NULL,\n"
            "    expires_at REAL NOT NULL\n)"
        )
    statements += [sql for _, sql, since in INDEXES if since <= version]
    statements += _fts_sql(version)
    return statements


# -- the conversations every fixture holds --------------------------------------------------

#: Session rows with every v16 column a test sets; builders keep the columns
#: the version has. Parents come before their children.
SESSIONS: tuple[dict[str, Any], ...] = (
    {
        "id": "root-en",
        "source": "cli",
        "user_id": "alice",
        "model": "gpt-x",
        "model_config": '{"temperature": 0.2}',
        "system_prompt": "You are Hermes.",
        "started_at": T0,
        "ended_at": T0 + 100.0,
        "end_reason": "compression",
        "message_count": 4,
        "tool_call_count": 1,
        "input_tokens": 1200,
        "output_tokens": 340,
        "cache_read_tokens": 50,
        "reasoning_tokens": 7,
        "billing_provider": "openrouter",
        "estimated_cost_usd": 0.0123,
        "cost_status": "estimated",
        "title": "Asyncio notes",
        "api_call_count": 3,
        "cwd": "/home/alice/project",
    },
    {
        "id": "cont-1",
        "source": "cli",
        "model": "gpt-x",
        "model_config": '{"temperature": 0.2}',
        "parent_session_id": "root-en",
        "started_at": T0 + 100.0,
        "ended_at": T0 + 200.0,
        "end_reason": "compression",
        "message_count": 2,
        "title": "Asyncio notes #2",
    },
    {
        "id": "cont-2",
        "source": "cli",
        "model": "gpt-x",
        "parent_session_id": "cont-1",
        "started_at": T0 + 200.0,
        "message_count": 4,  # Hermes keeps counting a rewound message
        "title": "Asyncio notes #3",
        "rewind_count": 1,
    },
    {
        "id": "sub-1",
        "source": "cli",
        "model": "gpt-mini",
        "parent_session_id": "root-en",
        "started_at": T0 + 50.0,
        "ended_at": T0 + 60.0,
        "end_reason": "completed",
        "message_count": 2,
    },
    {
        "id": "sub-2",
        "source": "cli",
        "model": "gpt-mini",
        "model_config": '{"role": "researcher"}',
        "parent_session_id": "cont-2",
        "started_at": T0 + 250.0,
        "message_count": 1,
    },
    {
        "id": "root-zh",
        "source": "telegram",
        "user_id": "王伟",
        "model": "qwen-max",
        "started_at": T0 + 300.0,
        "ended_at": T0 + 400.0,
        "end_reason": "branched",
        "message_count": 2,
        "title": "事件循环讨论",
        "handoff_platform": "telegram",
        "archived": 0,
    },
    {
        "id": "sub-3",
        "source": "telegram",
        "model": "qwen-max",
        "model_config": "legacy-config",
        "parent_session_id": "root-zh",
        "started_at": T0 + 310.0,
        "message_count": 1,
    },
    {
        "id": "branch-zh",
        "source": "telegram",
        "model": "qwen-max",
        "parent_session_id": "root-zh",
        "started_at": T0 + 400.0,
        "message_count": 2,
        "title": "事件循环讨论 (分支)",
    },
)

#: What the v16 data step writes into ``model_config`` of the subagent children.
#: sub-1 ran under root-en, which later ended with 'compression': a child of a
#: compressed or branched parent is never tagged (SPEC 3), so it stays as it was.
#: sub-3's config is not a JSON object and is left alone.
DELEGATE_TAGS = {
    "sub-2": '{"role":"researcher","_delegate_from":"cont-2"}',
}

_CALLS = json.dumps(
    [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "web_search", "arguments": '{"q": "asyncio"}'},
        }
    ]
)


def _m(session_id: str, role: str, content: Any, at: float, **fields: Any) -> dict[str, Any]:
    return {"session_id": session_id, "role": role, "content": content, "timestamp": at, **fields}


#: Message rows (ids are assigned 1, 2, ... in this order).
MESSAGES: tuple[dict[str, Any], ...] = (
    _m("root-en", "user", "How does the asyncio event loop schedule coroutines?", T0 + 1),
    _m(
        "root-en",
        "assistant",
        "Let me search for that.",
        T0 + 2,
        tool_calls=_CALLS,
        finish_reason="tool_calls",
        reasoning="The user asks about asyncio.",
        reasoning_details='[{"type": "summary", "text": "asyncio"}]',
        token_count=42,
    ),
    _m(
        "root-en",
        "tool",
        "asyncio runs callbacks from a ready queue",
        T0 + 3,
        tool_call_id="call_1",
        tool_name="web_search",
    ),
    _m(
        "root-en",
        "assistant",
        "The event loop runs ready callbacks one at a time.",
        T0 + 4,
        finish_reason="stop",
        reasoning_content="Summarise the search result.",
        token_count=17,
    ),
    _m("sub-1", "user", "Summarise the asyncio documentation", T0 + 51),
    _m(
        "sub-1",
        "assistant",
        "Subagent summary: selectors and futures.",
        T0 + 52,
        codex_reasoning_items='[{"id": "r1"}]',
    ),
    _m("cont-1", "user", "[summary] We talked about the asyncio event loop.", T0 + 101),
    _m(
        "cont-1",
        "assistant",
        "Continuing after compression: thread pools next.",
        T0 + 102,
        codex_message_items='[{"id": "m1"}]',
    ),
    _m(
        "cont-2",
        "user",
        "\x00json:" + json.dumps([{"type": "text", "text": "What about uvloop?"}]),
        T0 + 201,
    ),
    _m("cont-2", "assistant", "uvloop is a faster drop-in loop.", T0 + 202, finish_reason="stop"),
    _m("cont-2", "user", "Forget that, explain trio instead", T0 + 203, active=0),
    _m(
        "cont-2",
        "user",
        "Compare asyncio with threads",
        T0 + 204,
        platform_message_id="tg-1001",
        observed=1,
    ),
    _m("sub-2", "assistant", "Researcher notes on structured concurrency", T0 + 251),
    _m("root-zh", "user", "请解释事件循环的工作原理", T0 + 301),
    _m("root-zh", "assistant", "事件循环负责调度协程和回调。", T0 + 302, finish_reason="stop"),
    _m("sub-3", "assistant", "子代理：检索协程文档", T0 + 311),
    _m("branch-zh", "user", "分支：那么线程池呢？", T0 + 401),
    _m("branch-zh", "assistant", "线程池适合阻塞的输入输出任务。", T0 + 402),
)

#: Title given to branch-zh in the v3 fixture, where titles were not yet unique.
V3_DUPLICATE_TITLE = "事件循环讨论"


def _row(values: Mapping[str, Any], columns: list[str]) -> dict[str, Any]:
    return {name: values[name] for name in columns if name in values}


def _insert(conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> int:
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    cursor = conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(row.values()))
    return int(cursor.lastrowid or 0)


def build(path: Path, version: int, *, grown: bool = False) -> Path:
    """Write a Hermes file of schema ``version`` with the fixture conversations.

    ``grown=True`` creates the file at v2 and adds each later column with
    ``ALTER TABLE``, as a Hermes that was upgraded release by release did.
    """
    if not 2 <= version <= 16:
        raise ValueError(f"version: no fixture for schema version {version}")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN")
        if grown:
            for sql in schema_statements(2):
                if "VIRTUAL TABLE" in sql or "TRIGGER" in sql:
                    continue
                conn.execute(sql)
            for table, spec in (("sessions", SESSION_COLUMNS), ("messages", MESSAGE_COLUMNS)):
                for name, decl, since in spec:
                    if 2 < since <= version:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            for sql in schema_statements(version):
                name = re.search(r"(?:TABLE|INDEX|TRIGGER)\s+(\w+)", sql).group(1)
                if name not in present:
                    conn.execute(sql)
        else:
            for sql in schema_statements(version):
                conn.execute(sql)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        session_columns = columns_at("sessions", version)
        for session in SESSIONS:
            row = dict(session)
            if version == 3 and row["id"] == "branch-zh":
                row["title"] = V3_DUPLICATE_TITLE
            _insert(conn, "sessions", _row(row, session_columns))
        message_columns = columns_at("messages", version)
        for message in MESSAGES:
            if message.get("active", 1) == 0 and "active" not in message_columns:
                continue  # a file without soft deletes never had this message
            _insert(conn, "messages", _row(message, message_columns))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


def build_v16(path: Path) -> Path:
    """An empty file exactly as a Hermes v16 process creates it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN")
        for sql in schema_statements(16):
            conn.execute(sql)
        conn.execute("INSERT INTO schema_version (version) VALUES (16)")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


# -- reading files the way tests compare them ------------------------------------------------


def is_bookkeeping(name: str) -> bool:
    """True for yoyo's own tables and indexes, and hermes_models' additions: the gram
    index (its tables, their shadow tables and the triggers that list deleted
    messages) and the two time-order indexes of migration 0008."""
    return name.startswith(("_yoyo", "yoyo", "messages_cjk")) or name in (
        "sqlite_sequence",
        "idx_messages_time",
        "idx_sessions_started_id",
    )


def rows(conn: sqlite3.Connection, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as a dict, by rowid."""
    cursor = conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid')
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def dump(path: Path) -> dict[str, Any]:
    """Schema and content of every Hermes object in the file (yoyo's left out)."""
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        out: dict[str, Any] = {
            "schema": [o for o in objects if not (is_bookkeeping(o[1]) or is_bookkeeping(o[2]))]
        }
        for kind, name, _, sql in out["schema"]:
            if kind == "table" and not (sql or "").upper().startswith("CREATE VIRTUAL"):
                cursor = conn.execute(f'SELECT * FROM "{name}"')
                out[name] = sorted(cursor.fetchall(), key=repr)
        out["sqlite_sequence"] = [r for r in _sequence(conn) if not is_bookkeeping(r[0])]
        return out
    finally:
        conn.close()


def _sequence(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    try:
        return conn.execute("SELECT name, seq FROM sqlite_sequence ORDER BY name").fetchall()
    except sqlite3.OperationalError:
        return []


def fts_integrity(conn: sqlite3.Connection) -> list[str]:
    """Run FTS5 'integrity-check' on every message index; returns the tables checked."""
    checked = []
    for table in FTS_TABLES:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        if exists:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            checked.append(table)
    return checked


def fts_ids(conn: sqlite3.Connection, table: str, query: str) -> list[int]:
    """Message ids whose indexed text matches ``query`` in ``table``."""
    return [
        r[0]
        for r in conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid", (query,)
        )
    ]


def hermes_append(
    conn: sqlite3.Connection, session_id: str, role: str, content: str, at: float, **fields: Any
) -> int:
    """Append a message with plain SQL, as a Hermes process does, and bump the counter."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        message_id = _insert(
            conn,
            "messages",
            {"session_id": session_id, "role": role, "content": content, "timestamp": at, **fields},
        )
        conn.execute(
            "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1 WHERE id = ?",
            (session_id,),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return message_id


def hermes_startup_check(path: Path) -> dict[str, Any]:
    """What a Hermes v16 process reads at start-up: version, tables, columns, triggers."""
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        triggers = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
        return {
            "version": None if version is None else version[0],
            "tables": tables,
            "triggers": triggers,
            "sessions": [r[1] for r in conn.execute("PRAGMA table_info(sessions)")],
            "messages": [r[1] for r in conn.execute("PRAGMA table_info(messages)")],
        }
    finally:
        conn.close()
