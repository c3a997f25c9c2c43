"""Starting up: whole fresh processes, hermes_models against peewee and plain sqlite3.

Every figure is the median wall-clock time of ``--runs`` fresh interpreter
processes, the contenders interleaved run by run (a, b, c, a, b, c, ...) so
that load on the machine hits all of them alike:

* ``from hermes_models import SessionDB`` against ``import peewee`` (target
  <= 1.30x), both also net of a bare ``python -c pass`` (a bare ``import
  hermes_models`` loads no module but the package's own: its names load on
  first use);
* the first open of an up-to-date (migrated) file: ``SessionDB(path)`` timed
  inside the process, after the import (target < 3 ms), and whether yoyo was
  imported by it (it must not be); beside it, plain sqlite3 opening the file
  as Hermes does and reading one row, in a fresh process of its own;
* ``hermes-models sessions`` (the installed console script) against a
  ten-line plain-sqlite3 script printing the same listing of the same file
  (target <= 1.50x).

Bytecode is cached for the children (in a temporary folder), as it is for an
installed package: without it every run would compile the package's sources.

Run: python benchmarks/startup.py [--runs N] [--sessions N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hermes_models

#: The plain script: the listing's SQL as Hermes writes it (roots, newest first,
#: last activity and first user message), printed as the CLI's table prints it.
PLAIN_SESSIONS = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(
    "SELECT s.id, s.source, s.message_count, s.title, COALESCE((SELECT MAX(m.timestamp)"
    " FROM messages m WHERE m.session_id = s.id), s.started_at), (SELECT SUBSTR(m.content, 1, 63)"
    " FROM messages m WHERE m.session_id = s.id AND m.role = 'user' AND m.content IS NOT NULL"
    " ORDER BY m.timestamp, m.id LIMIT 1) FROM sessions s WHERE s.parent_session_id IS NULL"
    " AND s.archived = 0 ORDER BY s.started_at DESC LIMIT 20").fetchall()
print("ID      Source  Msgs  Last active (UTC)  Title / preview")
for sid, source, count, title, active, preview in rows:
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(active))
    print(f"{sid}  {source:<6} {count:>5}  {when}   {title or ''}\\n{'':41}{preview or ''}")
"""

OPEN_ONLY = """\
import sys, time
from hermes_models import SessionDB
start = time.perf_counter()
store = SessionDB(sys.argv[1])
took = time.perf_counter() - start
print(took, "yoyo" in sys.modules)
store.close()
"""


#: The children's environment: bytecode cached as an installed package has it (pip
#: compiles on install), in a folder of its own, whatever this shell says.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="hermes-startup-pycache-")


#: The children's working folder: ``python -c`` puts it first on ``sys.path``, so
#: run from a checkout they would import its ``hermes_models``, not the installed one.
NEUTRAL = tempfile.mkdtemp(prefix="hermes-startup-cwd-")

#: CPU seconds (user + system) of the last process :func:`run` ran.
last_cpu = [0.0]


#: The same first open done by hand: Hermes' connection set-up and one read.
PLAIN_OPEN = """\
import sqlite3, sys, time
start = time.perf_counter()
conn = sqlite3.connect(sys.argv[1], timeout=1.0, isolation_level=None)
conn.execute("PRAGMA journal_mode").fetchone()
conn.execute("PRAGMA foreign_keys=ON")
conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
print(time.perf_counter() - start, False)
conn.close()
"""


def run(argv: list[str]) -> tuple[float, str]:
    """Wall-clock seconds of one fresh process, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=ENV, cwd=NEUTRAL)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    last_cpu[0] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return took, done.stdout


def medians(runs: int, commands: dict[str, list[str]]) -> dict[str, tuple[float, float]]:
    """Median wall-clock and CPU seconds of each command, run interleaved ``runs`` times
    after one warm-up."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():
        run(argv)
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(run(argv)[0])
            cpu[name].append(last_cpu[0])
    return {
        name: (statistics.median(times[name]), statistics.median(cpu[name])) for name in commands
    }


def _sid(n: int) -> str:
    """A session id shaped as Hermes makes them (22 characters: the listing shortens
    them to unique prefixes at 80 columns, one or two lookups each)."""
    return f"20260105_{n:06d}_{n * 7919 % 0xFFFFFF:06x}"


def build(path: Path, sessions: int) -> None:
    """A migrated file with ``sessions`` root sessions, one message each."""
    hermes_models.SessionDB(path).close()
    conn = sqlite3.connect(path)
    now = time.time()
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, started_at, message_count, title)"
            " VALUES (?, 'cli', ?, 1, ?)",
            [(_sid(n), now - n * 60.0, f"topic {n}") for n in range(sessions)],
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(_sid(n), f"question {n}", now - n * 60.0) for n in range(sessions)],
        )
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    python = sys.executable
    script = shutil.which("hermes-models", path=os.path.dirname(python))
    if script is None:
        raise SystemExit("the hermes-models console script is not installed beside this Python")
    folder = Path(tempfile.mkdtemp(prefix="hermes-startup-"))
    path = folder / "state.db"
    build(path, args.sessions)
    plain = folder / "plain_sessions.py"
    plain.write_text(PLAIN_SESSIONS)
    opener = folder / "open_only.py"
    opener.write_text(OPEN_ONLY)

    imports = medians(
        args.runs,
        {
            "bare": [python, "-c", "pass"],
            "peewee": [python, "-c", "import peewee"],
            # The package loads its names on first use: import the store, as users do.
            "hermes_models": [python, "-c", "from hermes_models import SessionDB"],
        },
    )
    bare, bare_cpu = imports["bare"]
    print(
        f"python -c pass                      {bare * 1e3:7.1f} ms   cpu {bare_cpu * 1e3:6.1f} ms"
    )
    for name in ("peewee", "hermes_models"):
        took, cpu = imports[name]
        print(
            f"import {name:<28} {took * 1e3:7.1f} ms   cpu {cpu * 1e3:6.1f} ms"
            f"   net of python: {(took - bare) * 1e3:6.1f} ms, cpu {(cpu - bare_cpu) * 1e3:6.1f} ms"
        )
    (ours, ours_cpu), (theirs, theirs_cpu) = imports["hermes_models"], imports["peewee"]
    print(
        f"import ratio hermes_models/peewee   whole {ours / theirs:.2f}"
        f" (cpu {ours_cpu / theirs_cpu:.2f})"
        f"   net {(ours - bare) / (theirs - bare):.2f}"
        f" (cpu {(ours_cpu - bare_cpu) / (theirs_cpu - bare_cpu):.2f})   (target <= 1.30)"
    )

    plain_opener = folder / "plain_open.py"
    plain_opener.write_text(PLAIN_OPEN)
    opens: dict[Path, list[float]] = {opener: [], plain_opener: []}
    yoyo_loaded = False
    for _ in range(args.runs):
        for script_path, times in opens.items():
            _, out = run([python, str(script_path), str(path)])
            took, loaded = out.split()
            times.append(float(took))
            yoyo_loaded = yoyo_loaded or loaded == "True"
    ours_open, plain_open = (statistics.median(opens[p]) for p in (opener, plain_opener))
    print(
        f"first open of a migrated file       {ours_open * 1e3:7.2f} ms"
        f"   yoyo imported: {yoyo_loaded}   (target < 3 ms, no yoyo)"
        f"   plain sqlite3 open + one read {plain_open * 1e3:.2f} ms"
    )

    listing = medians(
        args.runs,
        {
            "ours": [script, "sessions", "--db", str(path)],
            "plain": [python, str(plain), str(path)],
            # The same listing through click, rich and peewee (what answered it before
            # the quick path, and what answers every other command).
            "full": [python, "-m", "hermes_models", "sessions", "--db", str(path)],
        },
    )
    (ours, ours_cpu), (theirs, theirs_cpu) = listing["ours"], listing["plain"]
    print(
        f"hermes-models sessions              {ours * 1e3:7.1f} ms   plain script "
        f"{theirs * 1e3:6.1f} ms   ratio {ours / theirs:.2f}"
        f" (cpu {ours_cpu * 1e3:.1f} / {theirs_cpu * 1e3:.1f} ms: {ours_cpu / theirs_cpu:.2f})"
        "   (target <= 1.50)"
    )
    full, full_cpu = listing["full"]
    print(
        f"python -m hermes_models sessions    {full * 1e3:7.1f} ms   (the full command:"
        f" {full / theirs:.2f}x the plain script, cpu {full_cpu * 1e3:.1f} ms)"
    )
    shutil.rmtree(folder)
    shutil.rmtree(ENV["PYTHONPYCACHEPREFIX"])


if __name__ == "__main__":
    main()
