"""HERMES_V16 3.6, archive (soft hide), called as a Hermes caller calls it.

``set_session_archived`` flags the whole compression lineage of a session,
returns whether the session exists, and archived sessions leave the picker
and the empty-session sweep while search still finds them. Beyond B: a chain
of any length is archived whole (B's walk and ours used to stop at 1,000
links), so archiving and unarchiving from any two links never leaves part of
a conversation hidden.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hermes_models import Session, SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def archived(store: SessionDB) -> list[str]:
    rows = store._conn.execute("SELECT id FROM sessions WHERE archived = 1 ORDER BY id")
    return [row[0] for row in rows]


@pytest.fixture
def lineage(store: SessionDB) -> SessionDB:
    """root -> cont -> tip by compression; a branch, a subagent run and an unrelated chat."""
    t0 = 1_700_000_000.0
    store.create_session("root", "cli", started_at=t0)
    store.append_message("root", "user", "archive me", timestamp=t0 + 1)
    store.create_session(
        "run",
        "cli",
        parent_session_id="root",
        model_config={"_delegate_from": "root"},
        started_at=t0 + 5,
    )
    Session.get_by_id("root").end("compression", at=t0 + 10)
    store.create_session("cont", "cli", parent_session_id="root", started_at=t0 + 10)
    Session.get_by_id("cont").end("compression", at=t0 + 20)
    store.create_session("tip", "cli", parent_session_id="cont", started_at=t0 + 20)
    store.append_message("tip", "user", "still talking", timestamp=t0 + 21)
    store.create_session(
        "fork",
        "cli",
        parent_session_id="tip",
        model_config={"_branched_from": "tip"},
        started_at=t0 + 30,
    )
    store.create_session("other", "cli", started_at=t0 + 40)
    store.append_message("other", "user", "archive me not", timestamp=t0 + 41)
    return store


@pytest.mark.parametrize("entry", ["root", "cont", "tip"])
def test_archiving_any_link_archives_the_whole_chain(lineage: SessionDB, entry: str) -> None:
    assert lineage.set_session_archived(entry, True) is True
    assert archived(lineage) == ["cont", "root", "tip"]
    assert lineage.set_session_archived(entry, False) is True
    assert archived(lineage) == []


def test_unknown_sessions_and_flags(lineage: SessionDB) -> None:
    assert lineage.set_session_archived("missing", True) is False
    assert lineage.set_session_archived("fork", 1) is True  # a branch is its own chain
    assert archived(lineage) == ["fork"]
    assert lineage.get_session("fork")["archived"] == 1
    assert lineage.set_session_archived("fork", 0) is True
    assert lineage.get_session("fork")["archived"] == 0


def test_archived_sessions_leave_the_picker_but_not_search(lineage: SessionDB) -> None:
    lineage.set_session_archived("tip", True)
    shown = [row["id"] for row in lineage.list_sessions_rich(limit=None)]
    assert "root" not in shown and "tip" not in shown
    assert "other" in shown and "fork" in shown
    only = lineage.list_sessions_rich(limit=None, archived_only=True)
    assert [row.get("_lineage_root_id", row["id"]) for row in only] == ["root"]
    every = lineage.list_sessions_rich(limit=None, include_archived=True)
    assert {row.get("_lineage_root_id", row["id"]) for row in every} >= {"root", "other"}
    assert sorted(h["session_id"] for h in lineage.search_messages("archive")) == [
        "other",
        "root",
    ]


def test_archived_empty_sessions_are_not_swept(store: SessionDB) -> None:
    store.create_session("empty", "cli")
    store.end_session("empty", "done")
    store.set_session_archived("empty", True)
    assert store.count_empty_sessions() == 0
    assert store.delete_empty_sessions() == 0
    assert store.set_session_archived("empty", False) is True
    assert store.count_empty_sessions() == 1


def long_chain(path: Path, links: int) -> list[str]:
    """A compression chain of ``links`` continuations, written in one transaction."""
    ids = [f"c{n:05d}" for n in range(links + 1)]
    t0 = time.time() - 10 * 86400
    with SessionDB(path) as store:
        conn = store._conn
        conn.execute("BEGIN")
        for n, sid in enumerate(ids):
            conn.execute(
                "INSERT INTO sessions (id, source, started_at, parent_session_id, ended_at,"
                " end_reason) VALUES (?, 'cli', ?, ?, ?, ?)",
                (
                    sid,
                    t0 + n,
                    ids[n - 1] if n else None,
                    t0 + n + 1 if n < links else None,
                    "compression" if n < links else None,
                ),
            )
        conn.execute("COMMIT")
    return ids


@pytest.mark.slow
def test_a_chain_of_any_length_is_archived_whole(db_path: Path) -> None:
    ids = long_chain(db_path, 2500)
    with SessionDB(db_path) as store:
        assert store.set_session_archived(ids[0], True) is True
        assert len(archived(store)) == len(ids)
        assert store.set_session_archived(ids[-1], False) is True
        assert archived(store) == []
        assert store.set_session_archived(ids[1200], True) is True
        assert len(archived(store)) == len(ids)
        assert store.set_session_archived(ids[0], False) is True
        assert archived(store) == []
        shown = store.list_sessions_rich(limit=None)
        assert [row.get("_lineage_root_id", row["id"]) for row in shown] == [ids[0]]


def test_a_compression_cycle_ends_the_walk(store: SessionDB) -> None:
    store.create_session("a", "cli", started_at=100.0)
    store.create_session("b", "cli", parent_session_id="a", started_at=200.0)
    conn = store._conn
    conn.execute("UPDATE sessions SET ended_at = 150, end_reason = 'compression' WHERE id = 'a'")
    conn.execute("UPDATE sessions SET ended_at = 50, end_reason = 'compression' WHERE id = 'b'")
    conn.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    conn.commit()
    assert store.set_session_archived("a", True) is True
    assert archived(store) == ["a", "b"]
