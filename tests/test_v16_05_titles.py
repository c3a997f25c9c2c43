"""HERMES_V16 §3.5: session titles."""

from __future__ import annotations

import time

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("  my   project \n", "my project"),
        ("tab\there", "tab here"),
        ("bell\x07and\x00nul", "bellandnul"),
        ("del\x7f", "del"),
        ("zero\u200bwidth\u200f", "zerowidth"),
        ("\ufeffbom and \u2028line sep\u202e", "bom and line sep"),
        ("word\u2060joiner\ufffc", "wordjoiner"),
        ("\u200b\u200b", None),
        ("x" * 100, "x" * 100),
    ],
)
def test_sanitize_title(raw: str | None, clean: str | None) -> None:
    assert SessionDB.sanitize_title(raw) == clean


def test_sanitize_title_limit_counts_the_cleaned_text() -> None:
    assert SessionDB.sanitize_title(" " + "x" * 100 + "\u200b ") == "x" * 100
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        SessionDB.sanitize_title("y" * 101)


def test_set_session_title(store: SessionDB) -> None:
    store.create_session("a", "cli")
    store.create_session("b", "cli")
    assert store.set_session_title("a", "  Fix   the build ") is True
    assert store.get_session_title("a") == "Fix the build"
    assert store.get_session_by_title("Fix the build")["id"] == "a"
    assert store.get_session_by_title("fix the build") is None  # exact, case-sensitive
    with pytest.raises(ValueError, match=r"^Title 'Fix the build' is already in use by session a$"):
        store.set_session_title("b", "Fix the build")
    assert store.get_session_title("b") is None
    assert store.set_session_title("a", "Fix the build") is True  # its own title again
    assert store.set_session_title("a", "") is True  # clears it
    assert store.get_session_title("a") is None
    assert store.set_session_title("b", "Fix the build") is True
    assert store.set_session_title("ghost", "anything") is False
    with pytest.raises(ValueError, match="Title too long"):
        store.set_session_title("b", "z" * 101)
    assert store.get_session_title("b") == "Fix the build"


def started(store: SessionDB, session_id: str, title: str, at: float) -> None:
    store.create_session(session_id, "cli", started_at=at)
    store.set_session_title(session_id, title)


def test_resolve_session_by_title_prefers_the_newest_numbered_variant(store: SessionDB) -> None:
    now = time.time()
    assert store.resolve_session_by_title("my project") is None
    started(store, "base", "my project", now - 300)
    assert store.resolve_session_by_title("my project") == "base"
    started(store, "second", "my project #2", now - 200)
    started(store, "third", "my project #3", now - 100)
    assert store.resolve_session_by_title("my project") == "third"
    started(store, "literal", "100% done", now)
    started(store, "other", "100x done #2", now)
    assert store.resolve_session_by_title("100% done") == "literal"  # % is not a wildcard


def test_next_title_in_lineage(store: SessionDB) -> None:
    assert store.get_next_title_in_lineage("my project") == "my project"
    started(store, "a", "my project", time.time())
    assert store.get_next_title_in_lineage("my project") == "my project #2"
    started(store, "b", "my project #2", time.time())
    started(store, "c", "my project #3", time.time())
    assert store.get_next_title_in_lineage("my project") == "my project #4"
    assert store.get_next_title_in_lineage("my project #2") == "my project #4"
    assert store.get_next_title_in_lineage("other") == "other"
