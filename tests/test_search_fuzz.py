"""No query text makes search raise: thousands of generated queries against a real file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_models import SessionDB
from hermes_models.search.query import MAX_TERMS, parse

T0 = 1_700_000_000.0

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

FRAGMENTS = [
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(",
    "(",
    ")",
    "{",
    "}",
    ":",
    "^",
    "+",
    "-",
    "*",
    '"',
    "'",
    "\\",
    "%",
    "_",
    ".",
    ",",
    ";",
    "\x00",
    "\x1a",
    "\n",
    "\t",
    " ",
    "C++",
    "foo:bar",
    "content:",
    "rank",
    "rowid",
    "messages_fts",
    "'; DROP TABLE messages; --",
    "/* */",
    "--",
    "SELECT 1",
    "x' OR '1'='1",
    "chat-send",
    "P2.2",
    "simulate.p2.test.ts",
    "事件循环",
    "事件",
    "异",
    "数据库",
    "セッション",
    "検索",
    "세션",
    "검색",
    "🙂",
    "é",
    "İ",
    "ß",
    "\u200b",
    "\ufeff",
    "\ud800",
    "a",
]

queries = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(FRAGMENTS), max_size=20).map("".join),
    st.lists(st.sampled_from(FRAGMENTS), max_size=20).map(" ".join),
    st.text(alphabet=st.sampled_from('"*()^+:-. AORNDT事件循环ab'), max_size=40),
    st.integers(min_value=4000, max_value=5000).flatmap(
        lambda n: st.sampled_from(
            ["x", "事", "a ", '"', "事件 ", "OR ", "(", "\x00", "ab OR "]
        ).map(lambda unit: (unit * n)[:n])
    ),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionDB]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "state.db"
    with SessionDB(path) as session_db:
        session_db.create_session("s", "cli", started_at=T0)
        session_db.create_session("t", "telegram", started_at=T0 + 1)
        texts = [
            "C++ and foo:bar with chat-send in P2.2",
            "事件循环 数据库 セッション 検索 세션 검색",
            "rank rowid NEAR near AND OR NOT",
            "x" * 300,
            "a b c ab OR",
            "quote \" and ' and \\",
        ]
        for n, text in enumerate(texts * 3):
            session_db.append_message(
                "s" if n % 2 else "t", ("user", "assistant")[n % 2], text, timestamp=T0 + n
            )
        session_db.append_message(
            "s", "user", [{"type": "text", "text": "事件循环 image"}], timestamp=T0 + 50
        )
        yield session_db


@pytest.mark.slow
@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries)
def test_no_query_raises(store: SessionDB, query: str) -> None:
    hits = store.search_messages(query)
    assert isinstance(hits, list)
    assert all(set(hit) == HIT_KEYS for hit in hits)
    assert all(hit["snippet"] and hit["context"] for hit in hits)
    if not parse(query):
        assert hits == []
    assert len(parse(query).terms()) <= MAX_TERMS
    rows = store.search_sessions(query)
    if query.strip():
        assert all(row["hits"] >= 1 for row in rows)
    else:  # no query: the plain listing
        assert [row["id"] for row in rows] == ["s", "t"]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries, sort=st.sampled_from([None, "newest", "oldest"]), inactive=st.booleans())
def test_no_query_raises_with_options(
    store: SessionDB, query: str, sort: str | None, inactive: bool
) -> None:
    hits = store.search_messages(
        query,
        source_filter=["cli", "telegram"],
        role_filter=["user"],
        sort=sort,
        include_inactive=inactive,
    )
    assert all(hit["role"] == "user" for hit in hits)
