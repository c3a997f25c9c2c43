"""What differs between the two SQL dialects, in SQL the package builds with peewee.

Each handle carries its dialect as methods (:class:`SqliteDialect`,
:class:`PostgresDialect`, classes the handles inherit: the interface is
:class:`hermes_models.store.backend.Backend`); the functions here ask the handle
the models use here (:func:`hermes_models.store.current`). Builders call them at
build time: statements are rendered once per store structure, and the dialect is
part of that structure (:attr:`hermes_models.store.shape.FileShape.dialect`), so
a statement rendered for one dialect never runs on the other. Hand-written SQL
lives in :mod:`hermes_models.store.sqlite_sql` and
:mod:`hermes_models.store.postgres_sql`.
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


#: ASCII capitals and their small letters (what SQLite's LIKE folds, and nothing more).
_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"
_TO_ASCII_LOWER = str.maketrans(_ASCII_UPPER, _ASCII_LOWER)


class SqliteDialect:
    """SQLite's spelling of what the dialects spell apart (the file handle's methods)."""

    #: Of a JSON object's key given twice, ``json_extract`` reads the first value.
    json_duplicate_key = "first"
    #: SQLite stores an integer sum past 2**63-1 as an inexact float: the caller checks.
    refuses_overflow = False
    #: A file another program made may lack Hermes' unique index on titles: read first.
    titles_unique_by_index = False

    def starts_with(self, field: Any, prefix: str) -> Expression:
        """``field`` begins with ``prefix``, compared exactly (case and every character).

        The bytes are compared: SQLite's text functions stop at a NUL character.
        """
        raw = prefix.encode("utf-8")
        return fn.substr(field.cast("BLOB"), 1, len(raw)) == raw

    def starts_with_ascii_nocase(self, field: Any, prefix: str) -> Expression:
        """``field`` begins with ``prefix``, ASCII letters compared without case (as
        ``LIKE 'prefix%'`` compares them); every other character exactly."""
        folded = prefix.translate(_TO_ASCII_LOWER)
        # lower() folds ASCII alone; read as bytes, a NUL does not end the text.
        raw = folded.encode("utf-8")
        match = fn.lower(fn.substr(field.cast("BLOB"), 1, len(raw))).cast("BLOB") == raw
        bounds = sqlite_sql.prefix_bounds(prefix)
        if bounds is None:
            return match
        # The part before the first letter matches exactly: a range of an index on
        # ``field`` (the primary key for ids) instead of a scan of every row.
        return cast("Expression", (field >= bounds[0]) & (field < bounds[1]) & match)

    def json_text(self, field: Any, key: str) -> Any:
        """``field``'s JSON object member ``key`` (NULL when absent, or when the text is
        not JSON: such a row is skipped, never an error)."""
        return fn.json_extract(Case(None, [(fn.json_valid(field), field)], None), f"$.{key}")

    def starts_with_nul(self, field: Any) -> Any:
        """``field`` begins with a NUL character, read as a range of the text (an index
        could serve it)."""
        return (field >= Value("\x00")) & (field < Value("\x01"))

    def position(self, haystack: Any, needle: Any) -> Any:
        """Where ``needle`` first starts in ``haystack`` (1-based; 0 when it does not)."""
        return fn.instr(haystack, needle)

    def limit_value(self, limit: int) -> int | None:
        """The value bound to a ``LIMIT`` for ``limit`` (-1 for no limit)."""
        return limit

    def literal_limit(self, limit: int) -> int | None:
        """The ``LIMIT`` written into a statement's SQL, or None to bind it: SQLite 3.53
        runs a listing with a bound LIMIT about 250 us slower than with the number
        written (3.40 does not; measured, not traced to its cause)."""
        return limit

    def json_array_length(self, field: Any) -> Any:
        """The length of ``field`` when it holds a JSON array, else NULL."""
        is_array = fn.json_valid(field) & (fn.json_type(field) == "array")
        return Case(None, [(is_array, fn.json_array_length(field))], None)

    def among(self, field: Any, values: Sequence[Any]) -> Expression:
        """``field`` is one of ``values``, however many, bound as one parameter: a JSON
        list read with ``json_each``."""
        return Expression(field, "IN", SQL(sqlite_sql.JSON_LIST, [json.dumps(list(values))]))

    def returning_id(self, insert: Any, column: Any) -> Any:
        """``insert`` as it is: the cursor's ``lastrowid`` gives the new row's id."""
        return insert

    def deepest_per_root(self, walk: Any) -> Any:
        """Each root's deepest row of ``walk``: SQLite returns the bare column ``id``
        from the row holding ``MAX(depth)``."""
        return walk.select_from(walk.c.root_id, walk.c.id, fn.MAX(walk.c.depth)).group_by(
            walk.c.root_id
        )


class PostgresDialect:
    """PostgreSQL's spelling of what the dialects spell apart (the server handle's methods)."""

    #: Of a JSON object's key given twice, ``jsonb`` keeps the last value.
    json_duplicate_key = "last"
    #: ``bigint`` and ``float8`` arithmetic that overflows is an error (SQLSTATE 22003).
    refuses_overflow = True
    #: Every server store has ``idx_sessions_title_unique`` (migration 0002).
    titles_unique_by_index = True

    def starts_with(self, field: Any, prefix: str) -> Expression:
        """``field`` begins with ``prefix``, compared exactly (case and every character)."""
        return fn.starts_with(field, prefix) == True  # noqa: E712 - SQL, not Python

    def starts_with_ascii_nocase(self, field: Any, prefix: str) -> Expression:
        """``field`` begins with ``prefix``, ASCII letters compared without case (as
        SQLite's ``LIKE 'prefix%'`` compares them); every other character exactly."""
        folded = prefix.translate(_TO_ASCII_LOWER)
        lowered = fn.translate(field, _ASCII_UPPER, _ASCII_LOWER)
        return fn.starts_with(lowered, folded) == True  # noqa: E712 - SQL, not Python

    def json_text(self, field: Any, key: str) -> Any:
        """``field``'s JSON object member ``key`` (NULL when absent, or when the text is
        not JSON). A NUL in the member (a JSON escape) reads as the store's escaped
        NUL, so that it equals a column holding the same text (a session id, say)."""
        doc = fn.regexp_replace(
            field, postgres_sql.JSON_NUL_PATTERN, postgres_sql.JSON_NUL_REPLACEMENT, "g"
        )
        return fn.hermes_json_text(doc, key)

    def starts_with_nul(self, field: Any) -> Any:
        """``field`` begins with a NUL character (stored escaped; the parameter is
        escaped alike)."""
        return fn.starts_with(field, "\x00") == True  # noqa: E712 - SQL, not Python

    def position(self, haystack: Any, needle: Any) -> Any:
        """Where ``needle`` first starts in ``haystack`` (1-based; 0 when it does not)."""
        return fn.strpos(haystack, needle)

    def limit_value(self, limit: int) -> int | None:
        """The value bound to a ``LIMIT`` for ``limit`` (NULL for no limit)."""
        return None if limit < 0 else limit

    def literal_limit(self, limit: int) -> int | None:
        """None: the ``LIMIT`` is always bound (one statement for every page size)."""
        return None

    def json_array_length(self, field: Any) -> Any:
        """The length of ``field`` when it holds a JSON array, else NULL."""
        return fn.hermes_json_array_length(field)

    def among(self, field: Any, values: Sequence[Any]) -> Expression:
        """``field`` is one of ``values``, however many, bound as one parameter: an
        array compared with ``ANY``."""
        # The converter keeps the field's own (str() of a text field) off the list.
        array = Value(list(values), converter=list, unpack=False)
        return Expression(field, "=", fn.ANY(array))

    def returning_id(self, insert: Any, column: Any) -> Any:
        """``insert`` returning the new row's id, ``column`` (the server has no last
        row id)."""
        return insert.returning(column)

    def deepest_per_root(self, walk: Any) -> Any:
        """Each root's deepest row of ``walk`` (``DISTINCT ON`` the root)."""
        return (
            walk.select_from(walk.c.root_id, walk.c.id, walk.c.depth)
            .distinct([walk.c.root_id])
            .order_by(walk.c.root_id, walk.c.depth.desc())
        )


# -- the handle the models use here, asked --------------------------------------------


def starts_with(field: Any, prefix: str) -> Expression:
    """``field`` begins with ``prefix``, compared exactly (:meth:`SqliteDialect.starts_with`)."""
    return cast("Expression", current().starts_with(field, prefix))


def starts_with_ascii_nocase(field: Any, prefix: str) -> Expression:
    """``field`` begins with ``prefix``, ASCII letters compared without case."""
    return cast("Expression", current().starts_with_ascii_nocase(field, prefix))


def json_text(field: Any, key: str) -> Any:
    """``field``'s JSON object member ``key`` (NULL when absent, or when the text is
    not JSON: such a row is skipped, never an error)."""
    return current().json_text(field, key)


def starts_with_nul(field: Any) -> Any:
    """``field`` begins with a NUL character (content stored as JSON does)."""
    return current().starts_with_nul(field)


def position(haystack: Any, needle: Any) -> Any:
    """Where ``needle`` first starts in ``haystack`` (1-based; 0 when it does not)."""
    return current().position(haystack, needle)


def limit_value(limit: int) -> int | None:
    """The value bound to a ``LIMIT`` for ``limit`` (negative: no limit)."""
    return current().limit_value(limit)


def json_array_length(field: Any) -> Any:
    """The length of ``field`` when it holds a JSON array, else NULL."""
    return current().json_array_length(field)


def among(field: Any, values: Sequence[Any]) -> Expression:
    """``field`` is one of ``values``, however many, bound as one parameter."""
    return cast("Expression", current().among(field, values))
