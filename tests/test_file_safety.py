"""Files another user owns or planted, folders others can read, and paths that are not files.

Tests that need a second user run as root (as CI does) and drop to ``nobody``
in a child process; they never skip.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import hermes_models
from hermes_models import NotADatabaseError, SessionDB, UnsafeFileError
from hermes_models.driver import sqlite3
from hermes_models.transfer.backups import backup

NOBODY = 65534


#: What the child runs first: it drops root's groups, group and user (it starts as
#: root, which may run this interpreter wherever it is installed).
_DROP_ROOT = f"import os; os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"


def _as_nobody(code: str) -> tuple[int, str, str]:
    """Run Python ``code`` as the user ``nobody``: a child process (``python -I -S``: the
    code uses the standard library alone) that drops root before it runs the code.

    Returns the exit status (0, or 1 when the code raised), what it printed, and the
    last line of its error output (the exception; ``""`` when there was none).
    """
    assert os.geteuid() == 0, "these tests need root (CI runs as root) to act as another user"
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _DROP_ROOT + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    error = result.stderr.strip().splitlines()
    return (0 if result.returncode == 0 else 1, result.stdout, error[-1] if error else "")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder everyone may write to, like /tmp (sticky bit set)."""
    folder = Path(tempfile.mkdtemp(prefix="hermes-models-shared-", dir="/tmp"))
    os.chmod(folder, 0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


@pytest.mark.slow  # console-script runs
def test_sidecars_planted_by_another_user_are_refused(shared: Path) -> None:
    planted = _as_nobody(
        f"""
        import os
        os.umask(0)
        for suffix in ("-wal", "-shm"):
            os.close(os.open("{shared}/state.db" + suffix, os.O_CREAT | os.O_WRONLY, 0o666))
        """
    )
    assert planted[0] == 0, planted[2]
    path = shared / "state.db"
    with pytest.raises(UnsafeFileError) as caught:
        SessionDB(path)
    assert str(caught.value) == (
        f"{path}-wal is owned by another user, nobody (uid {NOBODY}), not by the store's "
        "owner, root (uid 0); refusing to use it (anyone who can change it could read or "
        "alter the store). It is not a file SQLite made for this store: have its owner (or "
        "root) remove it, then open the store again"
    )
    # Nothing of the store reached the planted files, and no store was made beside them.
    assert (path.with_name("state.db-wal").stat().st_size, path.exists()) == (0, False)
    with pytest.raises(UnsafeFileError, match=r"state\.db-wal is owned by another user"):
        hermes_models.migrate(path)
    result = subprocess.run(
        [Path(sys.executable).with_name("hermes-models"), "migrate", "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(f"Error: {path}-wal is owned by another user")


def test_a_store_another_user_owns_is_refused_but_can_be_read(
    shared: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = shared / "state.db"
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hello")
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o666)
    with pytest.raises(UnsafeFileError, match=f"^{path} is owned by another user"):
        SessionDB(path)
    with caplog.at_level(logging.WARNING, logger="hermes_models"):
        with SessionDB(path, read_only=True) as store:
            assert store.get_messages("s1")[0]["content"] == "hello"
    assert f"{path} is owned by another user, nobody (uid {NOBODY})" in caplog.text
    assert _mode(path) == "0o666"  # a read-only open changes nothing


def test_a_writing_command_on_another_users_store_says_whose_it_is(shared: Path) -> None:
    path = shared / "state.db"
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
    os.chown(path, NOBODY, NOBODY)
    result = subprocess.run(
        [Path(sys.executable).with_name("hermes-models"), "archive", "s1", "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (1, "")
    # Not "the file or its folder is read-only": the reason is the owner.
    assert result.stderr == (
        f"Error: {path} is owned by another user, nobody (uid {NOBODY}), not by root "
        "(uid 0), who runs this process; refusing to use it (anyone who can change it "
        "could read or alter the store). Read it with --read-only\n"
    )


def test_what_the_store_writes_cannot_be_read_by_another_user(shared: Path) -> None:
    path = shared / "state.db"
    store = SessionDB(path)
    try:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "a secret")
        names = sorted(p.name for p in shared.iterdir())
        modes = {name: _mode(shared / name) for name in names}
        spy = _as_nobody(
            f"""
            import sys
            for suffix in ("", "-wal", "-shm"):
                try:
                    open("{path}" + suffix, "rb").read()
                except PermissionError:
                    print("denied", suffix)
            """
        )
    finally:
        store.close()
    assert modes == {"state.db": "0o600", "state.db-shm": "0o600", "state.db-wal": "0o600"}
    assert spy == (0, "denied \ndenied -wal\ndenied -shm\n", "")


def test_sidecars_that_are_links_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    os.symlink(elsewhere, f"{path}-wal")
    with pytest.raises(UnsafeFileError, match=f"^{path}-wal is a symbolic link, not a file SQLite"):
        SessionDB(path)
    assert elsewhere.read_bytes() == b""


# Plain stores under HERMES_TEST_ENCRYPTED: SQLCipher's SQLite makes an empty -wal 0600 itself
# when it opens one; the refusal checked is the package's.
@pytest.mark.plaintext_file
def test_a_sidecar_that_cannot_be_made_private_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database is 0600 (made here); a -wal others could read must follow it.
    path = tmp_path / "state.db"
    SessionDB(path).close()
    wal = Path(f"{path}-wal")
    wal.touch()
    os.chmod(wal, 0o644)

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.raises(UnsafeFileError, match=f"^{wal} cannot be made private"):
        hermes_models.connect(path)


@pytest.mark.slow  # Python processes
def test_folders_the_store_creates_are_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "open" / "hermes"
    code = f"""
        import os
        os.umask(0)
        os.environ["HERMES_HOME"] = "{home}"
        from hermes_models import SessionDB
        store = SessionDB()
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hi")
        for path in ("{tmp_path / "open"}", "{home}", *sorted(
            os.path.join("{home}", name) for name in os.listdir("{home}")
        )):
            print(os.path.basename(path), oct(os.stat(path).st_mode & 0o7777))
        store.close()
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "open 0o700",
        "hermes 0o700",
        "state.db 0o600",
        "state.db-shm 0o600",
        "state.db-wal 0o600",
    ]


# -- paths that are not files ----------------------------------------------------------------


@pytest.fixture
def odd_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    link = tmp_path / "null-link.db"
    os.symlink("/dev/null", link)
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    return {
        "link to /dev/null": (link, "a character device"),
        "fifo": (fifo, "a FIFO"),
        "directory": (folder, "a directory"),
    }


@pytest.mark.parametrize("name", ["link to /dev/null", "fifo", "directory"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_path_that_is_not_a_regular_file_is_refused_at_once(
    odd_paths: dict[str, tuple[Path, str]], name: str, read_only: bool
) -> None:
    path, kind = odd_paths[name]
    with pytest.raises(NotADatabaseError) as caught:
        SessionDB(path, read_only=read_only)
    assert str(caught.value) == f"{path} is {kind}, not an SQLite database"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in path.parent.iterdir()) == ["fifo.db", "folder.db", "null-link.db"]


# The library refuses every kind at once (above); here the console script.
@pytest.mark.slow  # console-script runs
@pytest.mark.parametrize("name", ["link to /dev/null", "fifo"])
def test_the_cli_names_a_db_path_that_is_not_a_file(
    odd_paths: dict[str, tuple[Path, str]], name: str
) -> None:
    path, kind = odd_paths[name]
    script = Path(sys.executable).with_name("hermes-models")
    for command in (["migrate"], ["sessions"], ["stats"]):
        result = subprocess.run(
            [script, *command, "--db", str(path)], capture_output=True, text=True, timeout=60
        )
        assert (result.returncode, result.stdout) == (1, ""), command
        assert f"{path} is {kind}, not an SQLite database" in result.stderr, command
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


#: A writer that stops in the middle of a transaction (its changes spilled to the
#: file, the rollback journal left behind), as a process killed there would.
CRASHING_WRITER = """\
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 5")
conn.execute("BEGIN")
conn.execute("UPDATE messages SET content = content || ' (unfinished change)'")
os._exit(0)
"""


@pytest.mark.plaintext_file  # the killed writer is the standard library's sqlite3
@pytest.mark.slow  # a process that dies mid-transaction
def test_a_hot_journal_is_rolled_back_by_a_writable_open_and_named_by_a_read_only_one(
    tmp_path: Path,
) -> None:
    """Hermes on a file system without WAL keeps a rollback journal; a writer killed
    mid-transaction leaves it *hot*. SQLite rolls it back on the first read of a
    connection that may write; our read-only probes cannot, and the open took the file
    for a read-only one (then read it as an immutable snapshot: "malformed")."""
    db = tmp_path / "state.db"
    with SessionDB(db) as store:
        store.create_session("s1", "cli")
        for n in range(300):
            store.append_message("s1", "user", f"message {n} " + "x" * 400)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(db)], check=True)
    journal = Path(f"{db}-journal")
    assert journal.stat().st_size > 0
    with pytest.raises(sqlite3.OperationalError, match=r"state\.db-journal holds a transaction"):
        SessionDB(db, read_only=True)
    assert journal.stat().st_size > 0  # a read-only open changed nothing
    with SessionDB(db) as store:
        contents = [m["content"] for m in store.get_messages("s1")]
    assert contents == [f"message {n} " + "x" * 400 for n in range(300)]
    assert not journal.exists() or journal.stat().st_size == 0


def test_migrate_backup_and_repair_check_planted_sidecars_before_sqlite_reads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
    journal = tmp_path / "state.db-journal"
    journal.write_bytes(b"planted")
    os.chown(journal, NOBODY, NOBODY)
    refusal = (
        f"{journal} is owned by another user, nobody (uid {NOBODY}), not by the store's owner,"
        " root (uid 0); refusing to use it (anyone who can change it could read or alter the"
        " store). It is not a file SQLite made for this store: have its owner (or root)"
        " remove it, then open the store again"
    )
    for call in (
        lambda: hermes_models.migrate(path),
        lambda: backup(path, tmp_path / "copy.db"),
        lambda: SessionDB(path, read_only=True),
    ):
        with pytest.raises(UnsafeFileError) as caught:
            call()
        assert str(caught.value) == refusal
    assert hermes_models.repair_state_db_schema(path, backup=False) == {
        "repaired": False,
        "strategy": None,
        "backup_path": None,
        "error": refusal,
    }
    assert (journal.read_bytes(), sorted(p.name for p in tmp_path.iterdir())) == (
        b"planted",
        ["state.db", "state.db-journal"],
    )
