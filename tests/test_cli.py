"""The hermes-models command line: migrate, sessions, show, demo, help and errors."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hermes_models import SessionDB
from hermes_models.cli import cli, main

T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC
SCRIPT = Path(sys.executable).parent / "hermes-models"
MIGRATIONS = [
    "0001_adopt_hermes_tables",
    "0002_hermes_v16_schema",
    "0003_message_search",
    "0004_tag_delegate_children",
    "0005_delegate_tags_by_end_reason",
    "0006_search_index_upkeep",
]


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process; the terminal is 120 columns wide."""
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "120", **(env or {})})


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``main()`` (what the console script runs) and capture its output."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def filled(db_path: Path) -> Path:
    """A file with a titled session (3 messages, one rewound), an untitled one and a child."""
    with SessionDB(db_path) as store:
        store.create_session("20260105_090000_aaaa1111", "cli", model="model-a", started_at=T0)
        store.append_message("20260105_090000_aaaa1111", "user", "Hello there", timestamp=T0 + 1)
        store.append_message(
            "20260105_090000_aaaa1111",
            "assistant",
            None,
            tool_calls=[{"id": "c1", "type": "function"}],
            timestamp=T0 + 2,
        )
        store.append_message(
            "20260105_090000_aaaa1111", "tool", "42", tool_name="calc", timestamp=T0 + 3
        )
        late = store.append_message(
            "20260105_090000_aaaa1111", "user", "rewound question", timestamp=T0 + 4
        )
        store.rewind_to_message("20260105_090000_aaaa1111", late)
        store.set_session_title("20260105_090000_aaaa1111", "greetings")
        store.update_token_counts("20260105_090000_aaaa1111", input_tokens=120, output_tokens=30)
        store.create_session("20260105_100000_bbbb2222", "telegram", started_at=T0 + 3600)
        store.append_message(
            "20260105_100000_bbbb2222", "user", "你好，世界\nsecond line", timestamp=T0 + 3601
        )
        store.create_session(
            "sub-run",
            "delegate",
            parent_session_id="20260105_100000_bbbb2222",
            model_config={"_delegate_from": "20260105_100000_bbbb2222"},
            started_at=T0 + 3700,
        )
    return db_path


# -- help --------------------------------------------------------------------------------

OWN_COMMANDS = ["demo", "migrate", "sessions", "show"]


def test_every_command_has_help() -> None:
    assert set(OWN_COMMANDS) <= set(cli.commands)
    for name, command in sorted(cli.commands.items()):
        assert command.help, f"{name} has no help text"
        result = invoke(name, "--help")
        assert result.exit_code == 0, (name, result.output)
        assert result.output.startswith(f"Usage: cli {name} [OPTIONS]")
        first_line = command.help.split("\n")[0].split(".")[0]
        assert " ".join(first_line.split()[:4]) in " ".join(result.output.split())
        assert "--db FILE" in result.output, name
        assert "-h, --help" in result.output


def test_top_level_help_lists_every_command() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    listed = [
        line.split()[0]
        for line in result.output.split("Commands:")[1].splitlines()
        if line.startswith("  ") and line.strip()
    ]
    assert listed == sorted(cli.commands)


def test_version() -> None:
    from hermes_models import __version__

    result = invoke("--version")
    assert (result.exit_code, result.output) == (0, f"hermes-models, version {__version__}\n")


# -- migrate -----------------------------------------------------------------------------


def test_migrate_creates_and_then_reports_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "new" / "state.db"
    first = invoke("migrate", "--db", str(path))
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == [
        *(f"applied {name}" for name in MIGRATIONS),
        f"{path}: schema up to date",
    ]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(16,)]
    finally:
        conn.close()
    again = invoke("--db", str(path), "migrate")
    assert (again.exit_code, again.output) == (0, f"{path}: schema up to date\n")


def test_migrate_uses_hermes_home_by_default(tmp_path: Path) -> None:
    home = tmp_path / "hermes-home"
    result = invoke("migrate")
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"{home / 'state.db'}: schema up to date\n")
    assert (home / "state.db").exists()


def test_db_from_environment_and_command_option_wins(tmp_path: Path) -> None:
    env_db, flag_db = tmp_path / "env.db", tmp_path / "flag.db"
    result = invoke("migrate", env={"HERMES_MODELS_DB": str(env_db)})
    assert result.output.endswith(f"{env_db}: schema up to date\n")
    result = invoke("migrate", "--db", str(flag_db), env={"HERMES_MODELS_DB": str(env_db)})
    assert result.output.endswith(f"{flag_db}: schema up to date\n")
    result = invoke("--db", str(env_db), "migrate", "--db", str(flag_db))
    assert result.output == f"{flag_db}: schema up to date\n"


# -- sessions ----------------------------------------------------------------------------


def test_sessions_table(filled: Path) -> None:
    result = invoke("sessions", "--db", str(filled))
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert lines == [
        ["ID", "Title", "Source", "Msgs", "Last", "active", "Preview"],
        [
            "20260105_100000_bbbb2222",
            "telegram",
            "1",
            "2026-01-05",
            "10:00",
            "你好，世界",
            "second",
            "line",
        ],
        [
            "20260105_090000_aaaa1111",
            "greetings",
            "cli",
            "3",
            "2026-01-05",
            "09:00",
            "Hello",
            "there",
        ],
    ]


def test_sessions_table_fits_a_narrow_terminal(filled: Path) -> None:
    result = CliRunner().invoke(cli, ["sessions", "--db", str(filled)], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split()[:4] == ["ID", "Title", "Source", "Msgs"]
    assert lines[2].split()[2:4] == ["cli", "3"]


def test_sessions_json_is_the_library_listing(filled: Path) -> None:
    result = invoke("--db", str(filled), "sessions", "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    with SessionDB(filled) as store:
        assert rows == store.list_sessions_rich()
    assert [row["id"] for row in rows] == ["20260105_100000_bbbb2222", "20260105_090000_aaaa1111"]


def test_sessions_options(filled: Path) -> None:
    def ids(*args: str) -> list[str]:
        result = invoke("sessions", "--db", str(filled), "--json", *args)
        assert result.exit_code == 0, result.output
        return [json.loads(line)["id"] for line in result.output.splitlines()]

    assert ids("--limit", "1") == ["20260105_100000_bbbb2222"]
    assert ids("--limit", "1", "--offset", "1") == ["20260105_090000_aaaa1111"]
    assert ids("--source", "cli") == ["20260105_090000_aaaa1111"]
    assert ids("--source", "delegate") == []
    assert ids("--archived") == []


def test_sessions_of_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    invoke("migrate", "--db", str(path))
    assert invoke("sessions", "--db", str(path)).output == "no sessions\n"
    assert invoke("sessions", "--db", str(path), "--json").output == ""


# -- show ---------------------------------------------------------------------------------

SHOWN = [
    "20260105_090000_aaaa1111  greetings",
    "source cli · model model-a · started 2026-01-05 09:00 · ended -",
    "3 messages · 120 in / 30 out tokens",
    "",
    "user",
    "Hello there",
    "",
    "assistant",
    "",
    'tool calls: [{"id": "c1", "type": "function"}]',
    "",
    "tool:calc",
    "42",
    "",
]


@pytest.mark.parametrize("key", ["20260105_090000_aaaa1111", "20260105_09", "greetings"])
def test_show_by_id_prefix_or_title(filled: Path, key: str) -> None:
    result = invoke("show", "--db", str(filled), key)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == SHOWN


def test_show_all_includes_rewound_messages(filled: Path) -> None:
    result = invoke("show", "--db", str(filled), "--all", "greetings")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [*SHOWN, "user (rewound)", "rewound question", ""]


def test_show_prefers_the_exact_title_over_a_continuation(filled: Path) -> None:
    with SessionDB(filled) as store:
        store.create_session("later", "cli", started_at=T0 + 7200)
        store.set_session_title("later", "greetings #2")
    shown = invoke("show", "--db", str(filled), "greetings").output.splitlines()
    assert shown[0] == "20260105_090000_aaaa1111  greetings"
    assert invoke("show", "--db", str(filled), "greetings #2").output.startswith("later  ")


def test_show_prints_markup_and_cjk_literally(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        store.create_session("s[bold]1", "cli", started_at=T0)
        store.append_message("s[bold]1", "user", "[red]not red[/red] 事件循环 🦄", timestamp=T0)
    result = invoke("show", "--db", str(db_path), "s[bold]1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "s[bold]1"
    assert lines[5] == "[red]not red[/red] 事件循环 🦄"


# -- demo ---------------------------------------------------------------------------------


def test_demo_shows_conversations_lineage_and_resume() -> None:
    result = invoke("demo")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "How do I run blocking file IO without freezing my asyncio event loop?" in out
    assert "请解释一下 Python 异步编程中的事件循环是怎么工作的？" in out
    assert "demo-retries  root  'writer retry policy'  4 msgs  ended: compression" in out
    assert "└── demo-retries-2  compression  'writer retry policy #2'  2 msgs  <- resume" in out
    assert "└── demo-subagent  ephemeral  2 msgs  ended: completed" in out
    assert "└── demo-asyncio-branch  branch  'asyncio, take two'  6 msgs" in out
    assert "/resume demo-retries opens demo-retries-2" in out
    assert "demo database:" not in out


def test_demo_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert invoke("demo").exit_code == 0
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "hermes-home").exists()


def test_demo_into_a_new_file_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    result = invoke("demo", "--db", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"\ndemo database: {path}\n")
    with SessionDB(path) as store:
        assert store.session_count() == 6
        assert store.resolve_resume_session_id("demo-retries") == "demo-retries-2"


def count_sessions(path: Path) -> tuple[int]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    finally:
        conn.close()


def test_demo_refuses_an_existing_database(filled: Path) -> None:
    before = count_sessions(filled)
    result = invoke("demo", "--db", str(filled))
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {filled} already exists; the demo writes a new database (pick a new path)\n"
    )
    assert count_sessions(filled) == before


# -- errors -------------------------------------------------------------------------------


def assert_one_line_error(code: int, out: str, err: str, expected: str, status: int = 1) -> None:
    assert (code, out) == (status, "")
    assert err == f"Error: {expected}\n"
    assert "Traceback" not in err


def test_unknown_session(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("nope", "20260105_", ""):
        code, out, err = run_main(capsys, "show", "--db", str(filled), key)
        assert_one_line_error(code, out, err, f"no session matches {key!r}")


def test_file_that_is_not_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database\n" * 10)
    for command in (["sessions"], ["show", "x"], ["migrate"]):
        code, out, err = run_main(capsys, *command, "--db", str(junk))
        assert_one_line_error(code, out, err, f"{junk} is not an SQLite database")
    assert junk.read_bytes() == b"this is not a database\n" * 10


def test_a_directory_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "sessions", "--db", str(tmp_path))
    assert_one_line_error(code, out, err, f"{tmp_path} is a directory, not an SQLite database")


def test_reading_a_missing_file_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    for command in (["sessions"], ["show", "x"]):
        code, out, err = run_main(capsys, *command, "--db", str(missing))
        assert_one_line_error(
            code,
            out,
            err,
            f"{missing} does not exist (create it with: hermes-models migrate --db {missing})",
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sessions", "--bogus"],
            "No such option '--bogus'. (see 'hermes-models sessions --help')",
        ),
        (["nosuch"], "No such command 'nosuch'. (see 'hermes-models --help')"),
        (["show"], "Missing argument 'SESSION_ID'. (see 'hermes-models show --help')"),
        (
            ["sessions", "--limit", "-1"],
            "Invalid value for '--limit': -1 is not in the range x>=0. "
            "(see 'hermes-models sessions --help')",
        ),
    ],
)
def test_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run_main(capsys, *args)
    assert_one_line_error(code, out, err, message, status=2)


def test_an_unexpected_error_is_one_line(
    filled: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something\nunexpected")

    monkeypatch.setattr(SessionDB, "get_messages", broken)
    code, out, err = run_main(capsys, "show", "--db", str(filled), "greetings")
    assert_one_line_error(code, out, err, "RuntimeError: something unexpected")


def test_main_returns_zero_on_success(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "sessions", "--db", str(filled), "--json")
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 2


# -- the installed console script -----------------------------------------------------------


def script(*args: str, cwd: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(cwd / "home"), "COLUMNS": "100"}
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **options,
    )


@pytest.mark.slow
def test_console_script_runs_the_demo_and_reports_errors(tmp_path: Path) -> None:
    assert SCRIPT.exists()
    demo = script("demo", "--db", "demo.db", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == ""
    assert "/resume demo-retries opens demo-retries-2" in demo.stdout
    assert "连接池的大小一般与并发请求数相当" in demo.stdout
    shown = script("show", "--db", "demo.db", "Python 异步编程", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "demo-chinese  Python 异步编程"
    missing = script("show", "--db", "demo.db", "nope", cwd=tmp_path)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "Error: no session matches 'nope'\n"
    bad = script("sessions", "--nope", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr == "Error: No such option '--nope'. (see 'hermes-models sessions --help')\n"


@pytest.mark.slow
def test_console_script_stops_quietly_when_the_reader_goes_away(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        for index in range(400):
            session_id = f"s{index:04d}"
            store.create_session(session_id, "cli", started_at=T0 + index)
            store.append_message(session_id, "user", "x" * 500, timestamp=T0 + index)
    process = subprocess.Popen(
        [str(SCRIPT), "sessions", "--json", "--limit", "400", "--db", str(db_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    code = process.wait(timeout=60)
    assert json.loads(first)["id"] == "s0399"
    assert (code, err) == (1, b"")


@pytest.mark.slow
def test_console_script_refuses_a_newer_schema(db_path: Path) -> None:
    with SessionDB(db_path) as store:
        store._conn.execute("UPDATE schema_version SET version = 99")
        store._conn.commit()
    result = script("sessions", "--db", str(db_path), cwd=db_path.parent)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.count("\n") == 1
    assert "schema version 99" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["export"], ["stats"]])
def test_reading_commands_refuse_a_missing_file_without_creating_it(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "typo.db"
    result = invoke(*command, "--db", str(path))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {path} does not exist")
    assert not path.exists()


def test_export_counts_are_worded_for_one_and_many(tmp_path: Path) -> None:
    path = tmp_path / "one.db"
    with SessionDB(path) as store:
        store.create_session("solo", "cli")
        store.append_message("solo", "user", "hello")
        store.append_message("solo", "assistant", "hi")
    out = tmp_path / "one.md"
    result = invoke("export", "--db", str(path), "--format", "md", "-o", str(out))
    assert (result.exit_code, result.output) == (0, f"wrote 1 session to {out}\n")
    out = tmp_path / "one.jsonl"
    result = invoke("export", "--db", str(path), "-o", str(out))
    assert (result.exit_code, result.output) == (0, f"wrote 1 session and 2 messages to {out}\n")


# -- maintenance commands -----------------------------------------------------------------


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    path = tmp_path / "demo.db"
    assert invoke("demo", "--db", str(path)).exit_code == 0
    return path


def test_archive_hides_the_whole_chain_and_undo_brings_it_back(demo_db: Path) -> None:
    result = invoke("archive", "--db", str(demo_db), "writer retry policy")
    assert (result.exit_code, result.output) == (0, "archived demo-retries\n")
    with SessionDB(demo_db) as store:
        every = store.list_sessions(limit=None, include_archived=True)
        archived = [s["id"] for s in every if s["archived"]]
        assert sorted(archived) == ["demo-retries", "demo-retries-2"]
    result = invoke("archive", "--db", str(demo_db), "--undo", "demo-retries-2")
    assert (result.exit_code, result.output) == (0, "unarchived demo-retries-2\n")
    with SessionDB(demo_db) as store:
        every = store.list_sessions(limit=None, include_archived=True)
        assert [s["id"] for s in every if s["archived"]] == []


def test_delete_takes_subagent_runs_and_keeps_branches(demo_db: Path) -> None:
    result = invoke("delete", "--db", str(demo_db), "--yes", "demo-retries-2", "demo-asyncio")
    assert (result.exit_code, result.output) == (0, "deleted 2 sessions\n")
    with SessionDB(demo_db) as store:
        assert sorted(s["id"] for s in store.list_sessions(limit=None)) == [
            "demo-asyncio-branch",
            "demo-chinese",
            "demo-retries",
        ]
        assert store.get_session("demo-asyncio-branch")["parent_session_id"] is None


def test_delete_asks_first_and_a_no_changes_nothing(demo_db: Path) -> None:
    result = CliRunner().invoke(cli, ["delete", "--db", str(demo_db), "demo-chinese"], input="n\n")
    assert result.exit_code == 1
    with SessionDB(demo_db) as store:
        assert store.get_session("demo-chinese") is not None
    result = invoke("delete", "--db", str(demo_db), "--yes", "no-such-session")
    assert (result.exit_code, result.output) == (1, "Error: no session matches 'no-such-session'\n")


def test_prune_deletes_old_ended_sessions(demo_db: Path) -> None:
    with SessionDB(demo_db) as store:
        ended = sorted(s["id"] for s in store.list_sessions(limit=None) if s["ended_at"])
    assert ended == ["demo-asyncio", "demo-retries", "demo-subagent"]
    result = invoke("prune", "--db", str(demo_db), "--older-than", "30", "--source", "cli", "--yes")
    assert (result.exit_code, result.output) == (0, "pruned 2 sessions\n")
    with SessionDB(demo_db) as store:
        assert sorted(s["id"] for s in store.list_sessions(limit=None)) == [
            "demo-asyncio-branch",
            "demo-chinese",
            "demo-retries-2",
            "demo-subagent",  # a delegate run of demo-retries-2, which stays
        ]
    result = invoke("prune", "--db", str(demo_db), "--older-than", "-1", "--yes")
    assert result.exit_code == 2


def test_vacuum_reports_indexes_and_keeps_every_row(demo_db: Path) -> None:
    with SessionDB(demo_db) as store:
        before = store.message_count(include_inactive=True)
    result = invoke("vacuum", "--db", str(demo_db))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"optimized 2 search indexes; {demo_db}: ")
    with SessionDB(demo_db) as store:
        assert store.message_count(include_inactive=True) == before
