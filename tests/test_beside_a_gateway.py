"""This package adopting, writing, reading and vacuuming a store while Hermes v16
appends to it in a loop, as a live gateway does: Hermes raises nothing, and every
message either side wrote is in the file once, counted and indexed. The timings of
the same run are ``benchmarks/beside_gateway.py``'s."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from beside_hermes import Appender
from console_script import run

from hermes_models import SessionDB

pytestmark = pytest.mark.slow  # Hermes' release in a process of its own, ~4 s


def test_adopting_writing_and_vacuuming_beside_a_live_hermes_v16_loses_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    appender = Appender(path, sessions=100, messages=10, pause_ms=5)
    try:
        time.sleep(0.2)
        with SessionDB(path) as store:  # the first writable open: the adoption
            store.create_session("ours", "cli")
            for n in range(40):
                store.append_message("ours", "user", f"ours {n} asyncio")
                assert len(store.get_messages("ours")) == n + 1
                assert store.search_messages("asyncio", limit=1)
        vacuum = run("vacuum", "--db", str(path), cwd=tmp_path)
        assert vacuum.returncode == 0, vacuum.stderr
        time.sleep(0.2)
    finally:
        appends = appender.stop()

    assert [a.error for a in appends if a.error] == []
    assert appender.filled == 1000
    with SessionDB(path, read_only=True) as store:
        live = store.get_messages("gateway-live")
        assert [m["id"] for m in live] == [a.message_id for a in appends]
        assert [m["content"] for m in live] == [
            f"live message {n} asyncio" for n in range(1, len(appends) + 1)
        ]
        assert store.get_session("gateway-live")["message_count"] == len(appends)
        assert [m["content"] for m in store.get_messages("ours")] == [
            f"ours {n} asyncio" for n in range(40)
        ]
        assert store.message_count() == 1000 + len(appends) + 40
    # The word and trigram indexes, the gram index and the counters against the messages.
    doctor = run("doctor", "--db", str(path), cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
