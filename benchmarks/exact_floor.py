"""What an exact ranking of every hit costs FTS5 itself, on the worst searches.

Issue #35 (#19) point 6 asks every query of up to 64 terms to answer within 1 s on
500,000 messages; issue #37 (#21) point 3 made the default ranking exact (the best
20 of every match by BM25, as a plain ``MATCH ... ORDER BY rank`` gives them). This
script measures the least time that exactness takes, whatever a search around it
does: the bare FTS5 statement that scores every match and keeps the best 20,

    SELECT rowid, bm25(messages_fts) FROM messages_fts
    WHERE messages_fts MATCH ? ORDER BY 2, rowid LIMIT 20

on the SQLite build the package runs (``hermes_models.driver``), for the groups of
each query of ``search_worst.py`` that the word index decides alone (a query
without such a group is left out; a CJK term of one or two characters is matched
by the gram index and ``LIKE``, which rank nothing), beside ``search_messages`` as
shipped (exact, no time budget). Columns, medians in ms:

* ``ours``: ``search_messages(text, time_budget=None)``: the first page with its
  snippets and context;
* ``floor``: the bare statement above on one connection;
* ``fixed``: the same statement limited to the newest 10 rows (``rowid >``): what
  FTS5 spends before the first row whatever the range (BM25's per-phrase counts:
  each phrase's whole list read once; for a prefix, every word it starts merged,
  twice);
* ``2 conns`` (and ``N conns`` on a machine of N > 2 CPUs): the statement split by
  ``rowid`` ranges over that many connections in threads, the best 20 of their
  bests (the same rows; checked): what parallel readers could reach at best here.

A query whose ``floor`` is over 1 s cannot be ranked exactly within 1 s on one
connection; one whose ``2 conns`` is over 1 s, not on two cores either.

Run: python benchmarks/exact_floor.py [--db PATH] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search_worst import DEFAULT_DB, queries

from hermes_models import SessionDB, driver
from hermes_models.search.query import WORDS, parse

FLOOR_SQL = (
    "SELECT rowid, bm25(messages_fts) FROM messages_fts WHERE messages_fts MATCH ?"
    " AND rowid > ? AND rowid <= ? ORDER BY 2, rowid LIMIT 20"
)


def word_part(text: str) -> str | None:
    """The FTS5 query of the groups of ``text`` the word index decides alone (every
    term of the group a word), None when it has none: the matches an exact ranking
    of the query scores at the least."""
    groups = [
        g for g in parse(text).groups if all(t.route == WORDS for t in (*g.include, *g.exclude))
    ]
    if not groups:
        return None
    return " OR ".join(f"({g.fts()})" for g in groups)


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


class Floor:
    """The bare ranking statement over ``parts`` rowid ranges, one connection each."""

    def __init__(self, path: Path, parts: int) -> None:
        uri = f"file:{path}?mode=ro"
        self.conns = [
            driver.sqlite3.connect(uri, uri=True, check_same_thread=False) for _ in range(parts)
        ]
        (self.top,) = self.conns[0].execute("SELECT max(rowid) FROM messages").fetchone()

    def rank(self, match: str, newest: int | None = None) -> list[tuple[int, float]]:
        parts = len(self.conns)
        low = 0 if newest is None else self.top - newest
        bounds = [low + (self.top - low) * i // parts for i in range(parts + 1)]
        found: list[list[tuple[int, float]]] = [[] for _ in range(parts)]

        def read(i: int) -> None:
            params = (match, bounds[i], bounds[i + 1])
            found[i] = self.conns[i].execute(FLOOR_SQL, params).fetchall()

        threads = [threading.Thread(target=read, args=(i,)) for i in range(parts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sorted((row for rows in found for row in rows), key=lambda r: (r[1], r[0]))[:20]

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not args.db.exists():
        raise SystemExit(f"{args.db} does not exist: build it with benchmarks/search_worst.py")
    store = SessionDB(args.db, read_only=True)
    cpus = os.cpu_count() or 1
    one, two = Floor(args.db, 1), Floor(args.db, 2)
    floors = [one, two, *([Floor(args.db, cpus)] if cpus > 2 else [])]
    print(
        f"{store.message_count(include_inactive=True):,} messages; SQLite "
        f"{driver.sqlite3.sqlite_version} (the package's); {cpus} CPUs; medians of "
        f"{args.rounds} rounds"
    )
    header = f"{'query':<32} {'hits':>8} {'ours':>8} {'floor':>8} {'fixed':>8} {'2 conns':>8}"
    if cpus > 2:
        header += f" {f'{cpus} conns':>8}"
    print(header)
    print("-" * len(header))
    for name, text in queries().items():
        match = word_part(text)
        if match is None:
            continue
        (hits,) = (
            one.conns[0]
            .execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (match,))
            .fetchone()
        )
        whole = one.rank(match)
        if any(floor.rank(match) != whole for floor in floors[1:]):
            raise SystemExit(f"{name}: the split ranking differs from the whole one")
        calls = [
            lambda text=text: store.search_messages(text, time_budget=None),
            lambda match=match: one.rank(match),
            lambda match=match: one.rank(match, newest=10),
            *(lambda match=match, floor=floor: floor.rank(match) for floor in floors[1:]),
        ]
        times: list[list[float]] = [[] for _ in calls]
        for n in range(args.rounds):
            for i in [*range(n % len(calls), len(calls)), *range(n % len(calls))]:
                times[i].append(timed(calls[i]))
        medians = " ".join(f"{statistics.median(t) * 1e3:6.0f}ms" for t in times)
        print(f"{name:<32} {hits:>8,} {medians}", flush=True)
    for floor in floors:
        floor.close()
    store.close()


if __name__ == "__main__":
    main()
