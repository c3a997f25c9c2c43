"""Memory that does not grow with the data: bundle import (a summary per session, rows
read ahead one batch at a time, few compiled INSERTs) and both exports (rows from the
cursor). Boundedness is checked by counting and by tracemalloc peaks, never by time."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.driver import sqlite3
from hermes_models.transfer import staging
from hermes_models.transfer.bundle import CHUNK_ROWS, FORMAT, MESSAGE_COLUMNS, SESSION_COLUMNS
from hermes_models.transfer.staging import Staging, statement_sizes

PROMPT = "You are Hermes. " * 1000  # 16 KB, a long system prompt


def write_bundle(path: Path, sessions: int, per_session: int, *, prompt: str = PROMPT) -> Path:
    """``sessions`` sessions (``m-N``, every other titled) with ``per_session`` messages
    each, some in Chinese, every fifth a tool call; ``prompt`` on every session."""
    with open(path, "w", encoding="utf-8") as out:
        header = {
            "format": FORMAT,
            "version": 1,
            "schema_version": 16,
            "sessions": sessions,
            "messages": sessions * per_session,
        }
        out.write(json.dumps(header) + "\n")
        for s in range(sessions):
            line: dict[str, Any] = {
                "type": "session",
                "id": f"m-{s}",
                "source": "cli",
                "started_at": 1000.0 + s,
                "system_prompt": f"{s}: {prompt}",
                "message_count": 999,
            }
            if s % 2 == 0:
                line["title"] = f"title {s}"
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        message_id = 0
        for s in range(sessions):
            for n in range(per_session):
                message_id += 1
                text = f"message {n} of {s} " + ("事件循环调度协程" if n % 3 else "asyncio " * 20)
                line = {
                    "type": "message",
                    "id": message_id,
                    "session_id": f"m-{s}",
                    "role": "user" if n % 2 == 0 else "assistant",
                    "content": text,
                    "timestamp": 2000.0 + message_id,
                }
                if n % 5 == 1:
                    line["tool_calls"] = json.dumps([{"id": f"c{message_id}", "type": "function"}])
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def _peak(run: Callable[[], Any]) -> int:
    """The largest amount of memory Python allocated at once while ``run`` ran, in bytes."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _visible(path: Path) -> dict[str, tuple[int, int, Any]]:
    """``(messages stored, message_count, title)`` of each session, by id, read by plain
    sqlite3 as any reader would."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT s.id, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id),"
            " s.message_count, s.title FROM sessions s ORDER BY s.id"
        ).fetchall()
    finally:
        conn.close()
    return {row[0]: tuple(row[1:]) for row in rows}


# -- how many rows, how many statements -------------------------------------------------------


def test_statement_sizes_cover_every_count_with_nine_sizes_at_most() -> None:
    seen: set[int] = set()
    for count in range(0, 3 * CHUNK_ROWS + 1):
        sizes = statement_sizes(count)
        assert sum(sizes) == count
        seen.update(sizes)
    assert sorted(seen) == [1, 2, 4, 8, 16, 32, 64, 128, CHUNK_ROWS]


@pytest.mark.slow  # an import watched row by row
def test_an_import_holds_at_most_batch_rows_messages_at_once(
    store: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 37)
    batches: list[int] = []
    original = Staging._insert_batch

    def spy(self: Staging, batch: list[Any], *args: Any) -> int:
        batches.append(len(batch))
        return original(self, batch, *args)

    monkeypatch.setattr(Staging, "_insert_batch", spy)
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=12, per_session=110, prompt="p")
    report = store.import_bundle(bundle)
    assert report == {
        "sessions_added": 12,
        "sessions_skipped": 0,
        "messages_added": 1320,
        "messages_skipped": 0,
        "messages_renumbered": 0,
        "titles_renamed": 0,
    }
    assert max(batches) == 37
    assert sum(batches) >= 1320
    assert _visible(store.database.path) == {
        f"m-{s}": (110, 110, f"title {s}" if s % 2 == 0 else None) for s in range(12)
    }


@pytest.mark.slow  # traces every statement of an import
def test_an_import_compiles_few_distinct_inserts(
    store: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 53)
    # Few rows: the trace hands over each INSERT expanded with its values, again at
    # every trigger it fires (the cost of this test, not of the import).
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=2, per_session=100, prompt="p")
    statements: list[str] = []
    conn = store.database.connection()
    conn.set_trace_callback(statements.append)
    try:
        store.import_bundle(bundle)
    finally:
        conn.set_trace_callback(None)
    inserts = {
        sql.count("),(") + 1 for sql in statements if sql.startswith('INSERT INTO "messages"')
    }
    assert inserts <= {1, 2, 4, 8, 16, 32, 64, 128, CHUNK_ROWS}
    assert store.message_count(include_inactive=True) == 200


# -- what the import keeps: no session rows, no message rows ------------------------------------


@pytest.mark.slow
def test_import_memory_does_not_grow_with_the_sessions_or_their_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_copy: Callable[[Path], Path]
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 200)
    peaks = []
    for n, sessions in enumerate((3, 12, 120)):  # the first loads what an import loads once
        bundle = write_bundle(tmp_path / f"b{n}.jsonl", sessions=sessions, per_session=20)
        with SessionDB(migrated_copy(tmp_path / f"t{n}.db")) as store:
            peaks.append(_peak(lambda s=store, b=bundle: s.import_bundle(b)))
            assert store.session_count() == sessions
            assert store.message_count(include_inactive=True) == sessions * 20
    peaks = peaks[1:]
    # 120 sessions hold 1.9 MB of system prompts and 2,400 messages: at most SESSION_ROWS
    # sessions (256 KB) and BATCH_ROWS messages are held at once.
    assert peaks[1] - peaks[0] < 640 * 1024, peaks


def test_the_sessions_added_are_the_rows_checked_not_the_file_read_again(
    store: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 100)
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=4, per_session=400, prompt="p")
    text = bundle.read_bytes()
    changed = text.replace(b'"title": "title 2"', b'"title": "title X"')
    assert len(changed) == len(text) and changed != text

    def progress(done: int, total: int) -> None:
        if done < total and bundle.read_bytes() != changed:
            bundle.write_bytes(changed)  # after every read of the session lines

    report = store.import_bundle(bundle, progress=progress)
    assert (report["sessions_added"], report["messages_added"]) == (4, 1600)
    assert _visible(store.database.path) == {
        "m-0": (400, 400, "title 0"),
        "m-1": (400, 400, None),
        "m-2": (400, 400, "title 2"),
        "m-3": (400, 400, None),
    }


def test_a_bundle_from_a_pipe_is_spooled_and_imported_whole(
    store: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "BATCH_ROWS", 64)
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=5, per_session=300, prompt="p")
    store.create_session("old", "cli")
    store.set_session_title("old", "title 0")
    read, write = os.pipe()

    def feed() -> None:
        with open(write, "wb") as out:
            out.write(bundle.read_bytes())

    feeder = threading.Thread(target=feed)
    feeder.start()
    with open(read, encoding="utf-8") as stream:
        assert not stream.seekable()
        report = store.import_bundle(stream)
    feeder.join()
    assert report["sessions_added"] == 5
    assert report["messages_added"] == 1500
    assert report["titles_renamed"] == 1
    assert _visible(store.database.path) == {
        "old": (0, 0, "title 0"),
        "m-0": (300, 300, "title 0 #2"),
        "m-1": (300, 300, None),
        "m-2": (300, 300, "title 2"),
        "m-3": (300, 300, None),
        "m-4": (300, 300, "title 4"),
    }


def test_a_small_bundle_of_many_sessions_is_added_in_steps_all_the_same(
    store: SessionDB, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path / "b.jsonl", sessions=1100, per_session=0, prompt="p")
    report = store.import_bundle(bundle)
    assert (report["sessions_added"], report["messages_added"]) == (1100, 0)
    assert _visible(store.database.path) == {
        f"m-{s}": (0, 0, f"title {s}" if s % 2 == 0 else None) for s in range(1100)
    }
    assert store.import_bundle(bundle)["sessions_skipped"] == 1100


# -- exports read from the cursor -------------------------------------------------------------


def _fill(path: Path, sessions: int, per_session: int) -> None:
    """Sessions with long prompts and their messages, written with plain sqlite3 into a
    migrated file."""
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, started_at, system_prompt, message_count)"
            " VALUES (?, 'cli', ?, ?, ?)",
            [(f"e-{s}", 1000.0 + s, PROMPT, per_session) for s in range(sessions)],
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [
                (f"e-{s}", "user" if n % 2 == 0 else "assistant", f"line {n} " + "x" * 300, n)
                for s in range(sessions)
                for n in range(per_session)
            ],
        )
    conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bundle", "markdown"])
def test_export_memory_does_not_grow_with_the_store(
    tmp_path: Path, kind: str, migrated_copy: Callable[[Path], Path]
) -> None:
    peaks = []
    for n, sessions in enumerate((1, 10, 100)):  # the first loads what an export loads once
        path = migrated_copy(tmp_path / f"s{n}.db")
        _fill(path, sessions, 40)
        with SessionDB(path) as store:
            export = store.export_bundle if kind == "bundle" else store.export_markdown
            out = tmp_path / f"out{n}"
            peaks.append(_peak(lambda e=export, o=out: e(o)))
        assert out.stat().st_size > sessions * 40 * 300
    peaks = peaks[1:]
    # 100 sessions: 1.6 MB of prompts and 1.2 MB of messages, none of it held at once.
    assert peaks[1] - peaks[0] < 256 * 1024, peaks


def test_exports_of_a_selection_keep_their_order(
    tmp_path: Path, migrated_copy: Callable[[Path], Path]
) -> None:
    path = migrated_copy(tmp_path / "state.db")
    _fill(path, 6, 3)
    with SessionDB(path) as store:
        store.create_session("child", "cli", parent_session_id="e-4")
        store.append_message("child", "user", "late")
        store.append_message("e-4", "user", "later")
        store.export_bundle(tmp_path / "one.jsonl", session_id="e-4")
        lines = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
        store.export_markdown(tmp_path / "one.md", session_id="e-4")
        markdown = (tmp_path / "one.md").read_text()
    assert [(r.get("type"), r.get("id"), r.get("session_id")) for r in lines] == [
        (None, None, None),
        ("session", "e-4", None),
        ("session", "child", None),
        ("message", 13, "e-4"),
        ("message", 14, "e-4"),
        ("message", 15, "e-4"),
        ("message", 19, "child"),
        ("message", 20, "e-4"),
    ]
    assert lines[0]["sessions"] == 2 and lines[0]["messages"] == 5
    assert set(lines[1]) == {"type", *SESSION_COLUMNS}
    assert set(lines[3]) == {"type", *MESSAGE_COLUMNS}
    assert [line for line in markdown.splitlines() if line.startswith("## ")] == [
        "## e-4",
        "## child",
    ]
    assert markdown.index("line 0") < markdown.index("later") < markdown.index("## child")
