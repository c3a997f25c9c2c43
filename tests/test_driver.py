"""hermes_models.driver: one SQLite module under every connection, the version gate, and
errors that callers written for the standard library's sqlite3 still catch."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pysqlite3.dbapi2
import pytest
from console_script import run

import hermes_models
from hermes_models import SessionDB, driver, health
from hermes_models.driver import has_wal_reset_bug, sqlite3, standard, standard_error
from hermes_models.store import schema
from hermes_models.store.repair import repair_state_db_schema
from hermes_models.transfer.copy import copy_store

T0 = 1_700_000_000.0

try:  # the encryption extra: then the module every connection runs on
    from sqlcipher3 import dbapi2 as sqlcipher3_dbapi2
except ImportError:
    sqlcipher3_dbapi2 = None
#: What the rule (``auto``) chooses on this install.
CHOSEN: Any = sqlcipher3_dbapi2 or pysqlite3.dbapi2

# -- the version gate --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "bug"),
    [
        ((3, 6, 23), False),  # before WAL
        ((3, 7, 0), True),
        ((3, 40, 1), True),  # this machine's standard library
        ((3, 44, 0), True),
        ((3, 44, 5), True),
        ((3, 44, 6), False),  # the 3.44 backport
        ((3, 44, 9), False),
        ((3, 45, 0), True),
        ((3, 50, 6), True),
        ((3, 50, 7), False),  # the 3.50 backport
        ((3, 50, 9), False),
        ((3, 51, 0), True),
        ((3, 51, 2), True),
        ((3, 51, 3), False),  # the fix
        ((3, 53, 4), False),  # pysqlite3 0.6.1's
        ((4, 0, 0), False),
        ((3, 44), True),  # a version of two parts is its .0
    ],
)
def test_the_version_gate_knows_the_fixed_and_backported_releases(
    version: tuple[int, ...], bug: bool
) -> None:
    assert has_wal_reset_bug(version) is bug


def test_this_install_runs_every_connection_on_the_bundled_sqlite() -> None:
    # What `pip install .` gives on this machine (a manylinux wheel of pysqlite3), or
    # with the encryption extra, sqlcipher3's wheel.
    assert driver.sqlite3 is CHOSEN
    assert driver.ENCRYPTION is (CHOSEN is sqlcipher3_dbapi2)
    assert driver.SQLITE_VERSION_INFO >= (3, 51, 3)
    info = hermes_models.sqlite_info()
    assert info == {
        "module": CHOSEN.__name__,
        "version": CHOSEN.sqlite_version,
        "source_id": info["source_id"],
        "wal_reset_bug": False,
        "standard_version": standard.sqlite_version,
    }
    assert info["source_id"].split()[0] >= "2026-01-01"  # a check-in date, then its hash


@pytest.mark.parametrize(
    ("setting", "module"),
    [("sqlite3", standard), ("pysqlite3", pysqlite3.dbapi2), ("auto", CHOSEN)]
    + ([("sqlcipher3", sqlcipher3_dbapi2)] if sqlcipher3_dbapi2 is not None else []),
)
def test_the_setting_chooses_the_module(setting: str, module: Any) -> None:
    assert driver.choose(setting) is module
    assert driver.choose(setting.upper() + " ") is module
    assert driver.choose("") is CHOSEN  # unset: the rule


def test_sqlcipher3_is_chosen_where_installed_and_otherwise_an_error_saying_how_to_get_it() -> None:
    if sqlcipher3_dbapi2 is not None:
        assert driver.choose("sqlcipher3") is sqlcipher3_dbapi2
    else:
        with pytest.raises(ImportError, match=r"sqlcipher3 is not installed \(pip install"):
            driver.choose("sqlcipher3")


def test_an_unknown_setting_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ImportError, match=r"HERMES_MODELS_SQLITE='apsw': expected one of auto"):
        driver.choose("apsw")


@pytest.mark.plaintext_file  # it runs the standard library's sqlite3, which has no cipher
@pytest.mark.slow  # new Python processes
def test_a_process_told_to_use_the_standard_module_uses_it_for_everything(
    tmp_path: Path,
) -> None:
    program = (
        "import json, sqlite3, hermes_models\n"
        "from hermes_models import SessionDB, driver\n"
        "s = SessionDB(r'%s')\n"
        "s.create_session('a', 'cli')\n"
        "print(json.dumps([driver.sqlite3 is sqlite3, hermes_models.sqlite_info(),\n"
        "  s._conn.execute('select sqlite_version()').fetchone()[0],\n"
        "  s._conn.execute('pragma journal_mode').fetchone()[0]]))\n"
    ) % (tmp_path / "state.db")
    env = {**os.environ, "HERMES_MODELS_SQLITE": "sqlite3", "HERMES_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    same, info, version, mode = json.loads(done.stdout)
    assert same is True
    assert (info["module"], info["version"]) == ("sqlite3", standard.sqlite_version)
    assert version == standard.sqlite_version
    # 3.40.1 has the bug: the new file stays out of WAL, and says so once.
    assert (info["wal_reset_bug"], mode) == (True, "delete")
    assert done.stderr.count("has the WAL-reset bug") == 1


@pytest.mark.plaintext_file  # it runs the standard library's sqlite3, which has no cipher
@pytest.mark.slow  # a new Python process
def test_without_pysqlite3_the_standard_module_runs_everything(tmp_path: Path) -> None:
    # A platform without a wheel: pysqlite3 (nor sqlcipher3) cannot be imported.
    program = (
        "import sys\n"
        "sys.modules['pysqlite3'] = sys.modules['pysqlite3.dbapi2'] = None\n"
        "sys.modules['sqlcipher3'] = sys.modules['sqlcipher3.dbapi2'] = None\n"
        "import json, sqlite3\n"
        "from hermes_models import SessionDB, driver\n"
        "try:\n"
        "    driver.choose('pysqlite3')\n"
        "except ImportError as exc:\n"
        "    refused = str(exc)\n"
        "with SessionDB(sys.argv[1]) as s:\n"
        "    s.create_session('a', 'cli')\n"
        "    mode = s._conn.execute('PRAGMA journal_mode').fetchone()[0]\n"
        "print(json.dumps([driver.sqlite3 is sqlite3, driver.MODULE_NAME, refused, mode]))\n"
    )
    env = {**os.environ, "HERMES_HOME": str(tmp_path)}
    env.pop(driver.MODULE_VARIABLE, None)
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "state.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        True,
        "sqlite3",
        "HERMES_MODELS_SQLITE=pysqlite3, but pysqlite3 is not installed",
        "delete" if has_wal_reset_bug(standard.sqlite_version_info) else "wal",
    ]


# -- every connection ---------------------------------------------------------------------------


@pytest.fixture
def no_standard_connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The standard library's sqlite3.connect refuses: a connection of the package opened
    with it fails the test."""
    opened: list[str] = []

    def refuse(database: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(database))
        raise AssertionError(f"the standard library's sqlite3 opened {database}")

    monkeypatch.setattr(standard, "connect", refuse)
    yield opened


def test_every_connection_of_the_package_uses_the_chosen_module(
    tmp_path: Path, no_standard_connections: list[str]
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:  # a new file: yoyo's connection, the probes, ours
        store.create_session("s", "cli", started_at=T0)
        store.append_message("s", "user", "数据库 and sqlite", timestamp=T0 + 1)
        store.append_message("s", "user", [{"type": "text", "text": "国我"}], timestamp=T0 + 2)
        assert [h["id"] for h in store.search_messages("数据库")] == [1]
        assert [h["id"] for h in store.search_messages("国我")] == [2]
        assert [h["id"] for h in store.search_messages("sql*")] == [1]  # a prefix
        store.backup(tmp_path / "copy.db")
        bundle = io.StringIO()
        store.export_bundle(bundle)
        report = health.doctor(store.database)
        assert report["ok"] is True, report
        assert store._conn.execute("SELECT sqlite_version()").fetchone()[0] == (
            driver.SQLITE_VERSION
        )
        store.vacuum()
    assert health.stats(hermes_models.connect(path, read_only=True))["sqlite"]["module"] == (
        driver.MODULE_NAME
    )
    copy_store(path, tmp_path / "copied.db")
    with SessionDB(tmp_path / "imported.db") as other:
        bundle.seek(0)
        assert other.import_bundle(bundle)["sessions_added"] == 1
    assert repair_state_db_schema(tmp_path / "copied.db")["error"] is None
    assert schema.migrate(tmp_path / "migrated.db") == list(schema.MIGRATIONS)
    assert no_standard_connections == []


def test_yoyo_runs_the_migrations_on_the_chosen_module() -> None:
    backend = schema._backend_class()
    assert backend.driver_module == driver.MODULE_NAME


# -- errors a caller written for sqlite3 catches ------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "DatabaseError",
        "InterfaceError",
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    ],
)
def test_each_error_class_of_the_module_is_the_standard_librarys_too(name: str) -> None:
    ours, theirs = getattr(sqlite3, name), getattr(standard, name)
    assert issubclass(ours, theirs)
    assert issubclass(ours, standard.Error)
    assert issubclass(ours, sqlite3.Error)


def test_errors_the_module_cannot_rebase_become_classes_of_both() -> None:
    # pysqlite3's Error and Warning come straight from Exception, whose subclasses'
    # bases Python does not change; standard_error makes one of each kind.
    for raised, standard_kind in (
        (sqlite3.Warning("You can only execute one statement at a time."), standard.Warning),
        (sqlite3.Error("x"), standard.Error),
    ):
        made = standard_error(raised)
        assert isinstance(made, standard_kind)
        assert isinstance(made, type(raised))
        assert made.args == raised.args
    operational = sqlite3.OperationalError("database is locked")
    assert standard_error(operational) is operational
    plain = ValueError("not SQLite's")
    assert standard_error(plain) is plain


def _store(tmp_path: Path) -> SessionDB:
    store = SessionDB(tmp_path / "state.db")
    store.create_session("a", "cli", started_at=T0)
    return store


#: What a caller written against Hermes' store does, and the standard class it catches.
RAW: dict[str, tuple[Callable[[SessionDB], Any], type[BaseException]]] = {
    "a method's constraint failure": (
        lambda s: s.append_message("missing", "user", "x"),
        standard.IntegrityError,
    ),
    "raw SQL's constraint failure": (
        lambda s: s._conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('no', 'u', 'x', 1)"
        ),
        standard.IntegrityError,
    ),
    "raw SQL on a missing table": (
        lambda s: s._conn.execute("SELECT * FROM no_such_table"),
        standard.OperationalError,
    ),
    "an error while rows are read": (
        lambda s: list(s._conn.execute("SELECT json('not json') FROM sessions")),
        standard.OperationalError,
    ),
    "a wrong number of bindings": (
        lambda s: s._conn.execute("SELECT ?", ()),
        standard.ProgrammingError,
    ),
    "several statements in one execute": (
        lambda s: s._conn.execute("SELECT 1; SELECT 2"),
        standard.ProgrammingError,  # Python 3.11+; 3.10 raised Warning (it is both)
    ),
    "several statements in a cursor's execute": (
        lambda s: s._conn.cursor().execute("SELECT 1; SELECT 2"),
        standard.Warning,
    ),
    "a script's error": (
        lambda s: s._conn.executescript("SELECT 1; SELECT * FROM no_such_table"),
        standard.OperationalError,
    ),
    "executemany's error": (
        lambda s: s._conn.executemany("INSERT INTO no_such_table VALUES (?)", [(1,)]),
        standard.OperationalError,
    ),
    "a closed store": (
        lambda s: (s.close(), s.get_session("a")),
        standard.ProgrammingError,
    ),
    "raw SQL on a closed connection": (
        lambda s: (s._conn.close(), s._conn.execute("SELECT 1")),
        standard.ProgrammingError,
    ),
}


@pytest.mark.parametrize("case", sorted(RAW))
def test_hermes_except_clauses_catch_what_reaches_a_caller(tmp_path: Path, case: str) -> None:
    call, kind = RAW[case]
    store = _store(tmp_path)
    try:
        # Hermes' own clauses, in the order its modules write them.
        with pytest.raises(kind) as caught:
            call(store)
        # What Hermes catches most: sqlite3.Error, or its DatabaseError branch.
        assert isinstance(caught.value, standard.Error)
        if issubclass(kind, standard.Warning):
            assert isinstance(caught.value, standard.ProgrammingError)
        else:
            assert isinstance(caught.value, standard.DatabaseError) == issubclass(
                kind, standard.DatabaseError
            )
    finally:
        store.close()


def test_a_locked_file_is_a_standard_operational_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    holder = sqlite3.connect(tmp_path / "state.db", isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        store._conn.execute("PRAGMA busy_timeout = 0")
        try:
            store._conn.execute("BEGIN IMMEDIATE")
        except standard.OperationalError as exc:  # Hermes' is_locked check
            assert "locked" in str(exc)
        else:
            raise AssertionError("BEGIN IMMEDIATE was not refused")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_the_package_errors_of_sqlites_kinds_are_the_standard_classes() -> None:
    for kind, base in (
        (hermes_models.WriteConflictError, standard.OperationalError),
        (hermes_models.ReadOnlyDatabaseError, standard.OperationalError),
        (hermes_models.SchemaTooNewError, standard.OperationalError),
        (hermes_models.UnsafeFileError, standard.OperationalError),
    ):
        assert issubclass(kind, base)


def test_a_read_only_store_refusing_a_write_is_caught_as_hermes_catches_it(
    tmp_path: Path,
) -> None:
    _store(tmp_path).close()
    with SessionDB(tmp_path / "state.db", read_only=True) as store:
        with pytest.raises(standard.OperationalError):
            store.create_session("b", "cli")


@pytest.mark.slow  # a console-script run
def test_the_console_script_reports_the_sqlite_it_runs_on(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        store.create_session("a", "cli")
    done = run("stats", "--db", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["sqlite"]["module"] == CHOSEN.__name__
    assert report["sqlite"]["version"] == CHOSEN.sqlite_version
    assert report["exposed"] is False
    shown = run("stats", "--db", str(path), cwd=tmp_path)
    version, name = CHOSEN.sqlite_version, CHOSEN.__name__
    assert f"SQLite                {version} ({name}), without the WAL-reset bug\n" in (
        shown.stdout
    )
