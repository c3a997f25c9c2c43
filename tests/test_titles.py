"""Session titles: cleaning, uniqueness, lookup and lineage numbering."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.conversations.titles import MAX_TITLE_LENGTH, sanitize_title, split_title
from hermes_models.driver import sqlite3

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("fix the build", "fix the build"),
        ("  padded  ", "padded"),
        ("many   inner\t\tspaces", "many inner spaces"),
        ("line\nbreaks\r\nand\vtabs\f", "line breaks and tabs"),
        ("nbsp\u00a0and\u2003em\u3000ideographic", "nbsp and em ideographic"),
        ("bell\x07 nul\x00 esc\x1b[31m", "bell nul esc[31m"),
        ("del\x7f and c1\x85\x9b", "del and c1"),
        ("zero\u200bwidth\u200c\u200djoin", "zerowidthjoin"),
        ("\ufeffbom and \u2060word joiner", "bom and word joiner"),
        ("bidi \u202eoverride\u202c \u2066isolate\u2069", "bidi override isolate"),
        ("soft\u00adhyphen", "softhyphen"),
        ("separator\u2028line\u2029para", "separator line para"),
        ("Python 异步编程 🦄", "Python 异步编程 🦄"),
        ("e\u0301 combining kept", "e\u0301 combining kept"),
        ("x" * MAX_TITLE_LENGTH, "x" * MAX_TITLE_LENGTH),
        ("  " + "y" * MAX_TITLE_LENGTH + "\u200b  ", "y" * MAX_TITLE_LENGTH),
    ],
)
def test_sanitize_title_cleans(raw: str, clean: str) -> None:
    assert sanitize_title(raw) == clean
    assert SessionDB.sanitize_title(raw) == clean


@pytest.mark.parametrize("raw", [None, "", "   ", "\t\n", "\u200b\u200d\ufeff", "\x00\x07 \x1f"])
def test_sanitize_title_of_nothing_is_none(raw: str | None) -> None:
    assert sanitize_title(raw) is None


def test_sanitize_title_refuses_more_than_100_characters() -> None:
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        sanitize_title("z" * 101)
    with pytest.raises(ValueError, match=r"^Title too long"):
        sanitize_title("长" * 101)


def test_sanitize_title_refuses_non_text() -> None:
    with pytest.raises(TypeError, match=r"^title must be str or None, not bytes$"):
        sanitize_title(b"title")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("title", "parts"),
    [
        ("t", ("t", 1)),
        ("t #2", ("t", 2)),
        ("t #12", ("t", 12)),
        ("t #0", ("t #0", 1)),
        ("t #02", ("t #02", 1)),
        ("t#2", ("t#2", 1)),
        ("#2", ("#2", 1)),
        ("a #2 #3", ("a #2", 3)),
    ],
)
def test_split_title(title: str, parts: tuple[str, int]) -> None:
    assert split_title(title) == parts


# -- set / get -----------------------------------------------------------------------------


@pytest.fixture
def titled(store: SessionDB) -> SessionDB:
    for index, session_id in enumerate(("a", "b", "c")):
        store.create_session(session_id, "cli", started_at=T0 + index)
    return store


def titles_of(store: SessionDB) -> dict[str, str | None]:
    return {
        row[0]: row[1]
        for row in store._conn.execute("SELECT id, title FROM sessions ORDER BY id").fetchall()
    }


def test_set_and_get_title(titled: SessionDB) -> None:
    assert titled.set_session_title("a", "  fix\tthe\u200b build ") is True
    assert titled.get_session_title("a") == "fix the build"
    assert titled.get_session_title("b") is None
    assert titled.get_session_title("missing") is None
    assert titles_of(titled) == {"a": "fix the build", "b": None, "c": None}


def test_set_title_on_a_missing_session_is_false(titled: SessionDB) -> None:
    assert titled.set_session_title("missing", "free title") is False
    assert titles_of(titled) == {"a": None, "b": None, "c": None}


def test_titles_are_unique(titled: SessionDB) -> None:
    titled.set_session_title("a", "shared")
    with pytest.raises(ValueError, match=r"^Title 'shared' is already in use by session a$"):
        titled.set_session_title("b", "shared")
    with pytest.raises(ValueError, match="already in use"):
        titled.set_session_title("b", "  shared\u200b")
    assert titled.set_session_title("a", "shared") is True
    assert titled.set_session_title("b", "Shared") is True
    assert titles_of(titled) == {"a": "shared", "b": "Shared", "c": None}


def test_unique_index_backs_the_check(titled: SessionDB) -> None:
    titled.set_session_title("a", "shared")
    with pytest.raises(sqlite3.IntegrityError):
        titled._conn.execute("UPDATE sessions SET title = 'shared' WHERE id = 'b'")


@pytest.mark.parametrize("empty", [None, "", "   ", "\u200b"])
def test_clearing_a_title_frees_it(titled: SessionDB, empty: str | None) -> None:
    titled.set_session_title("a", "mine")
    assert titled.set_session_title("a", empty) is True
    assert titled.get_session_title("a") is None
    assert titled.set_session_title("b", "mine") is True
    assert titles_of(titled) == {"a": None, "b": "mine", "c": None}


def test_several_sessions_may_have_no_title(titled: SessionDB) -> None:
    for session_id in ("a", "b", "c"):
        assert titled.set_session_title(session_id, None) is True
    assert titles_of(titled) == {"a": None, "b": None, "c": None}


@pytest.mark.parametrize(
    ("title", "error", "text"),
    [
        ("t" * 101, ValueError, "Title too long"),
        (7, TypeError, "title must be str or None"),
    ],
)
def test_bad_titles_change_nothing(titled: SessionDB, title: Any, error: type, text: str) -> None:
    titled.set_session_title("a", "before")
    with pytest.raises(error, match=text):
        titled.set_session_title("a", title)
    assert titles_of(titled) == {"a": "before", "b": None, "c": None}


def test_set_title_names_a_bad_session_id(titled: SessionDB) -> None:
    with pytest.raises(ValueError, match=r"^session_id must not be empty$"):
        titled.set_session_title("", "t")
    with pytest.raises(TypeError, match=r"^session_id must be str"):
        titled.set_session_title(None, "t")  # type: ignore[arg-type]


def test_get_session_by_title(titled: SessionDB) -> None:
    titled.set_session_title("b", "report")
    titled.set_session_title("c", "report #2")
    assert titled.get_session_by_title("report") == titled.get_session("b")
    assert titled.get_session_by_title("report #2") == titled.get_session("c")
    assert titled.get_session_by_title("Report") is None
    assert titled.get_session_by_title("rep") is None
    assert titled.get_session_by_title("") is None
    assert titled.get_session_by_title(None) is None  # type: ignore[arg-type]


# -- resolve_session_by_title -----------------------------------------------------------


def add(store: SessionDB, session_id: str, title: str, started_at: float) -> None:
    store.create_session(session_id, "cli", started_at=started_at)
    store.set_session_title(session_id, title)


def test_resolve_prefers_the_newest_numbered_variant(store: SessionDB) -> None:
    add(store, "one", "plan", T0)
    assert store.resolve_session_by_title("plan") == "one"
    add(store, "two", "plan #2", T0 + 10)
    add(store, "three", "plan #3", T0 + 20)
    add(store, "other", "planning", T0 + 30)
    add(store, "other2", "plan #x", T0 + 40)
    add(store, "nested", "plan #2 #2", T0 + 50)
    assert store.resolve_session_by_title("plan") == "three"
    assert store.resolve_session_by_title("  plan ") == "three"
    assert store.resolve_session_by_title("plan #2") == "nested"
    assert store.resolve_session_by_title("plan #3") == "three"
    assert store.resolve_session_by_title("planning") == "other"


def test_resolve_goes_by_start_time_not_number(store: SessionDB) -> None:
    add(store, "renamed", "notes #9", T0)
    add(store, "latest", "notes #4", T0 + 60)
    add(store, "root", "notes", T0 + 120)
    assert store.resolve_session_by_title("notes") == "latest"


def test_resolve_finds_variants_without_the_exact_title(store: SessionDB) -> None:
    add(store, "only", "draft #5", T0)
    assert store.resolve_session_by_title("draft") == "only"


def test_resolve_escapes_like_wildcards(store: SessionDB) -> None:
    add(store, "pct", "100% done", T0)
    add(store, "und", "a_b #2", T0 + 1)
    add(store, "decoy", "100x done #2", T0 + 2)
    add(store, "decoy2", "aXb #3", T0 + 3)
    assert store.resolve_session_by_title("100% done") == "pct"
    assert store.resolve_session_by_title("a_b") == "und"


def test_resolve_of_nothing_is_none(store: SessionDB) -> None:
    add(store, "one", "plan", T0)
    assert store.resolve_session_by_title("unknown") is None
    assert store.resolve_session_by_title("") is None
    assert store.resolve_session_by_title("   ") is None
    assert store.resolve_session_by_title(None) is None  # type: ignore[arg-type]
    assert store.resolve_session_by_title("PLAN") is None


# -- get_next_title_in_lineage -----------------------------------------------------------


def test_next_title_in_lineage_is_the_base_while_nobody_holds_it(store: SessionDB) -> None:
    assert store.get_next_title_in_lineage("t") == "t"
    assert store.get_next_title_in_lineage("t #3") == "t"
    assert store.get_next_title_in_lineage("  t  ") == "t"
    assert store.get_next_title_in_lineage("异步 #9") == "异步"
    add(store, "held", "t", T0)
    add(store, "cjk", "异步 #9", T0 + 1)
    assert store.get_next_title_in_lineage("t") == "t #2"
    assert store.get_next_title_in_lineage("t #3") == "t #2"
    assert store.get_next_title_in_lineage("  t  ") == "t #2"
    assert store.get_next_title_in_lineage("异步") == "异步 #10"


def test_next_title_skips_numbers_already_taken(store: SessionDB) -> None:
    add(store, "a", "t", T0)
    add(store, "b", "t #2", T0 + 1)
    add(store, "c", "t #5", T0 + 2)
    add(store, "d", "T #9", T0 + 3)
    add(store, "e", "t #x", T0 + 4)
    add(store, "f", "tt #7", T0 + 5)
    assert store.get_next_title_in_lineage("t") == "t #6"
    assert store.get_next_title_in_lineage("t #2") == "t #6"
    assert store.get_next_title_in_lineage("t #8") == "t #6"
    assert store.get_next_title_in_lineage("T") == "T #10"
    next_title = store.get_next_title_in_lineage("t")
    store.create_session("g", "cli", started_at=T0 + 6)
    assert store.set_session_title("g", next_title) is True


@pytest.mark.parametrize(
    ("base", "error"), [("", ValueError), ("   ", ValueError), (None, ValueError)]
)
def test_next_title_names_a_bad_base(store: SessionDB, base: Any, error: type) -> None:
    with pytest.raises(error, match=r"^base_title "):
        store.get_next_title_in_lineage(base)
