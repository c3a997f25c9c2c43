"""Writers and searching readers on one file for minutes: failed writes, write latency, WAL size.

Two modes, one after the other, each on a fresh migrated file in WAL mode:

* ``ours``: ``--writers`` processes append through ``SessionDB.append_message``
  (time-based write patience, jitter retry, the WAL truncated when it grows
  past ``hermes_models.store.writes.WAL_TRUNCATE_ABOVE_BYTES``: see docs/concurrency.md);
* ``hermes``: the same number of processes writing the way Hermes v16 does
  with plain sqlite3: ``timeout=1.0``, ``BEGIN IMMEDIATE``, the message
  ``INSERT``, the session counter ``UPDATE``, ``COMMIT``; on "locked"/"busy"
  a random 20-150 ms sleep and a retry, 15 attempts in all; and
  ``wal_checkpoint(TRUNCATE)`` after every 50th successful write.

Each writer appends mixed English/CJK messages to its own session, as fast
as it can (``--pause`` adds a sleep between appends). In both modes
``--readers`` processes of ours loop over ``search_messages`` (words and 3+
character CJK terms), ``search_sessions`` and ``list_sessions_rich``. A
monitor samples the size of the ``-wal`` file every 20 ms.

Printed per mode: writes done and failed (with the first error), write
p50/p99/max, reader calls and their p50/p99, the WAL's peak and final size,
the file size, and whether the row counts came out exact (every acknowledged
message stored once, every session's ``message_count`` equal to its rows).

Run: python benchmarks/load.py [--writers 16] [--readers 4] [--seconds 600]
                               [--modes ours,hermes] [--pause 0]
"""

from __future__ import annotations

import argparse
import array
import datetime
import multiprocessing
import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import hermes_models

WORDS = (
    "asyncio checkpoint gateway session migration index search writer reader budget "
    "snapshot lock retry jitter commit rollback schema trigger column token model cache "
    "network timeout database journal compression lineage title archive export import "
    "python sqlite peewee telegram discord cron worker agent prompt summary branch"
).split()
CJK = (
    "数据库检查点",
    "会话记录",
    "全文搜索",
    "写入冲突",
    "日志文件",
    "データベース",
    "検索結果",
    "세션 기록",
    "데이터베이스",
    "压缩历史",
)
WORD_QUERIES = ("checkpoint", "gateway AND retry", "snapshot", "telegram OR discord", "jitter")
CJK_QUERIES = ("数据库", "全文搜索", "データベース", "데이터베이스", "写入冲突")
SAMPLE_WAL_S = 0.02


def message(rng: random.Random, writer: int, n: int) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 24))
    if rng.random() < 0.4:
        words.insert(rng.randint(0, len(words)), rng.choice(CJK))
    return f"writer {writer} message {n}: " + " ".join(words)


# -- Hermes v16's write path, in plain sqlite3 -----------------------------------------------

_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,"
    " timestamp, token_count, finish_reason, reasoning, reasoning_content, reasoning_details,"
    " codex_reasoning_items, codex_message_items, platform_message_id, observed)"
    " VALUES (?, ?, ?, NULL, NULL, NULL, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0)"
)
_COUNT = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1,"
    " tool_call_count = COALESCE(tool_call_count, 0) + 0 WHERE id = ?"
)


class HermesWriter:
    """``SessionDB._execute_write`` of Hermes v16 (``BEGIN IMMEDIATE``, up to 15 tries a
    random 20-150 ms apart, a checkpoint every 50 writes), for one append."""

    MAX_RETRIES = 15
    RETRY_MIN_S = 0.020
    RETRY_MAX_S = 0.150
    CHECKPOINT_EVERY_N_WRITES = 50

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=1.0, isolation_level=None)
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.write_count = 0

    def execute_write(self, fn: Any) -> Any:
        last: Exception | None = None
        for attempt in range(self.MAX_RETRIES):
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(self.conn)
                    self.conn.commit()
                except BaseException:
                    try:
                        self.conn.rollback()
                    except Exception:
                        pass
                    raise
                self.write_count += 1
                if self.write_count % self.CHECKPOINT_EVERY_N_WRITES == 0:
                    try:
                        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    except Exception:
                        pass
                return result
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if "locked" not in text and "busy" not in text:
                    raise
                last = exc
                if attempt < self.MAX_RETRIES - 1:
                    time.sleep(random.uniform(self.RETRY_MIN_S, self.RETRY_MAX_S))
                    continue
                raise
        raise last or sqlite3.OperationalError("database is locked after max retries")

    def create_session(self, session_id: str) -> None:
        self.execute_write(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                (session_id, time.time()),
            )
        )

    def append_message(self, session_id: str, role: str, content: str) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(_INSERT, (session_id, role, content, time.time()))
            conn.execute(_COUNT, (session_id,))
            return int(cursor.lastrowid or 0)

        return int(self.execute_write(fn))


# -- the processes ---------------------------------------------------------------------------


def writer(
    mode: str,
    path: str,
    index: int,
    deadline: float,
    pause: float,
    settings: dict[str, float],
    barrier: Any,
    results: Any,
) -> None:
    for name, value in settings.items():  # diagnosis: other thresholds than the defaults
        setattr(hermes_models.store.writes, name, value)
    session_id = f"{mode}-writer-{index}"
    rng = random.Random(index)
    latencies = array.array("d")
    errors: list[str] = []
    store: Any
    if mode == "ours":
        store = hermes_models.SessionDB(path)
        store.create_session(session_id, "cli")
    else:
        store = HermesWriter(path)
        store.create_session(session_id)
    barrier.wait()
    n = 0
    while time.time() < deadline:
        text = message(rng, index, n)
        role = "user" if n % 2 else "assistant"
        started = time.perf_counter()
        try:
            store.append_message(session_id, role, text)
            n += 1
        except Exception as exc:  # counted, not raised: the benchmark reports them
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
        if pause:
            time.sleep(pause)
    results.put(("writer", session_id, n, latencies.tobytes(), errors))


def reader(path: str, index: int, deadline: float, barrier: Any, results: Any) -> None:
    rng = random.Random(1000 + index)
    latencies = array.array("d")
    errors: list[str] = []
    calls: dict[str, int] = {}
    with hermes_models.SessionDB(path) as store:
        barrier.wait()
        while time.time() < deadline:
            kind = rng.choice(("words", "cjk", "sessions", "list"))
            started = time.perf_counter()
            try:
                if kind == "words":
                    store.search_messages(rng.choice(WORD_QUERIES), limit=20)
                elif kind == "cjk":
                    store.search_messages(rng.choice(CJK_QUERIES), limit=10)
                elif kind == "sessions":
                    store.search_sessions(rng.choice(WORD_QUERIES), limit=10)
                else:
                    store.list_sessions_rich(limit=50)
            except Exception as exc:
                errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            latencies.append(time.perf_counter() - started)
            calls[kind] = calls.get(kind, 0) + 1
    results.put(("reader", index, calls, latencies.tobytes(), errors))


def monitor(path: str, deadline: float, barrier: Any, results: Any) -> None:
    wal = f"{path}-wal"
    peak, shrinks, last, samples = 0, 0, 0, array.array("d")
    barrier.wait()
    while time.time() < deadline + 1:
        try:
            size = os.stat(wal).st_size
        except OSError:
            size = 0
        peak = max(peak, size)
        shrinks += size < last
        last = size
        samples.append(size)
        time.sleep(SAMPLE_WAL_S)
    results.put(("monitor", peak, shrinks, samples.tobytes(), None))


# -- one run ---------------------------------------------------------------------------------


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * fraction) - 1))]


def run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"hermes-load-{mode}-", dir=args.dir))
    path = folder / "state.db"
    hermes_models.migrate(path)
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")  # both modes run on a WAL file
    setup.close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(args.writers + args.readers + 2)
    results = ctx.Queue()
    settings = {
        name: value
        for name, value in (
            ("WAL_TRUNCATE_ABOVE_BYTES", args.truncate_above),
            ("WAL_TRUNCATE_WAIT_S", args.truncate_wait),
            ("WRITE_PATIENCE_S", args.patience),
        )
        if value is not None
    }
    start_at = time.time() + 5 + 0.3 * (args.writers + args.readers)  # after every spawn
    deadline = start_at + args.seconds
    procs = [
        ctx.Process(
            target=writer,
            args=(mode, str(path), i, deadline, args.pause, settings, barrier, results),
        )
        for i in range(args.writers)
    ]
    procs += [
        ctx.Process(target=reader, args=(str(path), i, deadline, barrier, results))
        for i in range(args.readers)
    ]
    procs.append(ctx.Process(target=monitor, args=(str(path), deadline, barrier, results)))
    for proc in procs:
        proc.start()
    barrier.wait()
    collected = [results.get(timeout=args.seconds + 600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    writes: list[float] = []
    reads: list[float] = []
    errors: list[str] = []
    read_errors: list[str] = []
    done: dict[str, int] = {}
    wal_peak = wal_shrinks = 0
    wal_samples: list[float] = []
    for kind, key, value, blob, errs in collected:
        numbers = array.array("d")
        numbers.frombytes(blob)
        if kind == "writer":
            writes.extend(numbers)
            errors.extend(errs)
            done[key] = value
        elif kind == "reader":
            reads.extend(numbers)
            read_errors.extend(errs)
        else:
            wal_peak, wal_shrinks, wal_samples = key, value, list(numbers)
    writes.sort()
    reads.sort()
    per_writer = sorted(done.values())
    wal_final = os.stat(f"{path}-wal").st_size if os.path.exists(f"{path}-wal") else 0
    conn = sqlite3.connect(path)
    rows = dict(conn.execute("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"))
    counted = dict(conn.execute("SELECT id, message_count FROM sessions"))
    conn.close()
    exact = all(rows.get(sid, 0) == n == counted.get(sid) for sid, n in done.items()) and sum(
        rows.values()
    ) == sum(done.values())
    file_size = path.stat().st_size
    if not args.keep:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        folder.rmdir()
    return {
        "mode": mode,
        "writes": sum(done.values()),
        "per_writer": (per_writer[0], per_writer[-1]) if per_writer else (0, 0),
        "failed": len(errors),
        "first_error": errors[0] if errors else "",
        "p50": statistics.median(writes),
        "p99": percentile(writes, 0.99),
        "p999": percentile(writes, 0.999),
        "max": writes[-1],
        "reads": len(reads),
        "read_p50": statistics.median(reads) if reads else 0.0,
        "read_p99": percentile(reads, 0.99) if reads else 0.0,
        "read_errors": len(read_errors),
        "first_read_error": read_errors[0] if read_errors else "",
        "wal_peak": wal_peak,
        "wal_median": statistics.median(wal_samples) if wal_samples else 0,
        "wal_shrinks": wal_shrinks,
        "wal_final": wal_final,
        "file": file_size,
        "exact": exact,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--modes", default="ours,hermes")
    parser.add_argument("--pause", type=float, default=0.0, help="sleep between two appends")
    parser.add_argument(
        "--truncate-above", type=int, help="ours: WAL_TRUNCATE_ABOVE_BYTES (default: the library's)"
    )
    parser.add_argument("--truncate-wait", type=float, help="ours: WAL_TRUNCATE_WAIT_S")
    parser.add_argument("--patience", type=float, help="ours: WRITE_PATIENCE_S")
    parser.add_argument("--dir", default=None, help="folder for the files (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    args = parser.parse_args()
    mib = 1024 * 1024
    print(
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: {args.writers} "
        f"writers, {args.readers} readers, {args.seconds:g} s per mode, pause {args.pause:g} s, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs",
        flush=True,
    )
    for mode in args.modes.split(","):
        r = run(mode, args)
        print(
            f"{r['mode']:<7} writes {r['writes']} ({r['per_writer'][0]}-{r['per_writer'][1]} "
            f"per writer) failed {r['failed']}   "
            f"p50 {r['p50'] * 1e3:.2f} ms  p99 {r['p99'] * 1e3:.1f} ms  "
            f"p99.9 {r['p999'] * 1e3:.0f} ms  max {r['max'] * 1e3:.0f} ms   "
            f"reads {r['reads']} (p50 {r['read_p50'] * 1e3:.0f} ms, p99 "
            f"{r['read_p99'] * 1e3:.0f} ms, errors {r['read_errors']})   "
            f"WAL peak {r['wal_peak'] / mib:.1f} MiB median {r['wal_median'] / mib:.1f} MiB "
            f"final {r['wal_final'] / mib:.1f} MiB ({r['wal_shrinks']} shrinks)   "
            f"file {r['file'] / mib:.0f} MiB   exact={r['exact']}",
            flush=True,
        )
        if r["failed"]:
            print(f"        first failed write: {r['first_error']}", flush=True)
        if r["read_errors"]:
            print(f"        first reader error: {r['first_read_error']}", flush=True)


if __name__ == "__main__":
    main()
