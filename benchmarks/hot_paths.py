"""The hot paths of a running agent: hermes_models against plain sqlite3.

Both sides work on the same migrated file, interleaved round by round, and
do the same SQL:

* ``append_message``: one message per transaction — ``BEGIN IMMEDIATE``,
  insert the row (the FTS triggers fire), bump the session counters,
  ``COMMIT``. Target: ours <= 1.10x plain.
* ``get_messages`` of a 1,000-message session: select the rows by id and turn
  them into dicts with content and JSON columns decoded. Target: <= 1.25x.
* ``get_messages_as_conversation`` of the same session against the same
  replay written over plain sqlite3 (Hermes' SQL: ``ORDER BY timestamp, id``,
  the same decoding and cleaning). Target: <= 1.00x.
* small calls an agent makes all the time (counts, meta, title lookups, one
  session, a prune that finds nothing) against the simplest correct SQL for
  each on a plain connection. Target: <= 1.50x each.

Run: python benchmarks/hot_paths.py [--rounds N] [--only small]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hermes_models import SessionDB
from hermes_models.conversations.history import sanitize_context
from hermes_models.models.tables import decode_content

JSON_COLUMNS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items")


def median_pair(
    rounds: int, ours: Callable[[], Any], plain: Callable[[], Any]
) -> tuple[float, float]:
    """Median seconds of each; the two alternate, and which goes first alternates too."""
    ours(), plain()
    a: list[float] = []
    b: list[float] = []
    for n in range(rounds):
        pair = ((ours, a), (plain, b)) if n % 2 == 0 else ((plain, b), (ours, a))
        for call, into in pair:
            start = time.perf_counter()
            call()
            into.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def report(name: str, ours: float, plain: float, target: str) -> None:
    print(
        f"{name:<40} ours {ours * 1e6:9.1f} us   plain {plain * 1e6:9.1f} us   "
        f"ratio {ours / plain:5.2f}   (target {target})"
    )


def plain_append(conn: sqlite3.Connection, session_id: str, n: int) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        cursor = conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,"
            " tool_name, timestamp, token_count, finish_reason, reasoning, reasoning_content,"
            " reasoning_details, codex_reasoning_items, codex_message_items,"
            " platform_message_id, observed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                "user",
                f"plain message {n} about asyncio",
                None,
                None,
                None,
                time.time(),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                0,
            ),
        )
        conn.execute(
            "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1,"
            " tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
            (0, session_id),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(cursor.lastrowid or 0)


def plain_get_messages(conn: sqlite3.Connection, session_id: str) -> list[dict[str, Any]]:
    cursor = conn.execute(
        "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id", (session_id,)
    )
    return decoded_rows(cursor)


def decoded_rows(cursor: Any) -> list[dict[str, Any]]:
    """A cursor's message rows as dicts, content and JSON columns decoded as
    ``get_messages`` decodes them (any DB-API cursor)."""
    names = [column[0] for column in cursor.description]
    rows = []
    for values in cursor.fetchall():
        row = dict(zip(names, values))
        row["content"] = decode_content(row["content"])
        for column in JSON_COLUMNS:
            if row[column] is not None:
                try:
                    row[column] = json.loads(row[column])
                except ValueError:
                    pass
        rows.append(row)
    return rows


def _loads(text: Any, fallback: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return fallback


def plain_conversation(conn: sqlite3.Connection, session_id: str) -> list[dict[str, Any]]:
    """Hermes' replay: its SQL, its decoding, its optional keys."""
    cursor = conn.execute(
        "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY timestamp, id",
        (session_id,),
    )
    names = [column[0] for column in cursor.description]
    out = []
    for values in cursor.fetchall():
        row = dict(zip(names, values))
        role = row["role"]
        content = decode_content(row["content"])
        if role in ("user", "assistant") and isinstance(content, str):
            content = sanitize_context(content).strip()
        entry: dict[str, Any] = {"role": role, "content": content}
        if row["timestamp"]:
            entry["timestamp"] = row["timestamp"]
        if row["tool_call_id"]:
            entry["tool_call_id"] = row["tool_call_id"]
        if row["tool_name"]:
            entry["tool_name"] = row["tool_name"]
        if row["tool_calls"]:
            entry["tool_calls"] = _loads(row["tool_calls"], [])
        if row["platform_message_id"]:
            entry["message_id"] = row["platform_message_id"]
        if row["observed"]:
            entry["observed"] = True
        if role == "assistant":
            if row["finish_reason"]:
                entry["finish_reason"] = row["finish_reason"]
            if row["reasoning"]:
                entry["reasoning"] = row["reasoning"]
            if row["reasoning_content"] is not None:
                entry["reasoning_content"] = row["reasoning_content"]
            for name in JSON_COLUMNS[1:]:
                if row[name]:
                    entry[name] = _loads(row[name], None)
        out.append(entry)
    return out


def _one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _row(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
    cursor = conn.execute(sql, params)
    row = cursor.fetchone()
    return None if row is None else dict(zip([c[0] for c in cursor.description], row))


def plain_resolve_by_title(conn: sqlite3.Connection, title: str) -> str | None:
    """Hermes' lookup: the newest numbered variant, else the exact title."""
    escaped = title.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = _one(
        conn,
        "SELECT id FROM sessions WHERE title LIKE ? ESCAPE '\\' ORDER BY started_at DESC LIMIT 1",
        (f"{escaped} #%",),
    )
    return (
        found
        if found is not None
        else _one(conn, "SELECT id FROM sessions WHERE title = ?", (title,))
    )


def plain_prune(conn: sqlite3.Connection, days: float) -> int:
    """Nothing to prune: one read finds no candidate (a write would follow otherwise)."""
    cutoff = time.time() - days * 86400.0
    rows = conn.execute(
        "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND started_at < ?", (cutoff,)
    ).fetchall()
    if rows:
        raise AssertionError("the benchmark store has nothing to prune")
    return 0


def plain_set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO state_meta (key, value) VALUES (?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def small_calls(store: SessionDB, plain: sqlite3.Connection, rounds: int) -> None:
    """Fixed-shape calls, each against the simplest correct SQL for it."""
    now = time.time()
    with store_batch(plain):
        for n in range(2000):
            ended = now - 10.0 if n % 3 == 0 else None
            title = f"project {n}" if n % 4 == 0 else None
            plain.execute(
                "INSERT INTO sessions (id, source, started_at, ended_at, title)"
                " VALUES (?, 'cli', ?, ?, ?)",
                (f"small-{n:04d}", now - 3600.0 + n, ended, title),
            )
        plain.execute(
            "INSERT INTO sessions (id, source, started_at, title) VALUES ('small-2', 'cli', ?, ?)",
            (now, "project 8 #2"),
        )
    store.set_meta("bench_key", "1")
    calls: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "session_count()",
            store.session_count,
            lambda: _one(plain, "SELECT COUNT(*) FROM sessions WHERE archived = 0"),
        ),
        (
            "message_count(session)",
            lambda: store.message_count("big"),
            lambda: _one(plain, "SELECT COUNT(*) FROM messages WHERE session_id = ?", ("big",)),
        ),
        (
            "count_empty_sessions()",
            store.count_empty_sessions,
            lambda: _one(
                plain,
                "SELECT COUNT(*) FROM sessions WHERE message_count = 0"
                " AND ended_at IS NOT NULL AND archived = 0",
            ),
        ),
        (
            # Ours is stricter than Hermes on purpose (a counter that disagrees with
            # the rows keeps the session): the simplest SQL for that same rule.
            "count_empty_sessions() / same rule",
            store.count_empty_sessions,
            lambda: _one(
                plain,
                "SELECT COUNT(*) FROM sessions WHERE message_count = 0"
                " AND ended_at IS NOT NULL AND archived = 0"
                " AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = sessions.id)",
            ),
        ),
        (
            "prune_sessions() (nothing to prune)",
            store.prune_sessions,
            lambda: plain_prune(plain, 90),
        ),
        (
            "get_meta(key)",
            lambda: store.get_meta("bench_key"),
            lambda: _one(plain, "SELECT value FROM state_meta WHERE key = ?", ("bench_key",)),
        ),
        (
            "get_session_title(id)",
            lambda: store.get_session_title("small-0400"),
            lambda: _one(plain, "SELECT title FROM sessions WHERE id = ?", ("small-0400",)),
        ),
        (
            "get_session_by_title(title)",
            lambda: store.get_session_by_title("project 400"),
            lambda: _row(plain, "SELECT * FROM sessions WHERE title = ?", ("project 400",)),
        ),
        (
            "resolve_session_by_title(title)",
            lambda: store.resolve_session_by_title("project 8"),
            lambda: plain_resolve_by_title(plain, "project 8"),
        ),
        (
            "get_session(id)",
            lambda: store.get_session("small-0400"),
            lambda: _row(plain, "SELECT * FROM sessions WHERE id = ?", ("small-0400",)),
        ),
    ]
    for name, ours_call, plain_call in calls:
        assert ours_call() == plain_call(), name
        ours, theirs = median_pair(rounds, ours_call, plain_call)
        report(name, ours, theirs, "<= 1.50")
    counter = iter(range(10**9))
    ours, theirs = median_pair(
        max(20, rounds // 10),
        lambda: store.set_meta("bench_key", str(next(counter))),
        lambda: plain_set_meta(plain, "bench_key", str(next(counter))),
    )
    report("set_meta(key, value)", ours, theirs, "<= 1.50")


@contextlib.contextmanager
def store_batch(conn: sqlite3.Connection) -> Iterator[None]:
    """One plain transaction around the block."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--only", choices=("small",), help="run only the small calls")
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp(prefix="hermes-bench-")) / "state.db"
    store = SessionDB(path)
    store.create_session("ours", "cli")
    store.create_session("plain", "cli")
    store.create_session("big", "cli")
    plain = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    plain.execute("PRAGMA foreign_keys = ON")

    counter = iter(range(10**9))
    if args.only is None:
        # Each side appends to a file of its own: on a shared file our appends would
        # also index the rows the plain writer adds (the gram index catches up on rows
        # other processes write), which is measured next, on its own.
        alone = path.parent / "plain-alone.db"
        SessionDB(alone).close()
        plain_alone = sqlite3.connect(alone, timeout=1.0, isolation_level=None)
        plain_alone.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('plain', 'cli', 0)"
        )
        ours, theirs = median_pair(
            args.rounds,
            lambda: store.append_message("ours", "user", f"our message {next(counter)} about x"),
            lambda: plain_append(plain_alone, "plain", next(counter)),
        )
        report("append_message (1 message per txn)", ours, theirs, "<= 1.10")
        plain_alone.close()
        ours, theirs = median_pair(
            args.rounds,
            lambda: store.append_message("ours", "user", f"our message {next(counter)} about x"),
            lambda: plain_append(plain, "plain", next(counter)),
        )
        report("append_message beside a plain writer", ours, theirs, "reported")

    for n in range(1000):
        role = "user" if n % 2 == 0 else "assistant"
        calls = [{"id": f"call{n}", "type": "function"}] if role == "assistant" else None
        store.append_message("big", role, f"turn {n} of a long session", tool_calls=calls)
    assert store.get_messages("big") == plain_get_messages(plain, "big")
    if args.only is None:
        ours, theirs = median_pair(
            max(20, args.rounds // 10),
            lambda: store.get_messages("big"),
            lambda: plain_get_messages(plain, "big"),
        )
        report("get_messages (1,000 messages)", ours, theirs, "<= 1.25")
    assert store.get_messages_as_conversation("big") == plain_conversation(plain, "big")
    ours, theirs = median_pair(
        max(20, args.rounds // 10),
        lambda: store.get_messages_as_conversation("big"),
        lambda: plain_conversation(plain, "big"),
    )
    report("get_messages_as_conversation (1,000)", ours, theirs, "<= 1.00")
    small_calls(store, plain, args.rounds * 5)
    store.close()
    plain.close()


if __name__ == "__main__":
    main()
