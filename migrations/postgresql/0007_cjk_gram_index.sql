-- One- and two-character CJK terms from an index. pg_trgm cannot serve a
-- pattern shorter than three characters from its index (a 2-character CJK
-- search read every row: 550 ms at 200k messages), so, as the gram index
-- does on SQLite, each message's distinct CJK characters and adjacent CJK
-- pairs are indexed: hermes_cjk_grams() below, a GIN index on its array.
-- A search asks `hermes_cjk_grams(...) @> ARRAY['迁移']` and then checks the
-- substring itself. The ranges are hermes_models.grams.CJK_RANGES: Han
-- (unified, extension A, extension B), CJK symbols and punctuation,
-- Hiragana, Katakana, Hangul syllables.

CREATE OR REPLACE FUNCTION hermes_cjk_grams(t text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT coalesce(array_agg(DISTINCT gram), '{}')
    FROM (
        SELECT substr(run, i, n) AS gram
        FROM regexp_split_to_table(
                 t, '[^\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\u3000-\u303f\u3040-\u309f\u30a0-\u30ff\uac00-\ud7af]+'
             ) AS run,
             generate_series(1, 2) AS n,
             generate_series(1, length(run) - n + 1) AS i
        WHERE run <> ''
    ) AS grams
$$;

CREATE INDEX IF NOT EXISTS idx_messages_cjk_grams
    ON messages USING gin (hermes_cjk_grams(hermes_search_text(content, tool_name, tool_calls)));
