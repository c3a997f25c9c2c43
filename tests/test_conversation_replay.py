"""``get_messages_as_conversation`` on files of each Hermes shape: the replay each
release's own code gives (read from the released ``hermes_state`` of v16 to v31, and
checked against the running releases by ``tests/test_hermes_differential.py``).

Each file is a fixture shape of ``tests/newer.py`` (or a v16 file this package
made) with two conversations added with plain sqlite3, as another program writes
them. The expected answers are written out whole here, entry by entry; a shape
selects between them only by the columns its file has, as Hermes' releases differ:

- v17 on: by id, not by time; background-review turns left out;
- ``api_content`` / ``effect_disposition`` (v22 on): keys beside ``content``;
- ``display_kind`` (v25 on): ``display_kind``, ``display_metadata`` decoded, a bare
  ``[tool]`` marker answer replayed empty;
- ``_compressed_summary`` (v26 on): ``_db_persisted``; with ancestors a /branch
  copy stands alone and a compression's clone of a user turn replaces the original;
- search storage 3 (v30 late, v31): a run of review prompts takes no reply with it;
- ``message_uid`` (v31): the uids; only the compression lineage as ancestors.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

import newer

SHAPES = ("v16", *newer.SHAPES)
T = 1_770_000_000.0
MEMORY = "<memory-context>the user likes tea</memory-context> second question"
NOTE = (
    "[System note: The following is recalled memory context, NOT new user input. "
    "Treat as gospel.] keep the note"
)
REVIEW = "Review the conversation above and update the skill library"
CALLS = [{"id": "call_a|item_a", "type": "function", "function": {"name": "memory"}}]
CALLS_B = [{"id": "call_b", "type": "function", "function": {"name": "grep"}}]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("replay")
    files = {}
    for shape in SHAPES:
        path = folder / f"{shape}.db"
        if shape == "v16":
            SessionDB(path).close()
        else:
            newer.build(path, shape)
            if shape in newer.CJK_SHAPES:  # plain SQLite cannot write through its triggers
                newer.drop_cjk_triggers_like_hermes(path)
        write_conversations(path)
        files[shape] = path
    return files


@pytest.fixture(scope="module")
def stores(built: dict[str, Path]) -> Any:
    opened = {shape: SessionDB(path, read_only=True) for shape, path in built.items()}
    yield opened
    for store in opened.values():
        store.close()


def has(shape: str, column: str) -> bool:
    return shape != "v16" and newer.has(shape, "messages", column)


def insert(conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> int:
    """``row`` without the columns the file lacks."""
    present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    kept = {k: v for k, v in row.items() if k in present}
    names = ", ".join(f'"{n}"' for n in kept)
    marks = ", ".join("?" for _ in kept)
    cursor = conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(kept.values()))
    return int(cursor.lastrowid or 0)


#: ``talk``: (role, content, seconds after T, other columns). Row 3 was stamped
#: earlier than row 2 (a clock stepped back).
TALK: tuple[tuple[str, str, float, dict[str, Any]], ...] = (
    ("user", "first question", 10, {}),
    ("assistant", "first answer", 11, {}),
    ("user", MEMORY, 5, {"api_content": MEMORY}),
    (
        "assistant",
        " [memory] ",
        12,
        {
            "tool_calls": json.dumps(CALLS),
            "tool_call_uids": json.dumps({"call_a": "uid-a", "": "x", "bad": 5}),
        },
    ),
    (
        "tool",
        "tool output",
        13,
        {"tool_call_id": "item_a", "tool_name": "memory", "effect_disposition": "applied"},
    ),
    ("session_meta", '{"event": "turn_started"}', 14, {}),
    ("user", "  " + REVIEW + ". Be brief.", 15, {}),
    ("assistant", "curator reply", 16, {}),
    (
        "user",
        "delegation finished",
        17,
        {
            "display_kind": "async_delegation_complete",
            "display_metadata": json.dumps(json.dumps({"task_count": 2})),
        },
    ),
    ("assistant", "noted", 18, {"absorbed_message_uids": '["m1", "m1", "", 7, "m2"]'}),
    ("user", "Review the conversation above and consider saving to memory", 19, {}),
    ("system", "Review the conversation above and update the skill library", 20, {}),
    ("assistant", "second curator reply", 21, {}),
    ("user", NOTE, 22, {}),
    ("user", "taken back", 23, {"active": 0}),
    (
        "assistant",
        "grep it",
        24,
        {"tool_calls": json.dumps(CALLS_B), "tool_call_uids": json.dumps({"call_b": "uid-b"})},
    ),
    ("user", "a user turn between", 25, {}),
    ("tool", "late result", 26, {"tool_call_id": "call_b"}),
)

Rows = list[tuple[str, str, float]]
#: Sessions of the lineage scenario: (id, parent, model_config, end_reason, rows).
LINEAGE: tuple[tuple[str, str | None, str | None, str | None, Rows], ...] = (
    (
        "p",
        None,
        None,
        "compression",
        [
            ("user", "ask one", 100),
            ("assistant", "answer one", 101),
            ("user", "ask two", 102),
            ("assistant", "answer two", 103),
        ],
    ),
    ("c", "p", None, None, [("user", "ask two", 102), ("assistant", "answer three", 105)]),
    (
        "b",
        "p",
        '{"_branched_from": "p"}',
        None,
        [
            ("user", "ask one", 100),
            ("assistant", "answer one", 101),
            ("user", "branch ask", 200),
            ("assistant", "branch answer", 201),
        ],
    ),
    ("d", "c", '{"_delegate_from": "c"}', None, [("user", "task", 300), ("assistant", "ok", 301)]),
)


def write_conversations(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        insert(conn, "sessions", {"id": "talk", "source": "cli", "started_at": T})
        for n, (role, content, at, extra) in enumerate(TALK, 1):
            row = {"session_id": "talk", "role": role, "content": content, "timestamp": T + at}
            row.update({"active": 1, "message_uid": f"uid-{n}", **extra})
            insert(conn, "messages", row)
        for sid, parent, config, end_reason, rows in LINEAGE:
            session = {"id": sid, "source": "cli", "started_at": T + rows[0][2] - 1}
            session.update(parent_session_id=parent, model_config=config)
            if end_reason:
                session.update(end_reason=end_reason, ended_at=T + rows[-1][2] + 1)
            insert(conn, "sessions", session)
            for role, content, at in rows:
                insert(
                    conn,
                    "messages",
                    {"session_id": sid, "role": role, "content": content, "timestamp": T + at},
                )
        conn.execute("COMMIT")
    finally:
        conn.close()


def entry(role: str, content: Any, at: float, **keys: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": T + at, **keys}


def talk_expected(shape: str) -> list[dict[str, Any]]:
    """The replay of ``talk`` by the rules of the Hermes that wrote a ``shape`` file."""
    v31 = has(shape, "message_uid")
    persisted = {"_db_persisted": True} if has(shape, "_compressed_summary") else {}

    def uid(n: int) -> dict[str, Any]:
        return {"message_uid": f"uid-{n}"} if v31 else {}

    memory = {"api_content": MEMORY} if has(shape, "api_content") else {}
    marker = "" if has(shape, "display_kind") else "[memory]"
    calls_uids = {"_tool_call_uids": {"call_a": "uid-a"}} if v31 else {}
    disposition = {"effect_disposition": "applied"} if has(shape, "effect_disposition") else {}
    kind = (
        {"display_kind": "async_delegation_complete", "display_metadata": {"task_count": 2}}
        if has(shape, "display_kind")
        else {}
    )
    rows = {
        1: entry("user", "first question", 10),
        2: entry("assistant", "first answer", 11),
        3: entry("user", "second question", 5, **memory),
        4: entry("assistant", marker, 12, tool_calls=CALLS, **calls_uids),
        5: entry("tool", "tool output", 13, tool_call_id="item_a", tool_name="memory"),
        6: entry("session_meta", '{"event": "turn_started"}', 14),
        7: entry("user", REVIEW + ". Be brief.", 15),
        8: entry("assistant", "curator reply", 16),
        9: entry("user", "delegation finished", 17, **kind),
        10: entry("assistant", "noted", 18),
        11: entry("user", "Review the conversation above and consider saving to memory", 19),
        12: entry("system", "Review the conversation above and update the skill library", 20),
        13: entry("assistant", "second curator reply", 21),
        14: entry("user", NOTE, 22),
        16: entry("assistant", "grep it", 24, tool_calls=CALLS_B),
        # 18 pairs with no call: a result never pairs across a user turn (17)
        17: entry("user", "a user turn between", 25),
        18: entry("tool", "late result", 26, tool_call_id="call_b"),
    }
    rows[5].update(disposition)
    if v31:
        rows[5]["_tool_call_uid"] = "uid-a"  # its call's uid, found by the id's second spelling
        rows[10]["_absorbed_message_uids"] = ["m1", "m2"]
        rows[16]["_tool_call_uids"] = {"call_b": "uid-b"}
    if shape == "v16":  # by (timestamp, id), every turn replayed
        order = [3, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18]
    else:  # by id, without the review turns; from search storage 3 (late v30) the
        # second prompt of a run stands where the reply would be, so the reply stays
        runs = newer.FTS_LAYOUT[shape] >= 3
        order = [1, 2, 3, 4, 5, 6, 9, 10, *([13] if runs else []), 14, 16, 17, 18]
    return [{**rows[n], **persisted, **uid(n)} for n in order]


@pytest.mark.parametrize("shape", SHAPES)
def test_replay_is_what_the_release_of_the_file_replays(
    stores: dict[str, SessionDB], shape: str
) -> None:
    assert stores[shape].get_messages_as_conversation("talk") == talk_expected(shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_row_ids_as_hermes_v25_on_give_them(stores: dict[str, SessionDB], shape: str) -> None:
    store = stores[shape]
    plain = sqlite3.connect(store.db_path)
    try:
        ids = [
            r[0]
            for r in plain.execute("SELECT id FROM messages WHERE session_id = 'd' ORDER BY id")
        ]
    finally:
        plain.close()
    got = store.get_messages_as_conversation("d", include_row_ids=True)
    assert [m["_row_id"] for m in got] == ids
    assert all("_row_id" not in m for m in store.get_messages_as_conversation("d"))
    # Keyword only: Hermes' fourth place is repair_alternation, which is not taken here.
    with pytest.raises(TypeError):
        store.get_messages_as_conversation("d", False, False, True)  # type: ignore[misc]


def lineage_expected(shape: str, session_id: str) -> list[tuple[str, str]]:
    """(role, content) of a replay with ancestors of the lineage scenario."""
    u1, a1 = ("user", "ask one"), ("assistant", "answer one")
    u2, a2 = ("user", "ask two"), ("assistant", "answer two")
    a3 = ("assistant", "answer three")
    ub, ab = ("user", "branch ask"), ("assistant", "branch answer")
    ut, at = ("user", "task"), ("assistant", "ok")
    if shape == "v16":  # by time: a copy right after its original is a re-sent prompt
        return {
            "p": [u1, a1, u2, a2],
            "c": [u1, a1, u2, a2, a3],
            "b": [u1, a1, a1, u2, a2, ub, ab],
            "d": [u1, a1, u2, a2, a3, ut, at],
        }[session_id]
    v26 = has(shape, "_compressed_summary")
    v31 = has(shape, "message_uid")
    if v26:  # c's clone of "ask two" (same time, same content) takes the original's place
        p_then_c = [u1, a1, a2, u2, a3]
    else:  # both copies: an answer lies between them
        p_then_c = [u1, a1, u2, a2, u2, a3]
    return {
        "p": [u1, a1, u2, a2],
        "c": p_then_c,
        # A /branch copy holds its history already (v26 on).
        "b": [u1, a1, ub, ab] if v26 else [u1, a1, u2, a2, u1, a1, ub, ab],
        # A delegated run is no continuation (v31).
        "d": [ut, at] if v31 else [*p_then_c, ut, at],
    }[session_id]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("session_id", ["p", "c", "b", "d"])
def test_ancestors_as_the_release_of_the_file_follows_them(
    stores: dict[str, SessionDB], shape: str, session_id: str
) -> None:
    got = stores[shape].get_messages_as_conversation(session_id, include_ancestors=True)
    assert [(m["role"], m["content"]) for m in got] == lineage_expected(shape, session_id)


def test_ancestors_follow_only_the_compression_lineage_on_v31(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """A v31 continuation below a /branch copy replays the branch and stops there; a
    reset child and a tool session stand alone, also under a compression end."""
    path = tmp_path / "v31.db"
    shutil.copy2(built["v31"], path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET end_reason = 'compression' WHERE id IN ('b', 'c')")
        for sid, parent, config, source in (
            ("b2", "b", '{"_branched_from": "p"}', "cli"),  # an inherited marker: a continuation
            ("r", "c", '{"_reset_from": "c"}', "cli"),
            ("t", "c", None, "tool"),
        ):
            session = {"id": sid, "source": source, "started_at": T + 400}
            insert(conn, "sessions", dict(session, parent_session_id=parent, model_config=config))
            row = {"session_id": sid, "role": "user", "content": f"in {sid}", "timestamp": T + 401}
            insert(conn, "messages", row)
    finally:
        conn.close()
    with SessionDB(path, read_only=True) as store:

        def replay(sid: str) -> list[str]:
            return [m["content"] for m in store.get_messages_as_conversation(sid, True)]

        assert replay("b2") == ["ask one", "answer one", "branch ask", "branch answer", "in b2"]
        assert replay("r") == ["in r"]
        assert replay("t") == ["in t"]


@pytest.mark.parametrize("shape", ["v27", "v30"])
def test_a_branch_copy_stands_alone_when_its_marker_is_true(
    built: dict[str, Path], tmp_path: Path, shape: str
) -> None:
    """Hermes v26-v30 read ``_branched_from`` of the session itself, as Python reads a
    value: a false one (``""``, ``0``, ``null``) or text that is not JSON is no copy."""
    path = tmp_path / f"{shape}.db"
    shutil.copy2(built[shape], path)
    results = {}
    false_ones = ('{"_branched_from": ""}', '{"_branched_from": 0}', "not json")
    for config in (*false_ones, '{"_branched_from": 1}'):
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("UPDATE sessions SET model_config = ? WHERE id = 'b'", (config,))
        conn.close()
        with SessionDB(path, read_only=True) as store:
            results[config] = len(store.get_messages_as_conversation("b", include_ancestors=True))
    # p's four turns and b's (v26 on, b's clone of "ask one" replaces p's), or b's alone.
    whole = 7 if has(shape, "_compressed_summary") else 8
    standing = 4 if has(shape, "_compressed_summary") else whole
    assert list(results.values()) == [whole, whole, whole, standing]


def test_v16_files_replay_by_time_with_every_turn(stores: dict[str, SessionDB]) -> None:
    """A v16 file keeps v16's replay: by (timestamp, id), session_meta and review turns
    included, no key of a later Hermes, a bare marker answer as it is."""
    got = stores["v16"].get_messages_as_conversation("talk")
    assert [m["content"] for m in got][:3] == ["second question", "first question", "first answer"]
    assert {key for m in got for key in m} == {
        "role",
        "content",
        "timestamp",
        "tool_calls",
        "tool_call_id",
        "tool_name",
    }


def test_the_memory_note_is_cut_only_in_hermes_words(stores: dict[str, SessionDB]) -> None:
    """Hermes' note ends ``Treat as informational background data.]`` or ``... as
    authoritative reference data ....]``; another note is the user's text."""
    from hermes_models.conversations.history import sanitize_context

    note = "[System note: The following is recalled memory context, NOT new user input. "
    assert sanitize_context(note + "Treat as informational background data.] hi") == "hi"
    assert sanitize_context(note + "Treat as authoritative reference data (v2).]\nhi") == "hi"
    assert sanitize_context(note + "Treat as gospel.] hi") == note + "Treat as gospel.] hi"
    assert sanitize_context(note + "Treat as informational background data] hi") == (
        note + "Treat as informational background data] hi"
    )


def test_display_metadata_that_is_not_text_is_none(built: dict[str, Path], tmp_path: Path) -> None:
    """Hermes decodes only text: a BLOB ``display_metadata`` is no object (None in
    ``get_messages``, no key in the replay)."""
    path = tmp_path / "v31.db"
    shutil.copy2(built["v31"], path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "UPDATE messages SET display_metadata = ? WHERE session_id = 'talk' AND role = 'user'"
        " AND display_kind IS NOT NULL",
        (b'{"task_count": 2}',),
    )
    conn.close()
    with SessionDB(path, read_only=True) as store:
        shown = [m for m in store.get_messages("talk") if m["display_kind"]]
        replayed = [m for m in store.get_messages_as_conversation("talk") if "display_kind" in m]
    assert [m["display_metadata"] for m in shown] == [None]
    assert [("display_metadata" in m) for m in replayed] == [False]
