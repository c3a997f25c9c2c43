"""Search on 100,000 messages: hermes_models against plain sqlite3.

The corpus is generated (English, Chinese, Japanese and Korean messages, 2 %
stored as JSON content, 2 % soft-deleted) into one migrated file. For each
query the statements ``SessionDB.search_messages`` runs are recorded once.
Then our call (parse, route, bind, run, build the hit dicts with snippets
and context) is timed against, on a second connection to the same file:

* ``plain``: a hand-written search running the same statements with sqlite3
  and building the same hit dicts;
* ``SQL only``: the same statements, every row fetched, nothing else.

Each pair alternates round by round (the order rotating); medians are
printed, and the ratio is the median of the per-round ratios. Routes:

* BM25 words on ``messages_fts``. Target: ours <= 1.10x plain.
* CJK of 3+ characters on ``messages_fts_trigram``. Target: <= 1.10x plain.
* CJK of 1-2 characters through LIKE (a scan; reported, no target).

Run: python benchmarks/search.py [--messages N] [--rounds N] [--db PATH]
(an existing --db file with the right number of messages is reused).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_models import SessionDB
from hermes_models.search import pipeline as search
from hermes_models.search.pipeline import common_from, readable
from hermes_models.search.plan import BEST_RANKS_FUNCTION, SCAN_FUNCTION, BestRanks
from hermes_models.search.query import highlight, parse, term_finder
from hermes_models.store.grams import GRAM_IDS_SQL
from hermes_models.store.sqlite_sql import (
    GRAM_COUNT,
    GRAM_NEED_FUNCTION,
    GRAM_STATE,
    GRAM_STATE_COUNT,
    WORD_MATCHES_BEYOND,
)

WORDS = (
    "the of and to in is that for it with as was on be by this are or from at which but not "
    "have an they you were their one all we can her has there been if more when will would who "
    "so no out up into do time only could new our two may first then its than other like also "
    "asyncio thread loop event socket timeout retry writer reader lock checkpoint journal wal "
    "sqlite index query search snippet token rank session message branch compression subagent "
    "python function class module import return value error warning debug trace memory cache "
    "file path folder disk network request response server client header payload stream buffer "
    "queue worker pool task future await yield generator iterator context manager decorator "
    "schema migration column table row trigger view transaction commit rollback savepoint vacuum"
).split()
HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"
    "同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自"
    "二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日"
    "那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变"
    "条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指"
    "几九区强放决西被干做必战先回则任取据处理世车"
)
KANA = (
    "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらり"
    "るれろわをんアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメ"
    "モヤユヨラリルレロワヲンー"
)
HANGUL = (
    "가나다라마바사아자차카타파하거너더러머버서어저처커터퍼허고노도로모보소오조초코토"
    "포호구누두루무부수우주추쿠투푸후기니디리미비시이지치키티피히한국어세션메시지검색"
)

QUERIES = {
    "BM25 word": ("checkpoint", "<= 1.10"),
    "BM25 two words": ("asyncio timeout", "<= 1.10"),
    "BM25 prefix": ("migrat*", "<= 1.10"),
    "BM25 phrase OR word": ('"event loop" OR vacuum', "<= 1.10"),
    "trigram (4 CJK chars)": ("事件循环", "<= 1.10"),
    "trigram (3 kana)": ("セッシ", "<= 1.10"),
    "LIKE (2 CJK chars)": ("数据", "none"),
}


#: Zipf-like word frequencies: the n-th word is n times rarer than the first.
CUM_WEIGHTS = list(itertools.accumulate(1.0 / (n + 1) for n in range(len(WORDS))))


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.65:
        return " ".join(rng.choices(WORDS, cum_weights=CUM_WEIGHTS, k=rng.randint(6, 40)))
    if kind < 0.85:
        text = "".join(rng.choice(HAN) for _ in range(rng.randint(8, 60)))
        if rng.random() < 0.03:
            text = text[:5] + "事件循环" + text[5:]
        if rng.random() < 0.05:
            text = text[:3] + "数据" + text[3:]
        return text
    if kind < 0.93:
        text = "".join(rng.choice(KANA) for _ in range(rng.randint(8, 50)))
        return text if rng.random() > 0.03 else "セッション" + text
    return " ".join("".join(rng.choice(HANGUL) for _ in range(rng.randint(2, 5))) for _ in range(8))


def build(path: Path, messages: int, seed: int = 7) -> None:
    """Fill ``path`` with ``messages`` messages in sessions of 10."""
    rng = random.Random(seed)
    SessionDB(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    t0 = 1_700_000_000.0
    sessions = max(1, messages // 10)
    conn.executemany(
        "INSERT INTO sessions (id, source, model, started_at, message_count)"
        " VALUES (?, ?, ?, ?, 10)",
        [
            (f"s{n:06d}", ("cli", "telegram", "discord")[n % 3], "bench-model", t0 + n * 60)
            for n in range(sessions)
        ],
    )
    rows = []
    for n in range(messages):
        session = n // 10
        role = ("user", "assistant")[n % 2]
        content: Any = _sentence(rng)
        if rng.random() < 0.02:
            content = "\x00json:" + json.dumps(
                [{"type": "text", "text": content}], ensure_ascii=False
            )
        rows.append(
            (
                f"s{session:06d}",
                role,
                content,
                t0 + session * 60 + n % 10,
                0 if rng.random() < 0.02 else 1,
            )
        )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp, active)"
        " VALUES (?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def recorded(run: Callable[[], Any]) -> list[tuple[str, list[Any]]]:
    """The statements ``run`` executes through :func:`hermes_models.search.pipeline.execute`."""
    calls: list[tuple[str, list[Any]]] = []
    original = search.execute

    def spy(sql: str, params: list[Any]) -> Any:
        calls.append((sql, list(params)))
        return original(sql, params)

    search.execute = spy
    try:
        run()
    finally:
        search.execute = original
    return calls


def plain_search(
    conn: sqlite3.Connection, statements: list[tuple[str, list[Any]]], query: str
) -> list[dict[str, Any]]:
    """A hand-written search: the recorded statements run with sqlite3, rows turned into
    the same hit dicts (JSON content shown as text, snippets made in Python where the
    index gave none)."""
    # Gram index lookups, the state of the gram index and its counts (whether a
    # short CJK term is common) and the one-pass scan come first (LIKE-routed
    # terms), and the count that decides whether a word query is ranked within its
    # newest hits (a search given rank_window); then the page.
    leading = (GRAM_IDS_SQL, GRAM_STATE, GRAM_STATE_COUNT, GRAM_COUNT, WORD_MATCHES_BEYOND)
    while statements[0][0] in leading or (SCAN_FUNCTION in statements[0][0]):
        conn.execute(*statements[0]).fetchall()
        statements = statements[1:]
    (sql, params), rest = statements[0], statements[1:]
    if BEST_RANKS_FUNCTION in sql:
        # A windowed prefix page makes its snippets in its one pass, for the rows whose
        # rank is among the page's best so far: the same function, as ours registers it.
        conn.create_function(BEST_RANKS_FUNCTION, 2, BestRanks().keep)
    rows = conn.execute(sql, params).fetchall()
    snippets: dict[int, str] = {}
    if rows and len(rows[0]) == 12:  # ranked word searches carry their snippets
        snippets = {row[0]: row[11] for row in rows}
    around: dict[int, tuple[Any, ...]] = {}
    for sql, params in rest:
        if "snippet(" in sql:
            snippets = dict(conn.execute(sql, params).fetchall())
        else:
            around = {row[0]: row[1:] for row in conn.execute(sql, params).fetchall()}
    regex = term_finder(parse(query).positive_terms())  # as ours: a string for one CJK term
    hits = []
    for row in rows:
        hit_id, session_id, ts, role, content, tool_name, tool_calls, source, model, started = row[
            :10
        ]
        text = readable(content)
        snippet = snippets.get(hit_id)
        if snippet is None or (content and "\x00" in content):
            snippet = highlight(" ".join(p for p in (text, tool_name, tool_calls) if p), regex)
        prev_role, prev_content, next_role, next_content = around.get(hit_id, (None,) * 4)
        context = [{"role": role, "content": text[:200]}]
        if prev_role is not None:
            context.insert(0, {"role": prev_role, "content": readable(prev_content)[:200]})
        if next_role is not None:
            context.append({"role": next_role, "content": readable(next_content)[:200]})
        hits.append(
            {
                "id": hit_id,
                "session_id": session_id,
                "role": role,
                "snippet": snippet,
                "timestamp": ts,
                "tool_name": tool_name,
                "source": source,
                "model": model,
                "session_started": started,
                "context": context,
            }
        )
    return hits


def sql_only(conn: sqlite3.Connection, statements: list[tuple[str, list[Any]]]) -> None:
    """The recorded statements with sqlite3, every row fetched, nothing else."""
    for sql, params in statements:
        if BEST_RANKS_FUNCTION in sql:
            conn.create_function(BEST_RANKS_FUNCTION, 2, BestRanks().keep)
        conn.execute(sql, params).fetchall()


def timed_rounds(rounds: int, *runs: Callable[[], Any]) -> list[list[float]]:
    """Seconds of each of ``runs`` per round, interleaved round by round (the order
    rotating, so that no side always runs first)."""
    for run in runs:
        run()
    times: list[list[float]] = [[] for _ in runs]
    for round_ in range(rounds):
        for index in range(len(runs)):
            which = (index + round_) % len(runs)
            start = time.perf_counter()
            runs[which]()
            times[which].append(time.perf_counter() - start)
    return times


def paired_ratio(ours: list[float], theirs: list[float]) -> float:
    """Median of the per-round ratios: steadier than a ratio of medians on a busy machine."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    path = args.db or Path(tempfile.mkdtemp(prefix="hermes-bench-")) / "state.db"
    fresh = True
    if path.exists():
        check = sqlite3.connect(path)
        fresh = check.execute("SELECT COUNT(*) FROM messages").fetchone()[0] != args.messages
        check.close()
        if fresh:
            raise SystemExit(f"{path} holds another corpus; remove it or pick another --db")
    if fresh:
        started = time.perf_counter()
        build(path, args.messages)
        print(f"built {args.messages:,} messages in {time.perf_counter() - started:.1f} s: {path}")
    store = SessionDB(path, read_only=True)
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    # The scan's SQL function, doing nothing: its findings are already in the page's values.
    plain.create_function(SCAN_FUNCTION, 4, lambda *columns: 0)
    # The count's cap in the gram index's state statement (a short CJK term's first search).
    plain.create_function(GRAM_NEED_FUNCTION, 2, common_from)
    print(
        f"{'route':<22} {'query':<24} {'hits':>6} {'ours':>9} {'plain':>9} {'ratio':>6} "
        f"{'SQL only':>9} {'ratio':>6}  target"
    )
    for name, (query, target) in QUERIES.items():
        hits = store.search_messages(query, limit=None)
        statements = recorded(lambda q=query: store.search_messages(q))
        assert plain_search(plain, statements, query) == store.search_messages(query)
        # Two pairs, each alternating between the two connections, so that both
        # sides pay the same for switching.
        ours, theirs = timed_rounds(
            args.rounds,
            lambda q=query: store.search_messages(q),
            lambda q=query, s=statements: plain_search(plain, s, q),
        )
        ours_again, bare = timed_rounds(
            args.rounds,
            lambda q=query: store.search_messages(q),
            lambda s=statements: sql_only(plain, s),
        )
        print(
            f"{name:<22} {query:<24} {len(hits):>6} "
            f"{statistics.median(ours) * 1e3:7.2f}ms {statistics.median(theirs) * 1e3:7.2f}ms "
            f"{paired_ratio(ours, theirs):6.2f} {statistics.median(bare) * 1e3:7.2f}ms "
            f"{paired_ratio(ours_again, bare):6.2f}  {target}"
        )
    store.close()
    plain.close()


if __name__ == "__main__":
    main()
