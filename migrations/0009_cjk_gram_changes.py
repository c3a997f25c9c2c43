"""
The gram index, kept exact under every writer: a list of changed ids instead of a mark.

Migration 0007 trusted a high-water mark: every message with an id up to it
was taken as indexed. Ids are not written in order (copies, merges, imports,
restores, other programs' explicit ids), and an INSERT OR REPLACE fires no
delete trigger, so rows went unindexed for good. This step replaces it:

* messages_cjk_grams(id, grams): for each indexed message that has CJK text,
  the grams the index holds for it, as text (space-separated tokens, each
  one CJK character or two adjacent ones). It is what the index says about
  a message, so its entries can always be taken out again - also those of a
  message another program changed or deleted.
* messages_cjk: an FTS5 table over it (external content, ascii tokenizer,
  no positions, no column sizes). FTS5's own 'integrity-check' with rank 1
  proves the index holds exactly what messages_cjk_grams says.
* messages_cjk_changed(id): the ids of messages inserted, deleted or changed
  (id, content, tool_name or tool_calls) since they were indexed, filled by
  three plain-SQL triggers that every writer of the file runs - Hermes'
  own process, sqlite3 scripts, this package. hermes_models reads the
  changed rows themselves when it searches and indexes them (taking their
  old grams out first) when it writes; a row listed there is never trusted
  to the index.

Everything in the file is plain SQL or a built-in FTS5 table: a Hermes
process on SQLite 3.40 writes the file as it is. The old index cannot be
carried over (a contentless table does not say what it holds), so every
message is listed as changed: searches read them the slow way, and exactly,
until `hermes-models optimize` (or later writes, a few at a time) indexes
them. On an SQLite build without FTS5 the step changes nothing; the next
open by a build with FTS5 applies it again.
"""

import re

from yoyo import step

INDEX = (
    "CREATE VIRTUAL TABLE messages_cjk USING fts5(grams, content='messages_cjk_grams',"
    " content_rowid='id', detail=none, columnsize=0, tokenize='ascii')"
)
GRAMS = "CREATE TABLE messages_cjk_grams (id INTEGER PRIMARY KEY, grams TEXT NOT NULL)"
CHANGED = "CREATE TABLE messages_cjk_changed (id INTEGER PRIMARY KEY)"

TRIGGERS = {
    "messages_cjk_changed_insert": """CREATE TRIGGER messages_cjk_changed_insert
AFTER INSERT ON messages
BEGIN
    INSERT OR IGNORE INTO messages_cjk_changed (id) VALUES (new.id);
END""",
    "messages_cjk_changed_update": """CREATE TRIGGER messages_cjk_changed_update
AFTER UPDATE OF id, content, tool_name, tool_calls ON messages
WHEN old.id IS NOT new.id OR old.content IS NOT new.content
  OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls
BEGIN
    INSERT OR IGNORE INTO messages_cjk_changed (id) VALUES (old.id);
    INSERT OR IGNORE INTO messages_cjk_changed (id) VALUES (new.id);
END""",
    "messages_cjk_changed_delete": """CREATE TRIGGER messages_cjk_changed_delete
AFTER DELETE ON messages
BEGIN
    INSERT OR IGNORE INTO messages_cjk_changed (id) VALUES (old.id);
END""",
}

#: Migration 0007's layout, restored by the rollback.
OLD_INDEX = (
    "CREATE VIRTUAL TABLE messages_cjk USING fts5(grams, content='', detail=none, tokenize='ascii')"
)
OLD_TRIGGERS = (
    """CREATE TRIGGER messages_cjk_gone_delete BEFORE DELETE ON messages
WHEN old.id <= (SELECT high_water FROM messages_cjk_mark)
BEGIN
    INSERT OR IGNORE INTO messages_cjk_gone(id) VALUES (old.id);
END""",
    """CREATE TRIGGER messages_cjk_gone_update
BEFORE UPDATE OF id, content, tool_name, tool_calls ON messages
WHEN old.id <= (SELECT high_water FROM messages_cjk_mark)
  OR new.id <= (SELECT high_water FROM messages_cjk_mark)
BEGIN
    INSERT OR IGNORE INTO messages_cjk_gone(id) VALUES (old.id);
    INSERT OR IGNORE INTO messages_cjk_gone(id) VALUES (new.id);
END""",
)


def _fts5(cursor):
    try:
        cursor.execute("CREATE VIRTUAL TABLE temp.hermes_cjk_probe USING fts5(x)")
        cursor.execute("DROP TABLE temp.hermes_cjk_probe")
    except Exception:
        return False
    return True


def _squash(sql):
    return re.sub(r"\s+", "", (sql or "").lower())


def _objects(cursor, kind):
    cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = ?", (kind,))
    return dict(cursor.fetchall())


def apply_step(conn):
    cursor = conn.cursor()
    if not _fts5(cursor):
        return
    # Migration 0007's mark, list and triggers go.
    cursor.execute("DROP TRIGGER IF EXISTS messages_cjk_gone_delete")
    cursor.execute("DROP TRIGGER IF EXISTS messages_cjk_gone_update")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_gone")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_mark")
    tables = _objects(cursor, "table")
    if "messages_cjk" in tables and _squash(tables["messages_cjk"]) != _squash(INDEX):
        cursor.execute("DROP TABLE messages_cjk")
        tables.pop("messages_cjk")
    if "messages_cjk_grams" in tables and _squash(tables["messages_cjk_grams"]) != _squash(GRAMS):
        cursor.execute("DROP TABLE messages_cjk_grams")
        tables.pop("messages_cjk_grams")
    fresh = "messages_cjk" not in tables or "messages_cjk_grams" not in tables
    if "messages_cjk_grams" not in tables:
        cursor.execute(GRAMS)
    if "messages_cjk" not in tables:
        cursor.execute(INDEX)
    if "messages_cjk_changed" not in tables:
        cursor.execute(CHANGED)
    triggers = _objects(cursor, "trigger")
    lost = [name for name, sql in TRIGGERS.items() if _squash(triggers.get(name)) != _squash(sql)]
    for name in lost:
        cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        cursor.execute(TRIGGERS[name])
    if fresh:
        # The index and the list of what it holds are made together, empty.
        cursor.execute("INSERT INTO messages_cjk(messages_cjk) VALUES ('delete-all')")
        cursor.execute("DELETE FROM messages_cjk_grams")
    if fresh or lost:
        # Whatever changed while the triggers were missing is unknown: every message,
        # and every id the index still holds, is looked at again.
        cursor.execute("INSERT OR IGNORE INTO messages_cjk_changed (id) SELECT id FROM messages")
        cursor.execute(
            "INSERT OR IGNORE INTO messages_cjk_changed (id) SELECT id FROM messages_cjk_grams"
        )


def rollback_step(conn):
    cursor = conn.cursor()
    for name in TRIGGERS:
        cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_changed")
    if not _fts5(cursor):
        return
    cursor.execute("DROP TABLE IF EXISTS messages_cjk")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_grams")
    # Migration 0007's layout, empty: its code indexes every message again.
    cursor.execute(OLD_INDEX)
    cursor.execute(
        "CREATE TABLE messages_cjk_mark ("
        " id INTEGER PRIMARY KEY CHECK (id = 1),"
        " high_water INTEGER NOT NULL)"
    )
    cursor.execute("INSERT INTO messages_cjk_mark (id, high_water) VALUES (1, 0)")
    cursor.execute("CREATE TABLE messages_cjk_gone (id INTEGER PRIMARY KEY)")
    for sql in OLD_TRIGGERS:
        cursor.execute(sql)


steps = [step(apply_step, rollback_step)]
