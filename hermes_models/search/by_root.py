"""A search by session, after the hits: each session's hits counted for the lineage root
they belong to, roots ordered and paged, the page's session rows read.

Both backends find, in one statement, one row per session with hits (its best hit,
its number of hits, its latest hit); this module does the rest the same way for
both. The walk up to the roots is :func:`hermes_models.models.lineage.counted_for`,
in time linear in the chains however long they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import Session, counted_for, resolve_prompts_of
from ..store import among, fetch_dicts


def page_of_roots(
    found: Sequence[Sequence[Any]],
    sources: tuple[str, ...] | None,
    rank_mode: str | None,
    limit: int | None,
    offset: int,
    started: tuple[float | None, float | None] = (None, None),
) -> list[dict[str, Any]]:
    """The page of lineage roots the sessions of ``found`` count for, best first.

    ``found`` holds, per session with hits: ``(session_id, best hit id, its
    timestamp, its rank, hits, latest hit's timestamp)``; a lower rank is better.
    A root's best hit is its sessions' best (rank, then newest, then highest id);
    roots are ordered by it, then by their latest hit (``rank_mode='recent'``: the
    latest hit first), then by id. ``sources``: only roots of these sources;
    ``started``: only roots started at or after its first bound and before its second
    (None: open). Each
    row is the root's columns (a system prompt stored by hash read as its text) plus
    ``_best_id``, ``_matched`` (the session of the
    best hit), ``_rank`` and ``_hits``.
    """
    root_of = counted_for(Session, [row[0] for row in found])
    best: dict[str, tuple[Any, ...]] = {}
    hits: dict[str, int] = {}
    latest: dict[str, float] = {}
    for session_id, best_id, timestamp, rank, count, last in found:
        root = root_of[session_id]
        hits[root] = hits.get(root, 0) + count
        latest[root] = max(latest.get(root, last), last)
        mine = (rank, -timestamp, -best_id, best_id, session_id)
        if root not in best or mine < best[root]:
            best[root] = mine
    # The order needs no session row: only the page's rows are read (and, with a
    # source filter, each root's source).
    if rank_mode == "recent":
        ordered = sorted(best, key=lambda root: (-latest[root], best[root][0], root))
    else:
        ordered = sorted(best, key=lambda root: (best[root][0], -latest[root], root))
    model = Session
    terms = [] if sources is None else [model.source.in_(sources)]
    if started[0] is not None:
        terms.append(model.started_at >= started[0])
    if started[1] is not None:
        terms.append(model.started_at < started[1])
    if terms:
        query = model.select(model.id).where(among(model.id, ordered), *terms)
        kept = {row[0] for row in query.tuples()}
        ordered = [root for root in ordered if root in kept]
    page = ordered[offset:] if limit is None or limit < 0 else ordered[offset : offset + limit]
    if not page:
        return []
    position = {root: n for n, root in enumerate(page)}
    rows = fetch_dicts(model.select().where(among(model.id, page)))
    rows.sort(key=lambda row: position[row["id"]])
    for row in rows:
        rank, _, _, best_id, matched = best[row["id"]]
        row.update(_best_id=best_id, _matched=matched, _rank=rank, _hits=hits[row["id"]])
    return resolve_prompts_of(rows)
