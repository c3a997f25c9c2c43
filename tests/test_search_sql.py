"""``search_sql``: the SQL of a message search, runnable with plain sqlite3."""

from __future__ import annotations

from typing import Any

import pytest

import hermes_models
from hermes_models import SessionDB, search_sql
from hermes_models.driver import sqlite3
from hermes_models.search.plan import Shape
from hermes_models.search.query import LIKE, TRIGRAM, WORDS, parse
from hermes_models.store.binding import using
from hermes_models.store.fts import available_routes

T0 = 1_700_000_000.0

MESSAGES = [
    ("s", "user", "how do I cancel an asyncio task?"),
    ("s", "assistant", "asyncio.wait_for cancels the task on timeout"),
    ("s", "user", "请解释事件循环和数据"),
    ("t", "assistant", "事件循环处理数据的方式"),
    ("t", "user", [{"type": "text", "text": "JSON 里的事件循环 and asyncio 数据"}]),
    ("t", "tool", "数据库 的 结果 是 空"),
    ("u", "user", "是的, 的确"),
    ("u", "assistant", "nothing to see here"),
    ("s", "user", "a rewound asyncio 数据 message"),
]


@pytest.fixture
def filled(store: SessionDB) -> SessionDB:
    for n, session in enumerate("stu"):
        store.create_session(session, ("cli", "telegram", "cli")[n], started_at=T0 + n)
    ids = [
        store.append_message(session, role, content, timestamp=T0 + 10 + n)
        for n, (session, role, content) in enumerate(MESSAGES)
    ]
    store.rewind_to_message("s", ids[-1])
    return store


def plain_ids(path: Any, statements: list[tuple[str, list[Any]]]) -> list[int]:
    """The ids the statements find, run in order with plain sqlite3 (the last one's rows)."""
    conn = sqlite3.connect(path)
    try:
        rows: list[Any] = []
        for sql, params in statements:
            rows = conn.execute(sql, params).fetchall()
        return [row[0] for row in rows]
    finally:
        conn.close()


def routes_of(store: SessionDB, query: str) -> tuple[str, ...]:
    with using(store.database):
        return Shape.of(parse(query), frozenset({WORDS, TRIGRAM, LIKE})).routes


@pytest.mark.parametrize(
    ("query", "routes"),
    [
        ("asyncio", (WORDS,)),  # words: the BM25 index
        ("事件循环", (TRIGRAM,)),  # three CJK characters or more: the trigram index
        ("数据", (LIKE,)),  # one or two: LIKE (narrowed by the gram index in a search)
        ("的 OR 是 OR 空", (LIKE, LIKE, LIKE)),  # LIKE terms a search finds with one scan
        ("事件循环 OR 数据库 OR 的结果", (TRIGRAM, TRIGRAM, TRIGRAM)),  # rows behind a NUL
        ("asyncio 数据 NOT cancel", (WORDS, LIKE, WORDS)),
    ],
)
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sort": "newest"},
        {"sort": "oldest", "include_inactive": True},
        {"source_filter": ["telegram"], "role_filter": ["user", "tool"]},
        {"exclude_sources": "telegram", "limit": 2, "offset": 1},
    ],
)
def test_the_sql_of_a_search_finds_the_same_messages_in_plain_sqlite(
    filled: SessionDB, query: str, routes: tuple[str, ...], options: dict[str, Any]
) -> None:
    assert routes_of(filled, query) == routes
    options = {"limit": None, **options}
    expected = [hit["id"] for hit in filled.search_messages(query, **options)]
    with using(filled.database):
        statements = search_sql(query, **options)
    assert len(statements) == 1
    assert plain_ids(filled.db_path, statements) == expected
    assert expected or options.get("source_filter") or options.get("offset")


def test_the_searches_compared_run_their_scans_and_find_something(filled: SessionDB) -> None:
    # The search answers these with a scan first; search_sql writes the same terms out.
    with using(filled.database):
        available = available_routes()
        assert Shape.of(parse("数据"), available).scanned
        assert Shape.of(parse("的 OR 是 OR 空"), available).all_like
        assert Shape.of(parse("事件循环 OR 数据库 OR 的结果"), available).behind_scanned
    for query in ("asyncio", "事件循环", "数据", "的 OR 是 OR 空", "asyncio 数据 NOT cancel"):
        assert filled.search_messages(query), query


def test_search_sql_is_public_and_says_nothing_for_nothing_to_search(filled: SessionDB) -> None:
    assert "search_sql" in hermes_models.__all__
    with using(filled.database):
        assert search_sql("") == []
        assert search_sql('"" ( ) :') == []
        assert search_sql("asyncio", limit=0) == []
        assert search_sql("asyncio", source_filter=[]) == []
        sql, params = search_sql("asyncio")[0]
    assert "messages_fts" in sql and "MATCH" in sql and '"asyncio"' in params


def test_search_sql_checks_its_arguments_as_the_search_does(filled: SessionDB) -> None:
    with using(filled.database):
        with pytest.raises(TypeError, match="sort"):
            search_sql("asyncio", sort=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="source_filter"):
            search_sql("asyncio", source_filter=[1])
