"""The installed ``hermes-models`` script deleting and pruning as Hermes would, and
reading a file that holds times no date can stand for (run as a subprocess)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_models import Session, SessionDB

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


def rows(path: Path) -> dict[str, str | None]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY id"))
    finally:
        conn.close()


def messages(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"))
    finally:
        conn.close()


@pytest.fixture
def family(tmp_path: Path) -> Path:
    """An old compressed chat with a tagged run, an untagged live-time child, a
    continuation started 1 ms before its end, and a recent continuation."""
    path = tmp_path / "state.db"
    old = time.time() - 100 * DAY
    with SessionDB(path) as store:
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
        store.create_session(
            "recent", "cli", parent_session_id="skewed", started_at=time.time() - 3600
        )
        store.append_message("recent", "user", "two hours ago")
    return path


@pytest.mark.slow
def test_delete_keeps_every_untagged_child(family: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("chat.json", "run.jsonl", "request_dump_run_1.json", "side.json"):
        (folder / name).write_text("{}", encoding="utf-8")
    done = script(
        "delete", "--db", str(family), "--yes", "--sessions-dir", str(folder), "chat", cwd=tmp_path
    )
    # "chat" and its tagged subagent run "run" go; the others are named as kept.
    assert (done.returncode, done.stdout) == (
        0,
        "deleted 2 sessions (2 messages); 2 children kept as roots\n",
    )
    assert done.stderr.startswith("hint: ")  # a third of the messages went: vacuum
    assert rows(family) == {"recent": "skewed", "side": None, "skewed": None}
    assert messages(family) == {"recent": 1, "side": 1, "skewed": 1}
    assert sorted(os.listdir(folder)) == ["side.json"]
    again = script("delete", "--db", str(family), "--yes", "chat", cwd=tmp_path)
    assert (again.returncode, again.stderr) == (1, "Error: no session matches 'chat'\n")


@pytest.mark.slow
def test_delete_asks_and_a_no_keeps_everything(family: Path, tmp_path: Path) -> None:
    before = rows(family)
    refused = script("delete", "--db", str(family), "chat", cwd=tmp_path, stdin="n\n")
    assert refused.returncode == 1
    assert rows(family) == before


@pytest.mark.slow
def test_prune_takes_only_the_old_session_and_reports_it(family: Path, tmp_path: Path) -> None:
    done = script("prune", "--db", str(family), "--older-than", "90", "--yes", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        "pruned 1 session (1 message); 3 children kept as roots\n",
    )
    assert done.stderr.startswith("hint: ")
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
def test_vacuum_reports_the_optimized_indexes(family: Path, tmp_path: Path) -> None:
    done = script("vacuum", "--db", str(family), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"optimized 2 search indexes; {family}: ")


@pytest.mark.slow
def test_a_time_no_date_can_stand_for_breaks_no_command(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("fine", "cli")
        store.append_message("fine", "user", "a findable word")
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at)"
        " VALUES ('far', 'cli', 1e308, -1e308)"
    )
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('far', 'user', 'a findable word from far away', 1e308)"
    )
    conn.commit()
    conn.close()
    listing = script("sessions", "--db", str(path), cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "far" in listing.stdout and "fine" in listing.stdout
    assert "1e+308" in listing.stdout
    found = script("search", "--db", str(path), "findable", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert "far" in found.stdout and "fine" in found.stdout
    shown = script("show", "--db", str(path), "far", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "from far away" in shown.stdout
    exported = script("export", "--db", str(path), "--format", "md", "-o", "out.md", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "out.md").read_text(encoding="utf-8")
    assert "1e+308" in text and "from far away" in text
    bundle = script("export", "--db", str(path), "-o", "out.jsonl", cwd=tmp_path)
    assert bundle.returncode == 0, bundle.stderr
    refused = script("import", "--db", str(tmp_path / "copy.db"), "out.jsonl", cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: out.jsonl:")
    assert "between years 1 and 9999" in refused.stderr
