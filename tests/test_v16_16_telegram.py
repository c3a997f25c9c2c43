"""HERMES_V16 §3.16: Telegram DM topic mode, an opt-in schema step and its bindings.

On both backends: the opt-in set is ``migrations/telegram_topics`` for a file and
``migrations/postgresql/telegram_topics`` (the same id) for a server.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pg_server
import pytest
from conftest import target_of
from pg_server import Server

from hermes_models import ReadOnlyDatabaseError, SessionDB, using
from hermes_models.conversations.telegram import TelegramTopicBinding, TelegramTopicMode
from hermes_models.driver import sqlite3
from hermes_models.store.migration_names import migration_ids
from hermes_models.store.postgres import migrations_dir as pg_migrations_dir
from hermes_models.store.postgres import parse_url
from hermes_models.store.schema import migrations_dir

pytestmark = pytest.mark.backends("sqlite", "postgresql")

YOYO = Path(sys.executable).parent / "yoyo"
REPO = Path(__file__).resolve().parents[1]
TABLES = {"telegram_dm_topic_mode", "telegram_dm_topic_bindings"}
VERSION_KEY = "telegram_dm_topic_schema_version"


def server_rows(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run on the store of ``url`` (a PostgreSQL URL with its schema)."""
    target = parse_url(url)
    with pg_server.connect(target.url, autocommit=True) as conn:
        if target.schema:
            conn.execute(f"SET search_path TO {target.schema}, public")
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


def tables(where: Any) -> set[str]:
    """The tables of a store: a file's path, or a PostgreSQL URL."""
    if isinstance(where, str) and where.startswith("postgresql://"):
        found = server_rows(
            where,
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema()",
        )
        return {row[0] for row in found}
    conn = sqlite3.connect(where)
    try:
        return {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    finally:
        conn.close()


def schema_of(where: Any) -> list[tuple[Any, ...]]:
    """The topic tables' definitions: SQLite's ``sqlite_master`` rows, or PostgreSQL's
    columns (with types, defaults, nullability), indexes and constraints."""
    if isinstance(where, str) and where.startswith("postgresql://"):
        return server_rows(
            where,
            "SELECT 'column', table_name || '.' || column_name,"
            "  concat_ws(' ', data_type, column_default, is_nullable)"
            " FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name LIKE 'telegram%%'"
            " UNION ALL SELECT 'index', indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema() AND tablename LIKE 'telegram%%'"
            " UNION ALL SELECT 'constraint', conname, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE conrelid::regclass::text LIKE 'telegram%%'"
            " ORDER BY 1, 2",
        )
    conn = sqlite3.connect(where)
    try:
        return conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name LIKE '%telegram%' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()


def yoyo_apply(database: str, folder: str) -> None:
    done = subprocess.run(
        [str(YOYO), "apply", "--batch", "--no-config-file", "--database", database, folder],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def unmigrated(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, str]:
    """A store nothing was applied to yet, and the URL yoyo's CLI takes for it."""
    if backend == "postgresql":
        server: Server = request.getfixturevalue("pg")
        url = server.new_database(migrated=False)
        return url, "postgresql+psycopg" + url[len("postgresql") :]
    path = tmp_path / "cli.db"
    return path, f"sqlite:///{path}"


def folders(backend: str) -> tuple[str, str]:
    """The baseline folder and the topic set's folder, as yoyo's CLI takes them."""
    base = "migrations/postgresql" if backend == "postgresql" else "migrations"
    return base, f"{base}/telegram_topics"


def bind(store: SessionDB, session_id: str, thread: str, chat: str = "208214988") -> None:
    store.bind_telegram_topic(
        chat_id=chat,
        thread_id=thread,
        user_id="208214988",
        session_key=f"telegram:dm:{chat}:thread:{thread}",
        session_id=session_id,
    )


# -- opt-in -------------------------------------------------------------------------------------


def test_opening_never_creates_the_topic_tables(store: SessionDB) -> None:
    store.create_session("s1", "telegram")
    assert store.get_meta(VERSION_KEY) is None
    assert "sessions" in tables(target_of(store.database))
    assert tables(target_of(store.database)) & TABLES == set()


# A file opened by path: the server's counterpart is the test above.
@pytest.mark.backends("sqlite")
def test_opening_a_new_file_never_creates_the_topic_tables(backend: str, tmp_path: Path) -> None:
    by_open = tmp_path / "open.db"
    with SessionDB(by_open) as store:
        store.create_session("s1", "telegram")
        assert store.get_meta(VERSION_KEY) is None
    assert tables(by_open) & TABLES == set()


def test_yoyo_applying_the_baseline_never_creates_the_topic_tables(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, database = unmigrated(backend, tmp_path, request)
    yoyo_apply(database, folders(backend)[0])
    assert "sessions" in tables(where)
    assert tables(where) & TABLES == set()


def test_apply_creates_the_tables_once(store: SessionDB) -> None:
    where = target_of(store.database)
    store.apply_telegram_topic_migration()
    first = schema_of(where)
    store.apply_telegram_topic_migration()
    assert schema_of(where) == first
    assert TABLES <= tables(where)
    assert store.get_meta(VERSION_KEY) == "2"
    indexes = {row[1] for row in first if row[0] == "index"}
    assert {
        "idx_telegram_dm_topic_bindings_session",
        "idx_telegram_dm_topic_bindings_user",
    } <= indexes


@pytest.mark.slow  # yoyo's console script
def test_the_opt_in_folder_applied_by_yoyo_gives_the_same_schema(
    backend: str, store: SessionDB, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store.apply_telegram_topic_migration()
    where, database = unmigrated(backend, tmp_path, request)
    base, topics = folders(backend)
    yoyo_apply(database, base)
    yoyo_apply(database, topics)
    assert schema_of(where) == schema_of(target_of(store.database))
    assert (REPO / topics).is_dir()


def test_both_dialects_have_the_same_topic_migration_ids() -> None:
    sqlite_ids = migration_ids(migrations_dir() / "telegram_topics")
    assert sqlite_ids == ["0001_telegram_dm_topics"]
    assert migration_ids(pg_migrations_dir() / "telegram_topics") == sqlite_ids


# An old Hermes file is a file: a server store is always made by the migrations.
@pytest.mark.backends("sqlite")
def test_apply_on_an_old_hermes_file(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        INSERT INTO schema_version VALUES (11);
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT,
            model TEXT, model_config TEXT, system_prompt TEXT, parent_session_id TEXT,
            started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
            message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
            input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0, title TEXT,
            FOREIGN KEY (parent_session_id) REFERENCES sessions(id));
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL,
            content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
            timestamp REAL NOT NULL, token_count INTEGER);
        """
    )
    conn.close()
    with SessionDB(path) as store:
        store.apply_telegram_topic_migration()
        assert store.get_meta(VERSION_KEY) == "2"
    assert TABLES <= tables(path)


def test_a_read_only_handle_cannot_opt_in(store: SessionDB) -> None:
    where = target_of(store.database)
    reader = SessionDB(where, read_only=True)
    with pytest.raises(ReadOnlyDatabaseError):
        reader.apply_telegram_topic_migration()
    with pytest.raises(ReadOnlyDatabaseError):
        reader.enable_telegram_topic_mode(chat_id="1", user_id="1")
    reader.close()
    assert tables(where) & TABLES == set()


def test_the_models_match_the_migrated_tables(backend: str, store: SessionDB) -> None:
    store.apply_telegram_topic_migration()
    where = target_of(store.database)
    for model in (TelegramTopicMode, TelegramTopicBinding):
        name = model._meta.table_name
        if backend == "postgresql":
            found = server_rows(
                where,
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s"
                " ORDER BY ordinal_position",
                (name,),
            )
            migrated = [row[0] for row in found]
        else:
            conn = sqlite3.connect(where)
            migrated = [row[1] for row in conn.execute(f"PRAGMA table_info({name})")]
            conn.close()
        assert migrated == [field.column_name for field in model._meta.sorted_fields]
    assert foreign_keys(backend, where) == [("sessions", "session_id", "CASCADE")]


def foreign_keys(backend: str, where: Any) -> list[tuple[str, str, str]]:
    """The bindings table's foreign keys: (table, column, ON DELETE action)."""
    if backend == "postgresql":
        actions = {"c": "CASCADE", "a": "NO ACTION", "r": "RESTRICT", "n": "SET NULL"}
        found = server_rows(
            where,
            "SELECT confrelid::regclass::text, a.attname, confdeltype::text"
            " FROM pg_constraint c JOIN pg_attribute a"
            "  ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)"
            " WHERE c.conrelid = 'telegram_dm_topic_bindings'::regclass AND c.contype = 'f'",
        )
        return [(table, column, actions[action]) for table, column, action in found]
    conn = sqlite3.connect(where)
    try:
        rows = conn.execute("PRAGMA foreign_key_list(telegram_dm_topic_bindings)").fetchall()
    finally:
        conn.close()
    return [(row[2], row[3], row[6]) for row in rows]


# -- without the tables --------------------------------------------------------------------------


def test_reads_without_the_tables_answer_nothing(store: SessionDB) -> None:
    store.create_session("s1", "telegram", user_id="u1")
    store.append_message("s1", "user", "hello")
    assert store.get_telegram_topic_binding(chat_id="c", thread_id="t") is None
    assert store.list_telegram_topic_bindings_for_chat(chat_id="c") == []
    assert store.get_telegram_topic_binding_by_session(session_id="s1") is None
    assert store.is_telegram_session_linked_to_topic(session_id="s1") is False
    assert store.is_telegram_topic_mode_enabled(chat_id="c", user_id="u1") is False
    store.disable_telegram_topic_mode(chat_id="c")
    unlinked = store.list_unlinked_telegram_sessions_for_user(chat_id="c", user_id="u1")
    assert [(s["id"], s["preview"]) for s in unlinked] == [("s1", "hello")]
    assert tables(target_of(store.database)) & TABLES == set()


def test_reads_without_the_tables_leave_a_callers_transaction_usable(store: SessionDB) -> None:
    store.create_session("s1", "telegram", user_id="u1")

    def inside() -> list[Any]:
        found = [
            store.get_telegram_topic_binding(chat_id="c", thread_id="t"),
            store.is_telegram_topic_mode_enabled(chat_id="c", user_id="u1"),
            [
                s["id"]
                for s in store.list_unlinked_telegram_sessions_for_user(chat_id="c", user_id="u1")
            ],
        ]
        store.set_meta("after", "the reads")  # the transaction still takes writes
        return found

    assert store.database.write(inside) == [None, False, ["s1"]]
    assert store.get_meta("after") == "the reads"


# -- topic mode and bindings ---------------------------------------------------------------------


def test_enable_and_disable_topic_mode(store: SessionDB) -> None:
    store.enable_telegram_topic_mode(
        chat_id=208214988, user_id="208214988", has_topics_enabled=True
    )
    assert store.is_telegram_topic_mode_enabled(chat_id="208214988", user_id=208214988) is True
    assert store.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="other") is False
    row = store._conn.execute("SELECT * FROM telegram_dm_topic_mode").fetchone()
    assert (row["chat_id"], row["enabled"], row["has_topics_enabled"]) == ("208214988", 1, 1)
    assert row["allows_users_to_create_topics"] is None
    activated = row["activated_at"]
    store.create_session("s1", "telegram")
    bind(store, "s1", "17")
    store.disable_telegram_topic_mode(chat_id="208214988", clear_bindings=False)
    assert store.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988") is False
    assert store.is_telegram_session_linked_to_topic(session_id="s1") is True
    store.enable_telegram_topic_mode(chat_id="208214988", user_id="208214988")
    again = store._conn.execute("SELECT * FROM telegram_dm_topic_mode").fetchone()
    assert (again["enabled"], again["activated_at"]) == (1, activated)  # first activation kept
    store.disable_telegram_topic_mode(chat_id="208214988")
    assert store.list_telegram_topic_bindings_for_chat(chat_id="208214988") == []


def test_binding_roundtrip(store: SessionDB) -> None:
    store.create_session("topic-session", "telegram", user_id="208214988")
    before = time.time()
    bind(store, "topic-session", "17585")
    binding = store.get_telegram_topic_binding(chat_id="208214988", thread_id="17585")
    assert binding is not None
    assert {k: v for k, v in binding.items() if not k.endswith("_at")} == {
        "chat_id": "208214988",
        "thread_id": "17585",
        "user_id": "208214988",
        "session_key": "telegram:dm:208214988:thread:17585",
        "session_id": "topic-session",
        "managed_mode": "auto",
    }
    assert before <= binding["linked_at"] == binding["updated_at"] <= time.time()
    assert store.get_telegram_topic_binding_by_session(session_id="topic-session") == binding
    assert store.list_telegram_topic_bindings_for_chat(chat_id="208214988") == [binding]
    assert store.is_telegram_session_linked_to_topic(session_id="topic-session") is True
    assert store.get_meta(VERSION_KEY) == "2"


def test_a_session_binds_to_one_topic_only(store: SessionDB) -> None:
    store.create_session("s1", "telegram")
    store.create_session("s2", "telegram")
    bind(store, "s1", "1")
    bind(store, "s1", "1")  # the same pair again is fine
    with pytest.raises(ValueError, match=r"^session is already linked to another Telegram topic$"):
        bind(store, "s1", "2")
    with pytest.raises(ValueError, match="already linked"):
        bind(store, "s1", "1", chat="other-chat")
    # A thread can be moved to another session.
    bind(store, "s2", "1")
    assert (
        store.get_telegram_topic_binding(chat_id="208214988", thread_id="1")["session_id"] == "s2"
    )
    assert store.is_telegram_session_linked_to_topic(session_id="s1") is False
    with pytest.raises(sqlite3.IntegrityError):
        bind(store, "ghost", "3")


def test_bindings_are_listed_newest_first_and_go_with_their_session(store: SessionDB) -> None:
    for session_id, thread in (("a", "1"), ("b", "2"), ("c", "3")):
        store.create_session(session_id, "telegram")
        bind(store, session_id, thread)
    for thread, updated in (("1", 3), ("2", 5), ("3", 1)):
        store._conn.execute(
            "UPDATE telegram_dm_topic_bindings SET updated_at = ? WHERE thread_id = ?",
            (updated, thread),
        )
    store._conn.commit()
    listed = store.list_telegram_topic_bindings_for_chat(chat_id="208214988")
    assert [b["session_id"] for b in listed] == ["b", "a", "c"]
    store.delete_session("a")
    assert store.get_telegram_topic_binding(chat_id="208214988", thread_id="1") is None
    assert len(store.list_telegram_topic_bindings_for_chat(chat_id="208214988")) == 2


def test_unlinked_sessions_of_a_user(store: SessionDB) -> None:
    store.create_session(
        "old-unlinked", "telegram", user_id="208214988", started_at=time.time() - 100
    )
    store.set_session_title("old-unlinked", "Old research")
    store.append_message("old-unlinked", "user", "first prompt")
    store.create_session("newer-unlinked", "telegram", user_id="208214988")
    store.create_session("already-linked", "telegram", user_id="208214988")
    bind(store, "already-linked", "17585")
    store.create_session("other-user", "telegram", user_id="someone-else")
    store.create_session("cli-session", "cli", user_id="208214988")
    sessions = store.list_unlinked_telegram_sessions_for_user(
        chat_id="208214988", user_id="208214988"
    )
    assert [s["id"] for s in sessions] == ["newer-unlinked", "old-unlinked"]
    old = sessions[1]
    assert (old["title"], old["preview"]) == ("Old research", "first prompt")
    limited = store.list_unlinked_telegram_sessions_for_user(
        chat_id="208214988", user_id="208214988", limit=1
    )
    assert [s["id"] for s in limited] == ["newer-unlinked"]


FIRST_VERSION = {
    "sqlite": (
        "CREATE TABLE telegram_dm_topic_bindings (chat_id TEXT NOT NULL, thread_id TEXT NOT NULL,"
        " user_id TEXT NOT NULL, session_key TEXT NOT NULL,"
        " session_id TEXT NOT NULL REFERENCES sessions(id),"
        " managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL,"
        " updated_at REAL NOT NULL, PRIMARY KEY (chat_id, thread_id))"
    ),
    "postgresql": (
        "CREATE TABLE telegram_dm_topic_bindings (chat_id text NOT NULL, thread_id text NOT NULL,"
        " user_id text NOT NULL, session_key text NOT NULL,"
        " session_id text NOT NULL REFERENCES sessions(id),"
        " managed_mode text NOT NULL DEFAULT 'auto', linked_at double precision NOT NULL,"
        " updated_at double precision NOT NULL, PRIMARY KEY (chat_id, thread_id))"
    ),
}


def test_a_first_version_bindings_table_is_rebuilt_with_cascade(
    backend: str, store: SessionDB
) -> None:
    store.create_session("s1", "telegram")
    conn = store._conn
    conn.execute(FIRST_VERSION[backend])
    conn.execute(
        "INSERT INTO telegram_dm_topic_bindings VALUES ('c', 't', 'u', 'k', 's1', 'auto', 1, 2)"
    )
    conn.execute(
        "INSERT INTO state_meta (key, value) VALUES ('telegram_dm_topic_schema_version', '1')"
    )
    conn.commit()
    where = target_of(store.database)
    assert foreign_keys(backend, where) == [("sessions", "session_id", "NO ACTION")]
    store.apply_telegram_topic_migration()
    assert foreign_keys(backend, where) == [("sessions", "session_id", "CASCADE")]
    assert store.get_meta(VERSION_KEY) == "2"
    kept = store.get_telegram_topic_binding(chat_id="c", thread_id="t")
    assert (kept["session_id"], kept["linked_at"], kept["updated_at"]) == ("s1", 1.0, 2.0)
    store.delete_session("s1")
    assert store.get_telegram_topic_binding(chat_id="c", thread_id="t") is None
    with using(store.database):
        assert TelegramTopicBinding.select().count() == 0
