"""Session lineage: how a session's parent link is read (creating children and
following them to the session to open is :mod:`hermes_models.conversations.children`).

A child session is one of three kinds:

* **branch** - a /branch fork. ``model_config`` carries ``_branched_from``,
  or the parent ended with ``end_reason='branched'`` and the child started
  at or after that end. Listed; survives deletion of its parent.
* **compression** - the continuation written when the context of the parent
  was compressed: the parent ended with ``'compression'``, whenever the child
  started (Hermes v17 on: a continuation may be written before its parent's
  end is, and a clock may step back). Hidden in listings, where its root
  stands for the whole chain; survives deletion of its parent.
* **ephemeral** - a delegated subagent run: any other child, and any session
  whose ``model_config`` carries ``_delegate_from``. Never listed; deleted
  with its parent.

The rules exist twice, as SQL expressions (so listings filter in the
database) and as :func:`kind_of` for one loaded row; the tests hold the two
to the same answers. Every walk over parent links - ancestors, descendants,
the compression tip and the resume target, a chain's members in listings,
archiving a chain - is :func:`walk_sessions`: a recursive CTE without a depth
bound (the compression tip and the resume target keep Hermes' own: 100 hops, 32
levels), in constant work per step, which a cycle in parent links ends instead
of looping.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

import peewee
from peewee import SQL, Case, Value, fn

from ..store import among, current, json_text

if TYPE_CHECKING:
    from typing import Any

    #: The session model (``models.tables.Session``, whose methods call this module):
    #: not imported, so that no import closes a cycle; the models' own methods carry
    #: its type to their callers.
    Session = Any
    Source = Any  # a Session model class or an alias of it
    #: A peewee expression node (peewee's stubs do not type its operators).
    Expr = Any

#: Hops a compression-tip walk takes at most.
TIP_MAX_HOPS = 100
#: Levels a resume walk descends below the tip at most.
RESUME_MAX_DEPTH = 32


def _base(source: Source) -> type[Session]:
    return cast("type[Session]", source.model if isinstance(source, peewee.ModelAlias) else source)


def marker(field: Any, key: str) -> Expr:
    """``model_config[key]`` in SQL; NULL when absent or the text is not JSON."""
    return json_text(field, key)


def delegate_marked(s: Source) -> Expr:
    """True when ``model_config`` carries ``_delegate_from``."""
    return marker(s.model_config, "_delegate_from").is_null(False)


def branch_marked(s: Source) -> Expr:
    """True when ``model_config`` carries ``_branched_from``."""
    return marker(s.model_config, "_branched_from").is_null(False)


def parent_ended(s: Source, reason: str) -> Expr:
    """True when the parent ended with ``reason`` no later than ``s`` started."""
    parent = _base(s).alias()
    return fn.EXISTS(
        parent.select(SQL("1")).where(
            parent.id == s.parent,
            parent.end_reason == reason,
            s.started_at >= parent.ended_at,
        )
    )


# -- the rules of Hermes v30, for files newer than v16 ------------------------------------
#
# Compression continuations inherit their parent's model_config verbatim, so an
# inherited marker says nothing about the child: a marker counts only when it
# names the parent's own id. A continuation is any child of a parent that ended
# with 'compression' (no time clause), unless such a marker or source 'tool'
# says otherwise. Reset children (``_reset_from``, or the legacy same
# ``session_key`` after a reset end) are separate, listed conversations.

#: End reasons after which a child with the same ``session_key`` is a new conversation.
RESET_REASONS = (
    "session_reset",
    "session_switch",
    "idle",
    "daily",
    "suspended",
    "resume_pending_expired",
)
#: Markers that, naming the parent's id, make a child of a compressed session no continuation.
_OWN_MARKERS = ("_branched_from", "_delegate_from", "_reset_from")


def newer_rules() -> bool:
    """True when the open file is newer than v16, so lineage follows Hermes v30's rules."""
    shape = getattr(current(), "shape", None)
    return bool(shape is not None and shape.newer)


def _names_parent(s: Source) -> Expr:
    """A marker of ``s`` names its parent's id (never NULL)."""
    named = [marker(s.model_config, key) == s.parent for key in _OWN_MARKERS]
    any_named = named[0] | named[1] | named[2]
    return fn.COALESCE(any_named, 0) == 1


def _parent_ended_any_time(s: Source, reasons: tuple[str, ...]) -> Expr:
    parent = _base(s).alias()
    return fn.EXISTS(
        parent.select(SQL("1")).where(parent.id == s.parent, parent.end_reason.in_(reasons))
    )


def continuation_v30(s: Source) -> Expr:
    """``s`` continues its parent after a compression, by Hermes v30's rule."""
    return (
        s.parent.is_null(False)
        & _parent_ended_any_time(s, ("compression",))
        & ~_names_parent(s)
        & (s.source != "tool")
    )


def reset_child(s: Source) -> Expr:
    """``s`` is a new conversation started by a reset of its parent (Hermes v30)."""
    found = marker(s.model_config, "_reset_from").is_null(False)
    shape = current().shape
    if shape is not None and shape.has("sessions", "session_key"):
        parent = _base(s).alias()
        same_key = fn.EXISTS(
            parent.select(SQL("1")).where(
                parent.id == s.parent,
                parent.end_reason.in_(RESET_REASONS),
                fn.COALESCE(s.session_key, "") != "",
                parent.session_key == s.session_key,
            )
        )
        found = found | same_key
    return s.parent.is_null(False) & found


def _listed_child_v30(s: Source) -> Expr:
    return branch_marked(s) | parent_ended(s, "branched") | reset_child(s)


# -- the rules by kind ---------------------------------------------------------------------


def branch_expr(s: Source) -> Expr:
    """``s`` is a /branch child (on newer files: or a reset child)."""
    if newer_rules():
        return (
            s.parent.is_null(False)
            & ~continuation_v30(s)
            & ~delegate_marked(s)
            & _listed_child_v30(s)
        )
    return (
        s.parent.is_null(False)
        & ~delegate_marked(s)
        & (branch_marked(s) | parent_ended(s, "branched"))
    )


def compression_expr(s: Source) -> Expr:
    """``s`` continues its parent after a compression."""
    if newer_rules():
        return continuation_v30(s)
    return (
        s.parent.is_null(False)
        & ~delegate_marked(s)
        & ~branch_marked(s)
        & ~parent_ended(s, "branched")
        & _parent_ended_any_time(s, ("compression",))
    )


def ephemeral_expr(s: Source) -> Expr:
    """``s`` is a subagent run (or carries the delegate marker)."""
    if newer_rules():
        return ~continuation_v30(s) & (
            delegate_marked(s) | (s.parent.is_null(False) & ~_listed_child_v30(s))
        )
    return delegate_marked(s) | (
        s.parent.is_null(False)
        & ~branch_marked(s)
        & ~parent_ended(s, "branched")
        & ~_parent_ended_any_time(s, ("compression",))
    )


def listable_expr(s: Source) -> Expr:
    """``s`` is shown in listings: a root or a branch, never ephemeral."""
    if newer_rules():
        return ~delegate_marked(s) & (
            s.parent.is_null(True) | (~continuation_v30(s) & _listed_child_v30(s))
        )
    return ~delegate_marked(s) & (
        s.parent.is_null(True) | branch_marked(s) | parent_ended(s, "branched")
    )


def kind_expr(s: Source) -> Expr:
    """The kind of ``s`` as a SQL ``CASE`` expression."""
    if newer_rules():
        return Case(
            None,
            [
                (s.parent.is_null(True) & delegate_marked(s), "ephemeral"),
                (s.parent.is_null(True), "root"),
                (continuation_v30(s), "compression"),
                (delegate_marked(s), "ephemeral"),
                (_listed_child_v30(s), "branch"),
            ],
            "ephemeral",
        )
    return Case(
        None,
        [
            (delegate_marked(s), "ephemeral"),
            (s.parent.is_null(True), "root"),
            (branch_marked(s) | parent_ended(s, "branched"), "branch"),
            (_parent_ended_any_time(s, ("compression",)), "compression"),
        ],
        "ephemeral",
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(reversed(pairs))


def markers_of(model_config: Any) -> dict[str, Any]:
    """``model_config`` read as the SQL rules read it
    (:func:`~hermes_models.store.dialect.json_text`),
    so that :func:`kind_of` answers as :func:`kind_expr` does: ``{}`` for text that is
    not a JSON object by the database's rules (``NaN``, ``Infinity``: SQLite's
    ``json_valid`` and PostgreSQL's ``jsonb`` refuse them, Python's ``json`` does not),
    and of a key given twice the first value on SQLite, the last on PostgreSQL."""
    if not isinstance(model_config, str):
        return {}
    hook = _first_wins if current().json_duplicate_key == "first" else None
    try:
        value = json.loads(model_config, parse_constant=_no_constant, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def kind_of(session: Session) -> str:
    """The kind of one loaded session (same rules as :func:`kind_expr`)."""
    if newer_rules():
        return _kind_of_v30(session)
    config = markers_of(session.model_config)
    if config.get("_delegate_from") is not None:
        return "ephemeral"
    if session.parent_session_id is None:
        return "root"
    if config.get("_branched_from") is not None:
        return "branch"
    model = type(session)
    parent = (
        model.select(model.ended_at, model.end_reason)
        .where(model.id == session.parent_session_id)
        .first()
    )
    if parent is None:
        return "ephemeral"
    if parent.end_reason == "compression":
        return "compression"
    if (
        parent.end_reason == "branched"
        and parent.ended_at is not None
        and session.started_at >= parent.ended_at
    ):
        return "branch"
    return "ephemeral"


def _kind_of_v30(session: Session) -> str:
    config = markers_of(session.model_config)
    delegated = config.get("_delegate_from") is not None
    parent_id = session.parent_session_id
    if parent_id is None:
        return "ephemeral" if delegated else "root"
    model = type(session)
    parent = model.get_or_none(model.id == parent_id)
    names_parent = any(config.get(key) == parent_id for key in _OWN_MARKERS)
    if (
        parent is not None
        and parent.end_reason == "compression"
        and not names_parent
        and session.source != "tool"
    ):
        return "compression"
    if delegated:
        return "ephemeral"
    if config.get("_branched_from") is not None or config.get("_reset_from") is not None:
        return "branch"
    if parent is not None and parent.end_reason == "branched" and parent.ended_at is not None:
        if session.started_at >= parent.ended_at:
            return "branch"
    if (
        parent is not None
        and parent.end_reason in RESET_REASONS
        and session.session_key
        and session.session_key == parent.session_key
    ):
        return "branch"
    return "ephemeral"


def _power_of_two(depth: Any) -> Expr:
    """True when ``depth`` (a positive integer) is a power of two."""
    return depth.bin_and(depth - 1) == 0


def walk_sessions(
    model: type[Session],
    start: Any,
    *,
    upward: bool = False,
    latest: bool = False,
    follow: Callable[[Any], Expr] | None = None,
    leave: Callable[[Any], Expr] | None = None,
    start_where: Expr | None = None,
    max_depth: int | None = None,
    name: str = "walk",
) -> Any:
    """The one walk over parent links, a recursive CTE ``(root_id, id, parent_id,
    depth)``: every walk of the package goes through it.

    It starts from the sessions ``start`` names - an id, an expression over
    ``model``, or a CTE whose ``root_id`` column holds ids (then filtered by
    ``start_where``) - each its own ``root_id`` at depth 0. ``parent_id`` is
    carried by upward walks only (NULL otherwise). Each step goes up to the parent
    (``upward``), down to every child, or (``latest``) down to the latest child
    that may continue the session (:func:`latest_child`). ``follow`` restricts
    the sessions stepped to, ``leave`` the sessions stepped from; ``max_depth``
    (None: no bound) ends a walk after so many steps.

    A cycle in parent links ends the walk, in constant work per step (no list of
    the sessions walked, which made a walk quadratic in its length):

    * a walk down reaches a session in a cycle only if its start is in that cycle
      (every session has one parent), so a step back to the start ends it;
    * a walk up follows one parent per session and may enter a cycle its start is
      not in: it keeps a mark, moved to the session reached at every depth that
      is a power of two, and a step onto the mark ends it (Brent's method: within
      twice the length of tail and cycle). The sessions of the cycle may then come
      more than once; :func:`first_visits` keeps each at its first depth, and
      every upward walk is returned so.
    """
    from_roots = isinstance(start, peewee.CTE)
    if from_roots:
        root = start.c.root_id
        base = start.select_from(root, root, SQL("NULL"), Value(0), root)
        if start_where is not None:
            base = base.where(start_where)
    else:
        where = (model.id == start) if isinstance(start, str) else start
        base = model.select(model.id, model.id, model.parent, Value(0), model.id)
        base = base.where(where)
    steps = name + "_steps" if upward else name
    cte = base.cte(steps, recursive=True, columns=("root_id", "id", "parent_id", "depth", "mark"))
    step = model.alias("step")
    here = model.alias("here")
    # Only an upward walk reads parent_id; a walk down leaves it NULL, so that the
    # step's row is found by its id alone (the id index covers it).
    parent_id = step.parent if upward else SQL("NULL")
    depth = cte.c.depth + 1
    mark = Case(None, [(_power_of_two(depth), step.id)], cte.c.mark) if upward else cte.c.mark
    query = step.select(cte.c.root_id, step.id, parent_id, depth, mark).from_(cte)
    if latest:
        query = query.join(here, on=(here.id == cte.c.id))
        query = query.join(step, on=(step.id == latest_child(here)))
    elif upward and (from_roots or leave is not None):
        # The session stepped from is read anyway: its parent link is its own.
        query = query.join(here, on=(here.id == cte.c.id))
        query = query.join(step, on=(step.id == here.parent))
    else:
        link = (step.id == cte.c.parent_id) if upward else (step.parent == cte.c.id)
        query = query.join(step, on=link)
        if leave is not None:
            query = query.join(here, on=(here.id == cte.c.id))
    conditions = [step.id != cte.c.root_id]
    if upward:
        conditions.append(step.id != cte.c.mark)
    if max_depth is not None:
        conditions.insert(0, cte.c.depth < max_depth)
    if follow is not None:
        conditions.append(follow(step))
    if leave is not None:
        conditions.append(leave(here))
    walked = cte.union_all(query.where(*conditions))
    return first_visits(walked, name) if upward else walked


def first_visits(walk: Any, name: str) -> Any:
    """``walk``'s rows with each session once per start, at the depth it was first
    reached: a CTE ``(root_id, id, parent_id, depth)`` holding ``walk`` in its own
    ``WITH``."""
    first = (
        walk.select_from(walk.c.root_id, walk.c.id, fn.MIN(walk.c.parent_id), fn.MIN(walk.c.depth))
        .group_by(walk.c.root_id, walk.c.id)
        .with_cte(walk)
    )
    # A subquery keeps its own WITH when rendered; a CTE's query would lose it.
    query = peewee.Select(from_list=[first.alias(name + "_first")], columns=[SQL("*")])
    return query.cte(name, columns=("root_id", "id", "parent_id", "depth"))


def _relatives(
    model: type[Session], session_id: str, *, upward: bool
) -> peewee.ModelSelect[Session]:
    """The sessions :func:`walk_sessions` reaches from ``session_id`` (itself left out),
    nearest first, then (downward, where a level has several) by start time."""
    cte = walk_sessions(model, session_id, upward=upward)
    order = (cte.c.depth,) if upward else (cte.c.depth, model.started_at, model.id)
    query = (
        model.select()
        .join(cte, on=(model.id == cte.c.id))
        .where(cte.c.depth > 0)
        .order_by(*order)
        .with_cte(cte)
    )
    return cast("peewee.ModelSelect[Session]", query)


def ancestors(model: type[Session], session_id: str) -> peewee.ModelSelect[Session]:
    """The parent chain of ``session_id``, nearest first."""
    return _relatives(model, session_id, upward=True)


def descendants(model: type[Session], session_id: str) -> peewee.ModelSelect[Session]:
    """Every session below ``session_id``, nearest first, then by start time."""
    return _relatives(model, session_id, upward=False)


def root_of(session: Session) -> Session:
    """The furthest ancestor of ``session``, or ``session`` itself."""
    cte = walk_sessions(type(session), session.id, upward=True)
    model = type(session)
    found = (
        model.select()
        .join(cte, on=(model.id == cte.c.id))
        .order_by(cte.c.depth.desc())
        .with_cte(cte)
        .first()
    )
    return found or session


def children_of_kind(
    model: type[Session], session_id: str, kind: str
) -> peewee.ModelSelect[Session]:
    """Direct children of ``session_id`` of one kind, oldest first."""
    predicates = {
        "branch": branch_expr,
        "compression": compression_expr,
        "ephemeral": ephemeral_expr,
    }
    if kind not in predicates:
        raise ValueError(f"kind must be one of {sorted(predicates)}, not {kind!r}")
    query = (
        model.select()
        .where(model.parent == session_id, predicates[kind](model))
        .order_by(model.started_at, model.id)
    )
    return cast("peewee.ModelSelect[Session]", query)


def latest_child(parent: Source) -> peewee.ModelSelect[Session]:
    """The id of the most recently started child of ``parent`` that may continue it
    (not a branch or subagent run), whenever it started."""
    child = _base(parent).alias("latest")
    if newer_rules():
        # Hermes v30: inherited markers do not count, and no time clause.
        query = child.select(child.id).where(
            child.parent == parent.id, ~_names_parent(child), child.source != "tool"
        )
        return cast(
            "peewee.ModelSelect[Session]",
            query.order_by(child.started_at.desc(), child.id.desc()).limit(1),
        )
    query = child.select(child.id).where(
        child.parent == parent.id, ~branch_marked(child), ~delegate_marked(child)
    )
    return cast(
        "peewee.ModelSelect[Session]",
        query.order_by(child.started_at.desc(), child.id.desc()).limit(1),
    )


def ended_with_compression(s: Source) -> Expr:
    """``s`` ended with ``'compression'`` (a compression chain goes on below it)."""
    return s.end_reason == "compression"


def descend(model: type[Session], session_id: Any, *, compression_only: bool, hops: int) -> Any:
    """:func:`walk_sessions` from ``session_id`` down through the latest continuing
    child, at most ``hops`` steps; ``compression_only``: only while the session
    stepped from ended with ``'compression'``."""
    return walk_sessions(
        model,
        session_id,
        latest=True,
        leave=ended_with_compression if compression_only else None,
        max_depth=hops,
        name="chain",
    )


def counted_for(model: type[Session], session_ids: Iterable[str]) -> dict[str, str]:
    """The session each of ``session_ids`` counts for in a search by session: up
    through compression continuations and subagent runs, stopping at a branch (its
    own conversation), at a session without a parent or whose parent does not exist.
    A session in a cycle of parent links counts for the last one its walk up reaches
    before coming back (the one whose parent it is); one below a cycle, for what the
    cycle's first session it reaches counts for. An id that is no session counts for
    itself.

    Time linear in the sessions walked, however long the chains: one recursive CTE
    reads every session on the way up once (``UNION``: a session reached twice is
    read once, which also ends cycles), and each session's answer is worked out once.
    Each step is two lookups by primary key made for one row of the walk
    (correlated subqueries), never a join: a join leaves the order to the planner,
    and PostgreSQL, with statistics that count a filled table as empty (an
    ``ANALYZE`` during the transaction that filled it), read the whole walk again
    for each of its rows.
    """
    starts = list(dict.fromkeys(session_ids))
    if not starts:
        return {}
    here = model.alias("here")

    def up(s: Any) -> Any:  # the parent a session counts for, NULL at a branch
        return Case(None, [(branch_expr(s), None)], s.parent)

    climbed = model.select(model.id, up(model)).where(among(model.id, starts))
    cte = climbed.cte("climbed", recursive=True, columns=("id", "up"))
    step = peewee.Select(
        from_list=[cte],
        columns=[cte.c.up, here.select(up(here)).where(here.id == cte.c.up)],
    ).where(
        cte.c.up.is_null(False),
        fn.EXISTS(here.select(SQL("1")).where(here.id == cte.c.up)),
    )
    cte = cte.union(step)
    query = peewee.Select(from_list=[cte], columns=[cte.c.id, cte.c.up]).with_cte(cte)
    rows = current().execute(query).fetchall()  # plain rows: no model work for each
    # Each session reached, once, with the session it counts through (None: itself).
    parent_of: dict[str, str | None] = dict(rows)
    owner: dict[str, str] = {}
    for start in starts:
        path: list[str] = []
        on_path: dict[str, int] = {}
        node = start
        while node not in owner:
            if node in on_path:  # a cycle: each of its sessions counts for the one below it
                cycle = path[on_path[node] :]
                for i, member in enumerate(cycle):
                    owner[member] = cycle[i - 1]
                del path[on_path[node] :]
                break
            parent = parent_of.get(node)
            if parent is None or parent not in parent_of:
                owner[node] = node
                break
            on_path[node] = len(path)
            path.append(node)
            node = parent
        for below in path:
            owner[below] = owner[node]
    return {start: owner[start] for start in starts}


def compression_chain_ids(model: type[Session], session_id: str) -> list[str]:
    """Ids linked to ``session_id`` by compression edges, up and down, however long
    the chain: the sessions it continues, and everything that continues them.

    Two walks without a depth bound (the walked path ends a cycle): up while
    the session is a continuation, then down through continuations from the
    highest session reached, which leads back through every one of them.
    """
    rising = walk_sessions(
        model, session_id, upward=True, leave=compression_expr, max_depth=None, name="rising"
    )
    top = rising.select_from(rising.c.id).order_by(rising.c.depth.desc()).limit(1)
    chain = walk_sessions(
        model, model.id == top, follow=compression_expr, max_depth=None, name="chain"
    )
    query = peewee.Select(from_list=[chain], columns=[chain.c.id]).with_cte(rising, chain)
    return sorted({str(row[0]) for row in current().execute(query).fetchall()})


def order_sessions(parents: dict[str, str | None]) -> tuple[list[str], list[str], set[str]]:
    """Session ids with every parent before its children.

    Returns ``(ordered, looped, cut)``: ``ordered`` are the sessions whose
    chain of parents ends (at no parent, or a parent not in ``parents``);
    ``looped`` the rest - sessions in a loop of parent links and those below
    one - in an order where only the sessions of ``cut`` (one per loop) come
    before their parent. Ties go by id, so the order is the same every run.
    """
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for session_id, parent in parents.items():
        if parent is None or parent not in parents:
            roots.append(session_id)
        else:
            children.setdefault(parent, []).append(session_id)
    for kids in children.values():
        kids.sort()
    seen: set[str] = set()

    def walk(start: str, out: list[str]) -> None:
        todo = [start]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            out.append(node)
            todo.extend(reversed(children.get(node, ())))

    ordered: list[str] = []
    for root in sorted(roots):
        walk(root, ordered)
    looped: list[str] = []
    cut: set[str] = set()
    for session_id in sorted(parents):
        if session_id in seen:
            continue
        # Climb to the loop above this session, and start the loop at its smallest id.
        path: dict[str, None] = {}
        node: str | None = session_id
        while node is not None and node not in path and node not in seen:
            path[node] = None
            node = parents.get(node)
        loop = list(path)[list(path).index(node) :] if node in path else [session_id]
        start = min(loop)
        cut.add(start)
        walk(start, looped)
    return ordered, looped, cut
