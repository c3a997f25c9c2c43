"""PostgreSQL: writes from many threads and processes, a restarted server, a killed client.

SQLite runs one writer at a time, and every rule of the store (counters, unique
titles, compression locks, the first end wins) was written for that. On a
server, writes run as SERIALIZABLE transactions, retried when refused; these
tests race real threads and processes against one server and check that each
rule holds exactly, that a server restart costs callers nothing, and that a
client killed in the middle of a write leaves nothing of it behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pg_server
import pytest

from hermes_models import SessionDB
from hermes_models.postgres import adapt_text, parse_url

pytestmark = pytest.mark.postgresql

THREADS = 8


def race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in ``n`` threads started together; their results (or exceptions)."""
    results: list[Any] = [None] * n
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with pg_server.connect(parse_url(url).url) as conn:
        adapt_text(conn)
        return list(conn.execute(sql).fetchall())


def test_counters_from_many_threads_lose_nothing(pg_url: str) -> None:
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")

        def append(i: int) -> list[int]:
            return [
                store.append_message("s", "assistant", f"{i}-{n}", tool_calls=[{"id": "c"}])
                for n in range(15)
            ]

        results = race(THREADS, append)
        ids = [message_id for found in results for message_id in found]
        assert len(ids) == len(set(ids)) == THREADS * 15
        session = store.get_session("s")
        assert session is not None
        assert (session["message_count"], session["tool_call_count"]) == (120, 120)
        assert store.message_count("s") == 120


def test_one_title_goes_to_one_session(pg_url: str) -> None:
    with SessionDB(pg_url) as store:
        for i in range(THREADS):
            store.create_session(f"s{i}", "cli")
        results = race(THREADS, lambda i: store.set_session_title(f"s{i}", "the title"))
        winners = [i for i, result in enumerate(results) if result is True]
        losers = [result for result in results if result is not True]
        assert len(winners) == 1
        assert len(losers) == THREADS - 1
        assert all(isinstance(e, ValueError) and "already in use" in str(e) for e in losers)
        assert rows(pg_url, "SELECT id FROM sessions WHERE title = 'the title'") == [
            (f"s{winners[0]}",)
        ]


def test_one_holder_takes_a_compression_lock(pg_url: str) -> None:
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")
        results = race(
            THREADS, lambda i: store.try_acquire_compression_lock("s", f"holder-{i}", 60)
        )
        assert results.count(True) == 1 and results.count(False) == THREADS - 1
        winner = f"holder-{results.index(True)}"
        assert store.get_compression_lock_holder("s") == winner


def test_the_first_end_wins(pg_url: str) -> None:
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")
        results = race(THREADS, lambda i: store.end_session("s", f"reason-{i}"))
        assert results.count(True) == 1 and results.count(False) == THREADS - 1
        session = store.get_session("s")
        assert session is not None
        assert session["end_reason"] == f"reason-{results.index(True)}"


def _append_in_process(url: str, session_id: str, n: int) -> int:
    with SessionDB(url) as store:
        for k in range(n):
            store.append_message(session_id, "user", f"{os.getpid()}-{k}")
        store.set_meta(f"done-{os.getpid()}", "yes")
    return os.getpid()


@pytest.mark.slow
def test_processes_appending_to_one_session_lose_nothing(pg_url: str) -> None:
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pids = pool.starmap(_append_in_process, [(pg_url, "s", 40)] * 4)
    with SessionDB(pg_url) as store:
        session = store.get_session("s")
        assert session is not None and session["message_count"] == 160
        assert store.message_count("s") == 160
        assert sorted(store.get_meta(f"done-{pid}") for pid in pids) == ["yes"] * 4


@pytest.mark.slow
def test_a_restarted_server_costs_callers_nothing() -> None:
    server_url, folder = pg_server.start_private_cluster()
    with pg_server.connect(server_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE restarted")
    url = server_url.rsplit("/", 1)[0] + "/restarted"
    with SessionDB(url) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "before")
        seen: list[Any] = []

        def other_thread() -> None:
            seen.append(store.get_session("s"))

        pg_server.restart_cluster(folder)
        # Every connection was cut; the next calls connect again, in this thread
        # (a read, then a write) and in another.
        assert store.get_session("s") is not None
        assert store.append_message("s", "user", "after") > 0
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert seen[0]["message_count"] == 2
        assert [m["content"] for m in store.get_messages("s")] == ["before", "after"]


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from hermes_models import SessionDB

    store = SessionDB(sys.argv[1])

    def half(conn):
        for n in range(50):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                ("s", "user", f"half {n}", 1.0),
            )
        conn.execute("UPDATE sessions SET title = 'half done' WHERE id = 's'")
        print("written", flush=True)
        time.sleep(60)

    store._execute_write(half)
    """
)


@pytest.mark.slow
def test_a_client_killed_in_a_write_leaves_nothing_of_it(pg_url: str, tmp_path: Path) -> None:
    with SessionDB(pg_url) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "kept")
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER, encoding="utf-8")
    writer = subprocess.Popen(
        [sys.executable, str(script), pg_url], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "written\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    deadline = time.monotonic() + 10
    while rows(pg_url, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in%'") != [
        (0,)
    ]:
        assert time.monotonic() < deadline, "the server kept the killed client's transaction"
        time.sleep(0.05)
    with SessionDB(pg_url) as store:
        assert [m["content"] for m in store.get_messages("s")] == ["kept"]
        assert store.get_session_title("s") is None
        assert store.message_count() == 1
