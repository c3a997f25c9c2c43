-- PostgreSQL: nothing to do. On SQLite this step replaces the FTS5 triggers;
-- here the server keeps the generated tsvector and every index up to date.
DO $$ BEGIN NULL; END $$;
