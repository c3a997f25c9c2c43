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

Statements are built with peewee once per shape of query (routes, filters,
order), cached as SQL text, and run with the values of each search.
"""

from __future__ import annotations

import functools
import logging
import operator
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import peewee
from peewee import SQL, Value, fn
from playhouse.sqlite_ext import FTS5Model, RowIDField, SearchField

from .db import current, database
from .models import Message, Session
from .query import LIKE, TRIGRAM, WORDS, SearchQuery, ascii_lower, parse

logger = logging.getLogger("hermes_models")

#: Tokens of an FTS5 snippet.
SNIPPET_TOKENS = 40


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
_warned: set[tuple[str, str]] = set()


def available_routes() -> frozenset[str]:
    """The routes the open file can serve: LIKE always, each index when its table exists."""
    db = current()
    version = db.execute_sql("PRAGMA schema_version").fetchone()[0]  # type: ignore[no-untyped-call]
    cached = _schema_cache.get(db)
    if cached is not None and cached[0] == version:
        return cached[1]
    names = {model._meta.table_name: route for route, model in INDEXES.items()}
    rows = db.execute_sql(  # type: ignore[no-untyped-call]
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)", list(names)
    ).fetchall()
    routes = frozenset({LIKE, *(names[row[0]] for row in rows)})
    _schema_cache[db] = (version, routes)
    return routes


def warn_once(reason: str, message: str, *args: Any) -> None:
    """Log ``message`` as a warning once per database file and ``reason``."""
    key = (str(getattr(current(), "path", "")), reason)
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


# -- shapes: what a statement's SQL depends on -------------------------------------------

Routes = tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """The routes of a query's terms, group by group, and whether the word index exists."""

    groups: tuple[tuple[Routes, Routes], ...]
    words: bool

    @classmethod
    def of(cls, query: SearchQuery, available: frozenset[str]) -> Shape:
        """Each term routed to its index, or to LIKE when the index is missing."""

        def routes(terms: Any) -> Routes:
            return tuple(t.route if t.route in available else LIKE for t in terms)

        return cls(
            tuple((routes(g.include), routes(g.exclude)) for g in query.groups),
            WORDS in available,
        )

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

    def degraded(self) -> Shape:
        """Every term through LIKE."""
        return Shape(
            tuple((tuple(LIKE for _ in i), tuple(LIKE for _ in e)) for i, e in self.groups),
            self.words,
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


# -- statements --------------------------------------------------------------------------

SLOT = "\x00hermes-slot:"

Valuer = Callable[[str], Any]


def slot(name: str) -> Value:
    """A placeholder filled with the value called ``name`` each time the statement runs."""
    return Value(SLOT + name)


@dataclass(frozen=True)
class Statement:
    """SQL rendered once, and where the values of each run go."""

    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]

    @classmethod
    def render(cls, query: Any) -> Statement:
        """Render a peewee query whose run-time values are :func:`slot` placeholders."""
        sql, params = query.sql()
        slots = tuple(
            (i, p[len(SLOT) :])
            for i, p in enumerate(params)
            if isinstance(p, str) and p.startswith(SLOT)
        )
        return cls(sql, tuple(params), slots)

    def bind(self, values: Mapping[str, Any]) -> list[Any]:
        """The parameters of one run."""
        params = list(self.params)
        for index, name in self.slots:
            params[index] = values[name]
        return params


#: Bound as a parameter: SQLite does not fold ``char(0)`` into a constant.
NUL = "\x00"


def _rowids(index: type[FTS5Model], value: Any) -> Any:
    return index.select(index.rowid).where(index.match(value))


def _starts_with_nul(m: Any) -> Any:
    return (m.content >= Value(NUL)) & (m.content < Value("\x01"))


def _behind_nul(m: Any, shape: Shape, v: Valuer) -> Any:
    """Rows whose content starts with NUL, which the trigram index holds nothing of."""
    if shape.words:
        return m.id.in_(_rowids(MessageIndex, v("json"))) & _starts_with_nul(m)
    return _starts_with_nul(m)


def _like(m: Any, k: int, v: Valuer) -> Any:
    """Term ``k`` anywhere in content, tool name or tool calls (NUL-safe)."""
    pattern = v(f"p{k}")

    def like(column: Any) -> Any:
        return peewee.NodeList((column, SQL("LIKE"), pattern, SQL("ESCAPE '\\'")), parens=True)

    after_nul = (fn.instr(m.content, Value(NUL)) > 0) & (
        fn.instr(fn.lower(m.content), v(f"l{k}")) > 0
    )
    return like(m.content) | like(m.tool_name) | like(m.tool_calls) | after_nul


def _term(m: Any, shape: Shape, route: str, k: int, v: Valuer) -> Any:
    if route == WORDS:
        return m.id.in_(_rowids(MessageIndex, v(f"t{k}")))
    if route == LIKE:
        return _like(m, k, v)
    trigram = m.id.in_(_rowids(MessageTrigramIndex, v(f"t{k}")))
    return trigram | (_behind_nul(m, shape, v) & _like(m, k, v))


def predicate(m: Any, shape: Shape, v: Valuer = slot) -> Any:
    """The whole query as one WHERE expression over messages ``m``."""
    groups, k = [], 0
    for include, exclude in shape.groups:
        terms = []
        for route in include:
            terms.append(_term(m, shape, route, k, v))
            k += 1
        for route in exclude:
            # NULL columns can make a term NULL rather than false, and NOT NULL
            # would drop the row (COALESCE only here: it slows the scan down).
            terms.append(~fn.COALESCE(_term(m, shape, route, k, v), 0))
            k += 1
        groups.append(functools.reduce(operator.and_, terms))
    return functools.reduce(operator.or_, groups)


@dataclass(frozen=True)
class Filters:
    """Which messages a search may return, besides matching."""

    sources: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    include_inactive: bool = False

    def shape(self) -> tuple[Any, ...]:
        """What the SQL depends on."""
        n_sources = None if self.sources is None else len(self.sources)
        return (n_sources, len(self.exclude), len(self.roles), self.include_inactive)

    def values(self) -> dict[str, Any]:
        """Values of the filter slots."""
        out: dict[str, Any] = {}
        for prefix, items in (("s", self.sources or ()), ("x", self.exclude), ("r", self.roles)):
            for i, item in enumerate(items):
                out[f"{prefix}{i}"] = item
        return out


def filter_terms(shape: tuple[Any, ...], m: Any, s: Any) -> list[peewee.Node]:
    """WHERE terms of a :meth:`Filters.shape` over messages ``m`` and sessions ``s``."""
    n_sources, n_exclude, n_roles, include_inactive = shape
    terms: list[peewee.Node] = []
    if not include_inactive:
        terms.append(m.active == 1)
    if n_sources is not None:
        terms.append(s.source.in_([slot(f"s{i}") for i in range(n_sources)]))
    if n_exclude:
        terms.append(s.source.not_in([slot(f"x{i}") for i in range(n_exclude)]))
    if n_roles:
        terms.append(m.role.in_([slot(f"r{i}") for i in range(n_roles)]))
    return terms


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


def hits_query(
    shape: Shape, filters: tuple[Any, ...], *, slim: bool = False, ranked: bool = True
) -> Any:
    """Every hit of a query of ``shape`` (:data:`HIT_COLUMNS`), unordered and unlimited.

    ``rank`` is BM25's (lower is better; 0 for hits no index ranked, and for
    every hit with ``ranked=False``, which saves scoring them).
    """
    m, s = Message, Session
    where = filter_terms(filters, m, s)
    single = shape.single
    if single is not None:
        index = INDEXES[single]
        rank = index.rank() if ranked else Value(0.0)
        query = (
            index.select(*_columns(m, s, rank, slim))
            .join(m, on=(m.id == index.rowid))
            .join(s, on=(s.id == m.session))
            .where(index.match(slot("q")), *where)
        )
        if single == TRIGRAM:
            behind = (
                m.select(*_columns(m, s, Value(0.0), slim))
                .join(s, on=(s.id == m.session))
                .where(_behind_nul(m, shape, slot), predicate(m, shape.degraded()), *where)
            )
            query = query.union_all(behind)
        return query
    matching = [predicate(m, shape), *where]
    unranked = m.select(*_columns(m, s, Value(0.0), slim)).join(s, on=(s.id == m.session))
    route = shape.rank_route if ranked else None
    if route is None:
        return unranked.where(*matching)
    # The hits the index ranks, driven by the index, then all other hits. (A
    # LEFT JOIN on the ranks would scan them once per message: no index.)
    index = INDEXES[route]
    found = slot(f"any_{route}")
    ranks = (
        index.select(index.rowid.alias("rid"), index.rank().alias("r"))
        .where(index.match(found))
        .alias("ranks")
    )
    with_rank = (
        m.select(*_columns(m, s, ranks.c.r, slim))
        .from_(ranks)
        .join(m, on=(m.id == ranks.c.rid))
        .join(s, on=(s.id == m.session))
        .where(*matching)
    )
    return with_rank.union_all(unranked.where(*matching, m.id.not_in(_rowids(index, found))))


def _order(sort: str, table: Any = None) -> list[Any]:
    def col(name: str) -> Any:
        return SQL(f'"{name}"') if table is None else getattr(table.c, name)

    if sort == "newest":
        return [col("timestamp").desc(), col("id").desc()]
    if sort == "oldest":
        return [col("timestamp"), col("id")]
    return [col("rank"), col("timestamp").desc(), col("id").desc()]


@functools.lru_cache(maxsize=256)
def search_statement(shape: Shape, filters: tuple[Any, ...], sort: str) -> Statement:
    """One page of hits, ordered by ``sort``: ``'rank'``, ``'newest'`` or ``'oldest'``.

    Rows are :data:`HIT_COLUMNS`; ranked word searches add a ``snippet`` column
    (other searches get theirs from :func:`snippet_statement`).
    """
    limit, offset = slot("limit"), slot("offset")
    if sort == "rank" and shape.single == WORDS:
        # FTS5 hands rows over in rank order, so the page stops after ``limit``
        # rows and the snippets are made right here, for those rows only.
        snippet = fn.snippet(MessageIndex._meta.entity, 0, ">>>", "<<<", "...", SNIPPET_TOKENS)
        query = hits_query(shape, filters).select_extend(snippet.alias("snippet"))
        return Statement.render(query.order_by(SQL('"rank"')).limit(limit).offset(offset))
    # Otherwise every hit is sorted: sort narrow rows, then read the page's messages.
    page = (
        hits_query(shape, filters, slim=True, ranked=sort == "rank")
        .order_by(*_order(sort))
        .limit(limit)
        .offset(offset)
        .cte("page", columns=("id", "session_id", "timestamp", "rank"))
    )
    m, s = Message, Session
    query = (
        m.select(*_columns(m, s, page.c.rank, slim=False))
        .from_(page)
        .join(m, on=(m.id == page.c.id))
        .join(s, on=(s.id == m.session))
        .order_by(*_order(sort, page))
        .with_cte(page)
    )
    return Statement.render(query)


@functools.lru_cache(maxsize=4)
def snippet_statement(route: str) -> Statement:
    """FTS5 snippets of the hits whose ids are the JSON array ``ids`` (slot ``q``: the query).

    ``+rowid`` keeps FTS5 from running the query once per id: the matches are
    read once and filtered.
    """
    index = INDEXES[route]
    ids = SQL("+rowid IN (SELECT value FROM json_each(?))", [SLOT + "ids"])
    query = index.select(
        index.rowid, fn.snippet(index._meta.entity, 0, ">>>", "<<<", "...", SNIPPET_TOKENS)
    ).where(index.match(slot("q")), ids)
    return Statement.render(query)


def matching(query: str | None, *, include_inactive: bool = False) -> peewee.ModelSelect[Message]:
    """Messages matching ``query`` as a peewee query, to chain further.

    Best first when every term goes to the word index, newest first
    otherwise. The query is built for the indexes the file has now; unlike
    :func:`search_messages` it does not fall back when an index fails.
    """
    m = Message
    parsed = parse(query)
    if not parsed:
        return m.select().where(SQL("0"))
    shape = Shape.of(parsed, available_routes())
    values = term_values(parsed, shape)
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


def search_messages(query: str | None, **options: Any) -> list[dict[str, Any]]:
    """Search messages (see :func:`hermes_models.search.search_messages`)."""
    from .search import search_messages as run

    return run(query, **options)
