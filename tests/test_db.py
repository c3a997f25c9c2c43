"""The database handle: targets, connection set-up, WAL fallback, init errors, the write helper."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import peewee
import pytest

import hermes_models
from hermes_models import (
    HermesDatabase,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SessionDB,
    StateMeta,
    WriteConflictError,
    driver,
    format_db_unavailable,
    get_last_init_error,
)
from hermes_models.driver import sqlite3
from hermes_models.store import binding as binding_module
from hermes_models.store import connection as connection_module
from hermes_models.store import db as db_module
from hermes_models.store import journal as journal_module
from hermes_models.store import writes as writes_module
from hermes_models.store.db import MEMO_ENTRIES, record_init_error
from hermes_models.store.files import resolve_path
from hermes_models.store.statements import Prepared

MIGRATE_MODULE = sys.modules["hermes_models.store.schema"]

EXPECTED_PRAGMAS = {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 1000}

NFS_HINT = " (state.db may be on NFS/SMB/FUSE \u2014 see https://www.sqlite.org/wal.html)"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _pragmas(db: HermesDatabase) -> dict[str, Any]:
    return {name: db.execute_sql(f"PRAGMA {name}").fetchone()[0] for name in EXPECTED_PRAGMAS}


def _meta(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT key, value FROM state_meta ORDER BY key").fetchall()
    finally:
        conn.close()


def _insert(db: HermesDatabase, key: str, value: str = "v") -> Callable[[], int]:
    def run() -> int:
        return int(db.execute_sql("INSERT INTO state_meta VALUES (?, ?)", (key, value)).rowcount)

    return run


@contextlib.contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holds the write lock (BEGIN IMMEDIATE) until the block ends."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            held.set()
            release.wait(timeout=30)
            conn.execute("COMMIT")
        finally:
            conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(timeout=10)
        yield
    finally:
        release.set()
        thread.join(timeout=30)


def _release_after(seconds: float, path: Path) -> tuple[threading.Thread, threading.Event]:
    """Hold the write lock from another connection for ``seconds`` in a thread."""
    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            held.set()
            time.sleep(seconds)
            conn.execute("COMMIT")
        finally:
            conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(timeout=10)
    return thread, held


@pytest.fixture
def fresh_last_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No init error recorded yet (the process-wide value is restored afterwards)."""
    monkeypatch.setattr(db_module, "_last_init_error", None)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Records every retry pause of the write helper (the pause itself still happens)."""
    taken: list[float] = []
    real = writes_module._jitter

    def jitter() -> None:
        taken.append(time.monotonic())
        real()

    monkeypatch.setattr(writes_module, "_jitter", jitter)
    return taken


@pytest.fixture
def traced(database: HermesDatabase) -> Iterator[list[str]]:
    """Every statement the main thread's connection runs while the test runs."""
    statements: list[str] = []
    conn = database.connection()
    # A connection's first write installs the gram index's TEMP triggers (tested in
    # test_grams); done here first, so that a trace shows the write path alone.
    database.ensure_grams()
    conn.set_trace_callback(statements.append)
    yield statements
    conn.set_trace_callback(None)


# -- targets ---------------------------------------------------------------------


def test_connect_without_target_uses_hermes_home_and_creates_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "deep" / "er" / "home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    db = hermes_models.connect()
    try:
        assert db.path == home / "state.db"
        assert db.path.is_file()
        assert db.execute_sql("SELECT version FROM schema_version").fetchall() == [(16,)]
    finally:
        db.close()


def test_hermes_home_defaults_to_dot_hermes_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERMES_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert resolve_path() == tmp_path / "user" / ".hermes" / "state.db"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "elsewhere"))
    assert resolve_path() == tmp_path / "elsewhere" / "state.db"


def test_sqlite_urls_name_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_path(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"
    assert resolve_path("sqlite:///relative.db") == tmp_path / "relative.db"
    assert resolve_path("SQLITE:///relative.db") == tmp_path / "relative.db"
    assert resolve_path(Path("plain.db")) == tmp_path / "plain.db"

    db = hermes_models.connect(f"sqlite:///{tmp_path}/a.db")
    try:
        assert db.path == tmp_path / "a.db"
        assert hermes_models.connect(tmp_path / "a.db") is db
        assert db.execute_sql("SELECT version FROM schema_version").fetchall() == [(16,)]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("target", "error"),
    [
        (42, TypeError),
        (b"state.db", TypeError),
        (["state.db"], TypeError),
        ("", ValueError),
        ("   ", ValueError),
        (":memory:", ValueError),
        ("file::memory:?cache=shared", ValueError),
        ("postgres://x", ValueError),
        ("sqlite:///", ValueError),
        ("bad\x00name.db", ValueError),
    ],
)
def test_bad_targets_are_rejected_naming_target(target: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="target"):
        hermes_models.connect(target)
    with pytest.raises(error, match="target"):
        hermes_models.migrate(target)


@pytest.mark.parametrize(
    ("options", "error", "argument"),
    [
        ({"read_only": "false"}, TypeError, "read_only"),
        ({"read_only": None}, TypeError, "read_only"),
        ({"migrate": "x"}, TypeError, "migrate"),
        ({"migrate": 2}, ValueError, "migrate"),
    ],
)
def test_bad_flags_of_connect_are_refused_naming_them_and_nothing_is_opened(
    tmp_path: Path, options: dict[str, Any], error: type[Exception], argument: str
) -> None:
    # "false" is true to Python: the file would be opened read-only, the models bound.
    path = tmp_path / "state.db"
    with pytest.raises(error, match=f"^{argument} must be"):
        hermes_models.connect(path, **options)
    assert not path.exists()


def test_connecting_twice_returns_the_same_handle_without_migrating_again(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = hermes_models.connect(db_path)
    calls: list[Path] = []
    monkeypatch.setattr(MIGRATE_MODULE, "migrate", lambda path: calls.append(path) or [])
    try:
        assert hermes_models.connect(db_path) is first
        assert hermes_models.connect(str(db_path)) is first
        assert hermes_models.connect(f"sqlite:///{db_path}") is first
        assert calls == []
    finally:
        first.close()


def test_models_are_bound_to_the_last_connected_database(tmp_path: Path) -> None:
    a = hermes_models.connect(tmp_path / "a.db")
    b = hermes_models.connect(tmp_path / "b.db")
    try:
        assert binding_module.current() is b
        StateMeta.set_value("where", "b")
        assert hermes_models.connect(tmp_path / "a.db") is a
        assert binding_module.current() is a
        StateMeta.set_value("where", "a")
        assert StateMeta.get_value("where") == "a"
        assert _meta(tmp_path / "a.db") == [("where", "a")]
        assert _meta(tmp_path / "b.db") == [("where", "b")]
    finally:
        a.close()
        b.close()


# -- connection set-up ----------------------------------------------------------------


def test_every_thread_connection_gets_the_pragmas(database: HermesDatabase) -> None:
    main_conn = database.connection()
    seen: list[tuple[bool, dict[str, Any]]] = []

    def run() -> None:
        try:
            seen.append((database.connection() is not main_conn, _pragmas(database)))
        finally:
            database.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _pragmas(database) == EXPECTED_PRAGMAS
    assert seen == [(True, EXPECTED_PRAGMAS)] * 3


def test_install_once_runs_once_per_connection_and_again_on_a_new_one(tmp_path: Path) -> None:
    database = hermes_models.connect(tmp_path / "state.db")
    ran: list[tuple[str, int]] = []

    def install(name: str) -> Callable[[sqlite3.Connection], None]:
        def run(conn: sqlite3.Connection) -> None:
            ran.append((name, id(conn)))
            conn.create_function(name, 0, lambda: 7)

        return run

    first = database.connection()
    for _ in range(3):
        database.install_once("seven", install("seven"))
    database.install_once("eight", install("eight"))
    assert ran == [("seven", id(first)), ("eight", id(first))]
    assert tuple(first.execute("SELECT seven(), eight()").fetchone()) == (7, 7)

    other: list[Any] = []

    def in_a_thread() -> None:  # a thread has its own connection: installed there too
        try:
            database.install_once("seven", install("seven"))
            other.append(database.connection().execute("SELECT seven()").fetchone()[0])
        finally:
            database.close()

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert other == [7] and len(ran) == 3 and ran[2][0] == "seven"

    database.close()  # a new connection of this thread has none of them
    database.install_once("seven", install("seven"))
    assert [name for name, _ in ran] == ["seven", "eight", "seven", "seven"]
    assert tuple(database.connection().execute("SELECT seven()").fetchone()) == (7,)
    with pytest.raises(sqlite3.OperationalError, match="no such function: eight"):
        database.connection().execute("SELECT eight()")
    database.close()


def test_while_unchanged_keeps_a_value_until_a_commit_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    database = hermes_models.connect(path)
    computed: list[str] = []

    def value(key: str) -> Callable[[], str]:
        def compute() -> str:
            computed.append(key)
            return f"{key}{len(computed)}"

        return compute

    assert database.while_unchanged("a", value("a")) == "a1"
    assert database.while_unchanged("a", value("a")) == "a1"  # kept
    assert database.while_unchanged("b", value("b")) == "b2"
    assert computed == ["a", "b"]
    other = sqlite3.connect(path)  # another connection commits: everything is forgotten
    with other:
        other.execute("INSERT INTO state_meta VALUES ('k', 'v')")
    assert database.while_unchanged("a", value("a")) == "a3"
    assert database.while_unchanged("b", value("b")) == "b4"
    with database.atomic():  # so does a commit of this connection
        database.execute_sql("DELETE FROM state_meta")
    assert database.while_unchanged("a", value("a")) == "a5"
    assert database.while_unchanged("a", value("a")) == "a5"
    with other:  # a read by another connection changes nothing
        other.execute("SELECT count(*) FROM state_meta").fetchall()
    assert database.while_unchanged("a", value("a")) == "a5"
    # Inside a transaction nothing is kept nor reused: a change read there may be
    # rolled back, and a rollback leaves the change count as it was.
    with pytest.raises(RuntimeError, match="rolled back"), database.atomic():
        database.execute_sql("INSERT INTO state_meta VALUES ('t', 'v')")
        assert database.while_unchanged("a", value("a")) == "a6"
        assert database.while_unchanged("a", value("a")) == "a7"
        raise RuntimeError("rolled back")
    assert database.while_unchanged("a", value("a")) == "a8"
    other.close()
    for k in range(MEMO_ENTRIES + 1):  # bounded: past MEMO_ENTRIES values, it starts over
        database.while_unchanged(k, lambda k=k: k)
    assert database.while_unchanged("a", value("a")) == "a9"
    database.forget_kept()
    assert database.while_unchanged("a", value("a")) == "a10"
    database.close()  # a new connection knows nothing yet
    assert database.while_unchanged("a", value("a")) == "a11"
    database.close()


def test_foreign_keys_are_enforced(database: HermesDatabase) -> None:
    with pytest.raises(peewee.IntegrityError, match="FOREIGN KEY"):
        database.write(
            lambda: database.execute_sql(
                "INSERT INTO messages (session_id, role, timestamp) VALUES ('nope', 'user', 1)"
            )
        )
    assert database.execute_sql("SELECT count(*) FROM messages").fetchone() == (0,)


def test_created_files_are_private_whatever_the_umask(db_path: Path) -> None:
    old = os.umask(0)
    try:
        db = hermes_models.connect(db_path)
        db.write(_insert(db, "k"))
        names = sorted(os.listdir(db_path.parent))
        modes = {name: oct(_mode(db_path.parent / name)) for name in names}
        db.close()
    finally:
        os.umask(old)
    assert modes == {"state.db": "0o600", "state.db-shm": "0o600", "state.db-wal": "0o600"}


def test_an_existing_file_keeps_its_mode_and_its_sidecars_no_more_open(db_path: Path) -> None:
    # The package never changes the mode of a file it did not create (doctor --fix does,
    # when asked); a sidecar that lets others read more than the database is tightened
    # to the database's mode, without breaking the other connection's locks.
    hermes_models.migrate(db_path)
    os.chmod(db_path, 0o640)
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("PRAGMA journal_mode=WAL")
        other.execute("INSERT INTO state_meta VALUES ('before', 'x')")
        for suffix in ("-wal", "-shm"):
            os.chmod(f"{db_path}{suffix}", 0o644)
        db = hermes_models.connect(db_path)
        modes = {name: oct(_mode(db_path.parent / name)) for name in os.listdir(db_path.parent)}
        assert modes == {"state.db": "0o640", "state.db-shm": "0o640", "state.db-wal": "0o640"}
        # The other connection still holds its locks and keeps working.
        db.write(_insert(db, "during"))
        other.execute("INSERT INTO state_meta VALUES ('after', 'x')")
        db.close()
    finally:
        other.close()
    assert _meta(db_path) == [("after", "x"), ("before", "x"), ("during", "v")]


# -- WAL fallback ---------------------------------------------------------------------


def _refuse_wal(message: str, calls: list[int]) -> Callable[[sqlite3.Connection], str]:
    def refuse(conn: sqlite3.Connection) -> str:
        calls.append(1)
        raise sqlite3.OperationalError(message)

    return refuse


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "hermes_models" and record.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("marker", ["locking protocol", "not authorized"])
def test_wal_falls_back_to_delete_with_one_warning_per_database(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    marker: str,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(journal_module, "_request_wal", _refuse_wal(marker, calls))
    caplog.set_level(logging.WARNING, logger="hermes_models")
    first, second = tmp_path / "nfs.db", tmp_path / "smb.db"

    db = hermes_models.connect(first)
    assert db.journal == "delete"
    assert db.execute_sql("PRAGMA journal_mode").fetchone() == ("delete",)
    db.write(_insert(db, "main"))

    def in_thread(key: str) -> None:
        try:
            assert db.execute_sql("PRAGMA journal_mode").fetchone() == ("delete",)
            db.write(_insert(db, key))
        finally:
            db.close()

    threads = [threading.Thread(target=in_thread, args=(f"thread-{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other = hermes_models.connect(second)
    other.write(_insert(other, "other"))
    db.close()
    other.close()
    again = hermes_models.connect(first)  # a new connection does not warn again
    assert again.execute_sql("PRAGMA journal_mode").fetchone() == ("delete",)
    again.close()

    warnings = _warnings(caplog)
    assert [(str(first) in w, str(second) in w, marker in w) for w in warnings] == [
        (True, False, True),
        (False, True, True),
    ]
    # A new file's first connection asks for WAL; the file then has content in DELETE
    # mode, which later connections keep without asking again.
    assert len(calls) == 2
    assert _meta(first) == [("main", "v"), ("thread-0", "v"), ("thread-1", "v"), ("thread-2", "v")]
    assert _meta(second) == [("other", "v")]
    assert sorted(os.listdir(tmp_path)) == ["nfs.db", "smb.db"]


def test_other_journal_errors_propagate(
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_last_error: None,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(journal_module, "_request_wal", _refuse_wal("disk I/O error", calls))
    caplog.set_level(logging.WARNING, logger="hermes_models")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        hermes_models.connect(db_path)
    assert calls == [1]
    assert _warnings(caplog) == []
    assert get_last_init_error() == "OperationalError: disk I/O error"


def test_a_wal_file_is_never_switched(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hermes_models.migrate(db_path)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    calls: list[int] = []
    monkeypatch.setattr(journal_module, "_request_wal", _refuse_wal("locking protocol", calls))
    caplog.set_level(logging.WARNING, logger="hermes_models")

    db = hermes_models.connect(db_path)
    try:
        assert db.journal == "wal"
        assert _pragmas(db) == EXPECTED_PRAGMAS
        db.write(_insert(db, "k"))
    finally:
        db.close()
    assert calls == []
    assert _warnings(caplog) == []


# -- init errors --------------------------------------------------------------------------


@pytest.mark.slow  # a new Python process
def test_no_init_error_in_a_new_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import hermes_models; print(hermes_models.get_last_init_error())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout == "None\n"


def test_init_error_is_recorded_and_survives_a_later_success(
    tmp_path: Path, fresh_last_error: None
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all\n")
    with pytest.raises(NotADatabaseError):
        hermes_models.connect(junk)
    expected = f"NotADatabaseError: {junk} is not an SQLite database"
    assert get_last_init_error() == expected

    hermes_models.connect(tmp_path / "good.db").close()
    assert get_last_init_error() == expected

    with pytest.raises(ValueError):
        hermes_models.connect("")
    assert get_last_init_error() == "ValueError: target: empty database path"


def test_format_db_unavailable_without_a_cause(fresh_last_error: None) -> None:
    assert format_db_unavailable() == "Session database not available."
    assert format_db_unavailable("State store down") == "State store down."


def test_format_db_unavailable_with_a_cause(tmp_path: Path, fresh_last_error: None) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("hello")
    with pytest.raises(NotADatabaseError):
        hermes_models.connect(junk)
    assert format_db_unavailable() == (
        f"Session database not available: NotADatabaseError: {junk} is not an SQLite database."
    )
    assert format_db_unavailable("Cannot search") == (
        f"Cannot search: NotADatabaseError: {junk} is not an SQLite database."
    )


@pytest.mark.parametrize("marker", ["locking protocol", "not authorized"])
def test_format_db_unavailable_hints_at_network_file_systems(
    marker: str, fresh_last_error: None
) -> None:
    record_init_error(sqlite3.OperationalError(marker))
    assert format_db_unavailable() == (
        f"Session database not available: OperationalError: {marker}{NFS_HINT}."
    )


def test_init_error_names_the_sqlite_cause_of_a_peewee_error(fresh_last_error: None) -> None:
    record_init_error(
        peewee.OperationalError(sqlite3.OperationalError("unable to open database file"))
    )
    assert get_last_init_error() == "OperationalError: unable to open database file"


@pytest.mark.parametrize(
    "content",
    [b"just some text\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4080, b"\x00" * 10],
    ids=["text", "bad-pages", "zeros"],
)
def test_a_file_that_is_not_sqlite_is_refused_untouched(db_path: Path, content: bytes) -> None:
    db_path.write_bytes(content)
    os.chmod(db_path, 0o644)
    digest = _digest(db_path)
    with pytest.raises(NotADatabaseError, match="not an SQLite database"):
        hermes_models.connect(db_path)
    with pytest.raises(NotADatabaseError, match="not an SQLite database"):
        hermes_models.migrate(db_path)
    with pytest.raises(NotADatabaseError, match="not an SQLite database"):
        hermes_models.connect(db_path, read_only=True)
    assert _digest(db_path) == digest
    assert _mode(db_path) == 0o644
    assert os.listdir(db_path.parent) == [db_path.name]


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(NotADatabaseError, match="is a directory"):
        hermes_models.connect(tmp_path / "dir.db")


# -- the write helper ---------------------------------------------------------------------


def test_write_runs_in_begin_immediate(database: HermesDatabase, traced: list[str]) -> None:
    assert database.write(_insert(database, "k")) == 1
    assert traced == ["BEGIN IMMEDIATE", "INSERT INTO state_meta VALUES ('k', 'v')", "COMMIT"]


def test_module_write_uses_the_bound_database(database: HermesDatabase, traced: list[str]) -> None:
    assert hermes_models.write(_insert(database, "k")) == 1
    assert traced[0] == "BEGIN IMMEDIATE"
    assert _meta(database.path) == [("k", "v")]


@pytest.mark.slow  # waits for another connection's lock
def test_write_retries_while_another_connection_holds_the_lock(
    database: HermesDatabase, pauses: list[float]
) -> None:
    # A short busy timeout makes each attempt give up quickly, so the retry
    # loop (not SQLite's busy handler) has to wait the lock out.
    database.execute_sql("PRAGMA busy_timeout = 50")
    runs: list[int] = []
    insert = _insert(database, "k")

    def run() -> int:
        runs.append(1)
        return insert()

    holder, _ = _release_after(0.3, database.path)
    started = time.monotonic()
    try:
        assert database.write(run) == 1
    finally:
        holder.join()
    elapsed = time.monotonic() - started
    assert runs == [1]  # BEGIN IMMEDIATE was refused before the callback ran
    assert len(pauses) >= 2
    assert 0.25 < elapsed < 2.0
    assert _meta(database.path) == [("k", "v")]


def test_pauses_are_random_between_20_and_150_ms(
    database: HermesDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(writes_module.time, "sleep", slept.append)
    attempts: list[int] = []

    def run() -> int:
        attempts.append(1)
        if len(attempts) < 12:
            raise sqlite3.OperationalError("database is locked")
        return 7

    assert database.write(run) == 7
    assert len(slept) == 11
    assert all(0.020 <= s <= 0.150 for s in slept)
    assert len(set(slept)) == 11


def test_a_lock_error_inside_the_callback_reruns_it_from_scratch(
    database: HermesDatabase, pauses: list[float]
) -> None:
    runs: list[int] = []

    def run() -> str:
        runs.append(1)
        database.execute_sql("INSERT INTO state_meta VALUES (?, 'v')", (f"try-{len(runs)}",))
        if len(runs) < 3:
            raise peewee.OperationalError("database table is locked")
        return "ok"

    assert database.write(run) == "ok"
    assert (len(runs), len(pauses)) == (3, 2)
    assert _meta(database.path) == [("try-3", "v")]


@pytest.mark.slow  # waits out its patience
def test_write_gives_up_with_write_conflict_error_once_its_patience_ran_out(
    database: HermesDatabase, pauses: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WRITE_PATIENCE_S", 0.3)
    database.execute_sql("PRAGMA busy_timeout = 50")
    runs: list[int] = []

    def run() -> None:
        runs.append(1)

    with _write_lock_held(database.path):
        started = time.monotonic()
        with pytest.raises(WriteConflictError) as caught:
            database.write(run)
        waited = time.monotonic() - started
    assert isinstance(caught.value, sqlite3.OperationalError)
    message = str(caught.value)
    found = re.fullmatch(
        rf"database is locked: {re.escape(str(database.path))} stayed locked by other "
        r"writers for (\d+\.\d) s \((\d+) attempts; patience 0\.3 s\)",
        message,
    )
    assert found, message
    # It gave up only after its patience, and says how long it waited and how often it tried.
    assert waited >= 0.3
    assert abs(float(found[1]) - waited) <= 0.1  # the time it waited, to a tenth of a second
    assert int(found[2]) == len(pauses) + 1 >= 2
    assert runs == []  # BEGIN IMMEDIATE was refused every time
    assert database.write(_insert(database, "after")) == 1


def test_write_conflict_after_the_callback_kept_failing(
    database: HermesDatabase, pauses: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WRITE_PATIENCE_S", 0.2)
    runs: list[int] = []

    def run() -> None:
        runs.append(1)
        database.execute_sql("INSERT INTO state_meta VALUES ('k', 'v')")
        raise sqlite3.OperationalError("database is busy")

    with pytest.raises(WriteConflictError, match="locked") as caught:
        database.write(run)
    assert len(runs) == len(pauses) + 1 >= 2
    assert f"({len(runs)} attempts; patience 0.2 s)" in str(caught.value)
    assert _meta(database.path) == []


def test_the_patience_is_a_time_not_a_count_of_attempts(
    database: HermesDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pauses that take no time leave the patience untouched: the write keeps trying
    (here 200 times, far past the 15 attempts of Hermes v16) until it gets through."""
    monkeypatch.setattr(writes_module, "_jitter", lambda: None)
    runs: list[int] = []

    def run() -> int:
        runs.append(1)
        if len(runs) < 200:
            raise sqlite3.OperationalError("database is locked")
        return _insert(database, "k")()

    assert database.write(run) == 1
    assert len(runs) == 200
    assert _meta(database.path) == [("k", "v")]


@pytest.mark.slow  # waits out its patience
def test_retry_locked_retries_until_its_patience_ran_out(
    database: HermesDatabase, pauses: list[float]
) -> None:
    calls: list[int] = []

    def locked() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        writes_module.retry_locked(locked, patience=0.2)
    assert time.monotonic() - started >= 0.2
    assert len(calls) == len(pauses) + 1 >= 2

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 5:
            raise peewee.OperationalError("database is busy")
        return "done"

    calls.clear()
    with pytest.raises(peewee.OperationalError, match="busy"):
        writes_module.retry_locked(flaky, patience=0)  # no patience: the first lock error is raised
    assert len(calls) == 1
    calls.clear()
    assert writes_module.retry_locked(flaky) == "done"
    assert len(calls) == 5
    calls.clear()

    def missing() -> None:
        calls.append(1)
        database.execute_sql("SELECT * FROM nowhere")

    with pytest.raises(peewee.OperationalError, match="no such table"):
        writes_module.retry_locked(missing)
    assert len(calls) == 1  # not a lock error: never retried


@pytest.mark.parametrize(
    "error",
    [
        peewee.IntegrityError("UNIQUE constraint failed: state_meta.key"),
        sqlite3.OperationalError("no such table: nowhere"),
        ValueError("bad argument"),
    ],
    ids=["integrity", "operational", "value"],
)
def test_other_errors_roll_back_and_propagate_at_once(
    database: HermesDatabase, pauses: list[float], error: Exception
) -> None:
    runs: list[int] = []

    def run() -> None:
        runs.append(1)
        database.execute_sql("INSERT INTO state_meta VALUES ('k', 'v')")
        raise error

    with pytest.raises(type(error)) as caught:
        database.write(run)
    assert caught.value is error
    assert (runs, pauses) == ([1], [])
    assert _meta(database.path) == []
    assert not database.in_transaction()


def test_a_real_constraint_violation_is_not_retried(
    database: HermesDatabase, pauses: list[float]
) -> None:
    database.write(_insert(database, "k"))
    runs: list[int] = []

    def run() -> int:
        runs.append(1)
        return _insert(database, "k", "other")()

    with pytest.raises(peewee.IntegrityError, match="UNIQUE"):
        database.write(run)
    assert (runs, pauses) == ([1], [])
    assert _meta(database.path) == [("k", "v")]


def test_nested_write_runs_in_a_savepoint(database: HermesDatabase, traced: list[str]) -> None:
    def outer() -> str:
        _insert(database, "outer")()
        assert database.write(_insert(database, "inner")) == 1
        return "done"

    assert database.write(outer) == "done"
    assert [s.split('"')[0] for s in traced] == [
        "BEGIN IMMEDIATE",
        "INSERT INTO state_meta VALUES ('outer', 'v')",
        "SAVEPOINT ",
        "INSERT INTO state_meta VALUES ('inner', 'v')",
        "RELEASE SAVEPOINT ",
        "COMMIT",
    ]
    assert _meta(database.path) == [("inner", "v"), ("outer", "v")]


def test_a_failed_nested_write_is_not_retried_and_rolls_back_only_itself(
    database: HermesDatabase, pauses: list[float]
) -> None:
    inner_runs: list[int] = []

    def inner() -> None:
        inner_runs.append(1)
        _insert(database, "inner")()
        raise sqlite3.OperationalError("database is locked")

    def outer() -> str:
        _insert(database, "outer")()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            database.write(inner)
        return "kept"

    assert database.write(outer) == "kept"
    assert (inner_runs, pauses) == ([1], [])
    assert _meta(database.path) == [("outer", "v")]


def test_a_passive_checkpoint_follows_every_50th_write(
    database: HermesDatabase, traced: list[str]
) -> None:
    for n in range(120):
        if n == 30:
            with pytest.raises(ValueError):
                database.write(lambda: (_ for _ in ()).throw(ValueError("not counted")))
        database.write(_insert(database, f"k{n:03d}"))
    commits, checkpoints_after = 0, []
    for statement in traced:
        if statement == "COMMIT":
            commits += 1
        elif statement.startswith("PRAGMA wal_checkpoint"):
            checkpoints_after.append((commits, statement))
    assert checkpoints_after == [
        (50, "PRAGMA wal_checkpoint(PASSIVE)"),
        (100, "PRAGMA wal_checkpoint(PASSIVE)"),
    ]


def test_checkpoint_rejects_unknown_modes(database: HermesDatabase) -> None:
    with pytest.raises(ValueError, match="mode"):
        database.checkpoint("FAST")


def test_close_truncates_the_wal(database: HermesDatabase) -> None:
    wal = Path(f"{database.path}-wal")
    reader = sqlite3.connect(database.path)  # keeps the WAL file from being deleted on close
    try:
        reader.execute("SELECT count(*) FROM state_meta").fetchone()
        for n in range(20):
            database.write(_insert(database, f"k{n}"))
        assert wal.stat().st_size > 0
        database.close()
        assert wal.stat().st_size == 0
        assert reader.execute("SELECT count(*) FROM state_meta").fetchone() == (20,)
    finally:
        reader.close()


def test_a_wal_above_the_threshold_is_truncated_once_no_reader_keeps_it(
    database: HermesDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    threshold = 16 * 1024
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_ABOVE_BYTES", threshold)
    monkeypatch.setattr(writes_module, "WAL_FORCE_TRUNCATE_ABOVE_BYTES", 2 * threshold)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_EVERY_S", 0.0)  # try after every write
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_WAIT_S", 0.001)
    database.execute_sql("PRAGMA busy_timeout = 1234")
    wal = Path(f"{database.path}-wal")
    value = "x" * 3000  # about a page a row
    reader = sqlite3.connect(database.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM state_meta").fetchone() == (0,)
        # The reader's snapshot keeps every frame: the WAL grows past both thresholds,
        # every truncation gives up (past the second after waiting for the reader),
        # and no write fails because of it.
        for n in range(30):
            assert database.write(_insert(database, f"k{n:03d}", value)) == 1
        held = wal.stat().st_size
        assert held > 4 * threshold
        assert reader.execute("SELECT count(*) FROM state_meta").fetchone() == (0,)
        reader.execute("COMMIT")  # the snapshot is released
        assert database.write(_insert(database, "after", value)) == 1
        assert wal.stat().st_size <= threshold
        assert reader.execute("SELECT count(*) FROM state_meta").fetchone() == (31,)
    finally:
        reader.close()
    # The short wait of the truncation was this connection's for that call only.
    assert database.execute_sql("PRAGMA busy_timeout").fetchone() == (1234,)
    assert _meta(database.path)[-1] == ("k029", value)


def test_a_wal_under_the_threshold_costs_no_statement(
    database: HermesDatabase, traced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_EVERY_S", 0.0)
    database.write(_insert(database, "small"))
    assert traced == ["BEGIN IMMEDIATE", "INSERT INTO state_meta VALUES ('small', 'v')", "COMMIT"]
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_ABOVE_BYTES", 0)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_WAIT_S", 0.25)
    traced.clear()
    database.write(_insert(database, "big"))
    assert traced == [
        "BEGIN IMMEDIATE",
        "INSERT INTO state_meta VALUES ('big', 'v')",
        "COMMIT",
        # What it can copy without the write lock first, then the truncation with a
        # short busy timeout, and the connection's own timeout back.
        "PRAGMA wal_checkpoint(PASSIVE)",
        "PRAGMA busy_timeout",
        "PRAGMA busy_timeout = 250",
        "PRAGMA wal_checkpoint(TRUNCATE)",
        "PRAGMA busy_timeout = 1000",
    ]
    assert os.stat(f"{database.path}-wal").st_size == 0


def test_past_the_forcing_size_the_wait_grows_with_the_wal_up_to_the_busy_timeout(
    database: HermesDatabase, traced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_ABOVE_BYTES", 0)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_EVERY_S", 0.0)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_WAIT_S", 0.25)
    database.write(_insert(database, "first"))  # the WAL starts empty
    waits = []
    for n, force in enumerate((1 << 40, 1)):
        monkeypatch.setattr(writes_module, "WAL_FORCE_TRUNCATE_ABOVE_BYTES", force)
        traced.clear()
        database.write(_insert(database, f"k{n}"))
        at = traced.index("PRAGMA wal_checkpoint(TRUNCATE)")
        waits.append(traced[at - 1])
    # Under the forcing size: 0.25 s; far past it: the 1 s busy timeout, never more.
    assert waits == ["PRAGMA busy_timeout = 250", "PRAGMA busy_timeout = 1000"]


def test_no_truncation_holds_writers_up_for_a_reader_below_the_forcing_size(
    database: HermesDatabase, traced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_ABOVE_BYTES", 0)
    monkeypatch.setattr(writes_module, "WAL_FORCE_TRUNCATE_ABOVE_BYTES", 1 << 40)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_EVERY_S", 0.0)
    database.write(_insert(database, "first"))
    reader = sqlite3.connect(database.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM state_meta").fetchone()
        traced.clear()
        database.write(_insert(database, "second"))  # the reader keeps the older snapshot
    finally:
        reader.close()
    assert traced == [
        "BEGIN IMMEDIATE",
        "INSERT INTO state_meta VALUES ('second', 'v')",
        "COMMIT",
        "PRAGMA wal_checkpoint(PASSIVE)",
    ]
    assert os.stat(f"{database.path}-wal").st_size > 0


def test_truncations_of_one_handle_are_spaced_out(
    database: HermesDatabase, traced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_ABOVE_BYTES", 0)
    monkeypatch.setattr(writes_module, "WAL_TRUNCATE_EVERY_S", 3600.0)
    for n in range(5):
        database.write(_insert(database, f"k{n}"))
    assert [s for s in traced if "TRUNCATE" in s] == ["PRAGMA wal_checkpoint(TRUNCATE)"]


def test_read_only_handle_reads_and_refuses_writes(db_path: Path) -> None:
    db = hermes_models.connect(db_path)
    db.write(_insert(db, "k"))
    db.close()
    digest = _digest(db_path)

    ro = hermes_models.connect(db_path, read_only=True)
    try:
        assert ro.read_only
        assert ro.execute_sql("SELECT key, value FROM state_meta").fetchall() == [("k", "v")]
        runs: list[int] = []
        with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
            ro.write(lambda: runs.append(1))
        assert runs == []
        with pytest.raises(peewee.OperationalError, match="readonly"):
            ro.execute_sql("INSERT INTO state_meta VALUES ('x', 'y')")
    finally:
        ro.close()
    assert _digest(db_path) == digest


def test_read_only_needs_an_existing_file(db_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hermes_models.connect(db_path, read_only=True)
    assert os.listdir(db_path.parent) == []


def test_every_store_write_runs_inside_begin_immediate(store: SessionDB) -> None:
    statements: list[str] = []
    conn = store._conn
    conn.set_trace_callback(statements.append)
    try:
        store.create_session("a", "cli", model="m")
        store.ensure_session("b", "cli")
        store.append_message("a", "user", "hi")
        rewind_from = store.append_message("a", "user", "again")
        store.append_message("a", "assistant", "x", tool_calls=[{"id": "c1"}])
        store.update_system_prompt("a", "prompt")
        store.update_session_model("a", "m2")
        store.update_session_cwd("a", "/work")
        store.update_session_meta("a", git_branch="main")
        store.update_token_counts("a", input_tokens=3)
        store.update_token_counts("unknown-id", output_tokens=2)
        store.set_session_title("a", "title")
        store.set_meta("k", "v")
        store.set_session_archived("a", True)
        store.set_session_archived("a", False)
        store.rewind_to_message("a", rewind_from)
        store.restore_rewound("a", rewind_from)
        store.replace_messages("b", [{"role": "user", "content": "q"}])
        store.clear_messages("b")
        store.end_session("a", "compression")
        store.reopen_session("a")
        store.try_acquire_compression_lock("a", "holder")
        store.release_compression_lock("a", "holder")
        store.create_session("c", "cli", parent_session_id="a")
        store.delete_session("c")
        store.delete_sessions(["b"])
        store.prune_sessions(0)
        store.delete_empty_sessions()
    finally:
        conn.set_trace_callback(None)

    target = re.compile(
        r'^(?:(?:INSERT|REPLACE)(?:\s+OR\s+\w+)?\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+"?(\w+)',
        re.IGNORECASE,
    )
    outside, begins, written = [], [], set()
    depth = 0
    for statement in statements:
        text = statement.strip()
        upper = text.upper()
        if upper.startswith("BEGIN"):
            begins.append(upper)
            depth = 1
        elif upper in ("COMMIT", "ROLLBACK"):
            depth = 0
        elif match := target.match(text):
            written.add(match.group(1))
            if not depth:
                outside.append(text)
    assert outside == []
    assert set(begins) == {"BEGIN IMMEDIATE"}
    # The gram index's tables are written in the same transactions (its refresh of the
    # messages each write changed).
    gram_tables = {"messages_cjk", "messages_cjk_grams", "messages_cjk_changed"}
    assert "messages_cjk_changed" in written
    assert written - gram_tables == {"sessions", "messages", "state_meta", "compression_locks"}


def test_a_cached_handle_notices_a_newer_schema_written_by_another_process(db_path: Path) -> None:
    hermes_models.connect(db_path)
    other = sqlite3.connect(db_path)
    with other:
        other.execute("UPDATE schema_version SET version = 17")
    other.close()
    db = hermes_models.connect(db_path)
    assert db.read_only
    with pytest.raises(hermes_models.SchemaTooNewError, match="version 17"):
        hermes_models.Session.create(id="s", source="cli", started_at=1.0)
    store = SessionDB(db_path)
    with pytest.raises(hermes_models.SchemaTooNewError, match="version 17"):
        store.create_session("s", "cli")
    assert store.get_session("s") is None
    store.close()


def test_a_threads_connection_is_closed_when_the_thread_ends(database: HermesDatabase) -> None:
    # Python 3.13 reports a connection the garbage collector has to close as
    # an unraisable ResourceWarning, which this suite turns into a failure.
    def work() -> None:
        database.connection().execute("SELECT COUNT(*) FROM sessions").fetchone()

    for _ in range(3):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    gc.collect()
    # This thread's own connection is untouched.
    assert database.execute_sql("SELECT COUNT(*) FROM sessions").fetchone() == (0,)


def test_a_prepared_statement_gives_a_scalar_and_dicts(store: SessionDB) -> None:
    store.set_meta("k", "v")
    store.set_meta("empty", None)
    value = Prepared(
        lambda key: StateMeta.select(StateMeta.value).where(StateMeta.key == key), "key"
    )
    rows = Prepared(
        lambda first: (
            StateMeta.select().where(StateMeta.key.in_([first, "k"])).order_by(StateMeta.key)
        ),
        "first",
    )
    db = store.database
    assert value.scalar(db, key="k") == "v"
    assert value.scalar(db, key="empty") is None
    assert value.scalar(db, key="missing") is None
    assert rows.dicts(db, first="empty") == [
        {"key": "empty", "value": None},
        {"key": "k", "value": "v"},
    ]


def test_a_prepared_statement_names_its_values_and_keeps_quoted_question_marks(
    store: SessionDB,
) -> None:
    store.set_meta("a?b", "quoted")
    store.set_meta("k", "v")
    # A '?' inside a string literal is not a placeholder; LIMIT 1 is a fixed integer.
    both = Prepared(
        lambda key: (
            StateMeta.select(StateMeta.key, StateMeta.value)
            .where((StateMeta.key == key) | (StateMeta.key == peewee.SQL("'a?b'")))
            .order_by(StateMeta.key)
            .limit(1)
        ),
        "key",
    )
    db = store.database
    sql, fixed, positions = both.render(db)
    assert (fixed, positions) == ([], [])
    assert sql.count(":key") == 1 and "'a?b'" in sql and sql.endswith("LIMIT 1")
    assert both.first(db, key="k") == ("a?b", "quoted")
    assert both.dicts(db, key="zzz") == [{"key": "a?b", "value": "quoted"}]
    # A fixed text value stays a bound parameter (never spliced into the SQL).
    fixed_text = Prepared(
        lambda key: StateMeta.select(StateMeta.value).where(StateMeta.key.in_([key, "k"])), "key"
    )
    sql, fixed, positions = fixed_text.render(db)
    assert "'k'" not in sql and "k" in fixed and positions == [(0, "key")]
    assert sorted(row[0] for row in fixed_text.execute(db, key="a?b")) == ["quoted", "v"]


def test_a_prepared_statement_raises_what_execute_sql_raises_and_reports_to_query_hooks(
    store: SessionDB,
) -> None:
    insert = Prepared(lambda key: StateMeta.insert(key=key, value="x"), "key")
    db = store.database
    store.set_meta("taken", "v")
    with pytest.raises(peewee.IntegrityError, match=r"UNIQUE constraint failed: state_meta\.key"):
        with db.atomic():
            insert.execute(db, key="taken")
    seen: list[str] = []
    db.query_hooks.append(lambda event: seen.append(event.sql))
    try:
        value = Prepared(
            lambda key: StateMeta.select(StateMeta.value).where(StateMeta.key == key), "key"
        )
        assert value.scalar(db, key="taken") == "v"
    finally:
        db.query_hooks.clear()
    assert len(seen) == 1 and '"state_meta"' in seen[0]
    assert store.get_meta("taken") == "v"


def test_a_prepared_statement_is_in_peewees_query_log_when_it_is_on(
    store: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    store.set_meta("k", "v")
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        assert store.get_meta("k") == "v"
    logged = [record.msg for record in caplog.records if record.name == "peewee"]
    assert len(logged) == 1 and '"state_meta"' in logged[0][0] and logged[0][1] == {"key": "k"}


# -- what an open costs the file system ---------------------------------------------------


def test_an_open_makes_the_wal_files_once_and_they_go_with_the_last_close(
    tmp_path: Path, migrated_copy: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's connection keeps the WAL's -wal and -shm files until the handle's
    own connection has read the file: the write check's connection, closing in
    between, does not delete them for the handle's connection to make again."""
    path = migrated_copy(tmp_path / "state.db")
    shm = Path(f"{path}-shm")
    assert not shm.exists()
    inodes: list[int] = []
    check_writable = connection_module.check_writable

    def watched(checked: Path) -> None:
        check_writable(checked)
        inodes.append(shm.stat().st_ino)

    monkeypatch.setattr(connection_module, "check_writable", watched)
    db = hermes_models.connect(path)
    try:
        assert inodes == [shm.stat().st_ino]
        assert db.execute_sql("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        db.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


def test_a_file_in_delete_mode_is_not_held_and_keeps_its_mode_unless_wal_is_asked_for(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    conn.close()
    db = hermes_models.connect(path)
    try:
        assert db.execute_sql("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        db.close()
    db = hermes_models.connect(path, journal_mode="wal")
    try:
        expected = "delete" if driver.WAL_RESET_BUG else "wal"
        assert db.execute_sql("PRAGMA journal_mode").fetchone() == (expected,)
    finally:
        db.close()
