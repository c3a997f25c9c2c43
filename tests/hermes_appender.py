"""Runs in Hermes' process (see ``hermes_release``): a gateway's writes, each one timed.

argv: the database path, how many sessions of how many messages to fill it with
first, the pause between two appends in milliseconds, and a stop file.

Hermes' own ``SessionDB`` opens the file (creating it at Hermes' schema), fills it in
one transaction through its connection (its triggers index every message), prints
one line ``{"messages": N}`` and then appends a message to the session
``gateway-live`` every pause, as a gateway does, until the stop file exists. Each
``append_message`` is timed; an exception it raises (Hermes retries a locked write
15 times before it gives up) is recorded, not raised. Last line printed:
``{"records": [[wall-clock start, seconds, id or null, error or null], ...]}``.
Nothing here imports hermes_models.
"""

import json
import os
import sys
import time
from pathlib import Path

WORDS = "asyncio deploy rollback migration 数据库 事件循环 gateway search index vacuum".split()


def fill(store, sessions, messages):
    conn = store._conn
    now = time.time() - sessions * 60
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, ?, ?, ?)",
        [(f"old-{s}", "telegram", now + s * 60, messages) for s in range(sessions)],
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
        [
            (
                f"old-{s}",
                "user" if m % 2 == 0 else "assistant",
                f"message {m} of chat {s}: "
                + " ".join(WORDS[(s + m + k) % len(WORDS)] for k in range(12)),
                now + s * 60 + m,
            )
            for s in range(sessions)
            for m in range(messages)
        ],
    )
    conn.execute("COMMIT")
    return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def main():
    path, sessions, messages, pause, stop = sys.argv[1:6]
    import hermes_state

    store = hermes_state.SessionDB(Path(path))
    count = fill(store, int(sessions), int(messages))
    store.create_session("gateway-live", "telegram")
    sys.stdout.write(json.dumps({"messages": count}) + "\n")
    sys.stdout.flush()
    records = []
    n = 0
    while not os.path.exists(stop):
        n += 1
        start = time.time()
        began = time.perf_counter()
        try:
            message_id = store.append_message("gateway-live", "user", f"live message {n} asyncio")
            error = None
        except Exception as exc:  # recorded: the benchmark reports it
            message_id, error = None, f"{type(exc).__name__}: {exc}"
        records.append([start, time.perf_counter() - began, message_id, error])
        time.sleep(int(pause) / 1000)
    store.close()
    sys.stdout.write(json.dumps({"records": records}) + "\n")


if __name__ == "__main__":
    main()
