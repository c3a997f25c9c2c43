DROP INDEX IF EXISTS idx_messages_cjk_grams;
DROP FUNCTION IF EXISTS hermes_cjk_grams(text);
