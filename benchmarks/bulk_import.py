"""Bulk import against appending message by message.

The same conversations (SESSIONS sessions of MESSAGES messages each, English
and Chinese text, every fifth an assistant tool call) are written into a
fresh migrated file five ways:

* ``append``: ``SessionDB.create_session`` then ``SessionDB.append_message``
  per message, one transaction each, as an agent writes live;
* ``transcripts``: ``SessionDB.import_transcripts`` on a folder of legacy
  ``<session_id>.jsonl`` files (per file: a lease, the messages with
  multi-row inserts, then the session; see ``hermes_models.transfer.staging``);
* ``bundle``: ``SessionDB.import_bundle`` of a JSONL bundle (checked in full
  first, then written the same way);
* ``plain per message`` (reference): sqlite3, one ``INSERT`` and one counter
  ``UPDATE`` per transaction, as a Hermes process appends;
* ``plain bulk`` (reference): sqlite3 ``executemany`` in one transaction.

Every variant ends with the same messages in the file and both search
indexes in step (checked). Prints messages per second and the speed-up of
the two bulk paths over ``append``. Target: bulk >= 3x append.

Run: python benchmarks/bulk_import.py [--sessions N] [--messages N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_models import SessionDB

T0 = 1_700_000_000.0
TEXTS = (
    "How does the asyncio event loop pick the next ready callback?",
    "事件循环负责调度协程和回调，阻塞调用会拖慢所有任务。",
    "Use run_in_executor for blocking I/O so the loop keeps turning.",
    "线程池适合阻塞的输入输出任务，进程池适合计算密集型任务。",
)


def conversations(sessions: int, messages: int) -> dict[str, list[dict[str, Any]]]:
    """OpenAI-style messages per session id."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in range(sessions):
        rows = []
        for m in range(messages):
            row: dict[str, Any] = {
                "role": "user" if m % 2 == 0 else "assistant",
                "content": f"{TEXTS[m % len(TEXTS)]} ({s}/{m})",
                "timestamp": T0 + s * 10_000 + m,
            }
            if m % 5 == 1:
                row["tool_calls"] = [
                    {
                        "id": f"c{m}",
                        "type": "function",
                        "function": {"name": "search", "arguments": "{}"},
                    }
                ]
            rows.append(row)
        out[f"bench-{s:04d}"] = rows
    return out


def write_transcripts(folder: Path, data: dict[str, list[dict[str, Any]]]) -> None:
    folder.mkdir()
    for session_id, rows in data.items():
        meta = {"role": "session_meta", "platform": "cli", "timestamp": rows[0]["timestamp"]}
        lines = [json.dumps(meta)] + [json.dumps(r, ensure_ascii=False) for r in rows]
        (folder / f"{session_id}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_append(path: Path, data: dict[str, list[dict[str, Any]]], _: Path) -> None:
    with SessionDB(path) as store:
        for session_id, rows in data.items():
            store.create_session(session_id, "cli", started_at=rows[0]["timestamp"])
            for row in rows:
                store.append_message(
                    session_id,
                    row["role"],
                    row["content"],
                    tool_calls=row.get("tool_calls"),
                    timestamp=row["timestamp"],
                )


def run_transcripts(path: Path, _: dict[str, list[dict[str, Any]]], work: Path) -> None:
    with SessionDB(path) as store:
        store.import_transcripts(work / "transcripts")


def run_bundle(path: Path, _: dict[str, list[dict[str, Any]]], work: Path) -> None:
    with SessionDB(path) as store:
        store.import_bundle(work / "bundle.jsonl")


_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_calls, timestamp) VALUES (?, ?, ?, ?, ?)"
)


def _plain_rows(session_id: str, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            session_id,
            r["role"],
            r["content"],
            json.dumps(r["tool_calls"]) if "tool_calls" in r else None,
            r["timestamp"],
        )
        for r in rows
    ]


def run_plain_each(path: Path, data: dict[str, list[dict[str, Any]]], _: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for session_id, rows in data.items():
            conn.execute(
                "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                (session_id, rows[0]["timestamp"]),
            )
            for values in _plain_rows(session_id, rows):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_INSERT, values)
                conn.execute(
                    "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
                    (session_id,),
                )
                conn.execute("COMMIT")
    finally:
        conn.close()


def run_plain_bulk(path: Path, data: dict[str, list[dict[str, Any]]], _: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for session_id, rows in data.items():
            conn.execute(
                "INSERT INTO sessions (id, source, started_at, message_count)"
                " VALUES (?, 'cli', ?, ?)",
                (session_id, rows[0]["timestamp"], len(rows)),
            )
            conn.executemany(_INSERT, _plain_rows(session_id, rows))
        conn.execute("COMMIT")
    finally:
        conn.close()


VARIANTS: dict[str, Callable[[Path, dict[str, list[dict[str, Any]]], Path], None]] = {
    "append": run_append,
    "transcripts": run_transcripts,
    "bundle": run_bundle,
    "plain per message": run_plain_each,
    "plain bulk": run_plain_bulk,
}


def check(path: Path, expected: int) -> None:
    conn = sqlite3.connect(path)
    try:
        count = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        assert count == expected, (path, count, expected)
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == expected
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = conversations(args.sessions, args.messages)
    total = args.sessions * args.messages
    timings: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="hermes-bulk-") as tmp:
        work = Path(tmp)
        write_transcripts(work / "transcripts", data)
        seed = work / "seed.db"
        run_transcripts(seed, data, work)
        with SessionDB(seed) as store:
            store.export_bundle(work / "bundle.jsonl")
        empty = work / "empty.db"
        SessionDB(empty).close()  # migrated and in WAL mode, as Hermes keeps it
        for round_ in range(args.rounds):
            for name, variant in VARIANTS.items():
                path = work / f"{round_}-{name.replace(' ', '-')}.db"
                shutil.copyfile(empty, path)
                started = time.perf_counter()
                variant(path, data, work)
                timings[name].append(time.perf_counter() - started)
                check(path, total)
    print(
        f"{args.sessions} sessions x {args.messages} messages = {total} messages, "
        f"median of {args.rounds} rounds"
    )
    median = {name: statistics.median(values) for name, values in timings.items()}
    for name, seconds in median.items():
        print(f"  {name:<18} {seconds:8.3f} s  {total / seconds:10.0f} msg/s")
    for name in ("transcripts", "bundle"):
        print(
            f"{name} import is {median['append'] / median[name]:.1f}x faster than append_message "
            "(target >= 3x)"
        )
    print(
        f"plain sqlite3: bulk is {median['plain per message'] / median['plain bulk']:.1f}x "
        "faster than per-message commits"
    )


if __name__ == "__main__":
    main()
