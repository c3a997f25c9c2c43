DROP INDEX IF EXISTS idx_messages_search_trgm;
DROP INDEX IF EXISTS idx_messages_search_tsv;
ALTER TABLE messages DROP COLUMN IF EXISTS search_tsv;
DROP FUNCTION IF EXISTS hermes_search_text(text, text, text);
DROP FUNCTION IF EXISTS hermes_words(text);
