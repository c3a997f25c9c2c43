DROP TABLE IF EXISTS compression_locks;
DROP TABLE IF EXISTS state_meta;
DROP TABLE IF EXISTS messages;
DROP TABLE IF EXISTS sessions;
DROP TABLE IF EXISTS schema_version;
