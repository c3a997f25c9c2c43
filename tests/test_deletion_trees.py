"""Deleting, pruning and sweeping a store that holds every kind of child, compared
with what Hermes' rules (``hermes_reference.py``) leave behind.

The tree has tagged subagent runs (and theirs), an untagged child created
while its parent was live, branches by marker and by a 'branched' end, a
compression continuation, one started a millisecond before its parent's end
(a clock stepped back), one whose parent was reopened and ended again,
``'__orphaned__'`` runs, archived sessions, tag cycles, tags naming a session
that is not the parent, empty orchestrators whose workers hold the messages,
and counters that disagree with the rows. Whatever is deleted, the surviving
sessions (with their parents) and messages must be exactly the reference's.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_models import Session, SessionDB
from hermes_models.driver import sqlite3

from hermes_reference import DAY, Reference, read, state_of

pytestmark = pytest.mark.backends("sqlite", "postgresql")

NOW = time.time()


def at(days: float) -> float:
    return NOW - days * DAY


def make(
    store: SessionDB,
    sid: str,
    days: float,
    messages: int = 1,
    *,
    source: str = "cli",
    parent: str | None = None,
    config: Any = None,
    title: str | None = None,
    role: str = "user",
) -> str:
    store.create_session(
        sid, source, parent_session_id=parent, model_config=config, started_at=at(days)
    )
    for n in range(messages):
        store.append_message(sid, role, f"{sid} says {n}", timestamp=at(days) + n + 1)
    if title is not None:
        store.set_session_title(sid, title)
    return sid


def end(sid: str, reason: str, days: float, *, shift: float = 0.0) -> None:
    Session.get_by_id(sid).end(reason, at=at(days) + shift)


def build(store: SessionDB) -> None:
    conn = store._conn
    # A compressed conversation and every kind of child it can have.
    make(store, "P", 100, 2, title="plans")
    make(store, "D1", 99.9, 2, parent="P", config={"_delegate_from": "P"})
    make(store, "DD", 99.89, parent="D1", config={"_delegate_from": "D1", "role": "x"})
    make(store, "DU", 99.88, parent="D1")
    end("D1", "done", 99.8)
    make(store, "U", 99.5, parent="P")  # untagged, created while P was live
    make(store, "T", 99.4, parent=None, config={"_delegate_from": "P"})  # names P
    end("P", "compression", 99)
    make(store, "C", 99, 2, parent="P", title="plans #2")
    conn.execute("UPDATE sessions SET started_at = ? WHERE id = 'C'", (at(99),))
    make(store, "CS", 99.5, parent="P")
    # started 1 ms before P's end: a clock stepped back
    conn.execute("UPDATE sessions SET started_at = ? WHERE id = 'CS'", (at(99) - 0.001,))
    make(store, "G", 98, parent="C")  # grandchild: keeps its link to C
    end("C", "user_exit", 97)
    # A branched conversation.
    make(store, "Q", 90, 2)
    end("Q", "branched", 89)
    make(store, "BM", 88.9, parent="Q", config={"_branched_from": "Q"})
    make(store, "BE", 88.8, parent="Q")
    conn.execute("UPDATE sessions SET started_at = ? WHERE id = 'BE'", (at(89),))
    make(store, "BS", 88.7, parent="Q")
    conn.execute("UPDATE sessions SET started_at = ? WHERE id = 'BS'", (at(89) - 0.001,))
    # A continuation whose parent was reopened and ended again.
    make(store, "R", 80, 2)
    end("R", "compression", 79)
    make(store, "R2", 79, parent="R")
    conn.execute("UPDATE sessions SET started_at = ? WHERE id = 'R2'", (at(79),))
    store.reopen_session("R")
    end("R", "compression", 70)
    # Runs Hermes v16 tagged as orphaned, and a session whose id is the tag.
    make(store, "O", 60, role="tool", config={"_delegate_from": "__orphaned__"})
    end("O", "done", 59.9)
    make(store, "__orphaned__", 59)
    end("__orphaned__", "done", 58.9)
    # Archived, with a subagent run.
    make(store, "A", 50)
    make(store, "AD", 49.9, parent="A", config={"_delegate_from": "A"})
    end("A", "done", 49)
    end("AD", "done", 49)
    store.set_session_archived("A", True)
    # Tag cycles, one of them also a parent cycle.
    make(store, "X", 40, config={"_delegate_from": "Y"})
    make(store, "Y", 40, config={"_delegate_from": "X"})
    end("X", "done", 39)
    end("Y", "done", 39)
    make(store, "K1", 38)
    make(store, "K2", 37.9, parent="K1", config={"_delegate_from": "K1"})
    conn.execute(
        "UPDATE sessions SET parent_session_id = 'K2', model_config = ? WHERE id = 'K1'",
        ('{"_delegate_from": "K2"}',),
    )
    end("K1", "done", 37)
    # Empty sessions: an orchestrator whose worker holds the messages, one with
    # an untagged child, a live one, an archived one, one holding only rewound
    # messages.
    make(store, "E", 30, 0)
    make(store, "W", 29.9, 2, parent="E", config={"_delegate_from": "E"})
    end("E", "done", 29)
    make(store, "E2", 28, 0)
    make(store, "F", 27.9, parent="E2")
    end("E2", "done", 27)
    make(store, "E3", 26, 0)
    make(store, "E4", 25, 0)
    end("E4", "done", 24.9)
    store.set_session_archived("E4", True)
    make(store, "E5", 24, 1)
    store.rewind_to_message("E5", store.get_messages("E5")[0]["id"])
    end("E5", "done", 23.9)
    # Counters that disagree with the rows (another program wrote them).
    make(store, "M1", 20, 1)
    make(store, "M2", 19, 0)
    end("M1", "done", 18)
    end("M2", "done", 18)
    conn.execute("UPDATE sessions SET message_count = 0 WHERE id = 'M1'")
    conn.execute("UPDATE sessions SET message_count = 5 WHERE id = 'M2'")
    # TUI ghosts: one with a child, a titled one, a young one, a live one.
    make(store, "GH1", 3, 0, source="tui")
    make(store, "GC", 2.9, parent="GH1")
    end("GH1", "tui_shutdown", 2.8)
    make(store, "GH2", 3, 0, source="tui", title="kept by its title")
    end("GH2", "tui_shutdown", 2.8)
    make(store, "GH3", 0.5, 0, source="tui")
    end("GH3", "tui_shutdown", 0.4)
    make(store, "GH4", 3, 0, source="tui")
    # A live session of today.
    make(store, "L", 0.1, 3)
    conn.commit()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree, built once; each test works on its own copy."""
    path = tmp_path_factory.mktemp("tree") / "state.db"
    with SessionDB(path) as store:
        build(store)
    return path


@pytest.fixture
def tree(template: Path, tmp_path: Path) -> Iterator[SessionDB]:
    path = tmp_path / "state.db"
    shutil.copyfile(template, path)
    with SessionDB(path) as store:
        yield store


def reference(store: SessionDB) -> Reference:
    return Reference(*read(store._conn))


def check_file(store: SessionDB) -> None:
    conn = store._conn
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    for table in ("messages_fts", "messages_fts_trigram"):
        assert [row[0] for row in conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid")] == [
            row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")
        ]


ALL_IDS = (
    "P D1 DD DU U T C CS G Q BM BE BS R R2 O __orphaned__ A AD X Y K1 K2 E W E2 F E3 E4 E5 "
    "M1 M2 GH1 GC GH2 GH3 GH4 L"
).split()


def test_the_tree_is_what_the_tests_think(tree: SessionDB) -> None:
    sessions, _ = read(tree._conn)
    assert sorted(sessions) == sorted(ALL_IDS)
    kinds = {s.id: s.kind for s in Session.select()}
    # Kinds: a child of a compressed session continues it whenever it started (Hermes
    # v17 on); the legacy branch rule still reads the time, as Hermes' does...
    assert {sid: kinds[sid] for sid in ("U", "C", "CS", "BE", "BS", "R2", "G")} == {
        "U": "compression",
        "C": "compression",
        "CS": "compression",
        "BE": "branch",
        "BS": "ephemeral",
        "R2": "compression",
        "G": "ephemeral",
    }


@pytest.mark.parametrize("victim", ALL_IDS)
def test_delete_session_takes_exactly_what_hermes_takes(tree: SessionDB, victim: str) -> None:
    expected = reference(tree)
    _, doomed = expected.delete_sessions([victim])
    assert tree.delete_session(victim) is True
    assert state_of(tree._conn) == expected.state()
    check_file(tree)
    assert tree.delete_session(victim) is False
    # ...but what a delete keeps never depends on those timestamps.
    survivors = {"U", "C", "CS", "G", "BM", "BE", "BS", "R2", "F", "GC"} - doomed - {victim}
    assert survivors <= set(state_of(tree._conn)[0])


def test_deleting_a_compressed_parent_keeps_every_untagged_child(tree: SessionDB) -> None:
    before = {row["id"]: row for row in tree.list_sessions(limit=None, include_archived=True)}
    assert tree.delete_session("P") is True
    sessions, _ = state_of(tree._conn)
    assert {
        sid: sessions.get(sid, "gone") for sid in ("D1", "DD", "DU", "T", "U", "C", "CS", "G")
    } == {
        "D1": "gone",
        "DD": "gone",
        "DU": None,  # untagged child of a deleted run: orphaned, kept
        "T": "gone",  # its tag names P
        "U": None,
        "C": None,
        "CS": None,
        "G": "C",
    }
    for sid in ("U", "C", "CS", "G", "DU"):
        assert [m["content"] for m in tree.get_messages(sid)] == [
            f"{sid} says {n}" for n in range(before[sid]["message_count"])
        ]


def test_reopened_and_skewed_continuations_survive_their_parent(tree: SessionDB) -> None:
    assert tree.delete_sessions(["R", "Q"]) == 2
    sessions, _ = state_of(tree._conn)
    assert {sid: sessions[sid] for sid in ("R2", "BM", "BE", "BS")} == dict.fromkeys(
        ("R2", "BM", "BE", "BS")
    )
    assert [m["content"] for m in tree.get_messages("R2")] == ["R2 says 0"]


@pytest.mark.parametrize(
    "ids",
    [
        ["P", "Q", "R", "O", "A", "X", "K1", "E", "L"],
        ["P", "C"],
        ["X", "Y"],
        ["K1"],
        ["P", "P", None, "", 5, "missing", b"P"],
        ["__orphaned__"],
        ALL_IDS,
        [],
        ["missing"],
    ],
    ids=lambda ids: ",".join(map(str, ids))[:40] or "empty",
)
def test_delete_sessions_matches_hermes(tree: SessionDB, ids: list[Any]) -> None:
    expected = reference(tree)
    count, _ = expected.delete_sessions(ids)
    assert tree.delete_sessions(ids) == count
    assert state_of(tree._conn) == expected.state()
    check_file(tree)


@pytest.mark.parametrize(
    ("days", "source"),
    [
        (99.5, None),
        (95.5, None),
        (85.5, None),
        (35.5, None),
        (2.5, None),
        (0.25, None),
        (0.25, "tui"),
        (0, "cli"),
        (150, None),
    ],
)
def test_prune_deletes_only_matching_sessions(
    tree: SessionDB, days: float, source: str | None
) -> None:
    expected = reference(tree)
    count, doomed = expected.prune(time.time() - days * DAY, source)
    assert tree.prune_sessions(older_than_days=days, source=source) == count
    assert state_of(tree._conn) == expected.state()
    check_file(tree)
    assert count == len(doomed)


def test_prune_of_an_old_chat_keeps_its_recent_children(store: SessionDB) -> None:
    make(store, "old", 100, 2)
    end("old", "compression", 99)
    make(store, "recent-cont", 0.1, 2, parent="old")
    make(store, "recent-run", 0.05, 2, parent="old", config={"_delegate_from": "old"})
    end("recent-run", "done", 0.04)
    assert store.prune_sessions(90) == 1
    assert state_of(store._conn)[0] == {"recent-cont": None, "recent-run": None}
    assert store.message_count() == 4


def test_prune_a_chain_orphans_the_first_recent_link(store: SessionDB) -> None:
    make(store, "A", 100)
    end("A", "compression", 99)
    make(store, "B", 99, parent="A")
    end("B", "compression", 98)
    make(store, "C", 1, parent="B")
    end("C", "compression", 0.9)
    make(store, "D", 0.9, parent="C")
    assert store.prune_sessions(90) == 2
    assert state_of(store._conn)[0] == {"C": None, "D": "C"}


def test_empty_sweep_matches_hermes(tree: SessionDB) -> None:
    expected = reference(tree)
    empty = expected.empty()
    assert empty == {"E", "E2", "GH1", "GH2", "GH3"}
    assert tree.count_empty_sessions() == len(empty)
    count, _ = expected.delete_empty()
    assert tree.delete_empty_sessions() == count
    assert state_of(tree._conn) == expected.state()
    check_file(tree)
    sessions, _ = state_of(tree._conn)
    assert {sid: sessions[sid] for sid in ("W", "F", "GC")} == {"W": None, "F": None, "GC": None}
    assert tree.count_empty_sessions() == 0


@pytest.mark.parametrize("victim", [*ALL_IDS, "missing"])
def test_delete_session_if_empty_matches_hermes(tree: SessionDB, victim: str) -> None:
    expected = reference(tree)
    deleted, _ = expected.delete_if_empty(victim)
    assert tree.delete_session_if_empty(victim) is deleted
    assert state_of(tree._conn) == expected.state()
    check_file(tree)


def test_prune_empty_ghost_sessions_orphans_their_children(tree: SessionDB) -> None:
    expected = reference(tree)
    count, doomed = expected.prune_ghosts(time.time())
    assert doomed == {"GH1"}
    assert tree.prune_empty_ghost_sessions() == count
    assert state_of(tree._conn) == expected.state()
    assert tree.get_session("GC")["parent_session_id"] is None
    check_file(tree)


def test_a_failed_delete_changes_nothing(tree: SessionDB) -> None:
    before = state_of(tree._conn)
    tree._conn.execute(
        "CREATE TRIGGER refuse_delete BEFORE DELETE ON sessions WHEN old.id = 'DD' "
        "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
    )
    with pytest.raises(sqlite3.IntegrityError, match="refused by test"):
        tree.delete_session("P")
    assert state_of(tree._conn) == before
