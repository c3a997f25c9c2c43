-- Telegram DM topic mode on PostgreSQL: which private chats opted in, and which
-- topic thread of a chat each session is bound to. The same tables, columns,
-- defaults and indexes as migrations/telegram_topics on SQLite, with this
-- folder's types (text, bigint flags, double precision times).
--
-- An opt-in step: yoyo reads one folder, never its subfolders, so neither
-- `yoyo apply migrations/postgresql` nor opening a store creates these
-- tables; SessionDB applies this folder when topic mode is first used
-- (apply_telegram_topic_migration). A bindings table made without
-- ON DELETE CASCADE on session_id gets that foreign key replaced, rows kept,
-- so deleting a session also drops its binding.

CREATE TABLE IF NOT EXISTS telegram_dm_topic_mode (
    chat_id text PRIMARY KEY,
    user_id text NOT NULL,
    enabled bigint NOT NULL DEFAULT 1,
    activated_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    has_topics_enabled bigint,
    allows_users_to_create_topics bigint,
    capability_checked_at double precision,
    intro_message_id text,
    pinned_message_id text
);

CREATE TABLE IF NOT EXISTS telegram_dm_topic_bindings (
    chat_id text NOT NULL,
    thread_id text NOT NULL,
    user_id text NOT NULL,
    session_key text NOT NULL,
    session_id text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode text NOT NULL DEFAULT 'auto',
    linked_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
);

DO $$
DECLARE
    old_key record;
BEGIN
    FOR old_key IN
        SELECT conname FROM pg_constraint
        WHERE conrelid = 'telegram_dm_topic_bindings'::regclass
          AND contype = 'f'
          AND confrelid = 'sessions'::regclass
          AND confdeltype <> 'c'
    LOOP
        EXECUTE format('ALTER TABLE telegram_dm_topic_bindings DROP CONSTRAINT %I', old_key.conname);
    END LOOP;
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'telegram_dm_topic_bindings'::regclass
          AND contype = 'f'
          AND confrelid = 'sessions'::regclass
    ) THEN
        ALTER TABLE telegram_dm_topic_bindings
            ADD CONSTRAINT telegram_dm_topic_bindings_session_id_fkey
            FOREIGN KEY (session_id) REFERENCES sessions(id) ON DELETE CASCADE;
    END IF;
END $$;

CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session
    ON telegram_dm_topic_bindings(session_id);
CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user
    ON telegram_dm_topic_bindings(user_id, chat_id);

INSERT INTO state_meta (key, value) VALUES ('telegram_dm_topic_schema_version', '2')
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;
