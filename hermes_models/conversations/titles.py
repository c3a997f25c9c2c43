"""Session titles: cleaning what people type, and numbering a lineage.

Titles are unique among sessions. A compression continuation takes its
parent's title with the next number: ``"fix the build"`` becomes
``"fix the build #2"``, then ``"fix the build #3"``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import peewee

from ..checks import check_lookup_key, check_nonblank, check_optional_str, check_session_id
from ..models import Session, resolve_prompts_of
from ..store import Prepared, current, write

if TYPE_CHECKING:
    from typing import Any

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
    text = check_optional_str(title, "title")
    if text is None:
        return None

    spaced = _WHITESPACE.sub(" ", text)
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


def stored_title(title: str | None) -> str | None:
    """``title`` as it is stored: :func:`sanitize_title`, then the secrets in it
    redacted when the store redacts (:mod:`hermes_models.store.redaction`)."""
    clean = sanitize_title(title)
    redactor = current().redactor
    if clean is None or redactor is None:
        return clean
    return redactor.text(clean)


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
    if check_lookup_key(title, "title") is None or not title.strip():
        return None
    base = title.strip()
    found = _variants(base)
    numbered = [row for row in found if row[0] != base]
    candidates = numbered or found
    if not candidates:
        return None
    newest = max(candidates, key=lambda row: (row[1], row[3], row[2]))
    return str(newest[2])


_SESSION_BY_TITLE = Prepared(lambda title: Session.select().where(Session.title == title), "title")
_TITLE_BY_ID = Prepared(
    lambda session_id: Session.select(Session.title).where(Session.id == session_id).limit(1),
    "session_id",
)


def set_title(session_id: str, title: str | None) -> bool:
    """Set (or with an empty title, clear) a session's title. True if it exists.

    Raises:
        ValueError: another session already has the title, or it is too long.
    """
    check_session_id(session_id)
    clean = stored_title(title)

    # Where the unique index is sure to be there, it refuses a taken title and the
    # holder is read only then (a round trip fewer a call); elsewhere it is read first.
    indexed = current().titles_unique_by_index

    def refuse_if_taken() -> None:
        if clean is None:
            return
        holder = (
            Session.select(Session.id)
            .where(Session.title == clean, Session.id != session_id)
            .first()
        )
        if holder is not None:
            raise ValueError(f"Title {clean!r} is already in use by session {holder.id}")

    def run() -> bool:
        if not indexed:
            refuse_if_taken()
        changed = Session.update(title=clean).where(Session.id == session_id).execute()
        return bool(changed)

    try:
        return bool(write(run))
    except peewee.IntegrityError:
        if not indexed:
            raise
        refuse_if_taken()
        raise


def title_of(session_id: Any) -> str | None:
    """A session's title, or None."""
    if check_lookup_key(session_id, "session_id") is None:
        return None
    return cast("str | None", _TITLE_BY_ID.scalar(current(), session_id=session_id))


def session_by_title(title: Any) -> dict[str, Any] | None:
    """The row of the session with exactly this title, or None."""
    if check_lookup_key(title, "title") is None:
        return None
    rows = _SESSION_BY_TITLE.dicts(current(), title=title)
    return resolve_prompts_of(rows)[0] if rows else None


def next_title(base_title: Any) -> str:
    """:func:`next_title_in_lineage` of a title given by a caller (checked, stripped)."""
    return next_title_in_lineage(check_nonblank(base_title, "base_title"))
