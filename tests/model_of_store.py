"""A pure-Python model of the store's rules, written from SPEC sections 4 and 6.

It knows nothing of SQL: sessions and messages are plain records, and every
rule (kinds, compression tips, resume targets, what deletion cascades and
orphans, archiving a chain, counters, listings, transcripts) is computed by
walking them. Deleting, pruning and the empty sweeps follow Hermes' rules
(HERMES_V16 3.11): only rows tagged ``_delegate_from`` go with a deleted
session, never anything chosen by timestamps. ``tests/test_stateful.py``
drives the real store and this model through the same random operations and
compares what each one shows.

Where SPEC is silent the model follows Hermes v16 (HERMES_V16.md): counters
count every message row, rewound ones included; previews and ``last_active``
read soft-deleted messages too; the replay with ancestors follows every
parent link; a resume walk counts any message row ("any row, active or
not", §3.7). It keeps the store's reading where SPEC decides: a rewind target
must be an active user message (SPEC §6), and compressing a session that had
ended for another reason moves its end to the compression.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: Hops a compression-tip walk takes at most (SPEC 4).
TIP_MAX_HOPS = 100
#: Levels a resume walk descends below the tip at most (SPEC 4).
RESUME_MAX_DEPTH = 32
#: Characters of a listing preview before it is cut (SPEC 6), and what it is cut from.
PREVIEW_CHARS = 60
#: The tag Hermes gives parentless subagent runs; it names no session.
ORPHANED = "__orphaned__"
PREVIEW_SOURCE_CHARS = 63
#: Sessions a replay with ancestors reaches at most.
ANCESTOR_STEPS = 100
#: The columns a projected chain row takes from its tip (besides preview, last_active).
TIP_COLUMNS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "model",
    "system_prompt",
    "cwd",
)
_MEMORY = [
    re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.I),
    re.compile(
        r"\[System note:\s*The following is recalled memory context,\s*NOT new user "
        r"input\.\s*Treat as [^\]]*\]\s*",
        re.I,
    ),
    re.compile(r"</?\s*memory-context\s*>", re.I),
]

_NUMBERED = re.compile(r"^(?P<base>.*\S) #(?P<number>[1-9][0-9]*)$")


class CompressedAlready(Exception):
    """The model refuses to compress a session that has already ended."""


class NotARewindTarget(Exception):
    """The model refuses a rewind target (not in the session, not a user message, or
    rewound already)."""


class TitleInUse(Exception):
    """The model refuses a title another session holds."""


def decode(text: str | None) -> Any:
    """A JSON column as the store decodes it (the text itself when not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def encode(value: Any) -> str | None:
    """A JSON column as the store writes it (text kept as is)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def encode_given(value: Any) -> str | None:
    """A JSON column written from a caller's value: empty values are stored as NULL (Hermes)."""
    return encode(value) if value else None


@dataclass
class MSession:
    id: str
    source: str
    started_at: float
    parent: str | None = None
    model_config: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    archived: int = 0
    rewind_count: int = 0
    title: str | None = None

    @property
    def config(self) -> dict[str, Any]:
        value = decode(self.model_config)
        return value if isinstance(value, dict) else {}

    def marked(self, key: str) -> bool:
        return self.config.get(key) is not None

    def plain_config(self) -> dict[str, Any]:
        config = dict(self.config)
        config.pop("_branched_from", None)
        config.pop("_delegate_from", None)
        return config


@dataclass
class MMessage:
    id: int
    session_id: str
    role: str
    content: Any
    timestamp: float
    tool_calls: Any = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    active: int = 1

    def copy_to(self, session_id: str, new_id: int) -> MMessage:
        return MMessage(
            new_id,
            session_id,
            self.role,
            self.content,
            self.timestamp,
            self.tool_calls,
            self.tool_call_id,
            self.tool_name,
        )


def tool_calls_of(message: MMessage) -> int:
    """What one message adds to its session's ``tool_call_count``: its list of
    calls, or one call for any other non-empty value; nothing for a tool result."""
    if message.role == "tool" or not message.tool_calls:
        return 0
    calls = (
        decode(message.tool_calls) if isinstance(message.tool_calls, str) else message.tool_calls
    )
    return len(calls) if isinstance(calls, list) else 1


def sanitize(text: str) -> str:
    """Recalled-memory blocks, their note and fence tags removed, then stripped."""
    for pattern in _MEMORY:
        text = pattern.sub("", text)
    return text.strip()


def split_title(title: str) -> tuple[str, int]:
    match = _NUMBERED.match(title)
    if match is None:
        return title, 1
    return match.group("base"), int(match.group("number"))


def preview_of(content: Any) -> str:
    """Hermes' preview: line breaks to spaces, 63 characters, stripped, 60 then ``...``."""
    if isinstance(content, list):
        content = " ".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    raw = content.replace("\n", " ").replace("\r", " ")[:PREVIEW_SOURCE_CHARS].strip()
    return raw if len(raw) <= PREVIEW_CHARS else raw[:PREVIEW_CHARS] + "..."


@dataclass
class StoreModel:
    sessions: dict[str, MSession] = field(default_factory=dict)
    messages: dict[int, MMessage] = field(default_factory=dict)
    last_message_id: int = 0

    # -- reading -----------------------------------------------------------------

    def children(self, session_id: str) -> list[MSession]:
        return [s for s in self.sessions.values() if s.parent == session_id]

    def kind(self, session_id: str) -> str:
        s = self.sessions[session_id]
        if s.marked("_delegate_from"):
            return "ephemeral"
        if s.parent is None:
            return "root"
        if s.marked("_branched_from"):
            return "branch"
        parent = self.sessions[s.parent]
        if parent.end_reason == "compression":  # whenever the child started (Hermes v17 on)
            return "compression"
        if parent.end_reason == "branched" and s.started_at >= parent.ended_at:
            return "branch"
        return "ephemeral"

    def session_messages(self, session_id: str, include_inactive: bool = False) -> list[MMessage]:
        return sorted(
            (
                m
                for m in self.messages.values()
                if m.session_id == session_id and (include_inactive or m.active)
            ),
            key=lambda m: m.id,
        )

    def counters(self, session_id: str) -> tuple[int, int]:
        rows = self.session_messages(session_id, include_inactive=True)
        return len(rows), sum(tool_calls_of(m) for m in rows)

    def _latest_child(self, session_id: str) -> str | None:
        candidates = [
            c
            for c in self.children(session_id)
            if not c.marked("_branched_from") and not c.marked("_delegate_from")
        ]
        if not candidates:
            return None
        return max(candidates, key=lambda c: (c.started_at, c.id)).id

    def tip(self, session_id: str) -> str:
        if session_id not in self.sessions:
            return session_id
        here, seen, hops = session_id, {session_id}, 0
        while hops < TIP_MAX_HOPS and self.sessions[here].end_reason == "compression":
            nxt = self._latest_child(here)
            if nxt is None or nxt in seen:
                break
            here, hops = nxt, hops + 1
            seen.add(here)
        return here

    def resume_target(self, session_id: str) -> str:
        if session_id not in self.sessions:
            return session_id
        tip = self.tip(session_id)
        here, seen, depth = tip, {tip}, 0
        while True:
            if self.session_messages(here, include_inactive=True):
                return here
            if depth >= RESUME_MAX_DEPTH:
                return tip
            nxt = self._latest_child(here)
            if nxt is None or nxt in seen:
                return tip
            here, depth = nxt, depth + 1
            seen.add(here)

    def compression_chain(self, session_id: str) -> list[str]:
        top = session_id
        while self.kind(top) == "compression":
            top = self.sessions[top].parent  # type: ignore[assignment]
        chain, frontier = {top}, [top]
        while frontier:
            here = frontier.pop()
            for child in self.children(here):
                if child.id not in chain and self.kind(child.id) == "compression":
                    chain.add(child.id)
                    frontier.append(child.id)
        return sorted(chain)

    def last_active(self, session_id: str) -> float:
        stamps = [m.timestamp for m in self.session_messages(session_id, include_inactive=True)]
        return max(stamps) if stamps else self.sessions[session_id].started_at

    def preview(self, session_id: str) -> str:
        users = [
            m
            for m in self.session_messages(session_id, include_inactive=True)
            if m.role == "user" and m.content is not None
        ]
        if not users:
            return ""
        return preview_of(min(users, key=lambda m: (m.timestamp, m.id)).content)

    def chain_below(self, session_id: str) -> list[str]:
        """``session_id`` and the sessions continuing it through compression edges."""
        found, frontier = [session_id], [session_id]
        while frontier:
            here = frontier.pop()
            for child in self.children(here):
                if child.id not in found and self.kind(child.id) == "compression":
                    found.append(child.id)
                    frontier.append(child.id)
        return found

    def listing(
        self,
        *,
        include_children: bool = False,
        archived_only: bool = False,
        order_by_last_active: bool = False,
    ) -> list[dict[str, Any]]:
        """``list_sessions_rich(limit=None, ...)``: shown id, lineage root, preview, last_active."""
        rows: list[dict[str, Any]] = []
        for s in self.sessions.values():
            if not include_children and self.kind(s.id) not in ("root", "branch"):
                continue
            if s.archived != (1 if archived_only else 0):
                continue
            project = not include_children and s.end_reason == "compression"
            shown = self.tip(s.id) if project else s.id
            row: dict[str, Any] = {
                "id": shown,
                "preview": self.preview(shown),
                "last_active": self.last_active(shown),
                "_root": (s.started_at, s.id),
                "_effective": max(self.last_active(m) for m in self.chain_below(s.id)),
            }
            if shown != s.id:
                row["_lineage_root_id"] = s.id
            rows.append(row)
        if order_by_last_active:
            rows.sort(key=lambda r: (r["_effective"], *r["_root"]), reverse=True)
        else:
            rows.sort(key=lambda r: r["_root"], reverse=True)
        for row in rows:
            del row["_root"], row["_effective"]
        return rows

    def conversation(self, session_id: str, include_ancestors: bool) -> list[dict[str, Any]]:
        """Hermes' replay: by (timestamp, id); with ancestors, every session up the
        parent chain (any link, at most 100, a cycle ends it) merged in by time."""
        chain = [session_id]
        if include_ancestors:
            here = self.sessions[session_id].parent if session_id in self.sessions else None
            while here is not None and here not in chain and len(chain) < ANCESTOR_STEPS:
                chain.append(here)
                here = self.sessions[here].parent
        rows = [m for member in chain for m in self.session_messages(member)]
        entries = []
        for m in sorted(rows, key=lambda m: (m.timestamp, m.id)):
            content = m.content
            if m.role in ("user", "assistant") and isinstance(content, str):
                content = sanitize(content)
            entry: dict[str, Any] = {"role": m.role, "content": content}
            values = {
                "timestamp": m.timestamp,
                "tool_call_id": m.tool_call_id,
                "tool_name": m.tool_name,
            }
            for name, value in values.items():
                if value:
                    entry[name] = value
            stored_calls = encode_given(m.tool_calls)
            if stored_calls:
                # HERMES_V16 §3.9: decoded, [] when the stored text is not JSON.
                decoded = decode(stored_calls)
                entry["tool_calls"] = [] if decoded == stored_calls else decoded
            entries.append(entry)
        if not include_ancestors:
            return entries
        kept: list[dict[str, Any]] = []
        for entry in entries:
            if entry["role"] == "user" and isinstance(entry["content"], str) and entry["content"]:
                resent = False
                for earlier in reversed(kept):
                    if earlier["role"] == "user" and earlier["content"] == entry["content"]:
                        resent = True
                        break
                    if earlier["role"] == "assistant" and (
                        earlier["content"] or earlier.get("tool_calls")
                    ):
                        break
                if resent:
                    continue
            kept.append(entry)
        return kept

    def next_title(self, title: str) -> str:
        base, _ = split_title(title)
        numbers = []
        for other in (s.title for s in self.sessions.values() if s.title is not None):
            stem, n = split_title(other)
            if other == base or (other.startswith(base + " #") and stem == base):
                numbers.append(n)
        return f"{base} #{max(numbers) + 1}" if numbers else base

    # -- writing -----------------------------------------------------------------

    def _new_message(
        self, session_id: str, role: str, content: Any, timestamp: float, **fields: Any
    ) -> int:
        self.last_message_id += 1
        self.messages[self.last_message_id] = MMessage(
            self.last_message_id, session_id, role, content, timestamp, **fields
        )
        return self.last_message_id

    def create(
        self,
        session_id: str,
        source: str,
        started_at: float,
        *,
        parent: str | None = None,
        model_config: Any = None,
    ) -> None:
        if session_id in self.sessions:
            return
        assert parent is None or parent in self.sessions
        self.sessions[session_id] = MSession(
            session_id, source, started_at, parent=parent, model_config=encode_given(model_config)
        )

    def append(
        self, session_id: str, role: str, content: Any, timestamp: float, **fields: Any
    ) -> int:
        return self._new_message(session_id, role, content, timestamp, **fields)

    def rewind(self, session_id: str, message_id: int) -> int:
        """The rewind SPEC §6 describes: an active user message of the session."""
        target = self.messages.get(message_id)
        if target is None or target.session_id != session_id or target.role != "user":
            raise NotARewindTarget(message_id)
        if not target.active:
            raise NotARewindTarget(message_id)  # Hermes B would count another rewind
        hidden = [m for m in self.session_messages(session_id) if m.id >= message_id]
        for m in hidden:
            m.active = 0
        self.sessions[session_id].rewind_count += 1
        return len(hidden)

    def restore(self, session_id: str, since_id: int) -> int:
        back = [
            m
            for m in self.session_messages(session_id, include_inactive=True)
            if m.id >= since_id and not m.active
        ]
        for m in back:
            m.active = 1
        return len(back)

    def end(self, session_id: str, reason: str, at: float) -> bool:
        s = self.sessions[session_id]
        if s.ended_at is not None:
            return False
        s.ended_at, s.end_reason = at, reason
        return True

    def reopen(self, session_id: str) -> bool:
        s = self.sessions[session_id]
        s.ended_at = s.end_reason = None
        return True

    def _child(
        self,
        parent: MSession,
        child_id: str,
        started_at: float,
        config: dict[str, Any],
        title: str | None = None,
    ) -> MSession:
        child = MSession(
            child_id,
            parent.source,
            started_at,
            parent=parent.id,
            model_config=encode(config),
            title=title,
        )
        self.sessions[child_id] = child
        return child

    def branch(self, session_id: str, child_id: str, at: float, copy: bool) -> None:
        parent = self.sessions[session_id]
        if parent.ended_at is None:
            parent.ended_at, parent.end_reason = at, "branched"
        config = {**parent.plain_config(), "_branched_from": parent.id}
        self._child(parent, child_id, max(at, parent.ended_at), config)
        if copy:
            for m in self.session_messages(session_id):
                self.last_message_id += 1
                self.messages[self.last_message_id] = m.copy_to(child_id, self.last_message_id)

    def compress(
        self, session_id: str, child_id: str, summary: list[dict[str, Any]], at: float
    ) -> None:
        parent = self.sessions[session_id]
        if parent.ended_at is not None:
            raise CompressedAlready(session_id)
        title = self.next_title(parent.title) if parent.title else None
        parent.ended_at, parent.end_reason = at, "compression"
        self._child(parent, child_id, at, parent.plain_config(), title)
        for index, item in enumerate(summary):
            fields = {k: v for k, v in item.items() if k not in ("role", "content")}
            self._new_message(
                child_id, item["role"], item.get("content"), at + index * 1e-6, **fields
            )

    def delegate(self, session_id: str, child_id: str, at: float) -> None:
        parent = self.sessions[session_id]
        self._child(parent, child_id, at, {**parent.plain_config(), "_delegate_from": parent.id})

    # -- deleting (Hermes' rules, HERMES_V16 3.11) -----------------------------------------

    def tag(self, session_id: str) -> Any:
        return self.sessions[session_id].config.get("_delegate_from")

    def doomed(self, session_ids: list[str]) -> set[str]:
        """The given sessions that exist and, breadth first, every row tagged under them:
        a ``_delegate_from`` naming a session of the last round (the ``'__orphaned__'``
        tag names none), or any tag on a child of one; the given ones seed the visited set."""
        present = {sid for sid in session_ids if sid in self.sessions}
        visited, frontier = set(present), set(present)
        while frontier:
            names = frontier - {ORPHANED}
            step = {
                s.id
                for s in self.sessions.values()
                if s.id not in visited
                and (
                    (isinstance(self.tag(s.id), str) and self.tag(s.id) in names)
                    or (s.parent in frontier and self.tag(s.id) is not None)
                )
            }
            visited |= step
            frontier = step
        return visited

    def remove(self, doomed: set[str]) -> None:
        """Delete ``doomed`` with their messages; their other children become roots."""
        for s in self.sessions.values():
            if s.parent in doomed and s.id not in doomed:
                s.parent = None
        for sid in doomed:
            del self.sessions[sid]
        for mid in [m.id for m in self.messages.values() if m.session_id in doomed]:
            del self.messages[mid]

    def delete(self, session_ids: list[str]) -> int:
        """``delete_sessions``: how many of the given (distinct) ids existed."""
        wanted = list(dict.fromkeys(i for i in session_ids if isinstance(i, str) and i))
        existing = sum(1 for sid in wanted if sid in self.sessions)
        self.remove(self.doomed(wanted))
        return existing

    def has_rows(self, session_id: str) -> bool:
        return any(m.session_id == session_id for m in self.messages.values())

    def prune(self, cutoff: float) -> int:
        doomed = {
            s.id for s in self.sessions.values() if s.ended_at is not None and s.started_at < cutoff
        }
        self.remove(doomed)
        return len(doomed)

    def empty(self) -> set[str]:
        """Ended, unarchived, counter 0 and no message row (rewound ones included)."""
        return {
            s.id
            for s in self.sessions.values()
            if s.ended_at is not None
            and s.archived == 0
            and self.counters(s.id)[0] == 0
            and not self.has_rows(s.id)
        }

    def delete_empty(self) -> int:
        doomed = self.empty()
        self.remove(doomed)
        return len(doomed)

    def delete_if_empty(self, session_id: str) -> bool:
        s = self.sessions.get(session_id)
        if (
            s is None
            or s.title is not None
            or self.has_rows(session_id)
            or self.children(session_id)
        ):
            return False
        self.remove({session_id})
        return True

    def prune_ghosts(self, cutoff: float) -> int:
        doomed = {
            s.id
            for s in self.sessions.values()
            if s.source == "tui"
            and s.title is None
            and s.ended_at is not None
            and s.started_at < cutoff
            and not self.has_rows(s.id)
        }
        self.remove(doomed)
        return len(doomed)

    def set_archived(self, session_id: str, archived: bool) -> bool:
        if session_id not in self.sessions:
            return False
        for sid in self.compression_chain(session_id):
            self.sessions[sid].archived = 1 if archived else 0
        return True

    def set_title(self, session_id: str, title: str | None) -> bool:
        if title is not None and any(
            s.title == title and s.id != session_id for s in self.sessions.values()
        ):
            raise TitleInUse(title)
        if session_id not in self.sessions:
            return False
        self.sessions[session_id].title = title
        return True
