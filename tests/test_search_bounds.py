"""Searches that cannot stall a gateway or grow memory without end: duplicate terms
dropped, every LIKE-routed term answered by one scan, a time budget, bounded caches,
and boolean queries across routes that stay exact."""

from __future__ import annotations

import gc
import itertools
import json
import logging
import random
import re
import sqlite3 as stdlib_sqlite3
import tracemalloc
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from test_search_recall import ALPHABETS, build, haystacks

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.search import pipeline as search
from hermes_models.search import plan
from hermes_models.search.plan import Shape
from hermes_models.search.query import LIKE, TRIGRAM, WORDS, Matcher, parse
from hermes_models.store import caches, grams, statements

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    path = tmp_path_factory.mktemp("bounds") / "state.db"
    with SessionDB(path) as store:
        written = build(store, seed=99)
        for n, text in enumerate(("asyncio event loop", "sqlite wal checkpoint", "loop 的是")):
            store.create_session(f"en-{n}", "cli", started_at=T0 + 1000 + n)
            message_id = store.append_message(f"en-{n}", "user", text, timestamp=T0 + 2000 + n)
            written.append(
                {"id": message_id, "session_id": f"en-{n}", "content": text, "active": True}
            )
    return path, written


def _holds(message: dict[str, Any], text: str) -> bool:
    return any(text.lower() in hay.lower() for hay in haystacks(message))


def _words(message: dict[str, Any]) -> set[str]:
    return {w for hay in haystacks(message) for w in hay.lower().split()}


def expected(
    written: list[dict[str, Any]],
    query: str,
    words: Callable[[dict[str, Any]], set[str]] = _words,
) -> set[int]:
    """The query evaluated in Python: substrings for CJK terms, whole words (as
    ``words`` splits a message) or the start of one (a prefix) otherwise."""
    parsed = parse(query)
    out = set()
    for message in written:
        if not message["active"]:
            continue
        tokens = words(message)

        def has(term: Any, message: dict[str, Any] = message, tokens: set[str] = tokens) -> bool:
            if term.cjk:
                return _holds(message, term.text)
            text = term.text.lower()
            if term.prefix:
                return any(token.startswith(text) for token in tokens)
            return text in tokens

        if any(
            all(has(t) for t in group.include) and not any(has(t) for t in group.exclude)
            for group in parsed.groups
        ):
            out.add(message["id"])
    return out


def _queries(written: list[dict[str, Any]], rng: random.Random, n: int) -> list[str]:
    pieces: dict[int, list[str]] = {1: [], 2: [], 3: []}
    for message in written:
        for hay in haystacks(message):
            for word in hay.split():
                if all(any(c in a for a in ALPHABETS.values()) for c in word):
                    for length in pieces:
                        if len(word) >= length:
                            start = rng.randint(0, len(word) - length)
                            pieces[length].append(word[start : start + length])
    english = ["asyncio", "loop", "sqlite", "checkpoint", "event"]
    out = []
    for _ in range(n):
        terms = []
        for _ in range(rng.randint(2, 6)):
            kind = rng.random()
            term = (
                rng.choice(english)
                if kind < 0.25
                else rng.choice(pieces[1 if kind < 0.45 else 2 if kind < 0.8 else 3])
            )
            terms.append(rng.choice(["", "", "OR ", "NOT "]) + term)
        out.append(" ".join(terms))
    return out


def recorded_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every search statement run from now on in this test, in order."""
    statements: list[str] = []
    real_fetch = search.fetch_within

    def recorded(sql: str, params: list[Any], deadline: float | None) -> Any:
        statements.append(sql)
        return real_fetch(sql, params, deadline)

    monkeypatch.setattr(search, "fetch_within", recorded)
    return statements


@pytest.mark.slow
def test_boolean_queries_mixing_routes_are_exact(corpus: tuple[Path, list[dict[str, Any]]]) -> None:
    path, written = corpus
    rng = random.Random(7)
    checked = 0
    with SessionDB(path) as store:
        for query in _queries(written, rng, 150):
            want = expected(written, query)
            for sort in (None, "newest"):
                got = [h["id"] for h in store.search_messages(query, limit=None, sort=sort)]
                assert len(got) == len(set(got)), query
                assert set(got) == want, (query, sort)
            sessions = {r["id"]: r["hits"] for r in store.search_sessions(query, limit=None)}
            assert sum(sessions.values()) == len(want), query
            checked += bool(want)
    assert checked > 50


def test_trigram_queries_of_many_terms_find_json_content_exactly(
    corpus: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, written = corpus
    rng = random.Random(3)
    pieces = sorted(
        {
            word[i : i + 3]
            for m in written
            if isinstance(m["content"], list)
            for hay in haystacks(m)
            for word in hay.split()
            for i in range(len(word) - 2)
        }
    )
    with SessionDB(path) as store:
        found = 0
        for _ in range(20):
            terms = rng.sample(pieces, rng.randint(3, 8))
            query = " ".join(
                rng.choice(["OR ", "OR ", "NOT "]) * bool(i) + t for i, t in enumerate(terms)
            )
            shape = Shape.of(parse(query), frozenset({WORDS, TRIGRAM, LIKE}))
            assert shape.behind_scanned, query
            want = expected(written, query)
            assert {h["id"] for h in store.search_messages(query, limit=None)} == want, query
            found += len(want)
    assert found > 0


def test_duplicate_terms_and_groups_are_dropped() -> None:
    assert parse(" OR ".join(["t*"] * 64)) == parse("t*")
    assert parse("a a b B NOT c NOT C") == parse("a b NOT c")
    assert parse("x y OR y x OR x y") == parse("x y")
    # 64 distinct terms are all kept; repeats do not use up the allowance.
    many = " ".join(f"w{i} w{i}" for i in range(64))
    assert len(parse(many).terms()) == 64


def test_sixty_four_like_terms_are_answered_by_one_scan(
    corpus: tuple[Path, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, written = corpus
    pairs = sorted({p for m in written for hay in haystacks(m) for p in _pairs(hay)})
    terms = pairs[:64]
    assert len(terms) == 64
    visits: list[int] = []
    real = Matcher.visit

    def counted(self: Matcher, message_id: int, *columns: object) -> int:
        visits.append(message_id)
        return real(self, message_id, *columns)

    monkeypatch.setattr(Matcher, "visit", counted)
    statements = recorded_statements(monkeypatch)
    for query in (" OR ".join(terms), terms[0] + " " + " ".join("NOT " + t for t in terms[1:])):
        visits.clear()
        statements.clear()
        with SessionDB(path) as store:
            got = {h["id"] for h in store.search_messages(query, limit=None)}
        assert got == expected(written, query)
        # Every term is two CJK characters, which the gram index answers exactly, and
        # the index holds every message (each was written through hermes_models): the
        # statement that pages the hits reads them with one MATCH of the index for the
        # whole query, with no lookup per term, no scan and no LIKE.
        assert visits == []
        assert [sql for sql in statements if sql == grams.GRAM_IDS_SQL] == []
        assert len(statements) == 2
        covered, page = statements
        assert "messages_cjk_changed" in covered
        assert page.count('"messages_cjk" MATCH ?') == 1 and "LIKE" not in page


@pytest.mark.backends("sqlite")  # SQLite's page statement: the scan's id lists
def test_a_word_not_sixty_three_cjk_characters_tests_each_row_once(
    corpus: tuple[Path, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "the NOT <63 single CJK characters>" on 500,000 messages ran out of its 5 s
    # budget (0 hits of 20): each of the 309,000 rows holding "the" was tested 63
    # times, once against each character's id list. The NOTs of a group are now one
    # list: the messages holding any of them (0.95 s there; plain SQL 3.7 s).
    path, written = corpus
    chars = sorted({c for m in written for hay in haystacks(m) for c in hay if not c.isascii()})
    excluded = [c for c in chars if c.strip()][:63]
    assert len(excluded) == 63
    statements = recorded_statements(monkeypatch)
    for word in ("loop", "asyncio", "checkpoint"):
        query = word + " " + " ".join("NOT " + c for c in excluded)
        statements.clear()
        with SessionDB(path) as store:
            hits = store.search_messages(query, limit=None, time_budget=None)
        assert {h["id"] for h in hits} == expected(written, query)
        (page,) = [sql for sql in statements if "messages_fts" in sql and "ORDER BY" in sql]
        assert page.count("json_each") == 1  # one list for the 63 NOTs, not 63


def _pairs(text: str) -> set[str]:
    cjk = set("".join(ALPHABETS.values()))
    return {text[i : i + 2] for i in range(len(text) - 1) if set(text[i : i + 2]) <= cjk}


def test_a_search_stops_at_its_time_budget_and_returns_what_it_has(
    corpus: tuple[Path, list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    path, written = corpus
    query = "的 OR 是"
    with SessionDB(path) as store:
        full = store.search_messages(query, limit=None, time_budget=None)
        assert len(full) == len(expected(written, query)) > 0
        with caplog.at_level(logging.WARNING, logger="hermes_models"):
            assert store.search_messages(query, limit=None, time_budget=1e-9) == []
            assert store.search_sessions(query, limit=None, time_budget=1e-9) == []
        assert caplog.text.count("a search stopped after its time budget of 1e-09 s") == 2
        # The connection is left as it was: no handler interrupts what follows.
        assert store.search_messages(query, limit=None) == full
        store.append_message("en-0", "user", "still writable")
        search.TIME_BUDGET_S, old = 1e-9, search.TIME_BUDGET_S
        try:
            assert store.search_messages(query) == []
        finally:
            search.TIME_BUDGET_S = old


@pytest.mark.parametrize(
    ("budget", "error"),
    [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), ("3", TypeError)],
)
def test_a_bad_time_budget_is_named(store: SessionDB, budget: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^time_budget"):
        store.search_messages("x", time_budget=budget)
    with pytest.raises(error, match=r"^time_budget"):
        store.search_sessions("x", time_budget=budget)


def _distinct_queries(count: int) -> list[str]:
    """Queries of ``count`` different shapes (routes and groups), so none reuses a statement."""
    terms = {WORDS: "alpha", TRIGRAM: "事件循环", LIKE: "数据"}
    seen: set[Shape] = set()
    out = []
    available = frozenset({WORDS, TRIGRAM, LIKE})
    for n in itertools.count(1):
        for routes in itertools.product(terms, repeat=n):
            for joins in itertools.product(("", "OR ", "NOT "), repeat=n - 1):
                words = [f"{terms[routes[0]]}"]
                for i, (route, join) in enumerate(zip(routes[1:], joins), 1):
                    words.append(
                        f"{join}{terms[route]}{i}"
                        if route == WORDS
                        else join + terms[route] + "的" * (i % 2)
                    )
                query = " ".join(words)
                shape = Shape.of(parse(query), available)
                if shape not in seen:
                    seen.add(shape)
                    out.append(query)
                    if len(out) == count:
                        return out
    raise AssertionError("unreachable")  # pragma: no cover


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # SQLite's search plans and their statement cache
def test_five_thousand_distinct_queries_keep_every_cache_within_its_bound(
    store: SessionDB,
) -> None:
    store.create_session("s", "cli")
    store.append_message("s", "user", "alpha 事件循环 数据")
    queries = _distinct_queries(5000)

    def drive(n: int, query: str) -> None:
        # Half the queries through each search, each query a shape of its own.
        if n % 2:
            store.search_sessions(query)
        else:
            store.search_messages(query, source_filter=["cli"] * (n % 3))
        if n < 200:
            store.list_sessions_rich(source=["cli"] * n)

    for n, query in enumerate(queries[:4600]):
        drive(n, query)
    # Memory while 200 new shapes replace what the caches hold, then 200 more:
    # bounded caches hold the same amount after both (each statement of a
    # 64-term search alone is tens of kilobytes; unbounded, 200 add megabytes).
    tracemalloc.start()
    try:
        held = []
        for start in (4600, 4800):
            for n, query in enumerate(queries[start : start + 200], start):
                drive(n, query)
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    grown = held[1] - held[0]
    bounded = {cache.name: (len(cache), cache.size) for cache in caches.registered()}
    assert {name for name, (size, bound) in bounded.items() if size > bound} == set()
    # One statement cache holds every kind (the listings of the first 200 shapes
    # have made way for the searches since).
    assert bounded["statements"] == (256, 256)
    kinds = {key[0] for key in statements.STATEMENTS.keys() if isinstance(key, tuple)}
    assert {"search", "sessions"} <= kinds
    assert grown < 1024 * 1024, grown


@pytest.mark.backends("sqlite")  # SQLite's plan: the word index looked up row by row
def test_words_beside_few_scanned_rows_are_looked_up_row_by_row_and_stay_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every group of a query needs a LIKE-routed term and the scan finds few rows,
    the query's words are looked up for those rows alone (an ``EXISTS`` by rowid), not
    read whole; pages, their order and session counts are those of the lists read
    whole, and exactly the reference's hits."""
    rng = random.Random(13)
    words = ["alpha", "beta", "gamma", "delta", "the", "of"]
    cjk = "数据库事件循环的是在"
    written: list[dict[str, Any]] = []
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        for s in range(5):
            store.create_session(f"s{s}", "cli", started_at=T0 + s)
        for n in range(120):
            text = " ".join(
                [*rng.sample(words, rng.randint(0, 3)), "".join(rng.sample(cjk, 3)), "zeta"]
            )
            message_id = store.append_message(f"s{n % 5}", "user", text, timestamp=T0 + 10 + n)
            written.append({"id": message_id, "content": text, "active": n % 9 != 4})
    with closing(sqlite3.connect(path)) as conn, conn:
        gone = [(m["id"],) for m in written if not m["active"]]
        conn.executemany("UPDATE messages SET active = 0 WHERE id = ?", gone)
    queries = [
        "alpha 数 OR gamma 件 NOT delta OR 在 NOT the",
        " OR ".join(f"{w} {c}" for w, c in zip(words, cjk)),
        "数据 NOT alpha NOT beta",
        "zeta 库 OR 是",
    ]
    statements = recorded_statements(monkeypatch)

    def run(query: str) -> tuple[list[Any], ...]:
        with SessionDB(path, read_only=True) as store:
            pages = [
                [(h["id"], h["snippet"]) for h in store.search_messages(query, **args)]
                for args in ({"limit": None}, {"limit": 7, "offset": 3})
            ]
            return (
                *pages,
                [(r["id"], r["hits"]) for r in store.search_sessions(query, limit=None)],
            )

    for query in queries:
        want = expected(written, query)
        assert want, query
        statements.clear()
        probed = run(query)
        assert {i for i, _ in probed[0]} == want, query
        assert sum(hits for _, hits in probed[2]) == len(want), query
        assert any('EXISTS(SELECT 1 FROM "messages_fts"' in sql for sql in statements), query
        monkeypatch.setattr(plan, "PROBE_ROWS", 0)
        statements.clear()
        assert run(query) == probed, query
        assert not any('EXISTS(SELECT 1 FROM "messages_fts"' in sql for sql in statements)
        monkeypatch.setattr(plan, "PROBE_ROWS", 2_000)


@pytest.mark.backends("sqlite")  # the unranked arm of SQLite's ranked trigram statement
def test_a_ranked_trigram_query_keeps_the_hits_its_index_cannot_read(tmp_path: Path) -> None:
    """Content stored as JSON sits behind a NUL the trigram index does not read: such
    hits of a ranked trigram query come after the ranked ones, even when every group
    of the query has a trigram term (which the word index would rank all of)."""
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        ids = [
            store.append_message("s", "user", content, timestamp=T0 + n)
            for n, content in enumerate(
                [
                    "事件循环 ヒ",
                    [{"type": "text", "text": "事件循环 ヒ"}],
                    "数据库",
                    [{"type": "text", "text": "数据库"}],
                    "事件循环",
                ]
            )
        ]
    a, b, c, d, _ = ids
    with SessionDB(path, read_only=True) as store:
        for query, want in (
            ("事件循环 ヒ", [a, b]),
            ("数据库 OR 事件循环 ヒ", [a, b, c, d]),
            ("数据库 OR ヒ 事件循环 OR 三个字 ヒ", [a, b, c, d]),
        ):
            found = [h["id"] for h in store.search_messages(query, limit=None)]
            assert sorted(found) == want, query
            assert found[-1] in (b, d)  # behind a NUL: unranked, after the ranked hits
            assert sum(r["hits"] for r in store.search_sessions(query)) == len(want), query


@pytest.mark.backends("sqlite")  # FTS5's snippet(): the server makes its own
def test_a_long_message_gets_its_snippet_from_python_and_a_short_one_from_fts5(
    store: SessionDB, db_path: Path
) -> None:
    # FTS5's snippet() weighs every window against every hit, so its time grows with
    # the square of a message's hits (1 MB of one word: minutes). Past
    # plan.SNIPPET_MAX_CHARS the snippet is the Python one: about 120 characters
    # around the first hit, hits marked.
    store.create_session("s", "cli", started_at=1.0)
    long_text = "needle " * 6000 + "haystack"  # 42,008 characters, 6,000 hits
    assert len(long_text) > plan.SNIPPET_MAX_CHARS
    big = store.append_message("s", "user", long_text, timestamp=2.0)
    small = store.append_message("s", "user", "a short needle message", timestamp=3.0)
    with closing(sqlite3.connect(db_path)) as conn:
        fts5 = conn.execute(
            "SELECT snippet(messages_fts, 0, '>>>', '<<<', '...', 40) FROM messages_fts"
            " WHERE messages_fts MATCH 'needle' AND rowid = ?",
            (small,),
        ).fetchone()[0]
    assert fts5 == "a short >>>needle<<< message  "  # content, tool name, tool calls
    python = ">>>needle<<< " * 17 + "n..."  # the first 120 characters, hits marked
    for sort in ("rank", "newest", "oldest"):
        snippets = {h["id"]: h["snippet"] for h in store.search_messages("needle", sort=sort)}
        assert snippets == {big: python, small: fts5}, sort
    phrase = {h["id"]: h["snippet"] for h in store.search_messages('"needle needle"')}
    assert phrase[big].startswith(">>>needle needle<<< >>>needle needle<<<")
    best = {r["id"]: r["best_snippet"] for r in store.search_sessions("haystack")}
    assert best == {"s": "..." + "needle " * 16 + ">>>haystack<<<"}


def test_a_term_longer_than_sqlites_like_pattern_limit_is_searched_not_raised(
    store: SessionDB,
) -> None:
    # SQLite refuses a LIKE pattern over 50,000 bytes ("pattern too complex"): 16,667
    # CJK characters are 50,001 bytes. Such a term is found by the scan instead.
    # The text cycles through 997 characters: one character repeated 17,000 times
    # costs FTS5 seconds to match as a phrase (every token at every position), and
    # the search's time budget would then decide the result on a busy machine.
    body = "".join(chr(0x4E00 + (i * 7) % 997) for i in range(17000))
    store.create_session("s", "cli", started_at=1.0)
    held = store.append_message("s", "user", "前" + body + "后", timestamp=2.0)
    store.append_message("s", "user", "数据库", timestamp=3.0)
    assert len(("%" + body[:16667] + "%").encode()) > plan.LIKE_PATTERN_BYTES
    # No time budget: the answer must not depend on how busy the machine is.
    for term in (body[:16667], body[100:], body, "前" + body + "后"):
        assert [h["id"] for h in store.search_messages(term, time_budget=None)] == [held]
        assert [r["id"] for r in store.search_sessions(term, time_budget=None)] == ["s"]
    assert store.search_messages(body + "后后", time_budget=None) == []
    assert store.search_messages(body[:8000] + "数" + body[8001:], time_budget=None) == []
    assert store.search_messages("数" + "a" * 50000, time_budget=None) == []


@pytest.mark.backends("sqlite")  # SQLite's LIKE limit, on a file without the trigram index
@pytest.mark.parametrize("sort", [None, "newest", "oldest"])
def test_a_term_too_long_for_like_is_scanned_where_no_index_serves_it(
    tmp_path: Path, sort: str | None
) -> None:
    """Without the trigram index (a SQLite without its tokenizer) CJK terms are routed to
    LIKE: a term over the LIKE limit raised "pattern too complex" in the walk over the
    newest messages, which tests each row with LIKE."""
    body = "".join(chr(0x4E00 + (i * 7) % 997) for i in range(17000))
    with SessionDB(tmp_path / "state.db") as store:
        conn = store._conn
        for event in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER messages_fts_trigram_{event}")
        conn.execute("DROP TABLE messages_fts_trigram")
        conn.commit()
        store.create_session("s", "cli", started_at=1.0)
        held = store.append_message("s", "user", "前" + body + "后", timestamp=2.0)
        store.append_message("s", "user", "数据库 " + "ab" * 26000, timestamp=3.0)
        for term, hits in (
            (body[:16667], [held]),
            ("前" + body, [held]),
            (body + "后后", []),
            ("数" + "a" * 50000, []),
            ("数据库 " + "ab" * 25000, [held + 1]),
        ):
            assert plan.Shape.of(parse(term), frozenset({WORDS, LIKE})).long_like
            found = store.search_messages(term, sort=sort, time_budget=None)
            assert [h["id"] for h in found] == hits
            found = store.search_messages(term, sort=sort, limit=5, time_budget=None)
            assert [h["id"] for h in found] == hits
            sessions = store.search_sessions(term, time_budget=None)
            assert [r["id"] for r in sessions] == ["s"] * len(hits)


@pytest.mark.parametrize(
    ("query", "statement"),
    [
        ("alpha 数", grams.GRAM_IDS_SQL),  # a term's lookup in the gram index
        # the gram index's state and the count that chooses how to read the page
        ("数据", search.GRAM_STATE_COUNT_SQL),
        ("数据 数", grams.GRAM_COUNT_SQL),  # the count of a second term
        ("alpha 数", search.GRAM_STATE_SQL),  # whether the index holds every message
    ],
)
def test_a_budget_spent_before_the_page_returns_no_hit_and_a_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    query: str,
    statement: str,
) -> None:
    """The rows a count or a lookup had read when the deadline passed are not hits: the
    search returns none (it raised ValueError, presenting them as hits)."""
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s", "cli")
        for i in range(30):
            store.append_message("s", "user", f"alpha 数据 {i}")
        # A Hermes v16 writer's row above the gram index's mark: the scan reads it.
        with closing(sqlite3.connect(tmp_path / "state.db")) as hermes, hermes:
            hermes.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('s', 'user', 'alpha 数据 plain', 1e9)"
            )
        real = search.fetch_within
        stopped: list[str] = []

        def out_of_time_there(sql: str, params: Any, deadline: Any) -> Any:
            names, rows = real(sql, params, deadline)
            if statement in sql and rows:
                stopped.append(sql)
                raise search._OutOfTime(rows[:3])  # as when the deadline passes mid-read
            return names, rows

        monkeypatch.setattr(search, "fetch_within", out_of_time_there)
        with caplog.at_level(logging.WARNING, logger="hermes_models"):
            found = store.search_messages(query, time_budget=5.0)
    assert stopped, "the statement did not run"
    assert found == []
    assert "stopped after its time budget of 5.0 s; returning the 0 hit(s)" in caplog.text


# -- long boolean queries: the merged tests of a group and of alike groups ----------------

VOCABULARY = (
    "loop lock sqlite async index event commit checkpoint thread buffer query cursor".split()
)
PREFIXES = ("lo", "ch", "cu", "qu", "in")


@pytest.fixture(scope="module")
def worded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The CJK corpus of ``build`` with 300 messages of English words beside it (some
    with CJK words, some as multimodal content), so that word terms hit often."""
    path = tmp_path_factory.mktemp("worded") / "state.db"
    rng = random.Random(11)
    cjk = "".join(ALPHABETS.values())
    with SessionDB(path) as store:
        written = build(store, seed=5)
        for s in range(12):
            session_id = f"words-{s}"
            store.create_session(session_id, "cli", started_at=T0 + 5000 + s)
            for n in range(25):
                words = rng.sample(VOCABULARY, rng.randint(1, 5))
                if rng.random() < 0.4:
                    words.append("".join(rng.choice(cjk) for _ in range(rng.randint(2, 5))))
                text = " ".join(words)
                content: Any = text
                if rng.random() < 0.15:
                    content = [{"type": "text", "text": text}]
                message_id = store.append_message(
                    session_id, "user", content, timestamp=T0 + 6000 + s * 100 + n
                )
                written.append(
                    {"id": message_id, "session_id": session_id, "content": content, "active": True}
                )
    return path, written


def _tokens(message: dict[str, Any]) -> set[str]:
    return {w for hay in haystacks(message) for w in re.findall(r"\w+", hay.lower())}


def _long_queries(written: list[dict[str, Any]], rng: random.Random, n: int) -> list[str]:
    cjk = set("".join(ALPHABETS.values()))
    pieces: dict[int, list[str]] = {1: [], 2: [], 3: []}
    for message in written:
        for hay in haystacks(message):
            for word in hay.split():
                if set(word) <= cjk:
                    for length in pieces:
                        if len(word) >= length:
                            start = rng.randint(0, len(word) - length)
                            pieces[length].append(word[start : start + length])
    out = []
    for _ in range(n):
        terms = []
        for _ in range(rng.randint(8, 40)):
            kind = rng.random()
            if kind < 0.35:
                term = rng.choice(VOCABULARY)
            elif kind < 0.45:
                term = rng.choice(PREFIXES) + "*"
            else:
                term = rng.choice(pieces[1 if kind < 0.6 else 2 if kind < 0.8 else 3])
            terms.append(rng.choice(["", "OR ", "OR ", "NOT ", "NOT "]) + term)
        out.append(" ".join(terms))
    return out


@pytest.mark.slow
def test_long_boolean_queries_of_every_route_are_exact(
    worded: tuple[Path, list[dict[str, Any]]],
) -> None:
    # A group's word terms are one lookup of the word index ("a NOT b NOT c"), groups of
    # words alone, of one trigram term or of one scanned term are each one test, and
    # the hits no index ranks are read from the rows that can hold them: each against
    # the query evaluated in Python, whole answers and ranked pages.
    path, written = worded
    rng = random.Random(23)
    checked = 0
    with SessionDB(path) as store:
        for query in _long_queries(written, rng, 120):
            want = expected(written, query, _tokens)
            for sort in (None, "newest"):
                got = [h["id"] for h in store.search_messages(query, limit=None, sort=sort)]
                assert len(got) == len(set(got)), query
                assert set(got) == want, (query, sort)
            page = [h["id"] for h in store.search_messages(query, limit=20)]
            assert len(page) == min(20, len(want)) and set(page) <= want, query
            sessions = {r["id"]: r["hits"] for r in store.search_sessions(query, limit=None)}
            assert sum(sessions.values()) == len(want), query
            checked += len(want) > 0
    assert checked > 60


@pytest.mark.plaintext_file  # writes with the standard library's sqlite3, as Hermes does
def test_merged_trigram_groups_find_what_their_index_cannot_read(tmp_path: Path) -> None:
    # Content stored as JSON (multimodal parts) sits behind a NUL, which the trigram
    # index of a row written by SQLite 3.40 (Hermes on the system's Python) does not
    # read: a group of one trigram term finds it by LIKE, also when several such
    # groups are one test, and when the rows matching no positive word are read from
    # the rows that can hold a hit.
    path = tmp_path / "state.db"
    texts: list[Any] = [
        "loop 事件循环",
        [
            {"type": "text", "text": "数据库 连接池"},
            {"type": "image_url", "image_url": {"url": "u"}},
        ],
        [{"type": "text", "text": "连接池 检查点"}],
        "sqlite 检查点",
        "cursor thread",
    ]
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
    written = []
    with closing(stdlib_sqlite3.connect(path)) as conn, conn:
        for n, content in enumerate(texts):
            stored = content
            if isinstance(content, list):
                stored = "\x00json:" + json.dumps(content, ensure_ascii=False)
            message_id = conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('s', 'user', ?, ?)",
                (stored, T0 + n),
            ).lastrowid
            written.append(
                {"id": message_id, "session_id": "s", "content": content, "active": True}
            )
    with SessionDB(path) as store:
        for query in (
            # (A prefix keeps the words on the word index: words the trigram index
            # serves join its one pass.)
            "数据库 OR 连接池",
            "数据库 OR 检查点 OR 事件循环",
            "lo* OR 数据库 OR 连接池",
            "lo* OR cu* OR 数据库",
            "sq* OR lo* OR 连接池 OR 检查点",
            "th* OR 连接池 OR 数据库 NOT lo*",
            "cu* OR 连接池 NOT 检查点 OR 事件循环 NOT sq*",
        ):
            want = expected(written, query, _tokens)
            assert want, query
            for sort in (None, "newest"):
                got = {h["id"] for h in store.search_messages(query, limit=None, sort=sort)}
                assert got == want, (query, sort)
            sessions = store.search_sessions(query, limit=None)
            assert [(r["id"], r["hits"]) for r in sessions] == [("s", len(want))], query
