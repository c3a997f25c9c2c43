"""Export and import: the JSONL bundle, Markdown, legacy transcripts, and their CLI commands."""

from __future__ import annotations

import base64
import io
import json
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EXPORT_FLAGS

import hermes_models
from hermes_models import BundleError, SessionDB
from hermes_models.cli.commands import cli
from hermes_models.driver import sqlite3
from hermes_models.transfer import pg_staging, staging
from hermes_models.transfer.bundle import FORMAT, MESSAGE_COLUMNS, SESSION_COLUMNS, selection

import legacy

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def _rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        columns = SESSION_COLUMNS if table == "sessions" else MESSAGE_COLUMNS
        order = "started_at, id" if table == "sessions" else "id"
        names = ", ".join(f'"{c}"' for c in columns)
        return conn.execute(f"SELECT {names} FROM {table} ORDER BY {order}").fetchall()
    finally:
        conn.close()


def _stored(target: Any, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` of the store ``target`` (a file or a server URL), in order."""
    db = hermes_models.connect(target)
    try:
        if table == "state_meta":
            names, order = "key, value", "key"
        else:
            columns = SESSION_COLUMNS if table == "sessions" else MESSAGE_COLUMNS
            names = ", ".join(f'"{c}"' for c in columns)
            order = "started_at, id" if table == "sessions" else "id"
        return [tuple(r) for r in db.execute_sql(f"SELECT {names} FROM {table} ORDER BY {order}")]
    finally:
        db.close()


def _dump(target: Any) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the store's tables an import writes."""
    return {table: _stored(target, table) for table in ("sessions", "messages", "state_meta")}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def source_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adopted Hermes file with lineage, Chinese text, rewinds, and some odd values."""
    path = legacy.build(tmp_path_factory.mktemp("bundle-source") / "source.db", 15)
    SessionDB(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET started_at = 1700000000.123456789 WHERE id = 'root-en'")
    conn.execute("UPDATE sessions SET estimated_cost_usd = 1e999 WHERE id = 'cont-1'")
    conn.execute("UPDATE messages SET reasoning_details = ? WHERE id = 2", (b"\x00\xffraw",))
    conn.execute(
        "UPDATE messages SET content = ? WHERE id = 3",
        ("NUL \x00 emoji 🧪 long " + "长文本" * 3000,),
    )
    conn.commit()
    conn.close()
    assert not Path(f"{path}-wal").exists()
    return path


@pytest.fixture
def source_db(source_template: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A copy of the source template, for one test; without its BLOB when the test
    imports into a PostgreSQL store (whose text columns refuse one:
    test_binary_data_is_refused_by_a_server_store)."""
    path = tmp_path / "source.db"
    shutil.copy2(source_template, path)
    if "backend" in request.fixturenames and request.getfixturevalue("backend") == "postgresql":
        conn = sqlite3.connect(path)
        conn.execute("UPDATE messages SET reasoning_details = 'raw' WHERE id = 2")
        conn.commit()
        conn.close()
    return path


@pytest.fixture
def target(
    backend: str,
    tmp_path: Path,
    migrated_copy: Callable[[Path], Path],
    request: pytest.FixtureRequest,
) -> Any:
    """A migrated store to import into, on the test's backend: a file's path, or a
    PostgreSQL URL."""
    if backend == "postgresql":
        return request.getfixturevalue("pg").new_database()
    return migrated_copy(tmp_path / "target.db")


def _export(path: Path, out: Path, **options: Any) -> dict[str, int]:
    with SessionDB(path) as store:
        return store.export_bundle(out, **options)


def _import(path: Any, bundle: Path) -> dict[str, int]:
    with SessionDB(path) as store:
        return store.import_bundle(bundle)


# -- the bundle ---------------------------------------------------------------------------


def test_bundle_holds_every_column_of_every_row_in_order(source_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    assert _export(source_db, out) == {"sessions": 8, "messages": 18}
    lines = _lines(out)
    assert lines[0] == {
        "format": FORMAT,
        "version": 1,
        "schema_version": 16,
        "sessions": 8,
        "messages": 18,
    }
    sessions = [line for line in lines[1:] if line["type"] == "session"]
    messages = [line for line in lines[1:] if line["type"] == "message"]
    assert lines[1:] == sessions + messages
    assert [list(line) for line in sessions] == [["type", *SESSION_COLUMNS]] * 8
    assert [list(line) for line in messages] == [["type", *MESSAGE_COLUMNS]] * 18

    def stored(line: dict[str, Any]) -> tuple[Any, ...]:
        values = [
            line[c] for c in (SESSION_COLUMNS if line["type"] == "session" else MESSAGE_COLUMNS)
        ]
        return tuple(base64.b64decode(v["$base64"]) if isinstance(v, dict) else v for v in values)

    assert [stored(line) for line in sessions] == _rows(source_db, "sessions")
    assert [stored(line) for line in messages] == _rows(source_db, "messages")
    assert [m["active"] for m in messages].count(0) == 1


def test_export_import_export_is_byte_identical(
    source_db: Path, tmp_path: Path, target: Any
) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    _export(source_db, first)
    assert _import(target, first) == {
        "sessions_added": 8,
        "sessions_skipped": 0,
        "messages_added": 18,
        "messages_skipped": 0,
        "messages_renumbered": 0,
        "titles_renamed": 0,
    }
    _export(target, second)
    assert second.read_bytes() == first.read_bytes()
    assert _stored(target, "sessions") == _rows(source_db, "sessions")
    assert _stored(target, "messages") == _rows(source_db, "messages")


def test_imported_messages_are_searchable_and_the_file_is_sound(
    source_db: Path, tmp_path: Path, target: Any, backend: str
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    _import(target, out)
    with SessionDB(target) as store:
        assert sorted(hit["id"] for hit in store.search_messages("uvloop")) == [9, 10]
        assert sorted(hit["id"] for hit in store.search_messages("线程池")) == [17, 18]
    if backend == "sqlite":  # FTS5's own tables and the file's foreign key check
        conn = sqlite3.connect(target)
        try:
            assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
            assert legacy.fts_ids(conn, "messages_fts", "uvloop") == [9, 10]
            assert legacy.fts_ids(conn, "messages_fts_trigram", "线程池") == [17, 18]
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        finally:
            conn.close()


def test_importing_twice_is_the_same_as_once(source_db: Path, tmp_path: Path, target: Any) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    _import(target, out)
    before = _dump(target)
    assert _import(target, out) == {
        "sessions_added": 0,
        "sessions_skipped": 8,
        "messages_added": 0,
        "messages_skipped": 18,
        "messages_renumbered": 0,
        "titles_renamed": 0,
    }
    assert _dump(target) == before


def test_one_session_travels_with_its_ancestors_and_descendants(
    source_db: Path, tmp_path: Path, target: Any
) -> None:
    out = tmp_path / "one.jsonl"
    assert _export(source_db, out, session_id="cont-1") == {"sessions": 4, "messages": 11}
    sessions = [line["id"] for line in _lines(out) if line.get("type") == "session"]
    assert sessions == ["root-en", "cont-1", "cont-2", "sub-2"]
    _import(target, out)
    with SessionDB(target) as store:
        assert store.get_compression_tip("root-en") == "cont-2"
        assert store.resolve_resume_session_id("root-en") == "cont-2"


def test_source_export_keeps_parents_of_another_source(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    with SessionDB(path) as store:
        store.create_session("parent", "cli", started_at=1.0)
        store.create_session("child", "telegram", parent_session_id="parent", started_at=2.0)
        store.create_session("other", "cli", started_at=3.0)
        out = tmp_path / "tg.jsonl"
        assert store.export_bundle(out, source="telegram") == {"sessions": 2, "messages": 0}
        with pytest.raises(ValueError, match="session_id 'nope' does not exist"):
            store.export_bundle(tmp_path / "x.jsonl", session_id="nope")
    assert [line.get("id") for line in _lines(out)[1:]] == ["parent", "child"]
    assert not (tmp_path / "x.jsonl").exists()


def test_clashing_message_ids_are_renumbered_per_session_in_order(
    source_db: Path, tmp_path: Path, target: Any, backend: str
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    with SessionDB(target) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.append_message("mine", "user", "first", timestamp=2.0)
        store.append_message("mine", "user", "second", timestamp=3.0)
        report = store.import_bundle(out)
        moved = [m["id"] for m in store.get_messages("root-en")]
        kept = [m["id"] for m in store.get_messages("cont-1")]
        appended = store.append_message("mine", "user", "third", timestamp=4.0)
        contents = [m["content"] for m in store.get_messages("root-en")]
    assert report["messages_renumbered"] == 4
    assert moved == [19, 20, 21, 22]
    assert kept == [7, 8]
    assert appended == 23
    assert contents == [r[3] for r in _rows(source_db, "messages") if r[1] == "root-en"]
    with SessionDB(target) as store:
        assert sorted(hit["id"] for hit in store.search_messages("web_search")) == [20, 21]
    if backend == "sqlite":  # FTS5's own tables
        conn = sqlite3.connect(target)
        try:
            assert legacy.fts_integrity(conn) == list(legacy.FTS_TABLES)
            assert legacy.fts_ids(conn, "messages_fts", "web_search") == [20, 21]
        finally:
            conn.close()


def test_a_session_already_present_is_left_as_it_is(
    source_db: Path, tmp_path: Path, target: Any
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    with SessionDB(target) as store:
        store.create_session("root-zh", "discord", started_at=5.0)
        store.append_message("root-zh", "user", "mine, not theirs", timestamp=6.0)
        report = store.import_bundle(out)
        assert store.get_session("root-zh")["source"] == "discord"
        assert [m["content"] for m in store.get_messages("root-zh")] == ["mine, not theirs"]
        assert store.get_session("branch-zh")["parent_session_id"] == "root-zh"
    assert (report["sessions_added"], report["sessions_skipped"]) == (7, 1)
    assert (report["messages_added"], report["messages_skipped"]) == (16, 2)


def test_a_title_already_taken_gets_the_next_number(
    source_db: Path, tmp_path: Path, target: Any
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    with SessionDB(target) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.set_session_title("mine", "Asyncio notes")
        report = store.import_bundle(out)
        titles = {s["id"]: s["title"] for s in store.list_sessions(limit=None)}
    assert report["titles_renamed"] == 1
    # "Asyncio notes #2" and "#3" are the chain's own titles, so the next free is #4.
    assert titles["root-en"] == "Asyncio notes #4"
    assert (titles["mine"], titles["cont-1"], titles["cont-2"]) == (
        "Asyncio notes",
        "Asyncio notes #2",
        "Asyncio notes #3",
    )


def test_a_failed_import_writes_nothing(
    source_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: Any
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_db, out)
    SessionDB(target).close()
    before = _dump(target)
    # The messages are written after the sessions (PostgreSQL: staged, then moved).
    real, real_move = staging.insert_rows, pg_staging.postgres_sql.move_staged_messages

    def fail_on_messages(table: str, *args: Any, **kwargs: Any) -> int:
        if table == "messages":
            raise sqlite3.OperationalError("disk I/O error")
        return real(table, *args, **kwargs)

    def fail_move(columns: Any) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(staging, "insert_rows", fail_on_messages)
    monkeypatch.setattr(pg_staging.postgres_sql, "move_staged_messages", fail_move)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _import(target, out)
    assert _dump(target) == before
    monkeypatch.setattr(pg_staging.postgres_sql, "move_staged_messages", real_move)
    monkeypatch.setattr(staging, "insert_rows", real)
    assert _import(target, out)["sessions_added"] == 8


@pytest.mark.backends("postgresql")  # a file holds the BLOB: the tests above
def test_binary_data_is_refused_by_a_server_store(
    source_template: Path, tmp_path: Path, target: Any
) -> None:
    out = tmp_path / "all.jsonl"
    _export(source_template, out)
    line = next(n for n, r in enumerate(_lines(out), 1) if r.get("id") == 2 and "role" in r)
    before = _dump(target)
    with pytest.raises(BundleError) as caught:
        _import(target, out)
    assert str(caught.value) == (
        f"{out}:{line}: message reasoning_details holds binary data ($base64), which a"
        " PostgreSQL store cannot hold (its columns are text); nothing was imported"
    )
    assert _dump(target) == before


@pytest.mark.slow  # 1,200 sessions
@pytest.mark.backends("postgresql")  # SQLite's planner reads no row counts to go stale
def test_a_large_import_leaves_the_server_statistics_of_what_it_added(
    tmp_path: Path, target: Any
) -> None:
    # A chain of the imported sessions is walked link by link (export, lineage,
    # listing): with the statistics of the empty tables the planner hashed the whole
    # table at every link. Row counts are what the import's ANALYZE leaves.
    source = tmp_path / "chain.db"
    links = staging.SMALL_IMPORT + 200
    with SessionDB(source) as store:
        parent = None
        for n in range(links):
            store.create_session(f"c{n:05d}", "cli", parent_session_id=parent)
            parent = f"c{n:05d}"
        store.export_bundle(tmp_path / "chain.jsonl")
    with SessionDB(target) as store:
        assert store.import_bundle(tmp_path / "chain.jsonl")["sessions_added"] == links
        counted = store.database.execute_sql(
            "SELECT relname, reltuples::bigint FROM pg_class"
            " WHERE relname IN ('sessions', 'messages') ORDER BY relname"
        ).fetchall()
        assert counted == [("messages", 0), ("sessions", links)]
        assert selection("c00000") == [f"c{n:05d}" for n in range(links)]


def test_progress_is_reported_up_to_the_total(source_db: Path, tmp_path: Path, target: Any) -> None:
    out = tmp_path / "all.jsonl"
    seen: list[tuple[int, int]] = []
    with SessionDB(source_db) as store:
        store.export_bundle(out, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(18, 18)]
    seen.clear()
    with SessionDB(target) as store:
        store.import_bundle(out, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(26, 26)]  # a small import is one write


def test_export_to_a_stream_and_import_from_one(
    source_db: Path, tmp_path: Path, target: Any
) -> None:
    stream = io.StringIO()
    with SessionDB(source_db) as store:
        store.export_bundle(stream)
    file = tmp_path / "all.jsonl"
    _export(source_db, file)
    assert stream.getvalue() == file.read_text(encoding="utf-8")
    with SessionDB(target) as store:
        assert store.import_bundle(io.StringIO(stream.getvalue()))["messages_added"] == 18


HEADER = json.dumps(
    {"format": FORMAT, "version": 1, "schema_version": 16, "sessions": 1, "messages": 1}
)
SESSION = {"type": "session", "id": "s1", "source": "cli", "started_at": 1.0}
MESSAGE = {"type": "message", "id": 1, "session_id": "s1", "role": "user", "timestamp": 2.0}


def _bundle(*records: Any, header: str = HEADER) -> str:
    return (
        "\n".join([header, *(r if isinstance(r, str) else json.dumps(r) for r in records)]) + "\n"
    )


BAD = [
    pytest.param("{not json\n", r":1: not valid JSON", id="not-json"),
    pytest.param(json.dumps(SESSION) + "\n", r":1: not a hermes-models-bundle", id="no-header"),
    pytest.param(
        _bundle(SESSION, MESSAGE, header=HEADER.replace('"version": 1', '"version": 2')),
        r"version 2 is not one this package reads \(<= 1\)",
        id="newer-format",
    ),
    pytest.param(
        _bundle(SESSION, MESSAGE, header=HEADER.replace("16", "17")),
        r"schema_version 17 is not one",
        id="newer-schema",
    ),
    pytest.param(
        _bundle({**SESSION, "colour": "red"}, MESSAGE),
        r":2: unknown session column\(s\) colour",
        id="unknown-column",
    ),
    pytest.param(
        _bundle({**SESSION, "source": None}, MESSAGE),
        r":2: session line lacks source",
        id="missing-value",
    ),
    pytest.param(
        _bundle({**SESSION, "type": "note"}, MESSAGE),
        r":2: unknown line type 'note'",
        id="unknown-type",
    ),
    pytest.param(
        _bundle(SESSION, SESSION, MESSAGE),
        r":3: session 's1' appears twice",
        id="duplicate-session",
    ),
    pytest.param(
        _bundle(SESSION),
        r"announces 1 messages but the file holds 0 \(truncated\?\)",
        id="truncated",
    ),
    pytest.param(
        _bundle(SESSION, {**MESSAGE, "session_id": "s2"}),
        r"message 1 belongs to session 's2', which the bundle does not contain",
        id="foreign-message",
    ),
    pytest.param(
        _bundle(SESSION, {**MESSAGE, "content": ["a"]}),
        r":3: message content must be text or null, not a JSON array",
        id="list-value",
    ),
    pytest.param(
        _bundle(SESSION, {**MESSAGE, "reasoning_details": {"$base64": "!!"}}),
        r":3: message reasoning_details bad \$base64 value",
        id="bad-base64",
    ),
    pytest.param(
        _bundle(SESSION, {**MESSAGE, "id": "1"}),
        r":3: message id must be an integer, not text",
        id="text-id",
    ),
    pytest.param("", r"empty file", id="empty"),
]


@pytest.mark.parametrize(("text", "error"), BAD)
def test_bad_bundles_are_refused_before_any_write(
    tmp_path: Path, text: str, error: str, target: Any
) -> None:
    bundle = tmp_path / "bad.jsonl"
    bundle.write_text(text, encoding="utf-8")
    SessionDB(target).close()
    before = _dump(target)
    with pytest.raises(BundleError, match=error):
        _import(target, bundle)
    assert _dump(target) == before


def test_a_child_whose_parent_is_nowhere_is_refused(tmp_path: Path, target: Any) -> None:
    bundle = tmp_path / "orphan.jsonl"
    bundle.write_text(_bundle({**SESSION, "parent_session_id": "ghost"}, MESSAGE), encoding="utf-8")
    SessionDB(target).close()
    before = _dump(target)
    with pytest.raises(
        BundleError,
        match=r"orphan.jsonl:2: session 's1' has parent 'ghost', which neither the bundle nor",
    ):
        _import(target, bundle)
    assert _dump(target) == before


def test_hand_written_lines_take_the_schema_defaults(tmp_path: Path, target: Any) -> None:
    bundle = tmp_path / "small.jsonl"
    bundle.write_text(_bundle(SESSION, MESSAGE), encoding="utf-8")
    with SessionDB(target) as store:
        store.import_bundle(bundle)
        session = store.get_session("s1")
        message = store.get_messages("s1")[0]
    assert {k: session[k] for k in ("message_count", "rewind_count", "archived", "title")} == {
        "message_count": 1,
        "rewind_count": 0,
        "archived": 0,
        "title": None,
    }
    assert (message["id"], message["active"], message["observed"], message["content"]) == (
        1,
        1,
        0,
        None,
    )


# -- Hermes-compatible dict exports and Markdown ----------------------------------------------


def test_export_session_and_export_all_return_hermes_shapes(source_db: Path) -> None:
    with SessionDB(source_db) as store:
        one = store.export_session("cont-2")
        assert one == {**store.get_session("cont-2"), "messages": store.get_messages("cont-2")}
        assert [m["id"] for m in one["messages"]] == [9, 10, 12]
        assert store.export_session("missing") is None
        # As Hermes exports: the plain session listing, most recently active first.
        everything = store.export_all()
        listed = store.search_sessions(limit=None)
        assert [s["id"] for s in everything] == [s["id"] for s in listed]
        assert everything[0] == {**listed[0], "messages": store.get_messages(listed[0]["id"])}
        assert set(everything[0]) == {*store.get_session("branch-zh"), "last_active", "messages"}
        assert [s["id"] for s in store.export_all(source="telegram")] == [
            "branch-zh",
            "sub-3",
            "root-zh",
        ]


def test_markdown_shows_a_lineage_for_reading(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    with SessionDB(path) as store:
        store.create_session("s", "cli", model="gpt-x", started_at=0.0)
        store.set_session_title("s", "Loops")
        store.append_message("s", "user", "What is an event loop?", timestamp=1.0)
        store.append_message(
            "s",
            "assistant",
            [{"type": "text", "text": "A scheduler."}],
            timestamp=2.0,
            tool_calls=[{"id": "c", "function": {"name": "look"}}],
        )
        rewound = store.append_message("s", "user", "never mind", timestamp=3.0)
        store.rewind_to_message("s", rewound)
        store.create_session("k", "cli", parent_session_id="s", started_at=4.0)
        out = io.StringIO()
        assert store.export_markdown(out, session_id="k") == 2
    assert out.getvalue() == "\n".join(
        [
            "# Hermes sessions",
            "",
            "## Loops",
            "",
            "- id: `s`",
            "- source: cli · model: gpt-x",
            "- started: 1970-01-01 00:00:00 UTC · ended: -",
            "- lineage: root",
            "- messages: 3 · tool calls: 1 · tokens: 0 in / 0 out",
            "",
            "### user · 1970-01-01 00:00:01 UTC",
            "",
            "What is an event loop?",
            "",
            "### assistant · 1970-01-01 00:00:02 UTC",
            "",
            "```json",
            "[",
            "  {",
            '    "type": "text",',
            '    "text": "A scheduler."',
            "  }",
            "]",
            "```",
            "",
            "Tool calls:",
            "",
            "```json",
            "[",
            "  {",
            '    "id": "c",',
            '    "function": {',
            '      "name": "look"',
            "    }",
            "  }",
            "]",
            "```",
            "",
            "### user · 1970-01-01 00:00:03 UTC · rewound",
            "",
            "never mind",
            "",
            "",
            "## k",
            "",
            "- id: `k`",
            "- source: cli · model: -",
            "- started: 1970-01-01 00:00:04 UTC · ended: -",
            "- lineage: ephemeral of `s`",
            "- messages: 0 · tool calls: 0 · tokens: 0 in / 0 out",
            "",
            "",
        ]
    )


# -- legacy per-session transcripts ---------------------------------------------------------


def _write_transcript(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
        ),
        encoding="utf-8",
    )
    return path


TRANSCRIPT = [
    {
        "role": "session_meta",
        "model": "claude-x",
        "platform": "telegram",
        "cwd": "/srv",
        "title": "Old chat",
        "timestamp": "2024-03-01T10:00:00",
        "tools": [{"type": "function"}],
    },
    {"role": "user", "content": "你好，请帮我查天气", "timestamp": "2024-03-01T10:00:05"},
    {
        "role": "assistant",
        "content": None,
        "timestamp": 1709287206.5,
        "finish_reason": "tool_calls",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
        "reasoning": "Need the weather tool.",
    },
    {"role": "tool", "content": "晴 22°C", "tool_call_id": "c1", "name": "weather", "mirror": True},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "It is sunny."}],
        "timestamp": "2024-03-01T02:00:09Z",
    },
    {"role": "developer", "content": "not stored"},
]


def test_a_legacy_transcript_becomes_a_session(tmp_path: Path, target: Any) -> None:
    file = _write_transcript(tmp_path / "20240301_100000_ab12cd.jsonl", TRANSCRIPT)
    local = datetime.fromisoformat("2024-03-01T10:00:00").timestamp()
    with SessionDB(target) as store:
        report = store.import_transcripts(file)
        session = store.get_session("20240301_100000_ab12cd")
        messages = store.get_messages("20240301_100000_ab12cd")
    assert report == {
        "files": 1,
        "sessions_added": 1,
        "sessions_skipped": 0,
        "messages_added": 4,
        "lines_skipped": 1,
        "failed": [],
    }
    assert {
        k: session[k]
        for k in (
            "source",
            "model",
            "cwd",
            "title",
            "started_at",
            "message_count",
            "tool_call_count",
        )
    } == {
        "source": "telegram",
        "model": "claude-x",
        "cwd": "/srv",
        "title": "Old chat",
        "started_at": local,
        "message_count": 4,
        "tool_call_count": 1,
    }
    assert [
        (m["role"], m["content"], m["timestamp"], m["tool_name"], m["tool_call_id"])
        for m in messages
    ] == [
        ("user", "你好，请帮我查天气", local + 5, None, None),
        ("assistant", None, 1709287206.5, None, None),
        ("tool", "晴 22°C", 1709287206.5, "weather", "c1"),
        ("assistant", [{"type": "text", "text": "It is sunny."}], 1709258409.0, None, None),
    ]
    assert messages[1]["tool_calls"] == TRANSCRIPT[2]["tool_calls"]
    assert (messages[1]["finish_reason"], messages[1]["reasoning"]) == (
        "tool_calls",
        "Need the weather tool.",
    )


def test_a_long_transcript_is_written_in_steps_in_file_order(
    tmp_path: Path, target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 500)
    monkeypatch.setattr(pg_staging, "BATCH_ROWS", 500)
    lines = [{"role": "user", "content": f"line {n}", "timestamp": 10 + n} for n in range(1500)]
    file = _write_transcript(tmp_path / "long.jsonl", lines)
    with SessionDB(target) as store:
        store.create_session("mine", "cli")
        first = store.append_message("mine", "user", "mine")
        report = store.import_transcripts(file)
        messages = store.get_messages("long")
        after = store.append_message("mine", "user", "after")
        count = store.get_session("long")["message_count"]
    assert (report["sessions_added"], report["messages_added"], count) == (1, 1500, 1500)
    assert [m["content"] for m in messages] == [f"line {n}" for n in range(1500)]
    assert [m["id"] for m in messages] == list(range(first + 1, first + 1501))
    assert after == first + 1501


def test_a_folder_of_transcripts_is_imported_once_with_failures_reported(
    tmp_path: Path, target: Any
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    _write_transcript(folder / "a.jsonl", [{"role": "user", "content": "hello", "timestamp": 10}])
    _write_transcript(
        folder / "b.jsonl", [{"role": "user", "content": "bad", "timestamp": "yesterday"}]
    )
    _write_transcript(folder / "c.jsonl", [{"role": "user", "content": "world", "timestamp": 20}])
    (folder / "notes.txt").write_text("not a transcript")
    with SessionDB(target) as store:
        first = store.import_transcripts(folder, source="discord")
        second = store.import_transcripts(folder)
        sessions = {s["id"]: s["source"] for s in store.list_sessions(limit=None)}
    assert first == {
        "files": 3,
        "sessions_added": 2,
        "sessions_skipped": 0,
        "messages_added": 2,
        "lines_skipped": 0,
        "failed": [
            {
                "file": str(folder / "b.jsonl"),
                "error": f"{folder / 'b.jsonl'}:1: timestamp 'yesterday' is neither epoch"
                " seconds nor ISO 8601",
            }
        ],
    }
    assert (second["sessions_added"], second["sessions_skipped"]) == (0, 2)
    assert sessions == {"a": "discord", "c": "discord"}


def test_a_single_bad_transcript_raises_and_writes_nothing(tmp_path: Path, target: Any) -> None:
    file = _write_transcript(tmp_path / "s.jsonl", [{"role": "user", "content": "ok"}, "[1, 2]"])
    with SessionDB(target) as store:
        with pytest.raises(BundleError, match=r"s.jsonl:2: a line must be a JSON object"):
            store.import_transcripts(file)
        with pytest.raises(FileNotFoundError, match="does not exist"):
            store.import_transcripts(tmp_path / "missing")
        assert store.session_count() == 0


@pytest.mark.parametrize(
    ("content", "held"),
    [
        (b"", ""),
        (b"\n\n", ""),
        (b'{"role": "robot", "content": "x"}\n', " (1 line(s) of roles the store does not hold)"),
    ],
    ids=["empty", "blank-lines", "no-role-it-holds"],
)
def test_a_transcript_without_messages_or_meta_is_refused_and_adds_no_session(
    tmp_path: Path, target: Any, content: bytes, held: str
) -> None:
    file = tmp_path / "backup2.jsonl"
    file.write_bytes(content)
    with SessionDB(target) as store:
        with pytest.raises(BundleError) as raised:
            store.import_transcripts(file)
        assert str(raised.value) == (
            f"{file}: no message and no session_meta line{held}; not a transcript, nothing imported"
        )
        assert store.session_count() == 0
    meta_only = _write_transcript(tmp_path / "quiet.jsonl", [{"role": "session_meta"}])
    with SessionDB(target) as store:  # a session_meta line alone is an empty session
        assert store.import_transcripts(meta_only)["sessions_added"] == 1


# -- the command line -----------------------------------------------------------------------


def test_cli_export_then_import_round_trips(source_db: Path, tmp_path: Path, target: Any) -> None:
    runner = CliRunner()
    out = tmp_path / "all.jsonl"
    result = runner.invoke(cli, ["export", "--db", str(source_db), *EXPORT_FLAGS, "-o", str(out)])
    assert (result.exit_code, result.output) == (0, f"wrote 8 sessions and 18 messages to {out}\n")
    stdout = runner.invoke(cli, ["export", "--db", str(source_db), *EXPORT_FLAGS])
    assert stdout.stdout_bytes == out.read_bytes()
    result = runner.invoke(cli, ["import", "--db", str(target), str(out)])
    assert (result.exit_code, result.output) == (
        0,
        "imported 8 sessions and 18 messages (0 sessions already present,"
        " 0 messages given new ids)\n",
    )
    again = runner.invoke(cli, ["export", "--db", str(target), *EXPORT_FLAGS])
    assert again.stdout_bytes == out.read_bytes()


def test_messages_of_no_session_are_left_out_of_an_export_that_then_imports(
    source_db: Path, tmp_path: Path, target: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A killed import leaves its staged messages without a session until the next
    # import; a damaged file may hold such rows too. A bundle of them would be refused.
    conn = sqlite3.connect(source_db)
    conn.execute(
        "INSERT INTO messages (id, session_id, role, content, timestamp)"
        " VALUES (900, 'staged-by-a-killed-import', 'user', 'half', 1.0)"
    )
    conn.commit()
    conn.close()
    out = tmp_path / "all.jsonl"
    assert _export(source_db, out) == {"sessions": 8, "messages": 18}
    assert "1 message(s) belong to no session" in caplog.text
    assert _lines(out)[0]["messages"] == 18
    assert all(line.get("session_id") != "staged-by-a-killed-import" for line in _lines(out))
    assert _import(target, out)["messages_added"] == 18


def test_cli_exports_one_session_as_markdown(source_db: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "export",
            "--db",
            str(source_db),
            *EXPORT_FLAGS,
            "--session",
            "事件循环讨论",
            "--format",
            "md",
        ],
    )
    assert result.exit_code == 0, result.output
    headings = [line for line in result.output.splitlines() if line.startswith("## ")]
    assert headings == ["## 事件循环讨论", "## sub-3", "## 事件循环讨论 (分支)"]


def test_cli_imports_a_transcript_folder_and_fails_on_a_bad_file(
    tmp_path: Path, target: Any
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    _write_transcript(folder / "good.jsonl", [{"role": "user", "content": "hi", "timestamp": 1}])
    _write_transcript(folder / "bad.jsonl", ["{oops"])
    result = CliRunner().invoke(cli, ["import", "--db", str(target), str(folder)])
    assert result.exit_code == 1
    assert result.stdout == (
        "imported 1 session and 1 message from 2 transcript files (0 already present, "
        "0 lines skipped)\n"
    )
    assert result.stderr == f"failed: {folder / 'bad.jsonl'}:1: not valid JSON\n"


def test_cli_import_of_a_bad_bundle_is_one_line(tmp_path: Path, target: Any) -> None:
    bundle = tmp_path / "b.jsonl"
    bundle.write_text(_bundle(SESSION), encoding="utf-8")
    result = CliRunner().invoke(cli, ["import", "--db", str(target), str(bundle)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {bundle}: the header announces 1 messages but the file holds 0 (truncated?)\n"
    )


def test_export_of_a_selection_carries_its_ancestors(store: SessionDB, tmp_path: Path) -> None:
    store.create_session("root", "cli", started_at=1_700_000_000.0)
    store.append_message("root", "user", "first", timestamp=1_700_000_001.0)
    store.end_session("root", "compression")
    store.create_session("cont", "cli", parent_session_id="root", started_at=1_700_000_010.0)
    store.append_message("cont", "user", "second", timestamp=1_700_000_011.0)
    store.create_session("other", "telegram", started_at=1_700_000_020.0)
    store.append_message("other", "user", "third", timestamp=1_700_000_021.0)
    out = tmp_path / "part.jsonl"
    assert store.export_bundle(out, session_id="cont") == {"sessions": 2, "messages": 2}
    assert [(line["type"], line["id"]) for line in _lines(out)[1:]] == [
        ("session", "root"),
        ("session", "cont"),
        ("message", 1),
        ("message", 2),
    ]
    assert store.export_bundle(out, source="telegram", overwrite=True) == {
        "sessions": 1,
        "messages": 1,
    }
    assert [(line["type"], line["id"]) for line in _lines(out)[1:]] == [
        ("session", "other"),
        ("message", 3),
    ]


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda s: s.export_bundle(5), TypeError, "target"),
        (lambda s: s.export_bundle(io.StringIO(), session_id=5), TypeError, "session_id"),
        (lambda s: s.export_markdown(io.StringIO(), source=5), TypeError, "source"),
        (lambda s: s.import_bundle(5), TypeError, "source"),
        (lambda s: s.import_transcripts(5), TypeError, "path"),
    ],
)
def test_export_and_import_arguments_of_the_wrong_kind_are_named(
    store: SessionDB, call: Any, error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=f"^{name}"):
        call(store)


def test_export_and_import_paths_expand_the_home_folder(
    store: SessionDB,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: Any,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store.create_session("s", "cli", started_at=1_700_000_000.0)
    store.append_message("s", "user", "hello", timestamp=1_700_000_001.0)
    assert store.export_bundle("~/backup.jsonl") == {"sessions": 1, "messages": 1}
    assert (tmp_path / "backup.jsonl").exists()
    other = SessionDB(target)
    try:
        result = other.import_bundle("~/backup.jsonl")
        assert other.get_messages("s")[0]["content"] == "hello"
        assert result["sessions_added"] == 1
    finally:
        other.close()


# -- a fork's columns and tables -----------------------------------------------------------


def _forked_store(path: Path, migrated_copy: Callable[[Path], Path]) -> Path:
    """A v16 store a fork added to: a column of sessions and a table of its own."""
    migrated_copy(path)
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hello")
        store.create_session("s2", "cli")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("ALTER TABLE sessions ADD COLUMN fork_note TEXT")
        conn.execute("UPDATE sessions SET fork_note = 'kept by the fork' WHERE id = 's1'")
        conn.execute("CREATE TABLE fork_things (id INTEGER PRIMARY KEY, session_id TEXT, v TEXT)")
        conn.executemany(
            "INSERT INTO fork_things (session_id, v) VALUES (?, ?)",
            [("s1", "one"), ("s2", "two"), ("s1", "three")],
        )
        conn.execute("CREATE TABLE fork_settings (k TEXT PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO fork_settings VALUES ('colour', 'blue')")
    conn.close()
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_forks_columns_and_tables_travel_in_the_bundle_and_import_names_them(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    source = _forked_store(tmp_path / "fork.db", migrated_copy)
    everything = tmp_path / "all.jsonl"
    assert _export(source, everything) == {"sessions": 2, "messages": 1}
    header, *body = _lines(everything)
    assert header["schema_version"] == 16
    assert header["tables"] == {"fork_settings": 1, "fork_things": 3}
    sessions = {line["id"]: line for line in body if line["type"] == "session"}
    assert list(sessions["s1"])[-1] == "fork_note"
    assert (sessions["s1"]["fork_note"], sessions["s2"]["fork_note"]) == ("kept by the fork", None)
    assert [line for line in body if line["type"] == "row"] == [
        {"type": "row", "table": "fork_settings", "row": {"k": "colour", "v": "blue"}},
        {"type": "row", "table": "fork_things", "row": {"id": 1, "session_id": "s1", "v": "one"}},
        {"type": "row", "table": "fork_things", "row": {"id": 2, "session_id": "s2", "v": "two"}},
        {"type": "row", "table": "fork_things", "row": {"id": 3, "session_id": "s1", "v": "three"}},
    ]
    # One session's bundle carries the rows of that session's, and no table tied to none.
    one = tmp_path / "one.jsonl"
    _export(source, one, session_id="s2")
    header, *body = _lines(one)
    assert header["tables"] == {"fork_settings": 0, "fork_things": 1}
    assert [line["row"] for line in body if line["type"] == "row"] == [
        {"id": 2, "session_id": "s2", "v": "two"}
    ]
    # A store of this package cannot hold the column: the import says which, and adds nothing.
    target = migrated_copy(tmp_path / "target.db")
    with pytest.raises(BundleError, match=r"unknown session column\(s\) fork_note"):
        _import(target, everything)
    assert _rows(target, "sessions") == []


def test_import_names_a_table_it_cannot_hold(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    bundle = tmp_path / "rows.jsonl"
    header = {"format": FORMAT, "version": 1, "schema_version": 16, "sessions": 0, "messages": 0}
    row = {"type": "row", "table": "fork_settings", "row": {"k": "colour"}}
    bundle.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    target = migrated_copy(tmp_path / "target.db")
    refusal = r"rows\.jsonl:2: a row of table 'fork_settings', which a store of this package"
    with pytest.raises(BundleError, match=refusal):
        _import(target, bundle)
