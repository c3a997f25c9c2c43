"""The journal policy (hermes_models.store.journal): the journal_mode and synchronous settings by
every route (argument, SessionDB keyword, environment, CLI), a file's mode never switched
the unsafe way, and on an SQLite with the WAL-reset bug no file put in WAL, each decision
said once per file and process."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from console_script import environment, run

import hermes_models
from hermes_models import SessionDB, driver, health
from hermes_models.driver import sqlite3
from hermes_models.store import journal
from hermes_models.store.journal import JournalSettings

T0 = 1_700_000_000.0


def _mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def _store_file(path: Path, mode: str) -> Path:
    """A store file with a session in it, left in journal ``mode``."""
    with SessionDB(path) as store:
        store.create_session("a", "cli", started_at=T0)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone() == (mode,)
    finally:
        conn.close()
    return path


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hermes_models" and r.levelno == logging.WARNING
    ]


# -- the settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "level", "expected"),
    [
        (None, None, JournalSettings(None, None)),
        ("WAL", "Normal", JournalSettings("wal", 1)),
        (" delete ", "extra", JournalSettings("delete", 3)),
        ("", "0", JournalSettings(None, 0)),
        (None, 2, JournalSettings(None, 2)),
        (None, "", JournalSettings(None, None)),
    ],
)
def test_settings_are_read_in_any_case_and_spacing(
    mode: str | None, level: str | int | None, expected: JournalSettings
) -> None:
    assert journal.settings(mode, level) == expected


@pytest.mark.parametrize(
    ("mode", "level", "message"),
    [
        ("truncate", None, r"journal_mode='truncate': expected one of wal, delete"),
        ("memory", None, r"journal_mode='memory': expected one of wal, delete"),
        (1, None, r"journal_mode=1: expected one of wal, delete"),
        (None, "fast", r"synchronous='fast': expected off, normal, full, extra or 0-3"),
        (None, 4, r"synchronous=4: expected off, normal, full, extra or 0-3"),
        (None, True, r"synchronous=True: expected off, normal, full, extra or 0-3"),
        (None, -1, r"synchronous=-1: expected off, normal, full, extra or 0-3"),
    ],
)
def test_a_bad_setting_is_an_error_naming_it_and_no_file_is_made(
    tmp_path: Path, mode: object, level: object, message: str
) -> None:
    path = tmp_path / "state.db"
    with pytest.raises(ValueError, match=message):
        SessionDB(path, journal_mode=mode, synchronous=level)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        hermes_models.connect(path, journal_mode=mode, synchronous=level)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_environment_gives_the_settings_an_argument_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(journal.JOURNAL_MODE_VARIABLE, "Delete")
    monkeypatch.setenv(journal.SYNCHRONOUS_VARIABLE, "full")
    assert journal.settings() == JournalSettings("delete", 2)
    assert journal.settings("wal", "off") == JournalSettings("wal", 0)
    with SessionDB(tmp_path / "env.db") as store:
        store.create_session("a", "cli")
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with SessionDB(tmp_path / "arg.db", journal_mode="wal", synchronous="off") as store:
        store.create_session("a", "cli")
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 0
    monkeypatch.setenv(journal.SYNCHRONOUS_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match=r"HERMES_MODELS_SYNCHRONOUS='sometimes': expected"):
        SessionDB(tmp_path / "bad.db")
    assert not (tmp_path / "bad.db").exists()


def test_synchronous_is_set_on_every_connection_and_mmap_stays_off(tmp_path: Path) -> None:
    db = hermes_models.connect(tmp_path / "state.db", synchronous="extra")
    try:
        assert db.execute_sql("PRAGMA synchronous").fetchone() == (3,)
        assert db.execute_sql("PRAGMA mmap_size").fetchone() == (0,)
    finally:
        db.close()
    unset = hermes_models.connect(tmp_path / "state.db")
    try:
        default = sqlite3.connect(":memory:").execute("PRAGMA synchronous").fetchone()
        # Unset leaves the build's default (WAL lowers nothing by itself).
        assert unset.execute_sql("PRAGMA synchronous").fetchone() == default
        assert unset.execute_sql("PRAGMA mmap_size").fetchone() == (0,)
    finally:
        unset.close()


# -- which mode a file is put in ------------------------------------------------------------------


def test_a_new_file_is_wal_on_a_fixed_sqlite(tmp_path: Path) -> None:
    assert not driver.WAL_RESET_BUG  # this install runs the bundled SQLite
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("a", "cli")
    assert _mode(tmp_path / "state.db") == "wal"
    with SessionDB(tmp_path / "asked.db", journal_mode="delete") as store:
        store.create_session("a", "cli")
    assert _mode(tmp_path / "asked.db") == "delete"


def test_a_file_someone_left_out_of_wal_keeps_its_mode_unless_wal_is_asked_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A careful Hermes on a vulnerable SQLite left it out of WAL: opening it must not
    # switch it (the old code did). Only WAL is kept in the file: DELETE, TRUNCATE and
    # PERSIST read back as DELETE on a new connection.
    kept = "delete"
    path = _store_file(tmp_path / "state.db", kept)
    caplog.set_level(logging.WARNING, logger="hermes_models")
    with SessionDB(path) as store:
        store.append_message("a", "user", "hello", timestamp=T0 + 1)
    assert _mode(path) == kept
    with SessionDB(path, journal_mode="delete") as store:
        assert store.message_count() == 1
    assert _mode(path) == "delete"
    with SessionDB(path, journal_mode="wal") as store:
        assert store.message_count() == 1
    assert _mode(path) == "wal"
    assert _warnings(caplog) == []


def test_an_explicit_delete_on_a_wal_file_is_reported_once_and_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _store_file(tmp_path / "state.db", "wal")
    caplog.set_level(logging.WARNING, logger="hermes_models")
    for _ in range(3):
        with SessionDB(path, journal_mode="delete") as store:
            store.append_message("a", "user", "x", timestamp=T0 + 1)
    assert _mode(path) == "wal"
    (said,) = _warnings(caplog)
    assert said.startswith(f"{path}: journal_mode=delete was asked for, but the file is in WAL")
    assert "stop every process using the file" in said


# -- on an SQLite with the WAL-reset bug ----------------------------------------------------------


def _apply(path: Path, chosen: JournalSettings) -> str | None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return journal.apply(conn, str(path), chosen, vulnerable=True)
    finally:
        conn.close()


def test_a_vulnerable_sqlite_never_switches_a_file_to_wal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_models")
    new, asked = tmp_path / "new.db", tmp_path / "asked.db"
    for _ in range(2):  # said once per file and process
        assert _apply(new, JournalSettings()) == "delete"
        assert _apply(asked, JournalSettings("wal", None)) == "delete"
    assert (_mode(new), _mode(asked)) == ("delete", "delete")
    version = sqlite3.sqlite_version
    assert _warnings(caplog) == [
        f"{path} stays in DELETE mode: this SQLite ({version}) has the WAL-reset bug, so no "
        "file is switched to WAL (writers block readers meanwhile). Run on SQLite 3.51.3 or "
        "later (`pip install pysqlite3`) to use WAL"
        for path in (new, asked)
    ]


def test_a_vulnerable_sqlite_keeps_a_wal_file_in_wal_and_says_it_is_exposed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _store_file(tmp_path / "state.db", "wal")
    holder = sqlite3.connect(path)  # another process's connection, as it may be
    try:
        holder.execute("SELECT count(*) FROM sessions").fetchone()
        caplog.set_level(logging.WARNING, logger="hermes_models")
        for chosen in (JournalSettings(), JournalSettings("delete", None), JournalSettings()):
            assert _apply(path, chosen) == "wal"
        assert _mode(path) == "wal"
    finally:
        holder.close()
    said = _warnings(caplog)
    assert len(said) == 2
    assert said[0].startswith(
        f"{path} is in WAL mode and this SQLite ({sqlite3.sqlite_version}) has the WAL-reset bug"
    )
    assert "it stays in WAL (switching it back while other processes hold it" in said[0]
    assert said[1].startswith(f"{path}: journal_mode=delete was asked for")


def test_the_connection_knows_its_own_sqlite(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    standard = driver.standard.connect(":memory:")
    try:
        assert journal.connection_has_bug(conn) is driver.WAL_RESET_BUG
        assert journal.connection_has_bug(standard) is driver.has_wal_reset_bug(
            driver.standard.sqlite_version_info
        )
    finally:
        conn.close()
        standard.close()


# -- what users see -------------------------------------------------------------------------------


@pytest.mark.plaintext_file  # the vulnerable SQLite has no cipher
@pytest.mark.slow  # console-script runs on the standard library's SQLite
def test_the_cli_on_a_vulnerable_sqlite_keeps_files_out_of_wal_and_doctor_marks_exposed(
    tmp_path: Path,
) -> None:
    if not driver.has_wal_reset_bug(driver.standard.sqlite_version_info):
        pytest.fail("this test needs a standard library SQLite with the bug (3.40.1 here)")
    env = environment(tmp_path, HERMES_MODELS_SQLITE="sqlite3")
    new = tmp_path / "new.db"
    done = run("--db", str(new), "migrate", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"Warning: {new} stays in DELETE mode: this SQLite (3.40.1)")
    assert _mode(new) == "delete"
    healthy = run("--db", str(new), "doctor", cwd=tmp_path, env=env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "ok   journal mode: delete: not exposed (this SQLite has the WAL-reset bug" in (
        healthy.stdout
    )
    exposed = _store_file(tmp_path / "exposed.db", "wal")
    report = run("--db", str(exposed), "doctor", cwd=tmp_path, env=env)
    assert report.returncode == 1
    assert "FAIL journal mode: wal: exposed to the WAL-reset bug of SQLite 3.40.1" in (
        " ".join(report.stdout.split())
    )
    assert _mode(exposed) == "wal"
    # A command that only reads opens the file read-only: it reports the exposure and
    # leaves the file as it is; a command that writes says so once, on stderr.
    stats = run("--db", str(exposed), "stats", "--json", cwd=tmp_path, env=env)
    assert stats.returncode == 0 and stats.stderr == ""
    (shown,) = json.loads(stats.stdout)
    assert (shown["exposed"], shown["sqlite"]["module"]) == (True, "sqlite3")
    written = run("--db", str(exposed), "optimize", cwd=tmp_path, env=env)
    assert written.stderr.count("has the WAL-reset bug") == 1, written.stderr
    assert _mode(exposed) == "wal"


@pytest.mark.slow  # a console-script run
def test_the_cli_journal_options_are_honoured_and_checked(tmp_path: Path) -> None:
    path = _store_file(tmp_path / "state.db", "delete")
    env = environment(tmp_path)
    # Journal settings apply to a command that writes (one that only reads changes
    # nothing, the journal mode included).
    read = run("--db", str(path), "--journal-mode", "WAL", "stats", cwd=tmp_path, env=env)
    assert (read.returncode, read.stderr) == (0, "")
    assert _mode(path) == "delete"
    done = run("--db", str(path), "--journal-mode", "WAL", "optimize", cwd=tmp_path, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert _mode(path) == "wal"
    asked = run("--db", str(path), "--journal-mode", "delete", "optimize", cwd=tmp_path, env=env)
    assert asked.returncode == 0
    (line,) = asked.stderr.splitlines()
    assert line.startswith(f"Warning: {path}: journal_mode=delete was asked for")
    bad = run("--db", str(path), "--synchronous", "fast", "stats", cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "'fast' is not one of" in bad.stderr
    from_env = run(
        "--db",
        str(path),
        "stats",
        cwd=tmp_path,
        env={**env, journal.JOURNAL_MODE_VARIABLE: "sideways"},
    )
    assert from_env.returncode != 0
    assert "HERMES_MODELS_JOURNAL_MODE='sideways': expected one of wal, delete" in from_env.stderr
    assert os.path.exists(path) and health.doctor(hermes_models.connect(path))["ok"]


@pytest.mark.plaintext_file  # Hermes and the vulnerable SQLite have no cipher
@pytest.mark.slow  # Hermes v31's own code in a process of its own
def test_hermes_v31_on_the_vulnerable_sqlite_keeps_files_as_this_package_does(
    tmp_path: Path,
) -> None:
    from hermes_release import HermesProcess

    # Hermes' own policy on 3.40.1: a new file stays in DELETE mode.
    made_by_hermes = tmp_path / "hermes.db"
    with HermesProcess("v31", made_by_hermes) as hermes:
        assert hermes.sqlite_version == driver.standard.sqlite_version
        hermes.call("create_session", "h", "cli")
        assert hermes.sql("PRAGMA journal_mode") == [["delete"]]
    # This package reads it (schema 31: read only) and leaves it so.
    with SessionDB(made_by_hermes, read_only=True) as store:
        assert store.get_session("h")["source"] == "cli"
    assert _mode(made_by_hermes) == "delete"
    # A WAL file stays in WAL under Hermes on 3.40.1, as here.
    wal = _store_file(tmp_path / "wal.db", "wal")
    with HermesProcess("v31", wal) as hermes:
        hermes.call("append_message", "a", "user", "Hermes")
        assert hermes.sql("PRAGMA journal_mode") == [["wal"]]
    assert _mode(wal) == "wal"
    with SessionDB(wal, read_only=True) as store:
        assert [m["content"] for m in store.get_messages("a")] == ["Hermes"]
    assert _mode(wal) == "wal"
