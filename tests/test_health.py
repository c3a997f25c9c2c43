"""``stats`` and ``doctor``: counts and sizes, and a check-up that names what is wrong."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import hermes_models
from hermes_models import SessionDB, health
from hermes_models.cli import cli

import legacy

CHECKS = [
    "schema_version",
    "integrity_check",
    "foreign_key_check",
    "fts integrity-check messages_fts",
    "messages_fts triggers",
    "messages_fts matches messages",
    "fts integrity-check messages_fts_trigram",
    "messages_fts_trigram triggers",
    "messages_fts_trigram matches messages",
]


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    """A v16 file (an adopted Hermes v15 file) with 18 messages, one of them rewound."""
    path = legacy.build(tmp_path / "state.db", 15)
    SessionDB(path).close()
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
    db = hermes_models.connect(path, migrate=False)
    try:
        return health.doctor(db)
    finally:
        db.close()


def _failed(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}


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


def test_doctor_passes_a_sound_file_and_changes_nothing(store_file: Path) -> None:
    before = legacy.dump(store_file)
    report = _doctor(store_file)
    assert report["path"] == str(store_file)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert all(c["ok"] for c in report["checks"])
    assert legacy.dump(store_file) == before


def test_doctor_names_a_missing_trigger_and_the_unindexed_message(store_file: Path) -> None:
    _sql(
        store_file,
        "DROP TRIGGER messages_fts_insert",
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('cont-2', 'user', 'x', 9)",
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
    assert _failed(_doctor(store_file)) == {
        "fts integrity-check messages_fts": "database disk image is malformed",
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


def test_doctor_reports_an_old_schema_without_upgrading_it(tmp_path: Path) -> None:
    path = legacy.build(tmp_path / "state.db", 10)
    before = legacy.dump(path)
    report = _doctor(path)
    assert _failed(report) == {"schema_version": "10: expected 16 (run `hermes-models migrate`)"}
    assert [c["name"] for c in report["checks"]] == [
        "schema_version",
        "integrity_check",
        "foreign_key_check",
        "fts integrity-check messages_fts",
        "fts integrity-check messages_fts_trigram",
    ]
    assert legacy.dump(path) == before


# -- the command line -----------------------------------------------------------------------


def test_cli_doctor_prints_each_check_and_a_verdict(store_file: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", "--db", str(store_file)])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"ok   {name}" for name in CHECKS]
    assert lines[-1] == f"{store_file}: healthy (9 checks passed)"


def test_cli_doctor_exits_1_when_a_check_fails(store_file: Path) -> None:
    _sql(store_file, "DROP TRIGGER messages_fts_trigram_update")
    result = CliRunner().invoke(cli, ["doctor", "--db", str(store_file)])
    assert result.exit_code == 1
    assert (
        "FAIL messages_fts_trigram triggers: missing messages_fts_trigram_update" in result.output
    )
    assert result.output.splitlines()[-1] == f"{store_file}: 1 of 9 checks failed"


def test_cli_doctor_on_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", "--db", str(tmp_path / "none.db")])
    assert (result.exit_code, result.output) == (
        1,
        f"Error: no database at {tmp_path / 'none.db'}\n",
    )
    assert not (tmp_path / "none.db").exists()


def test_cli_stats_prints_the_report(store_file: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["stats", "--db", str(store_file), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert (report["sessions"], report["messages"], report["fts_rows"]) == (
        8,
        18,
        {"messages_fts": 18, "messages_fts_trigram": 18},
    )
    table = runner.invoke(cli, ["stats", "--db", str(store_file)])
    assert table.exit_code == 0
    rows = [" ".join(line.split()) for line in table.output.splitlines()]
    assert rows[1:4] == [
        "schema v16 (wal journal)",
        "sessions 8",
        "messages 18 (17 active, 1 rewound)",
    ]
    assert rows[6:] == [
        "messages_fts 18 rows (in step)",
        "messages_fts_trigram 18 rows (in step)",
    ]
