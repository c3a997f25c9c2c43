"""The v16 data step on files an older Hermes wrote: which sessions get
``_delegate_from`` (and ``'__orphaned__'``), never by timestamps for a child of a
compressed or branched parent, and what happens to a file an earlier release
upgraded with the timestamp rule (migration 0004 alone)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from yoyo import get_backend, read_migrations

import hermes_models
from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.store.schema import migrations_dir, yoyo_url

import legacy

T0 = legacy.T0


def add(path: Path, *sessions: dict[str, Any], messages: tuple[tuple[str, str], ...] = ()) -> None:
    """Rows an older Hermes wrote (plain sqlite3, the file's own columns)."""
    conn = sqlite3.connect(path)
    try:
        for row in sessions:
            names = ", ".join(row)
            conn.execute(
                f"INSERT INTO sessions ({names}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
        for n, (sid, role) in enumerate(messages):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                (sid, role, f"{sid} {role} {n}", T0 + 1000 + n),
            )
        conn.commit()
    finally:
        conn.close()


def configs(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, model_config FROM sessions ORDER BY id").fetchall()
    finally:
        conn.close()
    return {sid: (json.loads(c) if c and c.startswith("{") else c) for sid, c in rows}


#: Children and roots whose tags the data step decides (on top of legacy.SESSIONS).
EXTRA = (
    # Parent compressed; continuation started 1 ms before the end (clock stepped back).
    {
        "id": "skew-parent",
        "source": "cli",
        "started_at": T0 + 500,
        "ended_at": T0 + 600,
        "end_reason": "compression",
        "title": "skewed",
    },
    {
        "id": "skew-cont",
        "source": "cli",
        "parent_session_id": "skew-parent",
        "started_at": T0 + 599.999,
        "title": "skewed #2",
    },
    # Parent branched; fork started before the end.
    {
        "id": "fork-parent",
        "source": "cli",
        "started_at": T0 + 700,
        "ended_at": T0 + 800,
        "end_reason": "branched",
        "title": "forked",
    },
    {
        "id": "fork-skew",
        "source": "cli",
        "parent_session_id": "fork-parent",
        "started_at": T0 + 799.5,
    },
    # A subagent run of a session that ended otherwise: tagged.
    {
        "id": "done-parent",
        "source": "cli",
        "started_at": T0 + 900,
        "ended_at": T0 + 990,
        "end_reason": "user_exit",
        "title": "done",
    },
    {
        "id": "done-run",
        "source": "cli",
        "parent_session_id": "done-parent",
        "started_at": T0 + 910,
        "model_config": '{"role": "coder"}',
    },
    # Parentless untitled tool runs: Hermes tags them '__orphaned__'.
    {"id": "lost-run", "source": "cli", "started_at": T0 + 1000, "message_count": 2},
    {
        "id": "lost-titled",
        "source": "cli",
        "started_at": T0 + 1001,
        "message_count": 2,
        "title": "a real chat",
    },
    {"id": "lost-long", "source": "cli", "started_at": T0 + 1002, "message_count": 26},
    {"id": "lost-no-tool", "source": "cli", "started_at": T0 + 1003, "message_count": 1},
    {
        "id": "lost-text-config",
        "source": "cli",
        "started_at": T0 + 1004,
        "model_config": "not json",
        "message_count": 1,
    },
)
EXTRA_MESSAGES = (
    ("lost-run", "user"),
    ("lost-run", "tool"),
    ("lost-titled", "tool"),
    ("lost-long", "tool"),
    ("lost-no-tool", "user"),
    ("lost-text-config", "tool"),
)


def old_file(tmp_path: Path, version: int = 15) -> Path:
    path = legacy.build(tmp_path / "state.db", version)
    add(path, *EXTRA, messages=EXTRA_MESSAGES)
    return path


def expected_tags() -> dict[str, Any]:
    """Every session's model_config after a correct upgrade."""
    out: dict[str, Any] = {}
    for row in (*legacy.SESSIONS, *EXTRA):
        text = row.get("model_config")
        out[row["id"]] = json.loads(text) if text and text.startswith("{") else text
    out["sub-2"] = {"role": "researcher", "_delegate_from": "cont-2"}
    out["done-run"] = {"role": "coder", "_delegate_from": "done-parent"}
    out["lost-run"] = {"_delegate_from": "__orphaned__"}
    return out


def test_an_upgrade_tags_as_hermes_but_never_a_child_of_a_compressed_or_branched_parent(
    tmp_path: Path,
) -> None:
    path = old_file(tmp_path)
    hermes_models.migrate(path)
    assert configs(path) == expected_tags()
    with SessionDB(path) as store:
        listed = {row["id"] for row in store.list_sessions_rich(limit=None)}
        assert "lost-run" not in listed and "lost-titled" in listed
        assert store.delete_session("skew-parent") is True
        assert store.get_session("skew-cont")["parent_session_id"] is None
        assert [m["content"] for m in store.get_messages("skew-cont")] == []
        assert store.delete_session("fork-parent") is True
        assert store.get_session("fork-skew") is not None
        assert store.delete_session("done-parent") is True
        assert store.get_session("done-run") is None


def apply_only_0004(path: Path, tmp_path: Path) -> None:
    """What an earlier release did: the migrations up to 0004, applied with yoyo."""
    folder = tmp_path / "migrations-0004"
    folder.mkdir()
    for source in sorted(migrations_dir().iterdir()):
        if source.name[:4] <= "0004":
            shutil.copy(source, folder / source.name)
    # That release's 0004 tagged by timestamps, as Hermes does (today's leaves a child
    # of a compressed or branched parent alone).
    step = folder / "0004_tag_delegate_children.sql"
    text = step.read_text("utf-8")
    today = "        AND p.end_reason IN ('branched', 'compression')\n  );"
    assert today in text
    step.write_text(
        text.replace(
            today,
            "        AND p.end_reason IN ('branched', 'compression')\n"
            "        AND sessions.started_at >= p.ended_at\n  );",
        ),
        "utf-8",
    )
    backend = get_backend(yoyo_url(path))
    with backend:
        with backend.lock():
            backend.apply_migrations(backend.to_apply(read_migrations(str(folder))))
    backend.connection.close()


@pytest.mark.plaintext_file  # yoyo's backend reads the file with the standard library's sqlite3
def test_a_file_upgraded_by_0004_alone_loses_the_wrong_tags(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    apply_only_0004(path, tmp_path)
    wrong = configs(path)
    assert wrong["skew-cont"] == {"_delegate_from": "skew-parent"}  # what 0004 did
    assert wrong["fork-skew"] == {"_delegate_from": "fork-parent"}
    assert wrong["sub-1"] == {"_delegate_from": "root-en"}
    assert wrong["lost-run"] is None
    applied = hermes_models.migrate(path)
    assert applied == [
        "0005_delegate_tags_by_end_reason",
        "0006_search_index_upkeep",
        "0007_cjk_gram_index",
        "0008_time_order_indexes",
        "0009_cjk_gram_changes",
        "0010_parallel_labels",
        "0011_search_bm25",
    ]
    assert configs(path) == expected_tags()
    with SessionDB(path) as store:
        assert store.delete_session("skew-parent") is True
        assert store.get_session("skew-cont")["parent_session_id"] is None


def test_an_upgrade_leaves_the_model_config_text_of_a_skewed_continuation_as_it_was(
    tmp_path: Path,
) -> None:
    # Tagging such a child and untagging it again rewrote its text: compacted JSON,
    # and '{}' made NULL. Only the children that get a tag may change.
    path = legacy.build(tmp_path / "state.db", 15)
    texts = {"skew-a": '{"temperature": 0.2}', "skew-b": "{}", "skew-c": None, "skew-d": "[1, 2]"}
    add(
        path,
        {
            "id": "p",
            "source": "cli",
            "started_at": T0 + 100,
            "ended_at": T0 + 200,
            "end_reason": "compression",
        },
        *[
            {
                "id": sid,
                "source": "cli",
                "parent_session_id": "p",
                "started_at": T0 + 150,
                "model_config": text,
            }
            for sid, text in texts.items()
        ],
        {
            "id": "late",
            "source": "cli",
            "parent_session_id": "p",
            "started_at": T0 + 250,
            "model_config": "{}",
        },
    )
    hermes_models.migrate(path)
    conn = sqlite3.connect(path)
    try:
        stored = dict(
            conn.execute(
                "SELECT id, model_config FROM sessions WHERE parent_session_id = 'p'"
            ).fetchall()
        )
    finally:
        conn.close()
    assert stored == {**texts, "late": "{}"}


def test_a_file_created_fresh_keeps_every_tag_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    apply_only_0004(path, tmp_path)
    # Written later by Hermes or this package: real tags, whatever the times.
    add(
        path,
        {
            "id": "p",
            "source": "cli",
            "started_at": T0,
            "ended_at": T0 + 100,
            "end_reason": "compression",
        },
        {
            "id": "run",
            "source": "cli",
            "parent_session_id": "p",
            "started_at": T0 + 10,
            "model_config": '{"_delegate_from": "p"}',
        },
        {"id": "lost", "source": "cli", "started_at": T0 + 1},
        messages=(("lost", "tool"),),
    )
    before = configs(path)
    assert hermes_models.migrate(path) == [
        "0005_delegate_tags_by_end_reason",
        "0006_search_index_upkeep",
        "0007_cjk_gram_index",
        "0008_time_order_indexes",
        "0009_cjk_gram_changes",
        "0010_parallel_labels",
        "0011_search_bm25",
    ]
    assert configs(path) == before


def test_a_hermes_v16_file_keeps_every_tag_it_holds(tmp_path: Path) -> None:
    path = legacy.build_v16(tmp_path / "state.db")
    add(
        path,
        {
            "id": "p",
            "source": "cli",
            "started_at": T0,
            "ended_at": T0 + 100,
            "end_reason": "compression",
        },
        {
            "id": "run",
            "source": "cli",
            "parent_session_id": "p",
            "started_at": T0 + 10,
            "model_config": '{"_delegate_from": "p"}',
        },
        messages=(("run", "tool"),),
    )
    before = configs(path)
    assert hermes_models.migrate(path) == [
        "0007_cjk_gram_index",
        "0008_time_order_indexes",
        "0009_cjk_gram_changes",
        "0010_parallel_labels",
        "0011_search_bm25",
    ]
    assert configs(path) == before
