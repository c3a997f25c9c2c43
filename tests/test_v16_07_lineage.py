"""HERMES_V16 §3.7: compression tip, resume target, and ancestors for replay."""

from __future__ import annotations

import time

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = time.time() - 100_000


def make(store: SessionDB, session_id: str, at: float, parent: str | None = None) -> None:
    store.create_session(session_id, "cli", parent_session_id=parent, started_at=T0 + at)


def compress(store: SessionDB, session_id: str, at: float) -> None:
    """End ``session_id`` by compression at ``T0 + at``."""
    store.end_session(session_id, "compression")
    store._conn.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (T0 + at, session_id))
    store._conn.commit()


def say(store: SessionDB, session_id: str, role: str, text: str, at: float) -> None:
    store.append_message(session_id, role, text, timestamp=T0 + at)


# -- get_compression_tip ------------------------------------------------------------------------


def test_tip_follows_compression_continuations(store: SessionDB) -> None:
    make(store, "a", 0)
    compress(store, "a", 10)
    make(store, "b", 11, "a")
    compress(store, "b", 20)
    make(store, "c", 21, "b")
    assert store.get_compression_tip("a") == "c"
    assert store.get_compression_tip("b") == "c"
    assert store.get_compression_tip("c") == "c"
    assert store.get_compression_tip("unknown") == "unknown"


def test_tip_follows_an_untagged_child_whenever_it_started(store: SessionDB) -> None:
    # A deliberate difference from v16, as Hermes v17 on: v16 ignored a child started
    # while the parent was live; v17 on follows any untagged child of a parent ended
    # by compression (a continuation may be written before its parent's end is).
    make(store, "conv", 0)
    make(store, "delegate", 5, "conv")  # untagged, before the compression
    compress(store, "conv", 10)
    assert store.get_compression_tip("conv") == "delegate"
    make(store, "next", 11, "conv")
    assert store.get_compression_tip("conv") == "next"


def test_tip_takes_the_newest_continuation(store: SessionDB) -> None:
    make(store, "a", 0)
    compress(store, "a", 10)
    make(store, "older", 11, "a")
    make(store, "newer", 12, "a")
    assert store.get_compression_tip("a") == "newer"


# -- resolve_resume_session_id -------------------------------------------------------------------


def test_resume_redirects_from_an_empty_head_to_the_session_with_messages(store: SessionDB) -> None:
    previous = None
    for index, session_id in enumerate(("head", "mid1", "mid2", "mid3", "bulk", "tail")):
        make(store, session_id, index, previous)
        previous = session_id
    say(store, "bulk", "user", "the real conversation", 50)
    assert store.resolve_resume_session_id("head") == "bulk"


def test_resume_stays_on_a_session_with_messages_or_without_better(store: SessionDB) -> None:
    make(store, "root", 0)
    make(store, "child", 1, "root")
    assert store.resolve_resume_session_id("root") == "root"  # nobody has messages
    say(store, "root", "user", "hi", 2)
    assert store.resolve_resume_session_id("root") == "root"


@pytest.mark.parametrize("value", ["", None, "isolated", "nonexistent"])
def test_resume_passes_through(store: SessionDB, value: str | None) -> None:
    make(store, "isolated", 0)
    assert store.resolve_resume_session_id(value) == value  # type: ignore[arg-type]


@pytest.mark.parametrize("start", ["b", "c"])
def test_resume_from_mid_chain(store: SessionDB, start: str) -> None:
    make(store, "a", 0)
    make(store, "b", 1, "a")
    make(store, "c", 2, "b")
    make(store, "d", 3, "c")
    say(store, "d", "user", "here", 4)
    assert store.resolve_resume_session_id(start) == "d"


def test_resume_follows_the_compression_tip_even_when_the_parent_has_messages(
    store: SessionDB,
) -> None:
    make(store, "conv", 0)
    say(store, "conv", "user", "before compression", 1)
    compress(store, "conv", 10)
    make(store, "cont", 11, "conv")
    say(store, "cont", "user", "[summary]", 12)
    assert store.resolve_resume_session_id("conv") == "cont"


def test_resume_does_not_follow_a_child_made_while_the_parent_was_live(store: SessionDB) -> None:
    make(store, "conv", 0)
    say(store, "conv", "user", "main thread", 1)
    make(store, "helper", 2, "conv")
    say(store, "helper", "user", "subagent work", 3)
    assert store.resolve_resume_session_id("conv") == "conv"


def test_resume_of_a_fork_lands_on_the_newest_child_with_messages(store: SessionDB) -> None:
    make(store, "root", 0)
    make(store, "old_fork", 1, "root")
    make(store, "new_fork", 2, "root")
    say(store, "old_fork", "user", "a", 3)
    say(store, "new_fork", "user", "b", 4)
    assert store.resolve_resume_session_id("root") == "new_fork"


# -- ancestors for replay -------------------------------------------------------------------------


def test_replay_with_ancestors_follows_every_kind_of_parent_link(store: SessionDB) -> None:
    make(store, "root", 0)
    say(store, "root", "user", "one", 1)
    say(store, "root", "assistant", "two", 2)
    compress(store, "root", 3)
    make(store, "cont", 4, "root")  # a compression continuation
    say(store, "cont", "user", "three", 5)
    make(store, "branch", 6, "cont")  # a plain child (no marker, parent live)
    store.update_session_meta("branch", '{"_branched_from": "cont"}')
    say(store, "branch", "assistant", "four", 7)
    conversation = store.get_messages_as_conversation("branch", include_ancestors=True)
    assert [m["content"] for m in conversation] == ["one", "two", "three", "four"]
    alone = store.get_messages_as_conversation("branch")
    assert [m["content"] for m in alone] == ["four"]


def test_replay_merges_ancestors_by_time_and_drops_resent_prompts(store: SessionDB) -> None:
    make(store, "first", 0)
    say(store, "first", "user", "fix the build", 1)
    say(store, "first", "assistant", "on it", 2)
    say(store, "first", "user", "and the tests", 3)
    make(store, "second", 4, "first")
    say(store, "second", "user", "and the tests", 5)  # re-sent on resume
    say(store, "second", "assistant", "done", 6)
    say(store, "second", "user", "fix the build", 7)  # asked again after a reply: kept
    conversation = store.get_messages_as_conversation("second", include_ancestors=True)
    assert [(m["role"], m["content"]) for m in conversation] == [
        ("user", "fix the build"),
        ("assistant", "on it"),
        ("user", "and the tests"),
        ("assistant", "done"),
        ("user", "fix the build"),
    ]


def test_replay_survives_a_parent_cycle(store: SessionDB) -> None:
    make(store, "a", 0)
    make(store, "b", 1, "a")
    say(store, "a", "user", "in a", 2)
    say(store, "b", "user", "in b", 3)
    store._conn.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    store._conn.commit()
    conversation = store.get_messages_as_conversation("b", include_ancestors=True)
    assert [m["content"] for m in conversation] == ["in a", "in b"]


def test_replay_walks_at_most_a_hundred_steps_up(store: SessionDB) -> None:
    previous = None
    for index in range(105):
        make(store, f"s{index:03d}", index, previous)
        say(store, f"s{index:03d}", "user", f"m{index:03d}", index + 0.5)
        say(store, f"s{index:03d}", "assistant", "ok", index + 0.7)
        previous = f"s{index:03d}"
    conversation = store.get_messages_as_conversation("s104", include_ancestors=True)
    prompts = [m["content"] for m in conversation if m["role"] == "user"]
    assert prompts[-100:] == [f"m{index:03d}" for index in range(5, 105)]
    assert not {"m000", "m001", "m002", "m003"} & set(prompts)


def statements_for_replay(store: SessionDB, session_id: str) -> list[str]:
    seen: list[str] = []
    conn: sqlite3.Connection = store._conn
    conn.set_trace_callback(seen.append)
    try:
        store.get_messages_as_conversation(session_id, include_ancestors=True)
    finally:
        conn.set_trace_callback(None)
    return seen


@pytest.mark.backends("sqlite")  # reads SQLite's own query plan or trace
def test_replay_with_ancestors_is_one_statement_whatever_the_depth(store: SessionDB) -> None:
    previous = None
    for index in range(30):
        make(store, f"s{index:02d}", index, previous)
        say(store, f"s{index:02d}", "user", f"m{index}", index + 0.5)
        previous = f"s{index:02d}"
    shallow = statements_for_replay(store, "s01")
    deep = statements_for_replay(store, "s29")
    assert len(shallow) == len(deep) == 1
    assert "WITH RECURSIVE" in deep[0]
