"""The whole read surface on files of newer Hermes versions (v17-v31 and a fork stamping 33).

Every test runs on each fixture shape of ``tests/newer.py``. Expected values
are computed here from the fixture's data set (``newer.SESSIONS``,
``newer.MESSAGES`` as each shape stores them) by the reading rules of
HERMES_NEWER (section 3) and HERMES_V16 (the v16 behaviour those rules
amend), or read from the file with plain sqlite3: never from this package's
own SQL.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import peewee
import pytest
from console_script import run

import hermes_models
from hermes_models import Message, SchemaTooNewError, Session, SessionDB
from hermes_models.conversations import history
from hermes_models.driver import sqlite3

import newer

SHAPES = [pytest.param(shape, id=shape) for shape in newer.SHAPES]

#: Sources Hermes v30 keeps out of human pickers (HERMES_NEWER 3.5, INTERNAL_LISTING_SOURCES).
#: Parent end reasons after which a child on the same routing key is a reset continuation.
RESET_REASONS = (
    "session_reset",
    "session_switch",
    "idle",
    "daily",
    "suspended",
    "resume_pending_expired",
)
MARKERS = ("_branched_from", "_delegate_from", "_reset_from")
#: The tables of a v16 store (whose rows are a bundle's sessions and messages, or none).
V16_TABLES = ("sessions", "messages", "state_meta", "compression_locks", "schema_version")


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each shape built once for the module; tests that change a file copy it first."""
    folder = tmp_path_factory.mktemp("newer-reading")
    return {shape: newer.build(folder / f"{shape}.db", shape) for shape in newer.SHAPES}


@pytest.fixture(scope="module")
def stores(built: dict[str, Path]) -> Iterator[dict[str, SessionDB]]:
    """One SessionDB per built file, shared by the read-only tests."""
    opened = {shape: SessionDB(path) for shape, path in built.items()}
    yield opened
    for store in opened.values():
        store.close()


@pytest.fixture
def copy_of(built: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    def make(shape: str) -> Path:
        target = tmp_path / f"{shape}.db"
        shutil.copy2(built[shape], target)
        return target

    return make


def plain(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def file_rows(path: Path, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as stored, read with plain sqlite3 (by rowid)."""
    conn = plain(path)
    try:
        return newer.rows(conn, table)
    finally:
        conn.close()


def change(path: Path, *statements: str) -> None:
    """Run ``statements`` on ``path`` with plain sqlite3, as another program would."""
    conn = plain(path)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


# -- expected values from the data set and HERMES_NEWER -------------------------------------------


def sessions_of(shape: str) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in newer.written_sessions(shape)}


def decode(stored: Any) -> Any:
    """``messages.content`` as appended: the ``\\x00json:`` sentinel decoded."""
    if isinstance(stored, str) and stored.startswith(newer.JSON_SENTINEL):
        return json.loads(stored[len(newer.JSON_SENTINEL) :])
    return stored


def as_get_messages(row: dict[str, Any]) -> dict[str, Any]:
    """A stored message row as ``get_messages`` returns it: content and tool_calls
    decoded (HERMES_V16), and as Hermes v25+ runs it: ``display_metadata`` decoded,
    ``display_identity`` and ``display_order`` left out, ``_compressed_summary`` only
    when true (as ``True``)."""
    out = dict(row, content=decode(row["content"]))
    if row.get("tool_calls"):
        out["tool_calls"] = json.loads(row["tool_calls"])
    if row.get("display_metadata") is not None:
        meta = json.loads(row["display_metadata"])
        out["display_metadata"] = meta if isinstance(meta, dict) else None
    out.pop("display_identity", None)
    out.pop("display_order", None)
    if out.pop("_compressed_summary", 0):
        out["_compressed_summary"] = True
    return out


def prompt_text(session_id: str) -> str | None:
    """The decoded system prompt the data set gives a session."""
    return next(s for s in newer.SESSIONS if s["id"] == session_id).get("system_prompt")


def markers(row: dict[str, Any]) -> dict[str, Any]:
    """The lineage markers of a row's ``model_config`` (invalid JSON: none)."""
    try:
        config = json.loads(row.get("model_config") or "{}")
    except ValueError:
        return {}
    if not isinstance(config, dict):
        return {}
    return {k: config[k] for k in MARKERS if config.get(k) is not None}


def expected_kind(shape: str, session_id: str) -> str:
    """HERMES_NEWER 3.5, in this package's names: ``root``, ``compression`` (a continuation),
    ``ephemeral`` (a subagent run) or ``branch`` (a /branch fork or a reset child)."""
    by_id = sessions_of(shape)
    row = by_id[session_id]
    marks = markers(row)
    parent = by_id.get(row.get("parent_session_id") or "")
    if parent is None:
        return "ephemeral" if "_delegate_from" in marks else "root"
    if parent.get("end_reason") == "compression":
        # Continuations inherit the parent's config: only a marker naming the parent counts.
        named = any(value == parent["id"] for value in marks.values())
        if not named and row["source"] != "tool":
            return "compression"
    if "_delegate_from" in marks:
        return "ephemeral"
    if "_branched_from" in marks:
        return "branch"
    if parent.get("end_reason") == "branched" and row["started_at"] >= (parent["ended_at"] or 0):
        return "branch"
    if "_reset_from" in marks:
        return "branch"
    key = row.get("session_key")
    if parent.get("end_reason") in RESET_REASONS and key and key == parent.get("session_key"):
        return "branch"
    raise AssertionError(f"{session_id}: the data set has no child of another kind")


def expected_chain(shape: str, session_id: str) -> list[str]:
    """A session's compression chain from it to its tip: its latest continuation, recursively."""
    by_id = sessions_of(shape)
    chain = [session_id]
    for _ in range(len(by_id)):
        continuations = [
            row
            for row in by_id.values()
            if row.get("parent_session_id") == chain[-1]
            and expected_kind(shape, row["id"]) == "compression"
        ]
        if not continuations:
            return chain
        chain.append(max(continuations, key=lambda r: (r["started_at"], r["id"]))["id"])
    raise AssertionError("cycle")


def expected_tip(shape: str, session_id: str) -> str:
    """The end of a session's compression chain."""
    return expected_chain(shape, session_id)[-1]


def lineage_root(shape: str, session_id: str) -> str:
    """The session a search hit counts for: continuations and subagent runs count for
    the session they continue or serve; roots, branches and reset children for themselves."""
    by_id = sessions_of(shape)
    current = session_id
    while expected_kind(shape, current) in ("compression", "ephemeral"):
        parent = by_id[current].get("parent_session_id")
        if parent not in by_id:
            break
        current = parent
    return current


def visible_for_display(row: dict[str, Any]) -> bool:
    """HERMES_NEWER 3.4: live or compacted rows, never hidden ones nor ``session_meta``."""
    if not (row["active"] == 1 or row.get("compacted") == 1):
        return False
    return row.get("display_kind") != "hidden" and row["role"] != "session_meta"


def expected_display(rows: list[dict[str, Any]], session_id: str) -> list[int]:
    """HERMES_NEWER 3.4 display history: deduplicated by display identity (role, content,
    timestamp, tool_call_id, tool_calls, tool_name); per group the row with the highest
    ``active`` then ``id``; groups in the order of their first id."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        if row["session_id"] != session_id or not visible_for_display(row):
            continue
        key = tuple(
            row.get(c)
            for c in ("role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name")
        )
        groups.setdefault(key, []).append(row)
    chosen = [
        (members[0]["id"], max(members, key=lambda r: (r["active"], r["id"]))["id"])
        for members in groups.values()
    ]
    return [shown for _, shown in sorted(chosen)]


def search_scan(shape: str, needle: str, roles: list[str] | None = None) -> set[int]:
    """HERMES_NEWER 3.6 as a substring scan of the data set: live or compacted rows, never
    ``display_kind = 'hidden'``, tool rows too (the sheet said "only when the role
    filter asks for them"; every release from v17 to v31, run, returns them without
    one). The text searched is what the indexes hold: content, tool name and tool
    calls, of a tool row only its first 8,192 characters where the word index keeps no
    more (a role filter asking for tool rows reads them whole, with LIKE)."""
    found = set()
    for row in newer.written_messages(shape):
        if not (row["active"] == 1 or row.get("compacted") == 1):
            continue
        if row.get("display_kind") == "hidden":
            continue
        if roles is not None and row["role"] not in roles:
            continue
        text = " ".join(str(row.get(c) or "") for c in ("content", "tool_name", "tool_calls"))
        if row["role"] == "tool" and roles is None and not newer.TOOL_TAIL_INDEXED[shape]:
            content = str(row.get("content") or "")[: newer.TOOL_PREFIX]
            text = " ".join(
                [content, *(str(row.get(c) or "") for c in ("tool_name", "tool_calls"))]
            )
        if needle.lower() in text.lower():
            found.add(row["id"])
    return found


def preview_of(shape: str, session_id: str) -> str:
    """The listing preview: HERMES_V16 3.8 (first user message by time, id; newlines to
    spaces, 63 characters kept and stripped, more than 60 cut to 60 plus ``...``) with
    HERMES_NEWER 3.4's exclusions (hidden rows, pure compaction carriers). List content
    is previewed by its text parts (this package's documented choice; v16 showed the
    stored envelope)."""
    candidates = [
        m
        for m in newer.written_messages(shape)
        if m["session_id"] == session_id
        and m["role"] == "user"
        and m["content"] is not None
        and m.get("display_kind") != "hidden"
        and not m.get("_compressed_summary")
    ]
    if not candidates:
        return ""
    first = min(candidates, key=lambda m: (m["timestamp"], m["id"]))
    content = decode(first["content"])
    if isinstance(content, list):
        content = " ".join(p["text"] for p in content if isinstance(p, dict) and p.get("text"))
    text = content.replace("\n", " ").replace("\r", " ")[:63].strip()
    return text if len(text) <= 60 else text[:60] + "..."


def last_active_of(shape: str, session_id: str) -> float:
    """Newest message (inactive ones included, HERMES_V16 3.8), else the start; on files
    with ``last_activity_at`` the later of that and the heartbeat (HERMES_NEWER 3.2)."""
    row = sessions_of(shape)[session_id]
    stamps = [
        m["timestamp"] for m in newer.written_messages(shape) if m["session_id"] == session_id
    ]
    newest = max(stamps) if stamps else row["started_at"]
    if newer.has(shape, "sessions", "last_activity_at") and row.get("last_activity_at"):
        return max(newest, row["last_activity_at"])
    return newest


def listable(shape: str) -> list[str]:
    """HERMES_NEWER 3.5: roots, branches and reset children, minus rows with
    ``_delegate_from`` and archived rows (every source: Hermes' pickers, not its API,
    leave out its internal ones); newest start first."""
    rows = [
        row
        for row in sessions_of(shape).values()
        if expected_kind(shape, row["id"]) in ("root", "branch")
        and "_delegate_from" not in markers(row)
        and not row.get("archived")
    ]
    return [r["id"] for r in sorted(rows, key=lambda r: (r["started_at"], r["id"]), reverse=True)]


def lifted(shape: str, row: dict[str, Any]) -> dict[str, str]:
    """The markers Hermes v31 returns beside a session's columns: each of ``_reset_from``
    and ``_branched_from`` in its ``model_config`` that is non-empty text, stripped."""
    if newer.SCHEMA_VERSION[shape] < 31 or not row.get("model_config"):
        return {}
    config = json.loads(row["model_config"])
    return {
        key: config[key].strip()
        for key in ("_reset_from", "_branched_from")
        if isinstance(config.get(key), str) and config[key].strip()
    }


def version_error(shape: str) -> str:
    return f"schema version {newer.SCHEMA_VERSION[shape]}, newer than 16"


# -- get_session -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_get_session_has_every_column_of_the_file(
    stores: dict[str, SessionDB], built: dict[str, Path], shape: str
) -> None:
    store = stores[shape]
    stored = {row["id"]: row for row in file_rows(built[shape], "sessions")}
    written = sessions_of(shape)
    by_hash = newer.has(shape, "sessions", "system_prompt_hash")
    for session_id, row in stored.items():
        got = store.get_session(session_id)
        assert got is not None
        assert set(got) == {*newer.columns(shape, "sessions"), *lifted(shape, row)}
        assert got["system_prompt"] == prompt_text(session_id)
        assert {k: v for k, v in got.items() if k != "system_prompt"} == {
            **{k: v for k, v in row.items() if k != "system_prompt"},
            **lifted(shape, row),
        }
        for column, value in written[session_id].items():
            if column != "system_prompt":
                assert got[column] == value, (session_id, column)
        if by_hash:
            # v25+: the column is NULL, the text comes through the hash.
            assert row["system_prompt"] is None
            if prompt_text(session_id) is not None:
                assert got["system_prompt_hash"] == newer.prompt_hash(prompt_text(session_id))
    if shape == "fork33":
        assert store.get_session("root-a")["fork_note"] == "forked at alpha"  # type: ignore[index]
        assert store.get_session("cron-1")["fork_note"] == "nightly"  # type: ignore[index]
        assert store.get_session("cont-a")["fork_note"] is None  # type: ignore[index]
    assert store.get_session("no-such-session") is None


@pytest.mark.parametrize("shape", [s for s in SHAPES if newer.SCHEMA_VERSION[s.values[0]] >= 25])
def test_get_session_falls_back_to_the_old_prompt_column(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    """COALESCE(sp.prompt, s.system_prompt) over LEFT JOIN system_prompts (HERMES_NEWER 3.2)."""
    path = copy_of(shape)
    dangling = "ab" * 32
    change(
        path,
        "UPDATE sessions SET system_prompt = 'Legacy inline', system_prompt_hash = NULL"
        " WHERE id = 'cron-1'",
        f"UPDATE sessions SET system_prompt = 'Kept inline', system_prompt_hash = '{dangling}'"
        " WHERE id = 'archived-1'",
        "UPDATE sessions SET system_prompt = 'Stale inline' WHERE id = 'root-a'",
    )
    with SessionDB(path) as store:
        assert store.get_session("cron-1")["system_prompt"] == "Legacy inline"  # type: ignore[index]
        assert store.get_session("archived-1")["system_prompt"] == "Kept inline"  # type: ignore[index]
        # The hash wins over the old column when both are set.
        assert store.get_session("root-a")["system_prompt"] == newer.PROMPT_ALPHA  # type: ignore[index]
        with hermes_models.using(store.database):
            assert Session.get_by_id("cron-1").prompt == "Legacy inline"
            assert Session.get_by_id("archived-1").prompt == "Kept inline"
            assert Session.get_by_id("root-a").prompt == newer.PROMPT_ALPHA


# -- models ----------------------------------------------------------------------------------------


def field_value(instance: Any, field: Any) -> Any:
    if isinstance(field, peewee.ForeignKeyField):
        return getattr(instance, field.object_id_name)
    return getattr(instance, field.name)


@pytest.mark.parametrize("shape", SHAPES)
def test_session_model_fields_equal_the_row(built: dict[str, Path], shape: str) -> None:
    path = built[shape]
    present = set(newer.columns(shape, "sessions"))
    fields = Session._meta.sorted_fields
    known = {f.column_name for f in fields}
    absent = [f for f in fields if f.column_name not in present]
    if newer.SCHEMA_VERSION[shape] < 31:
        assert {"runtime_revision", "auto_archived"} <= {f.column_name for f in absent}
    else:
        assert absent == []
    db = hermes_models.connect(path)
    with hermes_models.using(db):
        for row in file_rows(path, "sessions"):
            instance = Session.get_by_id(row["id"])
            for field in fields:
                expected = row[field.column_name] if field.column_name in present else None
                assert field_value(instance, field) == expected, (row["id"], field.column_name)
            assert instance.prompt == prompt_text(row["id"])
            unknown = {k: v for k, v in row.items() if k not in known}
            assert instance.extra == unknown
            if shape == "fork33":
                assert instance.extra == {"fork_note": row["fork_note"]}
            else:
                assert instance.extra == {}
        assert Session.get_or_none(Session.id == "no-such-session") is None


@pytest.mark.parametrize("shape", SHAPES)
def test_message_model_fields_equal_the_row(built: dict[str, Path], shape: str) -> None:
    path = built[shape]
    present = set(newer.columns(shape, "messages"))
    fields = Message._meta.sorted_fields
    known = {f.column_name for f in fields}
    if newer.SCHEMA_VERSION[shape] < 31:
        assert {"message_uid", "tool_call_uid"}.isdisjoint(present)
    written = {m["id"]: m for m in newer.written_messages(shape)}
    db = hermes_models.connect(path)
    with hermes_models.using(db):
        for row in file_rows(path, "messages"):
            instance = Message.get_by_id(row["id"])
            for field in fields:
                expected = row[field.column_name] if field.column_name in present else None
                assert field_value(instance, field) == expected, (row["id"], field.column_name)
            for column, value in written[row["id"]].items():
                if column in known:
                    assert row[column] == value
            assert instance.value == decode(row["content"])
            if shape == "fork33":
                assert instance.extra == {"fork_score": written[row["id"]].get("fork_score")}
            else:
                assert instance.extra == {}
    if shape == "fork33":
        with hermes_models.using(db):
            assert Message.get_by_id(19).extra == {"fork_score": 0.5}
            assert Message.get_by_id(27).extra == {"fork_score": 1.25}


# -- transcripts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_get_messages_live_and_every_row(
    stores: dict[str, SessionDB], built: dict[str, Path], shape: str
) -> None:
    store = stores[shape]
    stored = file_rows(built[shape], "messages")
    for session_id in sessions_of(shape):
        mine = sorted((r for r in stored if r["session_id"] == session_id), key=lambda r: r["id"])
        live = store.get_messages(session_id)
        assert live == [as_get_messages(r) for r in mine if r["active"] == 1]
        # Every column but those Hermes keeps to itself (and its summary flag when false).
        hidden = {"display_identity", "display_order", "_compressed_summary"}
        assert all(
            set(m) - {"_compressed_summary"} == set(newer.columns(shape, "messages")) - hidden
            for m in live
        )
        every = store.get_messages(session_id, include_inactive=True)
        assert every == [as_get_messages(r) for r in mine]
    assert [m["id"] for m in store.get_messages("cont-a")] == [11, 12, 13, 14, 15, 17, 18, 19]
    assert [m["id"] for m in store.get_messages("cont-a", include_inactive=True)] == list(
        range(7, 20)
    )
    assert store.get_messages("branch-a")[0]["content"] == newer.LIST_CONTENT
    assert store.get_messages("no-such-session") == []


@pytest.mark.parametrize("shape", SHAPES)
def test_conversation_keeps_content_and_session_meta(
    stores: dict[str, SessionDB], shape: str
) -> None:
    """As Hermes v17 on replay: active rows by id, ``session_meta`` rows included
    (the gateway strips them later), ``content`` as stored and, where set, the wire
    text beside it as ``api_content`` (verbatim)."""
    store = stores[shape]
    for session_id in sessions_of(shape):
        rows = [
            m
            for m in newer.written_messages(shape)
            if m["session_id"] == session_id and m["active"] == 1
        ]
        rows.sort(key=lambda m: m["id"])
        expected = [(m["role"], decode(m["content"]), m.get("api_content")) for m in rows]
        got = store.get_messages_as_conversation(session_id)
        assert [(m["role"], m["content"], m.get("api_content")) for m in got] == expected
    replay = store.get_messages_as_conversation("cont-a")
    assert [m["role"] for m in replay].count("session_meta") == 1
    wire = newer.API_CONTENT if newer.has(shape, "messages", "api_content") else None
    calls = [m for m in replay if m.get("finish_reason") == "tool_calls"]
    assert [(m["content"], m.get("api_content")) for m in calls] == [
        ("Reading the log file.", wire)
    ]


@pytest.mark.parametrize("shape", SHAPES)
def test_display_messages_show_what_hermes_paints(stores: dict[str, SessionDB], shape: str) -> None:
    store = stores[shape]
    rows = newer.written_messages(shape)
    with hermes_models.using(store.database):
        for session_id in sessions_of(shape):
            shown = history.display_messages(session_id)
            assert [m["id"] for m in shown] == expected_display(rows, session_id), session_id
        cont_a = [m["id"] for m in history.display_messages("cont-a")]
    # Compacted 7-8 shown, rewound 9, 10 and 16 not, session_meta 18 not; the hidden
    # row 17 only where the file has display_kind.
    hidden = [] if newer.has(shape, "messages", "display_kind") else [17]
    assert cont_a == [7, 8, 11, 12, 13, 14, 15, *hidden, 19]


@pytest.mark.parametrize("shape", SHAPES)
def test_display_messages_show_each_compaction_copy_once(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    """The originals of the carried tail made display-visible (compacted = 1): each
    logical message once, the live copy, in the place of its first copy."""
    path = copy_of(shape)
    change(path, "UPDATE messages SET compacted = 1 WHERE id IN (9, 10)")
    rows = [
        dict(m, compacted=1) if m["id"] in (9, 10) else m for m in newer.written_messages(shape)
    ]
    expected = expected_display(rows, "cont-a")
    hidden = [] if newer.has(shape, "messages", "display_kind") else [17]
    assert expected == [7, 8, 12, 13, 11, 14, 15, *hidden, 19]
    with SessionDB(path) as store, hermes_models.using(store.database):
        assert [m["id"] for m in history.display_messages("cont-a")] == expected


# -- lineage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_lineage_kinds_tips_and_resume(stores: dict[str, SessionDB], shape: str) -> None:
    store = stores[shape]
    ids = list(sessions_of(shape))
    kinds = {session_id: expected_kind(shape, session_id) for session_id in ids}
    assert kinds == {
        "root-a": "root",
        "branch-a": "branch",
        "cont-a": "compression",
        "sub-a": "ephemeral",
        "root-b": "root",
        # Its inherited _branched_from names somebody else: still a continuation.
        "cont-b": "compression",
        "cron-1": "root",
        "reset-old": "root",
        # A reset child (by _reset_from, or by the routing key on older shapes) is listed.
        "reset-new": "branch",
        "archived-1": "root",
    }
    with hermes_models.using(store.database):
        assert {s.id: s.kind for s in Session.select()} == kinds
        for session_id in ids:
            instance = Session.get_by_id(session_id)
            assert instance.compression_tip().id == expected_tip(shape, session_id)
            # Every session of the data set holds messages: /resume opens the tip.
            assert instance.resume_target().id == expected_tip(shape, session_id)
    for session_id in ids:
        assert store.get_compression_tip(session_id) == expected_tip(shape, session_id)
        assert store.resolve_resume_session_id(session_id) == expected_tip(shape, session_id)
    assert store.get_compression_tip("root-a") == "cont-a"
    assert store.get_compression_tip("root-b") == "cont-b"
    assert store.get_compression_tip("reset-old") == "reset-old"
    assert store.resolve_resume_session_id("no-such-session") == "no-such-session"


# -- listing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_list_sessions_rich_projects_chains_to_their_tips(
    stores: dict[str, SessionDB], shape: str
) -> None:
    store = stores[shape]
    by_id = sessions_of(shape)
    surfaced = listable(shape)
    assert surfaced == ["reset-new", "reset-old", "cron-1", "root-b", "branch-a", "root-a"]
    expected = []
    for root in surfaced:
        tip = expected_tip(shape, root)
        projected = by_id[root].get("end_reason") == "compression" and tip != root
        expected.append(
            {
                "id": tip,
                "_lineage_root_id": root if projected else None,
                "started_at": by_id[root]["started_at"],
                "preview": preview_of(shape, tip),
                "last_active": last_active_of(shape, tip),
                "message_count": by_id[tip].get("message_count", 0),
            }
        )
    rows = store.list_sessions_rich()
    assert [
        {
            "id": r["id"],
            "_lineage_root_id": r.get("_lineage_root_id"),
            "started_at": r["started_at"],
            "preview": r["preview"],
            "last_active": r["last_active"],
            "message_count": r["message_count"],
        }
        for r in rows
    ] == expected
    assert [r["id"] for r in rows] == [
        "reset-new",
        "reset-old",
        "cron-1",
        "cont-b",
        "branch-a",
        "cont-a",
    ]
    # Hermes v30 on: a row showing a tip carries its chain, and the root's title when the
    # tip has none; v31 says what kind of continuation it shows.
    version = newer.SCHEMA_VERSION[shape]
    for row in rows:
        root = row.get("_lineage_root_id")
        keys = {k: row[k] for k in ("_lineage_ids", "continuation_kind", "title") if k in row}
        if root is None or version < 30:
            assert "_lineage_ids" not in keys and "continuation_kind" not in keys
            continue
        tip_title = by_id[row["id"]].get("title")
        assert keys == {
            "_lineage_ids": expected_chain(shape, root),
            **({"continuation_kind": "compression"} if version >= 31 else {}),
            "title": by_id[root].get("title") if tip_title is None else tip_title,
        }
    cont_a = next(r for r in rows if r["id"] == "cont-a")
    # The compacted first prompt previews the chain; the summary carrier never does.
    assert cont_a["preview"] == "Continue with the selector internals"
    heartbeat = newer.has(shape, "sessions", "last_activity_at")
    assert cont_a["last_active"] == newer.T0 + (190.0 if heartbeat else 115.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_projected_row_shows_its_tips_git_columns(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    # Hermes v17 on takes git_branch and git_repo_root from the tip as well.
    path = copy_of(shape)
    with plain(path) as conn:
        conn.execute(
            "UPDATE sessions SET git_branch = 'tip-branch', git_repo_root = '/tip/repo'"
            " WHERE id = 'cont-a'"
        )
        conn.execute(
            "UPDATE sessions SET git_branch = 'root-branch', git_repo_root = '/root/repo'"
            " WHERE id = 'root-a'"
        )
    with SessionDB(path) as store:
        (row,) = [r for r in store.list_sessions_rich() if r.get("_lineage_root_id") == "root-a"]
    assert (row["id"], row["git_branch"], row["git_repo_root"]) == (
        "cont-a",
        "tip-branch",
        "/tip/repo",
    )


WITH_DISPLAY_KIND = [s for s in SHAPES if newer.has(s.values[0], "messages", "display_kind")]
WITH_SUMMARY_FLAG = [s for s in SHAPES if newer.has(s.values[0], "messages", "_compressed_summary")]


@pytest.mark.parametrize(
    "shape", [s for s in SHAPES if newer.has(s.values[0], "sessions", "hidden")]
)
def test_sessions_hermes_hid_are_listed_only_when_asked(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    path = copy_of(shape)
    with SessionDB(path) as store:
        before = store.session_count()
    change(path, "UPDATE sessions SET hidden = 1 WHERE id = 'cron-1'")
    with SessionDB(path) as store:
        listed = [row["id"] for row in store.list_sessions_rich(limit=None)]
        everything = [
            row["id"] for row in store.list_sessions_rich(limit=None, include_hidden=True)
        ]
        counted = store.session_count()
    assert "cron-1" not in listed
    assert sorted(everything) == sorted([*listed, "cron-1"])
    assert counted == before  # counts take hidden sessions, as Hermes' do


@pytest.mark.parametrize(
    "shape", [s for s in SHAPES if newer.has(s.values[0], "sessions", "last_activity_at")]
)
def test_the_plain_listing_and_export_all_count_the_heartbeat(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    path = copy_of(shape)
    beat = newer.T0 + 10_000
    change(path, f"UPDATE sessions SET last_activity_at = {beat} WHERE id = 'reset-old'")
    with SessionDB(path) as store:
        plain_listing = store.search_sessions(None, limit=None)
        exported = store.export_all()
    assert [(r["id"], r["last_active"]) for r in plain_listing][:1] == [("reset-old", beat)]
    assert [(r["id"], r["last_active"]) for r in exported][:1] == [("reset-old", beat)]


def test_a_topic_binding_has_every_column_a_later_hermes_gave_it(
    copy_of: Callable[[str], Path],
) -> None:
    # Hermes v31 keys bindings by profile too: the row comes back whole, as its SELECT *.
    path = copy_of("v31")
    change(
        path,
        "CREATE TABLE telegram_dm_topic_bindings (chat_id TEXT NOT NULL, thread_id TEXT"
        " NOT NULL, user_id TEXT NOT NULL, session_key TEXT NOT NULL, session_id TEXT NOT"
        " NULL, managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL,"
        " updated_at REAL NOT NULL, profile_name TEXT NOT NULL DEFAULT 'default',"
        " PRIMARY KEY (profile_name, chat_id, thread_id))",
        "INSERT INTO telegram_dm_topic_bindings VALUES"
        " ('c1', '7', 'u1', 'k1', 'root-a', 'auto', 1.0, 2.0, 'work')",
    )
    with SessionDB(path) as store:
        found = store.get_telegram_topic_binding(chat_id="c1", thread_id="7")
        by_session = store.get_telegram_topic_binding_by_session(session_id="root-a")
    assert (
        found
        == by_session
        == {
            "chat_id": "c1",
            "thread_id": "7",
            "user_id": "u1",
            "session_key": "k1",
            "session_id": "root-a",
            "managed_mode": "auto",
            "linked_at": 1.0,
            "updated_at": 2.0,
            "profile_name": "work",
        }
    )


@pytest.mark.parametrize("shape", WITH_DISPLAY_KIND)
def test_recent_user_messages_leave_out_rows_typed_for_the_timeline(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    # Hermes v25 on: a user row with a display_kind is bookkeeping, not a prompt; from
    # Hermes 0.21.5 (search layout 3) a /steer row counts as one.
    path = copy_of(shape)
    kinds = {201: None, 202: "", 203: "async_delegation_complete", 204: "steer", 205: "hidden"}
    # plain SQLite cannot run the triggers of Hermes' CJK index
    with contextlib.closing(plain(path)) as conn:
        cjk = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%fts_cjk%'"
        ).fetchall()
    change(path, *(f'DROP TRIGGER "{name}"' for (name,) in cjk))
    change(
        path,
        *(
            "INSERT INTO messages (id, session_id, role, content, timestamp, display_kind)"
            f" VALUES ({i}, 'cron-1', 'user', 'typed {i}', {newer.T0 + i},"
            f" {'NULL' if kind is None else repr(kind)})"
            for i, kind in kinds.items()
        ),
    )
    with SessionDB(path) as store:
        shown = [row["id"] for row in store.list_recent_user_messages("cron-1")]
    kept = {201, 202, *([204] if newer.FTS_LAYOUT[shape] >= 3 else [])}
    assert shown[: len(kept)] == sorted(kept, reverse=True)
    assert (set(kinds) - kept) & set(shown) == set()


@pytest.mark.parametrize("shape", WITH_SUMMARY_FLAG)
def test_windows_around_a_message_keep_the_summary_flag_as_stored(
    stores: dict[str, SessionDB], shape: str
) -> None:
    # Hermes keeps _compressed_summary as stored in a window (0 or 1), and in get_messages
    # only as True on the summary rows.
    store = stores[shape]
    window = store.get_messages_around("cont-a", 11, window=1)["window"]
    assert [(row["id"], row["_compressed_summary"]) for row in window] == [
        (10, 0),
        (11, 1),
        (12, 0),
    ]
    view = store.get_anchored_view("cont-a", 12, window=0, bookend=1, keep_roles=None)
    assert [row["_compressed_summary"] for row in view["bookend_start"]] == [0]
    flagged = [
        row["id"]
        for row in store.get_messages("cont-a", include_inactive=True)
        if "_compressed_summary" in row
    ]
    assert flagged == [11]


@pytest.mark.parametrize("shape", WITH_DISPLAY_KIND)
def test_preview_skips_hidden_rows_and_compaction_carriers(
    copy_of: Callable[[str], Path], shape: str
) -> None:
    """The hidden row (and, where the column exists, the summary carrier) moved before
    every other user row of ``cont-a``: neither becomes the preview."""
    path = copy_of(shape)
    statements = ["UPDATE messages SET timestamp = 1760000101.0 WHERE id = 17"]
    if newer.has(shape, "messages", "_compressed_summary"):
        statements.append("UPDATE messages SET timestamp = 1760000101.5 WHERE id = 11")
    change(path, *statements)
    first_users = [
        r["id"]
        for r in sorted(file_rows(path, "messages"), key=lambda r: (r["timestamp"], r["id"]))
        if r["session_id"] == "cont-a" and r["role"] == "user"
    ]
    assert first_users[0] == 17
    with SessionDB(path) as store:
        rows = {r["id"]: r for r in store.list_sessions_rich()}
    assert rows["cont-a"]["preview"] == "Continue with the selector internals"


@pytest.mark.parametrize("shape", SHAPES)
def test_counts(stores: dict[str, SessionDB], shape: str) -> None:
    store = stores[shape]
    by_id = sessions_of(shape)
    not_archived = [r for r in by_id.values() if not r.get("archived")]
    assert store.session_count() == len(not_archived) == 9
    assert store.session_count(exclude_children=True) == len(listable(shape))
    assert store.session_count(include_archived=True) == len(by_id)
    assert store.session_count(archived_only=True) == 1
    assert store.message_count() == len(newer.MESSAGES)
    assert store.message_count("cont-a") == 13
    live = [m for m in newer.written_messages(shape) if m["active"] == 1]
    assert store.message_count(include_inactive=False) == len(live)


# -- search ----------------------------------------------------------------------------------------

# Words the word index and a substring scan agree on: each occurs in the data set only
# as a whole word (never inside a longer word, as "selector" is inside "Selectors").
WORD_QUERIES = (
    "asyncio",  # in a user row, a tool row (left out) and an assistant's tool_calls
    "epoll",  # a rewound original and its live copy
    "sockets",  # a compacted row and the summary carrier
    "okapi",
    "capybara",  # inside the JSON of list content
    "marmoset",  # the hidden row (where the file has display_kind)
    "wombat",  # the session_meta row
    "kestrel",
    "albatross",  # an archived session
    "zebratail",  # only past the prefix of a tool row
)
CJK_QUERIES = (
    "事件循环",  # 4 characters: trigram
    "数据",  # 2 characters: LIKE
    "データベース",
    "定时任务",  # a cron session: not in the v30 trigram view
    "协程调度器",  # a subagent session: not in the v30 trigram view
)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("query", WORD_QUERIES + CJK_QUERIES)
def test_search_messages_finds_what_hermes_finds(
    stores: dict[str, SessionDB], shape: str, query: str
) -> None:
    hits = stores[shape].search_messages(query, limit=100)
    assert {h["id"] for h in hits} == search_scan(shape, query)
    assert len(hits) == len({h["id"] for h in hits})


@pytest.mark.parametrize("shape", SHAPES)
def test_search_expected_sets(stores: dict[str, SessionDB], shape: str) -> None:
    """The scan itself, pinned for the queries the brief names."""
    hidden_col = newer.has(shape, "messages", "display_kind")
    assert search_scan(shape, "asyncio") == {1, 2, 3}  # 3 is a tool row
    assert search_scan(shape, "epoll") == {13}
    assert search_scan(shape, "sockets") == {8, 11}
    assert search_scan(shape, "marmoset") == (set() if hidden_col else {17})
    # Past the first 8,192 characters of a tool row: only where the word index has it.
    assert search_scan(shape, "zebratail") == ({15} if newer.TOOL_TAIL_INDEXED[shape] else set())
    assert search_scan(shape, "zebratail", ["tool"]) == {15}
    assert search_scan(shape, "事件循环") == {20}
    assert search_scan(shape, "数据") == {20}
    assert search_scan(shape, "データベース") == {22}
    assert search_scan(shape, "定时任务") == {26}
    assert search_scan(shape, "协程调度器") == {24}
    assert stores[shape].search_messages("asyncio", role_filter=["tool"])[0]["id"] == 3


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("query", "roles"),
    [
        ("zebratail", ["tool"]),  # past the 8,192-character prefix: found by LIKE
        ("asyncio", ["tool"]),
        ("asyncio", ["tool", "user"]),
        ("log line 0599", ["tool"]),
    ],
)
def test_search_messages_tool_rows_on_request(
    stores: dict[str, SessionDB], shape: str, query: str, roles: list[str]
) -> None:
    hits = stores[shape].search_messages(query, role_filter=roles, limit=100)
    assert {h["id"] for h in hits} == search_scan(shape, query, roles)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "query", ["epoll", "sockets", "capybara", "kestrel", "データベース", "协程调度器", "定时任务"]
)
def test_search_sessions_groups_hits_by_lineage_root(
    stores: dict[str, SessionDB], shape: str, query: str
) -> None:
    hits = search_scan(shape, query)
    session_of = {m["id"]: m["session_id"] for m in newer.written_messages(shape)}
    groups: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for message_id in hits:
        root = lineage_root(shape, session_of[message_id])
        groups.setdefault(root, set()).add(session_of[message_id])
        counts[root] = counts.get(root, 0) + 1
    rows = stores[shape].search_sessions(query)
    assert {r["id"]: r["hits"] for r in rows} == counts
    for row in rows:
        assert row["matched_session_id"] in groups[row["id"]]
    assert rows  # every query here has a hit


@pytest.mark.parametrize("shape", SHAPES)
def test_search_sessions_named_groups(stores: dict[str, SessionDB], shape: str) -> None:
    store = stores[shape]
    assert [(r["id"], r["matched_session_id"]) for r in store.search_sessions("协程调度器")] == [
        ("root-a", "sub-a")
    ]
    assert [(r["id"], r["matched_session_id"]) for r in store.search_sessions("データベース")] == [
        ("root-b", "cont-b")
    ]
    assert [(r["id"], r["hits"]) for r in store.search_sessions("kestrel")] == [("reset-new", 1)]


# -- export ----------------------------------------------------------------------------------------


def expected_timings(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What Hermes 0.21.5+ puts under ``timings`` for an export of ``messages``: counts,
    the first and last timestamps and the gaps between timestamped messages in a row."""
    stamped = [m for m in messages if isinstance(m["timestamp"], (int, float))]
    at = [float(m["timestamp"]) for m in stamped]
    gaps = [max(0, round((b - a) * 1000)) for a, b in itertools.pairwise(at)]  # back in time: 0
    roles: dict[str, int] = {}
    for m in messages:
        roles[m["role"]] = roles.get(m["role"], 0) + 1
    iso = [datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat() for t in at]
    return {
        "source": "message_timestamps",
        "available": bool(stamped),
        "complete": False,
        "unavailable_reason": None if stamped else "no_timestamped_messages",
        "message_timestamps": {"available": len(stamped), "missing": len(messages) - len(stamped)},
        "first_message_at": iso[0] if iso else None,
        "last_message_at": iso[-1] if iso else None,
        "wall_clock_ms": max(0, round((at[-1] - at[0]) * 1000)) if at else None,
        "largest_gap_ms": max(gaps) if gaps else None,
        "role_counts": roles,
        "tool_result_count": roles.get("tool", 0),
        "tool_calls_emitted": sum(len(m["tool_calls"]) for m in messages if m.get("tool_calls")),
        "intervals": [
            {
                "from_message_id": a["id"],
                "to_message_id": b["id"],
                "from_role": a["role"],
                "to_role": b["role"],
                "gap_ms": gap,
            }
            for (a, b), gap in zip(itertools.pairwise(stamped), gaps)
        ],
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_export_session_carries_every_column(
    stores: dict[str, SessionDB], built: dict[str, Path], shape: str
) -> None:
    store = stores[shape]
    stored = file_rows(built[shape], "messages")
    for session_id in sessions_of(shape):
        exported = store.export_session(session_id)
        assert exported is not None
        with_timings = newer.FTS_LAYOUT[shape] >= 3  # Hermes 0.21.5 on (layout 3, v30-v31)
        row = store.get_session(session_id)
        assert row is not None
        assert set(exported) == {
            *newer.columns(shape, "sessions"),
            *lifted(shape, row),
            "messages",
            *(["timings"] if with_timings else []),
        }
        assert exported["system_prompt"] == prompt_text(session_id)
        messages = [
            as_get_messages(r) for r in stored if r["session_id"] == session_id and r["active"]
        ]
        assert exported["messages"] == messages
        if with_timings:
            assert exported["timings"] == expected_timings(messages)
    assert store.export_session("no-such-session") is None


@pytest.mark.parametrize("shape", SHAPES)
def test_export_bundle_is_lossless(
    stores: dict[str, SessionDB], built: dict[str, Path], tmp_path: Path, shape: str
) -> None:
    target = tmp_path / f"{shape}.jsonl"
    counts = stores[shape].export_bundle(target)
    assert counts == {"sessions": len(newer.SESSIONS), "messages": len(newer.MESSAGES)}
    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    header, body = lines[0], lines[1:]
    # Every table the later Hermes (or the fork) added travels too, row by row.
    with contextlib.closing(plain(built[shape])) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        added = {
            name: newer.rows(conn, name)
            for name in sorted(names)
            if name not in V16_TABLES and not name.startswith(("sqlite_", "messages_fts"))
        }
    assert "system_prompts" in added or newer.SCHEMA_VERSION[shape] < 25
    assert header == {
        "format": "hermes-models-bundle",
        "version": 1,
        "schema_version": newer.SCHEMA_VERSION[shape],
        "sessions": len(newer.SESSIONS),
        "messages": len(newer.MESSAGES),
        **({"tables": {name: len(rows) for name, rows in added.items()}} if added else {}),
    }
    sessions = sorted(file_rows(built[shape], "sessions"), key=lambda r: (r["started_at"], r["id"]))
    messages = sorted(file_rows(built[shape], "messages"), key=lambda r: r["id"])
    rows = [line for line in body if line["type"] == "row"]
    body = [line for line in body if line["type"] != "row"]
    assert body == [
        *({"type": "session", **row} for row in sessions),
        *({"type": "message", **row} for row in messages),
    ]
    assert sorted(rows, key=json.dumps) == sorted(
        ({"type": "row", "table": name, "row": row} for name, got in added.items() for row in got),
        key=json.dumps,
    )
    for line in body:
        table = "sessions" if line["type"] == "session" else "messages"
        assert list(line) == ["type", *newer.columns(shape, table)]
    by_id = {line["id"]: line for line in body if line["type"] == "session"}
    for session_id, row in sessions_of(shape).items():
        for column, value in row.items():
            assert by_id[session_id][column] == value


# -- writes are refused, nothing changes --------------------------------------------------------


def _writes(store: SessionDB) -> dict[str, Callable[[], Any]]:
    return {
        "create_session": lambda: store.create_session("new-1", "cli"),
        "ensure_session": lambda: store.ensure_session("new-1"),
        "end_session": lambda: store.end_session("cont-a", "user_exit"),
        "reopen_session": lambda: store.reopen_session("root-a"),
        "update_system_prompt": lambda: store.update_system_prompt("cont-a", "Be brief."),
        "update_session_model": lambda: store.update_session_model("cont-a", "m9"),
        "update_session_cwd": lambda: store.update_session_cwd("cont-a", "/tmp"),
        "update_session_meta": lambda: store.update_session_meta("cont-a", '{"model":"m9"}'),
        "update_token_counts": lambda: store.update_token_counts("cont-a", 1, 1),
        "set_session_archived": lambda: store.set_session_archived("cont-a", True),
        "set_session_title": lambda: store.set_session_title("cont-a", "Renamed"),
        "append_message": lambda: store.append_message("cont-a", "user", "hello"),
        "replace_messages": lambda: store.replace_messages(
            "cont-a", [{"role": "user", "content": "x"}]
        ),
        "rewind_to_message": lambda: store.rewind_to_message("cont-a", 12),
        "restore_rewound": lambda: store.restore_rewound("cont-a", 16),
        "clear_messages": lambda: store.clear_messages("cont-a"),
        "set_meta": lambda: store.set_meta("k", "v"),
        "delete_session": lambda: store.delete_session("cron-1"),
        "delete_sessions": lambda: store.delete_sessions(["cron-1"]),
        "prune_sessions": lambda: store.prune_sessions(older_than_days=0),
        "delete_empty_sessions": lambda: store.delete_empty_sessions(),
        "delete_session_if_empty": lambda: store.delete_session_if_empty("cron-1"),
        "prune_empty_ghost_sessions": lambda: store.prune_empty_ghost_sessions(),
        "finalize_orphaned_compression_sessions": store.finalize_orphaned_compression_sessions,
        "release_compression_lock": lambda: store.release_compression_lock("cont-a", "me"),
        "optimize_fts": store.optimize_fts,
        "vacuum": store.vacuum,
        "apply_telegram_topic_migration": store.apply_telegram_topic_migration,
        "enable_telegram_topic_mode": lambda: store.enable_telegram_topic_mode(
            chat_id="1", user_id="2"
        ),
        "disable_telegram_topic_mode": lambda: store.disable_telegram_topic_mode(chat_id="1"),
        "bind_telegram_topic": lambda: store.bind_telegram_topic(
            chat_id="1", thread_id="2", user_id="3", session_key="k1", session_id="cont-a"
        ),
        "request_handoff": lambda: store.request_handoff("cont-a", "telegram"),
        "claim_handoff": lambda: store.claim_handoff("cont-a"),
        "complete_handoff": lambda: store.complete_handoff("cont-a"),
        "fail_handoff": lambda: store.fail_handoff("cont-a", "boom"),
    }


def _model_writes() -> dict[str, Callable[[], Any]]:
    def save_session() -> None:
        instance = Session.get_by_id("cont-a")
        instance.title = "Renamed"
        instance.save()

    def save_message() -> None:
        instance = Message.get_by_id(19)
        instance.content = "edited"
        instance.save()

    return {
        "Session.save": save_session,
        "Session.create": lambda: Session.create(id="new-1", source="cli", started_at=newer.T0),
        "Message.save": save_message,
        "Message.create": lambda: Message.create(
            session="cont-a", role="user", content="x", timestamp=newer.T0
        ),
        "Session.delete_instance": lambda: Session.get_by_id("cron-1").delete_instance(),
        "Message.delete_instance": lambda: Message.get_by_id(30).delete_instance(),
        "Session.append": lambda: Session.get_by_id("cont-a").append("user", "x"),
        "Session.end": lambda: Session.get_by_id("cont-a").end("user_exit"),
        "Session.reopen": lambda: Session.get_by_id("root-a").reopen(),
        "StateMeta.set_value": lambda: hermes_models.StateMeta.set_value("k", "v"),
    }


def outcome(call: Callable[[], Any], shape: str) -> str:
    """How a write ended: ``"refused"`` (SchemaTooNewError naming the file's version and
    16), else the exception's type and message, or what it returned."""
    try:
        returned = call()
    except SchemaTooNewError as exc:
        return "refused" if version_error(shape) in str(exc) else f"SchemaTooNewError: {exc}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"returned {returned!r}"


@pytest.mark.parametrize("shape", SHAPES)
def test_every_write_is_refused_and_the_file_is_unchanged(
    built: dict[str, Path], copy_of: Callable[[str], Path], shape: str
) -> None:
    path = copy_of(shape)
    before = path.read_bytes()
    with SessionDB(path) as store:
        outcomes = {name: outcome(call, shape) for name, call in _writes(store).items()}
        with hermes_models.using(store.database):
            for name, call in _model_writes().items():
                outcomes[name] = outcome(call, shape)
        # Refused like every write, not a False that reads as "another holder has it".
        assert outcome(lambda: store.try_acquire_compression_lock("cont-a", "me"), shape) == (
            "refused"
        )
        # Raw SQL through _conn too: before SQLite sees it (by its first word), or
        # when SQLite refuses it (the file is open read-only).
        for raw in (
            lambda: store._conn.execute("UPDATE sessions SET title = 'x'"),
            lambda: store._conn.execute("  insert into state_meta VALUES ('k', 'v')"),
            lambda: store._conn.cursor().execute("DELETE FROM messages"),
            lambda: store._conn.executemany("UPDATE sessions SET title = ?", [("x",)]),
            lambda: store._conn.executescript("SELECT 1; UPDATE sessions SET title = 'x';"),
            lambda: store._conn.execute(
                "WITH t AS (SELECT 1) UPDATE sessions SET title = 'x' WHERE id = 'cont-a'"
            ),
        ):
            assert outcome(raw, shape) == "refused"
        assert store.read_only is True
        result = store.maybe_auto_prune_and_vacuum()
        assert result["pruned"] == 0 and version_error(shape) in result["error"]
        # Reads still work after every refusal.
        assert store.get_session("cont-a")["title"] == "Alpha #2"  # type: ignore[index]
    outcomes["migrate"] = outcome(lambda: hermes_models.migrate(path), shape)
    assert outcomes == dict.fromkeys(outcomes, "refused")
    assert path.read_bytes() == before
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert newer.dump(path) == newer.dump(built[shape])


@pytest.mark.parametrize("fmt", ["--json", "--nl", "--csv", "--tsv"])
def test_show_prints_a_blob_as_base64(copy_of: Callable[[str], Path], fmt: str) -> None:
    # Hermes v30+ stores display_identity as a BLOB; `show --json` failed with
    # "Object of type bytes is not JSON serializable" (exit 1) on such a session.
    # It is a column Hermes keeps to itself (left out now, as Hermes does); a BLOB
    # in a column it returns is printed as an export bundle carries one.
    path = copy_of("v31")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE messages SET display_identity = ?, reasoning = ? WHERE session_id = 'cont-a'",
            (b"\x01\x02id", b"\x01\x02id"),
        )
    conn.close()
    done = run("show", "cont-a", fmt, "--db", str(path), cwd=path.parent)
    assert done.returncode == 0, done.stderr
    if fmt in ("--json", "--nl"):
        lines = done.stdout.splitlines()
        rows = json.loads(done.stdout) if fmt == "--json" else [json.loads(x) for x in lines]
        assert rows and all(row["reasoning"] == {"$base64": "AQJpZA=="} for row in rows)
        assert not any("display_identity" in row for row in rows)
    else:
        assert '"{""$base64"": ""AQJpZA==""}"' in done.stdout
