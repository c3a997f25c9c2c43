"""Argument checks of the public API.

Each check returns the value it accepts (normalised where that is
harmless) and otherwise raises ``TypeError`` (wrong kind of value) or
``ValueError`` (right kind, unusable value) with a message that starts with
the argument's name. They run before anything is written, so a rejected
call leaves the file as it was.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, cast

#: Largest integer SQLite stores (and the largest limit, offset or count accepted).
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

#: Earliest and latest epoch seconds stored: one day inside the years 1 and 9999
#: that Python's ``datetime`` can represent, so that every reader can turn a
#: stored time into a date in any time zone.
EPOCH_MIN = -62_135_596_800.0 + 86_400.0
EPOCH_MAX = 253_402_300_799.0 - 86_400.0

#: Deepest nesting of lists and dicts stored as JSON. Python's ``json`` and
#: SQLite's JSON functions both recurse; well below either one's limit, every
#: reader can decode what was stored.
MAX_JSON_DEPTH = 500

# Integers below this in size turn into floats exactly.
_EXACT = 2**53


def check_flag(value: Any, argument: str, *, none_is_false: bool = False) -> bool:
    """``value`` as a bool: ``True``/``False`` or the integers 1/0 SQLite flags hold."""
    if value is None and none_is_false:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value in (0, 1):
            return bool(value)
        raise ValueError(f"{argument} must be True or False (or 1/0), got {value}")
    raise TypeError(f"{argument} must be bool, not {type(value).__name__}")


def check_int64(value: Any, argument: str, *, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) SQLite can store, at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        if minimum == 0:
            raise ValueError(f"{argument} must not be negative, got {value}")
        raise ValueError(f"{argument} must be at least {minimum}, got {value}")
    if value > INT64_MAX:
        raise ValueError(f"{argument} must be at most {INT64_MAX} (a 64-bit integer), got {value}")
    if value < INT64_MIN:
        raise ValueError(f"{argument} must be at least {INT64_MIN} (a 64-bit integer), got {value}")
    return value


def check_finite(value: Any, argument: str) -> float:
    """``value`` as a float: a finite int or float (not a bool)."""
    kind = value.__class__  # the common cases first, without the calls below
    if kind is float and value - value == 0.0:  # not inf, not nan
        return cast(float, value)
    if kind is int and -_EXACT < value < _EXACT:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{argument} must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{argument} must be finite, got {value!r}")
    return number


def check_epoch(value: Any, argument: str) -> float:
    """``value`` as seconds since the epoch: a finite number between
    :data:`EPOCH_MIN` and :data:`EPOCH_MAX` (a date Python can format)."""
    number = check_finite(value, argument)
    if not EPOCH_MIN <= number <= EPOCH_MAX:
        raise ValueError(
            f"{argument} must be seconds since the epoch between years 1 and 9999, got {value!r}"
        )
    return number


def epoch_datetime(value: Any) -> datetime | None:
    """The UTC date of a stored epoch; None when the value cannot be one (not a
    number, or outside what ``datetime`` represents), so that reading never fails."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def check_utf8(value: str, argument: str) -> str:
    """``value`` if UTF-8 can encode it (no lone surrogates)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{argument} contains text that cannot be stored as UTF-8 (a lone surrogate)"
            ) from None
    return value


def check_text(
    value: Any, argument: str, *, optional: bool = False, empty: bool = True
) -> str | None:
    """``value`` if it is storable text (None allowed when ``optional``, ``""`` when ``empty``)."""
    if value.__class__ is str and value.isascii() and (empty or value):
        return value  # the common case, checked first: keys and ids on every call
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "str or None" if optional else "str"
        raise TypeError(f"{argument} must be {kind}, not {type(value).__name__}")
    if not value and not empty:
        raise ValueError(f"{argument} must not be empty")
    return check_utf8(value, argument)


def check_json_depth(value: Any, argument: str) -> None:
    """Refuse lists and dicts nested deeper than :data:`MAX_JSON_DEPTH` (or containing
    themselves), without recursing."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(
                f"{argument} is nested more than {MAX_JSON_DEPTH} levels deep "
                "(or contains itself); it cannot be stored as JSON"
            )
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (list, tuple, dict)):
                stack.append((child, depth + 1))


__all__ = [
    "EPOCH_MAX",
    "EPOCH_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_JSON_DEPTH",
    "check_epoch",
    "check_finite",
    "check_flag",
    "check_int64",
    "check_json_depth",
    "check_text",
    "check_utf8",
    "epoch_datetime",
]
