"""``erase``: the selection, the report, the WAL a reader holds, the installed script,
and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import plain_connection
from console_script import environment, run

from hermes_models import Session, SessionDB, conversations, using
from hermes_models.driver import sqlite3

DAY = 86400.0


def build(store: SessionDB) -> None:
    """Sessions of two sources and ages; a parent with a tagged subagent run and a
    branch; one running session."""
    now = time.time()
    for sid, source, age, title in (
        ("old_cli", "cli", 40, "Secret plan"),
        ("old_tg", "telegram", 40, "groceries"),
        ("new_tg", "telegram", 1, "secret recipe"),
        ("running", "telegram", 50, "secret running"),
    ):
        store.create_session(sid, source)
        store.append_message(sid, "user", f"hello from {sid}")
        store.set_session_title(sid, title)
        with plain_connection(store.database, Path(str(store.database.path))) as conn:
            conn.execute("UPDATE sessions SET started_at = ? WHERE id = ?", (now - age * DAY, sid))
            if sid != "running":
                conn.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now, sid))
            if hasattr(conn, "commit"):
                conn.commit()
    with using(store.database):
        run_child = Session.get_by_id("old_cli").delegate(session_id="old_cli_run")
        branch = Session.get_by_id("old_cli").branch(session_id="old_cli_branch")
    store.append_message(run_child.id, "assistant", "subagent text")
    store.append_message(branch.id, "user", "branch text")


@pytest.mark.backends("sqlite", "postgresql")
def test_sessions_to_erase_selects_by_source_age_and_title(store: SessionDB) -> None:
    build(store)
    with using(store.database):
        select = conversations.sessions_to_erase
        assert select(source="telegram") == ["old_tg", "new_tg"]
        assert select(older_than="30d") == ["old_cli", "old_tg"]
        assert select(older_than=time.time() - 30 * DAY, source="cli") == ["old_cli"]
        assert select(older_than=datetime.now(timezone.utc)) == ["old_cli", "old_tg", "new_tg"]
        assert select(title="secret") == ["old_cli", "new_tg"]
        assert select(title="secret*") == ["old_cli", "new_tg"]
        assert select(title="SECRET R*", ended_only=False) == ["running", "new_tg"]
        assert select(title="*plan") == ["old_cli"]
        assert select(title="[gs]*", source="telegram") == ["old_tg", "new_tg"]
        assert select(source="nowhere") == []
        with pytest.raises(ValueError, match="is no time"):
            select(older_than="last tuesday")
        with pytest.raises(TypeError, match="source must be str"):
            select(source=3)  # type: ignore[arg-type]


@pytest.mark.backends("sqlite", "postgresql")
def test_erase_follows_the_deletion_rules_and_reports(store: SessionDB) -> None:
    build(store)
    report = store.erase_sessions(["old_cli", "no such", "old_cli", 7])
    seconds = report.pop("seconds")
    assert seconds >= 0
    on_file = store.database.dialect == "sqlite"
    assert report == {
        "sessions": ["old_cli", "old_cli_run"],
        "messages": 2,
        "indexes_merged": (
            ["messages_fts", "messages_fts_trigram", "messages_cjk"]
            if on_file
            else ["idx_messages_search_tsv", "idx_messages_search_trgm", "idx_messages_cjk_grams"]
        ),
        "wal_truncated": on_file,
        "wal_blocked": False,
        "requested": ["old_cli"],
        "orphaned": ["old_cli_branch"],
        "vacuumed": [] if on_file else ["sessions", "messages"],
        "notes": [],
    }
    assert store.get_session("old_cli") is None
    assert store.get_session("old_cli_run") is None
    assert store.get_session("old_cli_branch")["parent_session_id"] is None
    assert [m["content"] for m in store.get_messages("old_cli_branch")] == [
        "hello from old_cli",
        "branch text",
    ]
    assert store.erase_sessions([])["sessions"] == []


def test_erase_report_is_frozen_and_plain(store: SessionDB) -> None:
    build(store)
    with using(store.database):
        report = conversations.erase_sessions(["old_tg"])
    assert isinstance(report, conversations.EraseReport)
    assert report.sessions == ("old_tg",)
    with pytest.raises(AttributeError):
        report.messages = 0  # type: ignore[misc]
    assert json.loads(json.dumps(report.as_dict()))["sessions"] == ["old_tg"]


def test_a_reader_holding_the_wal_is_reported(
    migrated_copy: Callable[[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read transaction open in another connection keeps the checkpoint from
    emptying the WAL: the erase still deletes, and says so instead of waiting on."""
    from hermes_models.store import writes

    monkeypatch.setattr(writes, "ERASE_CHECKPOINT_WAIT_S", 0.3)
    path = migrated_copy(tmp_path / "state.db")
    with SessionDB(path) as store:
        build(store)
        with contextlib.closing(sqlite3.connect(path)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM messages").fetchone()
            report = store.erase_sessions(["old_tg"])
            reader.execute("COMMIT")
        assert (report["wal_blocked"], report["wal_truncated"]) == (True, False)
        assert "a reader kept the WAL checkpoint from finishing" in report["notes"][0]
        assert store.get_session("old_tg") is None
        again = store.erase_sessions(["old_tg"])
        assert (again["sessions"], again["wal_blocked"], again["wal_truncated"]) == (
            [],
            False,
            True,
        )
    assert Path(f"{path}-wal").stat().st_size == 0 if Path(f"{path}-wal").exists() else True


# -- the installed script ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_script_erases_selects_asks_and_refuses(
    migrated_copy: Callable[[Path], Path], tmp_path: Path
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    with SessionDB(path) as store:
        build(store)
    env = environment(tmp_path)
    db = ["--db", str(path)]

    dry = run("erase", *db, "--source", "telegram", "--dry-run", "--json", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert [(r["id"], r["effect"]) for r in json.loads(dry.stdout)] == [
        ("new_tg", "erased"),
        ("old_tg", "erased"),
    ]

    refused = run("erase", *db, "old_tg", cwd=tmp_path, env=env)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == "Error: erase asks before it erases: not a terminal, pass --yes\n"

    both = run("erase", *db, "old_tg", "--source", "cli", "--yes", cwd=tmp_path, env=env)
    assert both.returncode == 2
    assert "give session ids or --source/--older-than/--title, not both" in both.stderr
    neither = run("erase", *db, "--yes", cwd=tmp_path, env=env)
    assert neither.returncode == 2

    done = run(
        "erase", *db, "--older-than", "30d", "--title", "secret", "--yes", cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "erased 2 sessions (2 messages); 1 child kept as a root: old_cli old_cli_run\n"
        "search indexes merged: messages_fts, messages_fts_trigram, messages_cjk\n"
        "WAL checkpointed and emptied\n"
    )
    report = run("erase", *db, "old_tg", "--yes", "--json", cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr
    record = json.loads(report.stdout)[0]
    assert (record["path"], record["sessions"], record["messages"]) == (str(path), ["old_tg"], 1)

    nothing = run("erase", *db, "--source", "nowhere", "--yes", cwd=tmp_path, env=env)
    assert (nothing.returncode, nothing.stdout) == (0, "nothing to erase\n")
    with SessionDB(path, read_only=True) as store:
        assert sorted(s["id"] for s in store.list_sessions_rich(limit=50)) == [
            "new_tg",
            "old_cli_branch",
            "running",
        ]
