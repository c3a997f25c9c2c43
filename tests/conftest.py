from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pg_server
import pytest
from pg_server import Server

import hermes_models
from hermes_models import HermesDatabase, SessionDB
from hermes_models.driver import sqlite3
from hermes_models.store.postgres import PostgresDatabase, open_database

from factories import ALL_FACTORIES

#: The test-suite option: with ``HERMES_TEST_ENCRYPTED=1`` (and the encryption extra)
#: every store the tests create is encrypted: the key is set for this process and
#: every process it starts, and the tests' own connections through the package's
#: SQLite module (``hermes_models.driver.sqlite3.connect``: a Hermes-style writer of
#: plain SQL, a look at a table) open a file with the key where it applies, as
#: another program given the key would. A test whose store must stay plain (it reads
#: the file with the standard library's sqlite3, as Hermes does, or reads its bytes)
#: is marked ``plaintext_file``: it runs all the same, on plain stores.
ENCRYPTED_RUN = os.environ.get("HERMES_TEST_ENCRYPTED") == "1"
SUITE_KEY = "hermes-test-suite-key"
#: What an export of a test store adds on the command line: under the option the
#: store is encrypted, and exporting it to plain text asks for --plaintext.
EXPORT_FLAGS = ["--plaintext"] if ENCRYPTED_RUN else []
if ENCRYPTED_RUN:
    from hermes_models.store import cipher as _cipher

    if not hermes_models.driver.ENCRYPTION:
        raise pytest.UsageError("HERMES_TEST_ENCRYPTED=1 needs the encryption extra")
    os.environ[_cipher.KEY_VARIABLE] = SUITE_KEY
    _plain_connect = sqlite3.connect

    def _keyed_connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        if args or not isinstance(database, str):
            database = os.fspath(database)
            if args:
                return _plain_connect(database, *args, **kwargs)
        return _cipher.open_file(database, **kwargs)

    sqlite3.connect = _keyed_connect


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under ``HERMES_TEST_ENCRYPTED``, a test marked ``plaintext_file`` (and the fixtures
    set up for it, a module's too) gets no key; every other test the suite's key."""
    if not ENCRYPTED_RUN:
        return
    if item.get_closest_marker("plaintext_file") is not None:
        os.environ.pop("HERMES_MODELS_KEY", None)
    else:
        os.environ["HERMES_MODELS_KEY"] = SUITE_KEY


#: Whether this is the full run (tox on Python 3.13 sets ``HERMES_TEST_FULL=1``).
FULL_RUN = os.environ.get("HERMES_TEST_FULL") == "1"


def examples(full: int) -> int:
    """How many examples a property test draws: ``full`` in the full run, a quarter
    of it (at least 10) in the fast run of the other Pythons, whose budget is 90 s.

    Every property test still runs on every Python; the full run draws them all.
    """
    return full if FULL_RUN else max(10, full // 4)


@pytest.fixture(scope="session", autouse=True)
def _subprocess_bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Python processes the tests start keep their compiled bytecode in one folder.

    Many tests run the console script or ``python -c`` in a new process. With
    ``PYTHONDONTWRITEBYTECODE`` set (tox sets it) and the package installed
    editable, each of them compiled ``hermes_models`` from source again (0.2 s
    a process). Here they write and reuse ``.pyc`` files under pytest's
    temporary folder instead: never next to the sources, and the code they run
    is the same. This process itself is not affected (it read both variables
    when it started).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collect with the cyclic garbage collector off, then freeze what collection made.

    Collecting rewrites the assertions of every test module (and of the plugins'
    packages) into large syntax trees; with the collector on, each of its full
    passes walked all of them again, and collection took 9 s instead of 4.5 s.
    Freezing moves the test functions, fixtures and modules collection made out
    of the collector's view, so the passes during the tests do not walk them
    either. Nothing is freed later than it would have been: what collection
    made lives until the run ends anyway.
    """
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


#: Numbers the per-test temporary folders of this run (see :func:`tmp_path`).
_TMP_PATH_NUMBERS = itertools.count()


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A new empty folder for each test, named after the test, under the run's base folder.

    This replaces pytest's own ``tmp_path``, whose numbered folders are found
    by listing the whole base folder for every test: with 3,000 tests in one
    folder that listing alone cost 5.6 s a run. A counter of this process does
    the same job. The base folder, its retention across runs and the
    ``tmp_path_factory`` fixture are pytest's.
    """
    name = re.sub(r"\W", "_", request.node.name)[:30]
    path = tmp_path_factory.getbasetemp() / f"{name}{next(_TMP_PATH_NUMBERS)}"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a test does may reach the real ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))


@pytest.fixture(autouse=True)
def _reset_factory_sequences() -> None:
    for factory_class in ALL_FACTORIES:
        factory_class.reset_sequence(0, force=True)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file migrated by ``connect()``, closed so that it is a single file.

    Migrating a fresh file costs about sixty fsyncs (100 ms); copying this
    one costs a millisecond. Tests of migrating itself open their own files.
    """
    path = tmp_path_factory.mktemp("template") / "state.db"
    if not ENCRYPTED_RUN:
        hermes_models.connect(path).close()
        return path
    # Under HERMES_TEST_ENCRYPTED an encrypted template, and a plain twin for the
    # tests marked plaintext_file (fresh_store_file picks by the key in force).
    saved = os.environ.get("HERMES_MODELS_KEY")
    try:
        os.environ["HERMES_MODELS_KEY"] = SUITE_KEY
        hermes_models.connect(path).close()
        os.environ.pop("HERMES_MODELS_KEY")
        _plain_twin(path).parent.mkdir()
        hermes_models.connect(_plain_twin(path)).close()
    finally:
        if saved is None:
            os.environ.pop("HERMES_MODELS_KEY", None)
        else:
            os.environ["HERMES_MODELS_KEY"] = saved
    return path


def _plain_twin(template: Path) -> Path:
    return template.parent / "plain" / template.name


def fresh_store_file(template: Path, db_path: Path) -> Path:
    """A copy of the migrated template at ``db_path`` (its mode bits included); under
    HERMES_TEST_ENCRYPTED, of its plain twin when the test runs without the key."""
    if ENCRYPTED_RUN and "HERMES_MODELS_KEY" not in os.environ:
        template = _plain_twin(template)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(template, db_path)
    return db_path


@pytest.fixture
def migrated_copy(migrated_template: Path) -> Callable[[Path], Path]:
    """``migrated_copy(path)``: a copy of the migrated template at ``path``, returned.

    For fixtures and tests that want an empty store file of their own, at a
    name or place they choose, and do not test creating or migrating one.
    """
    return lambda path: fresh_store_file(migrated_template, path)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a test runs on: ``"sqlite"``, or ``"postgresql"`` too for tests
    marked ``@pytest.mark.backends("sqlite", "postgresql")`` (see
    :func:`pytest_generate_tests`)."""
    return str(request.param)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that uses a store on the backends its ``backends`` mark names
    (SQLite alone without the mark)."""
    if "backend" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        names = marker.args if marker is not None else ("sqlite",)
        metafunc.parametrize("backend", names, indirect=True)


#: Fixtures that reach a PostgreSQL server.
_SERVER_FIXTURES = frozenset({"pg", "pg_url", "pg_db"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``postgresql`` every test that runs on a server (its ``backend`` is
    PostgreSQL, or it asks for a server fixture), so that a run can choose them."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_server = callspec is not None and callspec.params.get("backend") == "postgresql"
        if on_server or _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgresql)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start what the chosen tests marked ``started_early`` wait for (a minute of a
    lock held by another process, say): each waits in the background from here,
    beside the tests run before it, and the test itself then reads the outcome."""
    for item in session.items:
        marker = item.get_closest_marker("started_early")
        if marker is not None and marker.args[0] not in _STARTED_EARLY:
            _STARTED_EARLY.append(marker.args[0])
            marker.args[0]()


#: What pytest_collection_finish started; each is stopped when the run ends.
_STARTED_EARLY: list[Any] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """End the child processes a failed test left running: Python's exit waits for
    every non-daemon child, and one still looping (an appender whose test raised
    before telling it to stop) would hold the run forever."""
    for child in multiprocessing.active_children():
        child.kill()
        child.join(10)
    for started in _STARTED_EARLY:
        started.stop()


@pytest.fixture
def database(
    backend: str, db_path: Path, migrated_template: Path, request: pytest.FixtureRequest
) -> Iterator[HermesDatabase]:
    """A migrated store the models are bound to: a file, or a PostgreSQL database."""
    if backend == "postgresql":
        target: Any = request.getfixturevalue("pg").new_database()
    else:
        target = fresh_store_file(migrated_template, db_path)
    db = hermes_models.connect(target)
    yield db
    db.close()


@pytest.fixture
def store(
    backend: str, db_path: Path, migrated_template: Path, request: pytest.FixtureRequest
) -> Iterator[SessionDB]:
    """A SessionDB on a fresh store (the models are bound to it too): a file, or a
    PostgreSQL database."""
    if backend == "postgresql":
        target: Any = request.getfixturevalue("pg").new_database()
    else:
        target = fresh_store_file(migrated_template, db_path)
    session_db = SessionDB(target)
    yield session_db
    session_db.close()


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg() -> Server:
    """The PostgreSQL server of this run (``tests/pg_server.py`` finds or starts it)."""
    return pg_server.server()


@pytest.fixture(autouse=True)
def _drop_pg_databases() -> Iterator[None]:
    """Databases a test made are dropped after it (each is a copy of the template)."""
    yield
    server = pg_server.started()
    if server is not None and server.created:
        server.drop_new()


@pytest.fixture
def pg_url(pg: Server) -> str:
    """URL of a new database with every migration applied."""
    return pg.new_database()


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[PostgresDatabase]:
    """A handle on a new migrated database (the models are not bound to it: ``using()``)."""
    db = open_database(pg_url, migrate_first=False)
    yield db
    db.close()


@contextlib.contextmanager
def plain_connection(db: Any, db_path: Path) -> Iterator[Any]:
    """A connection of its own to the store of ``db``, outside the package: plain
    sqlite3 to the file, or psycopg (with the package's text escaping) taking the
    same ``?`` SQL (:class:`hermes_models.store.postgres.QmarkConnection`)."""
    if db.dialect == "postgresql":
        import psycopg

        from hermes_models.store.postgres import QmarkConnection, adapt_text

        server = psycopg.connect(db.target.url, autocommit=True)
        adapt_text(server)
        if db.target.schema:
            server.execute(f"SET search_path TO {db.target.schema}, public")
        try:
            yield QmarkConnection(server)
        finally:
            server.close()
    else:
        conn = sqlite3.connect(db_path)
        try:
            yield conn
        finally:
            conn.close()


def target_of(db: Any) -> Any:
    """What names the store of ``db`` to ``SessionDB()``/``connect()``: the file's
    path, or the PostgreSQL URL (with its schema)."""
    if db.dialect == "postgresql":
        schema = db.target.schema
        sep = "&" if "?" in db.target.url else "?"
        return db.target.url + (f"{sep}schema={schema}" if schema else "")
    return db.path
