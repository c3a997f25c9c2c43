"""The gram index: one- and two-character CJK terms answered from an index.

Searches must find exactly what a substring scan finds, whoever wrote,
changed or deleted the messages: our connections (which index what they
change before they commit), a plain-sqlite3 writer doing what a Hermes v16
process does (whose changes the file's triggers list), and both interleaved.
The differential state machine over every kind of writer is in
``tests/test_gram_writers.py``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from console_script import run
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_search_upkeep import without_fts5

import hermes_models
from hermes_models import SessionDB, health
from hermes_models.driver import sqlite3
from hermes_models.errors import ReadOnlyDatabaseError
from hermes_models.search import pipeline as search_module
from hermes_models.search.plan import Shape, scan_plan
from hermes_models.search.query import TRIGRAM, parse
from hermes_models.store import grams
from hermes_models.store.binding import using
from hermes_models.store.fts import available_routes

from legacy import hermes_append

T0 = 1_700_000_000.0
HAN = "数据库事件循环的是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对"
KANA = "データベースセッションあいうえおかきくけこ"
HANGUL = "한국어세션메시지검색가나다라마바사"


def _text(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.3:
        return "".join(rng.choice(HAN) for _ in range(rng.randint(1, 12)))
    if pick < 0.5:
        return "".join(rng.choice(KANA) for _ in range(rng.randint(1, 10)))
    if pick < 0.6:
        return " ".join("".join(rng.choice(HANGUL) for _ in range(2)) for _ in range(3))
    if pick < 0.8:
        # Mixed: words, CJK, punctuation of the CJK block, a NUL-prefixed JSON body.
        return f"sqlite {rng.choice(HAN)}{rng.choice(HAN)}。 data {rng.choice(KANA)}"
    body = json.dumps([{"type": "text", "text": rng.choice(HAN) * 2}], ensure_ascii=False)
    return "\x00json:" + body


def _terms(rng: random.Random, n: int) -> list[str]:
    alphabet = HAN + KANA + HANGUL
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 2))) for _ in range(n)]


def _live(conn: sqlite3.Connection) -> list[tuple[int, str, str | None, str | None]]:
    return conn.execute(
        "SELECT id, content, tool_name, tool_calls FROM messages WHERE active = 1"
    ).fetchall()


def _scan(conn: sqlite3.Connection, term: str) -> set[int]:
    """The messages holding ``term``, by a Python substring scan of every live row."""
    return {row[0] for row in _live(conn) if any(term in (col or "") for col in row[1:])}


def _found(store: SessionDB, query: str) -> set[int]:
    return {hit["id"] for hit in store.search_messages(query, limit=None, time_budget=None)}


def _statements_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every statement searches run from now on, in order."""
    ran: list[str] = []
    original = search_module.fetch_within

    def spy(sql: str, params: Any, deadline: Any) -> Any:
        ran.append(sql)
        return original(sql, params, deadline)

    monkeypatch.setattr(search_module, "fetch_within", spy)
    return ran


def _changed(path: Path) -> list[int]:
    """The ids the file lists as changed since the gram index indexed them."""
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM messages_cjk_changed ORDER BY id")]
    finally:
        conn.close()


def _postings(path: Path, token: str) -> list[int]:
    """The ids the gram index lists for one gram (its characters)."""
    conn = sqlite3.connect(path)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT rowid FROM messages_cjk WHERE messages_cjk MATCH ? ORDER BY rowid",
                (f'"{token}"',),
            )
        ]
    finally:
        conn.close()


# -- tokens ---------------------------------------------------------------------------------


def test_grams_are_the_distinct_cjk_characters_and_adjacent_pairs_of_each_column() -> None:
    assert grams.grams("数据a数据", None, "库") == " ".join(sorted(["数", "据", "数据", "库"]))
    # Pairs never span a non-CJK character or two columns; nothing for plain ASCII.
    assert "据库" not in grams.grams("数据", "库").split()
    assert "数库" not in grams.grams("数 库").split()
    assert grams.grams("plain ascii", None, None) == ""
    # The CJK punctuation block counts, as the search routes it.
    assert grams.grams("。") == "。"
    # Characters beyond the BMP (Han extension B).
    assert grams.grams("\U00020000\U00020001") == "\U00020000 \U00020000\U00020001 \U00020001"


@pytest.mark.parametrize(
    ("text", "exact", "match"),
    [
        ("数据", True, '"数据"'),
        ("数", True, '("数")'),
        ("a数", False, '("数")'),
        ("数a", False, '("数")'),
    ],
)
def test_a_term_is_looked_up_by_its_bigram_or_its_characters(
    text: str, exact: bool, match: str
) -> None:
    (term,) = parse(text).terms()
    assert grams.exact(term) is exact
    assert grams.term_match(term) == match


# -- what a store written by us holds -------------------------------------------------------


def test_a_new_store_indexes_every_message_as_it_is_written(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    first = store.append_message("s", "user", "我们的数据库", timestamp=T0 + 1)
    second = store.append_message("s", "tool", "ok", tool_name="数据", timestamp=T0 + 2)
    third = store.append_message("s", "assistant", "plain english", timestamp=T0 + 3)
    assert _changed(store.db_path) == []
    assert _postings(store.db_path, "数据") == [first, second]
    assert _postings(store.db_path, "english") == []
    assert third > second
    assert _found(store, "数据") == {first, second}
    assert _found(store, "库") == {first}
    # Nothing to index; the two segments the two writes left are merged (one step).
    merged = 0 if store.database.dialect == "postgresql" else 1
    assert store.update_search_index() == {
        "present": True,
        "rebuilt": False,
        "indexed": 0,
        "changed": 0,
        "merged": merged,
    }


def test_our_deletes_and_rewrites_take_their_grams_out_of_the_index(store: SessionDB) -> None:
    store.create_session("a", "cli", started_at=T0)
    store.create_session("b", "cli", started_at=T0 + 1)
    kept = store.append_message("b", "user", "数据库", timestamp=T0 + 2)
    store.append_message("a", "user", "数据", timestamp=T0 + 3)
    store.append_message("a", "user", "事件", timestamp=T0 + 4)
    assert store.delete_session("a") is True
    # The deleted messages' grams are gone from the index, not only hidden.
    assert _postings(store.db_path, "数据") == [kept]
    assert _postings(store.db_path, "事件") == []
    assert _changed(store.db_path) == []
    store.replace_messages("b", [{"role": "user", "content": "事件循环"}])
    assert _postings(store.db_path, "数据") == []
    assert _found(store, "数据") == set()
    assert len(_found(store, "事件")) == 1


def test_a_connection_gets_the_triggers_at_its_first_write_only(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    db = hermes_models.connect(path)
    conn = db.connection()

    def temp_triggers() -> list[str]:
        rows = conn.execute("SELECT name FROM sqlite_temp_master WHERE type = 'trigger'")
        return sorted(row[0] for row in rows)

    db.execute_sql("SELECT count(*) FROM messages")
    assert temp_triggers() == []  # opening and reading install nothing
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    db.write(lambda: db.execute_sql("INSERT INTO state_meta VALUES ('a', '1')"))
    db.write(lambda: db.execute_sql("INSERT INTO state_meta VALUES ('b', '2')"))
    conn.set_trace_callback(None)
    assert temp_triggers() == [
        "hermes_models_cjk_note_delete",
        "hermes_models_cjk_note_insert",
        "hermes_models_cjk_note_update",
    ]
    creates = [sql for sql in traced if sql.startswith("CREATE TEMP TRIGGER")]
    assert len(creates) == 3 and traced.index(creates[-1]) < traced.index("BEGIN IMMEDIATE")
    assert traced[-3:] == ["BEGIN IMMEDIATE", "INSERT INTO state_meta VALUES ('b', '2')", "COMMIT"]
    db.close()


# -- a Hermes process writing the same file -------------------------------------------------


@pytest.mark.slow  # many writes of two writers, one by one
def test_rows_written_deleted_and_changed_by_plain_sqlite3_are_found_exactly(
    store: SessionDB,
) -> None:
    rng = random.Random(5)
    path = store.db_path
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for s in range(4):
            store.create_session(f"s{s}", "cli", started_at=T0 + s)
        at = T0 + 10.0
        # Interleaved: our appends and Hermes-style plain-SQL appends.
        for n in range(400):
            at += 1
            session = f"s{n % 4}"
            if n % 3:
                hermes_append(hermes, session, "user", _text(rng), at)
            else:
                store.append_message(session, "assistant", _text(rng), timestamp=at)
        # Hermes deletes some indexed messages and rewrites others.
        store.update_search_index()
        assert _changed(path) == []
        ids = [r[0] for r in hermes.execute("SELECT id FROM messages ORDER BY id")]
        for message_id in ids[::7]:
            hermes.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        for message_id in ids[3::11]:
            hermes.execute("UPDATE messages SET content = ? WHERE id = ?", (_text(rng), message_id))
        listed = set(ids[::7]) | set(ids[3::11])
        assert set(_changed(path)) == listed
        # And Hermes writes on while we do not: those rows are listed too.
        for n in range(40):
            hermes_append(hermes, f"s{n % 4}", "user", _text(rng), at + 1 + n)
        assert len(_changed(path)) == len(listed) + 40
        terms = sorted(set(_terms(rng, 60)))
        for term in terms:
            assert _found(store, term) == _scan(hermes, term), term
        # OR, AND and NOT across terms, as one query each.
        for a, b in zip(terms[::2], terms[1::2]):
            assert _found(store, f"{a} OR {b}") == _scan(hermes, a) | _scan(hermes, b)
            assert _found(store, f"{a} NOT {b}") == _scan(hermes, a) - _scan(hermes, b)
        # optimize indexes the listed ids (no rebuild needed), and nothing changes.
        result = store.update_search_index()
        assert result["rebuilt"] is False and result["changed"] == 0
        assert result["indexed"] == len(listed) + 40
        assert _changed(path) == []
        for term in terms:
            assert _found(store, term) == _scan(hermes, term), term
        assert grams.check(store.database).ok
    finally:
        hermes.close()


def test_a_write_of_ours_catches_up_a_bounded_number_of_rows_others_wrote(
    store: SessionDB,
) -> None:
    store.create_session("s", "cli", started_at=T0)
    first = store.append_message("s", "user", "起点", timestamp=T0)
    hermes = sqlite3.connect(store.db_path, isolation_level=None)
    try:
        for n in range(grams.CATCH_UP_ROWS * 2 + 50):
            hermes_append(hermes, "s", "user", f"外部数据 {n}", T0 + 1 + n)
    finally:
        hermes.close()
    others = grams.CATCH_UP_ROWS * 2 + 50
    assert len(_changed(store.db_path)) == others
    assert health.stats(hermes_models.connect(store.db_path))["search_indexes"][grams.TABLE] == (
        f"used ({others} messages written or changed since indexed: searches read them "
        "themselves until hermes-models optimize)"
    )
    # A search is exact before anything is indexed: the listed rows are scanned.
    assert len(_found(store, "数据")) == others
    store.set_meta("k", "v")  # a write changing no message refreshes nothing
    assert len(_changed(store.db_path)) == others
    # Each write indexes the message it wrote; one of every CATCH_UP_EVERY such writes
    # also CATCH_UP_ROWS of the rows others wrote (which one depends on the handle's
    # earlier writes).
    left = [others]
    for n in range(2 * grams.CATCH_UP_EVERY):
        store.append_message("s", "user", f"我们的数据 {n}", timestamp=T0 + 10_000 + n)
        left.append(len(_changed(store.db_path)))
    drops = [n for n in range(1, len(left)) if left[n] != left[n - 1]]
    assert len(drops) == 2 and drops[1] - drops[0] == grams.CATCH_UP_EVERY
    assert [left[n - 1] - left[n] for n in drops] == [grams.CATCH_UP_ROWS] * 2
    assert left[-1] == 50 and first < min(_changed(store.db_path))
    assert len(_found(store, "数据")) == others + 2 * grams.CATCH_UP_EVERY
    result = store.update_search_index()
    assert result == {"present": True, "rebuilt": False, "indexed": 50, "changed": 0, "merged": 1}


def test_catch_up_indexes_in_chunks_and_reports_progress(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', ?)", (T0,))
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('s', 'user', ?, ?)",
            [(f"第{n}条数据", T0 + n) for n in range(250)],
        )
    finally:
        conn.close()
    db = hermes_models.connect(path)
    seen: list[tuple[int, int]] = []
    assert grams.catch_up(db, chunk=100, progress=lambda d, t: seen.append((d, t))) == 250
    assert seen == [(100, 250), (200, 250), (250, 250)]
    assert _changed(path) == []
    assert len(_postings(path, "数据")) == 250
    with pytest.raises(ValueError, match="chunk must be a positive number of rows, got 0"):
        grams.catch_up(db, chunk=0)
    db.close()


def test_a_read_only_handle_searches_with_the_index_and_refuses_to_update_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        message_id = store.append_message("s", "user", "数据", timestamp=T0)
    with SessionDB(path, read_only=True) as reader:
        assert _found(reader, "数据") == {message_id}
        with pytest.raises(ReadOnlyDatabaseError, match="opened read-only"):
            reader.update_search_index()


QUERY_WORDS = st.sampled_from(
    [
        "数",
        "数据",
        "国我",
        "세션",
        "数a",
        "数据库",
        "事件循环",
        "sqlite",
        "loop*",
        "OR",
        "NOT",
        '"数 据"',
    ]
)


@pytest.fixture(scope="module")
def gram_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionDB]:
    """A store file with the gram index, for tests that only plan searches."""
    store = SessionDB(tmp_path_factory.mktemp("grams") / "state.db")
    yield store
    store.close()


@settings(max_examples=300, deadline=None)
@example(words=["数", "数据", "国我"], window=False, trigram=True, grams=False)  # a scan, no index
@example(words=["数", "数据", "国我"], window=False, trigram=True, grams=True)
@example(words=["数据库"], window=False, trigram=False, grams=True)  # LIKE, not exact
@given(
    words=st.lists(QUERY_WORDS, min_size=1, max_size=5),
    window=st.booleans(),
    trigram=st.booleans(),
    grams=st.booleans(),
)
def test_a_query_is_matched_by_the_gram_index_exactly_when_its_scan_only_looks_terms_up(
    gram_file: SessionDB, words: list[str], window: bool, trigram: bool, grams: bool
) -> None:
    # Shape.matched_by_grams decides from the shape and the query what the scan plan
    # would show: a scan of gram index lookups only, every term exact, reading no row.
    query = parse(" ".join(words))
    with using(gram_file.database):
        routes = available_routes()
        shape = Shape.of(query, routes if trigram else routes - {TRIGRAM})
        shape = shape._replace(window=window, grams=grams)
        scan = scan_plan(query, shape, False)
        by_scan = (
            scan is not None
            and scan.uncovered_only
            and len(scan.indexed) == len(scan.terms)
            and shape.all_like
            and not shape.window
            and not shape.walk
        )
        matched = shape.matched_by_grams(query)
    assert (matched is not None) == by_scan, (words, shape)
    if matched is not None:
        assert matched == shape._replace(matched=True)
        assert scan_plan(query, matched, False) is None  # the page reads the index itself


def test_the_scan_reads_only_the_candidates_of_the_index(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "数据", timestamp=T0)
    conn = hermes_models.connect(store.db_path).connection()
    sql = (
        "SELECT id FROM messages WHERE id IN ("
        + grams.candidates_sql()
        + ") AND content LIKE '%a数%'"
    )
    plan = " / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, ('"数"',) * 2))
    assert "VIRTUAL TABLE INDEX" in plan and "messages_cjk" in plan
    assert "SCAN messages" not in plan.replace("SCAN messages_cjk", "")


# -- the command line -----------------------------------------------------------------------


@pytest.mark.slow  # console-script runs
def test_optimize_indexes_what_others_wrote_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for n in range(30):
            hermes_append(hermes, "s", "user", f"数据{n}", T0 + n)
        hermes.execute("DELETE FROM messages WHERE id = 1")
    finally:
        hermes.close()
    done = run("optimize", "--db", str(path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    # 30 ids listed: 29 messages indexed, and the deleted one looked at (nothing held).
    assert done.stdout == "indexed 30 messages; every message is indexed\n"
    again = run("optimize", "--db", str(path), "--rebuild", "--json", cwd=tmp_path)
    assert again.returncode == 0
    assert json.loads(again.stdout) == [
        {
            "path": str(path),
            "present": True,
            "rebuilt": True,
            "indexed": 29,
            "changed": 0,
            "merged": 0,
        }
    ]
    assert _changed(path) == []
    assert _postings(path, "数据") == list(range(2, 31))


def test_optimize_on_a_missing_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = run("optimize", "--db", str(tmp_path / "none.db"), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "none.db does not exist" in done.stderr


# -- an SQLite build without FTS5 -------------------------------------------------------------


@pytest.mark.slow  # builds its index twice
def test_a_build_without_fts5_writes_and_deletes_and_the_next_open_stays_exact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        kept = store.append_message("s", "user", "数据一", timestamp=T0 + 1)
        doomed = store.append_message("s", "user", "数据二", timestamp=T0 + 2)
    # A child process whose SQLite has no FTS5 appends and deletes: the plain-SQL
    # triggers still list both rows; no TEMP trigger is installed there.
    out = without_fts5(
        path,
        f"""
        with SessionDB(path) as store:
            added = store.append_message("s", "user", "数据三", timestamp=1_700_000_003.0)
            store.database.execute_sql("DELETE FROM messages WHERE id = ?", ({doomed},))
            print(sorted(h["id"] for h in store.search_messages("数据", limit=None)))
            print(added)
        """,
    )
    found, added = out.splitlines()
    assert found == f"[{kept}, {int(added)}]"
    assert _changed(path) == [doomed, int(added)]
    with SessionDB(path) as store:
        assert _found(store, "数据") == {kept, int(added)}
        assert store.update_search_index()["indexed"] == 2
        assert _changed(path) == []
        assert _postings(path, "数据") == [kept, int(added)]
        assert _found(store, "数据") == {kept, int(added)}


@pytest.mark.plaintext_file  # runs an SQLite module without a cipher
def test_a_store_created_without_fts5_gets_the_index_at_the_next_open_with_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    without_fts5(
        path,
        """
        with SessionDB(path) as store:
            store.create_session("s", "cli", started_at=1_700_000_000.0)
            store.append_message("s", "user", "数据", timestamp=1_700_000_001.0)
        """,
    )
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert not names & {"messages_cjk", "messages_cjk_grams", "messages_cjk_changed"}
    with SessionDB(path) as store:
        assert _changed(path) == [1]
        assert _found(store, "数据") == {1}
        assert store.update_search_index()["indexed"] == 1
        assert _postings(path, "数据") == [1]


@pytest.mark.slow  # 1,500 messages written one by one
def test_a_common_term_is_paged_newest_first_by_walking_messages_by_time(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term the gram index lists for 1,000+ messages is found by walking messages
    newest first (the time index of migration 0008) instead of reading every
    candidate; pages are exactly those of a Python scan, ordered by time (which
    is not the order of ids here), and the same as the candidate path gives."""
    rng = random.Random(11)
    path = store.db_path
    for s in range(5):
        store.create_session(f"s{s}", "cli", started_at=T0 + s)
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for n in range(1500):
            role = ("user", "assistant", "tool")[n % 3]
            text = _text(rng) + ("数据" if rng.random() < 0.85 else "")
            if n % 17 == 0:
                body = [{"type": "text", "text": text}]
                text = "\x00json:" + json.dumps(body, ensure_ascii=False)
            # Times out of id order, with ties.
            hermes_append(hermes, f"s{n % 5}", role, text, T0 + 100 + rng.randint(0, 400))
        hermes.execute("UPDATE messages SET active = 0 WHERE id % 13 = 0")
        store.update_search_index()
        rows = hermes.execute(
            "SELECT id, timestamp, role, active, content, tool_name, tool_calls FROM messages"
        ).fetchall()
    finally:
        hermes.close()

    def holds(row: tuple[Any, ...]) -> bool:
        return any("数据" in (col or "") for col in row[4:])

    visible = [r for r in rows if r[3] == 1 and holds(r)]  # v16: tool rows are hits too
    newest = [r[0] for r in sorted(visible, key=lambda r: (-r[1], -r[0]))]
    assert len(newest) > 700  # of some 1,270 rows the gram index lists
    ran = _statements_run(monkeypatch)

    def page(offset: int, sort: str | None = None) -> list[int]:
        hits = store.search_messages("数据", limit=20, offset=offset, sort=sort, time_budget=None)
        return [hit["id"] for hit in hits]

    for offset in (0, 20, 400, len(newest) - 10, len(newest)):
        assert page(offset) == newest[offset : offset + 20]
        assert page(offset, "newest") == newest[offset : offset + 20]
    assert page(0, "oldest") == newest[::-1][:20]
    walked = [sql for sql in ran if "json_each" not in sql and "messages_cjk" not in sql]
    assert search_module.GRAM_STATE_COUNT_SQL in ran and walked
    # The candidate path (a term counted as rare) gives the same pages: the index holds
    # every message, so the page's statement reads its list with one MATCH.
    monkeypatch.setattr(search_module, "COMMON_FROM", 10**9)
    ran.clear()
    for offset in (0, 20, 400):
        assert page(offset) == newest[offset : offset + 20]
    assert any('"messages_cjk" MATCH ?' in sql for sql in ran)


def test_trigram_terms_find_json_content_exactly_through_the_narrowed_rows(
    store: SessionDB,
) -> None:
    """The rows the trigram index cannot read (JSON content) are narrowed down by the
    gram index, for rows of any writer: indexed, above the mark, changed by others."""
    rng = random.Random(23)
    path = store.db_path
    store.create_session("s", "cli", started_at=T0)

    def json_text() -> str:
        words = "".join(rng.choice(HAN[:8]) for _ in range(rng.randint(3, 9)))
        return "\x00json:" + json.dumps([{"type": "text", "text": words}], ensure_ascii=False)

    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for n in range(120):
            if n % 2:
                hermes_append(hermes, "s", "user", json_text(), T0 + n)
            else:
                store.append_message(
                    "s", "assistant", [{"type": "text", "text": "x"}], timestamp=T0 + n
                )
                hermes.execute(
                    "UPDATE messages SET content = ? WHERE id = (SELECT max(id) FROM messages)",
                    (json_text(),),
                )
        store.update_search_index()
        ids = [r[0] for r in hermes.execute("SELECT id FROM messages ORDER BY id")]
        for message_id in ids[::9]:  # changed by others after they were indexed
            hermes.execute(
                "UPDATE messages SET content = ? WHERE id = ?", (json_text(), message_id)
            )
        for n in range(20):  # above the mark
            hermes_append(hermes, "s", "user", json_text(), T0 + 500 + n)
        terms = sorted({"".join(rng.choice(HAN[:8]) for _ in range(3)) for _ in range(40)})
        shape_narrows = []
        for term in terms:
            assert _found(store, term) == _scan(hermes, term), term
            shape_narrows.append(Shape.of(parse(term), available_routes()).narrows)
        assert all(shape_narrows)
        assert any(_scan(hermes, term) for term in terms)
    finally:
        hermes.close()


@pytest.mark.parametrize("budget", [20_000, 25, 1])
def test_a_first_walk_over_the_newest_messages_pages_exactly_or_gives_way(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """Where the gram index cannot tell whether hits are common (rows others wrote are
    not indexed yet), a page is first looked for among the newest messages; pages are
    exactly those of a Python scan, whether that first try holds them or not."""
    monkeypatch.setattr(search_module, "WALK_BUDGET", budget)
    monkeypatch.setattr(search_module, "WALK_BUDGET_MIN", budget)
    # A store of 600 messages counts as large: past sqrt(page x messages) = 109
    # rows not indexed, the index cannot tell a common term from a rare one.
    monkeypatch.setattr(search_module, "COMMON_FROM", 1)
    rng = random.Random(31)
    path = store.db_path
    for s in range(3):
        store.create_session(f"s{s}", "cli", started_at=T0 + s)
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for n in range(600):
            text = _text(rng) + ("数据" if rng.random() < 0.5 else "")
            hermes_append(hermes, f"s{n % 3}", "user", text, T0 + 100 + rng.randint(0, 300))
        hermes.execute("UPDATE messages SET active = 0 WHERE id % 11 = 0")
        rows = hermes.execute(
            "SELECT id, timestamp, active, content, tool_name, tool_calls FROM messages"
        ).fetchall()
    finally:
        hermes.close()
    assert len(_changed(path)) == 600  # nothing indexed: the index cannot tell

    def newest(test: Any) -> list[int]:
        hits = [r for r in rows if r[2] == 1 and test(" ".join(c or "" for c in r[3:]))]
        return [r[0] for r in sorted(hits, key=lambda r: (-r[1], -r[0]))]

    def page(query: str, offset: int) -> list[int]:
        hits = store.search_messages(query, limit=20, offset=offset, time_budget=None)
        return [hit["id"] for hit in hits]

    ran = _statements_run(monkeypatch)
    common = newest(lambda t: "数据" in t)
    assert page("数据", 0) == common[:20]
    tried = [sql for sql in ran if '"recent"' in sql]
    # One first try; with a budget too small for a page, the candidates after it.
    assert len(tried) == 1
    window = sorted(rows, key=lambda r: (-r[1], -r[0]))[:budget]
    enough = sum(r[2] == 1 and "数据" in (r[3] or "") for r in window) >= 20
    assert (grams.GRAM_IDS_SQL in ran) is not enough
    assert enough is (budget == 20_000)
    rare = newest(lambda t: "国我" in t)
    either = newest(lambda t: "数据" in t or "セッ" in t)
    but_not = newest(lambda t: "数据" in t and "库" not in t)
    for offset in (0, 20, 100):
        assert page("数据", offset) == common[offset : offset + 20]
        assert page("国我", offset) == rare[offset : offset + 20]
        assert page("数据 OR セッ", offset) == either[offset : offset + 20]
        assert page("数据 NOT 库", offset) == but_not[offset : offset + 20]


def test_a_windowed_session_search_reads_its_newest_hits_from_the_index(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session search of one- and two-character CJK terms alone given ``rank_window``
    counts its newest that many hits; they are read from the gram index newest first (one
    expression for the whole query, no id list per term), with the rows it does not
    cover (rows others wrote, deleted or changed since) decided by the scan. Sessions
    and counts are exactly those of a Python scan's newest hits."""
    rng = random.Random(47)
    path = store.db_path
    for s in range(6):
        store.create_session(f"s{s}", "cli", started_at=T0 + s)
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        at = T0 + 10.0
        for n in range(300):
            at += 1
            if n % 3:
                hermes_append(hermes, f"s{n % 6}", "user", _text(rng), at)
            else:
                store.append_message(f"s{n % 6}", "assistant", _text(rng), timestamp=at)
        store.update_search_index()  # every row indexed: the index covers the store
        assert _changed(path) == []
        ids = [r[0] for r in hermes.execute("SELECT id FROM messages ORDER BY id")]
        for message_id in ids[-60::7]:  # among the newest: inside the window
            hermes.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        for message_id in ids[-58::5]:
            hermes.execute("UPDATE messages SET content = ? WHERE id = ?", (_text(rng), message_id))
        hermes.execute("UPDATE messages SET active = 0 WHERE id % 13 = 0")
        for n in range(30):  # not indexed
            hermes_append(hermes, f"s{n % 6}", "user", _text(rng), at + 1 + n)
        assert len(_changed(path)) > 30
        live = {row[0]: row for row in _live(hermes)}
        session_of = dict(hermes.execute("SELECT id, session_id FROM messages").fetchall())
    finally:
        hermes.close()

    def holds(message_id: int, term: str) -> bool:
        return any(term in (col or "") for col in live[message_id][1:])

    def expected(test: Any) -> list[tuple[str, int]]:
        hits = sorted((i for i in live if test(i)), reverse=True)[:40]
        count: dict[str, int] = {}
        for i in hits:
            count[session_of[i]] = count.get(session_of[i], 0) + 1
        latest = {sid: max(i for i in hits if session_of[i] == sid) for sid in count}
        return sorted(count.items(), key=lambda item: -latest[item[0]])

    queries = {
        "数 OR 据 OR セ": lambda i: any(holds(i, t) for t in ("数", "据", "セ")),
        "数据 OR 한국 OR 事件": lambda i: any(holds(i, t) for t in ("数据", "한국", "事件")),
        "数 据 OR 库 NOT 的": lambda i: (
            (holds(i, "数") and holds(i, "据")) or (holds(i, "库") and not holds(i, "的"))
        ),
        "デ NOT ー NOT タ": lambda i: holds(i, "デ") and not holds(i, "ー") and not holds(i, "タ"),
    }
    ran = _statements_run(monkeypatch)
    for query, test in queries.items():
        ran.clear()
        rows = store.search_sessions(query, limit=100, time_budget=None, rank_window=40)
        assert [(row["id"], row["hits"]) for row in rows] == expected(test), query
        assert grams.GRAM_IDS_SQL not in ran  # no id list per term
        assert sum('"messages_cjk" MATCH' in sql for sql in ran) == 1


@pytest.mark.plaintext_file  # runs named SQLite modules without a cipher
def test_repeated_searches_reuse_the_statements_sqlite_prepared(tmp_path: Path) -> None:
    # Defining or removing an SQL function expires every statement the connection
    # has prepared. A search's scan and rank functions are defined once per
    # connection, not for every search, so the next searches find their statements
    # prepared (SQLite's sqlite_stmt table counts each statement's re-preparations).
    # The bundled SQLite is built without sqlite_stmt: the searches run in a process
    # on the standard library's module, whose SQLite has it.
    program = textwrap.dedent(
        """
        import json, sqlite3, sys
        from hermes_models import SessionDB, driver
        assert driver.sqlite3 is sqlite3
        T0 = 1_700_000_000.0
        store = SessionDB(sys.argv[1])
        store.create_session("s", "cli", started_at=T0)
        for k in range(4):
            store.append_message("s", "user", f"国我 {k} sqlite", timestamp=T0 + k)
        plain = sqlite3.connect(sys.argv[1])  # a Hermes v16 writer: its row lies above the mark
        with plain:
            plain.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                ("s", "user", "那国我", T0 + 9),
            )
        plain.close()

        def page(query):
            return [hit["id"] for hit in store.search_messages(query, time_budget=None)]

        def preparations():
            rows = store._conn.execute(
                "SELECT sql, reprep FROM sqlite_stmt WHERE sql NOT LIKE '%sqlite_stmt%'"
            ).fetchall()
            return {row[0]: row[1] for row in rows}

        queries = ("国我", "国我 sqlite")
        first = [page(query) for query in queries]
        before = preparations()
        again = [page(query) for query in queries * 3]
        after = preparations()
        print(json.dumps({"first": first, "again": again, "before": before, "after": after}))
        """
    )
    env = {**os.environ, "HERMES_MODELS_SQLITE": "sqlite3", "HERMES_HOME": str(tmp_path / "h")}
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "state.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    expected = [5, 4, 3, 2, 1]  # newest first, the plain writer's row included
    assert seen["first"] == [expected, expected[1:]]
    assert seen["again"] == [expected, expected[1:]] * 3
    before, after = seen["before"], seen["after"]
    assert sorted(after) == sorted(before)  # the same statements, none prepared anew
    assert [sql for sql, count in after.items() if count != before[sql]] == []
    assert len(after) > 5


def _page(store: SessionDB, query: str) -> list[int]:
    return [hit["id"] for hit in store.search_messages(query, time_budget=None)]


def test_a_search_reads_the_schema_cookie_once(store: SessionDB) -> None:
    # Which indexes the file has, and whether the gram index is ready, are known for
    # one schema cookie: a search reads it once, not once per question.
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "国我 sqlite", timestamp=T0)
    assert _page(store, "国我") == [1]  # the first search of the handle learns the schema
    ran: list[str] = []
    store._conn.set_trace_callback(ran.append)
    try:
        pages = [_page(store, query) for query in ("国我", "国我 sqlite", "数")]
    finally:
        store._conn.set_trace_callback(None)
    assert pages == [[1], [1], []]
    assert [sql for sql in ran if "schema_version" in sql] == ["PRAGMA schema_version"] * 3


def test_a_search_looks_at_the_files_state_once_and_sees_what_others_committed(
    store: SessionDB,
) -> None:
    # The counts a search keeps are checked against the file's state (data_version)
    # once a search, not once per count; a commit by another process is still seen.
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "国我 sqlite", timestamp=T0)
    ran: list[str] = []
    store._conn.set_trace_callback(ran.append)
    try:
        first = [_page(store, "国我"), _page(store, "国我")]
        looks = [sql for sql in ran if "data_version" in sql.lower() and "--" not in sql]
        assert first == [[1], [1]] and looks == ["PRAGMA data_version"] * 2
        with closing(sqlite3.connect(store.db_path)) as hermes, hermes:
            hermes_append(hermes, "s", "user", "国我 from hermes", T0 + 1)
        assert _page(store, "国我") == [2, 1]
        assert [hit["id"] for hit in store.search_sessions("国我", time_budget=None)] == ["s"]
    finally:
        store._conn.set_trace_callback(None)


def test_the_count_in_the_state_statement_stops_where_a_term_becomes_common(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The statement's LIMIT (an SQL function) is the number _count_common compares with.
    store.create_session("s", "cli", started_at=T0)
    for i in range(40):
        store.append_message("s", "user", f"数据 {i}", timestamp=T0 + i)
    monkeypatch.setattr(search_module, "COMMON_FROM", 3)
    assert len(_page(store, "数据")) == 20  # defines the function on the connection
    for page_terms in (1, 20, 60, 10**6):
        need = search_module.common_from(page_terms, 40)
        row = store._conn.execute(
            grams.sqlite_sql.GRAM_STATE_COUNT,
            (page_terms, grams.term_match(parse("数据").terms()[0]), page_terms),
        ).fetchone()
        assert tuple(row) == (40, 0, 0, min(40, need)), page_terms
    assert [search_module.common_from(n, 40) for n in (1, 20, 60)] == [6, 28, 48]
    assert search_module.common_from(20, None) == 3  # an empty store: at least COMMON_FROM


def test_a_repeated_search_reads_the_gram_counts_once_until_a_commit(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "国我 sqlite", timestamp=T0)
    ran = _statements_run(monkeypatch)
    counts = [grams.sqlite_sql.GRAM_STATE_COUNT]  # the state and the count, in one statement
    pages = [_page(store, "国我") for _ in range(3)]
    assert pages == [[1]] * 3
    assert [sql for sql in ran if "count(*)" in sql or "max(id)" in sql] == counts
    store.append_message("s", "user", "国我 again", timestamp=T0 + 1)  # a commit
    ran.clear()
    assert [_page(store, "国我") for _ in range(2)] == [[2, 1]] * 2
    assert [sql for sql in ran if "count(*)" in sql or "max(id)" in sql] == counts
    # A second term is counted on its own; the state is read once.
    ran.clear()
    assert _page(store, "国我 我") == [2, 1]
    assert [sql for sql in ran if "count(*)" in sql or "max(id)" in sql] == [
        grams.sqlite_sql.GRAM_STATE_COUNT,
        grams.sqlite_sql.GRAM_COUNT,
    ]


def test_the_scan_of_uncovered_rows_runs_only_when_the_index_leaves_some_out(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "国我 one", timestamp=T0)
    store.append_message("s", "user", "国我 two", timestamp=T0 + 1)
    ran = _statements_run(monkeypatch)

    def scans() -> int:
        return sum(search_module.SCAN_FUNCTION in sql for sql in ran)

    # Our writes keep the index whole: nothing listed as changed.
    assert [_page(store, "国我") for _ in range(2)] == [[2, 1]] * 2
    assert scans() == 0
    plain = sqlite3.connect(store.db_path)  # a Hermes v16 writer: its rows are listed
    with plain:
        hermes_append(plain, "s", "user", "他国我", T0 + 2)
    assert _page(store, "国我") == [3, 2, 1]
    assert scans() == 1
    with plain:  # a row changed by others is listed until indexed again
        plain.execute("UPDATE messages SET content = 'no longer' WHERE id = 1")
    assert _changed(store.db_path) == [1, 3]
    assert _page(store, "国我") == [3, 2]
    store.update_search_index()
    assert _changed(store.db_path) == []
    assert _page(store, "国我") == [3, 2]
    plain.close()


def test_a_query_the_index_answers_whole_is_one_match_inside_the_page_statement(
    store: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the index holds every message, a query of one- and two-character terms
    is read by the page's statement with one MATCH of the index, not a lookup per term
    and a list of ids; while it leaves rows out, the lookups and the scan of those rows
    run. The hits are what a substring scan finds either way."""
    rng = random.Random(11)
    store.create_session("s", "cli", started_at=T0)
    for n in range(120):
        store.append_message("s", "user", _text(rng), timestamp=T0 + n)
    ran = _statements_run(monkeypatch)
    queries = ["国我", "数据 OR セッ", "세션 NOT 数", "的 是", "数 NOT 据 OR 国"]

    def check(*, whole: bool) -> None:
        plain = sqlite3.connect(store.db_path)
        try:
            for query in queries:
                ran.clear()
                found = _found(store, query)
                expected = set()
                for group in query.split(" OR "):
                    words = group.split()
                    held = _scan(plain, words[0])
                    for word, before in zip(words[1:], words):
                        if word != "NOT":
                            held = (
                                held - _scan(plain, word)
                                if before == "NOT"
                                else held & _scan(plain, word)
                            )
                    expected |= held
                assert found == expected, query
                page = ran[-1]
                lookups = [sql for sql in ran if sql == grams.GRAM_IDS_SQL]
                if whole:
                    assert lookups == [] and page.count('"messages_cjk" MATCH ?') == 1, query
                else:
                    assert lookups and '"messages_cjk" MATCH' not in page, query
        finally:
            plain.close()

    check(whole=True)
    hermes = sqlite3.connect(store.db_path)  # a Hermes v16 writer: its row is listed
    with hermes:
        hermes_append(hermes, "s", "user", "他国我的数据", T0 + 500)
    hermes.close()
    check(whole=False)
    store.update_search_index()
    check(whole=True)


# -- merging the index's segments -------------------------------------------------------


def _hermes_appends(path: Path, texts: list[str], first: float) -> None:
    """``texts`` appended to session ``s`` by a plain-sqlite3 (Hermes v16) writer, one
    transaction each, a second apart from ``first``: none of them gram-indexed."""
    hermes = sqlite3.connect(path, isolation_level=None)
    try:
        for n, text in enumerate(texts):
            hermes_append(hermes, "s", "user", text, first + n)
    finally:
        hermes.close()


def test_indexing_in_steps_ends_in_one_segment_with_the_same_answers(tmp_path: Path) -> None:
    """Each short indexing transaction leaves a segment, and FTS5 merges them only
    partly; `update_search_index` then merges them into one, in steps of a few pages
    (each a short write transaction), and every search answers as before."""
    rng = random.Random(23)
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
    texts = [_text(rng) for _ in range(300)]
    _hermes_appends(path, texts, T0 + 1)
    terms = sorted({text[i : i + 2] for text in texts[:40] for i in range(0, len(text) - 1, 3)})
    terms = [
        t for t in terms if [(q.text, grams.exact(q)) for q in parse(t).terms()] == [(t, True)]
    ]
    terms = terms[:25]
    assert len(terms) >= 10
    with SessionDB(path) as store:
        db = store.database
        assert grams.catch_up(db, chunk=10) == 300  # 30 transactions
        assert grams.segments(db) > 1
        expected = {t: {n + 1 for n, text in enumerate(texts) if t in text} for t in terms}
        assert {t: _found(store, t) for t in terms} == expected
        assert grams.merge(db, pages=1) >= 1
        assert grams.segments(db) == 1
        assert grams.merge(db) == 0  # nothing left to merge
        assert {t: _found(store, t) for t in terms} == expected
        check = "INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('integrity-check', 0)"
        assert store._conn.execute(check).fetchall() == []
    # A Hermes writer adds rows; indexing them leaves segments, which it merges.
    more = [_text(rng) for _ in range(30)]
    _hermes_appends(path, more, T0 + 400)
    with SessionDB(path) as store:
        assert store.update_search_index()["indexed"] == 30
        assert grams.segments(store.database) == 1
        texts += more
        expected = {t: {n + 1 for n, text in enumerate(texts) if t in text} for t in terms}
        assert {t: _found(store, t) for t in terms} == expected
