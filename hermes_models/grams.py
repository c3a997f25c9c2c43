"""The gram index: one- and two-character CJK terms found from an index, not a scan.

Neither full-text index can find a Chinese, Japanese or Korean term of one
or two characters: the word index keeps a run of CJK characters as one
token, and the trigram index needs three characters. Such a term used to be
a ``LIKE`` over every message. The gram index lists, for each message, the
distinct CJK characters (unigrams) and pairs of adjacent CJK characters
(bigrams) of its content, tool name and tool calls, as ASCII tokens
(``u6570``, ``b6570g636e``) in a contentless FTS5 table without positions
(``messages_cjk``, created by migration 0007). A search asks it for the
messages that may hold a term and confirms each candidate with the same
substring test as before, so results are exactly those of the scan.

The index needs no tokenizer and no SQL function in the file: Hermes'
own processes keep writing the same file untouched. Our connections keep it
in step themselves, through TEMP triggers that exist only on our connection:

* ``messages_cjk_mark.high_water``: every message with an id up to it is in
  the index. A message we insert right above it is indexed in the same
  transaction and raises it. Rows written by anyone else (Hermes) stay
  above it until indexed: when we insert a message above such rows, the
  write indexes up to :data:`CATCH_UP_ROWS` of them before it commits (one
  such write in :data:`CATCH_UP_EVERY`);
  ``hermes-models optimize`` (:func:`catch_up`) indexes all of them, in
  short transactions. Never on open, never on a read.
* A search reads the rows above the mark, and the rows listed in
  ``messages_cjk_gone``, the way it reads every row without the index.
* ``messages_cjk_gone`` is filled by plain-SQL triggers in the file (so
  Hermes' deletes and updates fire them too) with the ids of indexed
  messages deleted or changed. Our own TEMP triggers remove the index
  entries of a message we delete or change (computed from its old text) and
  take its id off the list; an entry left by another process is cleared by
  :func:`rebuild`, which ``optimize`` runs when the list is not empty.

An FTS5 table is far smaller than a B-tree of the same pairs: a posting is
a varint or two (sizes measured on a million messages are in
``benchmarks/README.md``).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable

from . import sqlite_sql
from .driver import sqlite3, whole_arguments
from .hints import TYPE_CHECKING, cast

if TYPE_CHECKING:  # db imports this module to install the triggers on its connections
    from typing import Any

    from .db import HermesDatabase
    from .query import Term

#: Code point ranges that make a term CJK: Han (unified, extension A and B),
#: CJK symbols and punctuation, Hiragana, Katakana and Hangul syllables. (The
#: search language, :mod:`hermes_models.query`, routes terms by the same ranges.)
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x3000, 0x303F),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0xAC00, 0xD7AF),
)


@functools.cache
def _runs() -> re.Pattern[str]:
    """Runs of CJK characters (compiled on first use: it takes milliseconds, and
    ``import hermes_models`` stays short)."""
    return re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]+")


#: The FTS5 table of grams, the row holding the high-water mark, and the list of
#: indexed messages deleted or changed by a connection that did not update it.
TABLE = sqlite_sql.GRAM_TABLE
MARK_TABLE = sqlite_sql.GRAM_MARK_TABLE
GONE_TABLE = sqlite_sql.GRAM_GONE_TABLE

#: The SQL function our connections register to compute a message's grams.
GRAMS_FUNCTION = sqlite_sql.GRAMS_FUNCTION
#: The SQL function our TEMP trigger calls when it inserts a message it cannot index
#: yet (rows from another process lie below it, above the mark).
BEHIND_FUNCTION = sqlite_sql.BEHIND_FUNCTION

#: Rows above the mark a write transaction of ours indexes before it commits, and how
#: often: the first of every ``CATCH_UP_EVERY`` writes that insert a message above
#: rows another process wrote (catching up on each would make every append pay for
#: it; the rows left above the mark meanwhile are few, and a search reads them).
CATCH_UP_ROWS = 200
CATCH_UP_EVERY = 16

#: Rows :func:`catch_up` indexes per transaction when asked for everything
#: (each such transaction holds the write lock for well under a second).
CHUNK_ROWS = 2_000


def _cjk(char: str) -> bool:
    return _runs().fullmatch(char) is not None


def unigram(char: str) -> str:
    """The token of one CJK character."""
    return f"u{ord(char):x}"


def bigram(first: str, second: str) -> str:
    """The token of two adjacent CJK characters."""
    return f"b{ord(first):x}g{ord(second):x}"


def grams(*columns: object) -> str:
    """The tokens of every distinct CJK character and adjacent pair in ``columns``,
    space-separated ('' when there is none). Pairs never span two columns.

    A value that is not text is read as ``str(value)``, as the substring scan
    reads it.
    """
    out: set[str] = set()
    find = _runs().findall
    for column in columns:
        if column is None:
            continue
        for run in find(column if isinstance(column, str) else str(column)):
            out.update(unigram(char) for char in run)
            out.update(bigram(first, second) for first, second in itertools.pairwise(run))
    return " ".join(sorted(out))


@functools.lru_cache(maxsize=8)
def _cached_grams(*columns: object) -> str:
    return grams(*columns)


def _safe_grams(mask: int, *columns: object) -> str:
    # The TEMP triggers ask for one row's grams up to three times (two conditions and
    # the insert): a few recent answers are kept. Text holding a NUL comes as bytes
    # (flagged in ``mask``: see sqlite_sql.whole_text).
    try:
        return _cached_grams(*whole_arguments(mask, columns))
    except Exception:  # an SQL function must not raise into a write
        return ""


def term_match(term: Term) -> str:
    """The gram-index expression that finds every message holding ``term``: the bigram
    of a term of two CJK characters, else all of the term's CJK characters."""
    text = term.text
    if len(text) == 2 and _cjk(text[0]) and _cjk(text[1]):
        return bigram(text[0], text[1])
    chars = sorted({char for char in text if _cjk(char)})
    return "(" + " AND ".join(unigram(char) for char in chars) + ")"


def exact(term: Term) -> bool:
    """True when the gram index answers ``term`` exactly: one or two CJK characters."""
    text = term.text
    return 0 < len(text) <= 2 and all(_cjk(char) for char in text)


#: The ids the gram index lists for one expression of :func:`term_match`, but those of
#: rows others changed or deleted since (their entries may be stale: a scan decides them).
GRAM_IDS_SQL = sqlite_sql.GRAM_IDS
#: How many messages the gram index lists for one expression, counting up to a cap (the
#: second parameter): enough to tell a common term from a rare one without reading all.
GRAM_COUNT_SQL = sqlite_sql.GRAM_COUNT
#: A subquery of the ids of the messages that may hold what its ``match`` asks for.
candidates_sql = sqlite_sql.gram_candidates


def match_any(terms: Iterable[Term]) -> str:
    """One expression finding every message that holds any of ``terms``."""
    parts = sorted({term_match(term) for term in terms})
    return " OR ".join(parts)


# -- our connections keep the index in step ------------------------------------------------


def present(conn: sqlite3.Connection) -> bool:
    """True when the file has the gram index (migration 0007 on a build with FTS5)."""
    row = conn.execute(sqlite_sql.GRAM_TABLES_FOUND, (TABLE, MARK_TABLE, GONE_TABLE)).fetchone()
    return bool(row[0] == 3)


def usable(conn: sqlite3.Connection) -> bool:
    """True when the file has the gram index and this SQLite build can read it."""
    if not present(conn):
        return False
    try:
        conn.execute(sqlite_sql.OPEN_GRAM_TABLE)
    except sqlite3.Error:  # no FTS5 in this build: the table is inert
        return False
    return True


def install(conn: sqlite3.Connection, behind: Callable[[], None]) -> bool:
    """Register the SQL functions and the TEMP triggers on one writable connection of
    ours; ``behind()`` is called when a message we insert cannot be indexed yet.

    False (and nothing installed) when the file has no gram index or this
    SQLite build cannot run FTS5.
    """
    conn.create_function(GRAMS_FUNCTION, 4, _safe_grams, deterministic=True)

    def note_behind() -> None:
        behind()

    conn.create_function(BEHIND_FUNCTION, 0, note_behind)
    if not usable(conn):
        return False
    for sql in sqlite_sql.GRAM_TRIGGERS:
        conn.execute(sql)
    return True


def _rows_above(conn: Any, limit: int) -> list[tuple[Any, ...]]:
    return cast(
        "list[tuple[Any, ...]]",
        conn.execute(sqlite_sql.GRAM_ROWS_ABOVE, (limit,)).fetchall(),
    )


def index_rows_above(conn: Any, limit: int) -> int:
    """Index up to ``limit`` messages above the mark and raise it, in the caller's
    transaction; the number indexed."""
    rows = _rows_above(conn, limit)
    if not rows:
        return 0
    conn.executemany(
        sqlite_sql.INSERT_GRAMS,
        [(row[0], g) for row in rows if (g := grams(row[1], row[2], row[3]))],
    )
    conn.execute(sqlite_sql.SET_GRAM_MARK, (rows[-1][0],))
    return len(rows)


def status(db: HermesDatabase) -> dict[str, Any]:
    """Where the gram index stands: ``present``, ``high_water``, ``behind`` (messages
    above the mark), ``gone`` (ids listed as deleted or changed by others)."""
    conn = db.connection()
    if not present(conn):
        return {"present": False, "high_water": None, "behind": None, "gone": None}
    high_water = conn.execute(sqlite_sql.GRAM_MARK).fetchone()[0]
    behind = conn.execute(sqlite_sql.MESSAGES_ABOVE, (high_water,)).fetchone()[0]
    gone = conn.execute(sqlite_sql.GRAM_GONE_COUNT).fetchone()[0]
    return {"present": True, "high_water": high_water, "behind": behind, "gone": gone}


def catch_up(
    db: HermesDatabase,
    *,
    chunk: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Index every message above the mark, ``chunk`` rows per write transaction; the
    number indexed. ``progress(done, total)`` is called after each transaction.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of rows, got {chunk!r}")
    db.refuse_writes()
    state = status(db)
    if not state["present"]:
        return 0
    total = int(state["behind"])
    done = 0
    mark = int(state["high_water"])
    while True:
        if db.write(lambda: index_rows_above(db.connection(), chunk)) == 0:
            return done
        # Counted by the mark: the write itself may index a few more rows as it commits.
        conn = db.connection()
        new_mark = conn.execute(sqlite_sql.GRAM_MARK).fetchone()[0]
        done += conn.execute(sqlite_sql.MESSAGES_ABOVE_UP_TO, (mark, new_mark)).fetchone()[0]
        mark = new_mark
        if progress is not None:
            progress(done, max(total, done))


#: Leaf pages of the gram index a step of :func:`merge` writes: one write transaction of
#: about 0.1 s on the 1M-message store of ``benchmarks/grams.py``.
MERGE_PAGES = 1000
#: Segments from which :func:`merge` has work to do (one is merged already).
MERGE_FROM = 2
#: The most steps one :func:`merge` takes (others may keep adding segments meanwhile).
MERGE_STEPS_MAX = 10_000


def segments(db: HermesDatabase) -> int:
    """How many segments the gram index is in: each lookup searches every one."""
    return int(db.connection().execute(sqlite_sql.GRAM_SEGMENTS).fetchone()[0])


def merge(db: HermesDatabase, *, pages: int = MERGE_PAGES) -> int:
    """Merge the gram index's segments into one, ``pages`` leaf pages per write
    transaction (so no step holds the write lock long); the number of steps that
    merged something.

    Indexing in short transactions leaves a segment per transaction, which FTS5
    merges only partly as it goes (a dozen remain after indexing 1M messages); a
    term's lookup searches every segment. Merged, a rare pair's count takes 10 us
    instead of 25.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    if pages < 1:
        raise ValueError(f"pages must be a positive number of pages, got {pages!r}")
    db.refuse_writes()
    if segments(db) < MERGE_FROM:
        return 0
    steps = 0
    while steps < MERGE_STEPS_MAX:
        # The first step starts a merge of every segment (a negative amount); the
        # later ones go on with it. FTS5 changes two rows or more when it did work.
        amount = -pages if steps == 0 else pages

        def step(amount: int = amount) -> int:
            conn = db.connection()
            before = conn.total_changes
            conn.execute(sqlite_sql.GRAM_MERGE, (amount,))
            return int(conn.total_changes - before)

        if db.write(step) < 2:
            break
        steps += 1
    return steps


def rebuild(
    db: HermesDatabase,
    *,
    chunk: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Empty the gram index and fill it again from every message (clearing what the
    index still held of messages others deleted or changed); the number indexed.

    Emptying it lowers the mark to 0 in the same transaction, so a search
    during the rebuild reads the rows not yet indexed the slow way and
    finds exactly what it found before.
    """
    db.refuse_writes()
    if not status(db)["present"]:
        return 0

    def empty() -> None:
        conn = db.connection()
        conn.execute(sqlite_sql.EMPTY_GRAMS)
        conn.execute(sqlite_sql.RESET_GRAM_MARK)
        conn.execute(sqlite_sql.CLEAR_GRAM_GONE)

    db.write(empty)
    return catch_up(db, chunk=chunk, progress=progress)


__all__ = [
    "BEHIND_FUNCTION",
    "CATCH_UP_EVERY",
    "CATCH_UP_ROWS",
    "CHUNK_ROWS",
    "CJK_RANGES",
    "GONE_TABLE",
    "GRAMS_FUNCTION",
    "GRAM_COUNT_SQL",
    "GRAM_IDS_SQL",
    "MARK_TABLE",
    "MERGE_FROM",
    "MERGE_PAGES",
    "MERGE_STEPS_MAX",
    "TABLE",
    "bigram",
    "candidates_sql",
    "catch_up",
    "exact",
    "grams",
    "index_rows_above",
    "install",
    "match_any",
    "merge",
    "present",
    "rebuild",
    "segments",
    "status",
    "term_match",
    "unigram",
    "usable",
]
