"""HERMES_V16 §3.9: writing, reading, replaying, rewinding and replacing messages."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0
CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


@pytest.fixture
def chat(store: SessionDB) -> SessionDB:
    store.create_session("s1", "cli")
    return store


def row(**values: Any) -> dict[str, Any]:
    """A whole message row as get_messages returns it."""
    base: dict[str, Any] = {
        "session_id": "s1",
        "content": None,
        "tool_call_id": None,
        "tool_calls": None,
        "tool_name": None,
        "token_count": None,
        "finish_reason": None,
        "reasoning": None,
        "reasoning_content": None,
        "reasoning_details": None,
        "codex_reasoning_items": None,
        "codex_message_items": None,
        "platform_message_id": None,
        "observed": 0,
        "active": 1,
    }
    base.update(values)
    return base


# -- append_message and get_messages ---------------------------------------------------------


def test_get_messages_decodes_only_content_and_tool_calls(chat: SessionDB) -> None:
    first = chat.append_message("s1", "user", [{"type": "text", "text": "look"}], timestamp=T0)
    second = chat.append_message(
        "s1",
        "assistant",
        "sure",
        tool_calls=[CALL],
        finish_reason="tool_calls",
        reasoning="thinking",
        reasoning_content="",
        reasoning_details=[{"type": "summary", "text": "r"}],
        codex_reasoning_items=[{"id": "rs_1"}],
        codex_message_items={"id": "msg_1"},
        platform_message_id="p-2",
        observed=True,
        token_count=12,
        timestamp=datetime.datetime.fromtimestamp(T0 + 1, tz=datetime.timezone.utc),
    )
    third = chat.append_message(
        "s1", "tool", "a.txt", tool_call_id="c1", tool_name="ls", tool_calls=[], timestamp=T0 + 2
    )
    assert chat.get_messages("s1") == [
        row(id=first, role="user", content=[{"type": "text", "text": "look"}], timestamp=T0),
        row(
            id=second,
            role="assistant",
            content="sure",
            tool_calls=[CALL],
            finish_reason="tool_calls",
            reasoning="thinking",
            reasoning_content="",
            reasoning_details='[{"type": "summary", "text": "r"}]',
            codex_reasoning_items='[{"id": "rs_1"}]',
            codex_message_items='{"id": "msg_1"}',
            platform_message_id="p-2",
            observed=1,
            token_count=12,
            timestamp=T0 + 1,
        ),
        row(
            id=third,
            role="tool",
            content="a.txt",
            tool_call_id="c1",
            tool_name="ls",
            timestamp=T0 + 2,
        ),
    ]
    raw = chat._conn.execute("SELECT content, tool_calls FROM messages ORDER BY id").fetchall()
    assert raw[0]["content"] == '\x00json:[{"type": "text", "text": "look"}]'
    assert raw[2]["tool_calls"] is None  # [] is stored as NULL


def test_get_messages_is_in_insertion_order(chat: SessionDB) -> None:
    late = chat.append_message("s1", "user", "written first, stamped later", timestamp=T0 + 10)
    early = chat.append_message("s1", "user", "written second, stamped earlier", timestamp=T0)
    assert [m["id"] for m in chat.get_messages("s1")] == [late, early]
    conversation = chat.get_messages_as_conversation("s1")
    assert [m["content"] for m in conversation] == [
        "written second, stamped earlier",
        "written first, stamped later",
    ]


def test_counters(chat: SessionDB) -> None:
    chat.append_message("s1", "user", "q")
    chat.append_message("s1", "assistant", None, tool_calls=[CALL, {**CALL, "id": "c2"}])
    chat.append_message("s1", "tool", "r1", tool_call_id="c1", tool_calls=[CALL])
    chat.append_message("s1", "assistant", "done")
    session = chat.get_session("s1")
    assert (session["message_count"], session["tool_call_count"]) == (4, 2)


def test_a_message_for_an_unknown_session_is_an_integrity_error(chat: SessionDB) -> None:
    import sqlite3

    with pytest.raises(sqlite3.IntegrityError):
        chat.append_message("ghost", "user", "hi")


# -- get_messages_as_conversation ------------------------------------------------------------


def test_conversation_keys(chat: SessionDB) -> None:
    chat.append_message("s1", "system", "you are terse", timestamp=T0)
    chat.append_message(
        "s1",
        "user",
        "<memory-context>secret recall</memory-context>  hello  ",
        platform_message_id="42",
        observed=True,
        timestamp=T0 + 1,
    )
    chat.append_message(
        "s1",
        "assistant",
        "  working  ",
        tool_calls=[CALL],
        finish_reason="tool_calls",
        reasoning="",
        reasoning_content="",
        reasoning_details=[{"k": 1}],
        timestamp=T0 + 2,
    )
    chat.append_message(
        "s1", "tool", "  raw tool text  ", tool_call_id="c1", tool_name="ls", timestamp=T0 + 3
    )
    chat.append_message(
        "s1",
        "assistant",
        "done",
        reasoning="because",
        codex_reasoning_items=[{"id": "rs"}],
        codex_message_items=[{"id": "m"}],
        timestamp=T0 + 4,
    )
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "system", "content": "you are terse", "timestamp": T0},
        {
            "role": "user",
            "content": "hello",
            "timestamp": T0 + 1,
            "message_id": "42",
            "observed": True,
        },
        {
            "role": "assistant",
            "content": "working",
            "timestamp": T0 + 2,
            "tool_calls": [CALL],
            "finish_reason": "tool_calls",
            "reasoning_content": "",
            "reasoning_details": [{"k": 1}],
        },
        {
            "role": "tool",
            "content": "  raw tool text  ",
            "timestamp": T0 + 3,
            "tool_call_id": "c1",
            "tool_name": "ls",
        },
        {
            "role": "assistant",
            "content": "done",
            "timestamp": T0 + 4,
            "reasoning": "because",
            "codex_reasoning_items": [{"id": "rs"}],
            "codex_message_items": [{"id": "m"}],
        },
    ]


def test_conversation_leaves_rewound_messages_out_unless_asked(chat: SessionDB) -> None:
    chat.append_message("s1", "user", "keep", timestamp=T0)
    second = chat.append_message("s1", "user", "rewound", timestamp=T0 + 1)
    chat.rewind_to_message("s1", second)
    assert [m["content"] for m in chat.get_messages_as_conversation("s1")] == ["keep"]
    everything = chat.get_messages_as_conversation("s1", include_inactive=True)
    assert [m["content"] for m in everything] == ["keep", "rewound"]


# -- around / anchored view / recent --------------------------------------------------------


def ten(chat: SessionDB) -> list[int]:
    roles = [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
        "tool",
        "assistant",
        "user",
    ]
    return [
        chat.append_message("s1", role, f"m{index}", timestamp=T0 + index)
        for index, role in enumerate(roles)
    ]


def test_messages_around(chat: SessionDB) -> None:
    ids = ten(chat)
    chat.rewind_to_message("s1", ids[9])
    view = chat.get_messages_around("s1", ids[5], window=2)
    assert [m["content"] for m in view["window"]] == ["m3", "m4", "m5", "m6", "m7"]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    edge = chat.get_messages_around("s1", ids[9])
    assert [m["content"] for m in edge["window"]] == ["m4", "m5", "m6", "m7", "m8", "m9"]
    assert edge["window"][-1]["active"] == 0  # no active filter
    assert (edge["messages_before"], edge["messages_after"]) == (5, 0)
    assert chat.get_messages_around("s1", ids[5], window=-3)["window"][0]["id"] == ids[5]
    assert chat.get_messages_around("s1", 10_000) == {
        "window": [],
        "messages_before": 0,
        "messages_after": 0,
    }
    chat.create_session("s2", "cli")
    assert chat.get_messages_around("s2", ids[5])["window"] == []


def test_anchored_view(chat: SessionDB) -> None:
    ids = ten(chat)
    view = chat.get_anchored_view("s1", ids[7], window=1, bookend=2)
    assert [m["content"] for m in view["window"]] == ["m6", "m7", "m8"]  # the anchor stays
    assert [m["content"] for m in view["bookend_start"]] == ["m0", "m1"]
    assert [m["content"] for m in view["bookend_end"]] == ["m9"]
    assert (view["messages_before"], view["messages_after"]) == (1, 1)
    everything = chat.get_anchored_view("s1", ids[4], window=1, bookend=1, keep_roles=None)
    assert [m["content"] for m in everything["window"]] == ["m3", "m4", "m5"]
    assert [m["content"] for m in everything["bookend_start"]] == ["m0"]
    assert [m["content"] for m in everything["bookend_end"]] == ["m9"]
    tools = chat.get_anchored_view("s1", ids[4], window=2, bookend=5, keep_roles=("tool",))
    assert [m["content"] for m in tools["window"]] == ["m2", "m4"]
    assert [m["content"] for m in tools["bookend_start"]] == []
    assert [m["content"] for m in tools["bookend_end"]] == ["m7"]
    assert chat.get_anchored_view("s1", 10_000)["window"] == []


def test_recent_user_messages(chat: SessionDB) -> None:
    first = chat.append_message("s1", "user", "  spaced\n\nout   text ", timestamp=T0)
    chat.append_message("s1", "assistant", "reply", timestamp=T0 + 1)
    chat.append_message(
        "s1",
        "user",
        [{"type": "text", "text": "caption"}, {"type": "image_url", "image_url": {"url": "x"}}],
        timestamp=T0 + 2,
    )
    chat.append_message(
        "s1", "user", [{"type": "image_url", "image_url": {"url": "y"}}], timestamp=T0 + 3
    )
    last = chat.append_message("s1", "user", "w" * 81, timestamp=T0 + 4)
    recent = chat.list_recent_user_messages("s1")
    assert [m["preview"] for m in recent] == [
        "w" * 77 + "...",
        "[multimodal content]",
        "caption",
        "spaced out text",
    ]
    assert recent[0] == {"id": last, "timestamp": T0 + 4, "preview": "w" * 77 + "..."}
    assert recent[-1]["id"] == first
    assert len(chat.list_recent_user_messages("s1", limit=2)) == 2
    chat.rewind_to_message("s1", last)
    assert len(chat.list_recent_user_messages("s1")) == 3
    assert len(chat.list_recent_user_messages("s1", include_inactive=True)) == 4


# -- rewind / restore ---------------------------------------------------------------------------


def test_rewind_to_message(chat: SessionDB) -> None:
    first = chat.append_message("s1", "user", "one", timestamp=T0)
    reply = chat.append_message("s1", "assistant", "two", timestamp=T0 + 1)
    target = chat.append_message(
        "s1", "user", [{"type": "text", "text": "three"}], timestamp=T0 + 2
    )
    chat.append_message("s1", "assistant", "four", timestamp=T0 + 3)
    result = chat.rewind_to_message("s1", target)
    assert result["rewound_count"] == 2
    assert result["new_head_id"] == reply
    assert result["target_message"]["content"] == [{"type": "text", "text": "three"}]
    assert result["target_message"]["id"] == target
    session = chat.get_session("s1")
    assert (session["rewind_count"], session["message_count"]) == (1, 4)
    # Rewinding again: Hermes B flips nothing and counts the rewind; SPEC §6 refuses a
    # target that is not an active user message, and nothing changes.
    with pytest.raises(ValueError, match="already rewound"):
        chat.rewind_to_message("s1", target)
    assert chat.get_session("s1")["rewind_count"] == 1
    everything = chat.rewind_to_message("s1", first)
    assert (everything["rewound_count"], everything["new_head_id"]) == (2, None)


def test_rewind_refuses_foreign_and_non_user_targets(chat: SessionDB) -> None:
    reply = chat.append_message("s1", "assistant", "hi")
    with pytest.raises(
        ValueError, match=r"rewind target must be a 'user' message \(got role='assistant'"
    ):
        chat.rewind_to_message("s1", reply)
    chat.create_session("s2", "cli")
    with pytest.raises(ValueError, match=f"message {reply} not found in session s2"):
        chat.rewind_to_message("s2", reply)
    assert chat.get_session("s1")["rewind_count"] == 0


def test_restore_rewound(chat: SessionDB) -> None:
    ids = [chat.append_message("s1", "user", f"m{i}", timestamp=T0 + i) for i in range(4)]
    chat.rewind_to_message("s1", ids[1])
    assert chat.restore_rewound("s1", ids[2]) == 2
    assert [m["content"] for m in chat.get_messages("s1")] == ["m0", "m2", "m3"]
    assert chat.restore_rewound("s1", since_message_id=ids[0]) == 1
    assert chat.restore_rewound("s1", ids[0]) == 0
    assert chat.get_session("s1")["message_count"] == 4


def test_clear_messages(chat: SessionDB) -> None:
    chat.append_message("s1", "assistant", None, tool_calls=[CALL])
    chat.clear_messages("s1")
    session = chat.get_session("s1")
    assert (session["message_count"], session["tool_call_count"]) == (0, 0)
    assert chat.get_messages("s1", include_inactive=True) == []


# -- replace_messages ---------------------------------------------------------------------------


def test_replace_messages_writes_the_replay_back(chat: SessionDB) -> None:
    chat.append_message("s1", "user", "old")
    old_rewound = chat.append_message("s1", "user", "old rewound")
    chat.rewind_to_message("s1", old_rewound)
    replay = [
        {"role": "user", "content": "hi", "message_id": "tg-1", "observed": True, "reasoning": "x"},
        {
            "role": "assistant",
            "content": "hello",
            "tool_calls": [CALL],
            "reasoning": "thought",
            "reasoning_details": [{"k": 1}],
            "finish_reason": "stop",
            "unknown_key": "ignored",
        },
        {"role": "tool", "content": "out", "tool_call_id": "c1", "tool_name": "ls"},
    ]
    before = time.time()
    chat.replace_messages("s1", replay)
    rows = chat.get_messages("s1", include_inactive=True)
    assert [(m["role"], m["content"], m["active"]) for m in rows] == [
        ("user", "hi", 1),
        ("assistant", "hello", 1),
        ("tool", "out", 1),
    ]
    assert (rows[0]["platform_message_id"], rows[0]["observed"], rows[0]["reasoning"]) == (
        "tg-1",
        1,
        None,
    )
    assert (rows[1]["reasoning"], rows[1]["reasoning_details"], rows[1]["tool_calls"]) == (
        "thought",
        json.dumps([{"k": 1}]),
        [CALL],
    )
    stamps = [m["timestamp"] for m in rows]
    assert before <= stamps[0] <= time.time()
    assert stamps[1] == pytest.approx(stamps[0] + 1e-6, abs=1e-7)
    assert stamps[2] == pytest.approx(stamps[1] + 1e-6, abs=1e-7)
    session = chat.get_session("s1")
    assert (session["message_count"], session["tool_call_count"]) == (3, 1)
    # What get_messages_as_conversation gives back can be written back unchanged.
    conversation = chat.get_messages_as_conversation("s1")
    chat.replace_messages("s1", conversation)
    assert chat.get_messages_as_conversation("s1") == conversation


def test_replace_messages_keeps_given_timestamps(chat: SessionDB) -> None:
    chat.replace_messages(
        "s1",
        [
            {"role": "user", "content": "a", "timestamp": T0 + 5},
            {"role": "assistant", "content": "b", "timestamp": T0 + 1},
        ],
    )
    assert [m["timestamp"] for m in chat.get_messages("s1")] == [T0 + 5, T0 + 1]


def test_replay_gives_tool_calls_that_are_not_json_as_an_empty_list(chat: SessionDB) -> None:
    # HERMES_V16 §3.9: get_messages_as_conversation decodes tool_calls, "[] on failure";
    # get_messages keeps such text as it is (a documented difference: exports keep it).
    chat.append_message("s1", "user", "run it", timestamp=1.0)
    chat.append_message("s1", "assistant", None, tool_calls="not json", timestamp=2.0)
    chat.append_message("s1", "assistant", "ok", tool_calls='[{"id": "c1"}]', timestamp=3.0)
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "user", "content": "run it", "timestamp": 1.0},
        {"role": "assistant", "content": None, "timestamp": 2.0, "tool_calls": []},
        {"role": "assistant", "content": "ok", "timestamp": 3.0, "tool_calls": [{"id": "c1"}]},
    ]
    assert [m["tool_calls"] for m in chat.get_messages("s1")] == [None, "not json", [{"id": "c1"}]]
