"""Imports next to live writers and readers: paced transactions, sessions that appear
only when complete, a lease against concurrent imports, and clean-up after a crash.

On SQLite the lease is a ``state_meta`` row and the hidden messages sit in the file; on
PostgreSQL the lease is an advisory lock and the messages wait in a temporary table of
the import's connection (:mod:`hermes_models.transfer.pg_staging`): the tests about the row and
the file are SQLite's, each with a PostgreSQL counterpart below it."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pg_server
import pytest

import hermes_models.transfer.importer as importer_module
from hermes_models import ImportConflictError, SessionDB
from hermes_models.driver import sqlite3
from hermes_models.store.cipher import open_file
from hermes_models.store.files import sqlite_uri
from hermes_models.store.holders import local_holder
from hermes_models.transfer import pg_staging, staging
from hermes_models.transfer.bundle import FORMAT
from hermes_models.transfer.copy import copy_store

import legacy
from snapshots import store_snapshot

pytestmark = pytest.mark.backends("sqlite", "postgresql")

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
    """Append to the live session until ``stop`` exists; one lock wait of ~1 s is a failure
    (on a server: a write refused for 1 s)."""
    import hermes_models.store.writes as writes

    # The busy timeout (1 s) is all the patience this writer has; on a server, 1 s of
    # refused tries (serialization failures, run again).
    writes.WRITE_PATIENCE_S = 1.0 if path.startswith("postgresql://") else 0.0
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
    # With the store's key where the environment gives one (HERMES_TEST_ENCRYPTED=1).
    reader = open_file(sqlite_uri(Path(path), mode="ro"), uri=True)
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


def _server_reader(url: str, stop: str, expected: int, conn: Connection) -> None:
    """:func:`_reader` on a server: one snapshot a poll, words found through the index."""
    seen, torn, polls = 0, [], 0
    reader = pg_server.connect(url)
    while not os.path.exists(stop):
        with reader.transaction():
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            rows = reader.execute(
                "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m "
                "WHERE m.session_id = s.id) FROM sessions s WHERE s.id LIKE 'imp-%'"
            ).fetchall()
            hits = reader.execute(
                "SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
                " WHERE m.search_tsv @@ to_tsquery('simple', 'session')"
            ).fetchone()[0]
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
    """A child running ``target(*args, sender)``; a daemon, so that a test that fails
    before it stops the child cannot hold pytest's exit (which joins every other one)."""
    receiver, sender = SPAWN.Pipe(duplex=False)
    process = SPAWN.Process(target=target, args=(*args, sender), daemon=True)
    process.start()
    sender.close()
    return process, receiver


def _answer(process: Any, receiver: Connection) -> Any:
    assert receiver.poll(120), "the child process did not answer"
    value = receiver.recv()
    process.join(30)
    return value


# -- the tests ----------------------------------------------------------------------------


@pytest.fixture
def path(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Where the test's store is: a new file's path, or a migrated database's URL."""
    if backend == "postgresql":
        return request.getfixturevalue("pg").new_database()
    return tmp_path / "state.db"


@pytest.mark.slow
def test_a_live_writer_is_never_locked_out_and_readers_never_see_half_an_import(
    tmp_path: Path, path: Any, backend: str
) -> None:
    with SessionDB(path) as store:
        store.create_session("live", "gateway")
    bundle = write_bundle(tmp_path / "big.jsonl", sessions=20, per_session=3000)
    stop = tmp_path / "stop"
    appender = _start(_appender, str(path), str(stop))
    watch = _server_reader if backend == "postgresql" else _reader
    reader = _start(watch, str(path), str(stop), 3000)
    try:
        time.sleep(1.5)  # both children running
        started = time.monotonic()
        with SessionDB(path) as store:
            report = store.import_bundle(bundle)
        took = time.monotonic() - started
        time.sleep(0.3)
    finally:
        stop.touch()
    appends, failures, longest = _answer(*appender)
    polls, seen, torn = _answer(*reader)
    print(f"import {took:.1f} s; {appends} appends, longest {longest * 1000:.0f} ms")
    assert report["messages_added"] == 60_000
    assert failures == []
    if backend == "postgresql":  # a lock wait there is not bounded by the write's patience
        assert longest < 2.0  # no append waited behind the import
    assert torn == []
    assert (seen, polls > 20) == (20, True)
    with SessionDB(path) as store:
        assert store.get_session("live")["message_count"] == appends
        assert store.message_count() == 60_000 + appends


@pytest.mark.slow
def test_a_live_writer_beside_a_merging_copy_loses_no_message(
    tmp_path: Path, path: Any, backend: str
) -> None:
    # On a server the copy kept the source's message ids while the target's identity
    # still handed the same ids to the appender: 74 of its messages were refused. In a
    # file each batch of 20,000 messages held the write lock past the appender's 1 s.
    with SessionDB(path) as store:
        store.create_session("live", "gateway")
    source = tmp_path / "source.db"
    with SessionDB(source) as store:
        store.import_bundle(write_bundle(tmp_path / "big.jsonl", sessions=20, per_session=3000))
    stop = tmp_path / "stop"
    appender = _start(_appender, str(path), str(stop))
    try:
        time.sleep(1.5)  # the child running
        report = copy_store(source, path, merge=True)
        time.sleep(0.3)
    finally:
        stop.touch()
    appends, failures, longest = _answer(*appender)
    assert failures == []
    assert longest < 2.0  # a lock wait is not bounded by the write's patience
    assert (report.sessions_copied, report.messages_copied) == (20, 60_000)
    assert report.rows_differing == 0
    with SessionDB(path) as store:
        assert store.get_session("live")["message_count"] == appends
        assert len(store.get_messages("live")) == appends
        assert store.message_count() == 60_000 + appends
        ids = [m["id"] for m in store.get_messages("imp-0")]
    with SessionDB(source) as store:
        # Kept where free; taken, the session's messages moved past every id, in order.
        theirs = [m["id"] for m in store.get_messages("imp-0")]
    assert ids == sorted(ids) and len(ids) == len(theirs) == 3000


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # the lease row and the hidden rows in the file: below
def test_an_import_killed_midway_stays_invisible_and_the_next_one_finishes_it(
    tmp_path: Path, backend: str
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


def _import_locks(url: str) -> int:
    """How many advisory locks the server's clients hold (an import holds one)."""
    with pg_server.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        return int(row[0])


def _staged_rows(url: str) -> int:
    """Rows of the import's temporary table (the server's estimate, from outside)."""
    with pg_server.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(max(n_tup_ins), 0) FROM pg_stat_all_tables"
            " WHERE relname = 'hermes_import_messages'"
        ).fetchone()
        return int(row[0])


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``fn`` running in a thread; its result or exception lands in the dict."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # the test looks at it
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _import_in_thread(path: Any, bundle: Path) -> tuple[threading.Thread, dict[str, Any]]:
    def run() -> dict[str, Any]:
        with SessionDB(path) as store:
            report: dict[str, Any] = store.import_bundle(bundle)
            return report

    return _in_thread(run)


def _wait_for_a_lock_wait(url: str) -> None:
    """Return once a client of the test's database waits for a row lock (the import, for
    the transaction that took its key and has not ended)."""
    deadline = time.monotonic() + 60
    with pg_server.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the import never waited for the other transaction")


def _import_beside_an_open_write(path: Any, bundle: Path, statement: str) -> dict[str, Any]:
    """Import ``bundle`` while another client's transaction that ran ``statement`` is
    open; commit it once the import waits on the key it took. The import's result or
    error, as :func:`_in_thread` leaves it."""
    other = pg_server.connect(path)
    try:
        other.execute(statement)
        thread, box = _import_in_thread(path, bundle)
        _wait_for_a_lock_wait(path)  # the import's row waits on that key's index
        other.commit()
        thread.join(120)
        assert not thread.is_alive()
    finally:
        other.close()
    return box


@pytest.mark.parametrize("sessions", [2, 1200], ids=["one write", "in steps"])
@pytest.mark.backends("postgresql")  # a file has one writer at a time
def test_a_serializable_writer_open_across_a_server_import_still_commits(
    tmp_path: Path, path: Any, sessions: int
) -> None:
    # A writer of the package's kind (SERIALIZABLE) that read sessions and messages and
    # appended one, open for the whole import. Were the import serializable too, the
    # two would form a read/write cycle and the server would refuse one of them:
    # with appenders committing every few ms that was the import, on every try.
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=sessions, per_session=1)
    with SessionDB(path) as store:
        store.create_session("live", "gateway")
    with pg_server.connect(path, autocommit=True) as admin:
        # The writer's message id past the bundle's: a clash of ids is another test's.
        admin.execute("SELECT setval(pg_get_serial_sequence('messages', 'id'), 100000)")
    writer = pg_server.connect(path)
    try:
        writer.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        assert writer.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
        assert writer.execute("SELECT max(id) FROM messages").fetchone() == (None,)
        writer.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('live', 'user', 'written beside the import', 5.0)"
        )
        thread, box = _import_in_thread(path, bundle)
        thread.join(120)
        alive = thread.is_alive()
        if not alive:
            writer.commit()
    finally:
        writer.close()
    assert (alive, box.get("error")) == (False, None)
    report = box["result"]
    assert (report["sessions_added"], report["messages_added"]) == (sessions, sessions)
    with SessionDB(path) as store:
        assert [m["content"] for m in store.get_messages("live")] == ["written beside the import"]
        assert store.session_count() == sessions + 1
        assert store.message_count() == sessions + 1
        assert store.get_session("imp-0")["message_count"] == 1


@pytest.mark.parametrize("sessions", [2, 1200], ids=["one write", "in steps"])
@pytest.mark.backends("postgresql")  # a file has one writer at a time
def test_a_title_taken_on_a_server_while_an_import_adds_it_is_numbered_on_the_next_try(
    tmp_path: Path, path: Any, sessions: int
) -> None:
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=sessions, per_session=1)
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
    box = _import_beside_an_open_write(
        path, bundle, "UPDATE sessions SET title = 'imported 0' WHERE id = 'mine'"
    )
    assert "error" not in box, box.get("error")
    assert box["result"]["titles_renamed"] == 1
    with SessionDB(path) as store:
        assert store.get_session("mine")["title"] == "imported 0"
        assert store.get_session("imp-0")["title"] == "imported 0 #2"
        assert store.get_session("imp-1")["title"] == "imported 1"
        assert store.session_count() == sessions + 1


@pytest.mark.backends("postgresql")  # a file has one writer at a time
def test_a_session_added_on_a_server_while_an_import_adds_it_refuses_the_import(
    tmp_path: Path, path: Any
) -> None:
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=2, per_session=3)
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
    box = _import_beside_an_open_write(
        path, bundle, "INSERT INTO sessions (id, source, started_at) VALUES ('imp-1', 'cli', 7.0)"
    )
    assert isinstance(box.get("error"), ImportConflictError), box
    assert "session(s) 'imp-1' appeared while they were being imported" in str(box["error"])
    with SessionDB(path) as store:
        assert [s["id"] for s in store.list_sessions(limit=None)] == ["mine", "imp-1"]
        assert store.message_count() == 0
    assert _import_locks(path) == 0


@pytest.mark.parametrize(
    "appends",
    [
        pytest.param((3,), id="past-the-kept-ids"),  # set below what it handed out
        pytest.param((1, 3), id="past-them-after-the-second-read"),  # without the lock
    ],
)
@pytest.mark.backends("postgresql")  # a file has one writer at a time
def test_ids_taken_while_a_server_import_reserves_its_ids_are_not_handed_out_again(
    tmp_path: Path, path: Any, monkeypatch: pytest.MonkeyPatch, appends: tuple[int, ...]
) -> None:
    """A large import keeps the bundle's message ids (1-5 here; the store handed out 3)
    and moves the identity of ``messages.id`` past them; ids a gateway takes meanwhile
    must stay above it. The gateway appends ``appends[k]`` messages, in a thread given
    half a second, at the k-th read of the highest stored id while the import reserves
    (the second time the import holds the gateway's inserts off, and the thread
    waits), and once more right after."""
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=1, per_session=5)
    with SessionDB(path) as store:
        store.create_session("live", "gateway")
        for n in range(3):
            store.append_message("live", "user", f"before {n}")  # ids 1-3
    appended: list[int] = []
    failed: list[str] = []

    def append(count: int) -> None:
        try:
            with SessionDB(path) as gateway:
                for _ in range(count):
                    appended.append(gateway.append_message("live", "user", "meanwhile"))
        except Exception as exc:  # reported by the assertion below
            failed.append(f"{type(exc).__name__}: {exc}")

    real_raw, real_reserve = pg_staging.raw, pg_staging.ServerStaging._reserve
    threads: list[threading.Thread] = []
    reserving: list[int] = []

    def raw(sql: Any, params: Any = None) -> Any:
        cursor = real_raw(sql, params)
        if reserving and sql == pg_staging.postgres_sql.HIGHEST_MESSAGE_ID:
            if len(threads) < len(appends):
                threads.append(threading.Thread(target=append, args=(appends[len(threads)],)))
                threads[-1].start()
                threads[-1].join(0.5)
        return cursor

    def reserve(staging_: Any, upto: int) -> None:
        reserving.append(upto)
        try:
            real_reserve(staging_, upto)
        finally:
            reserving.pop()
        # The gateway appends once more before the import ends: an identity set below
        # an id in use hands that id out again.
        after = threading.Thread(target=append, args=(1,))
        after.start()
        after.join(30)

    monkeypatch.setattr(importer_module, "SMALL_IMPORT", 0)  # the staged import
    monkeypatch.setattr(pg_staging, "raw", raw)
    monkeypatch.setattr(pg_staging.ServerStaging, "_reserve", reserve)
    with SessionDB(path) as store:
        counts = store.import_bundle(bundle)
    for thread in threads:
        thread.join(30)
    assert failed == []
    assert (counts["sessions_added"], counts["messages_added"]) == (1, 5)
    with SessionDB(path) as store:
        appended.append(store.append_message("live", "user", "after"))
        live = [m["id"] for m in store.get_messages("live")]
        ids = live + [m["id"] for m in store.get_messages("imp-0")]
    assert len(threads) == len(appends)
    assert live == [1, 2, 3, *appended]
    assert len(set(ids)) == len(ids) == 3 + sum(appends) + 2 + 5


@pytest.mark.backends("postgresql")  # a file's counter moves with its rows
def test_a_failed_server_import_puts_the_message_identity_back(
    tmp_path: Path, path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import moved the identity past the bundle's ids (5; none handed out yet)
    # when it began; failing before its sessions were added, it sets it back, so no
    # ids are skipped. (Ids it took for renumbered messages are not given back.)
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=1, per_session=5)
    with SessionDB(path) as store:
        store.create_session("live", "gateway")

    def fail_move(columns: Any) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(importer_module, "SMALL_IMPORT", 0)  # the staged import
    monkeypatch.setattr(pg_staging.postgres_sql, "move_staged_messages", fail_move)
    with SessionDB(path) as store:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            store.import_bundle(bundle)
        assert store.append_message("live", "user", "next") == 1
        assert store.session_count() == 1


@pytest.mark.slow
@pytest.mark.backends("postgresql")  # the file's counterpart: above
def test_an_import_killed_midway_on_a_server_leaves_nothing_and_the_next_one_runs(
    tmp_path: Path, path: Any, pg: Any
) -> None:
    with SessionDB(path) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.append_message("mine", "user", "mine", timestamp=2.0)
    bundle = write_bundle(tmp_path / "big.jsonl", sessions=5, per_session=8000)
    child = SPAWN.Process(target=_importer, args=(str(path), str(bundle)))
    child.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _import_locks(path) == 0:
        time.sleep(0.01)
    time.sleep(0.5)  # some batches staged
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    deadline = time.monotonic() + 30  # the server notices the closed connection
    while time.monotonic() < deadline and _import_locks(path):
        time.sleep(0.05)
    assert _import_locks(path) == 0
    with SessionDB(path) as store:
        assert (store.session_count(), store.message_count()) == (1, 1)
        assert store.search_messages("session") == []
        report = store.import_bundle(bundle)
        after = store.append_message("mine", "user", "after", timestamp=3.0)
    clean = pg.new_database()
    with SessionDB(clean) as store:
        store.create_session("mine", "cli", started_at=1.0)
        store.append_message("mine", "user", "mine", timestamp=2.0)
        expected = store.import_bundle(bundle)
        assert store.append_message("mine", "user", "after", timestamp=3.0) == after
    assert report == expected
    # Message id 1 is taken here, so the first session was renumbered after the bundle's ids.
    assert (report["messages_renumbered"], after) == (8000, 48_001)
    assert store_snapshot(path) == store_snapshot(clean)


#: A child that prints the holder an import of its own would write and its pid, and exits.
_HOLDER_OF_CHILD = (
    "import os; from hermes_models.store.holders import local_holder; "
    "print(local_holder('hermes_models-import')); print(os.getpid())"
)


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


@pytest.mark.backends("sqlite")  # the lease row: the server's lock below
def test_a_second_import_while_one_runs_is_refused(tmp_path: Path, backend: str) -> None:
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


@pytest.mark.parametrize("sessions", [2, 2000], ids=["one write", "in steps"])
@pytest.mark.backends("postgresql")  # the file's lease row: above
def test_an_import_while_another_holds_the_server_lock_is_refused(
    tmp_path: Path, path: Any, sessions: int
) -> None:
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=sessions, per_session=1)
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
    before = store_snapshot(path)
    other = pg_server.connect(path, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(hashtext('hermes_models.import:public'))")
        with SessionDB(path) as store:
            with pytest.raises(
                ImportConflictError,
                match="another import into this store is running; try again when it is done",
            ):
                store.import_bundle(bundle)
        assert store_snapshot(path) == before
        # Released here, not by closing: a closed client's server process lets
        # its session locks go only when it exits, a moment later.
        other.execute("SELECT pg_advisory_unlock(hashtext('hermes_models.import:public'))")
    finally:
        other.close()
    with SessionDB(path) as store:
        assert store.import_bundle(bundle)["sessions_added"] == sessions
    assert _import_locks(path) == 0


@pytest.mark.backends("sqlite")  # a server releases the lock of a closed connection itself
def test_a_lease_left_by_a_dead_process_is_taken_over(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "state.db"
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=2, per_session=3)
    dead = subprocess.run(
        [sys.executable, "-c", _HOLDER_OF_CHILD], capture_output=True, text=True, timeout=60
    )
    assert dead.returncode == 0, dead.stderr
    holder, pid = dead.stdout.split()
    with SessionDB(path) as store:
        stale = {
            "token": "old",
            "holder": holder,
            "pid": int(pid),
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any, backend: str
) -> None:
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
        store.append_message("mine", "user", "mine")
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=3, per_session=1000)
    before = _rows(path) if backend == "sqlite" else store_snapshot(path)
    calls: list[str] = []
    if backend == "sqlite":
        real = staging.insert_rows

        def fail_third(table: str, *args: Any) -> int:
            calls.append(table)
            if len(calls) == 3:
                raise sqlite3.OperationalError("disk I/O error")
            return real(table, *args)

        monkeypatch.setattr(staging, "BATCH_ROWS", 200)
        monkeypatch.setattr(staging, "insert_rows", fail_third)
    else:
        stage = pg_staging.stage_rows

        def fail_third_batch(columns: Any, rows: Any) -> None:
            calls.append("messages")
            if len(calls) == 3:
                raise sqlite3.OperationalError("disk I/O error")
            stage(columns, rows)

        monkeypatch.setattr(pg_staging, "BATCH_ROWS", 200)
        monkeypatch.setattr(pg_staging, "stage_rows", fail_third_batch)
    with SessionDB(path) as store:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            store.import_bundle(bundle)
    assert calls == ["messages"] * 3
    assert (_rows(path) if backend == "sqlite" else store_snapshot(path)) == before
    with SessionDB(path) as store:
        assert store.append_message("mine", "user", "next") == 2
    if backend == "sqlite":  # the file's own checks
        conn = sqlite3.connect(path)
        try:
            assert legacy.fts_integrity(conn)
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            conn.close()
    else:
        assert _import_locks(path) == 0


def test_an_import_in_steps_reports_progress_up_to_the_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 200)
    monkeypatch.setattr(pg_staging, "BATCH_ROWS", 200)
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=3, per_session=1000)
    seen: list[tuple[int, int]] = []
    with SessionDB(path) as store:
        store.import_bundle(bundle, progress=lambda done, total: seen.append((done, total)))
    assert {total for _, total in seen} == {3003}
    assert [done for done, _ in seen] == sorted({done for done, _ in seen})
    assert (len(seen) > 2, seen[-1]) == (True, (3003, 3003))


@pytest.mark.backends("postgresql")  # a file has no connection to lose
def test_an_import_whose_connection_is_lost_midway_stops_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any
) -> None:
    from hermes_models.store.binding import current  # the handle the import runs on

    bundle = write_bundle(tmp_path / "b.jsonl", sessions=3, per_session=1000)
    with SessionDB(path) as store:
        store.create_session("mine", "cli")
        store.append_message("mine", "user", "mine")
    before = store_snapshot(path)
    seen: list[int] = []

    def lose_connection_after_first_batch(done: int, total: int) -> None:
        seen.append(done)
        if len(seen) == 1:
            pid = current().execute_sql("SELECT pg_backend_pid()").fetchone()[0]
            with pg_server.connect(path, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])

    monkeypatch.setattr(pg_staging, "BATCH_ROWS", 500)
    with SessionDB(path) as store:
        with pytest.raises(ImportConflictError) as caught:
            store.import_bundle(bundle, progress=lose_connection_after_first_batch)
    assert str(caught.value).endswith(
        ": the connection to the server was lost during the import; nothing was imported"
        " - run the import again"
    )
    assert seen == [500]  # the next batch ran again on a new connection, and stopped
    assert store_snapshot(path) == before
    assert _import_locks(path) == 0
    with SessionDB(path) as store:
        report = store.import_bundle(bundle)
        after = store.append_message("mine", "user", "next")
    # Message id 1 is taken, so imp-0's 1,000 messages take 3001-4000.
    assert (report["messages_added"], report["messages_renumbered"], after) == (3000, 1000, 4001)


@pytest.mark.slow
def test_memory_of_an_import_does_not_grow_with_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setattr(staging, "BATCH_BYTES", 256 * 1024)
    monkeypatch.setattr(pg_staging, "BATCH_BYTES", 256 * 1024)
    peaks = []
    for n, per_session in enumerate((1000, 4000)):
        bundle = write_bundle(
            tmp_path / f"b{n}.jsonl", sessions=2, per_session=per_session, size=1000
        )
        if backend == "postgresql":
            where: Any = request.getfixturevalue("pg").new_database()
        else:
            where = tmp_path / f"t{n}.db"
        with SessionDB(where) as store:
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
def test_colliding_titles_are_renamed_with_one_query(
    tmp_path: Path, path: Any, backend: str
) -> None:
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=300, per_session=1)
    with SessionDB(path) as store:
        for s in range(0, 600):
            store.create_session(f"old-{s}", "cli")
            title = f"imported {s // 2}" + (" #2" if s % 2 else "")
            store.set_session_title(f"old-{s}", title)
        statements: list[str] = []
        if backend == "sqlite":  # sqlite3 shows each statement; psycopg has no such hook
            store.database.connection().set_trace_callback(statements.append)
        try:
            report = store.import_bundle(bundle)
        finally:
            if backend == "sqlite":
                store.database.connection().set_trace_callback(None)
        titles = {s: store.get_session(f"imp-{s}")["title"] for s in range(300)}
    assert report["titles_renamed"] == 300
    assert titles == {s: f"imported {s} #3" for s in range(300)}
    if backend == "sqlite":
        assert len([sql for sql in statements if "s.title >= w.value" in sql]) == 1
