"""A writer killed with SIGKILL at random moments never corrupts the file or loses an
acknowledged message."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hermes_models
from hermes_models.driver import sqlite3

WRITER = Path(__file__).with_name("fault_writer.py")


def acknowledged(path: Path) -> list[int]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    # The last line may be torn if the kill landed inside os.write.
    return [int(line) for line in lines if line.strip().isdigit()]


def check_file(db_path: Path, acked: list[int]) -> None:
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            assert (
                conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
                == conn.execute("SELECT COUNT(*) FROM messages").fetchone()
            )
        counters = conn.execute(
            "SELECT s.id, s.message_count, (SELECT COUNT(*) FROM messages m"
            " WHERE m.session_id = s.id AND m.active = 1) FROM sessions s"
        ).fetchall()
        assert [(sid, stored) for sid, stored, _ in counters] == [
            (sid, real) for sid, _, real in counters
        ]
        present = {row[0] for row in conn.execute("SELECT id FROM messages")}
        missing = sorted(set(acked) - present)
        assert missing == []
    finally:
        conn.close()


@pytest.mark.slow
def test_kill_nine_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    hermes_models.migrate(db_path)
    rng = random.Random(20261129)
    total_acked: list[int] = []
    kills = 0
    for round_number in range(24):
        ack = tmp_path / f"ack-{round_number}.txt"
        session_id = f"writer-{round_number % 3}"
        process = subprocess.Popen(
            [sys.executable, str(WRITER), str(db_path), str(ack), session_id],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not acknowledged(ack) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.25))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert process.returncode == -signal.SIGKILL
        if process.stderr:
            process.stderr.close()
        kills += 1
        total_acked.extend(acknowledged(ack))
        check_file(db_path, total_acked)
    assert kills == 24
    assert len(total_acked) > 24
    # The store still works after all that.
    store = hermes_models.SessionDB(db_path)
    try:
        before = store.message_count()
        assert before >= len(total_acked)
        new_id = store.append_message("writer-0", "user", "after the storm")
        assert store.get_messages("writer-0")[-1]["id"] == new_id
        assert store.message_count() == before + 1
    finally:
        store.close()
    check_file(db_path, [*total_acked, new_id])
