"""
Telegram DM topic mode: which private chats opted in, and which topic
thread of a chat each session is bound to.

An opt-in step: this folder is not part of the default migrations (yoyo
reads one folder, never its subfolders), and SessionDB applies it only when
topic mode is first used (apply_telegram_topic_migration). A bindings table
an older Hermes made without ON DELETE CASCADE on session_id is rebuilt
with it, rows kept, so deleting a session also drops its binding.
"""

from yoyo import step

MODE_TABLE = """
CREATE TABLE IF NOT EXISTS telegram_dm_topic_mode (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)
"""

BINDINGS_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)
"""

INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session "
    "ON telegram_dm_topic_bindings(session_id)",
    "CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user "
    "ON telegram_dm_topic_bindings(user_id, chat_id)",
)

COLUMNS = (
    "chat_id, thread_id, user_id, session_key, session_id, managed_mode, linked_at, updated_at"
)

VERSION_KEY = "telegram_dm_topic_schema_version"


def _cascades(cursor):
    cursor.execute("PRAGMA foreign_key_list('telegram_dm_topic_bindings')")
    return all(row[2] != "sessions" or (row[6] or "") == "CASCADE" for row in cursor.fetchall())


def apply_step(conn):
    cursor = conn.cursor()
    cursor.execute(MODE_TABLE)
    cursor.execute(BINDINGS_TABLE.format(name="telegram_dm_topic_bindings"))
    if not _cascades(cursor):
        cursor.execute(BINDINGS_TABLE.format(name="telegram_dm_topic_bindings_new"))
        cursor.execute(
            f"INSERT INTO telegram_dm_topic_bindings_new ({COLUMNS}) "
            f"SELECT {COLUMNS} FROM telegram_dm_topic_bindings"
        )
        cursor.execute("DROP TABLE telegram_dm_topic_bindings")
        cursor.execute(
            "ALTER TABLE telegram_dm_topic_bindings_new RENAME TO telegram_dm_topic_bindings"
        )
    for sql in INDEXES:
        cursor.execute(sql)
    cursor.execute(
        "INSERT INTO state_meta (key, value) VALUES (?, '2') "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (VERSION_KEY,),
    )


def rollback_step(conn):
    cursor = conn.cursor()
    cursor.execute("DROP INDEX IF EXISTS idx_telegram_dm_topic_bindings_user")
    cursor.execute("DROP INDEX IF EXISTS idx_telegram_dm_topic_bindings_session")
    cursor.execute("DROP TABLE IF EXISTS telegram_dm_topic_bindings")
    cursor.execute("DROP TABLE IF EXISTS telegram_dm_topic_mode")
    cursor.execute("DELETE FROM state_meta WHERE key = ?", (VERSION_KEY,))


steps = [step(apply_step, rollback_step)]
