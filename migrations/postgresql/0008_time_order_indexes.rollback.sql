DROP INDEX IF EXISTS idx_sessions_started_id;
DROP INDEX IF EXISTS idx_messages_time;
