"""A counter increment that would overflow is refused, worded the same on both backends.

SQLite would store an integer sum past 2**63-1 as an inexact float, so the package
reads the counters first there; PostgreSQL refuses the sum itself (``bigint`` and
``float8`` overflow is an error), so the server's write sends no read first and the
refusal is worded by the same check after the rollback. Either way nothing is written.
"""

from __future__ import annotations

import sys

import pytest

from hermes_models import SessionDB
from hermes_models.checks import INT64_MAX

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def test_a_token_count_past_2_63_is_refused_and_nothing_changes(store: SessionDB) -> None:
    store.create_session("s", "cli")
    store.update_token_counts("s", input_tokens=INT64_MAX, output_tokens=7, absolute=True)
    with pytest.raises(ValueError) as refused:
        store.update_token_counts("s", input_tokens=1, output_tokens=5, model="m")
    assert str(refused.value) == (
        f"input_tokens: adding 1 to {INT64_MAX} would pass 2**63-1,"
        " the largest integer SQLite stores"
    )
    row = store.get_session("s")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"], row["model"]) == (INT64_MAX, 7, None)
    store.update_token_counts("s", output_tokens=5)  # the other counters still add up
    row = store.get_session("s")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"]) == (INT64_MAX, 12)


def test_a_cost_past_the_largest_float_is_refused_and_nothing_changes(store: SessionDB) -> None:
    top = sys.float_info.max
    store.update_token_counts("s", estimated_cost_usd=top, absolute=True)
    with pytest.raises(ValueError) as refused:
        store.update_token_counts("s", input_tokens=3, estimated_cost_usd=top)
    assert str(refused.value) == f"estimated_cost_usd: adding {top} to {top} overflows"
    row = store.get_session("s")
    assert row is not None
    assert (row["estimated_cost_usd"], row["input_tokens"]) == (top, 0)
