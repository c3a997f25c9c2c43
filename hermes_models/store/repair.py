"""Repairing a state.db whose schema SQLite can no longer parse.

A duplicated row in ``sqlite_master`` (two definitions of ``messages_fts``,
say) makes SQLite refuse every statement on the file with "malformed
database schema", while the sessions and messages themselves are intact.
:func:`repair_state_db_schema` follows Hermes' recovery: copy the file as
it is, then try the least destructive fix first:

1. ``dedup_schema``: drop the duplicated schema rows, keeping the oldest
   definition of each object;
2. ``drop_fts_rebuild``: drop every full-text object, ``VACUUM``, and build
   the full-text index again from the messages (Hermes leaves that rebuild to
   its next open; here the search migration's own step does it at once).

Sessions and messages are never touched. Both fixes edit ``sqlite_master``
through SQLite itself (``writable_schema``), so run the repair while no
connection of this process has the file open.
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..driver import sqlite3
from ..errors import MALFORMED_MARKERS, UnsafeFileError, is_malformed_db_error
from . import sqlite_sql
from .cipher import open_file
from .ddl import SEARCH_MIGRATION, migration_module
from .files import check_ownership

if TYPE_CHECKING:
    from typing import Any

logger = logging.getLogger("hermes_models")


_claimed: set[str] = set()
_claimed_lock = threading.Lock()


def claim_repair_attempt(db_path: str | os.PathLike[str]) -> bool:
    """True the first time this process asks for ``db_path``: one automatic repair per file."""
    key = os.path.realpath(db_path)
    with _claimed_lock:
        if key in _claimed:
            return False
        _claimed.add(key)
        return True


def _backup(path: Path) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    target = path.with_name(f"{path.name}.malformed-backup-{stamp}")
    serial = 1
    while target.exists():  # never overwrite an earlier backup taken in the same second
        serial += 1
        target = path.with_name(f"{path.name}.malformed-backup-{stamp}-{serial}")

    shutil.copy2(path, target)
    for suffix in ("-wal", "-shm"):
        sidecar = path.with_name(path.name + suffix)
        if sidecar.exists():
            shutil.copy2(sidecar, target.with_name(target.name + suffix))
    return target


def health_problem(db_path: Path) -> str | None:
    """Why ``db_path`` does not open cleanly on a fresh connection; None when it does."""
    conn = open_file(str(db_path), isolation_level=None)
    try:
        conn.execute(sqlite_sql.JOURNAL_MODE).fetchone()
        problems = [str(row[0]) for row in conn.execute(sqlite_sql.INTEGRITY_CHECK)]
        if problems != ["ok"]:
            return "; ".join(problems[:3])
        conn.execute(sqlite_sql.COUNT_SESSIONS).fetchone()
        return None
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()


def _edit_schema(db_path: Path, statement: str) -> None:
    """Run ``statement`` on ``sqlite_master`` itself, in one write, with the schema writable."""
    conn = open_file(str(db_path), isolation_level=None)
    try:
        conn.execute(sqlite_sql.WRITABLE_SCHEMA_ON)
        conn.execute(sqlite_sql.BEGIN_IMMEDIATE)
        conn.execute(statement)
        conn.execute(sqlite_sql.COMMIT)
        conn.execute(sqlite_sql.WRITABLE_SCHEMA_OFF)
    finally:
        conn.close()


def _dedup_schema(db_path: Path) -> None:
    _edit_schema(db_path, sqlite_sql.DEDUP_SCHEMA)


def _drop_and_rebuild_fts(db_path: Path) -> None:

    _edit_schema(db_path, sqlite_sql.FORGET_SEARCH_SCHEMA)
    conn = open_file(str(db_path), isolation_level=None)
    try:
        conn.execute(sqlite_sql.VACUUM)
        conn.execute(sqlite_sql.BEGIN_IMMEDIATE)
        migration_module(SEARCH_MIGRATION).apply_step(conn)
        conn.execute(sqlite_sql.COMMIT)
    finally:
        conn.close()


def repair_state_db_schema(
    db_path: str | os.PathLike[str], *, backup: bool = True
) -> dict[str, Any]:
    """Repair a file whose schema is malformed (see the module docstring).

    Returns ``{"repaired": bool, "strategy": "dedup_schema" | "drop_fts_rebuild" | None,
    "backup_path": str | None, "error": str | None}``; never raises for a
    file it cannot fix.
    """

    path = Path(db_path)
    report: dict[str, Any] = {
        "repaired": False,
        "strategy": None,
        "backup_path": None,
        "error": None,
    }
    if not path.is_file():
        report["error"] = f"{path} does not exist"
        return report
    try:
        check_ownership(path, read_only=False)  # before SQLite opens anything
    except UnsafeFileError as exc:
        report["error"] = str(exc)
        return report
    if backup:
        try:
            report["backup_path"] = str(_backup(path))
        except OSError as exc:
            logger.warning("%s: could not copy the file before repairing it: %s", path, exc)
    for strategy, fix in (
        ("dedup_schema", _dedup_schema),
        ("drop_fts_rebuild", _drop_and_rebuild_fts),
    ):
        try:
            fix(path)
        except sqlite3.Error as exc:
            report["error"] = str(exc)
            logger.warning("%s: repair step %s failed: %s", path, strategy, exc)
            continue
        problem = health_problem(path)
        if problem is None:
            report.update(repaired=True, strategy=strategy, error=None)
            logger.warning("%s: malformed schema repaired (%s)", path, strategy)
            return report
        report["error"] = problem
    logger.error(
        "%s: the schema could not be repaired automatically (backup: %s)",
        path,
        report["backup_path"],
    )
    return report


__all__ = [
    "MALFORMED_MARKERS",
    "claim_repair_attempt",
    "health_problem",
    "is_malformed_db_error",
    "repair_state_db_schema",
]
