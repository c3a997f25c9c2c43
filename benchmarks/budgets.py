"""Budgets a user can feel, on this machine: each figure against its budget, with the
simplest plain-``sqlite3`` way of doing the same beside it for scale.

* ``hermes-models sessions`` (the installed console script, a fresh process) on a
  store of 2,000 sessions: under 300 ms wall, median of ``--runs``;
* ``from hermes_models import SessionDB`` plus the first open of an up-to-date
  store, in one fresh process: under 150 ms wall;
* ``SessionDB.append_message``: p50 under 1 ms (p90 printed too), in this process;
* search: the median of each route (words, trigram, one-character CJK gram, LIKE)
  on the same store, for comparison with the figures in ``benchmarks/README.md``
  (the budget is "no slower than before").

Fresh processes run with bytecode cached in a folder of their own, as an installed
package has it, from a neutral working folder (so that a checkout on ``sys.path``
is not what they import).

Run: python benchmarks/budgets.py [--runs N] [--sessions N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hermes_models

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="hermes-budgets-pycache-")
NEUTRAL = tempfile.mkdtemp(prefix="hermes-budgets-cwd-")

#: Import and first open, timed in the child from before the import.
IMPORT_AND_OPEN = """\
import sys, time
start = time.perf_counter()
from hermes_models import SessionDB
store = SessionDB(sys.argv[1])
store.get_session("none")
print(time.perf_counter() - start)
store.close()
"""

#: The same by hand: the standard library's sqlite3, Hermes' connection set-up, one read.
PLAIN_IMPORT_AND_OPEN = """\
import sys, time
start = time.perf_counter()
import sqlite3
conn = sqlite3.connect(sys.argv[1], timeout=1.0, isolation_level=None)
conn.execute("PRAGMA journal_mode").fetchone()
conn.execute("PRAGMA foreign_keys=ON")
conn.execute("SELECT * FROM sessions WHERE id = 'none'").fetchone()
print(time.perf_counter() - start)
conn.close()
"""

#: Plain listing of the same rows as ``hermes-models sessions`` shows.
PLAIN_SESSIONS = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(
    "SELECT s.id, s.source, s.message_count, s.title, COALESCE((SELECT MAX(m.timestamp)"
    " FROM messages m WHERE m.session_id = s.id), s.started_at) FROM sessions s"
    " WHERE s.parent_session_id IS NULL ORDER BY s.started_at DESC LIMIT 20").fetchall()
for sid, source, count, title, active in rows:
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(active))
    print(f"{sid}  {source:<6} {count:>5}  {when}   {title or ''}")
"""

WORDS = ["deploy", "database", "latency", "refactor", "kernel", "python", "cache", "retry"]
CJK = ["数据库", "部署", "缓存", "内存", "异步"]


def fresh(argv: list[str]) -> tuple[float, str]:
    """Wall-clock seconds of one fresh process, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=ENV, cwd=NEUTRAL)
    return time.perf_counter() - start, done.stdout


def build(path: Path, sessions: int) -> None:
    """A migrated store of ``sessions`` sessions with five messages each, written
    through ``SessionDB`` (English and Chinese text, tool rows among them)."""
    with hermes_models.SessionDB(path) as store:
        for n in range(sessions):
            sid = f"20261201_{n:06d}_{n * 7919 % 0xFFFFFF:06x}"
            store.create_session(sid, "cli" if n % 3 else "telegram", model="demo-model")
            word, other, cjk = WORDS[n % 8], WORDS[(n * 3) % 8], CJK[n % 5]
            store.append_message(sid, "user", f"how do I {word} the {other} service? {cjk}")
            store.append_message(sid, "assistant", f"To {word} it, check the {other} first.")
            store.append_message(sid, "tool", f'{{"output": "{other} ok {n}"}}', tool_name="shell")
            store.append_message(sid, "assistant", f"{cjk}的问题已经解决了 ({n})")
            store.append_message(sid, "user", f"thanks, the {word} works")
            if n % 7 == 0:
                store.set_session_title(sid, f"{word} {other} #{n}")


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def verdict(value_ms: float, budget_ms: float) -> str:
    return "within" if value_ms < budget_ms else "OVER"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sessions", type=int, default=2000)
    args = parser.parse_args()
    python = sys.executable
    script = shutil.which("hermes-models", path=os.path.dirname(python))
    if script is None:
        raise SystemExit("the hermes-models console script is not installed beside this Python")
    folder = Path(tempfile.mkdtemp(prefix="hermes-budgets-"))
    path = folder / "state.db"
    build(path, args.sessions)
    for name, text in (
        ("open.py", IMPORT_AND_OPEN),
        ("plain_open.py", PLAIN_IMPORT_AND_OPEN),
        ("plain_sessions.py", PLAIN_SESSIONS),
    ):
        (folder / name).write_text(text)

    # Fresh processes, interleaved run by run after one warm-up each.
    commands = {
        "sessions": [script, "sessions", "--db", str(path)],
        "plain sessions": [python, str(folder / "plain_sessions.py"), str(path)],
        "import+open": [python, str(folder / "open.py"), str(path)],
        "plain import+open": [python, str(folder / "plain_open.py"), str(path)],
        "python -c pass": [python, "-c", "pass"],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    inner: dict[str, list[float]] = {"import+open": [], "plain import+open": []}
    for argv in commands.values():
        fresh(argv)
    for _ in range(args.runs):
        for name, argv in commands.items():
            took, out = fresh(argv)
            walls[name].append(took)
            if name in inner:
                inner[name].append(float(out))

    sessions_ms = median_ms(walls["sessions"])
    print(f"store: {args.sessions} sessions, {args.sessions * 5} messages; medians of {args.runs}")
    print(f"python -c pass                       {median_ms(walls['python -c pass']):7.1f} ms")
    print(
        f"hermes-models sessions               {sessions_ms:7.1f} ms wall"
        f"   budget 300 ms: {verdict(sessions_ms, 300)}"
        f"   (plain sqlite3 script {median_ms(walls['plain sessions']):.1f} ms)"
    )
    open_ms = median_ms(walls["import+open"])
    print(
        f"import SessionDB + first open        {open_ms:7.1f} ms wall"
        f"   budget 150 ms: {verdict(open_ms, 150)}"
        f"   (in-process {median_ms(inner['import+open']):.1f} ms;"
        f" plain sqlite3 {median_ms(walls['plain import+open']):.1f} ms wall,"
        f" {median_ms(inner['plain import+open']):.1f} ms in-process)"
    )

    # append_message in this process, against a plain INSERT and counter update.
    appends: list[float] = []
    plain: list[float] = []
    with hermes_models.SessionDB(path) as store:
        store.create_session("budget-append", "cli")
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        for n in range(1000):
            start = time.perf_counter()
            store.append_message("budget-append", "user", f"message {n} about the {WORDS[n % 8]}")
            appends.append(time.perf_counter() - start)
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('budget-append', 'user', ?, ?)",
                (f"plain {n}", time.time()),
            )
            conn.execute(
                "UPDATE sessions SET message_count = message_count + 1 WHERE id = 'budget-append'"
            )
            conn.execute("COMMIT")
            plain.append(time.perf_counter() - start)
        conn.close()
        appends.sort()
        p50, p90 = appends[len(appends) // 2] * 1e3, appends[len(appends) * 9 // 10] * 1e3
        print(
            f"append_message                       p50 {p50:.3f} ms, p90 {p90:.3f} ms"
            f"   budget p50 1 ms: {verdict(p50, 1.0)}"
            f"   (plain INSERT+UPDATE p50 {median_ms(plain):.3f} ms)"
        )

        routes = {
            "words": "database",
            "trigram (3+ CJK chars)": "数据库",
            "gram (1 CJK char)": "存",
            "LIKE (2-char non-word)": "#1",
        }
        for label, query in routes.items():
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                found = store.search_messages(query, limit=20)
                times.append(time.perf_counter() - start)
            print(f"search {label:<28} {median_ms(times):7.2f} ms   ({len(found)} hits)")


if __name__ == "__main__":
    main()
