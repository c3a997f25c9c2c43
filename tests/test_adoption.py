"""Adopting files an older Hermes wrote, and handing files back to Hermes v16."""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import hermes_models
from hermes_models import MigrationError, SessionDB
from hermes_models.cli.commands import cli
from hermes_models.driver import sqlite3
from hermes_models.models.lineage import kind_of
from hermes_models.models.tables import Session
from hermes_models.store.schema import MIGRATIONS

import legacy

#: The files upgraded in place (v16 is adopted as it is).
OLD = [
    pytest.param((2, False), id="v2"),
    pytest.param((3, False), id="v3"),
    pytest.param((6, True), id="v6-grown-from-v2"),
    pytest.param((10, False), id="v10"),
    pytest.param((11, False), id="v11"),
    pytest.param((12, False), id="v12"),
    pytest.param((15, False), id="v15"),
]

V16_TRIGGERS = sorted(
    f"{t}_{op}" for t in legacy.FTS_TABLES for op in ("insert", "delete", "update")
)
#: What migration 0009 adds to every file: the triggers listing messages changed since
#: the gram index indexed them (plain SQL, which Hermes' own processes run as they are).
GRAM_TRIGGERS = [
    "messages_cjk_changed_delete",
    "messages_cjk_changed_insert",
    "messages_cjk_changed_update",
]


def _read(path: Path) -> dict[str, list[dict[str, Any]]]:
    conn = sqlite3.connect(path)
    try:
        return {table: legacy.rows(conn, table) for table in ("sessions", "messages")}
    finally:
        conn.close()


def _query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _expected_after(version: int, before: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The old columns of every row as adoption must leave them."""
    sessions = []
    for row in before["sessions"]:
        row = dict(row)
        if row["id"] in legacy.DELEGATE_TAGS:
            row["model_config"] = legacy.DELEGATE_TAGS[row["id"]]
        if version == 3 and row["id"] == "branch-zh":
            row["title"] = legacy.V3_DUPLICATE_TITLE + " #2"
        sessions.append(row)
    return {"sessions": sessions, "messages": before["messages"]}


def _default(declaration: str) -> Any:
    match = re.search(r"DEFAULT (\d+)", declaration)
    return int(match.group(1)) if match else None


def _indexed_text(message: dict[str, Any]) -> str:
    return " ".join(message.get(k) or "" for k in ("content", "tool_name", "tool_calls")).lower()


@pytest.fixture
def old_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[int, Path]:
    version, grown = request.param
    return version, legacy.build(tmp_path / "state.db", version, grown=grown)


def _adopt(path: Path) -> list[str]:
    return hermes_models.migrate(path)


# -- upgrading v2 ... v15 in place ---------------------------------------------------------


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_every_row_keeps_its_old_values(old_file: tuple[int, Path]) -> None:
    version, path = old_file
    before = _read(path)
    assert _adopt(path) == list(MIGRATIONS)
    after = _read(path)
    kept = {
        table: [{k: row[k] for k in before[table][0]} for row in after[table]]
        for table in ("sessions", "messages")
    }
    assert kept == _expected_after(version, before)


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_added_columns_hold_their_defaults(old_file: tuple[int, Path]) -> None:
    version, path = old_file
    before = _read(path)
    _adopt(path)
    after = _read(path)
    added_somewhere = []
    for table, spec in (("sessions", legacy.SESSION_COLUMNS), ("messages", legacy.MESSAGE_COLUMNS)):
        added = {name: decl for name, decl, _ in spec if name not in before[table][0]}
        added_somewhere += added
        found = {name: [row[name] for row in after[table]] for name in added}
        assert found == {name: [_default(decl)] * len(after[table]) for name, decl in added.items()}
    assert "git_branch" in added_somewhere, f"v{version} files lack git_branch"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new file migrate() built, the upgraded files' reference (only read)."""
    path = tmp_path_factory.mktemp("fresh") / "fresh.db"
    hermes_models.migrate(path)
    return path


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_upgraded_file_has_the_v16_schema(old_file: tuple[int, Path], fresh: Path) -> None:
    _, path = old_file
    _adopt(path)

    def shape(p: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for table in ("schema_version", "sessions", "messages", "state_meta", "compression_locks"):
            # Columns added by ALTER TABLE come last: compare them as a set.
            out[table] = sorted(
                _query(
                    p,
                    'SELECT name, type, "notnull", dflt_value, pk'
                    f" FROM pragma_table_info('{table}')",
                )
            )
            out[table + " keys"] = sorted(
                _query(p, f'SELECT "table", "from", "to" FROM pragma_foreign_key_list(\'{table}\')')
            )
        out["indexes"] = [
            (name, table, re.sub(r"\s+", " ", sql))
            for name, table, sql in _query(
                p,
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'"
                " AND sql IS NOT NULL ORDER BY name",
            )
        ]
        out["triggers"] = [
            (name, re.sub(r"\s+", " ", sql))
            for name, sql in _query(
                p, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
            )
        ]
        out["fts"] = [
            (name, re.sub(r"\s+", "", sql))
            for name, sql in _query(
                p,
                "SELECT name, sql FROM sqlite_master"
                " WHERE sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name",
            )
        ]
        out["version"] = _query(p, "SELECT version FROM schema_version")
        return out

    assert shape(path) == shape(fresh)
    assert shape(path)["version"] == [(16,)]
    assert [name for name, _ in shape(path)["triggers"]] == sorted(V16_TRIGGERS + GRAM_TRIGGERS)


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_subagent_children_are_tagged_and_nothing_else(old_file: tuple[int, Path]) -> None:
    _, path = old_file
    before = dict(_query(path, "SELECT id, model_config FROM sessions"))
    _adopt(path)
    after = dict(_query(path, "SELECT id, model_config FROM sessions"))
    assert after == {**before, **legacy.DELEGATE_TAGS}


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_search_indexes_find_old_english_and_chinese_content(old_file: tuple[int, Path]) -> None:
    _, path = old_file
    messages = _read(path)["messages"]
    _adopt(path)

    def matching(*needles: str) -> list[int]:
        return [m["id"] for m in messages if all(n in _indexed_text(m) for n in needles)]

    conn = sqlite3.connect(path)
    try:
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
        assert legacy.fts_ids(conn, "messages_fts", "asyncio") == matching("asyncio")
        assert legacy.fts_ids(conn, "messages_fts", "event loop") == matching("event", "loop")
        # tool_name and tool_calls are indexed too (old layouts indexed content only).
        assert legacy.fts_ids(conn, "messages_fts", "web_search") == matching("web_search")
        assert legacy.fts_ids(conn, "messages_fts_trigram", "事件循环") == matching("事件循环")
        assert legacy.fts_ids(conn, "messages_fts_trigram", "线程池") == matching("线程池")
        assert matching("事件循环") and matching("web_search") and matching("线程池")
    finally:
        conn.close()


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_search_messages_finds_old_content_in_english_and_chinese(
    old_file: tuple[int, Path],
) -> None:
    _, path = old_file
    messages = _read(path)["messages"]
    active = [m for m in messages if m.get("active", 1) == 1]

    def matching(needle: str, rows: list[dict[str, Any]]) -> list[int]:
        return sorted(m["id"] for m in rows if needle in _indexed_text(m))

    with SessionDB(path) as store:

        def found(query: str, **options: Any) -> list[int]:
            return sorted(hit["id"] for hit in store.search_messages(query, limit=100, **options))

        # BM25 words, tool names, trigram (3+ CJK characters) and LIKE (1-2).
        for query in ("asyncio", "uvloop", "web_search", "事件循环", "线程池", "协程"):
            assert found(query) == matching(query, active), query
        assert found("trio") == []
        assert found("trio", include_inactive=True) == matching("trio", messages)
        first = store.search_messages("事件循环", sort="oldest", limit=1)
    question = next(m for m in messages if m["content"] == "请解释事件循环的工作原理")
    assert first == [
        {
            "id": question["id"],
            "session_id": "root-zh",
            "role": "user",
            "snippet": "请解释>>>事件循环<<<的工作原理  ",
            "timestamp": legacy.T0 + 301,
            "tool_name": None,
            "source": "telegram",
            "model": "qwen-max",
            "session_started": legacy.T0 + 300,
            "context": [
                {"role": "user", "content": "请解释事件循环的工作原理"},
                {"role": "assistant", "content": "事件循环负责调度协程和回调。"},
            ],
        }
    ]


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_lineage_works_on_the_upgraded_file(old_file: tuple[int, Path]) -> None:
    _, path = old_file
    with SessionDB(path) as store:
        assert store.get_compression_tip("root-en") == "cont-2"
        assert store.get_compression_tip("cont-1") == "cont-2"
        assert store.resolve_resume_session_id("root-en") == "cont-2"
        listed = [
            (row["id"], row.get("_lineage_root_id")) for row in store.list_sessions_rich(limit=None)
        ]
        assert listed == [("branch-zh", None), ("root-zh", None), ("cont-2", "root-en")]
        with hermes_models.using(store.database):
            kinds = {s.id: kind_of(s) for s in Session.select()}
    assert kinds == {
        "root-en": "root",
        "cont-1": "compression",
        "cont-2": "compression",
        "sub-1": "compression",  # untagged under a compressed parent (Hermes v17 on)
        "sub-2": "ephemeral",
        "root-zh": "root",
        "sub-3": "ephemeral",
        "branch-zh": "branch",
    }


@pytest.mark.parametrize("old_file", OLD, indirect=True)
def test_plain_sql_writer_keeps_both_indexes_right(old_file: tuple[int, Path]) -> None:
    _, path = old_file
    _adopt(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        en = legacy.hermes_append(
            conn, "cont-2", "user", "Tell me about goroutines", legacy.T0 + 500
        )
        zh = legacy.hermes_append(
            conn,
            "branch-zh",
            "assistant",
            "协程调度器的设计",
            legacy.T0 + 501,
            tool_name="search_docs",
        )
        gone = legacy.hermes_append(conn, "root-zh", "user", "临时消息 goroutines", legacy.T0 + 502)
        conn.execute(
            "UPDATE messages SET content = 'Tell me about green threads' WHERE id = ?", (en,)
        )
        conn.execute("DELETE FROM messages WHERE id = ?", (gone,))
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
        assert legacy.fts_ids(conn, "messages_fts", "goroutines") == []
        assert legacy.fts_ids(conn, "messages_fts", "green threads") == [en]
        assert legacy.fts_ids(conn, "messages_fts", "search_docs") == [zh]
        assert legacy.fts_ids(conn, "messages_fts_trigram", "协程调度") == [zh]
        assert legacy.fts_ids(conn, "messages_fts_trigram", "临时消息") == []
        total = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        for table in legacy.FTS_TABLES:
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == total
    finally:
        conn.close()
    with SessionDB(path) as store:
        assert [m["content"] for m in store.get_messages("branch-zh")][-1] == "协程调度器的设计"


def test_duplicate_titles_from_before_the_unique_index_are_numbered(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 3)
    assert _query(
        path, "SELECT id, title FROM sessions WHERE title = ?", (legacy.V3_DUPLICATE_TITLE,)
    ) == [
        ("root-zh", legacy.V3_DUPLICATE_TITLE),
        ("branch-zh", legacy.V3_DUPLICATE_TITLE),
    ]
    _adopt(path)
    assert _query(
        path, "SELECT id, title FROM sessions WHERE title LIKE '事件循环讨论%' ORDER BY id"
    ) == [
        ("branch-zh", legacy.V3_DUPLICATE_TITLE + " #2"),
        ("root-zh", legacy.V3_DUPLICATE_TITLE),
    ]


def test_search_triggers_under_other_names_are_replaced(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    conn = sqlite3.connect(path)
    try:
        for table in legacy.FTS_TABLES:
            for op in ("insert", "delete", "update"):
                (sql,) = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (f"{table}_{op}",)
                ).fetchone()
                conn.execute(f"DROP TRIGGER {table}_{op}")
                conn.execute(sql.replace(f"TRIGGER {table}_{op}", f"TRIGGER {table}_a{op[0]}"))
        conn.commit()
    finally:
        conn.close()
    _adopt(path)
    assert [
        r[0]
        for r in _query(path, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    ] == sorted(V16_TRIGGERS + GRAM_TRIGGERS)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        new = legacy.hermes_append(
            conn, "root-en", "user", "one more asyncio question", legacy.T0 + 600
        )
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
        assert new in legacy.fts_ids(conn, "messages_fts", "asyncio")
        assert conn.execute(
            "SELECT COUNT(*) FROM messages_fts WHERE rowid = ?", (new,)
        ).fetchone() == (1,)
    finally:
        conn.close()


def test_a_stray_trigger_writing_to_a_search_index_is_removed(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 15)
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TRIGGER legacy_unindex AFTER UPDATE OF tool_name ON messages"
        " BEGIN DELETE FROM messages_fts WHERE rowid = old.id; END"
    )
    conn.commit()
    conn.close()
    _adopt(path)
    triggers = _query(path, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    assert [r[0] for r in triggers] == sorted(V16_TRIGGERS + GRAM_TRIGGERS)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE messages SET tool_name = 'renamed_tool' WHERE id = 3")
        assert legacy.fts_ids(conn, "messages_fts", "renamed_tool") == [3]
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
    finally:
        conn.close()


def test_cli_migrate_upgrades_an_old_file(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    result = CliRunner().invoke(cli, ["migrate", "--db", str(path)])
    assert result.exit_code == 0, result.output
    # The adoption says so once: the file changed here, and never again for this reason.
    assert result.output.splitlines() == [
        f"Warning: {path}: adopted this Hermes v10 store and upgraded it to v16 (rows kept)",
        *(f"applied {m}" for m in MIGRATIONS),
        f"{path}: schema up to date",
    ]
    assert _query(path, "SELECT version FROM schema_version") == [(16,)]
    again = CliRunner().invoke(cli, ["migrate", "--db", str(path)])
    assert again.output.splitlines() == [f"{path}: schema up to date"]


def _adopt_together(path: str, barrier: Any, results: Any) -> None:
    barrier.wait(timeout=60)
    try:
        results.put(("ok", hermes_models.migrate(path)))
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow
def test_four_processes_opening_an_old_file_upgrade_it_once(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    before = _read(path)
    spawn = multiprocessing.get_context("spawn")
    barrier, results = spawn.Barrier(4), spawn.Queue()
    procs = [
        spawn.Process(target=_adopt_together, args=(str(path), barrier, results)) for _ in range(4)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert sorted(outcomes) == [("ok", []), ("ok", []), ("ok", []), ("ok", list(MIGRATIONS))]
    assert _query(path, "SELECT migration_id, operation FROM _yoyo_log ORDER BY 1") == [
        (name, "apply") for name in MIGRATIONS
    ]
    after = _read(path)
    assert [{k: r[k] for k in before["messages"][0]} for r in after["messages"]] == before[
        "messages"
    ]


@pytest.mark.slow  # waits out a Hermes writer's lock
def test_upgrade_waits_for_a_hermes_writer_holding_the_lock(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    locked, appended = threading.Event(), []

    def hermes_writer() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            cursor = conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('root-en', 'user', 'written during the upgrade', ?)",
                (legacy.T0 + 700,),
            )
            appended.append(cursor.lastrowid)
            locked.set()
            time.sleep(0.5)
            conn.execute("COMMIT")
        finally:
            conn.close()

    writer = threading.Thread(target=hermes_writer)
    writer.start()
    assert locked.wait(10)
    try:
        assert _adopt(path) == list(MIGRATIONS)
    finally:
        writer.join()
    conn = sqlite3.connect(path)
    try:
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
        assert legacy.fts_ids(conn, "messages_fts", "upgrade") == appended
    finally:
        conn.close()


# -- v16 files and failures: nothing changes ----------------------------------------------


def test_v16_file_is_adopted_without_any_change(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 16)
    before = legacy.dump(path)
    # Only this package's own additions are applied; every Hermes object and row is as it was.
    assert _adopt(path) == [
        "0007_cjk_gram_index",
        "0008_time_order_indexes",
        "0009_cjk_gram_changes",
        "0010_parallel_labels",
        "0011_search_bm25",
    ]
    assert legacy.dump(path) == before
    assert sorted(r[0] for r in _query(path, "SELECT migration_id FROM _yoyo_migration")) == sorted(
        MIGRATIONS
    )
    assert _adopt(path) == []


FAILURES = [
    pytest.param(
        "CREATE TRIGGER boom BEFORE INSERT ON schema_version"
        " BEGIN SELECT RAISE(ABORT, 'boom'); END",
        id="fails-writing-the-version",
    ),
    pytest.param(
        "CREATE TRIGGER boom BEFORE UPDATE OF model_config ON sessions"
        " BEGIN SELECT RAISE(ABORT, 'boom'); END",
        id="fails-in-the-last-data-step",
    ),
]


@pytest.mark.parametrize("trap", FAILURES)
@pytest.mark.parametrize("version", [3, 10])
def test_failed_upgrade_leaves_the_file_exactly_as_it_was(
    tmp_path: Path, version: int, trap: str
) -> None:
    path = legacy.build(tmp_path / "state.db", version)
    conn = sqlite3.connect(path)
    conn.execute(trap)
    conn.commit()
    conn.close()
    before = legacy.dump(path)
    with pytest.raises(
        MigrationError, match=rf"Hermes v{version} database failed .* unchanged.*boom"
    ):
        _adopt(path)
    assert legacy.dump(path) == before
    assert _query(path, "SELECT COUNT(*) FROM _yoyo_migration") == [(0,)]
    assert _query(path, "SELECT COUNT(*) FROM _yoyo_log") == [(0,)]
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER boom")
    conn.commit()
    conn.close()
    assert _adopt(path) == list(MIGRATIONS)


def test_a_sessions_table_that_is_not_hermes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (token TEXT, expires INTEGER)")
    conn.execute("INSERT INTO sessions VALUES ('abc', 1)")
    conn.commit()
    conn.close()
    before = legacy.dump(path)
    with pytest.raises(MigrationError, match="'sessions' table without id, source, started_at"):
        _adopt(path)
    assert legacy.dump(path) == before


# -- two-way compatibility ----------------------------------------------------------------


def _layout(path: Path) -> dict[str, Any]:
    """What SQLite reports about the Hermes objects: columns, keys, indexes, triggers."""
    out: dict[str, Any] = {"version": _query(path, "SELECT * FROM schema_version")}
    tables = [
        r[0]
        for r in _query(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if not legacy.is_bookkeeping(r[0])
    ]
    out["tables"] = tables
    for table in tables:
        out[f"{table} columns"] = _query(path, f"PRAGMA table_info('{table}')")
        out[f"{table} keys"] = _query(path, f"PRAGMA foreign_key_list('{table}')")
        out[f"{table} indexes"] = sorted(
            (name, unique, origin, partial, tuple(_query(path, f"PRAGMA index_xinfo('{name}')")))
            for _, name, unique, origin, partial in _query(path, f"PRAGMA index_list('{table}')")
            if not legacy.is_bookkeeping(name.replace("sqlite_autoindex_", ""))
        )
    out["partial"] = _query(
        path,
        "SELECT name, substr(sql, instr(sql, 'WHERE')) FROM sqlite_master"
        " WHERE type = 'index' AND sql LIKE '%WHERE%' ORDER BY name",
    )
    out["virtual"] = [
        (name, re.sub(r"\s+", "", sql))
        for name, sql in _query(
            path,
            "SELECT name, sql FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL%' ORDER BY name",
        )
        if not legacy.is_bookkeeping(name)
    ]
    out["triggers"] = [
        (name, table, re.sub(r"\s+", " ", sql))
        for name, table, sql in _query(
            path,
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name",
        )
        if not legacy.is_bookkeeping(name)
    ]
    return out


def test_a_new_file_has_exactly_the_hermes_v16_layout(tmp_path: Path) -> None:
    ours = tmp_path / "ours.db"
    theirs = legacy.build_v16(tmp_path / "theirs.db")
    SessionDB(ours).close()
    assert _layout(ours) == _layout(theirs)
    assert _layout(ours)["version"] == [(16,)]


def test_hermes_v16_starts_on_a_file_we_wrote_and_we_read_what_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("ours", "cli", model="gpt-x")
        ours_id = store.append_message("ours", "user", "written by hermes_models 你好世界")
    seen = legacy.hermes_startup_check(path)
    assert seen["version"] == 16
    assert {
        "schema_version",
        "sessions",
        "messages",
        "state_meta",
        "compression_locks",
        *legacy.FTS_TABLES,
    } <= seen["tables"]
    assert set(V16_TRIGGERS + GRAM_TRIGGERS) == seen["triggers"]
    assert seen["sessions"] == legacy.columns_at("sessions", 16)
    assert seen["messages"] == legacy.columns_at("messages", 16)

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, model_config) VALUES (?, ?, ?, ?)",
            ("theirs", "telegram", legacy.T0, '{"_branched_from": "ours"}'),
        )
        theirs_id = legacy.hermes_append(
            conn, "theirs", "user", "written by Hermes 协程调度器", legacy.T0 + 1
        )
        rows = conn.execute(
            "SELECT id, session_id, role, content, active FROM messages ORDER BY id"
        ).fetchall()
        assert rows == [
            (ours_id, "ours", "user", "written by hermes_models 你好世界", 1),
            (theirs_id, "theirs", "user", "written by Hermes 协程调度器", 1),
        ]
        assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
        assert legacy.fts_ids(conn, "messages_fts", "written") == [ours_id, theirs_id]
        assert legacy.fts_ids(conn, "messages_fts_trigram", "协程调度") == [theirs_id]
    finally:
        conn.close()
    with SessionDB(path) as store:
        assert store.get_session("theirs")["message_count"] == 1
        assert [m["content"] for m in store.get_messages("theirs")] == [
            "written by Hermes 协程调度器"
        ]
