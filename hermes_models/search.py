"""Searching messages and sessions: hits as dicts with snippets and context.

:func:`search_messages` returns matching messages, best first (or by time),
each with a snippet whose matches are marked ``>>>``/``<<<`` and the
messages around it. :func:`search_sessions` counts the same hits per
lineage root: a compression continuation or a subagent run counts for the
session it continues or serves, while a /branch fork is a result of its own.

The SQL comes from :mod:`hermes_models.statements`; this module checks arguments,
runs statements (falling back to LIKE when an index is missing or fails)
and turns rows into dicts. Content stored as JSON is shown as its text.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import peewee
from peewee import JOIN, SQL, Value, fn

from .binding import current, file_key, newer_file
from .caches import BoundedCache
from .checks import check_flag
from .db import fetch_dicts
from .fts import INDEXES, MessageIndex, Shape, available_routes, term_values, warn_once
from .grams import GRAM_IDS_SQL, exact, match_any, term_match
from .lineage import MAX_DEPTH, branch_expr, extend_path, not_visited, path_of
from .listing import check_page
from .models import CONTENT_JSON_PREFIX, Message, Session, readable
from .query import LIKE, WORDS, Matcher, SearchQuery, highlight, parse, term_regex
from .statements import (
    HIT_COLUMNS,
    SCAN_FUNCTION,
    Filters,
    Statement,
    hits_query,
    predicate,
    scan_statement,
    search_statement,
    slot,
    snippet_statement,
)

T = TypeVar("T")

logger = logging.getLogger("hermes_models")

#: Characters of each message in a hit's ``context``.
CONTEXT_CHARS = 200
#: ``rank_mode`` values of :func:`search_sessions`.
RANK_MODES = (None, "relevance", "recent")


def execute(sql: str, params: list[Any]) -> Any:
    """Run one search statement on the current database; the cursor."""
    return current().execute_sql(sql, params)


# -- the time budget ------------------------------------------------------------------

#: Seconds the statement that finds a search's hits may run; then the search
#: returns the hits found so far (often none) and logs a warning. A
#: ``time_budget`` argument overrides it per call; None means no limit.
TIME_BUDGET_S = 5.0
#: SQLite virtual-machine steps between two looks at the clock.
_CLOCK_STEPS = 10_000


class _OutOfTime(Exception):
    """The budget ran out; ``rows`` holds the rows fetched before it did."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__("search time budget exhausted")
        self.rows = rows


def check_budget(value: Any) -> float | None:
    """``time_budget`` checked: a positive number of seconds, None for no limit, or ``...``
    for :data:`TIME_BUDGET_S`."""
    if value is Ellipsis:
        value = TIME_BUDGET_S
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"time_budget must be a number of seconds or None, not {type(value).__name__}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"time_budget must be a positive number of seconds, got {value!r}")
    return float(value)


def deadline_of(budget: float | None) -> float | None:
    """When a search given ``budget`` seconds from now must stop (``time.monotonic()``)."""
    return None if budget is None else time.monotonic() + budget


def fetch_within(
    sql: str, params: list[Any], deadline: float | None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names and every row of one statement, stopped at ``deadline``.

    The deadline is enforced by an SQLite progress handler on this thread's
    connection, which interrupts the statement.

    Raises:
        _OutOfTime: the deadline passed (with the rows fetched until then).
    """
    if deadline is None:
        cursor = execute(sql, params)
        return [c[0] for c in cursor.description], list(cursor.fetchall())
    if time.monotonic() > deadline:  # spent by an earlier statement of the same search
        raise _OutOfTime([])
    conn = cast(sqlite3.Connection, current().connection())
    out_of_time = False

    def look_at_the_clock() -> int:
        nonlocal out_of_time
        out_of_time = time.monotonic() > deadline
        return int(out_of_time)

    rows: list[tuple[Any, ...]] = []
    conn.set_progress_handler(look_at_the_clock, _CLOCK_STEPS)
    try:
        cursor = execute(sql, params)
        names = [c[0] for c in cursor.description]
        while batch := cursor.fetchmany(256):
            rows.extend(batch)
    except (peewee.OperationalError, sqlite3.OperationalError):
        if not out_of_time:
            raise
        raise _OutOfTime(rows) from None
    finally:
        conn.set_progress_handler(None, 0)
    return names, rows


def scan_values(
    query: SearchQuery,
    shape: Shape,
    include_inactive: bool,
    deadline: float | None,
    *,
    decide: bool = True,
) -> dict[str, str]:
    """The slots of the query's LIKE-routed terms, every one found by the same scan.

    ``ids{k}`` holds the messages with term ``k``; ``cand`` the messages with
    any positive one. When every term is LIKE-routed (and ``decide``), the
    whole query is decided here, and ``cand`` holds exactly its hits.

    Raises:
        _OutOfTime: the deadline passed during the scan.
    """
    if shape.behind_scanned:
        return {
            "behind": json.dumps(sorted(_scan_behind(query, shape, include_inactive, deadline)))
        }
    if not shape.scanned:
        return {}
    like = [
        (k, term)
        for k, (term, route) in enumerate(zip(query.terms(), shape.routes))
        if route == LIKE
    ]
    matcher = Matcher(tuple(term for _, term in like))
    values = term_values(query, shape)
    indexed: dict[int, set[int]] = {}
    if shape.grams:
        # A term of one or two CJK characters only is answered by the gram index
        # exactly; the scan reads the candidates of the other terms, and the rows
        # the index does not cover (above its mark, or changed by others).
        indexed = _indexed_holders([(k, t) for k, t in like if exact(t)], deadline)
        rest = [t for k, t in like if k not in indexed]
        values["cjk"] = match_any(rest) if rest else None
    statement = scan_statement(
        include_inactive,
        all(not t.text.isascii() for _, t in like),
        () if shape.grams else _prefilter(shape),
        grams=shape.grams,
    )
    _scan(statement, matcher, values, deadline)
    by_needle = matcher.holders
    holding = {k: set(by_needle[needle]) for (k, _), needle in zip(like, matcher.needles)}
    for k, ids in indexed.items():
        holding[k] |= ids
    slots = _numbered(shape)
    if decide and shape.all_like:
        return {"cand": json.dumps(sorted(_decided(shape, holding)))}
    candidates = set().union(*(holding[k] for k, included in slots if included and k in holding))
    out = {f"ids{k}": json.dumps(sorted(ids)) for k, ids in holding.items()}
    out["cand"] = json.dumps(sorted(candidates))
    return out


def _scan(
    statement: Statement, matcher: Matcher, values: dict[str, Any], deadline: float | None
) -> None:
    """Run the one-scan ``statement``, ``matcher`` noting which rows hold which term."""
    conn = cast(sqlite3.Connection, current().connection())
    conn.create_function(SCAN_FUNCTION, 4, matcher.visit)
    try:
        fetch_within(statement.sql, statement.bind(values), deadline)
    finally:
        conn.create_function(SCAN_FUNCTION, 4, None)


def _indexed_holders(terms: list[tuple[int, Any]], deadline: float | None) -> dict[int, set[int]]:
    """For each ``(k, term)``, the ids the gram index lists for it (rows up to its mark)."""
    out: dict[int, set[int]] = {}
    by_match: dict[str, set[int]] = {}
    for k, term in terms:
        match = term_match(term)
        if match not in by_match:
            rows = fetch_within(GRAM_IDS_SQL, [match], deadline)[1]
            by_match[match] = {row[0] for row in rows}
        out[k] = by_match[match]
    return out


def _decided(shape: Shape, holding: dict[int, set[int]]) -> set[int]:
    """The ids matching the whole query, every term's holders known."""
    hits: set[int] = set()
    k = 0
    for include, exclude in shape.groups:
        group = set.intersection(*(holding[k + i] for i in range(len(include))))
        k += len(include)
        for i in range(len(exclude)):
            group -= holding[k + i]
        k += len(exclude)
        hits |= group
    return hits


def _scan_behind(
    query: SearchQuery, shape: Shape, include_inactive: bool, deadline: float | None
) -> set[int]:
    """The hits among the rows behind a NUL of a trigram-only query, by one scan."""
    terms = query.terms()
    matcher = Matcher(terms)
    statement = scan_statement(
        include_inactive, all(not t.text.isascii() for t in terms), behind=shape
    )
    _scan(statement, matcher, term_values(query, shape), deadline)
    holding = {k: set(matcher.holders[needle]) for k, needle in enumerate(matcher.needles)}
    return _decided(shape, holding)


#: Groups up to which a scan first tries SQLite's own LIKE (one term per group).
PREFILTER_GROUPS = 2


def _prefilter(shape: Shape) -> tuple[int, ...]:
    """One positive LIKE-routed term (slot number) of each group, when every group has
    one and there are few groups: only rows holding one of them can be hits."""
    if len(shape.groups) > PREFILTER_GROUPS or not shape.driven(False):
        return ()
    picked, k = [], 0
    for include, exclude in shape.groups:
        picked.append(k + include.index(LIKE))
        k += len(include) + len(exclude)
    return tuple(picked)


def _numbered(shape: Shape) -> list[tuple[int, bool]]:
    """``(k, included)`` of each term slot of ``shape``, in slot order."""
    out, k = [], 0
    for include, exclude in shape.groups:
        for included in [True] * len(include) + [False] * len(exclude):
            out.append((k, included))
            k += 1
    return out


def _ran_out(query: SearchQuery, budget: float | None, found: int) -> None:
    logger.warning(
        "%s: a search stopped after its time budget of %s s; returning the %d hit(s) "
        "found by then (query: %.200r)",
        current().path,
        budget,
        found,
        query.fts(),
    )


def _strings(value: Any, argument: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(sorted(value)) if isinstance(value, (set, frozenset)) else tuple(value)
    raise TypeError(f"{argument} must be a string or a list of strings")


def _snippet(content: str | None, tool_name: str | None, tool_calls: str | None, regex: Any) -> str:
    haystack = " ".join(p for p in (readable(content), tool_name, tool_calls) if p)
    return highlight(haystack, regex)


def routed(query: SearchQuery, run: Callable[[Shape], T], *, like: bool = False) -> T:
    """``run`` with the query's shape on this file; with LIKE when an index fails, or
    for every term with ``like``."""
    available = available_routes()
    for route in sorted({t.route for t in query.terms()} - available):
        warn_once(
            f"missing:{route}",
            "%s: the full-text table %s is missing (SQLite without FTS5 or trigram?); "
            "searching it with LIKE instead",
            current().path,
            INDEXES[route]._meta.table_name,
        )
    shape = Shape.of(query, available)
    if like:
        shape = shape.degraded()
    if set(shape.routes) == {LIKE}:
        return run(shape)
    try:
        return run(shape)
    except (peewee.DatabaseError, sqlite3.DatabaseError) as exc:
        warn_once(
            f"failed:{exc}",
            "%s: full-text search failed (%s); searching with LIKE instead",
            current().path,
            exc,
        )
        return run(shape.degraded())


# -- messages -------------------------------------------------------------------------------


def search_messages(
    query: str | None,
    source_filter: Any = None,
    exclude_sources: Any = None,
    role_filter: Any = None,
    limit: int | None = 20,
    offset: int = 0,
    sort: str | None = None,
    include_inactive: bool = False,
    *,
    time_budget: Any = ...,
) -> list[dict[str, Any]]:
    """Messages matching ``query``; never raises for any query text.

    Each hit has ``id, session_id, role, snippet, timestamp, tool_name,
    source, model, session_started, context``. ``sort`` ``'newest'`` or
    ``'oldest'`` (any case, spaces around ignored) orders by time; anything
    else, None included, by rank, as in Hermes. Soft-deleted messages only
    with ``include_inactive=True``. A search that runs longer than
    ``time_budget`` seconds (default :data:`TIME_BUDGET_S`; None: no limit)
    stops and returns the hits found by then, with a warning in the log.

    Raises:
        TypeError, ValueError: an argument other than the query text is wrong.
    """
    budget = check_budget(time_budget)
    deadline = deadline_of(budget)
    parsed = parse(query)
    limit, offset = check_page(limit, offset)
    if sort is not None and not isinstance(sort, str):
        raise TypeError(f"sort must be a string or None, not {type(sort).__name__}")
    wanted = (sort or "").strip().lower()
    filters = Filters(
        _strings(source_filter, "source_filter"),
        _strings(exclude_sources, "exclude_sources") or (),
        _strings(role_filter, "role_filter") or (),
        check_flag(include_inactive, "include_inactive"),
    )
    if not parsed or limit == 0 or filters.sources == ():
        return []
    order = wanted if wanted in ("newest", "oldest") else "rank"
    values = {**filters.values(), "limit": limit, "offset": offset}

    def run(shape: Shape) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
        values.update(term_values(parsed, shape))
        statement = search_statement(shape, filters.shape(), order)
        try:
            values.update(scan_values(parsed, shape, filters.include_inactive, deadline))
            rows = fetch_within(statement.sql, statement.bind(values), deadline)[1]
        except _OutOfTime as exc:
            _ran_out(parsed, budget, len(exc.rows))
            rows = exc.rows
        snippets: dict[int, str] = {}
        if rows and len(rows[0]) > len(HIT_COLUMNS):
            snippets = {row[0]: row[-1] for row in rows}
        elif rows and shape.single is not None:
            values["ids"] = json.dumps([row[0] for row in rows])
            statement = snippet_statement(shape.single)
            snippets = dict(execute(statement.sql, statement.bind(values)).fetchall())
        return rows, snippets

    # A newer Hermes indexes only the first 8,192 characters of a tool row; as Hermes
    # does, a search that asks for tool rows reads their whole text with LIKE.
    tools = newer_file() and "tool" in filters.roles
    rows, snippets = routed(parsed, run, like=tools)
    return _hits(rows, snippets, parsed, filters.include_inactive)


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
    values.update(scan_values(parsed, shape, include_inactive, None, decide=False))
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


def _text(content: str | None) -> str:
    if content is None or content.startswith(CONTENT_JSON_PREFIX):
        return readable(content)
    return content


def _hits(
    rows: list[tuple[Any, ...]],
    snippets: dict[int, str],
    query: SearchQuery,
    include_inactive: bool,
) -> list[dict[str, Any]]:
    regex = None
    around = _context([row[0] for row in rows], include_inactive) if rows else {}
    out = []
    for row in rows:
        (message_id, session_id, timestamp, role, content, tool_name, tool_calls) = row[:7]
        source, model, started = row[7:10]
        text = _text(content)
        snippet = snippets.get(message_id)
        if snippet is None or (content is not None and "\x00" in content):
            regex = regex or term_regex(query.positive_terms())
            snippet = _snippet(content, tool_name, tool_calls, regex)
        before, after = around.get(message_id, (None, None))
        context = [{"role": role, "content": text[:CONTEXT_CHARS]}]
        if before is not None:
            context.insert(0, before)
        if after is not None:
            context.append(after)
        out.append(
            {
                "id": message_id,
                "session_id": session_id,
                "role": role,
                "snippet": snippet,
                "timestamp": timestamp,
                "tool_name": tool_name,
                "source": source,
                "model": model,
                "session_started": started,
                "context": context,
            }
        )
    return out


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


_context_statements: BoundedCache[tuple[Any, ...], Statement] = BoundedCache(
    "context statements", 8
)
SLOT_IDS = slot("ids").value


def _context_statement(include_inactive: bool) -> Statement:
    return _context_statements.get(
        (include_inactive, file_key()), lambda: _render_context(include_inactive)
    )


def _render_context(include_inactive: bool) -> Statement:
    hit, prev, nxt = Message.alias("hit"), Message.alias("prev"), Message.alias("next")
    query = (
        hit.select(hit.id, prev.role, prev.content, nxt.role, nxt.content)
        .join(prev, JOIN.LEFT_OUTER, on=(prev.id == _neighbour(hit, include_inactive, True)))
        .switch(hit)
        .join(nxt, JOIN.LEFT_OUTER, on=(nxt.id == _neighbour(hit, include_inactive, False)))
        .where(hit.id.in_(SQL("(SELECT value FROM json_each(?))", [SLOT_IDS])))
    )
    return Statement.render(query)


def _context(ids: list[int], include_inactive: bool) -> dict[int, tuple[Any, Any]]:
    """For each hit id, the message before and after it in its session (or None)."""
    statement = _context_statement(include_inactive)
    out = {}
    cursor = execute(statement.sql, statement.bind({"ids": json.dumps(ids)}))
    for hit_id, prev_role, prev_content, next_role, next_content in cursor.fetchall():
        before = (
            None
            if prev_role is None
            else {"role": prev_role, "content": _text(prev_content)[:CONTEXT_CHARS]}
        )
        after = (
            None
            if next_role is None
            else {"role": next_role, "content": _text(next_content)[:CONTEXT_CHARS]}
        )
        out[hit_id] = (before, after)
    return out


# -- sessions -----------------------------------------------------------------------------


def _owners(hits: Any) -> tuple[Any, Any]:
    """CTEs mapping each hit's session to the lineage root it counts for.

    The walk goes up through compression and subagent links and stops below
    a branch (a fork is its own result) or at a session without a parent.
    """
    here, parent = Session.alias("here"), Session.alias("up")
    start = hits.select_from(
        hits.c.session_id, hits.c.session_id, Value(0), path_of(hits.c.session_id)
    ).distinct()
    climb = start.cte("climb", recursive=True, columns=("start", "id", "depth", "path"))
    step = (
        here.select(
            climb.c.start, parent.id, climb.c.depth + 1, extend_path(climb.c.path, parent.id)
        )
        .from_(climb)
        .join(here, on=(here.id == climb.c.id))
        .join(parent, on=(parent.id == here.parent))
        .where(
            ~cast(Any, branch_expr(here)),
            climb.c.depth < MAX_DEPTH,
            not_visited(climb.c.path, parent.id),
        )
    )
    climb = climb.union_all(step)
    # SQLite returns the bare column "id" from the row holding MAX(depth).
    owners = (
        climb.select_from(climb.c.start, climb.c.id, fn.MAX(climb.c.depth))
        .group_by(climb.c.start)
        .cte("owners", columns=("start", "root_id", "depth"))
    )
    return climb, owners


def _sessions_statement(shape: Shape, n_sources: int | None, rank_mode: str | None) -> Statement:
    hits = hits_query(shape, Filters().shape(), slim=True).cte(
        "hits", columns=("id", "session_id", "timestamp", "rank")
    )
    climb, owners = _owners(hits)
    root = owners.c.root_id
    ranked = (
        hits.select_from(
            root,
            hits.c.id,
            hits.c.session_id,
            hits.c.rank,
            fn.ROW_NUMBER().over(
                partition_by=[root],
                order_by=[hits.c.rank, hits.c.timestamp.desc(), hits.c.id.desc()],
            ),
            fn.COUNT(hits.c.id).over(partition_by=[root]),
            fn.MAX(hits.c.timestamp).over(partition_by=[root]),
        )
        .join(owners, on=(owners.c.start == hits.c.session_id))
        .cte("ranked", columns=("root_id", "best_id", "matched", "rank", "rn", "n", "latest"))
    )
    s = Session
    query = (
        s.select()
        .select_extend(
            ranked.c.best_id.alias("_best_id"),
            ranked.c.matched.alias("_matched"),
            ranked.c.rank.alias("_rank"),
            ranked.c.n.alias("_hits"),
        )
        .join(ranked, on=(ranked.c.root_id == s.id))
        .where(ranked.c.rn == 1)
        .with_cte(hits, climb, owners, ranked)
    )
    if n_sources is not None:
        query = query.where(s.source.in_([slot(f"s{i}") for i in range(n_sources)]))
    if rank_mode == "recent":
        order = [ranked.c.latest.desc(), ranked.c.rank, s.id]
    else:
        order = [ranked.c.rank, ranked.c.latest.desc(), s.id]
    return Statement.render(query.order_by(*order).limit(slot("limit")).offset(slot("offset")))


_session_statements: BoundedCache[tuple[Any, ...], Statement] = BoundedCache(
    "session search statements", 64
)


def search_sessions(
    query: str | None = None,
    limit: int | None = 10,
    rank_mode: str | None = None,
    *,
    source: Any = None,
    offset: int = 0,
    time_budget: Any = ...,
) -> list[dict[str, Any]]:
    """Sessions whose messages match ``query``, one row per lineage root.

    Each row is the root session's columns plus ``hits`` (matching active
    messages), ``score`` (of the best hit; higher is better, 0 without an
    index rank), ``matched_session_id`` and ``best_snippet``. ``rank_mode``
    ``'recent'`` orders by the latest match, otherwise by the best score.
    Without a query (``None`` or blank): every session, newest activity
    first, with ``last_active``. ``time_budget`` as in :func:`search_messages`.

    Raises:
        TypeError, ValueError: an argument other than the query text is wrong.
    """
    budget = check_budget(time_budget)
    deadline = deadline_of(budget)
    limit, offset = check_page(limit, offset)
    if rank_mode is not None and not isinstance(rank_mode, str):
        raise TypeError(f"rank_mode must be a string or None, not {type(rank_mode).__name__}")
    if rank_mode not in RANK_MODES:
        raise ValueError(f"rank_mode must be None, 'relevance' or 'recent'; got {rank_mode!r}")
    sources = _strings(source, "source")
    if query is None or (isinstance(query, str) and not query.strip()):
        return _all_sessions(sources, limit, offset)
    parsed = parse(query)
    if not parsed or limit == 0 or sources == ():
        return []
    values: dict[str, Any] = {"limit": limit, "offset": offset}
    values.update({f"s{i}": item for i, item in enumerate(sources or ())})
    n_sources = None if sources is None else len(sources)

    def run(shape: Shape) -> list[dict[str, Any]]:
        key = (shape, n_sources, rank_mode)
        statement = _session_statements.get(key, lambda: _sessions_statement(*key))
        try:
            scanned = scan_values(parsed, shape, False, deadline)
            params = statement.bind({**values, **term_values(parsed, shape), **scanned})
            names, found = fetch_within(statement.sql, params, deadline)
        except _OutOfTime as exc:
            _ran_out(parsed, budget, len(exc.rows))
            return []  # rows come out only once all of them are ranked
        return [dict(zip(names, row)) for row in found]

    rows = routed(parsed, run)
    snippets = _best_snippets([row["_best_id"] for row in rows], parsed)
    for row in rows:
        rank = row.pop("_rank") or 0.0
        row["hits"] = row.pop("_hits")
        row["score"] = 0.0 - rank
        row["matched_session_id"] = row.pop("_matched")
        row["best_snippet"] = snippets.get(row.pop("_best_id"), "")
    return rows


def _best_snippets(ids: list[int], query: SearchQuery) -> dict[int, str]:
    if not ids:
        return {}
    regex = term_regex(query.positive_terms())
    rows: Any = (
        Message.select(Message.id, Message.content, Message.tool_name, Message.tool_calls)
        .where(Message.id.in_(ids))
        .tuples()
    )
    return {row[0]: _snippet(row[1], row[2], row[3], regex) for row in rows}


def _all_sessions(sources: tuple[str, ...] | None, limit: int, offset: int) -> list[dict[str, Any]]:
    if sources == ():
        return []
    latest = Message.alias("latest")
    last_active = fn.COALESCE(
        latest.select(fn.MAX(latest.timestamp)).where(latest.session == Session.id),
        Session.started_at,
    )
    query = Session.select().select_extend(last_active.alias("last_active"))
    if sources is not None:
        query = query.where(Session.source.in_(sources))
    query = query.order_by(
        SQL('"last_active"').desc(), Session.started_at.desc(), Session.id.desc()
    )
    return fetch_dicts(query.limit(limit).offset(offset))


__all__ = [
    "CONTEXT_CHARS",
    "PREFILTER_GROUPS",
    "RANK_MODES",
    "SLOT_IDS",
    "TIME_BUDGET_S",
    "check_budget",
    "deadline_of",
    "execute",
    "fetch_within",
    "matching",
    "readable",
    "routed",
    "scan_values",
    "search_messages",
    "search_sessions",
]
