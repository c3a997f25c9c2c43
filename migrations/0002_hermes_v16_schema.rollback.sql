-- Removes the session store. One statement per statement of the migration,
-- in reverse order, so yoyo pairs each with the step it undoes.
DELETE FROM schema_version WHERE version = 16;
DELETE FROM schema_version WHERE 0; -- the rows removed before v16 was written cannot be restored
DROP INDEX IF EXISTS idx_compression_locks_expires;
DROP INDEX IF EXISTS idx_messages_platform_msg_id;
DROP INDEX IF EXISTS idx_messages_session_active;
DROP INDEX IF EXISTS idx_messages_session;
DROP INDEX IF EXISTS idx_sessions_title_unique;
DROP INDEX IF EXISTS idx_sessions_started;
DROP INDEX IF EXISTS idx_sessions_parent;
DROP INDEX IF EXISTS idx_sessions_source_id;
DROP INDEX IF EXISTS idx_sessions_source;
DROP TABLE IF EXISTS compression_locks;
DROP TABLE IF EXISTS state_meta;
DROP TABLE IF EXISTS messages;
DROP TABLE IF EXISTS sessions;
DROP TABLE IF EXISTS schema_version;
