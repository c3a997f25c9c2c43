"""
SQLite: nothing to do.

On PostgreSQL this step adds the BM25 ranking of word searches that FTS5 gives
SQLite (hermes_bm25 and the statistics it reads). SQLite has FTS5's own; the id
is kept so that both folders hold the same migrations.
"""

from yoyo import step


def apply_step(conn):
    pass


def rollback_step(conn):
    pass


steps = [step(apply_step, rollback_step)]
