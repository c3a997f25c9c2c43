"""What differs between the two SQL dialects, in SQL the package builds with peewee.

Every builder that needs a function SQLite and PostgreSQL spell differently
asks here, at build time: statements are rendered once per store structure,
and the dialect is part of that structure
(:attr:`hermes_models.store.shape.FileShape.dialect`), so a statement rendered for
one dialect never runs on the other. Hand-written SQL lives in
:mod:`hermes_models.store.sqlite_sql` and :mod:`hermes_models.store.postgres_sql`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from peewee import SQL, Case, Expression, Value, fn

from . import postgres_sql, sqlite_sql
from .binding import current

if TYPE_CHECKING:
    from typing import Any

#: The dialect names.
SQLITE = "sqlite"
POSTGRESQL = "postgresql"


def dialect() -> str:
    """The dialect of the store the models use here."""
    return str(getattr(current(), "dialect", SQLITE))


def on_postgresql() -> bool:
    """True when the models use a PostgreSQL store here."""
    return dialect() == POSTGRESQL


def starts_with(field: Any, prefix: str) -> Expression:
    """``field`` begins with ``prefix``, compared exactly (case and every character).

    SQLite compares the bytes: its text functions stop at a NUL character.
    """
    if on_postgresql():
        return fn.starts_with(field, prefix) == True  # noqa: E712 - SQL, not Python
    raw = prefix.encode("utf-8")
    return fn.substr(field.cast("BLOB"), 1, len(raw)) == raw


#: ASCII capitals and their small letters (what SQLite's LIKE folds, and nothing more).
_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"
_TO_ASCII_LOWER = str.maketrans(_ASCII_UPPER, _ASCII_LOWER)


def starts_with_ascii_nocase(field: Any, prefix: str) -> Expression:
    """``field`` begins with ``prefix``, ASCII letters compared without case (as
    SQLite's ``LIKE 'prefix%'`` compares them); every other character exactly."""
    folded = prefix.translate(_TO_ASCII_LOWER)
    if on_postgresql():
        lowered = fn.translate(field, _ASCII_UPPER, _ASCII_LOWER)
        return fn.starts_with(lowered, folded) == True  # noqa: E712 - SQL, not Python
    # SQLite's lower() folds ASCII alone; read as bytes, a NUL does not end the text.
    raw = folded.encode("utf-8")
    match = fn.lower(fn.substr(field.cast("BLOB"), 1, len(raw))).cast("BLOB") == raw
    bounds = sqlite_sql.prefix_bounds(prefix)
    if bounds is None:
        return match
    # The part before the first letter matches exactly: a range of an index on
    # ``field`` (the primary key for ids) instead of a scan of every row.
    return cast("Expression", (field >= bounds[0]) & (field < bounds[1]) & match)


def json_text(field: Any, key: str) -> Any:
    """``field``'s JSON object member ``key`` (NULL when absent, or when the text is
    not JSON: such a row is skipped, never an error)."""
    if on_postgresql():
        # A NUL in the member (a JSON escape) reads as the store's escaped NUL, so that
        # it equals a column holding the same text (a session id, say).

        doc = fn.regexp_replace(
            field, postgres_sql.JSON_NUL_PATTERN, postgres_sql.JSON_NUL_REPLACEMENT, "g"
        )
        return fn.hermes_json_text(doc, key)
    return fn.json_extract(Case(None, [(fn.json_valid(field), field)], None), f"$.{key}")


def starts_with_nul(field: Any) -> Any:
    """``field`` begins with a NUL character (content stored as JSON does).

    SQLite reads it as a range of the text (an index could serve it);
    PostgreSQL stores NUL escaped, and the parameter is escaped alike.
    """
    if on_postgresql():
        return fn.starts_with(field, "\x00") == True  # noqa: E712 - SQL, not Python
    return (field >= Value("\x00")) & (field < Value("\x01"))


def position(haystack: Any, needle: Any) -> Any:
    """Where ``needle`` first starts in ``haystack`` (1-based; 0 when it does not)."""
    if on_postgresql():
        return fn.strpos(haystack, needle)
    return fn.instr(haystack, needle)


def limit_value(limit: int) -> int | None:
    """The value bound to a ``LIMIT`` for ``limit`` (-1: no limit, SQLite's way;
    PostgreSQL's is NULL)."""
    return None if limit < 0 and on_postgresql() else limit


def json_array_length(field: Any) -> Any:
    """The length of ``field`` when it holds a JSON array, else NULL."""
    if on_postgresql():
        return fn.hermes_json_array_length(field)
    is_array = fn.json_valid(field) & (fn.json_type(field) == "array")
    return Case(None, [(is_array, fn.json_array_length(field))], None)


def among(field: Any, values: Sequence[Any]) -> Expression:
    """``field`` is one of ``values``, however many, bound as one parameter: a JSON
    list SQLite reads with ``json_each``, an array PostgreSQL compares with ``ANY``."""
    if on_postgresql():
        # The converter keeps the field's own (str() of a text field) off the list.
        array = Value(list(values), converter=list, unpack=False)
        return Expression(field, "=", fn.ANY(array))
    return Expression(field, "IN", SQL(sqlite_sql.JSON_LIST, [json.dumps(list(values))]))
