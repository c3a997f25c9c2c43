"""The installed ``hermes-models`` script deleting and pruning as Hermes would, and
reading a file that holds times no date can stand for (run as a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXPORT_FLAGS, plain_connection, target_of

from hermes_models import Session, SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

SCRIPT = Path(sys.executable).parent / "hermes-models"
DAY = 86400.0


def script(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(cwd / "home"), "COLUMNS": "120"}
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rows(target: str) -> dict[str, str | None]:
    with SessionDB(target, read_only=True) as store:
        sql = "SELECT id, parent_session_id FROM sessions ORDER BY id"
        return {row[0]: row[1] for row in store._conn.execute(sql)}


def messages(target: str) -> dict[str, int]:
    with SessionDB(target, read_only=True) as store:
        sql = "SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"
        return {row[0]: row[1] for row in store._conn.execute(sql)}


def hint(target: str, share: int) -> str:
    """What deleting ``share`` percent of the messages says on standard error: vacuum the
    file; nothing on a server (its autovacuum reuses the space, and vacuum is refused)."""
    if target.startswith("postgresql://"):
        return ""
    return (
        f"hint: {share}% of the messages went; `hermes-models vacuum` gives the space back"
        " to the file system\n"
    )


@pytest.fixture
def family(store: SessionDB) -> str:
    """An old compressed chat with a tagged run, an untagged live-time child, a
    continuation started 1 ms before its end, and a recent continuation (the store's
    ``--db``)."""
    old = time.time() - 100 * DAY
    store.create_session("chat", "cli", started_at=old)
    store.append_message("chat", "user", "plan the trip", timestamp=old + 1)
    store.create_session(
        "run",
        "cli",
        parent_session_id="chat",
        model_config={"_delegate_from": "chat"},
        started_at=old + 10,
    )
    store.append_message("run", "assistant", "searched flights", timestamp=old + 11)
    store.create_session("side", "cli", parent_session_id="chat", started_at=old + 20)
    store.append_message("side", "user", "side question", timestamp=old + 21)
    Session.get_by_id("chat").end("compression", at=old + 100)
    store.create_session("skewed", "cli", parent_session_id="chat", started_at=old + 99.999)
    store.append_message("skewed", "user", "continued", timestamp=old + 101)
    store.create_session("recent", "cli", parent_session_id="skewed", started_at=time.time() - 3600)
    store.append_message("recent", "user", "two hours ago")
    return str(target_of(store.database))


@pytest.mark.slow
def test_delete_keeps_every_untagged_child(family: str, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("chat.json", "run.jsonl", "request_dump_run_1.json", "side.json"):
        (folder / name).write_text("{}", encoding="utf-8")
    done = script(
        "delete", "--db", family, "--yes", "--sessions-dir", str(folder), "chat", cwd=tmp_path
    )
    # "chat" and its tagged subagent run "run" go; the others are named as kept.
    assert (done.returncode, done.stdout) == (
        0,
        "deleted 2 sessions (2 messages); 2 children kept as roots\n",
    )
    assert done.stderr == hint(family, 40)  # two of five messages went: vacuum
    assert rows(family) == {"recent": "skewed", "side": None, "skewed": None}
    assert messages(family) == {"recent": 1, "side": 1, "skewed": 1}
    assert sorted(os.listdir(folder)) == ["side.json"]
    again = script("delete", "--db", family, "--yes", "chat", cwd=tmp_path)
    assert (again.returncode, again.stderr) == (1, "Error: no session matches 'chat'\n")


@pytest.mark.slow
def test_delete_asks_and_a_no_keeps_everything(family: str, tmp_path: Path) -> None:
    before = rows(family)
    refused = script("delete", "--db", family, "chat", cwd=tmp_path, stdin="n\n")
    assert refused.returncode == 1
    assert rows(family) == before


@pytest.mark.slow
def test_prune_takes_only_the_old_session_and_reports_it(family: str, tmp_path: Path) -> None:
    done = script("prune", "--db", family, "--older-than", "90", "--yes", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        "pruned 1 session (1 message); 3 children kept as roots\n",
    )
    assert done.stderr == hint(family, 20)
    # run, side and skewed are not ended, so not pruned; all are orphaned.
    assert rows(family) == {"recent": "skewed", "run": None, "side": None, "skewed": None}
    assert messages(family) == {"recent": 1, "run": 1, "side": 1, "skewed": 1}
    piped = subprocess.run(
        f"'{SCRIPT}' prune --db '{family}' --older-than 0 --yes | cat",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (piped.returncode, piped.stdout) == (0, "nothing to prune\n")


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # vacuum compacts a file (a server store refuses: test_cli.py)
def test_vacuum_reports_the_optimized_indexes(family: str, tmp_path: Path) -> None:
    done = script("vacuum", "--db", family, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"optimized 2 search indexes; {family}: ")


@pytest.mark.slow
def test_a_time_no_date_can_stand_for_breaks_no_command(
    store: SessionDB, db_path: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store.create_session("fine", "cli")
    store.append_message("fine", "user", "a findable word")
    with plain_connection(store.database, db_path) as conn:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, ended_at)"
            " VALUES ('far', 'cli', 1e308, -1e308)"
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('far', 'user', 'a findable word from far away', 1e308)"
        )
        conn.commit()
    path = str(target_of(store.database))
    if store.database.dialect == "postgresql":
        empty = request.getfixturevalue("pg").new_database()
    else:
        empty = str(tmp_path / "copy.db")
    listing = script("sessions", "--db", path, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "far" in listing.stdout and "fine" in listing.stdout
    assert "1e+308" in listing.stdout
    found = script("search", "--db", path, "findable", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert "far" in found.stdout and "fine" in found.stdout
    shown = script("show", "--db", path, "far", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "from far away" in shown.stdout
    exported = script(
        "export", "--db", path, *EXPORT_FLAGS, "--format", "md", "-o", "out.md", cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "out.md").read_text(encoding="utf-8")
    assert "1e+308" in text and "from far away" in text
    bundle = script("export", "--db", path, *EXPORT_FLAGS, "-o", "out.jsonl", cwd=tmp_path)
    assert bundle.returncode == 0, bundle.stderr
    refused = script("import", "--db", empty, "out.jsonl", cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: out.jsonl:")
    assert "between years 1 and 9999" in refused.stderr
