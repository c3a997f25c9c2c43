"""Session lineage: how a session's parent link is read (creating children and
following them to the session to open is :mod:`hermes_models.children`).

A child session is one of three kinds:

* **branch** - a /branch fork. ``model_config`` carries ``_branched_from``,
  or the parent ended with ``end_reason='branched'`` and the child started
  at or after that end. Listed; survives deletion of its parent.
* **compression** - the continuation written when the context of the parent
  was compressed: the parent ended with ``'compression'`` and the child
  started at or after that end. Hidden in listings, where its root stands
  for the whole chain; survives deletion of its parent.
* **ephemeral** - a delegated subagent run: any other child, and any session
  whose ``model_config`` carries ``_delegate_from``. Never listed; deleted
  with its parent.

The rules exist twice, as SQL expressions (so listings filter in the
database) and as :func:`kind_of` for one loaded row; the tests hold the two
to the same answers. Chains are walked with recursive CTEs that carry the
path walked so far, so a cycle in parent links ends the walk instead of
looping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import peewee
from peewee import SQL, Case, Value, fn

from .binding import current

if TYPE_CHECKING:
    from .models import Session

#: Separator of session ids in the walked path of a recursive CTE.
SEP = "\x1f"
#: Escape character of session ids in a walked path.
ESC = "\x1e"
#: Depth bound of ancestor and descendant walks.
MAX_DEPTH = 1000
#: Hops a compression-tip walk takes at most.
TIP_MAX_HOPS = 100
#: Levels a resume walk descends below the tip at most.
RESUME_MAX_DEPTH = 32

Source = Any  # a Session model class or an alias of it
#: A peewee expression node (peewee's stubs do not type its operators).
Expr = Any


def _base(source: Source) -> type[Session]:
    return cast("type[Session]", source.model if isinstance(source, peewee.ModelAlias) else source)


def marker(field: Any, key: str) -> Expr:
    """``model_config[key]`` in SQL; NULL when absent or the text is not JSON."""
    return fn.json_extract(Case(None, [(fn.json_valid(field), field)], None), f"$.{key}")


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
        & parent_ended(s, "compression")
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
        & ~parent_ended(s, "compression")
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
            (parent_ended(s, "compression"), "compression"),
        ],
        "ephemeral",
    )


def kind_of(session: Session) -> str:
    """The kind of one loaded session (same rules as :func:`kind_expr`)."""
    if newer_rules():
        return _kind_of_v30(session)
    config = session.config
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
    if parent is not None and parent.ended_at is not None and session.started_at >= parent.ended_at:
        if parent.end_reason == "branched":
            return "branch"
        if parent.end_reason == "compression":
            return "compression"
    return "ephemeral"


def _kind_of_v30(session: Session) -> str:
    config = session.config
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


def _token(session_id: Any) -> Any:
    """``session_id`` as written into a walked path: :data:`ESC` and :data:`SEP` escaped,
    so that no id, whatever characters it holds, can look like a list of ids."""
    return fn.replace(fn.replace(session_id, ESC, ESC + "0"), SEP, ESC + "1")


def path_of(*parts: Any) -> Expr:
    """A walked path holding ``parts`` (session ids or expressions), in order."""
    node: Any = Value(SEP)
    for part in parts:
        node = extend_path(node, part)
    return node


def extend_path(path: Any, session_id: Any) -> Any:
    """``path`` with ``session_id`` appended."""
    return path.concat(_token(session_id)).concat(SEP)


def not_visited(path: Any, session_id: Any) -> Expr:
    """True when ``session_id`` is not in the walked ``path`` yet."""
    return fn.instr(path, path_of(session_id)) == 0


def walk_sessions(
    model: type[Session],
    start: Any,
    *,
    upward: bool,
    follow: Callable[[Any], Expr] | None = None,
) -> Any:
    """A recursive CTE ``(id, parent_id, depth, path)`` from the sessions ``start``
    selects (an id, or an expression over ``model``), up through parents or down
    through children; ``follow`` restricts the sessions stepped to."""
    where = (model.id == start) if isinstance(start, str) else start
    step = model.alias("step")
    base = model.select(model.id, model.parent, Value(0), path_of(model.id)).where(where)
    cte = base.cte("walk", recursive=True, columns=("id", "parent_id", "depth", "path"))
    link = (step.id == cte.c.parent_id) if upward else (step.parent == cte.c.id)
    conditions = [cte.c.depth < MAX_DEPTH, not_visited(cte.c.path, step.id)]
    if follow is not None:
        conditions.append(follow(step))
    recursive = (
        step.select(step.id, step.parent, cte.c.depth + 1, extend_path(cte.c.path, step.id))
        .from_(cte)
        .join(step, on=link)
        .where(*conditions)
    )
    return cte.union_all(recursive)


def ancestors(model: type[Session], session_id: str) -> peewee.ModelSelect[Session]:
    """The parent chain of ``session_id``, nearest first."""
    cte = walk_sessions(model, session_id, upward=True)
    return (
        model.select()
        .join(cte, on=(model.id == cte.c.id))
        .where(cte.c.depth > 0)
        .order_by(cte.c.depth)
        .with_cte(cte)
    )


def descendants(model: type[Session], session_id: str) -> peewee.ModelSelect[Session]:
    """Every session below ``session_id``, nearest first, then by start time."""
    cte = walk_sessions(model, session_id, upward=False)
    return (
        model.select()
        .join(cte, on=(model.id == cte.c.id))
        .where(cte.c.depth > 0)
        .order_by(cte.c.depth, model.started_at, model.id)
        .with_cte(cte)
    )


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
    return (
        model.select()
        .where(model.parent == session_id, predicates[kind](model))
        .order_by(model.started_at, model.id)
    )


def latest_child(parent: Source, *, after_end: bool) -> peewee.ModelSelect[Session]:
    """The id of the most recently started child of ``parent`` that may continue it
    (not a branch or subagent run); ``after_end``: started at or after its end."""
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
    if after_end:
        query = query.where(child.started_at >= parent.ended_at)
    return cast(
        "peewee.ModelSelect[Session]",
        query.order_by(child.started_at.desc(), child.id.desc()).limit(1),
    )


def descend(model: type[Session], session_id: Any, *, compression_only: bool, hops: int) -> Any:
    """A recursive CTE ``(id, depth, path)`` from ``session_id`` down through the
    latest continuing child, at most ``hops`` steps; ``compression_only``: only
    while the session stepped from ended with ``'compression'``."""
    here = model.alias("here")
    nxt = model.alias("nxt")
    base = model.select(model.id, Value(0), path_of(model.id)).where(model.id == session_id)
    cte = base.cte("chain", recursive=True, columns=("id", "depth", "path"))
    step = (
        nxt.select(nxt.id, cte.c.depth + 1, extend_path(cte.c.path, nxt.id))
        .from_(cte)
        .join(here, on=(here.id == cte.c.id))
        .join(nxt, on=(nxt.id == latest_child(here, after_end=compression_only)))
        .where(cte.c.depth < hops, not_visited(cte.c.path, nxt.id))
    )
    if compression_only:
        step = step.where(here.end_reason == "compression")
    return cte.union_all(step)


def compression_chain_ids(model: type[Session], session_id: str) -> list[str]:
    """Ids linked to ``session_id`` by compression edges, up and down, however long
    the chain: the sessions it continues, and everything that continues them.

    The walks keep each id once (``UNION``), so a cycle ends them and no
    depth bound cuts a long chain short.
    """
    here = model.alias("here")
    up = model.alias("up")
    down = model.alias("down")
    start = model.select(model.id).where(model.id == session_id)
    rising = start.cte("rising", recursive=True, columns=("id",))
    rising = rising.union(
        up.select(up.id)
        .from_(rising)
        .join(here, on=(here.id == rising.c.id))
        .join(up, on=(up.id == here.parent))
        .where(compression_expr(here))
    )
    seed = peewee.Select(from_list=[rising], columns=[rising.c.id])
    chain = seed.cte("chain", recursive=True, columns=("id",))
    chain = chain.union(
        down.select(down.id)
        .from_(chain)
        .join(down, on=(down.parent == chain.c.id))
        .where(compression_expr(down))
    )
    query = peewee.Select(from_list=[chain], columns=[chain.c.id]).with_cte(rising, chain)
    return sorted({str(row[0]) for row in current().execute(query).fetchall()})


__all__ = [
    "ESC",
    "MAX_DEPTH",
    "RESET_REASONS",
    "RESUME_MAX_DEPTH",
    "SEP",
    "TIP_MAX_HOPS",
    "ancestors",
    "branch_expr",
    "branch_marked",
    "children_of_kind",
    "compression_chain_ids",
    "compression_expr",
    "continuation_v30",
    "delegate_marked",
    "descend",
    "descendants",
    "ephemeral_expr",
    "extend_path",
    "kind_expr",
    "kind_of",
    "latest_child",
    "listable_expr",
    "marker",
    "newer_rules",
    "not_visited",
    "parent_ended",
    "path_of",
    "reset_child",
    "root_of",
    "walk_sessions",
]
