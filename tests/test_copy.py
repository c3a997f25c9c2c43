"""``hermes-models copy``: whole stores moved between SQLite files and PostgreSQL
(schemas of one database, and databases), checked against real files and the
test server: the rows come back identical, a non-empty target is refused, a
merge is idempotent, a killed copy finishes when run again, and a target that
differs from its source fails the check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from console_script import SCRIPT, build_demo_store, environment, run
from pg_server import Server

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.errors import CopyError, TargetNotEmptyError, VerificationError
from hermes_models.store import postgres_sql
from hermes_models.store.postgres import open_database
from hermes_models.transfer import copy as copy_module
from hermes_models.transfer.bundle import MESSAGE_COLUMNS, SESSION_COLUMNS
from hermes_models.transfer.copy import MARKER_KEY, copy_store, order_sessions, verify_copy

TABLE_COLUMNS = {
    "sessions": SESSION_COLUMNS,
    "messages": MESSAGE_COLUMNS,
    "state_meta": ("key", "value"),
    "compression_locks": ("session_id", "holder", "acquired_at", "expires_at"),
}

BIG = "".join(f"word{i % 1000} " for i in range(250_000))  # 2 MB of text


# -- stores and their rows ----------------------------------------------------------------------


def _session(session_id: str, **values: Any) -> tuple[Any, ...]:
    row: dict[str, Any] = dict.fromkeys(SESSION_COLUMNS)
    row.update(
        id=session_id,
        source="cli",
        started_at=1_700_000_000.25,
        message_count=0,
        tool_call_count=0,
        input_tokens=0,
        output_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        reasoning_tokens=0,
        api_call_count=0,
        rewind_count=0,
        archived=0,
    )
    row.update(values)
    return tuple(row[c] for c in SESSION_COLUMNS)


def _message(message_id: int, session_id: str, **values: Any) -> tuple[Any, ...]:
    row: dict[str, Any] = dict.fromkeys(MESSAGE_COLUMNS)
    row.update(
        id=message_id,
        session_id=session_id,
        role="user",
        content=f"message {message_id}",
        timestamp=1_700_000_000.5 + message_id,
        observed=0,
        active=1,
    )
    row.update(values)
    return tuple(row[c] for c in MESSAGE_COLUMNS)


def _insert(path: Path, sessions: list[tuple[Any, ...]], messages: list[tuple[Any, ...]]) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute("PRAGMA foreign_keys = OFF")
            s_marks = ", ".join("?" * len(SESSION_COLUMNS))
            m_marks = ", ".join("?" * len(MESSAGE_COLUMNS))
            names = ", ".join(f'"{c}"' for c in MESSAGE_COLUMNS)
            conn.executemany(f"INSERT INTO sessions VALUES ({s_marks})", sessions)
            conn.executemany(f"INSERT INTO messages ({names}) VALUES ({m_marks})", messages)
    finally:
        conn.close()


def rich_store(path: Path, migrated_copy: Any) -> Path:
    """A store with what a copy must carry exactly: NUL and JSON content, CJK, a 1.7 MB
    message, parent chains, archived sessions, rewound messages, state_meta, locks, and
    a message id sequence above the highest id."""
    migrated_copy(path)
    sessions = [
        _session("root", title="Root 根", model_config='{"a": 1}', system_prompt="sys\x00tem"),
        _session("child", parent_session_id="root", end_reason="compression", ended_at=1.7e9),
        _session("grandchild", parent_session_id="child", archived=1, rewind_count=2),
        _session("cjk-会话", source="telegram", estimated_cost_usd=0.125, input_tokens=2**40),
        _session("empty", cwd="/tmp/x", git_branch="main"),
    ]
    messages = [
        _message(1, "root", content="plain"),
        _message(2, "root", content='\x00json:[{"type": "text", "text": "部分"}]'),
        _message(3, "root", role="assistant", content="nul \x00 inside \x00\x00", token_count=7),
        _message(4, "child", content="数据库迁移 事件循环 こんにちは 안녕하세요"),
        _message(5, "child", role="tool", content=BIG, tool_name="shell", tool_call_id="c1"),
        _message(6, "grandchild", content="rewound", active=0),
        _message(9, "grandchild", content="\ue000 escape char and \ue0000 too", observed=1),
        _message(10, "cjk-会话", content=None, tool_calls='[{"id": "c1"}]', reasoning="r"),
    ]
    _insert(path, sessions, messages)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE sqlite_sequence SET seq = 40 WHERE name = 'messages'")
        conn.execute("INSERT INTO state_meta VALUES ('last_auto_prune', '1700000000.0')")
        conn.execute("INSERT INTO state_meta VALUES ('nul', ?)", ("a\x00b",))
        conn.execute("INSERT INTO state_meta VALUES ('hermes_models.import', 'a lease')")
        conn.execute("INSERT INTO compression_locks VALUES ('root', 'host:1:2', 1.5, 3e9)")
    conn.close()
    return path


def _names(columns: tuple[str, ...]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def sqlite_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: sorted(
                conn.execute(f"SELECT {_names(cols)} FROM {table}").fetchall(),
                key=repr,
            )
            for table, cols in TABLE_COLUMNS.items()
        }
    finally:
        conn.close()


def pg_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    db = open_database(url, migrate_first=False)
    try:
        conn = db.connection()
        return {
            table: sorted(
                (tuple(row) for row in conn.execute(f"SELECT {_names(cols)} FROM {table}")),
                key=repr,
            )
            for table, cols in TABLE_COLUMNS.items()
        }
    finally:
        db.close()


def pg_execute(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    db = open_database(url, migrate_first=False)
    try:
        cursor = db.connection().execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        db.close()


def sqlite_execute(path: Path, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def without_local(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows a copy carries: the source's import lease stays behind."""
    kept = dict(rows)
    kept["state_meta"] = [r for r in rows["state_meta"] if r[0] != "hermes_models.import"]
    return kept


# -- round trips ---------------------------------------------------------------------------------


def test_sqlite_to_postgresql_and_back_gives_identical_rows(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    url = pg.new_database(migrated=False)

    there = copy_store(source, url)
    assert (there.sessions_copied, there.messages_copied) == (5, 8)
    assert there.state_meta_copied == 2 and there.compression_locks_copied == 1
    assert there.verified == {
        "sessions": 5,
        "messages": 8,
        "state_meta": 2,
        "compression_locks": 1,
    }
    expected = without_local(sqlite_rows(source))
    assert pg_rows(url) == expected
    assert pg_execute(url, "SELECT count(*) FROM state_meta WHERE key = %s", (MARKER_KEY,)) == [
        (0,)
    ]
    # The server's planner counts what the copy wrote (ANALYZE at the end), not the
    # empty tables the migrations made.
    assert pg_execute(
        url,
        "SELECT relname, reltuples::int FROM pg_class"
        " WHERE relname IN ('sessions', 'messages') ORDER BY relname",
    ) == [("messages", 8), ("sessions", 5)]

    back = tmp_path / "back.db"
    copy_store(url, back)
    assert sqlite_rows(back) == expected
    # Both stores hand out new ids above every id the source ever handed out (40).
    assert sqlite_execute(back, "SELECT seq FROM sqlite_sequence WHERE name = 'messages'") == [
        (40,)
    ]
    with SessionDB(back) as store:
        assert store.append_message("root", "user", "after") == 41
    next_id = pg_execute(
        url,
        "INSERT INTO messages (session_id, role, timestamp) VALUES ('root', 'user', 1) "
        "RETURNING id",
    )
    assert next_id == [(41,)]


def test_postgresql_to_postgresql_between_schemas_and_databases(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    expected = without_local(sqlite_rows(source))
    url = pg.new_database(migrated=False)
    one, two = f"{url}?schema=alice", f"{url}?schema=bob"
    copy_store(source, one)
    report = copy_store(one, two)
    assert report.verified["messages"] == 8
    assert pg_rows(two) == expected
    other = pg.new_database()
    copy_store(two, other)
    assert pg_rows(other) == expected
    # Each profile has tables of its own; the database's default schema has none.
    for schema in ("alice", "bob"):
        assert pg_execute(url, f"SELECT count(*) FROM {schema}.sessions") == [(5,)]
    assert pg_execute(
        url,
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    ) == [(0,)]


@pytest.mark.slow  # a whole copy and its check
def test_sqlite_to_sqlite(tmp_path: Path, migrated_copy: Any) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    report = copy_store(source, f"sqlite:///{tmp_path / 'copy.db'}")
    assert report.verified["sessions"] == 5
    assert sqlite_rows(tmp_path / "copy.db") == without_local(sqlite_rows(source))
    # The copy is searchable: both FTS5 indexes were filled as the rows went in.
    with SessionDB(tmp_path / "copy.db") as store:
        assert [hit["session_id"] for hit in store.search_messages("数据库迁移")] == ["child"]


def test_the_demo_store_both_ways(tmp_path: Path, pg: Server) -> None:
    demo = build_demo_store(tmp_path / "demo.db")
    url = pg.new_database()
    copy_store(demo, url)
    copy_store(url, tmp_path / "back.db")
    assert sqlite_rows(tmp_path / "back.db") == sqlite_rows(demo)
    assert verify_copy(demo, url) == verify_copy(url, tmp_path / "back.db")
    with SessionDB(tmp_path / "back.db") as store, SessionDB(demo) as original:
        assert store.list_sessions_rich(limit=None) == original.list_sessions_rich(limit=None)


# -- refusal, merge ------------------------------------------------------------------------------


def test_a_target_with_rows_is_refused_and_a_merge_twice_is_the_same(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    url = pg.new_database()
    copy_store(source, url)
    before = pg_rows(url)
    with pytest.raises(TargetNotEmptyError, match=r"is not empty \(sessions: 5"):
        copy_store(source, url)
    for _ in range(2):
        again = copy_store(source, url, merge=True)
        assert (again.sessions_copied, again.sessions_skipped) == (0, 5)
        assert (again.messages_copied, again.messages_skipped) == (0, 8)
        assert again.state_meta_copied == 0 and again.rows_differing == 0
        assert pg_rows(url) == before


@pytest.mark.slow  # several whole copies
def test_a_merge_adds_what_is_missing_and_keeps_what_the_target_has(
    tmp_path: Path, migrated_copy: Any
) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    target = migrated_copy(tmp_path / "target.db")
    # The target has a session of its own that uses message ids 1 and 2, a different
    # version of "empty", and its own value of a state_meta key.
    _insert(
        target,
        [_session("theirs"), _session("empty", title="changed")],
        [_message(1, "theirs"), _message(2, "theirs")],
    )
    sqlite_execute(target, "INSERT INTO state_meta VALUES ('last_auto_prune', '5')")
    report = copy_store(source, target, merge=True)
    assert report.sessions_copied == 4 and report.sessions_skipped == 1
    # "root" had ids 1-3: one was taken, so all three come after every id in use (40).
    assert report.messages_renumbered == 3
    assert sqlite_execute(target, "SELECT id FROM messages WHERE session_id = 'root'") == [
        (41,),
        (42,),
        (43,),
    ]
    assert sqlite_execute(target, "SELECT title FROM sessions WHERE id = 'empty'") == [("changed",)]
    assert sqlite_execute(target, "SELECT value FROM state_meta WHERE key = 'last_auto_prune'") == [
        ("5",)
    ]
    assert report.rows_differing == 2  # the session "empty" and the state_meta key
    with SessionDB(target) as store:
        assert store.append_message("theirs", "user", "next") == 44
    # Merging again changes nothing.
    rows = sqlite_rows(target)
    assert copy_store(source, target, merge=True).sessions_copied == 0
    assert sqlite_rows(target) == rows


@pytest.mark.parametrize(
    "to_server",
    [
        pytest.param(False, id="into-a-file"),
        pytest.param(True, id="into-a-server", marks=pytest.mark.postgresql),
    ],
)
def test_a_merge_renames_a_title_the_target_holds_as_an_import_does(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_copy: Any, to_server: bool
) -> None:
    # The source's "foo" and "foo #2" meet a target holding "foo": the merge finishes,
    # every title stays unique, and a second merge changes nothing.
    source = migrated_copy(tmp_path / "source.db")
    _insert(
        source,
        [_session("x", title="foo"), _session("y", title="foo #2"), _session("z", title="bar")],
        [_message(1, "x"), _message(2, "y")],
    )
    if to_server:
        pg: Server = request.getfixturevalue("pg")
        target: Any = pg.new_database()
        with SessionDB(target) as store:
            store.create_session("q", "cli")
            store.set_session_title("q", "foo")
    else:
        target = migrated_copy(tmp_path / "target.db")
        _insert(target, [_session("q", title="foo")], [])
    report = copy_store(source, target, merge=True)
    assert (report.sessions_copied, report.titles_renamed) == (3, 1)
    with SessionDB(target) as store:
        titles = {s["id"]: s["title"] for s in store.list_sessions_rich(limit=None)}
        # "foo #2" is the source's own (y keeps it), so x takes the next free number.
        assert titles == {"q": "foo", "x": "foo #3", "y": "foo #2", "z": "bar"}
        assert [m["content"] for m in store.get_messages("x")] == ["message 1"]
    again = copy_store(source, target, merge=True)
    assert (again.sessions_copied, again.sessions_skipped, again.titles_renamed) == (0, 3, 0)
    assert again.rows_differing == 1  # x keeps the title the first merge gave it


@pytest.mark.parametrize(
    "appends",
    [
        pytest.param((3, 3), id="past-the-source-ids"),  # set below what it handed out
        pytest.param((1, 3), id="past-them-after-the-second-read"),  # without the lock
    ],
)
def test_ids_taken_while_a_merge_moves_the_servers_counter_are_not_handed_out_again(
    tmp_path: Path,
    migrated_copy: Any,
    pg: Server,
    monkeypatch: pytest.MonkeyPatch,
    appends: tuple[int, int],
) -> None:
    """The merge reads the identity of ``messages.id``, then sets it past the source's
    ids (5 here; the target handed out 3); ids a gateway takes in between must stay
    above it. The gateway appends ``appends[k]`` messages, in a thread given half a
    second, at the k-th read of the identity while the copy raises it: the second
    time the copy holds the gateway's inserts off, and the thread waits."""
    url = pg.new_database()
    with SessionDB(url) as store:
        store.create_session("live", "gateway")
        for n in range(3):
            store.append_message("live", "user", f"before {n}")  # ids 1-3
    source = migrated_copy(tmp_path / "source.db")
    _insert(source, [_session("theirs")], [_message(i, "theirs") for i in range(1, 6)])
    appended: list[int] = []
    failed: list[str] = []

    def append(count: int) -> None:
        try:
            with SessionDB(url) as gateway:
                for _ in range(count):
                    appended.append(gateway.append_message("live", "user", "meanwhile"))
        except Exception as exc:  # reported by the assertion below
            failed.append(f"{type(exc).__name__}: {exc}")

    reads, raises = copy_module._PostgresSide.one, copy_module._PostgresSide.raise_sequence
    threads: list[threading.Thread] = []
    raising: list[int] = []

    def one(side: Any, sql: str, params: Any = ()) -> Any:
        value = reads(side, sql, params)
        if raising and sql == postgres_sql.MESSAGE_SEQUENCE and len(threads) < len(appends):
            threads.append(threading.Thread(target=append, args=(appends[len(threads)],)))
            threads[-1].start()
            threads[-1].join(0.5)
        return value

    def raise_sequence(side: Any, value: int) -> None:
        raising.append(value)
        try:
            raises(side, value)
        finally:
            raising.pop()

    monkeypatch.setattr(copy_module._PostgresSide, "one", one)
    monkeypatch.setattr(copy_module._PostgresSide, "raise_sequence", raise_sequence)
    report = copy_store(source, url, merge=True)
    for thread in threads:
        thread.join(30)
    assert failed == []
    assert (report.sessions_copied, report.messages_copied, report.messages_renumbered) == (1, 5, 5)
    with SessionDB(url) as store:
        appended.append(store.append_message("live", "user", "after"))
        ids = [m["id"] for m in store.get_messages("live")] + [
            m["id"] for m in store.get_messages("theirs")
        ]
        assert store.message_count() == 3 + len(appended) + 5
    assert len(appended) == sum(appends[: len(threads)]) + 1
    assert len(set(ids)) == len(ids)


def test_a_session_another_writer_adds_during_a_merge_into_a_file_is_skipped(
    tmp_path: Path, migrated_copy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway creates session ``b`` in the target just after the merge's first look
    at which sessions the target has: the merge looks again under the write lock and
    leaves ``b`` as the gateway wrote it (it used to stop on the target's unique index)."""
    source = migrated_copy(tmp_path / "source.db")
    _insert(
        source,
        [_session("a"), _session("b"), _session("c")],
        [_message(1, "a"), _message(2, "b"), _message(3, "c")],
    )
    target = migrated_copy(tmp_path / "target.db")
    looks = copy_module._SqliteSide.present
    created: list[str] = []

    def gateway() -> None:
        conn = sqlite3.connect(target, timeout=5)
        try:
            with conn:
                conn.execute(
                    "INSERT INTO sessions (id, source, started_at) VALUES ('b', 'gateway', 2.0)"
                )
            created.append("b")
        finally:
            conn.close()

    def present(side: Any, table: str, ids: Any) -> set[Any]:
        found = looks(side, table, ids)
        if table == "sessions" and side.label == str(target) and not created:
            writer = threading.Thread(target=gateway)
            writer.start()
            writer.join(5)
        return found

    monkeypatch.setattr(copy_module._SqliteSide, "present", present)
    report = copy_store(source, target, merge=True)
    assert created == ["b"]
    assert (report.sessions_copied, report.sessions_skipped) == (2, 1)
    assert (report.messages_copied, report.messages_skipped) == (2, 1)
    assert sqlite_execute(target, "SELECT id, source FROM sessions ORDER BY id") == [
        ("a", "cli"),
        ("b", "gateway"),
        ("c", "cli"),
    ]
    assert sqlite_execute(target, "SELECT id, session_id FROM messages ORDER BY id") == [
        (1, "a"),
        (3, "c"),
    ]
    assert report.rows_differing == 2  # the target's own "b": its row, its messages


def test_the_same_store_is_refused(tmp_path: Path, migrated_copy: Any, pg: Server) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    with pytest.raises(CopyError, match="the same store"):
        copy_store(source, f"sqlite:///{source}")
    url = pg.new_database()
    with pytest.raises(CopyError, match="the same store"):
        copy_store(f"{url}?schema=a", f"{url}?schema=a")


def test_a_source_without_a_store_is_refused(tmp_path: Path, pg: Server) -> None:
    url = pg.new_database(migrated=False)
    with pytest.raises(CopyError, match="holds no Hermes session store"):
        copy_store(url, tmp_path / "t.db")
    assert not (tmp_path / "t.db").exists()


def test_what_a_store_of_version_16_cannot_hold_is_named_and_nothing_is_copied(
    tmp_path: Path, migrated_copy: Any
) -> None:
    # A fork's column and tables would be left behind: the copy says which, before any write.
    source = rich_store(tmp_path / "fork.db", migrated_copy)
    conn = sqlite3.connect(source)
    with conn:
        conn.execute("ALTER TABLE sessions ADD COLUMN fork_note TEXT")
        conn.execute("CREATE TABLE fork_things (id INTEGER PRIMARY KEY, v TEXT)")
    conn.close()
    before = source.read_bytes()
    target = tmp_path / "t.db"
    with pytest.raises(CopyError) as refused:
        copy_store(source, target)
    assert str(refused.value) == (
        f"{source} has what a version 16 store cannot hold: a copy would lose "
        "sessions.fork_note, table fork_things; nothing was copied "
        "(`hermes-models export` keeps all of it in a bundle)"
    )
    assert not target.exists()
    assert source.read_bytes() == before


TOPIC_ROWS = {
    "telegram_dm_topic_mode": "SELECT chat_id, user_id, enabled, has_topics_enabled,"
    " allows_users_to_create_topics FROM telegram_dm_topic_mode ORDER BY chat_id",
    "telegram_dm_topic_bindings": "SELECT chat_id, thread_id, user_id, session_key, session_id,"
    " managed_mode FROM telegram_dm_topic_bindings ORDER BY chat_id, thread_id",
}


@pytest.mark.parametrize("into", ["file", pytest.param("server", marks=pytest.mark.postgresql)])
def test_telegram_topic_tables_are_copied(
    tmp_path: Path, migrated_copy: Any, request: pytest.FixtureRequest, into: str
) -> None:
    source = rich_store(tmp_path / "topics.db", migrated_copy)
    with SessionDB(source) as store:
        store.enable_telegram_topic_mode(chat_id="c1", user_id="u1", has_topics_enabled=True)
        store.enable_telegram_topic_mode(chat_id="c2", user_id="u2")
        store.bind_telegram_topic(
            chat_id="c1", thread_id="7", user_id="u1", session_key="k1", session_id="root"
        )
        store.bind_telegram_topic(
            chat_id="c1", thread_id="8", user_id="u1", session_key="k2", session_id="child"
        )
    expected = {table: sqlite_execute(source, sql) for table, sql in TOPIC_ROWS.items()}
    assert [len(rows) for rows in expected.values()] == [2, 2]
    if into == "file":
        target: Any = tmp_path / "t.db"
        read = lambda sql: sqlite_execute(target, sql)  # noqa: E731
    else:
        target = request.getfixturevalue("pg").new_database(migrated=False)
        read = lambda sql: pg_execute(target, sql)  # noqa: E731
    report = copy_store(source, target)
    assert report.topic_rows_copied == 4
    assert report.verified["telegram_dm_topic_mode"] == 2
    assert report.verified["telegram_dm_topic_bindings"] == 2
    assert {table: [tuple(r) for r in read(sql)] for table, sql in TOPIC_ROWS.items()} == expected
    again = copy_store(source, target, merge=True)  # a merge adds nothing the target has
    assert again.topic_rows_copied == 0
    assert {table: [tuple(r) for r in read(sql)] for table, sql in TOPIC_ROWS.items()} == expected
    with SessionDB(target) as store:
        assert store.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1") is True
        binding = store.get_telegram_topic_binding(chat_id="c1", thread_id="8")
        assert binding is not None and binding["session_id"] == "child"


def test_a_newer_hermes_file_is_refused_naming_what_would_be_lost(tmp_path: Path) -> None:
    import newer

    source = newer.build(tmp_path / "v31.db", "v31")
    target = tmp_path / "t.db"
    with pytest.raises(CopyError) as refused:
        copy_store(source, target)
    message = str(refused.value)
    assert message.startswith(
        f"{source} has Hermes schema version 31, newer than 16: a copy would lose sessions."
    )
    assert message.endswith(
        "; nothing was copied (`hermes-models export` keeps all of it in a bundle)"
    )
    assert " more" in message  # more than six things are named by count
    assert not target.exists()


def test_a_newer_hermes_file_is_refused_by_a_server_before_it_changes(
    tmp_path: Path, pg: Server
) -> None:
    """#21 point 6, decided: a v17-v31 file is not moved to a server (whose schema is
    v16's); the refusal names what would be lost and the server database stays empty,
    through the library and through the installed command."""
    import newer

    for shape in ("v17", "v25", "v31"):
        source = newer.build(tmp_path / f"{shape}.db", shape)
        url = pg.new_database()
        with pytest.raises(CopyError) as refused:
            copy_store(source, url)
        message = str(refused.value)
        version = newer.SCHEMA_VERSION[shape]
        assert message.startswith(
            f"{source} has Hermes schema version {version}, newer than 16: a copy would lose "
        ), message
        assert "sessions." in message  # the newer columns are named
        result = run("copy", str(source), url, cwd=tmp_path, env=environment(tmp_path))
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].startswith(
            f"Error: {source} has Hermes schema version {version}, newer than 16: "
            "a copy would lose sessions."
        ), result.stderr
        import psycopg

        with psycopg.connect(url) as conn:
            # A test database may come migrated (from a template): no row, in any case.
            exists = conn.execute("SELECT to_regclass('sessions') IS NOT NULL").fetchone()
            rows = conn.execute("SELECT count(*) FROM sessions").fetchone() if exists[0] else (0,)
        assert rows == (0,)


# -- damaged sources -----------------------------------------------------------------------------


def test_order_sessions_puts_parents_first_and_cuts_each_loop_once() -> None:
    parents = {
        "a": None,
        "b": "a",
        "c": "b",
        "d": "gone",  # a parent in neither store
        "x": "y",  # x and y form a loop; z hangs below it
        "y": "x",
        "z": "y",
        "self": "self",
    }
    ordered, looped, cut = order_sessions(parents)
    assert ordered == ["a", "b", "c", "d"]
    assert sorted(looped) == ["self", "x", "y", "z"]
    assert cut == {"self", "x"}
    position = {s: i for i, s in enumerate(looped)}
    assert position["x"] < position["y"] < position["z"]


def test_loops_dangling_parents_and_orphan_messages(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = migrated_copy(tmp_path / "damaged.db")
    _insert(
        source,
        [
            _session("x", parent_session_id="y"),
            _session("y", parent_session_id="x"),
            _session("self", parent_session_id="self"),
            _session("below", parent_session_id="y"),
            _session("lost", parent_session_id="gone"),
        ],
        [_message(1, "x"), _message(2, "y"), _message(3, "below"), _message(4, "nobody")],
    )
    url = pg.new_database()
    report = copy_store(source, url)
    assert report.orphan_messages == 1
    assert report.parents_dropped == 1
    assert report.verified["messages"] == 3
    assert pg_execute(url, "SELECT id, parent_session_id FROM sessions ORDER BY id") == [
        ("below", "y"),
        ("lost", None),
        ("self", "self"),
        ("x", "y"),
        ("y", "x"),
    ]


def test_a_blob_cannot_go_to_postgresql(tmp_path: Path, migrated_copy: Any, pg: Server) -> None:
    source = migrated_copy(tmp_path / "blob.db")
    _insert(source, [_session("s")], [_message(1, "s", reasoning=b"\x00\x01")])
    with pytest.raises(CopyError, match="message 1 of session 's' holds a BLOB in reasoning"):
        copy_store(source, pg.new_database())


# -- verification --------------------------------------------------------------------------------


def test_a_tampered_postgresql_target_fails_the_check(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    url = pg.new_database()
    copy_store(source, url)
    assert verify_copy(source, url)["messages"] == 8
    pg_execute(url, "UPDATE messages SET content = 'changed' WHERE id = 4")
    with pytest.raises(VerificationError, match="content of the messages of session 'child'"):
        verify_copy(source, url)
    pg_execute(url, "UPDATE messages SET content = %s WHERE id = 4", (None,))
    with pytest.raises(VerificationError, match="session 'child'"):
        verify_copy(source, url)


@pytest.mark.slow  # a copy and four checks of it
def test_a_tampered_sqlite_target_fails_the_check(tmp_path: Path, migrated_copy: Any) -> None:
    source = rich_store(tmp_path / "rich.db", migrated_copy)
    target = tmp_path / "copy.db"
    copy_store(source, target)
    verify_copy(source, target)
    # Each tampering starts from a verified copy (a copy of the copied file).
    for name in ("copy2.db", "copy3.db", "copy4.db"):
        shutil.copyfile(target, tmp_path / name)
    sqlite_execute(target, "DELETE FROM messages WHERE id = 9")
    with pytest.raises(VerificationError, match="number of messages of session 'grandchild'"):
        verify_copy(source, target)
    sqlite_execute(
        tmp_path / "copy2.db", "UPDATE sessions SET archived = 0 WHERE id = 'grandchild'"
    )
    with pytest.raises(VerificationError, match="sessions: the row of session 'grandchild'"):
        verify_copy(source, tmp_path / "copy2.db")
    sqlite_execute(tmp_path / "copy3.db", "DELETE FROM compression_locks")
    with pytest.raises(VerificationError, match="compression_locks: session_id 'root' is missing"):
        verify_copy(source, tmp_path / "copy3.db")
    sqlite_execute(tmp_path / "copy4.db", "UPDATE messages SET id = 99 WHERE id = 10")
    with pytest.raises(VerificationError, match="session 'cjk-会话'"):
        verify_copy(source, tmp_path / "copy4.db")


# -- the console script --------------------------------------------------------------------------


def test_the_console_script(tmp_path: Path, pg: Server) -> None:
    demo = build_demo_store(tmp_path / "demo.db")
    url = pg.new_database(migrated=False) + "?schema=work"
    done = run("copy", str(demo), url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"copied 6 sessions and 22 messages from {demo} to ")
    assert "verified: 6 sessions, 22 messages, 0 state_meta rows, 0 compression locks" in (
        done.stdout
    )
    assert done.stderr == ""  # no progress bar when stderr is not a terminal

    refused = run("copy", str(demo), url, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("Error: postgresql://postgres@") and "is not empty" in (
        refused.stderr
    )

    merged = run("copy", url, str(tmp_path / "back.db"), "--json", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    [record] = json.loads(merged.stdout)
    assert record["sessions_copied"] == 6 and record["verified_messages"] == 22
    assert record["source"].endswith("(schema work)") and record["resumed"] is False

    again = run("copy", url, str(tmp_path / "back.db"), "--merge", "--nl", cwd=tmp_path)
    assert json.loads(again.stdout)["sessions_skipped"] == 6

    for args, status, message in (
        (["copy", str(tmp_path / "missing.db"), "x.db"], 1, "does not exist"),
        (["copy", str(demo), "postgresql://h/db?schema=Bad"], 1, "lower-case identifier"),
        (["copy", str(demo), str(demo)], 1, "the same store"),
        (["copy", str(demo)], 2, "Missing argument 'DST'"),
        (["--read-only", "copy", str(demo), "y.db"], 2, "--read-only"),
    ):
        failed = run(*args, cwd=tmp_path)
        assert failed.returncode == status, (args, failed.stderr)
        assert failed.stderr.count("\n") == 1 and message in failed.stderr, failed.stderr
        assert "Traceback" not in failed.stderr


def test_a_refused_copy_names_the_option_on_the_command_line_and_the_argument_in_python(
    tmp_path: Path,
) -> None:
    demo = build_demo_store(tmp_path / "demo.db")
    moved = tmp_path / "moved.db"
    assert run("copy", str(demo), str(moved), cwd=tmp_path).returncode == 0
    refused = run("copy", str(demo), str(moved), cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"Error: {moved} is not empty (sessions: 6, messages: 22): copy into an empty store, "
        "or pass --merge to add the sessions it lacks\n"
    )
    with pytest.raises(TargetNotEmptyError) as raised:
        copy_store(demo, moved)
    assert str(raised.value) == (
        f"{moved} is not empty (sessions: 6, messages: 22): copy into an empty store, "
        "or pass merge=True to add the sessions it lacks"
    )

    unfinished = tmp_path / "unfinished.db"
    with SessionDB(unfinished) as store:
        store.set_meta(MARKER_KEY, json.dumps({"source": "/elsewhere/other.db"}))
    refused = run("copy", str(demo), str(unfinished), cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"Error: {unfinished} holds an unfinished copy of /elsewhere/other.db: run that copy "
        "again to finish it, or pass --merge to add to it\n"
    )


# -- restart ------------------------------------------------------------------------------------


def large_store(path: Path, migrated_copy: Any, sessions: int, per_session: int) -> Path:
    migrated_copy(path)
    rows = [
        _session(f"s{n:05d}", parent_session_id=f"s{n - 1:05d}" if n % 10 else None)
        for n in range(sessions)
    ]
    messages = [
        _message(n * per_session + k + 1, f"s{n:05d}", content=f"text {n} {k} " * 20)
        for n in range(sessions)
        for k in range(per_session)
    ]
    _insert(path, rows, messages)
    return path


@pytest.mark.slow
def test_a_killed_copy_finishes_when_run_again(
    tmp_path: Path, migrated_copy: Any, pg: Server
) -> None:
    source = large_store(tmp_path / "large.db", migrated_copy, sessions=600, per_session=100)
    url = pg.new_database()
    process = subprocess.Popen(
        [str(SCRIPT), "copy", str(source), url],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Wait for the first batches to be committed, then kill the copy mid-way.
        while pg_execute(url, "SELECT count(*) FROM sessions") == [(0,)]:
            assert process.poll() is None, "the copy ended before it could be killed"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL
    copied = pg_execute(url, "SELECT count(*) FROM sessions")[0][0]
    assert 0 < copied < 600
    assert pg_execute(url, "SELECT count(*) FROM state_meta WHERE key = %s", (MARKER_KEY,)) == [
        (1,)
    ]
    # Another store is still refused: the marker names this source.
    other = migrated_copy(tmp_path / "other.db")
    with pytest.raises(TargetNotEmptyError, match="unfinished copy of"):
        copy_store(other, url)

    again = run("copy", str(source), url, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    [record] = json.loads(again.stdout)
    assert record["resumed"] is True
    assert record["sessions_skipped"] == copied
    assert record["sessions_copied"] == 600 - copied
    assert record["verified_messages"] == 60_000
    assert pg_rows(url) == sqlite_rows(source)


def test_a_loop_of_parent_links_is_copied_in_time_linear_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loop of 10,000 parent links took 35 s to copy: the sessions of a loop are one
    # batch, and the look at what the target had ran once per session of it, over all
    # of them. It runs once a batch now (1.6 s).
    source = tmp_path / "loop.db"
    with SessionDB(source) as store:
        store.create_session("seed", "cli")
    links = 2_000
    conn = sqlite3.connect(source)
    with conn:
        conn.execute("DELETE FROM sessions")
        conn.executemany(
            "INSERT INTO sessions (id, source, parent_session_id, started_at) VALUES (?, ?, ?, ?)",
            [(f"c{i}", "cli", f"c{(i - 1) % links}", 1_000.0 + i) for i in range(links)],
        )
    conn.close()
    looks: list[int] = []
    real = copy_module._SqliteSide.present

    def counted(self: Any, table: str, ids: Any) -> set[Any]:
        looks.append(len(ids))
        return real(self, table, ids)

    monkeypatch.setattr(copy_module._SqliteSide, "present", counted)
    report = copy_store(str(source), f"sqlite:///{tmp_path / 'copy.db'}")
    assert report.sessions_copied == links
    assert sum(looks) <= 4 * links  # a few looks at the loop's batch, not one a session
    with sqlite3.connect(tmp_path / "copy.db") as copied:
        rows = copied.execute("SELECT id, parent_session_id FROM sessions ORDER BY id").fetchall()
    copied.close()
    # Every link of the loop as it was (the one cut to insert parents first is
    # restored at the end).
    assert sorted(rows) == sorted((f"c{i}", f"c{(i - 1) % links}") for i in range(links))
