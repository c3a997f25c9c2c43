"""The worst searches on a 500,000-message store: hermes_models against plain sqlite3.

The store is the corpus of ``benchmarks/search.py`` (English, Chinese,
Japanese, Korean; 2 % JSON content, 2 % soft-deleted), built once into
``--db`` (default under /tmp, never in the repository) and reused. Each
query has up to 64 terms and is built to be expensive: many 1-2 character
CJK terms (the LIKE route), many common words or prefixes OR-ed together
(every message ranked by BM25), long NOT lists, mixed routes, duplicates.

For each query ``search_messages`` (first page of 20, no time budget) and
``search_sessions`` are timed, and so is the simplest correct plain SQL for
the same task on a second connection: one ``MATCH`` ordered by rank when
every term goes to one index, otherwise one ``SELECT`` over ``messages``
whose ``WHERE`` has a ``LIKE`` (or an index lookup) per term, newest first.
Both searches are timed as called with ``rank_window=plan.RANK_WINDOW``
("messages", "sessions": only the newest hits of a query with many ranked)
and as called by default ("msgs all", "sess all": every hit ranked). For a
query of words alone, "plain N" is the simplest SQL that ranks only the
newest hits as the windowed search does (the newest ``RANK_WINDOW`` active
matches in rowid order, then the best 20 of them by rank); the ratio of the
windowed search is against it there. All of them alternate round by round;
medians are printed, then the slowest round of each windowed search, then
the worst medians. A plain run slower than 5 s is timed once.

``--random N`` times instead N random queries of each of four shapes (a term
and a NOT list, an OR list, an AND list, a mix of the three) and each size
(2, 8, 32, 64 terms), terms drawn from common words, two-letter prefixes and
CJK of one to three characters: each ``search_messages`` and
``search_sessions`` as a user runs them (first page, the default time budget),
once; it prints how many took over 1 s, and the slowest.

Run: python benchmarks/search_worst.py [--db PATH] [--messages N] [--rounds N]
     [--random N]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search import HAN, HANGUL, KANA, WORDS, build

from hermes_models import SessionDB
from hermes_models.search import plan
from hermes_models.search.query import LIKE, TRIGRAM, parse
from hermes_models.search.query import WORDS as WORD_ROUTE

DEFAULT_DB = Path("/tmp/hermes-search-worst/state.db")


def queries() -> dict[str, str]:
    """Named worst-case queries (each at most 64 terms)."""
    rng = random.Random(11)
    two = ["".join(rng.choice(HAN) for _ in range(2)) for _ in range(64)]
    three = ["".join(rng.choice(HAN) for _ in range(3)) for _ in range(64)]
    return {
        "1 common word": "the",
        "1 two-char CJK": "数据",
        "64 two-char CJK, OR": " OR ".join(two),
        "64 two-char CJK, AND": " ".join(two),
        "64 one-char CJK, OR": " OR ".join(HAN[:64]),
        "64 kana/hangul one-char, OR": " OR ".join(KANA[:32] + HANGUL[:32]),
        "2-char CJK NOT 63 2-char": "数据 " + " ".join("NOT " + t for t in two[:63]),
        "word NOT 63 words": "the " + " ".join("NOT " + w for w in WORDS[1:64]),
        "64 common words, OR": " OR ".join(WORDS[:64]),
        "64 rarer words, OR": " OR ".join(WORDS[64:128]),
        "64 common words, AND": " ".join(WORDS[:64]),
        "64 prefixes, OR": " OR ".join(w[:2] + "*" for w in WORDS[:64]),
        "t* OR t* ... (64 times)": " OR ".join(["t*"] * 64),
        "64 three-char CJK, OR": " OR ".join(three),
        "32 (word AND 2-char CJK), OR": " OR ".join(f"{w} {t}" for w, t in zip(WORDS, two[:32])),
        "32 words OR 32 two-char CJK": " OR ".join([*WORDS[:32], *two[:32]]),
    }


SHAPES: dict[str, Callable[[Callable[[], str], random.Random, int], str]] = {
    "NOT list": lambda term, rng, n: " NOT ".join(term() for _ in range(n)),
    "OR": lambda term, rng, n: " OR ".join(term() for _ in range(n)),
    "AND": lambda term, rng, n: " ".join(term() for _ in range(n)),
    "mixed": lambda term, rng, n: " ".join(
        rng.choice(["", "OR ", "NOT "]) * bool(i) + term() for i in range(n)
    ),
}


def random_queries(per_size: int, seed: int = 5) -> list[tuple[str, int, str]]:
    """``(shape, size, text)`` of ``per_size`` random queries of each shape and size."""
    rng = random.Random(seed)

    def term() -> str:
        r = rng.random()
        if r < 0.3:
            return rng.choice(WORDS[:200])
        if r < 0.5:
            return rng.choice(HAN[:200])
        if r < 0.7:
            return "".join(rng.choice(HAN[:300]) for _ in range(2))
        if r < 0.8:
            return "".join(rng.choice(HAN) for _ in range(3))
        if r < 0.9:
            return rng.choice(KANA + HANGUL)
        return rng.choice(WORDS[:100])[:2] + "*"

    return [
        (shape, size, make(term, rng, size))
        for shape, make in SHAPES.items()
        for size in (2, 8, 32, 64)
        for _ in range(per_size)
    ]


def run_random(store: SessionDB, per_size: int) -> None:
    """Each random query once through both searches, as a user runs them."""
    timings: list[tuple[float, str, str]] = []
    for shape, size, text in random_queries(per_size):
        for kind, search in (
            ("messages", store.search_messages),
            ("sessions", store.search_sessions),
        ):
            seconds = timed(lambda search=search, text=text: search(text))  # type: ignore[misc]
            timings.append((seconds, kind, f"{shape} {size}: {text[:70]}"))
    for kind in ("messages", "sessions"):
        mine = sorted((t for t in timings if t[1] == kind), reverse=True)
        over = sum(seconds > 1 for seconds, _, _ in mine)
        print(
            f"search_{kind}: {len(mine)} queries, {over} over 1 s, "
            f"median {statistics.median(s for s, _, _ in mine) * 1e3:.0f} ms"
        )
        for seconds, _, name in mine[:5]:
            print(f"  {seconds:6.2f} s  {name}")


def _term_sql(route: str, single: bool) -> str:
    if route == LIKE:
        return "(m.content LIKE ? OR m.tool_name LIKE ? OR m.tool_calls LIKE ?)"
    table = "messages_fts_trigram" if route == TRIGRAM else "messages_fts"
    return f"m.id IN (SELECT rowid FROM {table} WHERE {table} MATCH ?)"


def plain_search(conn: sqlite3.Connection, text: str) -> Callable[[], Any]:
    """The simplest correct SQL for the query, as a callable returning the first 20 ids."""
    parsed = parse(text)
    terms = parsed.terms()
    routes = {t.route for t in terms}
    if len(routes) == 1 and LIKE not in routes:
        table = "messages_fts_trigram" if TRIGRAM in routes else "messages_fts"
        sql = (
            f"SELECT m.id FROM {table} JOIN messages m ON m.id = {table}.rowid "
            f"WHERE {table} MATCH ? AND m.active = 1 ORDER BY rank LIMIT 20"
        )
        params: list[Any] = [parsed.fts()]
        return lambda: conn.execute(sql, params).fetchall()
    groups, params = [], []
    for group in parsed.groups:
        parts = []
        for term in group.include:
            parts.append(_term_sql(term.route, False))
            params += [term.like()] * 3 if term.route == LIKE else [term.fts()]
        for term in group.exclude:
            parts.append("NOT " + _term_sql(term.route, False))
            params += [term.like()] * 3 if term.route == LIKE else [term.fts()]
        groups.append("(" + " AND ".join(parts) + ")")
    sql = (
        "SELECT m.id FROM messages m WHERE m.active = 1 AND ("
        + " OR ".join(groups)
        + ") ORDER BY m.timestamp DESC LIMIT 20"
    )
    return lambda: conn.execute(sql, params).fetchall()


def plain_window(conn: sqlite3.Connection, text: str) -> Callable[[], Any] | None:
    """The simplest SQL ranking only the newest hits of a query of words alone, as a
    callable returning the first 20 ids (None for other queries)."""
    parsed = parse(text)
    if {t.route for t in parsed.terms()} != {WORD_ROUTE}:
        return None
    sql = (
        "SELECT rid FROM (SELECT f.rowid AS rid, rank AS r FROM messages_fts f "
        "JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ? AND m.active = 1 "
        "ORDER BY f.rowid DESC LIMIT ?) ORDER BY r LIMIT 20"
    )
    params = [parsed.fts(), plan.RANK_WINDOW]
    return lambda: conn.execute(sql, params).fetchall()


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(rounds: int, calls: list[Callable[[], Any]]) -> tuple[list[float], list[float]]:
    """Medians and worst times of ``calls``, each round in another order (a call over
    5 s the first time is not run again)."""
    first = [timed(call) for call in calls]
    times: list[list[float]] = [[] if t < 5 else [t] for t in first]
    for n in range(rounds):
        order = list(range(len(calls)))
        order = order[n % len(order) :] + order[: n % len(order)]
        for i in order:
            if first[i] < 5:
                times[i].append(timed(calls[i]))
    return [statistics.median(t) for t in times], [max(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--random", type=int, default=0, metavar="N")
    args = parser.parse_args()
    path: Path = args.db
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {args.messages:,} messages in {path} (once) ...", flush=True)
        build(path, args.messages)
    store = SessionDB(path, read_only=True)
    count = store.message_count(include_inactive=True)
    if count != args.messages:
        raise SystemExit(
            f"{path} holds {count:,} messages, not {args.messages:,}: use another --db"
        )
    if args.random:
        print(f"{count:,} messages; {args.random} random queries of each shape and size")
        run_random(store, args.random)
        store.close()
        return
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"{count:,} messages; SQLite {sqlite3.sqlite_version}; medians of {args.rounds} rounds")
    print(
        f"'all': every hit ranked (the default); window {plan.RANK_WINDOW:,} (rank_window); "
        "ratio: messages / plain N, else / plain"
    )
    header = (
        f"{'query':<32} {'terms':>5} {'msgs all':>10} {'messages':>10} {'sess all':>10} "
        f"{'sessions':>10} {'plain':>10} {'plain N':>10} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    worst: list[tuple[float, str]] = []
    slowest: list[str] = []
    for name, text in queries().items():
        terms = len(parse(text).terms())

        def messages(text: str = text, window: int | None = plan.RANK_WINDOW) -> Any:
            return store.search_messages(text, time_budget=None, rank_window=window)

        def sessions(text: str = text, window: int | None = plan.RANK_WINDOW) -> Any:
            return store.search_sessions(text, time_budget=None, rank_window=window)

        calls = [
            messages,
            lambda text=text: messages(text, None),
            sessions,
            lambda text=text: sessions(text, None),
            plain_search(conn, text),
        ]
        window = plain_window(conn, text)
        if window is not None:
            calls.append(window)
        medians, maxima = measure(args.rounds, calls)
        ours, before, found, found_before, plain, *rest = medians
        worst.append((max(ours, found), name))
        slowest.append(f"{name:<32} {maxima[0] * 1e3:8.0f}ms {maxima[2] * 1e3:8.0f}ms")
        plain_n = f"{rest[0] * 1e3:8.0f}ms" if rest else f"{'':>10}"
        print(
            f"{name:<32} {terms:>5} {before * 1e3:8.0f}ms {ours * 1e3:8.0f}ms "
            f"{found_before * 1e3:8.0f}ms {found * 1e3:8.0f}ms "
            f"{plain * 1e3:8.0f}ms {plain_n} {ours / (rest[0] if rest else plain):6.2f}",
            flush=True,
        )
    print()
    print(f"{'worst round (rank_window)':<32} {'messages':>10} {'sessions':>10}")
    print("\n".join(slowest))
    print()
    for seconds, name in sorted(worst, reverse=True)[:5]:
        print(f"worst: {seconds:6.2f} s  {name}")
    store.close()
    conn.close()


if __name__ == "__main__":
    main()
