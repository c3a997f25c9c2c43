"""The SQL of a search, built with peewee once per shape and kept as text.

A search depends on the routes of its terms, its filters and its order,
not on the words: :class:`~hermes_models.fts.Shape` and :class:`Filters`
capture what the SQL depends on, and the statement of each shape is built
once, with :func:`slot` placeholders where the values go, rendered, cached,
and run with the values of each search (:meth:`Statement.bind`).

Every term is one lookup: a word in ``messages_fts``, a substring in
``messages_fts_trigram`` (plus the rows stored behind a NUL, which that index
cannot read), or a NUL-safe ``LIKE`` over content, tool name and tool calls.
A query on one index alone is one ``MATCH`` ordered by rank instead.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import peewee
from peewee import SQL, Value, fn
from playhouse.sqlite_ext import FTS5Model

from .binding import current, file_key
from .caches import BoundedCache
from .fts import INDEXES, SNIPPET_TOKENS, MessageIndex, MessageTrigramIndex, Shape
from .grams import candidates_sql
from .lineage import delegate_marked
from .models import Message, Session
from .query import LIKE, TRIGRAM, WORDS
from .shape import TRIGRAM_COMPLETE, TRIGRAM_NO_TOOLS_OR_RUNS

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
    """Term ``k`` among the ids :data:`SCAN` found (slot ``ids{k}``: a JSON array)."""
    ids = v(f"ids{k}")
    return m.id.in_(SQL("(SELECT value FROM json_each(?))", [getattr(ids, "value", ids)]))


def _term(m: Any, shape: Shape, route: str, k: int, v: Valuer, scanned: bool) -> Any:
    if route == WORDS:
        return m.id.in_(_rowids(MessageIndex, v(f"t{k}")))
    if route == LIKE:
        return _found(m, k, v) if scanned else _like(m, k, v)
    trigram = m.id.in_(_rowids(MessageTrigramIndex, v(f"t{k}")))
    return trigram | (_behind_nul(m, shape, v) & _like(m, k, v))


def predicate(m: Any, shape: Shape, v: Valuer = slot, *, scanned: bool | None = None) -> Any:
    """The whole query as one WHERE expression over messages ``m``.

    ``scanned`` (default: :attr:`Shape.scanned`): the LIKE-routed terms were
    found beforehand by one scan (:func:`scan_statement`) and come as id
    lists; otherwise each is a ``LIKE`` of its own.
    """
    if scanned is None:
        scanned = shape.scanned
    groups, k = [], 0
    for include, exclude in shape.groups:
        terms = []
        for route in include:
            terms.append(_term(m, shape, route, k, v, scanned))
            k += 1
        for route in exclude:
            # NULL columns can make a term NULL rather than false, and NOT NULL
            # would drop the row (COALESCE only here: it slows the scan down).
            terms.append(~fn.COALESCE(_term(m, shape, route, k, v, scanned), 0))
            k += 1
        groups.append(_balanced(operator.and_, terms))
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


#: The SQL function a search registers on its connection for :func:`scan_statement`:
#: ``(id, content, tool_name, tool_calls) -> 0``, noting which of the query's
#: LIKE-routed terms the message holds (:meth:`hermes_models.query.Matcher.visit`).
SCAN_FUNCTION = "hermes_models_visit"


def scan_statement(
    include_inactive: bool,
    non_ascii: bool,
    prefilter: tuple[int, ...] = (),
    behind: Shape | None = None,
    grams: bool = False,
) -> Statement:
    """One scan of the messages that shows each to :data:`SCAN_FUNCTION`; returns no rows.

    ``non_ascii``: every term has a character beyond ASCII, so a row whose
    columns are plain ASCII (as many bytes as characters, no tool columns)
    is passed over without calling the function. ``prefilter``: terms (by
    slot number) of which every hit holds one; a row holding none is passed
    over by SQLite's own ``LIKE`` (cheaper than the function for a few terms).
    ``behind``: only the rows behind a NUL, which a trigram query of that shape
    cannot find through its index. ``grams``: only the candidate rows of the gram
    index (slot ``cjk``: the expression of :func:`hermes_models.grams.match_any`).
    """
    key = (
        include_inactive,
        non_ascii,
        prefilter,
        grams,
        behind is not None and behind.words,
        behind.gaps if behind is not None else None,
        file_key(),
    )
    return _SCAN_STATEMENTS.get(
        key, lambda: _render_scan(include_inactive, non_ascii, prefilter, behind, grams)
    )


def _render_scan(
    include_inactive: bool,
    non_ascii: bool,
    prefilter: tuple[int, ...],
    behind: Shape | None,
    grams: bool,
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
    visit = getattr(fn, SCAN_FUNCTION)(m.id, m.content, m.tool_name, m.tool_calls)
    query = m.select(m.id).where(*where, visit != 0)
    return Statement.render(query)


@dataclass(frozen=True)
class Filters:
    """Which messages a search may return, besides matching."""

    sources: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    include_inactive: bool = False

    def shape(self) -> tuple[Any, ...]:
        """What the SQL depends on (the open file's reading rules included)."""
        n_sources = None if self.sources is None else len(self.sources)
        return (n_sources, len(self.exclude), len(self.roles), self.include_inactive, file_rules())

    def values(self) -> dict[str, Any]:
        """Values of the filter slots."""
        out: dict[str, Any] = {}
        for prefix, items in (("s", self.sources or ()), ("x", self.exclude), ("r", self.roles)):
            for i, item in enumerate(items):
                out[f"{prefix}{i}"] = item
        return out


def file_rules() -> tuple[bool, ...]:
    """How the open file is searched: ``()`` for v16; for a newer Hermes file,
    whether it has ``messages.compacted`` and ``messages.display_kind``."""
    shape = current().shape
    if shape is None or not shape.newer:
        return ()
    return (shape.has("messages", "compacted"), shape.has("messages", "display_kind"))


def visible(m: Any, rules: tuple[bool, ...]) -> Any:
    """Messages a search shows unless asked for inactive ones: live ones, and on newer
    Hermes files also those archived by compaction (as Hermes searches them)."""
    if rules and rules[0]:
        return (m.active == 1) | (m.compacted == 1)
    return m.active == 1


def filter_terms(shape: tuple[Any, ...], m: Any, s: Any) -> list[peewee.Node]:
    """WHERE terms of a :meth:`Filters.shape` over messages ``m`` and sessions ``s``.

    On a newer Hermes file the search follows Hermes' later filters: rows
    marked ``display_kind = 'hidden'`` are never hits, and tool rows only
    when the role filter asks for them.
    """
    n_sources, n_exclude, n_roles, include_inactive, rules = shape
    terms: list[peewee.Node] = []
    if not include_inactive:
        terms.append(visible(m, rules))
    if rules:
        if rules[1]:
            terms.append(fn.COALESCE(m.display_kind, "") != "hidden")
        if not n_roles:
            terms.append(m.role != "tool")
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
        gap = _trigram_gap(m, shape) if single == TRIGRAM else None
        if gap is not None:
            # Those rows come from the LIKE below (an older index may hold a cut copy).
            query = query.where(~gap)
        if single == TRIGRAM:
            if shape.behind_scanned:
                # The scan of those rows decided them (slot ``behind``).
                matched = [m.id.in_(SQL("(SELECT value FROM json_each(?))", [SLOT + "behind"]))]
            else:
                matched = [
                    _behind_nul(m, shape, slot),
                    predicate(m, shape.degraded(), scanned=False),
                ]
            behind = (
                m.select(*_columns(m, s, Value(0.0), slim))
                .join(s, on=(s.id == m.session))
                .where(*matched, *where)
            )
            query = query.union_all(behind)
        return query
    candidates = m.id.in_(SQL("(SELECT value FROM json_each(?))", [SLOT + "cand"]))
    if shape.all_like:
        # The scan decided the query: its hits are the only rows to read.
        matching = [candidates, *where]
    else:
        matching = [predicate(m, shape), *where]
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
    if shape.driven(False):
        # Every hit holds a positive LIKE term: rank only the rows the scan found.
        ranked_rows.append(SQL("+rowid IN (SELECT value FROM json_each(?))", [SLOT + "cand"]))
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
    others = unranked.where(*driver, *matching, m.id.not_in(_rowids(index, found)))
    return with_rank.union_all(others)


def _order(sort: str, table: Any = None) -> list[Any]:
    def col(name: str) -> Any:
        return SQL(f'"{name}"') if table is None else getattr(table.c, name)

    if sort == "newest":
        return [col("timestamp").desc(), col("id").desc()]
    if sort == "oldest":
        return [col("timestamp"), col("id")]
    return [col("rank"), col("timestamp").desc(), col("id").desc()]


#: Rendered statements by (shape, filters, sort): a shape costs milliseconds to render.
_SEARCH_STATEMENTS: BoundedCache[tuple[Any, ...], Statement] = BoundedCache(
    "search statements", 128
)
_SNIPPET_STATEMENTS: BoundedCache[str, Statement] = BoundedCache("snippet statements", 4)
_SCAN_STATEMENTS: BoundedCache[tuple[Any, ...], Statement] = BoundedCache("scan statements", 16)


def search_statement(shape: Shape, filters: tuple[Any, ...], sort: str) -> Statement:
    """One page of hits, ordered by ``sort`` (cached; see :func:`render_search`)."""
    return _SEARCH_STATEMENTS.get(
        (shape, filters, sort), lambda: render_search(shape, filters, sort)
    )


def render_search(shape: Shape, filters: tuple[Any, ...], sort: str) -> Statement:
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


def snippet_statement(route: str) -> Statement:
    """FTS5 snippets of hits (cached; see :func:`render_snippets`)."""
    return _SNIPPET_STATEMENTS.get(route, lambda: render_snippets(route))


def render_snippets(route: str) -> Statement:
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


__all__ = [
    "HIT_COLUMNS",
    "NUL",
    "SCAN_FUNCTION",
    "SLOT",
    "Filters",
    "Statement",
    "Valuer",
    "file_rules",
    "filter_terms",
    "hits_query",
    "predicate",
    "render_search",
    "render_snippets",
    "scan_statement",
    "search_statement",
    "slot",
    "snippet_statement",
    "visible",
]
