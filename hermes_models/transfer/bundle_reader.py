"""Reading a bundle that may be hostile: every line checked, only a summary held.

:func:`scan` reads a bundle once and checks every line — JSON, header,
columns, each value's type and range — plus what only the whole file
shows: counts against the header, session ids and titles that appear
twice, parents that form a cycle. It keeps a summary of each session (id,
line, title, parent, how many messages) and the range of the message ids,
never a message or a whole session row; the checked session rows go to a
file the caller gives (:func:`kept_sessions` reads them back).
:func:`message_rows` reads the messages again, checked the same way, for
the import to insert as it goes: a bundle of any size is imported in memory
that does not grow with it.

A bundle read from a path is read again from the same open file, and its
bytes must be the same each time; one read from a stream that cannot be
read twice is copied to a private temporary file on the first read.

Every refusal is a :class:`~hermes_models.errors.BundleError` whose message
starts with ``"<file>:<line>: "`` (or ``"<file>: "`` for what concerns the
whole file).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import marshal
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from ..checks import EPOCH_MAX, EPOCH_MIN, INT64_MAX, INT64_MIN
from ..errors import BundleError
from ..models import ROLES, Message, Session, stored_fields
from ..store import SCHEMA_VERSION
from . import jsonl
from .bundle import FORMAT, MESSAGE_COLUMNS, SESSION_COLUMNS, VERSION
from .output import file_path

#: Largest message id a bundle may carry. Ids above it would leave the
#: store's id sequence too little room (at 2**63 - 1 no message can ever be
#: added again); the export of any real store is far below it.
MAX_MESSAGE_ID = 2**62

#: Values of columns a hand-written line leaves out (the schema defaults).
DEFAULTS = {
    f.column_name: f.default
    for model in (Session, Message)
    for f in stored_fields(model)
    if f.default is not None and not callable(f.default)
}

Check = Callable[[Any], Any]


class _Refused(ValueError):
    """A value a column cannot take; the reader adds file, line and column."""


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    raise _Refused(f"must be text or null, not {_kind(value)}")


def _id(value: Any) -> Any:
    if not isinstance(value, str):
        raise _Refused(f"must be text, not {_kind(value)}")
    if not value:
        raise _Refused("must not be empty")
    return value


def _optional_id(value: Any) -> Any:
    return None if value is None else _id(value)


def _opaque(value: Any) -> Any:
    """Text, null, or a BLOB (``{"$base64": ...}``) in columns nothing reads as text."""
    if isinstance(value, dict):
        encoded = value.get("$base64")
        if set(value) != {"$base64"} or not isinstance(encoded, str):
            raise _Refused('must be text, null or {"$base64": "..."}')
        try:
            return base64.b64decode(encoded, validate=True)
        except (ValueError, binascii.Error) as exc:
            raise _Refused(f"bad $base64 value: {exc}") from None
    return _text(value)


def _integer(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Refused(f"must be an integer or null, not {_kind(value)}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise _Refused("is outside the 64-bit integer range")
    return value


def _required_integer(value: Any) -> Any:
    if value is None:
        raise _Refused("must be an integer, not null")
    return _integer(value)


def _flag(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if value not in (0, 1) or isinstance(value, float):
        shown = repr(value) if not isinstance(value, (list, dict)) else _kind(value)
        raise _Refused(f"must be 0 or 1, not {shown}")
    return value


def _optional_flag(value: Any) -> Any:
    return None if value is None else _flag(value)


_NOT_A_TIME = "is not a time between years 1 and 9999"


def _epoch(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(f"must be seconds since the epoch, not {_kind(value)}")
    if isinstance(value, int) and abs(value) > 10**40:
        raise _Refused(f"(an integer of {len(str(abs(value)))} digits) {_NOT_A_TIME}")
    if not (math.isfinite(value) and EPOCH_MIN <= value <= EPOCH_MAX):
        raise _Refused(f"{value!r} {_NOT_A_TIME}")
    return value


def _optional_epoch(value: Any) -> Any:
    return None if value is None else _epoch(value)


def _number(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(f"must be a number or null, not {_kind(value)}")
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise _Refused("is outside the 64-bit integer range")
    if isinstance(value, float) and math.isnan(value):
        raise _Refused("must be a number, not NaN")
    return value


def _message_id(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Refused(f"must be an integer, not {_kind(value)}")
    if not 1 <= value <= MAX_MESSAGE_ID:
        raise _Refused(f"must be between 1 and 2**62 (= {MAX_MESSAGE_ID})")
    return value


def _role(value: Any) -> Any:
    if value not in ROLES or not isinstance(value, str):
        shown = repr(value) if isinstance(value, str) else _kind(value)
        raise _Refused(f"must be one of {', '.join(ROLES)}, not {shown}")
    return value


def _title(value: Any) -> Any:
    if value == "":
        raise _Refused("must not be empty (null means no title)")
    return _text(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "text"}.get(
        type(value), f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    )


_SESSION_CHECKS: dict[str, Check] = {
    "id": _id,
    "source": _id,
    "system_prompt": _opaque,
    "parent_session_id": _optional_id,
    "started_at": _epoch,
    "ended_at": _optional_epoch,
    "estimated_cost_usd": _number,
    "actual_cost_usd": _number,
    "title": _title,
    "rewind_count": _required_integer,
    "archived": _flag,
}
_MESSAGE_CHECKS: dict[str, Check] = {
    "id": _message_id,
    "session_id": _id,
    "role": _role,
    "timestamp": _epoch,
    "reasoning": _opaque,
    "reasoning_content": _opaque,
    "reasoning_details": _opaque,
    "codex_reasoning_items": _opaque,
    "codex_message_items": _opaque,
    "observed": _optional_flag,
    "active": _flag,
}


def _checks(model: Any, specific: dict[str, Check]) -> tuple[tuple[str, Check, Any], ...]:
    out = []
    for f in stored_fields(model):
        default = _integer if f.field_type == "INT" else _text
        name = f.column_name
        out.append((name, specific.get(name, default), DEFAULTS.get(name)))
    return tuple(out)


#: ``(column, check, value when the line leaves the column out)`` of each kind of line.
COLUMN_CHECKS = {
    "session": _checks(Session, _SESSION_CHECKS),
    "message": _checks(Message, _MESSAGE_CHECKS),
}
_REQUIRED = {
    "session": ("id", "source", "started_at"),
    "message": ("id", "session_id", "role", "timestamp"),
}
_COLUMN_SETS = {"session": frozenset(SESSION_COLUMNS), "message": frozenset(MESSAGE_COLUMNS)}


def row(record: dict[str, Any], kind: str, where: str) -> tuple[Any, ...]:
    """The checked values of a session or message line, in column order.

    Raises:
        BundleError: an unknown or missing column, or a value of the wrong type or range.
    """
    if not record.keys() <= _COLUMN_SETS[kind]:
        unknown = sorted(set(record) - _COLUMN_SETS[kind])
        raise BundleError(f"{where}: unknown {kind} column(s) {', '.join(unknown)}")
    missing = [name for name in _REQUIRED[kind] if record.get(name) is None]
    if missing:
        raise BundleError(f"{where}: {kind} line lacks {', '.join(missing)}")
    values: list[Any] = []
    get = record.get
    for name, check, default in COLUMN_CHECKS[kind]:
        value = get(name, default)
        # Most values are text, null, or small integers: accepted without a call.
        if value is None or value.__class__ is str:
            if check is _text:
                values.append(value)
                continue
        elif value.__class__ is int and check is _integer and -(2**62) < value < 2**62:
            values.append(value)
            continue
        try:
            values.append(check(value))
        except _Refused as exc:
            raise BundleError(f"{where}: {kind} {name} {exc}") from None
    return tuple(values)


# -- the source: read twice ------------------------------------------------------------


class Source:
    """A bundle that can be read line by line more than once (see the module text)."""

    def __init__(self, handle: IO[Any], origin: str, spool: IO[bytes] | None) -> None:
        self.origin = origin
        self._handle = handle
        self._spool = spool
        self._start = 0 if spool is not None else handle.tell()
        self._digest: bytes | None = None

    def lines(self) -> Iterator[tuple[int, str, str]]:
        """``(line number, "origin:line", text)``, from the first line each time."""
        if self._digest is None:
            yield from self._first_read()
        elif self._spool is not None:
            self._spool.seek(0)
            yield from jsonl.lines(self._spool, self.origin)
        else:
            yield from self._read_again()

    def _first_read(self) -> Iterator[tuple[int, str, str]]:
        digest = hashlib.sha256()
        yield from jsonl.lines(self._hashing(digest), self.origin)
        self._digest = digest.digest()

    def _hashing(self, digest: Any) -> IO[Any]:
        source, spool = self._handle, self._spool

        class Reader:
            def readline(self, limit: int) -> Any:
                chunk = source.readline(limit)
                data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
                digest.update(data)
                if spool is not None:
                    spool.write(data)
                return chunk

        return Reader()  # type: ignore[return-value]

    def _read_again(self) -> Iterator[tuple[int, str, str]]:
        self._handle.seek(self._start)
        digest = hashlib.sha256()
        yield from jsonl.lines(self._hashing(digest), self.origin)
        if digest.digest() != self._digest:
            raise BundleError(f"{self.origin}: the file changed while it was being imported")


@contextmanager
def open_source(source: str | os.PathLike[str] | IO[str]) -> Iterator[Source]:
    """A :class:`Source` for a path or a text stream."""
    path = file_path(source, "source")
    if path is not None:
        with open(path, "rb") as handle:
            if handle.seekable():
                yield Source(handle, str(path), None)
                return
            with tempfile.TemporaryFile() as spool:
                yield Source(handle, str(path), spool)
        return
    stream: IO[Any] = source  # type: ignore[assignment]
    with tempfile.TemporaryFile() as spool:
        yield Source(stream, str(getattr(stream, "name", "bundle")), spool)


# -- the first read: everything checked --------------------------------------------------


@dataclass
class Scan:
    """What the first read of a bundle keeps: a summary of each session, no rows."""

    origin: str
    header: dict[str, Any]
    #: The line of each session, by id, in file order.
    lines: dict[str, int] = field(default_factory=dict)
    #: The title of each session that has one, by id.
    titles: dict[str, str] = field(default_factory=dict)
    #: The parent of each session that has one, by id.
    parents: dict[str, str] = field(default_factory=dict)
    #: How many messages each session has, by id.
    messages: dict[str, int] = field(default_factory=dict)
    message_total: int = 0
    first_id: int = 0
    last_id: int = 0

    @property
    def session_total(self) -> int:
        """How many sessions the bundle holds."""
        return len(self.lines)


def _header(record: dict[str, Any], where: str) -> dict[str, Any]:
    if record.get("format") != FORMAT:
        raise BundleError(f"{where}: not a {FORMAT} file (no header line)")
    for key, newest in (("version", VERSION), ("schema_version", SCHEMA_VERSION)):
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value > newest:
            raise BundleError(
                f"{where}: {key} {value!r} is not one this package reads (<= {newest})"
            )
    for key in ("sessions", "messages"):
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BundleError(f"{where}: the header's {key!r} must be a count")
    return record


def records(source: Source) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(where, kind, record)`` of each line: the ``"header"`` (checked), then
    ``"session"`` and ``"message"`` lines (``type`` removed, values not yet checked)."""
    header_seen = False
    for _, where, text in source.lines():
        if not text.strip():
            continue
        record = jsonl.parse_object(text, where)
        if not header_seen:
            header_seen = True
            yield where, "header", _header(record, where)
            continue
        kind = record.pop("type", None)
        if kind == "row":  # a bundle of a newer Hermes' or a fork's file (not read here)
            raise BundleError(
                f"{where}: a row of table {record.get('table')!r}, which a store of this "
                "package does not have; nothing was imported"
            )
        if kind not in ("session", "message"):
            shown = repr(kind) if isinstance(kind, (str, int, float, type(None))) else _kind(kind)
            raise BundleError(f"{where}: unknown line type {shown}")
        yield where, kind, record
    if not header_seen:
        raise BundleError(f"{source.origin}: empty file, not a {FORMAT}")


def scan(source: Source, keep: IO[bytes] | None = None) -> Scan:
    """Read and check the whole bundle once (see the module text); the checked session
    rows are written to ``keep``, when given, for :func:`kept_sessions`.

    Raises:
        BundleError: the first problem found, naming its file and line.
    """
    result = Scan(source.origin, {})
    titles: dict[str, str] = {}
    for where, kind, record in records(source):
        if kind == "header":
            result.header = record
            continue
        values = row(record, kind, where)
        if kind == "session":
            _add_session(result, values, where, titles)
            if keep is not None:
                data = marshal.dumps(values)
                keep.write(len(data).to_bytes(8, "little") + data)
        else:
            _add_message(result, values, where)
    for kind, found in (("sessions", result.session_total), ("messages", result.message_total)):
        expected = result.header.get(kind)
        if expected != found:
            raise BundleError(
                f"{source.origin}: the header announces {expected} {kind} but the file holds "
                f"{found} (truncated?)"
            )
    _refuse_cycles(result)
    return result


_TITLE = SESSION_COLUMNS.index("title")
_PARENT = SESSION_COLUMNS.index("parent_session_id")


def _add_session(result: Scan, values: tuple[Any, ...], where: str, titles: dict[str, str]) -> None:
    session_id = values[0]
    line = int(where.rsplit(":", 1)[1])
    if result.message_total:
        raise BundleError(f"{where}: session lines must come before the message lines")
    if session_id in result.lines:
        raise BundleError(
            f"{where}: session {session_id!r} appears twice (first on line "
            f"{result.lines[session_id]})"
        )
    title = values[_TITLE]
    if title is not None:
        if title in titles:
            other = titles[title]
            raise BundleError(
                f"{where}: title {title!r} is also the title of session {other!r} "
                f"(line {result.lines[other]}); titles are unique"
            )
        titles[title] = session_id
        result.titles[session_id] = title
    if values[_PARENT] == session_id:
        raise BundleError(f"{where}: session {session_id!r} is its own parent")
    if values[_PARENT] is not None:
        result.parents[session_id] = values[_PARENT]
    result.lines[session_id] = line
    result.messages[session_id] = 0


def _add_message(result: Scan, values: tuple[Any, ...], where: str) -> None:
    message_id, session_id = values[0], values[1]
    if session_id not in result.lines:
        raise BundleError(
            f"{where}: message {message_id} belongs to session {session_id!r}, "
            "which the bundle does not contain (above this line)"
        )
    if message_id <= result.last_id:
        raise BundleError(
            f"{where}: message id {message_id} is not larger than the one before "
            f"({result.last_id}); message lines are in increasing id order"
        )
    result.first_id = result.first_id or message_id
    result.last_id = message_id
    result.message_total += 1
    result.messages[session_id] += 1


def _refuse_cycles(result: Scan) -> None:
    parents = result.parents
    done: set[str] = set()
    for start in parents:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node in result.lines and node not in done:
            if node in on_path:
                loop = [*path[path.index(node) :], node]
                shown = " -> ".join(repr(n) for n in loop[:8]) + (
                    " -> ..." if len(loop) > 8 else ""
                )
                raise BundleError(
                    f"{result.origin}:{result.lines[node]}: session {node!r} is its own "
                    f"ancestor ({shown})"
                )
            path.append(node)
            on_path.add(node)
            node = parents.get(node)
        done.update(path)


def check_bundle(source: str | os.PathLike[str] | IO[str]) -> Scan:
    """Read and check a whole bundle (path or text stream) without a store.

    Raises:
        BundleError: as :func:`scan`.
    """
    with open_source(source) as reader:
        return scan(reader)


def kept_sessions(keep: IO[bytes]) -> Iterator[tuple[Any, ...]]:
    """The session rows :func:`scan` wrote to ``keep``, in bundle order, one at a time."""
    keep.seek(0)
    while size := keep.read(8):
        yield marshal.loads(keep.read(int.from_bytes(size, "little")))


def message_rows(source: Source) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """``(where, row)`` of every message line, read again and checked again."""
    for where, kind, record in records(source):
        if kind == "message":
            yield where, row(record, kind, where)
