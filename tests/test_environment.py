"""A hostile environment: files that are not databases, read-only files and
folders, a full disk, and a database another process keeps locked.

Read-only checks run in a child process. Root ignores file permissions, so
when the tests run as root the child first becomes ``nobody`` (after a
warm-up run as root on a writable copy, which loads every module it needs:
root's Python usually lives where ``nobody`` cannot read). As any other
user the child just runs; ``chmod`` alone makes the file read-only.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import pwd
import random
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import peewee
import pytest

import hermes_models
from hermes_models import (
    NotADatabaseError,
    Session,
    SessionDB,
    WriteConflictError,
    driver,
)
from hermes_models.cli.commands import main
from hermes_models.driver import sqlite3
from hermes_models.store import writes as writes_module
from hermes_models.store.cipher import open_file

from snapshots import snapshot

T0 = 1_700_000_000.0
SPAWN = multiprocessing.get_context("spawn")


def build(path: Path) -> None:
    """A small store: a session with a tool call, a compression chain, metadata, a lock."""
    with SessionDB(path) as store:
        store.create_session("s1", "cli", model="m", started_at=T0)
        store.append_message("s1", "user", "hello world", timestamp=T0 + 1)
        store.append_message(
            "s1", "assistant", "hello back", tool_calls=[{"id": "c"}], timestamp=T0 + 2
        )
        store.set_session_title("s1", "greeting")
        store.create_session("c1", "cli", started_at=T0 + 10)
        store.append_message("c1", "user", "hello before compression", timestamp=T0 + 11)
        store.end_session("c1", "compression")
        store.create_session("c2", "cli", parent_session_id="c1")
        store.append_message("c2", "user", "hello after compression")
        store.set_meta("k", "v")
        assert store.try_acquire_compression_lock("c2", "holder-0", ttl_seconds=3600)


def sound(path: Path) -> tuple[Any, ...]:
    """integrity_check, both FTS integrity checks, and stored against real message counts."""
    conn = sqlite3.connect(path)
    try:
        checks = (
            conn.execute("PRAGMA integrity_check").fetchall(),
            conn.execute(
                "INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')"
            ).fetchall(),
            conn.execute(
                "INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('integrity-check')"
            ).fetchall(),
            conn.execute(
                "SELECT COUNT(*) FROM sessions s WHERE s.message_count != "
                "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
            ).fetchone(),
        )
        conn.rollback()
        return checks
    finally:
        conn.close()


SOUND = ([("ok",)], [], [], (0,))


# -- files that are not databases ----------------------------------------------------------

NOT_DATABASES = {
    "random bytes": random.Random(7).randbytes(8192),
    "text": b"# my notes\nnot a database at all\n" * 40,
    "sqlite header, garbage after": b"SQLite format 3\x00" + random.Random(8).randbytes(4080),
    "short header": b"SQLite format",
    "nul bytes": b"\x00" * 4096,
}


# Plain stores under HERMES_TEST_ENCRYPTED: with a key set, random bytes read as a file the key
# does not open (tests/test_encryption.py).
@pytest.mark.plaintext_file
@pytest.mark.parametrize("name", sorted(NOT_DATABASES))
def test_a_file_that_is_not_sqlite_is_refused_and_left_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = tmp_path / "state.db"
    content = NOT_DATABASES[name]
    path.write_bytes(content)
    os.chmod(path, 0o644)
    refused = f"{path} is not an SQLite database"
    if name == "random bytes":  # what an encrypted file (SQLCipher) looks like, too
        refused = (
            f"{path} is encrypted, or not an SQLite database; set HERMES_MODELS_KEY or"
            " HERMES_MODELS_KEY_FILE (or --key-prompt on the command line, key= in Python)"
            if driver.ENCRYPTION
            else f"{path} is not an SQLite database, or is encrypted (then install the"
            " encryption extra, pip install 'hermes_models[encryption]', and set"
            " HERMES_MODELS_KEY or HERMES_MODELS_KEY_FILE)"
        )
    for open_it in (
        lambda: SessionDB(path),
        lambda: SessionDB(path, read_only=True),
        lambda: hermes_models.migrate(path),
        lambda: hermes_models.connect(path, migrate=False),
    ):
        with pytest.raises(NotADatabaseError) as caught:
            open_it()
        assert str(caught.value) == refused
    for command in (["migrate"], ["sessions"], ["show", "s1"], ["lineage", "s1"], ["resume", "s1"]):
        assert main([*command, "--db", str(path)]) == 1
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"Error: {refused}\n")
    assert path.read_bytes() == content
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["state.db"]


@pytest.mark.parametrize("filled", [False, True], ids=["empty", "with files"])
def test_a_directory_at_the_path_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], filled: bool
) -> None:
    path = tmp_path / "state.db"
    path.mkdir()
    if filled:
        (path / "inside.txt").write_text("keep me")
    for open_it in (
        lambda: SessionDB(path),
        lambda: SessionDB(path, read_only=True),
        lambda: hermes_models.migrate(path),
    ):
        with pytest.raises(NotADatabaseError) as caught:
            open_it()
        assert str(caught.value) == f"{path} is a directory, not an SQLite database"
    for command in (["migrate"], ["sessions"], ["show", "s1"], ["lineage", "s1"], ["resume", "s1"]):
        assert main([*command, "--db", str(path)]) == 1
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"Error: {path} is a directory, not an SQLite database\n")
    assert sorted(os.listdir(tmp_path)) == ["state.db"]
    assert sorted(os.listdir(path)) == (["inside.txt"] if filled else [])


# -- read-only files and folders --------------------------------------------------------------

NOBODY = 65534


def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return NOBODY


def _reads(store: SessionDB) -> dict[str, Any]:
    return {
        "session": store.get_session("s1"),
        "messages": store.get_messages("s1"),
        "conversation": store.get_messages_as_conversation("c2", include_ancestors=True),
        "listing": store.list_sessions_rich(limit=None),
        "search": store.search_messages("hello"),
        "search_sessions": store.search_sessions("hello"),
        "resume": store.resolve_resume_session_id("c1"),
        "title": store.resolve_session_by_title("greeting"),
        "meta": store.get_meta("k"),
        "count": store.message_count(),
        "holder": store.get_compression_lock_holder("c2"),
    }


WRITES: dict[str, Callable[[SessionDB], Any]] = {
    "create_session": lambda s: s.create_session("new", "cli"),
    "end_session": lambda s: s.end_session("s1", "done"),
    "reopen_session": lambda s: s.reopen_session("c1"),
    "update_system_prompt": lambda s: s.update_system_prompt("s1", "p"),
    "update_session_model": lambda s: s.update_session_model("s1", "m2"),
    "update_session_cwd": lambda s: s.update_session_cwd("s1", "/"),
    "update_session_meta": lambda s: s.update_session_meta("s1", user_id="u"),
    "update_token_counts": lambda s: s.update_token_counts("s1", input_tokens=5),
    "set_session_archived": lambda s: s.set_session_archived("s1", True),
    "set_session_title": lambda s: s.set_session_title("s1", "other"),
    "append_message": lambda s: s.append_message("s1", "user", "more"),
    "replace_messages": lambda s: s.replace_messages("s1", []),
    "rewind_to_message": lambda s: s.rewind_to_message("s1", 1),
    "restore_rewound": lambda s: s.restore_rewound("s1", 1),
    "clear_messages": lambda s: s.clear_messages("s1"),
    "delete_session": lambda s: s.delete_session("s1"),
    "delete_sessions": lambda s: s.delete_sessions(["s1"]),
    "prune_sessions": lambda s: s.prune_sessions(0),
    "delete_empty_sessions": lambda s: s.delete_empty_sessions(),
    "optimize_fts": lambda s: s.optimize_fts(),
    "vacuum": lambda s: s.vacuum(),
    "release_compression_lock": lambda s: s.release_compression_lock("c2", "holder-0"),
    "set_meta": lambda s: s.set_meta("k", "w"),
    "Session.end": lambda s: Session.get_by_id("s1").end("done"),
}


def _attempt(fn: Callable[[], Any]) -> str:
    try:
        return f"returned {fn()!r}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def read_only_scenario(path: str) -> dict[str, Any]:
    """Everything a user may try on a file they cannot write; returns what happened."""
    result: dict[str, Any] = {}
    started = time.monotonic()
    result["open read-write"] = _attempt(lambda: SessionDB(path))
    result["open read-write seconds"] = time.monotonic() - started
    result["migrate"] = _attempt(lambda: hermes_models.migrate(path))
    with SessionDB(path, read_only=True) as store:
        result["reads"] = _reads(store)
        result["lock"] = store.try_acquire_compression_lock("s1", "me")
        result["writes"] = {
            name: _attempt(lambda w=write: w(store)) for name, write in WRITES.items()
        }
    result["cli"] = {
        "sessions": _cli("sessions", "--db", path, "--json"),
        "show": _cli("show", "--db", path, "greeting"),
        "resume": _cli("resume", "--db", path, "c1"),
        "lineage": _cli("lineage", "--db", path, "c2"),
        "migrate": _cli("migrate", "--db", path),
    }
    return result


def _child(conn: Connection, scenario: Callable[[str], Any], path: str, warm_up: str) -> None:
    try:
        if os.geteuid() == 0:
            copy = Path(warm_up) / Path(path).name
            shutil.copy(path, copy)
            scenario(str(copy))
            os.setgroups([])
            os.setgid(_nobody())
            os.setuid(_nobody())
        conn.send(("ok", scenario(path)))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_unprivileged(scenario: Callable[[str], Any], path: Path, tmp_path: Path) -> Any:
    """``scenario(path)`` in a spawned child that cannot bypass file permissions."""
    warm_up = tmp_path / "warm-up"
    warm_up.mkdir()
    receiver, sender = SPAWN.Pipe(duplex=False)
    child = SPAWN.Process(target=_child, args=(sender, scenario, str(path), str(warm_up)))
    child.start()
    sender.close()
    try:
        if not receiver.poll(120):
            raise AssertionError("the child process did not answer")
        status, value = receiver.recv()
    finally:
        receiver.close()
        child.join(30)
    assert status == "ok", value
    return value


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A folder the unprivileged child can reach (pytest's own tree is private to root)."""
    if os.geteuid() != 0:
        yield tmp_path / "shared"
        return
    folder = Path(tempfile.mkdtemp(prefix="hermes-models-env-"))
    os.chmod(folder, 0o755)
    try:
        yield folder / "shared"
    finally:
        for root, dirs, _ in os.walk(folder):
            for name in dirs:
                os.chmod(Path(root) / name, 0o755)
        shutil.rmtree(folder)


def _ro_message(path: Path) -> str:
    return (
        f"ReadOnlyDatabaseError: {path} cannot be written here (the file or its folder is "
        "read-only); open it with read_only=True to read it"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("file_mode", "folder_mode", "own_file"),
    [(0o444, 0o777, False), (0o444, 0o777, True), (0o444, 0o555, False), (0o666, 0o555, False)],
    ids=["read-only file", "own read-only file", "read-only file and folder", "read-only folder"],
)
def test_read_only_files_and_folders_read_and_search_but_never_write(
    shared: Path, tmp_path: Path, file_mode: int, folder_mode: int, own_file: bool
) -> None:
    shared.mkdir()
    path = shared / "state.db"
    build(path)
    with SessionDB(path) as store:
        expected = _reads(store)
    with SessionDB(path) as store:
        expected_cli = {
            "sessions": _cli("sessions", "--db", str(path), "--json"),
            "show": _cli("show", "--db", str(path), "greeting"),
            "resume": _cli("resume", "--db", str(path), "c1"),
            "lineage": _cli("lineage", "--db", str(path), "c2"),
        }
    rows = snapshot(path, read_only=False)
    content = path.read_bytes()
    assert sorted(os.listdir(shared)) == ["state.db"]
    if own_file and os.geteuid() == 0:
        os.chown(path, _nobody(), _nobody())  # its owner may chmod it, and must not
    os.chmod(path, file_mode)
    os.chmod(shared, folder_mode)
    try:
        result = run_unprivileged(read_only_scenario, path, tmp_path)
        mode = stat.S_IMODE(path.stat().st_mode)
    finally:
        os.chmod(shared, 0o755)
        os.chmod(path, 0o644)
    assert mode == file_mode
    assert result["open read-write"] == _ro_message(path)
    assert result["open read-write seconds"] < 5
    assert result["migrate"] == _ro_message(path)
    assert result["reads"] == expected
    assert result["lock"] is False
    refused = f"ReadOnlyDatabaseError: {path} was opened read-only; "
    assert result["writes"] == {
        name: refused + ("VACUUM is refused" if name == "vacuum" else "writes are refused")
        for name in WRITES
    }
    cli = result["cli"]
    assert {name: cli[name] for name in expected_cli} == expected_cli
    # The command line names its option where the library names its argument.
    cli_words = (
        _ro_message(path)
        .split(": ", 1)[1]
        .replace("open it with read_only=True to read it", "read it with --read-only")
    )
    assert cli["migrate"] == (1, "", f"Error: {cli_words}\n")
    assert path.read_bytes() == content
    assert snapshot(path, read_only=False) == rows
    if folder_mode == 0o555:
        assert sorted(os.listdir(shared)) == ["state.db"]


def wal_left_behind_scenario(path: str) -> str:
    return _attempt(lambda: SessionDB(path, read_only=True))


@pytest.mark.slow
def test_a_read_only_folder_with_unmerged_wal_is_refused_clearly(
    shared: Path, tmp_path: Path
) -> None:
    """A snapshot of the main file would miss the changes the -wal file holds."""
    shared.mkdir()
    source = tmp_path / "source.db"
    build(source)
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE state_meta SET value = 'in the wal' WHERE key = 'k'")
    writer.commit()
    shutil.copy(source, shared / "state.db")
    shutil.copy(f"{source}-wal", shared / "state.db-wal")
    writer.close()
    os.chmod(shared, 0o555)
    try:
        outcome = run_unprivileged(wal_left_behind_scenario, shared / "state.db", tmp_path)
    finally:
        os.chmod(shared, 0o755)
    assert outcome == (
        f"OperationalError: {shared / 'state.db'} cannot be read here: its folder is read-only "
        "and state.db-wal holds changes not yet merged into the file (open it once where the "
        "folder is writable)"
    )


# -- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def filled(db_path: Path, migrated_copy: Callable[[Path], Path]) -> Iterator[SessionDB]:
    build(migrated_copy(db_path))
    store = SessionDB(db_path)
    yield store
    store.close()


def _cap(store: SessionDB, spare_pages: int) -> None:
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + spare_pages}")


DISK_FULL_WRITES: dict[str, Callable[[SessionDB], Any]] = {
    "append_message": lambda s: s.append_message("s1", "user", "x" * 200_000),
    "replace_messages": lambda s: s.replace_messages(
        "s1", [{"role": "user", "content": f"{n} " + "y" * 2_000} for n in range(200)]
    ),
    "update_system_prompt": lambda s: s.update_system_prompt("s1", "p" * 200_000),
    "create_session": lambda s: s.create_session("big", "cli", system_prompt="q" * 200_000),
    "set_meta": lambda s: s.set_meta("big", "v" * 200_000),
}


@pytest.mark.parametrize("name", sorted(DISK_FULL_WRITES))
def test_a_full_disk_fails_the_write_cleanly_and_writes_resume_after_space_is_freed(
    filled: SessionDB, name: str
) -> None:
    before = snapshot(filled.db_path, read_only=False)
    _cap(filled, spare_pages=1)
    with pytest.raises(sqlite3.OperationalError) as caught:
        DISK_FULL_WRITES[name](filled)
    assert type(caught.value) is sqlite3.OperationalError
    assert str(caught.value) == "database or disk is full"
    assert filled.database.in_transaction() is False
    assert snapshot(filled.db_path, read_only=False) == before
    filled._conn.execute("PRAGMA max_page_count = 1073741823")
    DISK_FULL_WRITES[name](filled)
    assert filled.append_message("s1", "user", "after") > 0
    assert sound(filled.db_path) == SOUND


def test_a_full_disk_during_compression_releases_the_lock(filled: SessionDB) -> None:
    before = snapshot(filled.db_path, read_only=False)
    _cap(filled, spare_pages=1)
    summary = [{"role": "user", "content": "s" * 300_000}]
    with pytest.raises(peewee.OperationalError) as caught:
        Session.get_by_id("s1").compress(summary, holder="me")
    assert str(caught.value) == "database or disk is full"
    assert filled.get_compression_lock_holder("s1") is None
    assert snapshot(filled.db_path, read_only=False) == before
    filled._conn.execute("PRAGMA max_page_count = 1073741823")
    assert Session.get_by_id("s1").compress(summary, holder="me").message_count == 1
    assert sound(filled.db_path) == SOUND


def file_size_limit_scenario(path: str) -> dict[str, Any]:
    """Appends until the operating system refuses to let the files grow (EFBIG)."""
    outcome: dict[str, Any] = {}
    with SessionDB(path) as store:
        limit = os.path.getsize(path) + 256 * 1024
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        acknowledged = 0
        try:
            for n in range(100):
                store.append_message("s1", "user", f"{n} " + "z" * 40_000)
                acknowledged += 1
        except sqlite3.OperationalError as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        outcome["acknowledged"] = acknowledged
        outcome["counters"] = (store.get_session("s1") or {})["message_count"]
        outcome["rows"] = store.message_count("s1")
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        store.append_message("s1", "user", "after")
        outcome["after"] = store.message_count("s1")
    return outcome


def _in_child(conn: Connection, scenario: Callable[[str], Any], path: str) -> None:
    try:
        conn.send(("ok", scenario(path)))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_in_child(scenario: Callable[[str], Any], path: Path) -> Any:
    receiver, sender = SPAWN.Pipe(duplex=False)
    child = SPAWN.Process(target=_in_child, args=(sender, scenario, str(path)))
    child.start()
    sender.close()
    try:
        assert receiver.poll(120), "the child process did not answer"
        status, value = receiver.recv()
    finally:
        receiver.close()
        child.join(30)
    assert status == "ok", value
    return value


@pytest.mark.slow
def test_the_os_refusing_to_grow_the_file_fails_writes_cleanly(db_path: Path) -> None:
    """A real I/O failure (RLIMIT_FSIZE, as on a small file system) in another process."""
    build(db_path)
    outcome = run_in_child(file_size_limit_scenario, db_path)
    acknowledged = outcome["acknowledged"]
    assert 0 < acknowledged < 100
    assert outcome == {
        "error": "OperationalError: disk I/O error",
        "acknowledged": acknowledged,
        "counters": 2 + acknowledged,
        "rows": 2 + acknowledged,
        "after": 3 + acknowledged,
    }
    assert sound(db_path) == SOUND


# -- another process holding the write lock ------------------------------------------------


def hold_write_lock(path: str, ready: Any, release: Any) -> None:
    # With the store's key where the environment gives one (HERMES_TEST_ENCRYPTED=1).
    conn = open_file(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO state_meta (key, value) VALUES ('holder', 'uncommitted')")
        ready.set()
        release.wait(120)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@contextlib.contextmanager
def locked_by_another_process(path: Path) -> Iterator[None]:
    ready, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=hold_write_lock, args=(str(path), ready, release))
    holder.start()
    try:
        assert ready.wait(60), "the lock holder did not start"
        yield
    finally:
        release.set()
        holder.join(60)
    assert holder.exitcode == 0


# The patience itself is timed fast in test_db.py; here a second process holds the lock.
@pytest.mark.slow
def test_a_write_locked_out_past_the_retry_budget_raises_write_conflict(
    filled: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes_module, "WRITE_PATIENCE_S", 0.2)
    monkeypatch.setattr(writes_module, "WRITE_RETRY_MIN_S", 0.001)
    monkeypatch.setattr(writes_module, "WRITE_RETRY_MAX_S", 0.005)
    filled._conn.execute("PRAGMA busy_timeout = 50")
    before = snapshot(filled.db_path, read_only=False)
    with locked_by_another_process(filled.db_path):
        started = time.monotonic()
        with pytest.raises(WriteConflictError) as caught:
            filled.append_message("s1", "user", "blocked")
        elapsed = time.monotonic() - started
        found = re.fullmatch(
            f"database is locked: {re.escape(str(filled.db_path))} stayed locked by other "
            r"writers for (\d+\.\d) s \(\d+ attempts; patience 0\.2 s\)",
            str(caught.value),
        )
        assert found, str(caught.value)
        assert float(found[1]) >= 0.2
        assert 0.2 <= elapsed < 2
        assert filled.get_session("s1")["message_count"] == 2  # type: ignore[index]
        with SessionDB(filled.db_path, read_only=True) as reader:
            assert reader.get_meta("holder") is None
        assert snapshot(filled.db_path, read_only=False) == before
    assert filled.append_message("s1", "user", "after the lock") == 5
    assert sound(filled.db_path) == SOUND


@pytest.mark.slow  # a second process; POSIX locks behave alike on every Python
def test_a_second_handle_opened_in_this_process_keeps_its_sqlite_locks(
    filled: SessionDB,
) -> None:
    """Checking a file must not open and close a descriptor of it: that drops the
    POSIX locks of this process's connections, and another process closing its
    last connection would then delete the WAL this one is still writing to."""
    with locked_by_another_process(filled.db_path):
        with SessionDB(filled.db_path, read_only=True) as reader:
            assert reader.get_meta("k") == "v"
    # The other process has closed its connection; ours is still open.
    assert sorted(os.listdir(filled.db_path.parent)) == ["state.db", "state.db-shm", "state.db-wal"]
    message_id = filled.append_message("s1", "user", "acknowledged")
    filled.close()
    conn = sqlite3.connect(filled.db_path)
    try:
        found = conn.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).fetchall()
    finally:
        conn.close()
    assert found == [("acknowledged",)]
    assert sound(filled.db_path) == SOUND


def wait_out_the_default_patience(folder: str) -> None:
    """Run by :data:`DEFAULT_PATIENCE` in a process of its own: a store whose write
    lock another process holds, a write with every setting at its default; prints
    what came of it as a line of JSON."""
    path = Path(folder) / "state.db"
    build(path)
    outcome: dict[str, Any] = {"raised": None}
    with SessionDB(path) as store:
        with locked_by_another_process(path):
            started = time.monotonic()
            try:
                store.set_meta("k", "blocked")
            except WriteConflictError as exc:
                outcome = {"raised": type(exc).__name__, "message": str(exc)}
            outcome["elapsed"] = time.monotonic() - started
        outcome["value"] = store.get_meta("k")
    print(json.dumps(outcome))


class StartedEarly:
    """A process that runs ``worker`` (a function of this module, given a folder of
    its own) from the moment the run's tests are chosen (conftest's
    ``pytest_collection_finish``), so that its minute of waiting passes beside the
    tests run before the one that reads :meth:`outcome`. Its environment holds no
    store key: the lock holder reads the file with plain SQLite."""

    def __init__(self, worker: Callable[[str], None]) -> None:
        self.worker = worker
        self.folder: str | None = None
        self.process: subprocess.Popen[str] | None = None

    def __call__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="hermes-started-early-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_MODELS_KEY")}
        code = (
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import {__name__} as m; m.{self.worker.__name__}({self.folder!r})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> None:
        """End the process if its test did not read it (a run stopped early)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def outcome(self) -> dict[str, Any]:
        if self.process is None:
            self()
        assert self.process is not None and self.folder is not None
        try:
            out, err = self.process.communicate(timeout=600)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        assert self.process.returncode == 0, err[-4000:]
        return dict(json.loads(out.splitlines()[-1]))


DEFAULT_PATIENCE = StartedEarly(wait_out_the_default_patience)


@pytest.mark.slow
@pytest.mark.started_early(DEFAULT_PATIENCE)
def test_the_default_write_patience_ends_in_a_clear_error_not_a_hang() -> None:
    """Attempts, each waiting out the 1 s busy timeout, with 20-150 ms pauses between,
    until the 60 s patience has passed: the last attempt may start just before."""
    assert writes_module.WRITE_PATIENCE_S == 60.0
    outcome = DEFAULT_PATIENCE.outcome()
    assert outcome["raised"] == "WriteConflictError", outcome
    found = re.search(r"for (\d+\.\d) s \((\d+) attempts; patience 60 s\)", outcome["message"])
    assert found, outcome["message"]
    low = writes_module.WRITE_PATIENCE_S
    elapsed = outcome["elapsed"]
    assert low <= elapsed < low + writes_module.BUSY_TIMEOUT_S + writes_module.WRITE_RETRY_MAX_S + 5
    attempt = writes_module.BUSY_TIMEOUT_S + writes_module.WRITE_RETRY_MAX_S
    assert int(found[2]) >= low // attempt
    assert outcome["value"] == "v"


def test_read_only_handle_on_a_file_without_the_store_is_refused_clearly(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    for path in (empty, other):
        before = path.read_bytes()
        with pytest.raises(hermes_models.NotADatabaseError, match="no Hermes session store"):
            SessionDB(path, read_only=True)
        assert path.read_bytes() == before
