"""The journal policy: which journal mode a store file is put in, and its ``synchronous``.

WAL lets readers go on while a writer writes, and is the mode a new file gets.
On an SQLite with the WAL-reset bug (:func:`hermes_models.driver.has_wal_reset_bug`)
a WAL file that several processes write and checkpoint can be corrupted, so
there no file is switched to WAL: a new file stays in DELETE mode. Whatever
the SQLite, a file that is already in WAL is never switched back on opening it
(another process may hold it, and its commits still in the ``-wal`` file would
be lost), and a file with content that is not in WAL keeps its mode unless WAL
is asked for: someone chose it (a Hermes on a vulnerable SQLite, an operator, a
file system without WAL). Each of these decisions that leaves a file other
than asked, or exposed to the bug, is logged once per file and process.

Two settings, each an argument of :func:`hermes_models.connect` and ``SessionDB``,
an environment variable, and a CLI option:

- ``journal_mode``: ``wal`` (switch a file to WAL where the SQLite is safe),
  ``delete`` (put a file that is not in WAL in DELETE mode; a WAL file stays
  WAL, said in the log), or unset: new files WAL where safe, others as they are.
- ``synchronous``: ``off``, ``normal``, ``full``, ``extra`` or ``0``-``3``, set on
  every connection; unset leaves the SQLite build's default.

Memory-mapped reads stay off, and deleted content is overwritten
(``secure_delete``), on every connection whichever build runs it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ..driver import has_wal_reset_bug, sqlite3
from ..errors import is_lock_error
from . import sqlite_sql
from .caches import BoundedSet
from .writes import retry_locked

if TYPE_CHECKING:
    from typing import Any

logger = logging.getLogger("hermes_models")

#: The environment variables read when the setting is not passed.
JOURNAL_MODE_VARIABLE = "HERMES_MODELS_JOURNAL_MODE"
SYNCHRONOUS_VARIABLE = "HERMES_MODELS_SYNCHRONOUS"
#: The journal modes a store may be asked to use.
JOURNAL_MODES = ("wal", "delete")
#: ``PRAGMA synchronous`` levels by name.
SYNCHRONOUS_LEVELS = {"off": 0, "normal": 1, "full": 2, "extra": 3}

#: Error texts of ``PRAGMA journal_mode=WAL`` on file systems without WAL support.
WAL_INCOMPAT_MARKERS = ("locking protocol", "not authorized")


class JournalSettings:
    """A store's journal settings, checked: ``mode`` (``"wal"``, ``"delete"`` or None)
    and ``synchronous`` (0-3 or None: the build's default)."""

    __slots__ = ("mode", "synchronous")

    def __init__(self, mode: str | None = None, synchronous: int | None = None) -> None:
        self.mode = mode
        self.synchronous = synchronous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JournalSettings) and (self.mode, self.synchronous) == (
            other.mode,
            other.synchronous,
        )

    def __hash__(self) -> int:
        return hash((self.mode, self.synchronous))

    def __repr__(self) -> str:
        return f"JournalSettings(mode={self.mode!r}, synchronous={self.synchronous!r})"


def check_journal_mode(value: Any, argument: str = "journal_mode") -> str | None:
    """``value`` as a journal mode (``"wal"``, ``"delete"``), None for None or ``""``.

    Raises:
        ValueError: any other value (the message names ``argument``).
    """
    if value is None:
        return None
    mode = value.strip().lower() if isinstance(value, str) else None
    if mode == "":
        return None
    if mode not in JOURNAL_MODES:
        raise ValueError(f"{argument}={value!r}: expected one of {', '.join(JOURNAL_MODES)}")
    return mode


def check_synchronous(value: Any, argument: str = "synchronous") -> int | None:
    """``value`` as a ``PRAGMA synchronous`` level 0-3, from a name (any case) or a
    number; None for None or ``""``.

    Raises:
        ValueError: any other value (the message names ``argument``).
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value in range(4):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "":
            return None
        if text in SYNCHRONOUS_LEVELS:
            return SYNCHRONOUS_LEVELS[text]
        if text in ("0", "1", "2", "3"):
            return int(text)
    raise ValueError(f"{argument}={value!r}: expected off, normal, full, extra or 0-3")


def settings(journal_mode: Any = None, synchronous: Any = None) -> JournalSettings:
    """The settings for a store: each argument, else its environment variable, checked.

    Raises:
        ValueError: a value (passed or in the environment) is not one of those accepted.
    """
    mode = check_journal_mode(journal_mode)
    if mode is None:
        raw = os.environ.get(JOURNAL_MODE_VARIABLE)
        mode = check_journal_mode(raw, JOURNAL_MODE_VARIABLE)
    level = check_synchronous(synchronous)
    if level is None:
        raw = os.environ.get(SYNCHRONOUS_VARIABLE)
        level = check_synchronous(raw, SYNCHRONOUS_VARIABLE)
    return JournalSettings(mode, level)


def journal_mode(conn: sqlite3.Connection) -> str | None:
    """The journal mode ``conn``'s file is in, lower-cased; None when it cannot be read."""
    try:
        row = conn.execute(sqlite_sql.JOURNAL_MODE).fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None or row[0] is None else str(row[0]).lower()


def _is_empty(conn: sqlite3.Connection) -> bool:
    """True when ``conn``'s file has no page yet: nobody has chosen its mode."""
    try:
        return int(conn.execute(sqlite_sql.PAGE_COUNT).fetchone()[0]) == 0
    except sqlite3.Error:
        return False


def connection_has_bug(conn: Any) -> bool:
    """True when the SQLite that runs ``conn`` (any DB-API connection) has the WAL-reset bug."""
    version = str(conn.execute(sqlite_sql.SQLITE_VERSION).fetchone()[0])
    return has_wal_reset_bug(tuple(int(part) for part in version.split(".")[:3]))


#: What was said once per file and process, by kind.
_said: BoundedSet[tuple[str, str]] = BoundedSet("journal policy warnings", 1024)

_MESSAGES = {
    "exposed": (
        "%s is in WAL mode and this SQLite (%s) has the WAL-reset bug, which can corrupt a "
        "WAL file several processes write: it stays in WAL (switching it back while other "
        "processes hold it would lose their commits). Run on SQLite 3.51.3 or later "
        "(`pip install pysqlite3`), or stop every process using the file and set "
        "journal_mode=delete"
    ),
    "kept_out": (
        "%s stays in %s mode: this SQLite (%s) has the WAL-reset bug, so no file is switched "
        "to WAL (writers block readers meanwhile). Run on SQLite 3.51.3 or later "
        "(`pip install pysqlite3`) to use WAL"
    ),
    "delete_not_applied": (
        "%s: journal_mode=delete was asked for, but the file is in WAL mode and other "
        "processes may hold it, so it stays in WAL; stop every process using the file, "
        "then open it with journal_mode=delete while nothing else has it open"
    ),
    "fallback": (
        "%s: WAL is not supported on this file system (%s); using journal_mode=DELETE, "
        "which works on NFS/SMB/FUSE but lets writers block readers"
    ),
}


def _say_once(kind: str, label: str, *args: Any) -> None:
    if _said.add((kind, label)):
        logger.warning(_MESSAGES[kind], label, *args)


def _describe_sqlite(conn: sqlite3.Connection) -> str:
    return f"{conn.execute(sqlite_sql.SQLITE_VERSION).fetchone()[0]}"


def _request_wal(conn: sqlite3.Connection) -> str:
    row = conn.execute(sqlite_sql.JOURNAL_MODE_WAL).fetchone()
    return str(row[0]).lower()


def _enable_wal(conn: sqlite3.Connection, label: str) -> str:
    """Switch ``conn``'s file to WAL (waiting out locks), or to DELETE where the file
    system cannot do WAL; the mode SQLite reports after."""
    try:
        return retry_locked(lambda: _request_wal(conn))
    except sqlite3.OperationalError as exc:
        text = str(exc).lower()
        if not any(marker in text for marker in WAL_INCOMPAT_MARKERS):
            raise
        if journal_mode(conn) == "wal":
            raise
        _say_once("fallback", label, exc)
        conn.execute(sqlite_sql.JOURNAL_MODE_DELETE)
        return "delete"


def _set_delete(conn: sqlite3.Connection, current: str) -> str:
    """Put a file that is not in WAL in DELETE mode; left as it is while another
    connection holds a lock on it."""
    try:
        row = conn.execute(sqlite_sql.JOURNAL_MODE_DELETE).fetchone()
    except sqlite3.OperationalError as exc:
        if not is_lock_error(exc):
            raise
        return current
    return str(row[0]).lower()


def apply(
    conn: sqlite3.Connection,
    label: str,
    chosen: JournalSettings,
    *,
    vulnerable: bool | None = None,
) -> str | None:
    """Put ``conn``'s file in the journal mode the policy gives (see the module's
    docstring) and set the connection's ``synchronous``; the mode the file is in
    after, None when it could not be read (the file is then left alone).

    ``vulnerable`` says whether the SQLite running ``conn`` has the WAL-reset bug
    (None: asked of ``conn``). ``label`` names the file in the log.
    """
    if vulnerable is None:
        vulnerable = connection_has_bug(conn)
    current = journal_mode(conn)
    if current == "wal":
        if chosen.mode == "delete":
            _say_once("delete_not_applied", label)
        if vulnerable:
            _say_once("exposed", label, _describe_sqlite(conn))
        mode: str | None = "wal"
    elif current is None:
        # Not readable now (another process holds the file): the file keeps its mode.
        mode = _enable_wal(conn, label) if chosen.mode == "wal" and not vulnerable else None
    elif chosen.mode == "wal" or (chosen.mode is None and _is_empty(conn)):
        if vulnerable:
            _say_once("kept_out", label, current.upper(), _describe_sqlite(conn))
            mode = current
        else:
            mode = _enable_wal(conn, label)
    elif chosen.mode == "delete" and current != "delete":
        mode = _set_delete(conn, current)
    else:
        mode = current
    if chosen.synchronous is not None:
        conn.execute(sqlite_sql.set_synchronous(chosen.synchronous))
    return mode


def apply_wal_with_fallback(conn: Any, *, db_label: str = "state.db") -> str:
    """Set ``journal_mode=WAL`` on ``conn``, falling back to DELETE; ``"wal"`` or ``"delete"``.

    Hermes' helper of the same name, for any DB-API connection, with the journal
    policy: a file already in WAL is not touched; on an SQLite with the WAL-reset
    bug (the one running ``conn``) a file not in WAL is not switched (``"delete"``);
    an error naming a WAL-incompatible file system (``locking protocol``,
    ``not authorized``) switches to DELETE mode with one warning per ``db_label`` in
    this process, unless the file is already in WAL on disk, in which case the error
    propagates, as does any other error.
    """
    mode = apply(conn, db_label, JournalSettings("wal"))
    return "wal" if mode in ("wal", None) else "delete"


def set_connection_defaults(conn: sqlite3.Connection) -> None:
    """What every connection to a store sets whichever SQLite build runs it: no
    memory-mapped reads, and deleted content overwritten."""
    conn.execute(sqlite_sql.MMAP_OFF)
    conn.execute(sqlite_sql.SECURE_DELETE_ON)
