"""The hot paths of a running agent: hermes_models against plain sqlite3.

Both sides work on the same migrated file, interleaved round by round, and
do the same SQL:

* ``append_message``: one message per transaction — ``BEGIN IMMEDIATE``,
  insert the row (the FTS triggers fire), bump the session counters,
  ``COMMIT``. Target: ours <= 1.10x plain.
* ``get_messages`` of a 1,000-message session: select the rows by id and turn
  them into dicts with content and JSON columns decoded. Target: <= 1.25x.

Run: python benchmarks/hot_paths.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_models import SessionDB
from hermes_models.models import decode_content

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp(prefix="hermes-bench-")) / "state.db"
    store = SessionDB(path)
    store.create_session("ours", "cli")
    store.create_session("plain", "cli")
    store.create_session("big", "cli")
    plain = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    plain.execute("PRAGMA foreign_keys = ON")

    counter = iter(range(10**9))
    ours, theirs = median_pair(
        args.rounds,
        lambda: store.append_message("ours", "user", f"our message {next(counter)} about asyncio"),
        lambda: plain_append(plain, "plain", next(counter)),
    )
    report("append_message (1 message per txn)", ours, theirs, "<= 1.10")

    for n in range(1000):
        role = "user" if n % 2 == 0 else "assistant"
        calls = [{"id": f"call{n}", "type": "function"}] if role == "assistant" else None
        store.append_message("big", role, f"turn {n} of a long session", tool_calls=calls)
    assert store.get_messages("big") == plain_get_messages(plain, "big")
    ours, theirs = median_pair(
        max(20, args.rounds // 10),
        lambda: store.get_messages("big"),
        lambda: plain_get_messages(plain, "big"),
    )
    report("get_messages (1,000 messages)", ours, theirs, "<= 1.25")
    store.close()
    plain.close()


if __name__ == "__main__":
    main()
