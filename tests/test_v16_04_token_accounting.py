"""HERMES_V16 §3.4: update_token_counts, incremental (CLI) and absolute (gateway)."""

from __future__ import annotations

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def counters(store: SessionDB, session_id: str) -> dict[str, object]:
    row = store.get_session(session_id)
    assert row is not None
    keys = (
        *TOKENS,
        "api_call_count",
        "estimated_cost_usd",
        "actual_cost_usd",
        "cost_status",
        "cost_source",
        "pricing_version",
        "billing_provider",
        "billing_base_url",
        "billing_mode",
        "model",
    )
    return {key: row[key] for key in keys}


def test_incremental_calls_add_up(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.update_token_counts("s1", input_tokens=200, output_tokens=100)
    store.update_token_counts("s1", input_tokens=100, output_tokens=50)
    row = store.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"]) == (300, 150)


def test_api_call_count_adds_and_absolute_sets(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    for _ in range(3):
        store.update_token_counts("s1", api_call_count=1)
    assert store.get_session("s1")["api_call_count"] == 3
    store.update_token_counts("s1", api_call_count=5, absolute=True)
    assert store.get_session("s1")["api_call_count"] == 5
    store.update_token_counts("s1", input_tokens=1, absolute=True)  # default 0 resets it
    assert store.get_session("s1")["api_call_count"] == 0


def test_incremental_costs_status_and_billing(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.update_token_counts("s1", input_tokens=10)
    # No cost given: the estimate becomes 0.0 (COALESCE), the actual cost stays NULL.
    assert counters(store, "s1")["estimated_cost_usd"] == 0.0
    assert counters(store, "s1")["actual_cost_usd"] is None
    store.update_token_counts(
        "s1",
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_write_tokens=4,
        reasoning_tokens=5,
        model="first-model",
        estimated_cost_usd=0.25,
        actual_cost_usd=0.5,
        cost_status="estimated",
        cost_source="pricing-table",
        pricing_version="v1",
        billing_provider="openrouter",
        billing_base_url="https://a",
        billing_mode="metered",
        api_call_count=1,
    )
    store.update_token_counts(
        "s1",
        input_tokens=1,
        model="second-model",
        estimated_cost_usd=0.25,
        actual_cost_usd=0.5,
        cost_status="final",
        billing_provider="other",
        billing_base_url="https://b",
        billing_mode="flat",
    )
    store.update_token_counts("s1", estimated_cost_usd=None, actual_cost_usd=None)
    assert counters(store, "s1") == {
        "input_tokens": 12,
        "output_tokens": 2,
        "cache_read_tokens": 3,
        "cache_write_tokens": 4,
        "reasoning_tokens": 5,
        "api_call_count": 1,
        "estimated_cost_usd": 0.5,
        "actual_cost_usd": 1.0,
        "cost_status": "final",  # overwritten when given
        "cost_source": "pricing-table",  # kept when not given
        "pricing_version": "v1",
        "billing_provider": "openrouter",  # the first writer wins
        "billing_base_url": "https://a",
        "billing_mode": "metered",
        "model": "first-model",
    }


def test_absolute_mode_sets_totals(store: SessionDB) -> None:
    store.create_session("s1", "telegram", model="kept")
    store.update_token_counts(
        "s1",
        input_tokens=100,
        output_tokens=40,
        estimated_cost_usd=1.5,
        actual_cost_usd=2.0,
        api_call_count=4,
    )
    store.update_token_counts(
        "s1",
        input_tokens=30,
        output_tokens=20,
        model="ignored",
        estimated_cost_usd=0.75,
        api_call_count=2,
        absolute=True,
    )
    row = counters(store, "s1")
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (30, 20, 2)
    assert (row["estimated_cost_usd"], row["actual_cost_usd"]) == (0.75, 2.0)
    assert row["model"] == "kept"
    # An absolute call without an estimate resets it to 0.
    store.update_token_counts("s1", input_tokens=30, absolute=True)
    assert counters(store, "s1")["estimated_cost_usd"] == 0.0
    assert counters(store, "s1")["actual_cost_usd"] == 2.0


def test_counting_into_an_unknown_session_creates_it(store: SessionDB) -> None:
    store.update_token_counts("new", input_tokens=7, model="m")
    row = store.get_session("new")
    assert (row["source"], row["model"], row["input_tokens"]) == ("unknown", "m", 7)


def test_update_session_model_overwrites_what_counts_never_replace(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="a")
    store.update_token_counts("s1", model="b")
    assert store.get_session("s1")["model"] == "a"
    store.update_session_model("s1", "c")
    assert store.get_session("s1")["model"] == "c"


def test_negative_counts_are_refused_and_nothing_changes(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store.update_token_counts("s1", input_tokens=5)
    with pytest.raises(ValueError, match=r"^input_tokens must not be negative"):
        store.update_token_counts("s1", input_tokens=-1, output_tokens=3)
    row = store.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"]) == (5, 0)
