"""Long chains of parent links: time against the chain's length, and against plain sqlite3.

A compression chain of N links (c0 -> c1 -> ..., each session ended with
'compression', one message each, written with plain sqlite3) at N = 1,000 and
10,000, and the same chain closed into a cycle. For each length:

* ``lineage``: ``Session.root()`` and ``descendants()`` of a session in the middle
  (what ``hermes-models lineage`` reads); plain: one recursive CTE down from c0
  (``UNION``, no depth) - the simplest correct walk of a chain that is known to
  start at c0;
* ``search_sessions``: the sessions matching a word that is in every message,
  grouped by root (one row); plain: the FTS match and a count (no grouping);
* ``archive``: ``set_session_archived`` of a session in the middle, and back.

It prints the median of each and the ratio of 10,000 links to 1,000: linear time
gives about 10. A cycle is walked too, to show it ends.

Run: python benchmarks/long_chains.py [--rounds N]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import hermes_models
from hermes_models import Session, SessionDB, using

T0 = 1_767_603_600.0


def build(path: Path, links: int, *, cycle: bool) -> None:
    hermes_models.migrate(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at,"
            " end_reason, message_count) VALUES (?, 'cli', ?, ?, ?, ?, 1)",
            [
                (
                    f"c{i}",
                    f"c{i - 1}" if i else None,
                    T0 + i,
                    T0 + i + 1 if cycle or i < links - 1 else None,
                    "compression" if cycle or i < links - 1 else None,
                )
                for i in range(links)
            ],
        )
        if cycle:
            conn.execute(f"UPDATE sessions SET parent_session_id = 'c{links - 1}' WHERE id = 'c0'")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(f"c{i}", f"quokka link {i}", T0 + i + 0.5) for i in range(links)],
        )
    conn.close()


def timed(call: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


PLAIN_WALK = (
    "WITH RECURSIVE w(id) AS (SELECT 'c0' UNION SELECT s.id FROM sessions s JOIN w"
    " ON s.parent_session_id = w.id) SELECT s.* FROM sessions s JOIN w ON s.id = w.id"
)
PLAIN_SEARCH = (
    "SELECT m.session_id, count(*) FROM messages_fts JOIN messages m ON m.id ="
    " messages_fts.rowid WHERE messages_fts MATCH 'quokka' GROUP BY m.session_id"
)


def measure(path: Path, links: int, rounds: int) -> dict[str, tuple[float, float | None]]:
    middle = f"c{links // 2}"
    found: dict[str, tuple[float, float | None]] = {}
    plain = sqlite3.connect(path)
    with SessionDB(path) as store, using(store.database):

        def lineage() -> None:
            root = Session.get_by_id(middle).root()
            assert len(list(root.descendants())) == links - 1

        def search() -> None:
            rows = store.search_sessions("quokka", limit=10, time_budget=None)
            assert sum(row["hits"] for row in rows) == min(links, 10) or len(rows) == 1

        def archive() -> None:
            store.set_session_archived(middle, True)
            store.set_session_archived(middle, False)

        found["lineage"] = (
            timed(lineage, rounds),
            timed(lambda: plain.execute(PLAIN_WALK).fetchall(), rounds),
        )
        found["search_sessions"] = (
            timed(search, rounds),
            timed(lambda: plain.execute(PLAIN_SEARCH).fetchall(), rounds),
        )
        found["archive"] = (timed(archive, rounds), None)
    plain.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for shape in ("chain", "cycle"):
            results = {}
            for links in (1_000, 10_000):
                path = Path(folder) / f"{shape}-{links}.db"
                build(path, links, cycle=shape == "cycle")
                results[links] = measure(path, links, args.rounds)
            print(f"\n{shape}: median of {args.rounds} rounds")
            print(f"{'call':<16} {'1k ours':>10} {'10k ours':>10} {'10k/1k':>7} {'10k plain':>10}")
            for call in results[1_000]:
                small, _ = results[1_000][call]
                big, plain = results[10_000][call]
                plain_text = f"{plain * 1000:8.1f}ms" if plain is not None else f"{'-':>10}"
                print(
                    f"{call:<16} {small * 1000:8.1f}ms {big * 1000:8.1f}ms"
                    f" {big / small:7.1f} {plain_text}"
                )


if __name__ == "__main__":
    main()
