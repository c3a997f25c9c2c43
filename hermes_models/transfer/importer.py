"""Adding a bundle's sessions to a store: which rows, which ids, written in steps.

Import adds the sessions the target lacks, with their messages; a session
the target already has is left exactly as it is, messages included, so
importing twice is the same as importing once. Message ids are kept unless
one of a session's ids is taken in the target: then that session's
messages get fresh ids after the largest one, in their original order.
Titles are unique: an imported session whose title another session has
gets the next free ``"title #N"``. ``message_count`` and ``tool_call_count``
are computed from the imported messages, never taken from the bundle.

The bundle is read and checked completely before anything is written
(:mod:`hermes_models.transfer.bundle_reader`), keeping a summary of each session
and writing the checked session rows to a private temporary file; then it
is read again as the messages are written, and the sessions are read back
from that file as they are added: memory does not grow with the bundle.
Writing happens in short transactions that let other writers in, and
imported sessions appear only once complete (:mod:`hermes_models.transfer.staging`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from ..errors import BundleError
from ..store import SqliteFile, current, postgres_sql, sqlite_sql
from .bundle import MESSAGE_COLUMNS, SESSION_COLUMNS, Progress, existing_ids, raw
from .bundle_reader import Scan, Source, kept_sessions, message_rows, open_source, scan
from .pg_staging import ServerStaging, write_at_once_server
from .staging import SMALL_IMPORT, SessionSource, Staging, write_at_once


def _refuse_missing_parents(plan: Scan, new: list[str]) -> None:
    wanted = sorted({plan.parents[s] for s in new if s in plan.parents} - plan.lines.keys())
    missing = set(wanted) - existing_ids("sessions", wanted)
    for session_id in new:
        if plan.parents.get(session_id) in missing:
            raise BundleError(
                f"{plan.origin}:{plan.lines[session_id]}: session {session_id!r} has parent "
                f"{plan.parents[session_id]!r}, which neither the bundle nor the database holds"
            )


def _sessions(keep: IO[bytes], plan: Scan, new: list[str]) -> SessionSource:
    """The new sessions, their rows read back from the file the check kept them in."""
    wanted = set(new)

    def rows() -> Iterator[dict[str, Any]]:
        for values in kept_sessions(keep):
            if values[0] in wanted:
                yield dict(zip(SESSION_COLUMNS, values))

    return SessionSource([(s, plan.titles.get(s)) for s in new], rows)


def _clashing(source: Source, plan: Scan, new_ids: set[str]) -> set[str]:
    """The new sessions with a message id the target already uses."""
    overlap = raw(sqlite_sql.MESSAGE_IDS_BETWEEN, [plan.first_id, plan.last_id]).fetchone()[0]
    if not overlap:
        return set()
    clashing: set[str] = set()
    pending: dict[int, str] = {}

    def check() -> None:
        for taken in existing_ids("messages", list(pending)):
            clashing.add(pending[taken])
        pending.clear()

    for _, values in message_rows(source):
        if values[1] in new_ids and values[1] not in clashing:
            pending[values[0]] = values[1]
            if len(pending) >= 5000:
                check()
    check()
    return clashing


def _rows(source: Source, new_ids: set[str], moved: set[str], base: int) -> Iterator[Any]:
    """The message rows to insert, in bundle order; ``moved`` sessions' rows renumbered."""
    next_id = base
    for _, values in message_rows(source):
        if values[1] not in new_ids:
            continue
        if values[1] in moved:
            next_id += 1
            values = (next_id, *values[1:])
        yield values


def _renumber(rows: list[Any], moved: set[str]) -> list[Any]:
    """``rows`` with those of ``moved`` sessions given ids after every id used (in a write)."""
    if not moved:
        return rows
    sequence = raw(sqlite_sql.MESSAGE_SEQUENCE).fetchone()
    highest = raw(sqlite_sql.HIGHEST_MESSAGE_ID).fetchone()[0]
    kept = [values[0] for values in rows if values[1] not in moved]
    next_id = max(int(sequence[0]) if sequence else 0, int(highest), *kept)
    out = []
    for values in rows:
        if values[1] in moved:
            next_id += 1
            values = (next_id, *values[1:])
        out.append(values)
    return out


def _refuse_binary(where: str, kind: str, columns: Sequence[str], values: Sequence[Any]) -> None:
    """A PostgreSQL store's columns are text: a ``$base64`` value cannot go in."""
    for column, value in zip(columns, values):
        if type(value) is bytes:
            raise BundleError(
                f"{where}: {kind} {column} holds binary data ($base64), which a PostgreSQL"
                " store cannot hold (its columns are text); nothing was imported"
            )


def _server_rows(source: Source, new_ids: set[str]) -> Iterator[Any]:
    """The message rows to insert, in bundle order, refused if one holds binary data."""
    for where, values in message_rows(source):
        if values[1] in new_ids:
            _refuse_binary(where, "message", MESSAGE_COLUMNS, values)
            yield values


def _import_on_server(
    db: Any,
    reader: Source,
    plan: Scan,
    new: list[str],
    sessions: SessionSource,
    counts: dict[str, int],
    step: Callable[[int], None],
) -> None:
    """Write the new sessions into a PostgreSQL store (:mod:`hermes_models.transfer.pg_staging`):
    message ids are kept, and the rows of a session with a taken id are renumbered as
    they are added."""
    new_ids = set(new)
    for values in sessions.rows():
        where = f"{plan.origin}:{plan.lines[values['id']]}"
        _refuse_binary(where, "session", list(values), list(values.values()))
    if counts["messages_added"] <= SMALL_IMPORT and len(new) <= SMALL_IMPORT:
        rows = list(_server_rows(reader, new_ids))
        renamed, renumbered = write_at_once_server(
            db, list(sessions.rows()), MESSAGE_COLUMNS, lambda: rows, rename_titles=True
        )
        step(len(new) + len(rows))
    else:
        reserve = plan.last_id if counts["messages_added"] else 0
        with ServerStaging(db, new, reserve_upto=reserve) as staging:
            staging.insert_messages(_server_rows(reader, new_ids), MESSAGE_COLUMNS, step)
            renamed = staging.finish(sessions, rename_titles=True)
            renumbered = staging.renumbered
        # Statistics for what a large import added, as copy takes them after a load:
        # until autovacuum's next look (a minute or more), a planner that believes the
        # tables hold what they held before walks a chain of the new sessions with a
        # hash join per step, quadratic in its length (10,000 links: 13 s, 22 ms after).
        db.execute_sql(postgres_sql.ANALYZE)
        step(len(new))
    counts["titles_renamed"] = renamed
    counts["messages_renumbered"] = renumbered


def import_bundle(
    source: str | os.PathLike[str] | IO[str], progress: Progress | None = None
) -> dict[str, int]:
    """Add the sessions of a bundle (path or text stream) the database lacks.

    Returns counts: ``sessions_added``, ``sessions_skipped`` (already present),
    ``messages_added``, ``messages_skipped``, ``messages_renumbered`` and
    ``titles_renamed`` (a title another session here has gets ``" #N"``).

    Raises:
        BundleError: the bundle is malformed, truncated or newer than this
            package, or a session's parent is in neither the bundle nor the database.
        ImportConflictError: another import into the file is running.
    """
    db = current()
    with open_source(source) as reader, tempfile.TemporaryFile() as keep:
        plan = scan(reader, keep)
        present = existing_ids("sessions", list(plan.lines))
        new = [session_id for session_id in plan.lines if session_id not in present]
        _refuse_missing_parents(plan, new)
        new_ids = set(new)
        adding = sum(plan.messages[session_id] for session_id in new_ids)
        counts = {
            "sessions_added": len(new),
            "sessions_skipped": plan.session_total - len(new),
            "messages_added": adding,
            "messages_skipped": plan.message_total - adding,
            "messages_renumbered": 0,
            "titles_renamed": 0,
        }
        if not new:
            return counts
        total, done = len(new) + adding, 0

        def step(rows: int) -> None:
            nonlocal done
            done += rows
            if progress is not None:
                progress(done, total)

        sessions = _sessions(keep, plan, new)
        if not isinstance(db, SqliteFile):
            _import_on_server(db, reader, plan, new, sessions, counts, step)
            return counts
        if adding <= SMALL_IMPORT and len(new) <= SMALL_IMPORT:
            rows = list(_rows(reader, new_ids, set(), 0))
            moved: set[str] = set()

            def renumbered_rows() -> list[Any]:
                # Inside the write: which ids are taken, and what comes after the largest.
                taken = existing_ids("messages", [r[0] for r in rows])
                moved.clear()
                moved.update(r[1] for r in rows if r[0] in taken)
                return _renumber(rows, moved)

            renamed = write_at_once(
                db, list(sessions.rows()), MESSAGE_COLUMNS, renumbered_rows, rename_titles=True
            )
            if renamed is not None:
                counts["titles_renamed"] = renamed
                counts["messages_renumbered"] = sum(plan.messages[s] for s in moved)
                step(total)
                return counts
        with Staging(db, new, reserve_upto=plan.last_id if adding else 0) as staging:
            moved = _clashing(reader, plan, new_ids) if adding else set()
            renumbered = sum(plan.messages[session_id] for session_id in moved)
            base = staging.reserve(renumbered) if renumbered else 0
            staging.insert_messages(_rows(reader, new_ids, moved, base), MESSAGE_COLUMNS, step)
            counts["titles_renamed"] = staging.finish(sessions, rename_titles=True)
        counts["messages_renumbered"] = renumbered
        step(len(new))
        return counts
