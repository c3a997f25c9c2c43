"""``stats`` and ``doctor``: counts and sizes, and a check-up that names what is wrong,
never writes, and repairs counters and the message id sequence with ``--fix``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import plain_connection, target_of
from console_script import environment, make_read_only, run, run_unprivileged

import hermes_models
from hermes_models import Message, SessionDB, driver, health, write
from hermes_models.checks import INT64_MAX
from hermes_models.driver import sqlite3

import legacy

pytestmark = pytest.mark.backends("sqlite", "postgresql")

CHECKS = [
    "sqlite",
    "journal mode",
    "schema_version",
    "integrity_check",
    "foreign_key_check",
    "parent links",
    "fts integrity-check messages_fts",
    "messages_fts triggers",
    "messages_fts matches messages",
    "fts integrity-check messages_fts_trigram",
    "messages_fts_trigram triggers",
    "messages_fts_trigram matches messages",
    "gram index matches messages",
    "fts integrity-check messages_cjk",
    "session counters",
    "message id sequence",
    "privacy",
]


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v16 file (an adopted Hermes v15 file) with 18 messages, one of them rewound."""
    path = legacy.build(tmp_path_factory.mktemp("health") / "state.db", 15)
    SessionDB(path).close()
    assert not Path(f"{path}-wal").exists()
    return path


@pytest.fixture
def store_file(store_template: Path, tmp_path: Path) -> Path:
    """A copy of the store template, for one test, private (doctor warns otherwise)."""
    path = tmp_path / "state.db"
    shutil.copy2(store_template, path)
    os.chmod(path, 0o600)
    return path


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _doctor(path: Path) -> dict[str, Any]:
    db = hermes_models.connect(path, migrate=False, read_only=True)
    try:
        return health.doctor(db)
    finally:
        db.close()


def _failed(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- stats ----------------------------------------------------------------------------------


def test_stats_counts_sessions_messages_sizes_and_index_rows(store_file: Path) -> None:
    with SessionDB(store_file) as store:
        report = health.stats(store.database)
        sizes = (store_file.stat().st_size, Path(f"{store_file}-wal").stat().st_size)
    assert report == {
        "path": str(store_file),
        "schema_version": 16,
        "journal_mode": "wal",
        "sessions": 8,
        "messages": 18,
        "active_messages": 17,
        "inactive_messages": 1,
        "file_bytes": sizes[0],
        "wal_bytes": sizes[1],
        "fts_rows": {"messages_fts": 18, "messages_fts_trigram": 18},
        "fts_in_step": True,
        "fts_layout": 0,
        "newer_than_writes": False,
        "sqlite": driver.sqlite_info(),
        "exposed": False,
        "search_indexes": {
            "messages_fts": "used",
            "messages_fts_trigram": "used",
            # An adopted Hermes file: its messages wait for hermes-models optimize.
            "messages_cjk": "used (18 messages written or changed since indexed: searches read "
            "them themselves until hermes-models optimize)",
        },
    }


def test_stats_notices_an_index_out_of_step(store_file: Path) -> None:
    _sql(
        store_file,
        "DROP TRIGGER messages_fts_trigram_insert",
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('cont-2', 'user', 'x', 9)",
    )
    # Read-only: a writable open would rebuild the index first (see the next test).
    with SessionDB(store_file, read_only=True) as store:
        report = health.stats(store.database)
    assert (report["messages"], report["fts_rows"], report["fts_in_step"]) == (
        19,
        {"messages_fts": 19, "messages_fts_trigram": 18},
        False,
    )


def test_a_writable_open_rebuilds_an_index_that_lost_a_trigger(store_file: Path) -> None:
    _sql(
        store_file,
        "DROP TRIGGER messages_fts_trigram_insert",
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('cont-2', 'user', '重建之后', 9)",
    )
    with SessionDB(store_file) as store:
        report = health.stats(store.database)
        found = [hit["session_id"] for hit in store.search_messages("重建之后")]
    assert (report["messages"], report["fts_rows"], report["fts_in_step"]) == (
        19,
        {"messages_fts": 19, "messages_fts_trigram": 19},
        True,
    )
    assert found == ["cont-2"]


# -- doctor: what it finds --------------------------------------------------------------------


def test_doctor_passes_a_sound_file_and_changes_nothing(store_file: Path) -> None:
    before, digest = legacy.dump(store_file), _digest(store_file)
    report = _doctor(store_file)
    assert report["path"] == str(store_file)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert [c["detail"] for c in report["checks"]][-3:-1] == [
        "every session's counters match its messages",
        f"{INT64_MAX - 18:,} ids left",
    ]
    info = driver.sqlite_info()
    bug = "has the WAL-reset bug" if info["wal_reset_bug"] else "without the WAL-reset bug"
    assert [c["detail"] for c in report["checks"]][:2] == [
        f"{info['version']} ({info['module']}; source {info['source_id']}), {bug}",
        "wal",
    ]
    assert all(c["ok"] for c in report["checks"])
    assert (legacy.dump(store_file), _digest(store_file)) == (before, digest)


def test_doctor_needs_no_lock_while_another_process_writes(store_file: Path) -> None:
    holder = sqlite3.connect(store_file, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE sessions SET title = title")
        report = _doctor(store_file)  # a write (or a write lock) would fail here
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert report["ok"] is True


def test_doctor_names_a_missing_trigger_and_the_unindexed_message(store_file: Path) -> None:
    _sql(
        store_file,
        "DROP TRIGGER messages_fts_insert",
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('cont-2', 'user', 'x', 9)",
        "UPDATE sessions SET message_count = message_count + 1 WHERE id = 'cont-2'",
    )
    report = _doctor(store_file)
    assert report["ok"] is False
    assert _failed(report) == {
        "messages_fts triggers": "missing messages_fts_insert",
        "messages_fts matches messages": "1 message(s) not indexed, 0 stray, 0 out of date",
    }


def test_doctor_finds_stale_index_text_and_a_corrupt_index(store_file: Path) -> None:
    _sql(
        store_file,
        "UPDATE messages_fts_trigram SET content = 'changed' WHERE rowid = 1",
        "UPDATE messages_fts_data SET block = zeroblob(length(block)) WHERE id > 10",
    )
    failed = _failed(_doctor(store_file))
    # SQLite's words for it: older builds (3.40) say the image is malformed.
    assert failed.pop("fts integrity-check messages_fts") in (
        "database disk image is malformed",
        'fts5: corruption found reading blob 2336462209025 from table "messages_fts"',
    )
    assert failed == {
        "messages_fts_trigram matches messages": "0 message(s) not indexed, 0 stray, 1 out of date",
    }


def test_doctor_finds_dangling_references(store_file: Path) -> None:
    conn = sqlite3.connect(store_file)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE sessions SET parent_session_id = 'ghost' WHERE id = 'branch-zh'")
    conn.commit()
    rowid = conn.execute("SELECT rowid FROM sessions WHERE id = 'branch-zh'").fetchone()[0]
    conn.close()
    assert _failed(_doctor(store_file)) == {
        "foreign_key_check": f"1 dangling reference(s): sessions row {rowid} -> sessions",
    }


def test_doctor_finds_sessions_in_a_loop_of_parent_links(store_file: Path) -> None:
    # A damaged file: a session that is its own parent, and two that are each other's.
    conn = sqlite3.connect(store_file)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.executemany(
        "INSERT INTO sessions (id, source, started_at, parent_session_id) VALUES (?, 'cli', 1, ?)",
        [("self", "self"), ("ping", "pong"), ("pong", "ping"), ("below", "ping")],
    )
    conn.commit()
    conn.close()
    assert _failed(_doctor(store_file)) == {
        "parent links": "4 session(s) in or below 2 loop(s) of parent links, hidden from "
        "listings (a loop starts at 'ping', 'self'); set one parent_session_id of each loop "
        "to NULL to show them",
    }
    with SessionDB(store_file) as store:  # as Hermes, listings hide them (each has a parent)
        assert {"self", "ping", "pong"} & {
            r["id"] for r in store.list_sessions_rich(limit=None)
        } == set()


def test_doctor_reports_an_old_schema_without_upgrading_it(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    before = legacy.dump(path)
    report = _doctor(path)
    assert _failed(report) == {"schema_version": "10: expected 16 (run `hermes-models migrate`)"}
    assert [c["name"] for c in report["checks"]] == [
        "sqlite",
        "journal mode",
        "schema_version",
        "integrity_check",
        "foreign_key_check",
        "parent links",
        "fts integrity-check messages_fts",
        "fts integrity-check messages_fts_trigram",
        "message id sequence",
        "privacy",
    ]
    assert legacy.dump(path) == before


@pytest.mark.slow  # console-script runs
def test_doctor_warns_when_others_can_read_the_store_and_fix_makes_it_private(
    store_file: Path,
) -> None:
    # A store made by another program keeps its mode (the package never changes it):
    # doctor warns, and only --fix takes the group and other bits away.
    os.chmod(store_file, 0o644)
    os.chmod(store_file.parent, 0o777)
    try:
        with SessionDB(store_file) as store:
            store.create_session("written", "cli")  # a writable open leaves the mode alone
        assert stat.S_IMODE(store_file.stat().st_mode) == 0o644
        report = _doctor(store_file)
        (privacy,) = [c for c in report["checks"] if c["name"] == "privacy"]
        assert privacy == {
            "name": "privacy",
            "ok": True,
            # The -wal and -shm are the doctor's own read's, made with the file's mode.
            "detail": f"warning: others can read or plant files: {store_file} is mode 0644;"
            f" {store_file}-wal is mode 0644; {store_file}-shm is mode 0644;"
            f" {store_file.parent} is mode 0777; `hermes-models doctor --fix` makes the"
            " files 0600; others can write the folder: keep the store in a private one (0700)",
        }
        assert report["ok"] is True
        wide = environment(store_file.parent, COLUMNS="400")
        shown = run("doctor", "--db", str(store_file), cwd=store_file.parent, env=wide)
        assert shown.returncode == 0
        assert next(line for line in shown.stdout.splitlines() if "privacy" in line).startswith(
            "warn privacy: warning: others can read"
        )
        fixed = run("doctor", "--fix", "--db", str(store_file), cwd=store_file.parent, env=wide)
        assert fixed.returncode == 0, fixed.stderr
        assert f"fixed: made {store_file} private (0644 -> 0600)" in fixed.stdout.splitlines()
        assert stat.S_IMODE(store_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(store_file.parent.stat().st_mode) == 0o777  # a folder is advice
        after = _doctor(store_file)
        (privacy,) = [c for c in after["checks"] if c["name"] == "privacy"]
        assert privacy["detail"] == (
            f"warning: others can read or plant files: {store_file.parent} is mode 0777;"
            " others can write the folder: keep the store in a private one (0700)"
        )
    finally:
        os.chmod(store_file.parent, 0o700)
    assert [c["detail"] for c in _doctor(store_file)["checks"] if c["name"] == "privacy"] == [
        "only the owner can read the store's files"
    ]


# -- counters and the id sequence -------------------------------------------------------------


@pytest.fixture
def store(store: SessionDB) -> SessionDB:
    """The backend's store (conftest) holding a session with two messages."""
    store.create_session("kept", "cli", started_at=1_767_603_600.0)
    store.append_message("kept", "user", "hello")
    store.append_message("kept", "assistant", None, tool_calls=[{"id": "a"}, {"id": "b"}])
    return store


def _raw(store: SessionDB, db_path: Path, *statements: str) -> None:
    """Run ``statements`` on the store through a connection of the test's own."""
    with plain_connection(store.database, db_path) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def _set_sequence(store: SessionDB, db_path: Path, value: int) -> None:
    """Stand the message id sequence at ``value``, behind the package's back."""
    if store.database.dialect == "postgresql":
        _raw(store, db_path, f"SELECT setval(pg_get_serial_sequence('messages', 'id'), {value})")
    else:
        _raw(store, db_path, f"UPDATE sqlite_sequence SET seq = {value} WHERE name = 'messages'")


def _on_file(store: SessionDB) -> bool:
    """True on SQLite: ``doctor`` checks files (a server store refuses it: test_cli.py)."""
    return bool(store.database.dialect == "sqlite")


@pytest.mark.backends("postgresql")  # a server store (a file's stats: above)
def test_stats_of_a_server_store_count_and_name_the_servers_indexes(
    store: SessionDB, tmp_path: Path
) -> None:
    late = store.append_message("kept", "user", "rewound")
    store.rewind_to_message("kept", late)
    target = str(target_of(store.database))
    expected = {
        "path": store.database.path,
        "schema_version": 16,
        "journal_mode": None,
        "sessions": 1,
        "messages": 3,
        "active_messages": 2,
        "inactive_messages": 1,
        "file_bytes": None,
        "wal_bytes": None,
        "fts_rows": {},
        "fts_in_step": None,
        "fts_layout": None,
        "newer_than_writes": False,
        "search_indexes": {
            "idx_messages_search_tsv": "used",
            "idx_messages_search_trgm": "used",
            "idx_messages_cjk_grams": "used",
        },
    }
    assert health.stats(store.database) == expected
    records = run("stats", "--db", target, "--json", cwd=tmp_path)
    assert (records.returncode, json.loads(records.stdout)) == (0, [expected])
    table = run("stats", "--db", target, cwd=tmp_path, env=environment(tmp_path, COLUMNS="200"))
    assert (table.returncode, table.stderr) == (0, "")
    assert [" ".join(line.split()) for line in table.stdout.splitlines()] == [
        f"store {store.database.path}",
        "schema v16",
        "sessions 1",
        "messages 3 (2 active, 1 rewound)",
    ]


def test_a_plain_peewee_insert_leaves_counters_behind_and_doctor_says_so(
    store: SessionDB, db_path: Path
) -> None:
    write(lambda: Message.create(session="kept", role="user", content="by hand", timestamp=1.0))
    assert store.get_session("kept")["message_count"] == 2  # Message.create keeps no counter
    assert health.counter_mismatches(store.database) == [
        {"id": "kept", "message_count": 2, "messages": 3, "tool_call_count": 2, "tool_calls": 2}
    ]
    if _on_file(store):
        assert _failed(_doctor(db_path)) == {
            "session counters": "1 session(s) disagree with their messages: kept (message_count"
            " 2, 3 messages; tool_call_count 2, 2 tool calls) (`hermes-models doctor --fix`"
            " recounts them)"
        }
    assert health.repair(store.database) == {
        "recounted": ["kept"],
        "sequence": None,
        "regrammed": [],
        "trigram_index": None,
    }
    assert store.get_session("kept")["message_count"] == 3
    assert health.counter_mismatches(store.database) == []
    if _on_file(store):
        assert _doctor(db_path)["ok"] is True


@pytest.mark.backends("sqlite")  # the words of doctor, which checks files
def test_many_wrong_counters_are_named_five_at_a_time(store: SessionDB, db_path: Path) -> None:
    for index in range(7):
        store.create_session(f"s{index}", "cli")
    _sql(db_path, "UPDATE sessions SET message_count = 9")
    detail = _failed(_doctor(db_path))["session counters"]
    assert detail.startswith("8 session(s) disagree with their messages: kept (message_count 9,")
    assert "s3 (message_count 9, 0 messages; tool_call_count 0, 0 tool calls) and 3 more" in detail


def test_a_sequence_near_its_limit_is_flagged_and_lowered(store: SessionDB, db_path: Path) -> None:
    _set_sequence(store, db_path, INT64_MAX - 10)
    assert health.message_sequence(store.database) == {
        "sequence": INT64_MAX - 10,
        "max_id": 2,
        "remaining": 10,
    }
    if _on_file(store):
        assert _failed(_doctor(db_path)) == {
            "message id sequence": f"at {INT64_MAX - 10}: only 10 ids left before 2**63-1, after"
            " which no message can be appended (`hermes-models doctor --fix` lowers it to the "
            "highest id in use)"
        }
    assert health.repair(store.database) == {
        "recounted": [],
        "sequence": [INT64_MAX - 10, 2],
        "regrammed": [],
        "trigram_index": None,
    }
    assert store.append_message("kept", "user", "appends again") == 3
    assert health.message_sequence(store.database) == {
        "sequence": 3,
        "max_id": 3,
        "remaining": INT64_MAX - 3,
    }
    if _on_file(store):
        assert _doctor(db_path)["ok"] is True


@pytest.mark.backends("postgresql")  # a file's repair holds its one write lock
def test_a_sequence_is_not_lowered_below_an_id_another_client_is_adding(
    store: SessionDB, db_path: Path
) -> None:
    # Another client (an import keeping a bundle's ids, say) has added message 40 in a
    # transaction that commits 0.5 s after the repair began. Lowering the sequence to
    # the highest id the repair's snapshot saw (2) would hand 40 out again later.
    _set_sequence(store, db_path, INT64_MAX - 10)
    with plain_connection(store.database, db_path) as other:
        other.execute("BEGIN")
        other.execute(
            "INSERT INTO messages (id, session_id, role, content, timestamp)"
            " VALUES (40, 'kept', 'user', 'kept id', 1.0)"
        )
        committer = threading.Timer(0.5, other.execute, ("COMMIT",))
        committer.start()
        try:
            lowered = health.repair(store.database)
        finally:
            committer.join(30)
    assert lowered == {
        "recounted": ["kept"],
        "sequence": [INT64_MAX - 10, 40],
        "regrammed": [],
        "trigram_index": None,
    }
    assert store.append_message("kept", "user", "after") == 41


def test_a_sequence_lowered_with_no_message_left_starts_again_at_1(
    store: SessionDB, db_path: Path
) -> None:
    store.delete_session("kept")
    _set_sequence(store, db_path, INT64_MAX - 10)
    assert health.repair(store.database) == {
        "recounted": [],
        "sequence": [INT64_MAX - 10, 0],
        "regrammed": [],
        "trigram_index": None,
    }
    store.create_session("again", "cli")
    assert store.append_message("again", "user", "first again") == 1


def test_a_sequence_the_messages_themselves_exhaust_is_not_lowered(
    store: SessionDB, db_path: Path
) -> None:
    _raw(store, db_path, f"UPDATE messages SET id = {INT64_MAX - 5} WHERE id = 2")
    _set_sequence(store, db_path, INT64_MAX - 5)
    if _on_file(store):
        detail = _failed(_doctor(db_path))["message id sequence"]
        assert detail.endswith(
            "(the highest message id itself is that close: the messages must be renumbered)"
        )
    assert health.repair(store.database) == {
        "recounted": [],
        "sequence": None,
        "regrammed": [],
        "trigram_index": None,
    }
    assert health.message_sequence(store.database)["sequence"] == INT64_MAX - 5


# -- the command line --------------------------------------------------------------------------


def test_cli_doctor_prints_each_check_and_a_verdict(store_file: Path) -> None:
    wide = environment(store_file.parent, COLUMNS="200")
    result = run("doctor", "--db", str(store_file), cwd=store_file.parent, env=wide)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"ok   {name}" for name in CHECKS]
    assert lines[-1] == f"{store_file}: healthy (17 checks passed)"


@pytest.mark.slow  # console-script runs
def test_cli_doctor_exits_1_when_a_check_fails(store_file: Path) -> None:
    _sql(store_file, "DROP TRIGGER messages_fts_trigram_update")
    result = run("doctor", "--db", str(store_file), cwd=store_file.parent)
    assert result.returncode == 1
    assert (
        "FAIL messages_fts_trigram triggers: missing messages_fts_trigram_update" in result.stdout
    )
    assert result.stdout.splitlines()[-1] == f"{store_file}: 1 of 17 checks failed"
    records = run("doctor", "--db", str(store_file), "--json", cwd=store_file.parent)
    assert records.returncode == 1
    assert [c["name"] for c in json.loads(records.stdout) if not c["ok"]] == [
        "messages_fts_trigram triggers"
    ]


@pytest.mark.slow  # console-script runs
@pytest.mark.backends("sqlite")  # doctor checks files (a server store refuses it: test_cli.py)
def test_cli_doctor_fix_recounts_and_then_passes(store: SessionDB, db_path: Path) -> None:
    write(lambda: Message.create(session="kept", role="user", content="by hand", timestamp=1.0))
    store.close()
    before = run("doctor", "--db", str(db_path), cwd=db_path.parent)
    assert before.returncode == 1
    assert "FAIL session counters: 1 session(s) disagree" in " ".join(before.stdout.split())
    fixed = run("doctor", "--fix", "--db", str(db_path), cwd=db_path.parent)
    assert (fixed.returncode, fixed.stderr) == (0, "")
    assert fixed.stdout.splitlines()[0] == "fixed: recounted 1 session"
    assert fixed.stdout.splitlines()[-1] == f"{db_path}: healthy (17 checks passed)"
    refused = run("--read-only", "doctor", "--fix", "--db", str(db_path), cwd=db_path.parent)
    assert refused.returncode == 2


@pytest.mark.slow  # console-script runs as another user
def test_cli_doctor_reads_a_file_it_cannot_write(store_file: Path) -> None:
    folder = store_file.parent
    for sidecar in folder.glob("state.db-*"):
        sidecar.unlink()
    digest = _digest(store_file)
    make_read_only(store_file, folder)
    try:
        result = run_unprivileged("doctor", "--db", str(store_file), cwd=folder)
        stats = run_unprivileged("stats", "--db", str(store_file), "--nl", cwd=folder)
        writing = run_unprivileged("vacuum", "--db", str(store_file), cwd=folder)
    finally:
        folder.chmod(0o755)
        store_file.chmod(0o600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{store_file}: healthy (17 checks passed)"
    assert "read_only=True" not in result.stderr
    assert json.loads(stats.stdout)["sessions"] == 8
    assert writing.returncode == 1
    assert writing.stderr.splitlines()[-1] == (
        f"Error: {store_file} cannot be written here (the file or its folder is read-only)"
    )
    assert _digest(store_file) == digest
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"]


def test_cli_doctor_on_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = run("doctor", "--db", str(tmp_path / "none.db"), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"Error: no database at {tmp_path / 'none.db'}\n"
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow  # console-script runs
def test_cli_stats_prints_the_report(store_file: Path) -> None:
    records = run("stats", "--db", str(store_file), "--json", cwd=store_file.parent)
    assert records.returncode == 0
    [report] = json.loads(records.stdout)
    assert (report["sessions"], report["messages"], report["fts_rows"]) == (
        8,
        18,
        {"messages_fts": 18, "messages_fts_trigram": 18},
    )
    wide = environment(store_file.parent, COLUMNS="200")
    table = run("stats", "--db", str(store_file), cwd=store_file.parent, env=wide)
    assert table.returncode == 0
    rows = [" ".join(line.split()) for line in table.stdout.splitlines()]
    assert rows[1:4] == [
        "schema v16 (wal journal)",
        "sessions 8",
        "messages 18 (17 active, 1 rewound)",
    ]
    info = hermes_models.sqlite_info()
    bug = "has" if info["wal_reset_bug"] else "without"
    assert rows[4:6] == [
        f"SQLite {info['version']} ({info['module']}), {bug} the WAL-reset bug",
        f"SQLite source {info['source_id']}",
    ]
    assert rows[8:] == [
        "messages_fts 18 rows (in step)",
        "messages_fts_trigram 18 rows (in step)",
    ]


def test_python_dash_m_doctor(store_file: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hermes_models", "doctor", "--db", str(store_file), "--nl"],
        env=environment(store_file.parent),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(CHECKS)
