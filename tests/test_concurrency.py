"""Many writers on one file at once: processes appending, threads and processes racing a lock."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import hermes_models
from hermes_models import CompressionLock, SessionDB
from hermes_models.driver import sqlite3

SPAWN = multiprocessing.get_context("spawn")

WRITERS = 4
APPENDS = 500
SESSION = "shared-session"


def _tool_calls(worker: int, index: int) -> list[dict[str, Any]] | None:
    """Every tenth message of a worker is an assistant turn with two tool calls."""
    if index % 10:
        return None
    return [
        {"id": f"call-{worker}-{index}-{n}", "type": "function", "function": {"name": "grep"}}
        for n in range(2)
    ]


def _append_together(path: str, worker: int, barrier: Any, results: Any) -> None:
    try:
        with SessionDB(path) as store:
            barrier.wait(timeout=120)
            started = time.monotonic()
            for index in range(APPENDS):
                calls = _tool_calls(worker, index)
                store.append_message(
                    SESSION,
                    "assistant" if calls else "user",
                    f"worker {worker} message {index}",
                    tool_calls=calls,
                )
            results.put((worker, "ok", time.monotonic() - started))
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put((worker, "error", f"{type(exc).__name__}: {exc}"))


def _run_together(target: Any, arguments: list[tuple[Any, ...]], barrier: Any) -> list[Any]:
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(*args, barrier, results)) for args in arguments]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0] * len(procs)
    return sorted(outcomes)


@pytest.mark.slow
def test_four_processes_appending_500_messages_each(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        store.create_session(SESSION, "cli")

    outcomes = _run_together(
        _append_together,
        [(str(db_path), worker) for worker in range(WRITERS)],
        SPAWN.Barrier(WRITERS),
    )
    assert [(worker, kind) for worker, kind, _ in outcomes] == [
        (worker, "ok") for worker in range(WRITERS)
    ], outcomes

    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute(
            "SELECT content, role, session_id, active FROM messages ORDER BY id"
        ).fetchall()
        counters = conn.execute(
            "SELECT message_count, tool_call_count FROM sessions WHERE id = ?", (SESSION,)
        ).fetchone()
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        indexed = [
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("messages_fts", "messages_fts_trigram")
        ]
    finally:
        conn.close()

    assert len(rows) == WRITERS * APPENDS
    expected = {
        (f"worker {w} message {i}", "assistant" if _tool_calls(w, i) else "user", SESSION, 1)
        for w in range(WRITERS)
        for i in range(APPENDS)
    }
    assert set(rows) == expected
    for worker in range(WRITERS):
        # Each writer's messages are stored in the order it appended them.
        mine = [row[0] for row in rows if row[0].startswith(f"worker {worker} ")]
        assert mine == [f"worker {worker} message {i}" for i in range(APPENDS)]
    assert counters == (WRITERS * APPENDS, WRITERS * (APPENDS // 10) * 2)
    assert integrity == [("ok",)]
    assert indexed == [WRITERS * APPENDS] * 2


def _acquire_together(path: str, holder: str, barrier: Any, results: Any) -> None:
    try:
        db = hermes_models.connect(path)
        try:
            barrier.wait(timeout=120)
            results.put((holder, CompressionLock.acquire(SESSION, holder)))
        finally:
            db.close()
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put((holder, f"{type(exc).__name__}: {exc}"))


def _holder(path: Path) -> list[tuple[str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT holder FROM compression_locks WHERE session_id = ?", (SESSION,)
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_eight_threads_racing_for_a_compression_lock_one_wins(db_path: Path) -> None:
    db = hermes_models.connect(db_path)
    barrier = threading.Barrier(8)
    results: dict[str, Any] = {}

    def race(holder: str) -> None:
        try:
            barrier.wait(timeout=30)
            results[holder] = CompressionLock.acquire(SESSION, holder)
        finally:
            db.close()

    threads = [threading.Thread(target=race, args=(f"thread-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [holder for holder, won in results.items() if won is True]
    assert sorted(results) == [f"thread-{n}" for n in range(8)]
    assert set(results.values()) == {True, False}
    assert len(winners) == 1
    assert _holder(db_path) == [(winners[0],)]
    assert CompressionLock.holder(SESSION) == winners[0]
    db.close()


@pytest.mark.slow
def test_eight_processes_racing_for_a_compression_lock_one_wins(db_path: Path) -> None:
    hermes_models.migrate(db_path)
    outcomes = _run_together(
        _acquire_together,
        [(str(db_path), f"process-{n}") for n in range(8)],
        SPAWN.Barrier(8),
    )
    assert [holder for holder, _ in outcomes] == [f"process-{n}" for n in range(8)]
    assert sorted(str(won) for _, won in outcomes) == ["False"] * 7 + ["True"]
    winners = [holder for holder, won in outcomes if won is True]
    assert _holder(db_path) == [(winners[0],)]


def _connect_together(path: str, name: str, barrier: Any, results: Any) -> None:
    try:
        barrier.wait(timeout=120)
        db = hermes_models.connect(path)
        try:
            db.write(lambda: db.execute_sql("INSERT INTO state_meta VALUES (?, 'v')", (name,)))
            results.put((name, db.journal))
        finally:
            db.close()
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put((name, f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow
def test_eight_processes_opening_one_fresh_file_all_get_wal(db_path: Path) -> None:
    names = [f"process-{n}" for n in range(8)]
    outcomes = _run_together(
        _connect_together, [(str(db_path), n) for n in names], SPAWN.Barrier(8)
    )
    assert outcomes == [(name, "wal") for name in names]
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT key FROM state_meta ORDER BY key").fetchall() == [
            (name,) for name in names
        ]
    finally:
        conn.close()


MIXED_WRITERS = 8
MIXED_APPENDS = 150
MIXED_READERS = 3


def _mixed_writer(path: str, worker: int, barrier: Any, results: Any) -> None:
    try:
        with SessionDB(path) as store:
            session_id = f"writer-{worker}"
            store.create_session(session_id, "cli" if worker % 2 else "telegram")
            barrier.wait(timeout=120)
            for index in range(MIXED_APPENDS):
                text = f"checkpoint note {index} from writer {worker} 数据库检查点"
                store.append_message(session_id, "user" if index % 2 else "assistant", text)
            results.put((f"w{worker}", "ok", MIXED_APPENDS))
    except BaseException as exc:
        results.put((f"w{worker}", "error", f"{type(exc).__name__}: {exc}"))


def _mixed_reader(path: str, reader: int, stop_after: float, barrier: Any, results: Any) -> None:
    try:
        with SessionDB(path) as store:
            barrier.wait(timeout=120)
            deadline = time.monotonic() + stop_after
            rounds = 0
            while time.monotonic() < deadline:
                hits = store.search_messages("checkpoint", limit=20)
                cjk = store.search_messages("检查点", limit=5)
                short = store.search_messages("数据", limit=5)
                listed = store.list_sessions_rich(limit=50)
                grouped = store.search_sessions("writer", limit=5)
                # Every row a reader sees is a whole row.
                assert all(
                    hit["snippet"] and hit["session_id"].startswith("writer-") for hit in hits
                )
                assert all(hit["session_id"].startswith("writer-") for hit in cjk + short)
                assert all(row["source"] in ("cli", "telegram") for row in listed)
                assert all(row["hits"] >= 1 for row in grouped)
                rounds += 1
            results.put((f"r{reader}", "ok", rounds))
    except BaseException as exc:
        results.put((f"r{reader}", "error", f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow
def test_eight_writers_and_searching_readers_at_once(db_path: Path) -> None:
    hermes_models.migrate(db_path)
    barrier = SPAWN.Barrier(MIXED_WRITERS + MIXED_READERS)
    arguments: list[tuple[Any, ...]] = [(str(db_path), w) for w in range(MIXED_WRITERS)]
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_mixed_writer, args=(*args, barrier, results)) for args in arguments
    ] + [
        SPAWN.Process(target=_mixed_reader, args=(str(db_path), r, 3.0, barrier, results))
        for r in range(MIXED_READERS)
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes = sorted(results.get(timeout=300) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert [(name, kind) for name, kind, _ in outcomes] == sorted(
        [(f"r{r}", "ok") for r in range(MIXED_READERS)]
        + [(f"w{w}", "ok") for w in range(MIXED_WRITERS)]
    ), outcomes
    assert all(rounds >= 1 for name, _, rounds in outcomes if name.startswith("r"))

    with SessionDB(db_path) as store:
        assert store.message_count() == MIXED_WRITERS * MIXED_APPENDS
        assert [
            store.get_session(f"writer-{w}")["message_count"] for w in range(MIXED_WRITERS)
        ] == [MIXED_APPENDS] * MIXED_WRITERS
        everything = store.search_messages("checkpoint", limit=None)
        assert len(everything) == MIXED_WRITERS * MIXED_APPENDS
        assert len(store.search_messages("检查点", limit=None)) == MIXED_WRITERS * MIXED_APPENDS
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        conn.close()
