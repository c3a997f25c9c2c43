"""Random sequences of store operations agree, step by step, with a pure-Python model.

A hypothesis state machine drives a real ``SessionDB`` on a real file through
creating, appending, rewinding, restoring, compressing, branching,
delegating, ending, reopening, titling, archiving and deleting sessions, and
the model in ``model_of_store.py`` through the same operations. After every
step everything observable is compared: listings (ids, projection onto
compression tips, previews, activity), every transcript (with soft-deleted
rows), counters, kinds, compression tips, resume targets, conversations with
their compression ancestors, counts, and the file's foreign keys. Times come
from a fake clock passed explicitly, so ordering is predictable.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import pg_server
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from hermes_models import CompressionInProgressError, Session, SessionDB
from hermes_models.models.lineage import kind_expr
from hermes_models.store.binding import using

from model_of_store import (
    TIP_COLUMNS,
    CompressedAlready,
    NotARewindTarget,
    StoreModel,
    TitleInUse,
    decode,
    encode_given,
)

T0 = 1_700_000_000.0
UNKNOWN = "no-such-session"

#: Which session a rule works on, counted from the newest (recent ones are picked more).
PICK = st.one_of(st.integers(min_value=0, max_value=2), st.integers(min_value=0, max_value=255))
PREFIX = st.sampled_from("abc")
SOURCES = st.sampled_from(["cli", "telegram", "tui"])
CONFIGS = st.sampled_from(
    [
        None,
        {"temperature": 0.5},
        {"_branched_from": "elsewhere"},
        {"_delegate_from": "elsewhere"},
        {"_delegate_from": None, "tools": ["web"]},
        {"_delegate_from": "__orphaned__"},
        "not json",
    ]
)
TEXTS = st.sampled_from(
    [
        "hello",
        "hello",  # repeated prompts exercise the resent-prompt rule
        "again?",
        "line one\n\n  line two\tend",
        "a long question " * 6,
        "你好，世界",
        "",
    ]
)
CONTENTS = st.one_of(
    TEXTS,
    st.just(None),
    st.just(
        [
            {"type": "text", "text": "look at"},
            {"type": "image_url"},
            {"type": "text", "text": "this"},
        ]
    ),
    st.just({"kind": "structured"}),
)
CALL = {"id": "call_1", "type": "function", "function": {"name": "web", "arguments": "{}"}}
TOOL_CALLS = st.sampled_from(
    [None, None, [], [CALL], [CALL, {**CALL, "id": "call_2"}], {"id": "x"}, '[{"id": "t"}]', "oops"]
)
SUMMARY_ITEM = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": TEXTS}),
    st.fixed_dictionaries({"role": st.just("system"), "content": TEXTS}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": TEXTS}, optional={"tool_calls": TOOL_CALLS}
    ),
)
SUMMARIES = st.lists(SUMMARY_ITEM, max_size=3)
TITLES = st.sampled_from(["plan", "plan #2", "plan #5", "fix the build", None])
END_REASONS = st.sampled_from(["user_exit", "branched", "compression"])
LOCK_HELD = st.sampled_from([False, False, False, True])
#: Appends usually happen now; some arrive stamped earlier than the latest event.
LATENESS = st.sampled_from([0.0, 0.0, 0.0, 1.5])

SESSION_FIELDS = (
    "id",
    "source",
    "parent_session_id",
    "model_config",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "rewind_count",
    "archived",
    "title",
)
MESSAGE_FIELDS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "timestamp",
    "active",
)


def bucket(n: int) -> str:
    """``n`` for statistics: 0, 1, 2 or 3+."""
    return str(n) if n < 3 else "3+"


class StoreMachine(RuleBasedStateMachine):
    """One SessionDB file and one model, driven together."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory(prefix="hermes-stateful-")
        self.store = SessionDB(Path(self.folder.name) / "state.db")
        self.model = StoreModel()
        self.clock = T0
        self.serial = 0
        self.held: Session | None = None

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            self.folder.cleanup()

    # -- helpers -------------------------------------------------------------------

    def tick(self) -> float:
        self.clock += 1.0
        return self.clock

    def new_id(self, prefix: str) -> str:
        # The prefix makes id order differ from creation order (ids break ties).
        self.serial += 1
        return f"{prefix}{self.serial:03d}"

    def pick(self, n: int, among: list[str] | None = None) -> str:
        """The ``n``-th session counting from the newest (of ``among``, when given)."""
        ids = among or list(self.model.sessions)
        return ids[-1 - n % len(ids)]

    def session(self, session_id: str) -> Session:
        return Session.get_by_id(session_id)

    # -- rules -----------------------------------------------------------------------

    @initialize(prefix=PREFIX, source=SOURCES, config=CONFIGS)
    def first_root(self, prefix: str, source: str, config: Any) -> None:
        self.create_root(prefix, source, config)

    @rule(prefix=PREFIX, source=SOURCES, config=CONFIGS)
    def create_root(self, prefix: str, source: str, config: Any) -> None:
        sid, at = self.new_id(prefix), self.tick()
        assert self.store.create_session(sid, source, model_config=config, started_at=at) == sid
        self.model.create(sid, source, at, model_config=config)

    @rule(
        pick=PICK,
        prefix=PREFIX,
        config=CONFIGS,
        when=st.sampled_from(
            ["now", "after_parent_end", "at_parent_end", "before_parent_end", "after_compression"]
        ),
    )
    def create_child(self, pick: int, prefix: str, config: Any, when: str) -> None:
        """A child created directly with ``parent_session_id`` (as another Hermes process
        would write it): its kind follows from its markers and its start time."""
        ended = [sid for sid, s in self.model.sessions.items() if s.ended_at is not None]
        compressed = [sid for sid in ended if self.model.sessions[sid].end_reason == "compression"]
        pools = {"now": None, "after_compression": compressed or ended}
        parent = self.model.sessions[self.pick(pick, pools.get(when, ended))]
        sid, at = self.new_id(prefix), self.tick()
        if parent.ended_at is None:
            when = "parent running"
        elif when == "at_parent_end":
            at = parent.ended_at
        elif when == "before_parent_end":
            at = parent.ended_at - 0.5
        self.store.create_session(
            sid, "cli", model_config=config, parent_session_id=parent.id, started_at=at
        )
        self.model.create(sid, "cli", at, parent=parent.id, model_config=config)
        event(f"create_child: {when}, {self.model.kind(sid)}")

    @rule(pick=PICK, named=PICK, parent=st.booleans())
    def create_tagged(self, pick: int, named: int, parent: bool) -> None:
        """A session whose ``_delegate_from`` names another session (not always its
        parent): tags, not parent links, decide what a delete takes."""
        sid, at = self.new_id("t"), self.tick()
        config = {"_delegate_from": self.pick(named)}
        parent_id = self.pick(pick) if parent else None
        self.store.create_session(
            sid, "cli", model_config=config, parent_session_id=parent_id, started_at=at
        )
        self.model.create(sid, "cli", at, parent=parent_id, model_config=config)
        event(f"create_tagged: {'child' if parent else 'root'}")

    @rule(
        pick=PICK,
        role=st.sampled_from(["user", "user", "assistant", "assistant", "tool", "system"]),
        content=CONTENTS,
        tool_calls=TOOL_CALLS,
        late=LATENESS,
    )
    def append(self, pick: int, role: str, content: Any, tool_calls: Any, late: float) -> None:
        sid, at = self.pick(pick), self.tick() - late
        fields: dict[str, Any] = {"tool_calls": tool_calls}
        if role == "tool":
            fields.update(tool_call_id="call_1", tool_name="web")
        message_id = self.store.append_message(sid, role, content, timestamp=at, **fields)
        assert message_id == self.model.append(sid, role, content, at, **fields)

    @rule(pick=PICK, prompt=TEXTS, reply=TEXTS, tool_calls=TOOL_CALLS)
    def converse(self, pick: int, prompt: str, reply: str, tool_calls: Any) -> None:
        """A turn: a user prompt and the assistant's reply."""
        sid = self.pick(pick)
        for role, content, calls in (("user", prompt, None), ("assistant", reply, tool_calls)):
            at = self.tick()
            message_id = self.store.append_message(
                sid, role, content, tool_calls=calls, timestamp=at
            )
            assert message_id == self.model.append(sid, role, content, at, tool_calls=calls)

    def user_messages(self) -> list[tuple[str, int]]:
        return [
            (m.session_id, m.id)
            for m in self.model.messages.values()
            if m.role == "user" and m.active
        ]

    @rule(pick=PICK, undo=st.sampled_from([False, False, True]))
    def rewind(self, pick: int, undo: bool) -> None:
        """Rewind to an active user message (to an invalid target when there is none);
        with ``undo``, check, then restore what the rewind hid."""
        targets = self.user_messages() or [(self.pick(pick), 0)]
        sid, message_id = targets[-1 - pick % len(targets)]
        if self.rewind_to(sid, message_id) and undo:
            self.store_agrees_with_model()
            restored = self.store.restore_rewound(sid, message_id)
            assert restored == self.model.restore(sid, message_id)
            event("rewind: undone")

    @rule(pick=PICK, message_id=st.integers(min_value=0, max_value=60))
    def rewind_anywhere(self, pick: int, message_id: int) -> None:
        """Any (session, message id) pair: refused unless it is an active user message."""
        self.rewind_to(self.pick(pick), message_id)

    def rewind_to(self, sid: str, message_id: int) -> bool:
        """Rewind in both; False when the target is refused (as the model predicts)."""
        try:
            expected = self.model.rewind(sid, message_id)
        except NotARewindTarget:
            with pytest.raises(ValueError, match="target_message_id"):
                self.store.rewind_to_message(sid, message_id)
            event("rewind: refused")
            return False
        assert self.store.rewind_to_message(sid, message_id)["rewound_count"] == expected
        event(f"rewind: hid {bucket(expected)} message(s)")
        return True

    def rewound(self) -> list[tuple[str, int]]:
        return [(m.session_id, m.id) for m in self.model.messages.values() if not m.active]

    @rule(pick=PICK, shift=st.sampled_from([0, 0, 1, -1000]))
    def restore(self, pick: int, shift: int) -> None:
        """Restore from a rewound message (or from anywhere when nothing is rewound)."""
        targets = self.rewound() or [(self.pick(pick), 0)]
        sid, since = targets[-1 - pick % len(targets)]
        since = max(0, since + shift)
        restored = self.store.restore_rewound(sid, since)
        assert restored == self.model.restore(sid, since)
        event(f"restore: {'none' if restored == 0 else 'some'} restored")

    @rule(pick=PICK, prefix=PREFIX, summary=SUMMARIES, lock_held=LOCK_HELD)
    def compress(
        self, pick: int, prefix: str, summary: list[dict[str, Any]], lock_held: bool
    ) -> None:
        sid, child, at = self.pick(pick), self.new_id(prefix), self.tick()
        if lock_held:
            assert self.store.try_acquire_compression_lock(sid, "another-agent")
            try:
                with using(self.store.database), pytest.raises(CompressionInProgressError):
                    self.session(sid).compress(summary, session_id=child, at=at)
            finally:
                self.store.release_compression_lock(sid, "another-agent")
            event("compress: refused, lock held")
            return
        try:
            self.model.compress(sid, child, summary, at)
        except CompressedAlready:
            expected = (
                "already compressed"
                if self.model.sessions[sid].end_reason == "compression"
                else "already ended"
            )
            with using(self.store.database), pytest.raises(ValueError, match=expected):
                self.session(sid).compress(summary, session_id=child, at=at)
            event(f"compress: refused, {expected}")
            return
        with using(self.store.database):
            made = self.session(sid).compress(summary, session_id=child, at=at)
        assert made.id == child
        event(f"compress: ok, parent was {self.model.kind(sid)}")

    @rule(pick=PICK, prefix=PREFIX, copy=st.booleans())
    def branch(self, pick: int, prefix: str, copy: bool) -> None:
        sid, child, at = self.pick(pick), self.new_id(prefix), self.tick()
        with using(self.store.database):
            made = self.session(sid).branch(session_id=child, at=at, copy_messages=copy)
        assert made.id == child
        self.model.branch(sid, child, at, copy)
        event(f"branch: of a {self.model.kind(sid)}")

    @rule(pick=PICK, prefix=PREFIX)
    def delegate(self, pick: int, prefix: str) -> None:
        sid, child, at = self.pick(pick), self.new_id(prefix), self.tick()
        with using(self.store.database):
            made = self.session(sid).delegate(session_id=child, at=at)
        assert made.id == child
        self.model.delegate(sid, child, at)

    @rule(pick=PICK, reason=END_REASONS)
    def end(self, pick: int, reason: str) -> None:
        sid, at = self.pick(pick), self.tick()
        with using(self.store.database):
            ended = self.session(sid).end(reason, at=at)
        assert ended == self.model.end(sid, reason, at)
        event(f"end: {reason if ended else 'already ended'}")

    @rule(pick=PICK)
    def reopen(self, pick: int) -> None:
        sid = self.pick(pick)
        assert self.store.reopen_session(sid) == self.model.reopen(sid)

    def refill(self, what: str) -> None:
        """After a step that emptied the store: check it empty, then start again."""
        if not self.model.sessions:
            self.store_agrees_with_model()
            event(f"{what}: emptied the store")
            self.create_root("a", "cli", None)

    @precondition(lambda self: len(self.model.sessions) > 1)
    @rule(pick=PICK)
    def delete(self, pick: int) -> None:
        sid = self.pick(pick)
        doomed = self.model.doomed([sid])
        orphans = [
            s.id for s in self.model.sessions.values() if s.parent in doomed and s.id not in doomed
        ]
        assert self.model.delete([sid]) == 1
        assert self.store.delete_session(sid) is True
        assert self.store.delete_session(sid) is False
        event(f"delete: took {bucket(len(doomed) - 1)} subagent run(s)")
        event(f"delete: orphaned {'some' if orphans else 'none'}")
        self.refill("delete")

    @rule(picks=st.lists(PICK, max_size=2), junk=st.sampled_from([[], [None, ""], ["gone"]]))
    def delete_many(self, picks: list[int], junk: list[Any]) -> None:
        ids: list[Any] = [self.pick(p) for p in picks] + junk
        expected = self.model.delete(ids)
        assert self.store.delete_sessions(ids) == expected
        event(f"delete_many: {bucket(expected)} deleted")
        self.refill("delete_many")

    @rule(
        operation=st.sampled_from(["prune", "sweep_empty", "delete_if_empty", "prune_ghosts"]),
        pick=PICK,
        back=st.integers(min_value=0, max_value=60),
    )
    def maintain(self, operation: str, pick: int, back: int) -> None:
        """One of the sweeps, none of which cascades: prune (with a cutoff between two
        ticks of the fake clock, ``back`` ticks ago), the empty-session sweep, deleting
        one session if it is empty, and the TUI ghost sweep."""
        if operation == "prune":
            cutoff = max(T0, self.clock - back) + 0.5
            expected = self.model.prune(cutoff)
            days = (time.time() - cutoff) / 86400.0
            assert self.store.prune_sessions(older_than_days=days) == expected
        elif operation == "sweep_empty":
            expected = len(self.model.empty())
            assert self.store.count_empty_sessions() == expected
            assert self.store.delete_empty_sessions() == self.model.delete_empty() == expected
        elif operation == "delete_if_empty":
            sid = self.pick(pick)
            expected = int(self.model.delete_if_empty(sid))
            assert self.store.delete_session_if_empty(sid) is bool(expected)
        else:
            # The fake clock runs in 2023: every session started over a day ago.
            expected = self.model.prune_ghosts(time.time() - 86400.0)
            assert self.store.prune_empty_ghost_sessions() == expected
        event(f"maintain: {operation} deleted {bucket(expected)}")
        self.refill(operation)

    @rule(pick=PICK)
    def hold(self, pick: int) -> None:
        """Load an instance and keep it while other steps change the row."""
        with using(self.store.database):
            self.held = self.session(self.pick(pick))

    @precondition(lambda self: self.held is not None)
    @rule(prompt=st.sampled_from([None, "be brief"]))
    def save_held(self, prompt: str | None) -> None:
        """Save the held (stale) instance: only what it changed may reach the row."""
        held = cast(Session, self.held)
        with using(self.store.database):
            if prompt is not None:
                held.system_prompt = prompt
            saved = held.save()
        alive = held.id in self.model.sessions
        if prompt is None:
            assert saved is False  # nothing changed: nothing written
        else:
            assert saved == (1 if alive else 0)
        event(f"save_held: {'changed' if prompt else 'unchanged'}, {'alive' if alive else 'gone'}")

    @rule(pick=PICK, archived=st.booleans())
    def set_archived(self, pick: int, archived: bool) -> None:
        sid = self.pick(pick)
        chain = self.model.compression_chain(sid)
        assert self.store.set_session_archived(sid, archived) == self.model.set_archived(
            sid, archived
        )
        event(f"set_archived: chain of {bucket(len(chain))}")

    @rule(pick=PICK, title=TITLES)
    def set_title(self, pick: int, title: str | None) -> None:
        sid = self.pick(pick)
        try:
            expected = self.model.set_title(sid, title)
        except TitleInUse:
            with pytest.raises(ValueError, match="already in use"):
                self.store.set_session_title(sid, title)
            event("set_title: refused, in use")
            return
        assert self.store.set_session_title(sid, title) == expected

    # -- what must agree after every step ------------------------------------------------

    @invariant()
    def store_agrees_with_model(self) -> None:
        stored = {
            row["id"]: row for row in self.store.list_sessions(limit=None, include_archived=True)
        }
        self.check_sessions(stored)
        self.check_transcripts()
        self.check_lineage()
        self.check_listings(stored)
        self.check_file()

    def check_sessions(self, stored: dict[str, dict[str, Any]]) -> None:
        """Rows, counters, kinds and counts."""
        model = self.model
        assert sorted(stored) == sorted(model.sessions)
        for sid, s in model.sessions.items():
            count, calls = model.counters(sid)
            expected = {
                "id": sid,
                "source": s.source,
                "parent_session_id": s.parent,
                "model_config": s.model_config,
                "started_at": s.started_at,
                "ended_at": s.ended_at,
                "end_reason": s.end_reason,
                "message_count": count,
                "tool_call_count": calls,
                "rewind_count": s.rewind_count,
                "archived": s.archived,
                "title": s.title,
            }
            assert {k: stored[sid][k] for k in SESSION_FIELDS} == expected
        assert self.store.session_count(include_archived=True) == len(model.sessions)
        assert self.store.session_count() == sum(not s.archived for s in model.sessions.values())
        listable = [
            sid
            for sid, s in model.sessions.items()
            if model.kind(sid) in ("root", "branch") and not s.archived
        ]
        assert self.store.session_count(exclude_children=True) == len(listable)
        active = sum(m.active for m in model.messages.values())
        assert self.store.message_count(include_inactive=False) == active
        assert self.store.message_count() == len(model.messages)
        expected_kinds = {sid: model.kind(sid) for sid in model.sessions}
        with using(self.store.database):
            sql_kinds = cast(
                "Iterable[tuple[str, str]]", Session.select(Session.id, kind_expr(Session)).tuples()
            )
            assert dict(sql_kinds) == expected_kinds
            assert {s.id: s.kind for s in Session.select()} == expected_kinds

    def check_transcripts(self) -> None:
        """Every message of every session (soft-deleted ones too) and the conversations."""
        model = self.model
        for sid in model.sessions:
            expected = [
                {
                    "id": m.id,
                    "session_id": m.session_id,
                    "role": m.role,
                    "content": m.content,
                    "tool_calls": decode(encode_given(m.tool_calls)),
                    "tool_call_id": m.tool_call_id,
                    "tool_name": m.tool_name,
                    "timestamp": m.timestamp,
                    "active": m.active,
                }
                for m in model.session_messages(sid, include_inactive=True)
            ]
            rows = self.store.get_messages(sid, include_inactive=True)
            assert [{k: row[k] for k in MESSAGE_FIELDS} for row in rows] == expected
        # Conversations are costly to build: every continuation (the sessions
        # whose conversation has ancestors) and one more session per step.
        ids = sorted(model.sessions)
        extra = ids[self.serial % len(ids)] if ids else None
        for sid in ids:
            if model.kind(sid) == "compression" or sid == extra:
                conversation = self.store.get_messages_as_conversation(sid, include_ancestors=True)
                assert conversation == model.conversation(sid, True)
        if extra is not None:
            active = [row["id"] for row in self.store.get_messages(extra)]
            assert active == [m.id for m in model.session_messages(extra)]
            assert self.store.get_messages_as_conversation(extra) == model.conversation(
                extra, False
            )

    def check_lineage(self) -> None:
        """Compression tips and resume targets of every session (and of an unknown id)."""
        model = self.model
        for sid in [*model.sessions, UNKNOWN]:
            tip, target = model.tip(sid), model.resume_target(sid)
            assert self.store.get_compression_tip(sid) == tip, sid
            assert self.store.resolve_resume_session_id(sid) == target, sid
            if tip != sid:
                event("lineage: a compression tip differs from its session")
            if target != tip:
                event("lineage: resume walked below the tip")

    def check_listings(self, stored: dict[str, dict[str, Any]]) -> None:
        """``list_sessions_rich(limit=None)`` in four shapes."""
        variants: list[dict[str, Any]] = [
            {},
            {"include_children": True},
            {"archived_only": True},
            {"order_by_last_active": True},
        ]
        shown = ("id", "_lineage_root_id", "preview", "last_active")
        extras = ("preview", "last_active", "_lineage_root_id")
        for options in variants:
            rows = self.store.list_sessions_rich(limit=None, **options)
            seen = [{k: row[k] for k in shown if k in row} for row in rows]
            assert seen == self.model.listing(**options), options
            for row in rows:
                # A projected chain is its root's row with the tip's columns (Hermes).
                root = stored[row.get("_lineage_root_id", row["id"])]
                tip = {k: stored[row["id"]][k] for k in TIP_COLUMNS}
                assert {k: v for k, v in row.items() if k not in extras} == {**root, **tip}
            if not options and any("_lineage_root_id" in row for row in rows):
                event("listing: a row projected onto its compression tip")

    def check_file(self) -> None:
        conn = self.store._conn
        if self.store.database.dialect == "sqlite":  # PostgreSQL checks keys as it writes
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT COUNT(*) FROM compression_locks").fetchone()[0] == 0


StoreMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreAgreesWithModel = pytest.mark.slow(StoreMachine.TestCase)


class ServerStoreMachine(StoreMachine):
    """The same machine on a PostgreSQL database of its own for each example."""

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        self.folder = tempfile.TemporaryDirectory(prefix="hermes-stateful-")
        self.server = pg_server.server()
        self.url = self.server.new_database(keep=True)
        self.store = SessionDB(self.url)
        self.model = StoreModel()
        self.clock = T0
        self.serial = 0
        self.held = None

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            name = self.url.rsplit("/", 1)[1]
            self.server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Half the examples on the server: the rules and their checks are the file's, each
# example pays a database of its own, and the file's run draws the other half.
ServerStoreMachine.TestCase.settings = settings(
    StoreMachine.TestCase.settings, max_examples=StoreMachine.TestCase.settings.max_examples // 2
)
TestServerStoreAgreesWithModel = pytest.mark.postgresql(
    pytest.mark.slow(ServerStoreMachine.TestCase)
)
