-- Search on PostgreSQL: what FTS5's two tables do on SQLite.
--
-- The searched text of a message is Hermes' own: content, tool name and tool
-- calls, joined by spaces (hermes_search_text). Words go through a tsvector
-- of the `simple` configuration (lower case, no stemming, no stop words:
-- FTS5 unicode61's behaviour), generated from the first 100,000 characters -
-- PostgreSQL refuses a tsvector over 1 MB, and a 1.5 MB tool output must
-- still insert. Substrings of three or more characters (CJK above all) go
-- through pg_trgm's GIN index on the whole text, which the bound does not cut.
-- pg_trgm is a trusted extension: a database owner may create it.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Words are split where FTS5's unicode61 splits them: at every punctuation
-- character, not only where PostgreSQL's parser would (which keeps
-- `asyncio.to_thread`, `my-app.config.ts` or `1.5` whole). Searches split
-- the words of a query the same way.
CREATE OR REPLACE FUNCTION hermes_words(t text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT regexp_replace(t, '[!-/:-@[-`{-~]+', ' ', 'g') $$;

CREATE OR REPLACE FUNCTION hermes_search_text(content text, tool_name text, tool_calls text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, '') $$;

ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_tsv tsvector
    GENERATED ALWAYS AS (
        to_tsvector(
            'simple'::regconfig,
            hermes_words(left(hermes_search_text(content, tool_name, tool_calls), 100000))
        )
    ) STORED;

CREATE INDEX IF NOT EXISTS idx_messages_search_tsv ON messages USING gin (search_tsv);
CREATE INDEX IF NOT EXISTS idx_messages_search_trgm
    ON messages USING gin (hermes_search_text(content, tool_name, tool_calls) gin_trgm_ops);
