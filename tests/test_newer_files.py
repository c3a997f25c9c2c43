"""Files of newer Hermes versions (v17-v31, a fork at 33) are read and never changed.

The files are built with plain sqlite3 by ``tests/newer.py`` from the facts
Hermes' later stores are made of. Here they go through what users run: the
installed console script's read commands, ``SessionDB`` and the models, while
the bytes of every file beside the database are watched; the writing paths
must refuse with an error that names the file's version; a Hermes-style
writer in another process keeps appending while this package reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from console_script import environment, run

import hermes_models
from hermes_models import SchemaTooNewError, SessionDB
from hermes_models.driver import sqlite3

import newer


def shm_meaning(shm: bytes) -> bytes:
    """The parts of a ``-shm`` WAL index that say what the WAL holds.

    Every reader writes there too, so those bytes are left out: its read mark
    and lock slots (offsets 100-127), and, when a reader in a new process
    rebuilds the index from the WAL (SQLite's own recovery, which a plain
    ``sqlite3`` reader in another process also does), the header's change
    counter and checksums (offsets 8-11 and 40-47 of each of the two header
    copies) and ``nBackfillAttempted`` (128-131). Kept: both header copies'
    page size, frame count, page count, frame checksums and salts, the
    checkpointed-frame count, and the hash tables.
    """
    return shm[12:40] + shm[60:88] + shm[96:100] + shm[136:]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("newer-files")
    return {shape: newer.build(folder / f"{shape}.db", shape) for shape in newer.SHAPES}


@pytest.fixture(params=newer.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_file(built: dict[str, Path], shape: str, tmp_path: Path) -> Path:
    folder = tmp_path / "hermes-home"
    folder.mkdir()
    path = folder / "state.db"
    shutil.copyfile(built[shape], path)
    return path


def files(path: Path) -> dict[str, bytes]:
    """The database and its sidecars, by name, as bytes."""
    out = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            out[suffix or "db"] = side.read_bytes()
    return out


def assert_unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    """The database file and the WAL's contents are as they were; a ``-shm`` changed
    only where every reader writes (:func:`shm_meaning`); nothing else appeared but
    SQLite's empty ``-wal`` and its ``-shm`` next to a file that was closed cleanly."""
    assert hashlib.sha256(after["db"]).hexdigest() == hashlib.sha256(before["db"]).hexdigest()
    assert "-journal" not in after
    if "-wal" in before:
        assert after["-wal"] == before["-wal"]
    else:
        assert after.get("-wal", b"") == b""
    if "-shm" in before:
        assert shm_meaning(after["-shm"]) == shm_meaning(before["-shm"])


READ_COMMANDS = (
    ("sessions",),
    ("sessions", "--limit", "all", "--recent", "--json"),
    ("sessions", "--archived"),
    ("show", "root-a"),
    ("show", "cont-a", "--all"),
    ("show", "cont-b", "--with-ancestors", "--json"),
    ("lineage", "root-a"),
    ("resume", "root-a"),
    ("search", "capybara"),
    ("search", "事件循环"),
    ("search", "数据"),
    ("search", "定时任务", "--json"),
    ("stats",),
    ("stats", "--json"),
    ("doctor",),
    ("export", "-o", "-"),
    ("export", "--format", "md", "-o", "-"),
)


@pytest.mark.plaintext_file  # the files are Hermes' own, made with the standard library's sqlite3
@pytest.mark.slow  # seventeen console-script runs a shape
@pytest.mark.parametrize("shape", newer.SHAPES)
def test_the_cli_read_commands_change_no_byte_of_the_file(store_file: Path, shape: str) -> None:
    before = files(store_file)
    env = environment(store_file.parent.parent)
    for command in READ_COMMANDS:
        result = run(
            *command[:1], "--db", str(store_file), *command[1:], cwd=store_file.parent, env=env
        )
        assert result.returncode == 0, (command, result.stderr)
        # Said once, on standard error: the file is newer and read only.
        warnings = [line for line in result.stderr.splitlines() if "opened read-only" in line]
        assert len(warnings) == 1, (command, result.stderr)
        assert f"Hermes schema version {newer.SCHEMA_VERSION[shape]}" in warnings[0]
    # A backup reads the file too; the copy passes its checks (an index whose
    # tokenizer this SQLite lacks is named as not checked).
    copy = store_file.parent.parent / "copy.db"
    backup = run("backup", "--db", str(store_file), str(copy), cwd=store_file.parent, env=env)
    assert backup.returncode == 0, backup.stderr
    assert ("messages_fts_cjk not checked" in backup.stderr) == (shape in newer.CJK_SHAPES)
    assert_unchanged(before, files(store_file))


WRITE_COMMANDS = (
    ("migrate",),
    ("archive", "root-a"),
    ("delete", "root-a", "--yes"),
    ("prune", "--older-than", "1", "--yes"),
    ("vacuum",),
    ("doctor", "--fix"),
)


@pytest.mark.slow  # six console-script runs a shape
@pytest.mark.parametrize("shape", newer.SHAPES)
def test_the_cli_write_commands_refuse_in_one_line_naming_the_version(
    store_file: Path, shape: str
) -> None:
    before = files(store_file)
    env = environment(store_file.parent.parent)
    version = newer.SCHEMA_VERSION[shape]
    for command in WRITE_COMMANDS:
        result = run(
            *command[:1], "--db", str(store_file), *command[1:], cwd=store_file.parent, env=env
        )
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert (result.returncode, len(errors)) == (1, 1), (command, result.stderr)
        assert f"Hermes schema version {version}, newer than 16" in errors[0], command
        assert result.stdout == "", command
    assert_unchanged(before, files(store_file))


def test_sessiondb_and_model_reads_change_no_byte(store_file: Path, shape: str) -> None:
    before = files(store_file)
    with SessionDB(store_file) as store:
        assert store.get_session("root-a") is not None
        for session in store.list_sessions_rich(include_children=True, limit=None):
            store.get_messages(session["id"], include_inactive=True)
            store.get_messages_as_conversation(session["id"], include_ancestors=True)
            store.export_session(session["id"])
        store.search_messages("capybara")
        store.search_messages("数据")
        store.search_sessions("事件循环")
        store.get_compression_tip("root-a")
        store.resolve_resume_session_id("root-a")
        store.session_count()
        store.message_count()
        store.get_meta("fts_storage_version")
        with hermes_models.using(store.database):
            for session in hermes_models.Session.select():
                assert session.kind in ("root", "branch", "compression", "ephemeral")
                session.compression_tip()
                session.prompt  # noqa: B018 - reading it is the test
                session.extra  # noqa: B018
    assert_unchanged(before, files(store_file))


def test_every_write_is_refused_with_the_version_and_nothing_changes(
    store_file: Path, shape: str
) -> None:
    before = files(store_file)
    version = newer.SCHEMA_VERSION[shape]
    expected = (
        f"has Hermes schema version {version}, newer than 16, the highest hermes_models writes"
    )
    with SessionDB(store_file) as store:
        writes = [
            lambda: store.create_session("new", "cli"),
            lambda: store.end_session("cont-a", "user_exit"),
            lambda: store.append_message("cont-a", "user", "hello"),
            lambda: store.set_session_title("cont-a", "A title"),
            lambda: store.set_meta("k", "v"),
            lambda: store.update_token_counts("cont-a", input_tokens=1),
            lambda: store.delete_session("root-a"),
            lambda: store.prune_sessions(older_than_days=0),
            lambda: store.set_session_archived("root-a", True),
            lambda: store.replace_messages("cont-a", [{"role": "user", "content": "x"}]),
            lambda: store.clear_messages("cont-a"),
            lambda: store.optimize_fts(),
        ]
        for attempt in writes:
            with pytest.raises(SchemaTooNewError, match=expected):
                attempt()
        with hermes_models.using(store.database):
            session = hermes_models.Session.get_by_id("cont-a")
            with pytest.raises(SchemaTooNewError, match=expected):
                session.end("user_exit")
            with pytest.raises(SchemaTooNewError, match=expected):
                hermes_models.Session.create(id="x", source="cli", started_at=1.0)
            with pytest.raises(SchemaTooNewError, match=expected):
                hermes_models.Message.update(content="x").where(
                    hermes_models.Message.id == 1
                ).execute()
    with pytest.raises(SchemaTooNewError, match=f"version {version}"):
        hermes_models.migrate(store_file)
    assert_unchanged(before, files(store_file))


def test_the_file_is_said_to_be_read_only_once_in_the_log(
    store_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="hermes_models"):
        for _ in range(3):
            SessionDB(store_file).close()
            hermes_models.connect(store_file)
    said = [r for r in caplog.records if "opened read-only" in r.getMessage()]
    assert len(said) == 1


@pytest.mark.slow  # console-script runs
@pytest.mark.parametrize("shape", newer.SHAPES)
def test_stats_and_doctor_report_version_layout_and_index_use(store_file: Path, shape: str) -> None:
    env = environment(store_file.parent.parent)
    stats = run("stats", "--db", str(store_file), "--json", cwd=store_file.parent, env=env)
    [report] = json.loads(stats.stdout)
    assert report["schema_version"] == newer.SCHEMA_VERSION[shape]
    assert report["fts_layout"] == newer.FTS_LAYOUT[shape]
    assert report["newer_than_writes"] is True
    indexes = report["search_indexes"]
    assert indexes["messages_fts"] == "used"
    assert indexes["messages_fts_trigram"].startswith("used (lacks tool rows")
    if newer.FTS_LAYOUT[shape] == 3:
        assert "cron and subagent sessions" in indexes["messages_fts_trigram"]
    if shape in newer.CJK_SHAPES:
        assert indexes["messages_fts_cjk"].startswith("not used (with its triggers;")
    else:
        assert "messages_fts_cjk" not in indexes
    doctor = run("doctor", "--db", str(store_file), "--json", cwd=store_file.parent, env=env)
    assert doctor.returncode == 0, doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    layout = newer.FTS_LAYOUT[shape]
    assert checks["schema_version"] == {
        "name": "schema_version",
        "ok": True,
        "detail": f"{newer.SCHEMA_VERSION[shape]}: newer than 16, read only "
        f"(full-text layout {layout})",
    }
    assert checks["integrity_check"]["ok"] and checks["foreign_key_check"]["ok"]
    assert checks["messages_fts use"]["detail"] == "used"


# -- beside a live Hermes -------------------------------------------------------------------

_APPENDER = """
import sys, time
sys.path.insert(0, {tests!r})
import newer
path, count = sys.argv[1], int(sys.argv[2])
for i in range(count):
    newer.append_message(__import__("pathlib").Path(path), "cont-a", f"appended capybara {{i}}")
    time.sleep(0.002)
"""


@pytest.mark.plaintext_file  # a Hermes process writes the file with the standard library's sqlite3
@pytest.mark.slow  # a Hermes process beside
@pytest.mark.parametrize("shape", ["v30", "v31"])
def test_reading_while_a_hermes_process_keeps_appending(
    built: dict[str, Path], shape: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    shutil.copyfile(built[shape], path)
    if shape in newer.CJK_SHAPES:
        # What a Hermes without the CJK tokenizer does before it can write.
        newer.drop_cjk_triggers_like_hermes(path)
    start = {row["id"] for row in SessionDB(path).get_messages("cont-a")}
    appends = 60
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _APPENDER.format(tests=str(Path(__file__).parent)),
            str(path),
            str(appends),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[int] = []
    try:
        with SessionDB(path) as store:
            while writer.poll() is None:
                rows = store.get_messages("cont-a")
                hits = store.search_messages("capybara", limit=None)
                assert {row["id"] for row in rows} >= start
                seen.append(len(rows))
                assert len(hits) >= 1
                time.sleep(0.01)
    finally:
        _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert seen == sorted(seen), "a reader never sees rows disappear"
    with SessionDB(path) as store:
        rows = store.get_messages("cont-a")
        assert len(rows) == len(start) + appends
        found = {hit["id"] for hit in store.search_messages("appended", limit=None)}
        assert found == {row["id"] for row in rows if str(row["content"]).startswith("appended")}


@pytest.mark.slow  # a Hermes process beside
@pytest.mark.parametrize("shape", ["v30", "v31", "fork33"])
def test_reads_beside_an_open_hermes_connection_change_no_byte_of_wal_or_shm(
    built: dict[str, Path], shape: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    shutil.copyfile(built[shape], path)
    if shape in newer.CJK_SHAPES:
        newer.drop_cjk_triggers_like_hermes(path)
    # A Hermes process with the file open and changes still in its WAL.
    hermes = sqlite3.connect(path)
    hermes.execute("PRAGMA wal_autocheckpoint = 0")
    hermes.execute("SELECT COUNT(*) FROM sessions").fetchone()
    newer.append_message(path, "cont-a", "still in the wal: capybara")
    try:
        before = files(path)
        assert len(before["-wal"]) > 0
        with SessionDB(path) as store:
            assert store.search_messages("wal")[0]["snippet"].startswith("still in the >>>wal<<<")
            store.list_sessions_rich()
            store.get_messages_as_conversation("cont-a", include_ancestors=True)
            store.search_messages("事件循环")
        env = environment(tmp_path)
        for command in (("sessions",), ("show", "cont-a"), ("search", "数据"), ("stats",)):
            result = run(*command[:1], "--db", str(path), *command[1:], cwd=tmp_path, env=env)
            assert result.returncode == 0, (command, result.stderr)
        assert_unchanged(before, files(path))
    finally:
        hermes.close()
