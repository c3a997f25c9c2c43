"""Deleting sessions with their subagent runs, pruning, and compacting the file."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

import pytest

from hermes_models import Session, SessionDB

T0 = 1_700_000_000.0


def make(store: SessionDB, sid: str, at: float, messages: int = 1, **options: Any) -> str:
    store.create_session(sid, options.pop("source", "cli"), started_at=T0 + at, **options)
    for n in range(messages):
        store.append_message(sid, "user", f"{sid} message {n}", timestamp=T0 + at + n + 1)
    return sid


def end(sid: str, reason: str, at: float) -> None:
    Session.get_by_id(sid).end(reason, at=T0 + at)


def snapshot(store: SessionDB) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    conn = store._conn
    sessions = conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY id").fetchall()
    messages = conn.execute("SELECT id, session_id FROM messages ORDER BY id").fetchall()
    return sessions, messages


@pytest.fixture
def tree(store: SessionDB) -> SessionDB:
    make(store, "top", 0, messages=2)
    make(store, "sub", 10, parent_session_id="top", messages=2)  # ephemeral: parent live
    make(store, "sub-sub", 20, parent_session_id="sub", messages=1)  # ephemeral of ephemeral
    make(store, "sub-fork", 30, parent_session_id="sub", model_config={"_branched_from": "sub"})
    make(store, "fork", 40, parent_session_id="top", model_config={"_branched_from": "top"})
    end("top", "compression", 100)
    make(store, "cont", 100, parent_session_id="top", messages=2)
    make(store, "tagged", 110, parent_session_id="top", model_config={"_delegate_from": "top"})
    make(store, "other", 200, messages=3)
    return store


def test_delete_cascades_ephemeral_children(tree: SessionDB) -> None:
    assert tree.delete_session("top") is True
    sessions, messages = snapshot(tree)
    assert sessions == [("cont", None), ("fork", None), ("other", None), ("sub-fork", None)]
    assert sorted({sid for _, sid in messages}) == ["cont", "fork", "other", "sub-fork"]
    assert tree.message_count() == 2 + 1 + 3 + 1
    assert tree._conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert tree.delete_session("top") is False


def test_deleted_messages_leave_the_search_indexes(tree: SessionDB) -> None:
    tree.delete_session("top")
    conn = tree._conn
    for table in ("messages_fts", "messages_fts_trigram"):
        indexed = conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid").fetchall()
        assert indexed == conn.execute("SELECT id FROM messages ORDER BY id").fetchall()
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


def test_delete_sessions_counts_the_ones_that_existed(tree: SessionDB) -> None:
    assert tree.delete_sessions(["other", "cont", "missing"]) == 2
    assert [row[0] for row in snapshot(tree)[0]] == [
        "fork",
        "sub",
        "sub-fork",
        "sub-sub",
        "tagged",
        "top",
    ]
    with pytest.raises(TypeError, match="session_ids"):
        tree.delete_sessions("other")
    with pytest.raises(TypeError, match=r"session_ids\[1\]"):
        tree.delete_sessions(["other", 3])  # type: ignore[list-item]


def test_a_failed_delete_changes_nothing(tree: SessionDB) -> None:
    before = snapshot(tree)
    tree._conn.execute(
        "CREATE TRIGGER refuse_delete BEFORE DELETE ON sessions WHEN old.id = 'sub-sub' "
        "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
    )
    with pytest.raises(sqlite3.IntegrityError, match="refused by test"):
        tree.delete_session("top")
    assert snapshot(tree) == before


def test_prune_removes_old_ended_sessions(store: SessionDB) -> None:
    now = time.time()
    store.create_session("old-ended", "cli", started_at=now - 100 * 86400)
    store.end_session("old-ended", "done")
    store.create_session("old-open", "cli", started_at=now - 100 * 86400)
    store.create_session("old-tg", "telegram", started_at=now - 100 * 86400)
    store.end_session("old-tg", "done")
    store.create_session("recent", "cli", started_at=now - 5 * 86400)
    store.end_session("recent", "done")
    store.create_session(
        "child",
        "cli",
        parent_session_id="old-ended",
        model_config={"_branched_from": "old-ended"},
        started_at=now - 1,
    )
    assert store.prune_sessions(older_than_days=90, source="cli") == 1
    assert sorted(s.id for s in Session.select()) == ["child", "old-open", "old-tg", "recent"]
    assert store.get_session("child")["parent_session_id"] is None
    assert store.prune_sessions(older_than_days=90) == 1
    assert store.prune_sessions(older_than_days=1) == 1
    assert sorted(s.id for s in Session.select()) == ["child", "old-open"]
    with pytest.raises(ValueError, match="older_than_days"):
        store.prune_sessions(older_than_days=-1)


def test_empty_sessions(store: SessionDB) -> None:
    now = time.time()
    store.create_session("live-empty", "cli", started_at=now)
    store.create_session("ended-empty", "cli", started_at=now)
    store.end_session("ended-empty", "done")
    store.create_session("stale-empty", "cli", started_at=now - 3 * 86400)
    store.create_session("full", "cli", started_at=now - 3 * 86400)
    store.append_message("full", "user", "hi")
    store.end_session("full", "done")
    assert store.count_empty_sessions() == 2
    assert store.delete_empty_sessions() == 2
    assert sorted(s.id for s in Session.select()) == ["full", "live-empty"]
    assert store.count_empty_sessions() == 0


def test_optimize_and_vacuum_keep_everything(tree: SessionDB) -> None:
    before = snapshot(tree)
    assert tree.optimize_fts() == 2
    tree.vacuum()
    assert snapshot(tree) == before
    assert os.path.getsize(f"{tree.db_path}-wal") == 0
    assert tree._conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_vacuum_on_a_read_only_store_is_refused(tree: SessionDB) -> None:
    from hermes_models import ReadOnlyDatabaseError

    tree.close()
    reader = SessionDB(tree.db_path, read_only=True)
    try:
        with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
            reader.vacuum()
        assert reader.session_count() == 8
    finally:
        reader.close()
