-- PostgreSQL: nothing to do. On SQLite this step tags the subagent runs of a
-- file an older Hermes wrote; a PostgreSQL store holds only sessions this
-- package wrote (or copied, tags included).
DO $$ BEGIN NULL; END $$;
