"""The search query language and the FTS index models: parsing, routing, rendering."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_models import HermesDatabase
from hermes_models.search.plan import Shape
from hermes_models.search.query import (
    LIKE,
    MAX_TERMS,
    TRIGRAM,
    WORDS,
    Group,
    SearchQuery,
    Term,
    ascii_lower,
    contains_cjk,
    escape_like,
    highlight,
    parse,
    term_finder,
    term_regex,
)
from hermes_models.store.fts import MessageIndex, MessageTrigramIndex, available_routes

from factories import MessageFactory


def q(*groups: Group) -> SearchQuery:
    return SearchQuery(tuple(groups))


def g(*include: Term, exclude: tuple[Term, ...] = ()) -> Group:
    return Group(tuple(include), exclude)


T = Term


# -- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("asyncio", q(g(T("asyncio")))),
        ("asyncio thread", q(g(T("asyncio"), T("thread")))),
        ("asyncio AND thread", q(g(T("asyncio"), T("thread")))),
        ("asyncio OR thread", q(g(T("asyncio")), g(T("thread")))),
        ("asyncio NOT thread", q(g(T("asyncio"), exclude=(T("thread"),)))),
        ("a b OR c NOT d e", q(g(T("a"), T("b")), g(T("c"), T("e"), exclude=(T("d"),)))),
        ('"event loop" OR io', q(g(T("event loop")), g(T("io")))),
        ('"event loop"* x', q(g(T("event loop", prefix=True), T("x")))),
        ("migrat*", q(g(T("migrat", prefix=True)))),
        ("migrat**", q(g(T("migrat", prefix=True)))),
        ("chat-send", q(g(T("chat-send")))),
        ("P2.2", q(g(T("P2.2")))),
        ("simulate.p2.test.ts", q(g(T("simulate.p2.test.ts")))),
        ("snake_case_name", q(g(T("snake_case_name")))),
        ("C++", q(g(T("C")))),
        ("foo:bar", q(g(T("foo:bar")))),
        ('"abc', q(g(T("abc")))),
        ('abc"', q(g(T("abc")))),
        ('say "hi" and "bye', q(g(T("say"), T("hi"), T("and"), T("bye")))),
        ("(a OR b) c", q(g(T("a")), g(T("b"), T("c")))),
        ("{x} ^y +z", q(g(T("x"), T("y"), T("z")))),
        ("and or not", q(g(T("and"), T("or"), T("not")))),
        ("NOT a", q(g(T("a")))),
        ("a NOT", q(g(T("a")))),
        ("a OR", q(g(T("a")))),
        ("OR a", q(g(T("a")))),
        ("a OR NOT b", q(g(T("a")), g(T("b")))),
        ("a NOT NOT b", q(g(T("a"), exclude=(T("b"),)))),
        ("a AND AND b", q(g(T("a"), T("b")))),
        ("x\x00y", q(g(T("x"), T("y")))),
        ("line\nbreak\ttab", q(g(T("line"), T("break"), T("tab")))),
        ("lone\ud800surrogate", q(g(T("lone"), T("surrogate")))),
        ("事件循环", q(g(T("事件循环")))),
        ('"事件 循环"', q(g(T("事件 循环")))),
        ("你好。", q(g(T("你好")))),
        ("异步*", q(g(T("异步", prefix=True)))),
    ],
)
def test_parse(text: str, expected: SearchQuery) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "\t\n",
        "AND",
        "OR",
        "NOT",
        "AND OR NOT",
        "*",
        "**",
        "()",
        '""',
        '" "',
        "^+{}:",
        "\x00",
        "-",
        "...",
    ],
)
def test_nothing_searchable(text: str) -> None:
    assert parse(text) == SearchQuery(())
    assert not parse(text)


def test_none_is_empty_and_other_types_are_refused() -> None:
    assert parse(None) == SearchQuery(())
    with pytest.raises(TypeError, match="query must be str"):
        parse(42)  # type: ignore[arg-type]


def test_terms_beyond_the_limit_are_dropped() -> None:
    words = [f"w{n}" for n in range(MAX_TERMS + 10)]
    assert parse(" ".join(words)).terms() == tuple(T(w) for w in words[:MAX_TERMS])


def test_a_repeated_or_group_does_not_count_toward_the_limit() -> None:
    # docs/search.md: repeats "are dropped before they count" ("t OR t OR ..." is "t").
    assert parse("w1 OR " * MAX_TERMS + "zzz").terms() == (T("w1"), T("zzz"))
    assert parse("w1 x OR " * MAX_TERMS + "zzz").terms() == (T("w1"), T("x"), T("zzz"))
    tail = [f"t{n}" for n in range(MAX_TERMS)]
    assert parse("w1 OR " * 100 + " ".join(tail)).terms() == (
        T("w1"),
        *(T(t) for t in tail[: MAX_TERMS - 1]),
    )


# -- rendering -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fts"),
    [
        ("asyncio thread", '"asyncio" AND "thread"'),
        ("a OR b NOT c", '("a") OR ("b" NOT "c")'),
        ("migrat* x", '"migrat"* AND "x"'),
        ('"event loop"', '"event loop"'),
        ("foo:bar C++", '"foo:bar" AND "C"'),
        ("异步*", '"异步"'),
    ],
)
def test_fts_rendering(text: str, fts: str) -> None:
    assert parse(text).fts() == fts


def test_like_patterns_escape_wildcards() -> None:
    assert escape_like(r"50%_a\b") == r"50\%\_a\\b"
    assert T("100%").like() == r"%100\%%"
    assert ascii_lower("ÄBC Straße 事件") == "Äbc straße 事件"


@pytest.mark.parametrize(
    ("text", "route"),
    [
        ("asyncio", WORDS),
        ("chat-send", WORDS),
        ("事", LIKE),
        ("事件", LIKE),
        ("事件循", TRIGRAM),
        ("事件循环", TRIGRAM),
        ("a事", LIKE),
        ("Python异步", TRIGRAM),
        ("セッ", LIKE),
        ("セッシ", TRIGRAM),
        ("한국", LIKE),
        ("한국어", TRIGRAM),
        ("。", LIKE),
        ("𠀀𠀁", LIKE),
        ("𠀀𠀁𠀂", TRIGRAM),
    ],
)
def test_routes_by_characters(text: str, route: str) -> None:
    assert T(text).route == route


@pytest.mark.parametrize(
    ("char", "cjk"),
    [
        ("一", True),
        ("鿿", True),
        ("㐀", True),
        ("𠀀", True),
        ("、", True),
        ("あ", True),
        ("ア", True),
        ("가", True),
        ("a", False),
        ("é", False),
        ("Ω", False),
        ("ｱ", False),
    ],
)
def test_cjk_ranges(char: str, cjk: bool) -> None:
    assert contains_cjk(char) is cjk


@pytest.mark.usefixtures("database")
def test_shape_routes_to_like_where_an_index_is_missing() -> None:
    query = parse("asyncio 事件循环 OR 数据 NOT loop")
    full = Shape.of(query, frozenset({WORDS, TRIGRAM, LIKE}))
    # Beside a CJK term of three characters, words the trigram index serves join
    # its MATCH (one index pass); the two-character term stays LIKE-routed.
    assert full.groups == (((TRIGRAM, TRIGRAM), ()), ((LIKE,), (TRIGRAM,)))
    assert full.single is None
    assert Shape.of(query, frozenset({WORDS, LIKE})).groups == (
        ((WORDS, LIKE), ()),
        ((LIKE,), (WORDS,)),
    )
    assert Shape.of(query, frozenset({LIKE})).routes == (LIKE, LIKE, LIKE, LIKE)
    assert Shape.of(parse("事件循环"), frozenset({WORDS, TRIGRAM, LIKE})).single == TRIGRAM
    assert Shape.of(parse("a OR b"), frozenset({WORDS, TRIGRAM, LIKE})).single == WORDS
    assert Shape.of(parse("a OR b"), frozenset({LIKE})).single is None
    assert full.degraded().routes == (LIKE, LIKE, LIKE, LIKE)


@pytest.mark.parametrize(
    ("query", "routes"),
    [
        ("sqlite 数据库", (TRIGRAM, TRIGRAM)),
        ("SQLite3 OR 数据库", (TRIGRAM, TRIGRAM)),
        ("数据库 NOT wal", (TRIGRAM, TRIGRAM)),
        # A prefix, a word of two letters, a word with an accent or punctuation, a
        # phrase: the trigram index would not find what the word index finds.
        ("sql* 数据库", (WORDS, TRIGRAM)),
        ("db 数据库", (WORDS, TRIGRAM)),
        ("café 数据库", (WORDS, TRIGRAM)),
        ('"event loop" 事件循环', (WORDS, TRIGRAM)),
        ("sqlite 数据库 db", (WORDS, TRIGRAM, WORDS)),
        # No CJK term the trigram index serves: words stay words.
        ("sqlite 数据", (WORDS, LIKE)),
        ("sqlite wal", (WORDS, WORDS)),
    ],
)
@pytest.mark.usefixtures("database")
def test_words_join_the_trigram_pass_only_where_it_finds_the_same(
    query: str, routes: tuple[str, ...]
) -> None:
    assert Shape.of(parse(query), frozenset({WORDS, TRIGRAM, LIKE})).routes == routes


# -- python snippets -------------------------------------------------------------------------


def test_highlight_centres_on_the_first_match_and_marks_every_match() -> None:
    text = "x" * 200 + " the event loop runs; another loop " + "y" * 200
    regex = term_regex(parse("loop").positive_terms())
    snippet = highlight(text, regex)
    first = text.index("loop")
    assert (
        snippet
        == "..."
        + text[first - 58 : first].replace("loop", ">>>loop<<<")
        + ">>>loop<<<"
        + text[first + 4 : first + 62].replace("loop", ">>>loop<<<")
        + "..."
    )
    assert len(snippet.replace(">>>", "").replace("<<<", "")) == 120 + 6


def test_highlight_words_phrases_prefixes_and_cjk() -> None:
    regex = term_regex(parse('chat-send migrat* "event loop" 事件').positive_terms())
    text = "Use chat-send; migrations run in the event  loop, not chatsend. 事件循环 loops"
    assert highlight(text, regex) == (
        "Use >>>chat-send<<<; >>>migrations<<< run in the >>>event  loop<<<, not chatsend. "
        ">>>事件<<<循环 loops"
    )
    assert highlight("UPPER Event Loop", regex) == "UPPER >>>Event Loop<<<"


def test_highlight_without_a_match_shows_the_start() -> None:
    regex = term_regex(parse("absent").positive_terms())
    assert highlight("short text", regex) == "short text"
    assert highlight("z" * 130, regex) == "z" * 120 + "..."
    assert term_regex(()) is None
    assert highlight("no terms", None) == "no terms"


def test_a_single_caseless_substring_term_is_found_as_written() -> None:
    assert term_finder(parse("国我").positive_terms()) == "国我"
    assert term_finder(parse("세션 세션").positive_terms()) == "세션"
    assert term_finder(parse("数据 OR 数据").positive_terms()) == "数据"
    # Characters with case, words, and more than one term keep the regex.
    for query in (
        "数据A",
        "数据a",
        "国ß",
        "ＡＢ数据",
        "数据 sqlite",
        "数据 事件",
        "loop",
        "数据 OR 事件",
    ):
        terms = parse(query).positive_terms()
        finder, regex = term_finder(terms), term_regex(terms)
        assert isinstance(finder, re.Pattern) and regex is not None
        assert (finder.pattern, finder.flags) == (regex.pattern, regex.flags)
    assert term_finder(()) is None
    # "国ß" is no string: without case, it also finds "国ẞ" (capital sharp s).
    assert highlight("国ẞ", term_finder(parse("国ß").positive_terms())) == ">>>国ẞ<<<"


def test_a_found_string_marks_as_the_regex_does() -> None:
    text = "中" * 100 + "前国我后" + "文" * 100 + "国我国我"
    at = text.index("国我")
    assert highlight(text, "国我") == (
        "..." + text[at - 59 : at] + ">>>国我<<<" + text[at + 2 : at + 61] + "..."
    )
    assert highlight("国我国我 and 国我", "国我") == ">>>国我<<<>>>国我<<< and >>>国我<<<"
    assert highlight("没有", "国我") == "没有"
    assert highlight("没" * 121, "国我") == "没" * 120 + "..."


CASELESS_OR_NOT = st.sampled_from(list("国我数据세션データ1-_ .aAＡａßẞİıΣσς\x00*%"))


@given(
    term=st.text(CASELESS_OR_NOT, min_size=1, max_size=3),
    before=st.text(CASELESS_OR_NOT, max_size=150),
    after=st.text(CASELESS_OR_NOT, max_size=150),
    holds=st.booleans(),
    width=st.integers(1, 130) | st.integers(-3, 3).map(lambda d: -d - 10_000),
)
def test_the_found_string_and_the_regex_make_the_same_snippet(
    term: str, before: str, after: str, holds: bool, width: int
) -> None:
    text = before + term + after if holds else before + after
    if width < 0:  # about the length of the text, where the whole text may fit
        width = max(1, len(text) - 10_000 - width)
    terms = parse(term).positive_terms()
    finder = term_finder(terms)
    assert highlight(text, finder, width) == highlight(text, term_regex(terms), width)
    if isinstance(finder, str):  # found as written: a substring of characters without case
        assert finder == terms[0].text and contains_cjk(finder)


# -- the index models -------------------------------------------------------------------------


def test_index_models_map_the_migrated_tables(database: HermesDatabase) -> None:
    message = MessageFactory(content="大家好, the trigram index 事件循环", tool_name="web_search")
    assert available_routes() == frozenset({WORDS, TRIGRAM, LIKE})
    words = MessageIndex.select(MessageIndex.rowid).where(MessageIndex.match('"trigram"'))
    assert [row.rowid for row in words] == [message.id]
    grams = MessageTrigramIndex.select(MessageTrigramIndex.rowid).where(
        MessageTrigramIndex.match('"件循环"')
    )
    assert [row.rowid for row in grams] == [message.id]
    stored = (
        MessageIndex.select(MessageIndex.content).where(MessageIndex.rowid == message.id).scalar()
    )
    assert stored == "大家好, the trigram index 事件循环 web_search "


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("C++", True),
        ("foo:bar", True),
        ('"abc', True),
        ("AND", False),
        ("a OR", True),
        ("NEAR(a b)", False),
        ("col:x", False),
        ("^start", True),
        ("-x", True),
        ("x -", True),
        ("*a*", True),
        ("'quoted'", True),
        ("a\\b", True),
        ("%_", False),
        ("{a b}", True),
        ("NOT NOT", False),
        ("a AND NOT b", False),
        ('""a""', True),
        ("x*y*z", True),
    ],
)
def test_rendered_queries_are_valid_fts5(
    database: HermesDatabase, text: str, matches: bool
) -> None:
    message = MessageFactory(content="a b x y z C foo bar abc start quoted col near")
    expression = parse(text).fts() if parse(text) else '""'
    conn = database.connection()
    found = conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (expression,)
    ).fetchall()
    assert [row[0] for row in found] == ([message.id] if matches else [])
    conn.execute(
        "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ?", (expression,)
    ).fetchall()
