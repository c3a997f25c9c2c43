"""The gram index exact under every kind of writer: each row of the issue's table.

Each test writes a store the way one writer does (a copy of conversations
whose messages interleave, a merge, an import keeping ids, another program's
explicit ids, ``INSERT OR REPLACE``, ``UPDATE`` then our delete, text that is
not UTF-8) and compares every search of a 1-2 character CJK term with the
simplest correct answer: a substring test over the visible rows, in Python.
Under the old high-water mark each of them lost messages.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import examples
from console_script import run
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hermes_models import SessionDB, health

# The plain writers and the oracle run in this process: on the package's SQLite module,
# as two SQLite libraries in one process drop each other's POSIX locks on the file.
from hermes_models.driver import sqlite3
from hermes_models.store import grams
from hermes_models.store.binding import using
from hermes_models.transfer.copy import copy_store

from legacy import hermes_append

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
    report = copy_store(source, target)
    assert report.verified["messages"] == 24
    # The copy writes the second session's lower ids after the first's higher ones,
    # indexes what it wrote and checks the index by what it holds before "verified".
    assert oracle(target, "异步") == oracle(source, "异步") != set()
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("SELECT count(*) FROM messages_cjk_changed").fetchone() == (0,)
    finally:
        conn.close()
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
@pytest.mark.plaintext_file  # the bytes are written with the standard library's sqlite3
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
    assert lines[-1].endswith("healthy (17 checks passed)")
    assert_exact(path)


# -- the differential state machine --------------------------------------------------------
# Random interleavings of every kind of writer on one file; after every step each term's
# search is compared with the substring oracle. Under the old mark it fails within a few
# steps (an explicit id below the highest, a REPLACE, a merge, an import, a copy).

WORDS = ("alpha", "bravo", "kilo")
#: 1-2 character CJK terms (the gram index), 3+ (the trigram index) and words.
MACHINE_TERMS = ("数", "据", "数据", "异步", "内存", "セッ", "세션", "数据库", "事件循环", *WORDS)
PIECES = ("数据", "数据库", "异步", "内存", "事件循环", "セッション", "세션", "库", "步")
TEXTS = st.lists(st.sampled_from(PIECES + WORDS), min_size=1, max_size=4).map(" ".join)
KILLED_WRITER = """
import sys, time
from hermes_models import SessionDB
store = SessionDB(sys.argv[1])
store.create_session("killed", "cli")
n = 0
while True:
    n += 1
    store.append_message("killed", "user", f"数据库 异步 {n} 内存 alpha")
    if n % 7 == 0:
        store.update_search_index()
"""


class GramWriters(RuleBasedStateMachine):
    """One file, written by our API, a Hermes-style plain-sqlite3 writer (explicit ids,
    REPLACE, UPDATE, DELETE, INSERT ... SELECT, bytes that are not UTF-8), copies,
    merges, imports, a backup put back, and a process killed with SIGKILL mid-write."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gram-writers-"))
        self.path = self.dir / "state.db"
        self.files = 0
        self.store = SessionDB(self.path)
        self.store.create_session("s", "telegram", started_at=T0)
        self.at = T0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _plain(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, timeout=30)

    def _tick(self) -> float:
        self.at += 1.0
        return self.at

    def _side(self, texts: list[str]) -> Path:
        """A second store whose two sessions' messages interleave in time."""
        self.files += 1
        side = self.dir / f"side{self.files}.db"
        with SessionDB(side) as other:
            for k in (0, 1):
                other.create_session(f"x{self.files}-{k}", "telegram", started_at=T0 + k)
            for i, text in enumerate(texts):
                other.append_message(f"x{self.files}-{i % 2}", "user", text, timestamp=T0 + i)
        return side

    @rule(text=TEXTS)
    def api_append(self, text: str) -> None:
        self.store.append_message("s", "user", text, timestamp=self._tick())

    @rule(text=TEXTS, where=st.sampled_from(["free below", "above", "auto"]))
    def plain_insert(self, text: str, where: str) -> None:
        conn = self._plain()
        try:
            top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
            ids = {r[0] for r in conn.execute("SELECT id FROM messages")}
            free = [i for i in range(1, top) if i not in ids]
            if where == "free below" and free:
                message_id: int | None = free[len(free) // 2]
            elif where == "above":
                message_id = top + 50
            else:
                message_id = None
            hermes_append(
                conn, "s", "user", text, self._tick(), **({"id": message_id} if message_id else {})
            )
        finally:
            conn.close()

    @rule(text=TEXTS, pick=st.integers(0, 10**6))
    def plain_replace(self, text: str, pick: int) -> None:
        conn = self._plain()
        try:
            ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
            if ids:
                conn.execute(
                    "INSERT OR REPLACE INTO messages (id, session_id, role, content, timestamp)"
                    " VALUES (?, 's', 'user', ?, ?)",
                    (ids[pick % len(ids)], text, self._tick()),
                )
        finally:
            conn.close()

    @rule(
        text=TEXTS,
        pick=st.integers(0, 10**6),
        column=st.sampled_from(["content", "tool_name", "tool_calls"]),
    )
    def plain_update(self, text: str, pick: int, column: str) -> None:
        conn = self._plain()
        try:
            ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
            if ids:
                conn.execute(
                    f"UPDATE messages SET {column} = ? WHERE id = ?", (text, ids[pick % len(ids)])
                )
        finally:
            conn.close()

    @rule(pick=st.integers(0, 10**6))
    def plain_delete(self, pick: int) -> None:
        conn = self._plain()
        try:
            ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
            if ids:
                conn.execute("DELETE FROM messages WHERE id = ?", (ids[pick % len(ids)],))
        finally:
            conn.close()

    @rule()
    def plain_bulk_copy(self) -> None:
        conn = self._plain()
        try:
            conn.execute(
                "INSERT INTO messages (session_id, role, content, tool_name, timestamp)"
                " SELECT session_id, role, content, tool_name, timestamp + 1000 FROM messages"
                " WHERE id IN (SELECT id FROM messages ORDER BY id LIMIT 5)"
            )
        finally:
            conn.close()

    @rule()
    def plain_not_utf8(self) -> None:
        conn = self._plain()
        try:
            _damaged(conn, "s", self._tick())
        finally:
            conn.close()

    @rule(texts=st.lists(TEXTS, min_size=1, max_size=6))
    def merge(self, texts: list[str]) -> None:
        copy_store(self._side(texts), self.path, merge=True)

    @rule(texts=st.lists(TEXTS, min_size=1, max_size=6))
    def import_bundle(self, texts: list[str]) -> None:
        bundle = self.dir / f"b{self.files}.jsonl"
        with SessionDB(self._side(texts)) as other:
            other.export_bundle(bundle)
        self.store.import_bundle(bundle)

    @rule()
    def copy_and_go_on_with_the_copy(self) -> None:
        self.files += 1
        target = self.dir / f"copy{self.files}.db"
        self.store.close()
        copy_store(self.path, target)
        self.path = target
        self.store = SessionDB(self.path)

    @rule(text=TEXTS)
    def backup_write_on_and_restore(self, text: str) -> None:
        # A backup, writes after it, then the backup put back in place (docs/backup.md).
        self.files += 1
        saved = self.dir / f"backup{self.files}.db"
        self.store.backup(saved)
        self.store.append_message("s", "user", text, timestamp=self._tick())
        self.store.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(saved, self.path)
        self.store = SessionDB(self.path)

    @rule()
    def optimize(self) -> None:
        self.store.update_search_index()

    @rule(wait=st.sampled_from([0.3, 0.6, 0.9]))
    def kill_9_a_writer(self, wait: float) -> None:
        child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(self.path)])
        time.sleep(wait)
        child.send_signal(signal.SIGKILL)
        child.wait()

    @invariant()
    def every_search_is_the_oracles(self) -> None:
        for term in MACHINE_TERMS:
            assert found(self.store, term) == oracle(self.path, term), term

    @invariant()
    def doctor_sees_the_counters_a_recount_sees(self) -> None:
        # message_count is kept by each writer (plain SQL may leave it behind): doctor's
        # check must name exactly the sessions a count in Python finds wrong.
        conn = sqlite3.connect(self.path)
        try:
            stored = dict(conn.execute("SELECT id, COALESCE(message_count, 0) FROM sessions"))
            rows = [r[0] for r in conn.execute("SELECT session_id FROM messages")]
        finally:
            conn.close()
        wrong = {s for s, n in stored.items() if n != rows.count(s)}
        with using(self.store.database):
            named = {
                r["id"] for r in health.counter_mismatches() if r["message_count"] != r["messages"]
            }
        assert named == wrong


GramWriters.TestCase.settings = settings(
    max_examples=examples(12),
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Processes killed with SIGKILL, copies and merges of files: ~1 min in the full run.
TestGramIndexAgreesWithTheOracleUnderEveryWriter = pytest.mark.slow(GramWriters.TestCase)


# Hermes v16's released code in a process of its own (~5 s).
@pytest.mark.plaintext_file  # Hermes v16 writes with the standard library's sqlite3
@pytest.mark.slow
def test_a_real_hermes_v16_process_writing_beside_ours_leaves_every_search_exact(
    tmp_path: Path,
) -> None:
    from hermes_release import HermesProcess

    rng = random.Random(16)
    path = tmp_path / "state.db"
    store = SessionDB(path)
    store.create_session("ours", "cli", started_at=T0)
    with HermesProcess("v16", path) as hermes:
        hermes.call("create_session", "theirs", "telegram")

        def their_sql(text: str, params: tuple[object, ...]) -> None:
            hermes.sql("BEGIN IMMEDIATE")
            hermes.sql(text, params)
            hermes.sql("COMMIT")

        for step in range(80):
            text = " ".join(rng.choice(PIECES + WORDS) for _ in range(rng.randint(1, 4)))
            ids = [r[0] for r in hermes.sql("SELECT id FROM messages ORDER BY id")]
            kind = rng.choice(["ours", "theirs", "theirs", "replace", "update", "delete", "id"])
            if kind == "ours" or not ids:
                store.append_message("ours", "user", text, timestamp=T0 + step)
            elif kind == "theirs":
                hermes.call("append_message", "theirs", "assistant", text)
            elif kind == "replace":
                their_sql(
                    "INSERT OR REPLACE INTO messages (id, session_id, role, content, timestamp)"
                    " VALUES (?, 'theirs', 'user', ?, ?)",
                    (rng.choice(ids), text, T0 + step),
                )
            elif kind == "update":
                column = rng.choice(["content", "tool_name", "tool_calls"])
                their_sql(f"UPDATE messages SET {column} = ? WHERE id = ?", (text, rng.choice(ids)))
            elif kind == "delete":
                their_sql("DELETE FROM messages WHERE id = ?", (rng.choice(ids),))
            else:  # a free id below the highest, as a restore writes it
                free = sorted(set(range(1, max(ids))) - set(ids))
                if free:
                    their_sql(
                        "INSERT INTO messages (id, session_id, role, content, timestamp)"
                        " VALUES (?, 'theirs', 'user', ?, ?)",
                        (rng.choice(free), text, T0 + step),
                    )
            if step % 8 == 7:
                for term in MACHINE_TERMS:
                    assert found(store, term) == oracle(path, term), (step, term)
            if step == 40:
                store.update_search_index()
        # Hermes searches the file too (its own FTS5 word and trigram routes).
        assert hermes.call("search_messages", "alpha") is not None
        hermes.kill()
    for term in MACHINE_TERMS:
        assert found(store, term) == oracle(path, term), term
    store.update_search_index()
    assert grams.check(store.database).ok
    for term in MACHINE_TERMS:
        assert found(store, term) == oracle(path, term), term
    store.close()


MERGING = """
import sys
from hermes_models import SessionDB, health
from hermes_models.store import grams
from hermes_models.store.binding import using
store = SessionDB(sys.argv[1])
db = store.database
write = db.write
def stepped(fn):
    done = write(fn)
    print("step", flush=True)
    return done
db.write = stepped
grams.merge(db, pages=1)
print("merged", flush=True)
"""


# A process killed with SIGKILL, console-script runs (~1.5 s).
@pytest.mark.slow
def test_a_killed_merge_of_the_index_is_finished_by_optimize(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    rng = random.Random(9)
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for i in range(2000):  # many distinct grams: an index of many pages
            han = "".join(chr(rng.randint(0x4E00, 0x4FFF)) for _ in range(12))
            text = " ".join(rng.choice(PIECES + WORDS) for _ in range(2)) + f" {han}"
            hermes_append(conn, "s", "user", text, T0 + i)
    finally:
        conn.close()
    with SessionDB(path) as store:
        grams.catch_up(store.database, chunk=40)  # a segment per transaction
        before = grams.segments(store.database)
    assert before >= 2
    child = subprocess.Popen(
        [sys.executable, "-c", MERGING, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert [child.stdout.readline() for _ in range(3)] == ["step\n"] * 3
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    with SessionDB(path) as store:
        assert grams.segments(store.database) >= 2  # left half merged
    done = run("optimize", "--db", str(path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    with SessionDB(path) as store:
        assert grams.segments(store.database) == 1
        assert grams.check(store.database).ok
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("INSERT INTO messages_cjk (messages_cjk, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()
    assert_exact(path, MACHINE_TERMS)


@pytest.mark.postgresql
def test_a_copy_from_postgresql_of_interleaved_conversations_finds_every_message(
    tmp_path: Path, pg: Any
) -> None:
    source, target = tmp_path / "src.db", tmp_path / "copy.db"
    _interleaved(source)
    url = pg.new_database(migrated=False)
    copy_store(source, url)
    with SessionDB(url) as server:
        assert found(server, "异步") == oracle(source, "异步") != set()
    report = copy_store(url, target)
    assert report.verified["messages"] == 24
    assert oracle(target, "异步") == oracle(source, "异步")
    assert_exact(target)
