"""HERMES_V16 §3.3: creating, ending and updating sessions, as a Hermes caller does."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

pytestmark = pytest.mark.backends("sqlite", "postgresql")

DAY = 86400.0


def backdate(store: SessionDB, session_id: str, days: float) -> None:
    """Move a session's start into the past with raw SQL, as Hermes' tests do."""
    store._conn.execute(
        "UPDATE sessions SET started_at = ? WHERE id = ?", (time.time() - days * DAY, session_id)
    )
    store._conn.commit()


# -- create / ensure ---------------------------------------------------------------------------


def test_create_session_takes_hermes_keywords(store: SessionDB) -> None:
    store.create_session("root", "cli")
    returned = store.create_session(
        "s1",
        "telegram",
        model="m1",
        model_config={"temperature": 0.2},
        system_prompt="be brief",
        user_id="u1",
        parent_session_id="root",
        cwd="/work",
    )
    assert returned == "s1"
    row = store.get_session("s1")
    assert {k: row[k] for k in ("source", "model", "system_prompt", "user_id")} == {
        "source": "telegram",
        "model": "m1",
        "system_prompt": "be brief",
        "user_id": "u1",
    }
    assert row["model_config"] == '{"temperature": 0.2}'
    assert (row["parent_session_id"], row["cwd"], row["git_branch"]) == ("root", "/work", None)
    assert abs(row["started_at"] - time.time()) < 60


def test_create_session_first_write_wins(store: SessionDB) -> None:
    assert store.create_session("s1", "cli", model="first") == "s1"
    assert store.create_session("s1", "telegram", model="second", cwd="/x") == "s1"
    row = store.get_session("s1")
    assert (row["source"], row["model"], row["cwd"]) == ("cli", "first", None)


@pytest.mark.parametrize("config", [None, {}])
def test_an_empty_model_config_stores_null(store: SessionDB, config: object) -> None:
    store.create_session("s1", "cli", model_config=config)
    assert store.get_session("s1")["model_config"] is None


def test_create_session_refuses_other_keywords_and_missing_parents(store: SessionDB) -> None:
    with pytest.raises(TypeError, match="title"):
        store.create_session("s1", "cli", title="nope")  # type: ignore[call-arg]
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        store.create_session("child", "cli", parent_session_id="missing")
    assert store.get_session("child") is None


def test_ensure_session_takes_model_positionally(store: SessionDB) -> None:
    assert store.ensure_session("s1") == "s1"
    assert store.ensure_session("s2", "gateway", "m2") == "s2"
    assert store.ensure_session("s3", "cli", model="m3", cwd="/c") == "s3"
    assert store.get_session("s1")["source"] == "unknown"
    assert (store.get_session("s2")["source"], store.get_session("s2")["model"]) == (
        "gateway",
        "m2",
    )
    assert store.get_session("s3")["cwd"] == "/c"
    # An existing session is left as it was.
    store.ensure_session("s2", "cli", "other")
    assert store.get_session("s2")["model"] == "m2"


# -- end / reopen -----------------------------------------------------------------------------


def test_the_first_end_wins_and_reopen_allows_another(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.end_session("s1", "user_exit")
    first = store.get_session("s1")
    store.end_session("s1", "compression")
    assert store.get_session("s1") == first
    assert first["end_reason"] == "user_exit"
    store.reopen_session("s1")
    reopened = store.get_session("s1")
    assert (reopened["ended_at"], reopened["end_reason"]) == (None, None)
    store.end_session("s1", "compression")
    assert store.get_session("s1")["end_reason"] == "compression"


def test_updates_of_an_unknown_session_do_nothing(store: SessionDB) -> None:
    store.end_session("ghost", "x")
    store.reopen_session("ghost")
    store.update_system_prompt("ghost", "p")
    store.update_session_model("ghost", "m")
    store.update_session_meta("ghost", "{}")
    store.update_session_cwd("ghost", "/x", "main")
    assert store.get_session("ghost") is None
    assert store.session_count(include_archived=True) == 0


def test_system_prompt_and_model_are_overwritten(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="a", system_prompt="old")
    store.update_system_prompt("s1", "new")
    store.update_session_model("s1", "b")
    row = store.get_session("s1")
    assert (row["system_prompt"], row["model"]) == ("new", "b")


# -- update_session_meta ------------------------------------------------------------------------


def test_update_session_meta_replaces_model_config_whole(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="m", model_config={"_branched_from": "p", "t": 1})
    store.update_session_meta("s1", json.dumps({"t": 2}))
    row = store.get_session("s1")
    assert row["model_config"] == '{"t": 2}'  # the marker went with the old value
    assert row["model"] == "m"  # model=None leaves it
    store.update_session_meta("s1", '{"t": 3}', model="m2")
    row = store.get_session("s1")
    assert (row["model_config"], row["model"]) == ('{"t": 3}', "m2")
    store.update_session_meta("s1", model_config_json='{"t": 4}', model=None)
    assert store.get_session("s1")["model_config"] == '{"t": 4}'


def test_update_session_meta_keyword_fields_keep_working(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.update_session_meta("s1", cwd="/repo", git_branch="main", billing_provider="p")
    row = store.get_session("s1")
    assert (row["cwd"], row["git_branch"], row["billing_provider"]) == ("/repo", "main", "p")
    store.update_session_meta("s1", model_config={"k": 1}, model="m")
    row = store.get_session("s1")
    assert (row["model_config"], row["model"]) == ('{"k": 1}', "m")


def test_update_session_meta_refuses_mixed_and_unknown_fields(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    with pytest.raises(TypeError, match="cannot be combined with cwd"):
        store.update_session_meta("s1", "{}", cwd="/x")
    with pytest.raises(ValueError, match="unknown field"):
        store.update_session_meta("s1", colour="blue")
    assert store.get_session("s1")["model_config"] is None


# -- update_session_cwd -----------------------------------------------------------------------


def test_update_session_cwd_sets_branch_only_when_known(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.update_session_cwd("s1", "/repo", git_branch="main")
    assert (store.get_session("s1")["cwd"], store.get_session("s1")["git_branch"]) == (
        "/repo",
        "main",
    )
    # A failed branch probe (None, "", blanks) never clobbers the stored branch.
    for probe in (None, "", "   "):
        store.update_session_cwd("s1", "/repo/sub", probe)
        assert store.get_session("s1")["git_branch"] == "main"
    assert store.get_session("s1")["cwd"] == "/repo/sub"
    store.update_session_cwd("s1", "/other", "  feature  ")
    assert store.get_session("s1")["git_branch"] == "feature"


@pytest.mark.parametrize(
    ("session_id", "cwd"), [("", "/x"), (None, "/x"), ("s1", ""), ("s1", None)]
)
def test_update_session_cwd_is_a_no_op_without_id_or_cwd(
    store: SessionDB, session_id: object, cwd: object
) -> None:
    store.create_session("s1", "cli", cwd="/kept")
    store.update_session_cwd(session_id, cwd, "b")  # type: ignore[arg-type]
    row = store.get_session("s1")
    assert (row["cwd"], row["git_branch"]) == ("/kept", None)


# -- get / resolve ------------------------------------------------------------------------------


def test_resolve_session_id(store: SessionDB) -> None:
    for session_id in ("20250101_a_1", "20250101_b_1", "x_y", "xzy", "only%one"):
        store.create_session(session_id, "cli")
    assert store.resolve_session_id("x_y") == "x_y"  # exact
    assert store.resolve_session_id("20250101_a") == "20250101_a_1"  # unique prefix
    assert store.resolve_session_id("20250101") is None  # ambiguous
    assert store.resolve_session_id("x_") == "x_y"  # "_" is literal, so xzy is no match
    assert store.resolve_session_id("only%") == "only%one"
    assert store.resolve_session_id("%") is None
    assert store.resolve_session_id("nope") is None
    assert store.get_session("nope") is None


# -- finalize_orphaned_compression_sessions --------------------------------------------------------


def continuation(store: SessionDB, child: str, *, days: float, messages: bool = True) -> None:
    store.create_session(child, "cli", parent_session_id="parent")
    if messages:
        store.append_message(child, "user", "[summary]")
    backdate(store, child, days)


def test_finalize_orphaned_compression_sessions(store: SessionDB) -> None:
    store.create_session("parent", "cli")
    store.end_session("parent", "compression")
    continuation(store, "stale", days=8)
    continuation(store, "recent", days=6)
    continuation(store, "empty", days=8, messages=False)
    continuation(store, "worked", days=8)
    store.update_token_counts("worked", api_call_count=1)
    continuation(store, "ended", days=8)
    store.end_session("ended", "user_exit")
    store.create_session("other_parent", "cli")
    store.end_session("other_parent", "user_exit")
    store.create_session("not_compressed", "cli", parent_session_id="other_parent")
    store.append_message("not_compressed", "user", "hi")
    backdate(store, "not_compressed", 8)

    assert store.finalize_orphaned_compression_sessions() == 1

    stale = store.get_session("stale")
    assert stale["end_reason"] == "orphaned_compression"
    assert abs(stale["ended_at"] - time.time()) < 60
    for untouched in ("recent", "empty", "worked", "not_compressed"):
        assert store.get_session(untouched)["ended_at"] is None
    assert store.get_session("ended")["end_reason"] == "user_exit"
    assert store.finalize_orphaned_compression_sessions() == 0


# -- maybe_auto_prune_and_vacuum ----------------------------------------------------------------


def old_ended(store: SessionDB, session_id: str, days: float = 100) -> None:
    store.create_session(session_id, "cli")
    store.end_session(session_id, "done")
    backdate(store, session_id, days)


def test_auto_prune_runs_once_per_interval(store: SessionDB) -> None:
    old_ended(store, "old1")
    old_ended(store, "old2")
    store.create_session("live", "cli")
    assert store.maybe_auto_prune_and_vacuum(retention_days=90) == {
        "skipped": False,
        "pruned": 2,
        "vacuumed": True,
    }
    assert store.get_session("old1") is None and store.get_session("live") is not None
    marker = store.get_meta("last_auto_prune")
    assert marker is not None and abs(float(marker) - time.time()) < 60

    old_ended(store, "old3")
    assert store.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=24) == {
        "skipped": True,
        "pruned": 0,
        "vacuumed": False,
    }
    assert store.get_session("old3") is not None

    store.set_meta("last_auto_prune", str(time.time() - 48 * 3600))
    result = store.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=24)
    assert (result["skipped"], result["pruned"]) == (False, 1)


def test_auto_prune_without_candidates_records_the_run_and_skips_vacuum(store: SessionDB) -> None:
    store.create_session("fresh", "cli")
    assert store.maybe_auto_prune_and_vacuum() == {
        "skipped": False,
        "pruned": 0,
        "vacuumed": False,
    }
    assert store.get_meta("last_auto_prune") is not None


def test_auto_prune_options(store: SessionDB) -> None:
    store.set_meta("last_auto_prune", "not-a-timestamp")
    old_ended(store, "old", days=40)
    assert store.maybe_auto_prune_and_vacuum(retention_days=30, vacuum=False) == {
        "skipped": False,
        "pruned": 1,
        "vacuumed": False,
    }


def test_auto_prune_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    reader = SessionDB(path, read_only=True)
    result = reader.maybe_auto_prune_and_vacuum()
    assert (result["skipped"], result["pruned"], result["vacuumed"]) == (False, 0, False)
    assert "read-only" in result["error"]
    reader.close()


def test_auto_prune_removes_the_transcripts_of_what_it_pruned(
    store: SessionDB, tmp_path: Path
) -> None:
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    old_ended(store, "old")
    store.create_session("live", "cli")
    for name in ("old.json", "old.jsonl", "request_dump_old_001.json", "live.jsonl"):
        (sessions_dir / name).write_text("{}")
    result = store.maybe_auto_prune_and_vacuum(retention_days=90, sessions_dir=sessions_dir)
    assert result["pruned"] == 1
    assert sorted(path.name for path in sessions_dir.iterdir()) == ["live.jsonl"]
