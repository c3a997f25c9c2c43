"""What ``erase`` costs, beside the simplest way to get the text out of the file.

A store of ``--messages`` messages (``benchmarks/search.py``'s corpus, sessions of
10, written by plain sqlite3, then ``update_search_index()`` so the gram index is
whole) is copied once per way, and ``--sessions`` sessions are taken out of it:

* ``erase``: ``SessionDB.erase_sessions(ids)`` - the deletion, the gram index
  refreshed, the three FTS5 indexes merged, ``wal_checkpoint(TRUNCATE)``;
* ``plain``: plain sqlite3 ``DELETE`` of the messages and sessions (the file's
  triggers keep the indexes), then ``VACUUM`` - the whole file rewritten, which is
  how a user without this package gets deleted text out of the free pages (FTS5
  segments still hold the terms: VACUUM copies them);
* ``delete+vacuum``: ``SessionDB.delete_sessions(ids)`` then ``SessionDB.vacuum()``.

Each is timed ``--rounds`` times on a fresh copy; the median is printed with its
ratio to ``plain``.

    python benchmarks/erase.py --messages 10000
    python benchmarks/erase.py --messages 100000
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from search import build

from hermes_models import SessionDB


def prepare(path: Path, messages: int) -> None:
    build(path, messages)
    with SessionDB(path) as store:
        store.update_search_index()


def erase(path: Path, ids: list[str]) -> None:
    with SessionDB(path) as store:
        report = store.erase_sessions(ids)
        assert report["requested"] == ids and not report["wal_blocked"], report


def plain(path: Path, ids: list[str]) -> None:
    marks = ",".join("?" * len(ids))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", ids)
        conn.execute(f"DELETE FROM sessions WHERE id IN ({marks})", ids)
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def delete_vacuum(path: Path, ids: list[str]) -> None:
    with SessionDB(path) as store:
        assert store.delete_sessions(ids) == len(ids)
        store.vacuum()


WAYS: dict[str, Callable[[Path, list[str]], None]] = {
    "plain": plain,
    "erase": erase,
    "delete+vacuum": delete_vacuum,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base.db"
        prepare(base, args.messages)
        step = max(1, args.messages // 10 // args.sessions)
        ids = [f"s{n * step:06d}" for n in range(args.sessions)]
        size = base.stat().st_size
        print(f"{args.messages:,} messages, {size / 1e6:.1f} MB; taking out {len(ids)} sessions")
        medians: dict[str, float] = {}
        for name, way in WAYS.items():
            times = []
            for _ in range(args.rounds):
                work = Path(folder) / f"{name}.db"
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{work}{suffix}").unlink(missing_ok=True)
                shutil.copy(base, work)
                started = time.perf_counter()
                way(work, ids)
                times.append(time.perf_counter() - started)
            medians[name] = statistics.median(times)
        for name, seconds in medians.items():
            print(
                f"  {name:14s} {seconds * 1000:9.1f} ms  x{seconds / medians['plain']:.2f} of plain"
            )


if __name__ == "__main__":
    main()
