DROP TABLE IF EXISTS compression_locks;
DROP TABLE IF EXISTS state_meta;
DROP TABLE IF EXISTS messages;
DROP TABLE IF EXISTS sessions;
DROP TABLE IF EXISTS schema_version;
DROP FUNCTION IF EXISTS hermes_json_text(text, text);
DROP FUNCTION IF EXISTS hermes_json_array_length(text);
