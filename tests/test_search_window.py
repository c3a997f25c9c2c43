"""A search given ``rank_window=N``, whose words the word index ranks and match more than
``WINDOW_FROM x N`` messages, has only its newest ``N`` hits ranked: the page is exactly
the best-ranked among them, and a query with fewer hits ranks exactly as every hit
ranked. Without ``rank_window`` every hit is ranked.

Before counting its hits, a query of words tries its whole ranking within the steps
ranking ``WINDOW_FROM x window`` hits takes at the least (``search.SORTER_STEPS_PER_HIT``
each). With the default window every query of this small corpus fits; the ``window``
fixture also runs each test with the steps counted ten at a time, so that a window of
50 leaves a try room for a few dozen hits, and answers must not change."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.search import pipeline as search
from hermes_models.search import plan
from hermes_models.store.binding import using

T0 = 1_700_000_000.0
MESSAGES = 400
WINDOW = 50


def _text(i: int) -> str:
    """Message ``i``: ``alpha`` in two of five (1-3 times), ``beta`` in one of 25,
    ``数据`` in one of 20 (never beside ``alpha``), filled up to a length no other
    message has, so that no two hits of a term score alike."""
    words = []
    if i % 5 in (0, 2):
        words += ["alpha"] * (1 + i % 3)
    if i % 25 == 0:
        words.append("beta")
    if i % 20 == 9:
        words.append("数据")
    length = 10 + (i * 7919) % 401
    words += [f"w{j}" for j in range(length - len(words))]
    return " ".join(words)


def _source(session: int) -> str:
    return "telegram" if session % 2 == 0 else "cli"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """40 sessions of 10 messages, ids in time order; every 17th message soft-deleted;
    every other session from telegram."""
    path = tmp_path_factory.mktemp("window") / "state.db"
    written: list[dict[str, Any]] = []
    with SessionDB(path) as store:
        for n in range(40):
            store.create_session(f"s{n:02}", _source(n), started_at=T0 + n)
        for i in range(MESSAGES):
            sid = f"s{i % 40:02}"
            message_id = store.append_message(sid, "user", _text(i), timestamp=T0 + 100 + i)
            written.append(
                {
                    "id": message_id,
                    "session_id": sid,
                    "text": _text(i),
                    "timestamp": T0 + 100 + i,
                    "source": _source(i % 40),
                    "active": i % 17 != 0,
                }
            )
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE messages SET active = 0 WHERE (id - 1) % 17 = 0")
    assert [m["id"] for m in written] == list(range(1, MESSAGES + 1))
    return path, written


@pytest.fixture(params=[None, 10], ids=["counted", "tried first"])
def window(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> int:
    """The window, with (``tried first``) or without a try of the whole ranking first:
    SQLite's steps counted 10 at a time leave it room below ``WINDOW_FROM x WINDOW``
    hits (by default, 10,000 at a time, a window this small leaves none). Each test
    passes it as ``rank_window``."""
    if request.param is not None:
        monkeypatch.setattr(search, "_CLOCK_STEPS", request.param)
    return WINDOW


def _ranks(path: Path, fts: str) -> dict[int, float]:
    """BM25 of every message the word index matches, all of them ranked (plain sqlite3)."""
    with closing(sqlite3.connect(path)) as conn:
        sql = "SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?"
        return dict(conn.execute(sql, [fts]).fetchall())


def _hits(written: list[dict[str, Any]], word: str, sources: set[str] | None = None) -> list[int]:
    """Ids of the active messages holding ``word`` (of ``sources``), newest first."""
    return sorted(
        (
            m["id"]
            for m in written
            if m["active"]
            and word in m["text"].split()
            and (sources is None or m["source"] in sources)
        ),
        reverse=True,
    )


def _best(ids: list[int], ranks: dict[int, float]) -> list[int]:
    return sorted(ids, key=lambda i: (ranks[i], -i))


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def test_many_hits_rank_only_the_newest_window(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha")
    ranks = _ranks(path, '"alpha"')
    assert len(hits) > 2 * window
    expected = _best(hits[:window], ranks)
    # The window changes the answer: the best of all hits are not all among the newest.
    assert expected[:10] != _best(hits, ranks)[:10]
    with SessionDB(path, read_only=True) as store:
        assert _ids(store.search_messages("alpha", limit=10, rank_window=window)) == expected[:10]
        assert _ids(store.search_messages("alpha", limit=window, rank_window=window)) == expected
        assert (
            _ids(store.search_messages("alpha", limit=10, offset=30, rank_window=window))
            == expected[30:40]
        )


def test_a_page_beyond_the_window_widens_it(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha")
    ranks = _ranks(path, '"alpha"')
    # Widened to 60, the window still holds fewer than half the hits (WINDOW_FROM).
    assert len(hits) > plan.WINDOW_FROM * (window + 10)
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alpha", limit=5, offset=window + 5, rank_window=window)
    assert _ids(found) == _best(hits[: window + 10], ranks)[window + 5 :]


def test_the_window_counts_hits_the_filters_let_through(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha", {"telegram"})
    ranks = _ranks(path, '"alpha"')
    assert len(hits) > window
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages(
            "alpha", source_filter="telegram", limit=window, rank_window=window
        )
    assert _ids(found) == _best(hits[:window], ranks)


def test_few_hits_rank_as_every_hit_ranked(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "beta")
    assert 0 < len(hits) < window
    expected = _best(hits, _ranks(path, '"beta"'))
    with SessionDB(path, read_only=True) as store:
        windowed = store.search_messages("beta", limit=100, rank_window=window)
        every = store.search_messages("beta", limit=100)
    assert _ids(windowed) == expected
    assert windowed == every


def test_without_a_window_every_hit_is_ranked(corpus: Any) -> None:
    """The default: every hit ranked, also for a word with many more hits than
    ``plan.RANK_WINDOW`` would allow (the suggestion is not applied unless passed)."""
    path, written = corpus
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alpha", limit=10)
        rows = store.search_sessions("alpha", limit=100)
    ranks = _ranks(path, '"alpha"')
    hits = _hits(written, "alpha")
    assert _ids(found) == _best(hits, ranks)[:10]
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in rows] == _session_rows(
        hits, ranks, written
    )


def test_newest_and_oldest_pages_are_never_windowed(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha")
    with SessionDB(path, read_only=True) as store:
        oldest = store.search_messages("alpha", sort="oldest", limit=5, rank_window=window)
        every = store.search_messages("alpha", limit=None, rank_window=window)
    assert _ids(oldest) == sorted(hits)[:5]
    assert _ids(every) == _best(hits, _ranks(path, '"alpha"'))


def test_mixed_query_ranks_the_newest_hits_of_its_word_groups(corpus: Any, window: int) -> None:
    # The window holds ``window`` hits of the word group, all ranked, so a page within
    # it never reaches the hits only the other group finds (they rank after).
    path, written = corpus
    words = _hits(written, "alpha")
    cjk = [m["id"] for m in written if m["active"] and "数据" in m["text"]]
    assert cjk and not set(cjk) & set(words)
    expected = _best(words[:window], _ranks(path, '"alpha"'))
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alpha OR 数据", limit=20, offset=20, rank_window=window)
        every = store.search_messages("alpha OR 数据", limit=None, rank_window=window)
    assert _ids(found) == expected[20:40]
    assert sorted(_ids(every)) == sorted(words + cjk)


def test_search_sql_runs_the_same_window_in_plain_sqlite(corpus: Any, window: int) -> None:
    path, _ = corpus
    with SessionDB(path, read_only=True) as store, using(store.database):
        found = _ids(search.search_messages("alpha OR beta", limit=15, rank_window=window))
        statements = search.search_sql("alpha OR beta", limit=15, rank_window=window)
    with closing(sqlite3.connect(path)) as conn:
        for sql, params in statements:
            rows = conn.execute(sql, params).fetchall()
    assert "newest" in statements[-1][0]
    assert [row[0] for row in rows] == found


def _session_rows(
    hits: list[int], ranks: dict[int, float], written: list[dict[str, Any]]
) -> list[tuple[str, int, str]]:
    """``(id, hits, matched_session_id)`` of each session holding ``hits``, best first."""
    by_id = {m["id"]: m for m in written}
    best: dict[str, int] = {}
    count: dict[str, int] = {}
    for i in hits:
        sid = by_id[i]["session_id"]
        count[sid] = count.get(sid, 0) + 1
        if sid not in best or (ranks[i], -i) < (ranks[best[sid]], -best[sid]):
            best[sid] = i
    order = sorted(
        best,
        key=lambda sid: (
            ranks[best[sid]],
            -max(i for i in hits if by_id[i]["session_id"] == sid),
            sid,
        ),
    )
    return [(sid, count[sid], sid) for sid in order]


def test_sessions_count_and_rank_the_newest_window(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha")[:window]
    expected = _session_rows(hits, _ranks(path, '"alpha"'), written)
    with SessionDB(path, read_only=True) as store:
        rows = store.search_sessions("alpha", limit=100, rank_window=window)
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in rows] == expected


def test_sessions_of_a_scanned_query_count_the_newest_hits(corpus: Any) -> None:
    path, written = corpus
    hits = sorted((m["id"] for m in written if m["active"] and "数据" in m["text"]), reverse=True)
    assert len(hits) > 8
    expected = _session_rows(hits[:8], dict.fromkeys(hits, 0.0), written)
    with SessionDB(path, read_only=True) as store:
        rows = store.search_sessions("数据", limit=100, rank_window=8)
        every = store.search_sessions("数据", limit=None, rank_window=8)
        exact = store.search_sessions("数据", limit=100)
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in rows] == expected
    assert sum(r["hits"] for r in every) == len(hits)
    assert sum(r["hits"] for r in exact) == len(hits)


def test_a_prefix_query_ranks_the_newest_window_with_its_snippets(corpus: Any, window: int) -> None:
    path, written = corpus
    hits = _hits(written, "alpha")
    expected = _best(hits[:window], _ranks(path, '"alph"*'))[:5]
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alph*", limit=5, rank_window=window)
    assert _ids(found) == expected
    assert [row["snippet"].count(">>>alpha<<<") for row in found] == [
        1 + (i - 1) % 3 for i in expected
    ]


@pytest.mark.parametrize(("query", "fts"), [("alpha", '"alpha"'), ("alph*", '"alph"*')])
def test_hits_fewer_than_twice_the_window_are_all_ranked(corpus: Any, query: str, fts: str) -> None:
    """Between the window and WINDOW_FROM times it, ranking every hit costs less than
    ranking the window's (benchmarks/search_scale.py: ``migrat*``), and is exact."""
    path, written = corpus
    hits = _hits(written, "alpha")
    ranks = _ranks(path, fts)  # every message the index matches, soft-deleted ones too
    window = len(ranks) // 2 + 1
    assert window < len(hits) <= len(ranks) < plan.WINDOW_FROM * window
    # Ranking only the newest would give another page.
    assert _best(hits[:window], ranks)[:10] != _best(hits, ranks)[:10]
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages(query, limit=10, rank_window=window)
    assert _ids(found) == _best(hits, ranks)[:10]


def test_a_prefix_of_two_letters_is_windowed_without_counting(corpus: Any) -> None:
    """``al*`` starts every word of a large store's vocabulary: counting its hits costs
    as much as ranking the window, so it is windowed whatever its count."""
    path, written = corpus
    hits = _hits(written, "alpha")  # no other word starts with "al"
    ranks = _ranks(path, '"al"*')
    window = len(ranks) // 2 + 1
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("al*", limit=10, rank_window=window)
    assert _ids(found) == _best(hits[:window], ranks)[:10]


def test_snippets_of_a_windowed_page_mark_every_match(corpus: Any, window: int) -> None:
    path, written = corpus
    expected = _best(_hits(written, "alpha")[:window], _ranks(path, '"alpha"'))[:5]
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alpha", limit=5, rank_window=window)
    assert _ids(found) == expected
    assert [row["snippet"].count(">>>alpha<<<") for row in found] == [
        1 + (i - 1) % 3 for i in expected
    ]


def test_mixed_query_with_a_prefix_term_ranks_the_newest_window(corpus: Any, window: int) -> None:
    path, written = corpus
    expected = _best(_hits(written, "alpha")[:window], _ranks(path, '"alph"*'))
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("alph* OR 数据", limit=10, offset=40, rank_window=window)
    assert _ids(found) == expected[40:50]


def test_a_windowed_prefix_page_makes_its_snippets_in_its_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranked page of a prefix query with many hits makes its snippets while it reads
    its newest hits (for the rows whose rank is among the page's best so far), not in
    a second statement that would merge the prefix's words again. Pages, ties in rank
    included (many messages alike, times not in id order), and their snippets are
    those of plain SQL."""
    texts = ["alpha beta", "alphabet soup alpha", "betamax", "alpha " * 3 + "x", "gamma alp"]
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        for n in range(4):
            store.create_session(f"s{n}", "cli", started_at=T0 + n)
        for i in range(240):
            store.append_message(
                f"s{i % 4}", "user", texts[i % 5] + " w" * (i % 3), timestamp=T0 + 10 + (i * 7) % 60
            )
    with closing(sqlite3.connect(path)) as conn:
        with conn:
            conn.execute("UPDATE messages SET active = 0 WHERE id % 7 = 0")
        query = '"alp"* OR "bet"*'
        ranks = dict(
            conn.execute("SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ?", [query])
        )
        rows = conn.execute(
            "SELECT id, timestamp FROM messages WHERE active = 1 ORDER BY id DESC"
        ).fetchall()
        hits = [(i, ts) for i, ts in rows if i in ranks]

        def best(window: int) -> list[int]:
            newest = hits[:window]
            return [i for i, _ in sorted(newest, key=lambda r: (ranks[r[0]], -r[1], -r[0]))]

        snippet_sql = (
            "SELECT snippet(messages_fts, 0, '>>>', '<<<', '...', 40) FROM messages_fts"
            " WHERE messages_fts MATCH ? AND rowid = ?"
        )
        snippets = {i: conn.execute(snippet_sql, [query, i]).fetchone()[0] for i, _ in hits}
    assert len(set(ranks.values())) < 20  # ties in rank
    ran: list[str] = []
    real = search.execute

    def spy(sql: str, params: Any) -> Any:
        ran.append(sql)
        return real(sql, params)

    monkeypatch.setattr(search, "execute", spy)
    with SessionDB(path, read_only=True) as store:
        # (9, 13): the page ends inside a run of equal ranks, with times out of id order.
        for limit, offset in ((20, 0), (6, 0), (9, 13), (20, 50)):
            ran.clear()
            found = store.search_messages(
                "alp* OR bet*", limit=limit, offset=offset, rank_window=60
            )
            # A page ending beyond the window widens it to its end.
            want = best(max(60, offset + limit))[offset : offset + limit]
            assert [(h["id"], h["snippet"]) for h in found] == [(i, snippets[i]) for i in want]
            assert sum("snippet(" in sql for sql in ran) == 1


COUNT_SQL = "SELECT 1 FROM messages_fts WHERE messages_fts MATCH"


def test_a_search_counts_its_hits_once_while_the_file_stays_as_it_is(
    corpus: Any, window: int, tmp_path: Path
) -> None:
    """The count that decides whether to window is kept until something is committed
    to the file: the same search again (or its next page) does not count again; once
    another process adds hits, the next search counts, and windows. A try of the whole
    ranking that finishes counts nothing, and is kept the same way."""
    source, written = corpus
    path = tmp_path / "state.db"
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    hits = _hits(written, "beta")
    assert 0 < len(hits) < window
    with SessionDB(path) as store:
        ran: list[str] = []
        store._conn.set_trace_callback(ran.append)
        pages = [
            _ids(store.search_messages("beta", limit=5, offset=k, rank_window=window))
            for k in (0, 5, 0)
        ]
        expected = _best(hits, _ranks(path, '"beta"'))
        assert pages == [expected[:5], expected[5:10], expected[:5]]
        tried = search._CLOCK_STEPS < 10_000
        assert [sql for sql in ran if sql.startswith(COUNT_SQL)] == (
            []
            if tried
            else [f"{COUNT_SQL} '(\"beta\")' LIMIT 1 OFFSET {plan.WINDOW_FROM * window}"]
        )
        # Tried once: its next page and the same search again read the page alone.
        assert len([sql for sql in ran if "ORDER BY" in sql and "MATCH" in sql]) == 3

        # Another process (a Hermes v16 writer) adds more hits than twice the window.
        added = plan.WINDOW_FROM * window + 5
        with closing(sqlite3.connect(path)) as other, other:
            other.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('s00', 'user', ?, ?)",
                [("beta " + " ".join(["y"] * (3 + k)), T0 + 1000 + k) for k in range(added)],
            )
        ran.clear()
        newest = sorted(_ranks(path, '"beta"'), reverse=True)[:window]
        assert min(newest) > MESSAGES  # the window holds the new messages only
        windowed = _best(newest, _ranks(path, '"beta"'))[:5]
        assert _ids(store.search_messages("beta", limit=5, rank_window=window)) == windowed
        assert _ids(store.search_messages("beta", limit=5, rank_window=window)) == windowed
        assert len([sql for sql in ran if sql.startswith(COUNT_SQL)]) == 1
        store._conn.set_trace_callback(None)


def test_a_try_that_finishes_ranks_every_hit_and_counts_nothing(
    corpus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of fewer hits than the try has room for is answered by its one ranked
    statement; one with more is stopped, counted, and windowed, as without a try."""
    path, written = corpus
    monkeypatch.setattr(search, "_CLOCK_STEPS", 10)
    beta, alpha = _hits(written, "beta"), _hits(written, "alpha")
    assert len(beta) < WINDOW < plan.WINDOW_FROM * WINDOW < len(alpha)
    with SessionDB(path, read_only=True) as store:
        ran: list[str] = []
        store._conn.set_trace_callback(ran.append)
        few = store.search_messages("beta", limit=10, rank_window=WINDOW)
        counted_few = [sql for sql in ran if sql.startswith(COUNT_SQL)]
        ran.clear()
        many = store.search_messages("alpha", limit=10, rank_window=WINDOW)
        counted_many = [sql for sql in ran if sql.startswith(COUNT_SQL)]
        store._conn.set_trace_callback(None)
    assert _ids(few) == _best(beta, _ranks(path, '"beta"'))[:10]
    assert counted_few == []
    assert _ids(many) == _best(alpha[:WINDOW], _ranks(path, '"alpha"'))[:10]
    assert counted_many == [f"{COUNT_SQL} '(\"alpha\")' LIMIT 1 OFFSET {plan.WINDOW_FROM * WINDOW}"]


def test_a_try_stopped_by_the_time_budget_returns_what_it_found(
    corpus: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The try runs under the search's time budget: a budget spent while it ranks ends
    the search with no hit and a warning, not an error."""
    path, _ = corpus
    monkeypatch.setattr(search, "_CLOCK_STEPS", 10)
    clock = iter([0.0] + [100.0] * 1000)  # the deadline is set at 0.0 + budget, then passed
    monkeypatch.setattr(search.time, "monotonic", lambda: next(clock))
    with SessionDB(path, read_only=True) as store:
        found = store.search_messages("beta", limit=10, time_budget=1.0, rank_window=WINDOW)
    assert found == []
    assert "stopped after its time budget of 1.0 s" in caplog.text


def _ranking_steps(conn: sqlite3.Connection, query: str) -> tuple[int, int]:
    """``(hits, steps)``: how many messages ``query`` matches, and the virtual-machine
    steps SQLite takes to rank them all by ``rank`` (for the best one)."""
    hits = conn.execute(
        "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", [query]
    ).fetchone()[0]
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(step, 1)
    conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 1", [query]
    ).fetchall()
    conn.set_progress_handler(None, 0)
    return hits, steps


def test_fts5_takes_at_least_the_assumed_steps_for_each_hit_it_ranks(corpus: Any) -> None:
    """What makes a finished try sound: ranking ``n`` hits by ``rank`` takes SQLite at
    least ``SORTER_STEPS_PER_HIT x n`` virtual-machine steps, whatever the query, so a
    try finished within ``WINDOW_FROM x window`` times that ranked no more hits than
    the count allows. An SQLite that takes fewer would rank more hits whole than the
    window rule says, and one that takes many more would try in vain: this fails first."""
    path, _ = corpus
    per_hit = search.SORTER_STEPS_PER_HIT
    with closing(sqlite3.connect(path)) as conn:
        measured = {
            query: _ranking_steps(conn, query)
            for query in ['"alpha"', '"beta"', '"alph"*', '"alpha" OR "beta"', '"alpha" "w5"']
        }
    for hits, steps in measured.values():
        assert hits > 10
        assert per_hit * hits <= steps <= (per_hit + 2) * hits + 300
    (many, many_steps), (few, few_steps) = measured['"alpha"'], measured['"beta"']
    # Each hit more, the same statement: the steps a hit adds, without the fixed ones.
    assert per_hit <= (many_steps - few_steps) / (many - few) < per_hit + 1


@pytest.mark.parametrize("sessions", [False, True], ids=["messages", "sessions"])
def test_an_exact_search_out_of_time_returns_no_hit_and_warns(
    corpus: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, sessions: bool
) -> None:
    """Ranking every hit runs under the time budget as a bounded search does: spent, the
    search returns what it found (here nothing) with a warning, and never raises."""
    path, _ = corpus
    clock = iter([0.0] + [100.0] * 1000)  # the deadline is set at 0.0 + budget, then passed
    monkeypatch.setattr(search.time, "monotonic", lambda: next(clock))
    with SessionDB(path, read_only=True) as store:
        if sessions:
            found = store.search_sessions("alpha", limit=10, time_budget=1.0)
        else:
            found = store.search_messages("alpha", limit=10, time_budget=1.0)
    assert found == []
    assert "stopped after its time budget of 1.0 s" in caplog.text


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "rank_window must be at least 1, got 0"),
        (-5, ValueError, "rank_window must be at least 1, got -5"),
        (True, TypeError, "rank_window must be a positive int or None, not bool"),
        (2.5, TypeError, "rank_window must be a positive int or None, not float"),
        ("10", TypeError, "rank_window must be a positive int or None, not str"),
        (2**63, ValueError, "rank_window must be at most"),
    ],
)
def test_a_wrong_rank_window_raises_naming_it(
    corpus: Any, value: Any, error: type[Exception], message: str
) -> None:
    path, _ = corpus
    with SessionDB(path, read_only=True) as store:
        for call in (store.search_messages, store.search_sessions):
            with pytest.raises(error) as raised:
                call("alpha", rank_window=value)
            assert str(raised.value).startswith(message)
