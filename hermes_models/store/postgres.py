"""The store on a PostgreSQL server: URLs, migrations and the database handle.

A ``postgresql://`` URL (``postgres://`` too) names a database on a server;
``?schema=NAME`` keeps a profile's tables in a schema of their own, so that
several profiles share one database, as Hermes' profiles share one folder.
The driver is psycopg 3 (the ``postgresql`` extra): maintained, shipped as
binary wheels for every Python this package supports, and the one peewee's
``Psycopg3Database`` and yoyo's ``postgresql+psycopg`` backend both speak.

The schema comes from ``migrations/postgresql`` - the same migration ids,
and the same tables, columns and indexes, as the SQLite folder, with
PostgreSQL's own search indexes (a bounded ``simple`` tsvector, pg_trgm, and
an index of CJK characters and pairs). yoyo applies them under its lock, so
processes opening a new database at once apply each migration once.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, unquote_plus, urlsplit

import peewee
from playhouse.pool import MaxConnectionsExceeded, PooledDatabase
from playhouse.postgres_ext import Psycopg3Database

from ..errors import (
    SQLITE_ERRORS,
    MigrationError,
    MissingDriverError,
    PoolTimeoutError,
    ReadOnlyDatabaseError,
    UnsupportedServerError,
    WriteConflictError,
)
from . import postgres_sql, writes
from .caches import BoundedSet
from .dialect import PostgresDialect
from .files import SCHEMES, is_postgres_url
from .migration_names import migration_hash, migration_ids
from .redaction import Redactor
from .shape import PROBED, FileShape

logger = logging.getLogger("hermes_models")

T = TypeVar("T")

#: What a schema name may be: an unquoted PostgreSQL identifier, lower case.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class ServerTarget:
    """Where a PostgreSQL store lives: a libpq URL (without our own parameters)
    and the schema that holds its tables (None: the server's default,
    ``public``)."""

    url: str
    schema: str | None
    #: The pool of the handle (URL parameters ``max_connections``, ``stale_timeout``,
    #: ``pool_timeout``; see :class:`PostgresDatabase`).
    max_connections: int = 8
    stale_timeout: int = 300
    pool_timeout: float = 60.0

    def key(self) -> str:
        """What tells one store and pool apart (one handle per key and mode)."""
        return (
            f"{self.url}#{self.schema or ''}"
            f"#{self.max_connections},{self.stale_timeout},{self.pool_timeout}"
        )

    def label(self) -> str:
        """The URL without its password, for messages and logs."""
        parts = urlsplit(self.url)
        schema = f" (schema {self.schema})" if self.schema else ""
        return f"postgresql://{_without_password(parts.netloc)}{parts.path}{schema}"


def _without_password(netloc: str) -> str:
    """``user:secret@host:port`` as ``user@host:port`` (the host part as written)."""
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return netloc
    return f"{userinfo.split(':', 1)[0]}@{hostport}"


def _shown(url: str) -> str:
    """``url`` as an error message shows it: ``repr``, without its password."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return repr(url)
    scheme, rest = url.split("://", 1)
    return repr(f"{scheme}://{_without_password(parts.netloc)}{rest[len(parts.netloc) :]}")


def parse_url(url: str, *, argument: str | None = None) -> ServerTarget:
    """Split a store URL into the server URL and the profile schema.

    ``argument``, when given, names the argument in error messages.

    Raises:
        ValueError: the URL is not a PostgreSQL URL, names no database, or its
            ``schema`` is not a plain lower-case identifier.
    """
    try:
        return _parse_url(url)
    except ValueError as exc:
        if argument is None:
            raise
        raise ValueError(f"{argument}: {exc}") from None


def _parse_url(url: str) -> ServerTarget:
    if not is_postgres_url(url):
        raise ValueError(f"not a PostgreSQL URL (postgresql://user@host/database): {_shown(url)}")
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        raise ValueError(f"the PostgreSQL URL names no database: {_shown(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise ValueError(f"schema is given {len(schemas)} times in {_shown(url)}")
    schema = schemas[0] if schemas else None
    if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            "schema must be a lower-case identifier (letters, digits and _, at most 63)"
            f", not {schema!r}"
        )
    pool: dict[str, Any] = {}
    for name, (kind, low, high) in POOL_PARAMETERS.items():
        given = [value for key, value in query if key == name]
        if len(given) > 1:
            raise ValueError(f"{name} is given {len(given)} times in {_shown(url)}")
        if given:
            pool[name] = _pool_number(name, given[0], kind, low, high)
    ours = {"schema", *POOL_PARAMETERS}
    # The other parameters reach libpq as written (psql reads the URL so): decoded
    # and encoded again, a space written %20 became "+", which libpq keeps as a plus.
    rest = "&".join(
        piece
        for piece in parts.query.split("&")
        if piece and unquote_plus(piece.partition("=")[0]) not in ours
    )
    # Written out: urlunsplit drops the "//" of a URL without a host part
    # (postgresql:///db?host=/run/postgresql), which libpq then cannot read.
    server = f"postgresql://{parts.netloc}{parts.path}" + (f"?{rest}" if rest else "")
    return ServerTarget(server, schema, **pool)


#: The pool's URL parameters: their type, smallest and largest value.
POOL_PARAMETERS: dict[str, tuple[type, float, float]] = {
    "max_connections": (int, 1, 10_000),
    "stale_timeout": (int, 0, 86_400),
    "pool_timeout": (float, 0, 86_400),
}


def _pool_number(name: str, text: str, kind: type, low: float, high: float) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value != value or not low <= value <= high:
        raise ValueError(
            f"{name} must be {'an integer' if kind is int else 'a number'}"
            f" from {kind(low)} to {kind(high)}, not {text!r}"
        )
    return value


def migrations_dir() -> Path:
    """The folder of PostgreSQL migrations (``migrations/postgresql``).

    Raises:
        MigrationError: neither the installed package nor a checkout has one.
    """
    here = Path(__file__).resolve().parent.parent  # the package
    for folder in (here / "migrations" / "postgresql", here.parent / "migrations" / "postgresql"):
        if folder.is_dir():
            return folder
    raise MigrationError("the PostgreSQL migrations are missing from this installation")


#: The escape character of text on PostgreSQL (a private-use code point).
ESCAPE = "\ue000"


def escape_text(text: str) -> str:
    """``text`` as PostgreSQL stores it: NUL becomes ``ESCAPE + "0"`` and
    ``ESCAPE`` itself is doubled. PostgreSQL text cannot hold NUL, which
    SQLite's stores do hold (content stored as JSON begins with one)."""
    return text.replace(ESCAPE, ESCAPE + ESCAPE).replace("\x00", ESCAPE + "0")


def unescape_text(text: str) -> str:
    """The inverse of :func:`escape_text`. An escape character followed by
    anything else (text another client wrote) is kept as it is."""
    if ESCAPE not in text:
        return text
    out: list[str] = []
    start = 0
    while (at := text.find(ESCAPE, start)) >= 0:
        out.append(text[start:at])
        following = text[at + 1 : at + 2]
        if following == ESCAPE:
            out.append(ESCAPE)
            start = at + 2
        elif following == "0":
            out.append("\x00")
            start = at + 2
        else:
            out.append(ESCAPE)
            start = at + 1
    out.append(text[start:])
    return "".join(out)


@functools.cache
def _adapter_classes() -> tuple[type, ...]:
    """psycopg dumpers and loaders that escape text on its way in and out.

    The C-accelerated classes cannot be subclassed; these wrap the Python ones.
    The loader decodes the buffer itself (one call instead of the parent's
    ``load`` and then the unescaping function's): about 80 ns a value over the
    C loader, where the wrapped parent cost about 260."""
    from psycopg.types import string  # loaded when used: the postgresql extra is optional

    class TextDumper(string.StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            if "\x00" in obj or ESCAPE in obj:
                obj = escape_text(obj)
            return super().dump(obj)

    class BinaryTextDumper(string.StrBinaryDumper):
        def dump(self, obj: str) -> Any:
            if "\x00" in obj or ESCAPE in obj:
                obj = escape_text(obj)
            return super().dump(obj)

    class TextLoader(string.TextLoader):
        def load(self, data: Any) -> Any:
            encoding = self._encoding
            if not encoding:  # an SQL_ASCII database: bytes, as psycopg gives them
                return super().load(data)
            text = str(data, encoding)  # bytes or a memoryview, without a copy
            return unescape_text(text) if ESCAPE in text else text

    return TextDumper, BinaryTextDumper, TextLoader


def adapt_text(conn: Any) -> None:
    """Make the psycopg connection ``conn`` escape text (:func:`escape_text`):
    every parameter, ``COPY`` row and text result goes through it, so callers
    see the strings they stored, NUL characters included."""
    dumper, binary_dumper, loader = _adapter_classes()
    conn.adapters.register_dumper(str, dumper)
    conn.adapters.register_dumper(str, binary_dumper)
    for name in ("text", "varchar", "bpchar", "name"):
        conn.adapters.register_loader(name, loader)


def require_driver() -> None:
    """Refuse at once, in words a user can act on, to reach a server without psycopg.

    Raises:
        MissingDriverError: psycopg 3 (the ``postgresql`` extra) is not installed.
    """
    try:
        import psycopg  # noqa: F401  (loaded when used: the postgresql extra is optional)
    except ImportError as exc:
        raise MissingDriverError(
            "a postgresql:// store needs psycopg 3, which is not installed: "
            "pip install 'psycopg[binary]>=3.1' (or, in a checkout of hermes_models, "
            "pip install '.[postgresql]')",
            name="psycopg",
        ) from exc


#: The oldest PostgreSQL release the migrations and queries are written for
#: (``server_version_num``): 15.
OLDEST_SERVER = 150000


def check_server(conn: Any, target: ServerTarget) -> None:
    """Refuse a server older than :data:`OLDEST_SERVER`.

    Raises:
        UnsupportedServerError: naming the server's release and the one needed.
    """
    version = int(conn.info.server_version)
    if version < OLDEST_SERVER:
        major, minor = divmod(version, 10000)
        raise UnsupportedServerError(
            f"{target.label()} runs PostgreSQL {major}.{minor % 100}; this package needs"
            f" PostgreSQL {OLDEST_SERVER // 10000} or newer"
        )


def _connect_raw(target: ServerTarget) -> Any:
    require_driver()
    import psycopg  # loaded when used: the postgresql extra is optional

    conn = psycopg.connect(target.url, autocommit=True)
    try:
        check_server(conn, target)
    except UnsupportedServerError:
        conn.close()
        raise
    adapt_text(conn)
    return conn


def _yoyo_backend(target: ServerTarget, search_path: str | None) -> Any:
    """yoyo's PostgreSQL backend on a connection libpq opens from the store's URL.

    yoyo's own URL parsing does not decode %-escapes in the database name and
    cannot read a URL without a host part; libpq reads every form psql reads.
    """
    from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend  # migrating is rare
    from yoyo.connections import default_migration_table, parse_uri  # as the line above

    class Backend(PostgresqlPsycopgBackend):  # type: ignore[misc]
        def connect(self, dburi: Any) -> Any:
            self.schema = search_path  # yoyo sets it on the connection
            return self.driver.connect(target.url, autocommit=True)

    # The URI only names the backend class and keys yoyo's per-URI cache of
    # whether DDL is transactional (it is, on every PostgreSQL).
    backend = Backend(parse_uri("postgresql+psycopg://server/store"), default_migration_table)
    backend.init_database()
    return backend


def _extension_schema(conn: Any) -> str | None:
    row = conn.execute(postgres_sql.TRGM_SCHEMA).fetchone()
    return None if row is None else str(row[0])


def search_path(target: ServerTarget, extension_schema: str | None) -> str | None:
    """The ``search_path`` a profile's connections use: its schema, then the
    schema pg_trgm lives in (created by whichever profile migrated first)."""
    if target.schema is None:
        return None
    path = [target.schema]
    if extension_schema and extension_schema != target.schema:
        path.append(extension_schema)
    return ", ".join(path)


def trigram_index_state(conn: Any) -> str:
    """Whether the store in the psycopg connection ``conn``'s current schema has the
    trigram index of substring searches (migration 0003, which needs pg_trgm):
    ``"present"``, ``"absent"``, or ``"invalid"`` (a build of it failed half-way;
    unused)."""
    row = conn.execute(postgres_sql.TRIGRAM_INDEX_VALID).fetchone()
    if row is None:
        return "absent"
    return "present" if row[0] else "invalid"


#: What a store without the trigram index is slower at (the warning at open, ``doctor``).
SCANNING = (
    "searches of CJK terms of 3 or more characters, and of terms matched as substrings"
    " (symbols such as ①②③), read every message instead of an index"
    " (the same hits, slower as the store grows)"
)

#: Stores this process has said lack the trigram index (said once per store).
_told_scanning: BoundedSet[str] = BoundedSet("stores without pg_trgm announced", 1024)


def _say_if_scanning(conn: Any, target: ServerTarget) -> None:
    """Log a warning, once per store and process, when the store lacks the trigram index."""
    state = trigram_index_state(conn)
    if state == "present" or target.key() in _told_scanning:
        return
    _told_scanning.add(target.key())
    logger.warning(
        "%s has no trigram index (%s): %s; `hermes-models doctor --fix` adds it once"
        " pg_trgm can be created on the server",
        target.label(),
        "pg_trgm could not be created" if state == "absent" else "its build failed half-way",
        SCANNING,
    )


def add_trigram_index(url: str) -> str:
    """Give the store ``url`` the trigram index a server without pg_trgm left out
    (migration 0003 makes it only where the extension could be created): create
    pg_trgm if this role may, then build the index without holding writes off
    (``CREATE INDEX CONCURRENTLY``; a half-built one is dropped first). Returns
    the index's state after (:func:`trigram_index_state`): ``"absent"`` when
    pg_trgm still cannot be created.

    Raises:
        ValueError: the URL is not a usable PostgreSQL URL.
    """
    return _add_trigram_index(parse_url(url))


def _add_trigram_index(target: ServerTarget) -> str:
    with _connect_raw(target) as conn:
        if target.schema is not None:
            conn.execute(postgres_sql.set_search_path(target.schema))
        state = trigram_index_state(conn)
        if state == "present":
            return state
        conn.execute(postgres_sql.CREATE_TRGM)
        home = _extension_schema(conn)
        if home is None:
            return "absent"
        if state == "invalid":
            conn.execute(postgres_sql.DROP_TRIGRAM_INDEX)
        path = search_path(target, home)
        if path is not None:
            conn.execute(postgres_sql.set_search_path(path))
        logger.info("building the trigram index of %s", target.label())
        conn.execute(postgres_sql.create_trigram_index(home))
        return trigram_index_state(conn)


def optional_migrations_dir(name: str) -> Path:
    """The folder of the opt-in PostgreSQL migration set ``name``
    (``migrations/postgresql/<name>``, the same ids as SQLite's ``migrations/<name>``).

    Raises:
        MigrationError: there is no such set in this installation.
    """
    folder = migrations_dir() / name
    if not folder.is_dir():
        raise MigrationError(f"no opt-in PostgreSQL migration set {name!r} in this installation")
    return folder


def migrate(url: str, *, optional: str | None = None) -> list[str]:
    """Apply the pending PostgreSQL migrations to the store ``url``; returns
    the ids applied (``[]`` when it is up to date).

    The profile schema is created first when the URL names one. With
    ``optional``, the opt-in set of that name (:func:`optional_migrations_dir`)
    is applied instead; it builds on the baseline's tables.

    Raises:
        ValueError: the URL is not a usable PostgreSQL URL.
        MigrationError: a migration failed (PostgreSQL rolled it back whole),
            or another process kept migrating the store for
            :data:`MIGRATION_PATIENCE_S`.

    Opening a store that is up to date reads the list of applied migrations and
    nothing else. Otherwise the migration runs under a session-level advisory
    lock, which the server releases when the session ends: a process killed while
    migrating never blocks the next.
    """
    target = parse_url(url)
    require_driver()
    folder = migrations_dir() if optional is None else optional_migrations_dir(optional)
    with _connect_raw(target) as conn:
        if _up_to_date(conn, target, folder):
            return []  # one read: nothing locked, nothing written
        conn.execute(postgres_sql.SET_LOCK_TIMEOUT, (f"{MIGRATION_PATIENCE_S * 1000}ms",))
        key = target.schema or ""
        try:
            conn.execute(postgres_sql.MIGRATE_LOCK, (key,))
        except Exception as exc:
            raise MigrationError(
                f"another process has been migrating {target.label()} for over"
                f" {MIGRATION_PATIENCE_S} s; try again when it is done ({exc})"
            ) from None
        try:
            if _up_to_date(conn, target, folder):
                return []  # another process migrated it while this one waited
            # yoyo locks with a row of its own while it updates its tables: a process
            # killed then left it, and yoyo would wait for it. Every opener holds the
            # lock taken above first, so such a row is stale.
            lock_table = postgres_sql.yoyo_lock_table(target.schema)
            if conn.execute(postgres_sql.TABLE_EXISTS, (lock_table,)).fetchone()[0]:
                conn.execute(postgres_sql.clear_yoyo_lock(target.schema))
            if target.schema is not None:
                conn.execute(postgres_sql.create_schema(target.schema))
            path = search_path(target, _extension_schema(conn))
            return _apply(target, folder, None if path is None else path.replace(" ", ""))
        finally:
            conn.execute(postgres_sql.MIGRATE_UNLOCK, (key,))


#: How long opening a store waits for another process's migration of it.
MIGRATION_PATIENCE_S = 600


def _up_to_date(conn: Any, target: ServerTarget, folder: Path) -> bool:
    """True when every migration of ``folder`` is recorded as applied on the store."""
    table = "_yoyo_migration" if target.schema is None else f"{target.schema}._yoyo_migration"
    if not conn.execute(postgres_sql.TABLE_EXISTS, (table,)).fetchone()[0]:
        return False
    wanted = [migration_hash(migration_id) for migration_id in migration_ids(folder)]
    found = conn.execute(postgres_sql.applied_among(target.schema), (wanted,)).fetchall()
    return len(found) == len(set(wanted))


def _apply(target: ServerTarget, folder: Path, path: str | None) -> list[str]:
    """Apply ``folder``'s pending migrations with yoyo, each in one transaction (the
    caller holds the migration lock); returns their ids."""
    from yoyo import read_migrations  # loaded when used: migrating is rare

    backend = _yoyo_backend(target, path)
    try:
        migrations = read_migrations(str(folder))
        pending = backend.to_apply(migrations)
        ids = [m.id for m in pending]
        if ids:
            logger.info("applying %d PostgreSQL migration(s) to %s", len(ids), target.label())
        for migration in pending:
            # Steps, log row and mark in one transaction (yoyo's apply_one commits
            # them in three): a failure between them cannot leave a migration
            # applied but unrecorded, to be run again by the next migrate.
            with backend.transaction():
                migration.process_steps(backend, "apply")
                backend.log_migration(migration, "apply")
                backend.mark_one(migration, log=False)
        return ids
    except MigrationError:
        raise
    except Exception as exc:
        raise MigrationError(f"migrating {target.label()} failed: {exc}") from exc
    finally:
        backend.connection.close()


class _Connections(Psycopg3Database):  # type: ignore[misc]
    """Psycopg3Database whose new connections are made ready once, when made:
    text escaping, the profile's search path, read-only transactions for a
    read-only handle, and (the first time) the probe of what the store holds.
    A connection handed out again by the pool needs none of it again."""

    target: ServerTarget
    read_only: bool
    shape: FileShape | None
    _search_path: str | None
    _registry: _Registry

    def _connect(self) -> Any:
        conn = super()._connect()
        self._registry.conns[id(conn)] = conn
        try:
            adapt_text(conn)
            if self.target.schema is not None:
                if self._search_path is None:
                    path = search_path(self.target, _extension_schema(conn))
                    self._search_path = path or self.target.schema
                conn.execute(postgres_sql.set_search_path(self._search_path))
            if self.read_only:
                conn.execute(postgres_sql.READ_ONLY_SESSION)
            if self.shape is None:  # the first connection: the server, then the store
                check_server(conn, self.target)
                self.shape = _probe(conn)
                if "messages" in self.shape.tables:
                    _say_if_scanning(conn, self.target)
        except Exception:
            self._registry.conns.pop(id(conn), None)
            conn.close()
            raise
        return conn


class PostgresDatabase(PostgresDialect, PooledDatabase, _Connections):  # type: ignore[misc]
    """A handle on a PostgreSQL store (psycopg 3) with a bounded pool of connections.

    peewee's pool (:class:`playhouse.pool.PooledDatabase`): a thread takes a
    connection when it runs its first statement and keeps it until it hands it
    back (:meth:`release`, which every ``SessionDB`` method does when it returns,
    or ``close()``), or until the thread ends. At most ``max_connections``
    connections are open (URL parameter, default 8); a thread that finds them all
    taken waits up to ``pool_timeout`` seconds (default 60) for one, then
    :class:`~hermes_models.errors.PoolTimeoutError`. A connection older than
    ``stale_timeout`` seconds (default 300; 0: never) is closed instead of being
    handed out again. A connection the server dropped (a restart) is replaced:
    see :meth:`execute_sql` and :meth:`write`.

    Each connection uses the profile's schema and, for a read-only handle,
    read-only transactions; the first one reads what the store holds
    (:attr:`shape`).
    """

    dialect = "postgresql"
    pooled = True

    def __init__(self, target: ServerTarget, *, read_only: bool = False) -> None:
        self.target = target
        self.read_only = read_only
        #: The redaction applied to what this handle writes (None: off; set by connect()).
        self.redactor: Redactor | None = None
        self._search_path = None
        #: What the store holds, read at the first connection (the models select
        #: the columns it has, as they do for a file).
        self.shape = None
        self._registry = _Registry()
        self._thread_tokens = threading.local()
        #: Which check-out of a connection is current (by ``id()``): a thread that
        #: ended hands back only the connection it still holds.
        self._checkouts: dict[int, int] = {}
        self._serials = itertools.count(1)
        #: Connections of threads that ended, to hand back (see :func:`_orphaned`).
        self._orphans: collections.deque[tuple[Any, int]] = collections.deque()
        super().__init__(
            # The URL itself, which libpq reads (peewee hands a postgresql:// "database"
            # to psycopg as its conninfo): %-escapes in a password or a database name,
            # a socket folder, a URL without a host, any libpq parameter.
            target.url,
            max_connections=target.max_connections,
            stale_timeout=target.stale_timeout,
            # peewee's 0 means "wait for ever", None "do not wait".
            timeout=target.pool_timeout or None,
        )
        # Connections still open when the handle goes away (or the program ends)
        # are closed, by the process that opened them only.
        weakref.finalize(self, _close_registered, self._registry)

    # -- the pool ------------------------------------------------------------

    def connect(self, reuse_if_open: bool = False) -> bool:
        """Take a connection from the pool for this thread (peewee's ``connect``).

        Raises:
            PoolTimeoutError: every connection stayed taken for ``pool_timeout`` s.
        """
        try:
            return bool(super().connect(reuse_if_open))
        except MaxConnectionsExceeded as exc:
            raise PoolTimeoutError(
                f"{self.path}: all {self.target.max_connections} connections of the pool"
                f" stayed in use for {self.target.pool_timeout:g} s"
                " (raise max_connections in the URL, or hand connections back sooner)"
            ) from exc

    def _connect(self) -> Any:
        self._take_back_orphans()
        conn = super()._connect()  # the pool's: an idle connection, or a new one
        serial = next(self._serials)
        with self._pool_lock:
            self._checkouts[id(conn)] = serial
        # A thread that ends holding the connection hands it back: its token goes
        # away with the thread's state, and the finalizer queues the connection.
        token = _ThreadToken()
        finalizer = weakref.finalize(
            token, _orphaned, self._orphans, conn, serial, self._registry.pid
        )
        finalizer.atexit = False
        self._thread_tokens.token = token
        self._thread_tokens.finalizer = finalizer
        return conn

    def _take_back_orphans(self) -> None:
        """Hand back to the pool the connections of threads that ended holding one."""
        while self._orphans:
            try:
                conn, serial = self._orphans.popleft()
            except IndexError:
                return
            with self._pool_lock:
                if self._checkouts.get(id(conn)) == serial:
                    self._close(conn)

    def _is_closed(self, conn: Any) -> bool:
        # Asked of an idle connection before it is handed out. A look at the
        # connection's own state, no round trip: a connection the server dropped
        # while idle fails at its first statement, and execute_sql() and write()
        # run that statement again on a new one.
        if conn.closed or conn.broken or conn.pgconn.transaction_status not in _REUSABLE:
            self._close_raw(conn)
            return True
        return False

    def _can_reuse(self, conn: Any) -> bool:
        # Asked when a connection is handed back: an open transaction is rolled
        # back; a broken connection is not pooled.
        if conn.closed or conn.broken:
            return False
        try:
            if conn.pgconn.transaction_status != _IDLE:
                conn.rollback()
        except Exception:
            return False
        return bool(conn.pgconn.transaction_status == _IDLE)

    def _close(self, conn: Any, close_conn: bool = False) -> None:
        with self._pool_lock:
            self._checkouts.pop(id(conn), None)
            super()._close(conn, close_conn)

    def _close_raw(self, conn: Any) -> None:
        self._registry.conns.pop(id(conn), None)
        super()._close_raw(conn)

    def close(self) -> bool:
        """Hand this thread's connection back to the pool (peewee's ``close``)."""
        closed = bool(super().close())
        finalizer = getattr(self._thread_tokens, "finalizer", None)
        if finalizer is not None:
            finalizer.detach()
            self._thread_tokens.finalizer = None
        return closed

    def release(self) -> None:
        """Hand this thread's connection back to the pool, unless a transaction is
        open on it (the package's, or one of the caller's through ``_conn``) or the
        thread holds it on purpose (peewee's ``connection_context()``).
        ``SessionDB`` does this after each method, so threads share the pool."""
        conn = self._state.conn
        if conn is None or self._state.ctx or self.in_transaction():
            return
        if conn.closed or conn.pgconn.transaction_status == _IDLE:
            self.close()

    def pool_status(self) -> dict[str, int]:
        """The connections of the pool now: ``in_use``, ``idle`` and ``max``."""
        with self._pool_lock:
            return {
                "in_use": len(self._in_use),
                "idle": len(self._connections),
                "max": self.target.max_connections,
            }

    @property
    def path(self) -> str:
        """Where the store is, for messages (the URL without its password)."""
        return self.target.label()

    @property
    def url(self) -> str:
        """The store's URL (its schema included; the pool's settings left out), as
        :func:`migrate` takes it."""
        if self.target.schema is None:
            return self.target.url
        sep = "&" if urlsplit(self.target.url).query else "?"
        return f"{self.target.url}{sep}schema={self.target.schema}"

    def write(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in one ``SERIALIZABLE`` transaction and return its result.

        Every rule the package wrote for SQLite's one writer at a time (counters,
        unique titles, compression locks, first end wins) holds as it is: the
        server runs concurrent writes as if one after the other, or refuses one
        of them, which then runs again - as do writes chosen as a deadlock's
        victim, refused a lock in time, or cut off by a lost connection (the
        next try connects again) - after a 20-150 ms pause, until
        :data:`~hermes_models.store.writes.WRITE_PATIENCE_S` (60 s) have passed.
        ``fn`` must be safe to run again. Inside an open transaction ``fn`` runs
        in a savepoint and the outermost write does the retrying.

        Raises:
            ReadOnlyDatabaseError: the handle was opened read-only.
            WriteConflictError: still refused when the patience ran out.
        """
        return self._write(fn, postgres_sql.BEGIN_SERIALIZABLE, _RETRIED)

    def write_new_rows(self, fn: Callable[[], T]) -> T:
        """:meth:`write` for a transaction that adds rows no other client can see
        before it commits (an import's sessions and their messages): ``fn`` runs
        at ``REPEATABLE READ``, outside the server's serializable bookkeeping.

        A long ``SERIALIZABLE`` transaction that reads the tables others append to
        and adds rows to them is, to the server, the middle of a cycle with the
        short writes committing around it, and is refused on each try until its
        patience runs out. Here the rules such a transaction keeps are kept by
        the store's unique indexes instead: a session id, title or message id that
        another client took after ``fn`` looked is refused by its index, and
        ``fn`` runs again on a newer snapshot, where it sees the row and does
        what it does with a clash (refuse the session, number the title, give
        the messages fresh ids). ``fn`` must read nothing else whose change by
        another client would break a rule, and be safe to run again.

        Raises:
            ReadOnlyDatabaseError: the handle was opened read-only.
            WriteConflictError: still refused when the patience ran out.
        """
        return self._write(fn, postgres_sql.BEGIN_REPEATABLE_READ, _RETRIED_NEW_ROWS)

    def write_deletion(self, fn: Callable[[], T]) -> T:
        """:meth:`write` for a transaction that deletes sessions and what hangs from them
        (messages, compression locks; other children orphaned): ``fn`` runs at
        ``REPEATABLE READ``, outside the server's serializable bookkeeping.

        Such a transaction reads the sessions table whole (the walk down to the
        subagent runs reads every session's tag), and the short writes committing
        around it update rows of that table: to the server's serializable checks
        it is the middle of a cycle on every try while a gateway appends without
        pause, and it was refused until its patience ran out. What it must not
        miss is kept by the rows themselves instead: a message, child session or
        re-parenting added after its snapshot references a doomed session through
        a foreign key, whose check refuses the delete (a foreign key violation:
        ``fn`` deletes or unlinks every reference it can see, so one it cannot
        see is new); a row it updates or deletes that another client changed after
        its snapshot is refused as a serialization failure. ``fn`` then runs again
        on a newer snapshot and sees them.

        Raises:
            ReadOnlyDatabaseError: the handle was opened read-only.
            WriteConflictError: still refused when the patience ran out.
        """
        return self._write(fn, postgres_sql.BEGIN_REPEATABLE_READ, _RETRIED_DELETION)

    def _write(self, fn: Callable[[], T], begin: str, retried: Mapping[str, str]) -> T:
        self.refuse_writes()
        if self.in_transaction():
            with self.atomic():
                return fn()
        started = time.monotonic()
        for attempt in itertools.count(1):
            try:
                with self.atomic(statement=begin):
                    return fn()
            except peewee.PeeweeException as exc:
                why = retried.get(_sqlstate(exc) or "")
                if why is None and self._lost(exc):
                    why = "the connection was lost"
                    self._reset_connection()
                if why is None:
                    raise
                waited = time.monotonic() - started
                if waited >= writes.WRITE_PATIENCE_S:
                    raise WriteConflictError(
                        f"{self.path}: the write was refused for {waited:.1f} s"
                        f" ({attempt} attempts, the last: {why})"
                    ) from exc
                logger.debug("write retried (attempt %d): %s", attempt, why)
                time.sleep(random.uniform(writes.WRITE_RETRY_MIN_S, writes.WRITE_RETRY_MAX_S))
        raise AssertionError("unreachable")  # pragma: no cover

    def begin(self, isolation_level: Any = None, *, statement: str | None = None) -> None:
        """peewee's ``BEGIN``; with ``statement``, that statement instead: the write
        path's ``BEGIN ISOLATION LEVEL ...``, the level set in the same round trip
        (``SET TRANSACTION`` after a ``BEGIN`` would cost one more)."""
        if statement is None:
            super().begin(isolation_level)
            return
        with cast(Any, peewee).__exception_wrapper__:  # driver errors as peewee's
            self.cursor().execute(statement)

    def execute_sql(self, sql: str, params: Any = None, *args: Any, **options: Any) -> Any:
        """peewee's, and a statement outside a transaction whose connection was lost
        (the server restarted, say) runs once more on a new connection."""
        try:
            return super().execute_sql(sql, params, *args, **options)
        except peewee.PeeweeException as exc:
            if not self._lost(exc):
                worded = constraint_message(exc)
                if worded is None:
                    raise
                # SQLite's words for a constraint failure, as callers match them.
                again = type(exc)(worded)
                again.orig = getattr(exc, "orig", None)  # type: ignore[attr-defined]
                raise again from exc
            if self.in_transaction():
                # The transaction went with the connection: the transactions
                # peewee keeps for it end as the exception leaves them (their
                # rollback has nothing to do, see rollback()), and write()
                # takes a new connection and runs the write again.
                raise
            self._reset_connection()
            logger.info("%s: connection lost (%s); connecting again", self.path, exc)
            return super().execute_sql(sql, params, *args, **options)

    def rollback(self) -> None:
        """peewee's; nothing to do when this thread's connection was lost (the
        server rolled its transaction back as the connection ended)."""
        conn = self._state.conn
        if conn is not None and (conn.closed or getattr(conn, "broken", False)):
            return
        super().rollback()

    def _lost(self, exc: BaseException) -> bool:
        """True when ``exc`` means this thread's connection is gone, or could not be
        made: a server restarting refuses connections for a moment (``pg_ctl
        restart`` cost 10 of 300 appends under load before this was retried)."""
        state = _sqlstate(exc) or ""
        if state.startswith("08") or state in _SERVER_GONE:
            return True
        conn = self._state.conn
        if conn is None:
            return _failed_to_connect(exc)
        return bool(conn.closed or getattr(conn, "broken", False))

    def _reset_connection(self) -> None:
        """Close this thread's connection and forget any transaction peewee kept for
        it: the next statement takes another. A lost connection seldom comes alone
        (a server restart drops them all), so the idle ones are closed too."""
        conn = self._state.conn
        if conn is not None:
            self._close(conn, close_conn=True)
        self._state.reset()
        finalizer = getattr(self._thread_tokens, "finalizer", None)
        if finalizer is not None:
            finalizer.detach()
            self._thread_tokens.finalizer = None
        self.close_idle()

    def run(self, sql: str, params: Any) -> Any:
        """Run one statement the package rendered
        (see :class:`~hermes_models.store.statements.Prepared`)."""
        return self.execute_sql(sql, params)

    def refuse_writes(self) -> None:
        """Raise what :meth:`write` raises when this handle cannot write.

        Raises:
            ReadOnlyDatabaseError: the handle was opened read-only.
        """
        if self.read_only:
            raise ReadOnlyDatabaseError(f"{self.path} was opened read-only; writes are refused")

    def ensure_grams(self) -> bool:
        """True: the server keeps the CJK gram index itself (an index, no triggers)."""
        return True

    def bound_wal(self) -> bool:
        """Nothing to do: the server manages its own log."""
        return False

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Nothing to do: the server checkpoints on its own."""

    def forget_connections(self) -> None:
        """Drop, without closing them, the connections a forked child inherited
        (closing one, or letting it be collected, would end the parent's session on
        the server), and start an empty pool with locks of its own."""
        handle: Any = self
        _abandoned.append(
            (handle._state, handle._connections, handle._in_use, self._registry.conns)
        )
        handle._state = peewee._ConnectionLocal()
        handle._lock = threading.RLock()
        handle._pool_lock = threading.RLock()
        handle._pool_available = threading.Condition(handle._pool_lock)
        handle._connections = []
        handle._in_use = {}
        self._checkouts = {}
        self._orphans = collections.deque()
        self._thread_tokens = threading.local()
        self._registry.conns = {}
        self._registry.pid = os.getpid()

    def describe(self) -> Mapping[str, Any]:
        """Where the handle points, for messages: URL without password, schema."""
        return {"url": self.target.label(), "schema": self.target.schema}

    # -- maintenance (the server's side of the Backend interface) -----------------------

    def titles_beginning(self, titles: Sequence[str]) -> set[str]:
        """The session titles that are one of ``titles``, or one of them followed by a
        space and more (``"x"`` and ``"x #2"``)."""
        rows = self.execute_sql(postgres_sql.TITLES_FROM_LIST, (sorted(set(titles)),))
        return {title for (title,) in rows.fetchall()}

    def optimize_indexes(self) -> int:
        """Move the entries waiting in each search index's pending list into the index
        (the server merges nothing else); returns 2, as Hermes counts its two indexes."""
        for index in (*postgres_sql.SEARCH_INDEXES, postgres_sql.GRAM_INDEX):
            self.execute_sql(postgres_sql.GIN_CLEAN_PENDING, (index,))
        return len(postgres_sql.SEARCH_INDEXES)

    def update_grams(
        self, *, rebuild: bool | None = None, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, Any]:
        """The server keeps its gram index (an index of messages) in step: nothing is
        listed; ``rebuild`` builds it again (``REINDEX``)."""
        self.refuse_writes()
        if rebuild:
            self.execute_sql(postgres_sql.reindex(postgres_sql.GRAM_INDEX))
        return {"present": True, "rebuilt": bool(rebuild), "indexed": 0, "changed": 0, "merged": 0}

    def message_sequence(self) -> int | None:
        """The last message id handed out (the identity of ``messages.id``), None
        before any."""
        row = self.execute_sql(postgres_sql.MESSAGE_SEQUENCE).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def set_message_sequence(self, top: int) -> None:
        """Make the message id sequence stand at ``top`` (0: as if no id was handed out)."""
        if top:
            self.execute_sql(postgres_sql.SET_MESSAGE_SEQUENCE, (top,))
        else:
            self.execute_sql(postgres_sql.RESET_MESSAGE_SEQUENCE)

    def hold_message_inserts(self) -> None:
        """Hold other clients' inserts of messages off until this transaction ends
        (those under way finish first): they take ids as they insert."""
        self.execute_sql(postgres_sql.LOCK_MESSAGE_INSERTS)

    def inserted_id(self, cursor: Any) -> int:
        """The id the INSERT run on ``cursor`` returned (``RETURNING``)."""
        return int(cursor.fetchone()[0])

    def compact(self) -> None:
        """``VACUUM (ANALYZE)`` the store's tables."""
        self.execute_sql(postgres_sql.VACUUM_ANALYZE)

    def trigram_index(self) -> str:
        """Whether the store has the trigram index of substring searches:
        ``"present"``, ``"absent"`` (pg_trgm could not be created) or ``"invalid"``
        (see :func:`trigram_index_state`)."""
        row = self.execute_sql(postgres_sql.TRIGRAM_INDEX_VALID).fetchone()
        if row is None:
            return "absent"
        return "present" if row[0] else "invalid"

    def add_trigram_index(self) -> str:
        """:func:`add_trigram_index` on this handle's store (on a connection of its own);
        returns the index's state after.

        Raises:
            ReadOnlyDatabaseError: the handle was opened read-only.
            MigrationError: called inside a transaction of this thread's, which the
                concurrent build would wait for without end.
        """
        self.refuse_writes()
        if self.in_transaction():
            raise MigrationError(
                f"{self.path}: the trigram index is built outside any transaction"
                " (CREATE INDEX CONCURRENTLY waits for every open one); call it after commit"
            )
        return _add_trigram_index(self.target)

    def erase_traces(self) -> dict[str, Any]:
        """After a deletion: the entries waiting in each search index's pending list are
        merged into it, then ``sessions`` and ``messages`` are vacuumed (outside a
        transaction) when the role may, so that the deleted rows and their index
        entries are removed now rather than by autovacuum later. What the server
        keeps anyway (its WAL and archives, replicas, pages not yet overwritten) is
        in docs/postgresql.md.

        Returns ``indexes_merged`` (the GIN indexes), ``wal_truncated`` and
        ``wal_blocked`` (False: the server's WAL is its own), ``vacuumed`` (the
        tables) and ``notes`` (what could not be done).
        """
        self.refuse_writes()
        notes: list[str] = []
        merged: list[str] = []
        for index in (*postgres_sql.SEARCH_INDEXES, postgres_sql.GRAM_INDEX):
            try:
                self.execute_sql(postgres_sql.GIN_CLEAN_PENDING, (index,))
                merged.append(index)
            except peewee.PeeweeException as exc:
                notes.append(f"could not merge the pending entries of {index}: {exc}")
        vacuumed: list[str] = []
        for table in postgres_sql.ERASED_TABLES:
            try:
                row = self.execute_sql(postgres_sql.MAY_VACUUM, (table,)).fetchone()
                if not (row and row[0]):
                    notes.append(
                        f"this role may not VACUUM {table} (not its owner): the deleted rows "
                        "stay as dead tuples until autovacuum or the owner vacuums it"
                    )
                    continue
                self.execute_sql(postgres_sql.vacuum_table(table))
                vacuumed.append(table)
            except peewee.PeeweeException as exc:
                notes.append(f"VACUUM {table} failed: {exc}")
        return {
            "indexes_merged": merged,
            "wal_truncated": False,
            "wal_blocked": False,
            "vacuumed": vacuumed,
            "notes": notes,
        }


class _ThreadToken:
    """Lives as long as one thread holds a connection (see PostgresDatabase._connect)."""

    __slots__ = ("__weakref__",)


class _Registry:
    """Every connection a handle opened and has not closed, and the process that
    opened them (closed when the handle goes away: see PostgresDatabase)."""

    __slots__ = ("conns", "pid")

    def __init__(self) -> None:
        self.conns: dict[int, Any] = {}
        self.pid = os.getpid()


def _orphaned(
    orphans: collections.deque[tuple[Any, int]], conn: Any, serial: int, pid: int
) -> None:
    # Runs where a thread's state goes away: queue only, the pool's locks are not
    # taken here. The next check-out hands the connection back.
    if os.getpid() == pid:
        orphans.append((conn, serial))


def _close_registered(registry: _Registry) -> None:
    if os.getpid() != registry.pid:
        return
    conns, registry.conns = registry.conns, {}
    for conn in conns.values():
        try:
            conn.close()
        except Exception:
            pass


#: Connections a forked child inherited: kept, never closed nor collected there.
_abandoned: list[Any] = []

#: Transaction states of a connection that may be handed out / is idle.
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_REUSABLE = frozenset({_IDLE})


def _probe(conn: Any) -> FileShape:
    """The shape of the store in the connection's current schema."""
    columns: dict[str, list[str]] = {table: [] for table in PROBED}
    for table, column in conn.execute(postgres_sql.COLUMNS, (list(PROBED),)):
        if column not in postgres_sql.SEARCH_COLUMNS:
            columns[table].append(column)
    tables = frozenset(row[0] for row in conn.execute(postgres_sql.TABLES))
    version = None
    if "schema_version" in tables:
        row = conn.execute(postgres_sql.SCHEMA_VERSION).fetchone()
        version = None if row is None or row[0] is None else int(row[0])
    return FileShape(
        version=version,
        columns={table: tuple(names) for table, names in columns.items()},
        tables=tables,
        time_index=True,
        dialect="postgresql",
    )


def qmark_to_format(sql: str) -> str:
    """SQL written with SQLite's ``?`` placeholders in psycopg's form: each ``?``
    outside quotes becomes ``%s``, and a literal ``%`` becomes ``%%``."""
    parts: list[str] = []
    quote = ""
    for char in sql:
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "?":
            parts.append("%s")
            continue
        parts.append("%%" if char == "%" else char)
    return "".join(parts)


class Row(tuple):  # type: ignore[type-arg]
    """A result row read by position or by column name, as ``sqlite3.Row`` is."""

    _names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"No item with that key: {key!r}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _rows_by_name(cursor: Any) -> Callable[[Any], Row]:
    """A psycopg row factory giving :class:`Row` objects."""
    names = tuple(column.name for column in cursor.description or ())
    kind = type("Row", (Row,), {"_names": names, "__slots__": ()})

    def make(values: Any) -> Row:
        return cast(Row, kind(values))

    return make


class QmarkConnection:
    """A psycopg connection that takes SQL written for sqlite3 (``?`` placeholders)
    and gives rows readable by position and by name (``sqlite3.Row``).

    ``SessionDB._conn`` on a PostgreSQL store: code written against Hermes'
    store runs raw SQL through it. The SQL itself must be valid PostgreSQL.
    Statements run in autocommit mode unless a write of the package is open.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        cursor = self._conn.cursor(row_factory=_rows_by_name)
        try:
            return cursor.execute(qmark_to_format(sql), params or None)
        except Exception as exc:
            raise as_sqlite_error(exc) from exc

    def executemany(self, sql: str, rows: Any) -> Any:
        cursor = self._conn.cursor(row_factory=_rows_by_name)
        try:
            cursor.executemany(qmark_to_format(sql), rows)
        except Exception as exc:
            raise as_sqlite_error(exc) from exc
        return cursor

    def commit(self) -> None:
        self._conn.commit()

    def rollback(self) -> None:
        self._conn.rollback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


#: SQLSTATE codes of constraint failures, and the words SQLite starts their message with.
_CONSTRAINTS = {
    "23503": "FOREIGN KEY constraint failed",
    "23505": "UNIQUE constraint failed",
    "23502": "NOT NULL constraint failed",
    "23514": "CHECK constraint failed",
}
_KEY_COLUMNS = re.compile(r"Key \((?P<columns>[^)]*)\)=")


def constraint_message(exc: BaseException) -> str | None:
    """SQLite's wording of a PostgreSQL constraint failure (None for other errors).

    Callers written against SQLite match these words (``UNIQUE constraint
    failed: sessions.title``); PostgreSQL's own message follows after `` - ``.
    """
    cause = getattr(exc, "orig", None) or exc
    diag = getattr(cause, "diag", None)
    words = _CONSTRAINTS.get(getattr(cause, "sqlstate", None) or "")
    if diag is None or words is None:
        return None
    table = diag.table_name or ""
    columns: list[str] = []
    if diag.column_name:
        columns = [diag.column_name]
    elif words.startswith("UNIQUE") and (found := _KEY_COLUMNS.search(diag.message_detail or "")):
        columns = [name.strip() for name in found.group("columns").split(",")]
    if columns and words != _CONSTRAINTS["23503"]:
        words += ": " + ", ".join(f"{table}.{column}" for column in columns)
    first_line = str(cause).splitlines()[0] if str(cause) else ""
    return f"{words} - {first_line}" if first_line else words


#: SQLSTATEs after which a write runs again: SERIALIZABLE's refusal, a deadlock's
#: victim, a lock not granted in time.
_RETRIED = {
    "40001": "a serialization failure",
    "40P01": "a deadlock",
    "55P03": "a lock not available",
}
#: :meth:`PostgresDatabase.write_new_rows` runs again after those and after a unique
#: violation (another client took a key after the transaction's snapshot).
_RETRIED_NEW_ROWS = {**_RETRIED, "23505": "a key taken meanwhile"}
#: :meth:`PostgresDatabase.write_deletion` runs again after those and after a foreign key
#: violation: a row added after its snapshot references a session it deletes (it
#: deletes or unlinks every reference it can see).
_RETRIED_DELETION = {**_RETRIED, "23503": "a reference added meanwhile"}
#: SQLSTATEs of a server that ended the session (besides class 08, connection errors).
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def _failed_to_connect(exc: BaseException) -> bool:
    """True when ``exc`` is the driver's failure to reach the server (no connection
    was made: refused, reset), however peewee wrapped it."""
    import psycopg  # loaded already: a connection was being made

    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, psycopg.OperationalError):
            # No SQLSTATE: the server was not reached. A refusal with one (a wrong
            # password, a database that is gone) is no restart: it is raised.
            return getattr(seen, "sqlstate", None) is None
        seen = seen.__cause__ or seen.__context__
    return False


def _sqlstate(exc: BaseException) -> str | None:
    cause = getattr(exc, "orig", None) or exc
    return getattr(cause, "sqlstate", None)


def as_sqlite_error(exc: BaseException) -> BaseException:
    """A driver error as the ``sqlite3`` exception of the same DB-API class, with
    SQLite's wording for constraint failures (:func:`constraint_message`);
    any other exception as it is. Code written against Hermes' store catches
    ``sqlite3.IntegrityError`` and its kin on both backends."""
    for kind in type(exc).__mro__:
        target = SQLITE_ERRORS.get(kind.__name__)
        if target is not None and kind.__module__.split(".")[0] in ("psycopg", "peewee"):
            return target(constraint_message(exc) or str(exc))
    return exc


def open_database(
    url: str, *, migrate_first: bool = True, read_only: bool = False
) -> PostgresDatabase:
    """A handle on the store ``url``, migrated first unless asked not to (or read-only)."""
    target = parse_url(url)
    require_driver()
    if migrate_first and not read_only:
        migrate(url)
    return PostgresDatabase(target, read_only=read_only)


__all__ = [
    "ESCAPE",
    "SCHEMES",
    "PostgresDatabase",
    "QmarkConnection",
    "ServerTarget",
    "adapt_text",
    "add_trigram_index",
    "as_sqlite_error",
    "constraint_message",
    "escape_text",
    "is_postgres_url",
    "migrate",
    "migrations_dir",
    "open_database",
    "optional_migrations_dir",
    "parse_url",
    "qmark_to_format",
    "require_driver",
    "search_path",
    "trigram_index_state",
    "unescape_text",
]
