"""A PostgreSQL server where pg_trgm cannot be created, and libpq URL parameters.

Two real ways a server refuses the extension:

- a role without ``CREATE`` on its database (a managed server's application
  role): PostgreSQL refuses it even a trusted extension (``insufficient_privilege``);
- an allow-list, as managed services keep one: an event trigger on ``CREATE
  EXTENSION`` that raises ``feature_not_supported`` (the contrib package itself
  cannot be uninstalled from the test's server).

And a third, where it exists but elsewhere: created beforehand in a schema of its
own, which the role may use (the index is built with it) or not (left out).

On each, migrating succeeds without the trigram index, every search answers as
on a store with it (the same ids), the store says once at open what is slower,
``doctor`` says it too, and ``doctor --fix`` adds the index once the role may.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from console_script import environment, run
from pg_server import Server, connect
from test_pg_search import fill

from hermes_models import Message, SessionDB, health
from hermes_models.errors import MigrationError
from hermes_models.models.tables import encode_content
from hermes_models.search.pipeline import search_messages, search_sessions
from hermes_models.store.binding import using
from hermes_models.store.postgres import PostgresDatabase, open_database, parse_url

pytestmark = pytest.mark.postgresql

_roles = itertools.count()

#: What the doctor and the warning say is slower.
SCANNING = (
    "searches of CJK terms of 3 or more characters, and of terms matched as substrings"
    " (symbols such as ①②③), read every message instead of an index"
    " (the same hits, slower as the store grows)"
)
#: The doctor's line of a store without the trigram index (pg_trgm refused).
NO_TRIGRAMS = (
    "warning: no trigram index (pg_trgm could not be created on the server (not installed,"
    " not allowed, or this role lacks CREATE on the database)): " + SCANNING + "; "
    "`hermes-models doctor --fix` adds it once pg_trgm can be created"
)
#: The doctor's checks on a server store, in order.
SERVER_CHECKS = [
    "server",
    "schema_version",
    "parent links",
    "search indexes",
    "session counters",
    "message id sequence",
]

#: Queries of every route: CJK of 3+ characters (the trigram index's), 1-2 characters
#: (the gram index), symbols that make no lexeme (substrings), words, and mixes.
QUERIES = [
    "数据库",
    "数据库迁移",
    "データベース",
    "데이터베이스",
    "服务器日志",
    "数据",
    "数",
    "①",
    "②③",
    "①②③",
    "sqlite 数据库",
    "数据库 OR docker",
    "deploy NOT 数据库",
    '"event loop"',
    "docker",
    "migrat*",
    "chat-send",
]


def _database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    netloc = f"{role}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture
def app_role(pg: Server) -> Iterator[tuple[str, str]]:
    """``(url, admin url)`` of an empty database that a role of its own may fill (it
    creates tables in ``public``) but not add an extension to: no ``CREATE`` on the
    database, as an application role of a managed server has none. ``url`` connects
    as that role; the database and the role are dropped afterwards."""
    admin = pg.new_database(migrated=False)
    role = f"hermes_app_{os.getpid()}_{next(_roles)}"
    pg.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        with connect(admin, autocommit=True) as conn:
            conn.execute(f'GRANT USAGE, CREATE ON SCHEMA public TO "{role}"')
            has = conn.execute(
                "SELECT has_database_privilege(%s, current_database(), 'CREATE')", (role,)
            ).fetchone()
            assert has == (False,)
        yield _as_role(admin, role), admin
    finally:
        pg.drop(admin)
        pg.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture
def allow_list(pg: Server) -> str:
    """URL of an empty database where ``CREATE EXTENSION`` is refused for every role,
    superusers included, with ``feature_not_supported`` (a managed service's
    allow-list, by an event trigger)."""
    url = pg.new_database(migrated=False)
    with connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_extensions() RETURNS event_trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'extension is not allow-listed on this server'"
            " USING ERRCODE = 'feature_not_supported'; END $$"
        )
        conn.execute(
            "CREATE EVENT TRIGGER refuse_extensions ON ddl_command_start"
            " WHEN TAG IN ('CREATE EXTENSION') EXECUTE FUNCTION refuse_extensions()"
        )
    return url


def _extensions(url: str) -> list[str]:
    with connect(url, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT extname FROM pg_extension ORDER BY 1")]


def _fill(db: PostgresDatabase) -> None:
    """test_pg_search's rows, and symbols that make no lexeme (the substring route)."""
    with using(db):
        fill()
        for n, content in enumerate(["①②③ numbered", "②③ only", "plain ① here"], 101):
            Message.create(
                id=n, session="loner", role="user", content=encode_content(content),
                timestamp=1_767_100_000.0 + n, active=1,
            )  # fmt: skip


def _answers(db: PostgresDatabase) -> dict[str, Any]:
    """The ids each query finds (ranked, newest first, oldest first, with soft-deleted
    messages) and ``search_sessions``' rows, whole."""
    out: dict[str, Any] = {}
    with using(db):
        for query in QUERIES:
            for sort in (None, "newest", "oldest"):
                hits = search_messages(query, sort=sort, limit=None)
                out[f"{query} {sort}"] = [hit["id"] for hit in hits]
            every = search_messages(query, sort="newest", include_inactive=True, limit=None)
            out[f"{query} inactive"] = [hit["id"] for hit in every]
            out[f"{query} sessions"] = search_sessions(query, limit=50)
    return out


@pytest.fixture
def reference(pg_url: str) -> dict[str, Any]:
    """The answers of a store made with pg_trgm (the migrated template)."""
    db = open_database(pg_url, migrate_first=False)
    try:
        assert db.trigram_index() == "present"
        _fill(db)
        return _answers(db)
    finally:
        db.close_all()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hermes_models" and r.levelno == logging.WARNING
    ]


def _warning(url: str) -> str:
    return (
        f"{parse_url(url).label()} has no trigram index (pg_trgm could not be"
        f" created): {SCANNING}; `hermes-models doctor --fix` adds it once pg_trgm can be"
        " created on the server"
    )


def test_a_role_that_may_not_create_pg_trgm_migrates_and_finds_the_same(
    app_role: tuple[str, str], reference: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, admin = app_role
    caplog.set_level(logging.WARNING, logger="hermes_models")
    with SessionDB(url) as store:  # migrates: 0003 leaves pg_trgm and its index out
        db = store.database
        assert isinstance(db, PostgresDatabase)
        assert db.trigram_index() == "absent"
        _fill(db)
        assert _answers(db) == reference
    with SessionDB(url) as again:
        assert sorted(hit["id"] for hit in again.search_messages("数据库迁移")) == [12, 13]
    assert _warnings(caplog) == [_warning(url)]  # said once, at the first open
    assert "pg_trgm" not in _extensions(admin)


def test_an_allow_list_that_refuses_extensions_migrates_and_finds_the_same(
    allow_list: str, reference: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_models")
    db = open_database(allow_list)
    try:
        assert db.trigram_index() == "absent"
        _fill(db)
        assert _answers(db) == reference
        assert _warnings(caplog) == [_warning(allow_list)]
        assert db.optimize_indexes() == 2  # the indexes it has (Hermes counts two)
        # Still refused: repair recounts (the rows above were written by the models,
        # which leave counters alone) and leaves the index out, saying so.
        fixed = health.repair(db)
        assert fixed == {
            "recounted": ["branch", "cont", "loner", "other", "root", "sub"],
            "sequence": None,
            "regrammed": [],
            "trigram_index": "absent",
        }
        report = health.doctor(db)
        assert report["ok"] is True
        assert [c["name"] for c in report["checks"]] == SERVER_CHECKS
        assert report["checks"][3]["detail"] == NO_TRIGRAMS
        assert db.trigram_index() == "absent"
    finally:
        db.close_all()
    assert "pg_trgm" not in _extensions(allow_list)


@pytest.mark.parametrize("usable", [True, False])
def test_pg_trgm_made_beforehand_in_a_schema_of_its_own_is_used_where_it_is(
    app_role: tuple[str, str], usable: bool
) -> None:
    # As a managed server keeps extensions in an `extensions` schema, outside the
    # store's search path (the role may use it, or not).
    url, admin = app_role
    with connect(admin, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA extensions")
        conn.execute("CREATE EXTENSION pg_trgm SCHEMA extensions")
        if usable:
            conn.execute(f'GRANT USAGE ON SCHEMA extensions TO "{urlsplit(url).username}"')
    with SessionDB(url) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "数据库迁移")
        assert store.database.trigram_index() == ("present" if usable else "absent")
        assert [hit["id"] for hit in store.search_messages("数据库")] == [1]


def test_a_store_made_with_pg_trgm_keeps_it_and_says_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_models")
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "数据库迁移")
        assert store.database.trigram_index() == "present"
        report = health.doctor(store.database)
        assert health.stats(store.database)["search_indexes"] == {
            "idx_messages_search_tsv": "used",
            "idx_messages_search_trgm": "used",
            "idx_messages_cjk_grams": "used",
        }
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == SERVER_CHECKS
    assert report["checks"][3]["detail"] == (
        "words (tsvector), substrings (pg_trgm trigrams) and 1-2-character CJK terms (gram index)"
    )
    assert re.fullmatch(r"PostgreSQL \d+\.\d+.*", report["checks"][0]["detail"])
    assert [c["detail"] for c in report["checks"][1:3]] == [
        "16",
        "no session is its own ancestor",
    ]
    assert _warnings(caplog) == []


def test_doctor_says_what_is_slower_and_fix_adds_the_index_once_allowed(
    app_role: tuple[str, str], pg: Server, tmp_path: Path
) -> None:
    url, admin = app_role
    with SessionDB(url) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "数据库迁移 ①②③")
        assert health.stats(store.database)["search_indexes"] == {
            "idx_messages_search_tsv": "used",
            "idx_messages_search_trgm": (
                "absent (pg_trgm could not be created: substring terms scan every message)"
            ),
            "idx_messages_cjk_grams": "used",
        }
    label = parse_url(url).label()
    wide = environment(tmp_path, COLUMNS="1000")
    checked = run("doctor", "--db", url, cwd=tmp_path, env=wide)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == f"Warning: {_warning(url)}\n"
    lines = checked.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        "ok   server",
        "ok   schema_version",
        "ok   parent links",
        "warn search indexes",
        "ok   session counters",
        "ok   message id sequence",
    ]
    assert lines[3] == f"warn search indexes: {NO_TRIGRAMS}"
    assert lines[-1] == f"{label}: healthy (6 checks passed)"

    # The role is given CREATE on the database: --fix creates pg_trgm and the index.
    pg.execute(f'GRANT CREATE ON DATABASE "{_database_name(admin)}" TO "{urlsplit(url).username}"')
    fixed = run("doctor", "--db", url, "--fix", cwd=tmp_path, env=wide)
    assert fixed.returncode == 0, fixed.stderr
    lines = fixed.stdout.splitlines()
    assert lines[0] == "fixed: created pg_trgm's trigram index: substring searches use it"
    assert lines[4] == (
        "ok   search indexes: words (tsvector), substrings (pg_trgm trigrams) and"
        " 1-2-character CJK terms (gram index)"
    )
    assert lines[-1] == f"{label}: healthy (6 checks passed)"
    assert "pg_trgm" in _extensions(admin)
    with SessionDB(url) as store:
        assert store.database.trigram_index() == "present"
        assert [hit["id"] for hit in store.search_messages("数据库迁移")] == [1]
        assert [hit["id"] for hit in store.search_messages("②")] == [1]
    quiet = run("doctor", "--db", url, cwd=tmp_path, env=wide)
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_fix_replaces_a_half_built_trigram_index(pg_url: str) -> None:
    # CREATE INDEX CONCURRENTLY that fails leaves an invalid index behind; the server
    # never uses it, so it counts as missing and --fix builds it again.
    with connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE pg_index SET indisvalid = false"
                     " WHERE indexrelid = 'idx_messages_search_trgm'::regclass")  # fmt: skip
    db = open_database(pg_url, migrate_first=False)
    try:
        assert db.trigram_index() == "invalid"
        assert health.stats(db)["search_indexes"]["idx_messages_search_trgm"] == (
            "not used (its build failed half-way: substring terms scan every message)"
        )
        with db.atomic(), pytest.raises(MigrationError, match="outside any transaction"):
            db.add_trigram_index()  # the concurrent build would wait for this transaction
        assert health.repair(db)["trigram_index"] == "present"
        assert db.trigram_index() == "present"
    finally:
        db.close_all()


# -- libpq parameters of the URL ---------------------------------------------------------------


def test_url_parameters_reach_libpq_as_psql_reads_them(pg: Server) -> None:
    # Re-encoded, %20 became "+": the server refused options "-c+statement_timeout=1234"
    # and named the application "nightly+job". An empty database: the migration's
    # connection reads the URL too.
    url = (
        f"{pg.new_database(migrated=False)}?application_name=nightly%20job"
        "&options=-c%20statement_timeout%3D1234&max_connections=2"
    )
    with SessionDB(url) as store:
        rows = store.database.execute_sql(
            "SELECT current_setting('application_name'), current_setting('statement_timeout')"
        ).fetchall()
        assert store.database.trigram_index() == "present"
    assert rows == [("nightly job", "1234ms")]
