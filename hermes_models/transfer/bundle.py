"""The JSONL bundle: a lossless, versioned export of sessions and their messages.

A bundle is UTF-8 text with one JSON object per line:

1. a header, ``{"format": "hermes-models-bundle", "version": 1,
   "schema_version": 16, "sessions": N, "messages": M}``;
2. N session lines, ``{"type": "session", ...}`` with every column of
   ``sessions`` in schema order (from a file newer than v16: every column the
   file has, and the header carries the file's own ``schema_version``),
   lineage included (``parent_session_id`` and the markers in
   ``model_config``), ordered by ``(started_at, id)``;
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
anything is written; :mod:`hermes_models.transfer.importer` adds it to a store.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, cast

import peewee
from peewee import SQL, fn

from ..checks import check_window, expand_user
from ..driver import sqlite3
from ..errors import BundleError
from ..models import Message, Session, stored_fields, walk_sessions
from ..store import (
    SCHEMA_VERSION,
    Redactor,
    among,
    current,
    redaction,
    rows_read_leniently,
    sqlite_sql,
)
from . import jsonl
from .output import open_output

logger = logging.getLogger("hermes_models")

FORMAT = "hermes-models-bundle"
VERSION = 1

#: Column names of a session line and of a message line, in schema order.
SESSION_COLUMNS = tuple(f.column_name for f in stored_fields(Session))
MESSAGE_COLUMNS = tuple(f.column_name for f in stored_fields(Message))
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


def existing_ids(table: str, ids: Iterable[Any]) -> set[Any]:
    """Which of ``ids`` are ids of rows of ``table`` (``sessions`` or ``messages``)."""
    model: Any = Session if table == "sessions" else Message
    found: set[Any] = set()
    for chunk in chunks(list(ids), 5000):
        found.update(row[0] for row in raw(model.select(model.id).where(among(model.id, chunk))))
    return found


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    return value


def dumps(record: Mapping[str, Any]) -> str:
    """One bundle line (without the newline)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- choosing what to export -----------------------------------------------------------------


def selection(
    session_id: str | None = None,
    source: str | None = None,
    since: Any = None,
    until: Any = None,
) -> list[str] | None:
    """Ids of the sessions an export holds; None means every session.

    ``session_id`` selects its lineage (ancestors, the session, all its
    descendants); ``source`` the sessions of that source; ``since``/``until``
    (epoch seconds or ``datetime``) the sessions started at or after ``since``
    and before ``until`` (of ``source``, when given). Ancestors are always
    added, so the bundle is self-contained.

    Raises:
        ValueError: ``session_id`` does not exist, or is given with a window.
    """
    window = check_window(since, until)
    if window != (None, None):
        if session_id is not None:
            raise ValueError("since/until select sessions by start time, not with session_id")
        started = [Session.started_at >= window[0]] if window[0] is not None else []
        if window[1] is not None:
            started.append(Session.started_at < window[1])
        if source is not None:
            if not isinstance(source, str):
                raise TypeError(f"source must be str or None, not {type(source).__name__}")
            started.append(Session.source == source)
        where = started[0]
        for term in started[1:]:
            where = where & term
        return sorted(set(_walked(where, upward=True)))
    if session_id is not None and not isinstance(session_id, str):
        raise TypeError(f"session_id must be str or None, not {type(session_id).__name__}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be str or None, not {type(source).__name__}")
    if session_id is None and source is None:
        return None
    chosen: set[str] = set()
    if session_id is not None:
        if not Session.select().where(Session.id == session_id).exists():
            raise ValueError(f"session_id {session_id!r} does not exist")
        # Every ancestor of a descendant is the session's own ancestor or below it.
        chosen.update(_walked(session_id))
        chosen.update(_walked(session_id, upward=True))
    if source is not None:
        # A climb ends at a session of the source: that session climbs itself.
        chosen.update(
            _walked(
                Session.source == source,
                upward=True,
                follow=lambda s: (s.source != source) | s.source.is_null(),
            )
        )
    return sorted(chosen)


def _walked(start: Any, **walk: Any) -> list[str]:
    """Ids :func:`hermes_models.models.lineage.walk_sessions` reaches from ``start``
    (the start included), however deep."""
    cte = walk_sessions(Session, start, max_depth=None, **walk)
    return [row[0] for row in raw(cte.select_from(cte.c.id))]


def chunks(items: Sequence[Any], size: int = _ID_CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def file_columns(model: type[Session] | type[Message]) -> tuple[str, ...]:
    """The columns a bundle line of ``model`` carries: the v16 columns, or on a file
    newer than v16, or one with columns a fork added, every column the file has (in
    file order), so nothing is lost (an import refuses the columns it cannot hold)."""
    v16 = SESSION_COLUMNS if model is Session else MESSAGE_COLUMNS
    shape = current().shape
    if shape is None or shape.dialect != "sqlite":
        return v16
    present = tuple(shape.columns.get(model._meta.table_name, ()))
    if shape.newer or not set(present) <= set(v16):
        return present
    return v16


#: Tables of a store that a bundle does not carry as added tables: the v16 ones (their
#: rows are the bundle's sessions and messages, or the store's own bookkeeping) and the
#: migrations' records.
_OWN_TABLES = frozenset(
    {"sessions", "messages", "state_meta", "compression_locks", "schema_version"}
)


def added_tables() -> list[str]:
    """The tables a later Hermes (or a fork) added to the open file, which a bundle of
    it carries (``system_prompts``, ``session_model_usage``, ...): see
    :func:`added_among`. Empty on a server and on a file this package or Hermes v16 made."""
    shape = current().shape
    if shape is None or shape.dialect != "sqlite":
        return []
    return added_among(raw(sqlite_sql.TABLES_WITH_SQL).fetchall())


def added_among(listed: Iterable[tuple[str, Any]]) -> list[str]:
    """Of ``(name, sql)`` of a file's tables, those beyond a v16 store's: every ordinary
    table but the v16 ones, SQLite's and yoyo's own, and full-text indexes with their
    shadow tables."""
    listed = list(listed)
    virtual = [name for name, sql in listed if sqlite_sql.is_virtual_table(sql)]
    return [
        name
        for name, _ in listed
        if name not in _OWN_TABLES
        and not name.startswith(("sqlite_", "_yoyo", "yoyo"))
        and name not in virtual
        and not any(name.startswith(f"{table}_") for table in virtual)
    ]


def _added_rows(table: str, ids: list[str] | None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The columns and rows of an added table that belong in a bundle of sessions
    ``ids`` (None: every row): rows with a ``session_id`` of those sessions, system
    prompts those sessions point to; a table tied to no session only in a bundle of
    everything. Ordered by every column, so that the output stays the same."""
    columns = [str(row[1]) for row in raw(sqlite_sql.table_info(table)).fetchall()]
    if ids is None:
        return columns, raw(sqlite_sql.every_row(table, len(columns))).fetchall()
    if "session_id" in columns:
        statement = sqlite_sql.rows_among(table, "session_id", len(columns))
        return columns, raw(statement, [json.dumps(ids)]).fetchall()
    if table == "system_prompts" and "hash" in columns:
        shape = current().shape
        pointing = ("system_prompt_hash", "tool_names")
        pointed = [Session._meta.columns[c] for c in pointing if shape and shape.has("sessions", c)]
        wanted: list[str] = []
        if pointed:
            chosen = Session.select(*pointed).where(among(Session.id, ids))
            found = raw(chosen).fetchall()
            wanted = sorted({str(v) for row in found for v in row if v is not None})
        statement = sqlite_sql.rows_among(table, "hash", len(columns))
        return columns, raw(statement, [json.dumps(wanted)]).fetchall()
    return columns, []


def _selected(model: type[Session] | type[Message]) -> list[Any]:
    by_column = {f.column_name: f for f in model._meta.sorted_fields}
    return [by_column.get(c) or peewee.Column(model, c) for c in file_columns(model)]


def session_rows(ids: list[str] | None) -> Iterator[tuple[Any, ...]]:
    """Session rows (stored values, :func:`file_columns` order) by ``(started_at, id)``;
    None: all. Read from the cursor as they are used: memory does not grow with them."""
    query = Session.select(*_selected(Session)).order_by(Session.started_at, Session.id)
    cursor = raw(query if ids is None else query.where(among(Session.id, ids)))
    yield from rows_read_leniently(current(), cursor)


def _of_a_session(query: Any) -> Any:
    """``query`` of messages kept to those whose session exists: an import that was
    killed leaves its staged messages without one (the next import removes them),
    and a damaged file may hold such rows; a bundle of them could not be imported."""
    owner = Session.alias("owner")
    return query.where(fn.EXISTS(owner.select(SQL("1")).where(owner.id == Message.session)))


def message_rows(ids: list[str] | None) -> Iterator[tuple[Any, ...]]:
    """Message rows (stored values, :func:`file_columns` order) of those sessions by id;
    None: all of a session that exists. Read from the cursor as they are used (SQLite
    sorts a selection on disk)."""
    query = Message.select(*_selected(Message)).order_by(Message.id)
    cursor = raw(_of_a_session(query) if ids is None else query.where(among(Message.session, ids)))
    yield from rows_read_leniently(current(), cursor)


def message_rows_by_session(ids: list[str] | None) -> Iterator[tuple[Any, ...]]:
    """:func:`message_rows` in the order of :func:`session_rows` (their sessions by
    ``(started_at, id)``, then by id), in one statement: read beside the session
    rows, each session's messages follow it."""
    owner = Session.alias("owner")
    query = (
        Message.select(*_selected(Message))
        .join(owner, on=(owner.id == Message.session))
        .order_by(owner.started_at, owner.id, Message.id)
    )
    cursor = raw(query if ids is None else query.where(among(Message.session, ids)))
    yield from rows_read_leniently(current(), cursor)


def orphan_total() -> int:
    """How many messages belong to no session (left out of an export of everything)."""
    everything = int(raw(Message.select(fn.COUNT(Message.id))).fetchone()[0])
    return everything - _message_total(None)


def session_total(ids: list[str] | None) -> int:
    """How many sessions :func:`session_rows` gives."""
    if ids is not None:
        return len(ids)
    return int(raw(Session.select(fn.COUNT(Session.id))).fetchone()[0])


def _message_total(ids: list[str] | None) -> int:
    query = Message.select(fn.COUNT(Message.id))
    if ids is None:
        return int(raw(_of_a_session(query)).fetchone()[0])
    return sum(
        int(raw(query.where(Message.session.in_(list(chunk)))).fetchone()[0])
        for chunk in chunks(ids)
    )


# -- writing -------------------------------------------------------------------------------


def _records(
    session_id: str | None,
    source: str | None,
    progress: Progress | None,
    window: tuple[Any, Any] = (None, None),
    redactor: Redactor | None = None,
) -> Iterator[tuple[str, str]]:
    """``(kind, line)`` pairs of a bundle, read in one snapshot (redacted by ``redactor``)."""
    with current().atomic():
        ids = selection(session_id, source, *window)
        total = _message_total(ids)
        if ids is None and (orphans := orphan_total()):
            logger.warning(
                "%s: %d message(s) belong to no session (an interrupted import's, or a "
                "damaged file); they are not exported",
                current().path,
                orphans,
            )
        shape = current().shape
        newer = shape is not None and shape.newer
        header = {
            "format": FORMAT,
            "version": VERSION,
            # A newer file's bundle says so: this package reads back only v16 bundles.
            "schema_version": shape.version
            if newer and shape and shape.version
            else SCHEMA_VERSION,
            "sessions": session_total(ids),
            "messages": total,
        }
        # Held whole before the header, which counts them: tables of a few rows each.
        added = {table: _added_rows(table, ids) for table in added_tables()}
        if added:
            header["tables"] = {table: len(rows) for table, (_, rows) in added.items()}
        yield "header", dumps(header) + "\n"
        session_columns, message_columns = file_columns(Session), file_columns(Message)
        stored = session_rows(ids)
        for row in stored if redactor is None else redactor.rows(session_columns, stored):
            record = {"type": "session", **dict(zip(session_columns, map(_encode, row)))}
            yield "session", dumps(record) + "\n"
        done = 0
        messages = message_rows(ids)
        for row in messages if redactor is None else redactor.rows(message_columns, messages):
            record = {"type": "message", **dict(zip(message_columns, map(_encode, row)))}
            yield "message", dumps(record) + "\n"
            done += 1
            if progress is not None and (done % CHUNK_ROWS == 0 or done == total):
                progress(done, total)
        for table, (columns, rows) in added.items():
            for row in rows:
                values = dict(zip(columns, map(_encode, row)))
                yield "row", dumps({"type": "row", "table": table, "row": values}) + "\n"


def export_bundle(
    target: str | os.PathLike[str] | IO[str],
    *,
    session_id: str | None = None,
    source: str | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
    since: Any = None,
    until: Any = None,
    redact: bool | Redactor = False,
) -> dict[str, int]:
    """Write a bundle to a path or text stream; returns how many sessions and messages.
    ``since``/``until``: the sessions started in that window (see :func:`selection`).
    ``redact`` (True, or a :class:`~hermes_models.store.redaction.Redactor`) writes
    messages, tool calls and titles with their secrets redacted (the store is unchanged).

    A path is written as :func:`hermes_models.transfer.output.open_output` describes:
    an existing file is replaced only with ``overwrite=True``.
    """
    counts = {"sessions": 0, "messages": 0}
    redactor = redaction.asked(redact)
    with open_output(target, overwrite=overwrite) as out:
        for kind, line in _records(session_id, source, progress, (since, until), redactor):
            out.write(line)
            if kind in ("session", "message"):
                counts[kind + "s"] += 1
    return counts


# -- recognising ---------------------------------------------------------------------------


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """True when the first non-empty line of the file is a bundle header.

    Reads at most :data:`~hermes_models.transfer.jsonl.MAX_LINE_BYTES` per line; a file
    that cannot be read as JSON Lines is not a bundle.
    """
    with open(expand_user(os.fspath(path), "path"), "rb") as handle:
        try:
            for _, where, text in jsonl.lines(handle, os.fspath(path)):
                if text.strip():
                    record = jsonl.parse_object(text, where)
                    return record.get("format") == FORMAT
        except BundleError:
            return False
    return False
