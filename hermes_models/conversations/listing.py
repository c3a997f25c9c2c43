"""Session listings as pickers show them, the way Hermes lists them.

A listing holds roots and branches (never subagent runs). Filters, paging
and the default order (newest start first) apply to those surfaced rows.
A surfaced row whose context was compressed stands for its whole chain: its
id, end, counts, title, model, prompt, working directory, preview and last
activity are the chain tip's, and ``_lineage_root_id`` names the surfaced
row; its start and other columns stay its own. Ordered by last activity, a
chain counts with the latest activity of any session in it, and
``id_query`` admits a chain when any of its ids contains the text.
Everything is one SQL statement built from the lineage expressions.

Pages: ``offset`` skips rows, so page 50 reads the 980 rows before it;
``after`` (the ``id`` of the last row of the previous page) starts the page
right after that row's place in the start order, read from the index (keyset
paging), whatever the page number. A row that shows a chain's tip stands at
its root's place: ``after`` may be the tip's id (the row's ``id``) or the
root's (its ``_lineage_root_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import peewee
from peewee import JOIN, SQL, fn

from ..checks import (
    check_flag,
    check_int64,
    check_page,
    check_sources,
    check_text,
    check_window,
)
from ..models import (
    TIP_MAX_HOPS,
    Message,
    Session,
    compression_expr,
    ended_with_compression,
    listable_expr,
    recency,
    resolve_prompts_of,
    walk_sessions,
)
from ..store import (
    SCHEMA_VERSION,
    Prepared,
    cached,
    current,
    fetch_dicts,
    file_has,
    limit_value,
    newer_file,
    starts_with_ascii_nocase,
    starts_with_nul,
)
from .listing_rows import (
    NEWER_TIP_COLUMNS,
    PREVIEW_CHARS,
    PREVIEW_SOURCE_CHARS,
    TIP_COLUMNS,
    finish_row,
    preview_of,
    preview_text,
)

if TYPE_CHECKING:
    from typing import Any

#: Sources Hermes' human pickers (and ``hermes-models sessions``) leave out by passing
#: them as ``exclude_sources``; the API lists every source, as Hermes' does.
INTERNAL_SOURCES = ("tool", "kanban", "oneshot")


def session_filters(
    s: Any,
    *,
    source: Any = None,
    exclude_sources: Any = None,
    include_children: bool = True,
    include_archived: bool = True,
    archived_only: bool = False,
    min_message_count: Any = 0,
    include_hidden: bool = True,
    since: Any = None,
    until: Any = None,
) -> list[peewee.Node]:
    """WHERE terms shared by listings and counts. ``include_hidden=False`` leaves out the
    sessions Hermes v26+ hid from its listing (``hidden = 1``), on files that have them;
    ``since``/``until`` (values or slots) keep sessions started at or after ``since``
    and before ``until``."""
    terms: list[peewee.Node] = []
    include_children = check_flag(include_children, "include_children")
    include_archived = check_flag(include_archived, "include_archived")
    archived_only = check_flag(archived_only, "archived_only")
    wanted = check_sources(source, "source")
    if not include_children:
        terms.append(listable_expr(s))
    if wanted:
        terms.append(s.source.in_(wanted))
    excluded = check_sources(exclude_sources, "exclude_sources")
    if excluded:
        terms.append(s.source.not_in(excluded))
    if isinstance(min_message_count, peewee.Node) or min_message_count:
        terms.append(s.message_count >= min_message_count)
    if archived_only:
        terms.append(s.archived == 1)
    elif not include_archived:
        terms.append(s.archived == 0)
    if not check_flag(include_hidden, "include_hidden") and file_has("sessions", "hidden"):
        terms.append(fn.COALESCE(s.hidden, 0) == 0)
    if since is not None:
        terms.append(s.started_at >= since)
    if until is not None:
        terms.append(s.started_at < until)
    return terms


def where_all(query: Any, terms: Sequence[peewee.Node]) -> Any:
    """``query`` filtered by every term (unchanged when there are none)."""
    return query.where(*terms) if terms else query


def _enrichment(x: Any, prefix: str) -> list[Any]:
    """``preview`` material and ``last_active`` of the session rows ``x``.

    The first user message (by time) with content is read twice at most: its
    first characters, and the whole text only when it is stored as JSON.
    """
    first = Message.alias(f"{prefix}first")
    eligible = [first.session == x.id, first.role == "user", first.content.is_null(False)]
    if file_has("messages", "display_kind"):
        # Hermes v27+: rows it never paints, and pure compaction carriers, are no preview.
        eligible.append(fn.COALESCE(first.display_kind, "") != "hidden")
    if file_has("messages", "_compressed_summary"):
        eligible.append(fn.COALESCE(first.compressed_summary, 0) == 0)
    first_id = first.select(first.id).where(*eligible).order_by(first.timestamp, first.id).limit(1)
    shown = Message.alias(f"{prefix}text")
    head = fn.SUBSTR(
        fn.REPLACE(fn.REPLACE(shown.content, "\n", " "), "\r", " "), 1, PREVIEW_SOURCE_CHARS
    )
    stored_json = starts_with_nul(shown.content)
    latest = Message.alias(f"{prefix}latest")
    last_active = recency(x, latest)
    columns = [
        head.alias(f"{prefix}preview"),
        peewee.Case(None, [(stored_json, shown.content)], None).alias(f"{prefix}preview_json"),
        last_active.alias(f"{prefix}last_active"),
    ]
    return [columns, (shown, shown.id == first_id)]


def _chain(roots_cte: Any) -> Any:
    """Every session of each surfaced row's compression chain: ``(root_id, id, ...)``."""
    return walk_sessions(Session, roots_cte, follow=compression_expr, name="chain")


def rich_listing(
    *,
    source: Any = None,
    exclude_sources: Any = None,
    limit: int | None = 20,
    offset: int = 0,
    include_children: bool = False,
    min_message_count: int = 0,
    project_compression_tips: bool = True,
    order_by_last_active: bool = False,
    include_archived: bool = False,
    archived_only: bool = False,
    id_query: str | None = None,
    after: str | None = None,
    include_hidden: bool = False,
    since: Any = None,
    until: Any = None,
) -> list[dict[str, Any]]:
    """Session rows with ``preview`` and ``last_active`` (see the module docstring).
    Sessions Hermes v26+ hid (``hidden = 1``) only with ``include_hidden``, as in Hermes.
    ``since``/``until`` (epoch seconds or ``datetime``) keep the surfaced sessions
    started at or after ``since`` and before ``until``.

    ``id_query`` (text in any id of the chain, ASCII case-insensitive) is
    honoured with ``order_by_last_active`` only, as in Hermes. ``after`` (a row's
    ``id``) gives the rows that follow that row in the start order, ``offset``
    then counting from there.

    Raises:
        ValueError: ``after`` names no session (deleted since its page was read?),
            or is given with ``order_by_last_active``.
    """
    limit, offset = check_page(limit, offset)
    after = check_text(after, "after", optional=True, empty=False)
    min_message_count = check_int64(min_message_count, "min_message_count", minimum=0)
    sources = check_sources(source, "source") or []
    excluded = check_sources(exclude_sources, "exclude_sources") or []
    needle = (check_text(id_query, "id_query", optional=True) or "").strip().lower()
    flags = (
        check_flag(include_children, "include_children"),
        check_flag(project_compression_tips, "project_compression_tips"),
        check_flag(order_by_last_active, "order_by_last_active"),
        check_flag(include_archived, "include_archived"),
        check_flag(archived_only, "archived_only"),
        min_message_count > 0,
    )
    by_id = bool(needle) and flags[2]
    keyed = after is not None
    if keyed and flags[2]:
        raise ValueError("after pages the start order; with order_by_last_active use offset")
    # The page size goes into the SQL where the backend says so (one statement per
    # page size), else it is bound.
    page = current().literal_limit(limit)
    hidden = check_flag(include_hidden, "include_hidden")
    window = check_window(since, until)
    bounds = (window[0] is not None, window[1] is not None)
    shape = (len(sources), len(excluded), *flags, by_id, keyed, page, hidden, bounds)

    prepared = listing_statement(shape)
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    values: dict[str, Any] = {
        "limit": limit_value(limit),
        "offset": offset,
        "min_count": min_message_count,
        "needle": f"%{escaped}%",
    }
    if after is not None:
        projected = flags[1] and not flags[0]  # as rich_listing_query projects
        values["after_started"], values["after_id"] = _page_key(after, projected=projected)
    values.update({k: v for k, v in zip(("since", "until"), window) if v is not None})
    values.update({f"source{i}": value for i, value in enumerate(sources)})
    values.update({f"exclude{i}": value for i, value in enumerate(excluded)})
    cursor = prepared.execute(current(), **values)
    names = [column[0] for column in cursor.description]
    version = hermes_version()
    rows = [
        finish_row(dict(zip(names, row)), root_title=version >= 30) for row in cursor.fetchall()
    ]
    rows = resolve_prompts_of(rows)
    if file_has("sessions", "last_read_at"):
        for row in rows:
            row["unread"] = unread(row)
    if version >= 30:
        lineage_keys(rows, continuation_kind=version >= 31)
    return rows


def hermes_version() -> int:
    """The Hermes schema version of the open store's rules: the file's own when it is
    newer than v16, else 16 (what this package writes, on a file or a server)."""
    shape = getattr(current(), "shape", None)
    return SCHEMA_VERSION if shape is None else shape.rules_version


def lineage_keys(rows: list[dict[str, Any]], *, continuation_kind: bool) -> None:
    """Give each row that shows a chain's tip the keys Hermes v30 adds: ``_lineage_ids``,
    the chain from its root to the tip (the walk the tip was found by), and from v31
    ``continuation_kind`` (``"compression"``). One statement for every such row."""
    roots = [row["_lineage_root_id"] for row in rows if "_lineage_root_id" in row]
    if not roots:
        return
    walk = walk_sessions(
        Session,
        Session.id.in_(roots),
        latest=True,
        leave=ended_with_compression,
        max_depth=TIP_MAX_HOPS,
        name="walk",
    )
    query = walk.select_from(walk.c.root_id, walk.c.id).order_by(walk.c.root_id, walk.c.depth)
    chains: dict[str, list[str]] = {}
    for root_id, session_id in current().execute(query.with_cte(walk)).fetchall():
        chains.setdefault(root_id, []).append(session_id)
    for row in rows:
        root_id = row.get("_lineage_root_id")
        if root_id is None:
            continue
        row["_lineage_ids"] = chains.get(root_id, [root_id])
        if continuation_kind:
            row["continuation_kind"] = "compression"


def unread(row: dict[str, Any]) -> bool:
    """Hermes v25+'s ``unread`` of a listed row: activity after its read watermark
    (``last_read_at``; none: never tracked, so read)."""
    last_read = row.get("last_read_at")
    if last_read is None:
        return False
    last_active = row.get("last_active") or row.get("started_at")
    try:
        return float(last_active or 0) > float(last_read)
    except (TypeError, ValueError):
        return False


def listing_statement(shape: tuple[Any, ...]) -> Prepared:
    """The prepared statement of :func:`rich_listing` for one ``shape``: the number of
    sources and of excluded sources, the six flags (children, tips, by last activity,
    archived too, archived only, a minimum count), by id, by key, and the page size
    written in the SQL (None: bound, as the quick path and PostgreSQL have it)."""
    n_sources, n_excluded, *flags_and_more = shape
    flags, by_id, keyed = flags_and_more[:6], flags_and_more[6], flags_and_more[7]
    page = flags_and_more[8]  # the LIMIT written in the SQL (None: bound)
    hidden, bounds = flags_and_more[9], flags_and_more[10]

    def prepare() -> Prepared:
        names = [f"source{i}" for i in range(n_sources)]
        names += [f"exclude{i}" for i in range(n_excluded)]
        optional = (["min_count"] if flags[5] else []) + (["needle"] if by_id else [])
        optional += ["after_started", "after_id"] if keyed else []
        optional += [name for name, on in zip(("since", "until"), bounds) if on]

        def build(**marks: Any) -> Any:
            return rich_listing_query(
                source=[marks[f"source{i}"] for i in range(n_sources)] or None,
                exclude_sources=[marks[f"exclude{i}"] for i in range(n_excluded)] or None,
                limit=marks["limit"] if page is None else SQL(str(int(page))),
                offset=marks["offset"],
                include_children=flags[0],
                min_message_count=marks["min_count"] if flags[5] else 0,
                project_compression_tips=flags[1],
                order_by_last_active=flags[2],
                include_archived=flags[3],
                archived_only=flags[4],
                id_pattern=marks["needle"] if by_id else None,
                after_key=(marks["after_started"], marks["after_id"]) if keyed else None,
                include_hidden=hidden,
                since=marks["since"] if bounds[0] else None,
                until=marks["until"] if bounds[1] else None,
            )

        return Prepared(build, *names, *(["limit"] if page is None else []), "offset", *optional)

    return cached(("listing", shape), prepare)


def rich_listing_query(
    *,
    source: Any = None,
    exclude_sources: Any = None,
    limit: Any = 20,
    offset: int = 0,
    include_children: bool = False,
    min_message_count: Any = 0,
    project_compression_tips: bool = True,
    order_by_last_active: bool = False,
    include_archived: bool = False,
    archived_only: bool = False,
    id_pattern: Any = None,
    after_key: tuple[Any, Any] | None = None,
    include_hidden: bool = False,
    since: Any = None,
    until: Any = None,
) -> Any:
    """The one SELECT behind :func:`rich_listing` (values may be placeholders).

    ``id_pattern`` is a LIKE pattern (``\\`` escapes) matched against the
    lower-cased ids of each chain; ``after_key`` (a start time and an id, in the
    start order only) keeps the roots that come after it.
    """
    project = project_compression_tips and not include_children
    s = Session.alias("s")
    roots = where_all(
        s.select(
            s.id.alias("root_id"),
            s.started_at.alias("root_started"),
            s.end_reason.alias("root_end"),
        ),
        session_filters(
            s,
            source=source,
            exclude_sources=exclude_sources,
            include_children=include_children,
            include_archived=include_archived,
            archived_only=archived_only,
            min_message_count=min_message_count,
            include_hidden=include_hidden,
            since=since,
            until=until,
        ),
    )
    if after_key is not None:
        # A row value: one range of idx_sessions_started_id, read from the key on.
        roots = roots.where(peewee.Tuple(s.started_at, s.id) < peewee.Tuple(*after_key))
    if not order_by_last_active:
        roots = roots.order_by(s.started_at.desc(), s.id.desc()).limit(limit).offset(offset)
    roots_cte = roots.cte("roots")

    row = Session.alias("row")
    columns, (first, on_first) = _enrichment(row, "")
    query = row.select(row, roots_cte.c.root_id.alias("_root_id"), *columns).from_(roots_cte)
    query = query.join(row, on=(row.id == roots_cte.c.root_id))
    query = query.join(first, JOIN.LEFT_OUTER, on=on_first)
    ctes: list[Any] = [roots_cte]
    if project:
        walk, tips = _tips(roots_cte)
        ctes.extend([walk, tips])
        tip = Session.alias("tip")
        tip_columns, (tip_first, on_tip_first) = _enrichment(tip, "_tip_")
        taken: tuple[str, ...] = TIP_COLUMNS
        if newer_file():
            taken += tuple(c for c in NEWER_TIP_COLUMNS if file_has("sessions", c))
        query = query.select_extend(
            *[getattr(tip, Session._meta.columns[c].name).alias(f"_tip_{c}") for c in taken],
            *tip_columns,
        )
        query = query.join(tips, JOIN.LEFT_OUTER, on=(tips.c.root_id == roots_cte.c.root_id))
        query = query.join(tip, JOIN.LEFT_OUTER, on=(tip.id == tips.c.tip_id))
        query = query.join(tip_first, JOIN.LEFT_OUTER, on=on_tip_first)
    if order_by_last_active or id_pattern is not None:
        chain = _chain(roots_cte)
        ctes.append(chain)
    if order_by_last_active:
        member = Session.alias("member")
        latest = Message.alias("member_latest")
        activity = recency(member, latest)
        effective = (
            chain.select_from(fn.MAX(activity))
            .join(member, on=(member.id == chain.c.id))
            .where(chain.c.root_id == roots_cte.c.root_id)
        )
        query = query.order_by(
            peewee.Desc(effective), roots_cte.c.root_started.desc(), roots_cte.c.root_id.desc()
        )
    else:
        query = query.order_by(roots_cte.c.root_started.desc(), roots_cte.c.root_id.desc())
    if id_pattern is not None:
        like = peewee.NodeList((fn.LOWER(chain.c.id), SQL("LIKE"), id_pattern, SQL("ESCAPE '\\'")))
        match = chain.select_from(SQL("1")).where(chain.c.root_id == roots_cte.c.root_id, like)
        query = query.where(fn.EXISTS(match))
    query = query.with_cte(*ctes)
    if order_by_last_active:
        query = query.limit(limit).offset(offset)
    return query


def _key_query(after: Any, *, projected: bool) -> Any:
    """The start time and id of the place of session ``after`` in a listing: its own,
    or (``projected``) those of the top of its compression chain, the surfaced row a
    tip stands for."""
    if not projected:
        return Session.select(Session.started_at, Session.id).where(Session.id == after)
    rising = walk_sessions(
        Session,
        Session.id == after,
        upward=True,
        leave=compression_expr,
        max_depth=None,
        name="rising",
    )
    top = rising.select_from(rising.c.id).order_by(rising.c.depth.desc()).limit(1)
    return Session.select(Session.started_at, Session.id).where(Session.id == top).with_cte(rising)


#: :func:`_key_query` rendered once, by whether tips are projected.
_PAGE_KEY = {
    projected: Prepared(
        lambda after, projected=projected: _key_query(after, projected=projected), "after"
    )
    for projected in (False, True)
}


def _page_key(after: str, *, projected: bool) -> tuple[Any, Any]:
    row = _PAGE_KEY[projected].first(current(), after=after)
    if row is None:
        raise ValueError(f"after: no session {after!r} (deleted since that page was read?)")
    return row[0], row[1]


def _tips(roots_cte: Any) -> tuple[Any, Any]:
    walk = walk_sessions(
        Session,
        roots_cte,
        start_where=roots_cte.c.root_end == "compression",
        latest=True,
        leave=ended_with_compression,
        max_depth=TIP_MAX_HOPS,
        name="walk",
    )
    # Each root's deepest row (one path per root: the walk follows the latest child).
    deepest = current().deepest_per_root(walk)
    return walk, deepest.cte("tips", columns=("root_id", "tip_id", "depth"))


def count_sessions(
    *,
    source: Any = None,
    exclude_sources: Any = None,
    include_children: bool = True,
    include_archived: bool = True,
    archived_only: bool = False,
    min_message_count: Any = 0,
) -> int:
    """How many sessions match :func:`session_filters` terms."""
    sources = check_sources(source, "source") or []
    excluded = check_sources(exclude_sources, "exclude_sources") or []
    flags = (
        check_flag(include_children, "include_children"),
        check_flag(include_archived, "include_archived"),
        check_flag(archived_only, "archived_only"),
        bool(min_message_count),
    )
    shape = (len(sources), len(excluded), *flags)

    def prepare() -> Prepared:
        names = [f"source{i}" for i in range(len(sources))]
        names += [f"exclude{i}" for i in range(len(excluded))]

        def build(**marks: Any) -> Any:
            terms = session_filters(
                Session,
                source=[marks[name] for name in names[: len(sources)]] or None,
                exclude_sources=[marks[name] for name in names[len(sources) :]] or None,
                include_children=flags[0],
                include_archived=flags[1],
                archived_only=flags[2],
                min_message_count=marks["min_count"] if flags[3] else 0,
            )
            return where_all(Session.select(fn.COUNT(SQL("*"))), terms)

        return Prepared(build, *names, *(["min_count"] if flags[3] else []))

    values: dict[str, Any] = {"min_count": min_message_count}
    values.update({f"source{i}": value for i, value in enumerate(sources)})
    values.update({f"exclude{i}": value for i, value in enumerate(excluded)})
    return int(cached(("count", shape), prepare).scalar(current(), **values))


def plain_listing(
    *,
    limit: int | None,
    offset: int,
    source: Any = None,
    include_archived: bool = False,
    order: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """Every session (children included), newest first."""
    limit, offset = check_page(limit, offset)
    terms = session_filters(Session, source=source, include_archived=include_archived)
    query = (
        where_all(Session.select(), terms)
        .order_by(*(order or (Session.started_at.desc(), Session.id.desc())))
        .limit(None if limit < 0 else limit)
        .offset(offset)
    )
    return fetch_dicts(query)


def ids_starting_with(prefix: str, limit: int | None = 10, *, any_case: bool = False) -> list[str]:
    """Session ids that start with ``prefix``, in id order (a walk along the primary key).

    ``any_case``: ASCII letters of either case match, as in
    :meth:`~hermes_models.SessionDB.resolve_session_id` (a scan of the ids)."""
    limit, _ = check_page(limit, 0)
    found: list[str] = []
    if limit == 0:
        return found
    if any_case:
        folded = (
            Session.select(Session.id)
            .where(starts_with_ascii_nocase(Session.id, prefix))
            .order_by(Session.id)
            .limit(limit)
        )
        return [str(row[0]) for row in folded.tuples()]
    query = Session.select(Session.id).where(Session.id >= prefix).order_by(Session.id)
    for (session_id,) in query.tuples().iterator():
        if not str(session_id).startswith(prefix) or len(found) == limit:
            break
        found.append(str(session_id))
    return found


def enriched_sessions(
    conditions: Any, *, order: Any, limit: int = -1, offset: int = 0
) -> list[dict[str, Any]]:
    """Sessions with ``preview`` and ``last_active`` (as listings show them, unprojected).

    ``conditions(row)`` gives the WHERE terms and ``order(row)`` the ORDER BY
    terms over the session alias ``row`` (the query also joins ``messages``,
    so bare column names like ``id`` would be ambiguous); ``order`` may name
    ``last_active`` with ``SQL('"last_active"')``.
    """
    row = Session.alias("row")
    columns, (first, on_first) = _enrichment(row, "")
    query = (
        row.select(row, *columns)
        .join(first, JOIN.LEFT_OUTER, on=on_first)
        .where(*conditions(row))
        .order_by(*order(row))
        .limit(None if limit < 0 else limit)
        .offset(offset)
    )
    out = []
    for found in fetch_dicts(query):
        found["preview"] = preview_of(found, "")
        out.append(found)
    return resolve_prompts_of(out)


def cron_job_runs(job_id: str, limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
    """The sessions one cron job ran (ids ``cron_<job_id>_<...>``), newest first.

    The ids are read as a range of the ``(source, id)`` index rather than a
    pattern, so the cost follows the page, not the whole cron history. Rows
    carry ``preview`` and ``last_active``, unprojected.
    """
    job = check_text(job_id, "job_id")
    limit, offset = check_page(limit, offset)
    prefix = f"cron_{job}_"
    above = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return enriched_sessions(
        lambda row: [row.source == "cron", row.id >= prefix, row.id < above],
        order=lambda row: (row.started_at.desc(), row.id.desc()),
        limit=limit,
        offset=offset,
    )


def sessions_by_id(
    query: Any, limit: int = 20, include_archived: bool = True
) -> list[dict[str, Any]]:
    """Listed sessions whose id, or an id of their compression chain, contains ``query``.

    Exact matches first, then prefixes, then the rest, each group by last
    activity; a compressed chain appears as its projected row.
    """
    needle = (check_text(query, "query", optional=True) or "").strip().lower()
    limit = check_int64(limit, "limit")
    if not needle or limit <= 0:
        return []
    candidates = rich_listing(
        limit=max(limit * 4, limit),
        include_archived=include_archived,
        order_by_last_active=True,
        id_query=needle,
    )

    def rank(row: dict[str, Any]) -> int:
        ids = [str(value).lower() for value in (row["id"], row.get("_lineage_root_id")) if value]
        if needle in ids:
            return 0
        return 1 if any(value.startswith(needle) for value in ids) else 2

    return sorted(candidates, key=rank)[:limit]


__all__ = [
    "INTERNAL_SOURCES",
    "PREVIEW_CHARS",
    "PREVIEW_SOURCE_CHARS",
    "TIP_COLUMNS",
    "check_page",
    "count_sessions",
    "cron_job_runs",
    "enriched_sessions",
    "ids_starting_with",
    "plain_listing",
    "preview_text",
    "recency",
    "rich_listing",
    "rich_listing_query",
    "session_filters",
    "sessions_by_id",
    "where_all",
]
