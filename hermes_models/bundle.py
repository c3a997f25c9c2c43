"""The JSONL bundle: a lossless, versioned export of sessions and their messages.

A bundle is UTF-8 text with one JSON object per line:

1. a header, ``{"format": "hermes-models-bundle", "version": 1,
   "schema_version": 16, "sessions": N, "messages": M}``;
2. N session lines, ``{"type": "session", ...}`` with every column of
   ``sessions`` in schema order (lineage included: ``parent_session_id`` and
   the markers in ``model_config``), ordered by ``(started_at, id)``;
3. M message lines, ``{"type": "message", ...}`` with every column of
   ``messages`` (``id`` and ``active`` included, so soft-deleted messages
   travel too), ordered by ``id``.

Values are exactly what the file stores: content keeps Hermes' ``"\\x00json:"``
prefix, JSON columns stay text, counters are not recomputed. A BLOB, which
Hermes never writes, is carried as ``{"$base64": "..."}``. Output is
deterministic (no timestamps, fixed key order, compact separators), so
export, import into an empty file and export again gives the same bytes.

A bundle of some sessions also carries their ancestors, so every
``parent_session_id`` in it resolves. Reading checks the whole file before
anything is written; :mod:`hermes_models.importer` adds it to a store.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from peewee import fn

from .checks import INT64_MAX, INT64_MIN, check_epoch
from .db import SCHEMA_VERSION, current
from .errors import BundleError
from .models import Message, Session

FORMAT = "hermes-models-bundle"
VERSION = 1

#: Column names of a session line and of a message line, in schema order.
SESSION_COLUMNS = tuple(f.column_name for f in Session._meta.sorted_fields)
MESSAGE_COLUMNS = tuple(f.column_name for f in Message._meta.sorted_fields)
#: Columns holding seconds since the epoch.
_EPOCHS = {"started_at", "ended_at", "timestamp"}
_REQUIRED = {
    "session": ("id", "source", "started_at"),
    "message": ("id", "session_id", "role", "timestamp"),
}
#: Values of columns a hand-written line leaves out (the schema defaults).
_DEFAULTS = {
    f.column_name: f.default
    for model in (Session, Message)
    for f in model._meta.sorted_fields
    if f.default is not None and not callable(f.default)
}

#: Rows per multi-row INSERT, and ids per ``IN (...)`` list.
CHUNK_ROWS = 200
_ID_CHUNK = 500

#: ``progress(done, total)`` callbacks report rows written or read.
Progress = Callable[[int, int], None]


def raw(query: Any, params: Sequence[Any] | None = None) -> sqlite3.Cursor:
    """A raw cursor for a peewee query or an SQL string: values exactly as stored."""
    db: Any = current()
    if isinstance(query, str):
        return cast(sqlite3.Cursor, db.execute_sql(query, params))
    return cast(sqlite3.Cursor, db.execute(query))


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    return value


def _decode(value: Any, where: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            raise BundleError(f"{where}: {value} does not fit a 64-bit integer")
        return value
    if value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, dict) and set(value) == {"$base64"} and isinstance(value["$base64"], str):
        try:
            return base64.b64decode(value["$base64"], validate=True)
        except ValueError as exc:
            raise BundleError(f"{where}: bad $base64 value: {exc}") from None
    raise BundleError(f"{where}: a column value must be null, a number or a string")


def dumps(record: Mapping[str, Any]) -> str:
    """One bundle line (without the newline)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- choosing what to export -----------------------------------------------------------------


def selection(session_id: str | None = None, source: str | None = None) -> list[str] | None:
    """Ids of the sessions an export holds; None means every session.

    ``session_id`` selects its lineage (ancestors, the session, all its
    descendants); ``source`` the sessions of that source. Ancestors are
    always added, so the bundle is self-contained.

    Raises:
        ValueError: ``session_id`` does not exist.
    """
    if session_id is not None and not isinstance(session_id, str):
        raise TypeError(f"session_id must be str or None, not {type(session_id).__name__}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be str or None, not {type(source).__name__}")
    if session_id is None and source is None:
        return None
    rows = raw(Session.select(Session.id, Session.parent, Session.source)).fetchall()
    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    for sid, pid, src in rows:
        parent[sid] = pid
        sources[sid] = src
        if pid is not None:
            children.setdefault(pid, []).append(sid)
    if session_id is not None:
        if session_id not in parent:
            raise ValueError(f"session_id {session_id!r} does not exist")
        chosen = {session_id}
        todo = [session_id]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in chosen:
                    chosen.add(child)
                    todo.append(child)
    else:
        chosen = set()
    if source is not None:
        chosen |= {sid for sid, src in sources.items() if src == source}
    for sid in list(chosen):
        up = parent.get(sid)
        while up is not None and up in parent and up not in chosen:
            chosen.add(up)
            up = parent.get(up)
    return sorted(chosen)


def chunks(items: Sequence[Any], size: int = _ID_CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def session_rows(ids: list[str] | None) -> list[tuple[Any, ...]]:
    """Session rows (stored values, column order) by ``(started_at, id)``; None: all."""
    fields = Session._meta.sorted_fields
    if ids is None:
        return raw(Session.select(*fields).order_by(Session.started_at, Session.id)).fetchall()
    out: list[tuple[Any, ...]] = []
    for chunk in chunks(ids):
        out += raw(Session.select(*fields).where(Session.id.in_(list(chunk)))).fetchall()
    started = SESSION_COLUMNS.index("started_at")
    return sorted(out, key=lambda row: (row[started], row[0]))


def message_rows(ids: list[str] | None) -> Iterator[tuple[Any, ...]]:
    """Message rows (stored values, column order) of those sessions by id; None: all."""
    fields = Message._meta.sorted_fields
    if ids is None:
        yield from raw(Message.select(*fields).order_by(Message.id))
        return
    rows: list[tuple[Any, ...]] = []
    for chunk in chunks(ids):
        rows += raw(Message.select(*fields).where(Message.session.in_(list(chunk)))).fetchall()
    yield from sorted(rows, key=lambda row: row[0])


def _message_total(ids: list[str] | None) -> int:
    query = Message.select(fn.COUNT(Message.id))
    if ids is None:
        return int(raw(query).fetchone()[0])
    return sum(
        int(raw(query.where(Message.session.in_(list(chunk)))).fetchone()[0])
        for chunk in chunks(ids)
    )


# -- writing -------------------------------------------------------------------------------


def _records(
    session_id: str | None, source: str | None, progress: Progress | None
) -> Iterator[tuple[str, str]]:
    """``(kind, line)`` pairs of a bundle, read in one snapshot."""
    with current().atomic():
        ids = selection(session_id, source)
        sessions = session_rows(ids)
        total = _message_total(ids)
        header = {
            "format": FORMAT,
            "version": VERSION,
            "schema_version": SCHEMA_VERSION,
            "sessions": len(sessions),
            "messages": total,
        }
        yield "header", dumps(header) + "\n"
        for row in sessions:
            record = {"type": "session", **dict(zip(SESSION_COLUMNS, map(_encode, row)))}
            yield "session", dumps(record) + "\n"
        done = 0
        for row in message_rows(ids):
            record = {"type": "message", **dict(zip(MESSAGE_COLUMNS, map(_encode, row)))}
            yield "message", dumps(record) + "\n"
            done += 1
            if progress is not None and (done % CHUNK_ROWS == 0 or done == total):
                progress(done, total)


def bundle_lines(
    session_id: str | None = None, source: str | None = None, progress: Progress | None = None
) -> Iterator[str]:
    """The lines of a bundle, each ending in a newline (see :func:`selection`)."""
    for _, line in _records(session_id, source, progress):
        yield line


def file_path(value: Any, argument: str) -> Path | None:
    """``value`` as a path (``~`` expanded), or None when it is a text stream.

    Raises:
        TypeError: ``value`` is neither a path nor a stream.
    """
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if not isinstance(text, str):
            raise TypeError(f"{argument} must be a text path, not bytes")
        return Path(text).expanduser()
    if hasattr(value, "write") or hasattr(value, "read"):
        return None
    raise TypeError(f"{argument} must be a path or a text stream, not {type(value).__name__}")


@contextmanager
def open_output(target: str | os.PathLike[str] | IO[str]) -> Iterator[IO[str]]:
    """A text stream for ``target``: a path is written atomically (temp file, rename)."""
    path = file_path(target, "target")
    if path is None:
        yield cast(IO[str], target)
        return
    handle = tempfile.NamedTemporaryFile(
        "w",
        encoding="utf-8",
        newline="\n",
        dir=path.parent or ".",
        prefix=f".{path.name}.",
        delete=False,
    )
    try:
        with handle:
            yield handle
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def export_bundle(
    target: str | os.PathLike[str] | IO[str],
    *,
    session_id: str | None = None,
    source: str | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Write a bundle to a path or text stream; returns how many sessions and messages."""
    counts = {"sessions": 0, "messages": 0}
    with open_output(target) as out:
        for kind, line in _records(session_id, source, progress):
            out.write(line)
            if kind != "header":
                counts[kind + "s"] += 1
    return counts


# -- reading -------------------------------------------------------------------------------


@dataclass
class Bundle:
    """A parsed bundle; rows are tuples in column order (see :data:`SESSION_COLUMNS`)."""

    header: dict[str, Any]
    sessions: list[tuple[Any, ...]] = field(default_factory=list)
    messages: list[tuple[Any, ...]] = field(default_factory=list)


def _row(record: dict[str, Any], kind: str, where: str) -> tuple[Any, ...]:
    columns = SESSION_COLUMNS if kind == "session" else MESSAGE_COLUMNS
    unknown = sorted(set(record) - set(columns))
    if unknown:
        raise BundleError(f"{where}: unknown {kind} column(s) {', '.join(unknown)}")
    missing = [name for name in _REQUIRED[kind] if record.get(name) is None]
    if missing:
        raise BundleError(f"{where}: {kind} line lacks {', '.join(missing)}")
    row = tuple(
        _decode(record.get(name, _DEFAULTS.get(name)), f"{where}: {name}") for name in columns
    )
    for name, value in zip(columns, row):
        if name in _EPOCHS and value is not None:
            try:
                check_epoch(value, name)
            except (TypeError, ValueError) as exc:
                raise BundleError(f"{where}: {exc}") from None
    return row


def json_objects(lines: Iterable[str], origin: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line number, "origin:line", object)`` for each non-blank line of a JSONL text.

    Raises:
        BundleError: a line is not valid JSON or not a JSON object.
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{origin}:{number}"
        try:
            record = json.loads(line)
        except ValueError:
            raise BundleError(f"{where}: not valid JSON") from None
        if not isinstance(record, dict):
            raise BundleError(f"{where}: a line must be a JSON object")
        yield number, where, record


def read_bundle(lines: Iterable[str], origin: str = "bundle") -> Bundle:
    """Parse and check a bundle.

    Raises:
        BundleError: not a bundle, a newer format, a bad or truncated line,
            duplicate ids, or a message of a session the bundle lacks.
    """
    bundle: Bundle | None = None
    session_ids: set[str] = set()
    message_ids: set[int] = set()
    for _, where, record in json_objects(lines, origin):
        if bundle is None:
            if record.get("format") != FORMAT:
                raise BundleError(f"{where}: not a {FORMAT} file (no header line)")
            for key, newest in (("version", VERSION), ("schema_version", SCHEMA_VERSION)):
                value = record.get(key)
                if not isinstance(value, int) or value > newest:
                    raise BundleError(
                        f"{where}: {key} {value!r} is not one this package reads (<= {newest})"
                    )
            bundle = Bundle(header=record)
            continue
        kind = record.pop("type", None)
        if kind not in ("session", "message"):
            raise BundleError(f"{where}: unknown line type {kind!r}")
        row = _row(record, kind, where)
        if kind == "session":
            if row[0] in session_ids:
                raise BundleError(f"{where}: session {row[0]!r} appears twice")
            session_ids.add(row[0])
            bundle.sessions.append(row)
        else:
            if type(row[0]) is not int or row[0] in message_ids:
                raise BundleError(f"{where}: message id {row[0]!r} is not a new integer")
            message_ids.add(row[0])
            bundle.messages.append(row)
    if bundle is None:
        raise BundleError(f"{origin}: empty file, not a {FORMAT}")
    for kind, found in (("sessions", bundle.sessions), ("messages", bundle.messages)):
        expected = bundle.header.get(kind)
        if expected != len(found):
            raise BundleError(
                f"{origin}: the header announces {expected} {kind} but the file holds "
                f"{len(found)} (truncated?)"
            )
    for row in bundle.messages:
        if row[1] not in session_ids:
            raise BundleError(
                f"{origin}: message {row[0]} belongs to session {row[1]!r}, "
                "which the bundle does not contain"
            )
    return bundle


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """True when the first non-empty line of the file is a bundle header."""
    with open(os.path.expanduser(os.fspath(path)), encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError:
                    return False
                return isinstance(record, dict) and record.get("format") == FORMAT
    return False


def load(source: str | os.PathLike[str] | IO[str]) -> Bundle:
    """Read and check a bundle from a path or text stream."""
    path = file_path(source, "source")
    if path is None:
        stream = cast(IO[str], source)
        return read_bundle(stream, str(getattr(stream, "name", "bundle")))
    with open(path, encoding="utf-8") as handle:
        return read_bundle(handle, str(path))


__all__ = [
    "FORMAT",
    "MESSAGE_COLUMNS",
    "SESSION_COLUMNS",
    "VERSION",
    "Bundle",
    "bundle_lines",
    "export_bundle",
    "is_bundle",
    "load",
    "read_bundle",
    "selection",
]
