"""Deleting, pruning and compacting the store.

What a deletion takes is decided by tags alone, never by timestamps, as in
Hermes: deleting a session takes with it the sessions tagged as its subagent
runs (``model_config._delegate_from``), recursively - a row whose tag names a
deleted session, or a tagged row whose parent is deleted. Every other child
(a branch, a compression continuation, an untagged child of any age) is
orphaned: ``parent_session_id`` becomes NULL and it keeps its messages.
Pruning and the empty-session sweeps take only the sessions that match them
and never cascade.

Each deletion is one transaction, so foreign keys are never left dangling
and a failure deletes nothing. Transcript files in a ``sessions_dir`` are
removed after the commit.

What a deletion would do can be asked first (:func:`plan_delete`,
:func:`plan_prune`): the plans are built from the same selections and the
same cascade the deletions use.

Erasing (:func:`erase_sessions`) is a deletion by the same rules that also
leaves none of the deleted text behind in the store: in the search indexes'
older segments, in the file's free pages, in its WAL (see
:meth:`hermes_models.store.Backend.erase_traces`). :func:`sessions_to_erase`
picks the sessions to ask for by source, age and title.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, cast

import peewee
from peewee import SQL, fn

from ..checks import check_days, check_flag, check_folder, check_text, check_timestamp
from ..driver import sqlite3
from ..errors import ReadOnlyDatabaseError
from ..models import AUTO_PRUNE_KEY, CompressionLock, Message, Session, marker, parse_when
from ..store import (
    Prepared,
    among,
    current,
    fetch_dicts,
    refuse_newer_schema,
    write_deletion,
)

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Protocol

    class Upkeep(Protocol):
        """What :func:`auto_prune_and_vacuum` works through (a ``SessionDB``)."""

        def get_meta(self, key: str) -> str | None: ...

        def set_meta(self, key: str, value: str | None) -> None: ...

        def prune_sessions(
            self, older_than_days: float = 90, source: str | None = None, sessions_dir: Any = None
        ) -> int: ...

        def vacuum(self) -> int: ...


logger = logging.getLogger("hermes_models")

#: The tag Hermes gives parentless subagent runs whose parent is unknown; it
#: names no session, so it never makes a session a subagent run of another.
ORPHANED = "__orphaned__"

#: How old (by ``started_at``) an empty TUI session must be before
#: :func:`prune_empty_ghost_sessions` removes it.
GHOST_AGE_S = 24 * 3600.0

#: Ids per ``IN (...)`` list.
_CHUNK = 500


def _chunks(ids: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    for offset in range(0, len(ids), size):
        yield ids[offset : offset + size]


def _wanted(session_ids: Iterable[Any]) -> list[str]:
    """The non-empty string ids of ``session_ids``, each once, in their first order."""
    return list(dict.fromkeys(sid for sid in session_ids if isinstance(sid, str) and sid))


def _ids(query: Any) -> list[str]:
    """The first column of ``query``'s rows, as text."""
    return [str(row[0]) for row in cast("Iterable[Any]", query.tuples())]


def _existing(ids: Sequence[str]) -> list[str]:
    """The sessions of ``ids`` that exist, in the order given (one statement)."""
    if not ids:
        return []
    for sid in ids:
        # Text with a lone surrogate is refused (UnicodeEncodeError, which SessionDB
        # names by its argument), as binding it to SQLite refuses it: the JSON list
        # among() binds on a file would carry it escaped.
        sid.encode("utf-8")
    found = set(_ids(Session.select(Session.id).where(among(Session.id, ids))))
    return [sid for sid in ids if sid in found]


def delegate_descendants(session_ids: Iterable[str]) -> list[str]:
    """The subagent runs below ``session_ids``, breadth first, as Hermes collects them.

    From the given sessions, repeatedly take the rows whose ``_delegate_from``
    names a session of the last round, and the rows whose parent is one of
    them and which carry any ``_delegate_from``. The given sessions are never
    returned, and a cycle of tags ends the walk.

    One statement, however deep the runs nest: a recursive CTE over the links
    a tagged row has (its tag, its parent) collects every row reached (``UNION``
    keeps each once, so a cycle ends it), with those links; the rounds, each
    sorted, are then taken in Python over the rows found.
    """
    starts = _wanted(session_ids)
    if not starts:
        return []
    # The links into tagged rows: (from, to) for the session the tag names
    # (never the tag of parentless runs, ORPHANED) and for the parent.
    tagged = Session.alias("tagged")
    tag = marker(tagged.model_config, "_delegate_from")
    by_tag = tagged.select(tag.alias("src"), tagged.id.alias("dst")).where(
        tag.is_null(False), tag != ORPHANED
    )
    by_parent = tagged.select(tagged.parent.alias("src"), tagged.id.alias("dst")).where(
        tag.is_null(False), tagged.parent.is_null(False)
    )
    links = (by_tag | by_parent).cte("delegate_links", columns=("src", "dst"))
    # Plain selects: a CTE's own select_from() would repeat its WITH inside the walk.
    first = peewee.Select((links,), (links.c.dst,)).where(among(links.c.src, starts))
    reached = first.cte("delegate_reached", recursive=True, columns=("id",))
    step = peewee.Select((links,), (links.c.dst,)).join(reached, on=(links.c.src == reached.c.id))
    walk = reached.union(step)
    query = (
        peewee.Select((links,), (links.c.src, links.c.dst))
        .join(walk, on=(links.c.dst == walk.c.id))
        .with_cte(links, walk)
    )
    below: dict[str, list[str]] = {}
    for src, dst in current().execute(query).fetchall():
        if isinstance(src, str):  # a tag that is not text names no session
            below.setdefault(src, []).append(str(dst))
    visited = set(starts)
    frontier = sorted(visited)
    found: list[str] = []
    while frontier:
        step_ids = {dst for src in frontier for dst in below.get(src, ())}
        frontier = sorted(step_ids - visited)
        visited.update(frontier)
        found.extend(frontier)
    return found


def _delete_rows(doomed: Sequence[str]) -> int:
    """Delete ``doomed`` inside the caller's write, orphaning every other child of
    them; returns how many sessions went (four statements, however many)."""
    if not doomed:
        return 0
    # Children that stay become roots; links among the doomed are cut too.
    Session.update(parent=None).where(among(Session.parent, doomed)).execute()
    Message.delete().where(among(Message.session, doomed)).execute()
    CompressionLock.delete().where(among(CompressionLock.session_id, doomed)).execute()
    return int(Session.delete().where(among(Session.id, doomed)).execute())


# -- transcript files ------------------------------------------------------------------------


def sessions_folder(sessions_dir: Any) -> Path | None:
    """``sessions_dir`` as a path (None when not given).

    Raises:
        TypeError: it is neither a path nor a string.
    """
    return check_folder(sessions_dir, "sessions_dir")


def _plain_name(session_id: str) -> bool:
    """True when ``session_id`` can be part of a file name inside one folder."""
    separators = {"/", "\x00", os.sep, os.altsep or "/"}
    return session_id not in ("", ".", "..") and not any(s in session_id for s in separators)


def _dump_owners(name: str, session_id: str) -> list[str]:
    """Longer session ids a ``request_dump_<id>_<suffix>.json`` file of ``session_id``
    could also belong to (``abc_def`` for ``request_dump_abc_def_1.json`` of ``abc``)."""
    middle = name[len("request_dump_") : -len(".json")]
    return [
        middle[:index] for index in range(len(session_id) + 1, len(middle)) if middle[index] == "_"
    ]


def remove_transcript_files(sessions_dir: Path, session_ids: Iterable[str]) -> None:
    """Remove ``<id>.json``, ``<id>.jsonl`` and ``request_dump_<id>_*.json`` of each
    id from ``sessions_dir``; errors are ignored.

    Only files directly in ``sessions_dir`` whose names are exactly these are
    touched: an id holding a path separator removes nothing, glob characters
    in an id are plain characters, and a dump that could equally belong to a
    session that still exists (``request_dump_abc_def_1.json`` when deleting
    ``abc`` while ``abc_def`` exists) is kept.
    """
    ids = [sid for sid in _wanted(session_ids) if _plain_name(sid)]
    if not ids:
        return
    try:
        names = sorted(os.listdir(sessions_dir))
    except (OSError, ValueError):
        return
    present = set(names)
    doomed: list[str] = []
    dumps: dict[str, list[str]] = {}
    for sid in ids:
        doomed += [name for name in (f"{sid}.json", f"{sid}.jsonl") if name in present]
        prefix = f"request_dump_{sid}_"
        for name in names:
            if name.startswith(prefix) and name.endswith(".json") and len(name) >= len(prefix) + 5:
                dumps[name] = _dump_owners(name, sid)
    others = sorted({owner for owners in dumps.values() for owner in owners})
    alive = set(_existing(others)) if others else set()
    doomed += [name for name, owners in dumps.items() if not alive.intersection(owners)]
    for name in doomed:
        try:
            os.unlink(os.path.join(sessions_dir, name))
        except OSError as exc:
            logger.debug("could not remove %s from %s: %s", name, sessions_dir, exc)


def _after_commit_remove(sessions_dir: Path | None, ids: list[str]) -> None:
    """Inside a write: remove the transcript files of ``ids`` once it commits."""
    if sessions_dir is None or not ids:
        return
    db: Any = current()
    db.after_commit(lambda: remove_transcript_files(sessions_dir, ids))


# -- deleting ------------------------------------------------------------------------------


def delete_sessions(session_ids: Iterable[Any], *, sessions_dir: Any = None) -> int:
    """Delete sessions with their subagent runs in one transaction; returns how many
    of the given sessions existed.

    Entries that are not non-empty strings are skipped and repeated ids count
    once; nothing to delete touches nothing. With ``sessions_dir``, the
    transcript files of every deleted session (subagent runs included) are
    removed after the commit.
    """
    wanted = _wanted(session_ids)
    folder = sessions_folder(sessions_dir)
    if not wanted:
        return 0

    def run() -> int:
        present = _existing(wanted)
        if not present:
            return 0
        doomed = present + delegate_descendants(present)
        _delete_rows(doomed)
        _after_commit_remove(folder, doomed)
        return len(present)

    return int(write_deletion(run))


def delete_session(session_id: str, *, sessions_dir: Any = None) -> bool:
    """Delete one session with its subagent runs; True if it existed."""
    check_text(session_id, "session_id")
    return delete_sessions([session_id], sessions_dir=sessions_dir) > 0


def _delete_matching(query: Any, sessions_dir: Any) -> int:
    """Delete the sessions ``query`` selects (their ids), orphaning their children;
    returns how many."""
    folder = sessions_folder(sessions_dir)

    def run() -> int:
        ids = _ids(query)
        deleted = _delete_rows(ids)
        _after_commit_remove(folder, ids)
        return deleted

    return int(write_deletion(run))


def _old_sessions_args(older_than_days: float, source: str | None) -> tuple[float, bool]:
    """The start cutoff of :func:`old_sessions`, and whether one source is asked for."""
    days = check_days(older_than_days, "older_than_days")
    if source is not None:
        check_text(source, "source")
    return time.time() - days * 86400.0, source is not None


def _old_sessions_query(cutoff: Any, source: Any = None) -> Any:
    query = Session.select(Session.id).where(
        Session.ended_at.is_null(False), Session.started_at < cutoff
    )
    return query if source is None else query.where(Session.source == source)


def old_sessions(older_than_days: float = 90, source: str | None = None) -> Any:
    """Ended sessions that started more than ``older_than_days`` ago (of ``source``)."""
    cutoff, _ = _old_sessions_args(older_than_days, source)
    return _old_sessions_query(cutoff, source)


# Prunes run on every start of an agent and mostly find nothing; these statements
# answer that in one read, rendered once per file structure (see Prepared).
#: One old session (by whether a source is given), if any.
_OLD_SESSION = {
    False: Prepared(lambda cutoff: _old_sessions_query(cutoff).limit(1), "cutoff"),
    True: Prepared(
        lambda cutoff, source: _old_sessions_query(cutoff, source).limit(1), "cutoff", "source"
    ),
}


def prune(
    older_than_days: float = 90, source: str | None = None, *, sessions_dir: Any = None
) -> int:
    """Delete ended sessions that started more than ``older_than_days`` ago; returns
    how many were deleted.

    Only the matching sessions go: their children, whatever they are, are
    orphaned and keep their messages.
    """
    cutoff, one_source = _old_sessions_args(older_than_days, source)
    if sessions_dir is not None:
        sessions_folder(sessions_dir)  # a bad folder is refused whatever matches
    db = current()
    db.refuse_writes()
    if _OLD_SESSION[one_source].first(db, cutoff=cutoff, source=source) is None:
        # Nothing matched in a read: no write transaction to take (the common case).
        return 0
    return _delete_matching(_old_sessions_query(cutoff, source), sessions_dir)


# -- plans: what a deletion would do -------------------------------------------------------


@dataclass(frozen=True)
class DeletionPlan:
    """What a deletion does: the sessions asked for or matched, every session that goes
    with them (those plus their tagged subagent runs), the children that stay, as
    roots, how many messages go, and how many the store holds."""

    targets: list[str]
    deleted: list[str]
    orphaned: list[str]
    messages: int
    store_messages: int


def _plan(targets: list[str], deleted: list[str]) -> DeletionPlan:
    gone = set(deleted)
    orphaned: set[str] = set()
    messages = 0
    for chunk in _chunks(sorted(gone)):
        children = Session.select(Session.id).where(Session.parent.in_(chunk))
        orphaned.update(sid for sid in _ids(children) if sid not in gone)
        messages += int(Message.select().where(Message.session.in_(chunk)).count())
    total = int(Message.select().count())
    return DeletionPlan(targets, deleted, sorted(orphaned), messages, total)


def plan_delete(session_ids: Iterable[Any]) -> DeletionPlan:
    """What :func:`delete_sessions` would do with ``session_ids`` now."""
    present = _existing(_wanted(session_ids))
    return _plan(present, present + delegate_descendants(present))


def plan_prune(older_than_days: float = 90, source: str | None = None) -> DeletionPlan:
    """What :func:`prune` would do now with the same arguments."""
    matched = _ids(old_sessions(older_than_days, source))
    return _plan(matched, matched)


def describe(session_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of ``session_ids`` (as ``SessionDB.get_session`` gives them), in id order."""
    rows: list[dict[str, Any]] = []
    for chunk in _chunks(sorted(set(session_ids))):
        rows.extend(fetch_dicts(Session.select().where(Session.id.in_(chunk))))
    return sorted(rows, key=lambda row: str(row["id"]))


def _no_message() -> Any:
    return ~fn.EXISTS(Message.select(SQL("1")).where(Message.session == Session.id))


def empty_sessions() -> Any:
    """Sessions Hermes counts as empty: no message, ended, not archived.

    "No message" holds only when the counter says 0 *and* no message row
    (rewound ones included) exists: a counter that disagrees with the rows
    keeps the session.
    """
    return Session.select(Session.id).where(
        Session.message_count == 0,
        Session.ended_at.is_null(False),
        Session.archived == 0,
        _no_message(),  # last: the row's own columns rule most sessions out first
    )


_EMPTY_COUNT = Prepared(
    lambda: empty_sessions().select(fn.COUNT(SQL("*")))  # same rows as empty_sessions()
)


def count_empty_sessions() -> int:
    """How many sessions :func:`empty_sessions` selects."""
    return int(_EMPTY_COUNT.scalar(current()))


def delete_empty_sessions(*, sessions_dir: Any = None) -> int:
    """Delete :func:`empty_sessions`, orphaning their children; returns how many."""
    return _delete_matching(empty_sessions(), sessions_dir)


def delete_session_if_empty(session_id: str, *, sessions_dir: Any = None) -> bool:
    """Delete a session only if it has no title, no message and no child; True if
    it was deleted. The check and the delete are one transaction."""
    check_text(session_id, "session_id")
    child = Session.alias("child")
    query = Session.select(Session.id).where(
        Session.id == session_id,
        Session.title.is_null(),
        _no_message(),
        ~fn.EXISTS(child.select(SQL("1")).where(child.parent == Session.id)),
    )
    return _delete_matching(query, sessions_dir) > 0


def ghost_sessions() -> Any:
    """Empty TUI sessions: no title, ended, started over a day ago, no message."""
    return Session.select(Session.id).where(
        Session.source == "tui",
        Session.title.is_null(),
        Session.ended_at.is_null(False),
        Session.started_at < time.time() - GHOST_AGE_S,
        _no_message(),
    )


def prune_empty_ghost_sessions(*, sessions_dir: Any = None) -> int:
    """Delete :func:`ghost_sessions`, orphaning their children; returns how many."""
    return _delete_matching(ghost_sessions(), sessions_dir)


# -- erasing: a deletion that leaves no trace of the text ------------------------------------


@dataclass(frozen=True)
class EraseReport:
    """What :func:`erase_sessions` did.

    ``sessions``: every session erased, the given ones that existed (in the order
    given) then their subagent runs (breadth first, as the deletion finds them);
    ``requested``: those of the given ids that existed; ``orphaned``: children that
    stayed, as roots (branches, continuations: never erased with their parent);
    ``messages``: how many messages went; ``indexes_merged``: the search indexes merged
    so that no segment still holds an erased term; ``wal_truncated``: the file's
    ``-wal`` is empty; ``wal_blocked``: a reader kept the checkpoint from finishing
    (the erased text may stay in the WAL until the next checkpoint that finishes);
    ``vacuumed``: the server's tables vacuumed (PostgreSQL); ``notes``: what could not
    be done, as sentences; ``seconds``: how long it took.
    """

    sessions: tuple[str, ...]
    messages: int
    indexes_merged: tuple[str, ...]
    wal_truncated: bool
    wal_blocked: bool
    seconds: float
    requested: tuple[str, ...] = ()
    orphaned: tuple[str, ...] = ()
    vacuumed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The report as a dict of plain values (tuples as lists)."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in asdict(self).items()
        }


def erase_sessions(
    session_ids: Iterable[Any], *, sessions_dir: Any = None, scrub: bool = True
) -> EraseReport:
    """Delete sessions with their subagent runs, by the rules of :func:`delete_sessions`
    (one transaction; every other child orphaned; never by timestamps), and leave none
    of their text in the store.

    On a SQLite file the deletion overwrites what it frees (``secure_delete``, on every
    connection of the package); then the gram index takes out what it holds of every
    deleted or changed message, each full-text index (words, trigrams, grams) is merged
    into one segment so that no older one still holds an erased term, and the WAL is
    checkpointed and emptied (``wal_checkpoint(TRUNCATE)``) unless a reader blocks it:
    ``wal_blocked`` then says so. On PostgreSQL the rows and their index entries go and
    the two tables are vacuumed when the role may (docs/postgresql.md says what the
    server still keeps). With ``sessions_dir``, the transcript files of every erased
    session are removed after the commit.

    The merge and the checkpoint also run when none of the ids exists (an erase run
    again finishes what a blocked one left). Entries that are not non-empty strings are
    skipped; no entry at all touches nothing. ``scrub=False`` leaves the merge and the
    checkpoint to the caller (:func:`scrub_deleted`), for several erases in a row.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
        SchemaTooNewError: the file is newer than the v16 schema this package writes.
    """
    started = time.monotonic()
    wanted = _wanted(session_ids)
    folder = sessions_folder(sessions_dir)
    if not wanted:
        return EraseReport((), 0, (), False, False, time.monotonic() - started)
    db = current()
    db.refuse_writes()

    def run() -> tuple[list[str], list[str], DeletionPlan | None]:
        present = _existing(wanted)
        if not present:
            return [], [], None
        doomed = present + delegate_descendants(present)
        plan = _plan(present, doomed)
        _delete_rows(doomed)
        _after_commit_remove(folder, doomed)
        return present, doomed, plan

    present, doomed, plan = write_deletion(run)
    traces = db.erase_traces() if scrub else _UNSCRUBBED
    return EraseReport(
        sessions=tuple(doomed),
        messages=plan.messages if plan else 0,
        indexes_merged=tuple(traces["indexes_merged"]),
        wal_truncated=bool(traces["wal_truncated"]),
        wal_blocked=bool(traces["wal_blocked"]),
        seconds=time.monotonic() - started,
        requested=tuple(present),
        orphaned=tuple(plan.orphaned) if plan else (),
        vacuumed=tuple(traces["vacuumed"]),
        notes=tuple(traces["notes"]),
    )


#: What :func:`erase_sessions` reports of the scrub it was told to leave out.
_UNSCRUBBED: dict[str, Any] = {
    "indexes_merged": [],
    "wal_truncated": False,
    "wal_blocked": False,
    "vacuumed": [],
    "notes": [],
}


def scrub_deleted() -> dict[str, Any]:
    """Leave no text of deleted rows in the store: what :func:`erase_sessions` runs after
    its deletion (merged indexes, the WAL emptied unless a reader blocks it; on a server,
    the pending index entries merged and the tables vacuumed). Returns
    ``indexes_merged``, ``wal_truncated``, ``wal_blocked``, ``vacuumed`` and ``notes``.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    return current().erase_traces()


#: Characters that make a title pattern a glob rather than a piece of the title.
GLOB_CHARACTERS = frozenset("*?[")


def title_matches(pattern: str) -> Callable[[str | None], bool]:
    """The test :func:`sessions_to_erase` applies to titles: ``pattern`` holding ``*``,
    ``?`` or ``[`` is a glob the whole title must match, any other a piece of the
    title; both without case (``casefold``). A session without a title never matches."""
    folded = pattern.casefold()
    if GLOB_CHARACTERS.intersection(folded):
        return lambda title: title is not None and fnmatch.fnmatchcase(title.casefold(), folded)
    return lambda title: title is not None and folded in title.casefold()


def _cutoff(older_than: Any) -> float:
    if isinstance(older_than, str):
        return parse_when(older_than, utc=False, now=time.time())
    return check_timestamp(older_than, "older_than")


def sessions_to_erase(
    *,
    source: str | None = None,
    older_than: Any = None,
    title: str | None = None,
    ended_only: bool = True,
) -> list[str]:
    """The ids of the sessions a selection by source, age and title picks, oldest first
    (by ``started_at``, then id): the sessions to ask :func:`erase_sessions` for.

    ``source``: that source only. ``older_than``: started before that moment - a
    ``datetime``, seconds since the epoch, or text as ``--since`` reads it (``30d``,
    ``2026-01-31``: :func:`hermes_models.models.parse_when`, local time). ``title``: see
    :func:`title_matches`. ``ended_only``: only sessions that ended (a running one is
    left alone, as prune leaves it). Age only chooses which sessions are asked for:
    what the erase then takes with them follows the lineage rules, never a timestamp.
    No filter at all selects every (ended) session.

    Raises:
        TypeError, ValueError: an argument of the wrong type or an unreadable time.
    """
    if source is not None:
        check_text(source, "source")
    if title is not None:
        check_text(title, "title")
    ended = check_flag(ended_only, "ended_only")
    query = Session.select(Session.id, Session.title).order_by(Session.started_at, Session.id)
    if ended:
        query = query.where(Session.ended_at.is_null(False))
    if source is not None:
        query = query.where(Session.source == source)
    if older_than is not None:
        query = query.where(Session.started_at < _cutoff(older_than))
    if title is not None:
        query = query.where(Session.title.is_null(False))
    matches = title_matches(title) if title is not None else None
    rows = cast("Iterable[Any]", query.tuples())
    return [str(sid) for sid, name in rows if matches is None or matches(name)]


# -- compacting ----------------------------------------------------------------------------


def optimize_fts() -> int:
    """Merge the segments of each full-text index; returns how many of Hermes' two
    (words, trigrams) were optimized, as Hermes counts. The gram index, where the
    file has it, is merged too, in short steps (:func:`hermes_models.store.grams.merge`);
    on PostgreSQL each index's pending entries are moved into it."""
    return current().optimize_indexes()


def update_gram_index(
    *, rebuild: bool | None = None, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Bring the gram index (:mod:`hermes_models.store.grams`) up to date: index every message
    listed as changed since it was indexed (written, changed or deleted by anyone), a
    chunk per short write transaction, after listing again those whose grams it holds
    wrongly (:func:`hermes_models.store.grams.check`, as ``doctor`` checks); with ``rebuild``,
    first empty it and list every message. Then its segments are merged into one, a few
    pages per write transaction (:func:`hermes_models.store.grams.merge`), which also
    finishes a merge a killed process left half done.

    Returns ``present`` (False on a file or build without the index; nothing is
    done), ``rebuilt``, ``indexed`` (ids refreshed now), ``changed`` (ids still listed
    as changed: 0 unless others write meanwhile) and ``merged`` (merge steps taken).
    On PostgreSQL the server keeps its gram index in step (nothing listed:
    ``changed`` 0); ``rebuild=True`` builds it again (``REINDEX``).

    Raises:
        SchemaTooNewError: the file is newer than the v16 schema this package writes.
        ReadOnlyDatabaseError: the handle is read-only.
    """
    return current().update_grams(rebuild=rebuild, progress=progress)


def vacuum() -> int:
    """Optimize the full-text indexes, checkpoint the WAL, rebuild the file compactly
    and checkpoint again; returns how many indexes were optimized.

    Raises:
        SchemaTooNewError: the file is newer than the v16 schema this package writes.
        ReadOnlyDatabaseError: the handle is read-only.
    """
    db = current()
    refuse_newer_schema(db.path, db.shape, "VACUUM")
    if db.read_only:
        raise ReadOnlyDatabaseError(f"{db.path} was opened read-only; VACUUM is refused")
    try:
        optimized = optimize_fts()
    except (sqlite3.Error, peewee.PeeweeException) as exc:  # the compaction goes on
        logger.warning("%s: optimizing the full-text indexes failed: %s", db.path, exc)
        optimized = 0
    db.compact()
    return optimized


def auto_prune_and_vacuum(
    store: Upkeep,
    retention_days: float = 90,
    min_interval_hours: float = 24,
    vacuum: bool = True,
    sessions_dir: Any = None,
) -> dict[str, Any]:
    """Prune old sessions (and ``VACUUM`` when any went) at most once per interval.

    The last run's time is kept in ``state_meta`` under :data:`AUTO_PRUNE_KEY`
    (an unreadable value counts as no run); a call within
    ``min_interval_hours`` of it returns ``skipped=True``. Never raises:
    returns ``{"skipped", "pruned", "vacuumed"}`` plus ``"error"`` (the
    message) when something failed; failures are logged naming ``store``.
    """
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
    try:
        now = time.time()
        last = store.get_meta(AUTO_PRUNE_KEY)
        try:
            if last and now - float(last) < float(min_interval_hours) * 3600:
                result["skipped"] = True
                return result
        except ValueError:
            pass  # an unreadable time counts as no run
        pruned = store.prune_sessions(older_than_days=retention_days, sessions_dir=sessions_dir)
        result["pruned"] = pruned
        if vacuum and pruned > 0:
            try:
                store.vacuum()
                result["vacuumed"] = True
            except Exception as exc:
                logger.warning("%s: VACUUM after the automatic prune failed: %s", store, exc)
        store.set_meta(AUTO_PRUNE_KEY, str(now))
    except Exception as exc:
        logger.warning("%s: automatic prune failed: %s", store, exc)
        result["error"] = str(exc)
    return result
