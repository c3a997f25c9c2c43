"""Bundles and transcripts written to hurt: every bad value refused by file and line,
before anything is written; files that would crash a reader refused the same way."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hermes_models import BundleError, SessionDB
from hermes_models.conversations import transcript
from hermes_models.driver import sqlite3
from hermes_models.transfer import jsonl
from hermes_models.transfer.bundle import FORMAT
from hermes_models.transfer.transcript_files import parse_iso

from snapshots import store_snapshot

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def _header(sessions: int, messages: int) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": 1,
        "schema_version": 16,
        "sessions": sessions,
        "messages": messages,
    }


def _session(session_id: str = "s1", **values: Any) -> dict[str, Any]:
    return {"type": "session", "id": session_id, "source": "cli", "started_at": 1.0, **values}


def _message(message_id: int = 1, session_id: str = "s1", **values: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "id": message_id,
        "session_id": session_id,
        "role": "user",
        "timestamp": 2.0,
        **values,
    }


def _write(path: Path, *records: Any) -> Path:
    sessions = sum(1 for r in records if isinstance(r, dict) and r.get("type") == "session")
    messages = sum(1 for r in records if isinstance(r, dict) and r.get("type") == "message")
    lines = [json.dumps(_header(sessions, messages))]
    lines += [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def empty_target(
    backend: str,
    tmp_path: Path,
    migrated_copy: Callable[[Path], Path],
    request: pytest.FixtureRequest,
) -> Any:
    """A migrated store on the test's backend: a file's path, or a PostgreSQL URL."""
    if backend == "postgresql":
        return request.getfixturevalue("pg").new_database()
    return migrated_copy(tmp_path / "target.db")


@pytest.fixture
def target(empty_target: Any) -> Any:
    """:func:`empty_target` holding one session with one message."""
    with SessionDB(empty_target) as store:
        store.create_session("here", "cli")
        store.append_message("here", "user", "already here")
    return empty_target


def _refused(target: Any, bundle: Path, line: int | None) -> str:
    """Import ``bundle``, expect a BundleError naming it (and ``line``); the store unchanged."""
    before = store_snapshot(target)
    with SessionDB(target) as store:
        with pytest.raises(BundleError) as caught:
            store.import_bundle(bundle)
    message = str(caught.value)
    prefix = f"{bundle}:{line}: " if line is not None else f"{bundle}: "
    assert message.startswith(prefix), message
    assert store_snapshot(target) == before
    return message[len(prefix) :]


# -- point by point: each value checked for type and range ------------------------------------

BAD_VALUES = [
    pytest.param(_message(2**63 - 1), "message id must be between 1 and 2**62", id="id-int64-max"),
    pytest.param(_message(2**62 + 1), "message id must be between 1 and 2**62", id="id-no-room"),
    pytest.param(_message(0), "message id must be between 1 and 2**62", id="id-zero"),
    pytest.param(_message(-5), "message id must be between 1 and 2**62", id="id-negative"),
    pytest.param(_message(1.5), "message id must be an integer, not a number", id="id-float"),
    pytest.param(_message(True), "message id must be an integer, not a boolean", id="id-bool"),
    pytest.param(
        _message(timestamp=1e300),
        "message timestamp 1e+300 is not a time between years 1 and 9999",
        id="timestamp-huge",
    ),
    pytest.param(
        '{"type":"message","id":1,"session_id":"s1","role":"user","timestamp":' + "9" * 400 + "}",
        "message timestamp (an integer of 400 digits) is not a time between years 1 and 9999",
        id="timestamp-400-digits",
    ),
    pytest.param(
        '{"type":"message","id":1,"session_id":"s1","role":"user","timestamp":NaN}',
        "message timestamp nan is not a time between years 1 and 9999",
        id="timestamp-nan",
    ),
    pytest.param(
        '{"type":"message","id":1,"session_id":"s1","role":"user","timestamp":Infinity}',
        "message timestamp inf is not a time between years 1 and 9999",
        id="timestamp-infinity",
    ),
    pytest.param(
        _message(timestamp="2024-01-01"),
        "message timestamp must be seconds since the epoch, not text",
        id="timestamp-text",
    ),
    pytest.param(_message(active=2), "message active must be 0 or 1, not 2", id="active-2"),
    pytest.param(
        _message(active=None), "message active must be 0 or 1, not None", id="active-null"
    ),
    pytest.param(_message(observed=7), "message observed must be 0 or 1, not 7", id="observed-7"),
    pytest.param(
        _message(role="developer"),
        "message role must be one of system, user, assistant, tool, not 'developer'",
        id="role-unknown",
    ),
    pytest.param(
        _message(role=["user"]),
        "message role must be one of system, user, assistant, tool, not a JSON array",
        id="role-list",
    ),
    pytest.param(
        _message(token_count=2**63),
        "message token_count is outside the 64-bit integer range",
        id="token-count-too-large",
    ),
    pytest.param(
        _message(token_count="12"),
        "message token_count must be an integer or null, not text",
        id="token-count-text",
    ),
    pytest.param(
        _message(tool_calls={"a": 1}),
        "message tool_calls must be text or null, not a JSON object",
        id="tool-calls-object",
    ),
    pytest.param(
        _message(tool_name={"$base64": "AA=="}),
        "message tool_name must be text or null, not a JSON object",
        id="blob-in-text-column",
    ),
    pytest.param(
        '{"type":"message","id":1,"session_id":"s1","role":"user","timestamp":2,'
        '"content":"\\ud800"}',
        "holds text that cannot be stored as UTF-8 (a lone surrogate)",
        id="lone-surrogate",
    ),
]


@pytest.mark.parametrize(("line", "expected"), BAD_VALUES)
def test_a_bad_message_value_is_refused_by_file_line_and_column(
    target: Any, tmp_path: Path, line: Any, expected: str
) -> None:
    bundle = _write(tmp_path / "bad.jsonl", _session(), line)
    assert _refused(target, bundle, 3).startswith(expected)


BAD_SESSIONS = [
    pytest.param(_session(""), "session id must not be empty", id="empty-id"),
    pytest.param(_session(5), "session id must be text, not a number", id="number-id"),
    pytest.param(_session(source=""), "session source must not be empty", id="empty-source"),
    pytest.param(
        _session(parent_session_id=""),
        "session parent_session_id must not be empty",
        id="empty-parent",
    ),
    pytest.param(
        _session(started_at=-1e13),
        "session started_at -10000000000000.0 is not a time between years 1 and 9999",
        id="started-before-year-1",
    ),
    pytest.param(
        _session(ended_at=float("inf")),
        "session ended_at inf is not a time between years 1 and 9999",
        id="ended-infinite",
    ),
    pytest.param(_session(archived=3), "session archived must be 0 or 1, not 3", id="archived-3"),
    pytest.param(
        _session(rewind_count=None),
        "session rewind_count must be an integer, not null",
        id="rewind-count-null",
    ),
    pytest.param(
        _session(input_tokens=-(2**63) - 1),
        "session input_tokens is outside the 64-bit integer range",
        id="tokens-below-int64",
    ),
    pytest.param(
        '{"type":"session","id":"s1","source":"cli","started_at":1,"actual_cost_usd":NaN}',
        "session actual_cost_usd must be a number, not NaN",
        id="cost-nan",
    ),
    pytest.param(_session(title=""), "session title must not be empty", id="empty-title"),
    pytest.param(_session(title=7), "session title must be text or null", id="number-title"),
    pytest.param(
        _session(model_config={"_branched_from": "x"}),
        "session model_config must be text or null, not a JSON object",
        id="config-object",
    ),
    pytest.param(_session(parent_session_id="s1"), "session 's1' is its own parent", id="self"),
]


@pytest.mark.parametrize(("line", "expected"), BAD_SESSIONS)
def test_a_bad_session_value_is_refused_by_file_line_and_column(
    target: Any, tmp_path: Path, line: Any, expected: str
) -> None:
    bundle = _write(tmp_path / "bad.jsonl", line)
    assert _refused(target, bundle, 2).startswith(expected)


def test_a_message_id_at_the_int64_limit_no_longer_bricks_the_store(
    target: Any, tmp_path: Path
) -> None:
    bundle = _write(tmp_path / "brick.jsonl", _session(), _message(2**63 - 1))
    _refused(target, bundle, 3)
    with SessionDB(target) as store:
        store.import_bundle(_write(tmp_path / "fine.jsonl", _session(), _message(50)))
        assert store.append_message("s1", "user", "still appending") == 51
        store.delete_session("s1")
        assert store.append_message("here", "user", "and after a delete") == 52


def test_parent_cycles_inside_a_bundle_are_refused(target: Any, tmp_path: Path) -> None:
    bundle = _write(
        tmp_path / "cycle.jsonl",
        _session("a", parent_session_id="c"),
        _session("b", parent_session_id="a"),
        _session("c", parent_session_id="b"),
        _session("d", parent_session_id="here"),
    )
    assert (
        _refused(target, bundle, 2) == "session 'a' is its own ancestor ('a' -> 'c' -> 'b' -> 'a')"
    )


def test_duplicate_titles_and_ids_inside_a_bundle_are_refused(target: Any, tmp_path: Path) -> None:
    bundle = _write(
        tmp_path / "titles.jsonl", _session("a", title="Notes"), _session("b", title="Notes")
    )
    assert _refused(target, bundle, 3) == (
        "title 'Notes' is also the title of session 'a' (line 2); titles are unique"
    )
    bundle = _write(tmp_path / "ids.jsonl", _session("a"), _session("a"))
    assert _refused(target, bundle, 3) == "session 'a' appears twice (first on line 2)"


def test_messages_must_follow_their_sessions_in_increasing_id_order(
    target: Any, tmp_path: Path
) -> None:
    bundle = _write(tmp_path / "order.jsonl", _session(), _message(5), _message(5))
    assert _refused(target, bundle, 4) == (
        "message id 5 is not larger than the one before (5); message lines are in "
        "increasing id order"
    )
    bundle = _write(tmp_path / "late.jsonl", _session(), _message(1), _session("s2"))
    assert _refused(target, bundle, 4) == "session lines must come before the message lines"
    bundle = _write(tmp_path / "early.jsonl", _message(1), _session())
    assert _refused(target, bundle, 2) == (
        "message 1 belongs to session 's1', which the bundle does not contain (above this line)"
    )


def test_counters_are_recomputed_from_the_imported_rows(target: Any, tmp_path: Path) -> None:
    calls = json.dumps([{"id": "c1"}, {"id": "c2"}])
    bundle = _write(
        tmp_path / "counters.jsonl",
        _session(message_count=999, tool_call_count=77, input_tokens=12),
        _message(1),
        _message(2, role="assistant", tool_calls=calls),
        _message(3, role="tool", tool_calls=calls),
        _message(4, role="assistant", tool_calls=calls, active=0),
        _message(5, role="assistant", tool_calls="not json"),
    )
    with SessionDB(target) as store:
        store.import_bundle(bundle)
        session = store.get_session("s1")
        imported = (session["message_count"], session["tool_call_count"], session["input_tokens"])
        # The rule every writer keeps (Hermes'): recounting the session changes nothing.
        transcript.recount("s1")
        again = store.get_session("s1")
    # Every row counts, rewound included; a tool result adds no call; text that is
    # not a JSON list counts as one call.
    assert imported == (5, 5, 12)
    assert (again["message_count"], again["tool_call_count"]) == imported[:2]


# -- files that crash readers --------------------------------------------------------------


def test_a_json_bomb_is_a_bundle_error_with_file_and_line(target: Any, tmp_path: Path) -> None:
    bundle = _write(tmp_path / "bomb.jsonl", _session(), "[" * 100_000 + "]" * 100_000)
    assert _refused(target, bundle, 3) == "JSON nested too deeply to read"


def test_a_byte_that_is_not_utf8_is_a_bundle_error(target: Any, tmp_path: Path) -> None:
    bundle = _write(tmp_path / "latin1.jsonl", _session(), _message(content="caf\u00e9"))
    bundle.write_bytes(bundle.read_bytes().replace(b"caf\\u00e9", b"caf\xe9"))
    byte = bundle.read_bytes().splitlines()[2].index(b"\xe9") + 1
    assert _refused(target, bundle, 3) == f"not UTF-8 text (byte {byte} of the line is 0xe9)"


def test_an_integer_beyond_python_s_digit_limit_is_a_bundle_error(
    target: Any, tmp_path: Path
) -> None:
    line = '{"type":"message","id":' + "1" * 5000 + ',"session_id":"s1"}'
    bundle = _write(tmp_path / "digits.jsonl", _session(), line)
    assert _refused(target, bundle, 3).startswith("not readable JSON (Exceeds the limit")


def test_an_over_long_line_is_refused_without_reading_it_whole(
    target: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1024 * 1024)
    bundle = _write(tmp_path / "long.jsonl", _session(), _message(content="x" * 24_000_000))
    tracemalloc.start()
    try:
        message = _refused(target, bundle, 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message == "line longer than 1 MiB"
    assert peak < 8 * 1024 * 1024  # a 24 MB line, read 1 MiB at most


def test_the_line_cap_is_64_mib_and_a_line_of_exactly_that_is_read() -> None:
    assert jsonl.MAX_LINE_BYTES == 64 * 1024 * 1024


def test_a_cap_sized_line_is_accepted(target: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    record = json.dumps(_message(content=""))
    content = "y" * (4096 - len(record))
    bundle = _write(tmp_path / "exact.jsonl", _session(), _message(content=content))
    assert len(bundle.read_text().splitlines()[2]) == 4096
    with SessionDB(target) as store:
        assert store.import_bundle(bundle)["messages_added"] == 1
        assert store.get_messages("s1")[0]["content"] == content


# -- legacy transcripts ------------------------------------------------------------------


def test_a_folder_import_records_every_bad_file_and_imports_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty_target: Any
) -> None:
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1024 * 1024)
    folder = tmp_path / "sessions"
    folder.mkdir()
    good = '{"role": "user", "content": "hello", "timestamp": 10}\n'
    files = {
        "a-good": good,
        "b-bomb": "[" * 100_000 + "]" * 100_000 + "\n",
        "c-latin1": None,
        "d-digits": '{"role": "user", "content": "x", "timestamp": ' + "9" * 400 + "}\n",
        "e-long": '{"role": "user", "content": "' + "z" * 2_000_000 + '"}\n',
        "f-surrogate": '{"role": "user", "content": "\\udfff"}\n',
        "g-year-zero": '{"role": "user", "content": "x", "timestamp": "0000-01-01T00:00:00"}\n',
        "h-good": good,
    }
    for name, text in files.items():
        if text is None:
            (folder / f"{name}.jsonl").write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
        else:
            (folder / f"{name}.jsonl").write_text(text, encoding="utf-8")
    with SessionDB(empty_target) as store:
        report = store.import_transcripts(folder)
        ids = sorted(s["id"] for s in store.list_sessions(limit=None))
    errors = {Path(f["file"]).stem: f["error"] for f in report["failed"]}
    for name, error in errors.items():
        assert error.startswith(f"{folder / name}.jsonl:1: "), error
    assert {name: error.split(":1: ", 1)[1] for name, error in errors.items()} == {
        "b-bomb": "JSON nested too deeply to read",
        "c-latin1": "not UTF-8 text (byte 33 of the line is 0xe9)",
        "d-digits": "timestamp 999999999999... (400 characters) is not a time between "
        "years 1 and 9999",
        "e-long": "line longer than 1 MiB",
        "f-surrogate": "holds text that cannot be stored as UTF-8 (a lone surrogate)",
        "g-year-zero": "timestamp '0000-01-01T00:00:00' is neither epoch seconds nor ISO 8601",
    }
    assert (report["files"], report["sessions_added"], ids) == (8, 2, ["a-good", "h-good"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-01T10:00:00.12345", datetime(2024, 3, 1, 10, 0, 0, 123450)),
        ("2024-03-01T10:00:00.1234567", datetime(2024, 3, 1, 10, 0, 0, 123456)),
        ("2024-03-01T10:00:00.5", datetime(2024, 3, 1, 10, 0, 0, 500000)),
        ("2024-03-01T10:00:00,25", datetime(2024, 3, 1, 10, 0, 0, 250000)),
        ("2024-03-01 10:00", datetime(2024, 3, 1, 10, 0)),
        ("2024-03-01T10", datetime(2024, 3, 1, 10)),
        ("2024-03-01", datetime(2024, 3, 1)),
        ("20240301T100000", datetime(2024, 3, 1, 10, 0, 0)),
        ("2024-03-01T10:00:00Z", datetime(2024, 3, 1, 10, tzinfo=timezone.utc)),
        (
            "2024-03-01T10:00:00.123+05:30",
            datetime(2024, 3, 1, 10, 0, 0, 123000, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        ),
        (
            "2024-03-01T10:00:00-0800",
            datetime(2024, 3, 1, 10, tzinfo=timezone(-timedelta(hours=8))),
        ),
        ("2024-03-01T10:00:00+05", datetime(2024, 3, 1, 10, tzinfo=timezone(timedelta(hours=5)))),
    ],
)
def test_iso_timestamps_parse_the_same_on_every_python(text: str, expected: datetime) -> None:
    parsed = parse_iso(text)
    assert (parsed, parsed.tzinfo) == (expected, expected.tzinfo)


@pytest.mark.parametrize(
    "text", ["yesterday", "2024-13-01", "2024-03-01T25:00", "2024-03", "2024-03-01T10:00:00+5"]
)
def test_text_that_is_not_an_iso_date_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso(text)


def test_a_transcript_with_five_fractional_digits_imports(
    tmp_path: Path, empty_target: Any
) -> None:
    file = tmp_path / "s5.jsonl"
    file.write_text(
        json.dumps({"role": "user", "content": "hi", "timestamp": "2024-03-01T10:00:00.12345Z"})
        + "\n",
        encoding="utf-8",
    )
    with SessionDB(empty_target) as store:
        assert store.import_transcripts(file)["sessions_added"] == 1
        stamp = store.get_messages("s5")[0]["timestamp"]
    assert stamp == datetime(2024, 3, 1, 10, 0, 0, 123450, tzinfo=timezone.utc).timestamp()


def test_a_bundle_read_from_a_stream_that_cannot_rewind_is_imported(
    target: Any, tmp_path: Path
) -> None:
    bundle = _write(tmp_path / "b.jsonl", _session(), _message(1, content="through a pipe"))

    class OneWay:
        name = "pipe"

        def __init__(self, text: str) -> None:
            self._lines = iter(text.splitlines(keepends=True))

        def readline(self, limit: int = -1) -> str:
            return next(self._lines, "")

        def read(self, size: int = -1) -> str:  # pragma: no cover - never called
            raise AssertionError("read() is not used")

    with SessionDB(target) as store:
        report = store.import_bundle(OneWay(bundle.read_text(encoding="utf-8")))
        assert report["messages_added"] == 1
        assert store.get_messages("s1")[0]["content"] == "through a pipe"


@pytest.mark.parametrize("small", [True, False], ids=["one write", "in steps"])
def test_a_bundle_changed_between_its_two_reads_is_undone(
    target: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool
) -> None:
    from hermes_models.transfer import importer

    bundle = _write(tmp_path / "b.jsonl", _session(), _message(1, content="first"))
    before = store_snapshot(target)
    real = importer.scan

    def scan_then_edit(*args: Any) -> Any:
        plan = real(*args)
        bundle.write_text(bundle.read_text().replace("first", "FIRST"), encoding="utf-8")
        return plan

    monkeypatch.setattr(importer, "scan", scan_then_edit)
    monkeypatch.setattr(importer, "SMALL_IMPORT", 1000 if small else 0)
    with SessionDB(target) as store:
        with pytest.raises(BundleError, match="the file changed while it was being imported"):
            store.import_bundle(bundle)
    assert store_snapshot(target) == before


def test_the_store_refuses_nothing_the_checks_let_through(
    target: Any, tmp_path: Path, backend: str
) -> None:
    """The extremes the checks accept are stored and read back exactly."""
    bundle = _write(
        tmp_path / "edges.jsonl",
        _session(
            "edge",
            started_at=-62135596800.0 + 86400,
            ended_at=253402300799.0 - 86400,
            input_tokens=2**63 - 1,
            output_tokens=-(2**63),
            estimated_cost_usd=float("inf"),
            title="x" * 300,
        ),
        _message(2**62, "edge", observed=None, token_count=0, content="\x00nul"),
    )
    with SessionDB(target) as store:
        store.import_bundle(bundle)
        session = store.get_session("edge")
        assert store.get_messages("edge")[0]["id"] == 2**62
        assert store.append_message("edge", "user", "room left") == 2**62 + 1
    assert (session["input_tokens"], session["output_tokens"]) == (2**63 - 1, -(2**63))
    if backend == "sqlite":  # the file's own check
        conn = sqlite3.connect(target)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            conn.close()
