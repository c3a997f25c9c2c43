"""Beside a live gateway: Hermes v16 appending in a loop while this package adopts its
store, writes and reads, and vacuums it — against plain sqlite3 doing the same.

Hermes' released ``SessionDB`` (hermes-agent 0.17.0, installed from the package
index by ``tests/hermes_release.py``) runs in a process of its own, as a gateway
does: it fills a new store (``--sessions`` x ``--messages``, through its own
connection and triggers), then appends a message every ``--pause`` ms and times
each call. Meanwhile this process runs the phases below, one after the other:

1. ``alone``: nothing else touches the file (Hermes' own baseline);
2. ``plain writes``: a plain sqlite3 connection does what phase 4 does, in the
   simplest correct SQL (``BEGIN IMMEDIATE``, insert, counter update, ``COMMIT``;
   a ``SELECT`` of the session; an FTS5 ``MATCH``), with a 1 s busy timeout;
3. ``adopt``: ``SessionDB(path)``, the first writable open: this package's
   migrations on Hermes' file (yoyo's tables, the gram index built over every
   message, triggers, indexes);
4. ``ours``: ``append_message``, ``get_messages``, ``search_messages`` through
   ``SessionDB``, ``--rounds`` times;
5. ``hermes-models retain``: the console script erasing by a retention policy
   (``--older-than 24h --yes``: the ended sessions of the fill started over a day
   ago, each with its text scrubbed from the file, its WAL and its indexes), in
   batches of ``--batch`` sessions; the fill's sessions are first marked ended;
6. ``plain DELETE``: the simplest correct SQL deleting the next ~600 sessions
   with their messages in one transaction (no scrub: what erase adds to it);
7. ``hermes-models vacuum``: the console script, as a person runs it (its start
   included; optimize the full-text indexes, ``VACUUM``, checkpoints);
8. ``SessionDB.vacuum()``: the same in this process, on the file just compacted;
9. ``plain VACUUM``: ``VACUUM`` on a plain connection, on the same file.

Printed per phase: how long it took, Hermes' appends in it, the errors Hermes
raised, the median and slowest of its appends, and the slowest call of this side;
then whether every message either side wrote is in the file once, and what
``hermes-models doctor`` says. Ratios compare ours with plain.

Run: python benchmarks/beside_gateway.py [--sessions 2000] [--messages 20] [--pause 20]
[--rounds 200] [--batch 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from beside_hermes import Append, Appender

from hermes_models import SessionDB

SCRIPT = Path(sys.executable).parent / "hermes-models"


@dataclass
class Phase:
    """One phase: when it ran, and this side's calls in it, timed, by kind."""

    name: str
    start: float = 0.0
    end: float = 0.0
    writes: list[float] = field(default_factory=list)
    reads: list[float] = field(default_factory=list)


def timed(calls: list[float], call: Any) -> Any:
    began = time.perf_counter()
    result = call()
    calls.append(time.perf_counter() - began)
    return result


#: A session's messages, and a ranked search with snippets: what ours answers, in plain SQL.
PLAIN_MESSAGES = "SELECT * FROM messages WHERE session_id = 'plain' ORDER BY timestamp, id"
PLAIN_SEARCH = (
    "SELECT m.id, m.session_id, snippet(messages_fts, 0, '>>>', '<<<', '...', 40)"
    " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH 'asyncio' ORDER BY rank LIMIT 20"
)


def plain_round(conn: sqlite3.Connection, n: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('plain', 'user', ?, ?)",
        (f"plain {n} asyncio", time.time()),
    )
    conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = 'plain'")
    conn.execute("COMMIT")


def run(args: argparse.Namespace) -> None:
    path = Path(tempfile.mkdtemp(prefix="hermes-beside-")) / "state.db"
    appender = Appender(path, sessions=args.sessions, messages=args.messages, pause_ms=args.pause)
    phases: list[Phase] = []

    def phase(name: str, work: Any) -> None:
        current = Phase(name, start=time.time())
        work(current)
        current.end = time.time()
        phases.append(current)

    def alone(p: Phase) -> None:
        time.sleep(args.settle)

    def plain(p: Phase) -> None:
        conn = sqlite3.connect(path, timeout=1.0, isolation_level=None)
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('plain', 'cli', ?)",
            (time.time(),),
        )
        for n in range(args.rounds):
            timed(p.writes, lambda n=n: plain_round(conn, n))
            timed(p.reads, lambda: conn.execute(PLAIN_MESSAGES).fetchall())
            timed(p.reads, lambda: conn.execute(PLAIN_SEARCH).fetchall())
        conn.close()

    store: list[SessionDB] = []

    def adopt(p: Phase) -> None:
        store.append(timed(p.writes, lambda: SessionDB(path)))

    def ours(p: Phase) -> None:
        db = store[0]
        db.create_session("ours", "cli")
        for n in range(args.rounds):
            timed(p.writes, lambda n=n: db.append_message("ours", "user", f"ours {n} asyncio"))
            timed(p.reads, lambda: db.get_messages("ours"))
            timed(p.reads, lambda: db.search_messages("asyncio", limit=20))

    def retain(p: Phase) -> None:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        # The fill's sessions end (a gateway ends a conversation when the user leaves).
        conn.execute(
            "UPDATE sessions SET ended_at = started_at + 600, end_reason = 'user_exit'"
            " WHERE id LIKE 'old-%'"
        )
        conn.close()
        done = timed(
            p.writes,
            lambda: subprocess.run(
                [
                    *(str(SCRIPT), "retain", "--db", str(path), "--older-than", "24h"),
                    *("--yes", "--batch", str(args.batch), "--json"),
                ],
                capture_output=True,
                text=True,
                check=False,
            ),
        )
        if done.returncode != 0:
            print("hermes-models retain failed:", done.stderr.strip())
        else:
            record = json.loads(done.stdout)[0]
            print(
                f"retain erased {len(record['erased'])} sessions ({record['messages']} messages)"
                f" in {record['batches']} batches; WAL blocked: {record['wal_blocked']}"
            )

    def plain_delete(p: Phase) -> None:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        cutoff = time.time() - 14 * 3600
        doomed = "SELECT id FROM sessions WHERE id LIKE 'old-%' AND started_at < ?"
        count = conn.execute(f"SELECT count(*) FROM ({doomed})", (cutoff,)).fetchone()[0]

        def delete() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"DELETE FROM messages WHERE session_id IN ({doomed})", (cutoff,))
            conn.execute(f"DELETE FROM sessions WHERE id IN ({doomed})", (cutoff,))
            conn.execute("COMMIT")

        timed(p.writes, delete)
        conn.close()
        print(f"plain DELETE removed {count} sessions")

    def library_vacuum(p: Phase) -> None:
        timed(p.writes, store[0].vacuum)
        store[0].close()

    def vacuum(p: Phase) -> None:
        done = timed(
            p.writes,
            lambda: subprocess.run(
                [str(SCRIPT), "vacuum", "--db", str(path)],
                capture_output=True,
                text=True,
                check=False,
            ),
        )
        if done.returncode != 0:
            print("hermes-models vacuum failed:", done.stderr.strip())

    def plain_vacuum(p: Phase) -> None:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        timed(p.writes, lambda: conn.execute("VACUUM"))
        conn.close()

    try:
        for name, work in (
            ("alone", alone),
            ("plain writes", plain),
            ("adopt", adopt),
            ("ours", ours),
            ("settle", alone),
            ("hermes-models retain", retain),
            ("settle", alone),
            ("plain DELETE", plain_delete),
            ("settle", alone),
            ("hermes-models vacuum", vacuum),
            ("settle", alone),
            ("SessionDB.vacuum()", library_vacuum),
            ("settle", alone),
            ("plain VACUUM", plain_vacuum),
            ("settle", alone),
        ):
            phase(name, work)
    finally:
        appends = appender.stop()
    report(path, appender.filled, appends, phases, args)


def during(appends: list[Append], phase: Phase) -> list[Append]:
    """Hermes' appends that began in ``phase`` or were under way when it began."""
    return [a for a in appends if phase.start <= a.start + a.seconds and a.start <= phase.end]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def report(
    path: Path, filled: int, appends: list[Append], phases: list[Phase], args: argparse.Namespace
) -> None:
    size = os.path.getsize(path) / 1e6
    print(
        f"store: Hermes v16 filled {filled:,} messages in {args.sessions:,} sessions;"
        f" {size:.1f} MB after"
    )
    print(
        f"Hermes appended {len(appends):,} messages, one every {args.pause} ms,"
        f" over {appends[-1].start - appends[0].start:.1f} s"
    )
    print()
    print("Hermes' appends in each phase; this side's slowest write and read (`-`: none)")
    print(
        f"{'phase':<22}{'took':>11}  {'appends':>7}  {'errors':>6}  {'Hermes p50':>11}"
        f"  {'Hermes max':>11}  {'our write':>11}  {'our read':>11}"
    )
    rows = {}
    for p in phases:
        if p.name == "settle":
            continue
        mine = during(appends, p)
        latencies = sorted(a.seconds for a in mine if a.error is None) or [0.0]
        errors = sum(1 for a in mine if a.error)
        rows[p.name] = (p.end - p.start, latencies[-1], max(p.writes, default=0.0))
        write = ms(max(p.writes)) if p.writes else "-"
        read = ms(max(p.reads)) if p.reads else "-"
        print(
            f"{p.name:<22}{ms(p.end - p.start):>11}  {len(mine):>7}  {errors:>6}  "
            f"{ms(statistics.median(latencies)):>11}  {ms(latencies[-1]):>11}"
            f"  {write:>11}  {read:>11}"
        )
    print()
    ours, plain = rows["ours"], rows["plain writes"]
    vac, plain_vac = rows["SessionDB.vacuum()"], rows["plain VACUUM"]
    print(f"Hermes' slowest append beside ours / beside plain: {ours[1] / plain[1]:.2f}")
    print(f"our slowest write / plain's: {ours[2] / plain[2]:.2f}")
    print(
        "Hermes' slowest append during SessionDB.vacuum() / plain VACUUM:"
        f" {vac[1] / plain_vac[1]:.2f}"
    )
    print(f"SessionDB.vacuum() took / plain VACUUM: {vac[2] / plain_vac[2]:.2f}")
    kept, dropped = rows["hermes-models retain"], rows["plain DELETE"]
    print(
        "Hermes' slowest append during hermes-models retain / plain DELETE:"
        f" {kept[1] / dropped[1]:.2f}"
    )
    errors = [a.error for a in appends if a.error]
    print(f"errors Hermes raised: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    with SessionDB(path, read_only=True) as store:
        live = [m["id"] for m in store.get_messages("gateway-live")]
        exact = live == [a.message_id for a in appends if a.error is None]
        ours_rows = len(store.get_messages("ours"))
    print(
        f"every Hermes append in the file, once, in order: {exact};"
        f" ours: {ours_rows} of {args.rounds}"
    )
    doctor = subprocess.run(
        [str(SCRIPT), "doctor", "--db", str(path)], capture_output=True, text=True, check=False
    )
    print(f"hermes-models doctor: exit {doctor.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--pause", type=int, default=20, help="ms between Hermes' appends")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--settle", type=float, default=1.0, help="s between phases")
    parser.add_argument("--batch", type=int, default=200, help="sessions per retain batch")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
