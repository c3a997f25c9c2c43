"""
Keep the full-text indexes in step with what this SQLite build can run.

This step is applied once like any other, and applied again (without being
recorded twice) whenever a process opens the file and finds the indexes out
of step with its SQLite build (hermes_models.schema.keep_search_indexes):

* an index the build supports but the file lacks - because a build without
  FTS5 (or without the trigram tokenizer) migrated or last opened the file -
  is created with its triggers and filled from every message, so losing the
  index on such a build is never permanent;
* an index whose module the build lacks keeps its table (inert) but loses its
  triggers, so that writing messages keeps working.

Once both indexes are really built, a schema_version still below 16 (kept
there by an upgrade that could not build them) is raised to 16.
"""

import re

from yoyo import step

TABLES = {
    "messages_fts": "",
    "messages_fts_trigram": ", tokenize='trigram'",
}


def _text(row):
    return (
        f"COALESCE({row}.content, '') || ' ' || COALESCE({row}.tool_name, '')"
        f" || ' ' || COALESCE({row}.tool_calls, '')"
    )


def _triggers(table):
    insert = f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_text('new')});"
    delete = f"DELETE FROM {table} WHERE rowid = old.id;"
    return {
        f"{table}_insert": (
            f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN\n    {insert}\nEND"
        ),
        f"{table}_delete": (
            f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN\n    {delete}\nEND"
        ),
        f"{table}_update": (
            f"CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN\n"
            f"    {delete}\n    {insert}\nEND"
        ),
    }


def _squash(sql):
    return re.sub(r"\s+", "", (sql or "").lower())


def _supported(cursor, options):
    try:
        cursor.execute(f"CREATE VIRTUAL TABLE temp.hermes_fts_probe USING fts5(x{options})")
        cursor.execute("DROP TABLE temp.hermes_fts_probe")
    except Exception:
        return False
    return True


def _message_triggers(cursor):
    cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    )
    return dict(cursor.fetchall())


def _writers(cursor, table):
    """Names of the triggers that write to ``table``."""
    mention = re.compile(rf"\b{table}\b")
    return [
        name
        for name, sql in _message_triggers(cursor).items()
        if name in _triggers(table) or mention.search(sql or "")
    ]


def _built(cursor, table, options):
    cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    row = cursor.fetchone()
    if row is None or _squash(row[0]) != _squash(
        f"CREATE VIRTUAL TABLE {table} USING fts5(content{options})"
    ):
        return False
    present = _message_triggers(cursor)
    expected = _triggers(table)
    for name in expected:
        if name not in present:
            return False
        if not name.endswith("_delete") and "tool_calls" not in _squash(present[name]):
            return False
    # Any other trigger writing to the index would index messages twice.
    return sorted(_writers(cursor, table)) == sorted(expected)


def _rebuild(cursor, table, options):
    for name in _writers(cursor, table):
        cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    cursor.execute(f"DROP TABLE IF EXISTS {table}")
    cursor.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(content{options})")
    for sql in _triggers(table).values():
        cursor.execute(sql)
    cursor.execute(
        f"INSERT INTO {table}(rowid, content) SELECT id, {_text('messages')} FROM messages"
    )


def apply_step(conn):
    cursor = conn.cursor()
    built = 0
    for table, options in TABLES.items():
        if not _supported(cursor, options):
            for name in _writers(cursor, table):
                cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
            continue
        if not _built(cursor, table, options):
            _rebuild(cursor, table, options)
        built += 1
    if built == len(TABLES):
        cursor.execute("UPDATE schema_version SET version = 16 WHERE version < 16")


def rollback_step(conn):
    """The indexes stay: 0003_message_search owns them."""


steps = [step(apply_step, rollback_step)]
