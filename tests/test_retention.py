"""Retention policies: which ended sessions ``retain_sessions`` / ``hermes-models retain``
erase, that time picks only what is asked for (subagent runs follow their session by
their tags, whatever their age), that live sessions and everything else stay whole, and
that a size limit erases the oldest first until the file fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import plain_connection, target_of

from hermes_models import SessionDB

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


def snapshot(store: SessionDB) -> dict[str, Any]:
    """Every session row and every message row, by id."""
    sessions = {
        row[0]: tuple(row)
        for row in store._conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    }
    messages = {
        row[0]: tuple(row)
        for row in store._conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    }
    return {"sessions": sessions, "messages": messages}


def age(store: SessionDB, tmp_path: Path, **days_ago: float) -> None:
    """Set each named session's ``started_at`` that many days back."""
    now = time.time()
    with plain_connection(store.database, tmp_path / "state.db") as conn:
        for sid, days in days_ago.items():
            conn.execute("UPDATE sessions SET started_at = ? WHERE id = ?", (now - days * DAY, sid))
        if hasattr(conn, "commit"):
            conn.commit()


@pytest.fixture
def aged(store: SessionDB, tmp_path: Path) -> SessionDB:
    """Old and new, ended and live sessions with children of every kind.

    - ``old``: ended 100 days ago; its subagent run ``old-run`` started today
      (it still goes with ``old``: tags, not time); its compression continuation
      ``old-next`` started today and is kept, as a root;
    - ``old-live``: started 100 days ago and still running: kept;
    - ``old-cron``: an ended cron session of 100 days ago;
    - ``old-archived``: ended, archived, 100 days ago;
    - ``new``: ended today.
    """
    for sid, source in (
        ("old", "cli"),
        ("old-live", "cli"),
        ("old-cron", "cron"),
        ("old-archived", "cli"),
        ("new", "cli"),
    ):
        store.create_session(sid, source)
        store.append_message(sid, "user", f"words of {sid}")
    store.create_session(
        "old-run", "cli", parent_session_id="old", model_config={"_delegate_from": "old"}
    )
    store.append_message("old-run", "assistant", "subagent work")
    store.end_session("old", "compression")
    store.create_session("old-next", "cli", parent_session_id="old")
    store.append_message("old-next", "user", "the conversation goes on")
    for sid in ("old-run", "old-cron", "old-archived", "new", "old-next"):
        store.end_session(sid, "user_exit")
    store.set_session_archived("old-archived", True)
    age(store, tmp_path, **{"old": 100, "old-live": 100, "old-cron": 100, "old-archived": 100})
    return store


def parents(store: SessionDB) -> dict[str, str | None]:
    return dict(store._conn.execute("SELECT id, parent_session_id FROM sessions").fetchall())


def test_an_age_policy_erases_old_ended_sessions_with_their_subagent_runs_only(
    aged: SessionDB,
) -> None:
    before = snapshot(aged)
    plan = aged.plan_retention(older_than_days=30)
    assert sorted(plan["by_age"]) == ["old", "old-archived", "old-cron"]
    assert plan["by_size"] == []

    report = aged.retain_sessions(older_than_days=30)

    assert sorted(report["erased"]) == ["old", "old-archived", "old-cron", "old-run"]
    assert report["messages"] == 4
    assert report["batches"] == 1
    after = snapshot(aged)
    kept = {"old-live", "new", "old-next"}
    assert set(after["sessions"]) == kept
    # Every kept row is as it was, but for the continuation, now a root.
    for sid in kept - {"old-next"}:
        assert after["sessions"][sid] == before["sessions"][sid]
    assert parents(aged)["old-next"] is None
    kept_messages = {mid: row for mid, row in before["messages"].items() if row[1] in kept}
    assert after["messages"] == kept_messages


def test_filters_narrow_what_a_limit_takes(aged: SessionDB) -> None:
    report = aged.retain_sessions(older_than_days=30, sources=["cron"])
    assert list(report["erased"]) == ["old-cron"]
    report = aged.retain_sessions(older_than_days=30, archived_only=True)
    assert list(report["erased"]) == ["old-archived"]
    assert sorted(parents(aged)) == ["new", "old", "old-live", "old-next", "old-run"]


def test_filters_without_a_limit_take_every_ended_session_they_match(aged: SessionDB) -> None:
    aged.set_session_archived("new", True)
    report = aged.retain_sessions(archived_only=True)
    assert sorted(report["erased"]) == ["new", "old-archived"]


def test_batches_are_short_writes_and_erase_the_same(aged: SessionDB) -> None:
    report = aged.retain_sessions(older_than_days=30, batch_size=1)
    assert report["batches"] == 3
    assert sorted(report["erased"]) == ["old", "old-archived", "old-cron", "old-run"]


def test_nothing_matching_erases_nothing(aged: SessionDB) -> None:
    before = snapshot(aged)
    report = aged.retain_sessions(older_than_days=365)
    assert report["erased"] == []
    assert report["batches"] == 0
    assert snapshot(aged) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a limit"),
        ({"older_than_days": -1}, "older_than_days"),
        ({"older_than_days": float("nan")}, "older_than_days"),
        ({"max_bytes": -5}, "max_bytes"),
        ({"max_bytes": 1.5}, "max_bytes"),
        ({"sources": "cli"}, "sources"),
        ({"sources": [""]}, "source"),
        ({"archived_only": 1}, "archived_only"),
    ],
)
def test_a_malformed_policy_is_refused_naming_what_is_wrong(
    aged: SessionDB, kwargs: dict[str, Any], message: str
) -> None:
    before = snapshot(aged)
    with pytest.raises(ValueError, match=message):
        aged.retain_sessions(**kwargs)
    assert snapshot(aged) == before


def test_a_size_limit_erases_the_oldest_until_the_file_fits(
    store: SessionDB, backend: str, tmp_path: Path
) -> None:
    if backend == "postgresql":
        with pytest.raises(ValueError, match="size limit applies to a SQLite file"):
            store.retain_sessions(max_bytes=1_000_000)
        return
    text = "retention corpus " * 200  # 3.4 kB a message
    for n in range(60):
        sid = f"s{n:02d}"
        store.create_session(sid, "cli")
        for _ in range(10):
            store.append_message(sid, "user", f"{text} {sid}")
        store.end_session(sid, "user_exit")
    store.create_session("live", "cli")
    store.append_message("live", "user", text)
    age(store, tmp_path, **{f"s{n:02d}": 100 - n for n in range(60)})
    used = store.plan_retention(max_bytes=0)["used_bytes"]
    assert used is not None and used > 0
    limit = used // 2

    report = store.retain_sessions(max_bytes=limit, batch_size=5)

    assert report["used_bytes_before"] == used
    assert report["used_bytes_after"] is not None and report["used_bytes_after"] <= limit
    erased = sorted(report["erased"])
    kept = sorted(set(parents(store)) - {"live"})
    # The oldest went: every erased session started before every kept one.
    assert erased and kept
    assert max(erased) < min(kept)
    assert "live" in parents(store)
    # It took no more than a batch beyond what was needed: the file is not emptied.
    assert len(erased) < 60


def test_the_cli_shows_asks_and_erases_by_policy(aged: SessionDB, tmp_path: Path) -> None:
    target = str(target_of(aged.database))
    before = snapshot(aged)

    shown = script("retain", "--db", target, "--older-than", "30d", "--dry-run", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "would erase 4 sessions (4 messages); 1 child stays as a root:" in shown.stdout
    for sid in ("old", "old-run", "old-cron", "old-archived", "old-next"):
        assert sid in shown.stdout
    assert snapshot(aged) == before

    unanswered = script("retain", "--db", target, "--older-than", "30d", cwd=tmp_path, stdin="")
    assert unanswered.returncode == 1
    assert unanswered.stderr.strip().endswith("not confirmed; nothing was erased")
    assert snapshot(aged) == before

    done = script("retain", "--db", target, "--older-than", "30d", "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)
    assert sorted(record["erased"]) == ["old", "old-archived", "old-cron", "old-run"]
    assert record["messages"] == 4
    assert sorted(parents(aged)) == ["new", "old-live", "old-next"]

    again = script("retain", "--db", target, "--older-than", "30d", "--yes", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "nothing to erase\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "retain needs a policy: --older-than, --max-size, --source or --archived"),
        (("--older-than", "soon"), "'--older-than'"),
        (("--max-size", "lots"), "'lots' is no size"),
        (("--max-size", "-1MB"), "is no size"),
        (("--source", ""), "must not be empty"),
        (("--older-than", "30d", "--batch", "0"), "--batch"),
    ],
)
def test_the_cli_refuses_a_malformed_policy_in_one_line(
    aged: SessionDB, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    before = snapshot(aged)
    result = script("retain", "--db", str(target_of(aged.database)), *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert snapshot(aged) == before


def test_retention_beside_a_writer_loses_no_append(store: SessionDB, tmp_path: Path) -> None:
    for n in range(40):
        sid = f"old{n:02d}"
        store.create_session(sid, "cli")
        store.append_message(sid, "user", f"old words {n}")
        store.end_session(sid, "user_exit")
    store.create_session("live", "cli")
    age(store, tmp_path, **{f"old{n:02d}": 100 for n in range(40)})
    written: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        with SessionDB(target_of(store.database)) as other:
            n = 0
            while not stop.is_set() or n < 20:
                written.append(other.append_message("live", "user", f"turn {n}"))
                n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        report = store.retain_sessions(older_than_days=30, batch_size=4)
    finally:
        stop.set()
        thread.join(60)
    assert len(report["erased"]) == 40
    assert report["batches"] == 10
    ids = [m["id"] for m in store.get_messages("live")]
    assert ids == written
    assert sorted(parents(store)) == ["live"]


@pytest.mark.plaintext_file  # reads the file's bytes
@pytest.mark.backends("sqlite")  # the bytes of a file
def test_what_retention_erased_is_nowhere_in_the_file(store: SessionDB, tmp_path: Path) -> None:
    canaries = {"old": "qzxcanaryoldword", "keep": "qzxcanarykeptword"}
    for sid, word in canaries.items():
        store.create_session(sid, "cli")
        for n in range(30):
            store.append_message(sid, "user", f"{word} 秘密的话{n} and more text {n}")
        store.set_session_title(sid, f"title {word}")
        store.end_session(sid, "user_exit")
    age(store, tmp_path, old=100)
    report = store.retain_sessions(older_than_days=30, batch_size=1)
    assert list(report["erased"]) == ["old"]
    files = [p for p in tmp_path.iterdir() if p.name.startswith("state.db")]
    raw = b"".join(p.read_bytes() for p in files)
    assert canaries["old"].encode() not in raw
    assert canaries["keep"].encode() in raw
    assert store.get_messages("keep")[0]["content"].startswith(canaries["keep"])
    assert store.search_messages(canaries["old"]) == []
