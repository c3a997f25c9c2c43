"""``since``/``until``: sessions by when they started, messages by when they were sent.

The library takes epoch seconds or ``datetime`` (``list_sessions_rich``,
``search_messages``, ``search_sessions``, ``export_bundle``); the console script
takes dates, times and durations (``--since 7d``) on ``sessions``, ``search`` and
``export``. Expected rows are written out from the data the tests put in.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import EXPORT_FLAGS
from console_script import environment, run

from hermes_models import SessionDB
from hermes_models.models.clock import parse_when

pytestmark = pytest.mark.backends("sqlite", "postgresql")

DAY = 86400.0
#: Noon UTC on 2026-11-01, 02, 03, 04 (one session a day, each with two messages).
NOON = [datetime(2026, 11, d, 12, tzinfo=timezone.utc).timestamp() for d in (1, 2, 3, 4)]


def fill(store: SessionDB) -> None:
    for day, at in enumerate(NOON, 1):
        sid = f"day-{day}"
        store.create_session(sid, "cli", started_at=at)
        store.append_message(sid, "user", f"lantern on day {day}", timestamp=at + 60)
        store.append_message(sid, "assistant", f"reply {day}", timestamp=at + 3600)
    # A continuation of day 1 started on day 3: the window judges each session itself.
    store.end_session("day-1", "compression")
    store.create_session("day-1b", "cli", parent_session_id="day-1", started_at=NOON[2] + 10)
    store.append_message("day-1b", "user", "lantern carried on", timestamp=NOON[2] + 20)


def test_sessions_started_in_the_window(store: SessionDB) -> None:
    fill(store)
    rows = store.list_sessions_rich(limit=None, since=NOON[1], until=NOON[3])
    assert [row["id"] for row in rows] == ["day-3", "day-2"]
    since = datetime(2026, 11, 3, tzinfo=timezone.utc)  # a datetime works as well
    assert [row["id"] for row in store.list_sessions_rich(limit=None, since=since)] == [
        "day-4",
        "day-3",
    ]
    # The chain of day 1 is listed by its root, which started on day 1.
    assert [r["id"] for r in store.list_sessions_rich(limit=None, until=NOON[0] + 1)] == ["day-1b"]
    with pytest.raises(ValueError, match=r"since \(\d+\.0\) is after until"):
        store.list_sessions_rich(since=NOON[2], until=NOON[1])


def test_messages_sent_in_the_window(store: SessionDB) -> None:
    fill(store)
    hits = store.search_messages("lantern", sort="oldest", since=NOON[1], until=NOON[2] + 30)
    assert [(hit["session_id"], hit["timestamp"]) for hit in hits] == [
        ("day-2", NOON[1] + 60),
        ("day-1b", NOON[2] + 20),
    ]
    assert store.search_messages("lantern", since=NOON[3] + 61) == []
    # Paging counts only what the window lets through.
    page = store.search_messages("lantern", sort="newest", limit=1, offset=1, since=NOON[1])
    assert [hit["session_id"] for hit in page] == ["day-3"]


def test_sessions_by_search_started_in_the_window(store: SessionDB) -> None:
    fill(store)
    rows = store.search_sessions("lantern", limit=None, since=NOON[1])
    assert sorted(row["id"] for row in rows) == ["day-2", "day-3", "day-4"]
    listed = store.search_sessions(None, limit=None, until=NOON[1])
    assert sorted(row["id"] for row in listed) == ["day-1"]


def test_an_export_holds_the_window_and_its_ancestors(store: SessionDB, tmp_path: Path) -> None:
    fill(store)
    out = tmp_path / "window.jsonl"
    counts = store.export_bundle(out, since=NOON[2], until=NOON[3])
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    sessions = [line["id"] for line in lines if line.get("type") == "session"]
    # day-3 and day-1b started on day 3; day-1 comes as day-1b's ancestor.
    assert sorted(sessions) == ["day-1", "day-1b", "day-3"]
    assert counts == {"sessions": 3, "messages": 5}
    with pytest.raises(ValueError, match="not with session_id"):
        store.export_bundle(tmp_path / "x.jsonl", session_id="day-3", since=NOON[0])


@pytest.mark.backends("sqlite")
def test_parse_when_reads_dates_times_and_durations() -> None:
    now = NOON[3] + 3 * 3600  # 15:00 UTC on 2026-11-04
    assert parse_when("7d", utc=True, now=now) == now - 7 * DAY
    assert parse_when("12h", utc=True, now=now) == now - 12 * 3600
    assert parse_when("30m", utc=True, now=now) == now - 1800
    assert parse_when("2w", utc=True, now=now) == now - 14 * DAY
    midnight = NOON[1] - 12 * 3600
    assert parse_when("2026-11-02", utc=True, now=now) == midnight
    assert parse_when("2026-11-02", utc=True, end=True, now=now) == midnight + DAY
    assert parse_when("2026-11-02T09:30", utc=True, now=now) == midnight + 9.5 * 3600
    assert parse_when("2026-11-02 09:30:15", utc=True, now=now) == midnight + 9.5 * 3600 + 15
    assert parse_when("today", utc=True, now=now) == NOON[3] - 12 * 3600
    assert parse_when("yesterday", utc=True, end=True, now=now) == NOON[3] - 12 * 3600
    for bad in ("last week", "7 days", "2026-13-01", ""):
        with pytest.raises(ValueError, match="is no time: use a date"):
            parse_when(bad, utc=True, now=now)


@pytest.mark.backends("sqlite")
@pytest.mark.slow  # console-script runs
def test_the_console_script_takes_dates_and_durations(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with SessionDB(db) as store:
        fill(store)
    env = environment(tmp_path)

    def ids(*args: str) -> list[str]:
        done = run("--db", str(db), "--utc", *args, "--json", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return [row.get("session_id") or row["id"] for row in json.loads(done.stdout)]

    assert ids("sessions", "--since", "2026-11-02", "--until", "2026-11-03") == [
        "day-3",
        "day-2",
    ]
    assert ids("search", "lantern", "--sort", "oldest", "--until", "2026-11-01") == ["day-1"]
    assert sorted(ids("search", "lantern", "--sessions", "--since", "2026-11-04")) == ["day-4"]
    exported = tmp_path / "out.jsonl"
    done = run(
        "--db", str(db), "export", *EXPORT_FLAGS, "--since", "2026-11-04", "-o", str(exported),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote 1 session and 2 messages to {exported}"
    refused = run("--db", str(db), "sessions", "--since", "last week", cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert "Invalid value for '--since': 'last week' is no time: use a date" in refused.stderr
    backwards = run(
        "--db", str(db), "search", "x", "--since", "1d", "--until", "2d", cwd=tmp_path, env=env
    )
    assert backwards.returncode == 2
    assert "--since 1d is after --until 2d" in backwards.stderr
