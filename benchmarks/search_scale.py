"""Search at a million messages: every route against the simplest correct plain SQL.

The store is the corpus of ``benchmarks/search.py`` (English, Chinese,
Japanese, Korean; 2 % JSON content, 2 % soft-deleted; sessions of ten),
written with plain sqlite3 as another process would, then indexed for one-
and two-character CJK terms with ``update_search_index()`` (as
``hermes-models optimize`` does). It is shared with ``benchmarks/grams.py``.

For each query, ``SessionDB.search_messages(query)`` (first page of 20,
ranked, snippets and context, no time budget) is timed against, on a second
connection, the simplest correct plain SQL for the route, written by hand
here and not taken from the package:

* words: one ``MATCH`` on ``messages_fts`` ordered by ``rank`` with
  ``LIMIT 20``, the snippet and the session's columns in the same statement;
* CJK of three or more characters, alone or mixed with words that the
  trigram index can serve: one ``MATCH`` of every term on
  ``messages_fts_trigram``, ordered by ``rank``, ``LIMIT 20``; when that
  page is short, the rows the trigram index cannot read (JSON content, which
  starts with a NUL; the word index finds them by their ``json`` marker),
  matched by ``instr``, newest first, fill it;
* CJK of one or two characters: the gram index's candidate ids (plus rows
  above its mark and rows listed as changed), confirmed by ``LIKE``, newest
  first, ``LIMIT 20``, the snippet made in Python — and, in the last column,
  the same without the gram index: ``LIKE`` over messages newest first, which
  SQLite runs by walking ``idx_messages_time`` (migration 0008) and stopping
  after 20 hits: fast for a common term, a walk of the whole store for a rare
  one.

Both sides then read the context of each hit (the messages before and
after it), as a search result shows it. Rounds alternate which side runs
first; medians, and the median of the per-round ratios. "same" says whether
both returned the same ids (ties in rank may order a page differently;
the set is compared).

Run: python benchmarks/search_scale.py [--db PATH] [--messages N] [--rounds N]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grams import DEFAULT_DB, index, token
from search import build

from hermes_models import SessionDB

SESSION_COLUMNS = "m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model"
VISIBLE = "m.active = 1"  # a v16 file: tool rows are hits too


def ranked_sql(table: str) -> str:
    """One MATCH on ``table``, best first, a page of 20."""
    return (
        f"SELECT {SESSION_COLUMNS}, snippet({table}, 0, '>>>', '<<<', '...', 40)"
        f" FROM {table} JOIN messages m ON m.id = {table}.rowid"
        " JOIN sessions s ON s.id = m.session_id"
        f" WHERE {table} MATCH ?1 AND {VISIBLE} ORDER BY rank LIMIT 20"
    )


WORDS = ranked_sql("messages_fts")
TRIGRAM = ranked_sql("messages_fts_trigram")


def json_rows_sql(terms: int) -> str:
    """Rows the trigram index cannot read that hold every one of ``terms`` substrings."""
    found = " AND ".join(f"instr(lower(m.content), ?{k + 2}) > 0" for k in range(terms))
    return (
        f"SELECT {SESSION_COLUMNS}, m.content FROM messages m"
        " JOIN sessions s ON s.id = m.session_id"
        " WHERE m.id IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'json')"
        f" AND m.content >= char(0) AND m.content < char(1) AND {VISIBLE} AND {found}"
        " ORDER BY m.timestamp DESC, m.id DESC LIMIT ?1"
    )


GRAM_SQL = (
    f"SELECT {SESSION_COLUMNS}, m.content FROM messages m JOIN sessions s ON s.id = m.session_id"
    " WHERE m.id IN ("
    " SELECT rowid FROM messages_cjk WHERE messages_cjk MATCH ?2"
    " UNION SELECT id FROM messages WHERE id > (SELECT high_water FROM messages_cjk_mark)"
    " UNION SELECT id FROM messages_cjk_gone)"
    f" AND {VISIBLE} AND (m.content LIKE ?1 OR m.tool_name LIKE ?1 OR m.tool_calls LIKE ?1"
    " OR (m.content >= char(0) AND m.content < char(1) AND instr(m.content, ?3) > 0))"
    " ORDER BY m.timestamp DESC, m.id DESC LIMIT 20"
)
SCAN_SQL = (
    f"SELECT {SESSION_COLUMNS}, m.content FROM messages m JOIN sessions s ON s.id = m.session_id"
    f" WHERE {VISIBLE} AND (m.content LIKE ?1 OR m.tool_name LIKE ?1 OR m.tool_calls LIKE ?1"
    " OR (m.content >= char(0) AND m.content < char(1) AND instr(m.content, ?3) > 0))"
    " ORDER BY m.timestamp DESC, m.id DESC LIMIT 20"
)
BEFORE = (
    "SELECT role, content FROM messages WHERE session_id = ? AND id < ? AND active = 1"
    " ORDER BY id DESC LIMIT 1"
)
AFTER = (
    "SELECT role, content FROM messages WHERE session_id = ? AND id > ? AND active = 1"
    " ORDER BY id LIMIT 1"
)


def fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


#: name -> (query, plain SQL, its parameters)
QUERIES: dict[str, tuple[str, str, tuple[Any, ...]]] = {
    "word": ("checkpoint", WORDS, ('"checkpoint"',)),
    "two words": ("asyncio timeout", WORDS, ('"asyncio" "timeout"',)),
    "prefix": ("migrat*", WORDS, ('"migrat"*',)),
    "common word": ("the", WORDS, ('"the"',)),
    "phrase OR word": (
        '"event loop" OR vacuum',
        WORDS,
        ('"event loop" OR "vacuum"',),
    ),
    "trigram 4 CJK": ("事件循环", TRIGRAM, ('"事件循环"', "事件循环")),
    "trigram 3 CJK": ("数据库", TRIGRAM, ('"数据库"', "数据库")),
    "trigram 3 CJK (common)": ("的一是", TRIGRAM, ('"的一是"', "的一是")),
    "trigram 6 kana": (
        "データベース",
        TRIGRAM,
        ('"データベース"', "データベース"),
    ),
    "trigram 3 kana": ("セッシ", TRIGRAM, ('"セッシ"', "セッシ")),
    "mixed sqlite 数据库": (
        "sqlite 数据库",
        TRIGRAM,
        ('"sqlite" AND "数据库"', "sqlite", "数据库"),
    ),
    "mixed checkpoint 事件循环": (
        "checkpoint 事件循环",
        TRIGRAM,
        ('"checkpoint" AND "事件循环"', "checkpoint", "事件循环"),
    ),
    "2 CJK (common pair)": ("数据", GRAM_SQL, ("%数据%", token("数据"), "数据")),
    "2 CJK (rare pair)": ("国我", GRAM_SQL, ("%国我%", token("国我"), "国我")),
    "2 hangul": ("세션", GRAM_SQL, ("%세션%", token("세션"), "세션")),
    "1 CJK": ("数", GRAM_SQL, ("%数%", token("数"), "数")),
}


def plain_search(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[int]:
    """The page, its snippets, and the context of every hit."""
    if sql is TRIGRAM:
        rows = conn.execute(sql, params[:1]).fetchall()
        if len(rows) < 20:
            terms = params[1:]
            rows += conn.execute(json_rows_sql(len(terms)), (20 - len(rows), *terms)).fetchall()
    else:
        rows = conn.execute(sql, params).fetchall()
    needle = params[0].strip("%") if params[0].startswith("%") else None
    for row in rows:
        if needle is not None:  # the snippet of a LIKE hit, made in Python
            text = row[-1] or ""
            at = text.find(needle)
            _ = text[max(0, at - 60) : at] + ">>>" + needle + "<<<" + text[at + len(needle) :][:60]
        conn.execute(BEFORE, (row[1], row[0])).fetchall()
        conn.execute(AFTER, (row[1], row[0])).fetchall()
    return [row[0] for row in rows]


def behind(path: Path) -> bool:
    """Whether the gram index leaves messages out (messages above its mark)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (high_water,) = conn.execute("SELECT high_water FROM messages_cjk_mark").fetchone()
        (above,) = conn.execute(
            "SELECT count(*) FROM messages WHERE id > ?", (high_water,)
        ).fetchone()
    finally:
        conn.close()
    return bool(above)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--only", default=None, help="run only the queries whose name has this")
    parser.add_argument(
        "--first",
        action="store_true",
        help="before each of our searches, forget the counts a connection keeps while the"
        " file is unchanged (HermesDatabase.while_unchanged): time every search as the"
        " first search of its query",
    )
    args = parser.parse_args()
    path: Path = args.db
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {args.messages:,} messages in {path} (once) ...", flush=True)
        build(path, args.messages)
    with SessionDB(path, read_only=True) as reader:
        count = reader.message_count(include_inactive=True)
    if count != args.messages:
        raise SystemExit(f"{path} holds {count:,} messages, not {args.messages:,}")
    if behind(path):
        index(path)
    store = SessionDB(path, read_only=True)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"{count:,} messages; SQLite {sqlite3.sqlite_version}; medians of {args.rounds} rounds")
    header = (
        f"{'route':<22} {'query':<24} {'ours':>9} {'plain':>9} {'ratio':>6} {'same':>5}"
        f" {'LIKE only':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, (query, sql, params) in QUERIES.items():
        if args.only and args.only not in name:
            continue
        ours_ids = [hit["id"] for hit in store.search_messages(query, time_budget=None)]
        plain_ids = plain_search(conn, sql, params)
        same = "yes" if sorted(ours_ids) == sorted(plain_ids) else "no"
        ours: list[float] = []
        plain: list[float] = []
        for round_ in range(args.rounds):
            runs = [
                (ours, lambda q=query: store.search_messages(q, time_budget=None)),
                (plain, lambda s=sql, p=params: plain_search(conn, s, p)),
            ]
            if round_ % 2:
                runs.reverse()
            for into, run in runs:
                if args.first and into is ours:
                    store.database.forget_kept()
                into.append(timed(run))
        scan = ""
        if sql is GRAM_SQL:
            scan = f"{timed(lambda p=params: plain_search(conn, SCAN_SQL, p)) * 1e3:7.0f}ms"
        ratio = statistics.median(a / b for a, b in zip(ours, plain))
        print(
            f"{name:<22} {query:<24} {statistics.median(ours) * 1e3:7.1f}ms "
            f"{statistics.median(plain) * 1e3:7.1f}ms {ratio:6.2f} {same:>5} {scan:>9}",
            flush=True,
        )
    store.close()
    conn.close()


if __name__ == "__main__":
    main()
