"""A session's transcript: appending, rewinding, restoring and replacing messages.

Each change to a session's messages and to its counters happens in one
write. The counters follow Hermes: ``message_count`` is the number of
message rows the session holds and ``tool_call_count`` the number of tool
calls its messages made (tool results aside), rewound (soft-deleted) rows
included, so rewinding and restoring leave both as they are. Appending is the hot path:
its SQL is rendered once from the model's fields and run directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import peewee
from peewee import SQL, Case, Value, fn

from ..checks import (
    check_choice,
    check_flag,
    check_int64,
    check_optional_count,
    check_optional_str,
    check_platform_id,
    check_session_id,
    check_timestamp,
)
from ..driver import sqlite3
from ..models import (
    ROLES,
    Message,
    Session,
    decode_content,
    decode_json,
    encode_content,
    encode_json,
    stored_fields,
    unencodable_error,
)
from ..store import (
    Backend,
    Prepared,
    current,
    fetch_dicts,
    json_array_length,
    many_rows,
    write,
)

if TYPE_CHECKING:
    from typing import Any

#: Message columns a caller may set (everything but ``id`` and ``active``).
MESSAGE_FIELDS = tuple(
    field.name for field in stored_fields(Message) if field.name not in ("id", "active")
)
_ROLE_SET = frozenset(ROLES)

#: Rows per multi-row INSERT on bulk paths.
CHUNK_ROWS = 200


def _insert(**values: Any) -> Any:
    fields = Message._meta.fields
    # The table's own INSERT: the model's would add the column defaults (``active``).
    insert = Message._meta.table.insert({fields[name]: values[name] for name in MESSAGE_FIELDS})
    # Where the backend has no last row id, the INSERT returns it.
    return current().returning_id(insert, fields["id"])


#: One message row. Its ``?`` placeholders follow :data:`MESSAGE_FIELDS`, so a row
#: of :func:`message_row` binds as it is, and :func:`many_rows` repeats it.
_INSERT = Prepared(_insert, *MESSAGE_FIELDS, named=False)

#: A message more in a session's counters, and its tool calls.
_COUNT = Prepared(
    lambda calls, session_id: Session._meta.table.update(
        {
            Session.message_count: fn.COALESCE(Session.message_count, 0) + 1,
            Session.tool_call_count: fn.COALESCE(Session.tool_call_count, 0) + calls,
        }
    ).where(Session.id == session_id),
    "calls",
    "session_id",
)


#: Turns sqlite3 exceptions into peewee's, like every other model call.
_AS_PEEWEE_ERRORS = cast("Any", peewee).__exception_wrapper__


def _execute(db: Backend, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
    """Run pre-rendered SQL on ``db``'s connection (inside the caller's write).

    Errors come out as peewee's exception types, like every other model call.
    """
    conn = cast("sqlite3.Connection", db.connection())
    with _AS_PEEWEE_ERRORS:
        return conn.execute(sql, params)


def tool_call_total(role: str, tool_calls: Any) -> int:
    """How many tool calls a message adds to its session's ``tool_call_count``:
    the length of its list, 1 for any other value; none for a tool result."""
    if role == "tool" or not tool_calls:
        return 0
    calls = decode_json(tool_calls) if isinstance(tool_calls, str) else tool_calls
    return len(calls) if isinstance(calls, list) else 1


def _json_column(value: Any, argument: str) -> str | None:
    """A JSON column as stored: an empty (falsy) value is stored as NULL, as Hermes does."""
    return encode_json(value, argument) if value else None


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
        role if role.__class__ is str and role in _ROLE_SET else check_choice(role, "role", ROLES),
        encode_content(content),
        check_optional_str(get("tool_call_id"), "tool_call_id"),
        _json_column(get("tool_calls"), "tool_calls"),
        check_optional_str(get("tool_name"), "tool_name"),
        check_timestamp(get("timestamp")),
        check_optional_count(get("token_count"), "token_count"),
        check_optional_str(get("finish_reason"), "finish_reason"),
        check_optional_str(get("reasoning"), "reasoning"),
        check_optional_str(get("reasoning_content"), "reasoning_content"),
        _json_column(get("reasoning_details"), "reasoning_details"),
        _json_column(get("codex_reasoning_items"), "codex_reasoning_items"),
        _json_column(get("codex_message_items"), "codex_message_items"),
        check_platform_id(get("platform_message_id")),
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
    if db.redactor is not None:
        row = db.redactor.row(MESSAGE_FIELDS, row)

    def run() -> int:
        conn = cast("sqlite3.Connection", db.connection())
        insert, count = _INSERT.render(db).sql, _COUNT.render(db).sql
        with _AS_PEEWEE_ERRORS:
            cursor = conn.execute(insert, row)
            message_id = db.inserted_id(cursor)
            conn.execute(count, {"calls": calls, "session_id": session_id})
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

    A message without a timestamp gets the time after the previous one, as
    Hermes numbers them: ``start`` (default now) for the first, then a
    microsecond past the later of the previous default and the previous
    message's own timestamp. Returns how many were inserted; counters are
    left to :func:`recount`.
    """
    clock = time.time() if start is None else start
    rows = []
    for index, message in enumerate(messages):
        fields = {k: v for k, v in message.items() if k not in ("role", "content", "id", "active")}
        if fields.get("timestamp") is None:
            fields["timestamp"] = clock
        try:
            row = message_row(session_id, message["role"], message.get("content"), **fields)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{argument}[{index}]: {exc}") from None
        rows.append(row)
        clock = max(clock + 1e-6, row[_TIMESTAMP] + 1e-6)
    db = current()
    if db.redactor is not None:
        rows = [db.redactor.row(MESSAGE_FIELDS, row) for row in rows]
    for offset in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[offset : offset + CHUNK_ROWS]
        sql = many_rows(_INSERT.render(db), len(chunk))
        try:
            _execute(db, sql, [value for row in chunk for value in row])
        except UnicodeEncodeError:
            raise unencodable_error(
                {f"{argument}[{index}]": dict(message) for index, message in enumerate(messages)}
            ) from None
    return len(rows)


_TIMESTAMP = MESSAGE_FIELDS.index("timestamp")


def copy_messages(source_id: str, target_id: str) -> int:
    """Copy the active messages of ``source_id`` to ``target_id`` (inside a write)."""
    columns = [Message._meta.fields[name] for name in MESSAGE_FIELDS if name != "session"]
    query = Message.insert_from(
        Message.select(Value(target_id), *columns)
        .where(Message.session == source_id, Message.active == 1)
        .order_by(Message.id),
        [Message.session, *columns],
    ).as_rowcount()
    return int(query.execute() or 0)


def counter_totals() -> Any:
    """What the counters of each session should hold, from its messages: rows of
    ``(session_id, messages, tool_calls)`` for every session that has any message.

    The one statement of the counting rule (Hermes'): every message row counts,
    rewound ones included; each message but a tool result adds the length of
    its ``tool_calls`` list, or 1 for any other value. :func:`recount` writes
    it, and ``hermes-models doctor`` compares the stored counters with it.
    """
    calls_in_row = Case(
        None,
        [
            ((Message.role == "tool") | Message.tool_calls.is_null(), 0),
            (
                json_array_length(Message.tool_calls).is_null(False),
                json_array_length(Message.tool_calls),
            ),
        ],
        1,
    )
    return Message.select(
        Message.session,
        fn.COUNT(Message.id).alias("messages"),
        fn.COALESCE(fn.SUM(calls_in_row), 0).alias("tool_calls"),
    ).group_by(Message.session)


def recount(session_id: str) -> None:
    """Set ``message_count`` and ``tool_call_count`` from the session's messages."""
    totals = counter_totals().where(Message.session == session_id).tuples()
    row = cast("tuple[str, int, int] | None", totals.first())
    messages, calls = (int(row[1]), int(row[2])) if row else (0, 0)
    Session.update(message_count=messages, tool_call_count=calls).where(
        Session.id == session_id
    ).execute()


def rewind(
    session_id: str, target_message_id: int, *, argument: str = "target_message_id"
) -> dict[str, Any]:
    """Soft-delete an active user message and every later active one (Hermes' rewind).

    ``rewind_count`` goes up by one; the counters are left as they are. Returns
    ``rewound_count`` (rows newly made inactive), ``target_message`` (the target
    row, content decoded) and ``new_head_id`` (the last active message id, or None).

    Raises:
        ValueError: the message is not in that session, is not a user message (the
            message starts with ``argument``, then says it as Hermes does), or is
            rewound already (Hermes counts such a rewind again; this package refuses it).
    """
    check_session_id(session_id)
    check_int64(target_message_id, argument)

    def run() -> dict[str, Any]:
        rows = fetch_dicts(
            Message.select().where(Message.id == target_message_id, Message.session == session_id)
        )
        where = f"{argument} {target_message_id}: "
        if not rows:
            raise ValueError(
                f"{where}message {target_message_id} not found in session {session_id}"
            )
        target = rows[0]
        if target["role"] != "user":
            raise ValueError(
                f"{where}rewind target must be a 'user' message (got role={target['role']!r}, "
                f"id={target_message_id})"
            )
        if not target["active"]:
            raise ValueError(
                f"{where}message {target_message_id} is already rewound (not active); "
                "restore_rewound brings it back"
            )
        target["content"] = decode_content(target["content"])
        count = _set_active(session_id, target_message_id, active=False)
        Session.update(rewind_count=fn.COALESCE(Session.rewind_count, 0) + 1).where(
            Session.id == session_id
        ).execute()
        head = (
            Message.select(fn.MAX(Message.id))
            .where(Message.session == session_id, Message.active == 1)
            .scalar()
        )
        return {"rewound_count": int(count), "target_message": target, "new_head_id": head}

    return dict(write(run))


def rewind_to_message(session_id: str, user_message_id: int) -> int:
    """:func:`rewind`, returning how many messages it made inactive."""
    rewound = rewind(session_id, user_message_id, argument="user_message_id")
    return int(rewound["rewound_count"])


def restore_rewound(
    session_id: str, since_message_id: int, *, argument: str = "since_message_id"
) -> int:
    """Reactivate the soft-deleted messages with id >= ``since_message_id``; returns how many."""
    check_session_id(session_id)
    check_int64(since_message_id, argument)

    return write(lambda: _set_active(session_id, since_message_id, active=True))


def _set_active(session_id: str, first_id: int, *, active: bool) -> int:
    """Make the messages of ``session_id`` with id >= ``first_id`` active or inactive
    (inside a write); returns how many changed."""
    flag = 1 if active else 0
    count = (
        Message.update(active=flag)
        .where(Message.session == session_id, Message.id >= first_id, Message.active == 1 - flag)
        .execute()
    )
    return int(count)


#: Message keys ``replace_messages`` keeps only on assistant messages, as Hermes does.
ASSISTANT_ONLY = (
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)


def _as_stored(message: dict[str, Any]) -> dict[str, Any]:
    """A replayed message dict reduced to what Hermes' ``replace_messages`` stores.

    Hermes' own replay key ``message_id`` is the platform's message id;
    the reasoning fields belong to assistant messages only; any key that is
    not a message column is left out.
    """
    item = {key: message[key] for key in _ALLOWED_FIELDS & message.keys() if key != "session"}
    item["role"] = message["role"]
    item["content"] = message.get("content")
    if not item.get("platform_message_id") and message.get("message_id") is not None:
        item["platform_message_id"] = message["message_id"]
    if message["role"] != "assistant":
        for key in ASSISTANT_ONLY:
            item.pop(key, None)
    return item


def replace_messages(session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """Replace every message of a session with ``messages``; returns how many.

    Raises:
        ValueError: no session ``session_id``, or a message has no role.
    """
    check_session_id(session_id)
    rows = [_as_stored(item) for item in normalise_messages(messages, "messages")]

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


def _message_count(one_session: bool, active_only: bool) -> Prepared:
    def build(session_id: Any = None) -> Any:
        query = Message.select(fn.COUNT(SQL("*")))
        if one_session:
            query = query.where(Message.session == session_id)
        return query.where(Message.active == 1) if active_only else query

    return Prepared(build, *(["session_id"] if one_session else []))


#: ``count_messages`` by (one session?, active rows only?): rendered once per file structure.
_MESSAGE_COUNTS = {
    (one, active): _message_count(one, active) for one in (False, True) for active in (False, True)
}


def count_messages(session_id: str | None = None, include_inactive: bool = True) -> int:
    """How many message rows one session (or the whole store) holds, rewound ones
    included as Hermes counts them; ``include_inactive=False`` counts active ones."""
    if session_id is not None:
        check_session_id(session_id)
    active_only = not check_flag(include_inactive, "include_inactive")
    count = _MESSAGE_COUNTS[session_id is not None, active_only]
    return int(count.scalar(current(), session_id=session_id))
