"""The gram index kept in step at 1M messages: appends, 1-2 character searches, sizes, doctor.

Point 6 of the gram-index issue: the figures a user feels, before and after
the change from a high-water mark to a list of changed ids. The store is a
copy of a file of ``benchmarks/search.py``'s corpus written by plain sqlite3
(``--raw``; built once if missing), so nothing is indexed at first. Then, on
the copy:

1. ``update_search_index()`` indexes every message (timed).
2. The size of the gram index's tables (``dbstat``): the FTS5 table, the
   grams each message holds (after only), the list of changed ids (after) or
   the mark and the list of gone ids (before).
3. ``append_message`` to a session, ``--appends`` times (each its own
   transaction), p50/p99, beside a plain sqlite3 ``INSERT`` of the same row
   through the file's own triggers (the simplest correct write).
4. 1-2 character CJK searches (first page of 20, no time budget), every term
   ``--rounds`` times: p50/p99 over all of them, beside the simplest correct
   SQL (a ``LIKE`` over the visible rows, newest first, ``LIMIT 20``), run
   once per term.
5. ``doctor`` (as ``hermes-models doctor`` runs it) timed; after the change
   it checks a random sample of the messages above ``grams.CHECK_ALL_UP_TO``,
   and ``grams.check(..., sample=huge)``, the whole check, is timed too.

Run with either code on the path (the script uses only what both have):
    python benchmarks/gram_upkeep.py --raw /tmp/bench32/raw1m.db --work /tmp/bench32/work.db
    PYTHONPATH=/path/to/main python benchmarks/gram_upkeep.py ...   (before)
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

from search import build

from hermes_models import SessionDB, health
from hermes_models.store import grams
from hermes_models.store.binding import using

TERMS = ("数据", "国我", "セッ", "세션", "数", "ン", "库", "的")
SCAN_SQL = (
    "SELECT id FROM messages WHERE active = 1"
    " AND (content LIKE ?1 OR tool_name LIKE ?1 OR tool_calls LIKE ?1)"
    " ORDER BY timestamp DESC, id DESC LIMIT 20"
)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] * 1e3


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def sizes(path: Path) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'messages_cjk%'"
            " GROUP BY name ORDER BY name"
        ).fetchall()
        total = conn.execute("SELECT sum(pgsize) FROM dbstat").fetchone()[0]
    finally:
        conn.close()
    index = sum(s for n, s in rows if n == "messages_cjk" or n.startswith("messages_cjk_"))
    print(f"file {total / 2**20:,.0f} MiB; gram tables {index / 2**20:,.1f} MiB:")
    for name, size in rows:
        print(f"  {name:<28} {size / 2**20:9.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if not args.raw.exists():
        args.raw.parent.mkdir(parents=True, exist_ok=True)
        build(args.raw, args.messages)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{args.work}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(args.raw, args.work)
    path: Path = args.work
    print(f"SQLite {sqlite3.sqlite_version}; {args.messages:,} messages")

    store = SessionDB(path)
    took = timed(lambda: store.update_search_index())
    print(f"update_search_index: {took:.1f} s")
    sizes(path)

    store.create_session("bench-append", "cli")
    ours = [
        timed(lambda n=n: store.append_message("bench-append", "user", f"数据库事件 {n} 循环"))
        for n in range(args.appends)
    ]
    plain = sqlite3.connect(path, isolation_level=None)
    base = []
    for n in range(args.appends):
        start = time.perf_counter()
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            ("bench-append", "user", f"数据库事件 {n} 循环", time.time()),
        )
        plain.execute("COMMIT")
        base.append(time.perf_counter() - start)
    print(
        f"append_message p50 {pct(ours, 0.5):.2f} ms p99 {pct(ours, 0.99):.2f} ms; "
        f"plain sqlite3 INSERT p50 {pct(base, 0.5):.2f} ms p99 {pct(base, 0.99):.2f} ms"
    )
    took = timed(lambda: store.update_search_index())  # what the plain writes listed
    print(f"update_search_index after {args.appends} plain inserts: {took * 1e3:.0f} ms")

    searches: list[float] = []
    scans: list[float] = []
    for term in TERMS:
        rounds = [
            timed(lambda t=term: store.search_messages(t, time_budget=None))
            for _ in range(args.rounds)
        ]
        scan = timed(lambda t=term: plain.execute(SCAN_SQL, (f"%{t}%",)).fetchall())
        searches.extend(rounds)
        scans.append(scan)
        print(
            f"  {term:<4} p50 {pct(rounds, 0.5):8.2f} ms p99 {pct(rounds, 0.99):8.2f} ms;"
            f" LIKE scan {scan * 1e3:8.1f} ms",
            flush=True,
        )
    print(
        f"1-2 character search p50 {pct(searches, 0.5):.2f} ms p99 {pct(searches, 0.99):.2f} ms"
        f" ({len(searches)} searches); LIKE scan median {statistics.median(scans) * 1e3:.0f} ms"
    )
    plain.close()

    with using(store.database):
        took = timed(lambda: health.doctor(store.database))
    print(f"doctor: {took:.1f} s")
    check = getattr(grams, "check", None)
    if check is not None:
        with using(store.database):
            start = time.perf_counter()
            found = check(store.database, sample=10**12)
            took = time.perf_counter() - start
            sampled = timed(lambda: check(store.database))
        print(
            f"gram check, whole ({found.checked:,} messages): {took:.1f} s; sampled: "
            f"{sampled:.2f} s"
        )
    store.close()


if __name__ == "__main__":
    main()
