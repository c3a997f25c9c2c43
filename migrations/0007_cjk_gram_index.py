"""
The gram index: one- and two-character CJK terms found from an index.

A contentless FTS5 table without positions holds, for each message, the
tokens of its distinct CJK characters and adjacent CJK pairs (computed by
hermes_models, never by SQL in the file); messages_cjk_mark holds the id up
to which every message is indexed (0 here: existing messages are indexed by
`hermes-models optimize`, or a few hundred at a time by later writes), and
messages_cjk_gone lists indexed messages that a connection without
hermes_models' own triggers deleted or changed.

The two triggers created here use plain SQL only, so a Hermes process
writing the file runs them as it is. On an SQLite build without FTS5 the
step creates nothing, and searches keep reading every message.
"""

from yoyo import step

TRIGGERS = (
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


def apply_step(conn):
    cursor = conn.cursor()
    if not _fts5(cursor):
        return
    cursor.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_cjk"
        " USING fts5(grams, content='', detail=none, tokenize='ascii')"
    )
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS messages_cjk_mark ("
        " id INTEGER PRIMARY KEY CHECK (id = 1),"
        " high_water INTEGER NOT NULL)"
    )
    cursor.execute("INSERT OR IGNORE INTO messages_cjk_mark (id, high_water) VALUES (1, 0)")
    cursor.execute("CREATE TABLE IF NOT EXISTS messages_cjk_gone (id INTEGER PRIMARY KEY)")
    for sql in TRIGGERS:
        cursor.execute(sql.replace("CREATE TRIGGER", "CREATE TRIGGER IF NOT EXISTS", 1))


def rollback_step(conn):
    cursor = conn.cursor()
    cursor.execute("DROP TRIGGER IF EXISTS messages_cjk_gone_delete")
    cursor.execute("DROP TRIGGER IF EXISTS messages_cjk_gone_update")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_gone")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk_mark")
    cursor.execute("DROP TABLE IF EXISTS messages_cjk")


steps = [step(apply_step, rollback_step)]
