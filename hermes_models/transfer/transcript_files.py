"""Importing the per-session JSONL transcripts older Hermes releases wrote.

Before the SQLite store, Hermes kept one file per session, named
``<session_id>.jsonl``, with one OpenAI-style message object per line
(``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``,
``reasoning``, ``finish_reason``, ``timestamp``, ...). A line with role
``session_meta`` describes the session (``model``, ``platform``, ``cwd``,
``title``, ``timestamp``; its ``tools`` list is not kept).

Each file becomes one session (id from the file name, source from the
meta line's ``platform`` or the caller's default) with its messages, written
with multi-row inserts as :mod:`hermes_models.transfer.staging` describes (the
session appears once complete); counters are computed from the messages.
A session id already present is skipped, so importing a folder twice is
the same as once. Timestamps may be epoch numbers or ISO 8601
text (naive times are local, as Hermes wrote them); a message without one
takes the time of the message before it, so the file order is kept. Keys
Hermes added for its own bookkeeping (``mirror``, ``api_content``, ...) are
ignored, and so are lines with roles the store does not hold.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..checks import EPOCH_MAX, EPOCH_MIN, check_session_id
from ..conversations import titles, transcript
from ..errors import BundleError
from ..models import ROLES, Message, Session
from ..store import SqliteFile, current
from . import jsonl
from .bundle import Progress
from .output import file_path
from .pg_staging import ServerStaging, write_at_once_server
from .staging import SMALL_IMPORT, Staging, write_at_once

_COLUMNS = [Message._meta.fields[name].column_name for name in transcript.MESSAGE_FIELDS]
_FIELDS = set(transcript.MESSAGE_FIELDS) - {"session", "role", "content", "timestamp"}


_ISO = re.compile(
    r"(?P<date>\d{4}-?\d{2}-?\d{2})"
    r"(?:.(?P<hour>\d{2})(?::?(?P<minute>\d{2})(?::?(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?)?)?"
    r"(?P<zone>[Zz]|[+-]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?)?)?",
    re.ASCII,
)
_ZONE = re.compile(
    r"(?P<sign>[+-])(?P<h>\d{2}):?(?P<m>\d{2})?:?(?P<s>\d{2})?(?:[.,](?P<f>\d+))?", re.ASCII
)


def _microseconds(digits: str | None) -> int:
    """A decimal fraction of a second as microseconds (digits past the sixth dropped)."""
    return int((digits or "0")[:6].ljust(6, "0"))


def parse_iso(text: str) -> datetime:
    """An ISO 8601 date or date and time, the same way on every supported Python.

    Accepts what ``datetime.fromisoformat`` of Python 3.11 accepts in
    practice: extended or basic format, any separator between date and
    time, any number of fractional digits (after the sixth, dropped), ``Z``
    or a ``+HH[:MM[:SS]]`` offset. Python 3.10 refuses fractions of other
    than 3 or 6 digits, so it is not used. Without an offset the result is naive.

    Raises:
        ValueError: ``text`` is not such a date.
    """
    match = _ISO.fullmatch(text)
    if match is None:
        raise ValueError(f"not ISO 8601: {text!r}")
    date = match["date"].replace("-", "")
    if len(date) != 8:
        raise ValueError(f"not ISO 8601: {text!r}")
    zone = None
    if match["zone"] in ("Z", "z"):
        zone = timezone.utc
    elif match["zone"]:
        parts = _ZONE.fullmatch(match["zone"])
        if parts is None:
            raise ValueError(f"not ISO 8601: {text!r}")
        offset = timedelta(
            hours=int(parts["h"]),
            minutes=int(parts["m"] or 0),
            seconds=int(parts["s"] or 0),
            microseconds=_microseconds(parts["f"]),
        )
        zone = timezone(-offset if parts["sign"] == "-" else offset)
    return datetime(
        int(date[:4]),
        int(date[4:6]),
        int(date[6:]),
        int(match["hour"] or 0),
        int(match["minute"] or 0),
        int(match["second"] or 0),
        _microseconds(match["fraction"]),
        tzinfo=zone,
    )


def _timestamp(value: Any, where: str) -> float:
    stamp: float | None = None
    if isinstance(value, str):
        try:
            stamp = parse_iso(value.strip()).timestamp()
        except (ValueError, OverflowError, OSError):
            stamp = None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            stamp = float(value)
        except OverflowError:  # an integer of hundreds of digits
            stamp = math.inf
    if stamp is None:
        raise BundleError(f"{where}: timestamp {value!r} is neither epoch seconds nor ISO 8601")
    if not (math.isfinite(stamp) and EPOCH_MIN <= stamp <= EPOCH_MAX):
        shown = repr(value)
        if len(shown) > 40:
            shown = f"{shown[:12]}... ({len(shown)} characters)"
        raise BundleError(f"{where}: timestamp {shown} is not a time between years 1 and 9999")
    return stamp


def read_transcript(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The meta fields, the message dicts and the number of skipped lines of one file.

    Raises:
        BundleError: a line is too long, not UTF-8, not a JSON object, or has a
            bad timestamp; the message names the file and line.
    """
    meta: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    skipped = 0
    with open(path, "rb") as handle:
        for number, where, record in jsonl.objects(handle, str(path)):
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
    """The session's columns; a title another session holds is dropped when it is added."""
    started = meta.get("timestamp")
    if started is None:
        started = next((m["timestamp"] for m in messages if m.get("timestamp") is not None), mtime)
    try:
        title = (
            titles.sanitize_title(meta.get("title")) if isinstance(meta.get("title"), str) else None
        )
    except ValueError:
        title = None
    return {
        "id": session_id,
        "source": _text(meta.get("platform")) or source,
        "model": _text(meta.get("model")),
        "cwd": _text(meta.get("cwd")),
        "started_at": started,
        "title": title,
    }


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
    """Import one ``<session_id>.jsonl`` file (written as :mod:`.staging` describes).

    Returns ``sessions_added`` (0 when the session already exists),
    ``messages_added`` and ``lines_skipped``.

    Raises:
        BundleError: the file cannot be read as a transcript, or holds neither a
            message nor a ``session_meta`` line (an empty file).
        ImportConflictError: another import into the file is running.
    """
    session_id = path.stem
    if not session_id:
        raise BundleError(f"{path}: the file name gives no session id")
    try:
        check_session_id(session_id)
    except ValueError as exc:
        raise BundleError(f"{path}: the file name is not a usable session id ({exc})") from None
    meta, messages, skipped = read_transcript(path)
    if not meta and not messages:
        # An empty file (or /dev/null) is no transcript: it would add an empty session.
        held = f" ({skipped} line(s) of roles the store does not hold)" if skipped else ""
        raise BundleError(
            f"{path}: no message and no session_meta line{held}; not a transcript, nothing imported"
        )
    mtime = path.stat().st_mtime
    if Session.select().where(Session.id == session_id).exists():
        return {"sessions_added": 0, "messages_added": 0, "lines_skipped": skipped}
    row = _session_row(session_id, meta, messages, source, mtime)
    rows = _message_rows(session_id, path, messages, row["started_at"])
    small = len(rows) <= SMALL_IMPORT
    db = current()
    if not isinstance(db, SqliteFile):
        if small:
            write_at_once_server(db, [row], _COLUMNS, lambda: rows, rename_titles=False)
        else:
            with ServerStaging(db, [session_id]) as server_staging:
                server_staging.insert_messages(rows, _COLUMNS)
                server_staging.finish([row], rename_titles=False)
    elif (
        not small
        or write_at_once(current(), [row], _COLUMNS, lambda: rows, rename_titles=False) is None
    ):
        with Staging(current(), [session_id]) as staging:
            staging.insert_messages(rows, _COLUMNS)
            staging.finish([row], rename_titles=False)
    return {"sessions_added": 1, "messages_added": len(rows), "lines_skipped": skipped}


def _unreadable(file: Path, exc: OSError) -> BundleError:
    return BundleError(f"{file}: cannot be read ({exc.strerror or exc})")


def transcript_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The transcript files ``path`` names: itself, or the ``*.jsonl`` files of a folder.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
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
    check_session_id(source, "source")
    files = transcript_paths(path)
    target = file_path(path, "path")
    single = target is not None and not target.is_dir()
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
        except (BundleError, OSError) as exc:
            if single:
                raise
            error = exc if isinstance(exc, BundleError) else _unreadable(file, exc)
            report["failed"].append({"file": str(file), "error": str(error)})
            if on_error is not None:
                on_error(file, error)
        else:
            report["sessions_added"] += counts["sessions_added"]
            report["sessions_skipped"] += 1 - counts["sessions_added"]
            report["messages_added"] += counts["messages_added"]
            report["lines_skipped"] += counts["lines_skipped"]
        if progress is not None:
            progress(done, len(files))
    return report
