DROP INDEX IF EXISTS idx_telegram_dm_topic_bindings_user;
DROP INDEX IF EXISTS idx_telegram_dm_topic_bindings_session;
DROP TABLE IF EXISTS telegram_dm_topic_bindings;
DROP TABLE IF EXISTS telegram_dm_topic_mode;
DELETE FROM state_meta WHERE key = 'telegram_dm_topic_schema_version';
