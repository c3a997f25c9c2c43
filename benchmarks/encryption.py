"""What encryption at rest costs: an agent's turn, opening a store, and a bulk write,
on a plain store and on the same store encrypted (SQLCipher, the encryption extra).

The store of ``agent_turn.py`` (2,000 sessions x 50 messages by default) is built
once, copied, and the copy encrypted in place (``hermes_models.encrypt_store``).
Both run on the same module (sqlcipher3's SQLite: a plain file is read without any
cipher), so the ratio is the cipher's cost alone. Rounds alternate plain and
encrypted; medians are printed with their ratio, and beside them the same read
(a session's messages) through the standard library's ``sqlite3`` on the plain
file, the reference of the other benchmarks.

* ``turn``: one gateway turn (resume, read, append, list, search, replay, append,
  token counts: ``agent_turn.turn``), steps and total;
* ``open``: ``SessionDB(path)`` then ``close()`` in a new process's manner (the key
  derived once per process and file salt, then reused: the first open of a process
  pays ~0.1-0.5 s for the derivation, measured apart as ``first open``);
* ``append 1,000``: 1,000 messages appended in one session.

Run: python benchmarks/encryption.py [--rounds N] [--turns N] [--sessions N]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hermes_models
from hermes_models import SessionDB, driver

sys.path.insert(0, str(Path(__file__).parent))
from agent_turn import build, turn

KEY = "benchmark key"

FIRST_OPEN = """
import sys, time
t = time.perf_counter()
from hermes_models import SessionDB
s = SessionDB(sys.argv[1], key=sys.argv[2] or None)
s.list_sessions_rich(limit=1)
s.close()
print(time.perf_counter() - t)
"""


def first_open(path: Path, key: str | None) -> float:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_OPEN, str(path), key or ""],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=2_000)
    args = parser.parse_args()
    if not driver.ENCRYPTION:
        raise SystemExit("needs the encryption extra: pip install 'hermes_models[encryption]'")
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "plain.db"
        encrypted = Path(folder) / "encrypted.db"
        print(f"building {args.sessions:,} sessions x 50 messages ...", flush=True)
        build(plain, args.sessions, 50)
        shutil.copy(plain, encrypted)
        hermes_models.encrypt_store(encrypted, KEY)
        print(
            f"file: plain {plain.stat().st_size / 1e6:.1f} MB,"
            f" encrypted {encrypted.stat().st_size / 1e6:.1f} MB"
        )
        ways = {"plain": (plain, None), "encrypted": (encrypted, KEY)}
        times: dict[str, dict[str, list[float]]] = {way: {} for way in ways}
        n = 0
        for _ in range(args.rounds):
            for way, (path, key) in ways.items():
                store = SessionDB(path, key=key)
                for _ in range(args.turns):
                    n += 1
                    session_id = f"s{n % args.sessions:05d}"
                    for step, seconds in turn(store, session_id, n).items():
                        times[way].setdefault(step, []).append(seconds)
                store.close()
                started = time.perf_counter()
                for _ in range(5):
                    SessionDB(path, key=key).close()
                times[way].setdefault("open", []).append((time.perf_counter() - started) / 5)
                with SessionDB(path, key=key) as store:
                    store.create_session(f"bulk-{n}", "cli")
                    started = time.perf_counter()
                    for i in range(1_000):
                        store.append_message(f"bulk-{n}", role="user", content=f"line {i} of text")
                    times[way].setdefault("append 1,000", []).append(time.perf_counter() - started)
        firsts = {way: first_open(path, key) for way, (path, key) in ways.items()}
        with contextlib.closing(sqlite3.connect(plain)) as conn:
            started = time.perf_counter()
            for i in range(200):
                conn.execute(
                    "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (f"s{i:05d}",)
                ).fetchall()
            reference = (time.perf_counter() - started) / 200
    print(f"{'step':<16} {'plain':>10} {'encrypted':>10} {'ratio':>7}")
    totals = {way: 0.0 for way in ways}
    for step in times["plain"]:
        a, b = statistics.median(times["plain"][step]), statistics.median(times["encrypted"][step])
        if step not in ("open", "append 1,000"):
            totals["plain"] += a
            totals["encrypted"] += b
        print(f"{step:<16} {a * 1e3:8.3f}ms {b * 1e3:8.3f}ms {b / a:6.2f}x")
    a, b = totals["plain"], totals["encrypted"]
    print(f"{'turn':<16} {a * 1e3:8.3f}ms {b * 1e3:8.3f}ms {b / a:6.2f}x")
    a, b = firsts["plain"], firsts["encrypted"]
    print(f"{'first open':<16} {a * 1e3:8.1f}ms {b * 1e3:8.1f}ms {b / a:6.2f}x  (a new process)")
    print(f"stdlib sqlite3, a session's messages on the plain file: {reference * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
