"""Argument checks of the public API.

Each check returns the value it accepts (normalised where that is
harmless) and otherwise raises ``TypeError`` (wrong kind of value) or
``ValueError`` (right kind, unusable value) with a message that starts with
the argument's name. They run before anything is written, so a rejected
call leaves the file as it was.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from typing import Any

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


def check_session_id(session_id: Any, argument: str = "session_id") -> str:
    """``session_id`` if it is a non-empty, storable string, else a TypeError/ValueError."""
    if session_id.__class__ is str and session_id.isascii() and session_id:
        return session_id  # the common case, checked quickly on the hot path
    return str(check_text(session_id, argument, empty=False))


def check_optional_str(value: Any, argument: str) -> str | None:
    """``value`` if it is a str or None (text is stored as given)."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{argument} must be str or None, not {type(value).__name__}")


def check_label(value: Any, argument: str) -> str | None:
    """Optional text where an empty string means "not given" (None then)."""
    return check_optional_str(value, argument) or None


def check_lookup_key(value: Any, argument: str) -> str | None:
    """A key to look up; None for None or "" (nothing can match), TypeError for non-text."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be str, not {type(value).__name__}")
    return value


def check_nonblank(value: Any, argument: str) -> str:
    """``value`` stripped: a string with something besides whitespace in it."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{argument} must be a non-empty string")
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be str, not {type(value).__name__}")
    return value.strip()


def check_choice(value: Any, argument: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``choices``."""
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be str, not {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{argument} must be one of {', '.join(choices)}; got {value!r}")
    return value


def check_optional_count(value: Any, argument: str) -> int | None:
    """``value`` if it is None or a non-negative 64-bit int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be int or None, not {type(value).__name__}")
    return check_int64(value, argument, minimum=0)


def check_rank_window(value: Any, argument: str = "rank_window") -> int | None:
    """``value`` if it is None (every match ranked) or a positive 64-bit int (only the
    newest that many matches ranked)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be a positive int or None, not {type(value).__name__}")
    return check_int64(value, argument, minimum=1)


def check_amount(value: Any, argument: str) -> float | None:
    """An amount of money: None, or a finite number that is not negative."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{argument} must be a number or None, not {type(value).__name__}")
    amount = check_finite(value, argument)
    if amount < 0:
        raise ValueError(f"{argument} must not be negative, got {value!r}")
    return amount


def check_timestamp(timestamp: Any, argument: str = "timestamp") -> float:
    """Seconds since the epoch (now when None): a number, an object with
    ``.timestamp()`` (a ``datetime``; a naive one is local time, as Hermes reads it),
    or text of a number (``"1700000000.5"``: Hermes takes what ``float()`` takes).
    Text that is no number is a ``ValueError`` (Hermes would use the time now)."""
    if timestamp is None:
        return time.time()
    if not isinstance(timestamp, (int, float)):
        if callable(getattr(timestamp, "timestamp", None)):
            timestamp = timestamp.timestamp()
        elif isinstance(timestamp, str):
            try:
                timestamp = float(timestamp)
            except ValueError:
                raise ValueError(
                    f"{argument} must be seconds since the epoch, got {timestamp[:80]!r}"
                ) from None
    return check_epoch(timestamp, argument)


def check_platform_id(value: Any, argument: str = "platform_message_id") -> str | None:
    """A platform's id as text (chat platforms often number them); None stays None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"{argument} must be str, int or None, not {type(value).__name__}")


def check_key(value: Any, argument: str) -> str:
    """An id that arrives as an int or a string, as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"{argument} must be str or int, not {type(value).__name__}")


def check_window(since: Any, until: Any) -> tuple[float | None, float | None]:
    """A time window: each bound None (open) or seconds since the epoch (a number or
    a ``datetime``, as :func:`check_timestamp` takes them); ``since`` not after ``until``."""
    low = None if since is None else check_timestamp(since, "since")
    high = None if until is None else check_timestamp(until, "until")
    if low is not None and high is not None and low > high:
        raise ValueError(f"since ({low}) is after until ({high})")
    return low, high


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    """``(limit, offset)`` checked: non-negative 64-bit ints (``limit=None`` means no limit)."""
    limit = -1 if limit is None else check_int64(limit, "limit", minimum=0)
    return limit, check_int64(offset, "offset", minimum=0)


def check_sources(value: Any, argument: str) -> list[str] | None:
    """One source or a list of them as a list; None for None or ``""`` (no filter)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{argument} must be a string or a list of strings")


def check_id_list(value: Any, argument: str) -> Iterable[Any]:
    """An iterable of ids that is not itself a string."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{argument} must be a list of session ids")
    return value


def check_days(value: Any, argument: str) -> float:
    """A number of days: finite and not negative."""
    kind = value.__class__  # the common cases first (a prune on every agent start)
    if kind is int and 0 <= value < _EXACT:
        return float(value)
    if kind is float and 0.0 <= value and value - value == 0.0:  # not inf, not nan
        return cast(float, value)
    days = check_finite(value, argument)
    if days < 0:
        raise ValueError(f"{argument} must not be negative, got {value}")
    return days


def expand_user(text: str, argument: str) -> str:
    """``text`` with a leading ``~`` or ``~user`` expanded, as a shell does: ``./~/x``
    is a folder named ``~`` (unlike ``pathlib``, which reads it as ``~/x``).

    Raises:
        ValueError: ``text`` starts with ``~`` and that home folder is not known
            (the ``~`` is never taken as a folder's name).
    """
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = expanded[1:].split(os.sep, 1)[0]
        whose = f"user {user!r}" if user else "this process"
        raise ValueError(
            f"{argument}: {text!r} starts with ~, but no home folder is known for {whose}"
        )
    return expanded


def check_folder(value: Any, argument: str) -> Path | None:
    """``value`` as a path (None when not given): a str or a text ``os.PathLike``,
    a leading ``~`` expanded (:func:`expand_user`)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a path or None, not {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise TypeError(f"{argument} must be a text path, not bytes")

    return Path(expand_user(text, argument))


def check_ttl(ttl: Any, argument: str = "ttl") -> float:
    """A lock lease in seconds: a number above 0 and at most a year."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"{argument} must be a number of seconds, not {type(ttl).__name__}")
    if not (0 < ttl <= 366 * 24 * 3600):
        raise ValueError(f"{argument} must be between 0 and one year in seconds, got {ttl!r}")
    return float(ttl)


__all__ = [
    "EPOCH_MAX",
    "EPOCH_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_JSON_DEPTH",
    "check_amount",
    "check_choice",
    "check_days",
    "check_epoch",
    "check_finite",
    "check_flag",
    "check_folder",
    "check_id_list",
    "check_int64",
    "check_json_depth",
    "check_key",
    "check_label",
    "check_lookup_key",
    "check_nonblank",
    "check_optional_count",
    "check_optional_str",
    "check_page",
    "check_platform_id",
    "check_rank_window",
    "check_session_id",
    "check_sources",
    "check_text",
    "check_timestamp",
    "check_ttl",
    "check_utf8",
    "expand_user",
]
