"""HERMES_V16 §3.12: export_session and export_all."""

from __future__ import annotations

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def test_export_session_is_the_row_and_its_active_messages(store: SessionDB) -> None:
    store.create_session("s1", "cli", model="m", model_config={"t": 1}, started_at=T0)
    store.append_message("s1", "user", "kept", timestamp=T0 + 1)
    rewound = store.append_message("s1", "user", "rewound", timestamp=T0 + 2)
    store.rewind_to_message("s1", rewound)
    exported = store.export_session("s1")
    assert exported == {**store.get_session("s1"), "messages": store.get_messages("s1")}
    assert exported["model_config"] == '{"t": 1}'
    assert [m["content"] for m in exported["messages"]] == ["kept"]
    assert store.export_session("nope") is None


def test_export_all_orders_by_last_activity_with_children_and_archives(store: SessionDB) -> None:
    store.create_session("old_busy", "cli", started_at=T0)
    store.create_session("newer_quiet", "cli", started_at=T0 + 50)
    store.create_session("child", "cli", parent_session_id="old_busy", started_at=T0 + 60)
    store.create_session("archived", "telegram", started_at=T0 + 70)
    store.create_session("tie_a", "cli", started_at=T0 + 80)
    store.create_session("tie_b", "cli", started_at=T0 + 80)
    store.append_message("old_busy", "user", "latest of all", timestamp=T0 + 100)
    store.set_session_archived("archived", True)

    everything = store.export_all()
    assert [s["id"] for s in everything] == [
        "old_busy",
        "tie_b",
        "tie_a",
        "archived",
        "child",
        "newer_quiet",
    ]
    first = everything[0]
    assert first["last_active"] == T0 + 100
    assert [m["content"] for m in first["messages"]] == ["latest of all"]
    assert everything[1]["last_active"] == T0 + 80
    assert everything[1]["messages"] == []
    assert [s["id"] for s in store.export_all(source="telegram")] == ["archived"]
    assert store.export_all(source="discord") == []
