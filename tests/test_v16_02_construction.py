"""HERMES_V16 §3.2: constructing, closing and reading through a SessionDB, as Hermes callers do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hermes_models import ReadOnlyDatabaseError, Session, SessionDB, using
from hermes_models.driver import sqlite3
from hermes_models.store import postgres

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def test_constructor_keywords_and_attributes(tmp_path: Path) -> None:
    store = SessionDB(db_path=tmp_path / "state.db", read_only=False)
    assert store.db_path == tmp_path / "state.db"
    assert store.read_only is False
    store.close()
    reader = SessionDB(db_path=tmp_path / "state.db", read_only=True)
    assert reader.read_only is True
    reader.close()


def test_max_title_length_is_a_class_constant() -> None:
    assert SessionDB.MAX_TITLE_LENGTH == 100
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        SessionDB.sanitize_title("x" * 101)


def test_close_twice_is_safe_and_use_after_close_is_refused(tmp_path: Path) -> None:
    store = SessionDB(tmp_path / "state.db")
    store.close()
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store._conn  # noqa: B018
    with pytest.raises(sqlite3.ProgrammingError):
        store.get_session("s1")


# -- _conn: raw SQL the way Hermes callers write it ------------------------------------------


def test_conn_rows_are_indexed_by_name_and_by_position(store: SessionDB, backend: str) -> None:
    store.create_session("s1", "telegram", model="m1")
    row = store._conn.execute(
        "SELECT id, source, model FROM sessions WHERE id = ?", ("s1",)
    ).fetchone()
    # On PostgreSQL _conn takes the same SQL and gives rows that read the same way.
    assert isinstance(row, sqlite3.Row if backend == "sqlite" else postgres.Row)
    assert (row["id"], row["source"], row["model"]) == ("s1", "telegram", "m1")
    assert row[1] == "telegram"
    assert dict(row) == {"id": "s1", "source": "telegram", "model": "m1"}
    if backend == "sqlite":
        assert store._conn.row_factory is sqlite3.Row


def test_peewee_keeps_reading_tuples_on_the_same_connection(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store._conn.execute("SELECT * FROM sessions").fetchall()
    # peewee reads its rows by position; the row factory of _conn must not leak into it.
    cursor = store.database.execute_sql("SELECT id, source FROM sessions")
    assert cursor.fetchall() == [("s1", "cli")]
    with using(store.database):
        assert [s.id for s in Session.select()] == ["s1"]
        assert list(Session.select(Session.id, Session.source).tuples()) == [("s1", "cli")]
        assert list(Session.select(Session.id).dicts()) == [{"id": "s1"}]
    assert store.get_session("s1")["source"] == "cli"


def test_raw_writes_through_conn_are_seen_by_the_methods(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    store._conn.execute("UPDATE sessions SET title = ? WHERE id = ?", ("raw", "s1"))
    store._conn.commit()
    assert store.get_session_title("s1") == "raw"


def test_execute_write_commits_what_fn_does_and_returns_its_value(store: SessionDB) -> None:
    store.create_session("s1", "cli")

    def rename(conn: sqlite3.Connection) -> int:
        cursor = conn.execute("UPDATE sessions SET title = 'via hook' WHERE id = 's1'")
        row = conn.execute("SELECT title FROM sessions WHERE id = 's1'").fetchone()
        assert row["title"] == "via hook"
        return cursor.rowcount

    assert store._execute_write(rename) == 1
    assert SessionDB(store.db_path).get_session_title("s1") == "via hook"


def test_execute_write_rolls_back_and_propagates_errors(store: SessionDB) -> None:
    store.create_session("s1", "cli")

    def half_done(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE sessions SET title = 'half' WHERE id = 's1'")
        raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        store._execute_write(half_done)
    assert store.get_session_title("s1") is None

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO messages (session_id, role, timestamp) VALUES ('nope', 'user', 1)"
        )

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        store._execute_write(orphan)


def test_lock_guards_raw_reads_from_many_threads(store: SessionDB) -> None:
    store.create_session("s1", "cli")
    seen: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(20):
                with store._lock:
                    row = store._conn.execute("SELECT id FROM sessions").fetchone()
                seen.append(row["id"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seen == ["s1"] * 80


# -- read-only handles ----------------------------------------------------------------------


def test_read_only_handle_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "hello")
    reader = SessionDB(path, read_only=True)
    assert reader.get_session("s1")["message_count"] == 1
    assert [m["content"] for m in reader.get_messages("s1")] == ["hello"]
    assert reader._conn.execute("SELECT COUNT(*) AS n FROM messages").fetchone()["n"] == 1
    with pytest.raises(ReadOnlyDatabaseError):
        reader.create_session("s2", "cli")
    with pytest.raises(sqlite3.OperationalError):
        reader.set_meta("k", "v")
    reader.close()


def test_read_only_open_does_not_repair_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s1", "cli")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
        "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master "
        "WHERE name = 'idx_messages_session'"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        SessionDB(path, read_only=True)
    assert list(tmp_path.glob("state.db.malformed-backup-*")) == []
