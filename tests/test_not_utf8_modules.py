"""Text that is not UTF-8 in the middle of a store, read through each SQLite module the
package can run on: the bundled pysqlite3 and the standard library's ``sqlite3``.

The two modules fail differently on such text. The standard library's raises and
hands the row over at the next ``fetchone``; pysqlite3 reads a row ahead, so the
failure loses the row before it and ends the statement, and it hands such text to an
SQL function as None instead of failing the call. Every read here must still see
every row, and a search must still find the damaged one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from console_script import environment, run

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

# each test runs a named SQLite module without a cipher
pytestmark = pytest.mark.plaintext_file

T0 = 1_700_000_000.0
MODULES = ("pysqlite3", "sqlite3")
#: Where the damaged message goes: neither first nor last, so rows on both sides count.
BEFORE, AFTER = 7, 5


def _store(path: Path, after: int = AFTER) -> tuple[list[int], int]:
    """A store of one session: ``BEFORE`` messages, one whose text is a truncated
    multi-byte write (another program's), ``after`` more; all ids, the damaged one."""
    with SessionDB(path) as store:
        store.create_session("s", "cli", started_at=T0)
        for i in range(BEFORE):
            store.append_message("s", "user", f"内存 {i} 事件", timestamp=T0 + i)
        store.update_search_index()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        damaged = "数据库".encode() + "异".encode()[:2] + "步 内存".encode()
        cursor = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('s', 'user', CAST(? AS TEXT), ?)",
            (damaged, T0 + BEFORE),
        )
        bad = int(cursor.lastrowid or 0)
    finally:
        conn.close()
    with SessionDB(path) as store:
        for i in range(after):
            store.append_message("s", "user", f"after {i} 数据", timestamp=T0 + BEFORE + 1 + i)
    conn = sqlite3.connect(path)
    try:
        ids = [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
    finally:
        conn.close()
    return ids, bad


def _env(tmp_path: Path, module: str) -> dict[str, str]:
    return environment(tmp_path, HERMES_MODELS_SQLITE=module)


@pytest.mark.parametrize("module", MODULES)
def test_export_streams_every_message_around_text_that_is_not_utf8(
    tmp_path: Path, module: str
) -> None:
    path = tmp_path / "state.db"
    ids, bad = _store(path)
    done = run("export", "--db", str(path), cwd=tmp_path, env=_env(tmp_path, module))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    messages = [line for line in lines if line.get("type") == "message"]
    assert [m["id"] for m in messages] == ids
    assert lines[0]["messages"] == len(ids) == BEFORE + 1 + AFTER
    shown = {m["id"]: m["content"] for m in messages}
    assert shown[bad] == "数据库\ufffd步 内存"
    assert shown[ids[-1]] == f"after {AFTER - 1} 数据"
    warning = (
        f"Warning: {path}: text that is not UTF-8 in message {bad} (content); "
        "shown with U+FFFD replacement characters"
    )
    # The standard library's SQLite (3.40.1 here) also warns of the WAL-reset bug.
    assert [line for line in done.stderr.splitlines() if "UTF-8" in line] == [warning]


@pytest.mark.parametrize("module", MODULES)
def test_search_finds_the_damaged_message_the_gram_index_has_not_read(
    tmp_path: Path, module: str
) -> None:
    # Written last by another program: no write of ours has indexed it, so the search
    # reads it itself (an SQL function of ours is handed its text).
    path = tmp_path / "state.db"
    ids, bad = _store(path, after=0)
    assert ids[-1] == bad
    done = run(
        "search", "数据", "--json", "--db", str(path), cwd=tmp_path, env=_env(tmp_path, module)
    )
    assert done.returncode == 0, done.stderr
    assert [hit["id"] for hit in json.loads(done.stdout)] == [bad]


@pytest.mark.parametrize("module", MODULES)
def test_a_streamed_query_of_our_own_loses_no_row(tmp_path: Path, module: str) -> None:
    # A peewee query read row by row (iterator(): fetchone): the row before the damaged
    # one and the damaged one itself both come, whichever module runs.
    path = tmp_path / "state.db"
    ids, bad = _store(path)
    code = (
        "import json, sys\n"
        "from hermes_models import Message, SessionDB\n"
        "from hermes_models.store.binding import using\n"
        "with SessionDB(sys.argv[1]) as store, using(store.database):\n"
        "    query = Message.select(Message.id, Message.content).order_by(Message.id)\n"
        "    print(json.dumps([[m.id, m.content] for m in query.iterator()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True, text=True, env=_env(tmp_path, module), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r[0] for r in rows] == ids
    assert rows[ids.index(bad)][1] == "数据库\ufffd步 内存"
