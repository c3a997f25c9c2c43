"""The bundled SQLite (pysqlite3) against the standard library's, on the same calls.

The module is chosen once per process (``HERMES_MODELS_SQLITE``), so each side
is a worker process of its own: ``pysqlite3`` and ``sqlite3``. Both get a copy
of one corpus (``benchmarks/search.py``'s: English, Chinese, Japanese, Korean,
2 % JSON content, 2 % soft-deleted, sessions of ten, plus one session of 1,000
messages) and run the same calls; the parent asks them in turn, one round of
one route at a time, the order alternating each round. Medians of each side,
and the median of the per-round ratios (bundled / standard; below 1: the
bundled SQLite is faster).

Routes: ``append_message`` (20 messages, one transaction each),
``get_messages`` of the 1,000-message session, ``list_sessions_rich`` (the
first 50), each route of ``search_messages`` (benchmarks/search.py's
queries), and ``import_bundle`` of 20 sessions into an empty migrated file.

``--journal``: ``users`` (default) runs each side as a user gets it: the
bundled SQLite puts the file in WAL, the standard library's (3.40.1 here,
with the WAL-reset bug) keeps it in DELETE; ``wal`` and ``delete`` put both
files in that mode first, to compare the two SQLites alone.

Start-up: ``python -c "from hermes_models import driver"`` (which chooses the
module; ``import hermes_models`` alone loads none) under each setting, and the
import of each module alone, in alternating runs (a Python start included:
see ``python -X importtime`` for the modules' own share).

Run: python benchmarks/sqlite_builds.py [--messages N] [--rounds N] [--journal MODE]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDES = ("pysqlite3", "sqlite3")
LONG_SESSION = "long"
#: The source of the 20 sessions (200 messages) exported and imported.
IMPORT_SOURCE = "import"
T0 = 1_700_000_000.0


# -- the worker: one side, one module -----------------------------------------------------------


def _worker(folder: Path, journal_mode: str) -> None:
    """Answer route names on stdin with the seconds one round took, on stdout."""
    logging.getLogger("hermes_models").addHandler(logging.NullHandler())
    logging.getLogger("hermes_models").propagate = False
    from search import QUERIES  # type: ignore[import-not-found]

    from hermes_models import SessionDB, driver

    path = folder / "state.db"
    if journal_mode == "users":  # as a new file gets it
        journal_mode = "delete" if driver.WAL_RESET_BUG else "wal"
    raw = driver.sqlite3.connect(path)
    raw.execute(f"PRAGMA journal_mode={journal_mode}")
    raw.close()
    store = SessionDB(path)
    template = folder / "empty.db"
    SessionDB(template).close()
    bundle = io.StringIO()
    store.export_bundle(bundle, source=IMPORT_SOURCE)
    text = bundle.getvalue()
    store.create_session("append", "cli", started_at=T0)
    count = 0

    def append() -> None:
        nonlocal count
        for _ in range(20):
            count += 1
            store.append_message("append", "user", f"message {count} 数据 checkpoint")

    def import_bundle() -> float:
        target = folder / "imported.db"
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(template, target)
        started = time.perf_counter()
        with SessionDB(target) as other:
            other.import_bundle(io.StringIO(text))
        return time.perf_counter() - started

    routes: dict[str, Callable[[], Any]] = {
        "append_message x20": append,
        "get_messages (1,000)": lambda: store.get_messages(LONG_SESSION),
        "list_sessions_rich (50)": lambda: store.list_sessions_rich(limit=50),
    }
    for name, (query, _) in QUERIES.items():
        routes[f"search: {name}"] = lambda q=query: store.search_messages(q)
    mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    print(json.dumps([driver.SQLITE_VERSION, driver.MODULE_NAME, mode, [*routes, "import"]]))
    sys.stdout.flush()
    for line in sys.stdin:
        name = line.strip()
        if name == "import":
            seconds = import_bundle()
        else:
            started = time.perf_counter()
            routes[name]()
            seconds = time.perf_counter() - started
        print(seconds, flush=True)
    store.close()


# -- the parent ---------------------------------------------------------------------------------


def _build(folder: Path, messages: int) -> Path:
    from search import build

    path = folder / "corpus.db"
    build(path, messages)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, 'cli', ?, 1000)",
        (LONG_SESSION, T0),
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
        [
            (LONG_SESSION, ("user", "assistant")[n % 2], f"turn {n}: the session's message", T0 + n)
            for n in range(1000)
        ],
    )
    conn.execute(
        "UPDATE sessions SET source = ? WHERE id IN (SELECT id FROM sessions ORDER BY id LIMIT 20)",
        (IMPORT_SOURCE,),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    return path


class Worker:
    def __init__(self, side: str, folder: Path, journal_mode: str) -> None:
        env = {**os.environ, "HERMES_MODELS_SQLITE": side}
        here = str(Path(__file__).resolve().parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(folder), "--journal", journal_mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.process.stdout is not None
        self.version, self.module, self.mode, self.routes = json.loads(
            self.process.stdout.readline()
        )

    def run(self, route: str) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(route + "\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _startup(rounds: int) -> None:
    programs = {
        "hermes_models.driver": "from hermes_models import driver",
        "the module alone": None,
    }
    alone = {"pysqlite3": "import pysqlite3.dbapi2", "sqlite3": "import sqlite3"}
    print(f"\n{'start-up (ms)':<28} {'pysqlite3':>10} {'sqlite3':>10} {'diff':>8}")
    for label, program in programs.items():
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        for n in range(rounds):
            for side in SIDES if n % 2 == 0 else SIDES[::-1]:
                env = {**os.environ, "HERMES_MODELS_SQLITE": side}
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", program or alone[side]], env=env, check=True)
                times[side].append(time.perf_counter() - started)
        a, b = (statistics.median(times[side]) * 1e3 for side in SIDES)
        print(f"{label:<28} {a:10.1f} {b:10.1f} {a - b:+8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--journal", choices=("users", "wal", "delete"), default="users")
    parser.add_argument("--startup-rounds", type=int, default=20)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args.worker, args.journal)
        return
    top = Path(tempfile.mkdtemp(prefix="hermes-builds-"))
    try:
        started = time.perf_counter()
        corpus = _build(top, args.messages)
        print(f"built {args.messages + 1000:,} messages in {time.perf_counter() - started:.1f} s")
        workers = []
        for side in SIDES:
            folder = top / side
            folder.mkdir()
            shutil.copyfile(corpus, folder / "state.db")
            workers.append(Worker(side, folder, args.journal))
        for worker in workers:
            print(f"{worker.module}: SQLite {worker.version}, file in {worker.mode} mode")
        print(f"\n{'route':<40} {'pysqlite3':>11} {'sqlite3':>11} {'ratio':>6}")
        for route in workers[0].routes:
            for worker in workers:  # a first call each: caches, statements
                worker.run(route)
            times: list[list[float]] = [[], []]
            for n in range(args.rounds):
                order = (0, 1) if n % 2 == 0 else (1, 0)
                for index in order:
                    times[index].append(workers[index].run(route))
            a, b = (statistics.median(t) for t in times)
            ratio = statistics.median(x / y for x, y in zip(*times))
            print(f"{route:<40} {a * 1e3:8.2f} ms {b * 1e3:8.2f} ms {ratio:6.2f}")
        for worker in workers:
            worker.close()
        _startup(args.startup_rounds)
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
