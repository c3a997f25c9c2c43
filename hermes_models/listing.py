"""Session listings as pickers show them.

A listing holds roots and branches (never subagent runs). A root whose
context was compressed stands for its whole chain: the row shown is the
chain's tip, marked with ``_lineage_root_id``, while the preview (the first
user message) and the position in the list come from the root. Pages count
roots. Everything is one SQL statement built from the lineage expressions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import peewee
from peewee import JOIN, Value, fn

from .checks import check_flag, check_int64
from .db import Prepared, current
from .lineage import TIP_MAX_HOPS, _extend, _latest_child, _not_visited, _path, listable_expr
from .models import Message, Session, decode_content

#: Characters of a preview before it is cut and ``...`` appended.
PREVIEW_CHARS = 60

_WHITESPACE = re.compile(r"\s+")


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    """``(limit, offset)`` checked: non-negative 64-bit ints (``limit=None`` means no limit)."""
    limit = -1 if limit is None else check_int64(limit, "limit", minimum=0)
    return limit, check_int64(offset, "offset", minimum=0)


def _sources(value: Any, argument: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{argument} must be a string or a list of strings")


def session_filters(
    s: Any,
    *,
    source: Any = None,
    exclude_sources: Any = None,
    include_children: bool = True,
    include_archived: bool = True,
    archived_only: bool = False,
) -> list[peewee.Node]:
    """WHERE terms shared by listings and counts."""
    terms: list[peewee.Node] = []
    include_children = check_flag(include_children, "include_children")
    include_archived = check_flag(include_archived, "include_archived")
    archived_only = check_flag(archived_only, "archived_only")
    if not include_children:
        terms.append(listable_expr(s))
    wanted = _sources(source, "source")
    if wanted:
        terms.append(s.source.in_(wanted))
    excluded = _sources(exclude_sources, "exclude_sources")
    if excluded:
        terms.append(s.source.not_in(excluded))
    if archived_only:
        terms.append(s.archived == 1)
    elif not include_archived:
        terms.append(s.archived == 0)
    return terms


def where_all(query: Any, terms: Sequence[peewee.Node]) -> Any:
    """``query`` filtered by every term (unchanged when there are none)."""
    return query.where(*terms) if terms else query


def preview_text(content: Any) -> str:
    """A one-line preview of message content: 60 characters, then ``...``."""
    value = decode_content(content) if isinstance(content, str) or content is None else content
    if isinstance(value, list):
        parts = [p.get("text", "") for p in value if isinstance(p, dict)]
        value = " ".join(p for p in parts if isinstance(p, str))
    elif not isinstance(value, str):
        value = "" if value is None else str(value)
    flat = _WHITESPACE.sub(" ", value).strip()
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + "..."


_LISTINGS: dict[tuple[Any, ...], Prepared] = {}


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
) -> list[dict[str, Any]]:
    """Session rows with ``preview`` and ``last_active`` (see the module docstring)."""
    limit, offset = check_page(limit, offset)
    min_message_count = check_int64(min_message_count, "min_message_count", minimum=0)
    sources = _sources(source, "source") or []
    excluded = _sources(exclude_sources, "exclude_sources") or []
    flags = (
        check_flag(include_children, "include_children"),
        check_flag(project_compression_tips, "project_compression_tips"),
        check_flag(order_by_last_active, "order_by_last_active"),
        check_flag(include_archived, "include_archived"),
        check_flag(archived_only, "archived_only"),
        min_message_count > 0,
    )
    shape = (len(sources), len(excluded), *flags)
    prepared = _LISTINGS.get(shape)
    if prepared is None:
        names = [f"source{i}" for i in range(len(sources))]
        names += [f"exclude{i}" for i in range(len(excluded))]

        def build(**marks: Any) -> Any:
            return rich_listing_query(
                source=[marks[f"source{i}"] for i in range(len(sources))] or None,
                exclude_sources=[marks[f"exclude{i}"] for i in range(len(excluded))] or None,
                limit=marks["limit"],
                offset=marks["offset"],
                include_children=flags[0],
                min_message_count=marks["min_count"] if flags[5] else 0,
                project_compression_tips=flags[1],
                order_by_last_active=flags[2],
                include_archived=flags[3],
                archived_only=flags[4],
            )

        prepared = Prepared(build, *names, "limit", "offset", *(["min_count"] if flags[5] else []))
        _LISTINGS[shape] = prepared
    values: dict[str, Any] = {"limit": limit, "offset": offset, "min_count": min_message_count}
    values.update({f"source{i}": value for i, value in enumerate(sources)})
    values.update({f"exclude{i}": value for i, value in enumerate(excluded)})
    cursor = prepared.execute(current(), **values)
    names = [column[0] for column in cursor.description]
    return [_finish(dict(zip(names, row))) for row in cursor.fetchall()]


def rich_listing_query(
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
) -> Any:
    """The one SELECT behind :func:`rich_listing` (values may be placeholders)."""
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
        ),
    )
    paged_early = not order_by_last_active and not min_message_count
    if paged_early:
        roots = roots.order_by(s.started_at.desc(), s.id.desc()).limit(limit).offset(offset)
    roots_cte = roots.cte("roots")

    shown = Session.alias("shown")
    first_user = Message.alias("first_user")
    preview = (
        first_user.select(first_user.content)
        .where(
            first_user.session == roots_cte.c.root_id,
            first_user.role == "user",
            first_user.active == 1,
        )
        .order_by(first_user.timestamp, first_user.id)
        .limit(1)
    )
    latest = Message.alias("latest_message")
    last_active = fn.COALESCE(
        latest.select(fn.MAX(latest.timestamp)).where(latest.session == shown.id),
        shown.started_at,
    )
    ctes: list[Any] = [roots_cte]
    if project:
        tips = _tips(roots_cte)
        ctes.extend(tips)
        tip_cte = tips[-1]
        shown_id = fn.COALESCE(tip_cte.c.tip_id, roots_cte.c.root_id)
    else:
        shown_id = roots_cte.c.root_id
    query = shown.select(
        shown,
        roots_cte.c.root_id.alias("_root_id"),
        preview.alias("preview"),
        last_active.alias("last_active"),
    ).from_(roots_cte)
    if project:
        query = query.join(tip_cte, JOIN.LEFT_OUTER, on=(tip_cte.c.root_id == roots_cte.c.root_id))
    query = query.join(shown, on=(shown.id == shown_id)).with_cte(*ctes)
    if min_message_count:
        query = query.where(fn.COALESCE(shown.message_count, 0) >= min_message_count)
    if order_by_last_active:
        query = query.order_by(
            peewee.SQL('"last_active"').desc(), roots_cte.c.root_started.desc(), shown.id.desc()
        )
    else:
        query = query.order_by(roots_cte.c.root_started.desc(), roots_cte.c.root_id.desc())
    if not paged_early:
        query = query.limit(limit).offset(offset)
    return query


def _tips(roots_cte: Any) -> list[Any]:
    here = Session.alias("here")
    nxt = Session.alias("nxt")
    base = roots_cte.select_from(
        roots_cte.c.root_id, roots_cte.c.root_id, Value(0), _path(roots_cte.c.root_id)
    ).where(roots_cte.c.root_end == "compression")
    walk = base.cte("walk", recursive=True, columns=("root_id", "id", "depth", "path"))
    step = (
        nxt.select(walk.c.root_id, nxt.id, walk.c.depth + 1, _extend(walk.c.path, nxt.id))
        .from_(walk)
        .join(here, on=(here.id == walk.c.id))
        .join(nxt, on=(nxt.id == _latest_child(here, after_end=True)))
        .where(
            here.end_reason == "compression",
            walk.c.depth < TIP_MAX_HOPS,
            _not_visited(walk.c.path, nxt.id),
        )
    )
    walk = walk.union_all(step)
    # SQLite returns the bare column "id" from the row holding MAX(depth).
    tips = (
        walk.select_from(walk.c.root_id, walk.c.id, fn.MAX(walk.c.depth))
        .group_by(walk.c.root_id)
        .cte("tips", columns=("root_id", "tip_id", "depth"))
    )
    return [walk, tips]


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    root_id = row.pop("_root_id")
    row["preview"] = preview_text(row.get("preview"))
    if root_id != row["id"]:
        row["_lineage_root_id"] = root_id
    return row


def fetch_dicts(query: Any) -> list[dict[str, Any]]:
    """Rows of ``query`` as dicts keyed by column name."""
    cursor = current().execute(query)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def count_sessions(**filters: Any) -> int:
    """How many sessions match :func:`session_filters` terms."""
    return int(where_all(Session.select(), session_filters(Session, **filters)).count())


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
        .limit(limit)
        .offset(offset)
    )
    return fetch_dicts(query)


def ids_starting_with(prefix: str, limit: int | None = 10) -> list[str]:
    """Session ids that start with ``prefix``, in id order (a walk along the primary key)."""
    limit, _ = check_page(limit, 0)
    found: list[str] = []
    if limit == 0:
        return found
    query = Session.select(Session.id).where(Session.id >= prefix).order_by(Session.id)
    for (session_id,) in query.tuples().iterator():
        if not str(session_id).startswith(prefix) or len(found) == limit:
            break
        found.append(str(session_id))
    return found
