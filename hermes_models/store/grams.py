"""The gram index: one- and two-character CJK terms found from an index, not a scan.

Neither full-text index can find a Chinese, Japanese or Korean term of one
or two characters: the word index keeps a run of CJK characters as one
token, and the trigram index needs three characters. Such a term used to be
a ``LIKE`` over every message. The gram index lists, for each message, the
distinct CJK characters (unigrams) and pairs of adjacent CJK characters
(bigrams) of its content, tool name and tool calls, each gram its own token
(``数``, ``数据``), in an FTS5 table without positions (``messages_cjk``,
migration 0009). A search asks it for the messages that may hold a term and
confirms each candidate with the same substring test as before, so results
are exactly those of the scan.

Three tables, all of them plain SQL or a built-in FTS5 table, so that
Hermes' own processes keep writing the file untouched (no tokenizer, no SQL
function of ours is in the file):

* ``messages_cjk_grams(id, grams)``, the *held* grams: for each message the
  index has entries of, exactly those entries, as text. It is the FTS5
  table's external content, so FTS5's own ``integrity-check`` (rank 1)
  proves the index holds what it says, and a message's entries can always
  be taken out - also when another program changed or deleted the message
  (its old text is gone, its held grams are not).
* ``messages_cjk_changed(id)``: the ids of messages inserted, changed (id,
  content, tool name, tool calls) or deleted since they were indexed. Three
  plain-SQL triggers in the file list them, whoever writes: Hermes, a
  ``sqlite3`` script, an ``INSERT OR REPLACE`` (its insert fires them), a
  copy, an import, a restore. There is no mark: an id is either listed here
  or its held grams are those of the message as it is now.
* ``messages_cjk``, the FTS5 table itself.

The rule every reader and writer keeps: **an id listed as changed is never
trusted to the index** - a search reads those rows themselves, the way it
reads every row without the index - **and an id not listed holds exactly
the grams of its message as it is** (none for a message without CJK text,
nothing for an id that is no message). :func:`refresh` is the one place an
id leaves the list: in one transaction it reads the message and its held
grams, takes the held ones out of the index, puts the new ones in, and
clears the id.

Who refreshes: each write of ours, before it commits, refreshes the ids it
changed itself (our TEMP triggers note them), and one write in
:data:`CATCH_UP_EVERY` also up to :data:`CATCH_UP_ROWS` ids others changed;
``hermes-models optimize`` (:func:`catch_up`) refreshes all of them in short
transactions. Never on open, never on a read.

How a deleted message's grams leave: a delete by anyone lists its id; the
next refresh finds no message and takes its held grams out of the index (FTS5
``'delete'``) and out of ``messages_cjk_grams``, in the same transaction.
Until then a search reads the id as changed, finds no row, and returns
nothing for it. ``fts5vocab`` stops listing a token once the last message
holding it is refreshed away.

Text that is not UTF-8 (another program's truncated write) is read as its
bytes decoded with U+FFFD for each invalid sequence (Python's
``errors="replace"``): the grams are those of that text, so every whole CJK
run is indexed and a run is cut at the damaged bytes, and the refresh never
fails on it (:func:`text_of`).

An FTS5 table is far smaller than a B-tree of the same pairs: a posting is
a varint or two (sizes measured on a million messages are in
``benchmarks/README.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import logging
import random
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..driver import sqlite3
from . import sqlite_sql, writes

if TYPE_CHECKING:
    from typing import Any

    from .backend import SqliteFile

logger = logging.getLogger("hermes_models")


class Term(Protocol):
    """A search term, as the gram index reads it: its text."""

    @property
    def text(self) -> str: ...


#: Code point ranges that make a term CJK: Han (unified, extension A and B),
#: CJK symbols and punctuation, Hiragana, Katakana and Hangul syllables. (The
#: search language, :mod:`hermes_models.search.query`, routes terms by the same ranges.)
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


#: The FTS5 table of grams, the grams it holds for each message, and the ids of
#: messages changed since they were indexed.
TABLE = sqlite_sql.GRAM_TABLE
HELD_TABLE = sqlite_sql.GRAM_HELD_TABLE
CHANGED_TABLE = sqlite_sql.GRAM_CHANGED_TABLE
#: The file's plain-SQL triggers that list changed ids.
FILE_TRIGGERS = sqlite_sql.GRAM_FILE_TRIGGERS

#: The SQL function our TEMP triggers call with each id a write of ours changes.
NOTE_FUNCTION = sqlite_sql.NOTE_FUNCTION

#: Ids others changed that a write of ours refreshes before it commits, and how often:
#: the first of every ``CATCH_UP_EVERY`` writes (refreshing them on each would make
#: every append pay for it; the rows left listed meanwhile are few, and a search reads
#: them). The ids a write changed itself are always refreshed in it.
CATCH_UP_ROWS = 200
CATCH_UP_EVERY = 16

#: Ids :func:`catch_up` refreshes per transaction when asked for everything (each such
#: transaction holds the write lock for well under a second).
CHUNK_ROWS = 2_000

#: The most messages ``doctor`` checks one by one; above it, a random sample of this
#: many (the held grams with no message, and FTS5's own check of the index against
#: the held grams, are whole on any store).
CHECK_ALL_UP_TO = 200_000
SAMPLE_ROWS = 20_000


def _cjk(char: str) -> bool:
    return _runs().fullmatch(char) is not None


def unigram(char: str) -> str:
    """The token of one CJK character: the character."""
    return char


def bigram(first: str, second: str) -> str:
    """The token of two adjacent CJK characters: the two characters."""
    return first + second


def quoted(token: str) -> str:
    """``token`` as an FTS5 string (a gram holds no double quote, but a query could)."""
    return '"' + token.replace('"', '""') + '"'


def grams(*columns: object) -> str:
    """The tokens of every distinct CJK character and adjacent pair in ``columns``,
    space-separated, sorted ('' when there is none). Pairs never span two columns.

    A value that is not text is read as ``str(value)``, as the substring scan
    reads it (so a BLOB, which ``LIKE`` never matches, has none).
    """
    out: set[str] = set()
    find = _runs().findall
    for column in columns:
        if column is None:
            continue
        for run in find(column if isinstance(column, str) else str(column)):
            out.update(run)
            out.update(first + second for first, second in itertools.pairwise(run))
    return " ".join(sorted(out))


def text_of(value: bytes | None) -> str | None:
    """A text column read as bytes (:data:`hermes_models.store.sqlite_sql.GRAM_ROWS`), as the
    text the gram index reads: UTF-8, each invalid sequence as U+FFFD."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("utf-8", "replace")


def is_damaged(*values: bytes | None) -> bool:
    """True when one of the text columns ``values`` (bytes) is not UTF-8."""
    for value in values:
        if value is None:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return False


def term_match(term: Term) -> str:
    """The gram-index expression that finds every message holding ``term``: the bigram
    of a term of two CJK characters, else all of the term's CJK characters."""
    text = term.text
    if len(text) == 2 and _cjk(text[0]) and _cjk(text[1]):
        return quoted(bigram(text[0], text[1]))
    chars = sorted({char for char in text if _cjk(char)})
    return "(" + " AND ".join(quoted(unigram(char)) for char in chars) + ")"


def exact(term: Term) -> bool:
    """True when the gram index answers ``term`` exactly: one or two CJK characters."""
    text = term.text
    return 0 < len(text) <= 2 and all(_cjk(char) for char in text)


#: The ids the gram index lists for one expression of :func:`term_match`, but those of
#: rows changed since they were indexed (a scan decides them).
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


# -- what the file has ------------------------------------------------------------------------


def present(conn: sqlite3.Connection) -> bool:
    """True when the file has the gram index whole: its three tables and the three
    triggers that list changed ids (migration 0009 on a build with FTS5)."""
    names = (TABLE, HELD_TABLE, CHANGED_TABLE, *FILE_TRIGGERS)
    row = conn.execute(sqlite_sql.GRAM_OBJECTS_FOUND, names).fetchone()
    return bool(row[0] == len(names))


def usable(conn: sqlite3.Connection) -> bool:
    """True when the file has the gram index whole and this SQLite build can read it.

    Without its triggers the index could miss any change: a search then reads every
    row (``doctor`` says so; the next open that can write puts them back and lists
    every message as changed)."""
    if not present(conn):
        return False
    try:
        conn.execute(sqlite_sql.OPEN_GRAM_TABLE)
    except sqlite3.Error:  # no FTS5 in this build: the table is inert
        return False
    return True


def install(conn: sqlite3.Connection, note: Callable[[int], None]) -> bool:
    """Register the SQL function and the TEMP triggers by which one writable connection
    of ours notes the ids its writes change (``note(id)`` for each), so that the
    write refreshes them before it commits.

    False (and nothing installed) when the file has no gram index or this SQLite build
    cannot run FTS5.
    """

    def noted(message_id: object) -> None:
        if isinstance(message_id, int):
            note(message_id)

    conn.create_function(NOTE_FUNCTION, 1, noted)
    if not usable(conn):
        return False
    for sql in sqlite_sql.GRAM_TRIGGERS:
        conn.execute(sql)
    return True


# -- refreshing: the one way an id leaves the list of changed ones ----------------------------


@dataclasses.dataclass
class Refreshed:
    """What :func:`refresh` did: ids looked at, those whose entries it rewrote, and
    those whose text is not UTF-8 (indexed as read with U+FFFD)."""

    looked: int = 0
    rewritten: int = 0
    damaged: list[int] = dataclasses.field(default_factory=list)

    def add(self, other: Refreshed) -> None:
        self.looked += other.looked
        self.rewritten += other.rewritten
        self.damaged.extend(other.damaged)


def _grams_of_row(row: Sequence[Any]) -> str:
    return grams(text_of(row[1]), text_of(row[2]), text_of(row[3]))


def _note_damaged(message_id: int) -> None:
    # Once per change of the message: a refreshed id is not refreshed again until then.
    logger.warning(
        "message %d holds text that is not UTF-8: indexed as read with replacement characters",
        message_id,
    )


def refresh(conn: Any, ids: Sequence[int]) -> Refreshed:
    """Bring the index in step with the messages ``ids`` as they are now, in the caller's
    transaction: take out what it holds for each (the held grams), put in the grams
    of its text, and take the ids off the list of changed ones.

    Exact whatever happened to a message since it was indexed (changed, deleted,
    replaced, another message put at its id): the held grams say what to take out.
    """
    done = Refreshed()
    if not ids:
        return done
    if len(ids) > CHUNK_ROWS:
        for start in range(0, len(ids), CHUNK_ROWS):
            done.add(refresh(conn, ids[start : start + CHUNK_ROWS]))
        return done
    if len(ids) == 1:
        rows = conn.execute(sqlite_sql.GRAM_ROW, (ids[0], ids[0], ids[0])).fetchall()
    else:
        rows = conn.execute(sqlite_sql.GRAM_ROWS, (json.dumps(list(ids)),)).fetchall()
    unindex: list[tuple[int, str]] = []
    index: list[tuple[int, str]] = []
    for row in rows:
        message_id, held = int(row[0]), row[4] or ""
        new = _grams_of_row(row)
        if is_damaged(row[1], row[2], row[3]):
            done.damaged.append(message_id)
            _note_damaged(message_id)
        if new == held:
            continue
        if held:
            unindex.append((message_id, held))
        if new:
            index.append((message_id, new))
        done.rewritten += 1
    if unindex:
        conn.executemany(sqlite_sql.UNINDEX_GRAMS, unindex)
        conn.executemany(sqlite_sql.UNHOLD_GRAMS, [(i,) for i, _ in unindex])
    if index:
        conn.executemany(sqlite_sql.HOLD_GRAMS, index)
        conn.executemany(sqlite_sql.INDEX_GRAMS, index)
    if len(ids) == 1:
        conn.execute(sqlite_sql.CLEAR_CHANGED_ONE, (ids[0],))
    else:
        conn.execute(sqlite_sql.CLEAR_CHANGED, (json.dumps(list(ids)),))
    done.looked = len(rows)
    return done


def changed_ids(conn: Any, limit: int) -> list[int]:
    """Up to ``limit`` ids listed as changed, lowest first."""
    return [int(row[0]) for row in conn.execute(sqlite_sql.CHANGED_IDS, (limit,)).fetchall()]


def refresh_changed(conn: Any, limit: int) -> Refreshed:
    """:func:`refresh` up to ``limit`` of the ids listed as changed, in the caller's
    transaction."""
    return refresh(conn, changed_ids(conn, limit))


def status(db: SqliteFile) -> dict[str, Any]:
    """Where the gram index stands: ``present``, ``changed`` (messages changed since they
    were indexed: a search reads them itself), ``held`` (messages it holds grams of)."""
    conn = db.connection()
    if not present(conn):
        return {"present": False, "changed": None, "held": None}
    changed = conn.execute(sqlite_sql.CHANGED_COUNT).fetchone()[0]
    held = conn.execute(sqlite_sql.HELD_COUNT).fetchone()[0]
    return {"present": True, "changed": int(changed), "held": int(held)}


def catch_up(
    db: SqliteFile,
    *,
    chunk: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Refresh every id listed as changed, ``chunk`` ids per write transaction; the number
    refreshed. ``progress(done, total)`` is called after each transaction.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of rows, got {chunk!r}")
    db.refuse_writes()
    state = status(db)
    if not state["present"] or not usable(db.connection()):
        return 0
    total = int(state["changed"])
    done = 0
    while True:
        step = db.write(lambda: refresh_changed(db.connection(), chunk))
        if not step.looked:
            return done
        done += step.looked
        if progress is not None:
            progress(done, max(total, done))


#: Leaf pages of the gram index a step of :func:`merge` writes: one write transaction of
#: about 0.1 s on the 1M-message store of ``benchmarks/grams.py``.
MERGE_PAGES = 1000
#: Leaf pages of a full-text index a step of :func:`merge_in_steps` writes (erase,
#: retention, redaction): 30-40 ms a step on a trigram index 600 sessions were just
#: deleted from, where 1,000 pages took up to 0.5 s; the whole merge costs no more.
STEP_PAGES = 250
#: Segments from which :func:`merge` has work to do (one is merged already).
MERGE_FROM = 2
#: The most steps one :func:`merge` takes (others may keep adding segments meanwhile).
MERGE_STEPS_MAX = 10_000


def segments(db: SqliteFile) -> int:
    """How many segments the gram index is in: each lookup searches every one."""
    return int(db.connection().execute(sqlite_sql.GRAM_SEGMENTS).fetchone()[0])


def merge(db: SqliteFile, *, pages: int = MERGE_PAGES) -> int:
    """Merge the gram index's segments into one, ``pages`` leaf pages per write
    transaction (so no step holds the write lock long); the number of steps that
    merged something.

    Indexing in short transactions leaves a segment per transaction, which FTS5
    merges only partly as it goes (a dozen remain after indexing 1M messages); a
    term's lookup searches every segment. Merged, a rare pair's count takes 10 us
    instead of 25. A merge killed between two steps leaves the index whole (each
    step is a transaction) in more than one segment: the next merge goes on.

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    return merge_in_steps(db, sqlite_sql.GRAM_TABLE, pages=pages)


def merge_in_steps(db: SqliteFile, table: str, *, pages: int = STEP_PAGES) -> int:
    """Merge the segments of the FTS5 index ``table`` into one, ``pages`` leaf pages per
    write transaction, so a writer beside it waits for one step at most; the number of
    steps that merged something. Merged into one segment, the index keeps no entry of
    a deleted row (those live on in older segments until their merge).

    Raises:
        ReadOnlyDatabaseError: the handle cannot write.
    """
    if pages < 1:
        raise ValueError(f"pages must be a positive number of pages, got {pages!r}")
    db.refuse_writes()
    count = sqlite_sql.fts_segments(table)
    if int(db.connection().execute(count).fetchone()[0]) < MERGE_FROM:
        return 0
    statement = sqlite_sql.fts_merge(table)
    steps = 0
    pacer = writes.Pacer(db=db)  # a writer waiting gets the lock between steps
    while steps < MERGE_STEPS_MAX:
        # The first step starts a merge of every segment (a negative amount); the
        # later ones go on with it. FTS5 changes two rows or more when it did work.
        amount = -pages if steps == 0 else pages

        def step(amount: int = amount) -> int:
            conn = db.connection()
            before = conn.total_changes
            conn.execute(statement, (amount,))
            return int(conn.total_changes - before)

        if pacer.run(functools.partial(db.write, step)) < 2:
            break
        steps += 1
    return steps


def rebuild(
    db: SqliteFile,
    *,
    chunk: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Empty the gram index and fill it again from every message; the number indexed.

    Emptying it lists every message as changed in the same transaction, so a search
    during the rebuild reads the rows not yet indexed itself and finds exactly what
    it found before.
    """
    db.refuse_writes()
    if not status(db)["present"]:
        return 0

    def empty() -> None:
        conn = db.connection()
        conn.execute(sqlite_sql.EMPTY_GRAMS)
        conn.execute(sqlite_sql.EMPTY_HELD)
        conn.execute(sqlite_sql.ALL_CHANGED)

    db.write(empty)
    return catch_up(db, chunk=chunk, progress=progress)


# -- checking the index by what it holds -------------------------------------------------------


@dataclasses.dataclass
class GramCheck:
    """What :func:`check` found.

    ``checked`` messages were compared (all ``messages`` of the store, or a random
    sample: ``sampled``); ``wrong`` are the ids whose held grams differ from the grams
    of their text (missing, stale or extra entries); ``stray`` the ids the index holds
    grams of that are no message; ``damaged`` the checked messages whose text is not
    UTF-8; ``changed`` how many ids are listed as changed (a search reads those itself,
    so they are no fault). ``index_ok`` is FTS5's own check that the index holds
    exactly the held grams (None when it was not run), with ``index_detail``.
    """

    messages: int = 0
    checked: int = 0
    sampled: bool = False
    changed: int = 0
    wrong: list[int] = dataclasses.field(default_factory=list)
    stray: list[int] = dataclasses.field(default_factory=list)
    damaged: list[int] = dataclasses.field(default_factory=list)
    index_ok: bool | None = None
    index_detail: str = ""

    @property
    def ok(self) -> bool:
        """True when no message diverges and FTS5 found the index whole."""
        return not self.wrong and not self.stray and self.index_ok is not False


def _compare(rows: Iterable[Sequence[Any]], found: GramCheck) -> None:
    for row in rows:
        found.checked += 1
        if is_damaged(row[1], row[2], row[3]):
            found.damaged.append(int(row[0]))
        if _grams_of_row(row) != (row[4] or ""):
            found.wrong.append(int(row[0]))


def check(
    db: SqliteFile,
    *,
    ids: Sequence[int] | None = None,
    sample: int | None = None,
    chunk: int = CHUNK_ROWS * 5,
    rng: random.Random | None = None,
) -> GramCheck:
    """Compare what the gram index holds with the text of the messages, by reading both
    (not by any mark): for each message not listed as changed, its held grams must be
    the grams of its text; each id it holds grams of must be a message (or listed as
    changed). Reads only, in one snapshot when the caller holds a read transaction.

    ``ids``: only those messages (a copy's or an import's); else every message, or,
    on a store of more than ``sample`` messages (default :data:`CHECK_ALL_UP_TO`), a
    random sample of :data:`SAMPLE_ROWS` of them. FTS5's own check of the index
    against the held grams is :func:`index_integrity` (it needs a write lock, or a
    scratch copy: ``doctor`` makes one).
    """
    conn = db.connection()
    found = GramCheck()
    if not present(conn):
        return found
    found.messages = int(conn.execute(sqlite_sql.MESSAGES_COUNT).fetchone()[0])
    found.changed = int(conn.execute(sqlite_sql.CHANGED_COUNT).fetchone()[0])
    found.stray = [int(row[0]) for row in conn.execute(sqlite_sql.GRAM_STRAY).fetchall()]
    limit = CHECK_ALL_UP_TO if sample is None else sample
    if ids is None and found.messages > limit:
        every = [int(row[0]) for row in conn.execute(sqlite_sql.MESSAGE_IDS).fetchall()]
        ids = sorted((rng or random.Random()).sample(every, min(SAMPLE_ROWS, len(every))))
        found.sampled = True
    if ids is not None:
        for start in range(0, len(ids), chunk):
            part = json.dumps(list(ids[start : start + chunk]))
            _compare(conn.execute(sqlite_sql.GRAM_CHECK_LISTED, (part,)).fetchall(), found)
        return found
    after = -(2**63)
    while True:
        rows = conn.execute(sqlite_sql.GRAM_CHECK_ROWS, (after, chunk)).fetchall()
        if not rows:
            return found
        _compare(rows, found)
        after = int(rows[-1][0])


def index_integrity(conn: sqlite3.Connection) -> str | None:
    """FTS5's check that the gram index holds exactly the held grams (its content
    table), on ``conn`` (it writes: run it on a scratch copy or under the write
    lock); None when whole, else what FTS5 said."""
    try:
        conn.execute(sqlite_sql.GRAM_INTEGRITY)
    except sqlite3.Error as exc:
        return str(exc)
    return None


def relist(db: SqliteFile, ids: Iterable[int]) -> int:
    """List ``ids`` as changed again (divergences :func:`check` found), in one short
    write: searches read them themselves from then on; :func:`catch_up` indexes them.
    The number of ids given."""
    listed = sorted(set(ids))
    if listed:
        db.write(lambda: db.connection().execute(sqlite_sql.MARK_CHANGED, (json.dumps(listed),)))
    return len(listed)


def update(
    db: SqliteFile, *, again: bool, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Bring the index up to date on ``db`` (see
    :func:`hermes_models.conversations.maintenance.update_gram_index`): what it holds
    wrongly listed again (checked as ``doctor`` checks it), then every listed message
    indexed, a chunk per short write transaction, or (``again``) every message after
    emptying it; then its segments merged, a few pages per write."""
    state = status(db)
    if not state["present"] or not db.ensure_grams():
        return {"present": False, "rebuilt": False, "indexed": 0, "changed": None, "merged": 0}
    if again:
        indexed = rebuild(db, progress=progress)
    else:
        found = check(db)
        if found.wrong or found.stray:
            relist(db, [*found.wrong, *found.stray])
        indexed = catch_up(db, progress=progress)
    merged = merge(db)  # the segments those transactions left, in short steps
    state = status(db)
    return {
        "present": True,
        "rebuilt": again,
        "indexed": indexed,
        "changed": state["changed"],
        "merged": merged,
    }
