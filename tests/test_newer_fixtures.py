"""The newer-Hermes fixture files themselves, checked with plain sqlite3 against HERMES_NEWER."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from hermes_models.driver import sqlite3

import legacy
import newer

SHAPES = [pytest.param(shape, id=shape) for shape in newer.SHAPES]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each shape built once; tests that write copy it first."""
    folder = tmp_path_factory.mktemp("newer")
    return {shape: newer.build(folder / f"{shape}.db", shape) for shape in newer.SHAPES}


@pytest.fixture
def copy_of(built: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    def make(shape: str) -> Path:
        target = tmp_path / f"{shape}.db"
        shutil.copy2(built[shape], target)
        return target

    return make


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain autocommit connection, closed on leaving the block."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def sql_of(conn: sqlite3.Connection, name: str) -> str:
    sql = newer.object_sql(conn, name)
    assert sql is not None, name
    return sql


def layout_from_master(conn: sqlite3.Connection) -> int:
    """HERMES_NEWER 2.2, read from sqlite_master only."""
    base = sql_of(conn, "messages_fts")
    if "tool_name" not in base:
        return 0
    if "messages_fts_src" in base:
        return 3
    return 1 if "tool_calls" in sql_of(conn, "messages_fts_trigram") else 2


# -- shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_table_info_is_the_declared_column_list(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        assert table_columns(conn, "sessions") == newer.columns(shape, "sessions")
        assert table_columns(conn, "messages") == newer.columns(shape, "messages")
    assert list(newer.SESSION_COLUMNS_BY_SHAPE[shape]) == newer.columns(shape, "sessions")
    assert list(newer.MESSAGE_COLUMNS_BY_SHAPE[shape]) == newer.columns(shape, "messages")


def test_column_counts_follow_hermes_newer() -> None:
    counts = {
        shape: (len(newer.columns(shape, "sessions")), len(newer.columns(shape, "messages")))
        for shape in newer.SHAPES
    }
    assert counts == {
        "v17": (39, 19),
        "v20": (42, 19),
        "v23": (42, 19),
        "v25": (46, 19),
        "v27": (56, 23),
        "v30": (61, 26),
        "v31": (64, 30),
        "fork33": (65, 31),
    }


def test_upgraded_files_keep_the_v16_prefix_and_append_later_columns() -> None:
    v16_sessions = legacy.columns_at("sessions", 16)
    assert newer.columns("v17", "sessions") == [
        *v16_sessions,
        "git_repo_root",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
    ]
    assert newer.columns("v17", "messages") == [*legacy.columns_at("messages", 16), "compacted"]
    assert newer.columns("v25", "sessions")[-4:] == [
        "last_activity_at",
        "last_activity_description",
        "last_activity_provenance",
        "system_prompt_hash",
    ]


def test_v30_fresh_order_and_v31_runtime_columns_after_id() -> None:
    v30 = newer.columns("v30", "sessions")
    assert v30[:5] == ["id", "source", "created_source", "user_id", "session_key"]
    assert v30[-1] == "tool_names"
    assert newer.columns("v30", "messages")[-6:] == [
        "compacted",
        "api_content",
        "display_kind",
        "display_metadata",
        "display_identity",
        "display_order",
    ]
    v31 = newer.columns("v31", "sessions")
    assert v31[:3] == ["id", "runtime_revision", "runtime_generation"]
    assert v31[3:-1] == v30[1:]
    assert newer.columns("fork33", "sessions")[-1] == "fork_note"
    assert newer.columns("fork33", "messages")[-1] == "fork_score"


@pytest.mark.parametrize("shape", SHAPES)
def test_schema_version_is_one_row(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (newer.SCHEMA_VERSION[shape],)
        ]
    assert newer.SCHEMA_VERSION["fork33"] == 33


@pytest.mark.parametrize("shape", SHAPES)
def test_file_is_wal_and_closed_cleanly(built: dict[str, Path], shape: str) -> None:
    path = built[shape]
    assert sorted(p.name for p in path.parent.glob(f"{shape}.db*")) == [f"{shape}.db"]
    with connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


@pytest.mark.parametrize("shape", SHAPES)
def test_v16_tables_are_kept(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"schema_version", "state_meta", "compression_locks"} <= tables
        assert table_columns(conn, "state_meta") == ["key", "value"]
        assert table_columns(conn, "compression_locks") == [
            "session_id",
            "holder",
            "acquired_at",
            "expires_at",
        ]
        assert ("session_model_usage" in tables) == (newer.SCHEMA_VERSION[shape] >= 20)
        assert ("system_prompts" in tables) == (newer.SCHEMA_VERSION[shape] >= 25)
        ledger = {"runtime_epoch", "session_admissions", "worker_executions", "worker_receipts"}
        assert (ledger <= tables) == (newer.SCHEMA_VERSION[shape] >= 31)
        assert ("fork_things" in tables) == (shape == "fork33")


@pytest.mark.parametrize("shape", SHAPES)
def test_session_model_usage_primary_key(built: dict[str, Path], shape: str) -> None:
    if newer.SCHEMA_VERSION[shape] < 20:
        return
    with connect(built[shape]) as conn:
        pk = [r[1] for r in sorted(conn.execute("PRAGMA table_info(session_model_usage)"),
                                    key=lambda r: r[5]) if r[5]]  # fmt: skip
        usage = conn.execute(
            "SELECT session_id, model, input_tokens, output_tokens, first_seen, last_seen"
            " FROM session_model_usage ORDER BY session_id"
        ).fetchall()
    five = ["session_id", "model", "billing_provider", "billing_base_url", "billing_mode"]
    assert pk == (five if shape == "v20" else [*five, "task"])
    expected = sorted(
        (
            s["id"],
            s.get("model") or "unknown",
            s.get("input_tokens", 0),
            s.get("output_tokens", 0),
            s["started_at"],
            s.get("ended_at", s["started_at"]),
        )
        for s in newer.SESSIONS
        if s.get("input_tokens", 0) + s.get("output_tokens", 0) > 0
    )
    assert usage == expected
    assert ("reset-old", "unknown") in [row[:2] for row in usage]


# -- full-text layouts --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_fts_layout_markers_match_the_create_texts(built: dict[str, Path], shape: str) -> None:
    layout = newer.FTS_LAYOUT[shape]
    with connect(built[shape]) as conn:
        meta = dict(conn.execute("SELECT key, value FROM state_meta"))
        assert layout_from_master(conn) == layout
        base = sql_of(conn, "messages_fts")
        trigram = sql_of(conn, "messages_fts_trigram")
        views = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='view'")}
    assert meta == newer.state_meta(shape)
    assert meta.get("fts_storage_version") == (str(layout) if layout else None)
    if layout == 0:
        assert "tool_name" not in base and "content=" not in base
        assert views == set()
        assert ("fts_optimize_available" in meta) == (newer.SCHEMA_VERSION[shape] >= 23)
    if layout == 1:
        assert "content='messages'" in base
        assert "tool_calls" in trigram and "content='messages_fts_trigram_src'" in trigram
    if layout == 2:
        assert "content='messages'" in base and "tool_calls" not in trigram
    if layout == 3:
        assert "content='messages_fts_src'" in base
        cjk = {"messages_fts_cjk_src"} if shape in newer.CJK_SHAPES else set()
        assert views == {"messages_fts_src", "messages_fts_trigram_src", *cjk}
    if layout >= 1:
        assert views >= {"messages_fts_trigram_src"}
    fresh_from_v30 = newer.SCHEMA_VERSION[shape] >= 30
    assert ("store_instance_id" in meta) == fresh_from_v30


@pytest.mark.parametrize("shape", SHAPES)
def test_every_trigger_of_layouts_1_to_3_has_the_rebuild_gate(
    built: dict[str, Path], shape: str
) -> None:
    with connect(built[shape]) as conn:
        triggers = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type='trigger'"
                " AND name LIKE 'messages_fts%'"
            )
        )
    names = {f"{t}_{op}" for t in legacy.FTS_TABLES for op in ("insert", "delete", "update")}
    if shape in newer.CJK_SHAPES:
        names |= set(newer.CJK_TRIGGERS)
    assert set(triggers) == names
    for name, sql in triggers.items():
        gated = "rebuild_high_water" in sql and "rebuild_progress" in sql
        assert gated == (newer.FTS_LAYOUT[shape] >= 1), name
        if name.endswith("_update"):
            assert re.search(r"AFTER UPDATE OF content, tool_name", sql) or (
                newer.SCHEMA_VERSION[shape] < 25
            ), name


@pytest.mark.parametrize("shape", SHAPES)
def test_fts_integrity_check_passes(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        assert newer.fts_integrity(conn, shape) == ["messages_fts", "messages_fts_trigram"]


@pytest.mark.parametrize("shape", SHAPES)
def test_match_finds_the_expected_rows(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        found = {
            word: newer.fts_ids(conn, "messages_fts", f'"{word}"')
            for word in ("capybara", "nurseries", "albatross", "asyncio", "wombat", "zebratail")
        }
        trigram = {
            word: newer.fts_ids(conn, "messages_fts_trigram", f'"{word}"')
            for word in ("数据库", "データベース", "协程调度器", "定时任务", "marmoset")
        }
        like = {
            word: [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM messages WHERE content LIKE ? ORDER BY id", (f"%{word}%",)
                )
            ]
            for word in ("数据", "协程调度器", "定时任务", "zebratail")
        }
    assert found == {
        "capybara": [5],
        "nurseries": [6],
        "albatross": [30],
        "asyncio": [1, 2, 3],  # row 2 through its tool_calls JSON
        "wombat": [18],
        "zebratail": [15] if newer.TOOL_TAIL_INDEXED[shape] else [],
    }
    excluded = newer.FTS_LAYOUT[shape] == 3  # cron and subagent sessions leave trigram
    assert trigram == {
        "数据库": [20],
        "データベース": [22],
        "协程调度器": [] if excluded else [24],
        "定时任务": [] if excluded else [26],
        "marmoset": [17],
    }
    assert like == {"数据": [20], "协程调度器": [24], "定时任务": [26], "zebratail": [15]}


# -- the CJK table whose tokenizer plain SQLite lacks ----------------------------------------------


def test_v30_cjk_table_names_a_tokenizer_plain_sqlite_lacks(built: dict[str, Path]) -> None:
    with connect(built["v30"]) as conn:
        assert sql_of(conn, "messages_fts_cjk") == (
            "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls,"
            " content='messages_fts_cjk_src', content_rowid='id', tokenize='cjk_unicode61')"
        )
        for trigger in newer.CJK_TRIGGERS:
            assert "messages_fts_cjk" in sql_of(conn, trigger)
        shadows = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE 'messages_fts_cjk_%'"
            )
        }
        assert shadows == {
            "messages_fts_cjk_src",
            "messages_fts_cjk_data",
            "messages_fts_cjk_idx",
            "messages_fts_cjk_docsize",
            "messages_fts_cjk_config",
            *newer.CJK_TRIGGERS,
        }
        before = conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone()
        # SQLite 3.40.1 loads the tokenizer when it opens the table, so any statement that
        # names it fails (triggers included); 3.53.4 loads it when it first reads or
        # writes text, so only the statements that do fail. Nothing changes either way.
        tokenizing = (
            "SELECT rowid FROM messages_fts_cjk WHERE messages_fts_cjk MATCH '数据'",
            "UPDATE messages SET content = 'x' WHERE id = 1",
        )
        naming = (
            "SELECT * FROM messages_fts_cjk LIMIT 0",
            "INSERT INTO messages (session_id, role, content, timestamp, active)"
            " VALUES ('cont-a', 'tool', 'x', 1.0, 1)",
            "DELETE FROM messages WHERE id = -1",
        )
        try:
            conn.execute("SELECT * FROM messages_fts_cjk LIMIT 0")
            eager = False
        except sqlite3.OperationalError:
            eager = True
        if sqlite3.sqlite_version_info in ((3, 40, 1), (3, 53, 4)):  # the builds checked
            assert eager == (sqlite3.sqlite_version_info == (3, 40, 1))
        for statement in (*tokenizing, *(naming if eager else ())):
            with pytest.raises(sqlite3.OperationalError, match="no such tokenizer: cjk_unicode61"):
                conn.execute(statement)
        if eager:
            with pytest.raises(sqlite3.OperationalError, match="no such tokenizer"):
                conn.execute("DROP TABLE messages_fts_cjk")
        else:
            conn.execute("SELECT * FROM messages_fts_cjk LIMIT 0")
            conn.execute("DELETE FROM messages WHERE id = -1")
            before = conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone()
        conn.execute("UPDATE messages SET active = active WHERE id = 1")
        assert conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone() == before
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]


def test_append_is_refused_while_the_cjk_triggers_exist(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("v30")
    with pytest.raises(sqlite3.OperationalError, match="no such tokenizer: cjk_unicode61"):
        newer.append_message(path, "cont-a", "never written")
    with connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (30,)


def test_dropping_the_cjk_triggers_like_hermes(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("v30")
    newer.drop_cjk_triggers_like_hermes(path)
    with connect(path) as conn:
        meta = dict(conn.execute("SELECT key, value FROM state_meta"))
        triggers = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        assert meta == {**newer.state_meta("v30"), "fts_cjk_stale": "1"}
        assert not triggers & set(newer.CJK_TRIGGERS)
        assert "messages_fts_cjk" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


# -- appending as Hermes does -------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_append_message_is_indexed_and_counted(copy_of: Callable[[str], Path], shape: str) -> None:
    path = copy_of(shape)
    if shape in newer.CJK_SHAPES:
        newer.drop_cjk_triggers_like_hermes(path)
    new_id = newer.append_message(path, "cont-b", "A question about the pangolin", at=1.0e9)
    assert new_id == len(newer.MESSAGES) + 1
    assert sorted(p.name for p in path.parent.glob(f"{shape}.db*")) == [f"{shape}.db"]
    with connect(path) as conn:
        row = dict(
            zip(
                newer.columns(shape, "messages"),
                conn.execute("SELECT * FROM messages WHERE id = ?", (new_id,)).fetchone(),
                strict=True,
            )
        )
        count = conn.execute("SELECT message_count FROM sessions WHERE id = 'cont-b'").fetchone()
        assert newer.fts_ids(conn, "messages_fts", "pangolin") == [new_id]
        assert newer.fts_ids(conn, "messages_fts_trigram", '"pangolin"') == [new_id]
        newer.fts_integrity(conn, shape)
    assert count == (3,)
    assert (row["role"], row["content"], row["active"], row["compacted"]) == (
        "user",
        "A question about the pangolin",
        1,
        0,
    )
    if "display_order" in row:
        assert (row["display_identity"], row["display_order"]) == (None, new_id)
    if "message_uid" in row:
        assert re.fullmatch(r"[0-9a-f]{32}", row["message_uid"])


def test_append_with_tool_calls_bumps_tool_call_count(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("v31")
    calls = json.dumps([{"id": "c1"}, {"id": "c2"}])
    newer.append_message(path, "cont-b", "two calls", role="assistant", tool_calls=calls)
    with connect(path) as conn:
        assert conn.execute(
            "SELECT message_count, tool_call_count FROM sessions WHERE id = 'cont-b'"
        ).fetchone() == (3, 2)


# -- the data set ---------------------------------------------------------------------------------


def test_fixture_counts_are_active_rows() -> None:
    for session in newer.SESSIONS:
        mine = [m for m in newer.MESSAGES if m["session_id"] == session["id"] and m["active"]]
        calls = sum(len(json.loads(m["tool_calls"])) for m in mine if m.get("tool_calls"))
        assert session["message_count"] == len(mine), session["id"]
        assert session.get("tool_call_count", 0) == calls, session["id"]
    assert [m["id"] for m in newer.MESSAGES] == list(range(1, len(newer.MESSAGES) + 1))


@pytest.mark.parametrize("shape", SHAPES)
def test_rows_are_the_written_data(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        sessions = legacy.rows(conn, "sessions")
        messages = legacy.rows(conn, "messages")
        counted = dict(
            conn.execute(
                "SELECT session_id, COUNT(*) FROM messages WHERE active = 1 GROUP BY session_id"
            )
        )
    written = newer.written_sessions(shape)
    assert [s["id"] for s in sessions] == [s["id"] for s in written]
    for stored, wanted in zip(sessions, written, strict=True):
        assert {k: stored[k] for k in wanted} == wanted
        assert stored["message_count"] == counted.get(stored["id"], 0)
    for stored, wanted in zip(messages, newer.written_messages(shape), strict=True):
        assert {k: stored[k] for k in wanted} == wanted
    by_id = {m["id"]: m for m in messages}
    assert by_id[5]["content"].startswith("\x00json:")
    assert json.loads(by_id[5]["content"][len("\x00json:") :]) == newer.LIST_CONTENT
    tool = by_id[15]["content"]
    assert len(tool) > 9000 and tool.index("zebratail") > newer.TOOL_PREFIX
    rewound = (by_id[16]["active"], by_id[16]["compacted"])
    assert rewound == (0, 0)
    assert [(by_id[i]["active"], by_id[i]["compacted"]) for i in (7, 8, 9, 10, 11, 12, 13)] == [
        (0, 1),
        (0, 1),
        (0, 0),
        (0, 0),
        (1, 0),
        (1, 0),
        (1, 0),
    ]
    assert by_id[18]["role"] == "session_meta"
    if "display_kind" in by_id[17]:
        assert by_id[17]["display_kind"] == "hidden"
        assert by_id[14]["api_content"] == newer.API_CONTENT
    if "_compressed_summary" in by_id[11]:
        assert [m["id"] for m in messages if m["_compressed_summary"]] == [11]


@pytest.mark.parametrize("shape", SHAPES)
def test_lineage_markers(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        config = dict(conn.execute("SELECT id, model_config FROM sessions"))
        parent = dict(conn.execute("SELECT id, parent_session_id FROM sessions"))
        key = dict(conn.execute("SELECT id, session_key FROM sessions"))
    assert config["cont-a"] == config["root-a"] == '{"model":"m1"}'
    assert config["cont-b"] == config["root-b"]
    assert json.loads(config["cont-b"])["_branched_from"] == "somebody-else"
    assert json.loads(config["branch-a"])["_branched_from"] == parent["branch-a"] == "root-a"
    assert json.loads(config["sub-a"]) == {"_delegate_from": "cont-a"}
    assert key["reset-old"] == key["reset-new"] == "k1"
    reset = None if config["reset-new"] is None else json.loads(config["reset-new"])
    assert reset == ({"_reset_from": "reset-old"} if shape in newer.RESET_MARKER_SHAPES else None)


@pytest.mark.parametrize("shape", SHAPES)
def test_system_prompts_by_sha256_from_v25(built: dict[str, Path], shape: str) -> None:
    with connect(built[shape]) as conn:
        columns = table_columns(conn, "sessions")
        if "system_prompt_hash" not in columns:
            inline = dict(conn.execute("SELECT id, system_prompt FROM sessions"))
            assert inline == {s["id"]: s.get("system_prompt") for s in newer.SESSIONS}
            return
        stored = dict(conn.execute("SELECT hash, prompt FROM system_prompts"))
        resolved = dict(
            conn.execute(
                "SELECT s.id, COALESCE(sp.prompt, s.system_prompt) FROM sessions s"
                " LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
            )
        )
        inline_left = conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE system_prompt IS NOT NULL"
        ).fetchone()
        hashes = dict(conn.execute("SELECT id, system_prompt_hash FROM sessions"))
    texts = ["You are Alpha.", "You are Beta.", "You are a research subagent.", "You are Hermes."]
    assert stored == {hashlib.sha256(t.encode("utf-8")).hexdigest(): t for t in texts}
    assert resolved == {s["id"]: s.get("system_prompt") for s in newer.SESSIONS}
    assert inline_left == (0,)
    assert hashes["root-a"] == hashes["cont-a"] == hashlib.sha256(b"You are Alpha.").hexdigest()
    assert hashes["cron-1"] is None


def test_foreign_key_to_system_prompts_only_in_fresh_files(built: dict[str, Path]) -> None:
    def fk_targets(shape: str) -> set[str]:
        with connect(built[shape]) as conn:
            return {r[2] for r in conn.execute("PRAGMA foreign_key_list(sessions)")}

    assert fk_targets("v25") == {"sessions"}
    assert fk_targets("v27") == fk_targets("v30") == {"sessions", "system_prompts"}


# -- v30 and v31 objects --------------------------------------------------------------------------


def test_v30_indexes_triggers_and_display_order(built: dict[str, Path]) -> None:
    with connect(built["v30"]) as conn:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('index', 'trigger')"
                " AND name NOT LIKE 'sqlite_%'"
            )
        }
        orders = conn.execute("SELECT COUNT(*) FROM messages WHERE display_order = id").fetchone()
    assert orders == (30,)
    assert names >= {
        "idx_sessions_source",
        "idx_sessions_source_id",
        "idx_sessions_parent",
        "idx_sessions_started",
        "idx_messages_session",
        "idx_messages_session_id",
        "idx_messages_assistant_calls_by_session",
        "idx_compression_locks_expires",
        "idx_session_turn_leases_expires",
        "idx_session_model_usage_session",
        "idx_session_model_usage_model",
        "idx_async_delegations_delivery",
        "idx_messages_session_active",
        "idx_messages_display_page",
        "idx_messages_display_backfill",
        "idx_messages_display_identity",
        "idx_messages_active_null",
        "idx_sessions_session_key",
        "idx_sessions_gateway_peer",
        "idx_sessions_handoff_state",
        "idx_sessions_system_prompt_hash",
        "idx_sessions_tool_names",
        "idx_sessions_effective_activity",
        "idx_messages_platform_msg_id",
        "idx_sessions_title_unique",
        "messages_display_order_insert",
        "messages_display_visibility_update",
        "messages_display_identity_update",
        "messages_display_identity_delete",
    }
    assert "messages_message_uid_insert" not in names


def test_v30_display_triggers_follow_visibility(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("v30")
    with connect(path) as conn:
        conn.execute("UPDATE messages SET display_identity = X'01' WHERE id IN (9, 12)")
        conn.execute("UPDATE messages SET active = 1 WHERE id = 9")
        assert conn.execute(
            "SELECT id, display_order FROM messages WHERE id IN (9, 12) ORDER BY id"
        ).fetchall() == [(9, 9), (12, 9)]
        conn.execute("UPDATE messages SET active = 0 WHERE id = 9")
        assert conn.execute("SELECT display_order FROM messages WHERE id = 12").fetchone() == (12,)


def test_v31_uid_trigger_guard_and_ledger(copy_of: Callable[[str], Path]) -> None:
    path = copy_of("v31")
    with connect(path) as conn:
        uids = dict(conn.execute("SELECT id, message_uid FROM messages"))
        assert uids[12] == uids[9] and uids[13] == uids[10]
        assert len(set(uids.values())) == 28
        assert "idx_messages_session_uid" in sql_of(conn, "idx_messages_session_uid")
        assert "WHEN new.message_uid IS NULL" in sql_of(conn, "messages_message_uid_insert")
        assert "messages_fts_cjk" not in {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master")
        }
        conn.execute("PRAGMA foreign_keys=ON")
        with pytest.raises(sqlite3.IntegrityError, match="newer Hermes owns this store"):
            conn.execute("DELETE FROM sessions WHERE id = 'cron-1'")
        assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id = 'cron-1'").fetchone() == (1,)


def test_fork33_unknown_column_values_and_table(built: dict[str, Path]) -> None:
    with connect(built["fork33"]) as conn:
        notes = conn.execute(
            "SELECT id, fork_note FROM sessions WHERE fork_note IS NOT NULL ORDER BY id"
        ).fetchall()
        scores = conn.execute(
            "SELECT id, fork_score FROM messages WHERE fork_score IS NOT NULL ORDER BY id"
        ).fetchall()
        things = conn.execute("SELECT * FROM fork_things").fetchall()
    assert notes == [("cron-1", "nightly"), ("root-a", "forked at alpha")]
    assert scores == [(19, 0.5), (27, 1.25)]
    assert things == [(1, "root-a", "fork data")]


def test_builder_refuses_an_unknown_shape(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown shape 'v99'"):
        newer.build(tmp_path / "x.db", "v99")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("shape", SHAPES)
def test_sentinel_content_is_seen_by_unicode61_and_instr_only(
    built: dict[str, Path], shape: str
) -> None:
    """SQLite reads the text of a '\\x00json:' row as ending at its first NUL: LIKE and
    length() see nothing, instr() and unicode61 see it all; the trigram tokenizer of
    SQLite 3.40 sees nothing, later builds' see it all."""
    with connect(built[shape]) as conn:
        seen = conn.execute(
            "SELECT content LIKE '%capybara%', length(content), instr(content, 'capybara') > 0"
            " FROM messages WHERE id = 5"
        ).fetchone()
        assert seen == (0, 0, 1)
        assert newer.fts_ids(conn, "messages_fts", "capybara") == [5]
        reads_past_nul = conn.execute(
            "SELECT count(*) FROM messages_fts_trigram_docsize d JOIN messages m ON m.id = d.id"
            " WHERE m.id = 5 AND d.sz <> x'00'"
        ).fetchone() == (1,)
        with closing(sqlite3.connect(":memory:")) as probe:
            probe.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
            probe.execute("INSERT INTO t VALUES (?)", ("\x00capybara",))
            indexed = probe.execute("SELECT count(*) FROM t WHERE t MATCH 'capybara'").fetchone()
        # 3.40.1's trigram tokenizer stops at the NUL; 3.53.4's reads on.
        assert reads_past_nul == (indexed == (1,))
        expected = [5] if reads_past_nul else []
        assert newer.fts_ids(conn, "messages_fts_trigram", '"capybara"') == expected
