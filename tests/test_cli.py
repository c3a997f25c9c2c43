"""The hermes-models command line in-process: help, migrate, sessions, show, lineage, demo,
times and errors. (Exit statuses of the installed script: test_cli_script.py; 80-column
terminals: test_cli_terminal.py; --json/--nl/--csv/--tsv: test_cli_formats.py.)"""

from __future__ import annotations

import json
import logging
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import plain_connection, target_of
from console_script import run

import hermes_models.conversations.history
from hermes_models import MissingDriverError, Session, SessionDB
from hermes_models.cli.commands import cli, main
from hermes_models.driver import sqlite3
from hermes_models.store.postgres import open_database, parse_url
from hermes_models.transfer.copy import copy_store

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC
MIGRATIONS = [
    "0001_adopt_hermes_tables",
    "0002_hermes_v16_schema",
    "0003_message_search",
    "0004_tag_delegate_children",
    "0005_delegate_tags_by_end_reason",
    "0006_search_index_upkeep",
    "0007_cjk_gram_index",
    "0008_time_order_indexes",
    "0009_cjk_gram_changes",
    "0010_parallel_labels",
    "0011_search_bm25",
]


@pytest.fixture(autouse=True)
def utc_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC unless a test says otherwise."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def invoke(*args: str, env: dict[str, str] | None = None, width: int = 120) -> Result:
    """Run the CLI in-process on a terminal ``width`` columns wide."""
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(width), **(env or {})})


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``main()`` (what the console script runs) and capture its output."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def words(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()]


def where(store: SessionDB) -> str:
    """What ``--db`` names the store of ``store`` with: its file, or its URL."""
    return str(target_of(store.database))


@pytest.fixture
def filled(store: SessionDB) -> str:
    """A store with a titled session (3 messages, one rewound), an untitled one and a child."""
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
    return where(store)


# -- help --------------------------------------------------------------------------------


#: Commands that take no --db: ``copy`` names both of its stores as arguments (SRC DST).
WITHOUT_DB = {"copy"}


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help_ending_with_examples(name: str) -> None:
    command = cli.commands[name]
    assert command.help, f"{name} has no help text"
    result = invoke(name, "--help")
    assert result.exit_code == 0, (name, result.output)
    assert result.output.startswith(f"Usage: cli {name} [OPTIONS]")
    assert ("--db FILE" in result.output) == (name not in WITHOUT_DB)
    assert "-h, --help" in result.output
    tail = result.output.rstrip("\n").split("\n\n")[-1].splitlines()
    assert tail[0] == "  Examples:"
    examples = [line.strip() for line in tail[1:]]
    assert 2 <= len(examples) <= 3
    assert all(f"hermes-models {name}" in line for line in examples), examples


def test_top_level_help_lists_every_command_and_ends_with_examples() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    listed = [
        line.split()[0]
        for line in result.output.split("Commands:")[1].split("\n\n")[0].splitlines()
        if line.startswith("  ") and line.strip()
    ]
    assert listed == sorted(cli.commands)
    assert result.output.rstrip().splitlines()[-4:] == [
        "  Examples:",
        "    hermes-models demo",
        "    hermes-models --db ~/.hermes/state.db sessions --limit 5",
        '    hermes-models search "事件循环" --json',
    ]


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
    again = invoke("--db", f"sqlite:///{path}", "migrate")
    assert (again.exit_code, again.output) == (0, f"{path}: schema up to date\n")


def test_migrate_a_database_on_a_server(pg: Any) -> None:
    url = pg.new_database(migrated=False)
    label = parse_url(url).label()
    first = invoke("migrate", "--db", url)
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == [
        *(f"applied {name}" for name in MIGRATIONS),
        f"{label}: schema up to date",
    ]
    with SessionDB(url) as store:
        assert store._conn.execute("SELECT version FROM schema_version").fetchall() == [(16,)]
    again = invoke("--db", url, "migrate")
    assert (again.exit_code, again.output) == (0, f"{label}: schema up to date\n")


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


def test_sessions_table(filled: str) -> None:
    result = invoke("sessions", "--db", filled)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ID                        Source    Msgs  Last active (UTC)  Title / preview",
        "20260105_100000_bbbb2222  telegram     1  2026-01-05 10:00   你好，世界 second line",
        "20260105_090000_aaaa1111  cli          4  2026-01-05 09:00   greetings · Hello there",
    ]
    # --wide: the whole title and preview, wrapped, as before.
    wide = invoke("sessions", "--db", filled, "--wide")
    assert wide.output.splitlines()[2:] == [
        "20260105_090000_aaaa1111  cli          4  2026-01-05 09:00   greetings",
        "                                                             Hello there",
    ]


def test_sessions_of_an_empty_store(store: SessionDB) -> None:
    assert invoke("sessions", "--db", where(store)).output == "no sessions\n"
    assert invoke("sessions", "--db", where(store), "--json").output == "[]\n"
    assert invoke("sessions", "--db", where(store), "--nl").output == ""


def test_sessions_options(filled: str) -> None:
    def ids(*args: str) -> list[str]:
        result = invoke("sessions", "--db", filled, "--nl", *args)
        assert result.exit_code == 0, result.output
        return [json.loads(line)["id"] for line in result.output.splitlines()]

    assert ids("--limit", "1") == ["20260105_100000_bbbb2222"]
    assert ids("--limit", "1", "--offset", "1") == ["20260105_090000_aaaa1111"]
    assert ids("--after", "20260105_100000_bbbb2222") == ["20260105_090000_aaaa1111"]
    assert ids("--after", "20260105_090000_aaaa1111") == []
    assert ids("--source", "cli") == ["20260105_090000_aaaa1111"]
    assert ids("--source", "delegate") == []
    assert ids("--archived") == []


def test_limit_0_is_no_rows_and_all_is_every_row_as_in_the_library(
    store: SessionDB, tmp_path: Path
) -> None:
    for index in range(30):
        store.create_session(f"s{index:02d}", "cli", started_at=T0 + index)
        store.append_message(f"s{index:02d}", "user", f"needle {index}", timestamp=T0 + index)
    path = where(store)
    counted = {}
    for args in (
        ["sessions"],
        ["sessions", "--limit", "0"],
        ["sessions", "--limit", "all"],
        ["sessions", "--limit", "All", "--offset", "25"],
        ["search", "needle"],
        ["search", "needle", "--limit", "0"],
        ["search", "needle", "--limit", "all"],
        ["search", "needle", "--sessions", "--limit", "0"],
        ["search", "needle", "--sessions", "--limit", "all"],
    ):
        result = run(*args, "--db", path, "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        counted[" ".join(args)] = len(json.loads(result.stdout))
    assert counted == {
        "sessions": 20,
        "sessions --limit 0": 0,
        "sessions --limit all": 30,
        "sessions --limit All --offset 25": 5,
        "search needle": 20,
        "search needle --limit 0": 0,
        "search needle --limit all": 30,
        "search needle --sessions --limit 0": 0,
        "search needle --sessions --limit all": 30,
    }
    # The library's words for the same: 0 is no row, None every row.
    assert [len(store.list_sessions_rich(limit=n)) for n in (0, None)] == [0, 30]
    assert [len(store.search_messages("needle", limit=n)) for n in (0, None)] == [0, 30]
    refused = run("sessions", "--db", path, "--limit", "every", cwd=tmp_path)
    assert (refused.returncode, refused.stderr) == (
        2,
        "Error: Invalid value for '--limit': 'every' is neither a number of rows nor 'all' "
        "(see 'hermes-models sessions --help')\n",
    )


# -- times ---------------------------------------------------------------------------------


def test_times_are_local_with_their_zone_or_utc(
    filled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "XST-3")  # a fixed zone three hours east of UTC, named XST
    time.tzset()
    local = invoke("sessions", "--db", filled).output.splitlines()
    assert local[0].split()[3:6] == ["Last", "active", "(XST)"]
    assert local[1].split()[3:5] == ["2026-01-05", "13:00"]
    for args in (["--utc", "sessions"], ["sessions", "--utc"]):
        utc = invoke(*args, "--db", filled).output.splitlines()
        assert utc[0].split()[3:6] == ["Last", "active", "(UTC)"]
        assert utc[1].split()[3:5] == ["2026-01-05", "10:00"]
    shown = invoke("show", "--db", filled, "greetings").output.splitlines()
    assert shown[1] == "source cli · model model-a · started 2026-01-05 12:00 XST · ended -"
    assert shown[4] == "user  2026-01-05 12:00 XST"
    hit = invoke("search", "--db", filled, "hello", "--utc").output.splitlines()
    assert hit[0] == "20260105_090000_aaaa1111 user #1 2026-01-05 09:00 UTC cli"


def test_a_time_python_cannot_show_is_printed_as_stored(store: SessionDB, db_path: Path) -> None:
    store.create_session("far", "cli", started_at=T0)
    store.append_message("far", "user", "hello", timestamp=T0)
    with plain_connection(store.database, db_path) as conn:
        conn.execute("UPDATE messages SET timestamp = 1e300")
        conn.commit()
    result = invoke("show", "--db", where(store), "far")
    assert result.exit_code == 0, result.output
    assert "user  1e+300" in result.output.splitlines()


# -- show ---------------------------------------------------------------------------------

SHOWN = [
    "20260105_090000_aaaa1111  greetings",
    "source cli · model model-a · started 2026-01-05 09:00 UTC · ended -",
    "4 messages · 120 in / 30 out tokens",
    "",
    "user  2026-01-05 09:00 UTC",
    "Hello there",
    "",
    "assistant  2026-01-05 09:00 UTC",
    "",
    'tool calls: [{"id": "c1", "type": "function"}]',
    "",
    "tool:calc  2026-01-05 09:00 UTC",
    "42",
    "",
]


@pytest.mark.parametrize("key", ["20260105_090000_aaaa1111", "20260105_09", "greetings"])
def test_show_by_id_prefix_or_title(filled: str, key: str) -> None:
    result = invoke("show", "--db", filled, key)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == SHOWN


def test_a_title_names_the_session_resolve_session_by_title_names(
    store: SessionDB, tmp_path: Path
) -> None:
    # A compression chain titled "refactor search 691", "... #2", "... #3", and a
    # session of another title beside it that nothing continues.
    store.create_session("refactor-1", "cli", started_at=T0)
    store.append_message("refactor-1", "user", "first part", timestamp=T0 + 1)
    store.set_session_title("refactor-1", "refactor search 691")
    tip = "refactor-1"
    for number in (2, 3):
        tip = (
            Session.get_by_id(tip)
            .compress(
                [{"role": "user", "content": f"summary {number}"}],
                session_id=f"refactor-{number}",
                at=T0 + 100 * number,
            )
            .id
        )
    store.create_session("plain", "cli", started_at=T0 + 1000)
    store.append_message("plain", "user", "hello", timestamp=T0 + 1001)
    store.set_session_title("plain", "plain title")
    assert store.get_session_title("refactor-3") == "refactor search 691 #3"
    path = where(store)

    def named(title: str) -> dict[str, str | None]:
        """The session each command takes ``title`` to, and the library's answer."""
        shown = run("show", title, "--db", path, "--json", cwd=tmp_path)
        resumed = run("resume", title, "--db", path, cwd=tmp_path)
        tree = run("lineage", title, "--db", path, "--json", cwd=tmp_path)
        assert (shown.returncode, resumed.returncode, tree.returncode) == (0, 0, 0), (
            shown.stderr + resumed.stderr + tree.stderr
        )
        [asked] = [row["id"] for row in json.loads(tree.stdout) if row["asked"]]
        return {
            "show": {m["session_id"] for m in json.loads(shown.stdout)}.pop(),
            "resume": resumed.stdout.strip(),
            "lineage": asked,
            "resolve_session_by_title": store.resolve_session_by_title(title),
        }

    newest = dict.fromkeys(("show", "resume", "lineage", "resolve_session_by_title"), "refactor-3")
    assert named("refactor search 691") == newest
    assert named("refactor search 691 #3") == newest
    # A numbered title names its own session; /resume of it goes on to the tip.
    assert named("refactor search 691 #2") == {
        "show": "refactor-2",
        "resume": "refactor-3",
        "lineage": "refactor-2",
        "resolve_session_by_title": "refactor-2",
    }
    assert named("plain title") == dict.fromkeys(newest, "plain")


def test_show_all_includes_rewound_messages(filled: str) -> None:
    result = invoke("show", "--db", filled, "--all", "greetings")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        *SHOWN,
        "user  2026-01-05 09:00 UTC (rewound)",
        "rewound question",
        "",
    ]


def test_show_limit_and_tail(filled: str) -> None:
    def roles(*args: str) -> list[str]:
        result = invoke("show", "--db", filled, "greetings", "--all", "--nl", *args)
        assert result.exit_code == 0, result.output
        return [json.loads(line)["role"] for line in result.output.splitlines()]

    assert roles() == ["user", "assistant", "tool", "user"]
    assert roles("--limit", "2") == ["user", "assistant"]
    assert roles("--tail", "2") == ["tool", "user"]
    assert roles("--limit", "0") == []
    assert roles("--tail", "0") == []
    assert roles("--limit", "all", "--tail", "all") == ["user", "assistant", "tool", "user"]
    assert roles("--tail", "9") == ["user", "assistant", "tool", "user"]
    assert roles("--limit", "3", "--tail", "1") == ["tool"]


def test_show_summarises_list_content_as_search_does(store: SessionDB) -> None:
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}}
    store.create_session("pic", "cli", started_at=T0)
    store.append_message(
        "pic", "user", [{"type": "text", "text": "what is this?"}, picture], timestamp=T0
    )
    result = invoke("show", "--db", where(store), "pic")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[4:7] == [
        "user  2026-01-05 09:00 UTC",
        "what is this? [image]",
        "",
    ]
    assert "base64" not in result.output
    raw = json.loads(invoke("show", "--db", where(store), "pic", "--json").output)
    assert raw[0]["content"][1] == picture


def test_show_with_ancestors_replays_a_compression_chain(demo_db: str) -> None:
    alone = invoke("show", "--db", demo_db, "demo-retries-2", "--nl").output
    assert [json.loads(line)["session_id"] for line in alone.splitlines()] == ["demo-retries-2"] * 2
    chained = invoke("show", "--db", demo_db, "demo-retries-2", "--with-ancestors", "--nl")
    assert [json.loads(line)["session_id"] for line in chained.output.splitlines()] == [
        *["demo-retries"] * 4,
        *["demo-retries-2"] * 2,
    ]
    text = invoke("show", "--db", demo_db, "demo-retries-2", "--with-ancestors").output
    rules = [line.strip("─ ") for line in text.splitlines() if line.startswith("─")]
    assert rules == ["demo-retries (continued below)", "demo-retries-2"]
    assert text.index("Let's design the retry policy") < text.index("[Summary of the earlier")


def test_show_takes_a_title_to_its_newest_numbered_variant_as_the_library_does(
    filled: str,
) -> None:
    with SessionDB(filled) as store:
        store.create_session("later", "cli", started_at=T0 + 7200)
        store.set_session_title("later", "greetings #2")
        assert store.resolve_session_by_title("greetings") == "later"
    assert invoke("show", "--db", filled, "greetings").output.startswith("later  greetings #2\n")
    assert invoke("show", "--db", filled, "greetings #2").output.startswith("later  ")
    exact = invoke("show", "--db", filled, "20260105_090000_aaaa1111").output.splitlines()
    assert exact[0] == "20260105_090000_aaaa1111  greetings"


def test_show_prints_markup_and_cjk_literally(store: SessionDB) -> None:
    store.create_session("s[bold]1", "cli", started_at=T0)
    store.append_message("s[bold]1", "user", "[red]not red[/red] 事件循环 🦄", timestamp=T0)
    result = invoke("show", "--db", where(store), "s[bold]1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "s[bold]1"
    assert lines[5] == "[red]not red[/red] 事件循环 🦄"


# -- lineage --------------------------------------------------------------------------------


@pytest.fixture
def demo_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The demo store: a new file, or a new (empty) PostgreSQL database."""
    if backend == "postgresql":
        path = request.getfixturevalue("pg").new_database()
    else:
        path = str(tmp_path / "demo.db")
    result = invoke("demo", "--db", path)
    assert result.exit_code == 0, result.output
    return path


def test_lineage_tree_puts_the_markers_first(demo_db: str) -> None:
    result = invoke("lineage", "--db", demo_db, "demo-subagent")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "demo-retries  root  'writer retry policy'  4 msgs  ended: compression",
        "└── demo-retries-2  compression  <- resume  'writer retry policy #2'  2 msgs",
        "    └── demo-subagent  ephemeral  (asked)  2 msgs  ended: completed",
    ]


def test_lineage_records(demo_db: str) -> None:
    rows = json.loads(invoke("lineage", "--db", demo_db, "demo-retries", "--json").output)
    assert [
        (r["id"], r["parent_session_id"], r["depth"], r["kind"], r["resume_target"], r["asked"])
        for r in rows
    ] == [
        ("demo-retries", None, 0, "root", False, True),
        ("demo-retries-2", "demo-retries", 1, "compression", True, False),
        ("demo-subagent", "demo-retries-2", 2, "ephemeral", False, False),
    ]


# -- demo ---------------------------------------------------------------------------------


def test_demo_shows_conversations_lineage_and_resume() -> None:
    result = invoke("demo")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "How do I run blocking file IO without freezing my asyncio event loop?" in out
    assert "请解释一下 Python 异步编程中的事件循环是怎么工作的？" in out
    assert "demo-retries  root  'writer retry policy'  4 msgs  ended: compression" in out
    assert "└── demo-retries-2  compression  <- resume  'writer retry policy #2'  2 msgs" in out
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


def test_demo_into_a_new_database_on_a_server_keeps_it(pg: Any) -> None:
    url = pg.new_database(migrated=False)
    result = invoke("demo", "--db", url)
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"\ndemo database: {parse_url(url).label()}\n")
    with SessionDB(url) as store:
        assert store.session_count() == 6
        assert store.resolve_resume_session_id("demo-retries") == "demo-retries-2"


def count_sessions(target: str) -> int:
    with SessionDB(target, read_only=True) as store:
        return store.session_count()


@pytest.mark.backends("sqlite")  # an existing file: a store on a server is below
def test_demo_refuses_an_existing_database(filled: str) -> None:
    before = count_sessions(filled)
    result = invoke("demo", "--db", filled)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {filled} already exists; the demo writes a new database (pick a new path)\n"
    )
    assert count_sessions(filled) == before


@pytest.mark.backends("postgresql")  # a store on a server that holds sessions (a file: above)
def test_demo_refuses_a_server_store_that_holds_sessions(filled: str) -> None:
    result = invoke("demo", "--db", filled)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {parse_url(filled).label()} already holds sessions; the demo writes a new"
        " store (pick an empty database or schema)\n"
    )
    assert count_sessions(filled) == 3


# -- errors -------------------------------------------------------------------------------


def assert_one_line_error(code: int, out: str, err: str, expected: str, status: int = 1) -> None:
    assert (code, out) == (status, "")
    assert err == f"Error: {expected}\n"


def test_unknown_session(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("nope", "2026x", ""):
        code, out, err = run_main(capsys, "show", "--db", filled, key)
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


@pytest.mark.parametrize(
    "command", [["sessions"], ["show", "x"], ["search", "x"], ["export"], ["stats"], ["vacuum"]]
)
def test_a_missing_file_is_refused_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    missing = tmp_path / "typo.db"
    code, out, err = run_main(capsys, *command, "--db", str(missing))
    assert_one_line_error(
        code,
        out,
        err,
        f"{missing} does not exist (create it with: hermes-models migrate --db {missing})",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_missing_server_database_is_one_line(pg: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = pg.new_database() + "_typo"
    name = url.rsplit("/", 1)[1]
    for command in (["sessions"], ["show", "x"], ["search", "x"], ["stats"]):
        code, out, err = run_main(capsys, *command, "--db", url)
        assert (code, out) == (1, "")
        assert re.fullmatch(
            rf"Error: OperationalError: connection failed: .* FATAL: database \"{name}\""
            r" does not exist\n",
            err,
        ), err


@pytest.mark.backends(
    "postgresql"
)  # commands of a file (they work on SQLite: test_cli_maintenance)
@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["vacuum"], "the server vacuums its own tables (VACUUM, autovacuum)"),
        (["backup", "copies/"], "back it up with the server's tools (pg_dump, base backups)"),
    ],
)
def test_file_commands_refuse_a_server_store_in_one_line(
    filled: str, capsys: pytest.CaptureFixture[str], command: list[str], why: str
) -> None:
    for fmt in ([], ["--json"]):
        code, out, err = run_main(capsys, *command, "--db", filled, *fmt)
        assert_one_line_error(
            code, out, err, f"{parse_url(filled).label()} is a PostgreSQL store: {why}"
        )
    assert count_sessions(filled) == 3


def test_import_adds_what_the_store_lacks_in_one_line(
    filled: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "bundle.jsonl"
    with SessionDB(filled) as store:
        store.export_bundle(bundle)
        store.delete_session("sub-run")
    code, out, err = run_main(capsys, "import", str(bundle), "--db", filled)
    assert (code, out, err) == (
        0,
        "imported 1 session and 0 messages (2 sessions already present,"
        " 0 messages given new ids)\n",
        "",
    )
    assert count_sessions(filled) == 3


def test_optimize_says_what_it_did(filled: str) -> None:
    done = invoke("optimize", "--db", filled)
    rebuilt = invoke("optimize", "--db", filled, "--rebuild")
    assert (done.exit_code, rebuilt.exit_code) == (0, 0)
    if filled.startswith("postgresql://"):
        assert done.output == "the server keeps the gram index in step: nothing to do\n"
        assert rebuilt.output == "rebuilt the gram index\n"
    else:
        assert done.output == "indexed 0 messages; every message is indexed\n"
        assert rebuilt.output == "rebuilt the index: indexed 5 messages; every message is indexed\n"
    assert invoke("search", "--db", filled, "你好", "--nl").output.count("\n") == 1


def test_usage_errors_are_one_line_and_exit_with_2(capsys: pytest.CaptureFixture[str]) -> None:
    for args, message in (
        (
            ["sessions", "--limit", "-1"],
            "Invalid value for '--limit': -1 is not in the range x>=0. "
            "(see 'hermes-models sessions --help')",
        ),
        (["nosuch"], "No such command 'nosuch'. (see 'hermes-models --help')"),
        (["show"], "Missing argument 'SESSION_ID'. (see 'hermes-models show --help')"),
        (["--bogus"], "No such option '--bogus'. (see 'hermes-models --help')"),
        (
            ["--db", "mysql://h/db", "sessions"],
            "--db: unsupported URL scheme 'mysql'; only sqlite:/// and postgresql:// are"
            " supported (see 'hermes-models --help')",
        ),
        (
            ["--db", "postgresql://h/db?schema=Work", "sessions"],
            "--db: schema must be a lower-case identifier (letters, digits and _, at most 63),"
            " not 'Work' (see 'hermes-models --help')",
        ),
    ):
        code, out, err = run_main(capsys, *args)
        assert_one_line_error(code, out, err, message, status=2)


def test_a_server_url_without_psycopg_says_what_to_install(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    migrated_copy: Callable[[Path], Path],
) -> None:
    """Without the ``postgresql`` extra, a ``postgresql://`` store is refused before
    any connection is tried, naming what to install (library and command line)."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    url = "postgresql://postgres@127.0.0.1:1/db"
    message = (
        "a postgresql:// store needs psycopg 3, which is not installed: "
        "pip install 'psycopg[binary]>=3.1' (or, in a checkout of hermes_models, "
        "pip install '.[postgresql]')"
    )
    for call in (
        lambda: hermes_models.connect(url),
        lambda: SessionDB(url),
        lambda: open_database(url, migrate_first=False),
        lambda: hermes_models.migrate(url),
        lambda: copy_store(migrated_copy(tmp_path / "state.db"), url),
    ):
        with pytest.raises(MissingDriverError) as caught:
            call()
        assert (str(caught.value), caught.value.name) == (message, "psycopg")
        assert isinstance(caught.value, ModuleNotFoundError)
    for command in (["migrate"], ["sessions"]):
        code, out, err = run_main(capsys, *command, "--db", url)
        assert_one_line_error(code, out, err, message)


def test_an_unexpected_error_is_one_line(
    filled: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something\nunexpected")

    monkeypatch.setattr(hermes_models.conversations.history, "display_messages", broken)
    code, out, err = run_main(capsys, "show", "--db", filled, "greetings")
    assert_one_line_error(code, out, err, "RuntimeError: something unexpected")


@pytest.mark.backends("sqlite")  # drops an FTS5 table of the file
def test_library_warnings_are_one_line_on_stderr(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logger = logging.getLogger("hermes_models")
    before = list(logger.handlers)
    conn = sqlite3.connect(filled)
    conn.execute("DROP TABLE messages_fts_trigram")
    conn.commit()
    conn.close()
    # Read-only: a writable open would rebuild the missing index first.
    code, out, err = run_main(capsys, "--read-only", "search", "--db", filled, "你好，世界")
    assert (code, out.splitlines()[0]) == (
        0,
        "20260105_100000_bbbb2222 user #5 2026-01-05 10:00 UTC telegram",
    )
    assert re.fullmatch(r"Warning: .*messages_fts_trigram is missing.*LIKE instead\n", err), err
    assert logger.handlers == before
