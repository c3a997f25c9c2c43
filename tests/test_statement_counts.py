"""Statements per SessionDB call: a fixed number for each method, whatever the data.

Every public method of :class:`SessionDB` (read from the class: a method without
an entry in :data:`CALLS` fails the test) runs once on two stores, a small one
(short chains, few sessions, few hits) and a large one (a 200-link compression
chain, 100 delegated runs and a 40-deep nest of them, hundreds of search
hits, hundreds of messages in a session), with the statements it sends counted
(``tests/statement_count.py``, which says how transaction control is counted).
Each method's count must be the same on both stores and equal to the number
in the table "Statements per call" of ``docs/postgresql.md``.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from statement_count import counting

from hermes_models import SessionDB
from hermes_models.models import Message, Session
from hermes_models.store import using

pytestmark = pytest.mark.backends("sqlite", "postgresql")

DOC = Path(__file__).resolve().parent.parent / "docs" / "postgresql.md"

T0 = 1_700_000_000.0

#: The two stores: how many of each thing.
SIZES: dict[str, dict[str, int]] = {
    "small": {"chain": 3, "delegates": 2, "nest": 2, "plain": 3, "talk": 12, "titles": 2, "old": 2},
    "large": {
        "chain": 200,
        "delegates": 100,
        "nest": 40,
        "plain": 150,
        "talk": 300,
        "titles": 60,
        "old": 60,
    },
}


def _session(sid: str, at: float, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {  # every row names every column: insert_many reads the first
        "id": sid,
        "source": "cli",
        "started_at": T0 + at,
        "message_count": 0,
        "parent": None,
        "model_config": None,
        "ended_at": None,
        "end_reason": None,
        "title": None,
    }
    row.update(fields)
    return row


def _delegated(parent: str) -> str:
    return json.dumps({"_delegate_from": parent})


def build(store: SessionDB, size: dict[str, int], tmp_path: Path) -> dict[str, Any]:
    """Fill ``store`` (plain inserts, one transaction) and return what the calls need."""
    sessions: list[dict[str, Any]] = []
    messages: list[tuple[str, str, str, float]] = []

    def say(sid: str, n: int, at: float, word: str = "docker") -> None:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            messages.append((sid, role, f"{word} {sid} line {i}", T0 + at + i))

    chain = [f"chain-{i}" for i in range(size["chain"])]
    for i, sid in enumerate(chain):
        last = i == len(chain) - 1
        sessions.append(
            _session(
                sid,
                i * 10,
                parent=chain[i - 1] if i else None,
                ended_at=None if last else T0 + i * 10 + 5,
                end_reason=None if last else "compression",
                title="work" if i == 0 else None,
            )
        )
        say(sid, 2, i * 10)
    for n in range(2, size["titles"] + 2):
        sessions.append(_session(f"titled-{n}", 5000 + n, title=f"work #{n}"))
    for name in ("boss", "boss2", "boss3"):
        sessions.append(_session(name, 6000))
        say(name, 2, 6000)
        for i in range(size["delegates"]):
            sid = f"{name}-run-{i}"
            sessions.append(_session(sid, 6001 + i, parent=name, model_config=_delegated(name)))
            say(sid, 1, 6001 + i)
        above = name
        for i in range(size["nest"]):
            sid = f"{name}-nest-{i}"
            sessions.append(_session(sid, 6500 + i, parent=above, model_config=_delegated(above)))
            say(sid, 1, 6500 + i)
            above = sid
    for i in range(size["plain"]):
        sid = f"plain-{i}"
        sessions.append(_session(sid, 7000 + i, source="telegram"))
        say(sid, 2, 7000 + i)
        sessions.append(_session(f"empty-{i}", 7000 + i))
        sessions.append(_session(f"cron_job1_{i}", 7000 + i, source="cron"))
        say(f"cron_job1_{i}", 1, 7000 + i)
    for i in range(size["old"]):
        sid = f"old-{i}"
        sessions.append(_session(sid, i, source="old", ended_at=T0 + i + 1, end_reason="done"))
        say(sid, 2, i)
        run = f"old-{i}-run"
        sessions.append(_session(run, i, source="old", parent=sid, model_config=_delegated(sid)))
        say(run, 1, i)
    for i in range(size["old"]):
        sid = f"older-{i}"
        sessions.append(_session(sid, i, source="older", ended_at=T0 + i + 1, end_reason="done"))
        say(sid, 2, i)
        run = f"older-{i}-run"
        sessions.append(_session(run, i, source="older", parent=sid, model_config=_delegated(sid)))
        say(run, 1, i)
    for name in ("talk", "talk2", "talk3"):
        sessions.append(_session(name, 9000))
        say(name, size["talk"], 9000)
    counts: dict[str, int] = {}
    for sid, *_ in messages:
        counts[sid] = counts.get(sid, 0) + 1
    for row in sessions:
        row["message_count"] = counts.get(row["id"], 0)
    with using(store.database), store.database.atomic():
        for start in range(0, len(sessions), 500):
            Session.insert_many(sessions[start : start + 500]).execute()
        fields = [Message.session, Message.role, Message.content, Message.timestamp]
        for start in range(0, len(messages), 500):
            Message.insert_many(messages[start : start + 500], fields=fields).execute()
    with using(store.database):
        talk = [
            m.id
            for m in Message.select(Message.id)
            .where(Message.session == "talk")
            .order_by(Message.id)
        ]
    # The package's own writes keep the gram index in step before they commit; the
    # plain inserts above left it behind, as another program's writes would.
    store.update_search_index()
    for i in range(size["titles"]):
        store.request_handoff(f"plain-{i}", "telegram")
    # What the imports read is the call's input, not the store: the same on both.
    store.export_bundle(tmp_path / "one.bundle", session_id="old-0")
    transcript = tmp_path / "legacy.jsonl"
    lines = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"line {n}", "timestamp": 10 + n}
        for n in range(12)
    ]
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {
        "tip": chain[-1],
        "root": chain[0],
        "talk": talk,
        "tmp": tmp_path,
        "transcript": transcript,
        "replacement": [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"new {n}"} for n in range(4)
        ],
    }


#: What a write on a file runs after it when the WAL passed its bound.
WAL_BOUND_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"

Call = Callable[[SessionDB, dict[str, Any]], Any]


def _refused(call: Call) -> Call:
    """A call the backend may refuse (a file's tool on a server): counted either way."""

    def run(store: SessionDB, w: dict[str, Any]) -> Any:
        try:
            return call(store, w)
        except Exception as exc:  # the refusal is the answer on a server
            return exc

    return run


#: Each public method, the call that exercises it, in the order they run (later
#: calls may rely on what earlier ones wrote; deletions come late).
CALLS: dict[str, Call] = {
    "create_session": lambda s, w: s.create_session("new-1", "cli", parent_session_id=w["tip"]),
    "ensure_session": lambda s, w: s.ensure_session("new-2", "cli"),
    "end_session": lambda s, w: s.end_session("new-2", "user_exit"),
    "reopen_session": lambda s, w: s.reopen_session("new-2"),
    "get_session": lambda s, w: s.get_session(w["tip"]),
    "resolve_session_id": lambda s, w: s.resolve_session_id("chain-1"),
    "update_system_prompt": lambda s, w: s.update_system_prompt("new-1", "be brief"),
    "update_session_model": lambda s, w: s.update_session_model("new-1", "m2", {"t": 1}),
    "update_session_cwd": lambda s, w: s.update_session_cwd("new-1", "/tmp", "main"),
    "update_session_meta": lambda s, w: s.update_session_meta("new-1", model="m3"),
    "update_token_counts": lambda s, w: s.update_token_counts("new-1", 10, 20, model="m3"),
    "list_sessions": lambda s, w: s.list_sessions(limit=20),
    "list_sessions_rich": lambda s, w: s.list_sessions_rich(limit=20),
    "list_cron_job_runs": lambda s, w: s.list_cron_job_runs("job1"),
    "search_sessions_by_id": lambda s, w: s.search_sessions_by_id("chain"),
    "session_count": lambda s, w: s.session_count(),
    "message_count": lambda s, w: s.message_count(),
    "set_session_archived": lambda s, w: s.set_session_archived(w["tip"], True),
    "sanitize_title": lambda s, w: s.sanitize_title("  a title  "),
    "set_session_title": lambda s, w: s.set_session_title(w["tip"], "work #900"),
    "get_session_title": lambda s, w: s.get_session_title(w["tip"]),
    "get_session_by_title": lambda s, w: s.get_session_by_title("work"),
    "resolve_session_by_title": lambda s, w: s.resolve_session_by_title("work"),
    "get_next_title_in_lineage": lambda s, w: s.get_next_title_in_lineage("work"),
    "append_message": lambda s, w: s.append_message(w["tip"], "user", "docker once more"),
    "get_messages": lambda s, w: s.get_messages("talk"),
    "get_messages_as_conversation": lambda s, w: s.get_messages_as_conversation(
        w["tip"], include_ancestors=True
    ),
    "get_messages_around": lambda s, w: s.get_messages_around("talk", w["talk"][6]),
    "get_anchored_view": lambda s, w: s.get_anchored_view("talk", w["talk"][6]),
    "list_recent_user_messages": lambda s, w: s.list_recent_user_messages("talk"),
    "replace_messages": lambda s, w: s.replace_messages("talk3", w["replacement"]),
    "rewind_to_message": lambda s, w: s.rewind_to_message("talk", w["talk"][4]),
    "restore_rewound": lambda s, w: s.restore_rewound("talk", w["talk"][5]),
    "clear_messages": lambda s, w: s.clear_messages("talk2"),
    "get_compression_tip": lambda s, w: s.get_compression_tip(w["root"]),
    "resolve_resume_session_id": lambda s, w: s.resolve_resume_session_id(w["root"]),
    "try_acquire_compression_lock": lambda s, w: s.try_acquire_compression_lock(w["tip"], "me"),
    "get_compression_lock_holder": lambda s, w: s.get_compression_lock_holder(w["tip"]),
    "release_compression_lock": lambda s, w: s.release_compression_lock(w["tip"], "me"),
    "set_meta": lambda s, w: s.set_meta("k", "v"),
    "get_meta": lambda s, w: s.get_meta("k"),
    "new_session_id": lambda s, w: s.new_session_id(),
    "finalize_orphaned_compression_sessions": lambda s, w: (
        s.finalize_orphaned_compression_sessions()
    ),
    "request_handoff": lambda s, w: s.request_handoff("talk", "telegram"),
    "claim_handoff": lambda s, w: s.claim_handoff("talk"),
    "complete_handoff": lambda s, w: s.complete_handoff("talk"),
    "fail_handoff": lambda s, w: s.fail_handoff("plain-0", "gone"),
    "get_handoff_state": lambda s, w: s.get_handoff_state("plain-1"),
    "list_pending_handoffs": lambda s, w: s.list_pending_handoffs(),
    "apply_telegram_topic_migration": lambda s, w: s.apply_telegram_topic_migration(),
    "enable_telegram_topic_mode": lambda s, w: s.enable_telegram_topic_mode(
        chat_id="c1", user_id="u1"
    ),
    "is_telegram_topic_mode_enabled": lambda s, w: s.is_telegram_topic_mode_enabled(
        chat_id="c1", user_id="u1"
    ),
    "bind_telegram_topic": lambda s, w: s.bind_telegram_topic(
        chat_id="c1", thread_id="t1", user_id="u1", session_key="k1", session_id="plain-2"
    ),
    "get_telegram_topic_binding": lambda s, w: s.get_telegram_topic_binding(
        chat_id="c1", thread_id="t1"
    ),
    "list_telegram_topic_bindings_for_chat": lambda s, w: s.list_telegram_topic_bindings_for_chat(
        chat_id="c1"
    ),
    "get_telegram_topic_binding_by_session": lambda s, w: s.get_telegram_topic_binding_by_session(
        session_id="plain-2"
    ),
    "is_telegram_session_linked_to_topic": lambda s, w: s.is_telegram_session_linked_to_topic(
        session_id="plain-2"
    ),
    "list_unlinked_telegram_sessions_for_user": lambda s, w: (
        s.list_unlinked_telegram_sessions_for_user(chat_id="c1", user_id="u1")
    ),
    "disable_telegram_topic_mode": lambda s, w: s.disable_telegram_topic_mode(chat_id="c1"),
    "search_messages": lambda s, w: s.search_messages("docker"),
    "search_sessions": lambda s, w: s.search_sessions("docker"),
    "export_session": lambda s, w: s.export_session(w["tip"]),
    "export_all": lambda s, w: s.export_all(source="old"),
    "export_bundle": lambda s, w: s.export_bundle(w["tmp"] / "old.bundle", source="old"),
    "export_markdown": lambda s, w: s.export_markdown(w["tmp"] / "md", session_id=w["tip"]),
    "delete_session": lambda s, w: s.delete_session("boss"),
    "delete_sessions": lambda s, w: s.delete_sessions(["boss2", "boss3"]),
    "delete_session_if_empty": lambda s, w: s.delete_session_if_empty("empty-0"),
    "count_empty_sessions": lambda s, w: s.count_empty_sessions(),
    "delete_empty_sessions": lambda s, w: s.delete_empty_sessions(),
    "prune_empty_ghost_sessions": lambda s, w: s.prune_empty_ghost_sessions(),
    "prune_sessions": lambda s, w: s.prune_sessions(older_than_days=30, source="old"),
    "erase_sessions": lambda s, w: s.erase_sessions(["older-0"]),
    "plan_retention": lambda s, w: s.plan_retention(older_than_days=30, sources=["older"]),
    "retain_sessions": lambda s, w: s.retain_sessions(older_than_days=30, sources=["older"]),
    "redact_secrets": lambda s, w: s.redact_secrets(),
    "import_bundle": lambda s, w: s.import_bundle(w["tmp"] / "one.bundle"),
    "import_transcripts": lambda s, w: s.import_transcripts(w["transcript"]),
    "optimize_fts": lambda s, w: s.optimize_fts(),
    "update_search_index": lambda s, w: s.update_search_index(),
    "vacuum": _refused(lambda s, w: s.vacuum()),
    "backup": _refused(lambda s, w: s.backup(w["tmp"] / "backup.db")),
    "maybe_auto_prune_and_vacuum": lambda s, w: s.maybe_auto_prune_and_vacuum(),
    "close": lambda s, w: s.close(),
}


def public_methods() -> set[str]:
    """The public methods of SessionDB (properties left out)."""
    names = set()
    for name in dir(SessionDB):
        if name.startswith("_"):
            continue
        attribute = inspect.getattr_static(SessionDB, name)
        if isinstance(attribute, property):
            continue
        if callable(getattr(SessionDB, name)):
            names.add(name)
    return names


def documented() -> dict[str, dict[str, int]]:
    """The table "Statements per call" of docs/postgresql.md: method -> backend -> count."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Statements per call", 1)[1].split("\n## ", 1)[0]
    table: dict[str, dict[str, int]] = {}
    for match in re.finditer(r"^\| `(\w+)` \| (\d+) \| (\d+) \|", section, re.MULTILINE):
        name, server, file = match.groups()
        table[name] = {"postgresql": int(server), "sqlite": int(file)}
    return table


def measure(store: SessionDB, world: dict[str, Any]) -> dict[str, tuple[int, list[str]]]:
    """Each call of :data:`CALLS`, in order: its statement count and statements."""
    db = store.database
    found: dict[str, tuple[int, list[str]]] = {}
    for name, call in CALLS.items():
        with counting(db) as counted:
            call(store, world)
        # On a file, a write that left the WAL past its bound is followed by a passive
        # checkpoint (store.writes): the file's upkeep, by the WAL's size, not a query.
        statements = [sql for sql in counted.statements if sql != WAL_BOUND_CHECKPOINT]
        found[name] = (len(without_merge_steps(statements)), statements)
    return found


#: A step of FTS5's incremental merge (``grams.merge_in_steps``): one short write each.
MERGE_STEP = re.compile(r"INSERT INTO (\w+)\(\1, rank\) VALUES \('merge', -?\d+\)")


def without_merge_steps(statements: list[str]) -> list[str]:
    """``statements`` less each merge step and the write around it (BEGIN IMMEDIATE,
    the merge, COMMIT): an erase on a file merges each index a step of 1,000 leaf pages
    at a time, so a gateway waits for one step; how many steps is the index's size."""
    kept: list[str] = []
    i = 0
    while i < len(statements):
        step = statements[i : i + 3]
        if len(step) == 3 and step[0] == "BEGIN IMMEDIATE" and step[2] == "COMMIT":
            if MERGE_STEP.fullmatch(step[1]):
                i += 3
                continue
        kept.append(statements[i])
        i += 1
    return kept


#: Passes over the whole store in short writes: the table gives their statements per
#: batch (a batch of rows: read, and an UPDATE for each row that changed).
PER_BATCH = frozenset({"redact_secrets"})
#: What a batch of :data:`PER_BATCH` sends besides its read and its updates.
BATCH_CONTROL = re.compile(r"BEGIN( IMMEDIATE| ISOLATION LEVEL [A-Z ]+)?|COMMIT")


def test_every_public_method_has_a_call() -> None:
    assert set(CALLS) == public_methods()


def test_the_table_lists_every_method() -> None:
    assert set(documented()) == public_methods()


@pytest.fixture(params=sorted(SIZES))
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_statements_per_call_are_fixed_and_documented(
    store: SessionDB, backend: str, size: str, tmp_path: Path
) -> None:
    world = build(store, SIZES[size], tmp_path)
    found = measure(store, world)
    table = documented()
    for name in PER_BATCH:
        count, statements = found[name]
        reads = [sql for sql in statements if sql.startswith("SELECT")]
        others = [sql for sql in statements if not sql.startswith("SELECT")]
        # Nothing but batches: a read each, transaction control, no per-row statement.
        assert all(BATCH_CONTROL.fullmatch(sql) for sql in others), others
        found[name] = (count // len(reads) if count % len(reads) == 0 else -1, statements)
    wrong = {
        name: (count, table.get(name, {}).get(backend), statements)
        for name, (count, statements) in found.items()
        if count != table.get(name, {}).get(backend)
    }
    assert {k: v[:2] for k, v in wrong.items()} == {}, wrong
