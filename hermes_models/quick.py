"""The ``hermes-models`` console script, and its quick path for ``sessions`` in a pipe.

``hermes-models sessions`` is what people and scripts run most, and click,
rich and peewee take four times as long to load as the whole listing takes
with plain :mod:`sqlite3`. So when standard output is not a terminal and the
command line is a plain listing (``sessions`` with ``--db``, ``--limit``,
``--offset``, ``--source``, ``--archived``, ``--recent``, ``--utc``), this
module answers it with :mod:`sqlite3` alone: the statement the library
renders for that listing (:mod:`hermes_models.quick_sql`, generated from it
and compared by a test), the rows finished as the library finishes them
(:mod:`hermes_models.listing_rows`), laid out as the full command lays a
listing out in a pipe (:mod:`hermes_models.grid`). The text is the same
whichever path answers. Having written it, the process ends with
:func:`os._exit` (no interpreter teardown: there is nothing left to close).

The quick path answers only a file it would not change: an existing SQLite
file of this package's current structure with every migration applied
(nothing to migrate), in WAL mode on an SQLite without the WAL-reset bug
(:mod:`hermes_models.driver`), private to this user, with private sidecars.
Anything else — a terminal, another option, a server URL, an environment
variable it does not read, a file that needs care, any error before the first
byte is written — goes to the full command, which does what it always did (and
gives its errors).
"""

from __future__ import annotations

import os
import stat
import sys

from .driver import WAL_RESET_BUG, sqlite3
from .hints import TYPE_CHECKING
from .sqlite_sql import (
    COMPILE_OPTIONS,
    ID_HELD,
    IDS_WITH_PREFIX,
    IDS_WITH_PREFIX_ANYWHERE,
    JOURNAL_MODE,
    SCHEMA_OBJECTS,
    prefix_bounds,
)
from .uris import sqlite_uri

if TYPE_CHECKING:
    from typing import Any

#: Options of ``sessions`` the quick path reads, by whether they take a value.
_VALUED = ("--db", "--limit", "--offset", "--source")
_FLAGS = ("--archived", "--recent", "--utc")
#: Environment variables the full command reads and the quick path does not: the
#: database (click's), shell completion (click's), a terminal forced (rich's), and
#: Python's interactive prompt after the script.
_FULL_COMMAND_READS = (
    "HERMES_MODELS_DB",
    "_HERMES_MODELS_COMPLETE",
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
    "PYTHONINSPECT",  # Python's: a prompt after the command, which os._exit would skip
)
#: A number the quick path reads (longer ones go to the full command's checks).
_MAX_DIGITS = 18


def run() -> None:
    """Console-script entry point: the quick path when it applies, else the full CLI."""
    try:
        status = sessions_quickly(sys.argv[1:])
    except KeyboardInterrupt:  # Ctrl-C: what click says and returns
        sys.stderr.write("\nAborted!\n")
        status = 1
    if status is None:
        from .cli import run as full  # click, rich and peewee: only when they are needed

        full()
        return
    # The listing is written and flushed, its connection closed, and nothing else ran:
    # the process ends without the interpreter's teardown (freeing every module and
    # object, about 2 ms here), as a program in C would.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def parse(argv: list[str], environ: Any) -> dict[str, Any] | None:
    """The listing ``argv`` asks for, or None when the quick path does not take it."""
    if "sessions" not in argv or any(name in environ for name in _FULL_COMMAND_READS):
        return None
    command = argv.index("sessions")
    found: dict[str, Any] = {"utc": False}
    for position, args in ((0, argv[:command]), (1, argv[command + 1 :])):
        index = 0
        while index < len(args):
            name, eq, value = args[index].partition("=")
            index += 1
            if name in _FLAGS and not eq and (position == 1 or name == "--utc"):
                if name in found and name != "--utc":
                    return None
                found["utc" if name == "--utc" else name] = True
                continue
            if name not in _VALUED or (position == 0 and name != "--db") or name in found:
                return None
            if not eq:
                if index >= len(args):
                    return None
                value = args[index]
                index += 1
            if value.startswith("-"):
                return None
            found[name] = value
    return _checked(found, environ)


def _checked(found: dict[str, Any], environ: Any) -> dict[str, Any] | None:
    request: dict[str, Any] = {
        "utc": found["utc"],
        "archived": found.get("--archived", False),
        "recent": found.get("--recent", False),
        "source": found.get("--source"),
    }
    for name, default in (("--limit", 20), ("--offset", 0)):
        text = found.get(name)
        if text is None:
            request[name[2:]] = default
        elif text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
            request[name[2:]] = int(text)
        else:
            return None
    if request["source"] is not None and not request["source"].strip():
        return None
    path = _path(found.get("--db"), environ)
    if path is None:
        return None
    request["path"] = path
    return request


def _path(db: str | None, environ: Any) -> str | None:
    """The file a plain ``--db`` (or ``$HERMES_HOME``) names; None for anything else (a
    URL, an in-memory name, ``~user``: the full command reads those)."""
    if db is None:
        home = environ.get("HERMES_HOME") or "~/.hermes"
        if not _plain(home):
            return None
        return _absolute(os.path.join(home, "state.db"))
    return _absolute(db) if _plain(db) else None


def _absolute(text: str) -> str | None:
    """``text`` with ``~`` expanded, absolute; None when no home folder is known (the
    full command says so)."""
    expanded = os.path.expanduser(text)
    return None if expanded.startswith("~") else os.path.abspath(expanded)


def _plain(text: str) -> bool:
    """Whether ``text`` is a path the quick path reads as the library would: not blank,
    no ``:`` (URLs, ``:memory:``), no NUL, no ``~user``."""
    return (
        bool(text.strip())
        and ":" not in text
        and "\x00" not in text
        and (not text.startswith("~") or text[:2] in ("~", "~/"))
    )


def _private(path: str) -> bool:
    """Whether ``path`` and its sidecars are what the library leaves after a writable open:
    regular files of this user, private and writable by them, in a folder they can write.
    A path through a symbolic link (SQLite keeps the sidecars beside the real file), a
    sidecar with a second name (a hard link) and a ``-journal`` go to the full command,
    which checks them all before SQLite opens anything."""
    if os.name == "nt" or os.path.realpath(path) != path or os.path.lexists(f"{path}-journal"):
        return False
    me = os.geteuid()
    for candidate, follow in ((path, True), (f"{path}-wal", False), (f"{path}-shm", False)):
        try:
            info = os.stat(candidate) if follow else os.lstat(candidate)
        except FileNotFoundError:
            if follow:
                return False
            continue
        mode = stat.S_IMODE(info.st_mode)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != me
            or mode & 0o077
            or not mode & stat.S_IWUSR
            or (follow and info.st_size == 0)
            or (not follow and info.st_nlink > 1)
        ):
            return False
    return os.access(path, os.R_OK | os.W_OK) and os.access(
        os.path.dirname(path), os.W_OK | os.X_OK
    )


def _open(path: str) -> sqlite3.Connection | None:
    """A connection to ``path`` when the quick path may list it (see the module
    docstring), else None. It writes nothing: with another connection's ``-wal``
    or ``-shm`` present it is read-only (a read-write one could copy the WAL into the
    file when it closes), and a ``-journal`` (a writer that may have crashed) is left
    to the full command."""
    # Loaded when a listing is answered here (not for the commands that go on).
    from . import quick_sql
    from .shape import probe

    if os.path.lexists(f"{path}-journal") or WAL_RESET_BUG:
        # (On an SQLite with the WAL-reset bug the full command says whether the file
        # is exposed to it.)
        return None
    if os.path.lexists(f"{path}-wal") or os.path.lexists(f"{path}-shm"):
        conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=5.0)
    else:
        # Its -wal and -shm are made and removed again, as the full command's are.
        conn = sqlite3.connect(path, timeout=5.0)  # a plain name: taken literally
    conn.isolation_level = None
    try:
        mode = conn.execute(JOURNAL_MODE).fetchone()
        shape = probe(conn)
        current = (
            mode is not None
            and str(mode[0]).lower() == "wal"
            and shape.key == quick_sql.SHAPE_KEY
            and shape.migrations is not None
            and shape.migrations.issuperset(quick_sql.MIGRATIONS)
            # Every index and trigger a fresh file has (the full command makes a
            # missing search index again), and nothing else.
            and sorted(conn.execute(SCHEMA_OBJECTS)) == quick_sql.SCHEMA_OBJECTS
            and any("FTS5" in str(row[0]) for row in conn.execute(COMPILE_OPTIONS))
        )
    except BaseException:
        conn.close()
        raise
    if not current:
        conn.close()
        return None
    return conn


def _listing(conn: sqlite3.Connection, request: dict[str, Any]) -> list[dict[str, Any]]:
    # Loaded when a listing is answered here (not for the commands that go on).
    from . import quick_sql
    from .listing_rows import finish_row

    key = (request["source"] is not None, request["archived"], request["recent"])
    sql, template, slots = quick_sql.LISTINGS[key]
    values = {
        "limit": request["limit"] or -1,  # 0: no limit
        "offset": request["offset"],
        "source0": request["source"],
    }
    params = list(template)
    for index, name in slots:
        params[index] = values[name]
    cursor = conn.execute(sql, params)
    names = [column[0] for column in cursor.description]
    return [finish_row(dict(zip(names, row))) for row in cursor.fetchall()]


def names_one(conn: sqlite3.Connection, prefix: str) -> bool:
    """Whether ``prefix`` names one session, as ``SessionDB.resolve_session_id`` decides:
    an id held, else the prefix of exactly one id (ASCII letters of either case)."""
    if not prefix:
        return False
    if conn.execute(ID_HELD, (prefix,)).fetchone() is not None:
        return True
    raw = _folded(prefix)
    bounds = prefix_bounds(prefix)
    if bounds is None:
        found = conn.execute(IDS_WITH_PREFIX_ANYWHERE, (len(raw), raw, 2)).fetchall()
    else:
        found = conn.execute(IDS_WITH_PREFIX, (*bounds, len(raw), raw, 2)).fetchall()
    return len(found) == 1


#: Ids read at most at once by :class:`Names` (more: one prefix at a time).
_NAMES_READ = 1000


class Names:
    """:func:`names_one` for the prefixes a listing shortens its ids to, all at least
    ``shortest`` characters long: the ids starting with a prefix's first ``shortest``
    characters (ASCII letters of either case) are read once, and every longer prefix
    of them is decided from those, without a statement of its own."""

    def __init__(self, conn: sqlite3.Connection, shortest: int) -> None:
        self._conn = conn
        self._shortest = shortest
        self._read: dict[str, list[tuple[str, bytes]] | None] = {}

    def __call__(self, prefix: str) -> bool:
        if len(prefix) < self._shortest:
            return names_one(self._conn, prefix)
        head = prefix[: self._shortest]
        if head not in self._read:
            self._read[head] = self._starting(head)
        ids = self._read[head]
        if ids is None:  # too many to read at once
            return names_one(self._conn, prefix)
        raw = _folded(prefix)
        matching = [i for i, folded in ids if folded.startswith(raw)]
        return prefix in matching or len(matching) == 1

    def _starting(self, head: str) -> list[tuple[str, bytes]] | None:
        raw = _folded(head)
        bounds = prefix_bounds(head)
        values: tuple[Any, ...] = (len(raw), raw, _NAMES_READ + 1)
        if bounds is None:
            rows = self._conn.execute(IDS_WITH_PREFIX_ANYWHERE, values).fetchall()
        else:
            rows = self._conn.execute(IDS_WITH_PREFIX, (*bounds, *values)).fetchall()
        if len(rows) > _NAMES_READ:
            return None
        return [(str(row[0]), _folded(str(row[0]))) for row in rows]


def _folded(text: str) -> bytes:
    """``text``'s UTF-8 bytes, ASCII letters lower-cased (what SQLite's lower() folds)."""
    return text.encode("utf-8").lower()  # bytes.lower() folds ASCII letters alone


def sessions_quickly(argv: list[str], environ: Any = None) -> int | None:
    """Answer ``hermes-models sessions ...`` (``argv`` without the program name) on
    the quick path and return the exit status; None when the full command must."""
    environ = os.environ if environ is None else environ
    if getattr(sys.stdout, "buffer", None) is None or sys.flags.inspect:
        return None
    try:
        request = parse(argv, environ)
        if request is None or os.isatty(sys.stdout.fileno()) or not _private(request["path"]):
            return None
        text = _text(request, environ)
    except Exception:  # the full command answers, and says what is wrong
        return None
    if text is None:
        return None
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): the rest goes nowhere, as in the full command.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError as exc:  # a full disk, say: one line and status 1, as the full command
        sys.stderr.write(f"Error: {exc.strerror or exc}\n")
        return 1
    return 0


def _text(request: dict[str, Any], environ: Any) -> str | None:
    """The listing's text, or None when the quick path cannot answer."""
    # Loaded when a listing is answered here (not for the commands that go on).
    from . import grid
    from .clock import Clock

    conn = _open(request["path"])
    if conn is None:
        return None
    try:
        rows = _listing(conn, request)
        if not rows:
            return None  # "no sessions", in the encoding of standard output: click's
        width = grid.pipe_width(environ)
        ids = [row["id"] for row in rows]
        shown = grid.short_ids(ids, Names(conn, grid.SHORTEST), width)
    finally:
        conn.close()
    return grid.sessions_text(rows, Clock(request["utc"]), shown, width)


__all__ = ["Names", "names_one", "parse", "run", "sessions_quickly"]
