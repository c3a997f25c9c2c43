-- Ranked word search by BM25, as FTS5 ranks it on SQLite (issue #37 point 3):
-- the same top hits on both backends. FTS5's bm25() scores a message, for each
-- phrase of the query,
--     idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))
-- with k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)) (1e-6 when that
-- is not positive), N the messages, n those holding the phrase, f the times the
-- message holds it, dl its tokens and avgdl the tokens of all messages over N;
-- the rank is minus the sum (lower is better). Here the same figures come from
-- the `simple` tsvector (search_tsv, 0003): a phrase's occurrences are its
-- first word's positions followed by the others', a prefix's the positions of
-- every word it starts, dl the positions of every lexeme (PostgreSQL keeps at
-- most 256 positions of one lexeme and none above 16,383: beyond those a
-- message counts fewer). dl is kept in a generated column, search_len (read
-- from the tsvector for each hit it cost 4-5 us, a second of `the` on a
-- million messages); adding it rewrites the table once. n is counted per query
-- through the GIN index; N and the tokens of all messages are kept up to date
-- in hermes_search_stats by statement triggers (a count over every message
-- would cost each search a scan of the table). Each writing transaction adds
-- its own row (slot 8 + its transaction id), so that no writer waits for or
-- conflicts with another's row: a shared row updated by a gateway's appends made
-- a long delete beside it fail its serialization check on every retry. One
-- transaction in 512 (by its id) folds the rows of committed transactions into
-- the row of its backend (slot pid % 8, 0-7); readers sum every row.

CREATE OR REPLACE FUNCTION hermes_token_count(tsv tsvector)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT coalesce(sum(cardinality(positions)), 0)::bigint FROM unnest(tsv) $$;

ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_len bigint
    GENERATED ALWAYS AS (
        hermes_token_count(to_tsvector(
            'simple'::regconfig,
            hermes_words(left(hermes_search_text(content, tool_name, tool_calls), 100000))
        ))
    ) STORED;

CREATE TABLE IF NOT EXISTS hermes_search_stats (
    slot integer PRIMARY KEY,
    docs bigint NOT NULL DEFAULT 0,
    tokens bigint NOT NULL DEFAULT 0
);

INSERT INTO hermes_search_stats (slot, docs, tokens)
SELECT 0, count(*), coalesce(sum(search_len), 0) FROM messages
ON CONFLICT (slot) DO NOTHING;

CREATE OR REPLACE FUNCTION hermes_search_stats_add(docs bigint, tokens bigint)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO hermes_search_stats AS s (slot, docs, tokens)
    SELECT 8 + (txid_current() % 2000000000)::integer, $1, $2 WHERE $1 <> 0 OR $2 <> 0
    ON CONFLICT (slot) DO UPDATE SET docs = s.docs + excluded.docs, tokens = s.tokens + excluded.tokens;
    WITH gone AS (
        DELETE FROM hermes_search_stats AS g
        WHERE g.slot >= 8 AND txid_current() % 512 = 0
        RETURNING g.docs AS d, g.tokens AS t
    )
    INSERT INTO hermes_search_stats AS s (slot, docs, tokens)
    SELECT pg_backend_pid() % 8, sum(d), sum(t) FROM gone HAVING count(*) > 0
    ON CONFLICT (slot) DO UPDATE SET docs = s.docs + excluded.docs, tokens = s.tokens + excluded.tokens
$$;

CREATE OR REPLACE FUNCTION hermes_search_stats_inserted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM hermes_search_stats_add(count(*)::bigint, coalesce(sum(search_len), 0)::bigint)
    FROM hermes_new_rows;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hermes_search_stats_deleted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM hermes_search_stats_add(-count(*)::bigint, -coalesce(sum(search_len), 0)::bigint)
    FROM hermes_old_rows;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hermes_search_stats_updated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM hermes_search_stats_add(
        0,
        (SELECT coalesce(sum(search_len), 0)::bigint FROM hermes_new_rows)
        - (SELECT coalesce(sum(search_len), 0)::bigint FROM hermes_old_rows)
    );
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hermes_search_stats_truncated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE hermes_search_stats SET docs = 0, tokens = 0;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS hermes_search_stats_insert ON messages;
CREATE TRIGGER hermes_search_stats_insert AFTER INSERT ON messages
    REFERENCING NEW TABLE AS hermes_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_stats_inserted();
DROP TRIGGER IF EXISTS hermes_search_stats_delete ON messages;
CREATE TRIGGER hermes_search_stats_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS hermes_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_stats_deleted();
DROP TRIGGER IF EXISTS hermes_search_stats_update ON messages;
CREATE TRIGGER hermes_search_stats_update AFTER UPDATE ON messages
    REFERENCING OLD TABLE AS hermes_old_rows NEW TABLE AS hermes_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_stats_updated();
DROP TRIGGER IF EXISTS hermes_search_stats_truncate ON messages;
CREATE TRIGGER hermes_search_stats_truncate AFTER TRUNCATE ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_stats_truncated();

-- What a query's ranking needs once per statement: each phrase's lexemes (in
-- order, space-separated, as phraseto_tsquery reads the text), whether its last
-- word is a prefix, its idf, and avgdl.
DO $$
BEGIN
    CREATE TYPE hermes_bm25_terms AS (
        phrases text[], prefixes boolean[], idf float8[], avgdl float8, expansions text[]
    );
EXCEPTION
    WHEN duplicate_object THEN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hermes_bm25_terms(texts text[], prefixes boolean[])
RETURNS hermes_bm25_terms
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH stats AS (
        SELECT greatest(coalesce(sum(docs), 0), 0)::float8 AS n,
               greatest(coalesce(sum(tokens), 0), 0)::float8 AS tokens
        FROM hermes_search_stats
    ),
    terms AS (
        SELECT q.i, q.prefix,
               (SELECT string_agg(u.lexeme, ' ' ORDER BY p)
                FROM unnest(to_tsvector('simple', q.t)) AS u, unnest(u.positions) AS p) AS words,
               CASE WHEN q.prefix THEN (phraseto_tsquery('simple', q.t)::text || ':*')::tsquery
                    ELSE phraseto_tsquery('simple', q.t) END AS tsq
        FROM unnest(texts, prefixes) WITH ORDINALITY AS q(t, prefix, i)
    ),
    counted AS (
        SELECT terms.*,
               (SELECT count(*) FROM messages m WHERE m.search_tsv @@ terms.tsq)::float8 AS hits,
               -- A prefix of one word: the lexemes it starts among the messages it finds.
               CASE WHEN terms.prefix AND strpos(coalesce(terms.words, ''), ' ') = 0 THEN (
                   SELECT string_agg(s.word, ' ' ORDER BY s.word)
                   FROM ts_stat(format(
                       'SELECT search_tsv FROM messages WHERE search_tsv @@ %L::tsquery', terms.tsq
                   )) AS s
                   WHERE starts_with(s.word, terms.words)
               ) END AS expansion
        FROM terms
    )
    SELECT ROW(
        array_agg(coalesce(words, '') ORDER BY i),
        array_agg(prefix ORDER BY i),
        array_agg(
            CASE WHEN ln((stats.n - hits + 0.5) / (hits + 0.5)) <= 0 THEN 1e-6
                 ELSE ln((stats.n - hits + 0.5) / (hits + 0.5)) END
            ORDER BY i
        ),
        CASE WHEN stats.n > 0 THEN stats.tokens / stats.n ELSE 1.0 END,
        array_agg(coalesce(expansion, '') ORDER BY i)
    )::hermes_bm25_terms
    FROM counted, stats
    GROUP BY stats.n, stats.tokens
$$;

-- How many times a message (its tsvector) holds a phrase of lexemes, the last a
-- prefix when `prefix`.
CREATE OR REPLACE FUNCTION hermes_phrase_hits(tsv tsvector, words text[], prefix boolean)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    WITH lexemes AS (SELECT u.lexeme, u.positions FROM unnest(tsv) AS u)
    SELECT count(*)
    FROM lexemes AS first, unnest(first.positions) AS p
    WHERE CASE WHEN prefix AND cardinality(words) = 1 THEN starts_with(first.lexeme, words[1])
               ELSE first.lexeme = words[1] END
      AND NOT EXISTS (
          SELECT 1 FROM generate_series(2, cardinality(words)) AS k
          WHERE NOT EXISTS (
              SELECT 1 FROM lexemes AS later
              WHERE CASE WHEN prefix AND k = cardinality(words)
                         THEN starts_with(later.lexeme, words[k])
                         ELSE later.lexeme = words[k] END
                AND p + k - 1 = ANY(later.positions)
          )
      )
$$;

-- How many times a message holds any of `words` (lexemes): their positions,
-- counted in the text of the tsvector cut down to them. C functions only, not
-- STRICT, over a column: a search inlines it (a lexeme holds no
-- ASCII punctuation, hermes_words removes it, so ':' and ',' count positions).
CREATE OR REPLACE FUNCTION hermes_lexeme_hits(tsv tsvector, words text[])
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (length(ts_filter(setweight(tsv, 'A', words), '{a}')::text)
        - length(translate(ts_filter(setweight(tsv, 'A', words), '{a}')::text, ':,', '')))::bigint
$$;

-- One phrase's part of FTS5's bm25(): f occurrences in a message of dl tokens,
-- idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl)) written with f once
-- (so that the server inlines it), 0 when f is 0.
CREATE OR REPLACE FUNCTION hermes_bm25_term(f float8, dl float8, idf float8, avgdl float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT coalesce(idf * (1.2 + 1.0) / (1.0 + 1.2 * (1.0 - 0.75 + 0.75 * dl / avgdl) / nullif(f, 0.0)), 0.0)
$$;

-- The rank of a message (lower is better): FTS5's bm25() over the phrases of `q`
-- for a message whose tsvector is `tsv` and length `dl` (search_len). A search
-- writes the same sum out term by term, which the server inlines; this form is
-- for plain SQL.
CREATE OR REPLACE FUNCTION hermes_bm25(tsv tsvector, dl bigint, q hermes_bm25_terms)
RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT -coalesce(sum(hermes_bm25_term(
        hermes_phrase_hits(tsv, string_to_array(q.phrases[i], ' '), q.prefixes[i])::float8,
        dl::float8, q.idf[i], q.avgdl
    )), 0.0)::float8
    FROM generate_subscripts(q.phrases, 1) AS i
$$;
