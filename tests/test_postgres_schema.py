"""PostgreSQL: URLs, the migrations folder and the schema it makes, on a real server.

The server is the one ``pg_server`` finds or starts (``HERMES_TEST_PG_URL``,
else a throwaway cluster of the system's binaries). The outside references
here are the SQLite store (the same migration ids, tables, columns and
indexes) and :func:`hermes_models.store.grams.grams` (the CJK characters and pairs
the SQLite gram index holds, which the PostgreSQL index must hold too).
"""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import peewee
import pg_server
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg_server import Server
from yoyo.backends.base import DatabaseBackend

import hermes_models
import hermes_models.store.postgres as postgres_module
from hermes_models import Message, Session, SessionDB, UnsupportedServerError
from hermes_models.driver import sqlite3
from hermes_models.store.binding import using
from hermes_models.store.grams import grams
from hermes_models.store.migration_names import migration_ids
from hermes_models.store.postgres import (
    ESCAPE,
    PostgresDatabase,
    check_server,
    escape_text,
    migrate,
    migrations_dir,
    open_database,
    parse_url,
    unescape_text,
)
from hermes_models.store.schema import migrations_dir as sqlite_migrations_dir

pytestmark = pytest.mark.postgresql


def rows(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with pg_server.connect(parse_url(url).url) as conn:
        return list(conn.execute(sql, params).fetchall())


# -- URLs ------------------------------------------------------------------------------------


def test_urls_split_into_server_and_schema() -> None:
    target = parse_url("postgresql://me:secret@db.example:6543/hermes?schema=work&sslmode=require")
    assert target.url == "postgresql://me:secret@db.example:6543/hermes?sslmode=require"
    assert target.schema == "work"
    assert target.label() == "postgresql://me@db.example:6543/hermes (schema work)"
    assert parse_url("postgres://h/db").url == "postgresql://h/db"
    assert parse_url("postgres://h/db").schema is None


def test_libpq_parameters_reach_libpq_as_written() -> None:
    # Decoded and encoded again, %20 became "+", which libpq reads as a plus sign:
    # application_name "nightly+job", options "-c+statement_timeout=1234" (refused).
    url = (
        "postgresql://h/db?application_name=nightly%20job&schema=work"
        "&options=-c%20statement_timeout%3D1234&max_connections=3&sslmode=require"
    )
    target = parse_url(url)
    assert target.url == (
        "postgresql://h/db?application_name=nightly%20job"
        "&options=-c%20statement_timeout%3D1234&sslmode=require"
    )
    assert (target.schema, target.max_connections) == ("work", 3)


def test_the_pool_is_configured_in_the_url() -> None:
    default = parse_url("postgresql://h/db")
    assert (default.max_connections, default.stale_timeout, default.pool_timeout) == (8, 300, 60)
    target = parse_url(
        "postgresql://h/db?max_connections=4&sslmode=disable&stale_timeout=0&pool_timeout=2.5"
    )
    assert target.url == "postgresql://h/db?sslmode=disable"  # libpq never sees them
    assert (target.max_connections, target.stale_timeout, target.pool_timeout) == (4, 0, 2.5)
    assert target.key() != default.key()  # one handle, and one pool, per setting


def test_a_url_without_a_host_part_keeps_its_slashes_and_errors_hide_the_password() -> None:
    # urlunsplit wrote postgresql:/db?host=..., which libpq cannot read.
    target = parse_url("postgresql:///db?host=/run/postgresql&schema=work")
    assert target.url == "postgresql:///db?host=/run/postgresql"
    assert target.label() == "postgresql:///db (schema work)"
    for url in ("postgresql://me:s3cret@h/", "postgresql://me:s3cret@h/db?schema=a&schema=b"):
        with pytest.raises(ValueError) as raised:
            parse_url(url)
        assert "s3cret" not in str(raised.value) and "postgresql://me@h/" in str(raised.value)


@pytest.mark.postgresql
def test_urls_are_read_by_libpq_escapes_and_hostless_forms_included(pg: Server) -> None:
    # The pool took user, password, host and database from urlsplit without
    # decoding %-escapes, and dropped the "//" of a URL without a host part:
    # forms psql and psycopg take failed on every call but migrate.
    admin = urlsplit(pg.admin_url)
    pg.execute('DROP DATABASE IF EXISTS "my db"')
    pg.execute('CREATE DATABASE "my db"')
    try:
        urls = [
            f"postgresql://{admin.netloc}/my%20db",
            f"postgresql:///my%20db?host={admin.hostname}&port={admin.port}&user={admin.username}",
            f"postgresql://{admin.netloc}/my%20db?application_name=nightly%20job",
        ]
        for n, url in enumerate(urls):
            with SessionDB(url) as store:
                store.create_session(f"s{n}", "cli")
                assert [r["id"] for r in store.list_sessions_rich(limit=None)] == [
                    f"s{m}" for m in range(n, -1, -1)
                ]
                if "application_name" in url:  # as written: %20 is a space, not "+"
                    shown = store.database.execute_sql("SHOW application_name").fetchone()
                    assert shown[0] == "nightly job"
    finally:
        pg.execute('DROP DATABASE IF EXISTS "my db" WITH (FORCE)')


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///x.db", "not a PostgreSQL URL"),
        ("postgresql://host", "names no database"),
        ("postgresql://host/", "names no database"),
        ("postgresql://host/db?schema=Work", "schema must be a lower-case identifier"),
        ("postgresql://host/db?schema=a;drop", "schema must be a lower-case identifier"),
        ("postgresql://host/db?schema=", "schema must be a lower-case identifier"),
        ("postgresql://host/db?schema=a&schema=b", "schema is given 2 times"),
        ("postgresql://host/db?max_connections=0", "max_connections must be an integer from 1"),
        ("postgresql://host/db?max_connections=2.5", "max_connections must be an integer"),
        ("postgresql://host/db?stale_timeout=-1", "stale_timeout must be an integer from 0"),
        ("postgresql://host/db?pool_timeout=nan", "pool_timeout must be a number from 0.0"),
        ("postgresql://host/db?pool_timeout=inf", "pool_timeout must be a number"),
        ("postgresql://host/db?pool_timeout=1&pool_timeout=2", "pool_timeout is given 2 times"),
    ],
)
def test_bad_urls_are_refused_by_name(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


# -- migrations ------------------------------------------------------------------------------


def test_both_dialects_have_the_same_migration_ids() -> None:
    sqlite_ids = migration_ids(sqlite_migrations_dir())
    assert migration_ids(migrations_dir()) == sqlite_ids
    assert len(sqlite_ids) == 11


def _sqlite_layout(tmp_path: Path) -> tuple[dict[str, list[str]], set[str]]:
    import hermes_models

    path = tmp_path / "state.db"
    hermes_models.connect(path).close()
    with sqlite3.connect(path) as conn:
        tables = {
            name: [row[1] for row in conn.execute(f"PRAGMA table_info({name})")]
            for name in (
                "sessions",
                "messages",
                "state_meta",
                "compression_locks",
                "schema_version",
            )
        }
        indexes = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
    conn.close()
    return tables, indexes


def test_the_schema_matches_sqlite_table_for_table(pg_url: str, tmp_path: Path) -> None:
    tables, indexes = _sqlite_layout(tmp_path)
    for table, columns in tables.items():
        got = [
            row[0]
            for row in rows(
                pg_url,
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                table,
            )
        ]
        extra = ["search_tsv", "search_len"] if table == "messages" else []
        assert got == columns + extra, table
    pg_indexes = {
        row[0]
        for row in rows(pg_url, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
    }
    search = {"idx_messages_search_tsv", "idx_messages_search_trgm", "idx_messages_cjk_grams"}
    primary = {
        f"{t}_pkey"
        for t in ("sessions", "messages", "state_meta", "compression_locks", "hermes_search_stats")
    }
    # (session_id, id): SQLite's indexes end with the rowid already.
    by_session = {"idx_messages_session_id"}
    assert pg_indexes == indexes | search | primary | by_session | {
        "_yoyo_migration_pkey",
        "yoyo_lock_pkey",
        "_yoyo_log_pkey",
        "_yoyo_version_pkey",
    }
    assert rows(pg_url, "SELECT version FROM schema_version") == [(16,)]


def test_migrating_again_applies_nothing(pg_url: str) -> None:
    assert migrate(pg_url) == []


def test_a_new_database_gets_every_migration(pg: Server) -> None:
    url = pg.new_database(migrated=False)
    assert migrate(url) == migration_ids(migrations_dir())
    assert rows(url, "SELECT count(*) FROM _yoyo_migration") == [(11,)]


def test_the_package_migrate_takes_a_server_url_too(pg: Server) -> None:
    url = pg.new_database(migrated=False)
    assert hermes_models.migrate(url) == migration_ids(migrations_dir())
    assert hermes_models.migrate(url) == []


def test_a_migration_that_fails_before_its_record_leaves_nothing_behind(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # yoyo's apply_one commits a migration's steps before its log row and mark: a
    # failure between them left the table below created and the migration
    # unrecorded, so the next migrate failed ("relation later already exists").
    folder = tmp_path / "later"
    folder.mkdir()
    (folder / "0001_later.sql").write_text("CREATE TABLE later (id integer);\n")
    monkeypatch.setattr(postgres_module, "optional_migrations_dir", lambda name: folder)
    real = DatabaseBackend.log_migration
    calls: list[str] = []

    def failing(self: Any, migration: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(migration.id)
        if len(calls) == 1:
            raise RuntimeError("the process died here")
        return real(self, migration, *args, **kwargs)

    monkeypatch.setattr(DatabaseBackend, "log_migration", failing)
    with pytest.raises(hermes_models.MigrationError, match="the process died here"):
        migrate(pg_url, optional="later")
    assert rows(pg_url, "SELECT to_regclass('later') IS NULL") == [(True,)]
    assert migrate(pg_url, optional="later") == ["0001_later"]
    assert rows(pg_url, "SELECT to_regclass('later') IS NULL") == [(False,)]
    assert rows(pg_url, "SELECT operation FROM _yoyo_log WHERE migration_id = '0001_later'") == [
        ("apply",)
    ]


def _migrate_in_child(url: str) -> list[str]:
    return migrate(url)


@pytest.mark.slow
def test_eight_processes_opening_a_new_database_apply_each_migration_once(pg: Server) -> None:
    url = pg.new_database(migrated=False)
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        applied = pool.map(_migrate_in_child, [url] * 8)
    every = [i for ids in applied for i in ids]
    assert sorted(every) == sorted(migration_ids(migrations_dir()))
    logged = rows(
        url,
        "SELECT migration_id, count(*) FROM _yoyo_log WHERE operation = 'apply'"
        " GROUP BY migration_id ORDER BY migration_id",
    )
    assert logged == [(i, 1) for i in migration_ids(migrations_dir())]


def test_profiles_keep_their_tables_in_their_own_schemas(pg: Server) -> None:
    url = pg.new_database(migrated=False)
    work, home = f"{url}?schema=work", f"{url}?schema=home"
    assert len(migrate(work)) == 11
    assert len(migrate(home)) == 11
    for profile, sid in ((work, "w1"), (home, "h1")):
        db = open_database(profile, migrate_first=False)
        with using(db):
            Session.create(id=sid, source="cli", started_at=1.0)
            Message.create(session=sid, role="user", content="数据库 in " + sid, timestamp=2.0)
        db.close()
    assert rows(url, "SELECT id FROM work.sessions") == [("w1",)]
    assert rows(url, "SELECT id FROM home.sessions") == [("h1",)]
    # The search indexes of each schema work: pg_trgm lives where the first profile made it.
    db = open_database(home, migrate_first=False)
    found = db.execute_sql(
        "SELECT session_id FROM messages"
        " WHERE hermes_search_text(content, tool_name, tool_calls) ILIKE %s",
        ("%数据库%",),
    ).fetchall()
    db.close()
    assert found == [("h1",)]


# -- what the schema holds ---------------------------------------------------------------------


def _as_grams(tokens: str) -> set[str]:
    """hermes_models.store.grams tokens (each gram itself, separated by ASCII spaces: U+3000
    is a gram) as a set."""
    return {token for token in tokens.split(" ") if token}


TEXT = st.text(
    alphabet=st.sampled_from(
        [*"数据库迁移データベース서버 a-Z9_.\n\u3001\u3000𠀀", "\U0002a6e0", "é"]
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(content=st.none() | TEXT, tool_name=st.none() | TEXT, tool_calls=st.none() | TEXT)
def test_the_cjk_gram_function_holds_what_the_sqlite_gram_index_holds(
    pg: Server, content: str | None, tool_name: str | None, tool_calls: str | None
) -> None:
    with pg_server.connect(pg.template_url()) as conn:
        (got,) = conn.execute(
            "SELECT hermes_cjk_grams(hermes_search_text(%s, %s, %s))",
            (content, tool_name, tool_calls),
        ).fetchone()
    assert set(got) == _as_grams(grams(content, tool_name, tool_calls))
    assert len(got) == len(set(got))


def test_a_message_of_one_and_a_half_megabytes_inserts_and_is_found(
    pg_db: PostgresDatabase,
) -> None:
    words = " ".join(f"w{n:06x}" for n in range(200_000))  # 1.6 MB of distinct words
    with using(pg_db):
        Session.create(id="big", source="cli", started_at=1.0)
        message = Message.create(
            session="big", role="tool", content=words + " 末尾の言葉", timestamp=2.0
        )
    early = pg_db.execute_sql(
        "SELECT id FROM messages WHERE search_tsv @@ phraseto_tsquery('simple', %s)", ("w000010",)
    ).fetchall()
    late = pg_db.execute_sql(
        "SELECT id FROM messages WHERE search_tsv @@ phraseto_tsquery('simple', %s)", ("w02fff0",)
    ).fetchall()
    tail = pg_db.execute_sql(
        "SELECT id FROM messages WHERE hermes_search_text(content, tool_name, tool_calls) ILIKE %s",
        ("%末尾の言葉%",),
    ).fetchall()
    # Words past the first 100,000 characters are not in the tsvector; substrings still are.
    assert (early, late, tail) == ([(message.id,)], [], [(message.id,)])


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (
            "hermes_cjk_grams(hermes_search_text(content, tool_name, tool_calls)) @> ARRAY['迁移']",
            "idx_messages_cjk_grams",
        ),
        (
            "hermes_search_text(content, tool_name, tool_calls) ILIKE '%%数据库迁移%%'",
            "idx_messages_search_trgm",
        ),
        ("search_tsv @@ phraseto_tsquery('simple', 'docker')", "idx_messages_search_tsv"),
    ],
)
def test_each_search_index_serves_its_condition(
    pg_db: PostgresDatabase, where: str, index: str
) -> None:
    pg_db.execute_sql("SET enable_seqscan = off")
    plan = "\n".join(
        row[0] for row in pg_db.execute_sql(f"EXPLAIN SELECT id FROM messages WHERE {where}", ())
    )
    assert f"Bitmap Index Scan on {index}" in plan


def test_constraint_failures_are_integrity_errors_and_leave_the_transaction_usable(
    pg_db: PostgresDatabase,
) -> None:
    with using(pg_db):
        Session.create(id="a", source="cli", started_at=1.0, title="same")
        Session.create(id="b", source="cli", started_at=2.0)
        with pg_db.atomic():
            with pytest.raises(peewee.IntegrityError):
                with pg_db.atomic():
                    Session.update(title="same").where(Session.id == "b").execute()
            Session.update(title="other").where(Session.id == "b").execute()
        assert [(s.id, s.title) for s in Session.select().order_by(Session.id)] == [
            ("a", "same"),
            ("b", "other"),
        ]
        with pytest.raises(peewee.IntegrityError):
            Message.create(session="nowhere", role="user", content="x", timestamp=1.0)


def test_message_ids_are_never_handed_out_twice(pg_db: PostgresDatabase) -> None:
    with using(pg_db):
        Session.create(id="s", source="cli", started_at=1.0)
        first = Message.create(session="s", role="user", content="a", timestamp=1.0).id
        Message.delete().where(Message.id == first).execute()
        second = Message.create(session="s", role="user", content="b", timestamp=2.0).id
    assert second > first


def test_a_read_only_handle_refuses_writes(pg_url: str) -> None:
    db = open_database(pg_url, read_only=True)
    with using(db), pytest.raises(peewee.InternalError, match="read-only transaction"):
        Session.create(id="s", source="cli", started_at=1.0)
    db.close()


# -- text PostgreSQL cannot hold ----------------------------------------------------------------


@given(st.text())
def test_escaping_text_is_reversible_and_leaves_no_nul(text: str) -> None:
    stored = escape_text(text)
    assert "\x00" not in stored
    assert unescape_text(stored) == text
    if "\x00" not in text and ESCAPE not in text:
        assert stored == text


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(["\x00", ESCAPE, "0", "a", "数", "\n"]), max_size=12))
def test_any_text_round_trips_through_the_server(pg: Server, text: str) -> None:
    db = open_database(pg.template_url(), migrate_first=False, read_only=True)
    try:
        got = db.execute_sql("SELECT %s::text, %s::text || 'z'", (text, text)).fetchone()
    finally:
        db.close()
    assert got == (text, text + "z")


def test_messages_with_nul_and_json_content_round_trip_through_the_models(
    pg_db: PostgresDatabase,
) -> None:
    stored = ["a\x00b", "\x00json:[1]", f"{ESCAPE}0 is not a NUL", "数据库\x00迁移"]
    with using(pg_db):
        Session.create(id="s", source="cli", started_at=1.0, title="t\x00itle")
        ids = [
            Message.create(session="s", role="user", content=c, tool_calls=c, timestamp=n).id
            for n, c in enumerate(stored)
        ]
        got = [(m.content, m.tool_calls) for m in Message.select().order_by(Message.id)]
        assert got == [(c, c) for c in stored]
        assert Session.get_by_id("s").title == "t\x00itle"
        assert Session.get(Session.title == "t\x00itle").id == "s"
    found = pg_db.execute_sql(
        "SELECT id FROM messages WHERE hermes_search_text(content, tool_name, tool_calls) LIKE %s",
        ("%库\x00迁%",),
    ).fetchall()
    assert found == [(ids[3],)]


def test_a_server_older_than_15_is_refused_by_name() -> None:
    # A server this package's SQL was not written for fails later, in ways that name
    # nothing (a function or a syntax it lacks): refused at the first connection.
    class Info:
        server_version = 140011

    class Conn:
        info = Info()

    target = parse_url("postgresql://me:secret@db.example/hermes")
    with pytest.raises(UnsupportedServerError) as raised:
        check_server(Conn(), target)
    assert str(raised.value) == (
        "postgresql://me@db.example/hermes runs PostgreSQL 14.11; this package needs"
        " PostgreSQL 15 or newer"
    )
    Info.server_version = 150004
    check_server(Conn(), target)  # 15.4: accepted


HOLDER = textwrap.dedent(
    """
    import sys, time
    from hermes_models.store.postgres import _connect_raw, parse_url
    from hermes_models.store import postgres_sql

    target = parse_url(sys.argv[1])
    conn = _connect_raw(target)
    conn.execute(postgres_sql.MIGRATE_LOCK, (target.schema or "",))
    print("holding", flush=True)
    time.sleep(120)
    """
)

OPENER = textwrap.dedent(
    """
    import sys
    from hermes_models import SessionDB

    print("opening", flush=True)
    with SessionDB(sys.argv[1]) as store:
        store.create_session("opened", "cli")
    """
)


@pytest.mark.postgresql
@pytest.mark.slow
def test_an_opener_killed_at_any_point_never_blocks_the_next(pg: Server, tmp_path: Path) -> None:
    # yoyo's lock was a row: a process killed while opening left it, and every later
    # writable open waited 600 s for it, then failed. The migration lock is now the
    # server's own (a session-level advisory lock): gone with the killed session.
    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER, encoding="utf-8")
    url = pg.new_database(migrated=False)
    child = subprocess.Popen([sys.executable, str(holder), url], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "holding\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    start = time.monotonic()
    with SessionDB(url) as store:  # migrates: takes the lock the killed holder had
        store.create_session("after-holder", "cli")
    assert time.monotonic() - start < 30
    # yoyo also locks with a row of its own while it updates its tables: a process
    # killed then left it, and the next open waited for it and failed. Such a row:
    url = pg.new_database(migrated=False)
    with pg_server.connect(parse_url(url).url) as conn:
        conn.execute(
            "CREATE TABLE yoyo_lock (locked INT DEFAULT 1, ctime TIMESTAMP,"
            " pid INT NOT NULL, PRIMARY KEY (locked))"
        )
        conn.execute("INSERT INTO yoyo_lock (ctime, pid) VALUES (now(), 999999)")
        conn.commit()
    start = time.monotonic()
    with SessionDB(url) as store:
        store.create_session("after-yoyo-row", "cli")
    assert time.monotonic() - start < 8  # yoyo would have waited 10 s, then failed
    opener = tmp_path / "opener.py"
    opener.write_text(OPENER, encoding="utf-8")
    for delay in (0.0, 0.05, 0.15, 0.3, 0.6, 1.0):
        url = pg.new_database(migrated=False)  # each open migrates a new store
        child = subprocess.Popen(
            [sys.executable, str(opener), url], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline() == "opening\n"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        start = time.monotonic()
        with SessionDB(url) as store:
            store.create_session("next", "cli")
            assert "next" in {row["id"] for row in store.list_sessions_rich(limit=None)}
        assert time.monotonic() - start < 30, delay


@pytest.mark.postgresql
def test_opening_an_up_to_date_store_reads_and_nothing_else(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One read of the applied migrations: no lock, no schema statement, no yoyo (each
    # open used to run the whole check under yoyo's lock, a row written and deleted).
    ran: list[str] = []
    connect = postgres_module._connect_raw

    class Recorded:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            ran.append(sql)
            return self.conn.execute(sql, *args)

        def __enter__(self) -> Recorded:
            return self

        def __exit__(self, *exc: object) -> None:
            self.conn.close()

    monkeypatch.setattr(postgres_module, "_connect_raw", lambda t: Recorded(connect(t)))
    monkeypatch.setattr(postgres_module, "_apply", None)  # yoyo must not be reached
    assert migrate(pg_url) == []
    assert [sql.split()[0:2] for sql in ran] == [
        ["SELECT", "to_regclass(%s)"],
        ["SELECT", "migration_hash"],
    ]
