"""Deleting sessions with their tagged subagent runs, pruning, sweeping empty sessions,
removing transcript files, and compacting the file (library and SessionDB)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_models import Session, SessionDB
from hermes_models.conversations import maintenance
from hermes_models.driver import sqlite3
from hermes_models.store.binding import using

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def make(store: SessionDB, sid: str, at: float, messages: int = 1, **options: Any) -> str:
    store.create_session(sid, options.pop("source", "cli"), started_at=T0 + at, **options)
    for n in range(messages):
        store.append_message(sid, "user", f"{sid} message {n}", timestamp=T0 + at + n + 1)
    return sid


def end(sid: str, reason: str, at: float) -> None:
    Session.get_by_id(sid).end(reason, at=T0 + at)


def snapshot(store: SessionDB) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    conn = store._conn
    sessions = conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY id").fetchall()
    messages = conn.execute("SELECT id, session_id FROM messages ORDER BY id").fetchall()
    return [tuple(row) for row in sessions], [tuple(row) for row in messages]


@pytest.fixture
def tree(store: SessionDB) -> SessionDB:
    make(store, "top", 0, messages=2)
    make(store, "sub", 10, parent_session_id="top", model_config={"_delegate_from": "top"})
    make(store, "sub-sub", 20, parent_session_id="sub", model_config={"_delegate_from": "sub"})
    make(store, "sub-plain", 25, parent_session_id="sub")  # untagged: kept
    make(store, "sub-fork", 30, parent_session_id="sub", model_config={"_branched_from": "sub"})
    make(store, "live-child", 35, parent_session_id="top")  # untagged, parent live: kept
    make(store, "fork", 40, parent_session_id="top", model_config={"_branched_from": "top"})
    end("top", "compression", 100)
    make(store, "cont", 100, parent_session_id="top", messages=2)
    make(store, "other", 200, messages=3)
    return store


def refuse_deleting(store: SessionDB, session_id: str) -> None:
    """Make deleting ``session_id`` fail inside the database (a trigger of the test's own)."""
    if store.database.dialect == "postgresql":
        store._conn.execute(
            "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF OLD.id = '{session_id}' THEN"
            " RAISE EXCEPTION 'refused by test' USING ERRCODE = '23000'; END IF;"
            " RETURN OLD; END $$"
        )
        store._conn.execute(
            "CREATE TRIGGER refuse_delete BEFORE DELETE ON sessions"
            " FOR EACH ROW EXECUTE FUNCTION refuse_delete()"
        )
    else:
        store._conn.execute(
            f"CREATE TRIGGER refuse_delete BEFORE DELETE ON sessions WHEN old.id = '{session_id}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
        )


def allow_deleting(store: SessionDB) -> None:
    on = " ON sessions" if store.database.dialect == "postgresql" else ""
    store._conn.execute(f"DROP TRIGGER refuse_delete{on}")


def test_delete_takes_only_tagged_subagent_runs(tree: SessionDB) -> None:
    assert tree.delete_session("top") is True
    sessions, messages = snapshot(tree)
    assert sessions == [
        ("cont", None),
        ("fork", None),
        ("live-child", None),
        ("other", None),
        ("sub-fork", None),
        ("sub-plain", None),
    ]
    assert sorted({sid for _, sid in messages}) == [s for s, _ in sessions]
    assert tree.message_count() == 2 + 1 + 1 + 3 + 1 + 1
    if tree.database.dialect == "sqlite":  # PostgreSQL checks every foreign key as it writes
        assert tree._conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert tree.delete_session("top") is False


@pytest.mark.backends("sqlite")  # FTS5's own tables (PostgreSQL's indexes are of messages itself)
def test_deleted_messages_leave_the_search_indexes(tree: SessionDB) -> None:
    tree.delete_session("top")
    conn = tree._conn
    for table in ("messages_fts", "messages_fts_trigram"):
        indexed = [row[0] for row in conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        assert indexed == [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


def test_delete_sessions_counts_the_ones_that_existed(tree: SessionDB) -> None:
    assert tree.delete_sessions(["other", "cont", "missing", "cont", None, "", 7]) == 2
    assert [row[0] for row in snapshot(tree)[0]] == [
        "fork",
        "live-child",
        "sub",
        "sub-fork",
        "sub-plain",
        "sub-sub",
        "top",
    ]
    assert tree.delete_sessions(iter(["sub"])) == 1
    assert [row for row in snapshot(tree)[0] if row[0].startswith("sub")] == [
        ("sub-fork", None),
        ("sub-plain", None),
    ]
    with pytest.raises(TypeError, match="session_ids"):
        tree.delete_sessions("other")


@pytest.mark.backends("sqlite")  # SQLite's data_version and total_changes
def test_deleting_nothing_touches_nothing(tree: SessionDB) -> None:
    conn = tree._conn
    before = conn.execute("PRAGMA data_version").fetchone()
    changes = conn.total_changes
    assert tree.delete_sessions([]) == 0
    assert tree.delete_sessions([None, "", 3]) == 0
    assert conn.total_changes == changes
    assert conn.execute("PRAGMA data_version").fetchone() == before


def test_a_failed_delete_changes_nothing(tree: SessionDB) -> None:
    before = snapshot(tree)
    refuse_deleting(tree, "sub-sub")
    with pytest.raises(sqlite3.IntegrityError, match="refused by test"):
        tree.delete_session("top")
    assert snapshot(tree) == before


def test_library_functions_follow_the_same_rules(tree: SessionDB) -> None:
    with using(tree.database):
        assert maintenance.delegate_descendants(["top"]) == ["sub", "sub-sub"]
        assert maintenance.delegate_descendants(["top", "sub"]) == ["sub-sub"]
        assert maintenance.delete_session("top") is True
        assert maintenance.delete_sessions(["other", "missing"]) == 1
    assert [row[0] for row in snapshot(tree)[0]] == [
        "cont",
        "fork",
        "live-child",
        "sub-fork",
        "sub-plain",
    ]


def test_prune_removes_old_ended_sessions_and_orphans_their_children(store: SessionDB) -> None:
    now = time.time()
    store.create_session("old-ended", "cli", started_at=now - 100 * 86400)
    store.end_session("old-ended", "done")
    store.create_session("old-open", "cli", started_at=now - 100 * 86400)
    store.create_session("old-tg", "telegram", started_at=now - 100 * 86400)
    store.end_session("old-tg", "done")
    store.create_session("recent", "cli", started_at=now - 5 * 86400)
    store.end_session("recent", "done")
    for child, config in (("branch", {"_branched_from": "old-ended"}), ("run", None)):
        store.create_session(
            child, "cli", parent_session_id="old-ended", model_config=config, started_at=now - 1
        )
    store.create_session(
        "tagged",
        "cli",
        parent_session_id="old-ended",
        model_config={"_delegate_from": "old-ended"},
        started_at=now - 1,
    )
    store.append_message("tagged", "user", "work")
    assert store.prune_sessions(older_than_days=90, source="cli") == 1
    assert sorted(s.id for s in Session.select()) == [
        "branch",
        "old-open",
        "old-tg",
        "recent",
        "run",
        "tagged",
    ]
    assert [store.get_session(c)["parent_session_id"] for c in ("branch", "run", "tagged")] == [
        None,
        None,
        None,
    ]
    assert [m["content"] for m in store.get_messages("tagged")] == ["work"]
    assert store.prune_sessions(older_than_days=90) == 1
    assert store.prune_sessions(older_than_days=1) == 1
    assert sorted(s.id for s in Session.select()) == ["branch", "old-open", "run", "tagged"]
    with pytest.raises(ValueError, match="older_than_days"):
        store.prune_sessions(older_than_days=-1)


def test_empty_sessions_are_ended_unarchived_and_without_any_message(store: SessionDB) -> None:
    now = time.time()
    store.create_session("live-empty", "cli", started_at=now - 3 * 86400)
    store.create_session("ended-empty", "cli", started_at=now)
    store.end_session("ended-empty", "done")
    store.create_session("archived-empty", "cli", started_at=now)
    store.end_session("archived-empty", "done")
    store.set_session_archived("archived-empty", True)
    store.create_session("rewound", "cli", started_at=now)
    store.rewind_to_message("rewound", store.append_message("rewound", "user", "undone"))
    store.end_session("rewound", "done")
    store.create_session("orchestrator", "cli", started_at=now)
    store.end_session("orchestrator", "done")
    store.create_session(
        "worker",
        "cli",
        parent_session_id="orchestrator",
        model_config={"_delegate_from": "orchestrator"},
    )
    store.append_message("worker", "assistant", "the real work")
    store.create_session("full", "cli", started_at=now - 3 * 86400)
    store.append_message("full", "user", "hi")
    store.end_session("full", "done")
    assert store.count_empty_sessions() == 2
    assert store.delete_empty_sessions() == 2
    assert sorted(s.id for s in Session.select()) == [
        "archived-empty",
        "full",
        "live-empty",
        "rewound",
        "worker",
    ]
    assert store.get_session("worker")["parent_session_id"] is None
    assert [m["content"] for m in store.get_messages("worker")] == ["the real work"]
    assert store.count_empty_sessions() == 0


def test_a_counter_that_disagrees_with_the_rows_keeps_the_session(store: SessionDB) -> None:
    store.create_session("says-empty", "cli")
    store.append_message("says-empty", "user", "but is not")
    store.end_session("says-empty", "done")
    store.create_session("says-full", "cli")
    store.end_session("says-full", "done")
    store._conn.execute("UPDATE sessions SET message_count = 0 WHERE id = 'says-empty'")
    store._conn.execute("UPDATE sessions SET message_count = 3 WHERE id = 'says-full'")
    store._conn.commit()
    assert store.count_empty_sessions() == 0
    assert store.delete_empty_sessions() == 0
    assert store.delete_session_if_empty("says-empty") is False
    assert store.session_count() == 2


def test_delete_session_if_empty(store: SessionDB) -> None:
    store.create_session("blank", "cli")
    store.create_session("titled", "cli")
    store.set_session_title("titled", "keep me")
    store.create_session("talked", "cli")
    store.append_message("talked", "user", "hello")
    store.create_session("parent", "cli")
    store.create_session("child", "cli", parent_session_id="parent")
    assert [
        store.delete_session_if_empty(sid)
        for sid in ("titled", "talked", "parent", "blank", "blank", "missing")
    ] == [False, False, False, True, False, False]
    assert sorted(s.id for s in Session.select()) == ["child", "parent", "talked", "titled"]


def test_prune_with_nothing_to_prune_takes_no_write_lock(store: SessionDB, db_path: Path) -> None:
    now = time.time()
    store.create_session("recent", "cli", started_at=now - 5 * 86400)
    store.end_session("recent", "done")
    store.create_session("old-open", "cli", started_at=now - 100 * 86400)
    other = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock throughout
    try:
        assert store.prune_sessions(older_than_days=90) == 0
        assert store.prune_sessions(older_than_days=90, source="cli") == 0
        with pytest.raises(TypeError, match="sessions_dir"):
            store.prune_sessions(older_than_days=90, sessions_dir=3)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sorted(s.id for s in Session.select()) == ["old-open", "recent"]


def test_prune_empty_ghost_sessions(store: SessionDB) -> None:
    old = time.time() - 2 * 86400
    for sid, source in (("ghost", "tui"), ("cli-empty", "cli"), ("ghost-kid", "tui")):
        store.create_session(sid, source, started_at=old)
        store.end_session(sid, "tui_shutdown")
    store.create_session("young", "tui")
    store.end_session("young", "tui_shutdown")
    store.create_session("open", "tui", started_at=old)
    store.create_session("child", "tui", parent_session_id="ghost-kid")
    store.append_message("child", "user", "kept")
    assert store.prune_empty_ghost_sessions() == 2
    assert sorted(s.id for s in Session.select()) == ["child", "cli-empty", "open", "young"]
    assert store.get_session("child")["parent_session_id"] is None


# -- transcript files ------------------------------------------------------------------------


def files(folder: Path, *names: str) -> Path:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text(name, encoding="utf-8")
    return folder


def test_deleting_removes_the_transcript_files_of_every_deleted_session(
    tree: SessionDB, tmp_path: Path
) -> None:
    folder = files(
        tmp_path / "sessions",
        "top.json",
        "top.jsonl",
        "request_dump_top_20260101_120000_000001.json",
        "request_dump_top_1.json",
        "sub.jsonl",
        "request_dump_sub-sub_x.json",
        "cont.json",
        "request_dump_cont_1.json",
        "top.json.bak",
        "request_dump_top_1.txt",
        "request_dump_top.json",
        "notes.txt",
    )
    assert tree.delete_session("top", sessions_dir=folder) is True
    assert sorted(os.listdir(folder)) == [
        "cont.json",
        "notes.txt",
        "request_dump_cont_1.json",
        "request_dump_top.json",
        "request_dump_top_1.txt",
        "top.json.bak",
    ]


def test_every_deleting_method_removes_files(store: SessionDB, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    old = time.time() - 200 * 86400
    names = []
    for sid, source in (("a", "cli"), ("b", "cli"), ("c", "cli"), ("d", "cli"), ("e", "tui")):
        store.create_session(sid, source, started_at=time.time() if sid == "d" else old)
        names += [f"{sid}.json", f"{sid}.jsonl", f"request_dump_{sid}_1.json"]
    store.create_session("f", "cli")
    store.append_message("f", "user", "kept")
    names += ["f.json"]
    files(folder, *names)
    store.append_message("b", "user", "something")
    store.append_message("c", "user", "something")
    for sid in ("b", "c", "d", "e"):
        store.end_session(sid, "done")
    assert store.delete_sessions(["a"], sessions_dir=str(folder)) == 1
    assert store.prune_sessions(90, source="cli", sessions_dir=folder) == 2  # b, c
    assert store.delete_session_if_empty("d", sessions_dir=folder) is True
    assert store.prune_empty_ghost_sessions(sessions_dir=folder) == 1  # e
    assert os.listdir(folder) == ["f.json"]
    store.create_session("g", "cli")
    store.end_session("g", "done")
    files(folder, "g.jsonl")
    assert store.delete_empty_sessions(sessions_dir=folder) == 1
    assert os.listdir(folder) == ["f.json"]


def test_files_are_removed_only_after_the_commit(tree: SessionDB, tmp_path: Path) -> None:
    folder = files(tmp_path / "sessions", "top.json")
    refuse_deleting(tree, "top")
    with pytest.raises(sqlite3.IntegrityError):
        tree.delete_session("top", sessions_dir=folder)
    assert os.listdir(folder) == ["top.json"]
    allow_deleting(tree)
    db = tree.database
    with using(db), db.atomic():
        assert maintenance.delete_session("top", sessions_dir=folder) is True
        assert os.listdir(folder) == ["top.json"]  # not committed yet
    assert os.listdir(folder) == []


@pytest.mark.parametrize(
    "session_id",
    ["../outside", "sub/dir", "..", ".", "*", "[ab]", "?", "top*", "a\\b"],
)
def test_ids_never_reach_outside_the_folder_or_act_as_patterns(
    store: SessionDB, tmp_path: Path, session_id: str
) -> None:
    folder = tmp_path / "sessions"
    files(folder, "top.json", "request_dump_top_1.json", "a.json", "b.jsonl", "sub")
    (folder / "sub").unlink()
    files(folder / "sub", "dir.json")
    outside = files(tmp_path, "outside.json", "outside.jsonl")
    store.create_session(session_id, "cli")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert store.delete_session(session_id, sessions_dir=folder) is True
    after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
    assert (outside / "outside.json").exists()


def test_a_literal_glob_id_removes_its_own_files_only(store: SessionDB, tmp_path: Path) -> None:
    folder = files(
        tmp_path / "sessions",
        "[ab].json",
        "a.json",
        "request_dump_[ab]_1.json",
        "request_dump_a_1.json",
        "request_dump_*_1.json",
    )
    store.create_session("[ab]", "cli")
    store.delete_session("[ab]", sessions_dir=folder)
    assert sorted(os.listdir(folder)) == [
        "a.json",
        "request_dump_*_1.json",
        "request_dump_a_1.json",
    ]


def test_a_dump_of_a_longer_id_that_still_exists_is_kept(store: SessionDB, tmp_path: Path) -> None:
    folder = files(
        tmp_path / "sessions",
        "request_dump_cron_job_1.json",
        "request_dump_cron_job_daily_1.json",
        "request_dump_cron_job_weekly_1.json",
    )
    store.create_session("cron_job", "cron")
    store.create_session("cron_job_daily", "cron")
    store.delete_session("cron_job", sessions_dir=folder)
    # cron_job_daily exists: its dump stays; cron_job_weekly does not exist.
    assert sorted(os.listdir(folder)) == ["request_dump_cron_job_daily_1.json"]


def test_file_errors_are_ignored(store: SessionDB, tmp_path: Path) -> None:
    store.create_session("a", "cli")
    store.create_session("b", "cli")
    folder = files(tmp_path / "sessions")
    (folder / "a.json").mkdir()  # cannot be unlinked
    assert store.delete_session("a", sessions_dir=folder) is True
    assert store.delete_session("b", sessions_dir=tmp_path / "missing") is True
    assert store.session_count() == 0
    with pytest.raises(TypeError, match="sessions_dir"):
        store.delete_session("a", sessions_dir=42)


# -- compacting ------------------------------------------------------------------------------


@pytest.mark.backends("sqlite")  # the file, its WAL and FTS5's triggers
def test_optimize_and_vacuum_keep_everything(tree: SessionDB) -> None:
    before = snapshot(tree)
    assert tree.optimize_fts() == 2
    assert tree.vacuum() == 2
    assert snapshot(tree) == before
    assert os.path.getsize(f"{tree.db_path}-wal") == 0
    assert tree._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.backends("sqlite")  # FTS5's segments
def test_vacuum_merges_the_gram_index_too_and_searches_find_the_same(tree: SessionDB) -> None:
    """`vacuum` said it merged the search indexes and left the gram index in as many
    segments as transactions had written it (each of its lookups searches every one)."""
    texts = [f"第{i}条 数据库 {'国我' if i % 3 == 0 else '事件'} note {i}" for i in range(40)]
    tree.create_session("cjk", "cli")
    for text in texts:  # one transaction each: one new segment each, until FTS5 merges
        tree.append_message("cjk", "user", text)
    conn = tree._conn

    def segments() -> int:
        return int(conn.execute("SELECT count(DISTINCT segid) FROM messages_cjk_idx").fetchone()[0])

    def found(term: str) -> list[str]:
        hits = tree.search_messages(term, limit=None, time_budget=None)
        return sorted(
            conn.execute("SELECT content FROM messages WHERE id = ?", (h["id"],)).fetchone()[0]
            for h in hits
        )

    terms = ("国我", "数", "事件", "条 数")
    expected = {term: sorted(t for t in texts if term in t) for term in terms}
    assert segments() > 1
    assert {term: found(term) for term in terms} == expected
    assert tree.vacuum() == 2  # Hermes' two indexes, as Hermes counts
    assert segments() == 1
    assert {term: found(term) for term in terms} == expected
    assert (
        conn.execute(
            "INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('integrity-check', 0)"
        ).fetchall()
        == []
    )


@pytest.mark.backends("sqlite")  # the file, its WAL and FTS5's triggers
def test_vacuum_counts_only_the_indexes_present(tree: SessionDB) -> None:
    conn = tree._conn
    for event in ("insert", "delete", "update"):
        conn.execute(f"DROP TRIGGER messages_fts_trigram_{event}")
    conn.execute("DROP TABLE messages_fts_trigram")
    conn.commit()
    assert tree.vacuum() == 1


def test_vacuum_on_a_read_only_store_is_refused(tree: SessionDB) -> None:
    from hermes_models import ReadOnlyDatabaseError

    tree.close()
    reader = SessionDB(tree.db_path, read_only=True)
    try:
        with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
            reader.vacuum()
        assert reader.session_count() == 9
    finally:
        reader.close()
