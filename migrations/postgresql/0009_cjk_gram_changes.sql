-- PostgreSQL: nothing to do. On SQLite this step replaces the gram index's
-- high-water mark with a table of changed ids and keeps the grams each message
-- holds; PostgreSQL's gram index is a GIN index the server keeps in step
-- itself, whoever writes (migrations/postgresql/0007_cjk_gram_index.sql).
DO $$ BEGIN NULL; END $$;
