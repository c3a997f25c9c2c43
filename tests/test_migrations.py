"""The yoyo migrations: the exact v16 schema, yoyo/migrate() parity, the lock, refusals."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from yoyo import get_backend, read_migrations
from yoyo.backends.base import DatabaseBackend
from yoyo.migrations import Migration

import hermes_models
import hermes_models.store.schema as schema_module
from hermes_models import MigrationError, SchemaTooNewError
from hermes_models.driver import sqlite3
from hermes_models.store.schema import (
    LOCK_POLL_S,
    MIGRATIONS,
    TELEGRAM_TOPICS,
    migration_hash,
    migration_ids,
    migrations_dir,
    optional_migrations_dir,
    yoyo_url,
)

REPO = Path(__file__).resolve().parent.parent
YOYO = Path(sys.executable).parent / "yoyo"

SPAWN = multiprocessing.get_context("spawn")
MIGRATE_MODULE = sys.modules["hermes_models.store.schema"]

SESSIONS_COLUMNS = [
    # (cid, name, type, notnull, default, pk) as PRAGMA table_info reports them
    (0, "id", "TEXT", 0, None, 1),
    (1, "source", "TEXT", 1, None, 0),
    (2, "user_id", "TEXT", 0, None, 0),
    (3, "model", "TEXT", 0, None, 0),
    (4, "model_config", "TEXT", 0, None, 0),
    (5, "system_prompt", "TEXT", 0, None, 0),
    (6, "parent_session_id", "TEXT", 0, None, 0),
    (7, "started_at", "REAL", 1, None, 0),
    (8, "ended_at", "REAL", 0, None, 0),
    (9, "end_reason", "TEXT", 0, None, 0),
    (10, "message_count", "INTEGER", 0, "0", 0),
    (11, "tool_call_count", "INTEGER", 0, "0", 0),
    (12, "input_tokens", "INTEGER", 0, "0", 0),
    (13, "output_tokens", "INTEGER", 0, "0", 0),
    (14, "cache_read_tokens", "INTEGER", 0, "0", 0),
    (15, "cache_write_tokens", "INTEGER", 0, "0", 0),
    (16, "reasoning_tokens", "INTEGER", 0, "0", 0),
    (17, "cwd", "TEXT", 0, None, 0),
    (18, "git_branch", "TEXT", 0, None, 0),
    (19, "billing_provider", "TEXT", 0, None, 0),
    (20, "billing_base_url", "TEXT", 0, None, 0),
    (21, "billing_mode", "TEXT", 0, None, 0),
    (22, "estimated_cost_usd", "REAL", 0, None, 0),
    (23, "actual_cost_usd", "REAL", 0, None, 0),
    (24, "cost_status", "TEXT", 0, None, 0),
    (25, "cost_source", "TEXT", 0, None, 0),
    (26, "pricing_version", "TEXT", 0, None, 0),
    (27, "title", "TEXT", 0, None, 0),
    (28, "api_call_count", "INTEGER", 0, "0", 0),
    (29, "handoff_state", "TEXT", 0, None, 0),
    (30, "handoff_platform", "TEXT", 0, None, 0),
    (31, "handoff_error", "TEXT", 0, None, 0),
    (32, "rewind_count", "INTEGER", 1, "0", 0),
    (33, "archived", "INTEGER", 1, "0", 0),
]

MESSAGES_COLUMNS = [
    (0, "id", "INTEGER", 0, None, 1),
    (1, "session_id", "TEXT", 1, None, 0),
    (2, "role", "TEXT", 1, None, 0),
    (3, "content", "TEXT", 0, None, 0),
    (4, "tool_call_id", "TEXT", 0, None, 0),
    (5, "tool_calls", "TEXT", 0, None, 0),
    (6, "tool_name", "TEXT", 0, None, 0),
    (7, "timestamp", "REAL", 1, None, 0),
    (8, "token_count", "INTEGER", 0, None, 0),
    (9, "finish_reason", "TEXT", 0, None, 0),
    (10, "reasoning", "TEXT", 0, None, 0),
    (11, "reasoning_content", "TEXT", 0, None, 0),
    (12, "reasoning_details", "TEXT", 0, None, 0),
    (13, "codex_reasoning_items", "TEXT", 0, None, 0),
    (14, "codex_message_items", "TEXT", 0, None, 0),
    (15, "platform_message_id", "TEXT", 0, None, 0),
    (16, "observed", "INTEGER", 0, "0", 0),
    (17, "active", "INTEGER", 1, "1", 0),
]

STATE_META_COLUMNS = [(0, "key", "TEXT", 0, None, 1), (1, "value", "TEXT", 0, None, 0)]

COMPRESSION_LOCKS_COLUMNS = [
    (0, "session_id", "TEXT", 0, None, 1),
    (1, "holder", "TEXT", 1, None, 0),
    (2, "acquired_at", "REAL", 1, None, 0),
    (3, "expires_at", "REAL", 1, None, 0),
]

SCHEMA_VERSION_COLUMNS = [(0, "version", "INTEGER", 1, None, 0)]

INDEXES = {
    # name: (table, unique, partial, columns)
    "idx_sessions_source": ("sessions", 0, 0, ["source"]),
    "idx_sessions_source_id": ("sessions", 0, 0, ["source", "id"]),
    "idx_sessions_parent": ("sessions", 0, 0, ["parent_session_id"]),
    "idx_sessions_started": ("sessions", 0, 0, ["started_at"]),
    "idx_sessions_title_unique": ("sessions", 1, 1, ["title"]),
    "idx_messages_session": ("messages", 0, 0, ["session_id", "timestamp"]),
    "idx_messages_session_active": ("messages", 0, 0, ["session_id", "active", "timestamp"]),
    "idx_messages_platform_msg_id": (
        "messages",
        0,
        1,
        ["session_id", "platform_message_id"],
    ),
    "idx_compression_locks_expires": ("compression_locks", 0, 0, ["expires_at"]),
}

#: Indexes this package adds to the v16 layout (migration 0008: time order).
OUR_INDEXES = {
    "idx_messages_time": ("messages", 0, 0, ["timestamp"]),
    "idx_sessions_started_id": ("sessions", 0, 0, ["started_at", "id"]),
}

TRIGGERS = [
    "messages_cjk_changed_delete",
    "messages_cjk_changed_insert",
    "messages_cjk_changed_update",
    "messages_fts_delete",
    "messages_fts_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_update",
    "messages_fts_update",
]

INDEXED_TEXT = (
    "COALESCE({0}.content, '') || ' ' || COALESCE({0}.tool_name, '')"
    " || ' ' || COALESCE({0}.tool_calls, '')"
)


def _yoyo(command: str, *args: str, sources: tuple[str, ...] = ("migrations",)) -> None:
    """Run the yoyo command line from the checkout, as a deploy would."""
    done = subprocess.run(
        [str(YOYO), command, "--batch", *args, *sources],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _yoyo_apply(path: Path) -> None:
    _yoyo("apply", "--database", f"sqlite:///{path}")


def _open(path: Path) -> sqlite3.Connection:
    """A read-only connection that cannot create or change anything."""
    return sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = _open(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _schema(path: Path) -> list[tuple[Any, ...]]:
    """Every schema object that is not yoyo's bookkeeping."""
    return _query(
        path,
        "SELECT type, name, tbl_name, sql FROM sqlite_master"
        " WHERE name NOT LIKE '%yoyo%' ORDER BY type, name",
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def migrated(db_path: Path) -> Path:
    hermes_models.migrate(db_path)
    return db_path


@pytest.fixture(scope="module")
def v16_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file migrated by ``migrate()``, shared by the tests that only read its
    schema, through read-only connections (:func:`_query`)."""
    path = tmp_path_factory.mktemp("migrated") / "state.db"
    hermes_models.migrate(path)
    return path


# -- the schema ----------------------------------------------------------------


@pytest.mark.slow  # yoyo's console script
def test_yoyo_cli_and_migrate_build_the_identical_schema(tmp_path: Path) -> None:
    by_cli, by_api = tmp_path / "cli.db", tmp_path / "api.db"
    _yoyo_apply(by_cli)
    hermes_models.migrate(by_api)
    schema = _schema(by_cli)
    assert schema == _schema(by_api)
    assert {row[0] for row in schema} == {"table", "index", "trigger"}
    assert _query(by_cli, "SELECT migration_id FROM _yoyo_migration ORDER BY 1") == [
        (name,) for name in MIGRATIONS
    ]


def test_yoyo_cli_with_only_the_checkout_yoyo_ini(tmp_path: Path) -> None:
    by_ini, by_api = tmp_path / "ini.db", tmp_path / "api.db"
    _yoyo("apply", "--database", f"sqlite:///{by_ini}", sources=())
    hermes_models.migrate(by_api)
    assert _schema(by_ini) == _schema(by_api)
    assert _query(by_ini, "SELECT migration_id FROM _yoyo_migration ORDER BY 1") == [
        (name,) for name in MIGRATIONS
    ]


def test_migrate_after_yoyo_cli_has_nothing_to_do(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _yoyo_apply(path)
    before = _schema(path)
    assert hermes_models.migrate(path) == []
    assert _schema(path) == before


@pytest.mark.plaintext_file  # yoyo's own command runs the standard library's sqlite3
def test_yoyo_cli_after_migrate_applies_nothing(migrated: Path) -> None:
    log = _query(migrated, "SELECT migration_id, operation FROM _yoyo_log ORDER BY created_at_utc")
    _yoyo_apply(migrated)
    assert (
        _query(migrated, "SELECT migration_id, operation FROM _yoyo_log ORDER BY created_at_utc")
        == log
    )


@pytest.mark.parametrize(
    ("table", "columns"),
    [
        ("sessions", SESSIONS_COLUMNS),
        ("messages", MESSAGES_COLUMNS),
        ("state_meta", STATE_META_COLUMNS),
        ("compression_locks", COMPRESSION_LOCKS_COLUMNS),
        ("schema_version", SCHEMA_VERSION_COLUMNS),
    ],
)
def test_tables_have_exactly_the_v16_columns(
    v16_file: Path, table: str, columns: list[tuple[Any, ...]]
) -> None:
    assert _query(v16_file, f"PRAGMA table_info({table})") == columns


def test_foreign_keys_point_at_sessions(v16_file: Path) -> None:
    def keys(table: str) -> list[tuple[str, str, str]]:
        rows = _query(
            v16_file, f'SELECT "from", "table", "to" FROM pragma_foreign_key_list(\'{table}\')'
        )
        return sorted(rows)

    assert keys("sessions") == [("parent_session_id", "sessions", "id")]
    assert keys("messages") == [("session_id", "sessions", "id")]
    assert keys("state_meta") == []
    assert keys("compression_locks") == []


def test_messages_id_is_autoincrement(v16_file: Path) -> None:
    (sql,) = _query(v16_file, "SELECT sql FROM sqlite_master WHERE name = 'messages'")[0]
    assert "id INTEGER PRIMARY KEY AUTOINCREMENT" in sql


def test_indexes_are_exactly_the_v16_indexes_and_ours(v16_file: Path) -> None:
    expected = {**INDEXES, **OUR_INDEXES}
    rows = _query(
        v16_file,
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"
        " AND name NOT LIKE 'sqlite_autoindex_%' ORDER BY name",
    )
    assert rows == sorted((name, spec[0]) for name, spec in expected.items())
    found = {}
    for name, (table, _, _, _) in expected.items():
        flags = {
            row[0]: (row[1], row[2])
            for row in _query(
                v16_file, f"SELECT name, \"unique\", partial FROM pragma_index_list('{table}')"
            )
        }
        columns = [
            row[0] for row in _query(v16_file, f"SELECT name FROM pragma_index_info('{name}')")
        ]
        found[name] = (table, *flags[name], columns)
    assert found == expected


def test_partial_indexes_have_their_where_clauses(v16_file: Path) -> None:
    rows = dict(
        _query(
            v16_file,
            "SELECT name, sql FROM sqlite_master WHERE name IN"
            " ('idx_sessions_title_unique', 'idx_messages_platform_msg_id',"
            "  'idx_sessions_started')",
        )
    )
    assert rows["idx_sessions_title_unique"].endswith("WHERE title IS NOT NULL")
    assert rows["idx_messages_platform_msg_id"].endswith("WHERE platform_message_id IS NOT NULL")
    assert rows["idx_sessions_started"].endswith("(started_at DESC)")


def test_six_search_triggers_exist(v16_file: Path) -> None:
    rows = _query(
        v16_file, "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    )
    assert rows == [(name, "messages") for name in TRIGGERS]


def test_both_fts_tables_use_the_v16_layout(v16_file: Path) -> None:
    rows = _query(
        v16_file,
        "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
        " AND name IN ('messages_fts', 'messages_fts_trigram') ORDER BY name",
    )
    assert rows == [
        ("messages_fts", "CREATE VIRTUAL TABLE messages_fts USING fts5(content)"),
        (
            "messages_fts_trigram",
            "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tokenize='trigram')",
        ),
    ]
    triggers = dict(_query(v16_file, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))
    for table in ("messages_fts", "messages_fts_trigram"):
        insert = (
            f"INSERT INTO {table}(rowid, content) VALUES (new.id, {INDEXED_TEXT.format('new')});"
        )
        delete = f"DELETE FROM {table} WHERE rowid = old.id;"
        assert triggers[f"{table}_insert"] == (
            f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN\n    {insert}\nEND"
        )
        assert triggers[f"{table}_delete"] == (
            f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN\n    {delete}\nEND"
        )
        assert triggers[f"{table}_update"] == (
            f"CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN\n"
            f"    {delete}\n    {insert}\nEND"
        )


def test_triggers_keep_both_indexes_in_step(migrated: Path) -> None:
    conn = sqlite3.connect(migrated)
    try:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.0)")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp)"
            " VALUES ('s', 'assistant', 'hello 世界你好', 'grep', '[1]', 2.0)"
        )
        conn.execute("INSERT INTO messages (session_id, role, timestamp) VALUES ('s', 'user', 3.0)")
        conn.commit()
        expected = [(1, "hello 世界你好 grep [1]"), (2, "  ")]
        for table in ("messages_fts", "messages_fts_trigram"):
            assert (
                conn.execute(f"SELECT rowid, content FROM {table} ORDER BY rowid").fetchall()
                == expected
            )
        conn.execute("UPDATE messages SET content = 'changed', tool_name = NULL WHERE id = 1")
        conn.execute("DELETE FROM messages WHERE id = 2")
        conn.commit()
        for table in ("messages_fts", "messages_fts_trigram"):
            assert conn.execute(f"SELECT rowid, content FROM {table}").fetchall() == [
                (1, "changed  [1]")
            ]
            assert conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH 'changed'"
            ).fetchall() == [(1,)]
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        conn.close()


def test_schema_version_row_is_16(v16_file: Path) -> None:
    assert _query(v16_file, "SELECT version FROM schema_version") == [(16,)]


def test_migrate_returns_the_applied_ids_then_nothing(db_path: Path) -> None:
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)
    assert hermes_models.migrate(db_path) == []
    assert _query(db_path, "SELECT migration_id FROM _yoyo_migration ORDER BY 1") == [
        (name,) for name in MIGRATIONS
    ]


def test_migrate_creates_the_file_mode_0600(db_path: Path) -> None:
    hermes_models.migrate(db_path)
    assert oct(db_path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.plaintext_file  # yoyo's own command runs the standard library's sqlite3
@pytest.mark.slow  # yoyo's console script
def test_yoyo_rollback_all_then_apply_again(tmp_path: Path) -> None:
    path, fresh = tmp_path / "state.db", tmp_path / "fresh.db"
    hermes_models.migrate(fresh)
    hermes_models.migrate(path)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.0)")
    conn.commit()
    conn.close()

    _yoyo("rollback", "--all", "--database", f"sqlite:///{path}")
    assert _query(path, "SELECT migration_id FROM _yoyo_migration") == []
    # AUTOINCREMENT's bookkeeping table cannot be dropped; everything else is gone.
    assert [row[:2] for row in _schema(path)] == [("table", "sqlite_sequence")]

    _yoyo_apply(path)
    assert _schema(path) == _schema(fresh)
    assert _query(path, "SELECT version FROM schema_version") == [(16,)]
    assert _query(path, "SELECT count(*) FROM sessions") == [(0,)]
    assert hermes_models.migrate(path) == []


# -- refusals and odd paths -------------------------------------------------------


def _newer_hermes_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        INSERT INTO schema_version VALUES (17);
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL,
                               started_at REAL NOT NULL, future TEXT);
        INSERT INTO sessions VALUES ('s1', 'cli', 1.0, 'from the future');
        """
    )
    conn.close()


def test_newer_schema_is_refused_without_writes(db_path: Path) -> None:
    _newer_hermes_file(db_path)
    digest, mode = _digest(db_path), db_path.stat().st_mode
    with pytest.raises(SchemaTooNewError, match="version 17"):
        hermes_models.migrate(db_path)
    assert _digest(db_path) == digest
    assert db_path.stat().st_mode == mode
    assert os.listdir(db_path.parent) == [db_path.name]
    assert [
        row[1] for row in _query(db_path, "SELECT type, name FROM sqlite_master ORDER BY name")
    ] == [
        "schema_version",
        "sessions",
        "sqlite_autoindex_sessions_1",
    ]


def test_connect_opens_a_newer_schema_read_only_without_writes(db_path: Path) -> None:
    _newer_hermes_file(db_path)
    digest = _digest(db_path)
    # A file of a newer schema without a messages table is no store this package can read.
    with pytest.raises(hermes_models.NotADatabaseError, match="messages"):
        hermes_models.connect(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT)")
    conn.close()
    digest = _digest(db_path)
    for migrate in (True, False):
        db = hermes_models.connect(db_path, migrate=migrate)
        assert db.read_only
        assert [s.id for s in hermes_models.Session.select()] == ["s1"]
        with pytest.raises(SchemaTooNewError, match="version 17, newer than 16"):
            hermes_models.Session.get_by_id("s1").end("user_exit")
    assert _digest(db_path) == digest
    assert os.listdir(db_path.parent) == [db_path.name]


def test_path_with_uri_characters_is_migrated_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "odd dir #1?x%41"
    folder.mkdir()
    path = folder / "state #2?y=1&z%20w.db"
    assert hermes_models.migrate(path) == list(MIGRATIONS)
    assert os.listdir(folder) == [path.name]
    assert os.listdir(tmp_path) == [folder.name]
    conn = sqlite3.connect(str(path))
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(16,)]
    finally:
        conn.close()
    assert hermes_models.migrate(path) == []

    db = hermes_models.connect(path)
    db.write(lambda: db.execute_sql("INSERT INTO state_meta VALUES ('k', 'v')"))
    db.close()
    assert os.listdir(folder) == [path.name]
    assert os.listdir(tmp_path) == [folder.name]
    assert _query(path, "SELECT key, value FROM state_meta") == [("k", "v")]


# -- the migration lock ------------------------------------------------------------------


def _migrate_together(path: str, barrier: Any, results: Any) -> None:
    barrier.wait(timeout=60)
    try:
        results.put(("ok", hermes_models.migrate(path)))
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_migrations_committed_before_a_lock_interruption_are_reported(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process's lock request interrupts the fourth migration once
    # (SQLite's immediate "database is locked" inside a transaction): the
    # three before it stay committed, the rest are applied on the retry, and
    # migrate() names all eight, each once.
    real_steps = Migration.process_steps
    calls: list[str] = []

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.id)
        if len(calls) == 4:
            raise sqlite3.OperationalError("database is locked")
        return real_steps(self, *args, **kwargs)

    monkeypatch.setattr(Migration, "process_steps", interrupted)
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)
    assert calls == [*MIGRATIONS[:4], *MIGRATIONS[3:]]
    assert _query(db_path, "SELECT migration_id FROM _yoyo_migration ORDER BY 1") == [
        (name,) for name in MIGRATIONS
    ]


@pytest.mark.slow
def test_eight_processes_migrating_one_fresh_file_apply_each_migration_once(db_path: Path) -> None:
    workers = 8
    barrier = SPAWN.Barrier(workers)
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_migrate_together, args=(str(db_path), barrier, results))
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert [proc.exitcode for proc in procs] == [0] * workers
    assert [kind for kind, _ in outcomes] == ["ok"] * workers, outcomes
    applied = sorted(name for _, ids in outcomes for name in ids)
    assert applied == list(MIGRATIONS)
    assert _query(db_path, "SELECT migration_id FROM _yoyo_migration ORDER BY 1") == [
        (name,) for name in MIGRATIONS
    ]
    assert _query(
        db_path, "SELECT migration_id, operation FROM _yoyo_log ORDER BY migration_id"
    ) == [(name, "apply") for name in MIGRATIONS]
    assert _query(db_path, "SELECT count(*) FROM yoyo_lock") == [(0,)]
    assert _query(db_path, "SELECT version FROM schema_version") == [(16,)]


def _lock_and_die(url: str) -> None:
    with get_backend(url) as backend:  # yoyo's date adapters, as migrate() uses them
        held = backend.lock()
        held.__enter__()  # kept referenced: collecting it would delete the lock row
        os._exit(3)


@pytest.mark.slow  # a process killed and its lock waited out
def test_stale_lock_of_a_dead_process_is_reclaimed(db_path: Path) -> None:
    dead = SPAWN.Process(target=_lock_and_die, args=(yoyo_url(db_path),))
    dead.start()
    dead.join(timeout=60)
    assert dead.exitcode == 3
    assert _query(db_path, "SELECT pid FROM yoyo_lock") == [(dead.pid,)]

    started = time.monotonic()
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)
    assert time.monotonic() - started < LOCK_POLL_S
    assert _query(db_path, "SELECT count(*) FROM yoyo_lock") == [(0,)]


def _hold_lock(url: str, held: Any, release: Any) -> None:
    with get_backend(url) as backend, backend.lock():
        held.set()
        release.wait(timeout=60)


@pytest.mark.slow
def test_live_lock_makes_migrate_wait_until_released(db_path: Path) -> None:
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock, args=(yoyo_url(db_path), held, release))
    holder.start()
    try:
        assert held.wait(timeout=60)
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(hermes_models.migrate(db_path)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive()
        assert "sessions" not in {
            row[0] for row in _query(db_path, "SELECT name FROM sqlite_master")
        }
        release.set()
        worker.join(timeout=30)
        assert not worker.is_alive()
        assert outcome == [list(MIGRATIONS)]
    finally:
        release.set()
        holder.join(timeout=30)
    assert holder.exitcode == 0
    assert _query(db_path, "SELECT count(*) FROM yoyo_lock") == [(0,)]


@pytest.mark.slow  # a spawned holder; the reclaim of a stale lock stays fast
def test_a_lock_held_too_long_gives_up_with_migration_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MIGRATE_MODULE, "LOCK_WAIT_S", 0.5)
    monkeypatch.setattr(MIGRATE_MODULE, "LOCK_POLL_S", 0.2)
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock, args=(yoyo_url(db_path), held, release))
    holder.start()
    try:
        assert held.wait(timeout=60)
        with pytest.raises(
            MigrationError, match=f"could not take the migration lock.*{holder.pid}"
        ):
            hermes_models.migrate(db_path)
        assert "sessions" not in {
            row[0] for row in _query(db_path, "SELECT name FROM sqlite_master")
        }
    finally:
        release.set()
        holder.join(timeout=30)
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)


def test_a_lock_conflict_while_marking_a_migration_does_not_apply_it_twice(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # yoyo's apply_one commits a migration's steps and its log row, then marks it in
    # a third transaction; other processes polling for the migration lock can make
    # that one fail. Retrying the whole migration ran its steps and logged it again
    # (seen in CI, eight processes migrating one file: 0004 logged twice).
    real_mark_one = DatabaseBackend.mark_one
    marks: list[str] = []

    def interrupted(self: Any, migration: Any, *args: Any, **kwargs: Any) -> Any:
        marks.append(migration.id)
        if len(marks) == 4:
            raise sqlite3.OperationalError("database is locked")
        return real_mark_one(self, migration, *args, **kwargs)

    monkeypatch.setattr(DatabaseBackend, "mark_one", interrupted)
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)
    assert marks == [*MIGRATIONS[:4], *MIGRATIONS[3:]]
    assert _query(
        db_path, "SELECT migration_id, operation FROM _yoyo_log ORDER BY migration_id"
    ) == [(name, "apply") for name in MIGRATIONS]


def _copy_of_migrations(tmp_path: Path) -> Path:
    """A folder holding a copy of this package's migration files."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    for source in migrations_dir().iterdir():
        if source.is_file():
            (folder / source.name).write_bytes(source.read_bytes())
    return folder


def _add_later_migration(folder: Path) -> None:
    """A ninth migration in ``folder``, one that cannot run twice (CREATE TABLE)."""
    (folder / "0099_later.sql").write_text("CREATE TABLE later (id INTEGER);\n")
    (folder / "0099_later.rollback.sql").write_text("DROP TABLE later;\n")


def _with_later_migration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package migrates with its migrations and :func:`_add_later_migration`'s."""
    folder = _copy_of_migrations(tmp_path)
    _add_later_migration(folder)
    monkeypatch.setattr(schema_module, "migrations_folder", lambda: str(folder))


def _fail_once_at(monkeypatch: pytest.MonkeyPatch, method: str, error: Exception) -> list[str]:
    """Make yoyo's ``method`` raise ``error`` the first time it is called for 0099."""
    real = getattr(DatabaseBackend, method)
    calls: list[str] = []

    def failing(self: Any, migration: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(migration.id)
        if calls.count("0099_later") == 1 and migration.id == "0099_later":
            raise error
        return real(self, migration, *args, **kwargs)

    monkeypatch.setattr(DatabaseBackend, method, failing)
    return calls


def _records_of_later(path: Path) -> list[Any]:
    return [
        _query(path, "SELECT name FROM sqlite_master WHERE name = 'later'"),
        _query(path, "SELECT operation FROM _yoyo_log WHERE migration_id = '0099_later'"),
        _query(path, "SELECT migration_id FROM _yoyo_migration WHERE migration_id = '0099_later'"),
    ]


@pytest.mark.parametrize("method", ["log_migration", "mark_one"])
def test_a_lock_conflict_after_a_migrations_steps_runs_it_again_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    # Between a migration's steps and its record, another process's lock request
    # fails the log row or the mark. yoyo's apply_one had committed the steps by
    # then: running the migration again failed ("table later already exists").
    path = tmp_path / "state.db"
    assert hermes_models.migrate(path) == list(MIGRATIONS)
    _with_later_migration(tmp_path, monkeypatch)
    calls = _fail_once_at(monkeypatch, method, sqlite3.OperationalError("database is locked"))
    assert hermes_models.migrate(path) == ["0099_later"]
    assert calls == ["0099_later", "0099_later"]
    assert _records_of_later(path) == [[("later",)], [("apply",)], [("0099_later",)]]


def test_a_migration_that_fails_before_its_record_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash between a migration's steps and its record (here an error at the log
    # row) must not leave the steps committed without a record: the next migrate
    # would run them again.
    path = tmp_path / "state.db"
    assert hermes_models.migrate(path) == list(MIGRATIONS)
    _with_later_migration(tmp_path, monkeypatch)
    _fail_once_at(monkeypatch, "log_migration", RuntimeError("the process died here"))
    with pytest.raises(RuntimeError, match="the process died here"):
        hermes_models.migrate(path)
    assert _records_of_later(path) == [[], [], []]
    assert hermes_models.migrate(path) == ["0099_later"]
    assert _records_of_later(path) == [[("later",)], [("apply",)], [("0099_later",)]]


def test_migrations_are_applied_while_holding_the_yoyo_lock(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, list[tuple[Any, ...]]]] = []
    real = Migration.process_steps

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((self.id, _query(db_path, "SELECT pid FROM yoyo_lock")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Migration, "process_steps", spy)
    assert hermes_models.migrate(db_path) == list(MIGRATIONS)
    assert seen == [(name, [(os.getpid(),)]) for name in MIGRATIONS]
    assert _query(db_path, "SELECT pid FROM yoyo_lock") == []


def test_an_up_to_date_file_is_checked_without_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    assert hermes_models.migrate(path) != []
    # Were the lock taken, the held write lock below would make migrate() give up.
    monkeypatch.setattr(sys.modules["hermes_models.store.schema"], "LOCK_WAIT_S", 1)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process mid-way through a long write
        assert hermes_models.migrate(path) == []
        writer.execute("ROLLBACK")
        log_rows = writer.execute("SELECT COUNT(*) FROM _yoyo_log").fetchone()
        assert writer.execute("SELECT COUNT(*) FROM yoyo_lock").fetchone() == (0,)
    finally:
        writer.close()
    assert hermes_models.migrate(path) == []
    check = sqlite3.connect(path)
    try:
        assert check.execute("SELECT COUNT(*) FROM _yoyo_log").fetchone() == log_rows
    finally:
        check.close()


@pytest.mark.parametrize("folder", [migrations_dir(), optional_migrations_dir(TELEGRAM_TOPICS)])
def test_migration_ids_and_keys_are_the_ones_yoyo_reads(folder: Path) -> None:
    # The check that a file is up to date reads the ids from the file names
    # without importing yoyo; it must see exactly the migrations yoyo applies.
    migrations = read_migrations(str(folder))
    assert migration_ids(folder) == [m.id for m in migrations]
    assert [migration_hash(i) for i in migration_ids(folder)] == [m.hash for m in migrations]
    assert migration_ids(folder) != []


def test_a_new_migration_file_makes_the_file_out_of_date(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    hermes_models.migrate(path)
    folder = _copy_of_migrations(tmp_path)
    assert schema_module._up_to_date(path, folder) is True
    _add_later_migration(folder)
    assert schema_module._up_to_date(path, folder) is False
    assert schema_module._up_to_date(path, migrations_dir()) is True


@pytest.mark.slow  # a new Python process
def test_opening_an_up_to_date_file_does_not_import_yoyo(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    code = (
        "import sys\n"
        "from hermes_models import SessionDB\n"
        "with SessionDB(sys.argv[1]) as store:\n"
        "    store.append_message(store.ensure_session('s', 'cli'), 'user', 'hi')\n"
        "    store.search_messages('hi')\n"
        "print('yoyo' in sys.modules)\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert runs == ["True\n", "False\n"]  # migrating a new file needs it; the next open not


@pytest.mark.slow  # a new Python process
def test_a_file_store_and_its_cli_load_no_postgresql_driver(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    code = (
        "import sys\n"
        "import peewee\n"
        # peewee imports psycopg where it is installed, and the package imports its server
        # backend, built on playhouse.postgres_ext (which loads psycopg's hstore types,
        # ~2.5 ms): a file store must load nothing more of a driver.
        "import playhouse.postgres_ext\n"
        "before = set(sys.modules)\n"
        "from hermes_models import SessionDB\n"
        "from hermes_models.cli import main\n"
        "with SessionDB(sys.argv[1]) as store:\n"
        "    store.append_message(store.ensure_session('s', 'cli'), 'user', 'hi')\n"
        "    store.search_messages('hi')\n"
        "    store.list_sessions_rich()\n"
        "status = main(['sessions', '--db', sys.argv[1], '--tsv'])\n"
        "drivers = ('psycopg', 'psycopg_pool', 'psycopg2')\n"
        "loaded = [m for m in set(sys.modules) - before if m.split('.')[0] in drivers]\n"
        "print(status, sorted(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "0 []"
