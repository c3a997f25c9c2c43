"""Imports next to live writers and readers: paced transactions, sessions that appear
only when complete, a lease against concurrent imports, and clean-up after a crash."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
import tracemalloc
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from hermes_models import ImportConflictError, SessionDB, staging
from hermes_models.bundle import FORMAT
from hermes_models.files import sqlite_uri
from hermes_models.holders import local_holder

import legacy

SPAWN = multiprocessing.get_context("spawn")


def write_bundle(path: Path, sessions: int, per_session: int, *, size: int = 40) -> Path:
    """A bundle of ``sessions`` sessions (``imp-N``, titled) with ``per_session`` messages each."""
    with open(path, "w", encoding="utf-8") as out:
        header = {
            "format": FORMAT,
            "version": 1,
            "schema_version": 16,
            "sessions": sessions,
            "messages": sessions * per_session,
        }
        out.write(json.dumps(header) + "\n")
        for s in range(sessions):
            line = {"type": "session", "id": f"imp-{s}", "source": "cli", "started_at": 1.0 + s}
            out.write(json.dumps({**line, "title": f"imported {s}"}) + "\n")
        message_id = 0
        for n in range(per_session):
            for s in range(sessions):
                message_id += 1
                role = "user" if n % 2 == 0 else "assistant"
                text = f"message {n} of session {s} " + "x" * size
                line = {
                    "type": "message",
                    "id": message_id,
                    "session_id": f"imp-{s}",
                    "role": role,
                    "content": text,
                    "timestamp": 10.0 + message_id,
                }
                out.write(json.dumps(line) + "\n")
    return path


# -- the processes ---------------------------------------------------------------------------


def _appender(path: str, stop: str, conn: Connection) -> None:
    """Append to the live session until ``stop`` exists; one lock wait of ~1 s is a failure."""
    import hermes_models.writes as writes

    writes.WRITE_PATIENCE_S = 0.0  # the busy timeout (1 s) is all the patience this writer has
    failures: list[str] = []
    waits: list[float] = []
    with SessionDB(path) as store:
        while not os.path.exists(stop):
            started = time.monotonic()
            try:
                store.append_message("live", "user", f"live {len(waits)}")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            waits.append(time.monotonic() - started)
            time.sleep(0.005)
        conn.send((len(waits), failures, max(waits)))
    conn.close()


def _reader(path: str, stop: str, expected: int, conn: Connection) -> None:
    """Watch imported sessions; each one seen must already hold all its messages."""
    seen, torn, polls = 0, [], 0
    reader = sqlite3.connect(sqlite_uri(Path(path), mode="ro"), uri=True)
    while not os.path.exists(stop):
        reader.execute("BEGIN")
        rows = reader.execute(
            "SELECT s.id, s.message_count, (SELECT COUNT(*) FROM messages m "
            "WHERE m.session_id = s.id) FROM sessions s WHERE s.id LIKE 'imp-%'"
        ).fetchall()
        hits = reader.execute(
            "SELECT COUNT(*) FROM messages_fts f JOIN messages m ON m.id = f.rowid "
            "JOIN sessions s ON s.id = m.session_id WHERE messages_fts MATCH 'session'"
        ).fetchone()[0]
        reader.execute("COMMIT")
        polls += 1
        seen = max(seen, len(rows))
        torn += [row for row in rows if row[1] != expected or row[2] != expected]
        if hits not in (0, len(rows) * expected):
            torn.append(("search", hits))
        time.sleep(0.01)
    reader.close()
    conn.send((polls, seen, torn[:5]))
    conn.close()


def _importer(path: str, bundle: str) -> None:
    with SessionDB(path) as store:
        store.import_bundle(bundle)


def _start(target: Any, *args: Any) -> tuple[Any, Connection]:
    receiver, sender = SPAWN.Pipe(duplex=False)
    process = SPAWN.Process(target=target, args=(*args, sender))
    process.start()
    sender.close()
    return process, receiver


def _answer(process: Any, receiver: Connection) -> Any:
    assert receiver.poll(120), "the child process did not answer"
    value = receiver.recv()
    process.join(30)
    return value


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_live_writer_is_never_locked_out_and_readers_never_see_half_an_import(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("live", "gateway")
    bundle = write_bundle(tmp_path / "big.jsonl", sessions=20, per_session=3000)
    stop = tmp_path / "stop"
    appender = _start(_appender, str(path), str(stop))
    reader = _start(_reader, str(path), str(stop), 3000)
    time.sleep(1.5)  # both children running
    started = time.monotonic()
    with SessionDB(path) as store:
        report = store.import_bundle(bundle)
    took = time.monotonic() - started
    time.sleep(0.3)
    stop.touch()
    appends, failures, longest = _answer(*appender)
    polls, seen, torn = _answer(*reader)
    print(f"import {took:.1f} s; {appends} appends, longest {longest * 1000:.0f} ms")
    assert report["messages_added"] == 60_000
    assert failures == []
    assert torn == []
    assert (seen, polls > 20) == (20, True)
    with SessionDB(path) as store:
        assert store.get_session("live")["message_count"] == appends
        assert store.message_count() == 60_000 + appends


@pytest.mark.slow
def test_an_import_killed_midway_stays_invisible_and_the_next_one_finishes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.append_message("mine", "user", "mine", timestamp=2.0)
    bundle = write_bundle(tmp_path / "big.jsonl", sessions=5, per_session=8000)
    child = SPAWN.Process(target=_importer, args=(str(path), str(bundle)))
    child.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lease = _lease(path)
        if lease and lease.get("ranges"):
            break
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    conn = sqlite3.connect(path)
    try:
        hidden = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
        ).fetchone()[0]
        assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert legacy.fts_integrity(conn)
    finally:
        conn.close()
    assert hidden > 0
    with SessionDB(path) as store:
        assert store.search_messages("session") == []
        assert [s["id"] for s in store.list_sessions(limit=None)] == ["mine"]
        report = store.import_bundle(bundle)
        after = store.append_message("mine", "user", "after", timestamp=3.0)
    clean = tmp_path / "clean.db"
    with SessionDB(clean) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.append_message("mine", "user", "mine", timestamp=2.0)
        expected = store.import_bundle(bundle)
        assert store.append_message("mine", "user", "after", timestamp=3.0) == after
    assert report == expected
    # Message id 1 is taken here, so the first session was renumbered after the bundle's ids.
    assert (report["messages_renumbered"], after) == (8000, 48_001)
    assert _rows(path) == _rows(clean)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT key FROM state_meta").fetchall() == []
    finally:
        conn.close()


def _holder_of_child(conn: Connection) -> None:
    conn.send(local_holder("hermes_models-import"))
    conn.close()


def _lease(path: Path) -> dict[str, Any] | None:
    conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT value FROM state_meta WHERE key = ?", (staging.LEASE_KEY,)
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return None if row is None else dict(json.loads(row[0]))


def _rows(path: Path) -> dict[str, Any]:
    dump = legacy.dump(path)
    return {name: dump[name] for name in ("sessions", "messages", "sqlite_sequence", "state_meta")}


def test_a_second_import_while_one_runs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=2, per_session=3)
    with SessionDB(path) as store:
        store.set_meta(
            staging.LEASE_KEY,
            json.dumps(
                {
                    "token": "other",
                    "holder": local_holder("another-import"),
                    "pid": os.getpid(),
                    "expires": time.time() + 60,
                    "sessions": ["x"],
                }
            ),
        )
        before = legacy.dump(path)
        with pytest.raises(
            ImportConflictError,
            match=f"another import into this file is running \\(process {os.getpid()}",
        ):
            store.import_bundle(bundle)
        assert legacy.dump(path) == before


def test_a_lease_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=2, per_session=3)
    receiver, sender = SPAWN.Pipe(duplex=False)
    dead = SPAWN.Process(target=_holder_of_child, args=(sender,))
    dead.start()
    sender.close()
    holder = receiver.recv()
    dead.join()
    with SessionDB(path) as store:
        stale = {
            "token": "old",
            "holder": holder,
            "pid": dead.pid,
            "expires": time.time() + 60,
            "sessions": ["imp-0"],
            "ranges": [[1, 3]],
            "sequence": None,
        }
        store.set_meta(staging.LEASE_KEY, json.dumps(stale))
        assert store.import_bundle(bundle)["sessions_added"] == 2
        assert store.get_meta(staging.LEASE_KEY) is None
        assert store.get_session("imp-0")["message_count"] == 3


def test_a_failure_midway_removes_every_row_written_and_the_id_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
        store.append_message("mine", "user", "mine")
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=3, per_session=1000)
    before = _rows(path)
    real, calls = staging.insert_rows, []

    def fail_third(table: str, *args: Any) -> int:
        calls.append(table)
        if len(calls) == 3:
            raise sqlite3.OperationalError("disk I/O error")
        return real(table, *args)

    monkeypatch.setattr(staging, "BATCH_ROWS", 200)
    monkeypatch.setattr(staging, "insert_rows", fail_third)
    with SessionDB(path) as store:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            store.import_bundle(bundle)
    assert calls == ["messages"] * 3
    assert _rows(path) == before
    with SessionDB(path) as store:
        assert store.append_message("mine", "user", "next") == 2
    conn = sqlite3.connect(path)
    try:
        assert legacy.fts_integrity(conn)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


@pytest.mark.slow
def test_memory_of_an_import_does_not_grow_with_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_BYTES", 256 * 1024)
    peaks = []
    for n, per_session in enumerate((1000, 4000)):
        bundle = write_bundle(
            tmp_path / f"b{n}.jsonl", sessions=2, per_session=per_session, size=1000
        )
        with SessionDB(tmp_path / f"t{n}.db") as store:
            tracemalloc.start()
            try:
                store.import_bundle(bundle)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
    # 2 MB and 8 MB of messages; what is held at once is one batch (256 KiB of text).
    assert peaks[1] < peaks[0] * 1.3, peaks
    assert peaks[1] < 3 * 1024 * 1024, peaks


@pytest.mark.slow
def test_colliding_titles_are_renamed_with_one_query(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=300, per_session=1)
    with SessionDB(path) as store:
        for s in range(0, 600):
            store.create_session(f"old-{s}", "cli")
            title = f"imported {s // 2}" + (" #2" if s % 2 else "")
            store.set_session_title(f"old-{s}", title)
        statements: list[str] = []
        store.database.connection().set_trace_callback(statements.append)
        try:
            report = store.import_bundle(bundle)
        finally:
            store.database.connection().set_trace_callback(None)
        titles = {s: store.get_session(f"imp-{s}")["title"] for s in range(300)}
    assert report["titles_renamed"] == 300
    assert titles == {s: f"imported {s} #3" for s in range(300)}
    assert len([sql for sql in statements if "s.title >= w.value" in sql]) == 1
