"""Whole-file snapshots for tests that assert nothing changed."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hermes_models.files import sqlite_uri


def snapshot(path: Path, *, read_only: bool = True) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file, read through a connection of its own.

    With ``read_only=False`` the connection may write: when it is the file's
    last, it checkpoints and removes the ``-wal`` and ``-shm`` files as it closes.
    """
    if read_only:
        conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True)
    else:
        conn = sqlite3.connect(path)
    try:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {
            name: sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
            for name in names
        }
    finally:
        conn.close()
