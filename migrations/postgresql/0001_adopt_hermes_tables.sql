-- PostgreSQL: nothing to adopt. On SQLite this step upgrades a file an older
-- Hermes wrote; a PostgreSQL store is always made by these migrations (or
-- filled by `hermes-models copy`), so the step only keeps the ids of both
-- dialects the same.
DO $$ BEGIN NULL; END $$;
