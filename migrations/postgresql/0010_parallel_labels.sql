-- hermes_json_text() and hermes_json_array_length() (0002) catch errors: their
-- EXCEPTION block starts a subtransaction, which no process may start while a
-- parallel plan runs, the leader included. They were declared PARALLEL SAFE,
-- so whenever the planner chose a parallel plan (a large sessions table, or
-- parallel_setup_cost lowered) a listing, a delete or an import failed with
-- "cannot start subtransactions during a parallel operation". PARALLEL
-- RESTRICTED is not enough (the leader runs in parallel mode too), and the
-- catch cannot go: pg_input_is_valid() (PostgreSQL 16+) still raises on
-- JSON nested deeper than the stack allows, which a damaged row must never
-- make of a listing. So they are labelled what they are: PARALLEL UNSAFE.
--
-- The other functions of these migrations (hermes_words, hermes_search_text,
-- hermes_cjk_grams) catch nothing and write nothing: PARALLEL SAFE is true.

ALTER FUNCTION hermes_json_text(text, text) PARALLEL UNSAFE;
ALTER FUNCTION hermes_json_array_length(text) PARALLEL UNSAFE;
