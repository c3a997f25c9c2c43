"""Full-text search over messages.

Two FTS5 tables index every message (content, tool name and tool calls):
``messages_fts`` with the default tokenizer, ranked by BM25, and
``messages_fts_trigram`` for Chinese, Japanese and Korean substrings. The
migrations create them and their sync triggers; here they are peewee
``FTS5Model`` classes, and the search built on them.

A query (see :mod:`hermes_models.query`) is split into terms, each with a
route: words go to ``messages_fts``, CJK terms of three or more characters
to ``messages_fts_trigram``, shorter CJK terms to ``LIKE`` on ``messages``.
A query on one index is one ``MATCH`` ordered by rank, with FTS5 snippets;
any other mix becomes one ``WHERE`` over ``messages`` in which every term is
its own lookup, so ``OR`` and ``NOT`` keep their meaning across routes.

Which indexes exist is read from ``sqlite_master`` (the migrations skip them
on SQLite builds without FTS5 or the trigram tokenizer). Terms whose index
is missing, and every term of a query whose ``MATCH`` fails, are searched
with ``LIKE`` instead, after one warning: search degrades, it never raises.
Soft-deleted messages are hidden on every route unless asked for.

SQLite's trigram tokenizer and ``LIKE`` stop reading text at a NUL
character, and JSON content is stored behind a NUL prefix. Such rows are
also checked with ``instr()``, which reads all of the text; on the trigram
route they are found through the word index (the first token of every JSON
content row is ``json``: ``MATCH '^"json"'``).

The SQL is built in :mod:`hermes_models.statements`, once per shape of
query; :mod:`hermes_models.search` runs it and shapes the results.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any

from playhouse.sqlite_ext import FTS5Model, RowIDField, SearchField

from .binding import current, database
from .caches import BoundedSet
from .grams import usable
from .query import LIKE, TRIGRAM, WORDS, SearchQuery, ascii_lower

logger = logging.getLogger("hermes_models")

#: Tokens of an FTS5 snippet.
SNIPPET_TOKENS = 40
#: LIKE-routed terms from which a query finds them all with one scan.
SCAN_FROM = 3


class MessageIndex(FTS5Model):  # type: ignore[misc]
    """``messages_fts``: words, ranked by BM25; ``rowid`` is ``messages.id``."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts"


class MessageTrigramIndex(FTS5Model):  # type: ignore[misc]
    """``messages_fts_trigram``: substrings of three or more characters."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts_trigram"
        options = {"tokenize": "trigram"}  # noqa: RUF012 - peewee reads Meta as plain class data


#: The index model of each index route.
INDEXES: dict[str, type[FTS5Model]] = {WORDS: MessageIndex, TRIGRAM: MessageTrigramIndex}

# -- what the file has ---------------------------------------------------------------

_schema_cache: weakref.WeakKeyDictionary[Any, tuple[int, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)
_gram_cache: weakref.WeakKeyDictionary[Any, tuple[int, bool]] = weakref.WeakKeyDictionary()
_warned: BoundedSet[tuple[str, str]] = BoundedSet("search warnings", 256)


def available_routes() -> frozenset[str]:
    """The routes the open file can serve: LIKE always, each index when its table exists."""
    db = current()
    version = db.execute_sql("PRAGMA schema_version").fetchone()[0]
    cached = _schema_cache.get(db)
    if cached is not None and cached[0] == version:
        return cached[1]
    shape = db.shape
    if shape is not None and not shape.fts_servable:
        # Hermes marked its indexes stale, or is rebuilding them: they miss rows.
        warn_once(
            "stale",
            "%s: the file's full-text indexes are marked stale or half rebuilt by Hermes; "
            "searching with LIKE until Hermes rebuilds them",
            db.path,
        )
        routes = frozenset({LIKE})
        _schema_cache[db] = (version, routes)
        return routes
    names = {model._meta.table_name: route for route, model in INDEXES.items()}
    rows = db.execute_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)", list(names)
    ).fetchall()
    routes = frozenset({LIKE, *(names[row[0]] for row in rows)})
    _schema_cache[db] = (version, routes)
    return routes


def gram_index_ready() -> bool:
    """True when the open file has the gram index (:mod:`hermes_models.grams`) and this
    SQLite build can read it."""
    db = current()
    version = db.execute_sql("PRAGMA schema_version").fetchone()[0]
    cached = _gram_cache.get(db)
    if cached is not None and cached[0] == version:
        return cached[1]
    shape = db.shape
    ready = (shape is None or shape.fts_servable) and usable(db.connection())
    _gram_cache[db] = (version, ready)
    return ready


def present_indexes() -> list[type[FTS5Model]]:
    """The index models whose tables the open file has."""
    routes = available_routes()
    return [model for route, model in INDEXES.items() if route in routes]


def warn_once(reason: str, message: str, *args: Any) -> None:
    """Log ``message`` as a warning once per database file and ``reason``."""
    if _warned.add((str(getattr(current(), "path", "")), reason)):
        logger.warning(message, *args)


# -- shapes: what a statement's SQL depends on -------------------------------------------

Routes = tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """The routes of a query's terms, group by group, and whether the word index exists."""

    groups: tuple[tuple[Routes, Routes], ...]
    words: bool
    #: The structure of the file the SQL is for (:attr:`hermes_models.shape.FileShape.key`).
    file: tuple[Any, ...] = ()
    #: True when the file's gram index (:mod:`hermes_models.grams`) narrows the
    #: LIKE-routed terms down to candidate rows.
    grams: bool = False

    @classmethod
    def of(cls, query: SearchQuery, available: frozenset[str]) -> Shape:
        """Each term routed to its index, or to LIKE when the index is missing."""

        def routes(terms: Any) -> Routes:
            return tuple(t.route if t.route in available else LIKE for t in terms)

        shape = current().shape
        groups = tuple((routes(g.include), routes(g.exclude)) for g in query.groups)
        # The gram index holds CJK characters only: it narrows the scan when every
        # LIKE-routed term has one (a word is LIKE-routed when its index is missing).
        like = [
            t for t, r in zip(query.terms(), (r for i, e in groups for r in (*i, *e))) if r == LIKE
        ]
        return cls(
            groups,
            WORDS in available,
            () if shape is None else shape.key,
            bool(like) and all(t.cjk for t in like) and gram_index_ready(),
        )

    @property
    def gaps(self) -> str:
        """What the file's trigram index leaves out (:data:`hermes_models.shape.TRIGRAM_COMPLETE`
        and its siblings)."""
        return str(self.file[2]) if self.file else ""

    @property
    def routes(self) -> Routes:
        """Routes of all terms, in :meth:`SearchQuery.terms` order."""
        return tuple(r for include, exclude in self.groups for r in (*include, *exclude))

    @property
    def single(self) -> str | None:
        """The one index every term goes to, or None."""
        kinds = set(self.routes)
        return next(iter(kinds)) if len(kinds) == 1 and LIKE not in kinds else None

    @property
    def rank_route(self) -> str | None:
        """The index that ranks a mixed query: words if it has any, else trigrams."""
        positive = {r for include, _ in self.groups for r in include}
        return next((r for r in (WORDS, TRIGRAM) if r in positive), None)

    @property
    def scanned(self) -> bool:
        """True when the LIKE-routed terms are found by one scan (:data:`SCAN_FROM` or more).

        Fewer are each a ``LIKE`` in the statement: SQLite's own pattern match
        beats a scan through a Python function for one or two terms.
        """
        like = sum(route == LIKE for route in self.routes)
        # With the gram index the scan reads only the candidate rows: always cheaper.
        return like >= SCAN_FROM or (self.grams and like > 0)

    @property
    def behind_scanned(self) -> bool:
        """True for a trigram-only query of :data:`SCAN_FROM` terms or more: the rows
        behind a NUL (which the trigram index lacks) are then decided by one scan."""
        return self.single == TRIGRAM and len(self.routes) >= SCAN_FROM

    @property
    def all_like(self) -> bool:
        """True when every term goes through a scan, which then decides the query alone."""
        return self.scanned and all(route == LIKE for route in self.routes)

    def driven(self, ranked: bool) -> bool:
        """True when the LIKE scan's rows (slot ``cand``) hold every hit no index ranks.

        Each group must have a positive LIKE-routed term, or (``ranked``) a
        word term when the word index ranks the query (its hits are read from it).
        Then :func:`~hermes_models.statements.hits_query` looks those rows
        up instead of reading every message.
        """
        if not self.scanned:
            return False
        # The word index holds every hit of a word term; a trigram term also finds
        # rows behind a NUL, which its index lacks.
        rank = WORDS if ranked and self.rank_route == WORDS else None
        return all(LIKE in include or rank in include for include, _ in self.groups)

    def degraded(self) -> Shape:
        """Every term through LIKE, over every row (no index of any kind)."""
        return Shape(
            tuple((tuple(LIKE for _ in i), tuple(LIKE for _ in e)) for i, e in self.groups),
            self.words,
            self.file,
        )


def term_values(query: SearchQuery, shape: Shape) -> dict[str, Any]:
    """Values of the term slots of ``shape`` for ``query`` (only those its SQL has)."""
    single = shape.single
    out: dict[str, Any] = {"q": query.fts(), "json": '^"json"'}
    if single == WORDS:
        return out
    positive: dict[str, list[str]] = {WORDS: [], TRIGRAM: []}
    k = 0
    for group, (include, exclude) in zip(query.groups, shape.groups):
        for term, route in zip((*group.include, *group.exclude), (*include, *exclude)):
            if route != LIKE:
                out[f"t{k}"] = term.fts()
            if route != WORDS:
                out[f"p{k}"] = term.like()
                out[f"l{k}"] = ascii_lower(term.text)
            k += 1
        for term, route in zip(group.include, include):
            if route in positive:
                positive[route].append(term.fts())
    if single is None:
        for route, terms in positive.items():
            out[f"any_{route}"] = " OR ".join(terms) or '""'
    return out


__all__ = [
    "INDEXES",
    "SCAN_FROM",
    "SNIPPET_TOKENS",
    "MessageIndex",
    "MessageTrigramIndex",
    "Routes",
    "Shape",
    "available_routes",
    "gram_index_ready",
    "present_indexes",
    "term_values",
    "warn_once",
]
