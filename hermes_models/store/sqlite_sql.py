"""Every hand-written SQL statement the package runs on SQLite, named.

The rule: SQL built with peewee stays with its models and is rendered once by
:mod:`hermes_models.store.statements`; SQL written by hand lives here, one named
constant per statement, so a reader sees in one page all the SQL the package
writes itself. PRAGMAs and transaction statements (``BEGIN IMMEDIATE``) count
as SQL. A statement that takes a table, column or mode name (SQLite binds
values, never names) is a small function; each says where its names come
from. A second dialect gets a sibling module with the same names.

The search's FTS5 ``MATCH`` queries are built with peewee in
:mod:`hermes_models.search.plan`; the fragments it splices into them (``json_each``
lists, a ``LIMIT``) are here, and so are the gram index's statements and the
TEMP triggers that keep it in step (:mod:`hermes_models.store.grams`).

The texts are exactly those Hermes and the tests see: a trace of a write
reads ``BEGIN IMMEDIATE``, then the statement, then ``COMMIT``.
"""

from __future__ import annotations

from collections.abc import Sequence

# -- transactions ---------------------------------------------------------------------------

#: A read transaction: every statement after it reads one snapshot.
BEGIN = "BEGIN"
#: A write transaction that takes the write lock first.
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
#: The savepoint in which a write catches the gram index up (a failure there is dropped).
SAVEPOINT_GRAMS = "SAVEPOINT hermes_models_grams"
ROLLBACK_TO_GRAMS = "ROLLBACK TO hermes_models_grams"
RELEASE_GRAMS = "RELEASE hermes_models_grams"

# -- connection settings --------------------------------------------------------------------

JOURNAL_MODE = "PRAGMA journal_mode"
JOURNAL_MODE_WAL = "PRAGMA journal_mode=WAL"
JOURNAL_MODE_DELETE = "PRAGMA journal_mode=DELETE"
SYNCHRONOUS = "PRAGMA synchronous"
#: Memory-mapped reads stay off (the build's default may differ).
MMAP_OFF = "PRAGMA mmap_size=0"
#: Deleted content overwritten with zeros, whichever build's default.
SECURE_DELETE_ON = "PRAGMA secure_delete=ON"
SQLITE_VERSION = "SELECT sqlite_version()"
#: A scratch file: no journal, no syncing.
JOURNAL_MODE_OFF = "PRAGMA journal_mode = OFF"
SYNCHRONOUS_OFF = "PRAGMA synchronous = OFF"
FOREIGN_KEYS = "PRAGMA foreign_keys"
FOREIGN_KEYS_ON = "PRAGMA foreign_keys = ON"
FOREIGN_KEYS_OFF = "PRAGMA foreign_keys = OFF"
#: Foreign keys checked at the commit, not at each statement (until the transaction ends).
DEFER_FOREIGN_KEYS_ON = "PRAGMA defer_foreign_keys = ON"
BUSY_TIMEOUT = "PRAGMA busy_timeout"
USER_VERSION = "PRAGMA user_version"
#: SQLite's schema cookie, changed by every schema change (not the ``schema_version``
#: table of :data:`SCHEMA_VERSION`): whether what was read of the schema still holds.
SCHEMA_COOKIE = "PRAGMA schema_version"
#: A number that changes when another connection commits to the file (not for this
#: connection's own commits: see ``sqlite3.Connection.total_changes``).
DATA_VERSION = "PRAGMA data_version"
PAGE_COUNT = "PRAGMA page_count"
PAGE_SIZE = "PRAGMA page_size"
#: Pages of the file that hold nothing (reused by later writes, returned by VACUUM).
FREELIST_COUNT = "PRAGMA freelist_count"
COMPILE_OPTIONS = "PRAGMA compile_options"
INTEGRITY_CHECK = "PRAGMA integrity_check"
FOREIGN_KEY_CHECK = "PRAGMA foreign_key_check"
#: Lets a repair edit ``sqlite_master`` directly.
WRITABLE_SCHEMA_ON = "PRAGMA writable_schema=ON"
WRITABLE_SCHEMA_OFF = "PRAGMA writable_schema=OFF"
WAL_CHECKPOINT_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"
WAL_CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"
VACUUM = "VACUUM"


def set_synchronous(level: int) -> str:
    """``PRAGMA synchronous`` set to ``level`` (0-3: OFF, NORMAL, FULL, EXTRA)."""
    return f"PRAGMA synchronous={int(level)}"


def set_foreign_keys(value: int) -> str:
    """Foreign keys on (1) or off (0), as ``PRAGMA foreign_keys`` reported them."""
    return f"PRAGMA foreign_keys = {int(value)}"


def set_busy_timeout(milliseconds: int) -> str:
    """How long a statement waits on a lock (a PRAGMA takes no bound value)."""
    return f"PRAGMA busy_timeout = {int(milliseconds)}"


def set_user_version(version: int) -> str:
    """Write ``user_version`` (back to the value it had: a write that changes nothing)."""
    return f"PRAGMA user_version = {int(version)}"


def wal_checkpoint(mode: str) -> str:
    """A WAL checkpoint; ``mode`` is one of SQLite's four, checked by the caller."""
    return f"PRAGMA wal_checkpoint({mode})"


def table_info(table: str) -> str:
    """The columns of ``table`` (a name read from ``sqlite_master`` or one of ours)."""
    return f'PRAGMA table_info("{table}")'


# -- the schema as SQLite keeps it -----------------------------------------------------------

#: A statement that reads the schema: it loads a changed schema, or fails on a bad file.
READ_SCHEMA = "SELECT COUNT(*) FROM sqlite_master"
SCHEMA_NAMES = "SELECT name FROM sqlite_master"
#: Every schema object by type and name (the quick path compares them with a fresh file's).
SCHEMA_OBJECTS = "SELECT type, name FROM sqlite_master"
TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type = 'table'"
TRIGGER_NAMES = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
#: Which of two tables exist (two bound names).
TABLES_NAMED = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)"
#: Tables and views with their CREATE text, and one index by its bound name.
TABLES_AND_VIEWS = (
    "SELECT name, type, COALESCE(sql, '') FROM sqlite_master"
    " WHERE type IN ('table', 'view') OR (type = 'index' AND name = ?)"
)
#: The FTS5 tables of a file, whatever their names.
FTS5_TABLES = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
    " AND lower(sql) LIKE '%using fts5%'"
)
FTS5_TABLES_WITH_SQL = FTS5_TABLES.replace("SELECT name ", "SELECT name, sql ", 1)
#: The tables and triggers of the two message search indexes.
SEARCH_OBJECT_NAMES = (
    "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')"
    " AND name LIKE 'messages_fts%'"
)
#: The CREATE text of the search indexes' tables and triggers, in creation order.
SEARCH_SCHEMA = (
    "SELECT name, sql FROM sqlite_master "
    "WHERE name LIKE 'messages!_fts%' ESCAPE '!' "
    "AND (type = 'trigger' OR sql LIKE 'CREATE VIRTUAL TABLE%') ORDER BY rowid"
)
#: Whether the triggers of a newer Hermes' CJK index exist.
CJK_TRIGGER_COUNT = (
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'messages_fts_cjk%'"
)
#: A repair: keep the first of each duplicated schema entry.
DEDUP_SCHEMA = (
    "DELETE FROM sqlite_master WHERE rowid NOT IN "
    "(SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name)"
)
#: A repair: forget the message search indexes (rebuilt by their migration after).
FORGET_SEARCH_SCHEMA = "DELETE FROM sqlite_master WHERE name LIKE 'messages!_fts%' ESCAPE '!'"
DROP_FTS5_PROBE = "DROP TABLE temp.hermes_models_probe"


def table_sql(table: str) -> str:
    """The CREATE text of ``table`` (a name from ``sqlite_master``)."""
    return f"SELECT sql FROM sqlite_master WHERE name = '{table}'"


def if_not_exists(kind: str, name: str, rest: str) -> str:
    """A CREATE statement of the migrations made idempotent (``kind``, ``name`` and the
    ``rest`` of the statement are read from the migration's own text)."""
    return f"CREATE {kind} IF NOT EXISTS {name}{rest}"


def read_nothing_from(table: str) -> str:
    """A read of ``table`` that returns no row: preparing it opens the table."""
    return f'SELECT 1 FROM "{table}" WHERE 0'


def create_fts5_probe(options: str) -> str:
    """A scratch FTS5 table with tokenizer ``options``: does this build have them?"""
    return f"CREATE VIRTUAL TABLE temp.hermes_models_probe USING fts5(x{options})"


# -- versions and migrations -----------------------------------------------------------------

SCHEMA_VERSION = "SELECT MAX(version) FROM schema_version"
SET_SCHEMA_VERSION = "UPDATE schema_version SET version = :version"
APPLIED_MIGRATIONS = "SELECT migration_hash FROM _yoyo_migration"
YOYO_LOCK_PID = "SELECT pid FROM yoyo_lock"

# -- state_meta -------------------------------------------------------------------------------

META_VALUE = "SELECT value FROM state_meta WHERE key = ?"
#: The full-text settings a newer Hermes records.
FTS_META = "SELECT key, value FROM state_meta WHERE key LIKE 'fts%' ORDER BY key"
UPSERT_META = (
    "INSERT INTO state_meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
SET_META_VALUE = "UPDATE state_meta SET value = ? WHERE key = ?"
DELETE_META = "DELETE FROM state_meta WHERE key = ?"

# -- sessions, messages and the message id sequence -------------------------------------------

COUNT_SESSIONS = "SELECT COUNT(*) FROM sessions"
COUNT_MESSAGES = "SELECT COUNT(*) FROM messages"
#: The highest message id, 0 for none.
HIGHEST_MESSAGE_ID = "SELECT COALESCE(MAX(id), 0) FROM messages"
#: Whether a message id between two bound ids is taken.
MESSAGE_IDS_BETWEEN = "SELECT EXISTS (SELECT 1 FROM messages WHERE id BETWEEN ? AND ?)"
SET_SESSION_COUNTERS = "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?"
#: Up to 2,000 messages of the sessions of a JSON list with ids in a range.
DELETE_STAGED_MESSAGES = (
    "DELETE FROM messages WHERE id IN (SELECT id FROM messages "
    "WHERE id BETWEEN ? AND ? AND session_id IN (SELECT value FROM json_each(?)) "
    "LIMIT 2000)"
)
#: The titles of sessions at or after each title of a bound JSON list, up to its
#: numbered variants (``title #2``): a range of the unique title index.
TITLES_FROM_LIST = """
SELECT s.title FROM json_each(?) AS w JOIN sessions AS s
ON s.title >= w.value AND s.title < w.value || ' $'
"""
#: The values of a bound JSON list, as a subquery (``IN`` any number of ids, one value).
JSON_LIST = "(SELECT value FROM json_each(?))"
MESSAGE_SEQUENCE = "SELECT seq FROM sqlite_sequence WHERE name = 'messages'"
SEQUENCE_OF = "SELECT seq FROM sqlite_sequence WHERE name = ?"
INSERT_SEQUENCE = "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)"
SET_SEQUENCE = "UPDATE sqlite_sequence SET seq = ? WHERE name = ?"
#: The sequence row of a name still at a value, when no message id above a bound id exists.
_UNUSED_SEQUENCE = "name = ? AND seq = ? AND NOT EXISTS (SELECT 1 FROM messages WHERE id > ?)"
DELETE_UNUSED_SEQUENCE = f"DELETE FROM sqlite_sequence WHERE {_UNUSED_SEQUENCE}"
LOWER_UNUSED_SEQUENCE = f"UPDATE sqlite_sequence SET seq = ? WHERE {_UNUSED_SEQUENCE}"


def set_message_sequence(value: int) -> str:
    """Set the message id sequence to ``value`` (written in: a checked integer)."""
    return f"UPDATE sqlite_sequence SET seq = {int(value)} WHERE name = 'messages'"


def quote(name: str) -> str:
    """``name`` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def multi_row_insert(table: str, columns: Sequence[str], rows: int) -> str:
    """A multi-row ``INSERT`` of ``rows`` rows into ``columns`` of ``table`` (names of the
    models)."""
    marks = "(" + ", ".join("?" * len(columns)) + ")"
    names = ", ".join(quote(c) for c in columns)
    return f"INSERT INTO {quote(table)} ({names}) VALUES " + ", ".join([marks] * rows)


def ids_in_list(table: str) -> str:
    """The ids of ``table`` (``sessions`` or ``messages``) among a bound JSON list."""
    return f'SELECT id FROM "{table}" WHERE id IN (SELECT value FROM json_each(?))'


#: Every table of the file with its CREATE text (what a bundle carries is chosen from it).
TABLES_WITH_SQL = "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"


def is_virtual_table(sql: object) -> bool:
    """True when ``sql`` (a table's text in ``sqlite_master``) creates a virtual table."""
    return str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL")


def every_row(table: str, columns: int) -> str:
    """Every row of ``table`` (a name read from the file), ordered by all its ``columns``."""
    order = ", ".join(str(i) for i in range(1, columns + 1))
    return f"SELECT * FROM {quote(table)} ORDER BY {order}"


def rows_among(table: str, column: str, columns: int) -> str:
    """The rows of ``table`` whose ``column`` is in a bound JSON list, ordered by all its
    ``columns`` (names read from the file)."""
    order = ", ".join(str(i) for i in range(1, columns + 1))
    return (
        f"SELECT * FROM {quote(table)} WHERE {quote(column)} IN"
        f" (SELECT value FROM json_each(?)) ORDER BY {order}"
    )


def table_rows(table: str, columns: Sequence[str]) -> str:
    """``columns`` of every row of ``table`` (names of the package's own tables)."""
    return f"SELECT {', '.join(quote(c) for c in columns)} FROM {quote(table)}"


def columns_by_key(table: str, columns: Sequence[str], key: str) -> str:
    """``columns`` of the row of ``table`` whose ``key`` column is bound (names read from
    the file: columns a newer Hermes added)."""
    selected = ", ".join(quote(c) for c in columns)
    return f'SELECT {selected} FROM "{table}" WHERE "{key}" = ?'


# -- health: counting, copying and checking the search indexes -------------------------------

#: The text the search-index triggers put in each index, per message ``m``.
INDEXED_TEXT = (
    "COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' || "
    "COALESCE(m.tool_calls, '')"
)
ATTACH_SOURCE = "ATTACH DATABASE ? AS source"
#: The same for an encrypted store: the file, then its key (SQLCipher).
ATTACH_SOURCE_WITH_KEY = "ATTACH DATABASE ? AS source KEY ?"
DETACH_SOURCE = "DETACH DATABASE source"


def count_rows(table: str) -> str:
    """How many rows ``table`` (a search index of the file) has."""
    return f"SELECT COUNT(*) FROM {table}"


def fts_integrity_check(table: str) -> str:
    """FTS5's own check of the index ``table`` (as the caller spells it, quoted or not)."""
    return f"INSERT INTO {table}({table}) VALUES ('integrity-check')"


def fts_tokenizer_probe(table: str) -> str:
    """A search of the index ``table`` that needs its tokenizer ("no such tokenizer"
    when this SQLite lacks it; SQLite 3.53's ``integrity-check`` may pass without it)."""
    return f"SELECT 1 FROM {table} WHERE {table} MATCH 'a' LIMIT 1"


#: The savepoint inside which a check aligns an index's stored text, then undoes it.
SAVEPOINT_CHECK = "SAVEPOINT hermes_models_check"
ROLLBACK_TO_CHECK = "ROLLBACK TO hermes_models_check"
RELEASE_CHECK = "RELEASE hermes_models_check"
#: A scratch index in which the check counts the terms this SQLite reads in a text.
TERM_COUNTER = "hermes_models_term_counter"
DROP_TERM_COUNTER = f"DROP TABLE IF EXISTS temp.{TERM_COUNTER}"
COUNT_TERMS_INSERT = f"INSERT INTO temp.{TERM_COUNTER}(rowid, x) VALUES (?, ?)"
COUNT_TERMS_READ = f"SELECT sz FROM temp.{TERM_COUNTER}_docsize WHERE id = ?"
COUNT_TERMS_CLEAR = f"DELETE FROM temp.{TERM_COUNTER}"


def term_counter(options: str) -> str:
    """The scratch index :data:`TERM_COUNTER`, tokenized as ``options`` says (``""``
    or ``", tokenize='trigram'"``)."""
    return f"CREATE VIRTUAL TABLE temp.{TERM_COUNTER} USING fts5(x{options})"


def rows_holding_nul(table: str) -> str:
    """The rows of the search index ``table`` whose stored text holds a NUL character:
    id, text and stored term counts (``_docsize``)."""
    return (
        f"SELECT c.id, c.c0, d.sz FROM {quote(table + '_content')} AS c"
        f" JOIN {quote(table + '_docsize')} AS d ON d.id = c.id"
        " WHERE instr(CAST(c.c0 AS BLOB), x'00') > 0"
    )


def set_stored_text(table: str) -> str:
    """Replace the stored text of one row (bound: text, id) of the search index ``table``."""
    return f"UPDATE {quote(table + '_content')} SET c0 = ? WHERE id = ?"


def clear_main(table: str) -> str:
    """Empty ``table`` of the scratch copy (a shadow table of a search index)."""
    return f"DELETE FROM main.{table}"


def copy_from_source(table: str) -> str:
    """Copy ``table`` from the attached ``source`` file into the scratch copy."""
    return f"INSERT INTO main.{table} SELECT * FROM source.{table}"


def messages_not_indexed(table: str) -> str:
    """How many messages the search index ``table`` lacks."""
    return (
        f"SELECT COUNT(*) FROM messages m WHERE NOT EXISTS "
        f"(SELECT 1 FROM {table} f WHERE f.rowid = m.id)"
    )


def stray_index_rows(table: str) -> str:
    """How many rows of the search index ``table`` no message has."""
    return f"SELECT COUNT(*) FROM {table} WHERE rowid NOT IN (SELECT id FROM messages)"


def stale_index_rows(table: str) -> str:
    """How many rows of the search index ``table`` hold text their message no longer has."""
    return (
        f"SELECT COUNT(*) FROM messages m JOIN {table} f ON f.rowid = m.id "
        f"WHERE f.content IS NOT {INDEXED_TEXT}"
    )


# -- fragments of the search's peewee queries ------------------------------------------------

#: The rows of an FTS5 table whose rowid is in a bound JSON list; ``+`` keeps FTS5 from
#: running its ``MATCH`` once per id (the matches are read once and filtered).
ROWID_IN_JSON_LIST = f"+rowid IN {JSON_LIST}"
#: Sources of the rows a ranked search of many groups narrows its ranked rows to (one
#: ``SELECT`` of ids each, joined by ``UNION ALL``; one bound value each): the ids the
#: scan found, the matches of words, of trigram terms, and the rows holding JSON.
NARROWED_IDS = JSON_LIST[1:-1]  # the list of JSON_LIST, as a SELECT of its own
NARROWED_WORDS = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
NARROWED_TRIGRAMS = "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ?"


def rowid_among(sources: list[str]) -> str:
    """``+rowid`` among the union of ``sources`` (the ``+`` keeps FTS5 from running
    its ``MATCH`` once per id)."""
    return f"+rowid IN ({' UNION ALL '.join(sources)})"


#: The LIMIT of the rows the trigram index cannot read, on a ranked trigram page (both
#: parameters: how many hits the page needs, negative for all; ``first`` is the CTE of the
#: ranked hits): only as many as the ranked rows leave (0: that scan is not even started).
REST_LIMIT = '(CASE WHEN ? < 0 THEN -1 ELSE max(0, ? - (SELECT count(*) FROM "first")) END)'
#: 1 when the word index matches more than a number of messages (parameters: the
#: FTS5 expression, the number), nothing otherwise; oldest first, which FTS5 reads
#: fastest, and stopping there.
WORD_MATCHES_BEYOND = "SELECT 1 FROM messages_fts WHERE messages_fts MATCH ? LIMIT 1 OFFSET ?"
#: The id above which a search ranks its hits: the floor of its ``newest`` CTE
#: (:func:`hermes_models.search.plan.newest_cte`; 0 when every hit is ranked).
NEWEST_FLOOR = '(SELECT "floor" FROM "newest")'


# -- the gram index and the TEMP triggers that note our own changes ----------------------------

#: The FTS5 table of grams (migration 0009, external content), the table of what it holds
#: for each message (its content table), and the ids of messages changed since indexed.
GRAM_TABLE = "messages_cjk"
GRAM_HELD_TABLE = "messages_cjk_grams"
GRAM_CHANGED_TABLE = "messages_cjk_changed"
#: The file's plain-SQL triggers that list changed ids (every writer runs them).
GRAM_FILE_TRIGGERS = (
    "messages_cjk_changed_insert",
    "messages_cjk_changed_update",
    "messages_cjk_changed_delete",
)
#: The SQL function our TEMP triggers call with each id a write of ours changes.
NOTE_FUNCTION = "hermes_models_cjk_note"

#: The ids the gram index lists for one expression, but those of rows changed since
#: they were indexed (their entries may be stale: a scan decides them).
GRAM_IDS = (
    f"SELECT rowid FROM {GRAM_TABLE} WHERE {GRAM_TABLE} MATCH ?"
    f" EXCEPT SELECT id FROM {GRAM_CHANGED_TABLE}"
)
#: How many messages the gram index lists for one expression, counting up to a cap (the
#: second parameter): enough to tell a common term from a rare one without reading all.
GRAM_COUNT = f"SELECT count(*) FROM (SELECT 1 FROM {GRAM_TABLE} WHERE {GRAM_TABLE} MATCH ? LIMIT ?)"
#: The gram index's state, in one read: the highest message id (how many messages a
#: walk may have to pass, at most), and whether any message is changed since it was
#: indexed (with none, the index covers every message as it is).
GRAM_STATE = (
    "SELECT coalesce((SELECT max(id) FROM messages), 0),"
    f" EXISTS (SELECT 1 FROM {GRAM_CHANGED_TABLE})"
)
#: The SQL function giving how many candidates make a term common, of the page times the
#: number of terms and the highest message id (:func:`hermes_models.search.pipeline.common_from`).
GRAM_NEED_FUNCTION = "hermes_models_gram_need"
#: :data:`GRAM_STATE`, then how many messages are changed since indexed and how many the
#: gram index lists for one expression (the second parameter), each counted up to the
#: number that makes a term common (of the page times the number of terms, the first
#: and third): a term's first search reads them in one statement.
GRAM_STATE_COUNT = (
    f"{GRAM_STATE}, (SELECT count(*) FROM (SELECT 1 FROM {GRAM_CHANGED_TABLE}"
    f" LIMIT {GRAM_NEED_FUNCTION}(?, (SELECT max(id) FROM messages)) + 1)),"
    f" (SELECT count(*) FROM (SELECT 1 FROM {GRAM_TABLE} WHERE {GRAM_TABLE}"
    f" MATCH ? LIMIT {GRAM_NEED_FUNCTION}(?, (SELECT max(id) FROM messages))))"
)
#: The ids of messages changed since they were indexed, as a subquery: a search that
#: reads the index alone reads none of those (a scan decides them).
GRAM_CHANGED_IDS = f"(SELECT id FROM {GRAM_CHANGED_TABLE})"


def gram_candidates(match: str = "?") -> str:
    """A subquery of the ids of the messages that may hold what ``match`` asks for (NULL:
    nothing): the index's answer and the rows changed since they were indexed.
    ``match`` is written in twice: a parameter (``?``, bound twice) or an expression of
    the caller's query."""
    return (
        f"SELECT rowid FROM {GRAM_TABLE} WHERE {match} IS NOT NULL AND {GRAM_TABLE} MATCH {match}"
        f" UNION SELECT id FROM {GRAM_CHANGED_TABLE}"
    )


#: How many of the gram index's tables and file triggers exist (their six names bound).
GRAM_OBJECTS_FOUND = (
    "SELECT count(*) FROM sqlite_master"
    " WHERE (type = 'table' AND name IN (?, ?, ?)) OR (type = 'trigger' AND name IN (?, ?, ?))"
)
#: A read of the gram table that returns no row: it fails on a build without FTS5.
OPEN_GRAM_TABLE = f"SELECT 1 FROM {GRAM_TABLE} LIMIT 0"
#: Up to a bound number of ids changed since indexed, lowest first.
CHANGED_IDS = f"SELECT id FROM {GRAM_CHANGED_TABLE} ORDER BY id LIMIT ?"
#: How many ids are changed since indexed, and how many messages the index holds grams of.
CHANGED_COUNT = f"SELECT count(*) FROM {GRAM_CHANGED_TABLE}"
HELD_COUNT = f"SELECT count(*) FROM {GRAM_HELD_TABLE}"


def _as_bytes(column: str) -> str:
    """A text column's value as its bytes (whatever they are), NULL for any other type:
    the grams are read from text only, and bytes that are not UTF-8 never fail a read."""
    return f"CASE WHEN typeof({column}) = 'text' THEN CAST({column} AS BLOB) END"


#: For each id of a bound JSON list: the message's text columns as bytes (NULLs when there
#: is no such message) and the grams the index holds for it (NULL: none).
GRAM_ROWS = (
    f"SELECT j.value, {_as_bytes('m.content')}, {_as_bytes('m.tool_name')},"
    f" {_as_bytes('m.tool_calls')}, h.grams FROM json_each(?) AS j"
    " LEFT JOIN messages AS m ON m.id = j.value"
    f" LEFT JOIN {GRAM_HELD_TABLE} AS h ON h.id = j.value"
)
#: The same for one id, bound three times (a write of one message: no JSON list to read).
GRAM_ROW = (
    f"SELECT ?, {_as_bytes('m.content')}, {_as_bytes('m.tool_name')},"
    f" {_as_bytes('m.tool_calls')}, (SELECT grams FROM {GRAM_HELD_TABLE} WHERE id = ?)"
    " FROM (SELECT 1) LEFT JOIN messages AS m ON m.id = ?"
)
#: Every message not changed since indexed (its text as bytes) beside the grams the
#: index holds for it; ids above a bound one, lowest first, up to a bound number.
GRAM_CHECK_ROWS = (
    f"SELECT m.id, {_as_bytes('m.content')}, {_as_bytes('m.tool_name')},"
    f" {_as_bytes('m.tool_calls')}, h.grams FROM messages AS m"
    f" LEFT JOIN {GRAM_HELD_TABLE} AS h ON h.id = m.id"
    f" WHERE m.id > ? AND m.id NOT IN (SELECT id FROM {GRAM_CHANGED_TABLE})"
    " ORDER BY m.id LIMIT ?"
)
#: The same for the ids of a bound JSON list (a sample, or the messages a copy wrote).
GRAM_CHECK_LISTED = (
    f"SELECT m.id, {_as_bytes('m.content')}, {_as_bytes('m.tool_name')},"
    f" {_as_bytes('m.tool_calls')}, h.grams FROM messages AS m"
    f" LEFT JOIN {GRAM_HELD_TABLE} AS h ON h.id = m.id"
    " WHERE m.id IN (SELECT value FROM json_each(?))"
    f" AND m.id NOT IN (SELECT id FROM {GRAM_CHANGED_TABLE})"
)
#: Ids the index holds grams of that are no message, and not changed since indexed (a
#: row deleted without a trigger firing: an INSERT OR REPLACE over another key).
GRAM_STRAY = (
    f"SELECT id FROM {GRAM_HELD_TABLE} WHERE id NOT IN (SELECT id FROM messages)"
    f" AND id NOT IN (SELECT id FROM {GRAM_CHANGED_TABLE}) ORDER BY id"
)
#: The ids of the messages, lowest first (a sample is drawn from them).
MESSAGE_IDS = "SELECT id FROM messages ORDER BY id"
#: Whether a message id is changed since indexed.
CHANGED_AMONG = (
    f"SELECT id FROM {GRAM_CHANGED_TABLE} WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id"
)

#: Taking a message's grams out of the index (they must be what it holds: the held row).
UNINDEX_GRAMS = f"INSERT INTO {GRAM_TABLE}({GRAM_TABLE}, rowid, grams) VALUES ('delete', ?, ?)"
INDEX_GRAMS = f"INSERT INTO {GRAM_TABLE}(rowid, grams) VALUES (?, ?)"
HOLD_GRAMS = f"INSERT OR REPLACE INTO {GRAM_HELD_TABLE}(id, grams) VALUES (?, ?)"
UNHOLD_GRAMS = f"DELETE FROM {GRAM_HELD_TABLE} WHERE id = ?"
#: Ids no longer changed (indexed as they are now), from a bound JSON list or one id.
CLEAR_CHANGED = f"DELETE FROM {GRAM_CHANGED_TABLE} WHERE id IN (SELECT value FROM json_each(?))"
CLEAR_CHANGED_ONE = f"DELETE FROM {GRAM_CHANGED_TABLE} WHERE id = ?"
#: Ids listed as changed again (a divergence ``doctor --fix`` found), from a JSON list.
MARK_CHANGED = f"INSERT OR IGNORE INTO {GRAM_CHANGED_TABLE}(id) SELECT value FROM json_each(?)"


def fts_segments(table: str) -> str:
    """How many segments the FTS5 index ``table`` is in (each lookup searches every one)."""
    return f"SELECT count(DISTINCT segid) FROM {table}_idx"


def fts_merge(table: str) -> str:
    """FTS5's incremental merge of the index ``table``: up to |?| leaf pages written; a
    negative amount merges every segment into one (its later steps take a positive amount)."""
    return f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)"


GRAM_SEGMENTS = fts_segments(GRAM_TABLE)
GRAM_MERGE = fts_merge(GRAM_TABLE)
#: FTS5's check that the index holds exactly what its content table (the held grams)
#: says (rank 1: the content is compared too); run on a scratch copy by ``doctor``.
GRAM_INTEGRITY = f"INSERT INTO {GRAM_TABLE}({GRAM_TABLE}, rank) VALUES ('integrity-check', 1)"
#: Emptying the gram index: its entries and what it holds; every message listed as changed.
EMPTY_GRAMS = f"INSERT INTO {GRAM_TABLE}({GRAM_TABLE}) VALUES ('delete-all')"
EMPTY_HELD = f"DELETE FROM {GRAM_HELD_TABLE}"
ALL_CHANGED = f"INSERT OR IGNORE INTO {GRAM_CHANGED_TABLE}(id) SELECT id FROM messages"
MESSAGES_COUNT = "SELECT count(*) FROM messages"


_INDEXED = "AFTER UPDATE OF id, content, tool_name, tool_calls ON main.messages"
_CHANGES = (
    "old.id IS NOT new.id OR old.content IS NOT new.content"
    " OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls"
)

#: The TEMP triggers by which a connection of ours notes the ids its writes change (the
#: file's own triggers list them too; the write indexes those it noted before it commits).
GRAM_TRIGGERS = (
    f"""CREATE TEMP TRIGGER IF NOT EXISTS hermes_models_cjk_note_insert
AFTER INSERT ON main.messages
BEGIN
    SELECT {NOTE_FUNCTION}(new.id);
END""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS hermes_models_cjk_note_update
{_INDEXED}
WHEN {_CHANGES}
BEGIN
    SELECT {NOTE_FUNCTION}(old.id);
    SELECT {NOTE_FUNCTION}(new.id);
END""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS hermes_models_cjk_note_delete
AFTER DELETE ON main.messages
BEGIN
    SELECT {NOTE_FUNCTION}(old.id);
END""",
)


# -- text that is not UTF-8 ---------------------------------------------------------------------


def text_as_bytes(table: str, columns: Sequence[str]) -> str:
    """The rowid and each of ``columns`` of every row of ``table`` as bytes when it is
    text (NULL otherwise), by rowid: text another program wrote that is not UTF-8 is
    read without failing (the names come from ``PRAGMA table_info``)."""
    parts = ", ".join(
        f'CASE WHEN typeof("{c}") = \'text\' THEN CAST("{c}" AS BLOB) END' for c in columns
    )
    return f'SELECT rowid, {parts} FROM "{table}" ORDER BY rowid'


# -- copy -------------------------------------------------------------------------------------
# hermes_models.transfer.copy: a whole store moved to another file or server, and checked.

#: Every session's id and parent (the copy orders parents before children).
COPY_SESSION_LINKS = "SELECT id, parent_session_id FROM sessions"
#: How many messages each session has.
COPY_MESSAGE_COUNTS = "SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"
#: Messages whose session does not exist (a damaged file: not copied).
COPY_ORPHAN_MESSAGES = (
    "SELECT COUNT(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
)
#: Every ``state_meta`` row.
COPY_META_ROWS = "SELECT key, value FROM state_meta"
#: Every compression lock.
COPY_LOCK_ROWS = "SELECT session_id, holder, acquired_at, expires_at FROM compression_locks"
#: Set a session's parent (after a cycle of parent links was copied without it).
COPY_SET_PARENT = "UPDATE sessions SET parent_session_id = ? WHERE id = ?"


def copy_sessions_in_list(columns: Sequence[str]) -> str:
    """``columns`` of the sessions whose ids are in a bound JSON list."""
    names = ", ".join(quote(c) for c in columns)
    return f"SELECT {names} FROM sessions WHERE id IN (SELECT value FROM json_each(?))"


def copy_messages_of_sessions(columns: Sequence[str]) -> str:
    """``columns`` of the messages of the sessions in a bound JSON list, by session and id."""
    names = ", ".join(quote(c) for c in columns)
    return (
        f"SELECT {names} FROM messages WHERE session_id IN (SELECT value FROM json_each(?)) "
        "ORDER BY session_id, id"
    )


def insert_or_ignore(table: str, columns: Sequence[str]) -> str:
    """Insert one row into ``columns`` of ``table``; a row whose key is taken is skipped."""
    marks = ", ".join("?" * len(columns))
    names = ", ".join(quote(c) for c in columns)
    return f"INSERT OR IGNORE INTO {quote(table)} ({names}) VALUES ({marks})"


#: Whether a session id is held (``hermes-models sessions``' quick path).
ID_HELD = "SELECT 1 FROM sessions WHERE id = ? LIMIT 1"
#: At most N session ids in a range of the primary key (the ids starting with the
#: prefix's part before its first ASCII letter: :func:`prefix_bounds`) that start with
#: the prefix, ASCII letters of either case, as the library's
#: ``starts_with_ascii_nocase`` compares. Values: the range, the prefix's length in
#: UTF-8 bytes, its ASCII-lower-cased bytes, N.
IDS_WITH_PREFIX = (
    "SELECT id FROM sessions WHERE id >= ? AND id < ?"
    " AND CAST(lower(substr(CAST(id AS BLOB), 1, ?)) AS BLOB) = ? LIMIT ?"
)
#: The same without a range (a prefix that starts with an ASCII letter).
IDS_WITH_PREFIX_ANYWHERE = (
    "SELECT id FROM sessions WHERE CAST(lower(substr(CAST(id AS BLOB), 1, ?)) AS BLOB) = ? LIMIT ?"
)


def prefix_bounds(prefix: str) -> tuple[str, str] | None:
    """The range ``[low, high)`` of text, in SQLite's binary order, holding every text
    that starts with ``prefix``'s part before its first ASCII letter (which a match
    that folds ASCII case must repeat exactly); None when that part is empty."""
    cut = next((i for i, c in enumerate(prefix) if c.isascii() and c.isalpha()), len(prefix))
    low = prefix[:cut]
    head = low
    while head:
        last = ord(head[-1])
        if last < 0x10FFFF:
            # UTF-8 order is code point order; surrogates cannot be stored: skip them.
            following = 0xE000 if last + 1 == 0xD800 else last + 1
            return low, head[:-1] + chr(following)
        head = head[:-1]
    return None


# -- encryption (SQLCipher: store.cipher) ---------------------------------------------

#: A read that fails with "file is not a database" when a connection's key does not
#: open the file (SQLCipher reads the first page at the first statement).
READ_FIRST_PAGE = "SELECT count(*) FROM sqlite_master"
#: SQLCipher logs a failed decryption to stderr unless told not to (the package raises).
CIPHER_LOG_NONE = "PRAGMA cipher_log_level = NONE"
#: The SQLCipher release, an empty result on an SQLite without it.
CIPHER_VERSION = "PRAGMA cipher_version"
#: Every table of the main database (for the row counts a conversion compares).
TABLES_TO_COUNT = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
)
#: Keep every lock a connection takes until it closes (a conversion holds its file so).
LOCKING_MODE_EXCLUSIVE = "PRAGMA locking_mode = EXCLUSIVE"
#: Take the write lock (and, in exclusive locking mode, keep it).
BEGIN_EXCLUSIVE = "BEGIN EXCLUSIVE"
#: A whole copy of the main database into the attached ``converted`` (SQLCipher's).
EXPORT_CONVERTED = "SELECT sqlcipher_export('converted')"
DETACH_CONVERTED = "DETACH DATABASE converted"
CONVERTED_USER_VERSION = "PRAGMA main.user_version"


def quote_key(key: str) -> str:
    """``key`` as an SQL string literal (a PRAGMA takes no bound value)."""
    return "'" + key.replace("'", "''") + "'"


def set_key(key: str) -> str:
    """Give a connection the key of its file, before its first read."""
    return f"PRAGMA key = {quote_key(key)}"


def set_raw_key(hex_key: str) -> str:
    """Give a connection a raw key (hex digits: the key, then the file's salt), which
    SQLCipher uses without deriving it from a passphrase."""
    if not hex_key or any(c not in "0123456789abcdef" for c in hex_key):
        raise ValueError("a raw key is lower-case hex digits")
    return f"PRAGMA key = \"x'{hex_key}'\""


#: The salt of the file (the first 16 bytes, as hex): read under any raw key.
CIPHER_SALT = "PRAGMA cipher_salt"


#: Attach the bound file as ``converted``, encrypted under the bound key ('': plain).
ATTACH_CONVERTED = "ATTACH DATABASE ? AS converted KEY ?"


def set_converted_user_version(version: int) -> str:
    """Carry ``user_version`` over to the converted copy (sqlcipher_export leaves it)."""
    return f"PRAGMA converted.user_version = {int(version)}"


def count_table_rows(table: str) -> str:
    """How many rows ``table`` holds (a name read from sqlite_master, quoted)."""
    quoted = '"' + table.replace('"', '""') + '"'
    return f"SELECT count(*) FROM {quoted}"
