"""Reading a session's history the ways Hermes reads it.

* :func:`messages_of` - every column, by id: the rows as stored, with only
  ``content`` and ``tool_calls`` decoded;
* :func:`conversation` - the OpenAI-style replay, by time, optionally with
  the whole parent chain before it (one statement, whatever its length);
* :func:`messages_around` and :func:`anchored_view` - a window of messages
  around one message id, and the session's opening and closing turns;
* :func:`recent_user_messages` - the prompts a /rewind picker offers;
* :func:`display_messages` - what a person is shown: on files of Hermes
  v17 or later, the live and the compacted history without rows Hermes never
  paints, each logical message once.

On files newer than v16 the replay follows Hermes' later rules too:
``session_meta`` rows (transcript bookkeeping) are left out, and a row's
``api_content``, when set, is what the model was sent, so it is replayed.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING

from peewee import fn

from ..checks import check_flag, check_int64
from ..models import Message, Session, decode_content, decode_json, walk_sessions, with_extra
from ..store import Prepared, content_text, current, fetch_dicts, file_has, newer_file

if TYPE_CHECKING:
    from typing import Any

#: Sessions a replay with ancestors reaches at most (the session and 99 above it).
ANCESTOR_STEPS = 100
#: Characters of a /rewind picker preview before it is cut to 77 plus ``...``.
RECENT_PREVIEW_CHARS = 80

_REPLAY_JSON = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


@functools.cache
def _memory_patterns() -> tuple[re.Pattern[str], ...]:
    """The recalled-memory block, its system note and a stray fence tag (compiled on first
    use, not at every start-up)."""
    return (
        re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.I),
        re.compile(
            r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
            r"Treat as [^\]]*\]\s*",
            re.I,
        ),
        re.compile(r"</?\s*memory-context\s*>", re.I),
    )


def sanitize_context(text: str) -> str:
    """``text`` without recalled-memory blocks, their system note and stray fence tags."""
    if not text:
        return ""
    for pattern in _memory_patterns():
        text = pattern.sub("", text)
    return text.strip()


def _load(stored: Any, fallback: Any) -> Any:
    """A stored JSON column decoded; ``fallback`` when the text is not JSON."""
    try:
        return json.loads(stored)
    except (TypeError, ValueError, RecursionError):
        return fallback


def _tool_calls(stored: Any) -> Any:
    """Stored ``tool_calls`` decoded; text that is not JSON comes back as it is."""
    return decode_json(stored)


def _hydrate(row: dict[str, Any], *, summary: bool = True) -> dict[str, Any]:
    """A stored message row as Hermes returns it: content and tool_calls decoded, and
    (Hermes v25+) ``display_metadata``; without the columns Hermes keeps to itself
    (``display_identity``, ``display_order``), and ``_compressed_summary`` only as
    ``True`` (``summary``; Hermes' ``get_messages_around`` leaves it out)."""
    row.pop("display_identity", None)
    row.pop("display_order", None)
    if row.pop("_compressed_summary", 0) and summary:
        row["_compressed_summary"] = True
    row["content"] = decode_content(row["content"])
    if row.get("tool_calls"):
        row["tool_calls"] = _tool_calls(row["tool_calls"])
    if row.get("display_metadata") is not None:
        row["display_metadata"] = display_metadata(row["display_metadata"])
    return row


def display_metadata(raw: Any) -> dict[str, Any] | None:
    """A ``display_metadata`` column (Hermes v25+) as Hermes reads it: the JSON object
    it holds (text encoded twice by older writers is decoded twice); None when it is
    not a JSON object."""
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
        if isinstance(value, str):
            value = json.loads(value)
    except (ValueError, TypeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def messages_of(session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
    """Every column of a session's messages by id; soft-deleted ones only when asked."""
    query = with_extra(Message.for_session(session_id, include_inactive=include_inactive), Message)
    return [_hydrate(row) for row in fetch_dicts(query)]


#: What a replay reads of each message, in the order :func:`_replay_entry` unpacks it.
_REPLAY_FIELDS = (
    Message.role,
    Message.content,
    Message.api_content,
    Message.timestamp,
    Message.tool_call_id,
    Message.tool_name,
    Message.tool_calls,
    Message.platform_message_id,
    Message.observed,
    Message.finish_reason,
    Message.reasoning,
    Message.reasoning_content,
    Message.reasoning_details,
    Message.codex_reasoning_items,
    Message.codex_message_items,
)


def _replay_entry(row: tuple[Any, ...]) -> dict[str, Any]:
    (
        role,
        stored,
        sent,
        timestamp,
        tool_call_id,
        tool_name,
        tool_calls,
        message_id,
        observed,
        finish_reason,
        reasoning,
        reasoning_content,
        *decoded_later,
    ) = row
    content = decode_content(stored if sent is None else sent)
    if role in ("user", "assistant") and isinstance(content, str):
        content = sanitize_context(content).strip()
    entry: dict[str, Any] = {"role": role, "content": content}
    if timestamp:
        entry["timestamp"] = timestamp
    if tool_call_id:
        entry["tool_call_id"] = tool_call_id
    if tool_name:
        entry["tool_name"] = tool_name
    if tool_calls:
        entry["tool_calls"] = _load(tool_calls, [])  # as Hermes replays it: [] when not JSON
    if message_id:
        entry["message_id"] = message_id
    if observed:
        entry["observed"] = True
    if role == "assistant":
        if finish_reason:
            entry["finish_reason"] = finish_reason
        if reasoning:
            entry["reasoning"] = reasoning
        if reasoning_content is not None:
            entry["reasoning_content"] = reasoning_content
        for name, value in zip(_REPLAY_JSON, decoded_later):
            if value:
                entry[name] = _load(value, None)
    return entry


def _resent(kept: list[dict[str, Any]], entry: dict[str, Any]) -> bool:
    """True for a user prompt already sent since the last assistant reply (a resume re-send)."""
    content = entry["content"]
    if entry["role"] != "user" or not isinstance(content, str) or not content:
        return False
    for earlier in reversed(kept):
        if earlier["role"] == "user" and earlier["content"] == content:
            return True
        if earlier["role"] == "assistant" and (earlier["content"] or earlier.get("tool_calls")):
            return False
    return False


def conversation(
    session_id: str, *, include_ancestors: bool = False, include_inactive: bool = False
) -> list[dict[str, Any]]:
    """A session's messages as OpenAI-style dicts ordered by (timestamp, id).

    With ``include_ancestors`` the messages of every session up the parent
    chain (any kind of link, at most :data:`ANCESTOR_STEPS` sessions, a
    cycle ends the walk) are merged in by time, and a user prompt re-sent
    before any assistant reply is dropped.
    """
    include_ancestors = check_flag(include_ancestors, "include_ancestors")
    include_inactive = check_flag(include_inactive, "include_inactive")
    cursor = _REPLAYS[include_ancestors, include_inactive].execute(current(), session_id=session_id)
    kept: list[dict[str, Any]] = []
    for row in cursor.fetchall():
        entry = _replay_entry(row)
        if include_ancestors and _resent(kept, entry):
            continue
        kept.append(entry)
    return kept


def _replay_query(session_id: Any, *, include_ancestors: bool, include_inactive: bool) -> Any:
    if include_ancestors:
        chain = walk_sessions(Session, session_id, upward=True)
        query = (
            Message.select(*_REPLAY_FIELDS)
            .join(chain, on=(Message.session == chain.c.id))
            .where(chain.c.depth < ANCESTOR_STEPS)
            .with_cte(chain)
        )
    else:
        query = Message.select(*_REPLAY_FIELDS).where(Message.session == session_id)
    if not include_inactive:
        query = query.where(Message.active == 1)
    if newer_file():
        query = query.where(Message.role != "session_meta")
    return query.order_by(Message.timestamp, Message.id)


#: The replay statements by (with ancestors?, with rewound rows?): a session is
#: replayed on every resume, so each is rendered once per file structure.
_REPLAYS = {
    (ancestors, inactive): Prepared(
        functools.partial(_replay_query, include_ancestors=ancestors, include_inactive=inactive),
        "session_id",
    )
    for ancestors in (False, True)
    for inactive in (False, True)
}


def messages_around(session_id: str, message_id: int, window: int = 5) -> dict[str, Any]:
    """Up to ``window`` messages either side of ``message_id`` in its session, by id.

    Returns ``window`` (the rows, content and tool_calls decoded, rewound
    ones included), ``messages_before`` and ``messages_after`` (how many of
    them precede and follow the anchor); an empty window when the id is
    not a message of that session.
    """
    check_int64(message_id, "around_message_id")
    window = max(0, check_int64(window, "window"))
    anchor = Message.select(Message.id).where(
        Message.id == message_id, Message.session == session_id
    )
    if not anchor.exists():
        return {"window": [], "messages_before": 0, "messages_after": 0}
    before = fetch_dicts(
        Message.select()
        .where(Message.session == session_id, Message.id <= message_id)
        .order_by(Message.id.desc())
        .limit(window + 1)
    )
    after = fetch_dicts(
        Message.select()
        .where(Message.session == session_id, Message.id > message_id)
        .order_by(Message.id)
        .limit(window)
    )
    rows = [_hydrate(row, summary=False) for row in reversed(before)]
    rows += [_hydrate(row, summary=False) for row in after]
    return {"window": rows, "messages_before": len(before) - 1, "messages_after": len(after)}


def anchored_view(
    session_id: str,
    message_id: int,
    window: int = 5,
    bookend: int = 3,
    keep_roles: tuple[str, ...] | None = ("user", "assistant"),
) -> dict[str, Any]:
    """:func:`messages_around` plus the session's first and last turns.

    The window keeps only ``keep_roles`` (the anchor always stays);
    ``bookend_start`` holds the first ``bookend`` messages before the
    window and ``bookend_end`` the last ``bookend`` after it, both of
    ``keep_roles`` with non-empty content, in id order. ``keep_roles=None``
    keeps every role.
    """
    bookend = max(0, check_int64(bookend, "bookend"))
    roles = None if keep_roles is None else tuple(keep_roles)
    view = messages_around(session_id, message_id, window)
    rows = view["window"]
    if not rows:
        return {**view, "bookend_start": [], "bookend_end": []}
    if roles is not None:
        view["window"] = [row for row in rows if row["id"] == message_id or row["role"] in roles]
    view["bookend_start"] = []
    view["bookend_end"] = []
    if bookend:
        base = Message.select().where(Message.session == session_id, fn.length(Message.content) > 0)
        if roles is not None:
            base = base.where(Message.role.in_(roles))
        start = base.where(Message.id < rows[0]["id"]).order_by(Message.id).limit(bookend)
        end = base.where(Message.id > rows[-1]["id"]).order_by(Message.id.desc()).limit(bookend)
        view["bookend_start"] = [_hydrate(row) for row in fetch_dicts(start)]
        view["bookend_end"] = [_hydrate(row) for row in reversed(fetch_dicts(end))]
    return view


def _preview(content: Any) -> str:
    text = " ".join(content_text(decode_content(content)).split())
    if len(text) > RECENT_PREVIEW_CHARS:
        text = text[: RECENT_PREVIEW_CHARS - 3] + "..."
    return text


def recent_user_messages(
    session_id: str, limit: int = 20, include_inactive: bool = False
) -> list[dict[str, Any]]:
    """The ``limit`` latest user messages, newest first, as ``{id, timestamp, preview}``."""
    limit = check_int64(limit, "limit", minimum=0)
    query = Message.select(Message.id, Message.timestamp, Message.content).where(
        Message.session == session_id, Message.role == "user"
    )
    if not check_flag(include_inactive, "include_inactive"):
        query = query.where(Message.active == 1)
    rows = fetch_dicts(query.order_by(Message.id.desc()).limit(limit))
    return [
        {"id": row["id"], "timestamp": row["timestamp"], "preview": _preview(row["content"])}
        for row in rows
    ]


def _display_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """Hermes' display identity of a row (without its Python-specific hash)."""
    return (
        row["role"],
        row["content"],
        row["timestamp"],
        row["tool_call_id"],
        row["tool_calls"],
        row["tool_name"],
    )


def display_messages(session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
    """A session's messages as a person is shown them, by id, decoded as :func:`messages_of`.

    On a v16 file these are :func:`messages_of`'s rows. On a file of Hermes
    v17 or later they follow Hermes' display rules: live rows and rows
    archived by in-place compaction (``compacted = 1``), without rows marked
    ``display_kind = 'hidden'`` and without ``session_meta`` rows; a message
    that compaction copied appears once (per display identity, the live copy,
    else the newest), in the place of its first copy. ``include_inactive``
    shows every row, rewound ones included (an audit view).
    """
    include_inactive = check_flag(include_inactive, "include_inactive")
    if not newer_file() or include_inactive:
        return messages_of(session_id, include_inactive)
    query = Message.select().where(Message.session == session_id)
    visible = Message.active == 1
    if file_has("messages", "compacted"):
        visible = visible | (Message.compacted == 1)
    query = query.where(visible, Message.role != "session_meta")
    if file_has("messages", "display_kind"):
        query = query.where(fn.COALESCE(Message.display_kind, "") != "hidden")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in fetch_dicts(query.order_by(Message.id)):
        groups.setdefault(_display_key(row), []).append(row)
    shown = []
    for rows in groups.values():
        best = max(rows, key=lambda r: (r["active"] or 0, r["id"]))
        shown.append((rows[0]["id"], best))
    return [_hydrate(row) for _, row in sorted(shown, key=lambda item: item[0])]
