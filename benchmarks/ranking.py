"""Ranked search, exact against windowed, on SQLite and PostgreSQL (issue #37 point 3).

The corpus of ``benchmarks/search.py`` at ``--messages`` (default 200,000), built once
as an SQLite file and copied into a PostgreSQL database (``benchmarks/postgresql.py``'s
``sqlite_corpus`` and ``pg_corpus``, kept under ``--dir``). For each of that benchmark's
word queries (and ``the``, a word in most messages) a ranked first page of 20
(``search_messages(query, limit=20, time_budget=None)``, snippets and context) is
timed four ways per backend, interleaved round by round, medians in ms:

* ``exact``: the default, every hit ranked;
* ``window``: ``rank_window=`` the suggested value (``plan.RANK_WINDOW``, 20,000, on
  SQLite; ``pg_search.RANK_WINDOW``, 1,000, on PostgreSQL);
* ``plain``: the simplest correct SQL of the exact page on a plain connection: FTS5's
  ``MATCH ... ORDER BY rank`` (with ``snippet()``) on SQLite; on PostgreSQL every match
  ordered by ``hermes_bm25`` (migration 0011's plain-SQL form of the same BM25);
* ``plain N``: the simplest SQL of the windowed page (the newest N active matches,
  then the best 20 of them by the same rank).

Ratios: exact / window (what exactness costs), exact / plain and window / plain N
(ours against the simplest SQL). ``ts_rank`` is the simplest SQL on PostgreSQL
that ranks without BM25's statistics (another order), timed for scale. The last
columns: how many of the top 20 the two backends share, exact and windowed.

Run: python benchmarks/ranking.py [--messages 200000] [--rounds 5] [--dir PATH]
     [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from postgresql import load, pg_corpus, server_facts, sqlite_corpus, start_cluster
from search import QUERIES

from hermes_models import SessionDB
from hermes_models.search import plan
from hermes_models.search import postgres as pg_search
from hermes_models.search.query import parse

DEFAULT_DIR = Path("/tmp/hermes-rankbench")

#: The word queries: the benchmark's own, and a word most messages hold.
WORD_QUERIES = [q for name, (q, _) in QUERIES.items() if name.startswith("BM25")] + ["the"]

#: Each query's tsquery on the server, its phrase texts and prefix flags (as the
#: search writes them).
PG_TERMS: dict[str, tuple[str, list[str], list[bool]]] = {
    "checkpoint": ("phraseto_tsquery('simple', 'checkpoint')", ["checkpoint"], [False]),
    "asyncio timeout": (
        "(phraseto_tsquery('simple', 'asyncio') && phraseto_tsquery('simple', 'timeout'))",
        ["asyncio", "timeout"],
        [False, False],
    ),
    "migrat*": ("to_tsquery('simple', 'migrat:*')", ["migrat"], [True]),
    '"event loop" OR vacuum': (
        "(phraseto_tsquery('simple', 'event loop') || phraseto_tsquery('simple', 'vacuum'))",
        ["event loop", "vacuum"],
        [False, False],
    ),
    "the": ("phraseto_tsquery('simple', 'the')", ["the"], [False]),
}

SQLITE_EXACT = (
    "SELECT m.id, m.session_id, m.role, m.timestamp,"
    " snippet(messages_fts, 0, '>>>', '<<<', '...', 40)"
    " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH ? AND m.active = 1 ORDER BY rank LIMIT 20"
)
SQLITE_WINDOW = (
    "SELECT id, session_id, role, timestamp, snip FROM ("
    " SELECT m.id, m.session_id, m.role, m.timestamp, rank AS r,"
    " snippet(messages_fts, 0, '>>>', '<<<', '...', 40) AS snip"
    " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH ? AND m.active = 1 ORDER BY messages_fts.rowid DESC LIMIT ?)"
    " ORDER BY r LIMIT 20"
)
PG_RANK = "hermes_bm25(m.search_tsv, m.search_len, (SELECT hermes_bm25_terms(%s, %s)))"
PG_EXACT = (
    'SELECT m.id, m.session_id, m.role, m."timestamp", m.content FROM messages m'
    " WHERE m.search_tsv @@ {q} AND m.active = 1"
    ' ORDER BY {rank}, m."timestamp" DESC, m.id DESC LIMIT 20'
)
PG_WINDOW = (
    'WITH recent AS MATERIALIZED (SELECT m.id, m.search_tsv, m.search_len, m."timestamp"'
    " FROM messages m WHERE m.search_tsv @@ {q} AND m.active = 1"
    ' ORDER BY m."timestamp" DESC, m.id DESC LIMIT %s)'
    ' SELECT m.id, x.session_id, x.role, m."timestamp", x.content FROM recent m'
    " JOIN messages x ON x.id = m.id"
    ' ORDER BY {rank}, m."timestamp" DESC, m.id DESC LIMIT 20'
)
PG_TS_RANK = "-ts_rank(m.search_tsv, {q})"


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def medians(rounds: int, calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Median ms of each call, the calls rotating round by round (one warm-up round)."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        calls[name]()
    for n in range(rounds):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            times[name].append(timed(calls[name]) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def sqlite_calls(store: SessionDB, plain: sqlite3.Connection, query: str) -> dict[str, Any]:
    fts = parse(query).fts()
    window = plan.RANK_WINDOW
    return {
        "exact": lambda: store.search_messages(query, limit=20, time_budget=None),
        "window": lambda: store.search_messages(
            query, limit=20, time_budget=None, rank_window=window
        ),
        "plain": lambda: plain.execute(SQLITE_EXACT, [fts]).fetchall(),
        "plain N": lambda: plain.execute(SQLITE_WINDOW, [fts, window]).fetchall(),
    }


def pg_calls(store: SessionDB, plain: Any, query: str) -> dict[str, Any]:
    tsquery, texts, prefixes = PG_TERMS[query]
    window = pg_search.RANK_WINDOW
    exact = PG_EXACT.format(q=tsquery, rank=PG_RANK)
    windowed = PG_WINDOW.format(q=tsquery, rank=PG_RANK)
    ts_rank = PG_EXACT.format(q=tsquery, rank=PG_TS_RANK.format(q=tsquery))
    return {
        "exact": lambda: store.search_messages(query, limit=20, time_budget=None),
        "window": lambda: store.search_messages(
            query, limit=20, time_budget=None, rank_window=window
        ),
        "plain": lambda: plain.execute(exact, [texts, prefixes]).fetchall(),
        "plain N": lambda: plain.execute(windowed, [window, texts, prefixes]).fetchall(),
        "ts_rank": lambda: plain.execute(ts_rank).fetchall(),
    }


def ids(store: SessionDB, query: str, window: int | None) -> list[int]:
    found = store.search_messages(query, limit=20, time_budget=None, rank_window=window)
    return [hit["id"] for hit in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--url", help="admin URL of an existing PostgreSQL server")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    url = args.url or start_cluster(args.dir / "pg")
    source = sqlite_corpus(args.dir, args.messages)
    target = pg_corpus(url, source, args.messages)
    print(f"{server_facts(url)}; SQLite {sqlite3.sqlite_version}; {os.cpu_count()} cores")
    print(f"{args.messages:,} messages; medians of {args.rounds} rounds in ms; {load()}")
    header = (
        f"{'backend':<10} {'query':<24} {'exact':>8} {'window':>8} {'plain':>8} "
        f"{'plain N':>8} {'ts_rank':>8} {'ex/win':>7} {'ex/pl':>6} {'win/plN':>7}"
    )
    print(header)
    print("-" * len(header))
    lite = SessionDB(source, read_only=True)
    server = SessionDB(target, read_only=True)
    plain_lite = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    plain_pg = psycopg.connect(target, autocommit=True)
    overlaps: list[str] = []
    for query in WORD_QUERIES:
        for backend, calls in (
            ("sqlite", sqlite_calls(lite, plain_lite, query)),
            ("postgresql", pg_calls(server, plain_pg, query)),
        ):
            m = medians(args.rounds, calls)
            ts_rank = f"{m['ts_rank']:8.1f}" if "ts_rank" in m else f"{'':>8}"
            print(
                f"{backend:<10} {query:<24} {m['exact']:8.1f} {m['window']:8.1f} "
                f"{m['plain']:8.1f} {m['plain N']:8.1f} {ts_rank} "
                f"{m['exact'] / m['window']:7.2f} {m['exact'] / m['plain']:6.2f} "
                f"{m['window'] / m['plain N']:7.2f}",
                flush=True,
            )
        exact = len(set(ids(lite, query, None)) & set(ids(server, query, None)))
        windowed = len(
            set(ids(lite, query, plan.RANK_WINDOW)) & set(ids(server, query, pg_search.RANK_WINDOW))
        )
        overlaps.append(f"{query:<24} exact {exact:>2} of 20, windowed {windowed:>2} of 20")
    print()
    print("top 20 shared by SQLite and PostgreSQL:")
    print("\n".join(overlaps))
    for closing in (lite, server, plain_lite, plain_pg):
        closing.close()


if __name__ == "__main__":
    main()
