"""SessionDB.search_sessions: hits grouped by lineage root, ranking, filters, plain listing."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_models import Session, SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


@pytest.fixture
def family(store: SessionDB) -> dict[str, str]:
    """A root with a compression continuation, a subagent run under the continuation
    and a branch off it; another root elsewhere; a root without hits."""
    store.create_session("root", "cli", started_at=T0)
    store.append_message("root", "user", "alpha one", timestamp=T0 + 1)
    store.append_message("root", "assistant", "nothing to see", timestamp=T0 + 2)
    cont = Session.get_by_id("root").compress(
        [{"role": "user", "content": "summary alpha two"}], session_id="cont", at=T0 + 100
    )
    store.append_message("cont", "assistant", "alpha three", timestamp=T0 + 110)
    Session.get_by_id("cont").delegate(session_id="sub", source="delegate", at=T0 + 120)
    store.append_message("sub", "user", "alpha four alpha", timestamp=T0 + 121)
    cont.branch(session_id="fork", at=T0 + 300)
    store.append_message("fork", "user", "alpha five", timestamp=T0 + 310)
    store.create_session("other", "telegram", started_at=T0 + 400)
    store.append_message(
        "other", "user", "alpha six in a much longer message than the rest", timestamp=T0 + 401
    )
    store.create_session("quiet", "cli", started_at=T0 + 500)
    store.append_message("quiet", "user", "nothing", timestamp=T0 + 501)
    return {"root": "root", "cont": "cont", "sub": "sub", "fork": "fork", "other": "other"}


def best_session(store: SessionDB, query: str, sessions: set[str]) -> tuple[str, str]:
    """Session and snippet of the best-ranked message hit among ``sessions``."""
    for hit in store.search_messages(query, limit=None):
        if hit["session_id"] in sessions:
            return hit["session_id"], hit["snippet"]
    raise AssertionError(f"no hit in {sessions}")


def strip_score(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "score"} for row in rows]


def test_hits_count_for_their_lineage_root_and_branches_stand_alone(
    store: SessionDB, family: dict[str, str]
) -> None:
    rows = store.search_sessions("alpha")
    root_best, _ = best_session(store, "alpha", {"root", "cont", "sub"})
    fork_best, _ = best_session(store, "alpha", {"fork"})
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == {"root", "fork", "other"}
    for session_id, hits, matched in (
        ("root", 4, root_best),
        ("fork", 3, fork_best),
        ("other", 1, "other"),
    ):
        row = dict(by_id[session_id])
        score = row.pop("score")
        assert score > 0
        snippet = row.pop("best_snippet")
        assert ">>>alpha<<<" in snippet
        assert row == {
            **store.get_session(session_id),  # type: ignore[dict-item]
            "hits": hits,
            "matched_session_id": matched,
        }
    scores = [row["score"] for row in rows]
    assert scores == sorted(scores, reverse=True)


def test_best_snippet_is_the_best_hit_highlighted(store: SessionDB, family: dict[str, str]) -> None:
    rows = {row["id"]: row for row in store.search_sessions("alpha")}
    assert rows["other"]["best_snippet"] == ">>>alpha<<< six in a much longer message than the rest"
    assert rows["fork"]["best_snippet"] in (
        ">>>alpha<<< five",
        "summary >>>alpha<<< two",
        ">>>alpha<<< three",
    )


def test_recent_orders_by_latest_match(store: SessionDB, family: dict[str, str]) -> None:
    assert [row["id"] for row in store.search_sessions("alpha", rank_mode="recent")] == [
        "other",
        "fork",
        "root",
    ]
    store.append_message("root", "user", "alpha again, latest of all", timestamp=T0 + 900)
    recent = store.search_sessions("alpha", rank_mode="recent")
    assert [(row["id"], row["hits"]) for row in recent] == [("root", 5), ("other", 1), ("fork", 3)]


def test_relevance_is_the_default(store: SessionDB, family: dict[str, str]) -> None:
    assert strip_score(store.search_sessions("alpha", rank_mode="relevance")) == strip_score(
        store.search_sessions("alpha")
    )


def test_source_limit_and_offset(store: SessionDB, family: dict[str, str]) -> None:
    everything = strip_score(store.search_sessions("alpha"))
    assert [row["id"] for row in store.search_sessions("alpha", source="telegram")] == ["other"]
    assert [row["id"] for row in store.search_sessions("alpha", source=["cli"])] == [
        row["id"] for row in everything if row["source"] == "cli"
    ]
    assert strip_score(store.search_sessions("alpha", limit=1, offset=1)) == everything[1:2]
    assert store.search_sessions("alpha", limit=0) == []
    assert store.search_sessions("alpha", source=[]) == []


def test_cjk_and_mixed_queries(store: SessionDB) -> None:
    store.create_session("zh", "cli", started_at=T0)
    store.append_message("zh", "user", "事件循环怎么工作", timestamp=T0 + 1)
    store.create_session("ko", "cli", started_at=T0 + 10)
    store.append_message("ko", "user", "세션 검색은 어떻게 동작하나요", timestamp=T0 + 11)
    store.append_message("ko", "assistant", "event loop 事件", timestamp=T0 + 12)
    assert [(r["id"], r["hits"], r["best_snippet"]) for r in store.search_sessions("事件循环")] == [
        ("zh", 1, ">>>事件循环<<<怎么工作")
    ]
    assert [(r["id"], r["hits"], r["score"]) for r in store.search_sessions("검색")] == [
        ("ko", 1, 0.0)
    ]
    assert sorted((r["id"], r["hits"]) for r in store.search_sessions("事件")) == [
        ("ko", 1),
        ("zh", 1),
    ]
    assert sorted((r["id"], r["hits"]) for r in store.search_sessions("事件循环 OR loop")) == [
        ("ko", 1),
        ("zh", 1),
    ]


def test_soft_deleted_messages_are_not_hits(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    keep = store.append_message("s", "user", "needle kept", timestamp=T0 + 1)
    gone = store.append_message("s", "user", "needle rewound", timestamp=T0 + 2)
    store.rewind_to_message("s", gone)
    assert [(r["id"], r["hits"]) for r in store.search_sessions("needle")] == [("s", 1)]
    assert store.search_sessions("rewound") == []
    assert keep < gone


def test_a_cycle_in_parent_links_does_not_hang(store: SessionDB) -> None:
    store.create_session("a", "cli", started_at=T0)
    store.create_session("b", "cli", parent_session_id="a", started_at=T0 + 1)
    store.append_message("b", "user", "loop of parents", timestamp=T0 + 2)
    # Both sessions exist, so the loop satisfies the foreign key on either backend.
    store._conn.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    store._conn.commit()
    rows = store.search_sessions("parents")
    # b -> a -> (b again: the walk stops) - the furthest session reached is a.
    assert [(row["id"], row["hits"], row["matched_session_id"]) for row in rows] == [("a", 1, "b")]


def test_without_a_query_every_session_newest_activity_first(
    store: SessionDB, family: dict[str, str]
) -> None:
    rows = store.search_sessions()
    expected = ["quiet", "other", "fork", "sub", "cont", "root"]
    assert [row["id"] for row in rows[:10]] == expected
    for row in rows:
        last = row.pop("last_active")
        assert row == store.get_session(row["id"])
        messages = store.get_messages(row["id"], include_inactive=True)
        assert last == max([m["timestamp"] for m in messages], default=row["started_at"])
    assert [r["id"] for r in store.search_sessions(None, limit=2, offset=1)] == expected[1:3]
    assert [r["id"] for r in store.search_sessions("  ", source="telegram")] == ["other"]
    assert [r["id"] for r in store.search_sessions(source=["delegate", "telegram"])] == [
        "other",
        "sub",
    ]


@pytest.mark.parametrize("query", ["***", "AND", '"', "(", "\x00"])
def test_nothing_searchable_is_no_rows(
    store: SessionDB, family: dict[str, str], query: str
) -> None:
    assert store.search_sessions(query) == []


def test_bad_arguments(store: SessionDB) -> None:
    with pytest.raises(ValueError, match="rank_mode"):
        store.search_sessions("x", rank_mode="best")
    with pytest.raises(ValueError, match="limit"):
        store.search_sessions("x", limit=-2)
    with pytest.raises(TypeError, match="source"):
        store.search_sessions("x", source=3)  # type: ignore[arg-type]
