"""Planning a search: the routes of its terms, its SQL, and the values the SQL takes.

The second stage of a search (parse, **plan**, execute, present). It gets a
parsed :class:`~hermes_models.search.query.SearchQuery`, routes each term by the
indexes the open file has (:class:`Shape`), and hands the execute stage a
plan: the statement that finds the hits, the one-pass scan of the
LIKE-routed terms when there is one (:class:`ScanPlan`), and the values of
each slot of their SQL. What the scan finds comes back as a :class:`Scanned`
and is turned into slot values here too: every slot name is made and read in
this module.

A search depends on the routes of its terms, its filters and its order, not
on the words, so its SQL is built with peewee once per shape, with
:func:`~hermes_models.store.statements.slot` placeholders where the values go, and
rendered once (:mod:`hermes_models.store.statements`).

Every term is one lookup: a word in ``messages_fts``, a substring in
``messages_fts_trigram`` (plus the rows stored behind a NUL, which that index
cannot read), or a NUL-safe ``LIKE`` over content, tool name and tool calls.
A query on one index alone is one ``MATCH`` ordered by rank instead. A
ranked query ranks every hit unless its caller bounds it (``rank_window``): then,
when its word-only groups match more than :data:`WINDOW_FROM` times that many
messages, it ranks only their newest ``rank_window`` hits (:attr:`Shape.window`).
:func:`written_out` plans a search whose scanned terms are each written as
the ``LIKE`` they stand for, so plain SQLite can run it (``search_sql``).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import peewee
from peewee import JOIN, SQL, Case, Value, fn
from playhouse.sqlite_ext import FTS5Model

from ..driver import TEXT_BITS
from ..models import Message, Session, delegate_marked, recency
from ..store import (
    INDEXES,
    LIKE,
    SLOT,
    SNIPPET_TOKENS,
    TRIGRAM,
    TRIGRAM_COMPLETE,
    TRIGRAM_NO_TOOLS_OR_RUNS,
    WORDS,
    GramIndex,
    MessageIndex,
    MessageTrigramIndex,
    Statement,
    candidates_sql,
    current,
    exact,
    file_key,
    gram_index_ready,
    gram_text,
    keep,
    kept,
    match_any,
    quoted,
    render,
    slot,
    sqlite_sql,
    term_match,
)
from .query import TRIGRAM_MIN_CHARS, SearchQuery, Term, ascii_lower

Valuer = Callable[[str], Any]

#: The largest LIMIT SQLite takes.
INT64_MAX = 2**63 - 1

#: The longest ``LIKE`` pattern SQLite takes, in bytes (SQLITE_MAX_LIKE_PATTERN_LENGTH).
LIKE_PATTERN_BYTES = 50_000
#: LIKE-routed terms from which a query finds them all with one scan.
SCAN_FROM = 3
#: Groups up to which a scan first tries SQLite's own LIKE (one term per group).
PREFILTER_GROUPS = 2
#: A suggested ``rank_window`` for callers who want speed over an exact ranking (the
#: value the benchmarks use): a search given ``rank_window=N`` ranks only the newest
#: ``N`` hits of a query ranked by the word index (:attr:`Shape.window`). A search
#: without it ranks every hit: BM25 scores every hit before the best come out, and a
#: word found in most of 500,000 messages takes seconds. Not applied unless asked.
RANK_WINDOW: int = 20_000
#: A ranked page is windowed only once its word groups match more than this many
#: times the window. Ranking every hit costs about half as much a hit as ranking the
#: window's (those are joined and kept before they are sorted), so up to about twice
#: the window, ranking them all is cheaper, and exact (``migrat*``, 20,694 hits of
#: 1,000,000 messages: 34 ms every hit, 70 ms the newest 20,000).
WINDOW_FROM = 2
#: A prefix term shorter than this windows a page without that count: ``t*`` or
#: ``th*`` starts thousands of words, and counting their hits costs as much as
#: ranking the window (190 ms on 1,000,000 messages); ``asy*`` counts in 2 ms.
COUNT_PREFIX_CHARS = 3
#: Rows a scan found up to which a query whose every hit is one of them looks each
#: of its word terms up row by row (:attr:`Shape.probes`): about 30 us a lookup,
#: where reading a common word's whole list takes 0.1-0.5 s on 500,000 messages.
PROBE_ROWS = 2_000

#: The fewest groups of a query whose ranked rows are first narrowed to those holding
#: a term each hit needs (:meth:`Shape.necessary`): with fewer, testing each row
#: against the whole query costs less than the lookup.
NARROWED_GROUPS = 4
#: The longest prefix term for which a windowed page makes its snippets in its one
#: pass (:attr:`Shape.snips`): ``t*`` or ``th*`` starts thousands of words.
SNIP_PREFIX_CHARS = 3

# -- routes: what a statement's SQL depends on -------------------------------------------

Routes = tuple[str, ...]


class GroupRoutes(NamedTuple):
    """The routes of one group's terms: those it needs and those it excludes (a named
    tuple: it compares equal to ``(include, exclude)``)."""

    include: Routes
    exclude: Routes = ()


class MergedGroups(NamedTuple):
    """Groups of a query tested together (:meth:`Shape.merged_groups`)."""

    words: tuple[int, ...]
    trigrams: tuple[int, ...]
    found: tuple[int, ...]

    def holds(self, group: int) -> bool:
        """Whether group ``group`` is tested with others."""
        return any(group in kind for kind in (self.words, self.trigrams, self.found))


class Shape(NamedTuple):
    """The routes of a query's terms, group by group, and whether the word index exists."""

    groups: tuple[GroupRoutes, ...]
    words: bool
    #: The structure of the file the SQL is for (:attr:`hermes_models.store.shape.FileShape.key`).
    file: tuple[Any, ...] = ()
    #: True when the file's gram index (:mod:`hermes_models.store.grams`) narrows the
    #: LIKE-routed terms down to candidate rows.
    grams: bool = False
    #: What the file's trigram index leaves out (:data:`hermes_models.store.shape.TRIGRAM_COMPLETE`
    #: and its siblings; ``""`` when the file is not known).
    gaps: str = ""
    #: False when every LIKE-routed term is its own ``LIKE`` (no scan: :func:`written_out`).
    scans: bool = True
    #: True when the gram index narrows the rows the trigram index cannot read (JSON
    #: content) to those holding the CJK characters of each group (:func:`json_narrowing`).
    narrows: bool = False
    #: True when only the newest messages (slot ``budget``: how many) are looked at, a
    #: first try that finds a page of a common query in a bounded number of rows.
    walk: bool = False
    #: True when only the newest hits (slot ``window``: how many) are ranked, when
    #: there are more (:func:`windowed`): a query the word index decides alone reads
    #: them newest first (:func:`newest_words`); another, those above the id of the
    #: ``window + 1``-th newest hit of its groups the word index decides alone (slot
    #: ``wq``: their FTS5 expression; see :func:`newest_cte`).
    window: bool = False
    #: True when a group the word index decides alone has a prefix term, which costs
    #: FTS5 a merge of every word it starts on each lookup.
    prefixes: bool = False
    #: True when the gram index decides the query alone (every term one or two CJK
    #: characters, :func:`hermes_models.store.grams.exact`; slot ``gq``: the whole query as
    #: one gram-index expression, :func:`gram_expression`): a windowed search reads
    #: its newest hits from the index newest first, and the scan reads only the rows
    #: the index does not cover (changed since it indexed them).
    decides: bool = False
    #: True when the gram index holds every message as it is and decides the query
    #: alone, not windowed: the hits are the messages one ``MATCH`` of it lists (slot
    #: ``gq``, as for :attr:`decides`), read in the page's statement; no scan runs
    #: (:meth:`matched_by_grams`).
    matched: bool = False
    #: True when the hits are among the few rows the scan found (:meth:`probed`): a
    #: word term is then looked up for each of those rows (``EXISTS``, by rowid), not
    #: read whole into a list (every match of a common word, for a few rows).
    probes: bool = False
    #: True when a windowed page of words alone makes the snippets of the rows that may
    #: reach it in its one pass over the newest hits (:func:`newest_words`), not in a
    #: second statement: for a prefix term that would merge its words' lists again.
    snips: bool = False
    #: True when the ``LIKE`` pattern of a term that has one is longer than SQLite
    #: takes (:data:`LIKE_PATTERN_BYTES`): its LIKE-routed terms are then found by
    #: the scan, which has no such bound (a LIKE would raise "pattern too complex").
    long_like: bool = False

    @classmethod
    def of(cls, query: SearchQuery, available: frozenset[str]) -> Shape:
        """Each term routed to its index, or to LIKE when the index is missing."""

        terms = query.terms()
        # One trigram pass: when a query has a CJK term the trigram index serves, its
        # words join that term's MATCH if the trigram index can serve them too.
        one_pass = (
            TRIGRAM in available
            and any(t.route == TRIGRAM for t in terms)
            and all(trigram_servable(t) for t in terms if t.route == WORDS)
        )

        def route(t: Term) -> str:
            r = TRIGRAM if one_pass and t.route == WORDS else t.route
            return r if r in available else LIKE

        def routes(terms: Any) -> Routes:
            return tuple(route(t) for t in terms)

        shape = current().shape
        groups = tuple(GroupRoutes(routes(g.include), routes(g.exclude)) for g in query.groups)
        # The gram index holds CJK characters only: it narrows the scan when every
        # LIKE-routed term has one (a word is LIKE-routed when its index is missing).
        like = [
            t
            for t, r in zip(query.terms(), (r for g in groups for r in (*g.include, *g.exclude)))
            if r == LIKE
        ]
        single = {r for g in groups for r in (*g.include, *g.exclude)} == {TRIGRAM}
        return cls(
            groups,
            WORDS in available,
            () if shape is None else shape.key,
            bool(like) and all(t.cjk for t in like) and gram_index_ready(),
            "" if shape is None else shape.trigram_gaps,
            narrows=single and json_narrowing(query) is not None and gram_index_ready(),
            long_like=any(len(t.like().encode("utf-8")) > LIKE_PATTERN_BYTES for t in terms),
        )

    @property
    def routes(self) -> Routes:
        """Routes of all terms, in :meth:`SearchQuery.terms` order."""
        return tuple(r for g in self.groups for r in (*g.include, *g.exclude))

    @property
    def single(self) -> str | None:
        """The one index every term goes to, or None."""
        kinds = set(self.routes)
        return next(iter(kinds)) if len(kinds) == 1 and LIKE not in kinds else None

    @property
    def rank_route(self) -> str | None:
        """The index that ranks a mixed query: words if it has any, else trigrams."""
        positive = {r for g in self.groups for r in g.include}
        return next((r for r in (WORDS, TRIGRAM) if r in positive), None)

    @property
    def word_groups(self) -> tuple[int, ...]:
        """The groups (by position) whose terms all go to the word index."""
        return tuple(
            i
            for i, g in enumerate(self.groups)
            if all(route == WORDS for route in (*g.include, *g.exclude))
        )

    @property
    def windowable(self) -> bool:
        """True when the word index ranks the query and decides a group alone, so that
        the newest ``rank_window`` hits of those groups can be told from it."""
        return self.rank_route == WORDS and bool(self.word_groups)

    @property
    def floored(self) -> bool:
        """True when the newest hits are those above a floor the word index tells (the
        ``newest`` CTE): a windowed query of several routes."""
        return self.window and not self.all_like and self.single != WORDS

    @property
    def scanned(self) -> bool:
        """True when the LIKE-routed terms are found by one scan (:data:`SCAN_FROM` or more).

        Fewer are each a ``LIKE`` in the statement: SQLite's own pattern match
        beats a scan through a Python function for one or two terms.
        """
        if not self.scans:
            return False
        like = sum(route == LIKE for route in self.routes)
        # With the gram index the scan reads only the candidate rows: always cheaper.
        return like >= SCAN_FROM or ((self.grams or self.long_like) and like > 0)

    def merged_excludes(self) -> dict[int, tuple[int, ...]]:
        """Per group (by position), its ``NOT`` terms the scan finds, when they are two or
        more: ``NOT a AND NOT b ...`` is then one ``NOT`` of the messages holding any of
        them (slot ``idsx{group}``), one test a row instead of one a term (``the`` and
        ``NOT`` 63 CJK characters tested 309,000 rows 63 times each)."""
        merged: dict[int, tuple[int, ...]] = {}
        k = 0
        for i, group in enumerate(self.groups):
            k += len(group.include)
            found = tuple(k + j for j, route in enumerate(group.exclude) if route == LIKE)
            k += len(group.exclude)
            if len(found) >= 2:
                merged[i] = found
        return merged

    def merged_words(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per group (by position), the slots of its word-routed terms, needed and
        excluded, when it excludes words and has two or more of them: they are then one
        lookup of the word index (slot ``w{group}``, :func:`term_values`), whose own
        ``NOT`` merges the lists, instead of one list read whole for each term (``that``
        and ``NOT`` 28 common words read 140,000 rows against 28 lists of up to 300,000
        ids each)."""
        merged: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        k = 0
        for i, group in enumerate(self.groups):
            needed = tuple(k + j for j, route in enumerate(group.include) if route == WORDS)
            k += len(group.include)
            excluded = tuple(k + j for j, route in enumerate(group.exclude) if route == WORDS)
            k += len(group.exclude)
            if excluded and len(needed) + len(excluded) >= 2:
                merged[i] = (needed, excluded)
        return merged

    def merged_groups(self, scanned: bool) -> MergedGroups:
        """Groups (by position) that join the others' ``OR`` as one test, when two or
        more are alike: those of words alone (one lookup of the word index, slot
        ``wg``, :func:`term_values`), those of one trigram-routed term alone (one lookup
        of the trigram index, slot ``tg``, and one test of the rows it lacks), and, when
        ``scanned``, those of one LIKE-routed term alone (one list of the messages the
        scan found holding any, slot ``idsg``). 64 terms ``OR``-ed are then a few tests
        a row, not 64."""

        def alike(test: Callable[[GroupRoutes], bool]) -> tuple[int, ...]:
            found = tuple(i for i, g in enumerate(self.groups) if test(g))
            return found if len(found) >= 2 else ()

        return MergedGroups(
            alike(lambda g: all(route == WORDS for route in (*g.include, *g.exclude))),
            alike(lambda g: g == GroupRoutes((TRIGRAM,))),
            alike(lambda g: scanned and g == GroupRoutes((LIKE,))),
        )

    @property
    def behind_scanned(self) -> bool:
        """True for a trigram-only query of :data:`SCAN_FROM` terms or more: the rows
        behind a NUL (which the trigram index lacks) are then decided by one scan."""
        return self.scans and self.single == TRIGRAM and len(self.routes) >= SCAN_FROM

    @property
    def all_like(self) -> bool:
        """True when every term goes through a scan, which then decides the query alone."""
        return self.scanned and all(route == LIKE for route in self.routes)

    def driven(self, ranked: bool) -> bool:
        """True when the LIKE scan's rows (slot ``cand``) hold every hit no index ranks.

        Each group must have a positive LIKE-routed term, or (``ranked``) a
        word term when the word index ranks the query (its hits are read from it).
        Then :func:`hits_query` looks those rows up instead of reading every message.
        """
        if not self.scanned:
            return False
        # The word index holds every hit of a word term; a trigram term also finds
        # rows behind a NUL, which its index lacks.
        rank = WORDS if ranked and self.rank_route == WORDS else None
        return all(LIKE in g.include or rank in g.include for g in self.groups)

    def necessary(self) -> tuple[str, ...] | None:
        """Per group, the route of one positive term every hit of it holds, looked up to
        narrow the rows the word index ranks before each is tested against the whole
        query (:func:`hits_query`): a term the scan found when the group has one, else a
        trigram term, else a word. None when that would not narrow them: fewer than
        :data:`NARROWED_GROUPS` groups, no scan, or a trigram index that leaves rows
        out (a newer Hermes file's)."""
        if not self.scanned or len(self.groups) < NARROWED_GROUPS or self.driven(False):
            return None
        if self.gaps != TRIGRAM_COMPLETE or not self.words:
            return None
        kinds = tuple(
            next(r for r in (LIKE, TRIGRAM, WORDS) if r in g.include) for g in self.groups
        )
        # A group needing only words adds all its word's matches: past a quarter of the
        # groups, the rows left are about all the word index ranks anyway.
        return None if kinds.count(WORDS) * 4 > len(kinds) else kinds

    @property
    def all_ranked(self) -> bool:
        """True when the word index ranks the query and every group needs a word: then
        every hit is one the index ranks, and there are no others. (Not so for the
        trigram index, which cannot read every row: a trigram term also finds rows
        behind a NUL through ``LIKE``, which it does not rank.)"""
        return self.rank_route == WORDS and all(WORDS in g.include for g in self.groups)

    def probed(self, scanned: Scanned | None) -> Shape:
        """This shape with :attr:`probes` when every hit is among the rows ``scanned``
        found (each group needs a term it looked for) and those are at most
        :data:`PROBE_ROWS`."""
        if scanned is None or self.single is not None or self.all_like:
            return self
        if not self.driven(False) or WORDS not in self.routes:
            return self
        holding = scanned.holding
        rows = set().union(
            *(holding[k] for k, included in self.numbered() if included and k in holding)
        )
        return self._replace(probes=True) if len(rows) <= PROBE_ROWS else self

    def matched_by_grams(self, query: SearchQuery) -> Shape | None:
        """This shape with :attr:`matched` when its scan (:func:`scan_plan`) would only
        look ``query``'s terms up in the gram index, each exactly, and read no row (the
        index holding every message, which the caller tells); else None."""
        if self.matched or self.window or self.walk or not (self.grams and self.all_like):
            return None
        if not all(exact(term) for term in query.terms()):
            return None
        return self._replace(matched=True)

    def snipped(self, query: SearchQuery, order: str) -> Shape:
        """This shape with :attr:`snips` for a ranked windowed page of words alone with a
        short prefix term (:data:`SNIP_PREFIX_CHARS`), whose second statement would merge
        again the lists of the many words it starts. (A longer prefix starts few words:
        a second statement costs less than a function call for each hit read.)"""
        if not (order == "rank" and self.single == WORDS and self.window and self.prefixes):
            return self
        if all(len(t.text) > SNIP_PREFIX_CHARS for t in query.terms() if t.prefix):
            return self
        return self._replace(snips=True)

    def degraded(self) -> Shape:
        """Every term through LIKE, over every row (no index of any kind)."""
        return Shape(
            tuple(
                GroupRoutes(tuple(LIKE for _ in g.include), tuple(LIKE for _ in g.exclude))
                for g in self.groups
            ),
            self.words,
            self.file,
            gaps=self.gaps,
            scans=self.scans,
            long_like=self.long_like,
        )

    def unscanned(self) -> Shape:
        """The same routes, every LIKE-routed term its own ``LIKE`` (no scan, no gram index)."""
        return self._replace(
            grams=False,
            scans=False,
            narrows=False,
            decides=False,
            matched=False,
            probes=False,
            snips=False,
        )

    def numbered(self) -> list[tuple[int, bool]]:
        """``(k, included)`` of each term slot, in slot order."""
        out, k = [], 0
        for g in self.groups:
            for included in [True] * len(g.include) + [False] * len(g.exclude):
                out.append((k, included))
                k += 1
        return out

    def decided(self, holding: dict[int, set[int]]) -> set[int]:
        """The ids matching the whole query, every term's holders known."""
        hits: set[int] = set()
        k = 0
        for g in self.groups:
            group = set.intersection(*(holding[k + i] for i in range(len(g.include))))
            k += len(g.include)
            for i in range(len(g.exclude)):
                group -= holding[k + i]
            k += len(g.exclude)
            hits |= group
        return hits

    def prefilter(self) -> tuple[int, ...]:
        """One positive LIKE-routed term (slot number) of each group, when every group has
        one and there are few groups: only rows holding one of them can be hits."""
        if len(self.groups) > PREFILTER_GROUPS or not self.driven(False):
            return ()
        picked, k = [], 0
        for g in self.groups:
            picked.append(k + g.include.index(LIKE))
            k += len(g.include) + len(g.exclude)
        return tuple(picked)


@functools.lru_cache(maxsize=64)  # asked for by the shape and by the values of a search
def json_narrowing(query: SearchQuery) -> str | None:
    """The gram-index expression of the messages that can hold ``query``: in each group,
    the CJK characters and adjacent pairs of its terms, all of them; any group
    (None when a group has no CJK term to narrow by)."""
    groups = []
    for group in query.groups:
        tokens = sorted({token for term in group.include for token in gram_text(term.text).split()})
        if not tokens:
            return None
        groups.append("(" + " AND ".join(quoted(token) for token in tokens) + ")")
    return " OR ".join(groups)


def gram_expression(query: SearchQuery) -> str:
    """The whole query as one gram-index expression, for a query whose every term the
    gram index answers exactly (:func:`hermes_models.store.grams.exact`): in each group its
    terms' tokens, all of them, none of its excluded ones; any group."""
    groups = []
    for group in query.groups:
        text = "(" + " AND ".join(term_match(t) for t in group.include) + ")"
        groups.append("(" + text + "".join(f" NOT {term_match(t)}" for t in group.exclude) + ")")
    return " OR ".join(groups)


def k_of_group(shape: Shape, group: int) -> int:
    """The slot number of the first term of ``group``."""
    return sum(len(g.include) + len(g.exclude) for g in shape.groups[:group])


def trigram_servable(term: Term) -> bool:
    """True for a word the trigram index finds as well as the word index, as a
    substring: three or more ASCII letters and digits, not a prefix (ASCII, so
    that both indexes fold its case alike and no accent is in question)."""
    text = term.text
    return not term.prefix and len(text) >= TRIGRAM_MIN_CHARS and text.isascii() and text.isalnum()


def term_values(query: SearchQuery, shape: Shape) -> dict[str, Any]:
    """Values of the term slots of ``shape`` for ``query`` (only those its SQL has)."""
    single = shape.single
    out: dict[str, Any] = {"q": query.fts(), "json": '^"json"'}
    if single == WORDS:
        return out
    if shape.narrows:
        out["narrow"] = json_narrowing(query)
    if shape.decides or shape.matched:
        out["gq"] = gram_expression(query)
    positive: dict[str, list[str]] = {WORDS: [], TRIGRAM: []}
    k = 0
    for group, routes in zip(query.groups, shape.groups):
        terms = (*group.include, *group.exclude)
        for term, route in zip(terms, (*routes.include, *routes.exclude)):
            if route != LIKE:
                out[f"t{k}"] = term.fts()
            if route != WORDS:
                out[f"p{k}"] = term.like()
                out[f"l{k}"] = ascii_lower(term.text)
            k += 1
        for term, route in zip(group.include, routes.include):
            if route in positive:
                positive[route].append(term.fts())
    kinds = shape.necessary()
    if kinds is not None and WORDS in kinds:
        wanted = []
        for group, kind in zip(query.groups, kinds):
            if kind == WORDS:
                words = [t for t in group.include if not t.cjk]
                wanted.append(min(words, key=lambda t: t.prefix).fts())
        out["need_words"] = " OR ".join(wanted)
    alike = shape.merged_groups(False)
    if alike.words:
        out["wg"] = " OR ".join(f"({query.groups[i].fts()})" for i in alike.words)
    if alike.trigrams:
        out["tg"] = " OR ".join(query.groups[i].include[0].fts() for i in alike.trigrams)
    for i, (needed, excluded) in shape.merged_words().items():
        group = query.groups[i]
        terms = (*group.include, *group.exclude)
        first = k_of_group(shape, i)
        expression = " OR ".join(f"({terms[k - first].fts()})" for k in excluded)
        if needed:
            both = " AND ".join(f"({terms[k - first].fts()})" for k in needed)
            expression = f"({both}) NOT ({expression})"
        out[f"w{i}"] = expression
    if single is None:
        for route, found in positive.items():
            out[f"any_{route}"] = " OR ".join(found) or '""'
    return out


# -- filters ----------------------------------------------------------------------------


class FileRules(NamedTuple):
    """How the open file is searched: a newer Hermes file's columns change the filters
    (a named tuple: part of a statement's cache key, built on every search)."""

    newer: bool = False
    #: ``messages.compacted`` exists: messages archived by compaction are hits too.
    compacted: bool = False
    #: ``messages.display_kind`` exists: rows marked ``hidden`` are never hits.
    display_kind: bool = False


def file_rules() -> FileRules:
    """The :class:`FileRules` of the open file (all False for v16)."""
    shape = current().shape
    if shape is None or not shape.newer:
        return FileRules()
    return FileRules(
        True, shape.has("messages", "compacted"), shape.has("messages", "display_kind")
    )


class FilterShape(NamedTuple):
    """What the SQL of a search's filters depends on, not the values (a named tuple:
    part of a statement's cache key, built on every search)."""

    sources: int | None
    exclude: int
    roles: int
    include_inactive: bool
    rules: FileRules
    since: bool = False
    until: bool = False


@dataclass(frozen=True)
class Filters:
    """Which messages a search may return, besides matching."""

    sources: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    include_inactive: bool = False
    #: Messages sent at or after ``since`` and before ``until`` (epoch seconds; None: open).
    since: float | None = None
    until: float | None = None

    def shape(self) -> FilterShape:
        """What the SQL depends on (the open file's reading rules included)."""
        n_sources = None if self.sources is None else len(self.sources)
        return FilterShape(
            n_sources,
            len(self.exclude),
            len(self.roles),
            self.include_inactive,
            file_rules(),
            self.since is not None,
            self.until is not None,
        )

    def values(self) -> dict[str, Any]:
        """Values of the filter slots."""
        out: dict[str, Any] = {}
        for prefix, items in (("s", self.sources or ()), ("x", self.exclude), ("r", self.roles)):
            for i, item in enumerate(items):
                out[f"{prefix}{i}"] = item
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        return out


def visible(m: Any, rules: FileRules) -> Any:
    """Messages a search shows unless asked for inactive ones: live ones, and on newer
    Hermes files also those archived by compaction (as Hermes searches them)."""
    if rules.compacted:
        return (m.active == 1) | (m.compacted == 1)
    return m.active == 1


def filter_terms(shape: FilterShape, m: Any, s: Any) -> list[peewee.Node]:
    """WHERE terms of a :class:`FilterShape` over messages ``m`` and sessions ``s``.

    On a newer Hermes file the search follows Hermes' later filters: rows
    marked ``display_kind = 'hidden'`` are never hits, and tool rows only
    when the role filter asks for them.
    """
    terms: list[peewee.Node] = []
    if not shape.include_inactive:
        terms.append(visible(m, shape.rules))
    if shape.rules.newer:
        if shape.rules.display_kind:
            terms.append(fn.COALESCE(m.display_kind, "") != "hidden")
    if shape.sources is not None:
        terms.append(s.source.in_([slot(f"s{i}") for i in range(shape.sources)]))
    if shape.exclude:
        terms.append(s.source.not_in([slot(f"x{i}") for i in range(shape.exclude)]))
    if shape.roles:
        terms.append(m.role.in_([slot(f"r{i}") for i in range(shape.roles)]))
    if shape.since:
        terms.append(m.timestamp >= slot("since"))
    if shape.until:
        terms.append(m.timestamp < slot("until"))
    return terms


#: Bound as a parameter: SQLite does not fold ``char(0)`` into a constant.
NUL = "\x00"


def _rowids(index: type[FTS5Model], value: Any, window: bool = False) -> Any:
    """Rowids of ``index`` matching ``value``; with ``window``, only those above the
    floor of the ``newest`` CTE (:func:`newest_cte`)."""
    query = index.select(index.rowid).where(index.match(value))
    return query.where(index.rowid > SQL(sqlite_sql.NEWEST_FLOOR)) if window else query


def windowed(
    shape: Shape,
    query: SearchQuery,
    order: str,
    limit: int | None,
    *,
    scanned: bool = False,
    rank_window: int | None = None,
) -> Shape:
    """``shape``, ranking only the newest hits (:attr:`Shape.window`) when the caller
    bounds the ranking (``rank_window`` not None), it is ranked by the word index and
    a page of it is wanted (``limit`` not None); with ``scanned``, also when its scan
    decides it alone (a session search counts every hit it reads)."""
    if rank_window is None or order != "rank" or limit is None or limit < 0:
        return shape
    if not (shape.windowable or (scanned and shape.all_like)):
        return shape
    prefixes = any(t.prefix for i in shape.word_groups for t in query.groups[i].include)
    # A query the gram index decides alone: its newest hits come from the index itself,
    # which hands them over newest first, instead of from every term's whole id list.
    decides = shape.all_like and shape.grams and all(exact(t) for t in query.terms())
    return shape._replace(window=True, prefixes=prefixes, decides=decides)


def window_values(
    query: SearchQuery, shape: Shape, upto: int, rank_window: int | None
) -> dict[str, Any]:
    """The slots of the ``newest`` CTE: ``wq``, the groups the word index decides alone,
    and ``window``, how many of their newest hits are ranked (``rank_window``, at least
    ``upto``, the end of the page)."""
    if not shape.window:
        return {}
    groups = [query.groups[i] for i in shape.word_groups]
    return {
        "wq": " OR ".join(f"({group.fts()})" for group in groups) or '""',
        "window": max(rank_window or 0, upto),
    }


def newest_cte(filters: FilterShape) -> Any:
    """``newest(floor)``: the id of the ``window + 1``-th newest message the ``wq``
    groups match among those ``filters`` let through, or 0 when there are no more than
    ``window`` of them (the word index hands its matches over newest first without
    ranking them, so this stops after ``window`` rows)."""
    index = MessageIndex
    m, s = Message.alias("wm"), Session.alias("ws")
    shown = index.select(m.id).join(m, on=(m.id == index.rowid))
    if filters.sources is not None or filters.exclude:
        shown = shown.join(s, on=(s.id == m.session))
    shown = (
        shown.where(index.match(slot("wq")), *filter_terms(filters, m, s))
        .order_by(index.rowid.desc())
        .limit(1)
        .offset(slot("window"))
    )
    return peewee.Select(columns=[fn.COALESCE(shown, 0)]).cte("newest", columns=("floor",))


def _holds_nul(column: Any) -> Any:
    return (fn.typeof(column) == "text") & (fn.instr(column, fn.char(0)) > 0)


def _whole_text(column: Any) -> Any:
    """``column`` as an argument of an SQL function of ours, whole: text holding a NUL
    character goes as its UTF-8 bytes (some builds of the ``sqlite3`` module cut a
    text argument at its first NUL), flagged in :func:`_nul_mask`."""
    return Case(None, [(_holds_nul(column), column.cast("BLOB"))], column)


def _nul_mask(columns: tuple[Any, ...]) -> Any:
    """Which of ``columns`` :func:`_whole_text` hands over as bytes (bit ``i``: the
    ``i``-th), and which are text (bit ``TEXT_BITS + i``): a text value that comes as
    NULL is text that is not UTF-8, which some builds of the ``sqlite3`` module
    (pysqlite3) hand to a function as None instead of failing
    (:meth:`hermes_models.search.query.Matcher.visit` raises for it)."""
    mask = _holds_nul(columns[0]) + (fn.typeof(columns[0]) == "text") * (1 << TEXT_BITS)
    for i, column in enumerate(columns[1:], 1):
        mask = mask + _holds_nul(column) * (1 << i)
        mask = mask + (fn.typeof(column) == "text") * (1 << (TEXT_BITS + i))
    return mask


def _starts_with_nul(m: Any) -> Any:
    return (m.content >= Value(NUL)) & (m.content < Value("\x01"))


def _trigram_gap(m: Any, shape: Shape) -> Any:
    """Rows the trigram index of a newer Hermes file leaves out (None: it has every row).

    Hermes' later layouts never index tool rows in full, and layout 3 (v29/v30)
    leaves out cron and subagent sessions as well; a ``LIKE`` finds those.
    """
    gaps = shape.gaps
    if gaps == TRIGRAM_COMPLETE:
        return None
    gap = m.role == "tool"
    if gaps == TRIGRAM_NO_TOOLS_OR_RUNS:
        g = Session.alias("gap")
        run = fn.EXISTS(
            g.select(SQL("1")).where(
                g.id == m.session,
                g.source.in_(["cron", "subagent"]) | delegate_marked(g),
            )
        )
        gap = gap | run
    return gap


def _behind_nul(m: Any, shape: Shape, v: Valuer) -> Any:
    """Rows the trigram index holds nothing of: content starting with NUL, and the
    rows a newer Hermes file's trigram index leaves out (:func:`_trigram_gap`)."""
    if shape.words:
        nul = m.id.in_(_rowids(MessageIndex, v("json"))) & _starts_with_nul(m)
    else:
        nul = _starts_with_nul(m)
    gap = _trigram_gap(m, shape)
    return nul if gap is None else (nul | gap)


def _like(m: Any, k: int, v: Valuer) -> Any:
    """Term ``k`` anywhere in content, tool name or tool calls (NUL-safe)."""
    pattern = v(f"p{k}")

    def like(column: Any) -> Any:
        return peewee.NodeList((column, SQL("LIKE"), pattern, SQL("ESCAPE '\\'")), parens=True)

    after_nul = (fn.instr(m.content, Value(NUL)) > 0) & (
        fn.instr(fn.lower(m.content), v(f"l{k}")) > 0
    )
    return like(m.content) | like(m.tool_name) | like(m.tool_calls) | after_nul


def _found(m: Any, k: int, v: Valuer) -> Any:
    """Term ``k`` among the ids the scan found (slot ``ids{k}``: a JSON array)."""
    ids = v(f"ids{k}")
    return m.id.in_(SQL(sqlite_sql.JSON_LIST, [getattr(ids, "value", ids)]))


def _words(m: Any, shape: Shape, value: Any) -> Any:
    """Messages ``m`` the word index matches ``value`` for."""
    if shape.probes:
        index = MessageIndex
        probe = index.select(SQL("1")).where(index.match(value), index.rowid == m.id)
        if shape.floored:
            probe = probe.where(index.rowid > SQL(sqlite_sql.NEWEST_FLOOR))
        return fn.EXISTS(probe)
    return m.id.in_(_rowids(MessageIndex, value, shape.floored))


def _term(m: Any, shape: Shape, route: str, k: int, v: Valuer, scanned: bool) -> Any:
    if route == WORDS:
        return _words(m, shape, v(f"t{k}"))
    if route == LIKE:
        return _found(m, k, v) if scanned else _like(m, k, v)
    trigram = m.id.in_(_rowids(MessageTrigramIndex, v(f"t{k}")))
    return trigram | (_behind_nul(m, shape, v) & _like(m, k, v))


def predicate(
    m: Any,
    shape: Shape,
    v: Valuer = slot,
    *,
    scanned: bool | None = None,
    unworded: bool = False,
) -> Any:
    """The whole query as one WHERE expression over messages ``m``.

    ``scanned`` (default: :attr:`Shape.scanned`): the LIKE-routed terms were
    found beforehand by one scan (:class:`ScanPlan`) and come as id
    lists; otherwise each is a ``LIKE`` of its own. ``unworded``: only the groups
    without a positive word term, for rows known to match no positive word.
    """
    if scanned is None:
        scanned = shape.scanned
    merged = shape.merged_excludes() if scanned else {}
    words = shape.merged_words()
    alike = shape.merged_groups(scanned)
    groups, k = [], 0
    if unworded:
        alike = alike._replace(words=())
    if alike.words:
        groups.append(_words(m, shape, v("wg")))
    if alike.found:
        ids = v("idsg")
        groups.append(m.id.in_(SQL(sqlite_sql.JSON_LIST, [getattr(ids, "value", ids)])))
    if alike.trigrams:
        # As each term's test (:func:`_term`): the index, or a LIKE of a row it lacks.
        likes = [_like(m, k_of_group(shape, i), v) for i in alike.trigrams]
        lacked = _behind_nul(m, shape, v) & _balanced(operator.or_, likes)
        groups.append(m.id.in_(_rowids(MessageTrigramIndex, v("tg"))) | lacked)
    for i, g in enumerate(shape.groups):
        if alike.holds(i) or (unworded and WORDS in g.include):
            k += len(g.include) + len(g.exclude)
            continue
        needed, excluded = words.get(i, ((), ()))
        # (term, whether it is a lookup of the word index), in the order SQLite tries them.
        terms: list[tuple[Any, bool]] = []
        if needed:
            terms.append((_words(m, shape, v(f"w{i}")), True))
        for route in g.include:
            if k not in needed:
                terms.append((_term(m, shape, route, k, v, scanned), route == WORDS))
            k += 1
        for route in g.exclude:
            if k not in merged.get(i, ()) and k not in excluded:
                # NULL columns can make a term NULL rather than false, and NOT NULL
                # would drop the row (COALESCE only here: it slows the scan down).
                term = ~fn.COALESCE(_term(m, shape, route, k, v, scanned), 0)
                terms.append((term, route == WORDS))
            k += 1
        if excluded and not needed:
            terms.append((~_words(m, shape, v(f"w{i}")), True))
        if i in merged:
            ids = v(f"idsx{i}")
            listed = m.id.not_in(SQL(sqlite_sql.JSON_LIST, [getattr(ids, "value", ids)]))
            terms.append((listed, False))
        if shape.probes:
            # The scan's id lists first: a row is probed only for the groups it may match.
            terms = [t for t in terms if not t[1]] + [t for t in terms if t[1]]
        groups.append(_balanced(operator.and_, [term for term, _ in terms]))
    return _balanced(operator.or_, groups)


def _balanced(join: Callable[[Any, Any], Any], items: list[Any]) -> Any:
    """``items`` joined pairwise into a tree of depth log2(n), not n: SQLite's parser
    overflows on 64 terms nested one inside the next."""
    while len(items) > 1:
        items = [
            join(*items[i : i + 2]) if i + 1 < len(items) else items[i]
            for i in range(0, len(items), 2)
        ]
    return items[0]


#: The SQL function a search registers on its connection for a scan (:class:`ScanPlan`):
#: ``(id, content, tool_name, tool_calls) -> 0``, noting which of the query's
#: LIKE-routed terms the message holds (:meth:`hermes_models.search.query.Matcher.visit`).
SCAN_FUNCTION = "hermes_models_visit"


def scan_statement(
    include_inactive: bool,
    non_ascii: bool,
    prefilter: tuple[int, ...] = (),
    behind: Shape | None = None,
    grams: bool = False,
    raw: bool = False,
) -> Statement:
    """One scan of the messages that shows each to :data:`SCAN_FUNCTION`; returns no rows.

    ``non_ascii``: every term has a character beyond ASCII, so a row whose
    columns are plain ASCII (as many bytes as characters, no tool columns)
    is passed over without calling the function. ``prefilter``: terms (by
    slot number) of which every hit holds one; a row holding none is passed
    over by SQLite's own ``LIKE`` (cheaper than the function for a few terms).
    ``behind``: only the rows behind a NUL, which a trigram query of that shape
    cannot find through its index. ``grams``: only the candidate rows of the gram
    index (slot ``cjk``: the expression of :func:`hermes_models.store.grams.match_any`).
    ``raw``: the function is shown text as its bytes and a BLOB as NULL (which ``LIKE``
    never matches), for a file holding text that is not UTF-8, which sqlite3 cannot
    hand to a function (:func:`visit_bytes` reads it with U+FFFD).
    """
    key = (
        "scan",
        include_inactive,
        non_ascii,
        prefilter,
        grams,
        behind is not None and behind.words,
        behind.gaps if behind is not None else None,
        raw,
        file_key(),
    )
    found = kept(key)
    if found is None:
        found = keep(key, _render_scan(include_inactive, non_ascii, prefilter, behind, grams, raw))
    return found


def _as_bytes(column: Any) -> Any:
    """A text column's value as its bytes, NULL for a BLOB, any other value as it is."""
    kind = fn.typeof(column)
    return Case(
        None, [(kind == "text", column.cast("BLOB")), (kind == "blob", SQL("NULL"))], column
    )


def visit_bytes(visit: Callable[..., int]) -> Callable[..., int]:
    """``visit`` (a :data:`SCAN_FUNCTION`) for a ``raw`` scan (:func:`scan_statement`):
    text handed over as bytes is read as UTF-8 with U+FFFD for what is not."""

    def visit_raw(message_id: int, *columns: object) -> int:
        return visit(
            message_id,
            *(c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in columns),
        )

    return visit_raw


def _render_scan(
    include_inactive: bool,
    non_ascii: bool,
    prefilter: tuple[int, ...],
    behind: Shape | None,
    grams: bool,
    raw: bool = False,
) -> Statement:
    m = Message
    where = [] if include_inactive else [visible(m, file_rules())]
    if grams:
        cjk = slot("cjk").value
        where.append(m.id.in_(SQL(f"({candidates_sql()})", [cjk, cjk])))
    if behind is not None:
        where.append(_behind_nul(m, behind, slot))
    if non_ascii:
        where.append(
            (fn.length(m.content.cast("BLOB")) > fn.length(m.content))
            | m.tool_name.is_null(False)
            | m.tool_calls.is_null(False)
        )
    if prefilter:
        where.append(_balanced(operator.or_, [_like(m, k, slot) for k in prefilter]))
    columns = (m.content, m.tool_name, m.tool_calls)
    if raw:  # every text as its bytes: text another program stored that is not UTF-8
        visit = getattr(fn, SCAN_FUNCTION)(m.id, *map(_as_bytes, columns))
    else:
        visit = getattr(fn, SCAN_FUNCTION)(m.id, *map(_whole_text, columns), _nul_mask(columns))
    query = m.select(m.id).where(*where, visit != 0)
    return render(query)


@dataclass
class ScanPlan:
    """The one pass over the messages that finds a query's LIKE-routed terms.

    The execute stage looks each term of ``indexed`` up in the gram index
    (:data:`hermes_models.store.grams.GRAM_IDS_SQL`, bound to the expression),
    then runs ``statement`` with ``values``, a
    :class:`~hermes_models.search.query.Matcher` of ``terms`` noting which rows hold
    which term, and hands back a :class:`Scanned`.
    """

    statement: Statement
    values: dict[str, Any]
    #: ``(k, term)``: the terms the scan looks for, by slot number.
    terms: tuple[tuple[int, Term], ...]
    #: ``(k, expression)``: terms the gram index answers exactly (rows not changed
    #: since indexed).
    indexed: tuple[tuple[int, str], ...] = ()
    #: True when ``statement`` reads only the rows the gram index does not cover
    #: (changed since indexed): none when it covers every message.
    uncovered_only: bool = False
    #: ``statement`` showing text as bytes (:func:`scan_statement`'s ``raw``): for a
    #: file holding text that is not UTF-8.
    raw: Callable[[], Statement] | None = None


@dataclass
class Scanned:
    """What a scan found: for each term slot it looked for, the ids of the messages holding it."""

    holding: dict[int, set[int]]


def scan_plan(query: SearchQuery, shape: Shape, include_inactive: bool) -> ScanPlan | None:
    """The scan of ``query``'s LIKE-routed terms (or of the rows behind a NUL of a
    trigram-only query), or None when its SQL needs none."""
    if shape.matched:
        return None  # the page's statement reads the gram index itself
    if shape.behind_scanned:
        terms = query.terms()
        wide = all(not t.text.isascii() for t in terms)
        statement = scan_statement(include_inactive, wide, behind=shape)
        return ScanPlan(
            statement,
            term_values(query, shape),
            tuple(enumerate(terms)),
            raw=lambda: scan_statement(include_inactive, wide, behind=shape, raw=True),
        )
    if not shape.scanned:
        return None
    values = term_values(query, shape)
    like = tuple(
        (k, term)
        for k, (term, route) in enumerate(zip(query.terms(), shape.routes))
        if route == LIKE
    )
    indexed: tuple[tuple[int, str], ...] = ()
    if shape.decides:
        # The statement reads the index's hits; the scan reads only the rows it does
        # not cover (changed since indexed) and decides them.
        values["cjk"] = None
    elif shape.grams:
        # A term of one or two CJK characters only is answered by the gram index
        # exactly; the scan reads the candidates of the other terms, and the rows
        # the index does not cover (changed since it indexed them).
        exacts = [exact(t) for _, t in like]
        indexed = tuple((k, term_match(t)) for (k, t), e in zip(like, exacts) if e)
        rest = [t for (_, t), e in zip(like, exacts) if not e]
        values["cjk"] = match_any(rest) if rest else None
    wide = all(not t.text.isascii() for _, t in like)
    prefilter = () if shape.grams else shape.prefilter()
    statement = scan_statement(include_inactive, wide, prefilter, grams=shape.grams)
    uncovered_only = shape.grams and values.get("cjk") is None
    return ScanPlan(
        statement,
        values,
        like,
        indexed,
        uncovered_only,
        raw=lambda: scan_statement(include_inactive, wide, prefilter, grams=shape.grams, raw=True),
    )


def scanned_values(shape: Shape, scanned: Scanned | None, *, decide: bool = True) -> dict[str, str]:
    """The slots a scan fills: ``ids{k}``, the messages holding term ``k``; ``cand``, those
    holding any positive one, or (every term LIKE-routed, and ``decide``) exactly the
    hits; ``behind``, the hits among the rows behind a NUL."""
    if scanned is None:
        return {}
    holding = scanned.holding
    if shape.behind_scanned:
        return {"behind": json.dumps(sorted(shape.decided(holding)))}
    if decide and shape.all_like:
        return {"cand": json.dumps(sorted(shape.decided(holding)))}
    candidates = set().union(
        *(holding[k] for k, included in shape.numbered() if included and k in holding)
    )
    merged = shape.merged_excludes()
    alone = set(holding) - {k for found in merged.values() for k in found}
    out = {f"ids{k}": json.dumps(sorted(holding[k])) for k in alone}
    for i, found in merged.items():
        out[f"idsx{i}"] = json.dumps(sorted(set().union(*(holding.get(k, ()) for k in found))))
    kinds = shape.necessary()
    if kinds is not None:
        needed: set[int] = set()
        for i, kind in enumerate(kinds):
            if kind == LIKE:
                first = k_of_group(shape, i)
                routes = shape.groups[i].include
                lists = [holding.get(first + j, set()) for j, r in enumerate(routes) if r == LIKE]
                needed |= min(lists, key=len)
        out["need"] = json.dumps(sorted(needed))
    found_groups = shape.merged_groups(True).found
    if found_groups:
        firsts = [k_of_group(shape, i) for i in found_groups]
        out["idsg"] = json.dumps(sorted(set().union(*(holding.get(k, ()) for k in firsts))))
    out["cand"] = json.dumps(sorted(candidates))
    return out


# -- plans: what the execute stage runs -----------------------------------------------------


@dataclass
class MessagePlan:
    """A search for messages: one page of hits of ``query`` in ``shape``, ``order``-ed."""

    query: SearchQuery
    shape: Shape
    filters: Filters
    #: ``'rank'``, ``'newest'`` or ``'oldest'``.
    order: str
    limit: int | None
    offset: int
    #: How many of the newest hits a windowed shape ranks (:func:`windowed`).
    rank_window: int | None = None

    @property
    def statement(self) -> Statement:
        """The page of hits (:data:`HIT_COLUMNS`, then ``snippet`` when it has one)."""
        return search_statement(self.shape, self.filters.shape(), self.order)

    def scan(self) -> ScanPlan | None:
        """The scan to run first, if any."""
        return scan_plan(self.query, self.shape, self.filters.include_inactive)

    def values(self, scanned: Scanned | None) -> dict[str, Any]:
        """Every slot value of :attr:`statement`."""
        upto = -1 if self.limit is None or self.limit < 0 else self.limit + self.offset
        return {
            **self.filters.values(),
            "limit": self.limit,
            "offset": self.offset,
            "upto": min(upto, INT64_MAX),
            **term_values(self.query, self.shape),
            **scanned_values(self.shape, scanned),
            **window_values(self.query, self.shape, max(upto, 0), self.rank_window),
        }

    def snippets(self, ids: list[int]) -> tuple[Statement, dict[str, Any]] | None:
        """The FTS5 snippets of hits ``ids`` of a page without them (None: made in Python)."""
        single = self.shape.single
        if single is None:
            return None
        values = {"q": self.query.fts(), "ids": json.dumps(ids), "low": min(ids)}
        return snippet_statement(single, self.shape.window), values


@dataclass
class SessionPlan:
    """A search for sessions: the sessions whose messages match ``query``, a row each
    (:mod:`hermes_models.search.by_root` makes the page of lineage roots)."""

    query: SearchQuery
    shape: Shape
    #: How many of the newest hits a windowed shape counts (:func:`windowed`).
    rank_window: int | None = None

    @property
    def statement(self) -> Statement:
        """One row per session with hits (see :func:`sessions_statement`)."""
        return sessions_statement(self.shape)

    def scan(self) -> ScanPlan | None:
        """The scan to run first, if any."""
        return scan_plan(self.query, self.shape, False)

    def values(self, scanned: Scanned | None) -> dict[str, Any]:
        """Every slot value of :attr:`statement`."""
        return {
            **term_values(self.query, self.shape),
            **scanned_values(self.shape, scanned),
            **window_values(self.query, self.shape, 0, self.rank_window),
        }


def matching_query(
    query: SearchQuery, shape: Shape | None, scanned: Scanned | None, include_inactive: bool
) -> peewee.ModelSelect[Message]:
    """Messages matching ``query`` as a peewee query with its values in place (None
    ``shape``: nothing to search). Best first when every term goes to the word index,
    newest first otherwise."""
    m = Message
    if shape is None:
        return m.select().where(SQL("0"))
    values = {**term_values(query, shape), **scanned_values(shape, scanned, decide=False)}
    if shape.single == WORDS:
        found = (
            m.select()
            .join(MessageIndex, on=(MessageIndex.rowid == m.id))
            .where(MessageIndex.match(values["q"]))
            .order_by(MessageIndex.rank())
        )
    else:
        found = (
            m.select()
            .where(predicate(m, shape, lambda name: Value(values[name])))
            .order_by(m.timestamp.desc(), m.id.desc())
        )
    return found if include_inactive else found.where(m.active == 1)


def written_out(plan: MessagePlan) -> tuple[str, list[Any]]:
    """The SQL and parameters of ``plan`` with no scan before it: every LIKE-routed
    term is the ``LIKE`` it stands for, so plain SQLite runs it alone."""
    plain = dataclasses.replace(plan, shape=plan.shape.unscanned())
    statement = plain.statement
    return statement.sql, list(statement.bind(plain.values(None)))


def _columns(m: Any, s: Any, rank: Any, slim: bool) -> list[Any]:
    columns = [m.id.alias("id"), m.session.alias("session_id"), m.timestamp.alias("timestamp")]
    if not slim:
        columns += [
            m.role.alias("role"),
            m.content.alias("content"),
            m.tool_name.alias("tool_name"),
            m.tool_calls.alias("tool_calls"),
            s.source.alias("source"),
            s.model_name.alias("model"),
            s.started_at.alias("session_started"),
        ]
    return [*columns, rank.alias("rank")]


#: Column names of a hit row, in order (``slim`` rows: the first three and ``rank``).
HIT_COLUMNS = (
    "id",
    "session_id",
    "timestamp",
    "role",
    "content",
    "tool_name",
    "tool_calls",
    "source",
    "model",
    "session_started",
    "rank",
)


def _one_index(
    shape: Shape, filters: FilterShape, *, slim: bool, ranked: bool
) -> tuple[Any, Any | None]:
    """The hits of a query whose terms all go to one index (``shape.single``): those
    the index finds (ranked unless ``ranked=False``), and for the trigram index the
    rows it cannot read (None for the word index, which reads every row)."""
    m, s = Message, Session
    where = filter_terms(filters, m, s)
    single = shape.single or WORDS
    index = INDEXES[single]
    rank = index.rank() if ranked else Value(0.0)
    query = (
        index.select(*_columns(m, s, rank, slim))
        .join(m, on=(m.id == index.rowid))
        .join(s, on=(s.id == m.session))
        .where(index.match(slot("q")), *where)
    )
    if single != TRIGRAM:
        return query, None
    # Rows that start with NUL come from the query below whichever SQLite indexed
    # them (one before 3.4x indexed nothing past a NUL; a later one indexes it all).
    query = query.where(~_starts_with_nul(m))
    gap = _trigram_gap(m, shape)
    if gap is not None:
        # Those rows come from the LIKE below (an older index may hold a cut copy).
        query = query.where(~gap)
    if shape.behind_scanned:
        # The scan of those rows decided them (slot ``behind``).
        matched = [m.id.in_(SQL(sqlite_sql.JSON_LIST, [SLOT + "behind"]))]
    else:
        matched = [_behind_nul(m, shape, slot), predicate(m, shape.degraded(), scanned=False)]
        if shape.narrows:
            narrow = SLOT + "narrow"
            matched.insert(0, m.id.in_(SQL(f"({candidates_sql()})", [narrow, narrow])))
    behind = (
        m.select(*_columns(m, s, Value(0.0), slim))
        .join(s, on=(s.id == m.session))
        .where(*matched, *where)
    )
    return query, behind


def _trigram_page(shape: Shape, filters: FilterShape) -> Any:
    """The page of a ranked query on the trigram index alone, as a ``page`` CTE.

    FTS5 hands its hits over best first, so the first ``limit + offset`` of
    them (slot ``upto``) are read without ranking and sorting every hit; the
    page keeps FTS5's order (ties in rank in id order, as it hands them over:
    :data:`INDEX_RANK`), so pages never overlap. The rows the index cannot read
    rank after every ranked hit, newest first; they are looked for only when
    the ranked hits do not fill the page. (``search_messages`` reads the same
    page in two parts: :func:`_trigram_part`.)
    """
    m = Message
    found, behind = _one_index(shape, filters, slim=True, ranked=True)
    behind = cast(Any, behind)  # the trigram index always has rows it cannot read
    columns = ("id", "session_id", "timestamp", "rank")
    first = found.order_by(SQL('"rank"')).limit(slot("upto")).cte("first", columns=columns)
    rest = (
        behind.order_by(m.timestamp.desc(), m.id.desc())
        .limit(SQL(sqlite_sql.REST_LIMIT, [SLOT + "upto", SLOT + "upto"]))
        .cte("rest", columns=columns)
    )
    # Selects from the CTEs by name (``select_from`` would repeat their WITH).
    tie = (first.c.id.alias("tie"), Value(None).alias("tie"))
    both = peewee.Select([first], [*(first.c[c] for c in columns), tie[0]]).union_all(
        peewee.Select([rest], [*(rest.c[c] for c in columns), tie[1]])
    )
    return (
        both.order_by(*_order(INDEX_RANK))
        .limit(slot("limit"))
        .offset(slot("offset"))
        .cte("page", columns=(*columns, "tie"))
    ), (first, rest)


#: The order of a ranked page of a query on the trigram index alone (:func:`_order`).
INDEX_RANK = "rank: as the index ranks"

#: The two parts of a ranked page of a query on the trigram index alone, run one after
#: the other (``search.search_messages``): the hits the index ranks, and the rows it
#: cannot read.
RANKED_BY_INDEX, RANKED_REST = "rank: index", "rank: rest"


#: Messages whose indexed text is longer than this get their snippet from Python
#: (:func:`hermes_models.search.query.highlight`) instead of FTS5's ``snippet()``, which
#: weighs every window of the text against every hit: its time grows with the
#: square of the hits in a message (100 kB of one repeated word took 2.6 s, 1 MB
#: over four minutes, Hermes' own statement alike).
SNIPPET_MAX_CHARS = 32_768


def fts_snippet(index: Any) -> Any:
    """FTS5's snippet of the hit (``>>>``/``<<<``, :data:`SNIPPET_TOKENS` tokens), or
    NULL for text longer than :data:`SNIPPET_MAX_CHARS` (made in Python then)."""
    snippet = fn.snippet(index._meta.entity, 0, ">>>", "<<<", "...", SNIPPET_TOKENS)
    return Case(None, [(fn.length(index.content) <= SNIPPET_MAX_CHARS, snippet)], None)


def _trigram_part(shape: Shape, filters: FilterShape, part: str) -> Statement:
    """One part of a ranked page of a trigram query (:data:`HIT_COLUMNS` and ``snippet``;
    slots ``limit`` and ``offset``).

    :data:`RANKED_BY_INDEX`: the hits the trigram index finds, in the order FTS5 ranks
    them (the index's own ``rank`` column, not selected: reading it makes FTS5 work
    out BM25's statistics once more), with their snippets; the same order on every
    page, so a tie in rank never shows one row on two pages. :data:`RANKED_REST`:
    the rows the index cannot read (JSON content, rows a later Hermes leaves out),
    newest first, with no snippet (made in Python); they come after every ranked hit.
    """
    m = Message
    found, behind = _one_index(shape, filters, slim=False, ranked=False)
    if part == RANKED_BY_INDEX:
        index = INDEXES[TRIGRAM]
        snippet = fts_snippet(index)
        query = found.select_extend(snippet.alias("snippet"))
        query = query.order_by(peewee.Column(index, "rank"))
    else:
        query = cast(Any, behind).select_extend(Value(None).alias("snippet"))
        query = query.order_by(m.timestamp.desc(), m.id.desc())
    return render(query.limit(slot("limit")).offset(slot("offset")))


def _gram_newest(filters: FilterShape, slim: bool) -> Any:
    """The newest ``window`` hits (slot) the gram index lists for the expression ``gq``
    (slot), after ``filters``, read newest first: the index hands its matches over in
    rowid order and stops there. Rows changed since they were indexed are left out
    (the scan decides those)."""
    g, m, s = GramIndex, Message, Session
    found = (
        g.select(*_columns(m, s, Value(0.0), slim))
        .join(m, on=(m.id == g.rowid))
        .join(s, on=(s.id == m.session))
        .where(
            g.match(slot("gq")),
            g.rowid.not_in(SQL(sqlite_sql.GRAM_CHANGED_IDS)),
            *filter_terms(filters, m, s),
        )
        .order_by(g.rowid.desc())
        .limit(slot("window"))
        .alias("gram_hits")
    )
    names = HIT_COLUMNS if not slim else ("id", "session_id", "timestamp", "rank")
    return peewee.Select([found], [found.c[name] for name in names])


def hits_query(
    shape: Shape, filters: FilterShape, *, slim: bool = False, ranked: bool = True
) -> Any:
    """Every hit of a query of ``shape`` (:data:`HIT_COLUMNS`), unordered and unlimited.

    ``rank`` is BM25's (lower is better; 0 for hits no index ranked, and for
    every hit with ``ranked=False``, which saves scoring them).
    """
    m, s = Message, Session
    where = filter_terms(filters, m, s)
    if shape.single is not None:
        query, behind = _one_index(shape, filters, slim=slim, ranked=ranked)
        return query if behind is None else query.union_all(behind)
    candidates = m.id.in_(SQL(sqlite_sql.JSON_LIST, [SLOT + "cand"]))
    if shape.matched:
        g = GramIndex
        listed = g.select(g.rowid).where(
            g.match(slot("gq")), g.rowid.not_in(SQL(sqlite_sql.GRAM_CHANGED_IDS))
        )
        candidates = m.id.in_(listed)
    if shape.all_like:
        # The scan decided the query: its hits are the only rows to read.
        if shape.window:
            decided = m.select(*_columns(m, s, Value(0.0), slim)).join(s, on=(s.id == m.session))
            decided = decided.where(candidates, *where)
            if shape.decides:
                # The scan's hits (rows the gram index does not cover), and the newest
                # of those the index lists.
                both = _gram_newest(filters, slim).union_all(decided)
                return both.order_by(SQL('"id"').desc()).limit(slot("window"))
            return decided.order_by(m.id.desc()).limit(slot("window"))
        matching = [candidates, *where]
    else:
        matching = [predicate(m, shape), *where]
    if shape.floored:
        matching.append(m.id > SQL(sqlite_sql.NEWEST_FLOOR))
    if shape.walk:
        recent = Message.alias("recent")
        newest = recent.select(recent.id).order_by(recent.timestamp.desc(), recent.id.desc())
        matching.append(m.id.in_(newest.limit(slot("budget"))))
    # Hits no index ranks: only rows the scan found can be one, when the shape says so;
    # they are looked up instead of every message being read.
    driver = [candidates] if shape.driven(ranked) and not shape.all_like else []
    unranked = m.select(*_columns(m, s, Value(0.0), slim)).join(s, on=(s.id == m.session))
    route = shape.rank_route if ranked else None
    if route is None:
        return unranked.where(*driver, *matching)
    # The hits the index ranks, driven by the index, then all other hits. (A
    # LEFT JOIN on the ranks would scan them once per message: no index.)
    index = INDEXES[route]
    found = slot(f"any_{route}")
    ranked_rows = [index.match(found)]
    if shape.floored:
        ranked_rows.append(index.rowid > SQL(sqlite_sql.NEWEST_FLOOR))
    if shape.driven(False):
        # Every hit holds a positive LIKE term: rank only the rows the scan found.
        ranked_rows.append(SQL(sqlite_sql.ROWID_IN_JSON_LIST, [SLOT + "cand"]))
    elif route == WORDS and shape.necessary() is not None:
        # Rank only the rows holding, for some group, the term it needs.
        ranked_rows.append(_narrowed(shape.necessary() or ()))
    ranks = (
        index.select(index.rowid.alias("rid"), index.rank().alias("r"))
        .where(*ranked_rows)
        .alias("ranks")
    )
    with_rank = (
        m.select(*_columns(m, s, ranks.c.r, slim))
        .from_(ranks)
        .join(m, on=(m.id == ranks.c.rid))
        .join(s, on=(s.id == m.session))
        .where(*matching)
    )
    if shape.all_ranked:
        return with_rank
    if route == WORDS:
        # Rows matching no positive word can match only the groups without one.
        driver = driver or _unranked_driver(m, shape)
        if not shape.all_like:
            matching[0] = predicate(m, shape, unworded=True)
    others = unranked.where(*driver, *matching, m.id.not_in(_rowids(index, found, shape.floored)))
    return with_rank.union_all(others)


def _narrowed(kinds: tuple[str, ...]) -> Any:
    """The rows of the word index (the only table of its statement) among those
    holding the term each group needs (slots ``need``, the ids the scan found;
    ``need_words``, one expression of the words; ``any_trigram``, the trigram terms,
    and the rows behind a NUL, which the trigram index may lack)."""
    parts = [sqlite_sql.NARROWED_IDS]
    params: list[Any] = [SLOT + "need"]
    if WORDS in kinds:
        parts.append(sqlite_sql.NARROWED_WORDS)
        params.append(SLOT + "need_words")
    if TRIGRAM in kinds:
        parts += [sqlite_sql.NARROWED_TRIGRAMS, sqlite_sql.NARROWED_WORDS]
        params += [SLOT + f"any_{TRIGRAM}", SLOT + "json"]
    return SQL(sqlite_sql.rowid_among(parts), params)


def _unranked_driver(m: Any, shape: Shape) -> list[Any]:
    """Where the hits the word index does not rank can be, when some are known: every
    group without a positive word needs a LIKE-routed term the scan found (slot
    ``cand``) or a trigram term (its index, slot ``any_trigram``, or a row behind a
    NUL, which is JSON content the word index marks). Rows matching no positive
    word can match only those groups; SQLite then reads these rows, not every
    message (an ``OR`` of ``IN`` lists, one lookup each)."""
    unworded = [g for g in shape.groups if WORDS not in g.include]
    if not unworded or not shape.words:
        return []
    sources: list[Any] = []
    if any(LIKE in g.include for g in unworded):
        if not shape.scanned:
            return []
        sources.append(m.id.in_(SQL(sqlite_sql.JSON_LIST, [SLOT + "cand"])))
    if any(LIKE not in g.include for g in unworded):
        if _trigram_gap(m, shape) is not None:
            return []
        sources.append(m.id.in_(_rowids(MessageTrigramIndex, slot(f"any_{TRIGRAM}"))))
        sources.append(m.id.in_(_rowids(MessageIndex, slot("json"))))
    return [_balanced(operator.or_, sources)]


def _order(sort: str, table: Any = None) -> list[Any]:
    def col(name: str) -> Any:
        return SQL(f'"{name}"') if table is None else getattr(table.c, name)

    if sort == "newest":
        return [col("timestamp").desc(), col("id").desc()]
    if sort == "oldest":
        return [col("timestamp"), col("id")]
    if sort == INDEX_RANK:
        # FTS5's own order: ties in rank in id order, as it hands them over (``tie``
        # is the id of a ranked hit, NULL for the rows no index ranked, which come
        # after them, rank 0, newest first).
        return [col("rank"), col("tie"), col("timestamp").desc(), col("id").desc()]
    return [col("rank"), col("timestamp").desc(), col("id").desc()]


def search_statement(shape: Shape, filters: FilterShape, sort: str) -> Statement:
    """One page of hits, ordered by ``sort`` (cached by shape, filters and sort: a
    shape costs milliseconds to render; see :func:`render_search`)."""
    key = ("search", shape, filters, sort)
    return kept(key) or keep(key, render_search(shape, filters, sort))


def render_search(shape: Shape, filters: FilterShape, sort: str) -> Statement:
    """One page of hits, ordered by ``sort``: ``'rank'``, ``'newest'`` or ``'oldest'``.

    Rows are :data:`HIT_COLUMNS`; ranked word searches add a ``snippet`` column
    (other searches get theirs from :func:`snippet_statement`), and their ``rank``
    is 0 (the rows come in rank order; no caller reads the score of a hit).
    """
    limit, offset = slot("limit"), slot("offset")
    if sort in (RANKED_BY_INDEX, RANKED_REST):
        return _trigram_part(shape, filters, sort)
    if sort == "rank" and shape.single == WORDS and shape.window:
        return _newest_words_page(shape, filters)
    if sort == "rank" and shape.single == WORDS:
        # FTS5 hands rows over in rank order, so the page stops after ``limit``
        # rows and the snippets are made right here, for those rows only.
        # The rows' BM25 is not read back: the page orders by the index's own rank
        # column without selecting it (selecting it too costs 15-20 % of the
        # statement at 1M messages), and the row's ``rank`` is 0.
        snippet = fts_snippet(MessageIndex)
        query = hits_query(shape, filters, ranked=False).select_extend(snippet.alias("snippet"))
        ranked = peewee.Column(MessageIndex, "rank")
        return render(query.order_by(ranked).limit(limit).offset(offset))
    ctes: tuple[Any, ...] = ()
    if sort == "rank" and shape.single == TRIGRAM:
        page, ctes = _trigram_page(shape, filters)
        sort = INDEX_RANK
    else:
        # Otherwise every hit is sorted: sort narrow rows, then read the page's messages.
        page = (
            hits_query(shape, filters, slim=True, ranked=sort == "rank")
            .order_by(*_order(sort))
            .limit(limit)
            .offset(offset)
            .cte("page", columns=("id", "session_id", "timestamp", "rank"))
        )
    return render(_page_rows(page, sort, *([newest_cte(filters)] if shape.floored else []), *ctes))


def _page_rows(page: Any, sort: str, *ctes: Any, snippet: bool = False) -> Any:
    """The messages (hit columns) of the CTE ``page`` of ``(id, ..., rank)``, in
    ``sort`` order, with ``ctes`` before it; with ``snippet``, then the page's
    ``snippet`` column."""
    m, s = Message, Session
    columns = _columns(m, s, page.c.rank, slim=False)
    if snippet:
        columns.append(page.c.snippet.alias("snippet"))
    return (
        m.select(*columns)
        .from_(page)
        .join(m, on=(m.id == page.c.id))
        .join(s, on=(s.id == m.session))
        .order_by(*_order(sort, page))
        .with_cte(*ctes, page)
    )


def newest_words(shape: Shape, filters: FilterShape) -> Any:
    """The newest ``window`` hits of a query the word index decides alone, with their
    rank, as the ``newest_hits`` CTE: FTS5 hands its matches over newest first and
    scores only those read. With no more hits than that, every hit, ranked."""
    every = shape._replace(window=False, snips=False)
    columns: tuple[str, ...] = ("id", "session_id", "timestamp", "rank")
    query = hits_query(every, filters, slim=True)
    if shape.snips:
        # A snippet for each row whose rank is among the best ``upto`` read so far: a
        # superset of the page's rows (about upto x ln(window / upto) of them).
        keep = getattr(fn, BEST_RANKS_FUNCTION)(MessageIndex.rank(), slot("upto"))
        snippet = fts_snippet(MessageIndex)
        query = query.select_extend(Case(None, [(keep != 0, snippet)], None))
        columns = (*columns, "snippet")
    return (
        query.order_by(MessageIndex.rowid.desc())
        .limit(slot("window"))
        .cte("newest_hits", columns=columns)
    )


#: The SQL function a windowed page with :attr:`Shape.snips` calls for each hit it
#: reads: ``(rank, upto) -> 1`` when the rank is among the ``upto`` best read so far
#: (ties included), else 0 (:class:`BestRanks`).
BEST_RANKS_FUNCTION = "hermes_models_best_ranks"


class BestRanks:
    """The best ranks one pass has read, for :data:`BEST_RANKS_FUNCTION`.

    A row of the final page (the ``upto`` best of every row read) is among
    the ``upto`` best of the rows read up to it, so :meth:`keep` says 1 for
    each of them; ties count as kept.
    """

    def __init__(self) -> None:
        self._worst_first: list[float] = []  # ranks, negated: the worst kept on top

    def keep(self, rank: Any, upto: Any) -> int:
        """1 when ``rank`` is among the ``upto`` best read so far (an SQL function:
        never raises; 1 when in doubt)."""
        try:
            heap = self._worst_first
            if len(heap) < upto:
                heapq.heappush(heap, -rank)
                return 1
            if rank > -heap[0]:
                return 0
            if rank < -heap[0]:
                heapq.heapreplace(heap, -rank)
            return 1
        except Exception:  # an odd value: a snippet too many is always safe
            return 1


def _newest_words_page(shape: Shape, filters: FilterShape) -> Statement:
    """A ranked page of a windowed query the word index decides alone: the best of its
    newest hits, read in one pass (snippets come from :func:`snippet_statement`)."""
    newest = newest_words(shape, filters)
    columns: tuple[str, ...] = ("id", "session_id", "timestamp", "rank")
    if shape.snips:
        columns = (*columns, "snippet")
    page = (
        newest.select_from(*(newest.c[c] for c in columns))
        .order_by(*_order("rank", newest))
        .limit(slot("limit"))
        .offset(slot("offset"))
        .cte("page", columns=columns)
    )
    query = _page_rows(page, "rank", newest, snippet=shape.snips)
    return render(query)


def snippet_statement(route: str, above: bool = False) -> Statement:
    """FTS5 snippets of hits (cached; see :func:`render_snippets`)."""
    key = ("snippets", route, above)
    return kept(key) or keep(key, render_snippets(route, above))


def render_snippets(route: str, above: bool = False) -> Statement:
    """FTS5 snippets of the hits whose ids are the JSON array ``ids`` (slot ``q``: the query).

    ``+rowid`` keeps FTS5 from running the query once per id: the matches are
    read once and filtered; with ``above``, only from the lowest of the ids on
    (slot ``low``), which FTS5 skips to.
    """
    index = INDEXES[route]
    ids = SQL(sqlite_sql.ROWID_IN_JSON_LIST, [SLOT + "ids"])
    query = index.select(index.rowid, fts_snippet(index)).where(index.match(slot("q")), ids)
    if above:
        query = query.where(index.rowid >= slot("low"))
    return render(query)


# -- what the present stage needs --------------------------------------------------------


def _neighbour(hit: Any, include_inactive: bool, before: bool) -> Any:
    x = Message.alias("before" if before else "after")
    if before:
        near = (x.timestamp <= hit.timestamp) & ((x.timestamp < hit.timestamp) | (x.id < hit.id))
        order = (x.timestamp.desc(), x.id.desc())
    else:
        near = (x.timestamp >= hit.timestamp) & ((x.timestamp > hit.timestamp) | (x.id > hit.id))
        order = (x.timestamp.asc(), x.id.asc())
    query = x.select(x.id).where(x.session == hit.session, near)
    if not include_inactive:
        query = query.where(x.active == 1)
    return query.order_by(*order).limit(1)


def context_statement(include_inactive: bool) -> Statement:
    """For each hit whose id is in the JSON array ``ids``: ``(id, role before, content
    before, role after, content after)``, the messages around it in its session."""
    key = ("context", include_inactive, file_key())
    return kept(key) or keep(key, _context(include_inactive))


def _context(include_inactive: bool) -> Statement:
    hit, prev, nxt = Message.alias("hit"), Message.alias("prev"), Message.alias("next")
    query = (
        hit.select(hit.id, prev.role, prev.content, nxt.role, nxt.content)
        .join(prev, JOIN.LEFT_OUTER, on=(prev.id == _neighbour(hit, include_inactive, True)))
        .switch(hit)
        .join(nxt, JOIN.LEFT_OUTER, on=(nxt.id == _neighbour(hit, include_inactive, False)))
        .where(hit.id.in_(SQL(sqlite_sql.JSON_LIST, [SLOT + "ids"])))
    )
    return render(query)


def ids_values(ids: list[int]) -> dict[str, Any]:
    """The slot values of :func:`context_statement` and :func:`best_hits_statement`
    for hits ``ids``."""
    return {"ids": "[" + ",".join(map(str, ids)) + "]"}  # ids are ints: their JSON array


def best_hits_statement() -> Statement:
    """``(id, content, tool_name, tool_calls)`` of the messages whose ids are the JSON
    array ``ids`` (the best hit of each session found), for their snippets."""
    key = ("best hits", file_key())
    return kept(key) or keep(key, _best_hits())


def _best_hits() -> Statement:
    m = Message
    ids = SQL(sqlite_sql.JSON_LIST, [SLOT + "ids"])
    return render(m.select(m.id, m.content, m.tool_name, m.tool_calls).where(m.id.in_(ids)))


# -- sessions ---------------------------------------------------------------------------


def _hits_of(shape: Shape) -> tuple[list[Any], Any]:
    """The CTEs a search by session reads its hits from: ``(ctes before, hits)``."""
    floor: list[Any] = []
    if shape.window and shape.single == WORDS:
        hits = newest_words(shape, Filters().shape())
    else:
        hits = hits_query(shape, Filters().shape(), slim=True).cte(
            "hits", columns=("id", "session_id", "timestamp", "rank")
        )
        if shape.floored:
            floor.append(newest_cte(Filters().shape()))
    return floor, hits


def sessions_statement(shape: Shape) -> Statement:
    """One row per session with hits: ``(session_id, best hit id, its timestamp, its
    rank, hits, latest hit's timestamp)``, the best by rank, then newest, then
    highest id (cached by shape); :mod:`hermes_models.search.by_root` does the rest."""
    key = ("sessions", shape)
    return kept(key) or keep(key, _sessions(shape))


def _sessions(shape: Shape) -> Statement:
    floor, hits = _hits_of(shape)
    per_session = [hits.c.session_id]
    ranked = hits.select_from(
        hits.c.session_id,
        hits.c.id,
        hits.c.timestamp,
        hits.c.rank,
        fn.ROW_NUMBER().over(
            partition_by=per_session,
            order_by=[hits.c.rank, hits.c.timestamp.desc(), hits.c.id.desc()],
        ),
        fn.COUNT(hits.c.id).over(partition_by=per_session),
        fn.MAX(hits.c.timestamp).over(partition_by=per_session),
    ).cte("ranked", columns=("session_id", "id", "timestamp", "rank", "rn", "n", "latest"))
    c = ranked.c
    query = (
        ranked.select_from(c.session_id, c.id, c.timestamp, c.rank, c.n, c.latest)
        .where(c.rn == 1)
        .with_cte(*floor, hits, ranked)
    )
    return render(query)


def all_sessions_query(
    sources: tuple[str, ...] | None,
    limit: int | None,
    offset: int,
    started: tuple[float | None, float | None] = (None, None),
) -> Any:
    """Every session (of ``sources``, started within ``started``), newest activity first,
    with ``last_active``."""
    last_active = recency(Session, Message.alias("latest"))  # the heartbeat too (v24+)
    query = Session.select().select_extend(last_active.alias("last_active"))
    if sources is not None:
        query = query.where(Session.source.in_(sources))
    if started[0] is not None:
        query = query.where(Session.started_at >= started[0])
    if started[1] is not None:
        query = query.where(Session.started_at < started[1])
    query = query.order_by(
        SQL('"last_active"').desc(), Session.started_at.desc(), Session.id.desc()
    )
    return query.limit(None if limit is None or limit < 0 else limit).offset(offset)
