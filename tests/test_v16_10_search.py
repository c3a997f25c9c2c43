"""HERMES_V16 §3.10: search_messages as the session_search tool calls it."""

from __future__ import annotations

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.hermes_state import FTS_SQL, SCHEMA_SQL

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0
TEXT = (
    "the  quick brown fox\njumps over   the lazy dog and then keeps running far beyond "
    "the horizon while the sun sets slowly in the west and the night falls   "
)
HIT_KEYS = {
    "id",
    "session_id",
    "role",
    "snippet",
    "timestamp",
    "tool_name",
    "source",
    "model",
    "session_started",
    "context",
}


def plain_sqlite_snippet(content: str, query: str) -> str:
    """FTS5's own snippet over Hermes' DDL, with plain sqlite3."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA_SQL + FTS_SQL)
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 0)")
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', ?, 0)",
        (content,),
    )
    (snippet,) = conn.execute(
        "SELECT snippet(messages_fts, 0, '>>>', '<<<', '...', 40) FROM messages_fts "
        "WHERE messages_fts MATCH ?",
        (query,),
    ).fetchone()
    conn.close()
    return str(snippet)


@pytest.fixture
def corpus(store: SessionDB) -> SessionDB:
    store.create_session("s1", "cli", model="m1", started_at=T0)
    store.create_session("s2", "telegram", model="m2", started_at=T0 + 1)
    store.create_session("s3", "tool", started_at=T0 + 2)
    store.append_message("s1", "user", "before", timestamp=T0 + 10)
    store.append_message("s1", "assistant", TEXT, timestamp=T0 + 11)
    store.append_message("s1", "user", "after " * 60, timestamp=T0 + 12)
    store.append_message("s2", "user", "a lazy afternoon", timestamp=T0 + 20)
    store.append_message("s3", "tool", "lazy tool output", tool_name="grep", timestamp=T0 + 30)
    return store


def test_hit_shape_and_snippet_whitespace(corpus: SessionDB, backend: str) -> None:
    hits = corpus.search_messages("fox")
    assert len(hits) == 1
    hit = hits[0]
    assert set(hit) == HIT_KEYS
    assert (hit["session_id"], hit["role"], hit["source"], hit["model"]) == (
        "s1",
        "assistant",
        "cli",
        "m1",
    )
    assert (hit["timestamp"], hit["session_started"], hit["tool_name"]) == (T0 + 11, T0, None)
    if backend == "sqlite":
        # The snippet is FTS5's, whitespace and all, over the text Hermes indexes.
        assert hit["snippet"] == plain_sqlite_snippet(TEXT, "fox")
        assert hit["snippet"].endswith("night falls     ")
    else:
        # PostgreSQL has no snippet(): a window of the text around the first match.
        window = hit["snippet"].replace(">>>fox<<<", "fox").removesuffix("...")
        assert ">>>fox<<<" in hit["snippet"]
        assert window.removeprefix("...") in TEXT
    assert hit["context"] == [
        {"role": "user", "content": "before"},
        {"role": "assistant", "content": TEXT[:200]},
        {"role": "user", "content": ("after " * 60)[:200]},
    ]


def test_filters(corpus: SessionDB) -> None:
    def sessions(**options: object) -> list[str]:
        return [hit["session_id"] for hit in corpus.search_messages("lazy", **options)]  # type: ignore[arg-type]

    assert sorted(sessions()) == ["s1", "s2", "s3"]
    assert sessions(source_filter=["telegram"]) == ["s2"]
    assert sessions(source_filter=[]) == []  # an empty filter matches nothing
    assert sorted(sessions(exclude_sources=[])) == ["s1", "s2", "s3"]
    assert sorted(sessions(exclude_sources=["tool"])) == ["s1", "s2"]
    assert sessions(role_filter=["tool"]) == ["s3"]
    assert sessions(sort="newest") == ["s3", "s2", "s1"]
    assert sessions(sort=" OLDEST ") == ["s1", "s2", "s3"]
    assert sessions(sort="newest", limit=1, offset=1) == ["s2"]
    assert sorted(sessions(sort="whatever")) == ["s1", "s2", "s3"]  # by rank, as Hermes


def test_tool_names_are_searchable_and_rewound_rows_hidden(corpus: SessionDB) -> None:
    assert [hit["tool_name"] for hit in corpus.search_messages("grep")] == ["grep"]
    target = corpus.append_message("s2", "user", "zebra crossing", timestamp=T0 + 40)
    corpus.rewind_to_message("s2", target)
    assert corpus.search_messages("zebra") == []
    assert [hit["id"] for hit in corpus.search_messages("zebra", include_inactive=True)] == [target]


@pytest.mark.parametrize("query", ["", "   ", "***", '"', "AND", "(", "fox OR", "\x00"])
def test_search_never_raises(corpus: SessionDB, query: str) -> None:
    assert isinstance(corpus.search_messages(query), list)


def test_hyphenated_and_dotted_terms_match_as_phrases(store: SessionDB) -> None:
    store.create_session("s", "cli")
    store.append_message("s", "user", "run chat-send then open my-app.config.ts")
    assert len(store.search_messages("chat-send")) == 1
    assert len(store.search_messages("my-app.config.ts")) == 1
