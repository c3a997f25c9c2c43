"""Epoch seconds as people read them: one formatter for the CLI and the Markdown export.

The store keeps times as epoch seconds. Shown to a person they are either
UTC or the local time of the machine, always with the zone said somewhere
(after each time, or once in a column header). A value Python cannot turn
into a date (out of range, not finite, not a number) is shown as it is
instead of breaking the whole output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

#: What a missing time (e.g. a session that has not ended) looks like.
MISSING = "-"


def epoch_datetime(value: Any) -> datetime | None:
    """The UTC date of a stored epoch; None when the value cannot be one (not a
    number, or outside what ``datetime`` represents), so that reading never fails."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def moment(epoch: Any, *, utc: bool) -> datetime | None:
    """``epoch`` as an aware datetime in UTC or the local zone; None when it is not a time."""
    when = epoch_datetime(epoch)
    if when is None or utc:
        return when
    try:
        return when.astimezone()
    except (OverflowError, OSError, ValueError):
        return None


def when(epoch: Any, *, utc: bool, seconds: bool = False, zone: bool = False) -> str:
    """``YYYY-MM-DD HH:MM`` (``:SS`` with ``seconds``, the zone name after it with ``zone``).

    None is :data:`MISSING`; a value that is not a formattable time is shown as given.
    """
    if epoch is None:
        return MISSING
    value = moment(epoch, utc=utc)
    if value is None:
        return str(epoch)
    text = value.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    return f"{text} {zone_name(value)}" if zone else text


def zone_name(value: datetime) -> str:
    """The zone of an aware datetime: ``UTC``, its abbreviation (``CET``), or ``+03:00``."""
    if value.tzinfo is timezone.utc:
        return "UTC"
    name = value.tzname() or ""
    if name and not name.startswith(("UTC+", "UTC-", "+", "-")):
        return name
    offset = value.strftime("%z")
    return f"{offset[:3]}:{offset[3:5]}"


def zones(epochs: Iterable[Any], *, utc: bool) -> str:
    """The zones ``epochs`` are shown in, for a column header: ``UTC``, ``CET/CEST``."""
    if utc:
        return "UTC"
    names: list[str] = []
    for epoch in epochs:
        value = moment(epoch, utc=False)
        if value is not None and zone_name(value) not in names:
            names.append(zone_name(value))
    if not names:
        names.append(zone_name(datetime.now(timezone.utc).astimezone()))
    return "/".join(names)


class Clock:
    """Times as the user asked for them: local time with its zone, or UTC (``--utc``)."""

    def __init__(self, utc: bool) -> None:
        self.utc = utc

    def cell(self, epoch: Any) -> str:
        """For a column whose header names the zone."""
        return when(epoch, utc=self.utc)

    def stamp(self, epoch: Any) -> str:
        """On its own: with the zone after it."""
        return when(epoch, utc=self.utc, zone=epoch is not None)

    def header(self, label: str, epochs: Iterable[Any]) -> str:
        """A column header naming the zone of its times: ``Last active (UTC)``."""
        return f"{label} ({zones(epochs, utc=self.utc)})"


#: Units of a duration such as ``7d``: seconds in each.
DURATION_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+)\s*([mhdw])")
#: What :func:`parse_when` takes, for error messages and help texts.
WHEN_FORMS = (
    "a date (2026-12-01), a time (2026-12-01T09:30), today, yesterday, or 7d/12h/30m/2w ago"
)


def parse_when(text: str, *, utc: bool, end: bool = False, now: float) -> float:
    """The epoch seconds ``text`` names (see :data:`WHEN_FORMS`), in the local zone
    unless ``utc``. A duration counts back from ``now``. With ``end`` (an upper
    bound) a bare date or ``today``/``yesterday`` means the end of that day.

    Raises:
        ValueError: ``text`` is none of those forms (the message lists them).
    """
    spoken = text.strip().lower()
    ago = _DURATION.fullmatch(spoken)
    if ago:
        return now - int(ago.group(1)) * DURATION_UNITS[ago.group(2)]
    zone = timezone.utc if utc else None
    here = datetime.fromtimestamp(now, tz=timezone.utc)
    here = here if utc else here.astimezone()
    day: datetime | None = None
    if spoken in ("today", "yesterday"):
        day = here.replace(hour=0, minute=0, second=0, microsecond=0)
        if spoken == "yesterday":
            day = (day - timedelta(days=1)).replace(hour=0)
    else:
        try:
            parsed = datetime.fromisoformat(spoken.replace(" ", "T", 1).upper())
        except ValueError:
            raise ValueError(f"{text!r} is no time: use {WHEN_FORMS}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=zone) if zone else parsed.astimezone()
        if len(spoken) > 10:  # a moment, not a day
            return parsed.timestamp()
        day = parsed
    if end:
        day = day + timedelta(days=1)
        if not utc:  # the next midnight, whatever the clock change in between
            day = day.replace(tzinfo=None).astimezone()
    return day.timestamp()
