"""Session titles: cleaning what people type, and numbering a lineage.

Titles are unique among sessions. A compression continuation takes its
parent's title with the next number: ``"fix the build"`` becomes
``"fix the build #2"``, then ``"fix the build #3"``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any, cast

from .binding import current
from .models import Session
from .statements import Prepared

#: Longest title accepted, in characters, after cleaning.
MAX_TITLE_LENGTH = 100

_NUMBERED = re.compile(r"^(?P<base>.*\S) #(?P<number>[1-9][0-9]*)$")
_WHITESPACE = re.compile(r"\s+")
#: Characters dropped besides the control and format categories: the object
#: replacement character, which stands for nothing a title can show.
_INVISIBLE = frozenset("\ufffc")


def sanitize_title(title: str | None) -> str | None:
    """``title`` without control or invisible characters and with whitespace
    collapsed; None when nothing is left.

    Raises:
        TypeError: ``title`` is not a string.
        ValueError: more than 100 characters remain.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise TypeError(f"title must be str or None, not {type(title).__name__}")
    spaced = _WHITESPACE.sub(" ", title)
    kept = "".join(
        ch
        for ch in spaced
        if unicodedata.category(ch) not in ("Cc", "Cf", "Cs") and ch not in _INVISIBLE
    )
    clean = _WHITESPACE.sub(" ", kept).strip()
    if not clean:
        return None
    if len(clean) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(clean)} chars, max {MAX_TITLE_LENGTH})")
    return clean


def split_title(title: str) -> tuple[str, int]:
    """``"t #3"`` -> ``("t", 3)``; an unnumbered title counts as number 1."""
    match = _NUMBERED.match(title)
    if match is None:
        return title, 1
    return match.group("base"), int(match.group("number"))


def _variants_query(low: str, high: str) -> Any:
    return Session.select(Session.title, Session.started_at, Session.id).where(
        Session.title >= low, Session.title < high
    )


#: Titles from a base up to (not including) ``"<base> $"``: the base and every
#: ``"<base> #..."``, read as a range of the unique title index. Rendered once.
_VARIANTS = Prepared(_variants_query, "low", "high")


def _variants(base: str) -> list[tuple[str, float, str, int]]:
    rows = cast(
        "Iterable[tuple[str, float, str]]",
        _VARIANTS.execute(current(), low=base, high=f"{base} $").fetchall(),
    )
    found = []
    for title, started_at, session_id in rows:
        stem, number = split_title(title)
        if title == base or stem == base:
            found.append((title, started_at, session_id, number))
    return found


def next_title_in_lineage(title: str) -> str:
    """The title a continuation of a session titled ``title`` gets.

    The base is ``title`` without a ``" #N"`` suffix. While no session is
    titled with the base or a numbered variant of it, that is the base
    itself; otherwise the unnumbered title counts as #1 and the next number
    above the highest held is added: ``"t"`` -> ``"t #2"``, and with
    ``"t #3"`` held, ``"t #4"``.
    """
    base, _ = split_title(title)
    found = _variants(base)
    if not found:
        return base
    return f"{base} #{max(row[3] for row in found) + 1}"


def resolve_by_title(title: str) -> str | None:
    """Id of the session titled ``title``, preferring its newest ``"title #N"``.

    A numbered continuation wins over the exact title; among several, the
    one started last (then the highest number) wins.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise TypeError(f"title must be str, not {type(title).__name__}")
    if not title.strip():
        return None
    base = title.strip()
    found = _variants(base)
    numbered = [row for row in found if row[0] != base]
    candidates = numbered or found
    if not candidates:
        return None
    newest = max(candidates, key=lambda row: (row[1], row[3], row[2]))
    return str(newest[2])


__all__ = [
    "MAX_TITLE_LENGTH",
    "next_title_in_lineage",
    "resolve_by_title",
    "sanitize_title",
    "split_title",
]
