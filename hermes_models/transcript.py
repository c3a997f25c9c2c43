"""A session's transcript: appending, rewinding, restoring and replacing messages.

Each change to a session's messages and to its counters happens in one
write, so ``message_count`` always equals the number of active messages and
``tool_call_count`` the number of tool calls the active assistant messages
made. Appending is the hot path: its SQL is rendered once from the model's
fields and run directly.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import peewee
from peewee import SQL, Case, fn

from .checks import check_flag, check_int64, check_text
from .db import HermesDatabase, Prepared, current, write
from .models import (
    ROLES,
    Message,
    Session,
    check_epoch,
    decode_content,
    decode_json,
    encode_content,
    encode_json,
    unencodable_error,
)

#: Message columns a caller may set (everything but ``id`` and ``active``).
MESSAGE_FIELDS = tuple(
    field.name for field in Message._meta.sorted_fields if field.name not in ("id", "active")
)
_ROLE_SET = frozenset(ROLES)
_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items")
_TEXT_FIELDS = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "reasoning_content")

#: Rows per multi-row INSERT on bulk paths.
CHUNK_ROWS = 200


def _columns() -> list[str]:
    fields = Message._meta.fields
    return [fields[name].column_name for name in MESSAGE_FIELDS]


_INSERT_SQL = 'INSERT INTO "{table}" ({columns}) VALUES ({marks})'.format(
    table=Message._meta.table_name,
    columns=", ".join(f'"{c}"' for c in _columns()),
    marks=", ".join("?" for _ in MESSAGE_FIELDS),
)
_MESSAGES = Session.message_count.column_name
_TOOL_CALLS = Session.tool_call_count.column_name
_COUNT_SQL = (
    f'UPDATE "{Session._meta.table_name}" '
    f'SET "{_MESSAGES}" = COALESCE("{_MESSAGES}", 0) + 1, '
    f'"{_TOOL_CALLS}" = COALESCE("{_TOOL_CALLS}", 0) + ? '
    f'WHERE "{Session.id.column_name}" = ?'
)


#: Turns sqlite3 exceptions into peewee's, like every other model call.
_AS_PEEWEE_ERRORS = cast(Any, peewee).__exception_wrapper__


def _execute(db: HermesDatabase, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
    """Run pre-rendered SQL on ``db``'s connection (inside the caller's write).

    Errors come out as peewee's exception types, like every other model call.
    """
    conn = cast(sqlite3.Connection, db.connection())
    with _AS_PEEWEE_ERRORS:
        return conn.execute(sql, params)


def check_session_id(session_id: Any, argument: str = "session_id") -> str:
    """``session_id`` if it is a non-empty, storable string, else a TypeError/ValueError."""
    if session_id.__class__ is str and session_id.isascii() and session_id:
        return session_id  # the common case, checked quickly on the hot path
    return str(check_text(session_id, argument, empty=False))


def _check_role(role: Any) -> str:
    if role.__class__ is str and role in _ROLE_SET:
        return role
    if not isinstance(role, str):
        raise TypeError(f"role must be str, not {type(role).__name__}")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    return role


def _check_timestamp(timestamp: Any) -> float:
    if timestamp is None:
        return time.time()
    return check_epoch(timestamp, "timestamp")


def _optional_count(value: Any, argument: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be int or None, not {type(value).__name__}")
    return check_int64(value, argument, minimum=0)


def _platform_id(value: Any) -> str | None:
    """A platform's message id as text (chat platforms often number them)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"platform_message_id must be str, int or None, not {type(value).__name__}")


def _optional_text(value: Any, argument: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{argument} must be str or None, not {type(value).__name__}")


def tool_call_total(role: str, tool_calls: Any) -> int:
    """How many tool calls a message adds to its session's ``tool_call_count``."""
    if role != "assistant" or not tool_calls:
        return 0
    calls = decode_json(tool_calls) if isinstance(tool_calls, str) else tool_calls
    return len(calls) if isinstance(calls, list) else 0


_ALLOWED_FIELDS = frozenset(MESSAGE_FIELDS) | {"observed"}


def message_row(session_id: str, role: str, content: Any = None, **fields: Any) -> list[Any]:
    """The values of one message row, in :data:`MESSAGE_FIELDS` order, checked.

    Raises:
        TypeError, ValueError: an argument has the wrong type or value; the
        message names it.
    """
    unknown = fields.keys() - _ALLOWED_FIELDS
    if unknown:
        raise TypeError(f"unknown message field(s): {', '.join(sorted(unknown))}")
    get = fields.get
    # The order of MESSAGE_FIELDS (a test pins it); written out, it is the hot path.
    return [
        check_session_id(session_id),
        _check_role(role),
        encode_content(content),
        _optional_text(get("tool_call_id"), "tool_call_id"),
        encode_json(get("tool_calls"), "tool_calls"),
        _optional_text(get("tool_name"), "tool_name"),
        _check_timestamp(get("timestamp")),
        _optional_count(get("token_count"), "token_count"),
        _optional_text(get("finish_reason"), "finish_reason"),
        _optional_text(get("reasoning"), "reasoning"),
        _optional_text(get("reasoning_content"), "reasoning_content"),
        encode_json(get("reasoning_details"), "reasoning_details"),
        encode_json(get("codex_reasoning_items"), "codex_reasoning_items"),
        encode_json(get("codex_message_items"), "codex_message_items"),
        _platform_id(get("platform_message_id")),
        int(check_flag(get("observed"), "observed", none_is_false=True)),
    ]


def append_message(session_id: str, role: str, content: Any = None, **fields: Any) -> int:
    """Append one message and bump the session's counters; returns the message id.

    Raises:
        sqlite3.IntegrityError/peewee.IntegrityError: no session ``session_id``.
        TypeError, ValueError: a bad argument, named in the message.
    """
    row = message_row(session_id, role, content, **fields)
    calls = tool_call_total(role, fields.get("tool_calls"))
    db = current()

    def run() -> int:
        conn = cast(sqlite3.Connection, db.connection())
        with _AS_PEEWEE_ERRORS:
            message_id = int(conn.execute(_INSERT_SQL, row).lastrowid or 0)
            conn.execute(_COUNT_SQL, (calls, session_id))
        return message_id

    try:
        return db.write(run)
    except UnicodeEncodeError:
        arguments = {"session_id": session_id, "role": role, "content": content, **fields}
        raise unencodable_error(arguments) from None


def normalise_messages(
    messages: Iterable[Mapping[str, Any]], argument: str
) -> list[dict[str, Any]]:
    """OpenAI-style message dicts checked and keyed by message field names."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise TypeError(f"{argument} must be a list of message dicts")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"{argument}[{index}] must be a dict, not {type(message).__name__}")
        item = dict(message)
        if "name" in item and "tool_name" not in item:
            item["tool_name"] = item.pop("name")
        item.pop("name", None)
        if "role" not in item:
            raise ValueError(f"{argument}[{index}] has no role")
        out.append(item)
    return out


def insert_messages(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    start: float | None = None,
    argument: str = "messages",
) -> int:
    """Insert ``messages`` with multi-row INSERTs (inside the caller's write).

    Messages without a timestamp get ``start`` plus a microsecond per row,
    keeping their order. Returns how many were inserted; counters are left
    to :func:`recount`.
    """
    base = time.time() if start is None else start
    rows = []
    for index, message in enumerate(messages):
        fields = {k: v for k, v in message.items() if k not in ("role", "content", "id", "active")}
        if fields.get("timestamp") is None:
            fields["timestamp"] = base + index * 1e-6
        try:
            rows.append(message_row(session_id, message["role"], message.get("content"), **fields))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{argument}[{index}]: {exc}") from None
    db = current()
    for offset in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[offset : offset + CHUNK_ROWS]
        marks = ", ".join("(" + ", ".join("?" * len(MESSAGE_FIELDS)) + ")" for _ in chunk)
        sql = _INSERT_SQL.split(" VALUES ")[0] + " VALUES " + marks
        try:
            _execute(db, sql, [value for row in chunk for value in row])
        except UnicodeEncodeError:
            raise unencodable_error(
                {f"{argument}[{index}]": dict(message) for index, message in enumerate(messages)}
            ) from None
    return len(rows)


def copy_messages(source_id: str, target_id: str) -> int:
    """Copy the active messages of ``source_id`` to ``target_id`` (inside a write)."""
    columns = [Message._meta.fields[name] for name in MESSAGE_FIELDS if name != "session"]
    query = Message.insert_from(
        Message.select(SQL("?", [target_id]), *columns)
        .where(Message.session == source_id, Message.active == 1)
        .order_by(Message.id),
        [Message.session, *columns],
    )
    return int(query.execute() or 0)


def counter_totals() -> Any:
    """What the counters of each session should hold, from its messages: rows of
    ``(session_id, messages, tool_calls)`` for every session that has any counted message.

    The one statement of the counting rule: :func:`recount` writes it, and
    ``hermes-models doctor`` compares the stored counters with it.
    """
    calls_in_row = Case(
        None,
        [
            (
                (Message.role == "assistant")
                & fn.json_valid(Message.tool_calls)
                & (fn.json_type(Message.tool_calls) == "array"),
                fn.json_array_length(Message.tool_calls),
            )
        ],
        0,
    )
    return (
        Message.select(
            Message.session,
            fn.COUNT(Message.id).alias("messages"),
            fn.COALESCE(fn.SUM(calls_in_row), 0).alias("tool_calls"),
        )
        .where(Message.active == 1)
        .group_by(Message.session)
    )


def recount(session_id: str) -> None:
    """Set ``message_count`` and ``tool_call_count`` from the session's messages."""
    totals = counter_totals().where(Message.session == session_id).tuples()
    row = cast("tuple[str, int, int] | None", totals.first())
    messages, calls = (int(row[1]), int(row[2])) if row else (0, 0)
    Session.update(message_count=messages, tool_call_count=calls).where(
        Session.id == session_id
    ).execute()


def rewind_to_message(session_id: str, user_message_id: int) -> int:
    """Soft-delete an active user message and every later one; returns how many.

    Raises:
        ValueError: the id is not an active user message of that session.
    """
    check_session_id(session_id)
    check_int64(user_message_id, "user_message_id")

    def run() -> int:
        target = (
            Message.select(Message.id)
            .where(
                Message.id == user_message_id,
                Message.session == session_id,
                Message.role == "user",
                Message.active == 1,
            )
            .first()
        )
        if target is None:
            raise ValueError(
                f"user_message_id {user_message_id} is not an active user message "
                f"of session {session_id}"
            )
        count = (
            Message.update(active=0)
            .where(
                Message.session == session_id, Message.id >= user_message_id, Message.active == 1
            )
            .execute()
        )
        Session.update(rewind_count=Session.rewind_count + 1).where(
            Session.id == session_id
        ).execute()
        recount(session_id)
        return int(count)

    return write(run)


def restore_rewound(session_id: str, since_id: int) -> int:
    """Reactivate the soft-deleted messages with id >= ``since_id``; returns how many."""
    check_session_id(session_id)
    check_int64(since_id, "since_id")

    def run() -> int:
        count = (
            Message.update(active=1)
            .where(Message.session == session_id, Message.id >= since_id, Message.active == 0)
            .execute()
        )
        recount(session_id)
        return int(count)

    return write(run)


def replace_messages(session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """Replace every message of a session with ``messages``; returns how many."""
    check_session_id(session_id)
    rows = normalise_messages(messages, "messages")

    def run() -> int:
        if not Session.select().where(Session.id == session_id).exists():
            raise ValueError(f"session_id {session_id!r} does not exist")
        Message.delete().where(Message.session == session_id).execute()
        count = insert_messages(session_id, rows)
        recount(session_id)
        return count

    return write(run)


def clear_messages(session_id: str) -> int:
    """Delete every message of a session; returns how many."""
    check_session_id(session_id)

    def run() -> int:
        count = Message.delete().where(Message.session == session_id).execute()
        recount(session_id)
        return int(count)

    return write(run)


_CONVERSATION_FIELDS = (
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)


def _messages_query(session_id: str, include_inactive: bool) -> Any:
    return Message.for_session(session_id, include_inactive=include_inactive)


_MESSAGES = {
    flag: Prepared(lambda session_id, flag=flag: _messages_query(session_id, flag), "session_id")
    for flag in (False, True)
}


def messages_of(session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
    """Every column of a session's messages by id, content and JSON columns decoded."""
    cursor = _MESSAGES[bool(include_inactive)].execute(current(), session_id=session_id)
    names = [column[0] for column in cursor.description]
    out = []
    for values in cursor.fetchall():
        row = dict(zip(names, values))
        row["content"] = decode_content(row["content"])
        for name in _JSON_FIELDS:
            if row[name] is not None:
                row[name] = decode_json(row[name])
        out.append(row)
    return out


def message_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message row (column names) with content and JSON columns decoded."""
    out = dict(row)
    out["content"] = decode_content(out.get("content"))
    for name in _JSON_FIELDS:
        if name in out:
            out[name] = decode_json(out[name])
    return out


def conversation_entry(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-style message dict from a decoded message row."""
    entry = {"role": message["role"], "content": message["content"]}
    for name in _CONVERSATION_FIELDS:
        if message.get(name) is not None:
            entry[name] = message[name]
    return entry


def drop_resent_prompts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop a user message identical to an earlier one with no assistant reply between."""
    out = []
    waiting: list[Any] = []
    for entry in entries:
        if entry["role"] == "assistant":
            waiting = []
        elif entry["role"] == "user":
            if entry["content"] in waiting:
                continue
            waiting.append(entry["content"])
        out.append(entry)
    return out
