-- PostgreSQL: nothing to do (see 0004): the SQLite step corrects tags an
-- earlier version of 0004 set on Hermes files.
DO $$ BEGIN NULL; END $$;
