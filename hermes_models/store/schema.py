"""Applying the yoyo migrations, and adopting files an older Hermes wrote.

The schema lives in ``migrations/`` (shipped inside the wheel as
``hermes_models/migrations``) and nowhere else. :func:`migrate` applies what
is pending while holding yoyo's lock, so several processes starting at once
apply each migration exactly once; a lock left behind by a dead process is
reclaimed.

A file with Hermes tables but no yoyo bookkeeping is adopted. At schema
version 16 the baseline migrations are only marked as applied: nothing in the
file changes. An older file (v2 to v15) runs the baseline migrations, which
add the missing columns, rebuild the search indexes and tag subagent
children, all in one transaction: a failure leaves the file as it was.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Collection, Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .. import driver
from ..driver import sqlite3
from ..errors import MigrationError, is_lock_error
from . import grams, journal, postgres, sqlite_sql
from .caches import BoundedCache
from .cipher import open_file
from .db import HermesDatabase
from .files import (
    SCHEMA_VERSION,
    check_file_kind,
    check_header,
    check_schema_version,
    check_writable,
    is_postgres_url,
    refuse_planted,
    resolve_file,
    secure_files,
    sqlite_uri,
    stored_schema_version,
)
from .migration_names import migration_hash, migration_ids
from .writes import retry_locked

if TYPE_CHECKING:
    from typing import Any

    from .files import StrPath

logger = logging.getLogger("hermes_models")

#: The migrations that together make the Hermes v16 layout.
BASELINE = (
    "0001_adopt_hermes_tables",
    "0002_hermes_v16_schema",
    "0003_message_search",
    "0004_tag_delegate_children",
    "0005_delegate_tags_by_end_reason",
    "0006_search_index_upkeep",
)

#: Every migration in order: the baseline, then what this package adds beyond the
#: Hermes v16 layout (the gram index, :mod:`hermes_models.store.grams`; messages by time;
#: the PostgreSQL functions' parallel labels and BM25 ranking, nothing on SQLite).
MIGRATIONS = (
    *BASELINE,
    "0007_cjk_gram_index",
    "0008_time_order_indexes",
    "0009_cjk_gram_changes",
    "0010_parallel_labels",
    "0011_search_bm25",
)

#: The migration applied again whenever the full-text indexes are out of step
#: with the SQLite build that opens the file.
SEARCH_UPKEEP = "0006_search_index_upkeep"

#: The migration that makes the gram index (:mod:`hermes_models.store.grams`) as it is now,
#: applied again (it creates only what is missing) when a build without FTS5 left it
#: out or its triggers are gone.
GRAM_UPKEEP = "0009_cjk_gram_changes"

#: Full-text tables and the triggers that keep each in step with messages.
SEARCH_OBJECTS = {
    table: (table, f"{table}_insert", f"{table}_delete", f"{table}_update")
    for table in ("messages_fts", "messages_fts_trigram")
}
_PROBES = {"messages_fts": "", "messages_fts_trigram": ", tokenize='trigram'"}

#: Seconds to wait for another process's migration lock before giving up.
LOCK_WAIT_S = 60
LOCK_POLL_S = 2

_process_lock = threading.Lock()


def migrations_dir() -> Path:
    """The folder holding the migration files (:func:`migrations_folder`), as a
    :class:`~pathlib.Path`.

    Raises:
        MigrationError: neither the installed package nor a checkout has one.
    """

    return Path(migrations_folder())


def migrations_folder() -> str:
    """The folder holding the migration files, as text.

    Raises:
        MigrationError: neither the installed package nor a checkout has one.
    """
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the package
    installed = os.path.join(here, "migrations")
    if os.path.isdir(installed):  # an installed package: what resources.files() names
        return installed
    checkout = os.path.join(os.path.dirname(here), "migrations")
    if os.path.isdir(checkout):
        return checkout
    # Only a package imported from a zip file gets here: importlib.resources (slow
    # to import) is loaded for it alone.

    shipped = resources.files("hermes_models").joinpath("migrations")
    if shipped.is_dir():
        return str(shipped)
    raise MigrationError("the migrations folder is missing from this installation")


def yoyo_url(path: StrPath) -> str:
    """A ``sqlite:///`` URL yoyo opens at exactly ``path`` (``#``, ``?``, ``%`` escaped)."""
    # yoyo pastes the URL path into "file:<path>?cache=shared" unescaped, and
    # SQLite then decodes it as a URI: percent-encoding survives that trip.
    return "sqlite:///" + sqlite_uri(path)[len("file:") :]


def migrate(
    target: str | os.PathLike[str] | None = None,
    *,
    journal_mode: str | None = None,
    synchronous: str | int | None = None,
) -> list[str]:
    """Apply pending migrations to ``target`` and return the ids applied.

    ``target`` is a file (a path or ``sqlite:///`` URL; None: the default
    store), or a ``postgresql://`` URL, whose store is migrated by
    :func:`hermes_models.store.postgres.migrate`. ``journal_mode`` and ``synchronous``
    are the journal settings of :mod:`hermes_models.store.journal` (a new file is put
    in its journal mode before the first migration).

    Raises:
        ValueError: ``journal_mode`` or ``synchronous`` is not a value accepted.
        MissingDriverError: a ``postgresql://`` URL, and psycopg is not installed.
        NotADatabaseError: the file is not an SQLite database.
        SchemaTooNewError: a newer Hermes wrote the file (nothing is written).
        MigrationError: the migration lock could not be taken, the file has a
            ``sessions`` table that is not Hermes', or upgrading an older Hermes
            file failed (it is left as it was).
    """
    chosen = journal.settings(journal_mode, synchronous)
    if is_postgres_url(target):
        postgres.parse_url(str(target), argument="target")  # a bad URL named as connect() names it
        return postgres.migrate(str(target))
    path = resolve_file(target)
    check_file_kind(path)
    refuse_planted(path)  # before SQLite opens anything
    check_header(path)
    check_schema_version(path)
    check_writable(path)
    secure_files(path, create=True)
    return apply_pending(path, journal_settings=chosen)


def apply_pending(
    path: StrPath,
    applied: Collection[str] | None = None,
    *,
    journal_settings: journal.JournalSettings | None = None,
) -> list[str]:
    """The work of :func:`migrate` on a file already checked as it checks it (an SQLite
    file or none, not newer than v16, writable, private); returns the ids applied.

    An up-to-date file costs one read of the applied migrations (none when the
    caller passes the keys it read, ``applied``: see
    :attr:`~hermes_models.store.shape.FileShape.migrations`): yoyo is neither imported
    nor run. Whatever ``applied`` says, pending work is decided again under
    yoyo's lock.
    """
    folder = migrations_folder()
    if applied is not None:
        if all(migration_hash(i) in applied for i in migration_ids(folder)):
            return []
    elif _up_to_date(path, folder):
        return []
    migrations = _migrations()
    # A migration that another process's lock request interrupts ("database is
    # locked" inside its transaction: SQLite refuses to wait there, to avoid a
    # deadlock) was rolled back whole; the pending work is decided again. The
    # ones committed before it stay applied, and are reported.
    done: list[str] = []
    chosen = journal_settings or journal.settings()
    retry_locked(lambda: _apply_under_lock(path, migrations, done, chosen))
    secure_files(path, create=False)
    return done


def _apply_under_lock(
    path: StrPath, migrations: Any, done: list[str], chosen: journal.JournalSettings
) -> None:
    """Apply what is pending under yoyo's lock (see :func:`apply_pending`), adding
    the id of each migration to ``done`` as it commits."""
    with _process_lock, _backend(path, chosen) as backend, _locked(backend):
        applied = set(backend.get_applied_migration_hashes())
        baseline = [m for m in migrations if m.id in BASELINE]
        if not any(m.hash in applied for m in baseline):
            version = _hermes_version(backend.connection)
            if version == SCHEMA_VERSION:
                backend.mark_migrations(baseline)
                # Said once, as a warning a person sees: the file changes here (yoyo's
                # tables, the search additions), and never again for this reason.
                logger.warning(
                    "%s: adopted this Hermes v%d store (its rows as they are; added the"
                    " migrations' records and search indexes; Hermes keeps using it)",
                    path,
                    version,
                )
            elif version is not None:
                _adopt(backend, baseline, version)
                done.extend(m.id for m in baseline)
                logger.warning(
                    "%s: adopted this Hermes v%d store and upgraded it to v16 (rows kept)",
                    path,
                    version,
                )
        # One at a time, each in a transaction of its own: an interruption after
        # some of them leaves those applied.
        for migration in backend.to_apply(migrations):
            _apply_one(backend, migration)
            done.append(migration.id)


def _apply_one(backend: Any, migration: Any, *, mark: bool = True) -> None:
    """Run ``migration``'s steps, log it and (``mark``) record it as applied, all in one
    ``BEGIN IMMEDIATE`` transaction.

    yoyo's own ``apply_one`` commits the steps (on a second connection), the log
    row and the mark in three transactions: a lock conflict or a crash between
    them left a migration applied but unmarked, to be run and logged again by
    the next attempt. Here the three commit together or not at all, and a lock
    conflict rolls them back and starts the migration over after a short pause.
    """

    def run() -> None:
        with _immediate_transaction()(backend):
            migration.process_steps(backend, "apply")
            backend.log_migration(migration, "apply")
            if mark:
                backend.mark_one(migration, log=False)

    logger.debug("applying migration %s", migration.id)
    retry_locked(run)


def _migrations(folder: StrPath | None = None) -> Any:
    return load_migrations(folder or migrations_folder())


#: Parsed migration folders: yoyo splits every SQL file with sqlparse (about
#: 20 ms for the eight), and its migration objects, once loaded, hold only the
#: statements, so one parse serves every file and server this process migrates.
_PARSED: BoundedCache[tuple[object, ...], Any] = BoundedCache("migration folders", 4)


def load_migrations(folder: StrPath) -> Any:
    """yoyo's migrations in ``folder``, loaded, parsed once per process.

    The key is the folder and the name, size and modification time of each of
    its files: an edited, added or removed file is read again.
    """
    # yoyo is imported only when there is migrating to do: opening a file that
    # is up to date needs neither yoyo nor the migration files parsed.
    from yoyo import read_migrations

    def parse() -> Any:
        migrations = read_migrations(str(folder))
        for migration in migrations:
            migration.load()
        return migrations

    with os.scandir(folder) as entries:
        stats = sorted(
            (entry.name, entry.stat().st_size, entry.stat().st_mtime_ns)
            for entry in entries
            if entry.is_file()
        )
    return _PARSED.get((os.fspath(folder), *stats), parse)


def _up_to_date(path: StrPath, folder: StrPath) -> bool:
    """True when every migration in ``folder`` is recorded as applied (read without any write).

    Every process checks this on its first open: taking yoyo's lock (a write)
    only when something is pending keeps start-up from queueing behind
    another process's long write transaction.
    """
    migrations = [migration_hash(migration_id) for migration_id in migration_ids(folder)]
    try:
        if os.stat(path).st_size == 0:
            return False
    except OSError:
        return False
    try:
        conn = open_file(sqlite_uri(path, mode="ro"), uri=True, timeout=5.0)
    except sqlite3.Error:
        return False
    try:
        rows = conn.execute(sqlite_sql.APPLIED_MIGRATIONS).fetchall()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    applied = {row[0] for row in rows}
    return all(key in applied for key in migrations)


@functools.cache
def _backend_class() -> Any:
    """yoyo's SQLite backend on the module :mod:`hermes_models.driver` chose (yoyo's
    own imports the standard library's :mod:`sqlite3`)."""
    from yoyo.backends.core.sqlite3 import SQLiteBackend  # only when there is migrating to do

    def connect(self: Any, dburi: Any) -> Any:
        # yoyo's own, through open_file: the file's key, where it has one.
        conn = open_file(
            f"file:{dburi.database}?cache=shared",
            uri=True,
            detect_types=self.driver.PARSE_DECLTYPES,
        )
        conn.isolation_level = None
        return conn

    return type(
        "SQLiteBackend",
        (SQLiteBackend,),
        {"driver_module": sqlite3.__name__, "connect": connect},
    )


@contextlib.contextmanager
def _backend(path: StrPath, chosen: journal.JournalSettings | None = None) -> Iterator[Any]:
    def open_backend() -> Any:
        # yoyo's get_backend() in three steps, so that a file that is locked or
        # is not a database does not leave yoyo's connection open behind it
        # (yoyo is imported only when there is migrating to do).
        from yoyo.connections import parse_uri
        from yoyo.migrations import default_migration_table

        parsed = parse_uri(yoyo_url(path))
        backend = _backend_class()(parsed, default_migration_table)
        try:
            # The first connection to a new file gives it its journal mode.
            conn = backend.connection
            journal.set_connection_defaults(conn)
            journal.apply(
                conn, str(path), chosen or journal.settings(), vulnerable=driver.WAL_RESET_BUG
            )
            backend.init_database()
            tables = {row[0] for row in backend.execute(sqlite_sql.SCHEMA_NAMES)}
        except BaseException:
            backend.connection.close()
            raise
        if "yoyo_lock" not in tables:
            # Another process held the file while yoyo created its lock table.
            backend.connection.close()
            raise sqlite3.OperationalError("database is locked: yoyo_lock not created yet")
        return backend

    backend = retry_locked(open_backend)
    # SQLite always rolls back DDL with its transaction; yoyo's own probe can
    # say otherwise when another process held the lock at that moment.
    backend.has_transactional_ddl = True
    with backend:
        yield backend


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _reclaim_stale_lock(backend: Any) -> bool:
    row = backend.execute(sqlite_sql.YOYO_LOCK_PID).fetchone()
    if row is None:
        return False
    pid = int(row[0])
    # Threads of this process migrate one at a time, so a lock row with our
    # pid is left over from a dead process whose pid we now have.
    if pid != os.getpid() and _pid_alive(pid):
        return False
    logger.warning("reclaiming the migration lock left by dead process %d", pid)
    backend.break_lock()
    return True


@contextlib.contextmanager
def _locked(backend: Any) -> Iterator[None]:
    from yoyo.exceptions import LockTimeout  # yoyo only when there is migrating to do

    deadline = time.monotonic() + LOCK_WAIT_S
    with contextlib.ExitStack() as stack:
        while True:
            retry_locked(lambda: _reclaim_stale_lock(backend))
            try:
                stack.enter_context(backend.lock(timeout=LOCK_POLL_S))
                break
            except LockTimeout as exc:
                if time.monotonic() > deadline:
                    raise MigrationError(f"could not take the migration lock: {exc}") from exc
        yield


#: Columns every Hermes ``sessions`` / ``messages`` table has had since the first release.
_HERMES_CORE = {
    "sessions": {"id", "source", "started_at"},
    "messages": {"id", "session_id", "role", "timestamp"},
}


def _hermes_version(conn: sqlite3.Connection) -> int | None:
    """The Hermes schema version of a file without yoyo bookkeeping; None when empty.

    A file without a version row counts as version 0.

    Raises:
        MigrationError: the file has a ``sessions`` or ``messages`` table
            that is not Hermes' (nothing is changed).
    """
    tables = {row[0] for row in conn.execute(sqlite_sql.TABLE_NAMES)}
    if "sessions" not in tables:
        return None
    for table, required in _HERMES_CORE.items():
        if table not in tables:
            continue
        present = {row[1] for row in conn.execute(sqlite_sql.table_info(table))}
        missing = sorted(required - present)
        if missing:
            raise MigrationError(
                f"the file has a {table!r} table without {', '.join(missing)}: it is not a "
                "Hermes session store, and hermes_models will not change it"
            )
    return stored_schema_version(conn) or 0


@functools.cache
def _immediate_transaction() -> Any:
    """yoyo's transaction class, begun with ``BEGIN IMMEDIATE``: the write lock is taken first."""
    from yoyo.backends.base import TransactionManager  # yoyo only when migrating

    class ImmediateTransaction(TransactionManager):  # type: ignore[misc]
        def _do_begin(self) -> None:
            self.backend.execute(sqlite_sql.BEGIN_IMMEDIATE)
            # What yoyo's own begin() records, so nested steps use savepoints.
            self.backend._in_transaction = True

    return ImmediateTransaction


def _adopt(backend: Any, baseline: list[Any], version: int) -> None:
    """Run the baseline migrations on a Hermes file in one transaction.

    The write lock is taken before anything is read, and the whole upgrade
    (the migrations and yoyo's record of them) commits together or not at
    all; a lock conflict rolls back and starts over after a short pause.

    Raises:
        MigrationError: a step failed; the file is as it was before.
    """

    def run() -> None:
        with _immediate_transaction()(backend):
            for migration in baseline:
                migration.process_steps(backend, "apply")
                backend.log_migration(migration, "apply")
                backend.mark_one(migration, log=False)
            if not search_indexes_built(backend.connection):
                # This build cannot run the indexes: the file keeps its old
                # version, as Hermes does, until a build that can has built them.
                backend.execute(sqlite_sql.SET_SCHEMA_VERSION, {"version": version})

    try:
        retry_locked(run)
    except sqlite3.Error as exc:
        if is_lock_error(exc):
            raise
        raise MigrationError(
            f"upgrading the Hermes v{version} database failed and was rolled back "
            f"(the file is unchanged): {exc}"
        ) from exc


# -- keeping the search indexes in step with the SQLite build ------------------------------


def search_indexes_built(conn: Any) -> bool:
    """True when both full-text tables and their six triggers exist."""
    names = {row[0] for row in conn.execute(sqlite_sql.SEARCH_OBJECT_NAMES)}
    return all(set(objects) <= names for objects in SEARCH_OBJECTS.values())


def search_support(db: HermesDatabase) -> dict[str, bool]:
    """Which full-text tables this SQLite build can run (probed once per handle)."""
    known: dict[str, bool] | None = getattr(db, "search_support", None)
    if known is not None:
        return known
    conn = db.connection()
    present = {row[0] for row in conn.execute(sqlite_sql.TABLES_NAMED, tuple(_PROBES))}
    support = {}
    for table, options in _PROBES.items():
        try:
            if table in present:
                # Preparing a read connects the file's own table: it runs here exactly
                # when this build has its module and tokenizer (and costs far less
                # than creating a scratch table).
                conn.execute(sqlite_sql.read_nothing_from(table)).fetchall()
            else:
                conn.execute(sqlite_sql.create_fts5_probe(options))
                conn.execute(sqlite_sql.DROP_FTS5_PROBE)
            support[table] = True
        except sqlite3.Error:
            support[table] = False
    db.search_support = support
    return support


def search_out_of_step(db: HermesDatabase) -> bool:
    """True when an index this build can run is missing (a table or a trigger), or
    an index it cannot run still has triggers (which would make writes fail)."""
    conn = db.connection()
    names = {row[0] for row in conn.execute(sqlite_sql.SEARCH_OBJECT_NAMES)}
    support = search_support(db)
    for table, supported in support.items():
        objects = set(SEARCH_OBJECTS[table])
        if supported and not objects <= names:
            return True
        if not supported and (objects - {table}) & names:
            return True
    # The gram index, which a build without FTS5 leaves out of migration 0009 (or
    # whose triggers another program dropped).
    return bool(support.get("messages_fts")) and not grams.present(conn)


def keep_search_indexes(db: HermesDatabase) -> bool:
    """Bring the full-text indexes in step with this SQLite build; True if it had to.

    A missing index this build supports is created and filled from every
    message, and the schema version is raised to 16 once both exist; an
    index it cannot run loses its triggers; a missing gram index is created
    (empty: searches read its rows the slow way until they are indexed). The
    work is the migrations :data:`SEARCH_UPKEEP` and :data:`GRAM_UPKEEP`, applied
    again under the migration lock.
    """
    if db.read_only or not search_out_of_step(db):
        return False
    upkeep = [m for m in _migrations() if m.id in (SEARCH_UPKEEP, GRAM_UPKEEP)]
    with _process_lock, _backend(db.path) as backend, _locked(backend):
        for migration in upkeep:
            _apply_one(backend, migration, mark=False)  # marked when it was first applied
    # A statement that runs makes this connection load the changed schema; until
    # then it would compile writes with the triggers it read before.
    db.connection().execute(sqlite_sql.READ_SCHEMA).fetchone()
    logger.info("%s: brought the full-text indexes in step with this SQLite build", db.path)
    return True


#: Opt-in migration sets: subfolders of ``migrations/``, applied only on request.
TELEGRAM_TOPICS = "telegram_topics"


def optional_migrations_dir(name: str) -> Path:
    """The folder of the opt-in migration set ``name`` (e.g. :data:`TELEGRAM_TOPICS`).

    Raises:
        MigrationError: there is no such set in this installation.
    """
    folder = migrations_dir() / name
    if not folder.is_dir():
        raise MigrationError(f"no opt-in migration set {name!r} in this installation")
    return folder


def migrate_optional(target: str | os.PathLike[str] | None, name: str) -> list[str]:
    """Apply the pending migrations of the opt-in set ``name`` to ``target``; returns their ids.

    The baseline must already be applied (the set builds on its tables).
    Runs under yoyo's lock like :func:`migrate`.
    """
    path = resolve_file(target)
    folder = optional_migrations_dir(name)
    if _up_to_date(path, folder):
        return []
    migrations = _migrations(folder)
    with _process_lock, _backend(path) as backend, _locked(backend):
        todo = backend.to_apply(migrations)
        for migration in todo:
            _apply_one(backend, migration)
    secure_files(path, create=False)
    return [m.id for m in todo]
