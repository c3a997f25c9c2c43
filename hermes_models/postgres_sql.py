"""Every SQL statement the package writes by hand for PostgreSQL, named.

The sibling of :mod:`hermes_models.sqlite_sql` for the second dialect: what
the PostgreSQL handle and its migrations runner send besides the SQL peewee
builds. Parameters are psycopg's ``%s``; a statement built from a name is a
small function, and the name is checked before it gets here
(:func:`hermes_models.postgres.parse_url` allows lower-case identifiers only).
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

#: The Hermes schema version the store holds.
SCHEMA_VERSION = "SELECT max(version) FROM schema_version"

#: Transactions of a read-only handle refuse writes.
READ_ONLY_SESSION = "SET default_transaction_read_only = on"

#: A column of ``messages`` that is PostgreSQL's word index, not part of the store.
SEARCH_VECTOR_COLUMN = "search_tsv"


def create_schema(name: str) -> str:
    """Create the profile schema ``name`` (a checked identifier) when missing."""
    return f'CREATE SCHEMA IF NOT EXISTS "{name}"'


def set_search_path(path: str) -> str:
    """Make ``path`` (checked identifiers, comma-separated) the connection's search path."""
    return f"SET search_path TO {path}"


# -- copy --
# hermes_models.copy: a whole store moved to another server, schema or file, and checked.

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


__all__ = [
    "BEGIN_SNAPSHOT",
    "COLUMNS",
    "COMMIT",
    "COPY_LOCK_ROWS",
    "COPY_MESSAGES_PRESENT",
    "COPY_MESSAGE_COUNTS",
    "COPY_META_ROWS",
    "COPY_ORPHAN_MESSAGES",
    "COPY_SESSIONS_PRESENT",
    "COPY_SESSION_LINKS",
    "COPY_SET_PARENT",
    "DELETE_META",
    "HIGHEST_MESSAGE_ID",
    "MESSAGE_SEQUENCE",
    "META_VALUE",
    "READ_ONLY_SESSION",
    "ROLLBACK",
    "SCHEMA_VERSION",
    "SEARCH_VECTOR_COLUMN",
    "SET_MESSAGE_SEQUENCE",
    "TABLES",
    "TRGM_SCHEMA",
    "UPSERT_META",
    "copy_into",
    "copy_messages_of_sessions",
    "copy_sessions_in_list",
    "count_rows",
    "create_schema",
    "insert_or_ignore",
    "quote",
    "set_search_path",
]
