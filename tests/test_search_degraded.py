"""Search without its indexes: missing FTS5 / trigram tables and failing MATCH fall back to LIKE."""

from __future__ import annotations

import logging
from typing import Any

import peewee
import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.search import pipeline as search

T0 = 1_700_000_000.0


def drop_index(store: SessionDB, table: str) -> None:
    """What a SQLite build without the module leaves: no table, no triggers."""
    conn = store._conn
    for event in ("insert", "delete", "update"):
        conn.execute(f"DROP TRIGGER {table}_{event}")
    conn.execute(f"DROP TABLE {table}")
    conn.commit()


def fill(store: SessionDB) -> dict[str, int]:
    store.create_session("s", "cli", started_at=T0)
    store.create_session("t", "telegram", started_at=T0 + 1)
    rows = {
        "cat": ("s", "user", "my cat sleeps"),
        "concat": ("s", "assistant", "use concatenate, not cat"[:16]),
        "zh": ("t", "user", "请解释事件循环"),
        "json": ("t", "assistant", [{"type": "text", "text": "事件循环和 Cat 图片"}]),
        "gone": ("s", "user", "a cat rewound later"),
    }
    ids = {}
    for n, (name, (session, role, content)) in enumerate(rows.items()):
        ids[name] = store.append_message(session, role, content, timestamp=T0 + 10 + n)
    store.rewind_to_message("s", ids["gone"])
    return ids


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hermes_models" and r.levelno == logging.WARNING
    ]


def snippets(store: SessionDB, query: str, **options: Any) -> list[tuple[int, str]]:
    return [(hit["id"], hit["snippet"]) for hit in store.search_messages(query, **options)]


def test_with_the_word_index_cat_is_a_token(store: SessionDB) -> None:
    ids = fill(store)
    assert sorted(hit["id"] for hit in store.search_messages("cat")) == sorted(
        [ids["cat"], ids["json"]]
    )


def test_without_fts5_everything_goes_through_like(
    store: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    drop_index(store, "messages_fts")
    drop_index(store, "messages_fts_trigram")
    ids = fill(store)  # writes keep working without the triggers
    caplog.set_level(logging.WARNING, logger="hermes_models")
    assert snippets(store, "cat", sort="oldest") == [
        (ids["cat"], "my >>>cat<<< sleeps"),
        (ids["concat"], "use concatenate,"),
        (ids["json"], "事件循环和 >>>Cat<<< 图片"),
    ]
    assert snippets(store, "事件循环", sort="oldest") == [
        (ids["zh"], "请解释>>>事件循环<<<"),
        (ids["json"], ">>>事件循环<<<和 Cat 图片"),
    ]
    assert [
        h["id"] for h in store.search_messages("cat", include_inactive=True, sort="oldest")
    ] == [ids["cat"], ids["concat"], ids["json"], ids["gone"]]
    assert [h["id"] for h in store.search_messages("cat OR 事件循环 NOT 图片", sort="newest")] == [
        ids["json"],
        ids["zh"],
        ids["concat"],
        ids["cat"],
    ]
    assert [h["id"] for h in store.search_messages("事件循环 NOT 图片")] == [ids["zh"]]
    assert sorted((r["id"], r["hits"]) for r in store.search_sessions("cat")) == [
        ("s", 2),
        ("t", 1),
    ]
    store.search_messages("cat sleeps")
    path = store.db_path
    assert warnings(caplog) == [
        f"{path}: the full-text table messages_fts is missing (SQLite without FTS5 or trigram?); "
        "searching it with LIKE instead",
        f"{path}: the full-text table messages_fts_trigram is missing (SQLite without FTS5 or "
        "trigram?); searching it with LIKE instead",
    ]
    assert store.message_count(include_inactive=False) == 4


def test_without_the_trigram_tokenizer_words_keep_bm25(
    store: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    drop_index(store, "messages_fts_trigram")
    ids = fill(store)
    caplog.set_level(logging.WARNING, logger="hermes_models")
    assert sorted(h["id"] for h in store.search_messages("cat")) == sorted(
        [ids["cat"], ids["json"]]
    )
    assert snippets(store, "cat sleeps") == [(ids["cat"], "my >>>cat<<< >>>sleeps<<<  ")]
    assert snippets(store, "事件循环", sort="newest") == [
        (ids["json"], ">>>事件循环<<<和 Cat 图片"),
        (ids["zh"], "请解释>>>事件循环<<<"),
    ]
    assert [h["id"] for h in store.search_messages("事件循环 NOT cat")] == [ids["zh"]]
    assert len(warnings(caplog)) == 1
    assert "messages_fts_trigram is missing" in warnings(caplog)[0]


def test_an_index_appearing_later_is_used(store: SessionDB) -> None:
    drop_index(store, "messages_fts")
    ids = fill(store)
    assert sorted(h["id"] for h in store.search_messages("cat")) == sorted(
        [ids["cat"], ids["concat"], ids["json"]]
    )
    conn = store._conn
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content)")
    conn.execute(
        "INSERT INTO messages_fts(rowid, content) SELECT id, COALESCE(content, '') || ' ' || "
        "COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '') FROM messages"
    )
    conn.commit()
    assert sorted(h["id"] for h in store.search_messages("cat")) == sorted(
        [ids["cat"], ids["json"]]
    )


@pytest.mark.parametrize(
    "error", [sqlite3.OperationalError, peewee.OperationalError, sqlite3.DatabaseError]
)
def test_a_failing_match_falls_back_to_like_with_one_warning(
    store: SessionDB,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    error: type[Exception],
) -> None:
    ids = fill(store)
    real = search.execute

    def broken(sql: str, params: list[Any]) -> Any:
        if "MATCH" in sql:
            raise error("fts5: simulated failure")
        return real(sql, params)

    monkeypatch.setattr(search, "execute", broken)
    caplog.set_level(logging.WARNING, logger="hermes_models")
    for _ in range(3):
        assert snippets(store, "cat", sort="oldest") == [
            (ids["cat"], "my >>>cat<<< sleeps"),
            (ids["concat"], "use concatenate,"),
            (ids["json"], "事件循环和 >>>Cat<<< 图片"),
        ]
    assert [h["id"] for h in store.search_messages("事件循环", sort="oldest")] == [
        ids["zh"],
        ids["json"],
    ]
    assert sorted((r["id"], r["hits"]) for r in store.search_sessions("事件循环")) == [("t", 2)]
    assert warnings(caplog) == [
        f"{store.db_path}: full-text search failed (fts5: simulated failure); "
        "searching with LIKE instead"
    ]


def test_a_failing_like_scan_is_not_hidden(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store)

    def broken(sql: str, params: list[Any]) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(search, "execute", broken)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        store.search_messages("cat")
