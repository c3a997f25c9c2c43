"""Full-text search over messages.

Two FTS5 tables index every message (content, tool name and tool calls):
``messages_fts`` with the default tokenizer, ranked by BM25, and
``messages_fts_trigram`` for Chinese, Japanese and Korean substrings. The
migrations create them and their sync triggers; here they are peewee
``FTS5Model`` classes, and the search built on them.

A query (see :mod:`hermes_models.search.query`) is split into terms, each with a
route: words go to ``messages_fts``, CJK terms of three or more characters
to ``messages_fts_trigram``, shorter CJK terms to ``LIKE`` on ``messages``.
A query on one index is one ``MATCH`` ordered by rank, with FTS5 snippets;
any other mix becomes one ``WHERE`` over ``messages`` in which every term is
its own lookup, so ``OR`` and ``NOT`` keep their meaning across routes.

Which indexes exist is read from ``sqlite_master`` (the migrations skip them
on SQLite builds without FTS5 or the trigram tokenizer). Terms whose index
is missing, and every term of a query whose ``MATCH`` fails, are searched
with ``LIKE`` instead, after one warning: search degrades, it never raises.
Soft-deleted messages are hidden on every route unless asked for.

SQLite's trigram tokenizer and ``LIKE`` stop reading text at a NUL
character, and JSON content is stored behind a NUL prefix. Such rows are
also checked with ``instr()``, which reads all of the text; on the trigram
route they are found through the word index (the first token of every JSON
content row is ``json``: ``MATCH '^"json"'``).

A search is parsed in :mod:`hermes_models.search.query`, planned (routes, SQL,
values) in :mod:`hermes_models.search.plan`, run in :mod:`hermes_models.search.pipeline`
and shown by :mod:`hermes_models.search.present`; this module owns the index
models and knows which indexes the open file has.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from playhouse.sqlite_ext import FTS5Model, RowIDField, SearchField

from . import sqlite_sql
from .binding import current, database
from .caches import BoundedSet
from .grams import usable

#: The routes of a search term: the word index, the trigram index, or LIKE over messages.
WORDS, TRIGRAM, LIKE = "words", "trigram", "like"

logger = logging.getLogger("hermes_models")

#: Tokens of an FTS5 snippet.
SNIPPET_TOKENS = 40


class MessageIndex(FTS5Model):  # type: ignore[misc]
    """``messages_fts``: words, ranked by BM25; ``rowid`` is ``messages.id``."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts"


class MessageTrigramIndex(FTS5Model):  # type: ignore[misc]
    """``messages_fts_trigram``: substrings of three or more characters."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts_trigram"
        options = {"tokenize": "trigram"}  # noqa: RUF012 - peewee reads Meta as plain class data


class GramIndex(FTS5Model):  # type: ignore[misc]
    """``messages_cjk``: the gram index of one- and two-character CJK terms
    (:mod:`hermes_models.store.grams`; contentless, no positions); ``rowid`` is ``messages.id``."""

    rowid = RowIDField()
    grams = SearchField()

    class Meta:
        database = database
        table_name = sqlite_sql.GRAM_TABLE


#: The index model of each index route.
INDEXES: dict[str, type[FTS5Model]] = {WORDS: MessageIndex, TRIGRAM: MessageTrigramIndex}

# -- what the file has ---------------------------------------------------------------

_schema_cache: weakref.WeakKeyDictionary[Any, tuple[int, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)
_gram_cache: weakref.WeakKeyDictionary[Any, tuple[int, bool]] = weakref.WeakKeyDictionary()
_warned: BoundedSet[tuple[str, str]] = BoundedSet("search warnings", 256)


def available_routes() -> frozenset[str]:
    """The routes the open file can serve: LIKE always, each index when its table exists."""
    db = current()
    version = db.execute_sql(sqlite_sql.SCHEMA_COOKIE).fetchone()[0]
    cached = _schema_cache.get(db)
    if cached is not None and cached[0] == version:
        return cached[1]
    shape = db.shape
    if shape is not None and not shape.fts_servable:
        # Hermes marked its indexes stale, or is rebuilding them: they miss rows.
        warn_once(
            "stale",
            "%s: the file's full-text indexes are marked stale or half rebuilt by Hermes; "
            "searching with LIKE until Hermes rebuilds them",
            db.path,
        )
        routes = frozenset({LIKE})
        _schema_cache[db] = (version, routes)
        return routes
    names = {model._meta.table_name: route for route, model in INDEXES.items()}
    rows = db.execute_sql(sqlite_sql.TABLES_NAMED, list(names)).fetchall()
    routes = frozenset({LIKE, *(names[row[0]] for row in rows)})
    _schema_cache[db] = (version, routes)
    return routes


def gram_index_ready() -> bool:
    """True when the open file has the gram index (:mod:`hermes_models.store.grams`) and this
    SQLite build can read it.

    As of the schema :func:`available_routes` saw last on this handle: a search asks
    that first, so the schema is read once per search, not twice. Without such a
    reading, the schema is read here.
    """
    db = current()
    known = _schema_cache.get(db)
    if known is not None:
        version = known[0]
    else:
        version = db.execute_sql(sqlite_sql.SCHEMA_COOKIE).fetchone()[0]
    cached = _gram_cache.get(db)
    if cached is not None and cached[0] == version:
        return cached[1]
    shape = db.shape
    ready = (shape is None or shape.fts_servable) and usable(db.connection())
    _gram_cache[db] = (version, ready)
    return ready


def present_indexes() -> list[type[FTS5Model]]:
    """The index models whose tables the open file has."""
    routes = available_routes()
    return [model for route, model in INDEXES.items() if route in routes]


def warn_once(reason: str, message: str, *args: Any) -> None:
    """Log ``message`` as a warning once per database file and ``reason``."""
    if _warned.add((str(getattr(current(), "path", "")), reason)):
        logger.warning(message, *args)
