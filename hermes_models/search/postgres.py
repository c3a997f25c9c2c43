"""Searching messages and sessions on PostgreSQL: plan and execute.

The PostgreSQL sibling of :mod:`hermes_models.search.plan` and the execute stage
of :mod:`hermes_models.search.pipeline`, which hands a search over here when the
models are bound to a PostgreSQL handle. The parse stage
(:mod:`hermes_models.search.query`) and the present stage
(:mod:`hermes_models.search.present`) are the SQLite search's own, so a query
means the same thing on both backends and a hit has the same keys.

Each term is routed by its characters, as on SQLite, to the index that can
serve it (migration 0003 and 0007 of ``migrations/postgresql``):

- a word or phrase: the ``simple`` tsvector (``search_tsv``, GIN), as a
  phrase query built with ``phraseto_tsquery`` from the term's text and,
  when punctuation joins its words, from the words alone (``chat-send`` is
  ``chat-send`` as PostgreSQL's parser reads it, or ``chat send``: FTS5's
  reading); ``deploy*`` makes the last word a prefix. A word that makes no
  lexeme at all is matched as a substring instead;
- a CJK term of three characters or more: ``ILIKE`` on the searched text
  (content, tool name and tool calls), served by the trigram index;
- a CJK term of one or two characters: the gram index (its CJK characters
  and adjacent pairs, ``@>``), then the substring itself.

``AND``, ``OR`` and ``NOT`` combine the terms' conditions in SQL; every
value a user typed is a parameter. Hits are ranked by FTS5's BM25 of their
word terms, computed from the same statistics (``hermes_bm25``, migration 0011;
hits no word term found come after, newest first), snippets are
made in Python (:func:`hermes_models.search.present.hits`), and ``search_sessions``
counts hits per lineage root (:mod:`hermes_models.search.by_root`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import peewee

from ..store import TRIGRAM, WORDS, current
from ..store import postgres_sql as sql
from . import present
from .by_root import page_of_roots
from .plan import Filters, trigram_servable
from .query import SearchQuery, Term, contains_cjk

T = TypeVar("T")

logger = logging.getLogger("hermes_models")

#: Routes of a term on PostgreSQL: the word index, a substring (trigram index), or the
#: gram index of CJK characters and pairs followed by the substring.
PG_WORDS, PG_SUBSTRING, PG_GRAMS = "words", "substring", "grams"

#: SQLSTATE of a statement cancelled by ``statement_timeout``.
QUERY_CANCELED = "57014"

#: ASCII punctuation: where words split, in the index (``hermes_words`` in
#: migrations/postgresql/0003) and in a query, as FTS5's ``unicode61`` splits them.
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]+")


def execute(statement: str, params: list[Any]) -> Any:
    """Run one statement on the current database; the cursor."""
    return current().execute_sql(statement, params)


# -- plan: routes and conditions --------------------------------------------------------------


def cjk_grams(text: str) -> list[str]:
    """The distinct CJK characters and adjacent CJK pairs of ``text`` (what
    ``hermes_cjk_grams`` indexes), sorted."""
    found = {c for c in text if contains_cjk(c)}
    found.update(
        text[i : i + 2]
        for i in range(len(text) - 1)
        if contains_cjk(text[i]) and contains_cjk(text[i + 1])
    )
    return sorted(found)


def phrase_variants(term: Term) -> tuple[str, ...]:
    """The text a word term is looked up as: its words split at punctuation, as the
    index splits them (``P2.2`` is the phrase ``p2 2``, as FTS5's ``unicode61`` reads it)."""
    return (" ".join(w for w in _PUNCTUATION.split(term.text) if w),)


@dataclass(frozen=True)
class Routed:
    """A term and how PostgreSQL finds it."""

    term: Term
    route: str
    #: Phrase texts of a word term (each gives a ``phraseto_tsquery``).
    variants: tuple[str, ...] = ()

    def tsquery(self) -> tuple[str, list[Any]]:
        """The term's tsquery and its parameters (a word term)."""
        return sql.phrase_query(len(self.variants), self.term.prefix), list(self.variants)

    def condition(self) -> tuple[str, list[Any]]:
        """The SQL condition of a message holding the term, and its parameters."""
        if self.route == PG_WORDS:
            tsquery, params = self.tsquery()
            return sql.words_match(tsquery), params
        # A term of CJK characters alone has no case: LIKE, much cheaper than ILIKE.
        caseless = all(contains_cjk(c) for c in self.term.text)
        if self.route == PG_GRAMS:
            grams = sql.GRAMS_MATCH_CASELESS if caseless else sql.GRAMS_MATCH
            return grams, [cjk_grams(self.term.text), self.term.like()]
        substring = sql.SUBSTRING_MATCH_CASELESS if caseless else sql.SUBSTRING_MATCH
        return substring, [self.term.like()]


@dataclass(frozen=True)
class RoutedGroup:
    """A group's terms, routed: all of ``include``, none of ``exclude``."""

    include: tuple[Routed, ...]
    exclude: tuple[Routed, ...] = ()


def _lexeme_counts(texts: list[str]) -> list[int]:
    """How many nodes each text makes as a phrase query on the server (0: no lexeme)."""
    if not texts:
        return []
    try:
        rows = execute(sql.TSQUERY_NODES, [texts]).fetchall()
    except peewee.DatabaseError as exc:  # odd text the parser refuses: substrings then
        logger.warning("PostgreSQL could not parse a search's words (%s); substrings used", exc)
        return [0] * len(texts)
    return [int(row[0]) for row in rows]


def route(query: SearchQuery) -> tuple[RoutedGroup, ...]:
    """Each term of ``query`` routed (one round trip asks the server which words make
    lexemes).

    As on SQLite, when a query has a CJK term of three characters or more and
    every word of it is three or more ASCII letters and digits, those words are
    matched as substrings too (``sqlite 数据库`` finds ``pysqlite 数据库``).
    """
    terms = query.terms()
    one_pass = any(t.route == TRIGRAM for t in terms) and all(
        trigram_servable(t) for t in terms if t.route == WORDS
    )
    words = [t for t in terms if t.route == WORDS and not one_pass]
    variants = {t: phrase_variants(t) for t in words}
    texts = [text for t in words for text in variants[t]]
    counts = dict(zip(texts, _lexeme_counts(texts)))

    def routed(term: Term) -> Routed:
        if not term.cjk:
            kept = tuple(v for v in variants.get(term, ()) if counts.get(v, 0) > 0)
            return Routed(term, PG_WORDS, kept) if kept else Routed(term, PG_SUBSTRING)
        return Routed(term, PG_SUBSTRING if term.route == TRIGRAM else PG_GRAMS)

    return tuple(
        RoutedGroup(tuple(map(routed, g.include)), tuple(map(routed, g.exclude)))
        for g in query.groups
    )


def matching(groups: tuple[RoutedGroup, ...]) -> tuple[str, list[Any]]:
    """The WHERE condition of a message matching the query, and its parameters."""
    alternatives, params = [], []
    for group in groups:
        conditions = []
        for routed in group.include:
            condition, values = routed.condition()
            conditions.append(condition)
            params += values
        for routed in group.exclude:
            condition, values = routed.condition()
            conditions.append(sql.negated(condition))
            params += values
        alternatives.append(sql.all_of(conditions))
    return sql.any_of(alternatives), params


def ranked_by_words(groups: tuple[RoutedGroup, ...]) -> bool:
    """Whether a positive word term ranks the hits (:func:`ranking` is not 0)."""
    return any(r.route == PG_WORDS for group in groups for r in group.include)


def ranking(groups: tuple[RoutedGroup, ...]) -> tuple[str, list[Any]]:
    """The rank of a hit (lower is better): FTS5's BM25 over the query's positive word
    terms, each phrase text a phrase as FTS5 reads the query, computed from the same
    statistics (migration 0011), for hits they match; 0 for the others. Reads the
    query's statistics first (one statement: each phrase's idf, the average length)."""
    tsqueries, params = [], []
    texts: list[str] = []
    prefixes: list[bool] = []
    for group in groups:
        for routed in group.include:
            if routed.route == PG_WORDS:
                tsquery, values = routed.tsquery()
                tsqueries.append(tsquery)
                params += values
                texts += routed.variants
                prefixes += [routed.term.prefix] * len(routed.variants)
    if not tsqueries:
        return sql.NO_RANK, []
    phrases, idf, avgdl, expansions = execute(sql.BM25_TERMS, [texts, prefixes]).fetchone()
    by_lexemes: list[bool] = []
    for words, prefix, weight, expansion in zip(phrases, prefixes, idf, expansions):
        lexemes = words.split(" ") if words else [""]
        if len(lexemes) == 1:
            # One word, or a prefix of one: the lexemes it starts among its messages.
            by_lexemes.append(True)
            params += [expansion.split(" ") if prefix else lexemes, weight, avgdl]
        else:
            by_lexemes.append(False)
            params += [lexemes, prefix, weight, avgdl]
    return sql.word_rank("(" + " || ".join(tsqueries) + ")", by_lexemes), params


def filtering(filters: Filters) -> tuple[list[str], list[Any]]:
    """WHERE terms of a search's filters, and their parameters."""
    where: list[str] = [] if filters.include_inactive else [sql.ACTIVE]
    params: list[Any] = []
    if filters.sources is not None:
        where.append(sql.SOURCE_IN)
        params.append(list(filters.sources))
    if filters.exclude:
        where.append(sql.SOURCE_NOT_IN)
        params.append(list(filters.exclude))
    if filters.roles:
        where.append(sql.ROLE_IN)
        params.append(list(filters.roles))
    if filters.since is not None:
        where.append(sql.SENT_SINCE)
        params.append(filters.since)
    if filters.until is not None:
        where.append(sql.SENT_UNTIL)
        params.append(filters.until)
    return where, params


def message_statement(
    query: SearchQuery,
    filters: Filters,
    order: str,
    limit: int | None,
    offset: int,
    rank_window: int | None = None,
) -> tuple[str, list[Any]]:
    """The SQL and parameters of one page of hits (``limit`` -1: every hit)."""
    return page_statement(route(query), filters, order, limit, offset, rank_window=rank_window)


#: How many of the newest messages a search walks first, in time order, for a
#: page whose order is time (newest or oldest first, or ranked with nothing to
#: rank by): when hits are common the walk fills the page after a few hundred
#: rows, where the indexes would hand over every hit to be sorted (PostgreSQL
#: cannot count a substring's hits in advance: its estimate for ``LIKE
#: '%...%'`` is a guess). A walk that does not fill the page costs about 1 us a
#: message (10 ms at most here); the indexes answer then.
WALK_FIRST = 10_000


#: A suggested ``rank_window`` for a ranked page on the server (the value the
#: benchmarks use; not applied unless asked): with ``rank_window=N`` a ranked page is
#: chosen from the newest ``N`` hits. Ranking reads each ranked hit's tsvector from
#: the table: for a word in 35,000 of a million messages that took 120-180 ms, for
#: one in most of them 350 ms; ranking the newest 1,000 takes 10-40 ms. Without
#: ``rank_window`` every hit is ranked.
RANK_WINDOW = 1_000


#: A suggested ``rank_window`` for a session search on the server (as on SQLite,
#: :data:`hermes_models.search.plan.RANK_WINDOW`; not applied unless asked): with
#: ``rank_window=N`` only the newest ``N`` hits are grouped. A word most messages
#: hold has hundreds of thousands, each read from the table to be ranked and
#: counted (``the`` on a million messages: 4.9 s); ``hits`` then counts a
#: conversation's hits within the window.
SESSION_WINDOW = 20_000


def walk_first(
    groups: tuple[RoutedGroup, ...], order: str, limit: int | None, offset: int
) -> int | None:
    """The number of messages to walk before the indexes (:data:`WALK_FIRST`), or
    None when a walk cannot answer the page (ranked word hits; every hit wanted; a
    page deeper than the walk)."""
    if limit is None or limit <= 0 or offset + limit > WALK_FIRST // 10:
        return None
    if order == "rank" and ranked_by_words(groups):
        return None
    return WALK_FIRST


def page_statement(
    groups: tuple[RoutedGroup, ...],
    filters: Filters,
    order: str,
    limit: int | None,
    offset: int,
    walk: int | None = None,
    after_walk: bool = False,
    rank_window: int | None = None,
) -> tuple[str, list[Any]]:
    """The SQL and parameters of one page of hits of routed ``groups`` (among the
    ``walk`` messages first in time order when given: :func:`walk_first`; found
    through the search indexes, not the time index, ``after_walk`` that did not
    fill the page). A ranked page is the best of every hit, or with ``rank_window``
    of the newest ``rank_window`` hits (a deeper page widens it to its end)."""
    condition, params = matching(groups)
    rank, rank_params = ranking(groups) if order == "rank" else (sql.NO_RANK, [])
    where, filter_params = filtering(filters)
    page = [None if limit is None or limit < 0 else limit, offset]
    if rank != sql.NO_RANK and page[0] is not None and rank_window is not None:
        # Ranked among the newest hits only (the caller's bound; a deeper page widens it).
        window = max(rank_window, offset + page[0])
        statement = sql.ranked_window_page(sql.all_of([condition, *where]), rank, window)
        return statement, [*params, *filter_params, *rank_params, *page]
    sort = order if walk is None or order != "rank" else "newest"
    statement = sql.hits_page(
        sql.all_of([condition, *where]), rank, sort, walk, by_time_index=not after_walk
    )
    return statement, [*rank_params, *params, *filter_params, *page]


def page_statements(
    groups: tuple[RoutedGroup, ...],
    filters: Filters,
    order: str,
    limit: int | None,
    offset: int,
    rank_window: int | None = None,
) -> list[tuple[str, list[Any]]]:
    """The statements that find a page, in the order they run: a walk over the
    newest messages when one can answer (its page is the answer when full), then
    the statement over every message."""
    walk = walk_first(groups, order, limit, offset)
    if walk is None:
        return [page_statement(groups, filters, order, limit, offset, rank_window=rank_window)]
    # A walk that does not fill the page says the hits are rare (fewer than
    # the page in the newest WALK_FIRST messages): the search indexes then find
    # them all and they are sorted, never walked for in time order again (the
    # planner's guess for a phrase or a substring can be far too many).
    return [
        page_statement(groups, filters, order, limit, offset, walk),
        page_statement(groups, filters, order, limit, offset, after_walk=True),
    ]


# -- execute ----------------------------------------------------------------------------------


class OutOfTime(Exception):
    """A search statement ran past the search's time budget."""


def within(budget: float | None, run: Callable[[], T]) -> T:
    """``run()`` in a transaction (a savepoint inside the caller's) whose statements
    stop after ``budget`` seconds (None: no limit) and are planned for their own
    values (``plan_cache_mode``: see :data:`hermes_models.store.postgres_sql.SET_CUSTOM_PLANS`);
    both settings are set back afterwards (by the transaction's end, or inside a
    caller's transaction by a statement). A transaction of its own is begun with the
    settings in one round trip (:func:`hermes_models.store.postgres_sql.begin_search`).

    Raises:
        OutOfTime: the server cancelled a statement when the budget ran out.
    """
    db = current()
    milliseconds = None if budget is None else max(1, round(budget * 1000))
    try:
        if not db.in_transaction():
            # Its own transaction, begun with both settings in one round trip; its
            # end sets them back.
            with db.atomic(statement=sql.begin_search(milliseconds)):
                return run()
        # Inside a caller's transaction: a savepoint, the settings set back after.
        with db.atomic():
            if milliseconds is None:
                (plans, _) = execute(sql.SET_CUSTOM_PLANS, []).fetchone()
                result = run()
                execute(sql.RESET_PLAN_CACHE_MODE, [plans])
                return result
            (timeout, plans, _, _) = execute(
                sql.SET_STATEMENT_TIMEOUT, [f"{milliseconds}ms"]
            ).fetchone()
            result = run()
            execute(sql.RESET_STATEMENT_TIMEOUT, [timeout, plans])
            return result
    except peewee.DatabaseError as exc:
        cause = exc.args[0] if exc.args else None
        if getattr(cause, "sqlstate", None) == QUERY_CANCELED:
            raise OutOfTime() from None
        raise


def _ran_out(query: SearchQuery, budget: float | None) -> None:
    logger.warning(
        "PostgreSQL store %s: a search stopped after its time budget of %s s; "
        "returning no hits (query: %.200r)",
        current().path,
        budget,
        query.fts(),
    )


def _degraded(query: SearchQuery, run: Callable[[], T], fallback: Callable[[], T]) -> T:
    """``run()``; when the server refuses its SQL anyway (text no check foresaw),
    ``fallback()`` after a warning. A search never raises for query text."""
    try:
        return run()
    except peewee.DatabaseError as exc:
        if isinstance(exc, peewee.InterfaceError):
            raise
        logger.warning(
            "PostgreSQL search failed (%s); searching with substrings (query: %.200r)",
            exc,
            query.fts(),
        )
        return fallback()


def substring_groups(query: SearchQuery) -> tuple[RoutedGroup, ...]:
    """Every term of ``query`` as a substring (``ILIKE``), the fallback's routes."""
    return tuple(
        RoutedGroup(
            tuple(Routed(t, PG_SUBSTRING) for t in g.include),
            tuple(Routed(t, PG_SUBSTRING) for t in g.exclude),
        )
        for g in query.groups
    )


def search_messages(
    query: SearchQuery,
    filters: Filters,
    order: str,
    limit: int | None,
    offset: int,
    budget: float | None,
    rank_window: int | None = None,
) -> list[dict[str, Any]]:
    """Messages matching ``query`` (arguments checked by
    :func:`hermes_models.search.pipeline.search_messages`); never raises for query text."""

    inactive = filters.include_inactive

    def page(groups: tuple[RoutedGroup, ...]) -> list[tuple[Any, ...]]:
        # Each statement brings the messages around its hits along (one round trip).
        *walks, (statement, params) = page_statements(
            groups, filters, order, limit, offset, rank_window
        )
        for walk, walk_params in walks:
            rows = list(execute(sql.with_context(walk, inactive), walk_params).fetchall())
            if len(rows) == limit:  # a full page of the first messages in time order
                return rows
        return list(execute(sql.with_context(statement, inactive), params).fetchall())

    try:
        rows = within(
            budget,
            lambda: _degraded(
                query, lambda: page(route(query)), lambda: page(substring_groups(query))
            ),
        )
    except OutOfTime:
        _ran_out(query, budget)
        return []
    # Each row: the hit's columns, its rank in the page, the messages around it.
    found = present.Found([row[:-5] for row in rows], {})
    found.around = {row[0]: (row[0], *row[-4:]) for row in rows}
    return present.hits(found, query)


def search_sql(
    query: SearchQuery,
    filters: Filters,
    order: str,
    limit: int | None,
    offset: int,
    rank_window: int | None = None,
) -> list[tuple[str, list[Any]]]:
    """The SQL and parameters that find the hits of :func:`search_messages`, in the
    order they run (:func:`page_statements`)."""
    return page_statements(route(query), filters, order, limit, offset, rank_window)


# -- sessions ---------------------------------------------------------------------------------


def search_sessions(
    query: SearchQuery,
    sources: tuple[str, ...] | None,
    rank_mode: str | None,
    limit: int | None,
    offset: int,
    budget: float | None,
    started: tuple[float | None, float | None] = (None, None),
    rank_window: int | None = None,
) -> list[dict[str, Any]]:
    """Sessions whose messages match ``query``, one row per lineage root (arguments
    checked by :func:`hermes_models.search.pipeline.search_sessions`): every hit
    grouped, or with ``rank_window`` the newest that many."""

    def per_session(groups: tuple[RoutedGroup, ...]) -> list[tuple[Any, ...]]:
        condition, params = matching(groups)
        rank, rank_params = ranking(groups)
        statement = sql.hits_by_session(condition, rank, rank_window)
        return list(execute(statement, [*params, *rank_params]).fetchall())

    try:
        found = within(
            budget,
            lambda: _degraded(
                query,
                lambda: per_session(route(query)),
                lambda: per_session(substring_groups(query)),
            ),
        )
    except OutOfTime:
        _ran_out(query, budget)
        return []
    if not found:
        return []
    rows = page_of_roots(found, sources, rank_mode, limit, offset, started)
    texts: list[tuple[Any, ...]] = []
    if rows:
        ids = [row["_best_id"] for row in rows]
        texts = [tuple(r) for r in execute(sql.MESSAGE_TEXTS, [ids]).fetchall()]
    return present.sessions(rows, texts, query)
