"""SessionDB: sessions, token counts, metadata, errors and the handle itself."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peewee
import pytest

from hermes_models import ReadOnlyDatabaseError, Session, SessionDB, using
from hermes_models.driver import sqlite3
from hermes_models.sessiondb import META_FIELDS

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def session_row(session_id: str, **values: Any) -> dict[str, Any]:
    """Every column of a fresh session row, with ``values`` on top."""
    row = {
        "id": session_id,
        "source": "cli",
        "user_id": None,
        "model": None,
        "model_config": None,
        "system_prompt": None,
        "parent_session_id": None,
        "started_at": T0,
        "ended_at": None,
        "end_reason": None,
        "message_count": 0,
        "tool_call_count": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "cwd": None,
        "git_branch": None,
        "billing_provider": None,
        "billing_base_url": None,
        "billing_mode": None,
        "estimated_cost_usd": None,
        "actual_cost_usd": None,
        "cost_status": None,
        "cost_source": None,
        "pricing_version": None,
        "title": None,
        "api_call_count": 0,
        "handoff_state": None,
        "handoff_platform": None,
        "handoff_error": None,
        "rewind_count": 0,
        "archived": 0,
    }
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    return row


def dump(path: Path) -> list[str]:
    """The whole file, its schema and every row of every table, as text, read through a
    separate connection (the module the package runs on has no ``iterdump``)."""
    conn = sqlite3.connect(path)
    try:
        schema = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"
        ).fetchall()
        lines = [repr(row) for row in schema]
        for _, name, sql in schema:
            if str(sql).upper().startswith("CREATE TABLE"):
                rows = conn.execute(f'SELECT * FROM "{name}"').fetchall()
                lines.extend(sorted(f"{name}: {row!r}" for row in rows))
        return lines
    finally:
        conn.close()


# -- create / ensure / get ---------------------------------------------------------------


def test_create_session_stores_every_given_field(store: SessionDB) -> None:
    store.create_session("root", "cli", started_at=T0 - 60)
    returned = store.create_session(
        "s1",
        "telegram",
        model="model-a",
        model_config={"temperature": 0.2, "名前": "テスト"},
        system_prompt="You are helpful.",
        user_id="user-7",
        parent_session_id="root",
        cwd="/home/me/project",
        started_at=T0,
    )
    assert returned == "s1"
    session = store.get_session("s1")
    assert session == session_row(
        "s1",
        source="telegram",
        model="model-a",
        model_config='{"temperature": 0.2, "名前": "テスト"}',
        system_prompt="You are helpful.",
        user_id="user-7",
        parent_session_id="root",
        cwd="/home/me/project",
    )
    assert list(session) == list(session_row("s1"))
    assert isinstance(session["model_config"], str)
    assert type(session["archived"]) is int and type(session["rewind_count"]) is int


def test_create_session_keeps_model_config_text_as_given(store: SessionDB) -> None:
    store.create_session("s1", "cli", model_config='{"b": 1,  "a": 2}', started_at=T0)
    assert store.get_session("s1")["model_config"] == '{"b": 1,  "a": 2}'


def test_create_session_is_insert_or_ignore(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="first", cwd="/a", started_at=T0)
    again = store.create_session(
        "s1", "telegram", model="second", system_prompt="p", cwd="/b", started_at=T0 + 5
    )
    assert again == "s1"
    assert store.get_session("s1") == session_row("s1", model="first", cwd="/a")
    assert store.session_count() == 1


def test_create_session_defaults_started_at_to_now(store: SessionDB) -> None:
    before = time.time()
    store.create_session("s1", "cli")
    started = store.get_session("s1")["started_at"]
    assert before <= started <= time.time()


def test_ensure_session_creates_once(store: SessionDB) -> None:
    assert store.ensure_session("s1") == "s1"
    started = store.get_session("s1")["started_at"]
    assert store.get_session("s1") == session_row("s1", source="unknown", started_at=started)
    assert store.ensure_session("s1", "cli", model="m") == "s1"
    assert store.get_session("s1") == session_row("s1", source="unknown", started_at=started)
    store.ensure_session("s2", "cron", model="m", started_at=T0)
    assert store.get_session("s2") == session_row("s2", source="cron", model="m")


def test_get_session_of_nothing_is_none(store: SessionDB) -> None:
    assert store.get_session("missing") is None
    assert store.get_session("") is None
    assert store.get_session(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"session_id": "", "source": "cli"}, ValueError, "session_id"),
        ({"session_id": 5, "source": "cli"}, TypeError, "session_id"),
        ({"session_id": "s", "source": ""}, ValueError, "source"),
        ({"session_id": "s", "source": None}, TypeError, "source"),
        ({"session_id": "s", "source": "cli", "model": 3}, TypeError, "model"),
        ({"session_id": "s", "source": "cli", "model_config": object()}, TypeError, "model_config"),
        ({"session_id": "s", "source": "cli", "system_prompt": b"x"}, TypeError, "system_prompt"),
        ({"session_id": "s", "source": "cli", "user_id": 1}, TypeError, "user_id"),
        (
            {"session_id": "s", "source": "cli", "parent_session_id": ""},
            ValueError,
            "parent_session_id",
        ),
        ({"session_id": "s", "source": "cli", "cwd": Path("/x")}, TypeError, "cwd"),
        ({"session_id": "s", "source": "cli", "started_at": "now"}, TypeError, "started_at"),
        (
            {"session_id": "s", "source": "cli", "started_at": float("inf")},
            ValueError,
            "started_at",
        ),
        ({"session_id": "s\ud800", "source": "cli"}, ValueError, "session_id"),
        (
            {"session_id": "s", "source": "cli", "system_prompt": "\udc00"},
            ValueError,
            "system_prompt",
        ),
    ],
)
def test_create_session_names_a_bad_argument(
    store: SessionDB, kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    with pytest.raises(error, match=rf"^{argument} "):
        store.create_session(**kwargs)
    assert store.session_count() == 0


def test_unknown_parent_is_an_sqlite_integrity_error(store: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError) as caught:
        store.create_session("child", "cli", parent_session_id="nobody")
    assert type(caught.value) is sqlite3.IntegrityError
    assert not isinstance(caught.value, peewee.PeeweeException)
    assert store.session_count() == 0


def test_append_to_unknown_session_is_an_sqlite_integrity_error(store: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError) as caught:
        store.append_message("nobody", "user", "hello")
    assert type(caught.value) is sqlite3.IntegrityError
    assert store.message_count() == 0


# -- end / reopen ----------------------------------------------------------------------------


def test_end_session_first_end_wins(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    before = time.time()
    assert store.end_session("s1", "user_exit") is True
    ended = store.get_session("s1")
    assert before <= ended["ended_at"] <= time.time()
    assert store.end_session("s1", "compression") is False
    assert store.get_session("s1") == ended
    assert ended == session_row("s1", ended_at=ended["ended_at"], end_reason="user_exit")
    assert store.end_session("missing", "user_exit") is False
    assert store.get_session("missing") is None


def test_reopen_session_clears_the_end(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    store.end_session("s1", "user_exit")
    assert store.reopen_session("s1") is True
    assert store.get_session("s1") == session_row("s1")
    assert store.end_session("s1", "timeout") is True
    assert store.get_session("s1")["end_reason"] == "timeout"
    assert store.reopen_session("missing") is False


@pytest.mark.parametrize(
    ("args", "error", "argument"),
    [
        (("s1", ""), ValueError, "end_reason"),
        (("s1", 7), TypeError, "end_reason"),
        (("", "x"), ValueError, "session_id"),
    ],
)
def test_end_session_names_a_bad_argument(
    store: SessionDB, args: tuple[Any, ...], error: type[Exception], argument: str
) -> None:
    store.create_session("s1", "cli", started_at=T0)
    with pytest.raises(error, match=rf"^{argument} "):
        store.end_session(*args)
    assert store.get_session("s1") == session_row("s1")


# -- resolve_session_id ------------------------------------------------------------------


def test_end_session_without_a_reason_ends_it_with_none_as_hermes_does(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    assert store.end_session("s1", None) is True
    ended = store.get_session("s1")
    assert ended == session_row("s1", ended_at=ended["ended_at"], end_reason=None)
    assert ended["ended_at"] is not None
    assert store.end_session("s1", "later") is False  # the first end wins
    assert store.get_session("s1") == ended


def test_resolve_session_id_matches_ascii_letters_of_either_case_as_hermes_like(
    store: SessionDB,
) -> None:
    # Hermes: exact id, else LIKE 'prefix%' (ASCII case-insensitive), unique or None.
    for session_id in ("abc123", "Xyz_1", "XYZ_2", "ÄÖ1", "Mixed9"):
        store.create_session(session_id, "cli", started_at=T0)
    assert store.resolve_session_id("ABC") == "abc123"
    assert store.resolve_session_id("aBc12") == "abc123"
    assert store.resolve_session_id("xyz_") is None  # Xyz_1 and XYZ_2: ambiguous
    assert store.resolve_session_id("xyz_2") == "XYZ_2"
    assert store.resolve_session_id("mixed") == "Mixed9"
    assert store.resolve_session_id("äö") is None  # only ASCII letters fold, as in LIKE
    assert store.resolve_session_id("ÄÖ") == "ÄÖ1"
    assert store.resolve_session_id("Xyz_1") == "Xyz_1"  # exact
    assert store.resolve_session_id("ABC123") == "abc123"  # no exact row: the prefix rule


def test_resolve_session_id(store: SessionDB) -> None:
    for session_id in ("20260105_090000_aaaa1111", "20260105_090000_aaaa2222", "2026", "b_x%"):
        store.create_session(session_id, "cli", started_at=T0)
    assert store.resolve_session_id("20260105_090000_aaaa1111") == "20260105_090000_aaaa1111"
    assert store.resolve_session_id("20260105_090000_aaaa2") == "20260105_090000_aaaa2222"
    assert store.resolve_session_id("20260105_090000_aaaa") is None
    assert store.resolve_session_id("2026") == "2026"
    assert store.resolve_session_id("b_") == "b_x%"
    assert store.resolve_session_id("b%") is None
    assert store.resolve_session_id("_") is None
    assert store.resolve_session_id("zzz") is None
    assert store.resolve_session_id("") is None
    assert store.resolve_session_id(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "method",
    [
        "get_session",
        "resolve_session_id",
        "get_session_title",
        "get_session_by_title",
        "resolve_session_by_title",
        "get_meta",
    ],
)
def test_lookups_reject_non_text(store: SessionDB, method: str) -> None:
    with pytest.raises(TypeError, match=r" must be str, not int$"):
        getattr(store, method)(42)


# -- simple updates ------------------------------------------------------------------------


def test_update_system_prompt_model_and_cwd(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="old", model_config={"a": 1}, started_at=T0)
    assert store.update_system_prompt("s1", "Be brief. 简洁。") is True
    assert store.update_session_model("s1", "new-model") is True
    assert store.get_session("s1") == session_row(
        "s1", model="new-model", model_config='{"a": 1}', system_prompt="Be brief. 简洁。"
    )
    assert store.update_session_model("s1", "newer", {"b": [1, 2]}) is True
    assert store.update_session_cwd("s1", "/srv/app") is True
    assert store.get_session("s1") == session_row(
        "s1",
        model="newer",
        model_config='{"b": [1, 2]}',
        system_prompt="Be brief. 简洁。",
        cwd="/srv/app",
    )
    assert store.update_system_prompt("s1", None) is True
    assert store.get_session("s1")["system_prompt"] is None
    assert store.update_system_prompt("missing", "x") is False
    assert store.update_session_model("missing", "x") is False
    assert store.update_session_cwd("missing", "/x") is False
    assert store.session_count() == 1


def test_update_session_meta_sets_known_columns(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    assert (
        store.update_session_meta(
            "s1",
            git_branch="main",
            handoff_state={"step": 2},
            handoff_platform="telegram",
            model_config={"_branched_from": "x"},
            billing_mode="subscription",
        )
        is True
    )
    assert store.get_session("s1") == session_row(
        "s1",
        git_branch="main",
        handoff_state='{"step": 2}',
        handoff_platform="telegram",
        model_config='{"_branched_from": "x"}',
        billing_mode="subscription",
    )
    assert store.update_session_meta("s1") is True
    assert store.update_session_meta("missing", git_branch="x") is False
    assert store.update_session_meta("missing") is False


def test_update_session_meta_covers_exactly_the_meta_fields() -> None:
    assert sorted(META_FIELDS) == sorted(
        set(session_row("x"))
        - {
            "id",
            "source",
            "model",
            "parent_session_id",
            "started_at",
            "ended_at",
            "end_reason",
            "message_count",
            "tool_call_count",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "estimated_cost_usd",
            "actual_cost_usd",
            "title",
            "api_call_count",
            "rewind_count",
            "archived",
        }
    )


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (lambda s: s.update_session_meta("s1", started_at=1.0), ValueError, "update_session_meta"),
        (lambda s: s.update_session_meta("s1", git_branch=5), TypeError, "git_branch"),
        (lambda s: s.update_session_meta("s1", handoff_state=object()), TypeError, "handoff_state"),
        (
            lambda s: s.update_session_meta("s1", handoff_error="\ud800"),
            ValueError,
            "handoff_error",
        ),
        (lambda s: s.update_system_prompt("s1", 5), TypeError, "system_prompt"),
        (lambda s: s.update_system_prompt("", "p"), ValueError, "session_id"),
        (lambda s: s.update_session_model("s1", ["m"]), TypeError, "model"),
        (lambda s: s.update_session_model("s1", "m", object()), TypeError, "model_config"),
        (lambda s: s.update_session_cwd("s1", 1), TypeError, "cwd"),
        (lambda s: s.update_session_cwd(5, "/"), TypeError, "session_id"),
    ],
)
def test_updates_name_a_bad_argument(
    store: SessionDB, call: Any, error: type[Exception], argument: str
) -> None:
    store.create_session("s1", "cli", started_at=T0)
    with pytest.raises(error, match=rf"^{argument}[ :]"):
        call(store)
    assert store.get_session("s1") == session_row("s1")


# -- update_token_counts -------------------------------------------------------------------


def test_token_counts_increment(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    store.update_token_counts(
        "s1",
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=50,
        cache_write_tokens=5,
        reasoning_tokens=7,
        api_call_count=1,
        estimated_cost_usd=0.25,
        actual_cost_usd=0.125,
        model="model-a",
        billing_provider="openrouter",
        billing_base_url="https://example.invalid/v1",
        billing_mode="metered",
        cost_status="estimated",
        cost_source="pricing_table",
        pricing_version="2026-01",
    )
    store.update_token_counts(
        "s1",
        input_tokens=10,
        output_tokens=2,
        reasoning_tokens=1,
        api_call_count=1,
        estimated_cost_usd=0.5,
        model="model-b",
        billing_provider="other",
        billing_base_url="https://other.invalid",
        billing_mode="free",
        cost_status="final",
    )
    assert store.get_session("s1") == session_row(
        "s1",
        model="model-a",
        input_tokens=110,
        output_tokens=22,
        cache_read_tokens=50,
        cache_write_tokens=5,
        reasoning_tokens=8,
        api_call_count=2,
        estimated_cost_usd=0.75,
        actual_cost_usd=0.125,
        billing_provider="openrouter",
        billing_base_url="https://example.invalid/v1",
        billing_mode="metered",
        cost_status="final",
        cost_source="pricing_table",
        pricing_version="2026-01",
    )


def test_token_counts_absolute_sets_values(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="kept", started_at=T0)
    store.update_token_counts("s1", input_tokens=500, output_tokens=50, estimated_cost_usd=2.0)
    store.update_token_counts(
        "s1", input_tokens=7, output_tokens=3, actual_cost_usd=0.01, model="ignored", absolute=True
    )
    assert store.get_session("s1") == session_row(
        "s1",
        model="kept",
        input_tokens=7,
        output_tokens=3,
        estimated_cost_usd=0.0,  # absolute without an estimate resets it (Hermes)
        actual_cost_usd=0.01,
    )


def test_token_counts_for_an_unknown_session_create_it(store: SessionDB) -> None:
    before = time.time()
    store.update_token_counts("late", input_tokens=3, model="m", billing_mode="metered")
    row = store.get_session("late")
    assert before <= row["started_at"] <= time.time()
    assert row == session_row(
        "late",
        source="unknown",
        started_at=row["started_at"],
        model="m",
        input_tokens=3,
        billing_mode="metered",
        estimated_cost_usd=0.0,
    )


def test_token_counts_fill_model_only_when_null(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    store.update_token_counts("s1", model="")
    assert store.get_session("s1")["model"] is None
    store.update_token_counts("s1", model="first")
    store.update_token_counts("s1", model="second")
    assert store.get_session("s1")["model"] == "first"


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"input_tokens": -1}, ValueError, "input_tokens"),
        ({"output_tokens": -5}, ValueError, "output_tokens"),
        ({"cache_read_tokens": 1.5}, TypeError, "cache_read_tokens"),
        ({"cache_write_tokens": "3"}, TypeError, "cache_write_tokens"),
        ({"reasoning_tokens": True}, TypeError, "reasoning_tokens"),
        ({"api_call_count": -1}, ValueError, "api_call_count"),
        ({"estimated_cost_usd": -0.5}, ValueError, "estimated_cost_usd"),
        ({"actual_cost_usd": float("nan")}, ValueError, "actual_cost_usd"),
        ({"actual_cost_usd": "1"}, TypeError, "actual_cost_usd"),
        ({"model": 4}, TypeError, "model"),
        ({"billing_provider": 1}, TypeError, "billing_provider"),
        ({"cost_status": ["x"]}, TypeError, "cost_status"),
        ({"pricing_version": "\ud800"}, ValueError, "pricing_version"),
        ({"absolute": "yes"}, TypeError, "absolute"),
    ],
)
def test_token_counts_name_a_bad_argument(
    store: SessionDB, kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    store.create_session("s1", "cli", started_at=T0)
    store.update_token_counts("s1", input_tokens=10)
    with pytest.raises(error, match=rf"^{argument} "):
        store.update_token_counts("s1", **{"output_tokens": 5, **kwargs})
    assert store.get_session("s1") == session_row("s1", input_tokens=10, estimated_cost_usd=0.0)


# -- counts and meta -------------------------------------------------------------------------


def test_session_and_message_counts(store: SessionDB) -> None:
    assert (store.session_count(), store.message_count()) == (0, 0)
    store.create_session("a", "cli", started_at=T0)
    store.create_session("b", "telegram", started_at=T0)
    for text in ("one", "two", "three"):
        store.append_message("a", "user", text)
    store.append_message("b", "user", "four")
    assert store.session_count() == 2
    assert store.session_count(source="telegram") == 1
    assert store.message_count() == 4
    assert store.message_count("a") == 3
    assert store.message_count("b") == 1
    assert store.message_count("missing") == 0
    first = store.get_messages("a")[0]["id"]
    store.rewind_to_message("a", first)
    # Hermes counts every row, rewound ones included.
    assert store.message_count("a") == 3
    assert store.message_count("a", include_inactive=False) == 0
    assert store.message_count() == 4
    assert store.message_count(include_inactive=False) == 1


def test_get_and_set_meta(store: SessionDB) -> None:
    assert store.get_meta("last_prune") is None
    store.set_meta("last_prune", "1767603600")
    store.set_meta("owner", "gateway")
    store.set_meta("last_prune", "1767690000")
    assert (store.get_meta("last_prune"), store.get_meta("owner")) == ("1767690000", "gateway")
    store.set_meta("owner", None)
    assert store.get_meta("owner") is None
    with pytest.raises(TypeError, match=r"^value "):
        store.set_meta("owner", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^value "):
        store.set_meta("owner", "\ud800")
    assert store.get_meta("last_prune") == "1767690000"


# -- read-only handles ----------------------------------------------------------------------

WRITES = {
    "create_session": lambda s: s.create_session("new", "cli"),
    "ensure_session": lambda s: s.ensure_session("new"),
    "end_session": lambda s: s.end_session("s1", "done"),
    "reopen_session": lambda s: s.reopen_session("s1"),
    "update_system_prompt": lambda s: s.update_system_prompt("s1", "p"),
    "update_session_model": lambda s: s.update_session_model("s1", "m"),
    "update_session_meta": lambda s: s.update_session_meta("s1", git_branch="b"),
    "update_session_cwd": lambda s: s.update_session_cwd("s1", "/"),
    "update_token_counts": lambda s: s.update_token_counts("s1", input_tokens=1),
    "set_session_title": lambda s: s.set_session_title("s1", "t"),
    "append_message": lambda s: s.append_message("s1", "user", "x"),
    "replace_messages": lambda s: s.replace_messages("s1", [{"role": "user", "content": "x"}]),
    "rewind_to_message": lambda s: s.rewind_to_message("s1", 1),
    "restore_rewound": lambda s: s.restore_rewound("s1", 1),
    "clear_messages": lambda s: s.clear_messages("s1"),
    "set_meta": lambda s: s.set_meta("k", "v"),
    "release_compression_lock": lambda s: s.release_compression_lock("s1", "me"),
    "set_session_archived": lambda s: s.set_session_archived("s1", True),
    "delete_session": lambda s: s.delete_session("s1"),
    "delete_sessions": lambda s: s.delete_sessions(["s1"]),
    "prune_sessions": lambda s: s.prune_sessions(0),
    "delete_empty_sessions": lambda s: s.delete_empty_sessions(),
}


@pytest.fixture
def read_only(db_path: Path, migrated_copy: Callable[[Path], Path]) -> Any:
    """A read-only SessionDB on a file holding one session with two messages."""
    with SessionDB(migrated_copy(db_path)) as writer:
        writer.create_session("s1", "cli", started_at=T0)
        writer.append_message("s1", "user", "hello", timestamp=T0 + 1)
        writer.append_message("s1", "assistant", "hi", timestamp=T0 + 2)
        writer.set_meta("k", "original")
        writer.try_acquire_compression_lock("s1", "holder")
    handle = SessionDB(db_path, read_only=True)
    yield handle
    handle.close()


def test_read_only_handle_reads(read_only: SessionDB) -> None:
    assert read_only.read_only is True
    assert read_only.get_session("s1")["message_count"] == 2
    assert [m["content"] for m in read_only.get_messages("s1")] == ["hello", "hi"]
    assert read_only.get_messages_as_conversation("s1") == [
        {"role": "user", "content": "hello", "timestamp": T0 + 1},
        {"role": "assistant", "content": "hi", "timestamp": T0 + 2},
    ]
    assert read_only.resolve_session_id("s") == "s1"
    assert read_only.get_meta("k") == "original"
    assert read_only.get_compression_lock_holder("s1") == "holder"
    assert (read_only.session_count(), read_only.message_count()) == (1, 2)


@pytest.mark.parametrize("method", sorted(WRITES))
def test_read_only_handle_refuses_every_write(
    read_only: SessionDB, db_path: Path, method: str
) -> None:
    before = dump(db_path)
    with pytest.raises(sqlite3.OperationalError):
        WRITES[method](read_only)
    assert dump(db_path) == before


def test_read_only_writes_raise_the_package_error(read_only: SessionDB, db_path: Path) -> None:
    with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
        read_only.append_message("s1", "user", "x")


def test_read_only_lock_acquire_is_false(read_only: SessionDB, db_path: Path) -> None:
    before = dump(db_path)
    assert read_only.try_acquire_compression_lock("s2", "me") is False
    assert dump(db_path) == before


def test_read_only_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        SessionDB(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


# -- two files, threads ------------------------------------------------------------------


def test_two_stores_in_one_process_keep_apart(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    one_path, two_path = migrated_copy(tmp_path / "one.db"), migrated_copy(tmp_path / "two.db")
    with SessionDB(one_path) as one, SessionDB(two_path) as two:
        one.create_session("a", "cli", started_at=T0)
        two.create_session("b", "cli", started_at=T0)
        one.append_message("a", "user", "only in one")
        two.append_message("b", "user", "only in two")
        one.set_meta("file", "one")
        two.set_meta("file", "two")
        assert [s["id"] for s in one.list_sessions()] == ["a"]
        assert [s["id"] for s in two.list_sessions()] == ["b"]
        assert one.get_session("b") is None and two.get_session("a") is None
        assert [m["content"] for m in one.get_messages("a")] == ["only in one"]
        assert (one.get_meta("file"), two.get_meta("file")) == ("one", "two")
        with pytest.raises(sqlite3.IntegrityError):
            one.append_message("b", "user", "wrong file")
        assert (one.message_count(), two.message_count()) == (1, 1)


def test_two_stores_written_from_two_threads_at_once(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    stores = {name: SessionDB(migrated_copy(tmp_path / f"{name}.db")) for name in ("left", "right")}
    for name, store in stores.items():
        store.create_session(name, "cli", started_at=T0)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(name: str) -> None:
        store = stores[name]
        try:
            barrier.wait()
            for index in range(100):
                store.append_message(name, "user", f"{name} {index}")
                assert store.get_session(name)["message_count"] == index + 1
                assert store.session_count() == 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.database.close()

    threads = [threading.Thread(target=work, args=(name,)) for name in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        for name, store in stores.items():
            assert [s["id"] for s in store.list_sessions()] == [name]
            assert [m["content"] for m in store.get_messages(name)] == [
                f"{name} {index}" for index in range(100)
            ]
    finally:
        for store in stores.values():
            store.close()


# -- closing -------------------------------------------------------------------------------


def test_close_is_idempotent_and_closed_use_raises(
    db_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    store = SessionDB(migrated_copy(db_path))
    store.create_session("s1", "cli", started_at=T0)
    store.close()
    store.close()
    assert "closed" in repr(store)
    for call in (
        lambda: store.get_session("s1"),
        lambda: store.create_session("s2", "cli"),
        lambda: store.ensure_session("s2"),
        lambda: store.append_message("s1", "user", "x"),
        lambda: store.session_count(),
        lambda: store._conn,
        lambda: store.database,
    ):
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            call()
    with SessionDB(db_path) as again:
        assert again.get_session("s1") == session_row("s1")
        assert again.session_count() == 1


def test_context_manager_closes(db_path: Path, migrated_copy: Callable[[Path], Path]) -> None:
    with SessionDB(migrated_copy(db_path)) as store:
        store.create_session("s1", "cli", started_at=T0)
        assert "open" in repr(store)
    with pytest.raises(sqlite3.ProgrammingError):
        store.get_session("s1")


@pytest.mark.backends("sqlite")  # sqlite3's connection and PRAGMAs (PostgreSQL: test_v16_02)
def test_conn_is_a_dbapi_connection_for_raw_sql(store: SessionDB) -> None:
    store.create_session("s1", "cli", started_at=T0)
    conn = store._conn
    assert isinstance(conn, sqlite3.Connection)
    rows = conn.execute("SELECT id, source FROM sessions").fetchall()
    assert [type(row) for row in rows] == [sqlite3.Row]
    assert [dict(row) for row in rows] == [{"id": "s1", "source": "cli"}]
    assert rows[0]["source"] == rows[0][1] == "cli"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # peewee reads the same connection through cursors of its own, by position.
    with using(store.database):
        assert Session.select(Session.id, Session.source).tuples()[:] == [("s1", "cli")]
        assert store.database.execute_sql("SELECT id FROM sessions").fetchall() == [("s1",)]


def test_default_path_is_under_hermes_home(tmp_path: Path) -> None:
    with SessionDB() as store:
        assert store.db_path == tmp_path / "hermes-home" / "state.db"
        store.create_session("s1", "cli", started_at=T0)
    assert (tmp_path / "hermes-home" / "state.db").exists()


def test_model_config_json_round_trips_through_get_session(store: SessionDB) -> None:
    config = {"nested": {"list": [1, 2.5, None, "é"]}, "_delegate_from": "p"}
    store.create_session("s1", "cli", model_config=config, started_at=T0)
    assert json.loads(store.get_session("s1")["model_config"]) == config


# -- compression locks through SessionDB ------------------------------------------------------


def test_compression_lock_methods(store: SessionDB) -> None:
    assert store.try_acquire_compression_lock("s1", "gateway:pid=1", ttl_seconds=60) is True
    assert store.try_acquire_compression_lock("s1", "cli:pid=2") is False
    assert store.try_acquire_compression_lock("s1", "gateway:pid=1") is True
    assert store.get_compression_lock_holder("s1") == "gateway:pid=1"
    assert store.release_compression_lock("s1", "cli:pid=2") is None
    assert store.get_compression_lock_holder("s1") == "gateway:pid=1"
    store.release_compression_lock("s1", "gateway:pid=1")
    assert store.get_compression_lock_holder("s1") is None
    assert store.try_acquire_compression_lock("s1", "short", ttl_seconds=0.05) is True
    time.sleep(0.1)
    assert store.get_compression_lock_holder("s1") is None
    assert store.try_acquire_compression_lock("s1", "cli:pid=2") is True
    assert store.try_acquire_compression_lock("", "x") is False
    assert store.get_compression_lock_holder("") is None


@pytest.mark.parametrize(
    ("args", "error", "argument"),
    [
        (("s1", "me", 0), ValueError, "ttl_seconds"),
        (("s1", "me", "60"), TypeError, "ttl_seconds"),
        (("s1", "", 60), ValueError, "holder"),
        (("s1", 5, 60), TypeError, "holder"),
        ((5, "me", 60), TypeError, "session_id"),
    ],
)
def test_compression_lock_names_a_bad_argument(
    store: SessionDB, args: tuple[Any, ...], error: type[Exception], argument: str
) -> None:
    with pytest.raises(error, match=rf"^{argument} "):
        store.try_acquire_compression_lock(*args)
    assert store._conn.execute("SELECT COUNT(*) FROM compression_locks").fetchone()[0] == 0


def test_one_of_many_threads_wins_the_lock(store: SessionDB) -> None:
    barrier = threading.Barrier(8)
    results: dict[str, bool] = {}
    errors: list[BaseException] = []

    def contend(name: str) -> None:
        try:
            barrier.wait()
            results[name] = store.try_acquire_compression_lock("contested", name)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.database.close()

    threads = [threading.Thread(target=contend, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    winners = [name for name, won in results.items() if won]
    assert len(results) == 8 and len(winners) == 1
    assert store.get_compression_lock_holder("contested") == winners[0]
