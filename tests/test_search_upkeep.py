"""A SQLite build without FTS5 never makes the loss of the search index permanent.

A child process imports ``no_fts5`` (every connection then behaves like a
build without FTS5) and opens, writes and searches; the next open here, with
FTS5, builds the missing indexes, fills them from every message (those
written meanwhile too) and only then records schema version 16.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

import legacy

TESTS = Path(__file__).parent
FTS_OBJECTS = sorted(
    name
    for table in ("messages_fts", "messages_fts_trigram")
    for name in (table, f"{table}_insert", f"{table}_delete", f"{table}_update")
)


def without_fts5(path: Path, code: str) -> str:
    """Run ``code`` (with ``path`` and ``SessionDB`` bound) where SQLite lacks FTS5."""
    program = "import no_fts5\nfrom hermes_models import SessionDB\n" + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "HERMES_HOME": str(path.parent / "home")}
    done = subprocess.run(
        [sys.executable, "-c", f"path = {str(path)!r}\n{program}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def fts_objects(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return sorted(
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')"
                f" AND name IN ({', '.join('?' * len(FTS_OBJECTS))})",
                FTS_OBJECTS,
            )
        )
    finally:
        conn.close()


def version(path: Path) -> list[tuple[int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT version FROM schema_version").fetchall()
    finally:
        conn.close()


def in_step(store: SessionDB) -> None:
    conn = store._conn
    ids = [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
    for table in ("messages_fts", "messages_fts_trigram"):
        assert [row[0] for row in conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid")] == ids
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


@pytest.mark.slow
def test_a_file_created_without_fts5_gets_its_indexes_on_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    out = without_fts5(
        path,
        """
        with SessionDB(path) as store:
            store.create_session("s", "cli")
            store.append_message("s", "user", "written while the index was missing")
            store.append_message("s", "user", "没有索引的时候写的")
            print(len(store.search_messages("missing")), len(store.search_messages("索引的")))
        """,
    )
    assert out == "1 1\n"
    assert fts_objects(path) == []
    assert version(path) == [(16,)]  # a new file: Hermes writes 16 too
    with SessionDB(path) as store:
        assert fts_objects(path) == FTS_OBJECTS
        in_step(store)
        assert [h["snippet"] for h in store.search_messages("missing")] == [
            "written while the index was >>>missing<<<  "
        ]
        assert [h["session_id"] for h in store.search_messages("索引的")] == ["s"]


@pytest.mark.slow
@pytest.mark.parametrize("old", [6, 10, 15])
def test_an_upgrade_without_fts5_keeps_the_old_version_until_the_index_is_built(
    tmp_path: Path, old: int
) -> None:
    path = legacy.build(tmp_path / "state.db", old)
    count = len(legacy.MESSAGES) - (0 if old >= 12 else 1)
    out = without_fts5(
        path,
        """
        with SessionDB(path) as store:
            store.append_message("cont-2", "user", "upgraded without an index")
            print(store.message_count(include_inactive=True))
        """,
    )
    assert out == f"{count + 1}\n"
    assert version(path) == [(old,)]
    # The old tables cannot be dropped without FTS5; their triggers are gone.
    assert [n for n in fts_objects(path) if n.endswith(("_insert", "_delete", "_update"))] == []
    with SessionDB(path) as store:
        assert version(path) == [(16,)]
        in_step(store)
        assert [h["session_id"] for h in store.search_messages("upgraded index")] == ["cont-2"]
        assert [h["session_id"] for h in store.search_messages("事件循环")] == ["root-zh"] * 2


@pytest.mark.slow
def test_a_build_without_fts5_drops_the_triggers_so_writes_keep_working(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("s", "cli")
        store.append_message("s", "user", "indexed before")
    out = without_fts5(
        path,
        """
        with SessionDB(path) as store:
            store.append_message("s", "user", "written without the index")
            store.rewind_to_message("s", 1)
            store.restore_rewound("s", 1)
            print(store.message_count())
        """,
    )
    assert out == "2\n"
    assert fts_objects(path) == ["messages_fts", "messages_fts_trigram"]  # inert tables
    with SessionDB(path) as store:
        assert fts_objects(path) == FTS_OBJECTS
        in_step(store)
        assert [h["snippet"] for h in store.search_messages("without")] == [
            "written >>>without<<< the index  "
        ]


def test_an_index_lost_in_this_process_is_rebuilt_by_the_next_open(db_path: Path) -> None:
    first = SessionDB(db_path)
    first.create_session("s", "cli")
    conn = first._conn
    for table in ("messages_fts", "messages_fts_trigram"):
        for event in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER {table}_{event}")
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    first.append_message("s", "user", "while nothing indexed it")
    with SessionDB(db_path) as second:
        assert fts_objects(db_path) == FTS_OBJECTS
        in_step(second)
        assert [h["id"] for h in second.search_messages("nothing")] == [1]
    first.close()
