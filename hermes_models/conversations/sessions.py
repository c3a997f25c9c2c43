"""A session's own row: creating, ending and reopening it, setting its columns,
its token and cost counters, archiving its chain, and finding it by id.

Every change here is one write. Creating is insert-or-ignore (the first
write wins) and ending is first-end-wins, as in Hermes. Token and cost
counters are added to (or, on request, set); the model and billing columns
are filled only while they are NULL.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import peewee
from peewee import Value, fn

from ..checks import (
    check_amount,
    check_epoch,
    check_flag,
    check_int64,
    check_label,
    check_lookup_key,
    check_optional_str,
    check_session_id,
)
from ..models import (
    Session,
    check_increments,
    compression_chain_ids,
    encode_json,
    resolve_prompts,
    with_extra,
)
from ..store import Prepared, current, starts_with_ascii_nocase, write

if TYPE_CHECKING:
    from typing import Any

#: Session columns :func:`update_meta` may set by name (``model`` through its own argument).
META_FIELDS = (
    "user_id",
    "model_config",
    "system_prompt",
    "cwd",
    "git_branch",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "cost_status",
    "cost_source",
    "pricing_version",
    "handoff_state",
    "handoff_platform",
    "handoff_error",
)

#: Meta columns that hold JSON (encoded when given as objects).
_JSON_META = ("model_config", "handoff_state")

# A lookup an agent makes on every turn: rendered once per file structure (see Prepared).
_SESSION_BY_ID = Prepared(
    lambda session_id: with_extra(Session.select(), Session).where(Session.id == session_id),
    "session_id",
)


def _field(column: str) -> peewee.Field:
    for field in Session._meta.sorted_fields:
        if field.column_name == column:
            return cast("peewee.Field", field)
    raise KeyError(column)  # pragma: no cover


def create(
    session_id: str,
    source: str,
    *,
    model: str | None = None,
    model_config: Any = None,
    system_prompt: str | None = None,
    user_id: str | None = None,
    parent_session_id: str | None = None,
    cwd: str | None = None,
    started_at: float | None = None,
) -> str:
    """Create a session unless it exists (the first write wins); returns its id."""
    check_session_id(session_id)
    check_session_id(source, "source")
    if parent_session_id is not None:
        check_session_id(parent_session_id, "parent_session_id")
    row = {
        "id": session_id,
        "source": source,
        "model_name": check_optional_str(model, "model"),
        # An empty config is stored as NULL, as Hermes stores it.
        "model_config": encode_json(model_config, "model_config") if model_config else None,
        "system_prompt": check_optional_str(system_prompt, "system_prompt"),
        "user_id": check_optional_str(user_id, "user_id"),
        "parent": parent_session_id,
        "cwd": check_optional_str(cwd, "cwd"),
        "started_at": time.time() if started_at is None else check_epoch(started_at, "started_at"),
    }
    write(lambda: Session.insert(**row).on_conflict_ignore().execute())
    return session_id


def end(session_id: str, end_reason: str | None) -> bool:
    """End a session; the first end wins. True if this call ended it.

    ``end_reason`` None ends it without a reason (stored NULL), as Hermes does."""
    check_session_id(session_id)
    if end_reason is not None:
        check_session_id(end_reason, "end_reason")
    now = time.time()
    changed = write(
        lambda: (
            Session.update(ended_at=now, end_reason=end_reason)
            .where(Session.id == session_id, Session.ended_at.is_null())
            .execute()
        )
    )
    return bool(changed)


def reopen(session_id: str) -> bool:
    """Clear a session's end so it can continue. True if it exists."""
    return update(session_id, ended_at=None, end_reason=None)


def get(session_id: Any) -> dict[str, Any] | None:
    """Every column of one session, or None (also for None or ``""``)."""
    if check_lookup_key(session_id, "session_id") is None:
        return None
    rows = _SESSION_BY_ID.dicts(current(), session_id=session_id)
    return resolve_prompts(rows[0]) if rows else None


def resolve_id(session_id_or_prefix: Any) -> str | None:
    """The id itself if it exists, else the one session id it is a unique prefix of.

    As in Hermes (its ``LIKE``), the prefix matches ASCII letters of either case:
    ``"ABC"`` finds ``abc123``, and with ``abc1`` and ``ABC2`` both held it names
    neither."""
    key = check_lookup_key(session_id_or_prefix, "session_id_or_prefix")
    if key is None:
        return None
    if Session.select().where(Session.id == key).exists():
        return key
    candidates = cast(
        "Iterable[tuple[str]]",
        Session.select(Session.id)
        .where(starts_with_ascii_nocase(Session.id, key))
        .limit(2)
        .tuples(),
    )
    found = [row[0] for row in candidates]
    return found[0] if len(found) == 1 else None


def update(session_id: str, **values: Any) -> bool:
    """Set columns (by field name) of one session. True if it exists."""
    check_session_id(session_id)
    changed = write(lambda: Session.update(**values).where(Session.id == session_id).execute())
    return bool(changed)


def set_system_prompt(session_id: str, system_prompt: str | None) -> bool:
    """Replace a session's system prompt. True if the session exists."""
    prompt = check_optional_str(system_prompt, "system_prompt")
    return update(session_id, system_prompt=prompt)


def set_model(session_id: str, model: str | None, model_config: Any = None) -> bool:
    """Set a session's model (and its config, when given). True if it exists."""
    values: dict[str, Any] = {"model_name": check_optional_str(model, "model")}
    if model_config is not None:
        values["model_config"] = encode_json(model_config, "model_config")
    return update(session_id, **values)


def set_cwd(session_id: str, cwd: str | None, git_branch: str | None = None) -> bool:
    """Record a session's working directory and, when known, its git branch.

    Nothing happens without an id or a directory; a blank branch (a failed
    probe) leaves the stored one. True if the session exists.
    """
    if not session_id or not cwd:
        return False
    values: dict[str, Any] = {"cwd": check_optional_str(cwd, "cwd")}
    branch = (check_optional_str(git_branch, "git_branch") or "").strip()
    if branch:
        values["git_branch"] = branch
    return update(session_id, **values)


def update_meta(session_id: str, given: dict[str, Any], model: str | None = None) -> bool:
    """Set the named :data:`META_FIELDS` columns of a session (and its model when
    given). True if it exists; with nothing to set, whether it exists.

    Raises:
        ValueError: a name is not one of :data:`META_FIELDS`.
    """
    unknown = sorted(set(given) - set(META_FIELDS))
    if unknown:
        raise ValueError(f"update_session_meta: unknown field(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for column, value in given.items():
        if column in _JSON_META:
            values[_field(column).name] = encode_json(value, column)
        else:
            values[_field(column).name] = check_optional_str(value, column)
    if model is not None:
        values["model_name"] = check_optional_str(model, "model")
    if not values:
        return get(session_id) is not None
    return update(session_id, **values)


def add_token_counts(
    session_id: str,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    model: str | None = None,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    estimated_cost_usd: float | None = None,
    actual_cost_usd: float | None = None,
    cost_status: str | None = None,
    cost_source: str | None = None,
    pricing_version: str | None = None,
    billing_provider: str | None = None,
    billing_base_url: str | None = None,
    billing_mode: str | None = None,
    api_call_count: int = 0,
    absolute: bool = False,
) -> None:
    """Add to (or with ``absolute=True`` set) a session's token and cost counters.

    An unknown session is created with ``source='unknown'``. ``model`` and
    the billing fields are filled only while NULL; the cost status, source
    and pricing version are replaced when given. As in Hermes, the estimated
    cost counts a missing value as 0 (so ``absolute=True`` without one resets
    it to 0), while a missing actual cost is left alone.

    Raises:
        ValueError: an increment would overflow a counter (nothing is written).
    """
    check_session_id(session_id)
    absolute = check_flag(absolute, "absolute")
    counters = {
        Session.input_tokens: check_int64(input_tokens, "input_tokens", minimum=0),
        Session.output_tokens: check_int64(output_tokens, "output_tokens", minimum=0),
        Session.cache_read_tokens: check_int64(cache_read_tokens, "cache_read_tokens", minimum=0),
        Session.cache_write_tokens: check_int64(
            cache_write_tokens, "cache_write_tokens", minimum=0
        ),
        Session.reasoning_tokens: check_int64(reasoning_tokens, "reasoning_tokens", minimum=0),
        Session.api_call_count: check_int64(api_call_count, "api_call_count", minimum=0),
        # As in Hermes, a missing estimate counts as 0: it is added (or, with
        # absolute=True, set), so the column holds a number after any call.
        Session.estimated_cost_usd: check_amount(estimated_cost_usd, "estimated_cost_usd") or 0.0,
        Session.actual_cost_usd: check_amount(actual_cost_usd, "actual_cost_usd"),
    }
    fill_if_null = {
        Session.model_name: check_label(model, "model"),
        Session.billing_provider: check_label(billing_provider, "billing_provider"),
        Session.billing_base_url: check_label(billing_base_url, "billing_base_url"),
        Session.billing_mode: check_label(billing_mode, "billing_mode"),
    }
    replace_if_given = {
        Session.cost_status: check_label(cost_status, "cost_status"),
        Session.cost_source: check_label(cost_source, "cost_source"),
        Session.pricing_version: check_label(pricing_version, "pricing_version"),
    }
    values: dict[Any, Any] = {}
    for field, amount in counters.items():
        if amount is not None:
            values[field] = amount if absolute else fn.COALESCE(field, 0) + amount
    for field, text in fill_if_null.items():
        if text is not None:
            values[field] = fn.COALESCE(field, text)
    for field, text in replace_if_given.items():
        if text is not None:
            values[field] = text

    increments = {f: a for f, a in counters.items() if a is not None}
    # A server that refuses an overflowing sum itself needs no read first (a round trip
    # a call); its refusal is worded as the check words it, by the same read afterwards.
    server_checks = current().refuses_overflow

    def run() -> None:
        if server_checks:
            given: dict[str, Any] = {_column(f): a for f, a in increments.items()}
            labels = {**fill_if_null, **replace_if_given}
            given.update((_column(f), t) for f, t in labels.items() if t is not None)
            upsert = _token_upsert(
                absolute,
                tuple(_column(f) for f in increments),
                tuple(_column(f) for f, t in fill_if_null.items() if t is not None),
                tuple(_column(f) for f, t in replace_if_given.items() if t is not None),
            )
            upsert.execute(current(), sid=session_id, started=time.time(), **given)
            return
        Session.insert(
            id=session_id, source="unknown", started_at=time.time()
        ).on_conflict_ignore().execute()
        if not absolute:
            check_increments(session_id, increments)
        Session.update(values).where(Session.id == session_id).execute()

    try:
        write(run)
    except peewee.DataError:
        if absolute or not server_checks:
            raise
        check_increments(session_id, increments)  # raises ValueError naming the counter
        raise


def _column(field: Any) -> str:
    """A ``Session`` field's attribute name (the key of its slot)."""
    return str(field.name)


@functools.lru_cache(maxsize=64)
def _token_upsert(
    absolute: bool, counted: tuple[str, ...], filled: tuple[str, ...], replaced: tuple[str, ...]
) -> Prepared:
    """:func:`add_token_counts` as one statement where the server refuses an overflow: an
    unknown session made with what the update gives a new row (each counter its amount,
    each label its text), a known one updated; rendered once per set of fields given."""

    def build(**slots: Any) -> Any:
        fresh: dict[Any, Any] = {
            Session.id: Value(slots["sid"], converter=None),
            Session.source: "unknown",
            Session.started_at: Value(slots["started"], converter=None),
        }
        update: dict[Any, Any] = {}
        for name in counted:
            field, amount = getattr(Session, name), Value(slots[name], converter=None)
            fresh[field] = amount
            update[field] = amount if absolute else fn.COALESCE(field, 0) + amount
        for name in filled:
            field, text = getattr(Session, name), Value(slots[name], converter=None)
            fresh[field] = text
            update[field] = fn.COALESCE(field, text)
        for name in replaced:
            field, text = getattr(Session, name), Value(slots[name], converter=None)
            fresh[field] = text
            update[field] = text
        return Session.insert(fresh).on_conflict(conflict_target=[Session.id], update=update)

    return Prepared(build, "sid", "started", *counted, *filled, *replaced)


def set_archived(session_id: str, archived: bool) -> bool:
    """Archive (or unarchive) a session's whole compression chain. True if it exists."""
    check_session_id(session_id)
    archived = check_flag(archived, "archived")

    def run() -> bool:
        ids = compression_chain_ids(Session, session_id)
        if not ids:
            return False
        Session.update(archived=1 if archived else 0).where(Session.id.in_(ids)).execute()
        return True

    return bool(write(run))
