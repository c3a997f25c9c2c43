"""The session listing as plain text: its cells, and a table laid out for a pipe.

``hermes-models sessions`` shows the same cells on a terminal (through rich,
:mod:`hermes_models.cli.views`) and in a pipe (here, without rich: the listing is
what scripts and pagers read, and the command starts faster without it). In a
pipe the table is laid out for ``$COLUMNS`` (80 when unset): the columns a
reader needs whole (id, source, count, time) take their widths, the last one
wraps between words into what is left (a word wider than that is cut into
pieces), lines carry no trailing blanks, and columns are two spaces apart.
When fewer than :data:`NARROWEST` columns would be left for the last column,
each session becomes a block of ``Header: value`` lines instead.

Widths are counted in terminal cells: East Asian wide characters take two,
combining marks none. Control characters are left out of every cell, so a
stored escape sequence never reaches the reader's terminal.

This module imports no third-party package: the command's quick path
(:mod:`hermes_models.quick`) uses it.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..models import Clock

if TYPE_CHECKING:
    from typing import Any

#: Session ids longer than this are shortened to a unique prefix on a narrow terminal...
LONG_ID = 20
#: ...that is, when fewer than this many columns are left for the rest of a table...
TABLE_SPARE = 78
#: ...and never to fewer characters than this (``20260105_0900`` of a Hermes id).
SHORTEST = 13
#: Width of a time cell (``2026-01-05 09:00``).
TIME_WIDTH = 16
#: The narrowest last column a table is laid out with; narrower, rows become blocks.
NARROWEST = 12
#: The width used when the terminal (or ``COLUMNS``) says it has no columns at all.
FALLBACK_WIDTH = 80
#: Space between two columns.
GAP = "  "

#: Control characters (C0, DEL, C1), left out of what is shown.
_NOT_SHOWN = dict.fromkeys([*range(0x00, 0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0)])


def pipe_width(environ: dict[str, str] | None = None) -> int:
    """The width a listing is laid out for when standard output is not a terminal:
    ``$COLUMNS`` when it is a number, else the size of a terminal on standard input,
    output or error, else (or when that says 0) :data:`FALLBACK_WIDTH` — as rich
    decides it."""
    columns = (os.environ if environ is None else environ).get("COLUMNS")
    width = 0
    if columns is not None and columns.isdigit():
        width = int(columns)
    else:
        for descriptor in (0, 1, 2):
            try:
                width = os.get_terminal_size(descriptor).columns
            except (OSError, ValueError):
                continue
            break
    return width if width > 0 else FALLBACK_WIDTH


def shown(text: str) -> str:
    """``text`` without control characters (line breaks kept)."""
    return text if text.isprintable() else text.translate(_NOT_SHOWN)


def cell_width(text: str) -> int:
    """Terminal cells ``text`` takes (one line, control characters already left out)."""
    if text.isascii():
        return len(text)

    width = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def _cut(word: str, width: int) -> list[str]:
    """``word`` in pieces of at most ``width`` cells (a wide character is never split)."""
    pieces: list[str] = []
    piece, used = "", 0
    for char in word:
        size = cell_width(char)
        if used + size > width and piece:
            pieces.append(piece)
            piece, used = "", 0
        piece += char
        used += size
    pieces.append(piece)
    return pieces


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells: its own line breaks kept, each line
    broken between words, a word wider than ``width`` cut into pieces."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line, used = "", 0
        for word in paragraph.split():
            size = cell_width(word)
            if line and used + 1 + size <= width:
                line, used = f"{line} {word}", used + 1 + size
                continue
            if line:
                lines.append(line)
            if size <= width:
                line, used = word, size
                continue
            *whole, line = _cut(word, width)
            lines.extend(whole)
            used = cell_width(line)
        lines.append(line)
    return lines


def short_ids(ids: list[str], unique: Callable[[str], bool], width: int) -> dict[str, str]:
    """Long ``ids`` shortened to prefixes that name one session when ``width`` is too
    narrow for them whole; ``unique(prefix)`` says whether a prefix names one session."""
    longest = max((len(i) for i in ids), default=0)
    if longest + TABLE_SPARE <= width or longest <= LONG_ID:
        return {i: i for i in ids}
    ordered = sorted(set(ids))
    shortened: dict[str, str] = {}
    for index, session_id in enumerate(ordered):
        if len(session_id) <= LONG_ID:
            shortened[session_id] = session_id
            continue
        # Start from the length that tells it apart from its neighbours in this listing.
        length = SHORTEST
        for other in ordered[max(index - 1, 0) : index + 2]:
            if other != session_id:
                common = next(
                    (n for n, (a, b) in enumerate(zip(session_id, other)) if a != b),
                    min(len(session_id), len(other)),
                )
                length = max(length, common + 1)
        while length < len(session_id) and not unique(session_id[:length]):
            length += 1
        shortened[session_id] = session_id[:length]
    return shortened


def time_header(clock: Clock, label: str, epochs: Iterable[Any]) -> str:
    """The header of a time column; the zone on a line of its own when it is long."""
    header = clock.header(label, epochs)
    return header if len(header) <= TIME_WIDTH + 2 else header.replace(" (", "\n(", 1)


def title_and(title: Any, more: Any) -> tuple[str, str]:
    """A session's title, and what goes under it (its preview): either may be empty."""
    return str(title or ""), str(more or "")


#: The listing's columns: header, whether right-aligned.
SESSION_COLUMNS = (("ID", False), ("Source", False), ("Msgs", True))


def session_cells(
    rows: Sequence[dict[str, Any]], clock: Clock, ids: dict[str, str]
) -> tuple[list[str], list[tuple[str, str, str, str, tuple[str, str]]]]:
    """The listing's headers and, for each row, its cells (the last: title, preview)."""
    headers = [
        *(name for name, _ in SESSION_COLUMNS),
        time_header(clock, "Last active", (row.get("last_active") for row in rows)),
        "Title / preview",
    ]
    cells = [
        (
            ids.get(row["id"], row["id"]),
            row.get("source") or "",
            str(row.get("message_count") or 0),
            clock.cell(row.get("last_active")),
            title_and(row.get("title"), row.get("preview")),
        )
        for row in rows
    ]
    return headers, cells


def _joined(title_preview: tuple[str, str]) -> str:
    title, preview = title_preview
    return f"{title}\n{preview}" if title and preview else title or preview


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: whole when it fits, else cut with ``…``."""
    if cell_width(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = cell_width(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


def sessions_text(
    rows: Sequence[dict[str, Any]],
    clock: Clock,
    ids: dict[str, str],
    width: int,
    *,
    wide: bool = True,
) -> str:
    """The listing laid out in ``width`` columns, for a pipe (see the module docstring);
    unless ``wide``, one line a session: the title, then the preview, cut to the room
    left with ``…``."""
    headers, cells = session_cells(rows, clock, ids)
    if not wide:
        return _one_line_each(headers, cells, width)
    table = [[shown(c) for c in (*row[:4], _joined(row[4]))] for row in cells]
    headers = [shown(h) for h in headers]
    fixed = [
        max(
            [cell_width(line) for line in headers[n].split("\n")]
            + [cell_width(row[n]) for row in table]
            + ([TIME_WIDTH] if n == 3 else [])
        )
        for n in range(4)
    ]
    room = width - sum(fixed) - len(GAP) * 4
    natural = max(cell_width(line) for row in [headers, *table] for line in row[4].split("\n"))
    if room < min(natural, NARROWEST) or room < 1:
        return _blocks(headers, table, width)
    last = min(natural, room)
    out: list[str] = []
    for row in [headers, *table]:
        columns = [c.split("\n") for c in row[:4]]
        columns.append(wrap(row[4], last))
        for index in range(max(len(c) for c in columns)):
            parts = []
            for n, lines in enumerate(columns):
                text = lines[index] if index < len(lines) else ""
                pad = " " * ((fixed[n] if n < 4 else last) - cell_width(text))
                right = n < 3 and SESSION_COLUMNS[n][1]
                parts.append(pad + text if right else text + pad)
            out.append(GAP.join(parts).rstrip())
    return "\n".join(out) + "\n"


def _one_line_each(headers: list[str], cells: Sequence[Sequence[Any]], width: int) -> str:
    """Headers and rows one line each in ``width`` columns, the last column cut."""
    lines = [[" ".join(shown(h).split()) for h in headers]]
    for row in cells:
        parts = [" ".join(shown(c).split()) for c in row[:4]]
        title, preview = (" ".join(shown(p).split()) for p in row[4])
        parts.append(" · ".join(p for p in (title, preview) if p))
        lines.append(parts)
    fixed = [max(cell_width(line[n]) for line in lines) for n in range(4)]
    room = width - sum(fixed) - len(GAP) * 4
    if room < NARROWEST:  # too narrow for a line each: stacked, nothing cut
        table = [[shown(c) for c in (*row[:4], _joined(row[4]))] for row in cells]
        return _blocks([shown(h) for h in headers], table, width)
    out = []
    for line in lines:
        parts = []
        for n, text in enumerate(line[:4]):
            pad = " " * (fixed[n] - cell_width(text))
            right = n < 3 and SESSION_COLUMNS[n][1]
            parts.append(pad + text if right else text + pad)
        parts.append(cut(line[4], room))
        out.append(GAP.join(parts).rstrip())
    return "\n".join(out) + "\n"


def _blocks(headers: list[str], table: list[list[str]], width: int) -> str:
    """Each row as ``Header: value`` lines, rows a blank line apart."""
    out: list[str] = []
    for row in table:
        if out:
            out.append("")
        for header, value in zip(headers, row):
            label = " ".join(header.split())
            for line in wrap(f"{label}: {value}", max(width, 1)):
                out.append(line.rstrip())
    return "\n".join(out) + "\n"
