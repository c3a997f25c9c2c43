"""Every SQL statement the package writes by hand for PostgreSQL, named.

The sibling of :mod:`hermes_models.sqlite_sql` for the second dialect: what
the PostgreSQL handle and its migrations runner send besides the SQL peewee
builds. Parameters are psycopg's ``%s``; a statement built from a name is a
small function, and the name is checked before it gets here
(:func:`hermes_models.postgres.parse_url` allows lower-case identifiers only).
"""

from __future__ import annotations

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


__all__ = [
    "COLUMNS",
    "READ_ONLY_SESSION",
    "SCHEMA_VERSION",
    "SEARCH_VECTOR_COLUMN",
    "TABLES",
    "TRGM_SCHEMA",
    "create_schema",
    "set_search_path",
]
