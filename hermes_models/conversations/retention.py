"""Retention: which ended sessions a policy lets go, erased in short transactions.

A :class:`RetentionPolicy` says which sessions retention may touch (filters:
sources, archived sessions only) and when it lets them go (limits: started
before a cutoff; the oldest first while the file's used size is over a
bound). With filters and no limit, every session the filters match goes.

Whatever the policy, retention takes only ended sessions (``ended_at`` set:
never a conversation a gateway is still writing) and never a pinned one
(Hermes v17 and later). Time only picks which sessions are asked for, as
``prune`` does; each one then goes by :func:`erase_sessions`' rules, its
subagent runs with it (by their tags, never by timestamps), every other
child kept as a root, and its text scrubbed from the file and its indexes.

:func:`plan_retention` says what :func:`retain` would take now, from the same
selections; :func:`retain` erases in batches, each its own short write, so a
gateway beside it waits for one batch at most.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from peewee import fn

from ..checks import check_text
from ..models import Message, Session
from ..store import Pacer, SqliteFile, current, file_has, sqlite_sql
from .maintenance import EraseReport, erase_sessions, scrub_deleted

#: Sessions per erase when :func:`retain` is not told otherwise.
BATCH_SIZE = 200


@dataclass(frozen=True)
class RetentionPolicy:
    """Which ended sessions retention lets go.

    Attributes:
        started_before: Epoch seconds: sessions started before go (a limit).
        max_bytes: The file's used size to stay under: the oldest sessions go
            until it fits (a limit; SQLite files only).
        sources: Only sessions of these sources (a filter).
        archived_only: Only archived sessions (a filter).
    """

    started_before: float | None = None
    max_bytes: int | None = None
    sources: tuple[str, ...] = field(default=())
    archived_only: bool = False

    def __post_init__(self) -> None:
        if self.started_before is not None and (
            isinstance(self.started_before, bool)
            or not isinstance(self.started_before, (int, float))
            or not math.isfinite(self.started_before)
        ):
            raise ValueError(f"started_before must be epoch seconds, not {self.started_before!r}")
        if self.max_bytes is not None and (
            isinstance(self.max_bytes, bool)
            or not isinstance(self.max_bytes, int)
            or self.max_bytes < 0
        ):
            raise ValueError(f"max_bytes must be a whole number >= 0, not {self.max_bytes!r}")
        if isinstance(self.sources, str) or not isinstance(self.sources, (tuple, list)):
            raise ValueError(f"sources must be a tuple of source names, not {self.sources!r}")
        for source in self.sources:
            check_text(source, "source")
            if not source.strip():
                raise ValueError("a source in sources must not be empty")
        object.__setattr__(self, "sources", tuple(dict.fromkeys(self.sources)))
        if not isinstance(self.archived_only, bool):
            raise ValueError(f"archived_only must be True or False, not {self.archived_only!r}")
        if not self.limited and not self.filtered:
            raise ValueError(
                "a retention policy needs a limit (started_before, max_bytes) "
                "or a filter (sources, archived_only)"
            )

    @property
    def limited(self) -> bool:
        """Whether the policy has a limit (age or size)."""
        return self.started_before is not None or self.max_bytes is not None

    @property
    def filtered(self) -> bool:
        """Whether the policy narrows the sessions retention may touch."""
        return bool(self.sources) or self.archived_only


@dataclass(frozen=True)
class RetentionPlan:
    """What :func:`retain` would erase now.

    ``by_age`` are the sessions the filters and the age limit match (all the
    filters match when there is no limit); ``by_size`` the further sessions,
    oldest first, the size limit is estimated to take; ``used_bytes`` the
    file's used size now and ``estimated_bytes`` after the erase (None on a
    server or without a size limit)."""

    by_age: list[str]
    by_size: list[str]
    used_bytes: int | None
    estimated_bytes: int | None

    @property
    def targets(self) -> list[str]:
        """Every session the plan asks to erase, age first."""
        return self.by_age + self.by_size


@dataclass(frozen=True)
class RetentionReport:
    """What :func:`retain` erased: the sessions (their subagent runs included), their
    messages, in how many batches, the file's used size before and after (None on a
    server), whether a reader kept the WAL from being truncated, and how long it took."""

    erased: tuple[str, ...]
    messages: int
    batches: int
    used_bytes_before: int | None
    used_bytes_after: int | None
    wal_blocked: bool
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The report as plain values (lists for tuples)."""
        record = asdict(self)
        record["erased"] = list(self.erased)
        return record


def used_bytes() -> int | None:
    """The bytes of the file that hold data (pages in use), or None on a server."""
    db = current()
    if not isinstance(db, SqliteFile):
        return None
    conn = db.connection()
    pages = int(conn.execute(sqlite_sql.PAGE_COUNT).fetchone()[0])
    free = int(conn.execute(sqlite_sql.FREELIST_COUNT).fetchone()[0])
    size = int(conn.execute(sqlite_sql.PAGE_SIZE).fetchone()[0])
    return (pages - free) * size


def _candidates(policy: RetentionPolicy) -> Any:
    """Sessions the policy's filters let retention touch, oldest first."""
    query = Session.select(Session.id).where(Session.ended_at.is_null(False))
    if policy.sources:
        query = query.where(Session.source.in_(list(policy.sources)))
    if policy.archived_only:
        query = query.where(Session.archived == 1)
    if file_has("sessions", "pinned"):
        query = query.where(fn.COALESCE(Session.pinned, 0) == 0)
    return query.order_by(Session.started_at, Session.id)


def _ids(query: Any) -> list[str]:
    return [str(row[0]) for row in cast("Iterable[Any]", query.tuples())]


def _text_bytes() -> dict[str, int]:
    """Characters of stored text per session (content, tool calls, tool name)."""
    size = (
        fn.COALESCE(fn.LENGTH(Message.content), 0)
        + fn.COALESCE(fn.LENGTH(Message.tool_calls), 0)
        + fn.COALESCE(fn.LENGTH(Message.tool_name), 0)
    )
    query = Message.select(Message.session, fn.SUM(size)).group_by(Message.session)
    return {str(sid): int(total or 0) for sid, total in query.tuples()}


def _by_size(policy: RetentionPolicy, taken: Sequence[str], used: int) -> tuple[list[str], int]:
    """The oldest further candidates to erase so the file's used size is estimated to fit
    ``policy.max_bytes``, and that estimate.

    Each session is taken to hold the file's used bytes in proportion to its share
    of the stored text (the indexes and the row overhead grow with the text); the
    erase then measures, and :func:`retain` goes on while the file is still over."""
    assert policy.max_bytes is not None
    sizes = _text_bytes()
    total = sum(sizes.values())
    if total == 0 or used <= policy.max_bytes:
        return [], used
    per_char = used / total
    remaining = used - sum(sizes.get(sid, 0) for sid in taken) * per_char
    gone = set(taken)
    chosen: list[str] = []
    for sid in _ids(_candidates(policy)):
        if remaining <= policy.max_bytes:
            break
        if sid in gone:
            continue
        chosen.append(sid)
        remaining -= sizes.get(sid, 0) * per_char
    return chosen, max(int(remaining), 0)


def plan_retention(policy: RetentionPolicy) -> RetentionPlan:
    """What :func:`retain` would erase now under ``policy``.

    Raises:
        ValueError: a size limit on a PostgreSQL store (its size is not one file's).
    """
    used = used_bytes()
    if policy.max_bytes is not None and used is None:
        raise ValueError(
            "a size limit applies to a SQLite file; on a server, limit by age or source"
        )
    if policy.started_before is not None:
        by_age = _ids(_candidates(policy).where(Session.started_at < policy.started_before))
    elif policy.max_bytes is None:
        by_age = _ids(_candidates(policy))
    else:
        by_age = []
    if policy.max_bytes is None or used is None:
        return RetentionPlan(by_age, [], used, None)
    by_size, estimate = _by_size(policy, by_age, used)
    return RetentionPlan(by_age, by_size, used, estimate)


def retain(
    policy: RetentionPolicy, *, batch_size: int = BATCH_SIZE, sessions_dir: Any = None
) -> RetentionReport:
    """Erase what ``policy`` lets go, ``batch_size`` sessions per erase.

    Each batch is one deletion (its own short write, then a pause of
    :data:`~hermes_models.store.writes.YIELD_PAUSE_S`: a gateway beside it waits for
    one batch at most); then the text of them all is scrubbed from the indexes and
    the WAL once, in short steps (:func:`~.maintenance.scrub_deleted`). With a size
    limit the file is measured after the planned sessions are erased and, while it
    is still over, the next oldest go, a batch and a scrub at a time, until it fits
    or no candidate is left. The file itself keeps its
    size (freed pages are zeroed and reused); ``hermes-models vacuum`` returns them.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, not {batch_size!r}")
    started = time.monotonic()
    plan = plan_retention(policy)
    before = plan.used_bytes
    erased: list[str] = []
    messages = 0
    batches = 0

    # A pause after every batch (each holds the lock for about a quarter of a second):
    # a gateway waiting for the lock gets it between two batches, not after several.
    handle = current()
    pacer = Pacer(after_s=0.0, db=handle if isinstance(handle, SqliteFile) else None)

    def run(ids: Sequence[str]) -> None:
        nonlocal messages, batches
        for offset in range(0, len(ids), batch_size):
            erase = functools.partial(
                erase_sessions,
                ids[offset : offset + batch_size],
                sessions_dir=sessions_dir,
                scrub=False,
            )
            report: EraseReport = pacer.run(erase)
            erased.extend(report.sessions)
            messages += report.messages
            batches += 1

    def scrub() -> bool:
        # Once after the batches (their text gone from the indexes and the WAL): merging
        # an index after each batch would rewrite it as many times.
        return bool(scrub_deleted()["wal_blocked"])

    run(plan.targets)
    blocked = scrub() if batches else False
    if policy.max_bytes is not None:
        while True:
            used = used_bytes()
            if used is None or used <= policy.max_bytes:
                break
            gone = set(erased)
            more = [sid for sid in _ids(_candidates(policy)) if sid not in gone][:batch_size]
            if not more:
                break
            run(more)
            blocked = scrub()
    return RetentionReport(
        erased=tuple(dict.fromkeys(erased)),
        messages=messages,
        batches=batches,
        used_bytes_before=before,
        used_bytes_after=used_bytes(),
        wal_blocked=blocked,
        seconds=time.monotonic() - started,
    )
