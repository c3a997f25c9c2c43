"""Sessions rendered as Markdown, for people to read (not to import).

Each session becomes a section: its title (or id), a short list of facts
(source, model, times, lineage kind and parent, counters), then every message
under a heading with its role and UTC time. Rewound (soft-deleted) messages
are shown and marked. Tool calls and list/dict content are shown as JSON
blocks. The output is deterministic, like the JSONL bundle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing
from typing import IO, Any

from ..models import Session, clock, decode_content, decode_json, kind_expr
from ..store import Redactor, among, current, redaction
from .bundle import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    Progress,
    message_rows_by_session,
    selection,
    session_rows,
    session_total,
)
from .output import open_output


def _when(epoch: Any) -> str:
    return clock.when(epoch, utc=True, seconds=True, zone=True)


def _fence(text: str, info: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{info}\n{text}\n{ticks}"


def _json_block(value: Any) -> str:
    return _fence(json.dumps(value, ensure_ascii=False, indent=2), "json")


def _kinds(ids: list[str] | None) -> dict[str, str]:
    """The lineage kind of each selected session (None: all), in one statement."""
    query = Session.select(Session.id, kind_expr(Session))
    if ids is not None:
        query = query.where(among(Session.id, ids))
    return {str(sid): str(kind) for sid, kind in current().execute(query).fetchall()}


def _session_lines(row: dict[str, Any], kind: str) -> Iterator[str]:
    yield f"## {row['title'] or row['id']}"
    yield ""
    yield f"- id: `{row['id']}`"
    yield f"- source: {row['source']} · model: {row['model'] or '-'}"
    ended = _when(row["ended_at"])
    if row["end_reason"]:
        ended += f" ({row['end_reason']})"
    yield f"- started: {_when(row['started_at'])} · ended: {ended}"
    if row["parent_session_id"]:
        yield f"- lineage: {kind} of `{row['parent_session_id']}`"
    else:
        yield f"- lineage: {kind}"
    yield (
        f"- messages: {row['message_count'] or 0} · tool calls: {row['tool_call_count'] or 0}"
        f" · tokens: {row['input_tokens'] or 0} in / {row['output_tokens'] or 0} out"
    )
    if row["archived"]:
        yield "- archived"
    yield ""


def _message_lines(row: dict[str, Any]) -> Iterator[str]:
    label = row["role"] + (f" · {row['tool_name']}" if row["tool_name"] else "")
    rewound = " · rewound" if not row["active"] else ""
    yield f"### {label} · {_when(row['timestamp'])}{rewound}"
    yield ""
    content = decode_content(row["content"])
    if isinstance(content, str):
        yield content if content.strip() else "_(empty)_"
    elif content is None:
        yield "_(no content)_"
    else:
        yield _json_block(content)
    if row["tool_calls"]:
        yield ""
        yield "Tool calls:"
        yield ""
        yield _json_block(decode_json(row["tool_calls"]))
    yield ""


def _render(
    session_id: str | None,
    source: str | None,
    progress: Progress | None,
    shown: list[int],
    window: tuple[Any, Any] = (None, None),
    redactor: Redactor | None = None,
) -> Generator[str, None, None]:
    """The document, read in one snapshot one session at a time (memory does not grow
    with the store); ``shown`` gets how many sessions it shows."""
    with current().atomic():
        ids = selection(session_id, source, *window)
        total = session_total(ids)
        shown.append(total)
        yield "# Hermes sessions\n"
        kinds = _kinds(ids)
        # Two statements whatever the selection: the sessions, and their messages in
        # the same order (each session's follow it), read side by side.
        owner = MESSAGE_COLUMNS.index("session_id")
        stored: Iterable[Sequence[Any]] = message_rows_by_session(ids)
        if redactor is not None:
            stored = redactor.rows(MESSAGE_COLUMNS, stored)
        messages = iter(stored)
        pending = next(messages, None)
        for done, kept in enumerate(session_rows(ids), 1):
            row = kept if redactor is None else redactor.row(SESSION_COLUMNS, kept)
            session = dict(zip(SESSION_COLUMNS, row))
            yield "\n"
            for line in _session_lines(session, kinds.get(str(session["id"]), "root")):
                yield line + "\n"
            while pending is not None and pending[owner] == session["id"]:
                for line in _message_lines(dict(zip(MESSAGE_COLUMNS, pending))):
                    yield line + "\n"
                pending = next(messages, None)
            if progress is not None:
                progress(done, total)


def export_markdown(
    target: str | os.PathLike[str] | IO[str],
    *,
    session_id: str | None = None,
    source: str | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
    since: Any = None,
    until: Any = None,
    redact: bool | Redactor = False,
) -> int:
    """Write Markdown to a path or text stream; returns how many sessions it shows
    (``since``/``until`` as :func:`hermes_models.transfer.bundle.export_bundle` takes them).

    An existing file is replaced only with ``overwrite=True``
    (see :func:`hermes_models.transfer.output.open_output`). ``redact`` as
    :func:`~hermes_models.transfer.bundle.export_bundle` takes it.
    """
    shown: list[int] = []
    redactor = redaction.asked(redact)
    render = _render(session_id, source, progress, shown, (since, until), redactor)
    with closing(render) as lines:
        first = next(lines)  # the selection is checked before the output is opened
        with open_output(target, overwrite=overwrite) as out:
            out.write(first)
            for line in lines:
                out.write(line)
    return shown[0]
