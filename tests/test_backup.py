"""Online backups: a consistent, checked, private copy of a store that writers keep using."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from console_script import build_demo_store, environment, run

import hermes_models.transfer.backups as backup_module
from hermes_models import BackupError, SessionDB
from hermes_models.driver import sqlite3
from hermes_models.transfer.backups import MANIFEST, backup, rotation_pattern

from snapshots import snapshot

T0 = 1_767_603_600.0


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return build_demo_store(tmp_path / "state.db")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_copy_is_the_store_private_checked_and_self_contained(
    source: Path, tmp_path: Path
) -> None:
    steps: list[tuple[int, int]] = []
    result = backup(source, tmp_path / "copy.db", progress=lambda d, t: steps.append((d, t)))
    copy = tmp_path / "copy.db"
    assert result == {
        "path": str(copy),
        "source": str(source),
        "bytes": copy.stat().st_size,
        "pages": steps[-1][1],
        "integrity": "ok",
        "removed": [],
        "leftovers": [],
    }
    assert steps[-1] == (steps[-1][1], steps[-1][1])
    assert mode(copy) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "copy.db",
        "state.db",
        "state.db-shm",
        "state.db-wal",
    ]
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        conn.close()
    assert snapshot(copy) == snapshot(source)
    with SessionDB(copy) as store:
        assert store.search_messages("事件循环")[0]["session_id"] == "demo-chinese"


def test_progress_comes_in_steps(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backup_module, "STEP_PAGES", 5)
    steps: list[tuple[int, int]] = []
    backup(source, tmp_path / "copy.db", progress=lambda d, t: steps.append((d, t)))
    total = steps[-1][1]
    assert [done for done, _ in steps] == [min(5 * n, total) for n in range(1, len(steps) + 1)]
    assert len(steps) == -(-total // 5)


def test_an_existing_file_is_never_replaced(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "taken.db"
    target.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="already exists"):
        backup(source, target)
    assert target.read_bytes() == b"precious"
    before = snapshot(source)
    with pytest.raises(FileExistsError, match="already exists"):
        backup(source, source)
    assert snapshot(source) == before


def test_a_folder_gets_named_copies_and_keep_rotates_them(source: Path, tmp_path: Path) -> None:
    folder = tmp_path / "backups" / "daily"
    made = [backup(source, folder, keep=2)["path"] for _ in range(4)]
    assert mode(folder) == 0o700
    names = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    assert names == sorted(Path(p).name for p in made[-2:])
    assert all(rotation_pattern("state").fullmatch(name) for name in names)
    (folder / "notes.txt").write_text("mine")
    (folder / "state-manual.db").write_text("mine too")
    backup(source, str(folder) + "/", keep=1)
    assert sorted(
        p.name for p in folder.iterdir() if not rotation_pattern("state").fullmatch(p.name)
    ) == [
        MANIFEST,
        "notes.txt",
        "state-manual.db",
    ]
    assert len([p for p in folder.iterdir() if rotation_pattern("state").fullmatch(p.name)]) == 1


def test_a_copy_that_fails_its_check_is_not_kept(source: Path, tmp_path: Path) -> None:
    conn = sqlite3.connect(source)
    conn.execute("UPDATE messages_fts_data SET block = zeroblob(length(block)) WHERE id > 10")
    conn.commit()
    conn.close()
    with pytest.raises(BackupError, match=r"search index messages_fts failed its check"):
        backup(source, tmp_path / "out" / "copy.db")
    assert list((tmp_path / "out").iterdir()) == []


def test_bad_arguments(source: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing to back up"):
        backup(tmp_path / "none.db", tmp_path / "copy.db")
    with pytest.raises(ValueError, match="keep must be at least 1"):
        backup(source, tmp_path / "c", keep=0)
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        backup(source, source, keep=2)
    assert not (tmp_path / "c").exists() and not (tmp_path / "copy.db").exists()


def test_a_copy_that_cannot_be_made_names_the_copy_asked_for(source: Path) -> None:
    # /proc exists, and refuses every new file (ENOENT): the error names the copy,
    # not the temporary file the backup writes first.
    with pytest.raises(FileNotFoundError) as raised:
        backup(source, "/proc/hermes-copy.db")
    error = raised.value
    assert (error.errno, error.filename) == (2, "/proc/hermes-copy.db")
    assert error.strerror == "cannot write /proc/hermes-copy.db: No such file or directory"


def test_sessiondb_backup(source: Path, tmp_path: Path) -> None:
    with SessionDB(source) as store:
        result = store.backup(tmp_path / "copies", keep=3)
    assert Path(result["path"]).parent == tmp_path / "copies"
    assert snapshot(Path(result["path"])) == snapshot(source)


# -- while writers write ----------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from hermes_models import SessionDB, WriteConflictError
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    failures = 0
    with SessionDB(path) as store:
        store.create_session(name, "cli")
        for index in range(count):
            try:
                store.append_message(name, "user", f"{name} {index} " + "x" * 2000)
            except WriteConflictError:
                failures += 1
            time.sleep(0.001)  # a writer that thinks between messages, as an agent does
    print(json.dumps({"failures": failures}))
    """
)


def grow(path: Path, messages: int) -> None:
    """Make the store big enough that copying it takes many steps."""
    with SessionDB(path) as store:
        store.create_session("bulk", "cli", started_at=T0)
        for index in range(messages):
            store.append_message("bulk", "user", f"bulk {index} " + "y" * 4000, timestamp=T0)


def written(path: Path, writers: list[str]) -> int:
    """How many messages the ``writers`` have committed to the store at ``path``."""
    conn = sqlite3.connect(path)
    try:
        marks = ", ".join("?" * len(writers))
        row = conn.execute(
            f"SELECT COUNT(*) FROM messages WHERE session_id IN ({marks})", writers
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def consistent(copy: Path, writers: list[str]) -> dict[str, int]:
    """Check that ``copy`` is one instant of the store: counters match rows, and each
    writer's messages are a gapless prefix of what it wrote. Returns messages per writer."""
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        mismatched = conn.execute(
            "SELECT s.id FROM sessions s WHERE s.message_count != "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id)"
        ).fetchall()
        assert mismatched == []
        seen = {}
        for name in writers:
            numbers = sorted(
                int(row[0].split()[1])
                for row in conn.execute(
                    "SELECT content FROM messages WHERE session_id = ?", (name,)
                )
            )
            assert numbers == list(range(len(numbers))), name
            seen[name] = len(numbers)
        return seen
    finally:
        conn.close()


@pytest.mark.slow
def test_copies_made_while_writers_write_are_consistent_and_nobody_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    grow(path, 3000)
    names = [f"writer-{n}" for n in range(3)]
    env = environment(tmp_path)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, "400"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in names
    ]
    monkeypatch.setattr(backup_module, "STEP_PAGES", 64)
    copies: list[Path] = []
    try:
        # The copies start once the writers write (each starts a Python process
        # first): a copy begun before any of them wrote could hold that instant
        # until they are done, and no copy would fall in the middle.
        deadline = time.monotonic() + 60
        while written(path, names) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        while not copies or (all(w.poll() is None for w in writers) and len(copies) < 6):
            # Slow steps, so that writers commit between the steps of one copy.
            result = backup(path, f"{tmp_path}/copies/", progress=lambda d, t: time.sleep(0.002))
            copies.append(Path(result["path"]))
        cli = run(
            "backup", "--db", str(path), str(tmp_path / "cli-copies") + "/", "--json", cwd=tmp_path
        )
    finally:
        outcomes = [w.communicate(timeout=300) for w in writers]
    assert cli.returncode == 0, cli.stderr
    copies.append(Path(json.loads(cli.stdout)[0]["path"]))
    for writer, (out, err) in zip(writers, outcomes):
        assert writer.returncode == 0, err
        assert json.loads(out) == {"failures": 0}
    counts = [consistent(copy, names) for copy in copies]
    mid_write = [c for c in counts if 0 < sum(c.values()) < 3 * 400]
    assert mid_write, f"no copy was made mid-write: {counts}"
    final = consistent(path, names)
    assert final == {name: 400 for name in names}
    assert all(mode(copy) == 0o600 for copy in copies)


def _erase_and_back_up(source: Path, folder: Path) -> None:
    with SessionDB(source) as store:
        store.create_session("secret", "cli")
        store.append_message("secret", "user", "erase me: ZXQ-secret")
    killed = backup(source, str(folder) + "/")["path"]
    # A killed backup leaves its hidden copy (the lock it held ended with it).
    leftover = folder / f".{Path(killed).name}.0badc0de.tmp"
    Path(killed).rename(leftover)
    Path(f"{leftover}-journal").write_bytes(b"")
    with SessionDB(source) as store:
        store.delete_session("secret")


def test_a_killed_backups_leftovers_go_with_the_next_backup(source: Path, tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    _erase_and_back_up(source, folder)
    # Someone else's files and a backup running now (it holds its lock) stay.
    (folder / ".notes.0badc0de.tmp").write_text("not a backup's")
    running = folder / ".state-20260105T090000Z.db.00c0ffee.tmp"
    running.write_bytes(b"being written")
    holder = os.open(running, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        result = backup(source, folder, keep=3)
    finally:
        os.close(holder)
    gone = sorted(Path(p).name for p in result["leftovers"])
    assert [name.split(".")[-2] for name in gone] == ["0badc0de", "0badc0de"]
    hidden = sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
    assert hidden == [MANIFEST, ".notes.0badc0de.tmp", running.name]
    # No file of the folder holds the erased message any more.
    for entry in folder.iterdir():
        assert b"ZXQ-secret" not in entry.read_bytes(), entry


def test_the_cli_says_which_leftovers_it_removed(source: Path, tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    _erase_and_back_up(source, folder)
    done = run("backup", str(folder) + "/", "--db", str(source), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if "killed backup" in line]
    assert len(said) == 2 and all(".0badc0de.tmp" in line for line in said), done.stdout


KILLED_BACKUP = textwrap.dedent(
    """
    import sys, time
    from hermes_models.transfer.backups import backup

    def progress(done, total):
        print("copying", flush=True)
        time.sleep(60)

    backup(sys.argv[1], sys.argv[2], progress=progress)
    """
)


@pytest.mark.slow  # a backup process killed with SIGKILL
def test_a_backup_killed_with_sigkill_leaves_nothing_after_the_next(
    source: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "backups"
    folder.mkdir(mode=0o700)
    for _ in range(2):
        with subprocess.Popen(
            [sys.executable, "-c", KILLED_BACKUP, str(source), str(folder) + "/"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None and child.stdout.readline() == "copying\n"
            child.kill()
            child.wait(30)
        time.sleep(1.1)  # the next copy's name takes another second
    # The second backup removed the first one's file before it was killed in turn.
    assert len([p for p in folder.iterdir() if p.name.endswith(".tmp")]) == 1
    result = backup(source, folder)
    assert len(result["leftovers"]) == 1
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, Path(result["path"]).name]


def test_keep_rotates_each_store_apart_in_one_folder(tmp_path: Path) -> None:
    # Two Hermes profiles, each a state.db, backed up into one folder: each keeps its
    # own newest copies, and neither rotation removes the other's (it did: both are
    # named state-<time>.db). A file of that name the manifest does not list (a copy
    # made by hand, or by an earlier release) is never removed.
    stores = []
    for profile in ("default", "work"):
        path = tmp_path / profile / "state.db"
        path.parent.mkdir()
        with SessionDB(path) as store:
            store.create_session(profile, "cli")
        stores.append(path)
    folder = tmp_path / "backups"
    folder.mkdir()
    unlisted = folder / "state-20200101T000000Z.db"
    shutil.copy(stores[0], unlisted)
    made: dict[Path, list[str]] = {path: [] for path in stores}
    for _ in range(3):
        for path in stores:
            made[path].append(backup(path, folder, keep=2)["path"])
    kept = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    newest = [Path(p).name for path in stores for p in made[path][-2:]]
    assert kept == sorted([*newest, unlisted.name])
    for path in stores:  # each copy left is a copy of the store it is listed for
        for copy in made[path][-2:]:
            with SessionDB(copy, read_only=True) as store:
                assert [s["id"] for s in store.list_sessions_rich()] == [path.parent.name]
    listed = json.loads((folder / MANIFEST).read_text())
    assert listed == {
        Path(copy).name: str(path.resolve()) for path in stores for copy in made[path][-2:]
    }
    assert mode(folder / MANIFEST) == 0o600
