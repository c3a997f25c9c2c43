"""A ranked search ranks every hit by default, on both backends; ``rank_window=N`` ranks
only the newest ``N`` (issue #37 point 3).

The store: the best matches of ``docker`` are the OLDEST messages (the word many times
in a short message), and far more than the window of newer, weaker matches follow (the
word once in a long message). The exact answer is every match ranked by BM25 as FTS5
computes it (computed in Python from the words of every message, and checked against
FTS5's ``bm25`` in plain SQL on SQLite), best first, ties in id order (as FTS5 hands
them over): on PostgreSQL the server computes the same BM25."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import target_of

from hermes_models import SessionDB
from hermes_models.search import plan
from hermes_models.search import postgres as pg_search

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0
#: Strong old matches, weak newer ones (many more than WINDOW), unrelated messages.
OLD, NEW, OTHER = 6, 60, 20
WINDOW = 10

#: Every active match of ``docker`` ranked by FTS5's own ``bm25`` (plain SQL on the file),
#: best first, ties in id order (as FTS5 hands them over).
SQLITE_BM25 = (
    "SELECT m.id FROM messages_fts f JOIN messages m ON m.id = f.rowid"
    " WHERE messages_fts MATCH '\"docker\"' AND m.active = 1"
    " ORDER BY bm25(messages_fts), m.id"
)


def bm25_ranked(rows: list[tuple[Any, ...]], word: str) -> list[tuple[Any, ...]]:
    """FTS5's BM25 of ``word`` computed in Python from the messages' words (k1 1.2,
    b 0.75; N, the average length and the word's document frequency over every
    message, soft-deleted ones too): the active matches ``(id, timestamp,
    session_id)``, best first, ties in id order (as FTS5 hands them over)."""
    words = {row[0]: str(row[3]).split() for row in rows}
    n = len(rows)
    avgdl = sum(len(w) for w in words.values()) / n
    df = sum(word in w for w in words.values())
    idf = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)

    def score(row: tuple[Any, ...]) -> float:
        f, dl = words[row[0]].count(word), len(words[row[0]])
        return -idf * f * 2.2 / (f + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))

    hits = [row for row in rows if row[4] and word in words[row[0]]]
    return [row[:3] for row in sorted(hits, key=lambda r: (score(r), r[0]))]


@pytest.fixture
def filled(store: SessionDB, backend: str) -> tuple[SessionDB, list[tuple[Any, ...]]]:
    """The store, and every match ranked by BM25 (computed here; on SQLite the same as
    FTS5's ``bm25`` in plain SQL)."""
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
    rows = store.database.execute_sql(
        'SELECT id, "timestamp", session_id, content, active FROM messages'
    ).fetchall()
    ranked = bm25_ranked([tuple(row) for row in rows], "docker")
    assert len(ranked) == OLD + NEW
    if backend == "sqlite":  # the oracle is FTS5's own ranking
        plain = [row[0] for row in store.database.execute_sql(SQLITE_BM25).fetchall()]
        assert plain == [row[0] for row in ranked]
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


@pytest.mark.backends("postgresql")
def test_the_server_keeps_the_statistics_bm25_reads(store: SessionDB) -> None:
    """``hermes_search_stats`` (migration 0011) holds the number of messages and of
    their tokens after inserts, updates and deletes from several connections, and
    ``search_len`` each message's tokens (its words here)."""
    db = store.database
    store.create_session("a", "cli", started_at=T0)
    store.create_session("b", "cli", started_at=T0)
    for k in range(30):
        text = " ".join(["w"] * (k + 1))
        store.append_message("a" if k % 2 else "b", "user", text, timestamp=T0 + k)
    other = SessionDB(target_of(db))  # another pool: other server processes
    try:
        other.append_message("a", "user", "one two three", timestamp=T0 + 100)
    finally:
        other.close()
    db.execute_sql("UPDATE messages SET content = content || ' more words' WHERE id %% 3 = 0", [])
    store.delete_session("b")

    def stats() -> tuple[int, int]:
        row = db.execute_sql("SELECT sum(docs), sum(tokens) FROM hermes_search_stats").fetchone()
        return int(row[0]), int(row[1])

    rows = db.execute_sql("SELECT content, tool_name, tool_calls, search_len FROM messages")
    rows = rows.fetchall()
    assert [int(r[3]) for r in rows] == [
        len(" ".join(str(c or "") for c in r[:3]).split()) for r in rows
    ]
    assert stats() == (len(rows), sum(int(r[3]) for r in rows))
    assert len(rows) == 16


@pytest.mark.backends("postgresql")
def test_a_long_write_beside_appends_on_the_same_backend_slot_commits(store: SessionDB) -> None:
    """A transaction that deletes messages, open while another connection appends and
    commits, commits itself: the statistics' rows are each transaction's own. They
    were one per backend slot (pid % 8), and with the appender's slot the delete
    failed its serialization check on every retry (60 s of retries beside a gateway)."""
    import psycopg

    url = target_of(store.database)
    store.create_session("old", "cli", started_at=T0)
    store.create_session("live", "cli", started_at=T0)
    for k in range(5):
        store.append_message("old", "user", f"gone {k}", timestamp=T0 + k)
    # Two connections whose backends share a slot: by the pigeonhole, among nine.
    conns = [psycopg.connect(url, autocommit=True) for _ in range(9)]
    try:
        by_slot: dict[int, list[Any]] = {}
        for conn in conns:
            by_slot.setdefault(conn.info.backend_pid % 8, []).append(conn)
        long, appender = next(pair for pair in by_slot.values() if len(pair) > 1)[:2]
        appender.execute("SET statement_timeout = '20s'")  # never waits for ever
        long.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        assert long.execute("SELECT count(*) FROM messages").fetchone() == (5,)
        for k in range(3):
            appender.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('live', 'user', %s, %s)",
                (f"turn {k}", T0 + 10 + k),
            )
        long.execute("DELETE FROM messages WHERE session_id = 'old'")
        long.execute("COMMIT")
        # And 1,100 one-statement writes: each adds a row, and one transaction in
        # 512 folds the committed ones into its backend's row.
        with appender.cursor() as cur:
            cur.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES ('live', 'user', 'more words here', %s)",
                [(T0 + 100 + k,) for k in range(1100)],
            )
        docs, tokens, rows = appender.execute(
            "SELECT sum(docs), sum(tokens), count(*) FROM hermes_search_stats"
        ).fetchone()
        counted = appender.execute(
            "SELECT count(*), coalesce(sum(search_len), 0) FROM messages"
        ).fetchone()
    finally:
        for conn in conns:
            conn.close()
    assert (int(docs), int(tokens)) == (int(counted[0]), int(counted[1]))
    assert int(counted[0]) == 1103
    assert rows < 1100
