"""Handing a session over to another platform (CLI to Telegram, say).

A session's handoff moves through ``pending`` (asked for), ``running``
(claimed by the gateway that will continue it), then ``completed`` or
``failed``. A new request is accepted only when no handoff is in flight
(no state, or a finished one). The state lives in three columns of the
session row: ``handoff_state``, ``handoff_platform``, ``handoff_error``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import check_text
from ..models import Session
from ..store import fetch_dicts, write

if TYPE_CHECKING:
    from typing import Any

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"
#: Characters of a failure reason kept.
ERROR_CHARS = 500


def _update(session_id: str, values: dict[Any, Any], *conditions: Any) -> bool:
    check_text(session_id, "session_id")
    query = Session.update(values).where(Session.id == session_id, *conditions)
    return bool(write(query.execute))


def request(session_id: str, platform: str) -> bool:
    """Ask for a handoff to ``platform``; False when the session is unknown or one is in flight."""
    check_text(platform, "platform")
    idle = Session.handoff_state.is_null() | Session.handoff_state.in_([COMPLETED, FAILED])
    values = {
        Session.handoff_state: PENDING,
        Session.handoff_platform: platform,
        Session.handoff_error: None,
    }
    return _update(session_id, values, idle)


def claim(session_id: str) -> bool:
    """Move a pending handoff to running; True if this call claimed it."""
    return _update(session_id, {Session.handoff_state: RUNNING}, Session.handoff_state == PENDING)


def complete(session_id: str) -> None:
    """Mark the handoff completed (whatever state it was in) and clear its error."""
    _update(session_id, {Session.handoff_state: COMPLETED, Session.handoff_error: None})


def fail(session_id: str, error: str) -> None:
    """Mark the handoff failed with ``error`` (cut to 500 characters)."""
    reason = check_text(error, "error") or ""
    _update(
        session_id, {Session.handoff_state: FAILED, Session.handoff_error: reason[:ERROR_CHARS]}
    )


def state(session_id: str) -> dict[str, Any] | None:
    """``{"state", "platform", "error"}`` of a session (all None when it never had one);
    None for an unknown session."""
    row = (
        Session.select(Session.handoff_state, Session.handoff_platform, Session.handoff_error)
        .where(Session.id == session_id)
        .tuples()
        .first()
    )
    if row is None:
        return None
    return {"state": row[0], "platform": row[1], "error": row[2]}


def pending() -> list[dict[str, Any]]:
    """Every session with a pending handoff (all columns), oldest first."""
    query = (
        Session.select()
        .where(Session.handoff_state == PENDING)
        .order_by(Session.started_at, Session.id)
    )
    return fetch_dicts(query)
