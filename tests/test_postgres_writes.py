"""PostgreSQL: writes from many threads and processes, the connection pool, a restarted
server, a killed client.

SQLite runs one writer at a time, and every rule of the store (counters, unique
titles, compression locks, the first end wins) was written for that. On a
server, writes run as SERIALIZABLE transactions, retried when refused; these
tests race real threads and processes against one server and check that each
rule holds exactly, that a server restart costs callers nothing, and that a
client killed in the middle of a write leaves nothing of it behind. The
handle's pool bounds the connections many threads open (counted on the
server, in ``pg_stat_activity``), takes back the connection of a thread that
ends, and replaces stale and dropped ones.
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

from hermes_models import PoolTimeoutError, SessionDB
from hermes_models.store.postgres import adapt_text, parse_url

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


def test_a_connection_lost_inside_a_write_runs_the_write_again(pg_url: str) -> None:
    # The server ends this connection's backend in the middle of a write (as a
    # restart or an idle-session killer would): the write runs again on a new
    # connection, once, and nothing of the first attempt stays.
    store = SessionDB(pg_url)
    store.create_session("s", source="cli")
    db = store.database
    attempts: list[int] = []

    def append_twice() -> None:
        attempts.append(int(db.execute_sql("SELECT pg_backend_pid()").fetchone()[0]))
        db.execute_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, %s, %s, %s)",
            ("s", "user", f"attempt {len(attempts)}", 1.0),
        )
        if len(attempts) == 1:
            with pg_server.connect(parse_url(pg_url).url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (attempts[0],))
        db.execute_sql("SELECT 1")

    store.database.write(append_twice)
    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert rows(pg_url, "SELECT content FROM messages ORDER BY id") == [("attempt 2",)]
    assert store.get_session("s") is not None  # the handle goes on working
    store.close()


# -- the pool ---------------------------------------------------------------------------------


def with_pool(url: str, app: str, **settings: Any) -> str:
    """``url`` with pool settings, its connections named ``app`` (libpq's
    application_name), so that the server counts this handle's alone: handles of
    earlier tests may still hold idle connections to a database handed out again."""
    settings["application_name"] = app
    return url + ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in settings.items())


def count_named(app: str) -> str:
    return f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"


def server_connections(url: str, app: str) -> int:
    """Connections named ``app`` on the server of ``url`` now."""
    return int(rows(url, count_named(app))[0][0])


def backend_pid(store: SessionDB) -> int:
    """The server process of this thread's connection (taken from the pool)."""
    return int(store._conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def test_sixteen_threads_share_a_pool_of_four(pg_url: str) -> None:
    done = threading.Event()
    seen: list[int] = []

    def count() -> None:
        with pg_server.connect(parse_url(pg_url).url, autocommit=True) as conn:
            while not done.is_set():
                seen.append(conn.execute(count_named("sixteen")).fetchone()[0])
                time.sleep(0.002)

    with SessionDB(with_pool(pg_url, "sixteen", max_connections=4)) as store:
        store.create_session("s", "cli")

        def calls(i: int) -> int:
            for n in range(10):
                store.append_message("s", "user", f"{i}-{n}")
                assert store.get_session("s") is not None
                store.set_meta(f"thread-{i}", str(n))
            return i

        counter = threading.Thread(target=count)
        counter.start()
        try:
            results = race(16, calls)
        finally:
            done.set()
            counter.join()
        assert results == list(range(16))  # every call of every thread succeeded
        assert store.message_count("s") == 160
        assert [store.get_meta(f"thread-{i}") for i in range(16)] == ["9"] * 16
        assert 2 <= max(seen) <= 4, max(seen)
        status = store.database.pool_status()  # type: ignore[attr-defined]
        assert status["in_use"] == 0 and status["idle"] <= 4 and status["max"] == 4
        assert server_connections(pg_url, "sixteen") == status["idle"]


def test_a_thread_that_ends_holding_a_connection_hands_it_back(pg_url: str) -> None:
    with SessionDB(with_pool(pg_url, "ends", max_connections=1, pool_timeout=0.5)) as store:
        store.create_session("s", "cli")
        held: list[int] = []
        # Raw SQL through _conn keeps the thread's connection until the thread ends.
        thread = threading.Thread(target=lambda: held.append(backend_pid(store)))
        thread.start()
        thread.join()
        started = time.monotonic()
        assert backend_pid(store) == held[0]  # the one connection, handed back
        assert time.monotonic() - started < 0.5
        assert store.get_session("s") is not None
        assert server_connections(pg_url, "ends") == 1


def test_a_thread_waits_for_a_connection_no_longer_than_pool_timeout(pg_url: str) -> None:
    with SessionDB(with_pool(pg_url, "waits", max_connections=1, pool_timeout=0.3)) as store:
        store.create_session("s", "cli")
        backend_pid(store)  # this thread holds the only connection
        failed: list[BaseException] = []

        def other() -> None:
            try:
                store.get_session("s")
            except BaseException as exc:
                failed.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert 0.3 <= time.monotonic() - started < 3
        assert len(failed) == 1 and isinstance(failed[0], PoolTimeoutError)
        assert "all 1 connections of the pool stayed in use for 0.3 s" in str(failed[0])
        store.database.release()  # type: ignore[attr-defined]
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(failed) == 1


def test_a_stale_connection_is_replaced(pg_url: str) -> None:
    with SessionDB(with_pool(pg_url, "stale", stale_timeout=1)) as store:
        store.create_session("s", "cli")
        first = backend_pid(store)
        store.database.release()  # type: ignore[attr-defined]
        assert backend_pid(store) == first
        store.database.release()  # type: ignore[attr-defined]
        time.sleep(1.1)
        second = backend_pid(store)
        assert second != first
        deadline = time.monotonic() + 10
        while rows(pg_url, f"SELECT count(*) FROM pg_stat_activity WHERE pid = {first}") != [(0,)]:
            assert time.monotonic() < deadline, "the stale connection was not closed"
            time.sleep(0.05)


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
    with SessionDB(with_pool(url, "restarted", max_connections=4)) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "before")
        seen: list[Any] = []

        def other_thread() -> None:
            seen.append(store.get_session("s"))

        # The pool holds four idle connections when the server goes away.
        race(8, lambda i: [store.get_session("s") for _ in range(5)])
        assert store.database.pool_status()["idle"] == 4  # type: ignore[attr-defined]
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
        # And once more with eight threads at once on the pool of four.
        pg_server.restart_cluster(folder)
        results = race(8, lambda i: store.append_message("s", "user", f"thread {i}"))
        assert all(isinstance(r, int) for r in results), results
        assert store.message_count("s") == 10
        assert server_connections(url, "restarted") <= 4


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


@pytest.mark.slow  # a server of its own, restarted under load
def test_a_restart_in_the_middle_of_appends_fails_none_of_them() -> None:
    server_url, folder = pg_server.start_private_cluster()
    with pg_server.connect(server_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE midload")
    url = server_url.rsplit("/", 1)[0] + "/midload"
    with SessionDB(with_pool(url, "midload", max_connections=4)) as store:
        store.create_session("s", "cli")
        failures: list[BaseException] = []
        written: list[int] = []
        stop = threading.Event()

        def append(i: int) -> None:
            for n in range(75):
                try:
                    written.append(store.append_message("s", "user", f"{i}-{n}"))
                except Exception as exc:  # every failure is counted, none may happen
                    failures.append(exc)
                stop.wait(0.01)  # 75 appends a thread over about a second

        threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        while len(written) < 20:
            time.sleep(0.005)
        pg_server.restart_cluster(folder)  # pg_ctl restart -m fast, mid-load
        assert len(written) < 300  # the restart came before the load ended
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(written) == 300
        assert store.message_count("s") == 300
