-- Search on PostgreSQL: what FTS5's two tables do on SQLite.
--
-- The searched text of a message is Hermes' own: content, tool name and tool
-- calls, joined by spaces (hermes_search_text). Words go through a tsvector
-- of the `simple` configuration (lower case, no stemming, no stop words:
-- FTS5 unicode61's behaviour), generated from the first 100,000 characters -
-- PostgreSQL refuses a tsvector over 1 MB, and a 1.5 MB tool output must
-- still insert. Substrings of three or more characters (CJK above all) go
-- through pg_trgm's GIN index on the whole text, which the bound does not cut.
-- pg_trgm is a trusted extension: a role with CREATE on the database may create
-- it. Where it cannot be created (not installed on the server, not allowed by a
-- managed service, or a role without that privilege) the store is made without
-- the trigram index: the same searches find the same messages by scanning them
-- (ILIKE needs no extension), and the store says so when opened. A store made
-- with pg_trgm keeps it; `hermes-models doctor --fix` adds it later.

DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION
    WHEN insufficient_privilege OR undefined_file OR undefined_object
        OR feature_not_supported OR raise_exception THEN
        RAISE NOTICE 'pg_trgm cannot be created (%): substring searches will scan messages', SQLERRM;
END
$$;

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
-- The operator class named in the schema pg_trgm lives in, wherever that is (a
-- managed server's `extensions` schema, another profile's schema); a schema this
-- role may not use leaves the index out, as a missing extension does.
DO $$
DECLARE
    home text := (SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm');
BEGIN
    IF home IS NOT NULL THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS idx_messages_search_trgm ON messages'
            ' USING gin (hermes_search_text(content, tool_name, tool_calls) %s.gin_trgm_ops)',
            home
        );
    END IF;
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE NOTICE 'pg_trgm cannot be used (%): substring searches will scan messages', SQLERRM;
END
$$;
