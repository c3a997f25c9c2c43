"""Search on PostgreSQL gives the SQLite search's results, on a real server.

The references: the SQLite search over the same rows (same ids, same
order where both define it, same hit dicts, same snippets where both make
them the same way), a plain Python substring scan for CJK terms, the
server's own ``EXPLAIN`` for index use, and hostile query text, which
never makes a search raise.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pg_server
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_server import Server
from test_search_recall import ALPHABETS, expected, haystacks, queries

from hermes_models import Message, Session
from hermes_models.models.lineage import counted_for
from hermes_models.models.tables import encode_content
from hermes_models.search import postgres as pg_search
from hermes_models.search.pipeline import search_messages, search_sessions, search_sql
from hermes_models.search.postgres import WALK_FIRST, cjk_grams, phrase_variants
from hermes_models.search.query import Term
from hermes_models.store.binding import using
from hermes_models.store.db import HermesDatabase
from hermes_models.store.postgres import PostgresDatabase, open_database, parse_url

pytestmark = pytest.mark.postgresql

T0 = 1_767_000_000.0
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}}

#: Sessions: id, source, parent, model_config, started_at, ended_at, end_reason.
SESSIONS = [
    ("root", "cli", None, None, T0, T0 + 500, "compression"),
    ("cont", "cli", "root", None, T0 + 600, None, None),
    ("branch", "telegram", "root", '{"_branched_from": "root"}', T0 + 700, None, None),
    ("sub", "cli", "cont", '{"_delegate_from": "cont"}', T0 + 800, None, None),
    ("other", "telegram", None, None, T0 + 900, None, None),
    ("loner", "discord", None, None, T0 + 1000, None, None),
]

#: Messages: session, role, content, tool_name, tool_calls, active (ids 1, 2, ... in order).
MESSAGES: list[tuple[str, str, Any, str | None, str | None, int]] = [
    ("root", "user", "How do I deploy the docker image to production?", None, None, 1),
    ("root", "assistant", "Run the deploy script; docker builds the image first.", None, None, 1),
    ("cont", "user", "The deployment failed with exit code 2", None, None, 1),
    ("cont", "tool", "deploy log: permission denied", "terminal", None, 1),
    ("branch", "user", "Should we migrate the database to postgres?", None, None, 1),
    ("branch", "assistant", "Migrations run with yoyo; migrate before you deploy.", None, None, 1),
    ("sub", "assistant", "The subagent checked the docker daemon", None, None, 1),
    ("other", "user", "asyncio event loop and threads", None, None, 1),
    (
        "other",
        "assistant",
        "Use the event loop's run_in_executor for blocking calls",
        None,
        '[{"function": {"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}}]',
        1,
    ),
    ("loner", "user", "Unrelated text about gardening and chat-send", None, None, 1),
    ("other", "user", "docker docker docker compose", None, None, 0),
    ("root", "user", "我们需要数据库迁移方案", None, None, 1),
    ("cont", "assistant", "数据库迁移完成了", None, None, 1),
    ("branch", "user", "データベース移行を行う", None, None, 1),
    ("other", "assistant", "데이터베이스 마이그레이션 서버", None, None, 1),
    ("sub", "tool", "服务器日志", "数据", None, 1),
    ("other", "user", "sqlite 数据库 benchmark", None, None, 1),
    ("loner", "assistant", [{"type": "text", "text": "数据 in json deploy"}, IMAGE], None, None, 1),
    ("other", "user", "数据库 again, soft-deleted", None, None, 0),
    ("root", "assistant", "mixed 迁移 and deploy", None, None, 1),
    ("cont", "user", None, None, None, 1),
    ("loner", "tool", "", "数据 tool", None, 1),
]


def fill() -> None:
    """Write :data:`SESSIONS` and :data:`MESSAGES` with the models, to the bound store."""
    for sid, source, parent, config, started, ended, reason in SESSIONS:
        Session.create(
            id=sid,
            source=source,
            parent_session_id=parent,
            model_config=config,
            model_name="m-1",
            started_at=started,
            ended_at=ended,
            end_reason=reason,
        )
    for n, (sid, role, content, tool_name, tool_calls, active) in enumerate(MESSAGES, 1):
        Message.create(
            id=n,
            session=sid,
            role=role,
            content=encode_content(content),
            tool_name=tool_name,
            tool_calls=tool_calls,
            timestamp=T0 + 1000 + 10 * n,
            active=active,
        )


@pytest.fixture
def both(database: HermesDatabase, pg_db: PostgresDatabase) -> tuple[Any, Any]:
    """The same rows in a SQLite store and a PostgreSQL store."""
    for db in (database, pg_db):
        with using(db):
            fill()
    return database, pg_db


def run(db: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with using(db):
        return fn(*args, **kwargs)


def without(hits: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in hit.items() if k not in keys} for hit in hits]


#: Queries whose hits both backends find alike. Those marked True make their
#: snippets the same way too (by Python: a LIKE route, or a query mixing routes).
SHARED = {
    "docker": False,
    "deploy": False,
    "deploy*": False,
    "DEPLOY": False,
    "dock*": False,
    "migrat*": False,
    "docker OR yoyo": False,
    "deploy NOT docker": False,
    '"event loop"': False,
    "event loop": False,
    "loop's": False,
    "read_file": False,
    "run_in_executor": False,
    "chat-send": False,
    "数据库": False,
    "データベース": False,
    "数据库迁移": False,
    "数据": True,
    "数": True,
    "迁移": True,
    "서버": True,
    "数据 NOT 迁移": True,
    "数据 OR 서버": True,
    "deploy 数据": True,
    "数据库 OR asyncio": False,
    "sqlite 数据库": False,
    "nothing-matches-this": True,
}


@pytest.mark.parametrize("query", list(SHARED))
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sort": "newest"},
        {"sort": " Oldest "},
        {"include_inactive": True, "sort": "newest"},
        {"source_filter": ["cli"], "sort": "newest"},
        {"exclude_sources": ["telegram"], "sort": "oldest"},
        {"role_filter": ["user", "tool"], "sort": "newest"},
        {"limit": 2, "offset": 1, "sort": "newest"},
        {"source_filter": []},
    ],
)
def test_hits_are_those_of_sqlite(
    both: tuple[Any, Any], query: str, options: dict[str, Any]
) -> None:
    lite, pg = both
    want = run(lite, search_messages, query, limit=options.pop("limit", None), **options)
    got = run(pg, search_messages, query, limit=None if "offset" not in options else 2, **options)
    if "offset" in options:
        want = run(lite, search_messages, query, limit=2, **options)
    if "sort" not in options:
        # Ranks may differ (the index's words are split a little differently): the same
        # hits, in an order of its own.
        assert sorted(h["id"] for h in got) == sorted(h["id"] for h in want)
        by_id = {h["id"]: h for h in want}
        want = [by_id[h["id"]] for h in got]
    if SHARED[query]:
        assert got == want
    else:
        assert without(got, "snippet") == without(want, "snippet")
        assert all(">>>" in h["snippet"] for h in got if h["role"] != "tool")


def test_unranked_hits_come_newest_first_as_on_sqlite(both: tuple[Any, Any]) -> None:
    lite, pg = both
    for query in ("数据", "数据 OR 서버", "数 NOT 迁移"):
        want = run(lite, search_messages, query)
        assert run(pg, search_messages, query) == want
        assert [h["timestamp"] for h in want] == sorted(
            (h["timestamp"] for h in want), reverse=True
        )


def test_a_hit_has_the_keys_snippet_and_context_of_sqlite(both: tuple[Any, Any]) -> None:
    _, pg = both
    (hit,) = run(pg, search_messages, "数据 NOT deploy", role_filter="tool", source_filter="cli")
    assert hit == {
        "id": 16,
        "session_id": "sub",
        "role": "tool",
        "snippet": "服务器日志 >>>数据<<<",
        "timestamp": T0 + 1160,
        "tool_name": "数据",
        "source": "cli",
        "model": "m-1",
        "session_started": T0 + 800,
        "context": [
            {"role": "assistant", "content": "The subagent checked the docker daemon"},
            {"role": "tool", "content": "服务器日志"},
        ],
    }
    (json_hit,) = run(pg, search_messages, "json deploy")
    assert json_hit["snippet"] == "数据 in >>>json<<< >>>deploy<<< [image]"
    assert json_hit["context"] == [
        {"role": "user", "content": "Unrelated text about gardening and chat-send"},
        {"role": "assistant", "content": "数据 in json deploy"},
        {"role": "tool", "content": ""},
    ]


def test_ranked_words_come_first_and_score_by_bm25(both: tuple[Any, Any]) -> None:
    _, pg = both
    hits = run(pg, search_messages, "docker OR 数据", include_inactive=True)
    ids = [h["id"] for h in hits]
    # Word hits by BM25 ("docker" three times first; 1 and 2, of as many words, tie:
    # in id order, as FTS5 hands ties over), then the others newest first.
    assert ids == [11, 7, 1, 2, 22, 19, 18, 17, 16, 13, 12]
    assert [h["id"] for h in run(pg, search_messages, "docker OR 数据")][:3] == [7, 1, 2]


@pytest.mark.parametrize("query", ["数据", "deploy", "数据库迁移", "docker OR 서버", "数"])
@pytest.mark.parametrize("rank_mode", [None, "recent"])
def test_sessions_are_grouped_by_lineage_root_as_on_sqlite(
    both: tuple[Any, Any], query: str, rank_mode: str | None
) -> None:
    lite, pg = both
    want = run(lite, search_sessions, query, limit=None, rank_mode=rank_mode)
    got = run(pg, search_sessions, query, limit=None, rank_mode=rank_mode)
    keep = ("id", "hits", "source", "parent_session_id", "model_config", "started_at")
    assert sorted([{k: r[k] for k in keep} for r in got], key=lambda r: r["id"]) == sorted(
        [{k: r[k] for k in keep} for r in want], key=lambda r: r["id"]
    )
    assert {r["id"] for r in got} <= {"root", "branch", "other", "loner"}
    if all(len(t) <= 2 for t in query.split()):  # unranked on both: the same rows
        assert got == want
    else:
        assert all(r["score"] > 0 or ">>>" in r["best_snippet"] for r in got)


def test_sessions_keep_sqlite_keys_pages_and_sources(both: tuple[Any, Any]) -> None:
    lite, pg = both
    for kwargs in ({"source": "telegram"}, {"limit": 1, "offset": 1}, {"source": []}):
        assert run(pg, search_sessions, "数据", **kwargs) == run(
            lite, search_sessions, "数据", **kwargs
        )
    assert run(pg, search_sessions, None, limit=3) == run(lite, search_sessions, None, limit=3)
    (row,) = run(pg, search_sessions, "subagent")
    assert (row["id"], row["matched_session_id"], row["hits"]) == ("root", "sub", 1)
    assert row["score"] > 0


@pytest.mark.parametrize("window", [1, 5, 12, 1_000])
def test_a_session_search_groups_the_newest_hits(
    pg_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    # 30 messages over 4 sessions, "数据" in 12 of them: the sessions and their
    # hit counts are those of the `window` newest hits (rank_window); without
    # rank_window, of every hit.
    with using(pg_db):
        for n in range(4):
            Session.create(id=f"s{n}", source="cli", started_at=float(n))
        for n in range(30):
            Message.create(
                session=f"s{n % 4}",
                role="user",
                content="数据 here" if n % 5 < 2 else "nothing",
                timestamp=100.0 + n,
            )
        hits = [m for m in Message.select() if "数据" in m.content]
        assert len(hits) == 12
        newest = sorted(hits, key=lambda m: (-m.timestamp, -m.id))[:window]
        want = Counter(m.session_id for m in newest)
        rows = search_sessions("数据", limit=None, rank_window=window)
        assert {row["id"]: row["hits"] for row in rows} == dict(want)
        every = search_sessions("数据", limit=None)
        assert {row["id"]: row["hits"] for row in every} == dict(
            Counter(m.session_id for m in hits)
        )


def test_sessions_by_root_are_the_same_rows_on_both_backends(both: tuple[Any, Any]) -> None:
    lite, pg = both
    for query in ("数据", "数"):  # unranked on both backends: the same rows
        for kwargs in ({}, {"source": "telegram"}, {"limit": 1, "offset": 1}, {"limit": None}):
            assert run(pg, search_sessions, query, **kwargs) == run(
                lite, search_sessions, query, **kwargs
            ), (query, kwargs)
    (row,) = run(pg, search_sessions, "subagent")
    assert (row["id"], row["matched_session_id"], row["hits"]) == ("root", "sub", 1)


@pytest.mark.slow
def test_a_word_in_more_sessions_than_a_statement_takes_parameters(
    pg_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 70,000 sessions with a hit each, a tenth of them continuations: the climb
    # and the page read more ids than one statement may bind (65,535), as one array.
    n = 70_000
    sessions = [
        {
            "id": f"s{i:05d}",
            "source": "cli" if i % 2 else "telegram",
            "started_at": float(i),
            # Every tenth continues the one before it, which ended by compression.
            "ended_at": float(i) + 0.5 if i % 10 == 8 else None,
            "end_reason": "compression" if i % 10 == 8 else None,
            "parent_session_id": f"s{i - 1:05d}" if i % 10 == 9 else None,
        }
        for i in range(n)
    ]
    messages = [
        {"session": f"s{i:05d}", "role": "user", "content": "needle", "timestamp": i + 0.1}
        for i in range(n)
    ]
    with using(pg_db), pg_db.atomic():
        for start in range(0, n, 1_000):  # a statement binds at most 65,535 values
            Session.insert_many(sessions[start : start + 1_000]).execute()
            Message.insert_many(messages[start : start + 1_000]).execute()
    # As after any bulk load: statistics an autovacuum took while the load's transaction
    # was open count no rows, and every lookup then guesses its index (the test below
    # checks that the climb stays linear even so).
    pg_db.execute_sql("ANALYZE sessions, messages")
    with using(pg_db):
        rows = search_sessions("needle", limit=None)
        assert len(rows) == n - n // 10
        assert sum(row["hits"] for row in rows) == n
        assert {row["id"]: row["hits"] for row in rows if row["hits"] == 2} == {
            f"s{i - 1:05d}": 2 for i in range(9, n, 10)
        }
        page = search_sessions("needle", limit=5, rank_mode="recent", source="cli")
        # Roots from "cli" (odd numbers), newest hit first; s69999 and s69989
        # count for their telegram parents.
        assert [row["id"] for row in page] == ["s69997", "s69995", "s69993", "s69991", "s69987"]


def test_the_climb_reads_each_session_once_when_statistics_count_no_rows(
    pg_db: PostgresDatabase, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # An ANALYZE while the transaction that fills the table is still open (autovacuum
    # may run one) records 0 rows on the table's pages; the planner then joined the
    # whole walk again for each of its rows (quadratic: 70,000 sessions ran for over
    # ten minutes). The climb looks each session up by its key, row by row.
    n = 3_000
    filling = pg_server.connect(pg_url)
    filling.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason,"
        " parent_session_id) SELECT 's' || g, 'cli', g,"
        " CASE WHEN g %% 3 <> 2 THEN g + 0.5 END,"
        " CASE WHEN g %% 3 <> 2 THEN 'compression' END,"
        " CASE WHEN g %% 3 <> 0 THEN 's' || (g - 1) END"
        " FROM generate_series(0, %s) AS g",
        (n - 1,),
    )
    with pg_server.connect(pg_url, autocommit=True) as other:
        other.execute("ANALYZE sessions")
    filling.commit()
    filling.close()
    with pg_server.connect(pg_url, autocommit=True) as other:
        assert other.execute(
            "SELECT relpages > 0, reltuples FROM pg_class WHERE relname = 'sessions'"
        ).fetchone() == (True, 0.0)

    with caplog.at_level(logging.DEBUG, logger="peewee"), using(pg_db):
        owners = counted_for(Session, [f"s{g}" for g in range(2, n, 3)])
    # Chains of three, climbed from their last sessions: each counts for the first.
    assert owners == {f"s{g}": f"s{g - 2}" for g in range(2, n, 3)}
    # peewee logs each statement as its (sql, params) pair.
    (sql, params) = next(
        record.msg
        for record in caplog.records
        if isinstance(record.msg, tuple) and record.msg[0].startswith("WITH RECURSIVE")
    )
    with pg_server.connect(pg_url, autocommit=True) as other:
        (plan,) = other.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    scans = [node for node in nodes(plan[0]["Plan"]) if node["Node Type"] == "WorkTable Scan"]
    # The walk's rows are read once a step (the last sessions, the middle ones, the
    # first ones), never once for each row; no part of the plan runs more than twice
    # for each session reached.
    assert [scan["Actual Loops"] for scan in scans] == [3]
    assert max(node["Actual Loops"] for node in nodes(plan[0]["Plan"])) <= 2 * n


def test_a_loop_of_parent_links_ends_the_climb(pg_db: PostgresDatabase) -> None:
    with using(pg_db):
        Session.create(id="x", source="cli", started_at=1.0)
        Session.create(id="y", source="cli", started_at=2.0, parent_session_id="x")
        Session.update(parent_session_id="y").where(Session.id == "x").execute()
        Message.create(session="y", role="user", content="loop here", timestamp=3.0)
        (row,) = search_sessions("loop")
    assert (row["id"], row["hits"], row["matched_session_id"]) == ("x", 1, "y")


# -- the tokenizer, as documented ------------------------------------------------------------


def test_words_split_at_punctuation_as_fts5_splits_them(pg_db: PostgresDatabase) -> None:
    texts = [
        "chat-send",
        "chat send",
        "P2.2",
        "p2 2",
        "sp_new",
        "sp new",
        "C++ code",
        "naïve café",
        "asyncio.to_thread(run)",
        "my-app.config.ts",
        "version 1.5",
    ]
    with using(pg_db):
        Session.create(id="s", source="cli", started_at=1.0)
        for n, text in enumerate(texts, 1):
            Message.create(id=n, session="s", role="user", content=text, timestamp=float(n))

        def found(query: str) -> list[str]:
            return sorted(texts[h["id"] - 1] for h in search_messages(query))

        assert found("chat-send") == ["chat send", "chat-send"]
        assert found("P2.2") == ["P2.2", "p2 2"]
        assert found("sp_new") == ["sp new", "sp_new"]
        assert found("C++") == ["C++ code"]
        assert found("café") == ["naïve café"]
        assert found("cafe") == []  # FTS5 strips diacritics; the simple configuration keeps them
        assert found("p2") == ["P2.2", "p2 2"]
        assert found("chat") == ["chat send", "chat-send"]
        assert found("to_thread") == ["asyncio.to_thread(run)"]
        assert found("thread") == ["asyncio.to_thread(run)"]
        assert found("config") == ["my-app.config.ts"]
        assert found("app.config") == ["my-app.config.ts"]
        assert found("1") == ["version 1.5"]
    assert phrase_variants(Term("chat-send")) == ("chat send",)
    assert phrase_variants(Term("my-app.config.ts")) == ("my app config ts",)
    assert phrase_variants(Term("docker")) == ("docker",)
    assert cjk_grams("a数据库") == ["库", "据", "据库", "数", "数据"]


# -- recall: exact for CJK terms of every length ---------------------------------------------


def build_recall(seed: int) -> list[dict[str, Any]]:
    """The corpus of ``test_search_recall`` written with the models; returns it."""
    rng = random.Random(seed)

    def word(alphabet: str) -> str:
        letters = alphabet[: rng.randint(8, len(alphabet))]
        return "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))

    written = []
    n = 0
    for s in range(24):
        lang = list(ALPHABETS)[s % 3]
        alphabet = ALPHABETS[lang]
        sid = f"{lang}-{s}"
        Session.create(id=sid, source="cli", started_at=T0 + s)
        for i in range(25):
            n += 1
            role = ("user", "assistant", "tool")[i % 3]
            content: Any = " ".join(word(alphabet) for _ in range(rng.randint(1, 6)))
            fields: dict[str, Any] = {}
            kind = rng.random()
            if kind < 0.15:
                content = [{"type": "text", "text": content}, IMAGE]
            elif kind < 0.25 and role == "assistant":
                fields["tool_calls"] = [
                    {"id": f"c{i}", "function": {"name": "f", "arguments": word(alphabet)}}
                ]
            elif kind < 0.30 and role == "tool":
                fields["tool_name"] = word(alphabet)
            elif kind < 0.33:
                content = None
            active = not (s % 2 == 0 and i >= 18)
            Message.create(
                id=n,
                session=sid,
                role=role,
                content=encode_content(content),
                tool_name=fields.get("tool_name"),
                tool_calls=json.dumps(fields["tool_calls"], ensure_ascii=False)
                if "tool_calls" in fields
                else None,
                timestamp=T0 + s * 100 + i,
                active=int(active),
            )
            written.append(
                {"id": n, "session_id": sid, "content": content, "active": active, **fields}
            )
    return written


@pytest.fixture(scope="module")
def recall(pg: Server) -> Iterator[tuple[PostgresDatabase, list[dict[str, Any]]]]:
    db = open_database(pg.new_database(keep=True), migrate_first=False)
    with using(db):
        written = build_recall(20260105)
    yield db, written
    db.close()


@pytest.mark.parametrize("lang", list(ALPHABETS))
@pytest.mark.parametrize("length", [1, 2, 3, 4, 6, 9])
def test_cjk_search_finds_exactly_the_messages_holding_the_term(
    recall: tuple[PostgresDatabase, list[dict[str, Any]]], lang: str, length: int
) -> None:
    db, written = recall
    rng = random.Random(f"{lang}-{length}")
    total = 0
    with using(db):
        for query in queries(written, lang, length, rng):
            want = expected(written, query)
            got = [h["id"] for h in search_messages(query, limit=None)]
            assert len(got) == len(set(got)), query
            assert set(got) == want, query
            everything = {
                h["id"] for h in search_messages(query, limit=None, include_inactive=True)
            }
            assert everything == {m["id"] for m in written if any(query in t for t in haystacks(m))}
            total += len(want)
    assert total > 0


@pytest.mark.parametrize("lang", list(ALPHABETS))
def test_cjk_session_hit_counts_are_exact(
    recall: tuple[PostgresDatabase, list[dict[str, Any]]], lang: str
) -> None:
    db, written = recall
    rng = random.Random(lang)
    by_id = {m["id"]: m for m in written}
    with using(db):
        for length in (2, 4):
            for query in queries(written, lang, length, rng)[:5]:
                want = Counter(by_id[i]["session_id"] for i in expected(written, query))
                rows = search_sessions(query, limit=None)
                assert {row["id"]: row["hits"] for row in rows} == dict(want), query


# -- every route uses its index ---------------------------------------------------------------


def explain(url: str, statement: str, params: list[Any]) -> str:
    with pg_server.connect(parse_url(url).url) as conn:
        # Small data: plain scans of other indexes would do; GIN serves bitmap scans.
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_indexscan = off")
        rows = conn.execute("EXPLAIN " + statement, params).fetchall()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("docker", "idx_messages_search_tsv"),
        ("deploy* OR docker", "idx_messages_search_tsv"),
        ("数据库迁移", "idx_messages_search_trgm"),
        ("数据", "idx_messages_cjk_grams"),
        ("数", "idx_messages_cjk_grams"),
        ("①②③", "idx_messages_search_trgm"),  # no lexeme: a substring
    ],
)
def test_each_route_reads_its_index(recall_sized: str, query: str, index: str) -> None:
    db = open_database(recall_sized, migrate_first=False)
    try:
        with using(db):
            # The statement over every message is the last (a walk may come first).
            *_, (statement, params) = search_sql(query, limit=20)
    finally:
        db.close()
    plan = explain(recall_sized, statement, params)
    assert index in plan, plan
    assert "Seq Scan on messages" not in plan, plan


@pytest.mark.parametrize(
    ("query", "sort", "direction"),
    [("数据", "rank", "Backward"), ("①②③", "newest", "Backward"), ("数据库迁移", "oldest", "")],
)
def test_a_walk_reads_messages_in_time_order(
    recall_sized: str, query: str, sort: str, direction: str
) -> None:
    db = open_database(recall_sized, migrate_first=False)
    try:
        with using(db):
            statements = search_sql(query, sort=sort, limit=20)
    finally:
        db.close()
    assert len(statements) == 2
    (walk, params), _ = statements
    assert f"LIMIT {WALK_FIRST})" in walk
    with pg_server.connect(parse_url(recall_sized).url) as conn:
        # 3,000 rows are fewer than the walk's bound: sorting them all would do.
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_sort = off")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + walk, params).fetchall())
    scan = "Index Scan Backward" if direction else "Index Scan"
    assert f"{scan} using idx_messages_time on messages" in plan, plan


def test_ranked_words_and_whole_result_sets_are_not_walked(small: PostgresDatabase) -> None:
    with using(small):
        assert len(search_sql("docker", limit=20)) == 1  # ranked by BM25
        assert len(search_sql("docker", sort="newest", limit=20)) == 2
        assert len(search_sql("docker OR 数据", sort="newest", limit=20)) == 2
        assert len(search_sql("数据", sort="newest", limit=None)) == 1  # every hit
        deep = WALK_FIRST // 10
        assert len(search_sql("数据", sort="newest", limit=20, offset=deep)) == 1
        assert len(search_sql("数据", sort="newest", limit=20, offset=deep - 20)) == 2


@pytest.mark.parametrize("window", [30, 100, 10_000])
def test_a_ranked_page_is_the_best_of_the_newest_hits(
    pg_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    # 300 messages, "docker" in 120 of them, once to four times (BM25
    # differs); with rank_window the page is the best of the newest `window`
    # hits by the server's own rank, ties in id order (as FTS5's ORDER BY rank),
    # whatever the window; without it, the best of every hit.
    rng = random.Random(window)
    rows = [
        {
            "session": "s",
            "role": "user",
            "content": " ".join(["docker"] * rng.randint(1, 4) + ["text"] * rng.randint(1, 30))
            if n % 5 < 2
            else "plain text",
            "timestamp": float(n // 3),
        }
        for n in range(300)
    ]
    with using(pg_db):
        Session.create(id="s", source="cli", started_at=0.0)
        Message.insert_many(rows).execute()
        scored = pg_db.execute_sql(
            'SELECT id, "timestamp", hermes_bm25(search_tsv, search_len,'
            " (SELECT hermes_bm25_terms(ARRAY['docker'], ARRAY[false])))"
            " FROM messages WHERE search_tsv @@ phraseto_tsquery('simple', 'docker')"
        ).fetchall()
        assert len(scored) == 120
        newest = sorted(scored, key=lambda r: (-r[1], -r[0]))
        for offset, limit in ((0, 10), (15, 10), (25, 10), (110, 20)):
            kept = newest[: max(window, offset + limit)]
            want = [r[0] for r in sorted(kept, key=lambda r: (r[2], r[0]))]
            got = search_messages("docker", limit=limit, offset=offset, rank_window=window)
            assert [h["id"] for h in got] == want[offset : offset + limit], (offset, limit)
        # Every hit wanted, or no rank_window: every hit ranked.
        every = [r[0] for r in sorted(scored, key=lambda r: (r[2], r[0]))]
        assert [h["id"] for h in search_messages("docker", limit=None)] == every
        assert [h["id"] for h in search_messages("docker", limit=15, offset=5)] == every[5:20]


@pytest.mark.parametrize("walk", [0, 40, 200, 10_000])
def test_pages_are_the_same_whether_a_walk_answers_or_not(
    pg_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch, walk: int
) -> None:
    # 600 messages; "数" in every 7th, "据" in every 50th: a walk of 40
    # messages fills a page of 4 of the first, never one of the second.
    monkeypatch.setattr(pg_search, "WALK_FIRST", walk)
    rows = [
        {
            "session": f"s{n % 3}",
            "role": "user",
            "content": ("数 " if n % 7 == 0 else "") + ("据 " if n % 50 == 0 else "") + "text",
            "timestamp": float(n // 2),  # ties: pairs share a time
        }
        for n in range(600)
    ]
    with using(pg_db):
        for sid in ("s0", "s1", "s2"):
            Session.create(id=sid, source="cli", started_at=0.0)
        Message.insert_many(rows).execute()
        written = list(Message.select().order_by(Message.id))
        for term, every in (("数", 7), ("据", 50)):
            hits = [m for m in written if term in m.content]
            assert len(hits) == len(range(0, 600, every))
            newest = [m.id for m in sorted(hits, key=lambda m: (-m.timestamp, -m.id))]
            oldest = [m.id for m in sorted(hits, key=lambda m: (m.timestamp, m.id))]
            for offset in (0, 2, 5):
                for sort, want in (("newest", newest), ("oldest", oldest), ("rank", newest)):
                    got = search_messages(term, sort=sort, limit=4, offset=offset)
                    assert [h["id"] for h in got] == want[offset : offset + 4], (term, sort)


@pytest.fixture(scope="module")
def recall_sized(pg: Server) -> str:
    """A store of 3,000 messages, analysed: enough for the planner to pick indexes."""
    url = pg.new_database(keep=True)
    db = open_database(url, migrate_first=False)
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "docker", "deploy", "数据库迁移", "数据", "①②③"]
    with using(db), db.atomic():
        Session.create(id="s", source="cli", started_at=1.0)
        Message.insert_many(
            [
                {
                    "session": "s",
                    "role": "user",
                    "content": " ".join(rng.choice(words[:4]) for _ in range(8))
                    + (" " + words[4 + n % 5] if n % 300 == 0 else ""),
                    "timestamp": float(n),
                }
                for n in range(3000)
            ]
        ).execute()
    db.close()
    with pg_server.connect(parse_url(url).url, autocommit=True) as conn:
        conn.execute("ANALYZE messages")
    return url


# -- hostile text -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(pg: Server) -> Iterator[PostgresDatabase]:
    db = open_database(pg.new_database(keep=True), migrate_first=False)
    with using(db):
        fill()
    yield db
    db.close()


HOSTILE = [
    '"',
    '"abc',
    "C++",
    "foo:bar",
    "^x",
    "***",
    "*",
    "AND",
    "OR NOT",
    "NOT x",
    "x OR",
    "a\x00b",
    "\x00",
    "' ; DROP TABLE messages; --",
    "deploy:* & | ! <-> ()",
    "%_\\",
    "\ue000",
    "\ue0000json",
    "(((",
    "x" * 3000,
    " ".join(["w" * 2100] * 3),
    "数据" * 20000,
    " OR ".join(f"t{i}*" for i in range(200)),
    "\ud800",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_text_never_raises(small: PostgresDatabase, query: str) -> None:
    with using(small):
        for sort in (None, "newest"):
            assert isinstance(search_messages(query, sort=sort), list)
        assert isinstance(search_sessions(query), list)
        assert isinstance(search_sql(query), list)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(['"', "*", "AND", "OR", "NOT", ":", "^", "数据", "deploy", "-", "."]),
        ),
        max_size=8,
    )
)
def test_arbitrary_text_never_raises(small: PostgresDatabase, parts: list[str]) -> None:
    query = " ".join(parts)
    with using(small):
        assert isinstance(search_messages(query, include_inactive=True), list)
        assert isinstance(search_sessions(query), list)


def test_a_failed_search_leaves_the_callers_transaction_usable(small: PostgresDatabase) -> None:
    with using(small), small.atomic():
        assert search_messages("x" * 3000) == []
        assert search_messages("docker")[0]["id"] in {1, 2, 7}


def test_the_time_budget_stops_a_search_with_no_hits(small: PostgresDatabase) -> None:
    with using(small):
        assert search_messages("docker", time_budget=None) != []
        assert search_messages("docker", time_budget=30) != []
        with small.atomic():
            small.execute_sql("SET LOCAL statement_timeout = '7s'")
            search_messages("docker", time_budget=30)
            (after,) = small.execute_sql("SHOW statement_timeout").fetchone()
        assert after == "7s"


# -- filters and soft deletes on every route --------------------------------------------------


@pytest.mark.parametrize(
    ("query", "live", "deleted"),
    [
        ("docker", {1, 2, 7}, {11}),  # words
        ("数据库", {12, 13, 17}, {19}),  # trigram
        ("数据", {12, 13, 16, 17, 18, 22}, {19}),  # gram index
        ("①②③ OR docker", {1, 2, 7}, {11}),  # substring beside words
    ],
)
def test_filters_and_soft_deletes_hold_on_every_route(
    small: PostgresDatabase, query: str, live: set[int], deleted: set[int]
) -> None:
    by_id = {n: m for n, m in enumerate(MESSAGES, 1)}
    source = {sid: src for sid, src, *_ in SESSIONS}

    def ids(**options: Any) -> set[int]:
        return {h["id"] for h in search_messages(query, limit=None, **options)}

    with using(small):
        assert ids() == live
        assert ids(include_inactive=True) == live | deleted
        assert ids(source_filter="telegram") == {
            i for i in live if source[by_id[i][0]] == "telegram"
        }
        assert ids(exclude_sources=["telegram"]) == {
            i for i in live if source[by_id[i][0]] != "telegram"
        }
        assert ids(role_filter=["user"]) == {i for i in live if by_id[i][1] == "user"}
        assert ids(source_filter=[]) == set()
        for row in search_sessions(query, limit=None):
            assert row["hits"] == sum(1 for i in live if _root(by_id[i][0]) == row["id"]), row["id"]


def _root(session_id: str) -> str:
    return {"cont": "root", "sub": "root"}.get(session_id, session_id)


def test_search_sql_gives_the_statement_a_search_runs(small: PostgresDatabase) -> None:
    with using(small):
        # A walk over the newest messages first, then the statement over every
        # message: on this small store both find the page.
        statements = search_sql("数据 OR docker", sort="newest", limit=5)
        want = [h["id"] for h in search_messages("数据 OR docker", sort="newest", limit=5)]
        assert len(statements) == 2
        for statement, params in statements:
            assert [row[0] for row in small.execute_sql(statement, params).fetchall()] == want
            assert "phraseto_tsquery('simple', %s)" in statement
            assert "docker" not in statement and "数据" not in statement
        assert search_sql("   ") == []


def test_message_search_on_the_model_uses_the_server(small: PostgresDatabase) -> None:
    with using(small):
        assert [h["id"] for h in Message.search("数据库", sort="oldest")] == [12, 13, 17]


def test_argument_checks_are_those_of_sqlite(small: PostgresDatabase, tmp_path: Path) -> None:
    with using(small):
        for bad in ({"sort": 1}, {"limit": -1}, {"source_filter": 5}, {"time_budget": 0}):
            with pytest.raises((TypeError, ValueError)):
                search_messages("docker", **bad)
        with pytest.raises(ValueError):
            search_sessions("docker", rank_mode="best")
