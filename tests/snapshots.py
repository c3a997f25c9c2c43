"""Whole-file snapshots for tests that assert nothing changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_models.driver import sqlite3
from hermes_models.store.files import is_postgres_url, sqlite_uri


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


def store_snapshot(target: Any) -> dict[str, list[tuple[Any, ...]]]:
    """:func:`snapshot` of a file, or of a PostgreSQL store (``target`` its URL): every
    row of every table of its schema, read through a connection of its own (with the
    package's text escaping; the models' binding is left alone)."""
    if not is_postgres_url(target):
        return snapshot(Path(target))
    import psycopg

    from hermes_models.store.postgres import adapt_text, parse_url
    from hermes_models.store.postgres_sql import TABLES

    where = parse_url(target)
    with psycopg.connect(where.url, autocommit=True) as conn:
        adapt_text(conn)
        if where.schema:
            conn.execute(f"SET search_path TO {where.schema}, public")
        names = sorted(row[0] for row in conn.execute(TABLES))
        found = {
            name: sorted((tuple(row) for row in conn.execute(f'SELECT * FROM "{name}"')), key=repr)
            for name in names
        }
        if "hermes_search_stats" in found:
            # Its rows are each writing transaction's, folded now and then into one per
            # backend: what the store holds is their sum, the messages and their tokens.
            rows = found["hermes_search_stats"]
            found["hermes_search_stats"] = [
                (sum(row[1] for row in rows), sum(row[2] for row in rows))
            ]
        return found
