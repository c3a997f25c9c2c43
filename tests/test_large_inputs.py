"""Nothing grows faster than linearly in one input: one large message, one long query,
one long chain of sessions.

``hermes-models show`` of one large message was quadratic (4 MB 6.5 s, 20 MB 288 s):
rich lays a wrapped paragraph out as one segment holding every line, and its
``Segment.split_and_crop_lines`` copies the rest of that segment at each line end;
rich's ``Text`` also builds several objects for every line (4 MB of short lines:
17 s). The transcript's text is now laid out by ``terminal.PlainText``: the same
lines, checked here against rich's own layout, in time linear in the text.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import examples
from console_script import run
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich._wrap import divide_line
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from hermes_models import SessionDB
from hermes_models.cli.terminal import (
    _SECOND_CELL,
    LONG_LINE,
    PlainText,
    _breaks,
    _cell_image,
    _shown_image,
    emit,
)


def _emitted(renderable: object, width: int) -> str:
    out = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    emit(out, renderable)  # type: ignore[arg-type]
    return out.file.getvalue()  # type: ignore[attr-defined]


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=" ab", max_size=60), st.integers(min_value=1, max_value=14))
def test_a_line_breaks_where_rich_breaks_it(line: str, width: int) -> None:
    assert _breaks(line, width) == divide_line(line, width)


#: Text a message may hold: words, runs of blanks, tabs, line ends, control
#: characters, CJK (two cells), combining marks (none).
_PIECES = [" ", "  ", "a", "bc", "word", "\n", "\t", "\r", "\x1b", "漢", "é", "\u0301"]
_MESSAGE = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


@settings(max_examples=examples(200), deadline=None)
@given(_MESSAGE, st.integers(min_value=1, max_value=30))
def test_a_message_is_laid_out_as_rich_lays_it_out(text: str, width: int) -> None:
    assert _emitted(PlainText(text), width) == _emitted(Text(text), width)


def test_a_large_paragraph_is_laid_out_as_rich_lays_it_out() -> None:
    rng = random.Random(7)
    words = ["a", "to", "the", "between", "x" * 95, "   ", "漢字"]
    text = "\n".join(
        " ".join(rng.choice(words) for _ in range(rng.randrange(400))) for _ in range(30)
    )
    for width in (10, 97):
        assert _emitted(PlainText(text), width) == _emitted(Text(text), width)


def _shown(tmp_path: Path, message: str) -> tuple[list[str], list[str]]:
    """``hermes-models show`` of a session holding ``message`` alone, through the
    console script: every line printed, and the lines of the message's text."""
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("big", "cli")
        store.append_message("big", "user", message)
    done = run("show", "big", "--db", str(tmp_path / "state.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    body = lines[lines.index(next(line for line in lines if line.startswith("user"))) + 1 :]
    return lines, body


@pytest.mark.slow  # a 20 MB message through the console script (about 1.5 s)
def test_show_of_a_20_mb_message_takes_linear_time(tmp_path: Path) -> None:
    # Prose in lines of 5,000 characters: every line wrapped at 80 columns.
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    prose = " ".join(rng.choice(words) for _ in range(3_400_000))
    message = "\n".join(prose[i : i + 5000] for i in range(0, len(prose), 5000))
    assert len(message) > 20_000_000
    # The old layout took 288 s for this: it ran into run()'s guard of 120 s. Now about 1 s.
    lines, body = _shown(tmp_path, message)
    assert max(len(line) for line in lines) <= 80
    assert " ".join(" ".join(body).split()) == " ".join(message.split())


#: Characters of one cell (ASCII, accented Latin) and of two (CJK, emoji), as rich
#: measures them: lines of them are laid out by PlainText itself, not by rich.
_WIDE_LINE = st.text(alphabet=" ab漢é🙂", max_size=60)


def _line_offsets(image: str, offsets: list[int]) -> list[int]:
    """Offsets in a line's cell image as offsets in the line (a wide character's
    second cell is a character of the image only)."""
    return [offset - image.count(_SECOND_CELL, 0, offset) for offset in offsets]


@settings(max_examples=examples(300), deadline=None)
@given(_WIDE_LINE, st.integers(min_value=1, max_value=14))
@example("漢 漢漢", 1)  # an empty piece before a wide character: two breaks at one place
@example("a漢 漢漢a", 3)  # a wide character that does not fit goes to the next piece
def test_a_line_of_wide_characters_breaks_where_rich_breaks_it(line: str, width: int) -> None:
    image = _cell_image(line)
    assert image is not None
    assert _line_offsets(image, _breaks(image, width)) == divide_line(line, width)


_WIDE_PIECES = [" ", "  ", "a", "word", "café", "漢", "漢字", "テキスト", "🙂", "中文English", "\n"]
_WIDE_MESSAGE = st.lists(st.sampled_from(_WIDE_PIECES), max_size=60).map("".join)


@settings(max_examples=examples(300), deadline=None)
@given(_WIDE_MESSAGE, st.integers(min_value=1, max_value=30))
@example("漢字 テキスト🙂 café\n  漢字漢字漢字 a", 1)
@example("中文English 漢字漢字漢字漢字  a\ncafé 漢字🙂🙂🙂 word", 5)
def test_a_message_of_wide_characters_is_laid_out_as_rich_lays_it_out(
    text: str, width: int
) -> None:
    assert all(_cell_image(line) is not None for line in text.split("\n"))
    assert _emitted(PlainText(text), width) == _emitted(Text(text), width)


@pytest.mark.parametrize(
    "line",
    [
        "漢字\u3000テキスト",  # an ideographic space: a blank of two cells
        "non\xa0breaking",  # a blank rich breaks lines at
        "e\u0301te\u0301",  # a combining mark: no cell of its own
        "👍\ufe0f ok",  # a variation selector: changes the width of the one before
        "👨\u200d👩 family",  # a zero-width joiner
        "a\tb",  # a tab: rich expands it
    ],
)
def test_a_line_rich_measures_otherwise_goes_through_rich(line: str) -> None:
    assert _cell_image(line) is None
    text = " ".join([line] * 20)
    for width in (1, 3, 10):
        assert _emitted(PlainText(text), width) == _emitted(Text(text), width)


def test_a_large_paragraph_of_wide_characters_is_laid_out_as_rich_lays_it_out() -> None:
    rng = random.Random(7)
    words = ["a", "the", "café", "漢字", "テキスト", "🙂", "漢" * 95, "x" * 95, "   ", "中文En"]
    text = "\n".join(
        " ".join(rng.choice(words) for _ in range(rng.randrange(400))) for _ in range(30)
    )
    for width in (7, 80):
        assert _emitted(PlainText(text), width) == _emitted(Text(text), width)


@pytest.mark.slow  # a 20 MB message through the console script (about 1.1 s)
def test_show_of_a_20_mb_line_of_cjk_is_wrapped_whole(tmp_path: Path) -> None:
    # One line of 7 million characters, wide but for one in eight: lines of 80 cells
    # and of 79 (a wide character that does not fit goes to the next).
    message = "漢字のテキストé" * (20_000_000 // 23)
    _, body = _shown(tmp_path, message)
    assert "".join(body) == message
    widths = [cell_len(line) for line in body if line]
    assert max(widths) <= 80
    assert min(widths[:-1]) >= 79
    # rich's own layout took 6.4 s (its wrapping measures a word a character at a
    # time), PlainText's 1.1 s (benchmarks/large_inputs.py); that such lines take
    # PlainText's own path, not rich's, is what the tests above check.


# -- one long query ---------------------------------------------------------------------

#: Queries of a megabyte, in the shapes that cost most: one term of a million
#: characters (a phrase of half a million prefixes, CJK, a quoted phrase) and a
#: million characters of words (read one by one, repeats and all). Before: the
#: prefixes took 1.3 GB, the CJK term minutes, the words 5 s.
_MEGABYTE_QUERIES = {
    "prefixes": "a*" * 500_000,
    "cjk": "漢" * 1_000_000,
    "phrase": '"' + "a " * 499_999 + '"',
    "words": "ab " * 333_333,
    "operators": "a OR " * 200_000,
}


@pytest.fixture
def one_message(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "ab a 漢字 " + "a*" * 2000)
    return path


@pytest.mark.parametrize("shape", sorted(_MEGABYTE_QUERIES))
def test_a_query_of_a_megabyte_is_refused_by_name(
    one_message: Path, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    query = _MEGABYTE_QUERIES[shape]
    with SessionDB(one_message) as store, caplog.at_level("WARNING", "hermes_models"):
        assert store.search_messages(query, time_budget=None) == []
        assert store.search_sessions(query, time_budget=None) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"search refused: the query has {len(query)} characters, more than the"
        " 65536 characters it may have; nothing was searched"
    ] * 2


def test_the_longest_query_and_terms_are_answered(
    one_message: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SessionDB(one_message) as store, caplog.at_level("WARNING", "hermes_models"):
        # 65,536 characters of one repeated word: one term, one hit.
        words = ("ab " * 21_846)[:65_536]
        assert [hit["session_id"] for hit in store.search_messages(words)] == ["s"]
        # A phrase of 256 words is looked up (the message holds it); one of 257 is not.
        assert [hit["session_id"] for hit in store.search_messages('"' + "a " * 256 + '"')] == ["s"]
        assert store.search_messages('"' + "a " * 257 + '"') == []
        assert store.search_messages("a*" * 10_000) == []
        # A CJK term as long as a query may be is searched (a scan, not an index).
        assert store.search_messages("漢" * 65_536) == []
    assert [r.getMessage() for r in caplog.records] == [
        "search refused: a term of the query has 257 words, more than the 256 words it may"
        " have; nothing was searched",
        "search refused: a term of the query has 10000 words, more than the 256 words it may"
        " have; nothing was searched",
    ]


_MEMORY_OF = """
import re, sys
from hermes_models import SessionDB
with SessionDB(sys.argv[1]) as store:
    store.search_messages(sys.argv[2] * int(sys.argv[3]), time_budget=None)
# The peak resident memory of this program (ru_maxrss would count the parent's too).
with open("/proc/self/status") as status:
    print(re.search(r"VmHWM:\\s*(\\d+) kB", status.read()).group(1))
"""


@pytest.mark.slow  # a process per query (about 0.4 s each)
@pytest.mark.parametrize(("unit", "count"), [("a*", 500_000), ("漢", 1_000_000), ("ab ", 333_333)])
def test_a_query_of_a_megabyte_takes_under_100_mb(one_message: Path, unit: str, count: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_OF, str(one_message), unit, str(count)],
        cwd=one_message.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # Before: 350 MB for the prefixes, minutes for the CJK term.
    assert int(done.stdout) < 100_000  # kilobytes


# -- long lines rich would lay out itself ----------------------------------------------------

#: What rich lays out itself (a blank other than the space, a character of no cell, a
#: tab, ESC), beside words, CJK and emoji.
_EXOTIC = [
    "mot",
    "漢字",
    "👨",
    "\u00a0",
    "\u3000",
    "\u200d",
    "\ufe0f",
    "e\u0301",
    "\t",
    "\x1b",
    " ",
]


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.sampled_from(_EXOTIC), min_size=1, max_size=400),
    st.integers(min_value=1, max_value=40),
)
def test_a_long_line_rich_would_lay_out_itself_is_shown_as_rich_shows_its_image(
    parts: list[str], width: int
) -> None:
    # 20 MB in one line of emoji joined by ZWJ took 5 s through rich, of words between
    # no-break spaces 8 s. A line of LONG_LINE characters or more is shown as rich
    # shows its image: blanks as spaces, what takes no cell (a joiner, a variation
    # selector, a combining mark, ESC) left out; shorter ones still go through rich.
    line = "".join(parts)
    line = (line * (LONG_LINE // len(line) + 1))[: LONG_LINE + len(line)]
    shown = _shown_image(line).replace(_SECOND_CELL, "")
    assert _cell_image(shown) is not None  # nothing rich would lay out otherwise
    assert shown == "".join(
        " " * max(cell_len(c), 1) if c.isspace() else c if c.isprintable() and cell_len(c) else ""
        for c in line
    )
    assert _emitted(PlainText(line), width) == _emitted(Text(shown), width)
    short = "".join(parts)[: LONG_LINE - 1]
    try:
        expected = _emitted(Text(short), width)
    except ZeroDivisionError:
        # rich 15 cannot lay out some such lines (joiners before a character wider than
        # the width): PlainText then shows the line as rich shows its image.
        expected = _emitted(Text(_shown_image(short).replace(_SECOND_CELL, "")), width)
    assert _emitted(PlainText(short), width) == expected


@pytest.mark.slow  # 20 MB through the console script, four times (about 6 s)
@pytest.mark.parametrize(
    "unit",
    ["👨\u200d👩\u200d👧 family ", "❤\ufe0f love ", "mot\u00a0français ", "日本語\u3000テキスト"],
)
def test_show_of_a_20_mb_line_rich_would_lay_out_itself_is_whole(tmp_path: Path, unit: str) -> None:
    message = unit * (20_000_000 // len(unit.encode("utf-8")))
    _, body = _shown(tmp_path, message)
    assert max(cell_len(line) for line in body) <= 80
    shown = _shown_image(message).replace(_SECOND_CELL, "")
    assert "".join(body).replace(" ", "") == shown.replace(" ", "")


def test_a_line_rich_cannot_split_is_shown_as_its_image() -> None:
    # rich 15 divides by zero cutting "\u200d\u200d漢字" to one cell; the line is
    # shown as rich shows its image (the joiners take no cell), not a crash.
    line = "\u200d\u200d漢字"
    assert _emitted(PlainText(line), 1) == _emitted(Text("漢字"), 1)
    assert _emitted(PlainText(line), 4) == _emitted(Text(line), 4)
