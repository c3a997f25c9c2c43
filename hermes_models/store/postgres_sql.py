"""Every SQL statement the package writes by hand for PostgreSQL, named.

The sibling of :mod:`hermes_models.store.sqlite_sql` for the second dialect: what
the PostgreSQL handle and its migrations runner send besides the SQL peewee
builds. Parameters are psycopg's ``%s``; a statement built from a name is a
small function, and the name is checked before it gets here
(:func:`hermes_models.store.postgres.parse_url` allows lower-case identifiers only).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The schema pg_trgm was created in (no row: not created yet).
TRGM_SCHEMA = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"

#: Columns of the probed tables in the current schema, in table order.
COLUMNS = (
    "SELECT table_name, column_name FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = ANY(%s)"
    " ORDER BY table_name, ordinal_position"
)

#: Every table of the current schema.
TABLES = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"

#: The server's release, as it names it (``15.20 (Debian 15.20-0+deb12u1)``).
SERVER_VERSION = "SHOW server_version"

#: The Hermes schema version the store holds.
SCHEMA_VERSION = "SELECT max(version) FROM schema_version"

#: How every write transaction begins (see PostgresDatabase.write): the isolation
#: level travels in the BEGIN, one round trip.
BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE"
#: How a write that only adds rows begins (PostgresDatabase.write_new_rows).
BEGIN_REPEATABLE_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ"

#: Transactions of a read-only handle refuse writes.
READ_ONLY_SESSION = "SET default_transaction_read_only = on"

#: A column of ``messages`` that is PostgreSQL's word index, not part of the store.
SEARCH_VECTOR_COLUMN = "search_tsv"
#: Columns of ``messages`` the server's search keeps, not part of the store: the word
#: index and each message's length in tokens (BM25, migration 0011).
SEARCH_COLUMNS = frozenset({SEARCH_VECTOR_COLUMN, "search_len"})


def create_schema(name: str) -> str:
    """Create the profile schema ``name`` (a checked identifier) when missing."""
    return f'CREATE SCHEMA IF NOT EXISTS "{name}"'


def set_search_path(path: str) -> str:
    """Make ``path`` (checked identifiers, comma-separated) the connection's search path."""
    return f"SET search_path TO {path}"


# -- search --
#
# A search's SQL depends on its routes, filters and order, never on its words:
# every value the user typed is a parameter. Words become tsquery through
# phraseto_tsquery() calls joined by the tsquery operators (&&, ||, !!) here,
# never through tsquery text built from user input.

#: The text a message is searched in (as the indexes of migration 0003 spell it).
SEARCH_TEXT = "hermes_search_text(m.content, m.tool_name, m.tool_calls)"

#: Lexemes each text (a ``text[]``) makes as a phrase query, in order (0: none).
TSQUERY_NODES = (
    "SELECT numnode(phraseto_tsquery('simple', t))"
    " FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n"
)

#: A search's statements are planned for their own values every time (for this
#: transaction): psycopg prepares a statement run five times on a connection, and after
#: five more runs the server may switch a prepared statement to a generic plan, which
#: cannot see how rare a pattern or a gram is. A generic plan of a two-character CJK
#: search walked every message by time (228 ms at 100,000 messages against 2 ms).
#: Returns the ``plan_cache_mode`` the transaction had.
SET_CUSTOM_PLANS = (
    "SELECT current_setting('plan_cache_mode'),"
    " set_config('plan_cache_mode', 'force_custom_plan', true)"
)
#: Back to the ``plan_cache_mode`` the transaction had.
RESET_PLAN_CACHE_MODE = "SELECT set_config('plan_cache_mode', %s, true)"
#: The current ``statement_timeout`` and ``plan_cache_mode``, and for this transaction a
#: new timeout and custom plans (:data:`SET_CUSTOM_PLANS`) in the same round trip.
SET_STATEMENT_TIMEOUT = (
    "SELECT current_setting('statement_timeout'), current_setting('plan_cache_mode'),"
    " set_config('statement_timeout', %s, true),"
    " set_config('plan_cache_mode', 'force_custom_plan', true)"
)
#: Back to the ``statement_timeout`` and ``plan_cache_mode`` the transaction had.
RESET_STATEMENT_TIMEOUT = (
    "SELECT set_config('statement_timeout', %s, true), set_config('plan_cache_mode', %s, true)"
)


def phrase_query(variants: int, prefix: bool) -> str:
    """One term as a tsquery: ``variants`` phrase queries (one ``%s`` each) joined by
    ``||``; with ``prefix`` the last word of each is a prefix."""
    one = "phraseto_tsquery('simple', %s)"
    if prefix:
        one = f"({one}::text || ':*')::tsquery"
    return "(" + " || ".join([one] * variants) + ")"


def words_match(tsquery: str) -> str:
    """A message whose word index matches ``tsquery``."""
    return f"m.search_tsv @@ {tsquery}"


#: A message holding the substring (one ``%s``: an ``ILIKE`` pattern); the trigram
#: index serves it from three characters on.
SUBSTRING_MATCH = f"{SEARCH_TEXT} ILIKE %s"

#: A message holding every CJK character and pair of a short term (``%s``: ``text[]``),
#: then the substring itself (``%s``: an ``ILIKE`` pattern); the gram index serves it.
GRAMS_MATCH = f"(hermes_cjk_grams({SEARCH_TEXT}) @> %s::text[] AND {SEARCH_TEXT} ILIKE %s)"

#: :data:`SUBSTRING_MATCH` and :data:`GRAMS_MATCH` for a term whose characters have no
#: case (every one CJK): ``LIKE`` finds what ``ILIKE`` finds there, without lower-casing
#: the whole text of every candidate first (``数`` on 100,000 messages: the 3,262
#: candidates of the gram index confirmed in 5 ms by ``LIKE``, in 53 ms by ``ILIKE``).
SUBSTRING_MATCH_CASELESS = f"{SEARCH_TEXT} LIKE %s"
GRAMS_MATCH_CASELESS = f"(hermes_cjk_grams({SEARCH_TEXT}) @> %s::text[] AND {SEARCH_TEXT} LIKE %s)"


def negated(condition: str) -> str:
    """``condition`` negated."""
    return f"NOT ({condition})"


def all_of(conditions: list[str]) -> str:
    """Every condition."""
    return "(" + " AND ".join(conditions) + ")"


def any_of(conditions: list[str]) -> str:
    """Any condition."""
    return "(" + " OR ".join(conditions) + ")"


#: What a query's BM25 needs (``hermes_bm25_terms``, migration 0011; ``%s``: the
#: phrase texts, ``text[]``, and whether each ends in a prefix, ``boolean[]``): each
#: phrase's lexemes (space-separated), its idf (its messages counted through the
#: GIN index), the average length of a message, and for a prefix of one word the
#: lexemes it starts among its messages (space-separated).
BM25_TERMS = (  # in FROM: called once (``(f()).x`` would call it for each field)
    "SELECT t.phrases, t.idf, t.avgdl, t.expansions FROM hermes_bm25_terms(%s, %s) AS t"
)


def word_rank(tsquery: str, phrases: list[bool]) -> str:
    """FTS5's BM25 (lower is better, as on SQLite) for messages matching ``tsquery``,
    0 for the others: minus the sum of each phrase's part (``hermes_bm25_term``), its
    occurrences counted by ``hermes_lexeme_hits`` (one word or a prefix of one,
    ``%s``: the lexemes, ``text[]``) or ``hermes_phrase_hits`` (several words, ``%s``:
    the lexemes, ``text[]``, and ``%s``: whether the last is a prefix), then ``%s``
    its idf and ``%s`` the average length, per item of ``phrases`` (True: counted by
    lexemes). ``tsquery``'s parameters come first. The server inlines every function
    but ``hermes_phrase_hits``."""
    parts = []
    for by_lexemes in phrases:
        hits = (
            "hermes_lexeme_hits(m.search_tsv, %s::text[])"
            if by_lexemes
            else "hermes_phrase_hits(m.search_tsv, %s::text[], %s)"
        )
        parts.append(f"hermes_bm25_term(({hits})::float8, m.search_len::float8, %s, %s)")
    return (
        f"(CASE WHEN m.search_tsv @@ {tsquery} THEN -({' + '.join(parts)})::float8"
        " ELSE 0.0::float8 END)"
    )


#: Rank of hits when nothing ranks them.
NO_RANK = "0.0::float8"
#: Live messages only.
ACTIVE = "m.active = 1"
#: Filters (``%s``: a ``text[]``).
SOURCE_IN = "s.source = ANY(%s)"
SOURCE_NOT_IN = "NOT (s.source = ANY(%s))"
ROLE_IN = "m.role = ANY(%s)"
#: A time window of the messages (``%s``: epoch seconds).
SENT_SINCE = "m.timestamp >= %s"
SENT_UNTIL = "m.timestamp < %s"

#: ORDER BY of a page of hits, inside and outside its ``page`` CTE, by sort.
HIT_ORDERS = {
    "rank": (
        'rank, m."timestamp" DESC, m.id DESC',
        'page.rank, page."timestamp" DESC, page.id DESC',
    ),
    "newest": ('m."timestamp" DESC, m.id DESC', 'page."timestamp" DESC, page.id DESC'),
    "oldest": ('m."timestamp", m.id', 'page."timestamp", page.id'),
}


#: ORDER BY of a page ranked by words, inside (over the fenced ranked rows ``r``) and
#: outside its ``page`` CTE: best first; hits of equal rank in id order (oldest
#: first), as FTS5's ``ORDER BY rank`` hands them over on SQLite; hits no word ranks
#: (rank 0) newest first.
WORD_RANK_ORDERS = (
    'r.rank, (CASE WHEN r.rank < 0 THEN r.id END), r."timestamp" DESC, r.id DESC',
    'page.rank, (CASE WHEN page.rank < 0 THEN page.id END), page."timestamp" DESC, page.id DESC',
)


#: The newest (or oldest) messages a walk passes at most, in time order, read
#: lazily: the walk stops as soon as its page is full.
_RECENT = {
    "newest": '(SELECT * FROM messages ORDER BY "timestamp" DESC, id DESC LIMIT {n})',
    "oldest": '(SELECT * FROM messages ORDER BY "timestamp", id LIMIT {n})',
}


def hits_page(
    where: str, rank: str, sort: str, walk: int | None = None, by_time_index: bool = True
) -> str:
    """One page of hits (``LIMIT %s OFFSET %s`` after the parameters of ``rank`` and
    ``where``): id, session_id, timestamp, role, content, tool_name, tool_calls,
    source, model, session_started, rank. The page is found on narrow rows, then its
    messages are read.

    With ``walk``, only the ``walk`` messages first in the page's time order
    (``sort`` ``"newest"`` or ``"oldest"``) are looked at, walking the time index.
    Without ``by_time_index`` the hits are ordered by an expression no index
    holds, so the planner finds them through the search indexes and sorts them
    (after a walk that found too few: the hits are rare).
    """
    inner, outer = HIT_ORDERS[sort]
    if not by_time_index:
        inner = inner.replace('m."timestamp"', '(m."timestamp" + 0)')
    source = "messages" if walk is None else _RECENT[sort].format(n=int(walk))
    hits = (
        f'SELECT m.id, m."timestamp", {rank} AS rank'
        f" FROM {source} m JOIN sessions s ON s.id = m.session_id WHERE {where}"
    )
    if sort == "rank" and rank != NO_RANK:
        # The rank computed once a hit (OFFSET 0 keeps the subquery whole), then sorted.
        inner, outer = WORD_RANK_ORDERS
        page = f"SELECT * FROM ({hits} OFFSET 0) r ORDER BY {inner} LIMIT %s OFFSET %s"
    else:
        page = f"{hits} ORDER BY {inner} LIMIT %s OFFSET %s"
    return (
        f"WITH page AS ({page})"
        ' SELECT m.id, m.session_id, m."timestamp", m.role, m.content, m.tool_name,'
        " m.tool_calls, s.source, s.model, s.started_at, page.rank"
        " FROM page JOIN messages m ON m.id = page.id JOIN sessions s ON s.id = m.session_id"
        f" ORDER BY {outer}"
    )


def ranked_window_page(where: str, rank: str, window: int) -> str:
    """One page of hits ranked among the ``window`` newest hits (``LIMIT %s OFFSET
    %s`` after the parameters of ``where``, then of ``rank``); the columns of
    :func:`hits_page`. Ranking reads each ranked hit's tsvector: the window
    bounds that work for a word most messages hold."""
    inner, outer = WORD_RANK_ORDERS
    return (
        'WITH recent AS MATERIALIZED (SELECT m.id, m."timestamp", m.search_tsv, m.search_len'
        " FROM messages m JOIN sessions s ON s.id = m.session_id"
        f' WHERE {where} ORDER BY m."timestamp" DESC, m.id DESC LIMIT {int(window)}),'
        f' page AS (SELECT * FROM (SELECT m.id, m."timestamp", {rank} AS rank FROM recent m'
        f" OFFSET 0) r ORDER BY {inner} LIMIT %s OFFSET %s)"
        ' SELECT m.id, m.session_id, m."timestamp", m.role, m.content, m.tool_name,'
        " m.tool_calls, s.source, s.model, s.started_at, page.rank"
        " FROM page JOIN messages m ON m.id = page.id JOIN sessions s ON s.id = m.session_id"
        f" ORDER BY {outer}"
    )


def hits_by_session(where: str, rank: str, window: int | None) -> str:
    """For each session with hits (among the ``window`` newest hits when given; active
    messages matching ``where``; its parameters come first, then those of ``rank``):
    session_id, its best hit's id, timestamp and rank (rank, then newest), its
    number of hits and its latest hit's timestamp. With ``window``, ``rank`` is
    computed for the window's hits only."""
    newest = (
        "" if window is None else f' ORDER BY m."timestamp" DESC, m.id DESC LIMIT {int(window)}'
    )
    return (
        'WITH recent AS MATERIALIZED (SELECT m.id, m.session_id, m."timestamp",'
        f" m.search_tsv, m.search_len FROM messages m WHERE {where} AND {ACTIVE}{newest}),"
        f' hits AS (SELECT m.id, m.session_id, m."timestamp", {rank} AS rank FROM recent m)'
        ' SELECT DISTINCT ON (session_id) session_id, id, "timestamp", rank,'
        " count(*) OVER (PARTITION BY session_id),"
        ' max("timestamp") OVER (PARTITION BY session_id)'
        ' FROM hits ORDER BY session_id, rank, "timestamp" DESC, id DESC'
    )


def _neighbour(compare: str, order: str, active: bool) -> str:
    live = " AND x.active = 1" if active else ""
    return (
        "LEFT JOIN LATERAL (SELECT x.role, x.content FROM messages x"
        " WHERE x.session_id = h.session_id"
        f' AND (x."timestamp", x.id) {compare} (h."timestamp", h.id)'
        f'{live} ORDER BY x."timestamp" {order}, x.id {order} LIMIT 1)'
    )


def with_context(page: str, include_inactive: bool) -> str:
    """``page`` (a statement of hits whose columns include ``id``, ``session_id`` and
    ``timestamp``) in its order, each row followed by its rank in it, then the role and
    content of the message before the hit in its session and of the one after (by time,
    then id; rewound ones left out unless ``include_inactive``): the page and the
    messages around its hits in one round trip."""
    active = not include_inactive
    return (
        "SELECT h.*, p.role, p.content, n.role, n.content FROM"
        " (SELECT q.*, row_number() OVER () AS hermes_n FROM ("
        + page
        + ") q) h "
        + _neighbour("<", "DESC", active)
        + " p ON true "
        + _neighbour(">", "ASC", active)
        + " n ON true ORDER BY h.hermes_n"
    )


def begin_search(timeout_ms: int | None) -> str:
    """A search's own transaction begun with its settings in the same round trip: two
    statements and no parameters (the simple query protocol; the timeout is an integer
    written in): custom plans (:data:`SET_CUSTOM_PLANS`) and, when given, the time budget
    as ``statement_timeout``, both for the transaction only (its end sets them back)."""
    timeout = (
        ""
        if timeout_ms is None
        else f"set_config('statement_timeout', '{int(timeout_ms)}ms', true), "
    )
    return "BEGIN; SELECT " + timeout + "set_config('plan_cache_mode', 'force_custom_plan', true)"


#: ``(id, content, tool_name, tool_calls)`` of messages ``%s`` (ids, ``bigint[]``).
MESSAGE_TEXTS = "SELECT id, content, tool_name, tool_calls FROM messages WHERE id = ANY(%s)"


# -- copy --
# hermes_models.transfer.copy: a whole store moved to another server, schema or file, and checked.

#: The source of a copy reads one snapshot: every table as of one moment.
BEGIN_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
#: The end of a transaction begun by hand.
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
#: Every session's id and parent (the copy orders parents before children).
COPY_SESSION_LINKS = "SELECT id, parent_session_id FROM sessions"
#: How many messages each session has.
COPY_MESSAGE_COUNTS = "SELECT session_id, count(*) FROM messages GROUP BY session_id"
#: Messages whose session does not exist (cannot happen here: the foreign key).
COPY_ORPHAN_MESSAGES = (
    "SELECT count(*) FROM messages m"
    " WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id)"
)
#: Every ``state_meta`` row.
COPY_META_ROWS = "SELECT key, value FROM state_meta"


def table_rows(table: str, columns: Sequence[str]) -> str:
    """``columns`` of every row of ``table`` (names of the package's own tables)."""
    return f"SELECT {', '.join(quote(c) for c in columns)} FROM {quote(table)}"


#: Every compression lock.
COPY_LOCK_ROWS = "SELECT session_id, holder, acquired_at, expires_at FROM compression_locks"
#: Set a session's parent (after a cycle of parent links was copied without it).
COPY_SET_PARENT = "UPDATE sessions SET parent_session_id = %s WHERE id = %s"
#: Which of a bound list of ids are sessions / messages.
COPY_SESSIONS_PRESENT = "SELECT id FROM sessions WHERE id = ANY(%s)"
COPY_MESSAGES_PRESENT = "SELECT id FROM messages WHERE id = ANY(%s)"
#: The highest message id, 0 for none.
HIGHEST_MESSAGE_ID = "SELECT coalesce(max(id), 0) FROM messages"
#: The last id the identity of ``messages.id`` handed out (None: none yet).
MESSAGE_SEQUENCE = (
    "SELECT pg_sequence_last_value(pg_get_serial_sequence('messages', 'id')::regclass)"
)
#: Make the identity of ``messages.id`` hand out ids above a bound one.
SET_MESSAGE_SEQUENCE = "SELECT setval(pg_get_serial_sequence('messages', 'id'), %s)"
#: Hold off other clients' inserts into ``messages`` until this transaction ends (those
#: under way finish first): the identity hands out no id between a read of it and a
#: ``setval`` that must not go below what it handed out.
LOCK_MESSAGE_INSERTS = "LOCK TABLE messages IN SHARE ROW EXCLUSIVE MODE"
#: Take ``%s`` ids from the identity of ``messages.id`` (a copy's renumbered messages).
TAKE_MESSAGE_IDS = (
    "SELECT nextval(pg_get_serial_sequence('messages', 'id')) FROM generate_series(1, %s)"
)
#: Make it hand out 1 next, as if no id had been handed out.
RESET_MESSAGE_SEQUENCE = "SELECT setval(pg_get_serial_sequence('messages', 'id'), 1, false)"
#: One ``state_meta`` value; set one; remove one.
META_VALUE = "SELECT value FROM state_meta WHERE key = %s"
UPSERT_META = (
    "INSERT INTO state_meta (key, value) VALUES (%s, %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
DELETE_META = "DELETE FROM state_meta WHERE key = %s"


def quote(name: str) -> str:
    """``name`` (a column or table name of the models) as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def count_rows(table: str) -> str:
    """How many rows ``table`` (a table of the store) has."""
    return f"SELECT count(*) FROM {quote(table)}"


def copy_sessions_in_list(columns: Sequence[str]) -> str:
    """``columns`` of the sessions whose ids are in a bound list."""
    names = ", ".join(quote(c) for c in columns)
    return f"SELECT {names} FROM sessions WHERE id = ANY(%s)"


def copy_messages_of_sessions(columns: Sequence[str]) -> str:
    """``columns`` of the messages of the sessions in a bound list, by session and id."""
    names = ", ".join(quote(c) for c in columns)
    return (
        f"SELECT {names} FROM messages WHERE session_id = ANY(%s) "
        'ORDER BY session_id COLLATE "C", id'
    )


def copy_into(table: str, columns: Sequence[str]) -> str:
    """``COPY`` rows into ``columns`` of ``table`` from the client."""
    names = ", ".join(quote(c) for c in columns)
    return f"COPY {quote(table)} ({names}) FROM STDIN"


def insert_or_ignore(table: str, columns: Sequence[str]) -> str:
    """Insert one row into ``columns`` of ``table``; a row whose key is taken is skipped."""
    marks = ", ".join(["%s"] * len(columns))
    names = ", ".join(quote(c) for c in columns)
    return f"INSERT INTO {quote(table)} ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING"


# -- import --
# hermes_models.transfer.pg_staging: a bundle or transcripts added while other clients write.

#: The advisory lock of the import running on this store (the current schema: profiles
#: sharing a database import independently). A large import holds it for its connection's
#: session; a small import takes it shared for its transaction.
_IMPORT_LOCK_KEY = "hashtext('hermes_models.import:' || current_schema())"
TRY_IMPORT_LOCK = f"SELECT pg_try_advisory_lock({_IMPORT_LOCK_KEY})"
IMPORT_UNLOCK = f"SELECT pg_advisory_unlock({_IMPORT_LOCK_KEY})"
TRY_IMPORT_LOCK_SHARED = f"SELECT pg_try_advisory_xact_lock_shared({_IMPORT_LOCK_KEY})"
#: The server process of this connection (a staging table lives as long as it does).
BACKEND_PID = "SELECT pg_backend_pid()"
#: The staging table of an import: this connection's own, gone with it.
STAGED_MESSAGES = "pg_temp.hermes_import_messages"
DROP_STAGED_MESSAGES = f"DROP TABLE IF EXISTS {STAGED_MESSAGES}"
#: The column of the staging table that keeps the order rows were staged in.
STAGED_ORDER = "hermes_order"


def create_staged_messages(columns: Sequence[str], *, at_commit_drop: bool) -> str:
    """A staging table of ``messages``' ``columns`` (no constraints, no indexes) and
    :data:`STAGED_ORDER`; with ``at_commit_drop`` it goes when the transaction ends."""
    names = ", ".join(quote(c) for c in columns)
    drop = " ON COMMIT DROP" if at_commit_drop else ""
    return (
        f"CREATE TEMP TABLE hermes_import_messages{drop} AS"
        f" SELECT {names} FROM messages WITH NO DATA"
    )


#: :data:`STAGED_ORDER`, numbered as rows arrive.
ADD_STAGED_ORDER = (
    f"ALTER TABLE {STAGED_MESSAGES} ADD COLUMN {STAGED_ORDER} bigint GENERATED ALWAYS AS IDENTITY"
)


def multi_row_insert(table: str, columns: Sequence[str], rows: int) -> str:
    """A multi-row ``INSERT`` of ``rows`` rows into ``columns`` of ``table`` (a table of
    the store, or :data:`STAGED_MESSAGES`)."""
    marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
    names = ", ".join(quote(c) for c in columns)
    target = table if table == STAGED_MESSAGES else quote(table)
    return f"INSERT INTO {target} ({names}) VALUES " + ", ".join([marks] * rows)


#: Sessions of staged rows whose message id the store already uses.
STAGED_CLASHING_SESSIONS = (
    f"SELECT DISTINCT t.session_id FROM {STAGED_MESSAGES} t JOIN messages m ON m.id = t.id"
)
#: Move the identity of ``messages.id`` past every staged id and every stored one, when
#: it is not past them already (fresh ids then follow every id either uses).
SEQUENCE_PAST_STAGED = (
    "SELECT setval(pg_get_serial_sequence('messages', 'id'), v.top)"
    f" FROM (SELECT greatest((SELECT coalesce(max(id), 0) FROM {STAGED_MESSAGES}),"
    " (SELECT coalesce(max(id), 0) FROM messages)) AS top) v"
    " WHERE v.top > coalesce(pg_sequence_last_value("
    "pg_get_serial_sequence('messages', 'id')::regclass), 0)"
)
#: How many staged rows take a fresh id: those without one, and those of the
#: sessions of a bound list (``text[]``).
STAGED_NEEDING_IDS = (
    f"SELECT count(*) FROM {STAGED_MESSAGES} WHERE id IS NULL OR session_id = ANY(%s)"
)
#: Give those rows fresh ids of the identity of ``messages.id``, in the order they were
#: staged: ``%s`` (the sessions, ``text[]``), then ``%s`` (how many ids). The ids are
#: taken in one call of ``nextval`` each and matched to the rows by rank, so the
#: order holds whatever order the server evaluates the calls in.
RENUMBER_STAGED = (
    f"UPDATE {STAGED_MESSAGES} t SET id = n.new_id"
    f" FROM (SELECT {STAGED_ORDER}, row_number() OVER (ORDER BY {STAGED_ORDER}) AS k"
    f" FROM {STAGED_MESSAGES} WHERE id IS NULL OR session_id = ANY(%s)) o"
    " JOIN (SELECT new_id, row_number() OVER (ORDER BY new_id) AS k"
    " FROM (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS new_id"
    " FROM generate_series(1, %s)) g) n ON n.k = o.k"
    f" WHERE t.{STAGED_ORDER} = o.{STAGED_ORDER}"
)


def move_staged_messages(columns: Sequence[str]) -> str:
    """Copy the staged rows' ``columns`` into ``messages``, in the order they were staged."""
    names = ", ".join(quote(c) for c in columns)
    return (
        f"INSERT INTO messages ({names}) SELECT {names} FROM {STAGED_MESSAGES}"
        f" ORDER BY {STAGED_ORDER}"
    )


#: Set the parents of sessions: ``%s`` ids and ``%s`` parents (``text[]`` each).
SET_PARENTS = (
    "UPDATE sessions s SET parent_session_id = p.parent"
    " FROM unnest(%s::text[], %s::text[]) AS p(id, parent) WHERE s.id = p.id"
)
#: Set the counters of sessions: ids, message counts, tool call counts (three arrays).
SET_COUNTERS = (
    "UPDATE sessions s SET message_count = c.messages, tool_call_count = c.calls"
    " FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS c(id, messages, calls)"
    " WHERE s.id = c.id"
)
#: The titles at or after each title of a bound list (``text[]``), up to its numbered
#: variants (``title #2``): ranges of the unique title index, as titles.py reads them.
TITLES_FROM_LIST = (
    "SELECT s.title FROM unnest(%s::text[]) AS w(value) JOIN sessions s"
    " ON s.title >= w.value AND s.title < w.value || ' $'"
)
#: Move the identity of ``messages.id`` back to ``%s`` (``%s``: whether that id was
#: handed out) if the last id handed out is still ``%s`` (what the import set it to).
RESTORE_MESSAGE_SEQUENCE = (
    "SELECT setval(pg_get_serial_sequence('messages', 'id'), %s, %s)"
    " WHERE pg_sequence_last_value(pg_get_serial_sequence('messages', 'id')::regclass) = %s"
)


# -- upkeep --

#: The GIN indexes standing for SQLite's two full-text tables (words, trigrams), whose
#: pending entries ``optimize_fts`` merges (and counts, as it counts those tables).
SEARCH_INDEXES = ("idx_messages_search_tsv", "idx_messages_search_trgm")
#: The CJK gram index, merged with them (the SQLite gram index is not counted either).
GRAM_INDEX = "idx_messages_cjk_grams"
#: Merge a GIN index's pending list into the index (as FTS5's optimize merges segments);
#: nothing when the store lacks the index (the trigram one, without pg_trgm).
GIN_CLEAN_PENDING = "SELECT gin_clean_pending_list(i) FROM to_regclass(%s) AS i WHERE i IS NOT NULL"


# -- the trigram index (pg_trgm), which a server may not allow --
#
# Migration 0003 creates pg_trgm and the trigram index only where the extension can be
# created; without them substring terms are matched by the same ILIKE, scanning.

#: The trigram index of substring searches (migration 0003).
TRIGRAM_INDEX = "idx_messages_search_trgm"
#: Whether the current schema's trigram index is usable: no row when it is absent,
#: ``false`` when a build of it failed half-way (``CREATE INDEX CONCURRENTLY``).
TRIGRAM_INDEX_VALID = (
    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE c.relname = 'idx_messages_search_trgm'"
    " AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
)
#: Create pg_trgm when this role may (as migration 0003 does); an error saying it may
#: not, or that the server lacks it, is caught on the server and becomes a notice.
CREATE_TRGM = """DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION
    WHEN insufficient_privilege OR undefined_file OR undefined_object
        OR feature_not_supported OR raise_exception THEN
        RAISE NOTICE 'pg_trgm cannot be created (%)', SQLERRM;
END
$$"""
#: Drop a trigram index whose build failed half-way (outside a transaction).
DROP_TRIGRAM_INDEX = "DROP INDEX CONCURRENTLY IF EXISTS idx_messages_search_trgm"


def create_trigram_index(extension_schema: str) -> str:
    """Build the trigram index of migration 0003 without holding writes off (outside a
    transaction), its operator class named in ``extension_schema`` (the schema pg_trgm
    lives in, as the server writes its name: quoted where it must be)."""
    return (
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_messages_search_trgm ON messages"
        " USING gin (hermes_search_text(content, tool_name, tool_calls)"
        f" {extension_schema}.gin_trgm_ops)"
    )


#: A JSON document's ``\u0000`` escapes (not ones after an escaped backslash), and what
#: they become for ``regexp_replace(doc, pattern, replacement, 'g')``: the JSON escape of
#: U+E000 then ``0``, which reads as the store's escaped NUL (jsonb refuses ``\u0000``).
JSON_NUL_PATTERN = r"(?<!\\)((?:\\\\)*)\\u0000"
JSON_NUL_REPLACEMENT = r"\1\\ue0000"


def reindex(index: str) -> str:
    """Build the index ``index`` (one of the package's names) again."""
    return f"REINDEX INDEX {quote(index)}"


#: Reclaim dead rows and refresh the planner's statistics of the store's tables.
VACUUM_ANALYZE = "VACUUM (ANALYZE) sessions, messages, state_meta, compression_locks"

#: The tables an erase deletes text from (their TOAST tables and indexes go with them).
ERASED_TABLES = ("sessions", "messages")
#: Whether the current role may VACUUM a table (parameter: its name): its owner's
#: member, or a superuser (anyone else's VACUUM skips the table with a warning).
MAY_VACUUM = (
    "SELECT pg_has_role(current_user, c.relowner, 'USAGE')"
    " OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
    " FROM pg_class AS c WHERE c.oid = %s::regclass"
)


def vacuum_table(table: str) -> str:
    """``VACUUM`` of one of the store's tables (one of :data:`ERASED_TABLES`): dead rows
    and their index entries removed, outside any transaction."""
    return f"VACUUM {quote(table)}"


#: Refresh the planner's statistics of the store's tables after a bulk load: until
#: autovacuum does, the server plans with what it knew before (an empty table, or the
#: count an ANALYZE made while the load's transaction was still open).
ANALYZE = "ANALYZE sessions, messages, state_meta, compression_locks"


# -- opt-in migration sets --
# hermes_models.conversations.telegram: whether an opt-in set (migrations/postgresql/<name>) was
# applied.


# -- opening: the migration check and its lock --

#: Whether the table named ``%s`` (schema-qualified, or on the search path) exists
#: (``to_regclass``: NULL when absent, without an error in the server's log).
TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
#: The advisory lock migrations of a store take (``%s``: its schema, ``''`` for the
#: search path's), as the import's lock above is keyed; held for the session, waiting
#: at most the connection's ``lock_timeout``. The server releases it when the session
#: ends, however it ends: a killed process never leaves it behind.
_MIGRATE_LOCK_KEY = "hashtext('hermes_models.migrate:' || %s)"
MIGRATE_LOCK = f"SELECT pg_advisory_lock({_MIGRATE_LOCK_KEY})"
MIGRATE_UNLOCK = f"SELECT pg_advisory_unlock({_MIGRATE_LOCK_KEY})"
#: How long a migration waits for another process's migration (``%s``: ms).
SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, false)"


def applied_among(schema: str | None) -> str:
    """Which of the given migration hashes (``%s``: ``text[]``) the store (in ``schema``,
    a checked identifier, or the search path) records as applied."""
    table = "_yoyo_migration" if schema is None else f'"{schema}"._yoyo_migration'
    return f"SELECT migration_hash FROM {table} WHERE migration_hash = ANY(%s::text[])"


def yoyo_lock_table(schema: str | None) -> str:
    """yoyo's lock table of the store (in ``schema``, a checked identifier, or the
    search path), as ``to_regclass`` reads a name."""
    return "yoyo_lock" if schema is None else f"{schema}.yoyo_lock"


def clear_yoyo_lock(schema: str | None) -> str:
    """Delete the rows of yoyo's lock table (``yoyo_lock_table``): under the migration
    lock, a row there is one a killed opener left while yoyo updated its own tables."""
    return f"DELETE FROM {yoyo_lock_table(schema)}"
