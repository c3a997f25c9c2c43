"""SessionDB.search_messages: routes, snippets, context, filters, order and soft deletes."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_models import Message, SessionDB, search_sql
from hermes_models.driver import sqlite3
from hermes_models.search.pipeline import matching

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def fill(store: SessionDB) -> dict[str, int]:
    """Three sessions in English, Chinese and Japanese; returns message ids by name."""
    store.create_session("en", "cli", model="m-en", started_at=T0)
    store.create_session("zh", "telegram", model="m-zh", started_at=T0 + 100)
    store.create_session("ja", "discord", started_at=T0 + 200)
    ids = {}
    rows = [
        (
            "en",
            "q1",
            "user",
            "How do I run blocking IO without freezing the asyncio event loop?",
            {},
        ),
        ("en", "a1", "assistant", "Use asyncio.to_thread so the event loop keeps running.", {}),
        ("en", "tool", "tool", "ok", {"tool_name": "chat-send"}),
        (
            "en",
            "a2",
            "assistant",
            "Calling it now.",
            {"tool_calls": [{"id": "c1", "function": {"name": "grep_repo"}}]},
        ),
        ("zh", "zq", "user", "请解释一下 Python 异步编程中的事件循环是怎么工作的？", {}),
        (
            "zh",
            "za",
            "assistant",
            [{"type": "text", "text": "事件循环不断从就绪队列中取出协程并运行"}],
            {},
        ),
        ("zh", "zb", "user", "数据库连接池应该怎么配置？", {}),
        ("ja", "jq", "user", "セッションの検索はどう動きますか", {}),
        ("ja", "ja", "assistant", "トライグラム索引で部分文字列を探します", {}),
    ]
    for n, (session, name, role, content, extra) in enumerate(rows):
        ids[name] = store.append_message(session, role, content, timestamp=T0 + 10 * n, **extra)
    return ids


@pytest.fixture
def ids(store: SessionDB) -> dict[str, int]:
    return fill(store)


def ctx(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in pairs]


def indexed(store: SessionDB, snippet: str) -> str:
    """A snippet FTS5 cut from the indexed text (content, tool name and tool calls joined
    by spaces), as each backend shows it: PostgreSQL cuts snippets from the message's
    own parts, joined by one space (docs/postgresql.md, Ranking and snippets)."""
    if store.database.dialect == "sqlite":
        return snippet
    return snippet.replace("  ", " ").rstrip(" ")


def found(store: SessionDB, query: str, **options: Any) -> list[int]:
    return [hit["id"] for hit in store.search_messages(query, **options)]


# -- whole hits on each route -----------------------------------------------------------


def test_bm25_hit_in_full(store: SessionDB, ids: dict[str, int]) -> None:
    assert store.search_messages("to_thread") == [
        {
            "id": ids["a1"],
            "session_id": "en",
            "role": "assistant",
            # FTS5's snippet of the indexed text (content, tool name and tool calls
            # joined by spaces), trailing separators included, as Hermes returns it.
            "snippet": indexed(
                store, "Use asyncio.>>>to_thread<<< so the event loop keeps running.  "
            ),
            "timestamp": T0 + 10,
            "tool_name": None,
            "source": "cli",
            "model": "m-en",
            "session_started": T0,
            "context": ctx(
                ("user", "How do I run blocking IO without freezing the asyncio event loop?"),
                ("assistant", "Use asyncio.to_thread so the event loop keeps running."),
                ("tool", "ok"),
            ),
        }
    ]


def test_trigram_hits_in_full_json_content_shown_as_text(
    store: SessionDB, ids: dict[str, int]
) -> None:
    hits = [
        {
            "id": ids["zq"],
            "session_id": "zh",
            "role": "user",
            "snippet": indexed(
                store, "请解释一下 Python 异步编程中的>>>事件循环<<<是怎么工作的？  "
            ),
            "timestamp": T0 + 40,
            "tool_name": None,
            "source": "telegram",
            "model": "m-zh",
            "session_started": T0 + 100,
            "context": ctx(
                ("user", "请解释一下 Python 异步编程中的事件循环是怎么工作的？"),
                ("assistant", "事件循环不断从就绪队列中取出协程并运行"),
            ),
        },
        {
            "id": ids["za"],
            "session_id": "zh",
            "role": "assistant",
            "snippet": ">>>事件循环<<<不断从就绪队列中取出协程并运行",
            "timestamp": T0 + 50,
            "tool_name": None,
            "source": "telegram",
            "model": "m-zh",
            "session_started": T0 + 100,
            "context": ctx(
                ("user", "请解释一下 Python 异步编程中的事件循环是怎么工作的？"),
                ("assistant", "事件循环不断从就绪队列中取出协程并运行"),
                ("user", "数据库连接池应该怎么配置？"),
            ),
        },
    ]
    # SQLite ranks trigram hits (BM25); PostgreSQL has no rank for CJK terms:
    # newest first (docs/postgresql.md, Ranking and snippets).
    if store.database.dialect == "postgresql":
        hits.reverse()
    assert store.search_messages("事件循环") == hits


def test_short_cjk_goes_through_like_with_python_snippets(
    store: SessionDB, ids: dict[str, int]
) -> None:
    hits = store.search_messages("异步")
    assert [(h["id"], h["snippet"]) for h in hits] == [
        (ids["zq"], "请解释一下 Python >>>异步<<<编程中的事件循环是怎么工作的？")
    ]
    assert [(h["id"], h["snippet"]) for h in store.search_messages("就绪")] == [
        (ids["za"], "事件循环不断从>>>就绪<<<队列中取出协程并运行")
    ]
    assert found(store, "検") == [ids["jq"]]
    assert found(store, "索引") == [ids["ja"]]


def test_tool_name_and_tool_calls_are_searchable(store: SessionDB, ids: dict[str, int]) -> None:
    assert found(store, "chat-send") == [ids["tool"]]
    assert found(store, "grep_repo") == [ids["a2"]]
    hit = store.search_messages("grep_repo")[0]
    assert hit["snippet"] == indexed(
        store, 'Calling it now.  [{"id": "c1", "function": {"name": ">>>grep_repo<<<"}}]'
    )


def test_hyphen_dot_and_underscore_terms_are_phrases(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    one = store.append_message(
        "s", "user", "run simulate.p2.test.ts before P2.2 ships", timestamp=T0
    )
    two = store.append_message(
        "s", "user", "simulate the p2 test in ts later; P2 2", timestamp=T0 + 1
    )
    assert found(store, "simulate.p2.test.ts") == [one]
    assert sorted(found(store, "P2.2")) == [one, two]  # tokens p2, 2 in a row in both
    assert found(store, "P2.2 ships") == [one]
    assert sorted(found(store, "p2 test")) == [one, two]
    assert found(store, '"test in"') == [two]
    assert found(store, "test-in") == [two]


def test_mixed_queries_keep_or_and_not_across_routes(store: SessionDB, ids: dict[str, int]) -> None:
    assert sorted(found(store, "asyncio OR 事件循环")) == sorted(
        [ids["q1"], ids["a1"], ids["zq"], ids["za"]]
    )
    assert sorted(found(store, "数据 OR セッション")) == sorted([ids["zb"], ids["jq"]])
    assert found(store, "事件循环 NOT Python") == [ids["za"]]
    assert found(store, "Python 事件循环") == [ids["zq"]]
    assert found(store, "Python 异步") == [ids["zq"]]
    assert found(store, "异步 NOT Python") == []
    assert found(store, "asyncio NOT 事件", sort="oldest") == [ids["q1"], ids["a1"]]
    assert found(store, "asyncio NOT 事件循环", sort="oldest") == [ids["q1"], ids["a1"]]
    assert found(store, "ok NOT 就绪") == [ids["tool"]]
    assert sorted(found(store, "就绪 OR to_thread")) == sorted([ids["za"], ids["a1"]])
    mixed = store.search_messages("Python 事件循环 OR running")
    if store.database.dialect == "sqlite":
        assert {h["id"]: h["snippet"] for h in mixed} == {
            # One trigram pass (the words are ASCII of 3+ characters): its snippets are
            # the trigram index's, a window of characters ending with the spaces that
            # join content, tool name and tool calls in the index.
            ids["zq"]: "请解释一下 >>>Python<<< 异步编程中的>>>事件循环<<<是怎么工作的？  ",
            ids["a1"]: "..._thread so the event loop keeps >>>running<<<.  ",
        }
    else:  # snippets cut from the message's text (120 characters around the first match)
        assert {h["id"]: h["snippet"] for h in mixed} == {
            ids["zq"]: "请解释一下 >>>Python<<< 异步编程中的>>>事件循环<<<是怎么工作的？",
            ids["a1"]: "Use asyncio.to_thread so the event loop keeps >>>running<<<.",
        }


@pytest.mark.parametrize(
    "query",
    [
        "C++",
        "foo:bar",
        '"abc',
        "AND",
        "NOT",
        "(",
        ")",
        "{}",
        "^",
        "+",
        "*",
        "**",
        "a:b:c",
        "'; DROP TABLE messages; --",
        "%",
        "_",
        "\\",
        "\x00",
        "x" * 5000,
        "OR OR OR",
        '"" ""',
        "(" * 5000,
        "\x00" * 5000,
        '"' * 4999,
        "NOT " * 1250,
        "x\ud800y",
    ],
)
def test_odd_input_returns_a_list(store: SessionDB, ids: dict[str, int], query: str) -> None:
    assert store.search_messages(query) == []
    assert store.message_count() == len(ids)


def test_like_wildcards_are_literal(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    literal = store.append_message("s", "user", "折扣%_\\优惠", timestamp=T0)
    store.append_message("s", "user", "折扣五折优惠", timestamp=T0 + 1)
    assert found(store, '"扣%"') == [literal]
    assert found(store, '"扣_"') == []
    assert found(store, '"\\优"') == [literal]
    assert found(store, "扣%_\\优") == [literal]
    assert found(store, '"%_"') == []


def test_empty_and_blank_queries(store: SessionDB, ids: dict[str, int]) -> None:
    for query in ("", "   ", "\n\t", None):
        assert store.search_messages(query) == []  # type: ignore[arg-type]


# -- context -------------------------------------------------------------------------------


def test_context_follows_timestamp_then_id_and_skips_rewound(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    early = store.append_message("s", "user", "first", timestamp=T0 + 5)
    store.append_message("s", "assistant", "written late but earlier", timestamp=T0 + 1)
    tie = store.append_message("s", "user", "same time as the hit", timestamp=T0 + 10)
    hit = store.append_message("s", "assistant", "the needle is here", timestamp=T0 + 10)
    rewound = store.append_message("s", "user", "rewound follow-up", timestamp=T0 + 20)
    store.append_message("s", "assistant", "x" * 300, timestamp=T0 + 30)
    store.rewind_to_message("s", rewound)
    store.append_message("s", "user", "after " + "y" * 300, timestamp=T0 + 40)
    assert early < tie
    assert store.search_messages("needle")[0]["context"] == ctx(
        ("user", "same time as the hit"),
        ("assistant", "the needle is here"),
        ("user", "after " + "y" * 194),
    )
    assert store.search_messages("needle", include_inactive=True)[0]["context"] == ctx(
        ("user", "same time as the hit"),
        ("assistant", "the needle is here"),
        ("user", "rewound follow-up"),
    )
    assert store.search_messages("first")[0]["context"] == ctx(
        ("assistant", "written late but earlier"),
        ("user", "first"),
        ("user", "same time as the hit"),
    )
    assert hit > tie


def test_context_of_a_lone_message(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "alone " + "z" * 400, timestamp=T0)
    assert store.search_messages("alone")[0]["context"] == ctx(("user", "alone " + "z" * 194))


# -- filters, order, paging -----------------------------------------------------------------


def test_source_filters(store: SessionDB, ids: dict[str, int]) -> None:
    assert sorted(found(store, "事件循环 OR asyncio")) == sorted(
        [ids["q1"], ids["a1"], ids["zq"], ids["za"]]
    )
    assert sorted(found(store, "事件循环 OR asyncio", source_filter=["telegram"])) == sorted(
        [ids["zq"], ids["za"]]
    )
    assert sorted(found(store, "事件循环 OR asyncio", source_filter="cli")) == sorted(
        [ids["q1"], ids["a1"]]
    )
    assert sorted(found(store, "事件循环 OR asyncio", source_filter=["cli", "telegram"])) == sorted(
        [ids["q1"], ids["a1"], ids["zq"], ids["za"]]
    )
    assert sorted(found(store, "事件循环 OR asyncio", exclude_sources=["cli"])) == sorted(
        [ids["zq"], ids["za"]]
    )
    assert found(store, "asyncio", exclude_sources=["cli", "telegram"]) == []
    assert found(store, "asyncio", source_filter=[]) == []
    assert sorted(found(store, "asyncio", exclude_sources=[])) == sorted([ids["q1"], ids["a1"]])


def test_role_filter(store: SessionDB, ids: dict[str, int]) -> None:
    assert found(store, "asyncio", role_filter=["user"]) == [ids["q1"]]
    assert found(store, "事件循环", role_filter="assistant") == [ids["za"]]
    assert found(store, "数据", role_filter=["assistant", "tool"]) == []
    assert sorted(found(store, "asyncio", role_filter=[])) == sorted([ids["q1"], ids["a1"]])


def test_sort_orders(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    weak = store.append_message(
        "s", "user", "one mention of zebra among many other words here", timestamp=T0 + 1
    )
    strong = store.append_message("s", "user", "zebra zebra", timestamp=T0 + 2)
    middle = store.append_message("s", "user", "zebra crossing", timestamp=T0 + 3)
    assert found(store, "zebra") == [strong, middle, weak]
    assert found(store, "zebra", sort="relevance") == [strong, middle, weak]
    assert found(store, "zebra", sort="newest") == [middle, strong, weak]
    assert found(store, "zebra", sort="oldest") == [weak, strong, middle]
    assert found(store, "zebra", sort="oldest", limit=2, offset=1) == [strong, middle]


def test_sort_and_paging_on_like_and_trigram(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    made = [
        store.append_message("s", "user", f"第{n}次数据库迁移", timestamp=T0 + n) for n in range(5)
    ]
    assert found(store, "数据", sort="newest") == made[::-1]
    assert found(store, "数据", sort="oldest", limit=2, offset=2) == made[2:4]
    assert found(store, "数据库迁移", sort="oldest") == made
    assert found(store, "数据库迁移", sort="newest", limit=3) == made[:1:-1][:3]
    assert found(store, "数据库迁移", limit=0) == []


def test_bad_arguments_name_themselves(store: SessionDB) -> None:
    with pytest.raises(TypeError, match="sort"):
        store.search_messages("x", sort=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        store.search_messages("x", limit=-1)
    with pytest.raises(ValueError, match="offset"):
        store.search_messages("x", offset=-5)
    with pytest.raises(TypeError, match="source_filter"):
        store.search_messages("x", source_filter=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="role_filter"):
        store.search_messages("x", role_filter=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="query"):
        store.search_messages(b"x")  # type: ignore[arg-type]


# -- soft-deleted messages ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "route"),
    [("needle", "words"), ("针在这里", "trigram"), ("针", "like"), ("needle OR 针", "mixed")],
)
def test_soft_deleted_messages_are_hidden_on_every_route(
    store: SessionDB, query: str, route: str
) -> None:
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "the needle 针在这里 one", timestamp=T0)
    gone = store.append_message("s", "user", "the needle 针在这里 two", timestamp=T0 + 1)
    json_gone = store.append_message(
        "s", "assistant", [{"type": "text", "text": "needle 针在这里 three"}], timestamp=T0 + 2
    )
    store.rewind_to_message("s", gone)
    active = found(store, query)
    assert len(active) == 1
    assert sorted(found(store, query, include_inactive=True)) == sorted(
        [active[0], gone, json_gone]
    )


# -- model-level search ---------------------------------------------------------------------


def test_message_search_and_matching_on_the_models(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        ids = fill(store)
        assert Message.search("事件循环", role_filter=["assistant"]) == store.search_messages(
            "事件循环", role_filter=["assistant"]
        )
        assert [m.id for m in matching("asyncio")] == [ids["a1"], ids["q1"]]
        assert sorted(m.id for m in matching("事件循环 OR 数据")) == sorted(
            [ids["zq"], ids["za"], ids["zb"]]
        )
        assert [m.id for m in matching("事件循环").where(Message.role == "user")] == [ids["zq"]]
        assert list(matching("***")) == []
        store.rewind_to_message("zh", ids["zb"])
        assert [m.id for m in matching("数据")] == []
        assert [m.id for m in matching("数据", include_inactive=True)] == [ids["zb"]]
        # The same query from the model, chained and paged as a peewee query.
        assert [m.id for m in Message.matching("asyncio")] == [ids["a1"], ids["q1"]]
        assert [m.id for m in Message.matching("asyncio").offset(1).limit(1)] == [ids["q1"]]
        assert Message.matching("数据").count() == 0
        assert [m.id for m in Message.matching("数据", include_inactive=True)] == [ids["zb"]]


def test_read_only_store_searches(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        ids = fill(store)
    with SessionDB(db_path, read_only=True) as reader:
        assert [h["id"] for h in reader.search_messages("トライグラム")] == [ids["ja"]]
        assert reader.search_sessions("asyncio")[0]["id"] == "en"


def test_json_content_with_cjk_in_every_route(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    parts = [
        {"type": "text", "text": "图片说明：猫在睡觉"},
        {"type": "image_url", "image_url": {"url": "x"}},
    ]
    mid = store.append_message("s", "user", parts, timestamp=T0)
    assert found(store, "猫在睡觉") == [mid]
    assert found(store, "猫") == [mid]
    assert found(store, "image_url") == [mid]
    hit = store.search_messages("猫在睡觉")[0]
    assert hit["snippet"] == "图片说明：>>>猫在睡觉<<< [image]"
    # Hermes' context shows the text parts only; snippets mark pictures too.
    assert hit["context"] == ctx(("user", "图片说明：猫在睡觉"))
    assert json.loads(json.dumps(hit)) == hit


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda s: s.search_messages("loop", include_inactive="no"), TypeError, "include_inactive"),
        (lambda s: s.search_messages("loop", include_inactive=2), ValueError, "include_inactive"),
        (lambda s: s.search_messages("loop", sort=5), TypeError, "sort"),
        (lambda s: s.search_sessions("loop", rank_mode=5), TypeError, "rank_mode"),
    ],
)
def test_search_arguments_of_the_wrong_kind_are_named(
    store: SessionDB, call: Any, error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=f"^{name}"):
        call(store)


def test_search_sessions_groups_ids_holding_the_path_separator(store: SessionDB) -> None:
    from hermes_models import Session

    odd_root, odd_child = "b", "a\x1fb"
    store.create_session(odd_root, "cli", started_at=T0)
    store.append_message(odd_root, "user", "first words about teapots", timestamp=T0 + 1)
    Session.get_by_id(odd_root).end("compression", at=T0 + 10)
    store.create_session(odd_child, "cli", parent_session_id=odd_root, started_at=T0 + 10)
    store.append_message(odd_child, "user", "more teapots after compression", timestamp=T0 + 11)
    rows = store.search_sessions("teapots")
    assert [(row["id"], row["hits"]) for row in rows] == [(odd_root, 2)]


# -- a ranked trigram query, page by page ---------------------------------------------------


@pytest.mark.backends("sqlite")  # the order is checked against plain sqlite3's
def test_trigram_pages_follow_the_index_rank_and_put_unreadable_rows_last(
    store: SessionDB, db_path: Path
) -> None:
    """Ten messages the trigram index ranks, eight of them alike (a tie in rank, their
    times out of id order), then three starting with a NUL (JSON content, newest first),
    which come last whether the SQLite that indexed them read past the NUL or not.
    Read three at a time, the pages together are the plain ``MATCH ... ORDER BY rank``
    of the ten, then the three: no row twice, none missing, whichever pages a tie in
    rank spans (the pages once broke ties newest first within each page, so a tie
    across two pages showed a row on both)."""
    store.create_session("s", "cli", started_at=T0)
    texts = ["事件循环 alike"] * 8 + ["事件循环", "a longer text that also has 事件循环 in it"]
    for n, text in enumerate(texts):
        store.append_message("s", "user", text, timestamp=T0 + (n * 7) % 10)
    unreadable = [
        store.append_message(
            "s", "user", [{"type": "text", "text": f"{n} 事件循环"}], timestamp=T0 + t
        )
        for n, t in enumerate((3.0, 9.0, 6.0))
    ]
    with closing(sqlite3.connect(db_path)) as conn:
        ranked = [
            row[0]
            for row in conn.execute(
                "SELECT m.id FROM messages_fts_trigram t JOIN messages m ON m.id = t.rowid"
                " WHERE messages_fts_trigram MATCH '\"事件循环\"' AND m.active = 1"
                " AND instr(m.content, char(0)) <> 1 ORDER BY rank"
            )
        ]
    assert len(ranked) == 10
    expected = [*ranked, unreadable[1], unreadable[2], unreadable[0]]
    pages = [
        [hit["id"] for hit in store.search_messages("事件循环", limit=3, offset=offset)]
        for offset in range(0, 15, 3)
    ]
    assert pages == [expected[k : k + 3] for k in range(0, 15, 3)]
    assert store.search_messages("事件循环", limit=20) == store.search_messages(
        "事件循环", limit=20, offset=0
    )
    whole = store.search_messages("事件循环", limit=20)
    assert [hit["id"] for hit in whole] == expected
    # The one statement search_sql gives for each page finds the same, in plain sqlite3.
    with closing(sqlite3.connect(db_path)) as plain:
        for offset in range(0, 15, 3):
            for sql, params in search_sql("事件循环", limit=3, offset=offset):
                rows = plain.execute(sql, params).fetchall()
            assert [row[0] for row in rows] == expected[offset : offset + 3]
    assert [hit["snippet"] for hit in whole[-3:]] == [
        "1 >>>事件循环<<<",
        "2 >>>事件循环<<<",
        "0 >>>事件循环<<<",
    ]


def test_a_blob_another_writer_stored_is_searched_shown_and_read_without_raising(
    tmp_path: Path,
) -> None:
    # SQLite keeps a BLOB in the TEXT content column as it is; Python reads it back as
    # bytes. Search, its snippets and context, and the readers raised TypeError on it.
    # FTS5 reads a BLOB as text (word and trigram terms find it); the gram index of 1-2
    # character CJK terms reads a BLOB as its repr (Python's str of the bytes), so those
    # terms never find one, whether the build's LIKE matches BLOBs or not.
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        store.append_message("s", "user", "国我 text", timestamp=T0)
    blob = "国我 blob 事件循环".encode()
    with closing(sqlite3.connect(path)) as other, other:
        other.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('s', 'assistant', ?, ?)",
            (blob, T0 + 1),
        )
    with SessionDB(path) as store:
        found = {
            query: [(hit["id"], hit["snippet"]) for hit in store.search_messages(query)]
            for query in ("国我", "blob", "事件循环")
        }
        assert found == {  # FTS5's snippets of the row (its three columns, joined)
            "国我": [(1, ">>>国我<<< text")],
            "blob": [(2, "国我 >>>blob<<< 事件循环  ")],
            "事件循环": [(2, "国我 blob >>>事件循环<<<  ")],
        }
        with closing(sqlite3.connect(path)) as plain:
            like = "SELECT id FROM messages WHERE content LIKE '%国我%' ORDER BY id"
            # Builds with SQLITE_LIKE_DOESNT_MATCH_BLOBS (Debian's 3.40) never match a
            # BLOB; others (the bundled 3.53) read it as text.
            options = {row[0] for row in plain.execute("PRAGMA compile_options")}
            blobs_never = "LIKE_DOESNT_MATCH_BLOBS" in options
            assert plain.execute(like).fetchall() == ([(1,)] if blobs_never else [(1,), (2,)])
        (hit,) = store.search_messages("blob")
        assert hit["context"] == [
            {"role": "user", "content": "国我 text"},
            {"role": "assistant", "content": "国我 blob 事件循环"},
        ]
        assert [r["id"] for r in store.search_sessions("国我")] == ["s"]
        assert [m["content"] for m in store.get_messages("s")] == ["国我 text", blob]
        assert [m["content"] for m in store.get_messages_as_conversation("s")] == [
            "国我 text",
            blob,
        ]
