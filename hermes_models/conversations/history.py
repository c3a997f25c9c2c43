"""Reading a session's history the ways Hermes reads it.

* :func:`messages_of` - every column, by id: the rows as stored, with only
  ``content`` and ``tool_calls`` decoded;
* :func:`conversation` - the OpenAI-style replay, optionally with the sessions
  it continues before it (one statement, whatever their number);
* :func:`messages_around` and :func:`anchored_view` - a window of messages
  around one message id, and the session's opening and closing turns;
* :func:`recent_user_messages` - the prompts a /rewind picker offers;
* :func:`display_messages` - what a person is shown: on files of Hermes
  v17 or later, the live and the compacted history without rows Hermes never
  paints, each logical message once.

The replay follows the rules of the Hermes that wrote the open file, told by
the file's columns: a v16 file is replayed by time, a later one by id, with
the keys and the clean-ups its Hermes added.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import TYPE_CHECKING

from peewee import fn

from ..checks import check_flag, check_int64
from ..models import (
    Message,
    Session,
    compression_expr,
    decode_content,
    decode_json,
    walk_sessions,
    with_extra,
)
from ..store import (
    Prepared,
    among,
    content_text,
    current,
    fetch_dicts,
    file_has,
    newer_file,
)

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
            r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
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
    ``True`` (``summary``; Hermes' windows around a message keep it as stored)."""
    row.pop("display_identity", None)
    row.pop("display_order", None)
    if summary and row.pop("_compressed_summary", 0):
        row["_compressed_summary"] = True
    row["content"] = decode_content(row["content"])
    if row.get("tool_calls"):
        row["tool_calls"] = _tool_calls(row["tool_calls"])
    if row.get("display_metadata") is not None:
        row["display_metadata"] = display_metadata(row["display_metadata"])
    return row


def display_metadata(raw: Any) -> dict[str, Any] | None:
    """A ``display_metadata`` column (Hermes v25+) as Hermes reads it: the JSON object
    its text holds (text encoded twice by older writers is decoded twice); None when
    it is not a JSON object, or not text (a BLOB)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
        if isinstance(value, str):
            value = json.loads(value)
    except (ValueError, TypeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def messages_of(session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
    """Every column of a session's messages by id; soft-deleted ones only when asked."""
    query = with_extra(Message.for_session(session_id, include_inactive=include_inactive), Message)
    return [_hydrate(row) for row in fetch_dicts(query)]


def messages_of_sessions(
    session_ids: list[str], include_inactive: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """:func:`messages_of` for each of ``session_ids``, in one statement."""
    found: dict[str, list[dict[str, Any]]] = {sid: [] for sid in session_ids}
    if not session_ids:
        return found
    query = Message.select().where(among(Message.session, session_ids))
    if not check_flag(include_inactive, "include_inactive"):
        query = query.where(Message.active == 1)
    for row in fetch_dicts(with_extra(query.order_by(Message.id), Message)):
        found[str(row["session_id"])].append(_hydrate(row))
    return found


#: What a replay reads of each message, in the order :func:`_replay_entry` unpacks it.
_REPLAY_FIELDS = (
    Message.id,
    Message.role,
    Message.content,
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
#: What a replay of a newer file reads besides (:func:`_newer_entry`); a column the
#: file lacks reads as NULL, and a NULL adds no key.
_NEWER_FIELDS = (
    Message.effect_disposition,
    Message.api_content,
    Message.display_kind,
    Message.display_metadata,
    Message.message_uid,
    Message.absorbed_message_uids,
    Message.tool_call_uids,
    Message.tool_call_uid,
)

#: The openings of Hermes' background-review prompts. Older Hermes builds let the
#: forked curator write its prompt and reply into the session it reviewed; Hermes
#: v17 on replay such a session without them.
_REVIEW_PROMPTS = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)
#: Content of an assistant tool-call turn that is only a bracketed tool name
#: (``[memory]``), which older Hermes builds saved as the answer: replayed empty
#: from v25 on.
_BARE_TOOL_MARKER = re.compile(r"\[[A-Za-z_][A-Za-z0-9_.-]*\]")


@dataclasses.dataclass(frozen=True)
class _Rules:
    """How the Hermes that wrote the open file replays a conversation, told by the
    file's structure, never by a version number."""

    #: v17 on (a newer file): by id (insertion order), where a v16 file is replayed by
    #: (timestamp, id); background-review turns (:data:`_REVIEW_PROMPTS`) left out.
    newer: bool = False
    #: v25 on (``display_kind``): a bare ``[tool]`` marker answer is replayed empty.
    blank_markers: bool = False
    #: v26 on (``_compressed_summary``): every entry says ``_db_persisted``; with
    #: ancestors a /branch copy stands alone and a user turn cloned by a compression
    #: (same time, same content) is kept where the clone is.
    v26: bool = False
    #: Search storage 3 on (the later v30 release, v31): a review prompt right after
    #: another arms no skip, so the reply after two or more in a row stays.
    review_runs: bool = False
    #: v31 (``message_uid``): the message's uids come back; with ancestors only the
    #: compression lineage is followed.
    v31: bool = False


def _rules() -> _Rules:
    """The :class:`_Rules` of the open file."""
    shape = current().shape
    if shape is None or not shape.newer:
        return _Rules()
    v31 = shape.has("messages", "message_uid")
    return _Rules(
        newer=True,
        blank_markers=shape.has("messages", "display_kind"),
        v26=shape.has("messages", "_compressed_summary"),
        review_runs=v31 or shape.storage3,
        v31=v31,
    )


def _replay_entry(row: tuple[Any, ...], row_ids: bool) -> dict[str, Any]:
    (
        row_id,
        role,
        stored,
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
    ) = row[:15]
    content = decode_content(stored)
    if role in ("user", "assistant") and isinstance(content, str):
        content = sanitize_context(content).strip()
    entry: dict[str, Any] = {"role": role, "content": content}
    if row_ids:
        entry["_row_id"] = row_id
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


def _newer_entry(row: tuple[Any, ...], entry: dict[str, Any], rules: _Rules) -> None:
    """``entry`` given the keys Hermes v22 on add from the columns :data:`_NEWER_FIELDS`
    reads: ``api_content`` verbatim (``content`` stays what the user saw),
    ``effect_disposition``, ``display_kind``, ``display_metadata`` decoded,
    ``_db_persisted`` (v26 on) and the v31 uids."""
    (
        effect_disposition,
        api_content,
        display_kind,
        metadata,
        message_uid,
        absorbed,
        call_uids,
        call_uid,
    ) = row[15:]
    if rules.v26:
        entry["_db_persisted"] = True
    if message_uid:
        entry["message_uid"] = message_uid
    if call_uids and (uids := _uid_map(call_uids)):
        entry["_tool_call_uids"] = uids
    if call_uid:
        entry["_tool_call_uid"] = call_uid
    if absorbed and (absorbed_uids := _uid_list(absorbed)):
        entry["_absorbed_message_uids"] = absorbed_uids
    if api_content:
        entry["api_content"] = api_content
    if display_kind:
        entry["display_kind"] = display_kind
    if metadata and (decoded := display_metadata(metadata)) is not None:
        entry["display_metadata"] = decoded
    if effect_disposition:
        entry["effect_disposition"] = effect_disposition


def _uid_list(stored: Any) -> list[str]:
    """A stored uid list (JSON text): its distinct non-empty strings in order, else ``[]``."""
    value = _load(stored, []) if isinstance(stored, str) else stored
    if not isinstance(value, list):
        return []
    return list(dict.fromkeys(uid for uid in value if isinstance(uid, str) and uid))


def _uid_map(stored: Any) -> dict[str, Any]:
    """A stored ``{tool call id: uid}`` map (JSON text) without the entries Hermes drops:
    a key that is no non-empty string, a uid that is neither a non-empty string nor a
    non-empty list of them."""
    value = _load(stored, {}) if isinstance(stored, str) else stored
    if not isinstance(value, dict):
        return {}
    return {
        key: uid
        for key, uid in value.items()
        if isinstance(key, str)
        and key
        and (
            (isinstance(uid, str) and uid)
            or (isinstance(uid, list) and uid and all(isinstance(u, str) and u for u in uid))
        )
    }


def _id_variants(*values: Any) -> list[str]:
    """Every spelling of one tool-call id: each value, and each part of a ``a|b`` value."""
    out: dict[str, None] = {}
    for raw in values:
        value = raw.strip() if isinstance(raw, str) else ""
        if value:
            out[value] = None
            out.update((part, None) for part in (p.strip() for p in value.split("|")) if part)
    return list(out)


def _call_id(call: Any) -> str:
    """The pairing id of one tool call: ``call_id``, else ``id``, before any ``|``."""
    if not isinstance(call, dict):
        return ""
    for raw in (call.get("call_id"), call.get("id")):
        value = raw.strip() if isinstance(raw, str) else ""
        if value:
            return value.split("|", 1)[0].strip() or value
    return ""


def _index_call_uids(index: dict[str, str], assistant: dict[str, Any]) -> None:
    """Register the uids an assistant entry's calls carry under each spelling of their
    ids; the ids it names first forget what earlier calls left under them."""
    calls = assistant.get("tool_calls")
    if not isinstance(calls, list):
        calls = []
    spelled = [
        (call, _id_variants(call.get("call_id"), call.get("id"), call.get("response_item_id")))
        if isinstance(call, dict)
        else (call, [])
        for call in calls
    ]
    for _, variants in spelled:
        for variant in variants:
            index.pop(variant, None)
    uids = assistant.get("_tool_call_uids")
    if not uids:
        return
    seen: dict[str, int] = {}
    for call, variants in spelled:
        call_id = _call_id(call)
        uid = uids.get(call_id)
        if isinstance(uid, list):  # one uid per occurrence of an id the row repeats
            nth = seen[call_id] = seen.get(call_id, -1) + 1
            uid = uid[nth] if nth < len(uid) else None
        if isinstance(uid, str) and uid:
            for variant in variants:
                index[variant] = uid


class _ToolUids:
    """Hermes v31's pairing of a tool result without a stored uid: the uid the
    nearest assistant call of that id carries, never across a user turn."""

    def __init__(self) -> None:
        self.index: dict[str, str] = {}
        self.pending: list[dict[str, Any]] = []

    def see(self, entry: dict[str, Any]) -> None:
        """Index ``entry`` (an assistant turn) or pair it (a tool result without a uid)."""
        role = entry["role"]
        if role == "assistant":
            if entry.get("tool_calls"):
                self.pending.append(entry)
        elif role == "user":
            self.index.clear()
            self.pending.clear()
        elif role == "tool" and "_tool_call_uid" not in entry and entry.get("tool_call_id"):
            for owner in self.pending:
                _index_call_uids(self.index, owner)
            self.pending.clear()
            tool_call_id = entry["tool_call_id"]
            if self.index and isinstance(tool_call_id, str):
                for variant in _id_variants(tool_call_id):
                    if uid := self.index.get(variant):
                        entry["_tool_call_uid"] = uid
                        break


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


def _clone_key(entry: dict[str, Any]) -> tuple[Any, str] | None:
    """A user entry's (time, content) - what a compression's clone of it shares."""
    content = entry["content"]
    timestamp = entry.get("timestamp")
    if entry["role"] != "user" or timestamp is None or content in (None, "", []):
        return None
    try:
        text = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return timestamp, text


class _Replayed:
    """The user turns of a replay with ancestors, as Hermes v26 on dedupe them: a clone
    (same time and content, written by a compression into its continuation) takes
    the place of the copy before it; a prompt re-sent before any reply is dropped."""

    def __init__(self) -> None:
        self.clones: dict[tuple[Any, str], dict[str, Any]] = {}

    def add(self, kept: list[dict[str, Any]], entry: dict[str, Any]) -> None:
        key = _clone_key(entry)
        earlier = self.clones.get(key) if key is not None else None
        if earlier is not None:
            at = next((i for i, e in enumerate(kept) if e is earlier), None)
            if at is not None:
                del kept[at]
            elif _resent(kept, entry):
                return
        elif _resent(kept, entry):
            return
        if key is not None:
            self.clones[key] = entry
        kept.append(entry)


def _without_review(entries: list[dict[str, Any]], runs: bool) -> list[dict[str, Any]]:
    """``entries`` without background-review prompts and the assistant reply right
    after each; with ``runs`` a prompt right after another arms no skip."""
    out: list[dict[str, Any]] = []
    skip_reply = False
    after_prompt = False
    for entry in entries:
        content = entry["content"]
        if (
            entry["role"] in ("user", "system")
            and isinstance(content, str)
            and content.lstrip().startswith(_REVIEW_PROMPTS)
        ):
            skip_reply = not (runs and after_prompt)
            after_prompt = True
            continue
        after_prompt = False
        if skip_reply:
            skip_reply = False
            if entry["role"] == "assistant":
                continue
        out.append(entry)
    return out


def _blank_markers(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        content = entry["content"]
        if (
            entry["role"] == "assistant"
            and entry.get("tool_calls")
            and isinstance(content, str)
            and _BARE_TOOL_MARKER.fullmatch(content.strip())
        ):
            entry["content"] = ""


def conversation(
    session_id: str,
    *,
    include_ancestors: bool = False,
    include_inactive: bool = False,
    include_row_ids: bool = False,
) -> list[dict[str, Any]]:
    """A session's messages as OpenAI-style dicts, replayed as the Hermes that wrote
    the file replays them (told by the file's columns: :class:`_Rules`).

    A v16 file's by (timestamp, id); a newer file's by id, with the keys its Hermes
    adds (``api_content`` beside ``content``, ``display_kind``, ``display_metadata``,
    ``effect_disposition``, ``_db_persisted``, the v31 uids), without background-review
    turns, a bare tool marker answer replayed empty (v25 on). With
    ``include_ancestors`` the messages of the sessions the conversation continues come
    first: every session up the parent chain (at most :data:`ANCESTOR_STEPS`, a cycle
    ends the walk), on v26-v30 files none for a /branch copy, on v31 files only the
    compression lineage; a user prompt re-sent before any assistant reply is dropped.
    ``include_row_ids`` adds each message's id as ``_row_id``.
    """
    include_ancestors = check_flag(include_ancestors, "include_ancestors")
    include_inactive = check_flag(include_inactive, "include_inactive")
    row_ids = check_flag(include_row_ids, "include_row_ids")
    rules = _rules()
    # Hermes v26-v30 replay a /branch copy (it copied its history) without ancestors.
    walk = include_ancestors and not (rules.v26 and not rules.v31 and _branch_copy(session_id))
    cursor = _REPLAYS[walk, include_inactive].execute(current(), session_id=session_id)
    uids = _ToolUids() if rules.v31 else None
    replayed = _Replayed() if include_ancestors and rules.v26 else None
    kept: list[dict[str, Any]] = []
    for row in cursor.fetchall():
        entry = _replay_entry(row, row_ids)
        if rules.newer:
            _newer_entry(row, entry, rules)
            if uids is not None:
                uids.see(entry)
        if replayed is not None:
            replayed.add(kept, entry)
            continue
        if include_ancestors and _resent(kept, entry):
            continue
        kept.append(entry)
    if rules.newer:
        kept = _without_review(kept, runs=rules.review_runs)
    if rules.blank_markers:
        _blank_markers(kept)
    return kept


def _branch_copy(session_id: str) -> bool:
    """True when ``session_id``'s ``model_config`` carries a ``_branched_from`` that
    Python reads as true: Hermes v26-v30 replay such a /branch copy without ancestors."""
    stored = Session.select(Session.model_config).where(Session.id == session_id).scalar()
    config = _load(stored, None) if isinstance(stored, str) and stored.strip() else stored
    return isinstance(config, dict) and bool(config.get("_branched_from"))


def _replay_query(session_id: Any, *, include_ancestors: bool, include_inactive: bool) -> Any:
    fields = _REPLAY_FIELDS + _NEWER_FIELDS if newer_file() else _REPLAY_FIELDS
    if include_ancestors:
        # On v31 files only the compression lineage: up while a session continues its parent.
        leave = compression_expr if file_has("messages", "message_uid") else None
        chain = walk_sessions(Session, session_id, upward=True, leave=leave)
        query = (
            Message.select(*fields)
            .join(chain, on=(Message.session == chain.c.id))
            .where(chain.c.depth < ANCESTOR_STEPS)
            .with_cte(chain)
        )
    else:
        query = Message.select(*fields).where(Message.session == session_id)
    if not include_inactive:
        query = query.where(Message.active == 1)
    if newer_file():
        return query.order_by(Message.id)
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
        view["bookend_start"] = [_hydrate(row, summary=False) for row in fetch_dicts(start)]
        ends = reversed(fetch_dicts(end))
        view["bookend_end"] = [_hydrate(row, summary=False) for row in ends]
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
    if file_has("messages", "display_kind"):
        # Hermes v25 on: rows typed for the timeline are no turn a person typed; from
        # search layout 3 (Hermes 0.21.5 on) a /steer row is.
        typed = [fn.COALESCE(Message.display_kind, "") == ""]
        shape = current().shape
        if shape is not None and shape.storage3:
            typed.append(Message.display_kind == "steer")
        query = query.where(typed[0] if len(typed) == 1 else typed[0] | typed[1])
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
