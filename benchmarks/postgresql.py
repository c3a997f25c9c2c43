"""SQLite and PostgreSQL side by side: hot paths, search at scale, concurrent writers.

Three parts (``--only hot,search,writers``; all by default):

* ``hot``: the hot paths of ``benchmarks/hot_paths.py`` on both backends, each
  call of ours (``SessionDB``) interleaved with the simplest correct SQL for
  the same task on a plain connection to the same store: ``sqlite3`` for a
  file, ``psycopg`` for a server. Medians and ratios ours / plain per backend.
  The plain psycopg side does not escape NUL characters (the package's text
  adapter does, :func:`hermes_models.store.postgres.adapt_text`); no text of this
  part holds one.
* ``search``: ``search_messages`` on both backends, on the corpus of
  ``benchmarks/search.py`` at ``--messages`` (100,000 and/or 1,000,000),
  every route (words, phrase, prefix, OR/NOT, CJK of 1, 2, 3+ characters,
  mixed), a page of 20, ranked and ``sort='newest'``, no time budget; p50
  and p95 of ``--search-rounds`` calls. The same corpus is on both: built
  once as an SQLite file (plain sqlite3, gram index built as ``hermes-models
  optimize`` does), then copied into a PostgreSQL database with ``COPY``
  (search indexes dropped during the load and built afterwards, then
  ``VACUUM ANALYZE``). Both are kept under ``--dir`` and reused.
* ``writers``: 8, 32 and 64 processes (``--writers``), each appending to
  its own session through ``SessionDB.append_message`` for ``--seconds``
  seconds, all released at once, on a fresh file / fresh database per run:
  throughput, p50 / p99 / max latency of one append, errors (the row counts
  are checked afterwards). ``--searchers N`` runs N processes beside them,
  each calling ``search_messages`` (the queries of ``SEARCHES`` in turn):
  searches/s, p50 / p99 / max, errors. ``--writers-corpus N`` runs them on a
  copy of the search corpus of N messages (a database made with the corpus
  as template, a copy of the file) instead of an empty store.

The server: ``--url`` (an admin URL of an existing server; databases named
``hermes_bench_*`` are created on it), else a cluster of the system's
PostgreSQL binaries (``/usr/lib/postgresql/N/bin``) kept under ``--dir``:
created on first use, started for the run (as the ``postgres`` user when
run as root) and stopped at exit. Unlike the tests' throwaway cluster
(``tests/pg_server.py``) it runs with PostgreSQL's default durability -
``fsync=on``, ``synchronous_commit=on``, ``full_page_writes=on`` - so a
commit waits for its WAL flush, as SQLite's ``synchronous=FULL`` waits for
its fsync; only ``max_connections=200`` is changed (64 writers and more).

Run: python benchmarks/postgresql.py [--messages 100000 1000000] [--only hot,search,writers]
     [--url postgresql://...] [--rounds N] [--search-rounds N] [--writers 8,32,64]
     [--seconds 10] [--searchers 0] [--writers-corpus N] [--dir /tmp/hermes-pgbench]
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import multiprocessing
import os
import pwd
import shutil
import socket
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from grams import index as build_gram_index
from hot_paths import decoded_rows, median_pair
from search import build as build_corpus

from hermes_models import SessionDB
from hermes_models.store.postgres import adapt_text
from hermes_models.store.postgres import migrate as pg_migrate

DEFAULT_DIR = Path("/tmp/hermes-pgbench")
PARTS = ("hot", "search", "writers")

# -- the server --------------------------------------------------------------------------------


def _binaries() -> Path:
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise SystemExit("no PostgreSQL binaries found (install postgresql-15, or give --url)")
    return Path(initdb).parent


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str]) -> str:
    done = subprocess.run(_as_owner(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(folder: Path, leave_running: bool = False) -> str:
    """The admin URL of the benchmark cluster under ``folder`` (created once, started
    now with default durability and stopped at exit unless ``leave_running``; its
    databases are kept). A cluster already running there is used as it is."""
    bin_dir = _binaries()
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = folder / "data"
    if not data.exists():
        _run(
            [
                str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--locale=C.UTF-8",
            ]
        )  # fmt: skip
    running = subprocess.run(
        _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "status"]),
        capture_output=True,
        check=False,
    )
    if running.returncode == 0:  # started by another run still going: shared, left running
        port = int((data / "postmaster.pid").read_text().splitlines()[3])
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"
    port = _free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
          options, "start"])  # fmt: skip

    def stop() -> None:
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            check=False,
        )

    if not leave_running:
        atexit.register(stop)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def admin(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def database_exists(url: str, name: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            is not None
        )


def server_facts(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                (["fsync", "synchronous_commit", "full_page_writes", "max_connections",
                  "shared_buffers", "wal_level"],),
            ).fetchall()
        )  # fmt: skip
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return f"PostgreSQL {version} ({shown}; shared_buffers in 8 kB pages)"


class Template:
    """A migrated database, copied for each fresh store (``CREATE DATABASE ... TEMPLATE``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = "hermes_bench_template"
        self._ready = False
        self._count = 0

    def fresh(self, label: str) -> str:
        """The URL of a new migrated database (dropped first if it exists)."""
        if not self._ready:
            admin(self.url, f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
            admin(self.url, f"CREATE DATABASE {self.name} TEMPLATE template0")
            pg_migrate(with_database(self.url, self.name))
            self._ready = True
        name = f"hermes_bench_{label}"
        admin(self.url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin(self.url, f"CREATE DATABASE {name} TEMPLATE {self.name}")
        return with_database(self.url, name)

    def drop(self, url: str) -> None:
        admin(self.url, f"DROP DATABASE IF EXISTS {urlsplit(url).path.lstrip('/')} WITH (FORCE)")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


# -- the search corpus on both backends ---------------------------------------------------------


def sqlite_corpus(folder: Path, messages: int) -> Path:
    """The corpus of ``benchmarks/search.py`` at ``messages``, built once (gram index
    built and migrated to the current version)."""
    path = folder / f"corpus-{messages}.db"
    if not path.exists():
        started = time.perf_counter()
        print(f"building {messages:,} messages into {path} (once) ...", flush=True)
        partial = path.with_suffix(".partial")
        for leftover in folder.glob(partial.name + "*"):
            leftover.unlink()
        build_corpus(partial, messages)
        build_gram_index(partial)
        SessionDB(partial).close()
        partial.rename(path)
        print(f"built in {time.perf_counter() - started:.0f} s", flush=True)
    SessionDB(path).close()  # migrated to the current version
    return path


def pg_corpus(url: str, source: Path, messages: int) -> str:
    """A database holding the rows of the SQLite corpus ``source``, built once."""
    name = f"hermes_bench_corpus_{messages}"
    target = with_database(url, name)
    if database_exists(url, name):
        with psycopg.connect(target, autocommit=True) as conn:
            row = conn.execute(
                "SELECT value FROM state_meta WHERE key = 'hermes_bench.corpus'"
            ).fetchone()
        if row is not None and row[0] == str(messages):
            return target
    started = time.perf_counter()
    print(f"copying {source} into PostgreSQL database {name} (once) ...", flush=True)
    admin(url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin(url, f"CREATE DATABASE {name} TEMPLATE template0")
    pg_migrate(target)
    lite = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    with psycopg.connect(target) as conn:
        adapt_text(conn)  # content stored as JSON begins with a NUL: escaped as ours does
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages'"
            " AND indexname <> 'messages_pkey'"
        ).fetchall()
        for index_name, _ in indexes:
            conn.execute(f"DROP INDEX {index_name}")
        for table in ("sessions", "messages"):
            pg_columns = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s"
                    " AND is_generated = 'NEVER'",
                    (table,),
                ).fetchall()
            }
            columns = [
                r[1] for r in lite.execute(f"PRAGMA table_info({table})") if r[1] in pg_columns
            ]
            quoted = ", ".join(f'"{c}"' for c in columns)
            with conn.cursor().copy(f"COPY {table} ({quoted}) FROM STDIN") as copy:
                for row in lite.execute(f"SELECT {quoted} FROM {table} ORDER BY rowid"):
                    copy.write_row(row)
            print(f"  {table} copied ({time.perf_counter() - started:.0f} s)", flush=True)
        for index_name, definition in indexes:
            conn.execute(definition)
            print(f"  {index_name} built ({time.perf_counter() - started:.0f} s)", flush=True)
        conn.execute(
            "SELECT setval(pg_get_serial_sequence('messages', 'id'),"
            " (SELECT max(id) FROM messages))"
        )
        conn.execute(
            "INSERT INTO state_meta (key, value) VALUES ('hermes_bench.corpus', %s)",
            (str(messages),),
        )
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM (ANALYZE) sessions, messages")
    lite.close()
    print(f"copied and indexed in {time.perf_counter() - started:.0f} s", flush=True)
    return target


# -- hot paths ----------------------------------------------------------------------------------

MESSAGE_COLUMNS = (
    "id, session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp,"
    " token_count, finish_reason, reasoning, reasoning_content, reasoning_details,"
    " codex_reasoning_items, codex_message_items, platform_message_id, observed, active"
)
APPEND_SQL = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,"
    " tool_name, timestamp, token_count, finish_reason, reasoning, reasoning_content,"
    " reasoning_details, codex_reasoning_items, codex_message_items,"
    " platform_message_id, observed)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
COUNTERS_SQL = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1,"
    " tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?"
)
UPSERT_META_SQL = (
    "INSERT INTO state_meta (key, value) VALUES (?, ?)"
    " ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)
#: Hermes' listing statement (benchmarks/lineage.py), one page; on PostgreSQL the JSON
#: test is hermes_json_text() (migration 0002), the same rule.
LISTING_SQL = (
    "SELECT s.*, COALESCE((SELECT SUBSTR(REPLACE(REPLACE(m.content, {lf}, ' '), {cr}, ' '),"
    " 1, 63) FROM messages m WHERE m.session_id = s.id AND m.role = 'user'"
    " AND m.content IS NOT NULL ORDER BY m.timestamp, m.id LIMIT 1), '') AS _preview_raw,"
    " COALESCE((SELECT MAX(m2.timestamp) FROM messages m2 WHERE m2.session_id = s.id),"
    " s.started_at) AS last_active FROM sessions s"
    " WHERE (s.parent_session_id IS NULL OR {branched} IS NOT NULL"
    " OR EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id"
    " AND p.end_reason = 'branched'))"
    " AND {delegate} IS NULL AND s.archived = 0"
    " ORDER BY s.started_at DESC LIMIT 20"
)
SQLITE_JSON = "json_extract(CASE WHEN json_valid(s.model_config) THEN s.model_config END, '$.{}')"
PG_JSON = "hermes_json_text(s.model_config, '{}')"


class Plain:
    """The simplest correct SQL for each call, on a plain connection (no package code but
    ``decode_content`` for message content, as a Hermes reader decodes it)."""

    def __init__(self, conn: Any, postgres: bool) -> None:
        self.conn = conn
        self.postgres = postgres
        json_text = PG_JSON if postgres else SQLITE_JSON
        self.listing = self.q(
            LISTING_SQL.format(
                lf="chr(10)" if postgres else "X'0A'",
                cr="chr(13)" if postgres else "X'0D'",
                branched=json_text.format("_branched_from"),
                delegate=json_text.format("_delegate_from"),
            )
        )
        self.append_sql = self.q(APPEND_SQL)
        self.counters_sql = self.q(COUNTERS_SQL)
        self.meta_sql = self.q(UPSERT_META_SQL)
        self.messages_sql = self.q(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND active = 1"
            " ORDER BY id"
        )
        self.exact_title = self.q("SELECT id FROM sessions WHERE title = ?")
        self.numbered_title = self.q(
            "SELECT id FROM sessions WHERE title LIKE ? ESCAPE '\\'"
            " ORDER BY started_at DESC LIMIT 1"
        )

    def q(self, sql: str) -> str:
        """``sql`` with psycopg's placeholders on PostgreSQL (converted once, here)."""
        return sql.replace("?", "%s") if self.postgres else sql

    def begin(self) -> None:
        self.conn.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        self.conn.execute("ROLLBACK")

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def row(self, sql: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
        cursor = self.conn.execute(sql, params)
        row = cursor.fetchone()
        names = [c[0] for c in cursor.description]
        return None if row is None else dict(zip(names, row))

    def append(self, session_id: str, n: int) -> int:
        self.begin()
        try:
            cursor = self.conn.execute(
                self.append_sql + (" RETURNING id" if self.postgres else ""),
                (session_id, "user", f"plain message {n} about asyncio", None, None, None,
                 time.time(), None, None, None, None, None, None, None, None, 0),
            )  # fmt: skip
            new_id = cursor.fetchone()[0] if self.postgres else cursor.lastrowid
            self.conn.execute(self.counters_sql, (0, session_id))
            self.commit()
        except BaseException:
            self.rollback()
            raise
        return int(new_id or 0)

    def set_meta(self, key: str, value: str) -> None:
        self.begin()
        try:
            self.conn.execute(self.meta_sql, (key, value))
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        return decoded_rows(self.conn.execute(self.messages_sql, (session_id,)))

    def resolve_by_title(self, title: str) -> str | None:
        """Hermes' lookup: the newest numbered variant, else the exact title."""
        escaped = title.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found = self.one(self.numbered_title, (f"{escaped} #%",))
        return found if found is not None else self.one(self.exact_title, (title,))

    def list_page(self) -> list[dict[str, Any]]:
        """Hermes' listing page (no compressed root in this store: no tip to project)."""
        cursor = self.conn.execute(self.listing)
        names = [column[0] for column in cursor.description]
        fetched = cursor.fetchall()
        rows = []
        for values in fetched:
            row = dict(zip(names, values))
            raw = row.pop("_preview_raw").strip()
            row["preview"] = raw if len(raw) <= 60 else raw[:60] + "..."
            rows.append(row)
        return rows


def _listing_key(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["preview"], r["last_active"], r["message_count"]) for r in rows]


def hot_backend(
    folder: Path, template: Template, rounds: int, backend: str
) -> list[tuple[str, float, float]]:
    """The hot paths on one backend: (name, ours, plain) medians."""
    postgres = backend == "postgresql"
    if postgres:
        target: Any = template.fresh("hot")
        conn: Any = psycopg.connect(target)
    else:
        target = folder / "hot.db"
        for old in folder.glob("hot.db*"):
            old.unlink()
        SessionDB(target).close()
        conn = sqlite3.connect(target, timeout=1.0, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
    plain = Plain(conn, postgres)
    store = SessionDB(target)
    for name in ("ours", "plain", "big"):
        store.create_session(name, "cli")
    now = time.time()
    plain.begin()
    for n in range(2000):
        conn.execute(
            plain.q(
                "INSERT INTO sessions (id, source, started_at, ended_at, title)"
                " VALUES (?, 'cli', ?, ?, ?)"
            ),
            (f"small-{n:04d}", now - 3600.0 + n, now - 10.0 if n % 3 == 0 else None,
             f"project {n}" if n % 4 == 0 else None),
        )  # fmt: skip
    conn.execute(
        plain.q("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', ?, ?)"),
        ("small-2", now, "project 8 #2"),
    )
    plain.commit()
    for n in range(1000):
        role = "user" if n % 2 == 0 else "assistant"
        calls = [{"id": f"call{n}", "type": "function"}] if role == "assistant" else None
        store.append_message("big", role, f"turn {n} of a long session", tool_calls=calls)
    store.set_meta("bench_key", "1")
    if postgres:
        with psycopg.connect(target, autocommit=True) as vacuum:
            vacuum.execute("VACUUM (ANALYZE) sessions, messages")
    counter = iter(range(10**9))
    rows: list[tuple[str, float, float]] = []

    def measure(name: str, n: int, ours: Callable[[], Any], theirs: Callable[[], Any]) -> None:
        o, p = median_pair(n, ours, theirs)
        rows.append((name, o, p))
        print(
            f"{backend:<10} {name:<40} ours {o * 1e6:9.1f} us   plain {p * 1e6:9.1f} us"
            f"   ratio {o / p:5.2f}   ({load()})",
            flush=True,
        )

    if postgres:
        # One database: PostgreSQL's indexes need no catching up on others' rows.
        plain_append = lambda: plain.append("plain", next(counter))  # noqa: E731
        alone = None
    else:
        # A file of its own, as in hot_paths.py: our appends would index the rows
        # a plain writer adds to a shared file (the gram index catches up).
        alone = folder / "hot-plain.db"
        for old in folder.glob("hot-plain.db*"):
            old.unlink()
        SessionDB(alone).close()
        alone_conn = sqlite3.connect(alone, timeout=1.0, isolation_level=None)
        alone_conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('plain', 'cli', 0)"
        )
        lone = Plain(alone_conn, False)
        plain_append = lambda: lone.append("plain", next(counter))  # noqa: E731
    measure(
        "append_message (1 per transaction)",
        rounds,
        lambda: store.append_message("ours", "user", f"our message {next(counter)} about x"),
        plain_append,
    )
    if alone is not None:
        alone_conn.close()
    assert store.get_messages("big") == plain.get_messages("big")
    measure(
        "get_messages (1,000 messages)",
        max(20, rounds // 10),
        lambda: store.get_messages("big"),
        lambda: plain.get_messages("big"),
    )
    if postgres:  # the same plain reads through the package's NUL-escaping text adapter
        adapted_conn = psycopg.connect(target, autocommit=True)
        adapt_text(adapted_conn)
        adapted = Plain(adapted_conn, True)
        assert store.get_messages("big") == adapted.get_messages("big")
        measure(
            "get_messages, plain with adapt_text",
            max(20, rounds // 10),
            lambda: store.get_messages("big"),
            lambda: adapted.get_messages("big"),
        )
        adapted_conn.close()
    small: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "get_session(id)",
            lambda: store.get_session("small-0400"),
            lambda: plain.row(plain.q("SELECT * FROM sessions WHERE id = ?"), ("small-0400",)),
        ),
        (
            "get_meta(key)",
            lambda: store.get_meta("bench_key"),
            lambda: plain.one(
                plain.q("SELECT value FROM state_meta WHERE key = ?"), ("bench_key",)
            ),
        ),
        (
            "session_count()",
            store.session_count,
            lambda: plain.one("SELECT COUNT(*) FROM sessions WHERE archived = 0"),
        ),
        (
            "resolve_session_by_title(title)",
            lambda: store.resolve_session_by_title("project 8"),
            lambda: plain.resolve_by_title("project 8"),
        ),
    ]
    for name, ours_call, plain_call in small:
        assert ours_call() == plain_call(), (backend, name, ours_call(), plain_call())
        measure(name, rounds * 5, ours_call, plain_call)
    assert _listing_key(store.list_sessions_rich()) == _listing_key(plain.list_page())
    measure(
        "list_sessions_rich() first page",
        rounds,
        lambda: store.list_sessions_rich(),
        plain.list_page,
    )
    measure(
        "set_meta(key, value) (one commit)",
        max(20, rounds // 4),
        lambda: store.set_meta("bench_key", str(next(counter))),
        lambda: plain.set_meta("bench_key", str(next(counter))),
    )
    store.close()
    conn.close()
    if postgres:
        template.drop(target)
    return rows


def hot(folder: Path, template: Template, rounds: int, backends: list[str]) -> None:
    """Each hot path, ours against plain, per backend."""
    results: dict[str, list[tuple[str, float, float]]] = {}
    for backend in backends:
        results[backend] = hot_backend(folder, template, rounds, backend)
    print()
    print("| Call | " + " | ".join(f"{b}: ours / plain | ratio" for b in results) + " |")
    print("| --- | " + " | ".join("--- | ---" for _ in results) + " |")
    names = list(dict.fromkeys(name for rows in results.values() for name, _, _ in rows))
    for name in names:
        cells = []
        for rows in results.values():
            found = [(o, p) for n, o, p in rows if n == name]
            if not found:
                cells.append("— | —")
                continue
            o, p = found[0]
            cells.append(f"{_time(o)} / {_time(p)} | {o / p:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def _time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} µs"


# -- search -------------------------------------------------------------------------------------

#: route -> query
ROUTES: dict[str, str] = {
    "word": "checkpoint",
    "two words": "asyncio timeout",
    "common word (80 % of messages)": "the",
    "phrase": '"event loop"',
    "prefix": "migrat*",
    "phrase OR word": '"event loop" OR vacuum',
    "word NOT word": "checkpoint NOT sqlite",
    "CJK 1 char": "数",
    "CJK 2 chars, common": "数据",
    "CJK 2 chars, rare": "国我",
    "hangul 2 chars": "세션",
    "CJK 3 chars, no hit": "数据库",
    "CJK 4 chars": "事件循环",
    "kana 3 chars": "セッシ",
    "mixed word + CJK 4": "checkpoint 事件循环",
    "mixed word + CJK 3, no hit": "sqlite 数据库",
    "mixed word OR CJK 4": "checkpoint OR 事件循环",
}


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-int(fraction * 1000) * len(ordered) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


def search(targets: dict[str, Any], messages: int, rounds: int, only: str | None) -> None:
    """Every route, ranked and newest first, on each backend; p50 and p95."""
    stores = {backend: SessionDB(target) for backend, target in targets.items()}
    print(f"search on {messages:,} messages, page of 20, {rounds} rounds ({load()})")
    lines = []
    for name, query in ROUTES.items():
        if only and only not in name:
            continue
        for sort in (None, "newest"):
            times: dict[str, list[float]] = {b: [] for b in stores}
            found: dict[str, list[int]] = {}
            for backend, store in stores.items():  # warm, and the page's ids
                hits = store.search_messages(query, sort=sort, time_budget=None)
                found[backend] = [hit["id"] for hit in hits]
            order = list(stores.items())
            for round_ in range(rounds):
                for backend, store in order if round_ % 2 == 0 else order[::-1]:
                    started = time.perf_counter()
                    store.search_messages(query, sort=sort, time_budget=None)
                    times[backend].append(time.perf_counter() - started)
            pages = list(found.values())
            same = "—"
            if len(pages) == 2:
                same = "yes" if sorted(pages[0]) == sorted(pages[1]) else "no"
            cells = " | ".join(
                f"{statistics.median(t) * 1e3:.1f} | {percentile(t, 0.95) * 1e3:.1f}"
                for t in times.values()
            )
            line = f"| {name} | `{query}` | {sort or 'rank'} | {len(pages[0])} | {cells} | {same} |"
            lines.append(line)
            print(line + f"  ({load()})", flush=True)
    print()
    heads = " | ".join(f"{b} p50 ms | {b} p95 ms" for b in stores)
    print(f"| Route | Query | Order | Hits on page | {heads} | Same page |")
    print("| --- | --- | --- | ---: | " + " | ".join("---: | ---:" for _ in stores) + " | --- |")
    for line in lines:
        print(line)
    print()
    for store in stores.values():
        store.close()


# -- concurrent writers -------------------------------------------------------------------------


def writer(target: str, index: int, seconds: float, barrier: Any, results: Any) -> None:
    """Append to a session of our own for ``seconds``; report latencies and errors."""
    session_id = f"writer-{index:03d}"
    store = SessionDB(target)
    store.create_session(session_id, "bench")
    latencies: list[float] = []
    errors: list[str] = []
    barrier.wait()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            store.append_message(session_id, "user", f"{session_id} message {n} about asyncio")
        except Exception as exc:  # counted, not raised: the benchmark reports them
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
        n += 1
    store.close()
    results.put((latencies, errors))


#: What the searchers of ``--searchers`` ask, in turn (words, CJK, mixed; both orders).
SEARCHES: tuple[tuple[str, str | None], ...] = (
    ("checkpoint", "newest"),
    ("checkpoint", None),
    ("数据", None),
    ("国我", None),
    ("checkpoint 事件循环", None),
    ("asyncio timeout", None),
)


def searcher(target: str, index: int, seconds: float, barrier: Any, results: Any) -> None:
    """Search for ``seconds`` (the queries of :data:`SEARCHES` in turn); report latencies
    and errors."""
    store = SessionDB(target)
    store.search_messages("checkpoint", time_budget=None)  # connected, warm
    latencies: list[float] = []
    errors: list[str] = []
    barrier.wait()
    end = time.monotonic() + seconds
    n = index
    while time.monotonic() < end:
        query, sort = SEARCHES[n % len(SEARCHES)]
        started = time.perf_counter()
        try:
            store.search_messages(query, sort=sort, time_budget=None)
        except Exception as exc:  # counted, not raised
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
        n += 1
    store.close()
    results.put((latencies, errors))


def corpus_copy(url: str, folder: Path, messages: int, backend: str, label: str) -> str:
    """A copy of the search corpus at ``messages`` for one run (a database made from the
    corpus database as template, or a copy of the file)."""
    source = sqlite_corpus(folder, messages)
    if backend == "postgresql":
        corpus = pg_corpus(url, source, messages)
        name = f"hermes_bench_{label}"
        admin(url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin(url, f"CREATE DATABASE {name} TEMPLATE {urlsplit(corpus).path.lstrip('/')}")
        return with_database(url, name)
    path = folder / f"{label}.db"
    for old in folder.glob(path.name + "*"):
        old.unlink()
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(path)) as dst,
    ):
        src.backup(dst)
    return str(path)


def writers(
    folder: Path,
    template: Template,
    counts: list[int],
    seconds: float,
    backends: list[str],
    searchers: int = 0,
    corpus: int | None = None,
) -> None:
    """``count`` processes appending at once for ``seconds``, per backend, beside
    ``searchers`` processes searching; on an empty store, or on a copy of the search
    corpus at ``corpus`` messages."""
    lines = []
    search_lines = []
    ctx = multiprocessing.get_context("spawn")
    for count in counts:
        for backend in backends:
            if corpus is not None:
                target = corpus_copy(template.url, folder, corpus, backend, f"writers_{count}")
            elif backend == "postgresql":
                target = template.fresh(f"writers_{count}")
            else:
                path = folder / f"writers-{count}.db"
                for old in folder.glob(path.name + "*"):
                    old.unlink()
                SessionDB(path).close()
                target = str(path)
            with contextlib.closing(SessionDB(target, read_only=True)) as first:
                rows_before = first.message_count(include_inactive=True)
            barrier = ctx.Barrier(count + searchers + 1)
            queue = ctx.Queue()
            found = ctx.Queue()
            procs = [
                ctx.Process(target=writer, args=(target, i, seconds, barrier, queue))
                for i in range(count)
            ]
            readers = [
                ctx.Process(target=searcher, args=(target, i, seconds, barrier, found))
                for i in range(searchers)
            ]
            for proc in procs + readers:
                proc.start()
            before = load()
            barrier.wait()
            started = time.perf_counter()
            collected = [queue.get() for _ in procs]
            elapsed = time.perf_counter() - started
            searched = [found.get() for _ in readers]
            for proc in procs + readers:
                proc.join()
            during = load()
            latencies = sorted(x for lats, _ in collected for x in lats)
            errors = [e for _, errs in collected for e in errs]
            per_writer = [len(lats) - len(errs) for lats, errs in collected]
            check = SessionDB(target, read_only=True)
            rows = check.message_count(include_inactive=True) - rows_before
            counted = sum(
                int(check.get_session(f"writer-{i:03d}")["message_count"]) for i in range(count)
            )
            check.close()
            done = len(latencies) - len(errors)
            exact = rows == counted == done
            p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
            line = (
                f"| {count} | {backend} | {done / elapsed:,.0f} | {_time(p50)}"
                f" | {_time(p99)} | {_time(latencies[-1])}"
                f" | {min(per_writer):,}–{max(per_writer):,} | {len(errors)} | {exact} | {during} |"
            )
            lines.append(line)
            print(line + (f"  first error: {errors[0]}" if errors else "") + f" (before: {before})",
                  flush=True)  # fmt: skip
            if searchers:
                times = sorted(x for lats, _ in searched for x in lats)
                failed = [e for _, errs in searched for e in errs]
                search_line = (
                    f"| {count} + {searchers} | {backend} | {len(times) / elapsed:,.1f}"
                    f" | {_time(percentile(times, 0.5))} | {_time(percentile(times, 0.99))}"
                    f" | {_time(times[-1])} | {len(failed)} |"
                )
                search_lines.append(search_line)
                print(search_line + (f"  first error: {failed[0]}" if failed else ""), flush=True)
            if backend == "postgresql":
                template.drop(target)
            elif corpus is not None:
                for old in folder.glob(Path(target).name + "*"):
                    old.unlink()
    if search_lines:
        print()
        print("| Writers + searchers | Backend | Searches/s | p50 | p99 | Max | Errors |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for line in search_lines:
            print(line)
    print()
    print(
        f"| Writers | Backend | Appends/s ({seconds:.0f} s) | p50 | p99 | Max | Appends per writer"
        " | Errors | Counts exact | Load after |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for line in lines:
        print(line)
    print()


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[100_000])
    parser.add_argument("--only", default=",".join(PARTS), help="hot,search,writers")
    parser.add_argument("--url", help="admin URL of an existing PostgreSQL server")
    parser.add_argument(
        "--leave-running", action="store_true", help="do not stop the cluster this run starts"
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where stores are kept")
    parser.add_argument("--rounds", type=int, default=400, help="hot-path rounds")
    parser.add_argument("--search-rounds", type=int, default=20)
    parser.add_argument("--search-only", default=None, help="routes whose name has this")
    parser.add_argument("--writers", default="8,32,64")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--searchers", type=int, default=0, help="searching beside the writers")
    parser.add_argument(
        "--writers-corpus",
        type=int,
        default=None,
        help="writers on a copy of the search corpus of this many messages (default: empty)",
    )
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    for part in parts:
        if part not in PARTS and part != "build":
            raise SystemExit(f"--only: unknown part {part!r} (one of {', '.join(PARTS)})")
    backends = [b for b in args.backends.split(",") if b]
    args.dir.mkdir(parents=True, exist_ok=True)
    url = args.url or start_cluster(args.dir / "pg", args.leave_running)
    print(f"{server_facts(url)}; SQLite {sqlite3.sqlite_version}; {os.cpu_count()} cores; {load()}")
    template = Template(url)
    if "build" in parts:
        for messages in args.messages:
            pg_corpus(url, sqlite_corpus(args.dir, messages), messages)
    if "hot" in parts:
        hot(args.dir, template, args.rounds, backends)
    if "search" in parts:
        for messages in args.messages:
            source = sqlite_corpus(args.dir, messages)
            targets: dict[str, Any] = {}
            if "sqlite" in backends:
                targets["sqlite"] = source
            if "postgresql" in backends:
                targets["postgresql"] = pg_corpus(url, source, messages)
            search(targets, messages, args.search_rounds, args.search_only)
    if "writers" in parts:
        counts = [int(n) for n in args.writers.split(",") if n]
        writers(
            args.dir, template, counts, args.seconds, backends, args.searchers,
            args.writers_corpus,
        )  # fmt: skip


if __name__ == "__main__":
    main()
