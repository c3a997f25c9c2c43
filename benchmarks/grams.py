"""The gram index at scale: building it, its size, and 1-2 character CJK searches.

The store is the corpus of ``benchmarks/search.py`` (English, Chinese,
Japanese, Korean; 2 % JSON content, 2 % soft-deleted), written with plain
sqlite3 as another process would, so nothing is indexed at first. Then:

1. ``update_search_index()`` indexes every message, 2,000 per write
   transaction; printed: the total time and the longest transaction (how long
   a concurrent writer could wait), timed through the progress callback.
2. The size of the index (``dbstat``) beside the file's.
3. For 1- and 2-character terms, ``search_messages`` (first page of 20, no
   time budget) against, on a second connection, the simplest correct plain
   SQL without the index (one ``LIKE`` per column, newest first, ``LIMIT
   20``), and with it (the index's ids and the rows listed as changed, confirmed by
   ``LIKE``). Rounds alternate; medians.

Run: python benchmarks/grams.py [--db PATH] [--messages N] [--rounds N]
(an existing --db file with the right number of messages is reused; its index
is built only if it is not built yet).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from search import build

from hermes_models import SessionDB

DEFAULT_DB = Path("/tmp/hermes-grams/state.db")

TERMS = {
    "2 CJK (common pair)": "数据",
    "2 CJK (random pair)": "国我",
    "2 kana": "セッ",
    "2 hangul": "세션",
    "1 CJK": "数",
    "1 kana": "ン",
    "2 CJK OR 2 CJK": "数据 OR 国我",
    "2 CJK NOT 1 CJK": "数据 NOT 库",
}

SCAN_SQL = (
    "SELECT id FROM messages WHERE active = 1"
    " AND (content LIKE ?1 OR tool_name LIKE ?1 OR tool_calls LIKE ?1)"
    " ORDER BY timestamp DESC, id DESC LIMIT 20"
)
INDEXED_SQL = (
    "SELECT id FROM messages WHERE id IN ("
    " SELECT rowid FROM messages_cjk WHERE messages_cjk MATCH ?2"
    " UNION SELECT id FROM messages_cjk_changed)"
    " AND active = 1 AND (content LIKE ?1 OR tool_name LIKE ?1 OR tool_calls LIKE ?1)"
    " ORDER BY timestamp DESC, id DESC LIMIT 20"
)


def token(term: str) -> str:
    """The gram-index expression of a single 1-2 character term (the token is the term)."""
    return '"' + term + '"'


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def index(path: Path) -> None:
    with SessionDB(path) as store:
        last = [time.perf_counter()]
        longest = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.perf_counter()
            longest[0] = max(longest[0], now - last[0])
            last[0] = now

        start = time.perf_counter()
        result = store.update_search_index(progress=progress)
        took = time.perf_counter() - start
    print(
        f"indexed {result['indexed']:,} messages in {took:.1f} s; longest transaction "
        f"{longest[0] * 1e3:.0f} ms (2,000 rows each)"
    )


def sizes(path: Path) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    finally:
        conn.close()
    total = sum(size for _, size in rows)
    grams = sum(size for name, size in rows if name.startswith("messages_cjk"))
    trigram = sum(size for name, size in rows if name.startswith("messages_fts_trigram"))
    print(
        f"file {total / 2**20:,.0f} MiB; gram index {grams / 2**20:,.1f} MiB "
        f"({grams / total:.1%}); trigram index {trigram / 2**20:,.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
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
    index(path)
    sizes(path)
    store = SessionDB(path, read_only=True)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"{count:,} messages; SQLite {sqlite3.sqlite_version}; medians of {args.rounds} rounds")
    header = f"{'term':<22} {'ours':>9} {'plain+index':>12} {'plain scan':>11} {'vs scan':>8}"
    print(header)
    print("-" * len(header))
    for name, text in TERMS.items():
        ours, indexed, scan = [], [], []
        single = " " not in text
        for _ in range(args.rounds):
            ours.append(timed(lambda t=text: store.search_messages(t, time_budget=None)))
            if single:
                both = (f"%{text}%", token(text))
                indexed.append(timed(lambda p=both: conn.execute(INDEXED_SQL, p).fetchall()))
                scan.append(timed(lambda p=both: conn.execute(SCAN_SQL, p[:1]).fetchall()))
        o = statistics.median(ours) * 1e3
        if single:
            i, s = statistics.median(indexed) * 1e3, statistics.median(scan) * 1e3
            print(f"{name:<22} {o:7.1f}ms {i:10.1f}ms {s:9.1f}ms {o / s:8.3f}", flush=True)
        else:
            print(f"{name:<22} {o:7.1f}ms {'':>12} {'':>11}", flush=True)
    store.close()
    conn.close()


if __name__ == "__main__":
    main()
