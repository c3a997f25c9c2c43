"""The gram index exact under every kind of writer: each row of the issue's table.

Each test writes a store the way one writer does (a copy of conversations
whose messages interleave, a merge, an import keeping ids, another program's
explicit ids, ``INSERT OR REPLACE``, ``UPDATE`` then our delete, text that is
not UTF-8) and compares every search of a 1-2 character CJK term with the
simplest correct answer: a substring test over the visible rows, in Python.
Under the old high-water mark each of them lost messages.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from console_script import run

from hermes_models import SessionDB, grams
from hermes_models.copy import copy_store

T0 = 1_700_000_000.0
TERMS = ("异步", "内存", "数据", "数", "据", "库", "存", "事件", "セッ", "세션")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def oracle(path: Path, term: str) -> set[int]:
    """The visible messages holding ``term``: the simplest correct answer, read as bytes."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        rows = conn.execute(
            "SELECT id, content, tool_name, tool_calls FROM messages WHERE active = 1"
        ).fetchall()
    finally:
        conn.close()
    return {int(row[0]) for row in rows if any(term in _text(col) for col in row[1:])}


def found(store: SessionDB, term: str) -> set[int]:
    return {hit["id"] for hit in store.search_messages(term, limit=None, time_budget=None)}


def assert_exact(path: Path, terms: tuple[str, ...] = TERMS) -> None:
    with SessionDB(path) as store:
        for term in terms:
            assert found(store, term) == oracle(path, term), term


def _interleaved(path: Path, sessions: tuple[str, ...] = ("a", "b"), n: int = 12) -> None:
    """Two chats of a gateway (or a subagent beside its parent): messages alternate."""
    with SessionDB(path) as store:
        for k, session in enumerate(sessions):
            store.create_session(session, "telegram", started_at=T0 + k)
        for i in range(n):
            for k, session in enumerate(sessions):
                text = ("异步任务", "内存数据库", "数据セッション", "세션 事件")[(i + k) % 4]
                store.append_message(session, "user", f"{text} {i}", timestamp=T0 + 10 + 2 * i + k)
        store.update_search_index()


def test_a_copy_of_conversations_whose_messages_interleave_finds_every_message(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "src.db", tmp_path / "copy.db"
    _interleaved(source)
    copy_store(source, target)
    # The copy writes the second session's lower ids after the first's higher ones.
    assert oracle(target, "异步") == oracle(source, "异步") != set()
    assert_exact(target)
    with SessionDB(target) as store:
        store.update_search_index()
        assert grams.check(store.database).ok
    assert_exact(target)


def _store_with_a_free_low_range(path: Path) -> None:
    """A store in use whose highest id (1000) is above ids that are free (1-999)."""
    with SessionDB(path) as store:
        store.create_session("t", "cli", started_at=T0)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO messages (id, session_id, role, content, timestamp)"
            " VALUES (1000, 't', 'user', '数据 there', ?)",
            (T0 + 1,),
        )
    finally:
        conn.close()
    with SessionDB(path) as store:
        store.update_search_index()
        assert found(store, "数据") == {1000}


def test_a_merge_into_a_store_in_use_finds_the_merged_messages_below_its_highest_id(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "src.db", tmp_path / "target.db"
    _interleaved(source, n=4)
    _store_with_a_free_low_range(target)
    copy_store(source, target, merge=True)
    with SessionDB(target) as store:
        ids = {m["id"] for s in ("a", "b") for m in store.get_messages(s)}
    assert min(ids) < 1000  # the source's ids were kept
    assert_exact(target)


def test_an_import_keeping_ids_below_the_highest_finds_every_imported_message(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "src.db", tmp_path / "target.db"
    _interleaved(source, n=4)
    bundle = tmp_path / "bundle.jsonl"
    with SessionDB(source) as store:
        store.export_bundle(bundle)
    _store_with_a_free_low_range(target)
    with SessionDB(target) as store:
        report = store.import_bundle(bundle)
        assert report["messages_added"] == 8 and report["messages_renumbered"] == 0
    assert_exact(target)


def _indexed_store(path: Path) -> None:
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        for i in range(20):
            store.append_message("s", "user", f"内存 {i} 事件", timestamp=T0 + i)
        store.update_search_index()


def test_another_programs_insert_with_a_free_id_below_the_highest_is_found(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _store_with_a_free_low_range(path)  # ids up to 1000 indexed; 1-999 free
    conn = sqlite3.connect(path, isolation_level=None)
    try:  # a restore, or a sync tool keeping ids
        conn.execute(
            "INSERT INTO messages (id, session_id, role, content, timestamp)"
            " VALUES (500, 't', 'user', '异步 restored 数据', ?)",
            (T0 + 5,),
        )
    finally:
        conn.close()
    assert_exact(path)
    with SessionDB(path) as store:
        store.append_message("t", "user", "later", timestamp=T0 + 99)  # our write, its catch-up
        assert found(store, "异步") == {500}
        store.update_search_index()
        assert found(store, "异步") == {500} and found(store, "数据") == {500, 1000}


def test_another_programs_insert_or_replace_over_an_indexed_row_is_found_by_its_new_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT OR REPLACE INTO messages (id, session_id, role, content, timestamp)"
            " VALUES (7, 's', 'user', '异步 replaced', ?)",
            (T0 + 7,),
        )
    finally:
        conn.close()
    assert_exact(path)
    with SessionDB(path) as store:
        assert found(store, "异步") == {7} and 7 not in found(store, "内存")
        store.update_search_index()
        assert found(store, "异步") == {7} and 7 not in found(store, "内存")
        assert grams.check(store.database).ok


def test_another_programs_update_then_our_delete_leaves_the_index_whole(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE messages SET content = '异步 rewritten' WHERE id = 3")
        conn.execute("UPDATE messages SET tool_name = '数据', tool_calls = '[\"库\"]' WHERE id = 4")
    finally:
        conn.close()
    assert_exact(path)
    with SessionDB(path) as store:
        assert store.delete_session("s") is True
        store.create_session("u", "cli", started_at=T0 + 50)
        store.append_message("u", "user", "内存 again", timestamp=T0 + 51)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("INSERT INTO messages_cjk (messages_cjk) VALUES ('integrity-check')")
        # What the index lists for the deleted messages' grams: only the new message.
        hits = conn.execute(
            "SELECT rowid FROM messages_cjk WHERE messages_cjk MATCH ?",
            (f'"{grams.unigram("内")}"',),
        ).fetchall()
    finally:
        conn.close()
    assert [row[0] for row in hits] == sorted(oracle(path, "内"))
    assert_exact(path)


def _damaged(conn: sqlite3.Connection, session: str, at: float) -> int:
    """Another program's message whose text is a truncated multi-byte write."""
    good = "数据库".encode()
    cursor = conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES (?, 'user', CAST(? AS TEXT), ?)",
        (session, good + "异".encode()[:2] + "步 内存".encode(), at),
    )
    return int(cursor.lastrowid or 0)


def test_another_programs_text_that_is_not_utf8_blocks_no_write_and_no_search(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        bad = _damaged(conn, "s", T0 + 30)
    finally:
        conn.close()
    with SessionDB(path) as store:
        for i in range(40):  # enough writes that one catches up on the damaged row
            store.append_message("s", "assistant", f"数据 {i}", timestamp=T0 + 40 + i)
        assert bad in found(store, "数据") and bad in found(store, "内存")
        assert bad in found(store, "步")
        messages = store.get_messages("s")
        shown = next(m for m in messages if m["id"] == bad)
        assert shown["content"] == "数据库\ufffd步 内存"
        assert len(messages) == 61
        store.update_search_index()
        assert found(store, "数据") == oracle(path, "数据")
        checked = grams.check(store.database)
        assert checked.ok and checked.damaged == [bad]
    assert f"message {bad}" in caplog.text
    assert_exact(path)


# Five console-script processes (~0.4 s each).
@pytest.mark.slow
def test_whole_store_commands_read_text_that_is_not_utf8_and_name_the_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        bad = _damaged(conn, "s", T0 + 30)
    finally:
        conn.close()
    warning = (
        f"Warning: {path}: text that is not UTF-8 in message {bad} (content); "
        "shown with U+FFFD replacement characters\n"
    )
    listing = run("sessions", "--db", str(path), cwd=tmp_path)  # previews the first message
    assert (listing.returncode, listing.stderr) == (0, "")
    for args in (("show", "s"), ("search", "数据"), ("export",)):
        done = run(*args, "--db", str(path), cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, warning), args
        assert "库\ufffd步 内存" in done.stdout, args
    stats = run("stats", "--db", str(path), cwd=tmp_path)
    assert stats.returncode == 0 and "21 (21 active, 0 rewound)" in stats.stdout
    bundle = run("export", "--db", str(path), cwd=tmp_path).stdout
    assert bundle.count('"format":"hermes-models-bundle"') == 1  # written once, not retried
    assert bundle.count('"type":"message"') == 21


def _diverge(path: Path) -> None:
    """Writes made while the file's triggers were missing (a tool that dropped and put
    them back): message 3 changed and message 4 deleted, and nothing lists them."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        kept = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE name IN"
                " ('messages_cjk_changed_update', 'messages_cjk_changed_delete')"
            ).fetchall()
        )
        for name in kept:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE messages SET content = '异步 unlisted' WHERE id = 3")
        conn.execute("DELETE FROM messages WHERE id = 4")
        for sql in kept.values():
            conn.execute(sql)
    finally:
        conn.close()


def test_optimize_finds_and_indexes_again_what_the_index_holds_wrongly(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    _diverge(path)
    with SessionDB(path) as store:
        found_wrong = grams.check(store.database)
        assert (found_wrong.wrong, found_wrong.stray, found_wrong.ok) == ([3], [4], False)
        store.update_search_index()
        assert grams.check(store.database).ok
    assert_exact(path)


# Console-script runs (~0.4 s each).
@pytest.mark.slow
def test_doctor_names_the_messages_the_index_holds_wrongly_and_fix_mends_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _indexed_store(path)
    _diverge(path)
    done = run("doctor", "--db", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert (
        "FAIL gram index matches messages: 1 message(s) whose grams differ: id 3; 1 id(s) "
        "held that are no message: 4 (19 messages checked;"
    ) in " ".join(done.stdout.split())
    fixed = run("doctor", "--fix", "--db", str(path), cwd=tmp_path)
    assert (fixed.returncode, fixed.stderr) == (0, "")
    lines = fixed.stdout.splitlines()
    assert lines[:2] == [
        "fixed: recounted 1 session",  # the delete left message_count behind too
        "fixed: indexed 2 messages again in the gram index (id 3, 4)",
    ]
    assert lines[-1].endswith("healthy (14 checks passed)")
    assert_exact(path)
