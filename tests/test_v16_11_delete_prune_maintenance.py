"""HERMES_V16 3.11 (with 3.3's ghost sweep), deletion, pruning and maintenance, called
as a Hermes caller calls them, with B's results.

``maybe_auto_prune_and_vacuum`` is not exercised here (it belongs to the
other half of this work); everything else of the subsection is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

DAY = 86400.0


def ids(store: SessionDB) -> dict[str, str | None]:
    return dict(
        store._conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY id").fetchall()
    )


def listed(store: SessionDB) -> list[str]:
    return sorted(row["id"] for row in store.list_sessions_rich(limit=None))


@pytest.fixture
def db(store: SessionDB) -> SessionDB:
    store.create_session("parent", "cli")
    store.append_message("parent", "user", "hi")
    store.create_session(
        "delegate", "cli", parent_session_id="parent", model_config={"_delegate_from": "parent"}
    )
    store.append_message("delegate", "assistant", "subagent work")
    store.create_session(
        "nested", "cli", parent_session_id="delegate", model_config={"_delegate_from": "delegate"}
    )
    store.create_session(
        "branch", "cli", parent_session_id="parent", model_config={"_branched_from": "parent"}
    )
    store.create_session("untagged", "cli", parent_session_id="parent")
    store.create_session("grandchild", "cli", parent_session_id="branch")
    return store


def test_delete_session(db: SessionDB, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for sid in ("parent", "delegate", "nested", "branch"):
        for name in (f"{sid}.json", f"{sid}.jsonl", f"request_dump_{sid}_1.json"):
            (folder / name).write_text("{}")
    assert db.delete_session("nope") is False
    assert db.delete_session("parent", sessions_dir=folder) is True
    assert ids(db) == {"branch": None, "grandchild": "branch", "untagged": None}
    assert db.get_messages("parent") == []
    assert db.get_messages("delegate") == []
    assert sorted(os.listdir(folder)) == [
        "branch.json",
        "branch.jsonl",
        "request_dump_branch_1.json",
    ]
    # The untagged child is now a root: a picker shows it.
    assert listed(db) == ["branch", "untagged"]


def test_any_tagged_child_goes_and_a_tag_naming_the_parent_takes_a_root(
    store: SessionDB,
) -> None:
    store.create_session("a", "cli")
    store.create_session("b", "cli")
    # Tagged with another session's id, but a child of a: it goes with a.
    store.create_session("run", "cli", parent_session_id="a", model_config={"_delegate_from": "b"})
    # No parent, but its tag names a: it goes with a too.
    store.create_session("loose", "cli", model_config={"_delegate_from": "a"})
    assert store.delete_session("a") is True
    assert ids(store) == {"b": None}


def test_a_tagged_survivor_of_a_prune_stays_hidden(store: SessionDB) -> None:
    store.create_session("old", "cli", started_at=time.time() - 100 * DAY)
    store.end_session("old", "done")
    store.create_session(
        "run", "cli", parent_session_id="old", model_config={"_delegate_from": "old"}
    )
    store.create_session("side", "cli", parent_session_id="old")
    assert store.prune_sessions(90) == 1  # no cascade
    assert ids(store) == {"run": None, "side": None}
    assert listed(store) == ["side"]


def test_delete_session_if_empty(db: SessionDB) -> None:
    db.create_session("blank", "tui")
    db.create_session("named", "tui")
    db.set_session_title("named", "kept")
    assert db.delete_session_if_empty("blank") is True
    assert db.delete_session_if_empty("named") is False
    assert db.delete_session_if_empty("parent") is False  # messages
    assert db.delete_session_if_empty("branch") is False  # a child
    assert db.delete_session_if_empty("nested") is True
    assert db.delete_session_if_empty("nope") is False
    assert "blank" not in ids(db) and "named" in ids(db)


def test_delete_sessions(db: SessionDB) -> None:
    assert db.delete_sessions([]) == 0
    assert db.delete_sessions([None, 1, ""]) == 0  # type: ignore[list-item]
    db.create_session("live", "cli")
    db.create_session("hidden", "cli")
    db.set_session_archived("hidden", True)
    assert db.delete_sessions(["live", "hidden", "live", "nope"]) == 2
    assert db.delete_sessions(["parent", "branch"]) == 2
    assert ids(db) == {"grandchild": None, "untagged": None}


def test_empty_sessions(store: SessionDB) -> None:
    store.create_session("empty-ended", "cli")
    store.end_session("empty-ended", "user_exit")
    store.create_session("empty-open", "cli")
    store.create_session("empty-archived", "cli")
    store.end_session("empty-archived", "user_exit")
    store.set_session_archived("empty-archived", True)
    store.create_session("full", "cli")
    store.append_message("full", "user", "x")
    store.end_session("full", "user_exit")
    store.create_session(
        "worker",
        "cli",
        parent_session_id="empty-ended",
        model_config={"_delegate_from": "empty-ended"},
    )
    store.append_message("worker", "assistant", "y")
    assert store.count_empty_sessions() == 1
    assert store.delete_empty_sessions() == 1
    assert ids(store) == {
        "empty-archived": None,
        "empty-open": None,
        "full": None,
        "worker": None,
    }
    assert store.count_empty_sessions() == 0


def test_prune_sessions(store: SessionDB, tmp_path: Path) -> None:
    now = time.time()
    # A(old) -> B(old) -> C(recent) -> D: two pruned, C becomes a root, D keeps C.
    store.create_session("A", "cli", started_at=now - 200 * DAY)
    store.create_session("B", "cli", parent_session_id="A", started_at=now - 150 * DAY)
    store.create_session("C", "cli", parent_session_id="B", started_at=now - 1 * DAY)
    store.create_session("D", "cli", parent_session_id="C", started_at=now)
    for sid in "ABCD":
        store.end_session(sid, "compression")
    # The age is the start, not the end; sessions still running are kept.
    store.create_session("old-open", "cli", started_at=now - 200 * DAY)
    store.create_session("old-tg", "telegram", started_at=now - 200 * DAY)
    store.end_session("old-tg", "done")
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "A.jsonl").write_text("{}")
    assert store.prune_sessions(older_than_days=90, source="cli", sessions_dir=folder) == 2
    assert ids(store) == {"C": None, "D": "C", "old-open": None, "old-tg": None}
    assert os.listdir(folder) == []
    assert store.prune_sessions() == 1
    assert ids(store) == {"C": None, "D": "C", "old-open": None}


def test_prune_empty_ghost_sessions(store: SessionDB) -> None:
    old = time.time() - 2 * DAY
    store.create_session("ghost", "tui", started_at=old)
    store.end_session("ghost", "tui_close")
    store.create_session("titled", "tui", started_at=old)
    store.set_session_title("titled", "named ghost")
    store.end_session("titled", "tui_close")
    store.create_session("young", "tui")
    store.end_session("young", "tui_close")
    store.create_session("cli", "cli", started_at=old)
    store.end_session("cli", "done")
    assert store.prune_empty_ghost_sessions() == 1
    assert sorted(ids(store)) == ["cli", "titled", "young"]


def test_optimize_fts_and_vacuum(db: SessionDB, backend: str) -> None:
    before = db.search_messages("subagent")
    assert db.optimize_fts() == 2
    assert db.vacuum() == 2
    assert db.search_messages("subagent") == before
    # FTS5's snippet of the indexed text (content, tool_name, tool_calls joined by
    # spaces); PostgreSQL's is made from the message's text.
    snippet = ">>>subagent<<< work  " if backend == "sqlite" else ">>>subagent<<< work"
    assert [h["snippet"] for h in before] == [snippet]
