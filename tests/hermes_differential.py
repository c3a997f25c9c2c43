"""Stores built by a Hermes release through its own ``SessionDB``, and the read calls
asked of it and of this package (``tests/test_hermes_differential.py``).

:func:`build` writes, with a seed, what a Hermes user's store holds: sessions of
nine sources, a compression chain, a /branch fork, delegated runs, a reset, CJK
text, a tool result over 8,192 characters, a multimodal message, system prompts,
titles, an archived session and rewound rows, and a session each release replays in
its own way (:func:`replayed`: a clock stepped back, ``session_meta``, ``api_content``,
display rows, background-review turns, a bare tool marker answer, a user turn cloned
into a compression's continuation; v31 stores the uids). A feature a release lacks (a
keyword its ``append_message`` does not take) is left out of that release's store.
:data:`CALLS` are the read calls of ``SessionDB`` asked of both sides.
"""

from __future__ import annotations

import random
from typing import Any

from hermes_release import HermesError, HermesProcess

SOURCES = ("cli", "telegram", "discord", "slack", "cron", "api", "tool", "subagent", "kanban")
WORDS = ("quokka", "kestrel", "lantern", "harbor", "socket", "epoll", "ledger", "tundra")
CJK = ("数据库", "协程调度器", "事件循环", "データベース", "한국어")
PROMPTS = ("You are Hermes, a helpful agent. " * 20, "You are a careful researcher. " * 15)


def _maybe(h: HermesProcess, method: str, *args: Any, **kwargs: Any) -> Any:
    """``h.call`` when the release has the method and takes the arguments, else None."""
    try:
        return h.call(method, *args, **kwargs)
    except HermesError as exc:
        if exc.kind in ("AttributeError", "TypeError"):
            return None
        raise


def _text(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), rng.choice(CJK))
    return " ".join(words)


def build(h: HermesProcess, seed: int = 1) -> dict[str, list[Any]]:
    """Fill the store ``h`` has open; returns the session and title names made, and
    whether the release takes ``include_row_ids``."""
    rng = random.Random(seed)
    sessions: list[str] = []
    titles: list[str] = []

    def session(sid: str, source: str, **kwargs: Any) -> None:
        h.call("create_session", sid, source, **kwargs)
        sessions.append(sid)

    def talk(sid: str, turns: int) -> list[int]:
        ids = []
        for _ in range(turns):
            ids.append(h.call("append_message", sid, "user", _text(rng, rng.randrange(3, 9))))
            ids.append(h.call("append_message", sid, "assistant", _text(rng, rng.randrange(5, 15))))
        return ids

    for i, source in enumerate(SOURCES):
        sid = f"cron_nightly_{i}" if source == "cron" else f"{source}-{i}"
        session(sid, source, model=f"m{i % 3}", system_prompt=PROMPTS[i % 2])
        talk(sid, rng.randrange(1, 4))
        if i % 3 == 0:
            title = f"{source} {rng.choice(WORDS)} notes"
            h.call("set_session_title", sid, title)
            titles.append(title)
    # A compression chain of three links, the root titled; each continuation its own.
    session("chain-0", "cli", system_prompt=PROMPTS[0])
    talk("chain-0", 2)
    h.call("set_session_title", "chain-0", "Chain of thought")
    titles.append("Chain of thought")
    for n in (1, 2):
        h.call("end_session", f"chain-{n - 1}", "compression")
        session(f"chain-{n}", "cli", parent_session_id=f"chain-{n - 1}", system_prompt=PROMPTS[0])
        talk(f"chain-{n}", 2)
    # A /branch fork and a delegated run of the chain's tip.
    h.call("end_session", "telegram-1", "branched")
    session(
        "fork",
        "telegram",
        parent_session_id="telegram-1",
        model_config={"_branched_from": "telegram-1"},
    )
    talk("fork", 1)
    session(
        "delegated",
        "subagent",
        parent_session_id="chain-2",
        model_config={"_delegate_from": "chain-2"},
    )
    talk("delegated", 1)
    # A reset: the old conversation ends, a new one starts.
    h.call("end_session", "discord-2", "session_reset")
    session("discord-new", "discord")
    talk("discord-new", 1)
    # Tool calls, a tool result over 8,192 characters, a multimodal message.
    calls = [{"id": "call-1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]
    h.call("append_message", "cli-0", "assistant", "", tool_calls=calls)
    long_result = "tundra " * 1300 + "needle-at-the-end"
    h.call("append_message", "cli-0", "tool", long_result, tool_call_id="call-1", tool_name="grep")
    image = [
        {"type": "text", "text": "what is in this harbor picture"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    h.call("append_message", "slack-3", "user", image)
    # Display metadata where the release takes it.
    _maybe(h, "append_message", "api-5", "assistant", "ledger summary", display_metadata={"k": 1})
    # Rewound rows, an archived session.
    ids = talk("tool-6", 2)
    _maybe(h, "rewind_to_message", "tool-6", ids[2])  # the second user message
    h.call("set_session_archived", "kanban-8", True)
    # Pinned (v25 on) and hidden (v26 on) sessions, and activity after the last message
    # (Hermes' heartbeat, v25 on), where the release has them.
    _maybe(h, "set_session_pinned", "slack-3", True)
    _maybe(h, "set_session_hidden", "api-5", True)
    _maybe(h, "touch_session_activity", "discord-new", 1_900_000_000.0)
    # In-place compaction (v26 on): the live rows are archived as compacted, a summary
    # and the last turn take their place.
    summary = [
        {"role": "user", "content": "[Compacted summary] lantern and harbor so far"},
        {"role": "assistant", "content": "kestrel carried forward"},
    ]
    _maybe(h, "archive_and_compact", "cron_nightly_4", summary, tail_count=1)
    # Telegram DM topics (an opt-in set of tables): one chat in topic mode, one topic bound.
    _maybe(h, "apply_telegram_topic_migration")
    _maybe(h, "enable_telegram_topic_mode", chat_id="c1", user_id="u1")
    topic = {"chat_id": "c1", "thread_id": "7", "user_id": "u1", "session_key": "k1"}
    _maybe(h, "bind_telegram_topic", session_id="telegram-1", **topic)
    replayed(h)
    row_ids = _maybe(h, "get_messages_as_conversation", "replay", include_row_ids=True)
    return {
        "sessions": [*sessions, "replay", "replay-2"],
        "titles": titles,
        "row_ids": [row_ids is not None],
    }


#: The text of a background-review prompt (Hermes v17 on replay a session without it).
REVIEW = "Review the conversation above and update the skill library"


def replayed(h: HermesProcess) -> None:
    """Rows each release's replay treats in its own way, through its own
    ``append_message``: a clock stepped back, transcript bookkeeping, the wire text
    beside the content (v22 on), display rows (v25 on), background-review turns, a
    bare tool-marker answer, and a user turn a compression cloned into the
    continuation (the clone keeps the original's time and content)."""
    h.call("create_session", "replay", "cli")
    at = 1_767_000_000.0
    h.call("append_message", "replay", "user", "socket question", timestamp=at + 10)
    h.call("append_message", "replay", "assistant", "epoll answer", timestamp=at + 11)
    h.call("append_message", "replay", "user", "ledger after a clock step", timestamp=at + 5)
    h.call("append_message", "replay", "session_meta", '{"event": "turn_started"}')
    memory = "<memory-context>likes tea</memory-context> harbor question"
    _maybe(h, "append_message", "replay", "user", memory, api_content=memory + " [sent]")
    marker = [{"id": "call-m|item-m", "type": "function", "function": {"name": "memory"}}]
    h.call("append_message", "replay", "assistant", "[memory]", tool_calls=marker)
    h.call("append_message", "replay", "tool", "remembered", tool_call_id="item-m")
    disposition = {"effect_disposition": "applied"}
    _maybe(h, "append_message", "replay", "tool", "applied", tool_call_id="call-m", **disposition)
    kind = {"display_kind": "async_delegation_complete", "display_metadata": {"task_count": 2}}
    _maybe(h, "append_message", "replay", "user", "delegation done", **kind)
    h.call("append_message", "replay", "user", REVIEW + ". Be brief.")
    h.call("append_message", "replay", "assistant", "curator reply")
    h.call("append_message", "replay", "user", "kestrel question")
    h.call("append_message", "replay", "assistant", "kestrel answer")
    h.call("append_message", "replay", "user", REVIEW)
    h.call("append_message", "replay", "system", REVIEW + " again")
    h.call("append_message", "replay", "assistant", "reply after two prompts")
    h.call("append_message", "replay", "user", "clone me", timestamp=at + 50)
    h.call("append_message", "replay", "assistant", "cloned answer", timestamp=at + 51)
    h.call("end_session", "replay", "compression")
    h.call("create_session", "replay-2", "cli", parent_session_id="replay")
    h.call("append_message", "replay-2", "user", "clone me", timestamp=at + 50)
    h.call("append_message", "replay-2", "assistant", "continued", timestamp=at + 52)


def calls(built: dict[str, list[Any]]) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The read calls asked of both sides of a store :func:`build` made."""
    asked: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for kwargs in (
        {},
        {"limit": 1000},
        {"include_children": True, "limit": 1000},
        {"source": "telegram"},
        {"exclude_sources": ["tool"]},
        {"include_archived": True, "limit": 1000},
        {"archived_only": True},
        {"order_by_last_active": True, "limit": 1000},
        {"min_message_count": 3},
    ):
        asked.append(("list_sessions_rich", (), kwargs))
    for kwargs in ({}, {"include_archived": True}, {"source": "cli"}, {"exclude_children": True}):
        asked.append(("session_count", (), kwargs))
    asked.append(("message_count", (), {}))
    for sid in built["sessions"]:
        asked += [
            ("get_session", (sid,), {}),
            ("get_session_title", (sid,), {}),
            ("message_count", (sid,), {}),
            ("get_messages", (sid,), {}),
            ("get_messages", (sid,), {"include_inactive": True}),
            ("get_messages_as_conversation", (sid,), {}),
            ("get_messages_as_conversation", (sid,), {"include_ancestors": True}),
            ("export_session", (sid,), {}),
            ("get_compression_tip", (sid,), {}),
            ("resolve_resume_session_id", (sid,), {}),
            ("resolve_session_id", (sid[:4],), {}),
        ]
    for sid in ("replay", "replay-2"):
        asked.append(("get_messages_as_conversation", (sid,), {"include_inactive": True}))
        if built["row_ids"][0]:  # Hermes v25 on
            asked.append(("get_messages_as_conversation", (sid,), {"include_row_ids": True}))
    for title in built["titles"]:
        asked += [
            ("get_session_by_title", (title,), {}),
            ("resolve_session_by_title", (title,), {}),
            ("get_next_title_in_lineage", (title,), {}),
        ]
    for query in (*WORDS[:4], "needle-at-the-end", *CJK, "数据", "库", "harbor picture"):
        asked.append(("search_messages", (query,), {}))
    asked.append(("search_messages", ("tundra",), {"role_filter": ["tool"]}))
    for query in ("chain", "cli", "cron_", "zz"):
        asked.append(("search_sessions_by_id", (query,), {}))
    asked.append(("list_cron_job_runs", ("nightly",), {}))
    asked += [
        ("is_telegram_topic_mode_enabled", (), {"chat_id": "c1", "user_id": "u1"}),
        ("is_telegram_topic_mode_enabled", (), {"chat_id": "c2", "user_id": "u1"}),
        ("get_telegram_topic_binding", (), {"chat_id": "c1", "thread_id": "7"}),
        ("list_telegram_topic_bindings_for_chat", (), {"chat_id": "c1"}),
        ("get_telegram_topic_binding_by_session", (), {"session_id": "telegram-1"}),
        ("is_telegram_session_linked_to_topic", (), {"session_id": "telegram-1"}),
        ("is_telegram_session_linked_to_topic", (), {"session_id": "cli-0"}),
    ]
    asked.append(("export_all", (), {}))
    asked.append(("get_meta", ("nothing-here",), {}))
    return asked


#: What the console script passes for the picker's listing: Hermes' internal sources.
PICKER_EXCLUDES = ["tool", "kanban", "oneshot"]


def cli_calls(
    built: dict[str, list[Any]],
) -> list[tuple[list[str], str, tuple[Any, ...], dict[str, Any]]]:
    """Read commands of the console script (``--json``, or the one line ``resume``
    prints) with the Hermes call each must answer as: ``(args, method, args, kwargs)``."""
    asked: list[tuple[list[str], str, tuple[Any, ...], dict[str, Any]]] = [
        (["sessions", "--json"], "list_sessions_rich", (), {"exclude_sources": PICKER_EXCLUDES}),
        (
            ["sessions", "--json", "--limit", "1000", "--recent"],
            "list_sessions_rich",
            (),
            {"limit": 1000, "order_by_last_active": True, "exclude_sources": PICKER_EXCLUDES},
        ),
        (
            ["sessions", "--json", "--source", "telegram"],
            "list_sessions_rich",
            (),
            {"source": "telegram"},
        ),
        (["search", WORDS[0], "--json"], "search_messages", (WORDS[0],), {}),
        (["search", CJK[0], "--json"], "search_messages", (CJK[0],), {}),
        (
            ["search", "tundra", "--role", "tool", "--json"],
            "search_messages",
            ("tundra",),
            {"role_filter": ["tool"]},
        ),
    ]
    for sid in built["sessions"][:2]:
        asked.append((["resume", sid], "resolve_resume_session_id", (sid,), {}))
        # What show prints is the session's messages as Hermes gives them.
        asked.append((["show", sid, "--json"], "get_messages", (sid,), {}))
    return asked


def window_calls(
    sessions: list[str], messages: list[Any]
) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """Read calls that need a message id, asked once Hermes has told which messages each
    session holds (``messages``: its ``get_messages`` answer for each of ``sessions``),
    and the calls of the v16 surface that take no id."""
    asked: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("count_empty_sessions", (), {}),
        ("list_pending_handoffs", (), {}),
    ]
    for sid, answer in zip(sessions, messages):
        rows = answer[1] if answer[0] == "ok" else []
        asked += [
            ("list_recent_user_messages", (sid,), {}),
            ("get_handoff_state", (sid,), {}),
            ("get_compression_lock_holder", (sid,), {}),
        ]
        if rows:
            middle = rows[len(rows) // 2]["id"]
            asked += [
                ("get_messages_around", (sid, middle), {"window": 2}),
                ("get_anchored_view", (sid, middle), {"window": 2, "bookend": 1}),
            ]
    return asked
