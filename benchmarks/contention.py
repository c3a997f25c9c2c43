"""Eight processes appending to one file at once: jitter retry vs SQLite's busy handler.

* ``jitter``: hermes_models' ``SessionDB.append_message`` — busy timeout 1 s,
  and on "database is locked" a rollback, a random 20–150 ms sleep and a
  retry, up to 15 attempts.
* ``busy-handler``: plain sqlite3 running the same SQL (``BEGIN IMMEDIATE``,
  insert, counter update, ``COMMIT``) with a 30 s busy timeout and no retry
  of its own — SQLite's built-in handler does all the waiting.

Each process appends ``--per-process`` messages to its own session, timing
each call. Printed: total throughput, p50 / p99 / max latency of one append,
errors surfaced to the caller, and whether the row counts came out exact.

Run: python benchmarks/contention.py [--processes 8] [--per-process 300]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hot_paths import plain_append

import hermes_models


def worker(
    mode: str, path: str, index: int, count: int, every: int, barrier: Any, results: Any
) -> None:
    hermes_models.store.writes.CHECKPOINT_EVERY_N_WRITES = every
    session_id = f"{mode}-{index}"
    latencies: list[float] = []
    errors: list[str] = []
    if mode == "jitter":
        store = hermes_models.SessionDB(path)
        store.create_session(session_id, "bench")

        def append(n: int) -> None:
            store.append_message(session_id, "user", f"{session_id} message {n}")

    else:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'bench', ?)",
            (session_id, time.time()),
        )

        def append(n: int) -> None:
            plain_append(conn, session_id, n)

    barrier.wait()
    for n in range(count):
        start = time.perf_counter()
        try:
            append(n)
        except Exception as exc:  # counted, not raised: the benchmark reports them
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - start)
    results.put((mode, latencies, errors))


def run(mode: str, processes: int, count: int, every: int) -> dict[str, Any]:
    path = Path(tempfile.mkdtemp(prefix="hermes-contention-")) / "state.db"
    hermes_models.migrate(path)
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")  # both sides run on a WAL file
    setup.close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=worker, args=(mode, str(path), i, count, every, barrier, results))
        for i in range(processes)
    ]
    for process in workers:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    collected = [results.get() for _ in workers]
    elapsed = time.perf_counter() - started
    for process in workers:
        process.join()
    latencies = sorted(lat for _, lats, _ in collected for lat in lats)
    errors = [err for _, _, errs in collected for err in errs]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    counted = conn.execute("SELECT SUM(message_count) FROM sessions").fetchone()[0]
    conn.close()
    return {
        "mode": mode,
        "throughput": rows / elapsed,
        "p50": statistics.median(latencies),
        "p99": latencies[int(len(latencies) * 0.99) - 1],
        "max": latencies[-1],
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "rows": rows,
        "exact": rows == counted == processes * count - len(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--per-process", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=hermes_models.store.writes.CHECKPOINT_EVERY_N_WRITES,
        help="hermes_models' PASSIVE checkpoint cadence (diagnosis: a huge value turns it off)",
    )
    args = parser.parse_args()
    print(f"{args.processes} processes x {args.per_process} appends, one file")
    for _ in range(args.repeat):
        for mode in ("jitter", "busy-handler"):
            r = run(mode, args.processes, args.per_process, args.checkpoint_every)
            print(
                f"{r['mode']:<13} {r['throughput']:8.0f} msg/s   p50 {r['p50'] * 1e3:7.2f} ms   "
                f"p99 {r['p99'] * 1e3:8.2f} ms   max {r['max'] * 1e3:8.2f} ms   "
                f"errors {r['errors']}   rows {r['rows']} exact={r['exact']}"
                + (f"   first error: {r['first_error']}" if r["errors"] else "")
            )


if __name__ == "__main__":
    main()
