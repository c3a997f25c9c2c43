"""HERMES_V16 §3.1: the module-level names of ``hermes_state``, as a Hermes caller uses them."""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path

import pytest

import hermes_models
import hermes_models.hermes_state as hermes_state
import hermes_models.store.db
from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.store.schema import migrations_dir

pytestmark = pytest.mark.backends("sqlite", "postgresql")

B_MODULE_NAMES = [
    "DEFAULT_DB_PATH",
    "DEFERRED_INDEX_SQL",
    "FTS_SQL",
    "FTS_TRIGRAM_SQL",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "SessionDB",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "get_last_init_error",
    "is_malformed_db_error",
    "repair_state_db_schema",
]


def objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    rows = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    ).fetchall()
    return {(kind, name) for kind, name in rows}


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


# -- the names -----------------------------------------------------------------------------


def test_star_import_gives_every_name_of_hermes_module() -> None:
    namespace: dict[str, object] = {}
    exec("from hermes_models.hermes_state import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == B_MODULE_NAMES


@pytest.mark.parametrize("name", B_MODULE_NAMES)
def test_each_name_is_the_same_object_from_the_package(name: str) -> None:
    assert getattr(hermes_models, name) == getattr(hermes_state, name)


def test_schema_version_is_16() -> None:
    assert hermes_state.SCHEMA_VERSION == 16


def test_default_db_path_follows_hermes_home_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "one"))
    assert hermes_state.DEFAULT_DB_PATH == tmp_path / "one" / "state.db"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "two"))
    assert hermes_state.DEFAULT_DB_PATH == tmp_path / "two" / "state.db"
    with SessionDB() as store:
        assert Path(store.db_path) == hermes_state.DEFAULT_DB_PATH
    assert (tmp_path / "two" / "state.db").is_file()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        hermes_state.no_such_name  # noqa: B018


# -- the schema texts ----------------------------------------------------------------------


def test_schema_texts_build_the_layout_a_migrated_file_has(tmp_path: Path) -> None:
    scratch = sqlite3.connect(":memory:")
    scratch.executescript(
        hermes_state.SCHEMA_SQL
        + hermes_state.DEFERRED_INDEX_SQL
        + hermes_state.FTS_SQL
        + hermes_state.FTS_TRIGRAM_SQL
    )
    SessionDB(tmp_path / "state.db").close()
    migrated = sqlite3.connect(tmp_path / "state.db")
    # Hermes' texts build Hermes' layout: the gram index and the time-order
    # indexes are this package's additions.
    ours = {
        item
        for item in objects(migrated)
        if not item[1].startswith(("_yoyo", "messages_cjk"))
        and item[1] not in ("idx_messages_time", "idx_sessions_started_id")
    }
    ours.discard(("table", "yoyo_lock"))
    built = objects(scratch)
    # The FTS5 shadow tables follow from the virtual tables on both sides.
    assert built == ours
    for table in ("sessions", "messages", "state_meta", "compression_locks", "schema_version"):
        assert columns(scratch, table) == columns(migrated, table)
    migrated.close()
    scratch.close()


def test_schema_texts_are_idempotent_and_run_on_an_existing_file(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "kept through the rerun")
    conn = sqlite3.connect(tmp_path / "state.db")
    script = (
        hermes_state.SCHEMA_SQL
        + hermes_state.DEFERRED_INDEX_SQL
        + hermes_state.FTS_SQL
        + hermes_state.FTS_TRIGRAM_SQL
    )
    conn.executescript(script)
    conn.executescript(script)
    assert conn.execute("SELECT content FROM messages").fetchall() == [("kept through the rerun",)]
    conn.close()


def test_deferred_indexes_are_the_ones_over_later_columns() -> None:
    names = sorted(re.findall(r"INDEX IF NOT EXISTS (\w+)", hermes_state.DEFERRED_INDEX_SQL))
    assert names == [
        "idx_messages_platform_msg_id",
        "idx_messages_session_active",
        "idx_sessions_title_unique",
    ]
    assert "idx_sessions_title_unique" not in hermes_state.SCHEMA_SQL


def test_schema_sql_is_read_from_the_migration_file() -> None:
    text = (migrations_dir() / "0002_hermes_v16_schema.sql").read_text(encoding="utf-8")
    squeeze = " ".join
    for statement in hermes_state.SCHEMA_SQL.split(";\n"):
        statement = statement.strip()
        if not statement:
            continue
        body = statement.split("(", 1)[1]
        assert squeeze(body.split()) in squeeze(text.split()), statement[:60]


def test_fts_texts_name_the_tables_hermes_names() -> None:
    assert "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5" in hermes_state.FTS_SQL
    assert "messages_fts_trigram" not in hermes_state.FTS_SQL
    assert "tokenize='trigram'" in hermes_state.FTS_TRIGRAM_SQL.replace('"', "'")
    triggers = [line for line in hermes_state.FTS_SQL.splitlines() if "CREATE TRIGGER" in line]
    assert len(triggers) == 3


# -- apply_wal_with_fallback -------------------------------------------------------------------


class Tracing(sqlite3.Connection):
    """A connection that records each statement and can fail the WAL pragma."""

    fail_with: str | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.executed: list[str] = []

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
        self.executed.append(sql)
        if self.fail_with and "journal_mode=WAL" in sql:
            raise sqlite3.OperationalError(self.fail_with)
        return super().execute(sql, *args)  # type: ignore[arg-type]


def test_wal_is_set_on_a_fresh_file(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "fresh.db", factory=Tracing)
    assert hermes_state.apply_wal_with_fallback(conn) == "wal"
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert any("journal_mode=WAL" in sql for sql in conn.executed)
    conn.close()


def test_a_file_already_in_wal_is_only_probed(tmp_path: Path) -> None:
    seed = sqlite3.connect(tmp_path / "wal.db")
    seed.execute("PRAGMA journal_mode=WAL")
    seed.close()
    conn = sqlite3.connect(tmp_path / "wal.db", factory=Tracing)
    assert hermes_state.apply_wal_with_fallback(conn) == "wal"
    assert [sql for sql in conn.executed if "journal_mode" in sql] == ["PRAGMA journal_mode"]
    conn.close()


def test_a_wal_incompatible_file_system_falls_back_to_delete_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_models")
    label = f"{tmp_path.name}-nfs.db"
    for name in ("a.db", "b.db"):
        conn = sqlite3.connect(tmp_path / name, factory=Tracing)
        conn.fail_with = "locking protocol"
        assert hermes_state.apply_wal_with_fallback(conn, db_label=label) == "delete"
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        conn.close()
    warnings = [r for r in caplog.records if label in r.getMessage()]
    assert len(warnings) == 1


def test_another_error_never_downgrades(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "eio.db", factory=Tracing)
    conn.fail_with = "disk I/O error"
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        hermes_state.apply_wal_with_fallback(conn)
    conn.close()


def test_a_failing_probe_still_sets_wal(tmp_path: Path) -> None:
    class ProbeFails(Tracing):
        probed = False

        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
            if sql.strip() == "PRAGMA journal_mode" and not self.probed:
                self.probed = True
                raise sqlite3.OperationalError("simulated probe failure")
            return super().execute(sql, *args)

    conn = sqlite3.connect(tmp_path / "probe.db", factory=ProbeFails)
    assert hermes_state.apply_wal_with_fallback(conn) == "wal"
    conn.close()


# -- malformed files and their repair -------------------------------------------------------


def test_is_malformed_db_error() -> None:
    is_malformed = hermes_state.is_malformed_db_error
    assert is_malformed(sqlite3.DatabaseError("malformed database schema (messages_fts)"))
    assert is_malformed(sqlite3.DatabaseError("database disk image is malformed"))
    assert is_malformed(sqlite3.OperationalError("Malformed database schema (x) - oops"))
    assert not is_malformed(sqlite3.OperationalError("database is locked"))
    assert not is_malformed(ValueError("malformed database schema"))


def duplicate_schema_row(path: Path, name: str) -> None:
    """Copy the sqlite_master row of ``name``: SQLite then refuses the file."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
        "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master WHERE name = ?",
        (name,),
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()


def count_sessions(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])


def seeded(path: Path) -> None:
    with SessionDB(path) as store:
        store.create_session("s1", "cli", model="m")
        store.append_message("s1", "user", "the needle survives repair")


def test_repair_removes_a_duplicated_schema_row(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    seeded(path)
    duplicate_schema_row(path, "messages_fts_insert")
    with pytest.raises(sqlite3.DatabaseError, match="malformed database schema"):
        count_sessions(path)

    report = hermes_state.repair_state_db_schema(path)

    assert report["repaired"] is True
    assert report["strategy"] == "dedup_schema"
    assert report["error"] is None
    backup = Path(report["backup_path"])
    assert backup.parent == tmp_path
    assert backup.name.startswith("state.db.malformed-backup-")
    # The copy is the file as it was, still malformed.
    with pytest.raises(sqlite3.DatabaseError):
        count_sessions(backup)
    with SessionDB(path) as store:
        assert store.get_session("s1")["model"] == "m"
        assert [hit["session_id"] for hit in store.search_messages("needle")] == ["s1"]


def test_repair_drops_and_rebuilds_search_when_dedup_is_not_enough(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    seeded(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE VIRTUAL TABLE messages_fts USING fts5(' "
        "WHERE name = 'messages_fts'"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()

    report = hermes_state.repair_state_db_schema(path, backup=False)

    assert (report["repaired"], report["strategy"], report["backup_path"]) == (
        True,
        "drop_fts_rebuild",
        None,
    )
    with SessionDB(path) as store:
        assert [hit["session_id"] for hit in store.search_messages("needle")] == ["s1"]


def test_repair_of_a_missing_file_reports_it(tmp_path: Path) -> None:
    report = hermes_state.repair_state_db_schema(tmp_path / "absent.db")
    assert report["repaired"] is False
    assert report["strategy"] is None
    assert "does not exist" in report["error"]


def test_two_backups_in_one_second_do_not_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    seeded(path)
    first = hermes_state.repair_state_db_schema(path)["backup_path"]
    second = hermes_state.repair_state_db_schema(path)["backup_path"]
    assert first != second
    assert Path(first).is_file() and Path(second).is_file()


def test_sessiondb_repairs_a_malformed_file_once_when_opening(tmp_path: Path) -> None:
    path = tmp_path / "opened.db"
    seeded(path)
    duplicate_schema_row(path, "idx_messages_session")
    with SessionDB(path) as store:
        assert store.get_messages("s1")[0]["content"] == "the needle survives repair"
    assert len(list(tmp_path.glob("opened.db.malformed-backup-*"))) == 1
    # One automatic repair per file per process: a second breakage is reported.
    duplicate_schema_row(path, "idx_messages_session")
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        SessionDB(path)
    assert len(list(tmp_path.glob("opened.db.malformed-backup-*"))) == 1


# -- the "database unavailable" message -------------------------------------------------------


def test_format_session_db_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = hermes_state.format_session_db_unavailable
    monkeypatch.setattr(hermes_models.store.db, "_last_init_error", None)
    assert fmt() == "Session database not available."
    assert fmt("Cannot resume") == "Cannot resume."
    monkeypatch.setattr(hermes_models.store.db, "_last_init_error", "OperationalError: no disk")
    assert fmt() == "Session database not available: OperationalError: no disk."
    monkeypatch.setattr(
        hermes_models.store.db, "_last_init_error", "OperationalError: locking protocol"
    )
    assert fmt() == (
        "Session database not available: OperationalError: locking protocol "
        "(state.db may be on NFS/SMB/FUSE \u2014 see https://www.sqlite.org/wal.html)."
    )


def test_a_failed_open_is_recorded_and_never_cleared_by_a_success(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(hermes_models.NotADatabaseError):
        SessionDB(bad)
    cause = hermes_state.get_last_init_error()
    assert cause == f"NotADatabaseError: {bad} is not an SQLite database"
    SessionDB(tmp_path / "fine.db").close()
    assert hermes_state.get_last_init_error() == cause


# -- the private names Hermes' own modules import --------------------------------------------


def test_default_db_path_is_importable_by_name_and_read_at_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hermes' session_search tool and `hermes sessions repair` do `from hermes_state
    # import DEFAULT_DB_PATH`: the module's __getattr__ answers the import too.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    namespace: dict[str, object] = {}
    exec("from hermes_models.hermes_state import DEFAULT_DB_PATH", namespace)
    assert namespace["DEFAULT_DB_PATH"] == tmp_path / "home" / "state.db"


def test_db_opens_cleanly_gives_none_for_a_sound_file_and_the_reason_otherwise(
    tmp_path: Path,
) -> None:
    opens_cleanly = hermes_state._db_opens_cleanly
    path = tmp_path / "state.db"
    seeded(path)
    assert opens_cleanly(path) is None
    duplicate_schema_row(path, "messages_fts_insert")
    assert opens_cleanly(path) == (
        "malformed database schema (messages_fts_insert) - "
        "trigger messages_fts_insert already exists"
    )


def test_set_last_init_error_sets_and_clears_what_hermes_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hermes_models.store.db, "_last_init_error", None)
    hermes_state._set_last_init_error("OperationalError: locking protocol")
    assert hermes_state.get_last_init_error() == "OperationalError: locking protocol"
    assert hermes_state.format_session_db_unavailable() == (
        "Session database not available: OperationalError: locking protocol "
        "(state.db may be on NFS/SMB/FUSE \u2014 see https://www.sqlite.org/wal.html)."
    )
    hermes_state._set_last_init_error(None)
    assert hermes_state.get_last_init_error() is None
    assert hermes_state.format_session_db_unavailable() == "Session database not available."


def test_wal_incompat_markers_are_hermes_texts() -> None:
    assert hermes_state._WAL_INCOMPAT_MARKERS == ("locking protocol", "not authorized")
