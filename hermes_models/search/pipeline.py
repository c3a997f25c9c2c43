"""Searching messages and sessions: the pipeline, and the stage that runs it.

A search goes parse (:mod:`hermes_models.search.query`), plan
(:mod:`hermes_models.search.plan`: routes, SQL, values), execute (this module) and
present (:mod:`hermes_models.search.present`: snippets, context), each stage
handing the next a value: a :class:`~hermes_models.search.query.SearchQuery`, a
:class:`~hermes_models.search.plan.MessagePlan` or
:class:`~hermes_models.search.plan.SessionPlan`, a
:class:`~hermes_models.search.present.Found`.

:func:`search_messages` returns matching messages, best first (or by time),
each with a snippet whose matches are marked ``>>>``/``<<<`` and the
messages around it. :func:`search_sessions` counts the same hits per
lineage root: a compression continuation or a subagent run counts for the
session it continues or serves, while a /branch fork is a result of its own.
:func:`search_sql` gives the SQL a message search runs.

Executing checks arguments, runs the scan of the LIKE-routed terms and the
statements of a plan within a time budget, and falls back to LIKE when an
index is missing or fails. Every search statement runs through
:func:`execute`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import peewee

from ..checks import INT64_MAX, check_flag, check_page, check_rank_window, check_window
from ..driver import sqlite3
from ..models import Message, readable, resolve_prompts_of
from ..store import (
    FUNCTION_ERROR,
    GRAM_COUNT_SQL,
    GRAM_IDS_SQL,
    INDEXES,
    LENIENT_FILES,
    LIKE,
    POSTGRESQL,
    TRIGRAM,
    WORDS,
    SqliteFile,
    Statement,
    available_routes,
    current,
    exact,
    fetch_dicts,
    is_decode_error,
    newer_file,
    sqlite_sql,
    term_match,
    warn_once,
)
from . import postgres as pg_search
from . import present
from .by_root import page_of_roots
from .plan import (
    BEST_RANKS_FUNCTION,
    COUNT_PREFIX_CHARS,
    HIT_COLUMNS,
    RANKED_BY_INDEX,
    RANKED_REST,
    SCAN_FUNCTION,
    WINDOW_FROM,
    BestRanks,
    Filters,
    MessagePlan,
    Scanned,
    ScanPlan,
    SessionPlan,
    Shape,
    all_sessions_query,
    best_hits_statement,
    context_statement,
    ids_values,
    matching_query,
    scan_plan,
    visit_bytes,
    window_values,
    windowed,
    written_out,
)
from .query import Matcher, SearchQuery, parse

T = TypeVar("T")

logger = logging.getLogger("hermes_models")

#: Characters of each message in a hit's ``context``.
CONTEXT_CHARS = present.CONTEXT_CHARS
#: ``rank_mode`` values of :func:`search_sessions`.
RANK_MODES = (None, "relevance", "recent")


def _file() -> SqliteFile:
    """The SQLite file searched here (this module is the file's execute stage)."""
    return cast(SqliteFile, current())


def execute(sql: str, params: Any) -> Any:
    """Run one search statement on the current database; the cursor."""
    return current().execute_sql(sql, params)


# -- the time budget ------------------------------------------------------------------

#: Seconds the statement that finds a search's hits may run; then the search
#: returns the hits found so far (often none) and logs a warning. A
#: ``time_budget`` argument overrides it per call; None means no limit.
TIME_BUDGET_S = 5.0
#: SQLite virtual-machine steps between two looks at the clock.
_CLOCK_STEPS = 10_000


class _OverBudget(Exception):
    """The statements of a try (:func:`_within_steps`) ran past its steps."""


#: The steps a try has left (:func:`_within_steps`), per thread; None outside a try.
_trying = threading.local()


@contextlib.contextmanager
def _within_steps(steps: int) -> Iterator[None]:
    """Run the statements :func:`fetch_within` runs in the block within ``steps`` SQLite
    virtual-machine steps in all; past them, the running statement is interrupted and
    :class:`_OverBudget` raised. Steps are counted :data:`_CLOCK_STEPS` at a time, as a
    statement reaches them: one finished may have taken up to that many more."""
    before = getattr(_trying, "steps", None)
    _trying.steps = steps
    try:
        yield
    finally:
        _trying.steps = before


class _OutOfTime(Exception):
    """The budget ran out; ``rows`` holds the rows fetched before it did."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__("search time budget exhausted")
        self.rows = rows
        #: The plan whose page the rows belong to (None: no page was being read).
        self.plan: MessagePlan | None = None


@contextlib.contextmanager
def _reading_no_hits() -> Iterator[None]:
    """Statements that read no hit (counts, id lookups, the scan before a page): a
    deadline passed in them leaves no hit found, whatever rows they had read."""
    try:
        yield
    except _OutOfTime:
        raise _OutOfTime([]) from None


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
    connection, which interrupts the statement. Text another program stored that
    is not UTF-8 is read with U+FFFD (the statement runs again so).

    Raises:
        _OutOfTime: the deadline passed (with the rows fetched until then).
    """
    try:
        return _fetch_within(sql, params, deadline)
    except (peewee.OperationalError, sqlite3.OperationalError) as exc:
        db = _file()
        if not is_decode_error(exc) or db.file in LENIENT_FILES:
            raise
        db.read_leniently()
        return _fetch_within(sql, params, deadline)


def _fetch_within(
    sql: str, params: list[Any], deadline: float | None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    trying = getattr(_trying, "steps", None) is not None
    if deadline is None and not trying:
        cursor = execute(sql, params)
        return [c[0] for c in cursor.description], list(cursor.fetchall())
    if deadline is not None and time.monotonic() > deadline:
        raise _OutOfTime([])  # spent by an earlier statement of the same search
    conn = cast(sqlite3.Connection, current().connection())
    out_of_time = over = False

    def look_at_the_clock() -> int:
        nonlocal out_of_time, over
        if trying:
            _trying.steps -= _CLOCK_STEPS
            over = _trying.steps < 0
        out_of_time = deadline is not None and time.monotonic() > deadline
        return int(over or out_of_time)

    rows: list[tuple[Any, ...]] = []
    conn.set_progress_handler(look_at_the_clock, _CLOCK_STEPS)
    try:
        cursor = execute(sql, params)
        names = [c[0] for c in cursor.description]
        while batch := cursor.fetchmany(256):
            rows.extend(batch)
    except (peewee.OperationalError, sqlite3.OperationalError):
        if out_of_time:
            raise _OutOfTime(rows) from None
        if over:
            raise _OverBudget() from None
        raise
    finally:
        conn.set_progress_handler(None, 0)
    return names, rows


# -- running a plan ---------------------------------------------------------------------


#: What each SQL function of a search calls on this thread, while its block runs.
_calling = threading.local()


def _caller(name: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        function = getattr(_calling, name, None)
        if function is None:
            raise RuntimeError(f"the SQL function {name} is called outside its search")
        return function(*args)

    return call


@contextlib.contextmanager
def _function(name: str, arguments: int, function: Callable[..., Any]) -> Iterator[None]:
    """The SQL function ``name`` calls ``function`` on this thread while the block runs.

    The function is defined on a connection once (:meth:`HermesDatabase.install_once`):
    defining it for each search made SQLite prepare every later statement again.
    """
    _file().install_once(
        f"{name}/{arguments}",
        lambda conn: conn.create_function(name, arguments, _caller(name)),
    )
    before = getattr(_calling, name, None)
    setattr(_calling, name, function)
    try:
        yield
    finally:
        setattr(_calling, name, before)


def run_scan(scan: ScanPlan, deadline: float | None) -> Scanned:
    """Which messages hold each term of ``scan``: gram index lookups, then one pass.

    Raises:
        _OutOfTime: the deadline passed during the scan.
    """
    indexed: dict[int, set[int]] = {}
    by_match: dict[str, set[int]] = {}
    for k, match in scan.indexed:
        if match not in by_match:
            rows = fetch_within(GRAM_IDS_SQL, [match], deadline)[1]
            by_match[match] = {row[0] for row in rows}
        indexed[k] = by_match[match]
    matcher = Matcher(tuple(term for _, term in scan.terms))
    if not (scan.uncovered_only and _gram_index_covers_all(deadline)):
        db = _file()
        raw = scan.raw is not None and db.file in LENIENT_FILES
        try:
            _scan_rows(scan, matcher, deadline, raw)
        except (peewee.OperationalError, sqlite3.OperationalError) as exc:
            # Text another program stored that is not UTF-8 cannot be handed to the
            # function: the scan reads every text as bytes instead (U+FFFD for those).
            if raw or scan.raw is None or FUNCTION_ERROR not in str(exc):
                raise
            db.read_leniently()
            matcher = Matcher(tuple(term for _, term in scan.terms))
            _scan_rows(scan, matcher, deadline, True)
    holders = matcher.holders
    holding = {k: set(holders[needle]) for (k, _), needle in zip(scan.terms, matcher.needles)}
    for k, ids in indexed.items():
        holding[k] |= ids
    return Scanned(holding)


def _scan_rows(scan: ScanPlan, matcher: Matcher, deadline: float | None, raw: bool) -> None:
    """Run ``scan``'s statement (its ``raw`` form: text as bytes) with ``matcher``."""
    if raw and scan.raw is not None:
        statement = scan.raw()
        with _function(SCAN_FUNCTION, 4, visit_bytes(matcher.visit)):
            fetch_within(statement.sql, statement.bind(scan.values), deadline)
        return
    with _function(SCAN_FUNCTION, 5, matcher.visit):
        fetch_within(scan.statement.sql, scan.statement.bind(scan.values), deadline)


def _gram_state(deadline: float | None, read: tuple[Any, ...] | None = None) -> tuple[int, bool]:
    """The highest message id, and whether any message is listed as changed since the
    gram index indexed it (kept while the file is unchanged); ``read``: those columns
    as a statement just read them (kept unless a value is already)."""

    def state() -> tuple[int, bool]:
        top, changed = read or fetch_within(GRAM_STATE_SQL, [], deadline)[1][0]
        return top, bool(changed)

    return _file().while_unchanged("gram state", state)


def _gram_index_covers_all(deadline: float | None) -> bool:
    """True when the gram index holds every message as it is: a scan of the rows it
    does not cover would read none."""
    return not _gram_state(deadline)[1]


#: The gram index's state (:func:`_gram_state`).
GRAM_STATE_SQL = sqlite_sql.GRAM_STATE
#: The gram index's state and a count of one term's candidates (:func:`_count_common`).
GRAM_STATE_COUNT_SQL = sqlite_sql.GRAM_STATE_COUNT
#: The SQL function :func:`common_from`.
GRAM_NEED_FUNCTION = sqlite_sql.GRAM_NEED_FUNCTION

#: Candidates from which a term counts as common whatever the size of the store.
COMMON_FROM = 1000


#: Messages, divided by the number of terms, that a first try looks at (newest first)
#: when nothing tells whether a query's hits are common (:func:`_walk_newest`).
WALK_BUDGET = 100_000
#: The fewest messages such a first try looks at.
WALK_BUDGET_MIN = 2_000


def _walkable(plan: MessagePlan) -> bool:
    """True for a page of hits no index ranks, newest first, on a file with the time
    index (migration 0008): they can be found by walking messages newest first."""
    if not (plan.shape.all_like and plan.order in ("rank", "newest")):
        return False
    if plan.shape.long_like:
        return False  # a walk tests each row with LIKE: the pattern is too long for it
    if plan.limit is None or plan.limit <= 0:
        return False  # every hit is wanted: reading the candidates is the shorter way
    file = current().shape
    return file is not None and file.time_index


def _walk_newest(plan: MessagePlan, deadline: float | None) -> list[tuple[Any, ...]] | None:
    """The page of ``plan`` found among the newest messages only, or None when they do
    not hold a whole page (then the page needs every candidate).

    Sound because the order is total (time, then id): when the newest ``n``
    messages hold ``offset + limit`` hits, no older message can be one of them.
    """
    budget = max(WALK_BUDGET_MIN, WALK_BUDGET // max(1, len(plan.query.terms())))
    shape = plan.shape.unscanned()._replace(walk=True)
    walk = MessagePlan(
        plan.query, shape, plan.filters, "newest", plan.limit, plan.offset, plan.rank_window
    )
    statement = walk.statement
    values = {**walk.values(None), "budget": budget}
    rows = fetch_within(statement.sql, statement.bind(values), deadline)[1]
    return rows if len(rows) == plan.limit else None


def _common(plan: MessagePlan, deadline: float | None) -> bool | None:
    """True when ``plan``'s hits are better found by walking messages newest first,
    False when not, None when only trying can tell (see :func:`_walk_newest`).

    For a page of hits no index ranks (terms of one and two CJK characters),
    ranked or newest first, on a file with the time index (migration 0008):
    the gram index says how many messages each term's group can match at
    most (its rarest term's count; the groups' counts added up, ``NOT`` terms
    left out), counting up to ``sqrt(page x messages x terms)`` (and at least
    :data:`COMMON_FROM`). Past that, a walk from the newest message meets a
    page of hits after about ``page x messages / count`` rows, each tested for
    every term, where reading the candidates would read ``count`` rows and
    sort them. When the gram
    index is missing, leaves that many messages out, or a group has a longer
    term, only trying can tell.
    """
    shape, query = plan.shape, plan.query
    if not _walkable(plan):
        return False
    if not shape.grams:
        return None
    if not all(exact(term) for group in query.groups for term in group.include):
        return None
    groups = tuple(tuple(term_match(term) for term in group.include) for group in query.groups)
    page = (plan.limit or 0) + plan.offset
    terms = len(query.terms())
    # Counted once while the file stays as it is: the same search again, or its next
    # page, reads nothing more (HermesDatabase.while_unchanged).
    return _file().while_unchanged(
        ("common", groups, page, terms, COMMON_FROM),
        lambda: _count_common(groups, page, terms, deadline),
    )


def common_from(page_terms: int, top: int | None) -> int:
    """Candidates from which a term counts as common (:func:`_common`), for a page of
    ``page_terms`` divided by the number of terms on a store whose highest message id
    is ``top``; also the SQL function :data:`GRAM_NEED_FUNCTION`."""
    return max(COMMON_FROM, math.isqrt(page_terms * (top or 0)))


def _count_common(
    groups: tuple[tuple[str, ...], ...], page: int, terms: int, deadline: float | None
) -> bool | None:
    """:func:`_common` for the gram index's ``MATCH`` expressions of each group's terms.

    The first term is counted in the statement that reads the gram index's state
    (:func:`_gram_state`, kept), the others (if any) one by one.
    """
    _file().install_once(
        f"{GRAM_NEED_FUNCTION}/2",
        lambda conn: conn.create_function(GRAM_NEED_FUNCTION, 2, common_from, deterministic=True),
    )
    page_terms = min(page * terms, INT64_MAX)
    row = fetch_within(GRAM_STATE_COUNT_SQL, [page_terms, groups[0][0], page_terms], deadline)[1][0]
    top, _, uncovered, counted = row
    _gram_state(deadline, row[:2])
    need = common_from(page_terms, top)
    if uncovered > need:
        return None  # the index does not cover enough of the store to tell
    found = 0
    for k, group in enumerate(groups):
        rarest = need
        for j, match in enumerate(group):
            if k == j == 0:
                count = counted  # read with the state
            else:
                (count,) = fetch_within(GRAM_COUNT_SQL, [match, need], deadline)[1][0]
            rarest = min(rarest, count)
            if not rarest:
                break
        found += rarest
        if found >= need:
            return True
    return False


def _run(
    plan: MessagePlan | SessionPlan, deadline: float | None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names and rows of ``plan``'s statement, its scan run first.

    Raises:
        _OutOfTime: the deadline passed (with the rows fetched until then).
    """
    with _reading_no_hits():
        if isinstance(plan, MessagePlan):
            matched = plan.shape.matched_by_grams(plan.query)
            if matched is not None and _gram_index_covers_all(deadline):
                # One MATCH of the gram index in the page's statement: no list of ids.
                plan = dataclasses.replace(plan, shape=matched)
        scan = plan.scan()
        scanned = None if scan is None else run_scan(scan, deadline)
    # Few rows found by the scan hold every hit: their word terms are looked up row by row.
    probed = plan.shape.probed(scanned)
    if probed is not plan.shape:
        plan = dataclasses.replace(plan, shape=probed)
    statement = plan.statement
    # A page that makes its snippets in its one pass keeps the best ranks read so far.
    keeping = _function(BEST_RANKS_FUNCTION, 2, BestRanks().keep) if plan.shape.snips else None
    with keeping or contextlib.nullcontext():
        return fetch_within(statement.sql, statement.bind(plan.values(scanned)), deadline)


#: Whether the word index matches more than a number of messages.
WORD_MATCHES_BEYOND_SQL = sqlite_sql.WORD_MATCHES_BEYOND

#: The fewest SQLite virtual-machine steps FTS5 takes for each hit it ranks by
#: ``rank`` (the sorter behind ``ORDER BY rank`` reads, scores and stores every hit):
#: 15 in SQLite 3.40, whatever the query (``tests/test_search_window.py`` measures
#: it). A page of words that finishes within ``WINDOW_FROM x window`` times this many
#: steps ranked no more hits than the count that decides the window would allow.
SORTER_STEPS_PER_HIT = 15


def ranked_within(
    query: SearchQuery,
    shape: Shape,
    order: str,
    page: tuple[int | None, int],
    deadline: float | None,
    *,
    scanned: bool = False,
    widen: bool = True,
    attempt: Callable[[Shape], object] | None = None,
    rank_window: int | None = None,
) -> Shape:
    """``shape`` ranking only the newest ``rank_window`` hits
    (:func:`hermes_models.search.plan.windowed`) when the caller bounds the ranking and
    that pays: once the index matches the groups it decides alone more than
    :data:`~hermes_models.search.plan.WINDOW_FROM` times as often as the window holds (a quick
    count, oldest first); with fewer hits, ranking them all costs less and is exact. A
    query of words alone with a short prefix term
    (:data:`~hermes_models.search.plan.COUNT_PREFIX_CHARS`) is windowed without counting.
    ``rank_window`` None (the default): ``shape`` as it is, every hit ranked.

    ``page``: ``(limit, offset)``; ``scanned`` as in :func:`~hermes_models.search.plan.windowed`;
    ``widen``: whether a page ending beyond the window widens it (a page of messages
    does; a page of sessions counts sessions, and its window stays as it is).

    ``attempt``, for a query of words alone: before counting, ``attempt(shape)`` is run
    within the steps ranking that many hits takes at the least
    (:data:`SORTER_STEPS_PER_HIT` each): finished, it ranked every hit, which are
    then no more than the count would allow, and nothing is counted. The count reads
    every hit's id lists a second time, 10-20 % of a page of a few thousand hits.

    Raises:
        _OutOfTime: the deadline passed while counting (or in ``attempt``).
    """
    limit, offset = page
    bounded = windowed(shape, query, order, limit, scanned=scanned, rank_window=rank_window)
    if not bounded.window or bounded.all_like:
        return bounded
    if bounded.single == WORDS and bounded.prefixes and _short_prefix(query, bounded):
        # A short prefix costs FTS5 a merge of every word it starts on each lookup:
        # one pass over the newest hits costs less than a count, then a ranking.
        return bounded
    values = window_values(query, bounded, (limit or 0) + offset if widen else 0, rank_window)
    beyond = min(values["window"] * WINDOW_FROM, INT64_MAX)  # a page without end: 2**63-1
    params = [values["wq"], beyond]
    steps = beyond * SORTER_STEPS_PER_HIT - _CLOCK_STEPS
    if attempt is None or bounded.single != WORDS or steps <= 0:
        attempt = None

    def many() -> bool:
        if attempt is not None:
            try:
                with _within_steps(steps):
                    attempt(shape)
            except _OverBudget:
                pass  # many hits, or costly ones: the count tells
            else:
                return False
        return bool(fetch_within(WORD_MATCHES_BEYOND_SQL, params, deadline)[1])

    return bounded if _file().while_unchanged(("word matches beyond", *params), many) else shape


def _short_prefix(query: SearchQuery, shape: Shape) -> bool:
    """Whether a word group of ``shape`` holds a prefix term of few characters."""
    return any(
        term.prefix and len(term.text) < COUNT_PREFIX_CHARS
        for i in shape.word_groups
        for term in query.groups[i].include
    )


def _rows(statement: Statement, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    return list(execute(statement.sql, statement.bind(values)).fetchall())


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


def routed(query: SearchQuery, run: Callable[[Shape], T], *, like: bool = False) -> T:
    """``run`` with the query's shape on this file; with LIKE when an index fails, or
    for every term with ``like``."""
    available = available_routes()
    # (A route of an index the file lacks: a route without an index never is.)
    for route in sorted({t.route for t in query.terms()} & set(INDEXES) - available):
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


def _message_request(
    query: str | None,
    source_filter: Any,
    exclude_sources: Any,
    role_filter: Any,
    limit: int | None,
    offset: int,
    sort: str | None,
    include_inactive: bool,
    since: Any = None,
    until: Any = None,
) -> tuple[SearchQuery, Filters, str, int | None, int] | None:
    """The arguments of a message search checked: query, filters, order, limit, offset;
    None when nothing can match."""
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
        *check_window(since, until),
    )
    if not parsed or limit == 0 or filters.sources == ():
        return None
    order = wanted if wanted in ("newest", "oldest") else "rank"
    return parsed, filters, order, limit, offset


def _reads_tool_rows(filters: Filters) -> bool:
    # A newer Hermes indexes only the first 8,192 characters of a tool row; as Hermes
    # does, a search that asks for tool rows reads their whole text with LIKE.
    return newer_file() and "tool" in filters.roles


def _ranked_trigram(plan: MessagePlan, deadline: float | None) -> list[tuple[Any, ...]] | None:
    """The rows of a ranked page of a query on the trigram index alone, read as the
    plain ``MATCH ... ORDER BY rank`` reads them: the hits the index ranks, then, only
    when they do not fill the page, the rows it cannot read (see
    :func:`hermes_models.search.plan._trigram_part`). None when this does not apply, or when
    the page holds none of the ranked hits (the whole statement then answers).

    Raises:
        _OutOfTime: the deadline passed (with the rows fetched until then).
    """
    if plan.order != "rank" or plan.shape.single != TRIGRAM or not plan.limit or plan.limit < 0:
        return None
    ranked = dataclasses.replace(plan, order=RANKED_BY_INDEX)
    statement = ranked.statement
    rows = fetch_within(statement.sql, statement.bind(ranked.values(None)), deadline)[1]
    if len(rows) >= plan.limit or not rows:
        return rows or None
    # Every ranked hit is read (the last ``len(rows)`` are on this page): the rows the
    # index cannot read fill the rest of it, from the first of them.
    rest = dataclasses.replace(plan, order=RANKED_REST, limit=plan.limit - len(rows), offset=0)
    try:
        return rows + _run(rest, deadline)[1]
    except _OutOfTime as exc:
        raise _OutOfTime(rows + exc.rows) from None


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
    since: Any = None,
    until: Any = None,
    rank_window: int | None = None,
) -> list[dict[str, Any]]:
    """Messages matching ``query``; never raises for any query text.

    Each hit has ``id, session_id, role, snippet, timestamp, tool_name,
    source, model, session_started, context``. ``sort`` ``'newest'`` or
    ``'oldest'`` (any case, spaces around ignored) orders by time; anything
    else, None included, by rank, as in Hermes. Soft-deleted messages only
    with ``include_inactive=True``. A search that runs longer than
    ``time_budget`` seconds (default :data:`TIME_BUDGET_S`; None: no limit)
    stops and returns the hits found by then, with a warning in the log. ``since`` and
    ``until`` (epoch seconds or ``datetime``; ours) keep the messages sent at or after
    ``since`` and before ``until``. A ranked page is the best of every hit; with
    ``rank_window=N`` (ours; a positive int) it is the best of the newest ``N`` hits
    only when there are many more (:data:`~hermes_models.search.plan.WINDOW_FROM` x
    ``N``; a page ending beyond ``N`` widens it): faster for very common words,
    not exact (:data:`~hermes_models.search.plan.RANK_WINDOW` is a suggested value).

    Raises:
        TypeError, ValueError: an argument other than the query text is wrong.
    """
    budget = check_budget(time_budget)
    deadline = deadline_of(budget)
    window = check_rank_window(rank_window)
    request = _message_request(
        query,
        source_filter,
        exclude_sources,
        role_filter,
        limit,
        offset,
        sort,
        include_inactive,
        since,
        until,
    )
    if request is None:
        return []
    parsed, filters, order, limit, offset = request
    if current().dialect == POSTGRESQL:  # the server's execute stage
        return pg_search.search_messages(parsed, filters, order, limit, offset, budget, window)

    def page(shape: Shape) -> tuple[MessagePlan, list[tuple[Any, ...]]]:
        """The plan of ``shape`` (windowed or not) and the rows of its page.

        Raises:
            _OutOfTime: with the plan's rows found by then (``_OutOfTime.plan``).
        """
        shape = shape.snipped(parsed, order)
        plan = MessagePlan(parsed, shape, filters, order, limit, offset, window)
        try:
            with _reading_no_hits():
                common = _common(plan, deadline)
            rows: list[tuple[Any, ...]] | None = None
            if common:
                # Hits are many: walking messages newest first finds a page sooner.
                plan = MessagePlan(
                    parsed, shape.unscanned(), filters, "newest", limit, offset, window
                )
            elif common is None:
                rows = _walk_newest(plan, deadline)
            if rows is None:
                rows = _ranked_trigram(plan, deadline)
            if rows is None:
                rows = _run(plan, deadline)[1]
        except _OutOfTime as exc:
            exc.plan = plan
            raise
        return plan, rows

    def run(shape: Shape) -> present.Found:
        tried: list[tuple[MessagePlan, list[tuple[Any, ...]]]] = []
        try:
            decided = ranked_within(
                parsed,
                shape,
                order,
                (limit, offset),
                deadline,
                attempt=lambda s: tried.append(page(s)),
                rank_window=window,
            )
            plan, rows = tried[0] if tried and decided is shape else page(decided)
        except _OutOfTime as exc:
            _ran_out(parsed, budget, len(exc.rows))
            if exc.plan is None:  # while counting: no hit found yet
                return present.Found([], {})
            plan, rows = exc.plan, exc.rows
        snippets: dict[int, str] = {}
        if rows and len(rows[0]) > len(HIT_COLUMNS):
            snippets = {row[0]: row[-1] for row in rows}
        missing = [row[0] for row in rows if row[0] not in snippets]
        if plan.shape.snips:
            # Made for every row that may reach the page; one without (never expected)
            # gets its snippet from a second statement.
            missing = [row[0] for row in rows if snippets.get(row[0]) is None]
        if missing:
            lookup = plan.snippets(missing)
            if lookup is not None:
                snippets.update(_rows(*lookup))
        return present.Found(rows, snippets)

    with _file()._reading_once():  # the choices below look at the file's state once
        found = routed(parsed, run, like=_reads_tool_rows(filters))
    if found.rows:
        ids = [row[0] for row in found.rows]
        statement = context_statement(filters.include_inactive)
        found.around = {row[0]: row for row in _rows(statement, ids_values(ids))}
    return present.hits(found, parsed)


def search_sql(
    query: str | None,
    source_filter: Any = None,
    exclude_sources: Any = None,
    role_filter: Any = None,
    limit: int | None = 20,
    offset: int = 0,
    sort: str | None = None,
    include_inactive: bool = False,
    *,
    rank_window: int | None = None,
) -> list[tuple[str, list[Any]]]:
    """The SQL and parameters that find the hits of :func:`search_messages` with the
    same arguments, on the open file, as ``[(sql, params), ...]`` to run in order
    (the last one returns the hits; ``[]`` when nothing can match).

    Terms the search finds with its one-pass scan (three or more LIKE-routed
    terms, or terms the gram index narrows) are written as the ``LIKE`` they
    stand for, so plain SQLite runs the statements alone; the hits are the
    same. A search then reads the snippets and context of those hits. ``rank_window``
    as in :func:`search_messages`.

    Raises:
        TypeError, ValueError: an argument other than the query text is wrong.
    """
    window = check_rank_window(rank_window)
    request = _message_request(
        query, source_filter, exclude_sources, role_filter, limit, offset, sort, include_inactive
    )
    if request is None:
        return []
    parsed, filters, order, limit, offset = request
    if current().dialect == POSTGRESQL:  # the server's execute stage
        return pg_search.search_sql(parsed, filters, order, limit, offset, window)
    shape = Shape.of(parsed, available_routes())
    if _reads_tool_rows(filters):
        shape = shape.degraded()
    shape = ranked_within(parsed, shape, order, (limit, offset), None, rank_window=window)
    return [written_out(MessagePlan(parsed, shape, filters, order, limit, offset, window))]


def matching(query: str | None, *, include_inactive: bool = False) -> peewee.ModelSelect[Message]:
    """Messages matching ``query`` as a peewee query, to chain further.

    Best first when every term goes to the word index, newest first
    otherwise. The query is built for the indexes the file has now; unlike
    :func:`search_messages` it does not fall back when an index fails.

    Raises:
        NotImplementedError: the store is a PostgreSQL database (use
            :func:`search_messages` there).
    """
    if current().dialect == POSTGRESQL:
        raise NotImplementedError(
            "a search as a peewee query (Message.matching) runs on SQLite stores;"
            " on PostgreSQL use Message.search (search_messages)"
        )
    parsed = parse(query)
    if not parsed:
        return matching_query(parsed, None, None, include_inactive)
    shape = Shape.of(parsed, available_routes())
    scan = scan_plan(parsed, shape, include_inactive)
    scanned = None if scan is None else run_scan(scan, None)
    return matching_query(parsed, shape, scanned, include_inactive)


# -- sessions -----------------------------------------------------------------------------


def search_sessions(
    query: str | None = None,
    limit: int | None = 10,
    rank_mode: str | None = None,
    *,
    source: Any = None,
    offset: int = 0,
    time_budget: Any = ...,
    since: Any = None,
    until: Any = None,
    rank_window: int | None = None,
) -> list[dict[str, Any]]:
    """Sessions whose messages match ``query``, one row per lineage root.

    Each row is the root session's columns plus ``hits`` (matching active
    messages), ``score`` (of the best hit; higher is better, 0 without an
    index rank), ``matched_session_id`` and ``best_snippet``. ``rank_mode``
    ``'recent'`` orders by the latest match, otherwise by the best score.
    Without a query (``None`` or blank): every session, newest activity
    first, with ``last_active``. ``time_budget`` as in :func:`search_messages`.
    ``since``/``until`` (ours) keep the roots started at or after ``since`` and
    before ``until``. Every hit is ranked and counted; with ``rank_window=N`` (ours)
    only the newest ``N`` hits are, when there are many more (as in
    :func:`search_messages`): ``hits`` then counts those.

    Raises:
        TypeError, ValueError: an argument other than the query text is wrong.
    """
    budget = check_budget(time_budget)
    deadline = deadline_of(budget)
    limit, offset = check_page(limit, offset)
    window = check_rank_window(rank_window)
    if rank_mode is not None and not isinstance(rank_mode, str):
        raise TypeError(f"rank_mode must be a string or None, not {type(rank_mode).__name__}")
    if rank_mode not in RANK_MODES:
        raise ValueError(f"rank_mode must be None, 'relevance' or 'recent'; got {rank_mode!r}")
    sources = _strings(source, "source")
    started = check_window(since, until)
    if query is None or (isinstance(query, str) and not query.strip()):
        if sources == ():
            return []
        # A v25+ file stores system prompts by hash: rows carry the text, as Hermes'.
        listed = all_sessions_query(sources, limit, offset, started)
        return resolve_prompts_of(fetch_dicts(listed))
    parsed = parse(query)
    if not parsed or limit == 0 or sources == ():
        return []
    if current().dialect == POSTGRESQL:  # the server's execute stage
        return pg_search.search_sessions(
            parsed, sources, rank_mode, limit, offset, budget, started, window
        )

    def run(shape: Shape) -> list[dict[str, Any]]:
        try:
            shape = ranked_within(
                parsed,
                shape,
                "rank",
                (limit, 0),
                deadline,
                scanned=True,
                widen=False,
                rank_window=window,
            )
            plan = SessionPlan(parsed, shape, window)
            _, found = _run(plan, deadline)
        except _OutOfTime:
            _ran_out(parsed, budget, 0)  # sessions come out only once all are ranked
            return []
        return page_of_roots(found, sources, rank_mode, limit, offset, started)

    with _file()._reading_once():
        rows = routed(parsed, run)
    best: list[tuple[Any, ...]] = []
    if rows:
        ids = [row["_best_id"] for row in rows]
        best = _rows(best_hits_statement(), ids_values(ids))
    return present.sessions(rows, best, parsed)


__all__ = [
    "COMMON_FROM",
    "CONTEXT_CHARS",
    "GRAM_NEED_FUNCTION",
    "GRAM_STATE_COUNT_SQL",
    "GRAM_STATE_SQL",
    "RANK_MODES",
    "SORTER_STEPS_PER_HIT",
    "TIME_BUDGET_S",
    "WALK_BUDGET",
    "WALK_BUDGET_MIN",
    "check_budget",
    "common_from",
    "deadline_of",
    "execute",
    "fetch_within",
    "matching",
    "readable",
    "routed",
    "run_scan",
    "search_messages",
    "search_sessions",
    "search_sql",
]
