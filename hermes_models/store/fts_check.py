"""FTS5's own check of a search index, telling a difference of SQLite versions from a fault.

FTS5's ``'integrity-check'`` reads every row's stored text again with this
SQLite's tokenizer and compares the terms with those the index holds. The
trigram tokenizer of older SQLite (3.40 among them) reads a text only up to its
first NUL character; later ones read all of it. Multimodal content is stored as
``"\\x00json:..."``, so a row one version indexed fails the other version's
check although nothing is wrong: ``PRAGMA integrity_check`` (before 3.44, which
added FTS5's check to it) passes, and searches find what they found.

:func:`check_index` runs the check; when it fails and the index has rows holding
a NUL, it aligns, inside a savepoint it then rolls back, the stored text of each
row an older SQLite indexed (its term count is that of the text before the NUL)
with what that SQLite read, and checks again. A pass then is a version
difference, said as such; a failure is a fault. Rows a newer SQLite indexed
than the one running the check (more terms than it reads) cannot be aligned:
the index is then said to be unchecked, not faulty.

:func:`split_integrity` takes the lines of ``PRAGMA integrity_check`` that name a
search index (SQLite 3.44+) out of that check: the index's own check judges them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..driver import SQLITE_VERSION, sqlite3
from . import sqlite_sql

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class IndexCheck:
    """What :func:`check_index` found: ``ok``, a one-line ``detail``, and how many rows
    another SQLite version indexed (``older``: aligned and checked; ``newer``: this
    SQLite cannot check them)."""

    ok: bool
    detail: str
    older: int = 0
    newer: int = 0


_TOKENIZE = re.compile(r"""tokenize\s*=\s*('(?:[^']|'')*'|"(?:[^"]|"")*")""", re.IGNORECASE)


def _varint(blob: bytes) -> int:
    """The first of SQLite's variable-length integers in ``blob`` (FTS5's ``_docsize``)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return value


class _Counter:
    """Counts the terms this SQLite reads in a text, with the index's tokenizer."""

    def __init__(self, conn: sqlite3.Connection, table_sql: str) -> None:
        self.conn = conn
        found = _TOKENIZE.search(table_sql)
        conn.execute(sqlite_sql.DROP_TERM_COUNTER)
        conn.execute(sqlite_sql.term_counter(f", tokenize={found.group(1)}" if found else ""))

    def __call__(self, text: str) -> int:
        self.conn.execute(sqlite_sql.COUNT_TERMS_CLEAR)
        self.conn.execute(sqlite_sql.COUNT_TERMS_INSERT, (1, text))
        row = self.conn.execute(sqlite_sql.COUNT_TERMS_READ, (1,)).fetchone()
        return 0 if row is None else _varint(bytes(row[0]))

    def close(self) -> None:
        self.conn.execute(sqlite_sql.DROP_TERM_COUNTER)


def _align(conn: sqlite3.Connection, table: str, table_sql: str) -> tuple[int, int]:
    """Give each row an older SQLite indexed the text that SQLite read of it; (rows
    aligned, rows a newer SQLite indexed)."""
    rows = conn.execute(sqlite_sql.rows_holding_nul(table)).fetchall()
    if not rows:
        return 0, 0
    count = _Counter(conn, table_sql)
    older = newer = 0
    try:
        for row_id, text, sizes in rows:
            if not isinstance(text, str):
                continue
            stored, whole = _varint(bytes(sizes)), count(text)
            if stored == whole:
                continue
            before_nul = text.split("\x00", 1)[0]
            if stored == count(before_nul):
                conn.execute(sqlite_sql.set_stored_text(table), (before_nul, row_id))
                older += 1
            elif stored > whole:
                newer += 1
    finally:
        count.close()
    return older, newer


def check_index(conn: sqlite3.Connection, table: str, table_sql: str) -> IndexCheck:
    """FTS5's ``integrity-check`` of the search index ``table`` (created by ``table_sql``)
    on ``conn``, which must be able to write (nothing it changes is kept), telling a
    difference of SQLite versions from a fault (see the module's docstring).

    Raises:
        sqlite3.Error: the check could not run at all (no such tokenizer, no such table).
    """
    quoted = sqlite_sql.quote(table)
    try:  # "no such tokenizer", where the check itself may pass without a tokenizer
        conn.execute(sqlite_sql.fts_tokenizer_probe(quoted)).fetchall()
    except sqlite3.Error as exc:
        if "no such tokenizer" in str(exc):
            raise  # any other fault is the check's to report
    try:
        conn.execute(sqlite_sql.fts_integrity_check(quoted))
        return IndexCheck(True, "ok")
    except sqlite3.Error as exc:
        if "no such tokenizer" in str(exc) or "no such table" in str(exc):
            raise
        fault = str(exc)
    conn.execute(sqlite_sql.SAVEPOINT_CHECK)
    try:
        try:
            older, newer = _align(conn, table, table_sql)
        except sqlite3.Error:  # not an index with its own content: nothing to align
            return IndexCheck(False, fault)
        if not older and not newer:
            return IndexCheck(False, fault)
        try:
            conn.execute(sqlite_sql.fts_integrity_check(quoted))
        except sqlite3.Error as exc:
            if not newer:
                return IndexCheck(False, str(exc))
            return IndexCheck(True, _unchecked(newer, older), older, newer)
        return IndexCheck(True, _version_difference(older), older, newer)
    finally:
        conn.execute(sqlite_sql.ROLLBACK_TO_CHECK)
        conn.execute(sqlite_sql.RELEASE_CHECK)


def _version_difference(older: int) -> str:
    return (
        f"ok, with a version difference: {older} message(s) holding a NUL character "
        "(multimodal content, stored as \\x00json:...) were indexed by an older SQLite, "
        f"which reads such text only up to the NUL, where this SQLite ({SQLITE_VERSION}) "
        "reads all of it; FTS5's own check fails on them for that alone, and the index "
        "checks out as that SQLite wrote it. Nothing needs repair: searches find those "
        "messages either way"
    )


def _unchecked(newer: int, older: int) -> str:
    aligned = f" ({older} indexed by an older one were aligned)" if older else ""
    return (
        f"not checked: {newer} message(s) holding a NUL character were indexed by a newer "
        f"SQLite than this one ({SQLITE_VERSION}), which reads more of such text than this "
        f"one can{aligned}; check the file with SQLite 3.51.3 or later "
        "(`pip install pysqlite3`). Searches find those messages either way"
    )


def split_integrity(lines: Iterable[str], indexes: Iterable[str]) -> tuple[list[str], set[str]]:
    """The lines of ``PRAGMA integrity_check`` other than those naming one of the search
    ``indexes`` (which their own check judges), and the indexes named."""
    patterns = {name: re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])") for name in indexes}
    kept: list[str] = []
    named: set[str] = set()
    for line in lines:
        hits = [name for name, pattern in patterns.items() if pattern.search(line)]
        if hits:
            named.update(hits)
        else:
            kept.append(line)
    return kept, named
