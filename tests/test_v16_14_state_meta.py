"""HERMES_V16 §3.14: the state_meta key/value table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def test_get_and_upsert(store: SessionDB) -> None:
    assert store.get_meta("owner") is None
    store.set_meta("owner", "v1")
    store.set_meta("owner", "v2")
    store.set_meta("other", "x")
    assert store.get_meta("owner") == "v2"
    rows = store._conn.execute("SELECT key, value FROM state_meta ORDER BY key").fetchall()
    assert [tuple(row) for row in rows] == [("other", "x"), ("owner", "v2")]


def test_values_are_text_as_given_and_persist(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.set_meta("last_auto_prune", "1700000000.25")
        store.set_meta("empty", "")
    with SessionDB(path) as again:
        assert again.get_meta("last_auto_prune") == "1700000000.25"
        assert again.get_meta("empty") == ""
    reader = SessionDB(path, read_only=True)
    assert reader.get_meta("last_auto_prune") == "1700000000.25"
    reader.close()
