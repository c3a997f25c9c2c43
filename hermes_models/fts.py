"""Full-text search over messages.

Two FTS5 tables index every message (content, tool name and tool calls):
``messages_fts`` with the default tokenizer, ranked by BM25, and
``messages_fts_trigram`` for Chinese, Japanese and Korean substrings. The
migrations create them and their sync triggers; here they are peewee
``FTS5Model`` classes.
"""

from __future__ import annotations

from playhouse.sqlite_ext import FTS5Model, RowIDField, SearchField

from .db import database


class MessageIndex(FTS5Model):
    """``messages_fts``: words, ranked by BM25; ``rowid`` is ``messages.id``."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts"


class MessageTrigramIndex(FTS5Model):
    """``messages_fts_trigram``: substrings of three or more characters."""

    rowid = RowIDField()
    content = SearchField()

    class Meta:
        database = database
        table_name = "messages_fts_trigram"
        options = {"tokenize": "trigram"}
