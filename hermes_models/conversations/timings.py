"""The ``timings`` of a session export, as Hermes makes it from release 0.21.5 on.

Hermes stores no stopwatch readings, so the timings of an export are worked out
from the exported messages' timestamps: how many messages carry one, the first
and last of them, the gap between each two in a row, how many messages each role
has and how many tool calls were made. Ids, roles, counts and durations only: no
text of any message. A timestamp that is no number, is not finite, or lies
outside 1970 to about 2103 counts as missing (a warning names the session).

Files of those releases show it by their search index, which is in Hermes'
layout 3 (:attr:`hermes_models.store.shape.FileShape.fts_layout`), and files of
schema 31 and later.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..store import current

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

logger = logging.getLogger("hermes_models")

#: The span of epoch seconds a stored timestamp must lie in to count (Hermes' bounds:
#: inside a 32-bit ``time_t``, so that every platform can turn it into a date).
EPOCH_SPAN = (0.0, 4_200_000_000.0)


def in_exports() -> bool:
    """True when exports of the open file carry ``timings`` (see the module's text)."""
    shape = getattr(current(), "shape", None)
    return shape is not None and shape.storage3


def epoch(value: Any, session_id: str | None = None) -> float | None:
    """A stored timestamp as epoch seconds, None when unset or not to be trusted."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value.timestamp()) if isinstance(value, datetime) else float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    low, high = EPOCH_SPAN
    if not low <= seconds <= high:  # NaN fails too
        where = f" on session {session_id}" if session_id else ""
        logger.warning("timestamp %r%s left out of the export's timings", value, where)
        return None
    return seconds


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def export_timings(messages: Sequence[dict[str, Any]], session_id: str | None) -> dict[str, Any]:
    """The ``timings`` of an export of ``messages`` (in their export order)."""
    stamped = [
        (message, seconds)
        for message in messages
        if (seconds := epoch(message.get("timestamp"), session_id)) is not None
    ]
    roles = Counter(str(message.get("role") or "unknown") for message in messages)
    calls = 0
    for message in messages:
        made = message.get("tool_calls")
        if made:
            calls += len(made) if isinstance(made, list) else 1
    intervals: list[dict[str, Any]] = [
        {
            "from_message_id": before.get("id"),
            "to_message_id": after.get("id"),
            "from_role": before.get("role"),
            "to_role": after.get("role"),
            "gap_ms": _ms(after_at - before_at),
        }
        for (before, before_at), (after, after_at) in itertools.pairwise(stamped)
    ]
    first = stamped[0][1] if stamped else None
    last = stamped[-1][1] if stamped else None
    return {
        "source": "message_timestamps",
        "available": bool(stamped),
        "complete": False,  # no stopwatch: the timestamps are all there is
        "unavailable_reason": None if stamped else "no_timestamped_messages",
        "message_timestamps": {"available": len(stamped), "missing": len(messages) - len(stamped)},
        "first_message_at": None if first is None else _iso(first),
        "last_message_at": None if last is None else _iso(last),
        "wall_clock_ms": None if first is None or last is None else _ms(last - first),
        "largest_gap_ms": max((int(gap["gap_ms"]) for gap in intervals), default=None),
        "role_counts": dict(roles),
        "tool_result_count": roles.get("tool", 0),
        "tool_calls_emitted": calls,
        "intervals": intervals,
    }
