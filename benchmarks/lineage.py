"""Lineage walks and the session listing: hermes_models against plain sqlite3.

Two measurements, each interleaved (ours, plain, ours, plain, ...) on the
same migrated file so that caches and disk state are shared:

* compression tip and resume target of a 100-deep compression chain — ours is
  one recursive CTE per call; plain sqlite3 walks the chain the obvious way,
  one query per hop. Target: ours >= 2x faster.
* the first page of ``list_sessions_rich`` over 10,000 sessions and 100,000
  messages — plain sqlite3 runs the very SQL our query builder produces and
  finishes the rows the same way (dicts, preview text). Target: ours <= 1.10x
  plain.
* page 50 of the listing, by ``offset`` and by key (``after=``), against
  Hermes' own listing SQL reaching page 50 by ``offset``. Target: <= 1.00x.

Run: python benchmarks/lineage.py [--rounds N] [--keep PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from hot_paths import median_pair

import hermes_models
from hermes_models import Session, SessionDB
from hermes_models.conversations.listing import finish_row, rich_listing_query

CHAIN = 100
SESSIONS = 10_000
MESSAGES = 100_000
T0 = 1_700_000_000.0


def build(path: Path) -> None:
    """Fill a migrated file with plain sqlite3 (fast, and independent of our code)."""
    hermes_models.migrate(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    rng = random.Random(7)
    sessions: list[tuple[Any, ...]] = []
    # The deep compression chain: chain-000 -> chain-001 -> ... each ended by compression.
    for n in range(CHAIN):
        parent = f"chain-{n - 1:03d}" if n else None
        ended = T0 + (n + 1) * 100.0 if n < CHAIN - 1 else None
        reason = "compression" if n < CHAIN - 1 else None
        sessions.append((f"chain-{n:03d}", "cli", parent, T0 + n * 100.0, ended, reason, None))
    # Ordinary sessions with a few branches, chains and subagent runs mixed in.
    for n in range(SESSIONS - CHAIN):
        sid = f"s{n:05d}"
        started = T0 + 20_000 + n * 30.0
        parent, config, ended, reason = None, None, None, None
        roll = rng.random()
        if n and roll < 0.10:
            parent, config = f"s{n - 1:05d}", json.dumps({"_delegate_from": f"s{n - 1:05d}"})
        elif n and roll < 0.15:
            parent, config = f"s{n - 1:05d}", json.dumps({"_branched_from": f"s{n - 1:05d}"})
        if rng.random() < 0.5:
            ended, reason = started + 25.0, "user_exit"
        sessions.append(
            (sid, "cli" if n % 3 else "telegram", parent, started, ended, reason, config)
        )
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at, end_reason,"
            " model_config) VALUES (?, ?, ?, ?, ?, ?, ?)",
            sessions,
        )
    ids = [row[0] for row in sessions if not row[0].startswith("chain-")]
    rows = []
    for n in range(MESSAGES):
        sid = "chain-099" if n < 5 else ids[n % len(ids)]
        role = "user" if n % 2 == 0 else "assistant"
        rows.append((sid, role, f"message {n} about topic {n % 97}", T0 + 20_000 + n * 0.3))
    with conn:
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows
        )
        conn.execute(
            "UPDATE sessions SET message_count ="
            " (SELECT COUNT(*) FROM messages WHERE messages.session_id = sessions.id)"
        )
    conn.close()


MARKED = (
    "COALESCE(json_extract(CASE WHEN json_valid(model_config) THEN model_config END,"
    " '$._branched_from'), json_extract(CASE WHEN json_valid(model_config) THEN model_config END,"
    " '$._delegate_from')) IS NULL"
)


def plain_tip(conn: sqlite3.Connection, session_id: str) -> str:
    """The compression tip, one query per hop."""
    current, seen = session_id, {session_id}
    for _ in range(100):
        row = conn.execute(
            "SELECT end_reason, ended_at FROM sessions WHERE id = ?", (current,)
        ).fetchone()
        if row is None or row[0] != "compression":
            break
        child = conn.execute(
            "SELECT id FROM sessions WHERE parent_session_id = ? AND started_at >= ? AND "
            + MARKED
            + " ORDER BY started_at DESC, id DESC LIMIT 1",
            (current, row[1]),
        ).fetchone()
        if child is None or child[0] in seen:
            break
        current = child[0]
        seen.add(current)
    return current


def plain_resume(conn: sqlite3.Connection, session_id: str) -> str:
    """The resume target, one query per hop."""
    tip = plain_tip(conn, session_id)
    current = tip
    for _ in range(33):
        has = conn.execute(
            "SELECT 1 FROM messages WHERE session_id = ? AND active = 1 LIMIT 1", (current,)
        ).fetchone()
        if has:
            return current
        child = conn.execute(
            "SELECT id FROM sessions WHERE parent_session_id = ? AND "
            + MARKED
            + " ORDER BY started_at DESC, id DESC LIMIT 1",
            (current,),
        ).fetchone()
        if child is None:
            break
        current = child[0]
    return tip


#: Hermes' listing statement: the listable rows with preview and last activity,
#: newest first, one page (its tip projection runs afterwards, in Python).
HERMES_LISTING = (
    "SELECT s.*, COALESCE((SELECT SUBSTR(REPLACE(REPLACE(m.content, X'0A', ' '), X'0D', ' '),"
    " 1, 63) FROM messages m WHERE m.session_id = s.id AND m.role = 'user'"
    " AND m.content IS NOT NULL ORDER BY m.timestamp, m.id LIMIT 1), '') AS _preview_raw,"
    " COALESCE((SELECT MAX(m2.timestamp) FROM messages m2 WHERE m2.session_id = s.id),"
    " s.started_at) AS last_active FROM sessions s"
    " WHERE (s.parent_session_id IS NULL"
    " OR json_extract(CASE WHEN json_valid(s.model_config) THEN s.model_config END,"
    " '$._branched_from') IS NOT NULL"
    " OR EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id"
    " AND p.end_reason = 'branched'))"
    " AND json_extract(CASE WHEN json_valid(s.model_config) THEN s.model_config END,"
    " '$._delegate_from') IS NULL AND s.archived = 0"
    " ORDER BY s.started_at DESC LIMIT ? OFFSET ?"
)


def hermes_listing(conn: sqlite3.Connection, limit: int, offset: int) -> list[dict[str, Any]]:
    """One listing page the way Hermes makes it: its SQL, then each compressed root
    replaced by its tip (one walk and one row read per such root)."""
    cursor = conn.execute(HERMES_LISTING, (limit, offset))
    names = [column[0] for column in cursor.description]
    rows = []
    for values in cursor.fetchall():
        row = dict(zip(names, values))
        raw = row.pop("_preview_raw").strip()
        row["preview"] = raw if len(raw) <= 60 else raw[:60] + "..."
        if row["end_reason"] == "compression":
            tip = plain_tip(conn, row["id"])
            if tip != row["id"]:
                found = conn.execute(
                    HERMES_LISTING.replace("WHERE (", "WHERE s.id = ? AND ("), (tip, 1, 0)
                ).fetchone()
                if found is not None:
                    projected = dict(zip(names, found))
                    root = row["id"]
                    row.update(
                        {
                            k: projected[k]
                            for k in (
                                "id",
                                "ended_at",
                                "end_reason",
                                "message_count",
                                "tool_call_count",
                                "title",
                                "last_active",
                                "model",
                                "system_prompt",
                                "cwd",
                            )
                        }
                    )
                    row["_lineage_root_id"] = root
        rows.append(row)
    return rows


def report(name: str, ours: float, plain: float, target: str) -> None:
    print(
        f"{name:<44} ours {ours * 1e3:9.3f} ms   plain {plain * 1e3:9.3f} ms   "
        f"ratio ours/plain {ours / plain:5.2f}   (target {target})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--keep", type=Path, help="build the data file here and keep it")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="hermes-bench-")
    path = args.keep or Path(folder) / "state.db"
    if not path.exists():
        started = time.perf_counter()
        build(path)
        print(
            f"built {path} in {time.perf_counter() - started:.1f} s "
            f"({SESSIONS} sessions, {MESSAGES} messages, a {CHAIN}-deep chain)"
        )
    store = SessionDB(path)
    plain = sqlite3.connect(path)
    expected_tip = f"chain-{CHAIN - 1:03d}"
    assert store.get_compression_tip("chain-000") == plain_tip(plain, "chain-000") == expected_tip
    assert store.resolve_resume_session_id("chain-000") == plain_resume(plain, "chain-000")

    ours, theirs = median_pair(
        args.rounds,
        lambda: store.get_compression_tip("chain-000"),
        lambda: plain_tip(plain, "chain-000"),
    )
    report("compression tip, 100-deep chain", ours, theirs, "<= 0.50")
    ours, theirs = median_pair(
        args.rounds,
        lambda: store.resolve_resume_session_id("chain-000"),
        lambda: plain_resume(plain, "chain-000"),
    )
    report("resume target, 100-deep chain", ours, theirs, "<= 0.50")
    root = Session.get_by_id("chain-000")
    ours, theirs = median_pair(
        args.rounds, lambda: root.compression_tip(), lambda: plain_tip(plain, "chain-000")
    )
    report("Session.compression_tip() (model)", ours, theirs, "<= 0.50")
    ours, theirs = median_pair(
        args.rounds, lambda: root.resume_target(), lambda: plain_resume(plain, "chain-000")
    )
    report("Session.resume_target() (model)", ours, theirs, "<= 0.50")

    with hermes_models.using(store.database):
        sql, params = rich_listing_query().sql()

    def plain_listing() -> list[dict[str, Any]]:
        # The same statement and the same row finishing (preview text,
        # _lineage_root_id): what differs is only how the SQL is reached.
        cursor = plain.execute(sql, params)
        names = [column[0] for column in cursor.description]
        return [finish_row(dict(zip(names, row))) for row in cursor.fetchall()]

    assert store.list_sessions_rich() == plain_listing()
    ours, theirs = median_pair(args.rounds, lambda: store.list_sessions_rich(), plain_listing)
    report("list_sessions_rich first page (10k sessions)", ours, theirs, "<= 1.10")

    # Page 50 (offset 980): both sides must skip the same 980 listable rows.
    def ids(rows: list[dict[str, Any]]) -> list[str]:
        return [row["id"] for row in rows]

    deep = lambda: store.list_sessions_rich(limit=20, offset=980)  # noqa: E731
    assert ids(deep()) == ids(hermes_listing(plain, 20, 980))
    ours, theirs = median_pair(args.rounds, deep, lambda: hermes_listing(plain, 20, 980))
    report("list_sessions_rich page 50 vs Hermes' SQL", ours, theirs, "<= 1.00")

    # The same page by key: after the last row of page 49 (what a picker paging
    # forward holds), against Hermes' page 50 by offset, its only way there.
    key = store.list_sessions_rich(limit=20, offset=960)[-1]["id"]
    keyed = lambda: store.list_sessions_rich(limit=20, after=key)  # noqa: E731
    assert ids(keyed()) == ids(hermes_listing(plain, 20, 980))
    ours, theirs = median_pair(args.rounds, keyed, lambda: hermes_listing(plain, 20, 980))
    report("list_sessions_rich(after=) page 50 vs Hermes", ours, theirs, "<= 1.00")
    store.close()
    plain.close()


if __name__ == "__main__":
    main()
