"""Importing the per-session JSONL transcripts older Hermes releases wrote.

Before the SQLite store, Hermes kept one file per session, named
``<session_id>.jsonl``, with one OpenAI-style message object per line
(``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``,
``reasoning``, ``finish_reason``, ``timestamp``, ...). A line with role
``session_meta`` describes the session (``model``, ``platform``, ``cwd``,
``title``, ``timestamp``; its ``tools`` list is not kept).

Each file becomes one session (id from the file name, source from the
meta line's ``platform`` or the caller's default) with its messages, written
in one transaction with multi-row inserts; counters are computed from the
messages. A session id already present is skipped, so importing a folder
twice is the same as once. Timestamps may be epoch numbers or ISO 8601
text (naive times are local, as Hermes wrote them); a message without one
takes the time of the message before it, so the file order is kept. Keys
Hermes added for its own bookkeeping (``mirror``, ``api_content``, ...) are
ignored, and so are lines with roles the store does not hold.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from . import titles, transcript
from .bundle import Progress, json_objects
from .checks import EPOCH_MAX, EPOCH_MIN
from .db import current
from .errors import BundleError
from .importer import insert_rows
from .models import ROLES, Message, Session

_COLUMNS = [Message._meta.fields[name].column_name for name in transcript.MESSAGE_FIELDS]
_FIELDS = set(transcript.MESSAGE_FIELDS) - {"session", "role", "content", "timestamp"}


def _timestamp(value: Any, where: str) -> float:
    stamp: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        stamp = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            stamp = datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError, OSError):
            stamp = None
    if stamp is None:
        raise BundleError(f"{where}: timestamp {value!r} is neither epoch seconds nor ISO 8601")
    if not (math.isfinite(stamp) and EPOCH_MIN <= stamp <= EPOCH_MAX):
        raise BundleError(f"{where}: timestamp {value!r} is not a time between years 1 and 9999")
    return stamp


def read_transcript(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The meta fields, the message dicts and the number of skipped lines of one file.

    Raises:
        BundleError: a line is not a JSON object or has a bad timestamp.
    """
    meta: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    skipped = 0
    with open(path, encoding="utf-8") as handle:
        for number, where, record in json_objects(handle, str(path)):
            if record.get("timestamp") is not None:
                record["timestamp"] = _timestamp(record["timestamp"], where)
            role = record.get("role")
            if role == "session_meta":
                for key, value in record.items():
                    meta.setdefault(key, value)
            elif role in ROLES:
                messages.append({"line": number, **record})
            else:
                skipped += 1
    return meta, messages, skipped


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _session_row(
    session_id: str, meta: dict[str, Any], messages: list[dict[str, Any]], source: str, mtime: float
) -> dict[str, Any]:
    started = meta.get("timestamp")
    if started is None:
        started = next((m["timestamp"] for m in messages if m.get("timestamp") is not None), mtime)
    row: dict[str, Any] = {
        "id": session_id,
        "source": _text(meta.get("platform")) or source,
        "model_name": _text(meta.get("model")),
        "cwd": _text(meta.get("cwd")),
        "started_at": started,
    }
    try:
        title = (
            titles.sanitize_title(meta.get("title")) if isinstance(meta.get("title"), str) else None
        )
    except ValueError:
        title = None
    if title is not None and not Session.select().where(Session.title == title).exists():
        row["title"] = title
    return row


def _message_rows(
    session_id: str, path: Path, messages: list[dict[str, Any]], start: float
) -> list[list[Any]]:
    rows = []
    last = start
    for message in messages:
        where = f"{path}:{message['line']}"
        fields = {k: v for k, v in message.items() if k in _FIELDS}
        if "tool_name" not in fields and isinstance(message.get("name"), str):
            fields["tool_name"] = message["name"]
        if message.get("timestamp") is not None:
            last = message["timestamp"]
        fields["timestamp"] = last
        try:
            rows.append(
                transcript.message_row(
                    session_id, message["role"], message.get("content"), **fields
                )
            )
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{where}: {exc}") from None
    return rows


def import_transcript(path: Path, source: str = "cli") -> dict[str, int]:
    """Import one ``<session_id>.jsonl`` file in one write.

    Returns ``sessions_added`` (0 when the session already exists),
    ``messages_added`` and ``lines_skipped``.

    Raises:
        BundleError: the file cannot be read as a transcript.
    """
    session_id = path.stem
    if not session_id:
        raise BundleError(f"{path}: the file name gives no session id")
    meta, messages, skipped = read_transcript(path)
    mtime = path.stat().st_mtime

    def run() -> dict[str, int]:
        if Session.select().where(Session.id == session_id).exists():
            return {"sessions_added": 0, "messages_added": 0, "lines_skipped": skipped}
        row = _session_row(session_id, meta, messages, source, mtime)
        rows = _message_rows(session_id, path, messages, row["started_at"])
        Session.insert(**row).execute()
        insert_rows(Message._meta.table_name, _COLUMNS, rows)
        transcript.recount(session_id)
        return {"sessions_added": 1, "messages_added": len(rows), "lines_skipped": skipped}

    try:
        return current().write(run)
    except UnicodeEncodeError as exc:
        raise BundleError(f"{path}: text that cannot be stored as UTF-8 ({exc.reason})") from None


def transcript_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The transcript files ``path`` names: itself, or the ``*.jsonl`` files of a folder.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    from .bundle import file_path

    target = file_path(path, "path")
    if target is None:
        raise TypeError(f"path must be a file or folder path, not {type(path).__name__}")
    if target.is_dir():
        return sorted(p for p in target.glob("*.jsonl") if p.is_file())
    if not target.exists():
        raise FileNotFoundError(f"{target} does not exist")
    return [target]


def import_transcripts(
    path: str | os.PathLike[str],
    *,
    source: str = "cli",
    progress: Progress | None = None,
    on_error: Callable[[Path, BundleError], None] | None = None,
) -> dict[str, Any]:
    """Import a transcript file, or every ``*.jsonl`` file of a folder (one write each).

    Returns the totals (``files``, ``sessions_added``, ``sessions_skipped``,
    ``messages_added``, ``lines_skipped``) and ``failed``, a list of
    ``{"file", "error"}`` for files that could not be read; those are
    reported, not raised, when importing a folder.

    Raises:
        BundleError: ``path`` is a single file that cannot be read.
        FileNotFoundError: ``path`` does not exist.
    """
    transcript.check_session_id(source, "source")
    files = transcript_paths(path)
    single = not Path(os.fspath(path)).expanduser().is_dir()
    report: dict[str, Any] = {
        "files": len(files),
        "sessions_added": 0,
        "sessions_skipped": 0,
        "messages_added": 0,
        "lines_skipped": 0,
        "failed": [],
    }
    for done, file in enumerate(files, 1):
        try:
            counts = import_transcript(file, source)
        except BundleError as exc:
            if single:
                raise
            report["failed"].append({"file": str(file), "error": str(exc)})
            if on_error is not None:
                on_error(file, exc)
        else:
            report["sessions_added"] += counts["sessions_added"]
            report["sessions_skipped"] += 1 - counts["sessions_added"]
            report["messages_added"] += counts["messages_added"]
            report["lines_skipped"] += counts["lines_skipped"]
        if progress is not None:
            progress(done, len(files))
    return report
