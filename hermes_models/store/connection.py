"""Opening a store: :func:`connect` finds the file, probes its structure, applies
pending migrations and binds every model to the handle.

One handle per file and mode is kept while something holds it (a
``SessionDB``, the models' binding), so a second ``connect()`` of the same
file returns the same handle. A file newer than the v16 schema this package
writes is opened read-only and said so once. This module sits above both
:mod:`hermes_models.store.db` (the handle) and :mod:`hermes_models.store.schema` (the
migrations), which know nothing of each other's callers.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING, cast

import peewee

from ..checks import check_flag
from ..driver import sqlite3
from ..errors import NotADatabaseError
from . import cipher, journal, postgres, redaction, schema, sqlite_sql
from .binding import database
from .caches import BoundedSet
from .cipher import not_a_database, set_key
from .db import HermesDatabase, record_init_error
from .files import (
    SCHEMA_VERSION,
    check_file_kind,
    check_ownership,
    check_writable,
    is_postgres_url,
    probe_file_held,
    read_only_params,
    refuse_planted,
    resolve_file,
    roll_back_hot_journal,
    secure_files,
    writable_sidecars,
)
from .redaction import Redactor
from .shape import FileShape, probe
from .writes import retry_locked

if TYPE_CHECKING:
    from typing import Any

    from .backend import Backend, SqliteFile
    from .postgres import PostgresDatabase

    # The type checker holds both handles to the one interface they implement.
    def _a_file_is_a_backend(db: HermesDatabase) -> SqliteFile:
        return db

    def _a_server_is_a_backend(db: PostgresDatabase) -> Backend:
        return db


logger = logging.getLogger("hermes_models")

#: Open handles by file, mode and journal settings, while something holds them (a
#: SessionDB, the models' binding).
_databases: weakref.WeakValueDictionary[
    tuple[str, bool, journal.JournalSettings, Redactor | None], HermesDatabase
] = weakref.WeakValueDictionary()
#: Files this process migrated (forgetting one only costs a check that nothing is pending).
_migrated: BoundedSet[str] = BoundedSet("migrated files", 1024)
_open_lock = threading.RLock()


def _open_connection(db: HermesDatabase) -> None:
    """Open this thread's connection, raising sqlite3's own error as sqlite3 would."""
    try:
        db.connect()
    except peewee.DatabaseError as exc:
        cause = getattr(exc, "orig", None)
        if isinstance(cause, sqlite3.Error):
            raise cause from None
        raise


def connect(
    target: str | os.PathLike[str] | None = None,
    *,
    migrate: bool = True,
    read_only: bool = False,
    journal_mode: str | None = None,
    synchronous: str | int | None = None,
    redact: bool | Redactor | None = None,
    key: str | None = None,
) -> HermesDatabase:  # a PostgresDatabase for a postgresql:// URL: the same interface
    """Open the Hermes database ``target`` and bind every model to it.

    ``target`` is a path or ``sqlite:///`` URL; ``None`` means
    ``$HERMES_HOME/state.db``. A ``postgresql://`` URL opens a store on a
    PostgreSQL server instead (see :mod:`hermes_models.store.postgres`). With
    ``migrate=True`` pending migrations are applied first. A second call for
    the same file returns the same handle.
    ``read_only=True`` opens the file with ``mode=ro``: it must exist.
    ``journal_mode`` (``"wal"``, ``"delete"``) and ``synchronous`` (``"off"``,
    ``"normal"``, ``"full"``, ``"extra"``, 0-3) are the journal settings of
    :mod:`hermes_models.store.journal`; None reads ``HERMES_MODELS_JOURNAL_MODE`` and
    ``HERMES_MODELS_SYNCHRONOUS``. ``redact`` (True, False, or a
    :class:`~hermes_models.store.redaction.Redactor`) redacts secrets from every
    message, tool call and title the handle writes
    (:mod:`hermes_models.store.redaction`); None reads ``HERMES_MODELS_REDACT``
    (off unless set). Handles with other redaction are other handles.

    ``key`` is the file's encryption key (SQLCipher, the ``encryption`` extra: see
    :mod:`hermes_models.store.cipher`), used by every connection this process opens
    to the file from now on; None uses ``HERMES_MODELS_KEY`` or
    ``HERMES_MODELS_KEY_FILE`` where set. A new file opened with a key is created
    encrypted; an existing plain one is opened plain (``hermes-models encrypt``
    converts it).

    A file newer than the v16 schema this package writes (a later Hermes, or
    a fork: see :mod:`hermes_models.store.shape`) is always opened read-only, with
    one warning in the log; nothing in it is changed, and every write raises
    :class:`SchemaTooNewError`.

    Raises:
        NotADatabaseError: the file is not an SQLite database.
        EncryptedStoreError: the file is encrypted and no key given opens it.
        MissingDriverError: a key is given and sqlcipher3 is not installed.
        FileNotFoundError: ``read_only=True`` and the file does not exist.
        TypeError: ``migrate`` or ``read_only`` is not a bool (``"false"`` would be
            read as true).
        ValueError: ``journal_mode``, ``synchronous`` or ``redact`` (or its
            environment variable) is not a value accepted; a redaction pattern is bad.
    """
    migrate = check_flag(migrate, "migrate")
    read_only = check_flag(read_only, "read_only")
    chosen = journal.settings(journal_mode, synchronous)
    if key is not None and is_postgres_url(target):
        raise ValueError(
            "key: encryption is for SQLite files; a PostgreSQL server encrypts its own"
        )
    redactor = redaction.settings(redact)
    if is_postgres_url(target):
        return _connect_postgres(
            str(target), migrate=migrate, read_only=read_only, redactor=redactor
        )
    try:
        path = resolve_file(target)
        if key is not None:
            set_key(path, key)
        slot = (path, read_only, chosen, redactor)
        with _open_lock:
            db = _databases.get(slot)
            if db is not None and not os.path.exists(path):
                _databases.pop(slot, None)
                _migrated.discard(path)
                db = None
            if db is not None and not db.read_only:
                # Another process may have upgraded the file since we opened it.
                cached = db
                shape = retry_locked(lambda: probe(cached.connection()))
                if shape.newer:
                    db.shape = shape
                    _databases.pop(slot, None)
                    db.close()
                    db = None
                elif shape != db.shape:
                    # Another program changed the structure (a fork added a column):
                    # what SQL is built for, and what an export carries, follows it.
                    db.shape = shape
            if db is None:
                db = _open(path, read_only=read_only, migrate=migrate, chosen=chosen)
                db.redactor = redactor
                _databases[slot] = db
            elif migrate and not db.read_only and path not in _migrated:
                _apply_migrations(path, chosen)
            if migrate and not db.read_only:
                # Every open: an index a build without FTS5 left out is built now.
                schema.keep_search_indexes(db)
    except Exception as exc:
        record_init_error(exc)
        raise
    database.initialize(db)
    return db


#: Open PostgreSQL handles by URL and mode, while something holds them.
_servers: weakref.WeakValueDictionary[tuple[str, bool, Redactor | None], PostgresDatabase] = (
    weakref.WeakValueDictionary()
)
#: PostgreSQL stores this process migrated.
_migrated_servers: BoundedSet[str] = BoundedSet("migrated PostgreSQL stores", 1024)


def _connect_postgres(
    url: str, *, migrate: bool, read_only: bool, redactor: Redactor | None = None
) -> HermesDatabase:
    """:func:`connect` for a ``postgresql://`` URL."""

    try:
        target = postgres.parse_url(url, argument="target")
        key = (target.key(), read_only, redactor)
        with _open_lock:
            db = _servers.get(key)
            if db is None:
                if migrate and not read_only and key[0] not in _migrated_servers:
                    postgres.migrate(url)
                    _migrated_servers.add(key[0])
                db = postgres.open_database(url, migrate_first=False, read_only=read_only)
                db.redactor = redactor
                db.connect(reuse_if_open=True)  # the server answers (and the store's shape)
                db.release()
                _servers[key] = db
    except Exception as exc:
        record_init_error(exc)
        raise
    database.initialize(db)
    return cast("HermesDatabase", db)


def _apply_migrations(path: str, chosen: journal.JournalSettings) -> None:
    schema.migrate(path, journal_mode=chosen.mode, synchronous=chosen.synchronous)
    _migrated.add(path)


#: Newer files this process has said it opens read-only (said once per file).
_told_newer: BoundedSet[str] = BoundedSet("newer files announced", 1024)


def _open(
    path: str, *, read_only: bool, migrate: bool, chosen: journal.JournalSettings
) -> HermesDatabase:
    """A new handle on ``path`` (see :func:`connect`)."""
    check_file_kind(path)
    # Before SQLite opens anything, the probes included: SQLite running as root
    # would take a sidecar another user planted over, and the checks would pass.
    refuse_planted(path)
    params = None
    if read_only:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist (opened read-only)")
        check_ownership(path, read_only=True)
        params = read_only_params(path)
    else:
        writable_sidecars(path)  # before the probe's connection maps the -shm
        roll_back_hot_journal(path)  # before read-only probes, which cannot
    # Before any connection of ours can switch the file to WAL. Another
    # process creating the file holds it locked for the whole migration.
    # The probe's connection also does the SQLite half of check_header(). A
    # writable open holds it until its own connection has read the file (see
    # probe_file_held): the WAL's two files are not deleted and made again.
    shape, held = retry_locked(
        lambda: probe_file_held(path, params, pages=True, hold=not read_only)
    )
    try:
        db = _open_probed(
            path, shape, params=params, read_only=read_only, migrate=migrate, chosen=chosen
        )
    finally:
        if held is not None:
            held.close()
    if not db.read_only:
        secure_files(path, create=False)
    if db.shape is not None and db.shape.newer and _told_newer.add(path):
        logger.warning(
            "%s has Hermes schema version %s, newer than %d, the highest hermes_models "
            "writes: opened read-only, nothing in it will be changed",
            path,
            db.shape.describe_version(),
            SCHEMA_VERSION,
        )
    return db


def _open_probed(
    path: str,
    shape: FileShape | None,
    *,
    params: dict[str, str] | None,
    read_only: bool,
    migrate: bool,
    chosen: journal.JournalSettings,
) -> HermesDatabase:
    """:func:`_open` once the file has been probed: ``shape`` is what the probe read."""
    if shape is not None and shape.newer and not read_only:
        check_ownership(path, read_only=True)
        params = read_only_params(path)
        read_only = True
    applied: list[str] = []
    if not read_only:
        check_writable(path)
        secure_files(path, create=True)
        if migrate and path not in _migrated:
            # Checked above as migrate() checks a file: only the pending work is left.
            applied = schema.apply_pending(
                path, None if shape is None else shape.migrations, journal_settings=chosen
            )
            _migrated.add(path)
    db = HermesDatabase(path, read_only=read_only, params=params, journal_settings=chosen)
    # The probe above still describes the file unless a migration just changed it.
    probed = shape if shape is not None and not applied else None

    def open_checked() -> None:
        try:
            _open_connection(db)
            db.shape = probed or probe(db.connection())
            if read_only:
                _require_store(db)
        except Exception:
            db.close()
            raise

    try:
        retry_locked(open_checked)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise not_a_database(path) from exc
        raise
    return db


def _require_store(db: HermesDatabase) -> None:
    """Refuse a read-only handle on a file without the session tables."""
    conn = db.connection()
    names = {row[0] for row in conn.execute(sqlite_sql.TABLE_NAMES)}
    if "sessions" not in names or "messages" not in names:
        raise NotADatabaseError(
            f"{db.path} holds no Hermes session store yet (no sessions/messages tables); "
            "open it once without read_only=True to create the schema"
        )


def _convert(
    target: str | os.PathLike[str] | None, old_key: str | None, new_key: str | None
) -> dict[str, Any]:
    path = resolve_file(target)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist")
    check_file_kind(path)
    refuse_planted(path)
    check_ownership(path, read_only=False)
    with _open_lock:
        for (file, *_), db in list(_databases.items()):
            if file == path and not db.is_closed():
                raise sqlite3.OperationalError(
                    f"{path} is open in this process; close it (SessionDB.close()) first"
                )
        result = cipher.convert(path, old_key=old_key, new_key=new_key)
        # The file is another one now: the next open starts afresh.
        for slot in [slot for slot in list(_databases.keys()) if slot[0] == path]:
            _databases.pop(slot, None)
        _migrated.discard(path)
    return {"path": path, **result}


def encrypt_store(target: str | os.PathLike[str] | None, key: str) -> dict[str, Any]:
    """Encrypt the plain store ``target`` in place under ``key`` (see
    :func:`hermes_models.store.cipher.convert`: a verified copy renamed over the
    file, which no other process may hold open); returns ``path``, ``tables`` (rows
    by table), ``pages`` and ``bytes``.

    Raises:
        FileNotFoundError: the file does not exist.
        EncryptedStoreError: the file is encrypted already.
        MissingDriverError: sqlcipher3 is not installed.
        sqlite3.OperationalError: another connection holds the file.
    """
    return _convert(target, None, cipher.check_key(key))


def decrypt_store(target: str | os.PathLike[str] | None, key: str) -> dict[str, Any]:
    """Write the encrypted store ``target`` back as a plain SQLite file, in place, as
    :func:`encrypt_store` does (the result alike).

    Raises:
        EncryptedStoreError: ``key`` does not open the file.
    """
    return _convert(target, cipher.check_key(key), None)


def rekey_store(target: str | os.PathLike[str] | None, key: str, new_key: str) -> dict[str, Any]:
    """Encrypt the store ``target`` under ``new_key`` instead of ``key``, in place, as
    :func:`encrypt_store` does (the result alike).

    Raises:
        EncryptedStoreError: ``key`` does not open the file.
    """
    return _convert(target, cipher.check_key(key), cipher.check_key(new_key, "new_key"))


def _after_fork_in_child() -> None:
    for db in list(_databases.values()):
        db.forget_connections()
    for server in list(_servers.values()):
        server.forget_connections()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
