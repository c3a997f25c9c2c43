"""A ranked search ranks every hit by default, on both backends; ``rank_window=N`` ranks
only the newest ``N`` (issue #37 point 3).

The store: the best matches of ``docker`` are the OLDEST messages (the word many times
in a short message), and far more than the window of newer, weaker matches follow (the
word once in a long message). The exact answer is the simplest correct query's: every
match ranked by plain SQL (FTS5's ``bm25`` on SQLite, the server's ranking expression
on PostgreSQL), best first, ties newest first."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.search import plan
from hermes_models.search import postgres as pg_search

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0
#: Strong old matches, weak newer ones (many more than WINDOW), unrelated messages.
OLD, NEW, OTHER = 6, 60, 20
WINDOW = 10

#: Every active match of ``docker`` by the simplest correct query, best first, ties
#: newest first: (id, timestamp, session_id).
PLAIN_SQL = {
    "sqlite": (
        "SELECT m.id, m.timestamp, m.session_id FROM messages_fts f"
        " JOIN messages m ON m.id = f.rowid"
        " WHERE messages_fts MATCH '\"docker\"' AND m.active = 1"
        " ORDER BY bm25(messages_fts), m.timestamp DESC, m.id DESC"
    ),
    "postgresql": (
        'SELECT m.id, m."timestamp", m.session_id FROM messages m'
        " WHERE m.search_tsv @@ phraseto_tsquery('simple', 'docker') AND m.active = 1"
        " ORDER BY -ts_rank(m.search_tsv, phraseto_tsquery('simple', 'docker')),"
        ' m."timestamp" DESC, m.id DESC'
    ),
}


@pytest.fixture
def filled(store: SessionDB, backend: str) -> tuple[SessionDB, list[tuple[Any, ...]]]:
    """The store, and every match ranked by plain SQL."""
    store.create_session("old", "cli", started_at=T0)
    store.create_session("new", "cli", started_at=T0 + 10_000)
    at = T0
    for k in range(OLD):
        at += 1
        store.append_message(
            "old", "user", " ".join(["docker"] * (8 - k) + ["x"] * k), timestamp=at
        )
    for k in range(NEW):
        at += 1
        filler = " ".join(f"w{j}" for j in range(20 + k))
        store.append_message("new", "user", f"docker {filler}", timestamp=at + 10_000)
    for k in range(OTHER):
        at += 1
        store.append_message("new", "assistant", f"plain text {k}", timestamp=at + 10_000)
    ranked = list(store.database.execute_sql(PLAIN_SQL[backend]).fetchall())
    assert len(ranked) == OLD + NEW
    return store, ranked


def _newest(ranked: list[tuple[Any, ...]], n: int) -> set[int]:
    return {row[0] for row in sorted(ranked, key=lambda r: (-r[1], -r[0]))[:n]}


def test_the_exact_default_finds_the_old_best_matches(
    filled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ranked = filled
    # The suggested windows, made small, are still not applied unless passed.
    monkeypatch.setattr(plan, "RANK_WINDOW", WINDOW)
    monkeypatch.setattr(pg_search, "RANK_WINDOW", WINDOW)
    monkeypatch.setattr(pg_search, "SESSION_WINDOW", WINDOW)
    best = [row[0] for row in ranked]
    # The best are the old ones, none of them among the newest WINDOW hits.
    assert {row[2] for row in ranked[:OLD]} == {"old"}
    assert not set(best[:OLD]) & _newest(ranked, WINDOW)
    assert [h["id"] for h in store.search_messages("docker", limit=5)] == best[:5]
    assert [h["id"] for h in store.search_messages("docker", limit=10, offset=3)] == best[3:13]
    assert [h["id"] for h in store.search_messages("docker", limit=None)] == best
    rows = store.search_sessions("docker", limit=10)
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in rows] == [
        ("old", OLD, "old"),
        ("new", NEW, "new"),
    ]


def test_a_rank_window_ranks_only_the_newest_matches(filled: Any) -> None:
    store, ranked = filled
    newest = _newest(ranked, WINDOW)
    windowed = [row[0] for row in ranked if row[0] in newest]
    found = store.search_messages("docker", limit=5, rank_window=WINDOW)
    assert [h["id"] for h in found] == windowed[:5]
    # A page ending beyond the window widens it to its end.
    deeper = _newest(ranked, 15)
    found = store.search_messages("docker", limit=5, offset=10, rank_window=WINDOW)
    assert [h["id"] for h in found] == [row[0] for row in ranked if row[0] in deeper][10:15]
    rows = store.search_sessions("docker", limit=10, rank_window=WINDOW)
    assert [(r["id"], r["hits"]) for r in rows] == [("new", WINDOW)]
    # The suggested windows are no default: the exact answer without rank_window.
    assert [h["id"] for h in store.search_messages("docker", limit=5)] == [
        row[0] for row in ranked[:5]
    ]


def test_a_window_wider_than_the_hits_is_exact(filled: Any) -> None:
    store, ranked = filled
    found = store.search_messages("docker", limit=5, rank_window=1_000)
    assert [h["id"] for h in found] == [row[0] for row in ranked[:5]]
