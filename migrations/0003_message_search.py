"""
Full-text indexes over messages: BM25 words and trigram substrings.

Both tables are contentful FTS5 tables whose row id is messages.id; three
triggers per table keep them in step with messages. The indexed text is
content, tool_name and tool_calls joined by spaces.

Where the SQLite build lacks FTS5 or the trigram tokenizer, the matching
table and its triggers are not created, so message writes keep working and
search falls back to LIKE. Older Hermes layouts (external-content tables over
content only, or triggers under other names) are replaced and backfilled.
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


def _has_v16_layout(cursor, table, options):
    cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    row = cursor.fetchone()
    if row is None:
        return False
    layout = _squash(f"CREATE VIRTUAL TABLE {table} USING fts5(content{options})")
    if _squash(row[0]) != layout:
        return False
    cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    )
    present = dict(cursor.fetchall())
    expected = _triggers(table)
    for name in expected:
        if name not in present:
            return False
        if not name.endswith("_delete") and "tool_calls" not in _squash(present[name]):
            return False
    # Any other trigger writing to the index would index messages twice.
    mention = re.compile(rf"\b{table}\b")
    return not any(
        mention.search(sql or "") for name, sql in present.items() if name not in expected
    )


def _drop(cursor, table):
    mention = re.compile(rf"\b{table}\b")
    cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    )
    for name, sql in cursor.fetchall():
        if name in _triggers(table) or mention.search(sql or ""):
            cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    try:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    except Exception:
        # A table of a module this build lacks cannot be dropped; without its
        # triggers it is inert, and search does not use it.
        pass


def apply_step(conn):
    cursor = conn.cursor()
    for table, options in TABLES.items():
        if _has_v16_layout(cursor, table, options):
            continue
        _drop(cursor, table)
        if not _supported(cursor, options):
            continue
        cursor.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(content{options})")
        for sql in _triggers(table).values():
            cursor.execute(sql)
        cursor.execute(
            f"INSERT INTO {table}(rowid, content) SELECT id, {_text('messages')} FROM messages"
        )


def rollback_step(conn):
    cursor = conn.cursor()
    for table in TABLES:
        for name in _triggers(table):
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        cursor.execute(f"DROP TABLE IF EXISTS {table}")


steps = [step(apply_step, rollback_step)]
