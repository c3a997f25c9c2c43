"""
SQLite: nothing to do.

On PostgreSQL this step labels the two functions that catch errors
(hermes_json_text, hermes_json_array_length) PARALLEL UNSAFE: a parallel plan
cannot run them. SQLite has no such functions and no parallel plans; the id is
kept so that both folders hold the same migrations.
"""

from yoyo import step


def apply_step(conn):
    pass


def rollback_step(conn):
    pass


steps = [step(apply_step, rollback_step)]
