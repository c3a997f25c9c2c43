"""Deleting, pruning and compacting the store.

Deleting a session takes its subagent runs with it, recursively: their
messages, their own subagent runs, everything. Branches and compression
continuations of a deleted session survive as roots of their own
(``parent_session_id`` set to NULL). Each deletion is one transaction, so
foreign keys are never left dangling and a failure deletes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

from peewee import SQL, fn

from .checks import check_finite, check_text
from .db import current, write
from .errors import ReadOnlyDatabaseError
from .lineage import ephemeral_expr, walk_sessions
from .models import CompressionLock, Message, Session

#: Sessions without messages younger than this are left alone by
#: :func:`empty_sessions` unless they ended: another process may be filling them.
EMPTY_GRACE_S = 24 * 3600.0


def doomed_ids(session_ids: Iterable[str]) -> list[str]:
    """``session_ids`` plus every ephemeral descendant reached through ephemeral links."""
    ids = sorted({sid for sid in session_ids if isinstance(sid, str) and sid})
    if not ids:
        return []
    walk = walk_sessions(Session, Session.id.in_(ids), upward=False, follow=ephemeral_expr)
    rows = walk.select_from(walk.c.id).distinct().tuples()
    return sorted({str(row[0]) for row in rows})


def _chunks(ids: list[str], size: int = 500) -> Iterable[list[str]]:
    for offset in range(0, len(ids), size):
        yield ids[offset : offset + size]


def _delete_now(session_ids: Iterable[str]) -> int:
    """Delete inside the caller's write; returns how many sessions went."""
    doomed = doomed_ids(session_ids)
    deleted = 0
    for chunk in _chunks(doomed):
        # Children that stay become roots; links among the doomed are cut so
        # that the chunks can go in any order.
        Session.update(parent=None).where(Session.parent.in_(chunk)).execute()
        Session.update(parent=None).where(Session.id.in_(chunk)).execute()
        Message.delete().where(Message.session.in_(chunk)).execute()
        CompressionLock.delete().where(CompressionLock.session_id.in_(chunk)).execute()
    for chunk in _chunks(doomed):
        deleted += int(Session.delete().where(Session.id.in_(chunk)).execute())
    return deleted


def delete_sessions(session_ids: Iterable[str]) -> int:
    """Delete sessions with their subagent runs in one transaction; returns how many
    of the given sessions existed."""
    wanted = [sid for sid in session_ids if isinstance(sid, str) and sid]

    def run() -> int:
        present = Session.select(fn.COUNT(Session.id)).where(Session.id.in_(wanted)).scalar()
        _delete_now(wanted)
        return int(present or 0)

    return int(write(run)) if wanted else 0


def prune(older_than_days: float = 90, source: str | None = None) -> int:
    """Delete ended sessions that started more than ``older_than_days`` ago.

    Their subagent runs go with them; other children are kept. Returns how
    many sessions matched.
    """
    days = check_finite(older_than_days, "older_than_days")
    if days < 0:
        raise ValueError(f"older_than_days must not be negative, got {older_than_days}")
    check_text(source, "source", optional=True)
    cutoff = time.time() - days * 86400.0

    def run() -> int:
        query = Session.select(Session.id).where(
            Session.ended_at.is_null(False), Session.started_at < cutoff
        )
        if source is not None:
            query = query.where(Session.source == source)
        ids = [str(row[0]) for row in cast(Iterable[Any], query.tuples())]
        _delete_now(ids)
        return len(ids)

    return int(write(run))


def empty_sessions() -> Any:
    """Sessions without any message that ended, or started over a day ago."""
    has_message = fn.EXISTS(Message.select(SQL("1")).where(Message.session == Session.id))
    return Session.select(Session.id).where(
        ~has_message,
        Session.ended_at.is_null(False) | (Session.started_at < time.time() - EMPTY_GRACE_S),
    )


def delete_empty_sessions() -> int:
    """Delete :func:`empty_sessions` (with their subagent runs); returns how many."""

    def run() -> int:
        ids = [row[0] for row in empty_sessions().tuples()]
        _delete_now(ids)
        return len(ids)

    return int(write(run))


def optimize_fts() -> int:
    """Merge the segments of each full-text index; returns how many were optimized."""
    from .fts import present_indexes

    models = present_indexes()
    write(lambda: [model.optimize() for model in models])
    return len(models)


def vacuum() -> None:
    """Checkpoint the WAL, rebuild the file compactly, and checkpoint again."""
    db = current()
    if db.read_only:
        raise ReadOnlyDatabaseError(f"{db.path} was opened read-only; VACUUM is refused")
    db.checkpoint("TRUNCATE")
    db.execute_sql("VACUUM")
    db.checkpoint("TRUNCATE")
