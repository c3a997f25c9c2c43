"""One file shared both ways between this package on the bundled SQLite (3.53) and
Hermes v16's own code on the system's SQLite (3.40.1 here): each writes what the other
wrote, and ``PRAGMA integrity_check`` and every FTS5 ``integrity-check`` pass on both.

FTS5's trigram tokenizer of 3.40 reads a text only up to its first NUL; 3.53 reads all
of it. A multimodal message (stored as ``"\\x00json:..."``) indexed by one version then
fails the other version's FTS5 ``integrity-check`` although nothing is wrong: the
test reproduces it, and doctor says it is a version difference, not a malformed index.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from console_script import environment, run
from hermes_release import HermesError, HermesProcess

import hermes_models
from hermes_models import SessionDB, driver, health
from hermes_models.driver import sqlite3

pytestmark = [
    pytest.mark.slow,  # starts Hermes v16 in a process of its own
    pytest.mark.plaintext_file,  # two SQLites without a cipher write one file
]

T0 = 1_700_000_000.0
MULTIMODAL = [
    {"type": "text", "text": "what is in this picture of a lighthouse"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]
#: FTS5's own check of a search index.
CHECK = "INSERT INTO {0}({0}) VALUES('integrity-check')"


def _fts_tables(rows: list[Any]) -> list[str]:
    return sorted(str(row[0]) for row in rows)


FTS_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%using fts5%'"


def _our_checks(path: Path) -> tuple[list[str], dict[str, str]]:
    """``PRAGMA integrity_check`` and each FTS5 check on this package's SQLite."""
    conn = sqlite3.connect(path)
    try:
        integrity = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        results: dict[str, str] = {}
        for table in _fts_tables(conn.execute(FTS_TABLES).fetchall()):
            try:
                conn.execute(CHECK.format(table))
                results[table] = "ok"
            except sqlite3.DatabaseError as exc:
                results[table] = str(exc)
        conn.rollback()
        return integrity, results
    finally:
        conn.close()


def _hermes_checks(hermes: HermesProcess) -> tuple[list[str], dict[str, str]]:
    """The same checks run on Hermes' own connection (its SQLite)."""
    integrity = [str(row[0]) for row in hermes.sql("PRAGMA integrity_check")]
    results: dict[str, str] = {}
    for table in _fts_tables(hermes.sql(FTS_TABLES)):
        try:
            hermes.sql(CHECK.format(table))
            results[table] = "ok"
        except HermesError as exc:
            results[table] = exc.message
    return integrity, results


ALL_OK = {"messages_cjk": "ok", "messages_fts": "ok", "messages_fts_trigram": "ok"}
V16_OK = {"messages_fts": "ok", "messages_fts_trigram": "ok"}


def _doctor(path: Path) -> dict[str, Any]:
    db = hermes_models.connect(path)
    try:
        return health.doctor(db)
    finally:
        db.close()


def _details(report: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    return {c["name"]: (c["ok"], c["detail"]) for c in report["checks"]}


def test_the_two_sqlites_differ_as_the_test_needs() -> None:
    assert driver.SQLITE_VERSION_INFO >= (3, 51, 3)
    assert driver.standard.sqlite_version_info < (3, 44, 0)


@pytest.mark.parametrize("first", ["ours", "hermes"])
def test_a_file_is_written_in_turn_by_both_sqlites_and_checks_out_on_each(
    tmp_path: Path, first: str
) -> None:
    path = tmp_path / "state.db"
    in_o: list[str] = []  # session "o"'s messages, in order
    if first == "hermes":
        with HermesProcess("v16", path) as hermes:
            hermes.call("create_session", "h", "cli")
            hermes.call("append_message", "h", "user", "Hermes made this file 数据库设计")
    for turn in range(2):
        with SessionDB(path) as ours:
            assert ours._conn.execute("SELECT sqlite_version()").fetchone()[0] == (
                driver.SQLITE_VERSION
            )
            if ours.get_session("o") is None:
                ours.create_session("o", "cli", started_at=T0)
            text = f"ours turn {turn}: 检索 sqlite lighthouse{turn}"
            ours.append_message(
                "o", "assistant", text, tool_calls=[{"id": f"c{turn}", "function": {}}]
            )
            in_o.append(text)
            assert ours.search_messages("检索")[0]["session_id"] == "o"
        assert _our_checks(path) == (["ok"], ALL_OK)
        report = _doctor(path)
        assert report["ok"] is True, [c for c in report["checks"] if not c["ok"]]
        with HermesProcess("v16", path) as hermes:
            assert hermes.sqlite_version == driver.standard.sqlite_version
            # Hermes v16 does not know the gram index; every index it knows checks out.
            integrity, checks = _hermes_checks(hermes)
            assert (integrity, {k: checks[k] for k in V16_OK}) == (["ok"], V16_OK)
            assert [m["content"] for m in hermes.call("get_messages", "o")] == in_o
            found = hermes.call("search_messages", f"lighthouse{turn}")
            assert [hit["session_id"] for hit in found] == ["o"]
            hermes.call("append_message", "o", "user", f"Hermes turn {turn} 设计模式")
            in_o.append(f"Hermes turn {turn} 设计模式")
            integrity, checks = _hermes_checks(hermes)
            assert (integrity, {k: checks[k] for k in V16_OK}) == (["ok"], V16_OK)
        assert _our_checks(path) == (["ok"], ALL_OK)
        with SessionDB(path, read_only=True) as ours:
            assert [m["content"] for m in ours.get_messages("o")] == in_o
            if first == "hermes":
                assert ours.search_messages("数据库设计")[0]["session_id"] == "h"
            hits = ours.search_messages(f'"Hermes turn {turn}"')
            assert [h["session_id"] for h in hits] == ["o"]
            assert ours.search_messages("设计模式")[0]["session_id"] == "o"
    assert _doctor(path)["ok"] is True


def test_a_multimodal_row_hermes_indexed_on_3_40_is_a_version_difference_to_doctor(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as ours:
        ours.create_session("s", "cli", started_at=T0)
        ours.append_message("s", "user", "a plain text message", timestamp=T0 + 1)
    with HermesProcess("v16", path) as hermes:
        hermes.call("append_message", "s", "user", MULTIMODAL)
        stored = hermes.sql(
            "SELECT substr(hex(CAST(content AS BLOB)), 1, 14) FROM messages WHERE id = 2"
        )
        assert stored == [["006A736F6E3A5B"]]  # "\x00json:["
        integrity, checks = _hermes_checks(hermes)
        assert (integrity, {k: checks[k] for k in V16_OK}) == (["ok"], V16_OK)
    # The same index, checked by 3.53's FTS5: its trigram reads past the NUL.
    integrity, checks = _our_checks(path)
    assert checks["messages_fts"] == "ok"
    assert checks["messages_fts_trigram"] != "ok"  # the difference, reproduced
    report = _doctor(path)
    details = _details(report)
    ok, detail = details["fts integrity-check messages_fts_trigram"]
    assert ok is True
    assert detail.startswith(
        "ok, with a version difference: 1 message(s) holding a NUL character (multimodal "
        "content, stored as \\x00json:...) were indexed by an older SQLite"
    )
    assert details["integrity_check"] == (True, "ok")
    assert report["ok"] is True, [c for c in report["checks"] if not c["ok"]]
    # Nothing was changed by the check, and search finds the message on this side.
    assert _our_checks(path)[1]["messages_fts_trigram"] == checks["messages_fts_trigram"]
    with SessionDB(path, read_only=True) as ours:
        assert [h["id"] for h in ours.search_messages("lighthouse")] == [2]
        assert ours.get_messages("s")[1]["content"] == MULTIMODAL


def test_a_multimodal_row_indexed_on_3_53_is_not_called_malformed_on_3_40(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as ours:
        ours.create_session("s", "cli", started_at=T0)
        ours.append_message("s", "user", MULTIMODAL, timestamp=T0 + 1)
    assert _our_checks(path) == (["ok"], ALL_OK)
    with HermesProcess("v16", path) as hermes:
        integrity, checks = _hermes_checks(hermes)
        assert integrity == ["ok"]
        assert checks["messages_fts"] == "ok"
        assert checks["messages_fts_trigram"] != "ok"  # 3.40 reads it only up to the NUL
    # This package's doctor on the system's SQLite says what it is, and fails only
    # the journal check (the file is in WAL, and 3.40.1 has the WAL-reset bug).
    env = environment(tmp_path, HERMES_MODELS_SQLITE="sqlite3")
    done = run("--db", str(path), "doctor", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    details = _details({"checks": json.loads(done.stdout)})
    assert [name for name, (ok, _) in details.items() if not ok] == ["journal mode"]
    ok, detail = details["fts integrity-check messages_fts_trigram"]
    assert ok is True
    assert detail.startswith(
        "not checked: 1 message(s) holding a NUL character were indexed by a newer SQLite "
        f"than this one ({driver.standard.sqlite_version})"
    )
    assert details["integrity_check"] == (True, "ok")
    assert details["sqlite"][1].startswith(f"{driver.standard.sqlite_version} (sqlite3;")
