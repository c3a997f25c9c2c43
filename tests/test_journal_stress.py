"""The journal policy under load: several processes write one file and checkpoint it at
the same time, in each mode the policy can give a file, then the file is checked whole.

Each mode runs for ``HERMES_MODELS_STRESS_SECONDS`` (default 8 s: the slow tier's budget;
raise it to run for minutes). Every message a writer was told was committed must be
there, once, with its text; ``PRAGMA integrity_check``, every FTS5 check and doctor pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hermes_models
from hermes_models import SessionDB, driver, health

pytestmark = [
    pytest.mark.slow,  # processes writing for seconds
    pytest.mark.plaintext_file,  # some of them on the standard library's sqlite3
]

SECONDS = float(os.environ.get("HERMES_MODELS_STRESS_SECONDS", "8"))
WRITERS = 4

#: One writer: appends (text, CJK, multimodal), searches, and a checkpoint every 25
#: appends; prints the ids it was told were committed, and the lock errors it saw (on
#: a DELETE file a reader can wait out the 1 s busy timeout while the others write).
WRITER = r"""
import json, sys, time
from hermes_models import SessionDB
from hermes_models.driver import standard

path, name, mode, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
committed, locked, read_locked, n = [], 0, 0, 0
deadline = time.monotonic() + seconds
while True:  # opening reads the file: on a DELETE file it may wait out the timeout too
    try:
        store = SessionDB(path, journal_mode=None if mode == "default" else mode)
        store.create_session(name, "cli")
        break
    except standard.OperationalError as exc:
        if "locked" not in str(exc) or time.monotonic() > deadline:
            raise
        read_locked += 1
while time.monotonic() < deadline:
    n += 1
    content = (
        [{"type": "text", "text": f"{name} part {n} lighthouse"}]
        if n % 7 == 0
        else f"{name} message {n} 数据库 checkpoint"
    )
    try:
        committed.append([store.append_message(name, "user", content), n])
    except standard.OperationalError as exc:  # what Hermes' callers catch
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        locked += 1
    if n % 25 == 0:
        try:
            store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            store.search_messages("数据库")
        except standard.OperationalError as exc:  # a reader waits 1 s at most, as Hermes'
            if "locked" not in str(exc):
                raise
            read_locked += 1
mode_seen = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
store.close()
print(json.dumps({"committed": committed, "locked": locked, "read_locked": read_locked,
                  "mode": mode_seen}))
"""


#: ``PRAGMA integrity_check`` and every FTS5 ``integrity-check`` of a file, run on the
#: SQLite of the process (3.44+ runs FTS5's check inside integrity_check, and a trigram
#: index one version wrote fails another's check: see test_sqlite_versions).
CHECKER = r"""
import json, sys
from hermes_models.driver import sqlite3
conn = sqlite3.connect(sys.argv[1])
integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
checks = {}
for (name,) in conn.execute(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%using fts5%'"
).fetchall():
    try:
        conn.execute(f"INSERT INTO {name}({name}) VALUES('integrity-check')")
        checks[name] = "ok"
    except sqlite3.DatabaseError as exc:
        checks[name] = str(exc)
conn.rollback()
mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
print(json.dumps([integrity, sorted(set(checks.values())), mode]))
"""


@pytest.mark.parametrize(
    ("module", "mode", "expected"),
    [
        ("pysqlite3", "default", "wal"),  # a new file on the fixed SQLite
        ("pysqlite3", "delete", "delete"),
        ("sqlite3", "default", "delete"),  # the standard library's 3.40.1: kept out of WAL
    ],
)
def test_many_processes_writing_and_checkpointing_one_file_lose_nothing(
    tmp_path: Path, module: str, mode: str, expected: str
) -> None:
    path = tmp_path / "state.db"
    env = {**os.environ, "HERMES_MODELS_SQLITE": module, "HERMES_HOME": str(tmp_path)}
    env.pop("HERMES_MODELS_JOURNAL_MODE", None)
    # The file is made by one process first, as a store is (the migrations under a lock).
    made = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), "maker", mode, "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["mode"] == expected
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{n}", mode, str(SECONDS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    results = []
    for writer in writers:
        out, err = writer.communicate(timeout=SECONDS + 120)
        assert writer.returncode == 0, err
        results.append(json.loads(out))
    assert {r["mode"] for r in results} == {expected}
    committed = {
        (f"w{n}", message_id, count)
        for n, result in enumerate(results)
        for message_id, count in result["committed"]
    }
    assert len(committed) > WRITERS * 10  # they did write, at the same time
    # Checked by the SQLite that wrote it; doctor below runs on this process's.
    checked = subprocess.run(
        [sys.executable, "-c", CHECKER, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout) == [["ok"], ["ok"], expected]
    db = hermes_models.connect(path)
    try:
        report = health.doctor(db)
    finally:
        db.close()
    failed = [c for c in report["checks"] if not c["ok"]]
    # On this process's fixed SQLite a WAL file is not exposed; a DELETE file never is.
    assert failed == [], failed
    with SessionDB(path, read_only=True) as store:
        found = set()
        for n in range(WRITERS):
            for message in store.get_messages(f"w{n}"):
                content = message["content"]
                text = content[0]["text"] if isinstance(content, list) else content
                count = int(text.split()[2])
                found.add((f"w{n}", message["id"], count))
                assert text in (
                    f"w{n} part {count} lighthouse",
                    f"w{n} message {count} 数据库 checkpoint",
                )
            assert store.get_session(f"w{n}")["message_count"] == sum(
                1 for who, _, _ in committed if who == f"w{n}"
            )
        # Every commit a writer was told of is there, and nothing else.
        assert found == committed
        assert len(store.search_messages("lighthouse", limit=None)) == sum(
            1 for _, _, count in committed if count % 7 == 0
        )
    assert driver.SQLITE_VERSION_INFO >= (3, 51, 3)
