"""What ``hermes-models`` prints: consoles, records for scripts, progress and times.

People get rich renderables laid out for the terminal's width: wrapped, never
cut, and without the padding rich puts after the last column of a table; a
table too wide for the terminal is printed as one block per row. Stored text
is never read as markup, and its control characters never reach the terminal.
Scripts get records (a list of flat dicts) as one JSON array (``--json``, as
sqlite-utils and ``llm logs`` print it), one JSON object per line (``--nl``),
or CSV/TSV with a header row; values that are lists or dicts become JSON text
in CSV/TSV cells.

When the reader of standard output goes away (``| head``), output stops
quietly with exit status 0.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich.cells import get_character_cell_size
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.control import STRIP_CONTROL_CODES, strip_control_codes
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from ..models import Clock
from .grid import FALLBACK_WIDTH

#: The ``--json``/``--nl``/``--csv``/``--tsv`` formats.
FORMATS = ("json", "nl", "csv", "tsv")


def stop_quietly() -> NoReturn:
    """The reader of standard output went away: send the rest nowhere and exit with 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # standard output is not a real file (tests); nothing more can be written
    raise click.exceptions.Exit(0)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        stop_quietly()


def console(*, stderr: bool = False) -> Console:
    """A console on standard output (or error) that prints text literally: no
    markup (a stored ``[/]`` is text), no highlighting, no emoji codes."""
    out = _Console(highlight=False, markup=False, stderr=stderr, emoji=False)
    if out.width < 1:  # COLUMNS=0, or a terminal that reports no size
        out.width = FALLBACK_WIDTH
    return out


#: Control characters (C0, DEL, C1): a stored escape sequence must not reach the
#: terminal (a title that sets the window's, a message that clears the screen).
#: rich lays them out as taking no cell, so leaving them out keeps every column.
_NOT_SHOWN = dict.fromkeys([*range(0x00, 0x20), *range(0x7F, 0xA0)])


def _shown(line: list[Segment]) -> list[Segment]:
    """``line`` without control characters in its text."""
    return [
        segment
        if segment.control or segment.text.isprintable()
        else Segment(segment.text.translate(_NOT_SHOWN), segment.style)
        for segment in line
    ]


def _rstrip(line: list[Segment]) -> list[Segment]:
    """``line`` without trailing blanks that show nothing (no background colour)."""
    kept = list(line)
    while kept:
        last = kept[-1]
        if last.control or (last.style is not None and last.style.bgcolor is not None):
            break
        text = last.text.rstrip(" ")
        if text:
            kept[-1] = Segment(text, last.style)
            break
        kept.pop()
    return kept


def _wider_than(width: int, rendered: list[Segment]) -> bool:
    """Whether a line of ``rendered`` needs more than ``width`` columns (a table whose
    unbreakable columns do not fit: rich would cut its lines)."""
    return any(
        Segment.get_line_length(_rstrip(line)) > width for line in Segment.split_lines(rendered)
    )


def stacked(table: Table) -> RenderableType:
    """``table`` as one block per row, a line per column (``Header: cell``): what a
    table becomes on a terminal too narrow for its columns, so that nothing is cut."""
    columns = [(" ".join(str(c.header).split()), list(c.cells)) for c in table.columns]
    blocks: list[RenderableType] = []
    for index in range(table.row_count):
        if blocks:
            blocks.append(Text(""))
        for header, cells in columns:
            cell = cells[index]
            line = Text(f"{header}: ", style="bold")
            line.append_text(cell if isinstance(cell, Text) else Text(str(cell)))
            blocks.append(line)
    return Group(*blocks)


_NOT_BLANK = re.compile(r"[^ ]")

#: In a line's cell image (:func:`_cell_image`), what follows a character rich gives
#: two cells: its second cell. Not printable, so never in a line laid out here.
_SECOND_CELL = "\x00"
#: What a character rich gives no cell (a combining mark, a variation selector)
#: becomes in a cell image: such a line goes through rich's ``Text``.
_NO_CELL = "\x01"


class _CellImages(dict[int, str]):
    """Each character's text in a cell image, for ``str.translate``: the character,
    followed by :data:`_SECOND_CELL` where rich's ``get_character_cell_size`` gives it
    two cells, or :data:`_NO_CELL` where it gives none. Learnt a character at a time,
    as lines bring them (a text holds a few thousand different characters at most)."""

    __slots__ = ()

    def __missing__(self, code: int) -> str:
        character = chr(code)
        cells = get_character_cell_size(character)
        image = _NO_CELL if cells < 1 else character if cells == 1 else character + _SECOND_CELL
        self[code] = image
        return image


_CELL_IMAGES = _CellImages()

#: A line of at least this many characters that rich would lay out itself (see
#: :func:`_cell_image`) is shown as it would show :func:`_shown_image` of it: rich's
#: layout of such a line takes seconds (20 MB of emoji joined by ZWJ: 5 s; of words
#: between no-break spaces: 8 s).
LONG_LINE = 10_000


class _ShownImages(dict[int, str]):
    """Each character's text in the cell image of a long line (:data:`LONG_LINE`): as
    in :class:`_CellImages`, except that a blank is a space a cell (a no-break space
    one, an ideographic space two), a tab one space, and a character of no cell or
    not printable (a combining mark, a variation selector, a joiner, ESC) nothing."""

    __slots__ = ()

    def __missing__(self, code: int) -> str:
        character = chr(code)
        cells = get_character_cell_size(character)
        if character.isspace():
            image = " " * max(cells, 1)
        elif not character.isprintable() or cells < 1:
            image = ""
        else:
            image = character if cells == 1 else character + _SECOND_CELL
        self[code] = image
        return image


_SHOWN_IMAGES = _ShownImages()


def _shown_image(line: str) -> str:
    """The cell image of a long line (:class:`_ShownImages`): every character shown a
    cell (or two) at a time, blanks as spaces, what takes no cell left out."""
    return line.translate(_SHOWN_IMAGES)


def _cell_image(line: str) -> str | None:
    """``line`` a character a cell, as rich measures it (a wide character followed by
    :data:`_SECOND_CELL`), or None where rich lays it out otherwise than a character
    at a time: a tab, a control character, a blank other than the space (rich breaks
    lines at any), a character of no cell (rich joins it to the one before)."""
    if line.isascii():
        return line if line.isprintable() else None
    if not line.isprintable():  # the space is the one printable blank
        return None
    image = line.translate(_CELL_IMAGES)
    return None if _NO_CELL in image else image


def _pieces(image: str, word: int, after: int, width: int) -> Sequence[int]:
    """Where rich's ``chop_cells`` starts the pieces of ``image[word:after]``, a word
    longer than ``width`` and the blanks after it: each piece as many cells as fit in
    ``width``, a wide character that does not fit going to the next. In a width of 1
    a wide character is a piece of its own (two cells), and, first in the word, comes
    after an empty piece (rich breaks the line twice there)."""
    if image.find(_SECOND_CELL, word, after) < 0:
        return range(word, after, width)  # a cell a character: no step per piece here
    pieces: list[int] = []
    if width == 1 and image.startswith(_SECOND_CELL, word + 1):
        pieces.append(word)
    piece = word
    while piece < after:
        pieces.append(piece)
        cut = piece + width
        if cut < after and image[cut] == _SECOND_CELL:  # cuts a wide character in two
            cut = cut - 1 if cut - 1 > piece else cut + 1
        piece = cut
    return pieces


def _breaks(image: str, width: int) -> list[int]:
    """Where rich's ``Text.wrap`` breaks a line of cell image ``image``
    (:func:`_cell_image`) to fit ``width`` cells: its rule, a line at a time. The
    offsets are the image's (one per cell); in printable ASCII, the line's own.

    rich's words are runs of blanks, then others, then blanks (the first word keeps
    the line's leading blanks). A word fits while its last non-blank is within
    ``width`` cells of the line's start; the first that does not starts the next
    line, or, longer than ``width`` itself, is cut in pieces of ``width`` cells from
    its start (:func:`_pieces`), the line after its last piece going on behind it.
    Each step is one search of the text (``str.find``), not one Python step per
    word."""
    breaks: list[int] = []
    end = len(image.rstrip(" "))
    first = _NOT_BLANK.search(image)
    if first is None:
        return breaks
    leading = first.start()
    start = 0  # where the current line starts
    while start + width < end:
        limit = start + width
        if image[limit] == " ":
            found = _NOT_BLANK.search(image, limit)
            if found is None:
                break
            run = found.start()
        else:  # a non-blank, or the second cell of a wide character that does not fit
            run = image.rfind(" ", 0, limit) + 1
        word = run if run > leading else 0
        last = image.find(" ", run)
        last = len(image) if last < 0 else last  # just after the word's last non-blank
        if last - word > width:
            found = _NOT_BLANK.search(image, last)
            after = len(image) if found is None else found.start()
            pieces = _pieces(image, word, after, width)
            breaks.extend(piece for piece in pieces if piece)
            if after == len(image):  # the last word: no line after its last piece
                break  # (which, a wide character in a width of 1, is wider than the width)
            start = pieces[-1]
        else:
            breaks.append(word)
            start = word
    return breaks


class _LaidOut(str):
    """Whole lines, each ending in a line end, that :func:`emit` prints as they are:
    printable characters of one or two cells, at most the width, no trailing blank
    (:class:`PlainText`)."""

    __slots__ = ()


#: The control characters rich's ``strip_control_codes`` takes out (bell, backspace, ...).
_STRIPPED_CODES = tuple(map(chr, STRIP_CONTROL_CODES))


class PlainText:
    """Unstyled text laid out as :func:`emit` lays out ``Text(text)``, in time linear
    in it.

    rich builds several objects for every line of a ``Text``, and emit a few more:
    a message of 4 MB in 360,000 short lines took 17 s to show, and its wrapping
    measures a long word a character at a time (20 MB of CJK in one line: 6.4 s).
    A run of lines of printable characters, each of one or two cells as rich
    measures them, is given as one block of whole lines (:class:`_LaidOut`): each
    line broken where rich breaks it (:func:`_breaks`, on the line's cell image) and
    cropped to the width and right-trimmed, as rich and emit would. A line with a
    tab, a control character, a blank other than the space or a character of no
    cell (:func:`_cell_image`) goes through ``Text`` itself, unless it is
    :data:`LONG_LINE` characters or more: it is then laid out as rich lays out
    :func:`_shown_image` of it (blanks shown as spaces, what takes no cell left out).
    """

    def __init__(self, text: str) -> None:
        # rich's strip_control_codes (str.translate with a table missing most
        # characters) takes 0.4 s for 20 MB of CJK, which holds none of them.
        stripped = any(code in text for code in _STRIPPED_CODES)
        self.text = strip_control_codes(text) if stripped else text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        block: list[str] = []
        wide = False  # whether the block holds second cells to take out
        for line in self.text.split("\n"):
            image = _cell_image(line)
            if image is None and len(line) < LONG_LINE:
                try:
                    # rich 15 divides by zero splitting some lines (joiners before a
                    # character wider than the width): those are laid out as below.
                    laid_out = list(console.render(Text(line), options))
                except ZeroDivisionError:
                    image = _shown_image(line)
                    line = image.replace(_SECOND_CELL, "")
                else:
                    if block:
                        yield Segment(_LaidOut(_characters(block, wide)))
                        block, wide = [], False
                    yield from laid_out
                    continue
            if image is None and len(line) >= LONG_LINE:
                image = _shown_image(line)
                line = image.replace(_SECOND_CELL, "")
            if image is None:
                if block:
                    yield Segment(_LaidOut(_characters(block, wide)))
                    block, wide = [], False
                yield from console.render(Text(line), options)
            elif len(image) <= width:
                block.append(line.rstrip(" ") + "\n")
            else:
                wide = wide or len(image) > len(line)
                start = 0
                for offset in (*_breaks(image, width), len(image)):
                    # rich crops a line to the width, a wide character cut in two
                    # becoming a blank (which emit trims).
                    cut = start + width
                    if cut >= offset:
                        cut = offset
                    elif image[cut] == _SECOND_CELL:
                        cut -= 1
                    block.append(image[start:cut].rstrip(" ") + "\n")
                    start = offset
        if block:
            yield Segment(_LaidOut(_characters(block, wide)))


def _characters(images: list[str], wide: bool) -> str:
    """The text of lines of cell images: without their second cells if ``wide``."""
    text = "".join(images)
    return text.replace(_SECOND_CELL, "") if wide else text


def _cropped_lines(segments: Iterable[Segment], width: int) -> Iterator[list[Segment]]:
    """``segments`` as lines of at most ``width`` cells, without their line ends.

    What rich's ``Segment.split_and_crop_lines`` does, in time linear in the text:
    rich lays a wrapped paragraph out as one segment holding every line, and that
    function copies the rest of a segment at each line end (a 20 MB message took
    288 s to show)."""
    line: list[Segment] = []
    for segment in segments:
        if isinstance(segment.text, _LaidOut) and not line:
            yield [segment]
            continue
        if segment.control or "\n" not in segment.text:
            line.append(segment)
            continue
        *ended, rest = segment.text.split("\n")
        for text in ended:
            if text:
                line.append(Segment(text, segment.style))
            yield Segment.adjust_line_length(line, width, pad=False)
            line = []
        if rest:
            line.append(Segment(rest, segment.style))
    if line:
        yield Segment.adjust_line_length(line, width, pad=False)


def emit(out: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` laid out for the console's width, lines right-trimmed; a
    table too wide for it is printed :func:`stacked`."""
    options = out.options
    rendered = list(out.render(renderable, options))  # laid out once
    if isinstance(renderable, Table) and _wider_than(options.max_width, rendered):
        rendered = list(out.render(stacked(renderable), options))
    segments: list[Segment] = []
    for line in _cropped_lines(rendered, options.max_width):
        if line and isinstance(line[0].text, _LaidOut):
            segments.append(line[0])
            continue
        segments.extend(_rstrip(_shown(line)))
        segments.append(Segment.line())
    out.print(Segments(segments), end="", crop=False)


#: The pager a long page goes through on a terminal when ``$PAGER`` names none: less,
#: quitting when the text fits one screen, keeping colours, leaving the screen as is.
DEFAULT_PAGER = "less -FRX"


@contextmanager
def paged(out: Console, *, enabled: bool = True) -> Iterator[None]:
    """What the block prints to ``out``, through a pager when ``out`` is a terminal and
    the text is taller than its screen (``$PAGER``, else :data:`DEFAULT_PAGER`);
    straight out in a pipe, when not ``enabled``, or when the pager cannot start."""
    if not enabled or not out.is_terminal:
        yield
        return
    with out.capture() as captured:
        yield
    text = captured.get()
    if text.count("\n") < out.height:
        out.file.write(text)
        out.file.flush()
        return
    command = shlex.split(os.environ.get("PAGER") or DEFAULT_PAGER)
    try:
        pager = subprocess.Popen(command, stdin=subprocess.PIPE)
    except OSError:  # no such pager: the text as it is
        out.file.write(text)
        out.file.flush()
        return
    try:
        pager.communicate(text.encode("utf-8", "replace"))
    except BrokenPipeError:
        pass  # the reader quit the pager early
    except KeyboardInterrupt:
        pager.kill()
        pager.wait()


def say(text: str, *, err: bool = False) -> None:
    """A line for people: wrapped between words on a terminal, kept whole in a pipe."""
    out = console(stderr=err)
    if out.is_terminal:
        emit(out, Text(text))
    else:
        try:
            click.echo(text, err=err)
        except BrokenPipeError:
            stop_quietly()


# -- records for scripts ------------------------------------------------------------------


@contextmanager
def utf8_stdout(errors: str = "strict") -> Iterator[Any]:
    """Standard output as UTF-8 text, whatever the locale says (``errors`` as for
    :func:`open`)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        yield sys.stdout
        return
    sys.stdout.flush()
    stream = io.TextIOWrapper(
        buffer, encoding="utf-8", errors=errors, newline="\n", write_through=True
    )
    try:
        yield stream
    finally:
        try:
            stream.flush()
        finally:
            stream.detach()


def write_text(text: str) -> None:
    """``text`` on standard output as UTF-8 (for a pipe: what a listing lays out itself)."""
    try:
        with utf8_stdout() as stream:
            stream.write(text)
    except BrokenPipeError:
        stop_quietly()


def _binary(value: Any) -> dict[str, str]:
    """A BLOB (a newer Hermes' ``display_identity``, content another program stored as
    bytes) as export bundles carry one: ``{"$base64": "..."}``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=_binary)


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return list(names)


def _escape_surrogates(text: str) -> str:
    """JSON ``text`` with each lone surrogate written as a ``\\uXXXX`` escape (valid
    JSON and UTF-8; Python's ``json`` reads the surrogate back, which ``os.fsencode``
    turns into the file name's byte)."""
    try:
        text.encode("utf-8")
        return text  # no surrogate: the common case, checked in C
    except UnicodeEncodeError:
        pass
    return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in text)


def write_records(rows: Iterable[dict[str, Any]], fmt: str) -> None:
    """Print ``rows`` as ``json`` (one array), ``nl`` (an object a line), ``csv`` or ``tsv``.

    A file name that is not UTF-8 (its bytes held as lone surrogates, as Python
    decodes them) keeps its bytes in CSV and TSV, as ``ls`` prints them, and
    gets ``\\udcXX`` escapes in JSON. A BLOB is ``{"$base64": "..."}``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt: unknown output format {fmt!r}")
    try:
        with utf8_stdout(errors="surrogateescape") as stream:
            if fmt in ("csv", "tsv"):
                table = list(rows)
                names = _columns(table)
                if not names:
                    return

                writer = csv.writer(stream, dialect="excel-tab" if fmt == "tsv" else "excel")
                writer.writerow(names)
                for row in table:
                    writer.writerow([_cell(row.get(name)) for name in names])
                return
            first = True
            for row in rows:
                text = _escape_surrogates(json.dumps(row, ensure_ascii=False, default=_binary))
                if fmt == "nl":
                    stream.write(text + "\n")
                else:
                    stream.write(("[" if first else ",\n ") + text)
                first = False
            if fmt == "json":
                stream.write("[]\n" if first else "]\n")
    except BrokenPipeError:
        stop_quietly()


# -- progress -----------------------------------------------------------------------------


@contextmanager
def progress(label: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error, drawn on a terminal only; yields the callback.
    ``unit`` names what the callback counts (``messages``): ``exporting ━━━ 200/1000
    messages 0:00:01``."""
    # rich.progress is loaded when a bar is drawn: the CLI starts faster.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    err = console(stderr=True)
    columns = (label, BarColumn(), MofNCompleteColumn(), unit, TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def working(label: str) -> Iterator[None]:
    """A spinner with the elapsed time on standard error (a terminal only) for work
    whose length is unknown."""
    # rich.progress is loaded when a spinner is drawn: the CLI starts faster.
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = console(stderr=True)
    columns = (SpinnerColumn(), TextColumn(label), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        bar.add_task(label, total=None)
        yield


__all__ = [
    "FORMATS",
    "Clock",
    "console",
    "emit",
    "progress",
    "say",
    "stop_quietly",
    "utf8_stdout",
    "working",
    "write_records",
    "write_text",
]
