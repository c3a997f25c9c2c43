"""Hermes v16's deletion rules (HERMES_V16.md section 3.11), written from the reference
in plain Python, with no hermes_models import: the tests hold the store to it.

Sessions and messages are plain records taken from the file. Each operation
says what Hermes would leave behind:

* ``delete_sessions`` takes the given sessions and, breadth first, the rows
  whose ``_delegate_from`` names a session of the previous round or whose
  parent is one of them and which carry any ``_delegate_from``; the parents
  seed the visited set (the cycle guard of late v16). Every other child of a
  deleted session is orphaned; grandchildren keep their links.
* ``prune`` takes ended sessions started before the cutoff (of one source),
  orphaning their children, without any cascade.
* the empty sweep takes ended, unarchived sessions without messages,
  orphaning their children.
* ``delete_if_empty`` takes one untitled session without messages or children.
* ``prune_ghosts`` takes ended, untitled ``tui`` sessions without messages
  started over a day ago (orphaning their children, where Hermes would hit a
  foreign-key error).

Two readings are hermes_models' own, documented, never less safe: the tag
``'__orphaned__'`` names no session (deleting a session of that id does not
take every orphaned run), and a session counts as empty only when its counter
says 0 and no message row exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from hermes_models.driver import sqlite3

ORPHANED = "__orphaned__"
DAY = 86400.0


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    parent: str | None
    model_config: str | None
    started_at: float
    ended_at: float | None
    title: str | None
    archived: int
    message_count: int | None


def tag(model_config: str | None) -> Any:
    """``_delegate_from`` of a config text; None when absent, null or not a JSON object."""
    try:
        value = json.loads(model_config) if model_config is not None else None
    except ValueError:
        return None
    return value.get("_delegate_from") if isinstance(value, dict) else None


def read(conn: sqlite3.Connection) -> tuple[dict[str, Row], dict[int, str]]:
    """Every session and every message id (with its session) of a file."""
    sessions = {
        row[0]: Row(*row)
        for row in conn.execute(
            "SELECT id, source, parent_session_id, model_config, started_at, ended_at, title,"
            " archived, message_count FROM sessions"
        )
    }
    messages = dict(conn.execute("SELECT id, session_id FROM messages").fetchall())
    return sessions, messages


def collect_delegates(sessions: dict[str, Row], parents: Iterable[str]) -> list[str]:
    """Hermes' breadth-first collection of the subagent runs below ``parents``."""
    visited = set(parents)
    frontier = set(visited)
    found: list[str] = []
    while frontier:
        names = frontier - {ORPHANED}
        step = {
            s.id
            for s in sessions.values()
            if s.id not in visited
            and (
                (isinstance(tag(s.model_config), str) and tag(s.model_config) in names)
                or (s.parent in frontier and tag(s.model_config) is not None)
            )
        }
        visited |= step
        found += sorted(step)
        frontier = step
    return found


class Reference:
    """A copy of a store's sessions and messages, changed by Hermes' rules."""

    def __init__(self, sessions: dict[str, Row], messages: dict[int, str]) -> None:
        self.sessions = dict(sessions)
        self.messages = dict(messages)

    def _remove(self, doomed: set[str]) -> None:
        for sid, s in list(self.sessions.items()):
            if sid not in doomed and s.parent in doomed:
                self.sessions[sid] = replace(s, parent=None)
        for sid in doomed:
            self.sessions.pop(sid, None)
        self.messages = {m: sid for m, sid in self.messages.items() if sid not in doomed}

    def has_messages(self, sid: str) -> bool:
        return sid in self.messages.values()

    def delete_sessions(self, ids: Iterable[Any]) -> tuple[int, set[str]]:
        """How many given ids existed, and every session removed."""
        wanted = list(dict.fromkeys(i for i in ids if isinstance(i, str) and i))
        present = [sid for sid in wanted if sid in self.sessions]
        doomed = set(present) | set(collect_delegates(self.sessions, present))
        self._remove(doomed)
        return len(present), doomed

    def prune(self, cutoff: float, source: str | None = None) -> tuple[int, set[str]]:
        doomed = {
            s.id
            for s in self.sessions.values()
            if s.ended_at is not None
            and s.started_at < cutoff
            and (source is None or s.source == source)
        }
        self._remove(doomed)
        return len(doomed), doomed

    def empty(self) -> set[str]:
        return {
            s.id
            for s in self.sessions.values()
            if s.message_count == 0
            and not self.has_messages(s.id)
            and s.ended_at is not None
            and s.archived == 0
        }

    def delete_empty(self) -> tuple[int, set[str]]:
        doomed = self.empty()
        self._remove(doomed)
        return len(doomed), doomed

    def delete_if_empty(self, sid: str) -> tuple[bool, set[str]]:
        s = self.sessions.get(sid)
        if (
            s is None
            or s.title is not None
            or self.has_messages(sid)
            or any(c.parent == sid for c in self.sessions.values())
        ):
            return False, set()
        self._remove({sid})
        return True, {sid}

    def prune_ghosts(self, now: float) -> tuple[int, set[str]]:
        doomed = {
            s.id
            for s in self.sessions.values()
            if s.source == "tui"
            and s.title is None
            and s.ended_at is not None
            and s.started_at < now - DAY
            and not self.has_messages(s.id)
        }
        self._remove(doomed)
        return len(doomed), doomed

    def state(self) -> tuple[dict[str, str | None], list[int]]:
        """Surviving sessions with their parents, and surviving message ids."""
        return {sid: s.parent for sid, s in sorted(self.sessions.items())}, sorted(self.messages)


def state_of(conn: sqlite3.Connection) -> tuple[dict[str, str | None], list[int]]:
    """What :meth:`Reference.state` gives, read from the file itself."""
    sessions, messages = read(conn)
    return {sid: s.parent for sid, s in sorted(sessions.items())}, sorted(messages)
