"""HERMES_V16 §3.15: the handoff state machine (pending -> running -> completed | failed)."""

from __future__ import annotations

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def test_a_handoff_runs_through_its_states(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    assert store.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}
    assert store.claim_handoff("s1") is False  # nothing pending
    assert store.request_handoff("s1", "telegram") is True
    assert store.get_handoff_state("s1") == {
        "state": "pending",
        "platform": "telegram",
        "error": None,
    }
    assert store.request_handoff("s1", "discord") is False  # one is in flight
    assert store.claim_handoff("s1") is True
    assert store.claim_handoff("s1") is False  # already running
    assert store.request_handoff("s1", "discord") is False
    store.fail_handoff("s1", "x" * 600)
    state = store.get_handoff_state("s1")
    assert (state["state"], state["platform"], state["error"]) == ("failed", "telegram", "x" * 500)
    assert store.request_handoff("s1", "discord") is True  # after a failure, again
    assert store.get_handoff_state("s1") == {
        "state": "pending",
        "platform": "discord",
        "error": None,
    }
    store.claim_handoff("s1")
    store.complete_handoff("s1")
    assert store.get_handoff_state("s1") == {
        "state": "completed",
        "platform": "discord",
        "error": None,
    }
    assert store.request_handoff("s1", "cli") is True  # and after a completion


def test_complete_clears_an_earlier_error(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.request_handoff("s1", "telegram")
    store.fail_handoff("s1", "network down")
    store.complete_handoff("s1")
    assert store.get_handoff_state("s1") == {
        "state": "completed",
        "platform": "telegram",
        "error": None,
    }


def test_unknown_sessions(store: SessionDB) -> None:
    assert store.get_handoff_state("ghost") is None
    assert store.request_handoff("ghost", "telegram") is False
    assert store.claim_handoff("ghost") is False
    store.complete_handoff("ghost")
    store.fail_handoff("ghost", "e")
    assert store.get_session("ghost") is None


def test_pending_handoffs_oldest_first(store: SessionDB) -> None:
    for index, session_id in enumerate(("late", "early", "running", "idle")):
        store.create_session(session_id, "cli", started_at=T0 + (10 - index))
    store.request_handoff("late", "telegram")
    store.request_handoff("early", "discord")
    store.request_handoff("running", "telegram")
    store.claim_handoff("running")
    pending = store.list_pending_handoffs()
    assert [row["id"] for row in pending] == ["early", "late"]
    assert pending[0] == store.get_session("early")
    assert pending[0]["handoff_platform"] == "discord"
