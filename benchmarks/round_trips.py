"""Each SessionDB call on PostgreSQL against the simplest psycopg SQL for the same answer,
over loopback and with 1 ms of added latency per round trip.

On a fresh server store (2,000 sessions, five compression chains of four links, one
session of 1,000 messages, a tenth of the messages in Chinese), each call an agent or
the gateway makes runs interleaved with the simplest correct psycopg code for the same
answer on a plain connection to the same database: reads in autocommit, one statement
where one does it; writes as ``BEGIN``, the statements a careful person would write,
``COMMIT``. The answers are compared before timing (equal, or the same hit ids in the
same order for searches, whose snippets the plain side does not build). Both sides run
twice: straight to the server over 127.0.0.1, and through ``latency_proxy.py``, which
holds every chunk half the added latency in each direction (``tc netem`` is not
available on the sandboxed kernel this was written on). Each side's statements are
counted (psycopg's ``BEGIN``/``COMMIT`` included, as ``tests/statement_count.py``
counts them): at 1 ms a round trip, the count is most of the time.

It is a script of its own rather than a part of ``postgresql.py``: one row per call
and two latencies, a table of its own; it reuses that script's cluster, template
database and load figure.

Run: python benchmarks/round_trips.py [--rounds 200] [--latency-ms 1.0] [--url postgresql://...]
     [--dir /tmp/hermes-pgbench] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from hot_paths import decoded_rows, plain_conversation
from latency_proxy import LatencyProxy, select_one_ms
from postgresql import (
    DEFAULT_DIR,
    PG_JSON,
    Template,
    load,
    pg_corpus,
    server_facts,
    sqlite_corpus,
    start_cluster,
)
from postgresql import Plain as HotPlain

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from statement_count import Counted, _psycopg

from hermes_models import SessionDB

NOW = time.time()
SESSIONS = 2000
CHAINS = 5
CHAIN_LINKS = 4


# -- the store ----------------------------------------------------------------------------------


def build(url: str) -> None:
    """Fill a fresh database (plain inserts, one transaction), then ANALYZE."""
    sessions: list[tuple[Any, ...]] = []
    messages: list[tuple[Any, ...]] = []

    def say(sid: str, n: int, at: float, cjk: bool, docker: bool) -> None:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            if cjk:
                text = f"数据库的连接池 {sid} 第{i}行 事件循环"
            elif docker:
                text = f"the docker build of {sid} failed at step {i}"
            else:
                text = f"line {i} of {sid}: asyncio timeout in the event loop"
            messages.append((sid, role, text, at + i))

    for c in range(CHAINS):  # old: the listing's first page holds no compressed root
        for link in range(CHAIN_LINKS):
            sid = f"chain-{c}-{link}"
            last = link == CHAIN_LINKS - 1
            at = NOW - 90_000 + c * 1000 + link * 100
            sessions.append(
                (sid, "cli", f"chain-{c}-{link - 1}" if link else None, at,
                 None if last else at + 50, None if last else "compression",
                 f"chain {c}" if link == 0 else None)
            )  # fmt: skip
            say(sid, 4, at, cjk=False, docker=True)
    for n in range(SESSIONS):
        sid = f"s-{n:04d}"
        at = NOW - 80_000 + n * 30
        title = f"project {n}" if n % 4 == 0 else None
        ended = at + 20 if n % 3 == 0 else None
        sessions.append((sid, "cli", None, at, ended, "user_exit" if ended else None, title))
        say(sid, 2, at, cjk=n % 10 == 0, docker=n % 10 == 1)
    sessions.append(("s-0008b", "cli", None, NOW - 100, None, None, "project 8 #2"))
    sessions.append(("big", "cli", None, NOW - 50_000, None, None, "the long one"))
    for i in range(1000):
        say_role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i} of a long session" if i % 10 else f"第{i}回 数据 docker"
        messages.append(("big", say_role, text, NOW - 50_000 + i))
    counts: dict[str, int] = {}
    for sid, *_ in messages:
        counts[sid] = counts.get(sid, 0) + 1
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at,"
                " end_reason, title, message_count) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [(*row, counts.get(row[0], 0)) for row in sessions],
            )
            cur.executemany(
                'INSERT INTO messages (session_id, role, content, "timestamp")'
                " VALUES (%s, %s, %s, %s)",
                messages,
            )
            for name in ("ours", "plain"):
                cur.execute(
                    "INSERT INTO sessions (id, source, started_at) VALUES (%s, 'cli', %s)",
                    (f"{name}-target", NOW - 10),
                )
            cur.execute("INSERT INTO state_meta (key, value) VALUES ('bench_key', '1')")
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) sessions, messages")


# -- the plain side -----------------------------------------------------------------------------


class QmarkConn:
    """A psycopg connection taking ``?`` placeholders (for ``hot_paths``' plain readers)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s"), params)


MESSAGE_COLUMNS = (
    "id, session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp,"
    " token_count, finish_reason, reasoning, reasoning_content, reasoning_details,"
    " codex_reasoning_items, codex_message_items, platform_message_id, observed, active"
)
TIP_SQL = (
    "WITH RECURSIVE walk(id, end_reason, ended_at, hops) AS ("
    " SELECT id, end_reason, ended_at, 0 FROM sessions WHERE id = %s"
    " UNION ALL SELECT c.id, c.end_reason, c.ended_at, w.hops + 1 FROM walk w"
    " CROSS JOIN LATERAL (SELECT s.id, s.end_reason, s.ended_at FROM sessions s"
    " WHERE s.parent_session_id = w.id AND s.started_at >= w.ended_at"
    " ORDER BY s.started_at DESC LIMIT 1) c WHERE w.end_reason = 'compression')"
    " SELECT id FROM walk ORDER BY hops DESC LIMIT 1"
)
RESOLVE_TITLE_SQL = (
    "SELECT id FROM sessions WHERE title = %s OR title LIKE %s ESCAPE '\\'"
    " ORDER BY title = %s, started_at DESC LIMIT 1"
)
HIT_SQL = (
    "WITH t AS MATERIALIZED (SELECT hermes_bm25_terms(%s, %s) AS terms)"
    ' SELECT m.id, m.session_id, m."timestamp", p.role, p.content, n.role, n.content'
    " FROM messages m JOIN sessions s ON s.id = m.session_id CROSS JOIN t"
    " LEFT JOIN LATERAL (SELECT x.role, x.content FROM messages x WHERE x.session_id ="
    ' m.session_id AND (x."timestamp", x.id) < (m."timestamp", m.id) AND x.active = 1'
    ' ORDER BY x."timestamp" DESC, x.id DESC LIMIT 1) p ON true'
    " LEFT JOIN LATERAL (SELECT x.role, x.content FROM messages x WHERE x.session_id ="
    ' m.session_id AND (x."timestamp", x.id) > (m."timestamp", m.id) AND x.active = 1'
    ' ORDER BY x."timestamp", x.id LIMIT 1) n ON true'
    " WHERE {where} AND m.active = 1 ORDER BY {order} LIMIT 20"
)
WORD = "m.search_tsv @@ phraseto_tsquery('simple', %s)"
CJK = "m.content LIKE %s"
NEWEST = 'm."timestamp" DESC, m.id DESC'
BM25 = "hermes_bm25(m.search_tsv, m.search_len, t.terms), m.id"
#: Sessions with hits, each counted for its lineage root (climbing compression links
#: and subagent runs), best root first (best rank, then latest hit): root and hits.
SEARCH_SESSIONS_SQL = (
    "WITH RECURSIVE t AS MATERIALIZED (SELECT hermes_bm25_terms(%s, %s) AS terms),"
    " hits AS (SELECT m.session_id, hermes_bm25(m.search_tsv, m.search_len, t.terms) AS rank,"
    ' m."timestamp" FROM messages m CROSS JOIN t WHERE ' + WORD + " AND m.active = 1),"
    " up(start, id, depth) AS (SELECT DISTINCT session_id, session_id, 0 FROM hits"
    " UNION ALL SELECT u.start, p.id, u.depth + 1 FROM up u"
    " JOIN sessions c ON c.id = u.id JOIN sessions p ON p.id = c.parent_session_id"
    " WHERE p.end_reason = 'compression' OR "
    + PG_JSON.format("_delegate_from").replace("s.", "c.")
    + " IS NOT NULL),"
    " roots AS (SELECT DISTINCT ON (start) start, id AS root FROM up ORDER BY start, depth DESC)"
    " SELECT r.root, count(*) FROM hits h JOIN roots r ON r.start = h.session_id"
    ' GROUP BY r.root ORDER BY min(h.rank), max(h."timestamp") DESC, r.root LIMIT 10'
)


class Plain(HotPlain):
    """The simplest correct psycopg code for each call (autocommit connection): the
    readers and the listing statement of ``postgresql.py``'s, and the writes here."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn, postgres=True)
        self.qmark = QmarkConn(conn)

    def write(self, *statements: tuple[str, tuple[Any, ...]]) -> Any:
        """``BEGIN``, the statements, ``COMMIT``; the first statement's first row."""
        self.conn.execute("BEGIN")
        try:
            first = None
            for n, (sql, params) in enumerate(statements):
                cursor = self.conn.execute(sql, params)
                if n == 0 and cursor.description is not None:
                    first = cursor.fetchone()
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return first

    def append(self, sid: str, role: str, content: str) -> int:
        row = self.write(
            ('INSERT INTO messages (session_id, role, content, "timestamp") VALUES'
             " (%s, %s, %s, %s) RETURNING id", (sid, role, content, time.time())),
            ("UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1"
             " WHERE id = %s", (sid,)),
        )  # fmt: skip
        return int(row[0])

    def create_session(self, sid: str, source: str) -> str:
        self.write(
            ("INSERT INTO sessions (id, source, started_at) VALUES (%s, %s, %s)"
             " ON CONFLICT (id) DO NOTHING", (sid, source, time.time())),
        )  # fmt: skip
        return sid

    def end_session(self, sid: str, reason: str) -> None:
        self.write(
            ("UPDATE sessions SET ended_at = %s, end_reason = %s"
             " WHERE id = %s AND ended_at IS NULL", (time.time(), reason, sid)),
        )  # fmt: skip

    def update_token_counts(self, sid: str, tokens_in: int, tokens_out: int, model: str) -> None:
        """One upsert: an unknown session is created, as ours creates it."""
        self.write(
            ("INSERT INTO sessions (id, source, started_at, input_tokens, output_tokens, model,"
             " estimated_cost_usd) VALUES (%s, 'unknown', %s, %s, %s, %s, 0)"
             " ON CONFLICT (id) DO UPDATE SET"
             " input_tokens = COALESCE(sessions.input_tokens, 0) + excluded.input_tokens,"
             " output_tokens = COALESCE(sessions.output_tokens, 0) + excluded.output_tokens,"
             " model = COALESCE(sessions.model, excluded.model),"
             " estimated_cost_usd = COALESCE(sessions.estimated_cost_usd, 0)",
             (sid, time.time(), tokens_in, tokens_out, model)),
        )  # fmt: skip

    def set_title(self, sid: str, title: str) -> None:  # the unique index refuses a taken one
        self.write(("UPDATE sessions SET title = %s WHERE id = %s", (title, sid)))

    def set_meta(self, key: str, value: str) -> None:
        self.write(
            ("INSERT INTO state_meta (key, value) VALUES (%s, %s)"
             " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value)),
        )  # fmt: skip

    def delete_session(self, sid: str) -> None:
        self.write(
            ("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = %s", (sid,)),
            ("DELETE FROM messages WHERE session_id = %s", (sid,)),
            ("DELETE FROM sessions WHERE id = %s", (sid,)),
        )  # fmt: skip

    def get_messages(self, sid: str) -> list[dict[str, Any]]:
        sql = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND active = 1"
        return decoded_rows(self.conn.execute(sql + " ORDER BY id", (sid,)))

    def resolve_by_title(self, title: str) -> Any:
        escaped = title.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return self.one(RESOLVE_TITLE_SQL, (title, f"{escaped} #%", title))

    def list_page(self) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(self.listing)
        names = [column[0] for column in cursor.description]
        rows = []
        for values in cursor.fetchall():
            row = dict(zip(names, values))
            raw = row["_preview_raw"].strip()
            preview = raw if len(raw) <= 60 else raw[:60] + "..."
            rows.append((row["id"], preview, row["last_active"], row["message_count"]))
        return rows

    def hits(self, where: str, order: str, params: tuple[Any, ...], words: list[str]) -> list[int]:
        """The page's hit ids (with the messages around each); ``words`` ranked."""
        sql = HIT_SQL.format(where=where, order=order)
        ranked = (words, [False] * len(words))
        return [row[0] for row in self.conn.execute(sql, ranked + params).fetchall()]

    def search_sessions(self, word: str) -> list[tuple[str, int]]:
        rows = self.conn.execute(SEARCH_SESSIONS_SQL, ([word], [False], word)).fetchall()
        return [(r[0], r[1]) for r in rows]


# -- the calls ----------------------------------------------------------------------------------

Call = Callable[[], Any]


def calls(store: SessionDB, plain: Plain, tag: str) -> dict[str, tuple[Call, Call, Any]]:
    """name -> (ours, plain, how to compare: None for equal answers, else a function
    mapping ours' answer to plain's shape)."""
    n = itertools.count()
    pool_ours = iter(f"end-{tag}-ours-{i}" for i in range(10**6))
    pool_plain = iter(f"end-{tag}-plain-{i}" for i in range(10**6))

    def hit_ids(hits: list[dict[str, Any]]) -> list[int]:
        return [hit["id"] for hit in hits]

    return {
        "append_message": (
            lambda: store.append_message("ours-target", "user", f"our note {next(n)} on docker"),
            lambda: plain.append("plain-target", "user", f"plain note {next(n)} on docker"),
            "write",
        ),
        "create_session": (
            lambda: store.create_session(f"new-{tag}-ours-{next(n)}", "cli"),
            lambda: plain.create_session(f"new-{tag}-plain-{next(n)}", "cli"),
            "write",
        ),
        "end_session": (
            lambda: store.end_session(next(pool_ours), "user_exit"),
            lambda: plain.end_session(next(pool_plain), "user_exit"),
            "write",
        ),
        "update_token_counts": (
            lambda: store.update_token_counts("ours-target", 10, 20, model="m"),
            lambda: plain.update_token_counts("plain-target", 10, 20, "m"),
            "write",
        ),
        "set_session_title": (
            lambda: store.set_session_title("ours-target", f"ours {tag} {next(n)}"),
            lambda: plain.set_title("plain-target", f"plain {tag} {next(n)}"),
            "write",
        ),
        "set_meta": (
            lambda: store.set_meta("bench_key", str(next(n))),
            lambda: plain.set_meta("bench_key", str(next(n))),
            "write",
        ),
        "get_session": (
            lambda: store.get_session("s-0400"),
            lambda: plain.row("SELECT * FROM sessions WHERE id = %s", ("s-0400",)),
            None,
        ),
        "get_messages (1,000)": (
            lambda: store.get_messages("big"),
            lambda: plain.get_messages("big"),
            None,
        ),
        "get_messages_as_conversation (1,000)": (
            lambda: store.get_messages_as_conversation("big"),
            lambda: plain_conversation(plain.qmark, "big"),  # type: ignore[arg-type]
            None,
        ),
        "get_meta": (
            lambda: store.get_meta("bench_key"),
            lambda: plain.one("SELECT value FROM state_meta WHERE key = %s", ("bench_key",)),
            None,
        ),
        "get_compression_tip": (
            lambda: store.get_compression_tip("chain-2-0"),
            lambda: plain.one(TIP_SQL, ("chain-2-0",)),
            None,
        ),
        "resolve_session_by_title": (
            lambda: store.resolve_session_by_title("project 8"),
            lambda: plain.resolve_by_title("project 8"),
            None,
        ),
        "get_session_by_title": (
            lambda: store.get_session_by_title("project 40"),
            lambda: plain.row("SELECT * FROM sessions WHERE title = %s", ("project 40",)),
            None,
        ),
        "list_sessions_rich (first page)": (
            lambda: store.list_sessions_rich(),
            plain.list_page,
            lambda rows: [
                (r["id"], r["preview"], r["last_active"], r["message_count"]) for r in rows
            ],
        ),
        "session_count": (
            store.session_count,
            lambda: plain.one("SELECT count(*) FROM sessions WHERE archived = 0"),
            None,
        ),
        "message_count": (
            store.message_count,
            lambda: plain.one("SELECT count(*) FROM messages"),
            None,
        ),
        "search word, newest first": (
            lambda: store.search_messages("docker", sort="newest"),
            lambda: plain.hits(WORD, NEWEST, ("docker",), []),
            hit_ids,
        ),
        "search word, ranked": (
            lambda: store.search_messages("docker"),
            lambda: plain.hits(WORD, BM25, ("docker",), ["docker"]),
            hit_ids,
        ),
        "search CJK 2 chars": (
            lambda: store.search_messages("数据"),
            lambda: plain.hits(CJK, NEWEST, ("%数据%",), []),
            hit_ids,
        ),
        "search CJK 1 char, rare": (
            lambda: store.search_messages("回"),
            lambda: plain.hits(CJK, NEWEST, ("%回%",), []),
            hit_ids,
        ),
        "search mixed word + CJK": (
            lambda: store.search_messages("docker 数据"),
            lambda: plain.hits(f"{WORD} AND {CJK}", BM25, ("docker", "%数据%"), ["docker"]),
            hit_ids,
        ),
        "search_sessions('docker')": (
            lambda: store.search_sessions("docker"),
            lambda: plain.search_sessions("docker"),
            lambda rows: [(r["id"], r["hits"]) for r in rows],
        ),
        "delete_session": (
            lambda: store.delete_session(next(pool_ours)),
            lambda: plain.delete_session(next(pool_plain)),
            "write",
        ),
    }


def count_statements(call: Call) -> int:
    counted = Counted()
    with _psycopg(counted):
        call()
    return counted.count


def prepare_pools(url: str, tag: str, rounds: int) -> None:
    """Sessions for end_session and delete_session to use up (each with two messages)."""
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for side in ("ours", "plain"):
            ids = [f"end-{tag}-{side}-{i}" for i in range(2 * rounds + 20)]
            cur.executemany(
                "INSERT INTO sessions (id, source, started_at, message_count)"
                " VALUES (%s, 'cli', %s, 2)",
                [(sid, NOW - 200_000) for sid in ids],
            )
            cur.executemany(
                'INSERT INTO messages (session_id, role, content, "timestamp")'
                " VALUES (%s, 'user', 'to go', %s)",
                [(sid, NOW - 200_000 + k) for sid in ids for k in range(2)],
            )


def corpus_calls(
    store: SessionDB, plain: Plain, lite: SessionDB, tag: str
) -> dict[str, tuple[Call, Call, Any, Call]]:
    """The calls of the issue's table on a search corpus: name -> (ours, plain, how to
    compare, ours on the SQLite file)."""
    n = itertools.count()

    def hit_ids(hits: list[dict[str, Any]]) -> list[int]:
        return [hit["id"] for hit in hits]

    def search(query: str, sort: str | None = None) -> tuple[Call, Call]:
        return (
            lambda: store.search_messages(query, sort=sort),
            lambda: lite.search_messages(query, sort=sort),
        )

    word_newest = search("checkpoint", "newest")
    cjk_common = search("数据")
    cjk_rare = search("国我")
    mixed = search("checkpoint 事件循环")
    return {
        "append_message": (
            lambda: store.append_message("rt-ours", "user", f"our note {next(n)} on docker"),
            lambda: plain.append("rt-plain", "user", f"plain note {next(n)} on docker"),
            "write",
            lambda: lite.append_message("rt-ours", "user", f"our note {next(n)} on docker"),
        ),
        "get_compression_tip": (
            lambda: store.get_compression_tip("rt-chain-0"),
            lambda: plain.one(TIP_SQL, ("rt-chain-0",)),
            None,
            lambda: lite.get_compression_tip("rt-chain-0"),
        ),
        "get_session": (
            lambda: store.get_session("s000400"),
            lambda: plain.row("SELECT * FROM sessions WHERE id = %s", ("s000400",)),
            None,
            lambda: lite.get_session("s000400"),
        ),
        "search word, newest first (`checkpoint`)": (
            word_newest[0],
            lambda: plain.hits(WORD, NEWEST, ("checkpoint",), []),
            hit_ids,
            word_newest[1],
        ),
        "search CJK 2 chars, common (`数据`)": (
            cjk_common[0],
            lambda: plain.hits(CJK, NEWEST, ("%数据%",), []),
            hit_ids,
            cjk_common[1],
        ),
        "search CJK 2 chars, rare (`国我`)": (
            cjk_rare[0],
            lambda: plain.hits(CJK, NEWEST, ("%国我%",), []),
            hit_ids,
            cjk_rare[1],
        ),
        "search mixed (`checkpoint 事件循环`, no hit)": (
            mixed[0],
            lambda: plain.hits(
                f"{WORD} AND {CJK}", BM25, ("checkpoint", "%事件循环%"), ["checkpoint"]
            ),
            hit_ids,
            mixed[1],
        ),
        "search_sessions('checkpoint')": (
            lambda: store.search_sessions("checkpoint"),
            lambda: plain.search_sessions("checkpoint"),
            lambda rows: [(r["id"], r["hits"]) for r in rows],
            lambda: lite.search_sessions("checkpoint"),
        ),
    }


def corpus_ready(url: str, path: Path) -> None:
    """The sessions the corpus calls use, on the server and in the file (once)."""
    for target in (url, str(path)):
        with contextlib.closing(SessionDB(target)) as store:
            if store.get_session("rt-chain-0") is not None:
                continue
            for name in ("rt-ours", "rt-plain"):
                store.create_session(name, "cli")
            at = 1_600_000_000.0
            for link in range(5):
                parent = f"rt-chain-{link - 1}" if link else None
                store.create_session(
                    f"rt-chain-{link}", "cli", parent_session_id=parent, started_at=at + link * 100
                )
                if link < 4:
                    store.end_session(f"rt-chain-{link}", "compression")
    with psycopg.connect(url, autocommit=True) as conn:  # ended_at: the time of the call
        conn.execute(
            "UPDATE sessions SET ended_at = started_at + 50 WHERE id LIKE 'rt-chain-%'"
            " AND end_reason = 'compression'"
        )
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "UPDATE sessions SET ended_at = started_at + 50 WHERE id LIKE 'rt-chain-%'"
            " AND end_reason = 'compression'"
        )


Result = dict[str, tuple[float, float, int, int, float | None]]


def timed_rounds(sides: list[Call], rounds: int) -> list[float]:
    """Median seconds of each side, the sides interleaved call by call, rotating."""
    times: list[list[float]] = [[] for _ in sides]
    for r in range(rounds):
        order = list(range(len(sides)))
        order = order[r % len(order) :] + order[: r % len(order)]
        for i in order:
            started = time.perf_counter()
            sides[i]()
            times[i].append(time.perf_counter() - started)
    return [statistics.median(t) for t in times]


def measure_calls(
    table: dict[str, tuple[Any, ...]], tag: str, rounds: int, only: set[str] | None
) -> Result:
    """name -> (ours, plain, ours' statements, plain's statements, SQLite or None)."""
    out: Result = {}
    for name, (ours, theirs, compare, *lite) in table.items():
        if only and not any(word in name for word in only):
            continue
        if compare != "write":
            mine = ours()
            shown = mine if compare is None else compare(mine)
            other = theirs()
            if shown != other:
                print(
                    f"  ! {name}: answers differ\n    ours  {shown!r:.300}"
                    f"\n    plain {other!r:.300}"
                )
        counts = (count_statements(ours), count_statements(theirs))
        started = time.perf_counter()
        ours(), theirs()
        n = rounds if time.perf_counter() - started < 0.2 else min(rounds, max(5, rounds // 4))
        medians = timed_rounds([ours, theirs, *lite], n)
        o, p = medians[0], medians[1]
        on_file = medians[2] if lite else None
        out[name] = (o, p, *counts, on_file)
        also = "" if on_file is None else f"  SQLite {on_file * 1e3:8.3f} ms"
        print(
            f"  {tag:<8} {name:<44} ours {o * 1e3:8.3f} ms  plain {p * 1e3:8.3f} ms"
            f"  ratio {o / p:5.2f}{also}  statements {counts[0]}/{counts[1]}  ({load()})",
            flush=True,
        )
    return out


def measure(url: str, tag: str, rounds: int, only: set[str] | None) -> Result:
    """Every call of :func:`calls` on the store at ``url``."""
    prepare_pools(url, tag, rounds)
    with contextlib.closing(SessionDB(url)) as store, psycopg.connect(url, autocommit=True) as conn:
        out = measure_calls(calls(store, Plain(conn), tag), tag, rounds, only)
        # The writes' answers: each side's target session after the same calls.
        columns = ("message_count", "input_tokens", "output_tokens", "model", "estimated_cost_usd")
        mine, theirs = store.get_session("ours-target"), store.get_session("plain-target")
        assert mine is not None and theirs is not None
        same = [mine[c] for c in columns] == [theirs[c] for c in columns]
        print(f"  {tag}: the write targets agree on {', '.join(columns)}: {same}")
        return out


def measure_corpus(url: str, path: Path, tag: str, rounds: int, only: set[str] | None) -> Result:
    """Every call of :func:`corpus_calls` on the corpus at ``url`` and ``path``."""
    with (
        contextlib.closing(SessionDB(url)) as store,
        contextlib.closing(SessionDB(path)) as lite,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        return measure_calls(corpus_calls(store, Plain(conn), lite, tag), tag, rounds, only)


def proxy_setting(url: str, latency: float) -> float:
    """The delay to set the proxy to so that a round trip costs ``latency`` more: the
    proxy's own cost (its threads' wake-ups) comes on top of the delay it is set to."""
    with LatencyProxy(url, latency) as first:
        direct, through = select_one_ms(url), select_one_ms(first.url(url))
    return max(0.0, latency - (through - direct - latency * 1e3) / 1e3)


def both_latencies(
    url: str, latency_ms: float, run: Callable[[str, str], Result]
) -> tuple[Result, Result]:
    """``run(url, tag)`` over loopback, then through the proxy."""
    setting = proxy_setting(url, latency_ms / 1e3)
    with LatencyProxy(url, setting) as proxy:
        direct, through = select_one_ms(url), select_one_ms(proxy.url(url))
        print(
            f"SELECT 1: direct {direct:.3f} ms, through the proxy (set to {setting * 1e3:.3f} ms)"
            f" {through:.3f} ms: +{through - direct:.3f} ms a round trip ({load()})",
            flush=True,
        )
        loopback = run(url, "loopback")
        added = run(proxy.url(url), "proxy")
        after = select_one_ms(proxy.url(url)) - select_one_ms(url)
        print(f"SELECT 1 after: +{after:.3f} ms a round trip through the proxy ({load()})")
    return loopback, added


def print_table(loopback: Result, added: Result, latency_ms: float) -> None:
    lite = any(row[4] is not None for row in loopback.values())
    more = " | SQLite (file) |" if lite else " |"
    print()
    print(
        f"| Call | loopback ours | plain | ratio | +{latency_ms:g} ms ours | plain | ratio"
        " | statements ours / plain" + more
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if lite else ""))
    for name, (o, p, so, sp, on_file) in loopback.items():
        po, pp, *_ = added.get(name, (float("nan"),) * 5)
        tail = f" {_ms(on_file)} |" if on_file is not None else ""
        print(
            f"| `{name}` | {_ms(o)} | {_ms(p)} | {o / p:.2f} | {_ms(po)} | {_ms(pp)}"
            f" | {po / pp:.2f} | {so} / {sp} |" + tail
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="admin URL of an existing PostgreSQL server")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--only", default="", help="calls whose name holds one of these")
    parser.add_argument(
        "--corpus",
        type=int,
        nargs="*",
        default=None,
        help="the issue's table on the search corpora of these sizes (postgresql.py builds"
        " them) instead of the calls on a fresh store",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    only = {w for w in args.only.split(",") if w} or None
    url = args.url or start_cluster(args.dir / "pg")
    print(f"{server_facts(url)}; SQLite {sqlite3.sqlite_version}; {load()}")
    if args.corpus:
        for messages in args.corpus:
            path = sqlite_corpus(args.dir, messages)
            target = pg_corpus(url, path, messages)
            corpus_ready(target, path)
            print(f"corpus of {messages:,} messages ({load()})")
            loopback, added = both_latencies(
                target,
                args.latency_ms,
                lambda u, tag, at=path: measure_corpus(u, at, tag, args.rounds, only),
            )
            print_table(loopback, added, args.latency_ms)
        return
    template = Template(url)
    target = template.fresh("round_trips")
    build(target)
    loopback, added = both_latencies(
        target,
        args.latency_ms,
        # With added latency a quarter of the rounds (at least one): each call is slower.
        lambda u, tag: measure(u, tag, args.rounds if tag == "loopback" else
                               max(1, args.rounds // 4), only),
    )  # fmt: skip
    template.drop(target)
    print_table(loopback, added, args.latency_ms)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
