DROP INDEX IF EXISTS idx_messages_time;
