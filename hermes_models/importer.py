"""Adding a bundle's sessions to a store: which rows, which ids, one transaction.

Import adds the sessions the target lacks, with their messages, in one
transaction; a session the target already has is left exactly as it is,
messages included, so importing twice is the same as importing once.
Message ids are kept unless one of a session's ids is taken in the target:
then that session's messages get fresh ids after the largest one, in their
original order. Titles are unique: an imported session whose title another
session has gets the next free ``"title #N"``. A session whose parent is in
neither the bundle nor the target is refused before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from peewee import fn

from .bundle import (
    CHUNK_ROWS,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    Bundle,
    Progress,
    chunks,
    raw,
)
from .db import current
from .errors import BundleError
from .models import Message, Session


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _insert_sql(table: str, columns: Sequence[str], rows: int) -> str:
    marks = "(" + ", ".join("?" * len(columns)) + ")"
    names = ", ".join(_quote(c) for c in columns)
    return f"INSERT INTO {_quote(table)} ({names}) VALUES " + ", ".join([marks] * rows)


def insert_rows(
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Insert ``rows`` with multi-row INSERTs of :data:`CHUNK_ROWS` (inside a write)."""
    for chunk in chunks(rows, CHUNK_ROWS):
        raw(_insert_sql(table, columns, len(chunk)), [v for row in chunk for v in row])
        if progress is not None:
            progress(len(chunk))


def _present(model: Any, column: Any, values: Sequence[Any]) -> set[Any]:
    found: set[Any] = set()
    for chunk in chunks(list(values)):
        found.update(v for (v,) in raw(model.select(column).where(column.in_(list(chunk)))))
    return found


def _retitle(sessions: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], int]:
    """Sessions whose title another session already has get the next free ``"title #N"``."""
    at = SESSION_COLUMNS.index("title")
    wanted = [row[at] for row in sessions if row[at] is not None]
    taken = _present(Session, Session.title, wanted)
    if not taken:
        return sessions, 0
    for title in taken:
        like = Session.select(Session.title).where(Session.title.startswith(title + " #"))
        taken = taken | {t for (t,) in raw(like)}
    out, renamed = [], 0
    for row in sessions:
        title = row[at]
        if title in taken:
            number = 2
            while f"{title} #{number}" in taken or f"{title} #{number}" in wanted:
                number += 1
            title = f"{title} #{number}"
            taken.add(title)
            row = (*row[:at], title, *row[at + 1 :])
            renamed += 1
        out.append(row)
    return out, renamed


def _plan(bundle: Bundle) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, int]]:
    """The session and message rows to insert, ids settled; with the counts."""
    present = _present(Session, Session.id, [row[0] for row in bundle.sessions])
    sessions = [row for row in bundle.sessions if row[0] not in present]
    new_ids = {row[0] for row in sessions}
    parent_at = SESSION_COLUMNS.index("parent_session_id")
    wanted = {row[parent_at] for row in sessions} - new_ids - present - {None}
    missing = wanted - _present(Session, Session.id, sorted(wanted))
    if missing:
        raise BundleError(
            f"sessions refer to parent(s) {', '.join(sorted(missing))} that neither the "
            "bundle nor the database holds"
        )
    sessions, renamed = _retitle(sessions)
    messages = [row for row in bundle.messages if row[1] in new_ids]
    taken = _present(Message, Message.id, [row[0] for row in messages])
    clashing = {row[1] for row in messages if row[0] in taken}
    kept = [row for row in messages if row[1] not in clashing]
    moved = [row for row in messages if row[1] in clashing]
    if moved:
        sequence = raw("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
        highest = max(
            int(raw(Message.select(fn.MAX(Message.id))).fetchone()[0] or 0),
            int(sequence[0]) if sequence else 0,
            max((row[0] for row in kept), default=0),
        )
        moved = [(highest + n, *row[1:]) for n, row in enumerate(moved, 1)]
    counts = {
        "sessions_added": len(sessions),
        "sessions_skipped": len(bundle.sessions) - len(sessions),
        "messages_added": len(messages),
        "messages_skipped": len(bundle.messages) - len(messages),
        "messages_renumbered": len(moved),
        "titles_renamed": renamed,
    }
    return sessions, sorted(kept + moved, key=lambda row: row[0]), counts


def import_bundle(bundle: Bundle, progress: Progress | None = None) -> dict[str, int]:
    """Add the bundle's sessions the database lacks, with their messages, in one write.

    Returns counts: ``sessions_added``, ``sessions_skipped`` (already present),
    ``messages_added``, ``messages_skipped``, ``messages_renumbered`` and
    ``titles_renamed`` (a title another session here has gets ``" #N"``).

    Raises:
        BundleError: a session's parent is in neither the bundle nor the database.
    """
    db = current()

    def run() -> dict[str, int]:
        sessions, messages, counts = _plan(bundle)
        total = len(sessions) + len(messages)
        done = 0

        def step(rows: int) -> None:
            nonlocal done
            done += rows
            if progress is not None:
                progress(done, total)

        # Parents may follow their children in the bundle: check keys at commit.
        raw("PRAGMA defer_foreign_keys = ON")
        insert_rows(Session._meta.table_name, SESSION_COLUMNS, sessions, step)
        insert_rows(Message._meta.table_name, MESSAGE_COLUMNS, messages, step)
        return counts

    return db.write(run)


__all__ = ["import_bundle", "insert_rows"]
