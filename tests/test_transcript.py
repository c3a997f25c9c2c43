"""A session's transcript through SessionDB: appending, reading, rewinding, replacing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from hermes_models import Session, SessionDB
from hermes_models.driver import sqlite3
from hermes_models.models.tables import CONTENT_JSON_PREFIX

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def message_row(message_id: int, session_id: str, role: str, **values: Any) -> dict[str, Any]:
    """Every key get_messages returns for one message, with ``values`` on top."""
    row = {
        "id": message_id,
        "session_id": session_id,
        "role": role,
        "content": None,
        "tool_call_id": None,
        "tool_calls": None,
        "tool_name": None,
        "timestamp": None,
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
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    return row


def counters(store: SessionDB, session_id: str) -> tuple[int, int, int]:
    """(message_count, tool_call_count, rewind_count) of a session."""
    row = store.get_session(session_id)
    assert row is not None
    return row["message_count"], row["tool_call_count"], row["rewind_count"]


def table_counts(store: SessionDB) -> tuple[int, int, int]:
    """Rows in messages and in both full-text indexes (on PostgreSQL the word and
    trigram indexes are indexes of messages itself: rows with a word vector, and
    rows the trigram index can read)."""
    conn = store._conn
    if store.database.dialect == "postgresql":
        tables = ("messages", "messages WHERE search_tsv IS NOT NULL", "messages")
    else:
        tables = ("messages", "messages_fts", "messages_fts_trigram")
    return tuple(  # type: ignore[return-value]
        conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables
    )


def call(call_id: str, name: str = "search", **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.fixture
def chat(store: SessionDB) -> SessionDB:
    store.create_session("s1", "cli", started_at=T0)
    return store


# -- append_message and get_messages ------------------------------------------------------


def test_append_returns_ids_and_get_messages_returns_every_column(chat: SessionDB) -> None:
    first = chat.append_message("s1", "system", "You are terse.", timestamp=T0 + 1)
    second = chat.append_message(
        "s1",
        "assistant",
        "Let me look.",
        tool_calls=[call("c1", query="wal")],
        token_count=42,
        finish_reason="tool_calls",
        reasoning="Need docs.",
        reasoning_content="thinking...",
        reasoning_details=[{"type": "summary", "text": "docs"}],
        codex_reasoning_items=[{"id": "r1"}],
        codex_message_items={"id": "m1", "parts": [1, 2]},
        platform_message_id=987654321,
        observed=True,
        timestamp=T0 + 2,
    )
    third = chat.append_message(
        "s1", "tool", '{"hits": 3}', tool_call_id="c1", tool_name="search", timestamp=T0 + 3
    )
    assert (second, third) == (first + 1, first + 2)
    assert chat.get_messages("s1") == [
        message_row(first, "s1", "system", content="You are terse.", timestamp=T0 + 1),
        message_row(
            second,
            "s1",
            "assistant",
            content="Let me look.",
            tool_calls=[call("c1", query="wal")],
            token_count=42,
            finish_reason="tool_calls",
            reasoning="Need docs.",
            reasoning_content="thinking...",
            # As Hermes returns them: only content and tool_calls are decoded.
            reasoning_details='[{"type": "summary", "text": "docs"}]',
            codex_reasoning_items='[{"id": "r1"}]',
            codex_message_items='{"id": "m1", "parts": [1, 2]}',
            platform_message_id="987654321",
            observed=1,
            timestamp=T0 + 2,
        ),
        message_row(
            third,
            "s1",
            "tool",
            content='{"hits": 3}',
            tool_call_id="c1",
            tool_name="search",
            timestamp=T0 + 3,
        ),
    ]


def test_append_counts_messages_and_tool_calls(chat: SessionDB) -> None:
    chat.append_message("s1", "user", "go")
    assert counters(chat, "s1") == (1, 0, 0)
    chat.append_message("s1", "assistant", None, tool_calls=[call("a"), call("b"), call("c")])
    assert counters(chat, "s1") == (2, 3, 0)
    # A tool result adds no calls; any other role's calls count, as in Hermes.
    chat.append_message("s1", "tool", "r", tool_call_id="a", tool_calls=[call("x")])
    chat.append_message("s1", "user", "u", tool_calls=[call("y")])
    assert counters(chat, "s1") == (4, 4, 0)
    chat.append_message("s1", "assistant", "text only")
    chat.append_message("s1", "assistant", None, tool_calls=json.dumps([call("d"), call("e")]))
    # A value that is not a list is one call, as Hermes counts it; JSON text is read.
    chat.append_message("s1", "assistant", None, tool_calls={"not": "a list"})
    chat.append_message("s1", "assistant", None, tool_calls=[])
    assert counters(chat, "s1") == (8, 7, 0)
    assert chat.message_count("s1") == 8


def test_append_defaults_timestamp_to_now(chat: SessionDB) -> None:
    before = time.time()
    chat.append_message("s1", "user", "now")
    (message,) = chat.get_messages("s1")
    assert before <= message["timestamp"] <= time.time()


CONTENT_CASES: dict[str, Any] = {
    "str": "hello",
    "empty str": "",
    "none": None,
    "list": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}],
    "dict": {"k": [1, 2.5, None, True], "nested": {"deeper": ["é"]}},
    "json-looking str": '{"a": 1}',
    "prefix str": CONTENT_JSON_PREFIX + '["not", "a", "list"]',
    "bare prefix": CONTENT_JSON_PREFIX,
    "nul bytes": "\x00start\x00middle\x00",
    "emoji": "🦄 👍🏽 👨‍👩‍👧 🇯🇵",
    "cjk": "请解释一下事件循环 — 非同期処理 — 비동기",
    "control chars": "\x01\x02\x1b[0m\x7f",
    "astral": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010ffff",
}


@pytest.mark.parametrize("case", sorted(CONTENT_CASES))
def test_content_round_trips(chat: SessionDB, case: str) -> None:
    content = CONTENT_CASES[case]
    message_id = chat.append_message("s1", "user", content, timestamp=T0)
    assert chat.get_messages("s1") == [
        message_row(message_id, "s1", "user", content=content, timestamp=T0)
    ]
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "user", "content": content, "timestamp": T0}
    ]
    assert Session.get_by_id("s1").messages.get().value == content


@pytest.mark.slow
def test_ten_megabyte_content_round_trips(chat: SessionDB) -> None:
    big = "".join(f"line {index:07d} 事件 🦄\n" for index in range(420_000))
    assert len(big.encode("utf-8")) >= 10 * 1024 * 1024
    message_id = chat.append_message("s1", "assistant", big, timestamp=T0)
    (message,) = chat.get_messages("s1")
    assert message["id"] == message_id
    assert message["content"] == big


def test_deeply_nested_tool_calls_round_trip(chat: SessionDB) -> None:
    arguments: Any = "leaf 🦄"
    for depth in range(300):
        arguments = [{"depth": depth, "next": arguments}] if depth % 2 else {"d": arguments}
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]
    chat.append_message("s1", "assistant", None, tool_calls=calls, timestamp=T0)
    (message,) = chat.get_messages("s1")
    assert message["tool_calls"] == calls
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "assistant", "content": None, "timestamp": T0, "tool_calls": calls}
    ]
    assert counters(chat, "s1") == (1, 1, 0)


@pytest.mark.parametrize(
    ("content", "fields", "path"),
    [
        ("bad \ud800", {}, "content"),
        (["fine", {"x": "\udc00"}], {}, "content[1]['x']"),
        ({"\ud83d": 1}, {}, "content key '\\ud83d'"),
        ("fine", {"tool_calls": [call("c"), {"id": "\ud800"}]}, "tool_calls[1]['id']"),
        ("fine", {"tool_name": "\udfff"}, "tool_name"),
        ("fine", {"reasoning": "ok\ud800"}, "reasoning"),
        ("fine", {"platform_message_id": "\ud800"}, "platform_message_id"),
    ],
)
def test_lone_surrogates_are_refused_and_nothing_is_written(
    chat: SessionDB, content: Any, fields: dict[str, Any], path: str
) -> None:
    chat.append_message("s1", "user", "kept")
    with pytest.raises(ValueError) as caught:
        chat.append_message("s1", "assistant", content, **fields)
    assert str(caught.value) == (
        f"{path} contains text that cannot be stored as UTF-8 (a lone surrogate)"
    )
    assert table_counts(chat) == (1, 1, 1)
    assert counters(chat, "s1") == (1, 0, 0)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "argument"),
    [
        (("", "user", "x"), {}, ValueError, "session_id"),
        ((None, "user", "x"), {}, TypeError, "session_id"),
        (("s1", "robot", "x"), {}, ValueError, "role"),
        (("s1", None, "x"), {}, TypeError, "role"),
        (("s1", "user", 5), {}, TypeError, "content"),
        (("s1", "user", b"bytes"), {}, TypeError, "content"),
        (("s1", "user", "x"), {"tool_name": 3}, TypeError, "tool_name"),
        (("s1", "user", "x"), {"tool_call_id": ["c"]}, TypeError, "tool_call_id"),
        (("s1", "user", "x"), {"token_count": "12"}, TypeError, "token_count"),
        (("s1", "user", "x"), {"token_count": 1.5}, TypeError, "token_count"),
        (("s1", "user", "x"), {"finish_reason": 0}, TypeError, "finish_reason"),
        (("s1", "user", "x"), {"tool_calls": {1, 2}}, TypeError, "tool_calls"),
        (("s1", "user", "x"), {"reasoning_details": object()}, TypeError, "reasoning_details"),
        (("s1", "user", "x"), {"timestamp": "today"}, ValueError, "timestamp"),
        (("s1", "user", "x"), {"timestamp": b"12"}, TypeError, "timestamp"),
        (("s1", "user", "x"), {"timestamp": float("nan")}, ValueError, "timestamp"),
    ],
)
def test_append_names_a_bad_argument(
    chat: SessionDB,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    argument: str,
) -> None:
    with pytest.raises(error, match=rf"^{argument} "):
        chat.append_message(*args, **kwargs)
    assert table_counts(chat) == (0, 0, 0)
    assert counters(chat, "s1") == (0, 0, 0)


def test_append_takes_a_timestamp_given_as_text_of_a_number_as_hermes_does(
    chat: SessionDB,
) -> None:
    # HERMES_V16 §3.9: "something float-convertible" is taken as the timestamp.
    first = chat.append_message("s1", "user", "a", timestamp="1700000000.5")
    second = chat.append_message("s1", "user", "b", timestamp=" 1700000001 ")
    assert [(m["id"], m["timestamp"]) for m in chat.get_messages("s1")] == [
        (first, 1700000000.5),
        (second, 1700000001.0),
    ]


def test_get_messages_orders_by_id_and_can_include_inactive(chat: SessionDB) -> None:
    chat.create_session("s2", "cli", started_at=T0)
    late = chat.append_message("s1", "user", "late clock", timestamp=T0 + 99)
    chat.append_message("s2", "user", "other session", timestamp=T0 + 1)
    early = chat.append_message("s1", "assistant", "early clock", timestamp=T0 + 1)
    prompt = chat.append_message("s1", "user", "rewound", timestamp=T0 + 100)
    reply = chat.append_message("s1", "assistant", "rewound too", timestamp=T0 + 101)
    chat.rewind_to_message("s1", prompt)
    assert [m["id"] for m in chat.get_messages("s1")] == [late, early]
    everything = chat.get_messages("s1", include_inactive=True)
    assert [(m["id"], m["active"]) for m in everything] == [
        (late, 1),
        (early, 1),
        (prompt, 0),
        (reply, 0),
    ]
    assert chat.get_messages("missing") == []


# -- get_messages_as_conversation -----------------------------------------------------------


def test_conversation_is_openai_style_and_ordered_by_time_then_id(chat: SessionDB) -> None:
    chat.append_message("s1", "assistant", "answer", reasoning="why", timestamp=T0 + 2)
    chat.append_message("s1", "user", "question", timestamp=T0 + 1)
    chat.append_message(
        "s1",
        "assistant",
        None,
        tool_calls=[call("c1")],
        finish_reason="tool_calls",
        timestamp=T0 + 3,
    )
    chat.append_message(
        "s1",
        "tool",
        "result",
        tool_call_id="c1",
        tool_name="search",
        token_count=9,
        timestamp=T0 + 3,
    )
    chat.append_message("s1", "user", ["part", {"type": "text"}], timestamp=T0 + 4)
    chat.append_message(
        "s1",
        "assistant",
        "done",
        reasoning_content="rc",
        reasoning_details=[{"t": 1}],
        codex_reasoning_items=[{"id": "r"}],
        codex_message_items=[{"id": "m"}],
        platform_message_id="p1",
        observed=True,
        timestamp=T0 + 5,
    )
    # Hermes' replay keys: timestamp, message_id (the platform's), observed,
    # and for assistant messages finish_reason and the reasoning fields.
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "user", "content": "question", "timestamp": T0 + 1},
        {"role": "assistant", "content": "answer", "timestamp": T0 + 2, "reasoning": "why"},
        {
            "role": "assistant",
            "content": None,
            "timestamp": T0 + 3,
            "tool_calls": [call("c1")],
            "finish_reason": "tool_calls",
        },
        {
            "role": "tool",
            "content": "result",
            "timestamp": T0 + 3,
            "tool_call_id": "c1",
            "tool_name": "search",
        },
        {"role": "user", "content": ["part", {"type": "text"}], "timestamp": T0 + 4},
        {
            "role": "assistant",
            "content": "done",
            "timestamp": T0 + 5,
            "message_id": "p1",
            "observed": True,
            "reasoning_content": "rc",
            "reasoning_details": [{"t": 1}],
            "codex_reasoning_items": [{"id": "r"}],
            "codex_message_items": [{"id": "m"}],
        },
    ]
    assert chat.get_messages_as_conversation("missing") == []


def test_conversation_leaves_out_rewound_messages(chat: SessionDB) -> None:
    chat.append_message("s1", "user", "keep", timestamp=T0 + 1)
    chat.append_message("s1", "assistant", "kept", timestamp=T0 + 2)
    gone = chat.append_message("s1", "user", "drop", timestamp=T0 + 3)
    chat.append_message("s1", "assistant", "dropped", timestamp=T0 + 4)
    chat.rewind_to_message("s1", gone)
    assert chat.get_messages_as_conversation("s1") == [
        {"role": "user", "content": "keep", "timestamp": T0 + 1},
        {"role": "assistant", "content": "kept", "timestamp": T0 + 2},
    ]
    assert [m["content"] for m in chat.get_messages_as_conversation("s1", False, True)] == [
        "keep",
        "kept",
        "drop",
        "dropped",
    ]


@pytest.fixture
def chain(store: SessionDB) -> SessionDB:
    """root -(compression)-> middle -(compression)-> tip, plus a branch and a subagent of tip."""
    store.create_session("root", "cli", started_at=T0)
    store.append_message("root", "user", "first question", timestamp=T0 + 1)
    store.append_message("root", "assistant", "first answer", timestamp=T0 + 2)
    store.append_message("root", "user", "please continue", timestamp=T0 + 3)
    end_as(store, "root", "compression", T0 + 10)
    store.create_session("middle", "cli", parent_session_id="root", started_at=T0 + 10)
    store.append_message("middle", "user", "please continue", timestamp=T0 + 11)
    store.append_message("middle", "assistant", "continuing", timestamp=T0 + 12)
    store.append_message("middle", "user", "first question", timestamp=T0 + 13)
    store.append_message("middle", "assistant", "asked again, answered again", timestamp=T0 + 14)
    end_as(store, "middle", "compression", T0 + 20)
    store.create_session("tip", "cli", parent_session_id="middle", started_at=T0 + 20)
    store.append_message("tip", "user", "last words", timestamp=T0 + 21)
    store.append_message("tip", "user", "last words", timestamp=T0 + 22)
    store.append_message("tip", "assistant", "bye", timestamp=T0 + 23)
    store.create_session(
        "sub",
        "delegate",
        parent_session_id="tip",
        model_config={"_delegate_from": "tip"},
        started_at=T0 + 24,
    )
    store.append_message("sub", "user", "subtask", timestamp=T0 + 25)
    return store


def end_as(store: SessionDB, session_id: str, reason: str, at: float) -> None:
    Session.get_by_id(session_id).end(reason, at=at)


def contents(conversation: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m["content"]) for m in conversation]


CHAIN_REPLAY = [
    ("user", "first question"),
    ("assistant", "first answer"),
    ("user", "please continue"),
    ("assistant", "continuing"),
    ("user", "first question"),
    ("assistant", "asked again, answered again"),
    ("user", "last words"),
    ("assistant", "bye"),
]


def test_conversation_with_ancestors_starts_at_the_chain_root(chain: SessionDB) -> None:
    replay = chain.get_messages_as_conversation("tip", include_ancestors=True)
    # A prompt re-sent before any reply ("please continue", "last words") is dropped.
    assert contents(replay) == CHAIN_REPLAY
    assert [m["timestamp"] for m in replay] == [T0 + t for t in (1, 2, 3, 12, 13, 14, 21, 23)]
    assert contents(chain.get_messages_as_conversation("tip")) == [
        ("user", "last words"),
        ("user", "last words"),
        ("assistant", "bye"),
    ]


def test_conversation_of_a_root_with_ancestors_is_its_own(chain: SessionDB) -> None:
    assert contents(chain.get_messages_as_conversation("root", include_ancestors=True)) == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "please continue"),
    ]


def test_ancestors_follow_every_kind_of_parent_link(chain: SessionDB) -> None:
    """As Hermes replays: a subagent run starts with its parent chain's transcript."""
    replay = chain.get_messages_as_conversation("sub", include_ancestors=True)
    assert contents(replay) == [*CHAIN_REPLAY, ("user", "subtask")]


def test_branch_conversation_with_ancestors_merges_by_time(chain: SessionDB) -> None:
    """A branch holds a copy of its parent's messages; Hermes' replay merges both
    by time, so the copied prompts are dropped as re-sent and the reply repeats."""
    branch = Session.get_by_id("tip").branch(session_id="fork", at=T0 + 30)
    chain.append_message(branch.id, "user", "on the fork", timestamp=T0 + 31)
    assert contents(chain.get_messages_as_conversation("fork", include_ancestors=True)) == [
        *CHAIN_REPLAY,
        ("assistant", "bye"),
        ("user", "on the fork"),
    ]
    assert len(chain.get_messages_as_conversation("fork")) == 4


def test_ancestor_walk_survives_a_cycle_and_stops_at_100_sessions(store: SessionDB) -> None:
    for n in range(120):
        parent = f"s{n - 1}" if n else None
        store.create_session(f"s{n}", "cli", parent_session_id=parent, started_at=T0 + n)
        store.append_message(f"s{n}", "user", f"turn {n}", timestamp=T0 + n)
        store.append_message(f"s{n}", "assistant", f"reply {n}", timestamp=T0 + n + 0.5)
    replay = store.get_messages_as_conversation("s119", include_ancestors=True)
    assert [m["content"] for m in replay if m["role"] == "user"] == [
        f"turn {n}" for n in range(20, 120)
    ]
    store._conn.execute("UPDATE sessions SET parent_session_id = 's2' WHERE id = 's0'")
    cyclic = store.get_messages_as_conversation("s2", include_ancestors=True)
    assert [m["content"] for m in cyclic if m["role"] == "user"] == ["turn 0", "turn 1", "turn 2"]


@pytest.mark.backends("sqlite")  # counts statements with sqlite3's trace callback
def test_ancestor_replay_is_one_statement(chain: SessionDB) -> None:
    statements: list[str] = []
    chain._conn.set_trace_callback(statements.append)
    try:
        chain.get_messages_as_conversation("sub", include_ancestors=True)
    finally:
        chain._conn.set_trace_callback(None)
    assert len([s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]) == 1


def test_conversation_with_ancestors_validates_arguments(chain: SessionDB) -> None:
    with pytest.raises(TypeError, match=r"^include_ancestors must be bool"):
        chain.get_messages_as_conversation("tip", include_ancestors="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^session_id must not be empty"):
        chain.get_messages_as_conversation("", include_ancestors=True)
    assert chain.get_messages_as_conversation("missing", include_ancestors=True) == []


# -- rewind / restore ------------------------------------------------------------------------


@pytest.fixture
def turns(chat: SessionDB) -> dict[str, int]:
    """Two user turns, the first with a tool call; ids by name."""
    ids = {
        "u1": chat.append_message("s1", "user", "one", timestamp=T0 + 1),
        "a1": chat.append_message(
            "s1", "assistant", None, tool_calls=[call("c1"), call("c2")], timestamp=T0 + 2
        ),
        "t1": chat.append_message("s1", "tool", "r", tool_call_id="c1", timestamp=T0 + 3),
        "u2": chat.append_message("s1", "user", "two", timestamp=T0 + 4),
        "a2": chat.append_message(
            "s1", "assistant", None, tool_calls=[call("c3")], timestamp=T0 + 5
        ),
        "a3": chat.append_message("s1", "assistant", "done", timestamp=T0 + 6),
    }
    return ids


def active_ids(store: SessionDB, session_id: str = "s1") -> list[int]:
    return [m["id"] for m in store.get_messages(session_id)]


def test_rewind_soft_deletes_the_turn_and_after(chat: SessionDB, turns: dict[str, int]) -> None:
    assert counters(chat, "s1") == (6, 3, 0)
    assert chat.rewind_to_message("s1", turns["u2"]) == {
        "rewound_count": 3,
        "target_message": message_row(turns["u2"], "s1", "user", content="two", timestamp=T0 + 4),
        "new_head_id": turns["t1"],
    }
    assert active_ids(chat) == [turns["u1"], turns["a1"], turns["t1"]]
    # Hermes leaves the counters alone; rewind_count counts rewinds.
    assert counters(chat, "s1") == (6, 3, 1)
    assert table_counts(chat) == (6, 6, 6)
    rewound = chat.rewind_to_message("s1", turns["u1"])
    assert (rewound["rewound_count"], rewound["new_head_id"]) == (3, None)
    assert active_ids(chat) == []
    assert counters(chat, "s1") == (6, 3, 2)


@pytest.mark.parametrize("target", ["a1", "t1", "a3"])
def test_rewind_to_a_non_user_message_is_refused(
    chat: SessionDB, turns: dict[str, int], target: str
) -> None:
    role = "tool" if target == "t1" else "assistant"
    with pytest.raises(ValueError) as caught:
        chat.rewind_to_message("s1", turns[target])
    assert str(caught.value) == (
        f"target_message_id {turns[target]}: rewind target must be a 'user' message "
        f"(got role={role!r}, id={turns[target]})"
    )
    assert active_ids(chat) == list(turns.values())
    assert counters(chat, "s1") == (6, 3, 0)


def test_rewind_to_a_foreign_or_unknown_message_is_refused(
    chat: SessionDB, turns: dict[str, int]
) -> None:
    chat.create_session("s2", "cli", started_at=T0)
    foreign = chat.append_message("s2", "user", "elsewhere")
    for message_id in (foreign, 10_000):
        with pytest.raises(ValueError) as caught:
            chat.rewind_to_message("s1", message_id)
        assert str(caught.value) == (
            f"target_message_id {message_id}: message {message_id} not found in session s1"
        )
    assert counters(chat, "s1") == (6, 3, 0)
    assert counters(chat, "s2") == (1, 0, 0)


def test_rewinding_to_an_already_rewound_message_is_refused_and_changes_nothing(
    chat: SessionDB, turns: dict[str, int]
) -> None:
    # SPEC §6: a target that is not an active user message is a ValueError (Hermes B
    # would count a second rewind and flip nothing).
    chat.rewind_to_message("s1", turns["u2"])
    before = chat.get_messages("s1", include_inactive=True)
    with pytest.raises(ValueError, match=rf"^target_message_id {turns['u2']}: .*already rewound"):
        chat.rewind_to_message("s1", turns["u2"])
    assert chat.get_messages("s1", include_inactive=True) == before
    assert counters(chat, "s1") == (6, 3, 1)


def test_a_rewound_target_is_refused_even_when_later_messages_were_restored(
    chat: SessionDB, turns: dict[str, int]
) -> None:
    chat.rewind_to_message("s1", turns["u2"])
    later = [m["id"] for m in chat.get_messages("s1", include_inactive=True)][-1]
    assert chat.restore_rewound("s1", later) == 1
    with pytest.raises(ValueError, match="already rewound"):
        chat.rewind_to_message("s1", turns["u2"])
    assert [m["id"] for m in chat.get_messages("s1")][-1] == later  # still active


@pytest.mark.parametrize(
    ("args", "error", "argument"),
    [
        (("s1", "4"), TypeError, "target_message_id"),
        (("s1", True), TypeError, "target_message_id"),
        (("s1", None), TypeError, "target_message_id"),
        (("", 1), ValueError, "session_id"),
    ],
)
def test_rewind_names_a_bad_argument(
    chat: SessionDB, turns: dict[str, int], args: tuple[Any, ...], error: type, argument: str
) -> None:
    with pytest.raises(error, match=rf"^{argument} "):
        chat.rewind_to_message(*args)
    assert counters(chat, "s1") == (6, 3, 0)


def test_restore_rewound_returns_how_many(chat: SessionDB, turns: dict[str, int]) -> None:
    chat.rewind_to_message("s1", turns["u2"])
    chat.rewind_to_message("s1", turns["u1"])
    assert counters(chat, "s1") == (6, 3, 2)
    assert chat.restore_rewound("s1", turns["u2"]) == 3
    assert active_ids(chat) == [turns["u2"], turns["a2"], turns["a3"]]
    assert counters(chat, "s1") == (6, 3, 2)
    assert chat.restore_rewound("s1", turns["u2"]) == 0
    assert chat.restore_rewound("s1", since_message_id=turns["u1"]) == 3
    assert active_ids(chat) == list(turns.values())
    assert counters(chat, "s1") == (6, 3, 2)
    assert chat.restore_rewound("missing", 1) == 0


def test_restore_only_touches_its_session(chat: SessionDB, turns: dict[str, int]) -> None:
    chat.create_session("s2", "cli", started_at=T0)
    other = chat.append_message("s2", "user", "elsewhere")
    chat.rewind_to_message("s2", other)
    chat.rewind_to_message("s1", turns["u1"])
    assert chat.restore_rewound("s1", 0) == 6
    assert counters(chat, "s2") == (1, 0, 1)
    assert chat.get_messages("s2") == []


def test_restore_names_a_bad_argument(chat: SessionDB) -> None:
    with pytest.raises(TypeError, match=r"^since_message_id must be int"):
        chat.restore_rewound("s1", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^session_id must be str"):
        chat.restore_rewound(1, 1)  # type: ignore[arg-type]


# -- replace / clear -----------------------------------------------------------------------


def test_replace_messages_rewrites_the_transcript(chat: SessionDB, turns: dict[str, int]) -> None:
    chat.rewind_to_message("s1", turns["u2"])
    written = chat.replace_messages(
        "s1",
        [
            {"role": "system", "content": "summary so far"},
            {"role": "user", "content": ["list", "content"], "timestamp": T0 + 50},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("n1"), call("n2")],
                "id": 999,
                "active": 0,
            },
            {"role": "tool", "name": "search", "tool_call_id": "n1", "content": "r"},
        ],
    )
    assert written == 4
    messages = chat.get_messages("s1", include_inactive=True)
    assert [(m["role"], m["content"], m["active"]) for m in messages] == [
        ("system", "summary so far", 1),
        ("user", ["list", "content"], 1),
        ("assistant", None, 1),
        ("tool", "r", 1),
    ]
    assert messages[1]["timestamp"] == T0 + 50
    assert messages[3]["tool_name"] == "search"
    assert all(m["id"] > turns["a3"] for m in messages)
    assert messages[0]["timestamp"] < messages[2]["timestamp"] < messages[3]["timestamp"]
    assert counters(chat, "s1") == (4, 2, 1)
    assert table_counts(chat) == (4, 4, 4)


def test_replace_with_nothing_empties_the_session(chat: SessionDB, turns: dict[str, int]) -> None:
    assert chat.replace_messages("s1", []) == 0
    assert chat.get_messages("s1", include_inactive=True) == []
    assert counters(chat, "s1") == (0, 0, 0)


@pytest.mark.parametrize(
    ("messages", "error", "text"),
    [
        ("not a list", TypeError, "messages must be a list of message dicts"),
        ([{"role": "user"}, "text"], TypeError, "messages[1] must be a dict, not str"),
        ([{"content": "no role"}], ValueError, "messages[0] has no role"),
        ([{"role": "robot"}], ValueError, "messages[0]: role must be one of"),
        ([{"role": "user", "content": "\ud800"}], ValueError, "messages[0]['content'] contains"),
        ([{"role": "user", "timestamp": "x"}], ValueError, "messages[0]: timestamp must be"),
    ],
)
def test_replace_refuses_bad_messages_and_keeps_the_old_ones(
    chat: SessionDB, turns: dict[str, int], messages: Any, error: type, text: str
) -> None:
    with pytest.raises(error) as caught:
        chat.replace_messages("s1", messages)
    assert str(caught.value).startswith(text)
    assert active_ids(chat) == list(turns.values())
    assert counters(chat, "s1") == (6, 3, 0)


def test_replace_takes_hermes_replay_dicts(chat: SessionDB, turns: dict[str, int]) -> None:
    """What get_messages_as_conversation returns can be written back as it is: Hermes'
    ``message_id`` is the platform id, unknown keys are ignored, reasoning stays on
    assistant messages only."""
    replay = [
        {"role": "user", "content": "hi", "timestamp": T0 + 1, "message_id": "tg-1", "x": 1},
        {"role": "user", "content": "again", "reasoning": "no", "observed": True},
        {"role": "assistant", "content": "yo", "reasoning": "why", "finish_reason": "stop"},
    ]
    assert chat.replace_messages("s1", replay) == 3
    rows = chat.get_messages("s1")
    assert [(m["platform_message_id"], m["reasoning"], m["observed"]) for m in rows] == [
        ("tg-1", None, 0),
        (None, None, 1),
        (None, "why", 0),
    ]
    assert rows[0]["timestamp"] == T0 + 1
    assert rows[0]["timestamp"] < rows[1]["timestamp"] < rows[2]["timestamp"]
    assert rows[2]["timestamp"] - rows[1]["timestamp"] == pytest.approx(1e-6, abs=5e-7)
    back = chat.get_messages_as_conversation("s1")
    assert chat.replace_messages("s1", back) == 3
    assert chat.get_messages_as_conversation("s1") == back


def test_replace_in_a_missing_session_is_refused(chat: SessionDB) -> None:
    with pytest.raises(ValueError, match=r"^session_id 'missing' does not exist"):
        chat.replace_messages("missing", [{"role": "user", "content": "x"}])
    assert table_counts(chat) == (0, 0, 0)


def test_clear_messages_deletes_everything(chat: SessionDB, turns: dict[str, int]) -> None:
    chat.create_session("s2", "cli", started_at=T0)
    chat.append_message("s2", "user", "stays")
    chat.rewind_to_message("s1", turns["u2"])
    assert chat.clear_messages("s1") == 6
    assert chat.get_messages("s1", include_inactive=True) == []
    assert counters(chat, "s1") == (0, 0, 1)
    assert table_counts(chat) == (1, 1, 1)
    assert chat.clear_messages("s1") == 0
    assert chat.clear_messages("missing") == 0
    assert [m["content"] for m in chat.get_messages("s2")] == ["stays"]


def test_counters_count_every_row_as_hermes_does(chat: SessionDB, turns: dict[str, int]) -> None:
    """After any sequence of edits, the stored counters equal a fresh count of the
    session's rows, rewound ones included."""

    def fresh() -> tuple[int, int]:
        rows = chat.get_messages("s1", include_inactive=True)
        calls = sum(
            len(m["tool_calls"])
            for m in rows
            if m["role"] == "assistant" and isinstance(m["tool_calls"], list)
        )
        return len(rows), calls

    steps = [
        lambda: chat.rewind_to_message("s1", turns["u2"]),
        lambda: chat.append_message("s1", "assistant", None, tool_calls=[call("z")]),
        lambda: chat.restore_rewound("s1", turns["u2"]),
        lambda: chat.rewind_to_message("s1", turns["u1"]),
        lambda: chat.append_message("s1", "user", "fresh start"),
        lambda: chat.restore_rewound("s1", 0),
        lambda: chat.replace_messages("s1", [{"role": "assistant", "tool_calls": [call("q")]}]),
        lambda: chat.clear_messages("s1"),
    ]
    for step in steps:
        step()
        message_count, tool_call_count, _ = counters(chat, "s1")
        assert (message_count, tool_call_count) == fresh()


def test_writes_through_raw_conn_see_the_same_rows(chat: SessionDB) -> None:
    message_id = chat.append_message("s1", "user", ["x"])
    row = chat._conn.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).fetchone()
    assert row["content"] == '\x00json:["x"]'
    with pytest.raises(sqlite3.IntegrityError):
        chat._conn.execute(
            "INSERT INTO messages (session_id, role, timestamp) VALUES ('nope', 'user', 1)"
        )


def test_message_row_follows_the_column_order_of_the_insert() -> None:
    from hermes_models.conversations.transcript import MESSAGE_FIELDS, message_row

    assert MESSAGE_FIELDS == (
        "session", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp",
        "token_count", "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
        "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed",
    )  # fmt: skip
    row = message_row(
        "s", "assistant", "c", tool_call_id="i", tool_calls=[1], tool_name="n", timestamp=2.0,
        token_count=3, finish_reason="f", reasoning="r", reasoning_content="rc",
        reasoning_details={"d": 1}, codex_reasoning_items=[2], codex_message_items=[3],
        platform_message_id=7, observed=True,
    )  # fmt: skip
    assert row == [
        "s", "assistant", "c", "i", "[1]", "n", 2.0, 3, "f", "r", "rc", '{"d": 1}', "[2]", "[3]",
        "7", 1,
    ]  # fmt: skip
