"""Hermes-shaped database files newer than v16, built with plain sqlite3.

Each builder writes what a Hermes process of a later schema would have left
on disk (the facts are those of ``HERMES_NEWER.md``): the tables and columns
of that shape, in the order a fresh or an upgraded file has them, its
indexes and triggers, its full-text layout (0 = the v16 inline tables,
1-3 = external-content tables over ``messages`` or over views) and its
``schema_version`` and ``state_meta`` rows, plus one fixed set of
conversations, identical in meaning across shapes (a shape stores only the
columns it has):

- ``root-a`` -> ``cont-a``: a compression chain; ``cont-a`` inherits the
  parent's ``model_config`` verbatim and holds an in-place compaction set, a
  rewound row, a hidden row, a ``session_meta`` row and a tool row of more
  than 8,192 characters whose last word (``zebratail``) lies past the prefix;
- ``root-b`` -> ``cont-b``: a compression chain whose configs carry a
  ``_branched_from`` marker naming somebody else (still a continuation);
- ``branch-a``: a /branch child of ``root-a`` (marker names its parent);
- ``sub-a``: a subagent of ``cont-a``; ``cron-1``: a cron root; both hold a
  CJK word of three or more characters that the v30 trigram view excludes;
- ``reset-old`` -> ``reset-new``: a session reset on routing key ``k1``;
- ``archived-1``: an archived root.

From v25 on, system prompts live in ``system_prompts`` by the lowercase hex
SHA-256 of their UTF-8 text and ``sessions.system_prompt`` is NULL.
``sessions.message_count`` / ``tool_call_count`` count active rows.

Nothing here imports hermes_models: these files stand for data written by
another program.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hermes_models.driver import sqlite3

import legacy

#: The shapes the tests build files for.
SHAPES = ("v17", "v20", "v23", "v25", "v27", "v30", "v31", "fork33")

#: ``schema_version`` each shape stamps.
SCHEMA_VERSION = {
    "v17": 17,
    "v20": 20,
    "v23": 23,
    "v25": 25,
    "v27": 27,
    "v30": 30,
    "v31": 31,
    "fork33": 33,
}

#: FTS storage layout of each shape (``state_meta.fts_storage_version``; 0 = key absent).
FTS_LAYOUT = {
    "v17": 0,
    "v20": 0,
    "v23": 1,
    "v25": 0,
    "v27": 2,
    "v30": 3,
    "v31": 3,
    "fork33": 3,
}

#: Whether the base index (``messages_fts``) holds the tail of the long tool row:
#: False where tool rows are cut to the 8,192-character prefix when indexed.
TOOL_TAIL_INDEXED = {
    "v17": True,
    "v20": True,
    "v23": True,
    "v25": False,
    "v27": True,
    "v30": False,
    "v31": False,
    "fork33": False,
}

#: Shapes whose files were upgraded in place (later columns appended at the end).
UPGRADED = ("v17", "v20", "v25")

#: Shapes holding ``messages_fts_cjk`` with its triggers, stored as naming ``cjk_unicode61``.
CJK_SHAPES = ("v30",)

#: Shapes where ``reset-new`` carries the ``_reset_from`` marker.
RESET_MARKER_SHAPES = ("v30", "v31", "fork33")

#: Characters of a tool row the layout-3 base index keeps.
TOOL_PREFIX = 8192

T0 = 1_760_000_000.0

# Version numbers stand for the dating of HERMES_NEWER section 1: 16.5 = v16-late,
# 27 = "<=v27", 28 = "v28-v30e", 30 = "v30-late", 31 = the v31 delta.
V16_LATE = 16.5

# (column, declaration, introduced). The order is that of a file created fresh at v30.
SESSION_SPEC: tuple[tuple[str, str, float], ...] = (
    ("id", "TEXT PRIMARY KEY", 1),
    ("source", "TEXT NOT NULL", 1),
    ("created_source", "TEXT", 30),
    ("user_id", "TEXT", 1),
    ("session_key", "TEXT", 17),
    ("chat_id", "TEXT", 17),
    ("chat_type", "TEXT", 17),
    ("thread_id", "TEXT", 17),
    ("display_name", "TEXT", 18),
    ("origin_json", "TEXT", 18),
    ("expiry_finalized", "INTEGER DEFAULT 0", 18),
    ("model", "TEXT", 1),
    ("model_config", "TEXT", 1),
    ("system_prompt", "TEXT", 1),
    ("system_prompt_hash", "TEXT", 25),
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
    ("git_repo_root", "TEXT", V16_LATE),
    ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0", 27),
    ("billing_provider", "TEXT", 5),
    ("billing_base_url", "TEXT", 5),
    ("billing_mode", "TEXT", 5),
    ("estimated_cost_usd", "REAL", 5),
    ("actual_cost_usd", "REAL", 5),
    ("cost_status", "TEXT", 5),
    ("cost_source", "TEXT", 5),
    ("pricing_version", "TEXT", 5),
    ("title", "TEXT", 3),
    ("title_source", "TEXT", 27),
    ("last_activity_at", "REAL", 24),
    ("last_activity_description", "TEXT", 24),
    ("last_activity_provenance", "TEXT", 24),
    ("api_call_count", "INTEGER DEFAULT 0", 8),
    ("handoff_state", "TEXT", 14),
    ("handoff_platform", "TEXT", 14),
    ("handoff_error", "TEXT", 14),
    ("compression_failure_cooldown_until", "REAL", 27),
    ("compression_failure_error", "TEXT", 27),
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0", 27),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0", 27),
    ("compression_recovery_deadline", "REAL", 28),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0", 30),
    ("profile_name", "TEXT", 27),
    ("transport_profile", "TEXT", 30),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0", 13),
    ("archived", "INTEGER NOT NULL DEFAULT 0", 14),
    ("pinned", "INTEGER NOT NULL DEFAULT 0", 27),
    ("hidden", "INTEGER NOT NULL DEFAULT 0", 27),
    ("last_read_at", "REAL", 27),
    ("tool_names", "TEXT", 28),
)

MESSAGE_SPEC: tuple[tuple[str, str, float], ...] = (
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT", 1),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)", 1),
    ("role", "TEXT NOT NULL", 1),
    ("content", "TEXT", 1),
    ("tool_call_id", "TEXT", 1),
    ("tool_calls", "TEXT", 1),
    ("tool_name", "TEXT", 1),
    ("effect_disposition", "TEXT", 27),
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
    ("_compressed_summary", "INTEGER NOT NULL DEFAULT 0", 28),
    ("active", "INTEGER NOT NULL DEFAULT 1", 12),
    ("compacted", "INTEGER NOT NULL DEFAULT 0", V16_LATE),
    ("api_content", "TEXT", 27),
    ("display_kind", "TEXT", 27),
    ("display_metadata", "TEXT", 27),
    ("display_identity", "BLOB", 30),
    ("display_order", "INTEGER", 30),
)

# The v31 delta: the runtime columns follow ``id`` in a fresh file; the rest is
# placed after the v30 columns (their fresh-file position was not found).
V31_SESSION_HEAD = (
    ("runtime_revision", "INTEGER NOT NULL DEFAULT 0"),
    ("runtime_generation", "INTEGER NOT NULL DEFAULT 0"),
)
V31_SESSION_TAIL = (("auto_archived", "INTEGER NOT NULL DEFAULT 0"),)
V31_MESSAGE_TAIL = (
    ("message_uid", "TEXT"),
    ("absorbed_message_uids", "TEXT"),
    ("tool_call_uids", "TEXT"),
    ("tool_call_uid", "TEXT"),
)

# Columns of the fork that stamps 33, unknown to every Hermes.
FORK_SESSION_COLUMNS = (("fork_note", "TEXT"),)
FORK_MESSAGE_COLUMNS = (("fork_score", "REAL"),)

# Columns an upgraded file gained at each step after the legacy v16 (early) layout,
# in the order ALTER TABLE appended them.
_APPENDED: dict[str, dict[str, tuple[str, ...]]] = {
    "v17": {
        "sessions": ("git_repo_root", "session_key", "chat_id", "chat_type", "thread_id"),
        "messages": ("compacted",),
    },
    "v20": {
        "sessions": ("display_name", "origin_json", "expiry_finalized"),
        "messages": (),
    },
    "v25": {
        "sessions": (
            "last_activity_at",
            "last_activity_description",
            "last_activity_provenance",
            "system_prompt_hash",
        ),
        "messages": (),
    },
}

_FRESH_LEVEL = {"v23": 23, "v27": 27, "v30": 30, "v31": 30, "fork33": 30}


def _decls(table: str) -> dict[str, str]:
    spec = SESSION_SPEC if table == "sessions" else MESSAGE_SPEC
    extra = (
        V31_SESSION_HEAD + V31_SESSION_TAIL + FORK_SESSION_COLUMNS
        if table == "sessions"
        else V31_MESSAGE_TAIL + FORK_MESSAGE_COLUMNS
    )
    return {name: decl for name, decl, _ in spec} | dict(extra)


def columns(shape: str, table: str) -> list[str]:
    """The columns of ``sessions`` or ``messages`` in a ``shape`` file, in file order."""
    if shape not in SHAPES:
        raise ValueError(f"shape: unknown shape {shape!r}")
    if table not in ("sessions", "messages"):
        raise ValueError(f"table: no column list for {table!r}")
    if shape in UPGRADED:
        names = legacy.columns_at(table, 16)
        for step in UPGRADED[: UPGRADED.index(shape) + 1]:
            names += _APPENDED[step][table]
        return names
    spec = SESSION_SPEC if table == "sessions" else MESSAGE_SPEC
    names = [name for name, _, since in spec if since <= _FRESH_LEVEL[shape]]
    if shape in ("v31", "fork33"):
        if table == "sessions":
            names[1:1] = [n for n, _ in V31_SESSION_HEAD]
            names += [n for n, _ in V31_SESSION_TAIL]
        else:
            names += [n for n, _ in V31_MESSAGE_TAIL]
    if shape == "fork33":
        fork = FORK_SESSION_COLUMNS if table == "sessions" else FORK_MESSAGE_COLUMNS
        names += [n for n, _ in fork]
    return names


SESSION_COLUMNS_BY_SHAPE = {shape: tuple(columns(shape, "sessions")) for shape in SHAPES}
MESSAGE_COLUMNS_BY_SHAPE = {shape: tuple(columns(shape, "messages")) for shape in SHAPES}


def has(shape: str, table: str, column: str) -> bool:
    """True when ``table`` of a ``shape`` file has ``column``."""
    return column in columns(shape, table)


# -- the conversations every fixture holds --------------------------------------------------

#: System prompt texts (decoded); stored inline before v25, by hash from v25.
PROMPT_ALPHA = "You are Alpha."
PROMPT_BETA = "You are Beta."
PROMPT_SUBAGENT = "You are a research subagent."
PROMPT_HERMES = "You are Hermes."

CONFIG_A = '{"model":"m1"}'
CONFIG_B = '{"model":"m2","_branched_from":"somebody-else"}'

#: Session rows, parents before children. ``system_prompt`` is the decoded prompt
#: text; ``message_count`` / ``tool_call_count`` count the active rows of MESSAGES.
#: ``reset-new`` gets ``_reset_from`` in RESET_MARKER_SHAPES only (see ``model_config``).
SESSIONS: tuple[dict[str, Any], ...] = (
    {
        "id": "root-a",
        "source": "cli",
        "created_source": "cli",
        "user_id": "alice",
        "model": "m1",
        "model_config": CONFIG_A,
        "system_prompt": PROMPT_ALPHA,
        "started_at": T0,
        "ended_at": T0 + 100.0,
        "end_reason": "compression",
        "message_count": 4,
        "tool_call_count": 1,
        "input_tokens": 1000,
        "output_tokens": 200,
        "cache_read_tokens": 50,
        "reasoning_tokens": 7,
        "cwd": "/home/alice/alpha",
        "git_branch": "main",
        "git_repo_root": "/home/alice/alpha",
        "billing_provider": "openrouter",
        "estimated_cost_usd": 0.0125,
        "cost_status": "estimated",
        "title": "Alpha",
        "title_source": "user",
        "api_call_count": 3,
        "profile_name": "default",
        "fork_note": "forked at alpha",
    },
    {
        "id": "branch-a",
        "source": "cli",
        "model": "m1",
        "model_config": '{"model":"m1","_branched_from":"root-a"}',
        "system_prompt": PROMPT_ALPHA,
        "parent_session_id": "root-a",
        "started_at": T0 + 60.0,
        "message_count": 2,
        "title": "Alpha branch",
        "title_source": "branch",
        "profile_name": "default",
    },
    {
        "id": "cont-a",
        "source": "cli",
        "created_source": "cli",
        "user_id": "alice",
        "model": "m1",
        "model_config": CONFIG_A,
        "system_prompt": PROMPT_ALPHA,
        "parent_session_id": "root-a",
        "started_at": T0 + 101.0,
        "message_count": 8,
        "tool_call_count": 1,
        "input_tokens": 300,
        "output_tokens": 50,
        "cwd": "/home/alice/alpha",
        "title": "Alpha #2",
        "title_source": "derived",
        "last_activity_at": T0 + 190.0,
        "last_activity_description": "",
        "api_call_count": 2,
        "profile_name": "default",
        "rewind_count": 1,
        "tool_names": '["web_search","read_file"]',
    },
    {
        "id": "sub-a",
        "source": "subagent",
        "model": "m-mini",
        "model_config": '{"_delegate_from":"cont-a"}',
        "system_prompt": PROMPT_SUBAGENT,
        "parent_session_id": "cont-a",
        "started_at": T0 + 150.0,
        "ended_at": T0 + 160.0,
        "end_reason": "completed",
        "message_count": 2,
        "input_tokens": 120,
        "output_tokens": 30,
    },
    {
        "id": "root-b",
        "source": "telegram",
        "user_id": "王伟",
        "model": "m2",
        "model_config": CONFIG_B,
        "system_prompt": PROMPT_BETA,
        "started_at": T0 + 200.0,
        "ended_at": T0 + 300.0,
        "end_reason": "compression",
        "message_count": 2,
        "input_tokens": 500,
        "output_tokens": 80,
        "title": "Beta",
        "pinned": 1,
    },
    {
        "id": "cont-b",
        "source": "telegram",
        "user_id": "王伟",
        "model": "m2",
        "model_config": CONFIG_B,
        "system_prompt": PROMPT_BETA,
        "parent_session_id": "root-b",
        "started_at": T0 + 301.0,
        "message_count": 2,
    },
    {
        "id": "cron-1",
        "source": "cron",
        "model": "m1",
        "started_at": T0 + 400.0,
        "ended_at": T0 + 410.0,
        "end_reason": "completed",
        "message_count": 2,
        "fork_note": "nightly",
    },
    {
        "id": "reset-old",
        "source": "telegram",
        "user_id": "bob",
        "session_key": "k1",
        "chat_id": "42",
        "chat_type": "dm",
        "display_name": "Bob (DM)",
        "origin_json": '{"platform":"telegram","chat_id":"42"}',
        "expiry_finalized": 1,
        "system_prompt": PROMPT_HERMES,
        "started_at": T0 + 500.0,
        "ended_at": T0 + 600.0,
        "end_reason": "session_reset",
        "message_count": 1,
        "input_tokens": 40,
        "output_tokens": 10,
    },
    {
        "id": "reset-new",
        "source": "telegram",
        "user_id": "bob",
        "session_key": "k1",
        "chat_id": "42",
        "chat_type": "dm",
        "system_prompt": PROMPT_HERMES,
        "parent_session_id": "reset-old",
        "started_at": T0 + 601.0,
        "message_count": 1,
    },
    {
        "id": "archived-1",
        "source": "cli",
        "system_prompt": PROMPT_HERMES,
        "started_at": T0 + 700.0,
        "ended_at": T0 + 710.0,
        "end_reason": "user_exit",
        "message_count": 1,
        "title": "Old stuff",
        "archived": 1,
    },
)

RESET_MARKER_CONFIG = '{"_reset_from":"reset-old"}'

CALLS_1 = json.dumps(
    [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "web_search", "arguments": '{"q": "asyncio"}'},
        }
    ]
)
CALLS_2 = json.dumps(
    [
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "job.log"}'},
        }
    ]
)

#: The tool row's content: more than 9,000 characters, the word ``zebratail``
#: starting past the 8,192-character prefix.
LONG_TOOL_TEXT = "".join(f"log line {i:04d} ok\n" for i in range(600)) + "final marker zebratail\n"

#: Content of the list message (decoded value).
LIST_CONTENT = [
    {"type": "text", "text": "Branch here to compare the capybara approach"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
]

#: Wire content of the assistant row that carries ``api_content`` (where the column exists).
API_CONTENT = "[recalled memory: user prefers short answers]\nReading the log file."


def _m(mid: int, session_id: str, role: str, content: Any, at: float, **f: Any) -> dict[str, Any]:
    return {
        "id": mid,
        "session_id": session_id,
        "role": role,
        "content": content,
        "timestamp": T0 + at,
        "active": f.pop("active", 1),
        "compacted": f.pop("compacted", 0),
        **f,
    }


#: Message rows with their ids. ``content`` is the decoded value (a list for the
#: sentinel-encoded row). Flags: ``active``/``compacted`` always; ``_compressed_summary``,
#: ``display_kind``, ``api_content`` and the others only where the shape has the column.
MESSAGES: tuple[dict[str, Any], ...] = (
    _m(1, "root-a", "user", "How does the asyncio event loop schedule coroutines?", 1),
    _m(
        2,
        "root-a",
        "assistant",
        "Let me look that up.",
        2,
        tool_calls=CALLS_1,
        finish_reason="tool_calls",
        reasoning="The user asks about scheduling.",
        token_count=42,
    ),
    _m(
        3,
        "root-a",
        "tool",
        "asyncio runs ready callbacks in order",
        3,
        tool_call_id="call_1",
        tool_name="web_search",
        effect_disposition="none",
    ),
    _m(
        4,
        "root-a",
        "assistant",
        "The event loop runs ready callbacks one at a time.",
        4,
        finish_reason="stop",
    ),
    _m(5, "branch-a", "user", LIST_CONTENT, 61),
    _m(6, "branch-a", "assistant", "Trio uses nurseries for structured concurrency.", 62),
    # One in-place compaction in cont-a: 7-8 summarized away, 9-10 the carried
    # tail's originals, 11 the summary carrier, 12-13 the fresh copies of 9-10.
    _m(7, "cont-a", "user", "Continue with the selector internals", 102, active=0, compacted=1),
    _m(
        8,
        "cont-a",
        "assistant",
        "Selectors wait for sockets to become ready.",
        103,
        active=0,
        compacted=1,
    ),
    _m(9, "cont-a", "user", "Which kernel call does the selector use?", 104, active=0),
    _m(10, "cont-a", "assistant", "On Linux the selector uses epoll.", 105, active=0),
    _m(
        11,
        "cont-a",
        "user",
        "[Compacted summary] We covered selectors and sockets.",
        106,
        _compressed_summary=1,
    ),
    _m(12, "cont-a", "user", "Which kernel call does the selector use?", 104),
    _m(13, "cont-a", "assistant", "On Linux the selector uses epoll.", 105),
    _m(
        14,
        "cont-a",
        "assistant",
        "Reading the log file.",
        110,
        tool_calls=CALLS_2,
        finish_reason="tool_calls",
        api_content=API_CONTENT,
    ),
    _m(15, "cont-a", "tool", LONG_TOOL_TEXT, 111, tool_call_id="call_2", tool_name="read_file"),
    _m(16, "cont-a", "user", "Forget that, explain trio instead", 112, active=0),
    _m(
        17,
        "cont-a",
        "user",
        "Internal scaffolding about the marmoset",
        113,
        display_kind="hidden",
        display_metadata='{"origin": "harness"}',
    ),
    _m(18, "cont-a", "session_meta", '{"event": "turn_started", "marker": "wombat"}', 114),
    _m(
        19,
        "cont-a",
        "assistant",
        "The log shows the okapi job finished.",
        115,
        finish_reason="stop",
        fork_score=0.5,
    ),
    _m(20, "root-b", "user", "请解释事件循环和数据库的关系", 201),
    _m(21, "root-b", "assistant", "The loop and the database are independent.", 202),
    _m(22, "cont-b", "user", "データベースの設計について教えて", 302),
    _m(23, "cont-b", "assistant", "Normalise the tables first.", 303),
    _m(24, "sub-a", "user", "Research task: 协程调度器 internals", 151),
    _m(25, "sub-a", "assistant", "Subagent found the scheduler notes.", 152),
    _m(26, "cron-1", "user", "Nightly job: 定时任务 report for the quokka", 401),
    _m(27, "cron-1", "assistant", "Cron summary ready.", 402, fork_score=1.25),
    _m(
        28,
        "reset-old",
        "user",
        "Old conversation about the heron",
        501,
        platform_message_id="tg-2001",
    ),
    _m(29, "reset-new", "user", "Fresh start about the kestrel", 602),
    _m(30, "archived-1", "user", "Archived chat about the albatross", 701),
)

#: Prefix of ``messages.content`` holding JSON (list/dict) content.
JSON_SENTINEL = "\x00json:"


def prompt_hash(text: str) -> str:
    """Lowercase hex SHA-256 of the UTF-8 prompt text (the ``system_prompts`` key)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_content(value: Any) -> Any:
    """``messages.content`` as Hermes stores it: strings raw, lists/dicts behind the sentinel."""
    if isinstance(value, (list, dict)):
        return JSON_SENTINEL + json.dumps(value)
    return value


def message_uid(message_id: int) -> str:
    """The fixture's ``message_uid`` for a row; compaction copies keep their original's."""
    original = {12: 9, 13: 10}.get(message_id, message_id)
    return hashlib.sha256(f"uid-{original}".encode()).hexdigest()[:32]


def model_config(shape: str, session_id: str) -> str | None:
    """``sessions.model_config`` of ``session_id`` as a ``shape`` file stores it."""
    if session_id == "reset-new" and shape in RESET_MARKER_SHAPES:
        return RESET_MARKER_CONFIG
    return next(s for s in SESSIONS if s["id"] == session_id).get("model_config")


def written_sessions(shape: str) -> list[dict[str, Any]]:
    """The session rows a ``shape`` file holds: only its columns, prompts by hash from v25."""
    names = columns(shape, "sessions")
    by_hash = "system_prompt_hash" in names
    out = []
    for session in SESSIONS:
        row = dict(session)
        row["model_config"] = model_config(shape, row["id"])
        prompt = row.get("system_prompt")
        if by_hash:
            row["system_prompt"] = None
            row["system_prompt_hash"] = None if prompt is None else prompt_hash(prompt)
        out.append({name: row[name] for name in names if name in row})
    return out


def written_messages(shape: str) -> list[dict[str, Any]]:
    """The message rows a ``shape`` file holds (content encoded), only its columns."""
    names = columns(shape, "messages")
    out = []
    for message in MESSAGES:
        row = dict(message, content=encode_content(message["content"]))
        if "message_uid" in names:
            row["message_uid"] = message_uid(row["id"])
        out.append({name: row[name] for name in names if name in row})
    return out


def system_prompt_rows() -> dict[str, str]:
    """``system_prompts`` of a v25+ file: hash -> text."""
    texts = {s["system_prompt"] for s in SESSIONS if s.get("system_prompt") is not None}
    return {prompt_hash(text): text for text in texts}


# -- schema ----------------------------------------------------------------------------------

_GATE = (
    "({r}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta"
    " WHERE key = '{p}rebuild_high_water'), -1)"
    " OR {r}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta"
    " WHERE key = '{p}rebuild_progress'), -1))"
)
_NO_DELEGATE = (
    "json_extract(CASE WHEN json_valid({c}) THEN {c} ELSE json_object() END,"
    " '$._delegate_from') IS NULL"
)
_TRIGRAM_SESSION = "s.source NOT IN ('cron', 'subagent') AND " + _NO_DELEGATE.format(
    c="s.model_config"
)
_PREFIX = (
    "CASE WHEN {r}.role = 'tool' THEN substr(COALESCE({r}.content, ''), 1, 8192)"
    " ELSE {r}.content END"
)
# Layout 2: tool rows above the marker are indexed as the prefix, the others in full.
_PREFIX_L2 = (
    "CASE WHEN {r}.role = 'tool' AND {r}.id > COALESCE((SELECT CAST(value AS INTEGER)"
    " FROM state_meta WHERE key = 'fts_tool_full_content_high_water'), -1)"
    " THEN substr(COALESCE({r}.content, ''), 1, 8192) ELSE {r}.content END"
)


def _gate(r: str, cjk: bool = False) -> str:
    return _GATE.format(r=r, p="fts_cjk_" if cjk else "fts_")


def _changed(cols: Iterable[str]) -> str:
    return "(" + " OR ".join(f"old.{c} IS NOT new.{c}" for c in cols) + ")"


def _external_triggers(
    table: str,
    cols: tuple[str, ...],
    values: Mapping[str, str],
    when: str = "",
    *,
    cjk: bool = False,
) -> list[str]:
    """Insert/delete/update triggers keeping an external-content FTS5 table in sync.

    ``values`` maps each indexed column to its expression over ``{r}``; ``when``
    is a row predicate over ``{r}`` (empty = every row).
    """
    names = ", ".join(cols)

    def vals(r: str) -> str:
        return ", ".join(values[c].format(r=r) for c in cols)

    def cond(r: str) -> str:
        extra = f" AND {when.format(r=r)}" if when else ""
        return f"{_gate(r, cjk)}{extra}"

    watched = ("content", "tool_name", *(["tool_calls"] if "tool_calls" in cols else []), "role")
    return [
        f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages WHEN {cond('new')} BEGIN\n"
        f"    INSERT INTO {table}(rowid, {names}) VALUES (new.id, {vals('new')});\nEND",
        f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages WHEN {cond('old')} BEGIN\n"
        f"    INSERT INTO {table}({table}, rowid, {names})"
        f" VALUES ('delete', old.id, {vals('old')});\nEND",
        f"CREATE TRIGGER {table}_update AFTER UPDATE OF {', '.join(watched)} ON messages"
        f" WHEN {_changed(watched)} BEGIN\n"
        f"    INSERT INTO {table}({table}, rowid, {names})"
        f" SELECT 'delete', old.id, {vals('old')} WHERE {cond('old')};\n"
        f"    INSERT INTO {table}(rowid, {names})"
        f" SELECT new.id, {vals('new')} WHERE {cond('new')};\nEND",
    ]


def _fts_layout0(prefix_cut: bool) -> list[str]:
    """The v16 inline tables; with ``prefix_cut`` the narrowed update triggers and the
    8,192-character tool-row cut of later builds."""
    if not prefix_cut:
        return [s for s in legacy.schema_statements(16) if "fts" in s.split("(")[0]]
    content = (
        "CASE WHEN {r}.role = 'tool' THEN substr(COALESCE({r}.content, ''), 1, 8192)"
        " ELSE COALESCE({r}.content, '') END || ' ' || COALESCE({r}.tool_name, '') || ' ' ||"
        " COALESCE({r}.tool_calls, '')"
    )
    watched = ("content", "tool_name", "tool_calls", "role")
    out = []
    for table in legacy.FTS_TABLES:
        trigram = ", tokenize='trigram'" if table.endswith("trigram") else ""
        add = f"INSERT INTO {table}(rowid, content) VALUES (new.id, {content.format(r='new')});"
        drop = f"DELETE FROM {table} WHERE rowid = old.id;"
        out += [
            f"CREATE VIRTUAL TABLE {table} USING fts5(\n    content{trigram}\n)",
            f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN\n    {add}\nEND",
            f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN\n    {drop}\nEND",
            f"CREATE TRIGGER {table}_update AFTER UPDATE OF {', '.join(watched)} ON messages"
            f" BEGIN\n    {drop}\n    {add}\nEND",
        ]
    return out


def _fts_external(layout: int) -> list[str]:
    """Layouts 1-3: external-content base and trigram tables, views and gated triggers."""
    raw = {c: "{r}." + c for c in ("content", "tool_name", "tool_calls")}
    base_cols = ("content", "tool_name", "tool_calls")
    if layout == 3:
        out = [
            "CREATE VIEW messages_fts_src AS SELECT id,"
            " CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192)"
            " ELSE content END AS content, tool_name, tool_calls FROM messages",
            "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls,"
            " content='messages_fts_src', content_rowid='id')",
        ]
        base_values = raw | {"content": _PREFIX}
    else:
        out = [
            "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls,"
            " content='messages', content_rowid='id')"
        ]
        base_values = raw | {"content": _PREFIX_L2} if layout == 2 else raw
    out += _external_triggers("messages_fts", base_cols, base_values)
    if layout == 1:
        tri_cols: tuple[str, ...] = ("content", "tool_name", "tool_calls")
        view = (
            "CREATE VIEW messages_fts_trigram_src AS SELECT id, role, content, tool_name,"
            " tool_calls FROM messages WHERE role <> 'tool'"
        )
        when = "{r}.role <> 'tool'"
    elif layout == 2:
        tri_cols = ("content", "tool_name")
        view = (
            "CREATE VIEW messages_fts_trigram_src AS SELECT id, role, content, tool_name"
            " FROM messages WHERE role <> 'tool'"
        )
        when = "{r}.role <> 'tool'"
    else:
        tri_cols = ("content", "tool_name")
        view = (
            "CREATE VIEW messages_fts_trigram_src AS SELECT m.id, m.role, m.content, m.tool_name"
            " FROM messages m JOIN sessions s ON s.id = m.session_id"
            f" WHERE m.role <> 'tool' AND {_TRIGRAM_SESSION}"
        )
        when = (
            "{r}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions s"
            f" WHERE s.id = {{r}}.session_id AND {_TRIGRAM_SESSION})"
        )
    out += [
        view,
        f"CREATE VIRTUAL TABLE messages_fts_trigram USING fts5({', '.join(tri_cols)},"
        " content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')",
    ]
    out += _external_triggers("messages_fts_trigram", tri_cols, raw, when)
    return out


#: The stored tokenizer clause of ``messages_fts_cjk`` in a real file.
CJK_TOKENIZE = "tokenize='cjk_unicode61'"


def _fts_cjk(tokenize: str) -> list[str]:
    cols = ("content", "tool_name", "tool_calls")
    raw = {c: "{r}." + c for c in cols}
    return [
        "CREATE VIEW messages_fts_cjk_src AS SELECT id, role, content, tool_name, tool_calls"
        " FROM messages WHERE role <> 'tool'",
        "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls,"
        f" content='messages_fts_cjk_src', content_rowid='id', {tokenize})",
        *_external_triggers("messages_fts_cjk", cols, raw, "{r}.role <> 'tool'", cjk=True),
    ]


_USAGE_COLUMNS = (
    "    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,\n"
    "    model TEXT NOT NULL,\n"
    "    billing_provider TEXT NOT NULL DEFAULT '',\n"
    "    billing_base_url TEXT NOT NULL DEFAULT '',\n"
    "    billing_mode TEXT NOT NULL DEFAULT '',\n"
    "{task}"
    "    api_call_count INTEGER NOT NULL DEFAULT 0,\n"
    "    input_tokens INTEGER NOT NULL DEFAULT 0,\n"
    "    output_tokens INTEGER NOT NULL DEFAULT 0,\n"
    "    cache_read_tokens INTEGER NOT NULL DEFAULT 0,\n"
    "    cache_write_tokens INTEGER NOT NULL DEFAULT 0,\n"
    "    reasoning_tokens INTEGER NOT NULL DEFAULT 0,\n"
    "    estimated_cost_usd REAL NOT NULL DEFAULT 0,\n"
    "    actual_cost_usd REAL NOT NULL DEFAULT 0,\n"
    "    cost_status TEXT,\n"
    "    cost_source TEXT,\n"
    "    first_seen REAL,\n"
    "    last_seen REAL,\n"
    "    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode{pk})"
)


def _usage_table(with_task: bool) -> str:
    body = _USAGE_COLUMNS.format(
        task="    task TEXT NOT NULL DEFAULT '',\n" if with_task else "",
        pk=", task" if with_task else "",
    )
    return f"CREATE TABLE session_model_usage (\n{body}\n)"


# (statement, introduced) of the tables beside sessions/messages/state_meta/schema_version.
_TABLES: tuple[tuple[str, float], ...] = (
    (
        "CREATE TABLE compression_locks (\n    session_id TEXT PRIMARY KEY,\n"
        "    holder TEXT NOT NULL,\n    acquired_at REAL NOT NULL,\n"
        "    expires_at REAL NOT NULL\n)",
        15,
    ),
    ("CREATE TABLE system_prompts (\n    hash TEXT PRIMARY KEY,\n    prompt TEXT NOT NULL\n)", 25),
    (
        "CREATE TABLE gateway_routing (\n    scope TEXT NOT NULL DEFAULT '',\n"
        "    session_key TEXT NOT NULL,\n    entry_json TEXT NOT NULL,\n"
        "    updated_at REAL NOT NULL,\n    PRIMARY KEY (scope, session_key)\n)",
        27,
    ),
    (
        "CREATE TABLE gateway_hygiene_state (\n    session_key TEXT PRIMARY KEY,\n"
        "    failure_streak INTEGER NOT NULL DEFAULT 0\n)",
        27,
    ),
    (
        "CREATE TABLE session_turn_leases (\n    conversation_id TEXT PRIMARY KEY,\n"
        "    holder TEXT NOT NULL,\n    acquired_at REAL NOT NULL,\n"
        "    expires_at REAL NOT NULL\n)",
        27,
    ),
    (
        "CREATE TABLE conversation_generations (\n    source TEXT NOT NULL,\n"
        "    session_key TEXT NOT NULL,\n    generation INTEGER NOT NULL DEFAULT 0,\n"
        "    PRIMARY KEY (source, session_key)\n)",
        28,
    ),
    (
        "CREATE TABLE gateway_heartbeats (\n    backend_id TEXT PRIMARY KEY,\n"
        "    pid INTEGER NOT NULL,\n    started_at REAL NOT NULL,\n"
        "    last_heartbeat REAL NOT NULL,\n    profile TEXT NOT NULL DEFAULT '',\n"
        "    host TEXT NOT NULL DEFAULT ''\n)",
        28,
    ),
)

_ASYNC_DELEGATIONS: tuple[tuple[str, float], ...] = (
    ("delegation_id TEXT PRIMARY KEY", 27),
    ("origin_session TEXT NOT NULL", 27),
    ("origin_ui_session_id TEXT NOT NULL DEFAULT ''", 27),
    ("parent_session_id TEXT", 27),
    ("state TEXT NOT NULL", 27),
    ("dispatched_at REAL NOT NULL", 27),
    ("completed_at REAL", 27),
    ("updated_at REAL NOT NULL", 27),
    ("event_json TEXT", 27),
    ("result_json TEXT", 27),
    ("delivery_state TEXT NOT NULL DEFAULT 'pending'", 27),
    ("delivery_attempts INTEGER NOT NULL DEFAULT 0", 27),
    ("delivered_at REAL", 27),
    ("owner_pid INTEGER", 27),
    ("owner_started_at INTEGER", 27),
    ("task_json TEXT", 27),
    ("delivery_claim TEXT", 27),
    ("delivery_claimed_at REAL", 27),
    ("origin_session_id TEXT NOT NULL DEFAULT ''", 30),
    ("owner_execution_id TEXT", 31),
)

_RUNTIME_LEDGER = (
    "CREATE TABLE runtime_epoch (\n    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),\n"
    "    epoch INTEGER NOT NULL CHECK (epoch > 0),\n    instance_id TEXT NOT NULL\n)",
    "CREATE TABLE session_admissions (\n    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "    admission_id TEXT NOT NULL UNIQUE,\n    request_id TEXT NOT NULL,\n"
    "    principal_id TEXT NOT NULL,\n"
    "    target_session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,\n"
    "    lineage_json TEXT NOT NULL,\n    payload_json TEXT NOT NULL,\n"
    "    payload_digest TEXT NOT NULL,\n"
    "    intent TEXT NOT NULL CHECK (intent IN ('queue', 'steer', 'redirect')),\n"
    "    status TEXT NOT NULL CHECK (status IN ('queued', 'started', 'unknown', 'terminal')),\n"
    "    outcome TEXT,\n    owner_epoch INTEGER,\n    generation INTEGER,\n"
    "    UNIQUE (principal_id, target_session_id, request_id),\n"
    "    CHECK (status <> 'started' OR (owner_epoch IS NOT NULL AND generation IS NOT NULL))\n)",
    "CREATE TABLE worker_executions (\n    execution_id TEXT PRIMARY KEY,\n"
    "    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,\n"
    "    kind TEXT NOT NULL CHECK (kind IN ('cron', 'child', 'compute', 'kanban')),\n"
    "    owner_epoch INTEGER NOT NULL,\n    generation INTEGER NOT NULL,\n"
    "    status TEXT NOT NULL CHECK (status IN ('registered', 'running', 'unknown', 'terminal')),"
    "\n    adoption_digest TEXT NOT NULL,\n"
    "    last_sequence INTEGER NOT NULL DEFAULT 0 CHECK (last_sequence >= 0)\n)",
    "CREATE TABLE worker_receipts (\n"
    "    execution_id TEXT NOT NULL REFERENCES worker_executions ON DELETE RESTRICT,\n"
    "    sequence INTEGER NOT NULL CHECK (sequence > 0),\n    payload_digest TEXT NOT NULL,\n"
    "    result_json TEXT NOT NULL,\n    PRIMARY KEY (execution_id, sequence)\n)",
    "CREATE INDEX session_admissions_pending ON session_admissions(target_session_id, status, seq)",
    # The guard's real DDL was not found; this one refuses the same deletes.
    "CREATE TRIGGER sessions_runtime_ledger_delete_guard BEFORE DELETE ON sessions\n"
    "WHEN EXISTS (SELECT 1 FROM session_admissions WHERE target_session_id = old.id)\n"
    "  OR EXISTS (SELECT 1 FROM worker_executions WHERE session_id = old.id)\nBEGIN\n"
    "    SELECT RAISE(ABORT, 'session has runtime ledger rows: a newer Hermes owns this"
    " store; downgrading is unsupported');\nEND",
)

_VISIBLE = "({r}.active = 1 OR {r}.compacted = 1)"

# (name, statement, introduced) beyond the legacy v16 indexes.
_INDEXES: tuple[tuple[str, str, float], ...] = (
    (
        "idx_session_model_usage_session",
        "CREATE INDEX idx_session_model_usage_session ON session_model_usage(session_id)",
        20,
    ),
    (
        "idx_session_model_usage_model",
        "CREATE INDEX idx_session_model_usage_model ON session_model_usage(model)",
        20,
    ),
    (
        "idx_sessions_system_prompt_hash",
        "CREATE INDEX idx_sessions_system_prompt_hash ON sessions(system_prompt_hash)",
        25,
    ),
    (
        "idx_messages_session_id",
        "CREATE INDEX idx_messages_session_id ON messages(session_id, id)",
        27,
    ),
    (
        "idx_messages_assistant_calls_by_session",
        "CREATE INDEX idx_messages_assistant_calls_by_session ON messages(session_id)"
        " WHERE role = 'assistant' AND tool_calls IS NOT NULL",
        27,
    ),
    (
        "idx_session_turn_leases_expires",
        "CREATE INDEX idx_session_turn_leases_expires ON session_turn_leases(expires_at)",
        27,
    ),
    (
        "idx_async_delegations_delivery",
        "CREATE INDEX idx_async_delegations_delivery"
        " ON async_delegations(delivery_state, completed_at)",
        27,
    ),
    (
        "idx_messages_active_null",
        "CREATE INDEX idx_messages_active_null ON messages(active) WHERE active IS NULL",
        27,
    ),
    (
        "idx_sessions_session_key",
        "CREATE INDEX idx_sessions_session_key ON sessions(session_key, started_at DESC)",
        27,
    ),
    (
        "idx_sessions_gateway_peer",
        "CREATE INDEX idx_sessions_gateway_peer"
        " ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)",
        27,
    ),
    (
        "idx_sessions_handoff_state",
        "CREATE INDEX idx_sessions_handoff_state ON sessions(handoff_state, started_at)",
        27,
    ),
    (
        "idx_sessions_effective_activity",
        "CREATE INDEX idx_sessions_effective_activity"
        " ON sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC)",
        28,
    ),
    (
        "idx_messages_display_page",
        "CREATE INDEX idx_messages_display_page"
        " ON messages(session_id, display_order, active DESC, id DESC)"
        " WHERE active = 1 OR compacted = 1",
        30,
    ),
    (
        "idx_messages_display_backfill",
        "CREATE INDEX idx_messages_display_backfill ON messages(session_id)"
        " WHERE (display_order IS NULL OR display_identity IS NULL)"
        " AND (active = 1 OR compacted = 1)",
        30,
    ),
    (
        "idx_messages_display_identity",
        "CREATE INDEX idx_messages_display_identity"
        " ON messages(session_id, display_identity, display_order)"
        " WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1)",
        30,
    ),
    (
        "idx_sessions_tool_names",
        "CREATE INDEX idx_sessions_tool_names ON sessions(tool_names)",
        30,
    ),
    (
        # Its real definition was not found: (session_id, message_uid) is a guess.
        "idx_messages_session_uid",
        "CREATE INDEX idx_messages_session_uid ON messages(session_id, message_uid)",
        31,
    ),
)


def _display_triggers() -> list[str]:
    """The display-order maintenance triggers of a v30 file."""
    peer = (
        "SELECT MIN(p.display_order) FROM messages p WHERE p.session_id = new.session_id"
        " AND p.id <> new.id AND " + _VISIBLE.format(r="p") + " AND p.display_identity"
        " = new.display_identity"
    )
    visible_new = _VISIBLE.format(r="new")
    visible_old = _VISIBLE.format(r="old")
    group = (
        "session_id = {r}.session_id AND {r}.display_identity IS NOT NULL"
        " AND display_identity = {r}.display_identity AND (active = 1 OR compacted = 1)"
    )
    regroup = (
        "SELECT MIN(p.id) FROM messages p WHERE p.session_id = {r}.session_id"
        " AND p.display_identity = {r}.display_identity AND " + _VISIBLE.format(r="p")
    )
    identity = (
        "role",
        "content",
        "timestamp",
        "tool_call_id",
        "tool_calls",
        "tool_name",
        "display_kind",
    )
    return [
        "CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages\n"
        "WHEN new.display_order IS NULL BEGIN\n"
        f"    UPDATE messages SET display_order = COALESCE(({peer}), new.id) WHERE id = new.id;\n"
        "END",
        "CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted"
        f" ON messages\nWHEN {visible_old} IS NOT {visible_new} BEGIN\n"
        f"    UPDATE messages SET display_order = MIN(new.id, COALESCE(({peer}), new.id))"
        f" WHERE id = new.id AND {visible_new};\n"
        "    UPDATE messages SET display_order = (SELECT m.display_order FROM messages m"
        f" WHERE m.id = new.id) WHERE {group.format(r='new')} AND id <> new.id"
        f" AND {visible_new};\n"
        f"    UPDATE messages SET display_order = ({regroup.format(r='new')})"
        f" WHERE {group.format(r='new')} AND NOT {visible_new};\n"
        "END",
        f"CREATE TRIGGER messages_display_identity_update AFTER UPDATE OF {', '.join(identity)}"
        f" ON messages\nWHEN {_changed(identity)} BEGIN\n"
        "    UPDATE messages SET display_identity = NULL, display_order = NULL"
        " WHERE id = new.id OR (session_id = old.session_id AND old.display_identity IS NOT NULL"
        " AND display_identity = old.display_identity);\n"
        "END",
        "CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages\n"
        f"WHEN {visible_old} BEGIN\n"
        f"    UPDATE messages SET display_order = ({regroup.format(r='old')})"
        f" WHERE {group.format(r='old')};\n"
        "END",
    ]


_UID_TRIGGER = (
    "CREATE TRIGGER messages_message_uid_insert AFTER INSERT ON messages\n"
    "WHEN new.message_uid IS NULL BEGIN\n"
    "    UPDATE messages SET message_uid = lower(hex(randomblob(16))) WHERE id = new.id;\n"
    "END"
)


def _create_fresh(table: str, shape: str, constraints: str = "") -> str:
    decls = _decls(table)
    # The fork's own columns are appended by ALTER TABLE after the v31 file exists.
    names = columns("v31" if shape == "fork33" else shape, table)
    body = ",\n    ".join(f"{name} {decls[name]}" for name in names)
    return f"CREATE TABLE {table} (\n    {body}{constraints}\n)"


def _level(shape: str) -> float:
    return min(SCHEMA_VERSION[shape], 31)


def schema_statements(shape: str) -> list[str]:
    """The DDL that leaves an empty file in ``shape`` (before the CJK tokenizer rewrite)."""
    level = _level(shape)
    if shape in UPGRADED:
        # The legacy v16 (early) file, then each later column appended by ALTER TABLE.
        out = [s for s in legacy.schema_statements(16) if "fts" not in s.split("(")[0]]
        decls = {"sessions": _decls("sessions"), "messages": _decls("messages")}
        for step in UPGRADED[: UPGRADED.index(shape) + 1]:
            for table, names in _APPENDED[step].items():
                out += [f"ALTER TABLE {table} ADD COLUMN {n} {decls[table][n]}" for n in names]
        if level >= 20:
            out.append(_usage_table(with_task=level >= 22))
        out += [sql for sql, since in _TABLES if 15 < since <= level]
        out += [sql for _, sql, since in _INDEXES if since <= level]
        out += _fts_layout0(prefix_cut=level >= 25)
        return out
    fks = ",\n    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)"
    if level >= 25:
        fks += ",\n    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)"
    out = [
        "CREATE TABLE schema_version (\n    version INTEGER NOT NULL\n)",
        _create_fresh("sessions", shape, fks),
        _create_fresh("messages", shape),
        "CREATE TABLE state_meta (\n    key TEXT PRIMARY KEY,\n    value TEXT\n)",
        _usage_table(with_task=True),
    ]
    out += [sql for sql, since in _TABLES if since <= level]
    if level >= 27:
        body = ",\n    ".join(d for d, since in _ASYNC_DELEGATIONS if since <= level)
        out.append(f"CREATE TABLE async_delegations (\n    {body}\n)")
    if level >= 31:
        out += _RUNTIME_LEDGER
    out += [sql for _, sql, since in legacy.INDEXES]
    out += [sql for _, sql, since in _INDEXES if since <= level]
    out += _fts_external(FTS_LAYOUT[shape])
    if level >= 30:
        out += _display_triggers()
    if level >= 31:
        out.append(_UID_TRIGGER)
    if shape in CJK_SHAPES:
        out += _fts_cjk("tokenize='unicode61'")
    if shape == "fork33":
        out += [
            "ALTER TABLE sessions ADD COLUMN fork_note TEXT",
            "ALTER TABLE messages ADD COLUMN fork_score REAL",
            "CREATE TABLE fork_things (\n    id INTEGER PRIMARY KEY,\n"
            "    session_id TEXT REFERENCES sessions(id),\n    note TEXT\n)",
        ]
    return out


#: A fresh store's provenance stamp (fixed so that the files are reproducible).
STORE_INSTANCE_ID = "6f1c2b8e-3d4a-4c5b-9e7f-0a1b2c3d4e5f"
STORE_CREATED_AT_UTC = "2025-10-09T08:53:20+00:00"


def state_meta(shape: str) -> dict[str, str]:
    """The ``state_meta`` rows a ``shape`` file holds after build."""
    level = _level(shape)
    out: dict[str, str] = {}
    if FTS_LAYOUT[shape]:
        out["fts_storage_version"] = str(FTS_LAYOUT[shape])
    elif level >= 23:
        # Legacy inline tables found when the file crossed v23.
        out["fts_optimize_available"] = "1"
    if FTS_LAYOUT[shape] == 2:
        # Every row of the fixture predates the tool-prefix mark: indexed in full.
        out["fts_tool_full_content_high_water"] = str(len(MESSAGES))
    if level >= 30 and shape not in UPGRADED:
        out["store_instance_id"] = STORE_INSTANCE_ID
        out["store_created_at_utc"] = STORE_CREATED_AT_UTC
    if level >= 31:
        out["gateway.mutation.v1.fixture"] = '{"op": "rename", "session_id": "cont-a"}'
    return out


def _insert(conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> int:
    names = ", ".join(f'"{n}"' for n in row)
    marks = ", ".join("?" for _ in row)
    cursor = conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(row.values()))
    return int(cursor.lastrowid or 0)


# The v20 seed of session_model_usage: one row per session with token aggregates.
_USAGE_SEED = (
    "INSERT OR IGNORE INTO session_model_usage (session_id, model, billing_provider,"
    " billing_base_url, billing_mode, api_call_count, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated_cost_usd,"
    " actual_cost_usd, cost_status, cost_source, first_seen, last_seen)"
    " SELECT id, COALESCE(model, 'unknown'), COALESCE(billing_provider, ''),"
    " COALESCE(billing_base_url, ''), COALESCE(billing_mode, ''), COALESCE(api_call_count, 0),"
    " COALESCE(input_tokens, 0), COALESCE(output_tokens, 0), COALESCE(cache_read_tokens, 0),"
    " COALESCE(cache_write_tokens, 0), COALESCE(reasoning_tokens, 0),"
    " COALESCE(estimated_cost_usd, 0), COALESCE(actual_cost_usd, 0), cost_status, cost_source,"
    " started_at, COALESCE(ended_at, started_at) FROM sessions"
    " WHERE COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0)"
    " + COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0) > 0 ORDER BY id"
)


def _side_rows(conn: sqlite3.Connection, level: float, shape: str) -> None:
    """Rows of the tables beside sessions and messages."""
    if level >= 27:
        _insert(
            conn,
            "gateway_routing",
            {
                "scope": "",
                "session_key": "k1",
                "entry_json": '{"session_id": "reset-new"}',
                "updated_at": T0 + 601.0,
            },
        )
    if level >= 28:
        _insert(
            conn,
            "conversation_generations",
            {"source": "telegram", "session_key": "k1", "generation": 1},
        )
    if level >= 31:
        _insert(conn, "runtime_epoch", {"singleton": 1, "epoch": 1, "instance_id": "inst-1"})
        _insert(
            conn,
            "worker_executions",
            {
                "execution_id": "exec-cron-1",
                "session_id": "cron-1",
                "kind": "cron",
                "owner_epoch": 1,
                "generation": 1,
                "status": "terminal",
                "adoption_digest": "digest-0",
                "last_sequence": 1,
            },
        )
        _insert(
            conn,
            "worker_receipts",
            {
                "execution_id": "exec-cron-1",
                "sequence": 1,
                "payload_digest": "digest-1",
                "result_json": '{"ok": true}',
            },
        )
    if shape == "fork33":
        _insert(conn, "fork_things", {"id": 1, "session_id": "root-a", "note": "fork data"})


def build(path: Path, shape: str) -> Path:
    """Write a ``shape`` file with the fixture conversations at ``path``; returns ``path``.

    The file is left in WAL mode and closed cleanly (no ``-wal``/``-shm``). In the
    CJK shapes the stored definition of ``messages_fts_cjk`` names ``cjk_unicode61``,
    so plain SQLite can neither query it nor insert into ``messages``.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape: unknown shape {shape!r}")
    level = _level(shape)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN")
        for sql in schema_statements(shape):
            conn.execute(sql)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION[shape],))
        for key, value in state_meta(shape).items():
            _insert(conn, "state_meta", {"key": key, "value": value})
        if level >= 25:
            for digest, text in sorted(system_prompt_rows().items()):
                _insert(conn, "system_prompts", {"hash": digest, "prompt": text})
        for row in written_sessions(shape):
            _insert(conn, "sessions", row)
        for row in written_messages(shape):
            _insert(conn, "messages", row)
        if level >= 20:
            conn.execute(_USAGE_SEED)
        _side_rows(conn, level, shape)
        conn.execute("COMMIT")
        if shape in CJK_SHAPES:
            _name_cjk_tokenizer(conn)
    finally:
        conn.close()
    return path


def _name_cjk_tokenizer(conn: sqlite3.Connection) -> None:
    """Rewrite the stored CREATE text of ``messages_fts_cjk`` to name ``cjk_unicode61``."""
    (sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_cjk'"
    ).fetchone()
    rewritten = sql.replace("tokenize='unicode61'", CJK_TOKENIZE)
    if rewritten == sql:
        raise AssertionError("messages_fts_cjk: no tokenizer clause to rewrite")
    (version,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("BEGIN")
    conn.execute(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'messages_fts_cjk'",
        (rewritten,),
    )
    conn.execute(f"PRAGMA schema_version={version + 1}")
    conn.execute("COMMIT")
    conn.execute("PRAGMA writable_schema=OFF")


# -- writing beside a reader, as Hermes does ---------------------------------------------------


def append_message(
    path: Path,
    session_id: str,
    content: Any,
    role: str = "user",
    *,
    tool_calls: str | None = None,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
    at: float | None = None,
) -> int:
    """Append one message the way Hermes writes it; returns the new id.

    One ``BEGIN IMMEDIATE`` transaction: the INSERT binds ``active = 1`` where the
    column exists and leaves ``display_identity``, ``display_order`` and
    ``message_uid`` NULL (the file's triggers fill them), then bumps
    ``message_count`` and, for ``tool_calls``, ``tool_call_count``.
    """
    conn = sqlite3.connect(path, isolation_level=None, timeout=20.0)
    try:
        present = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        row: dict[str, Any] = {
            "session_id": session_id,
            "role": role,
            "content": encode_content(content),
            "tool_call_id": tool_call_id,
            "tool_calls": tool_calls,
            "tool_name": tool_name,
            "timestamp": time.time() if at is None else at,
        }
        if "active" in present:
            row["active"] = 1
        calls = len(json.loads(tool_calls)) if tool_calls else 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            message_id = _insert(conn, "messages", row)
            conn.execute(
                "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1,"
                " tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
                (calls, session_id),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return message_id
    finally:
        conn.close()


CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")


def drop_cjk_triggers_like_hermes(path: Path) -> None:
    """What a Hermes without the CJK tokenizer does: in one write transaction, record
    ``fts_cjk_stale = '1'`` then drop the three CJK triggers (the table stays)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=20.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO state_meta (key, value) VALUES ('fts_cjk_stale', '1')"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value"
            )
            for trigger in CJK_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


# -- reading files the way tests compare them --------------------------------------------------


def openable_fts_tables(shape: str) -> tuple[str, ...]:
    """The message indexes of a ``shape`` file that plain SQLite can query.

    Every shape has ``messages_fts`` and ``messages_fts_trigram``; ``messages_fts_cjk``
    (CJK_SHAPES) needs a tokenizer plain SQLite lacks.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape: unknown shape {shape!r}")
    return legacy.FTS_TABLES


def fts_integrity(conn: sqlite3.Connection, shape: str) -> list[str]:
    """FTS5 'integrity-check' (index against its content) on every openable index."""
    checked = []
    for table in openable_fts_tables(shape):
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        checked.append(table)
    return checked


fts_ids = legacy.fts_ids
dump = legacy.dump
rows = legacy.rows


def object_sql(conn: sqlite3.Connection, name: str) -> str | None:
    """The stored CREATE text of a schema object, or None."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])
