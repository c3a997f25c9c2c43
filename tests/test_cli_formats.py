"""``--json`` (one array), ``--nl`` (an object a line), ``--csv`` and ``--tsv`` on every
command that lists or reports, from the installed script: the four formats carry the
same records, and the records are what the library returns."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPORT_FLAGS
from console_script import build_demo_store, run
from pg_server import Server

from hermes_models import SessionDB
from hermes_models.cli.commands import cli
from hermes_models.cli.demo import build_demo
from hermes_models.store.postgres import parse_url

pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite", "postgresql")]

# (command line, whether it changes the store)
COMMANDS = {
    "sessions": (["sessions", "--limit", "all"], False),
    "search": (["search", "asyncio OR 事件循环"], False),
    "search --sessions": (["search", "checkpoint OR jitter", "--sessions"], False),
    "show": (["show", "demo-retries-2", "--with-ancestors", "--all"], False),
    "lineage": (["lineage", "demo-subagent"], False),
    "stats": (["stats"], False),
    "doctor": (["doctor"], False),
    "prune --dry-run": (["prune", "--older-than", "0", "--dry-run"], False),
    "delete --dry-run": (["delete", "demo-asyncio", "--dry-run"], False),
    "prune": (["prune", "--older-than", "0", "--yes"], True),
    "delete": (["delete", "demo-retries", "--yes"], True),
    "vacuum": (["vacuum"], True),
    "optimize": (["optimize"], True),
    "erase --dry-run": (["erase", "demo-asyncio", "--dry-run"], False),
    "erase": (["erase", "demo-retries", "--yes"], True),
    "retain --dry-run": (["retain", "--older-than", "30d", "--dry-run"], False),
    "retain": (["retain", "--older-than", "30d", "--yes"], True),
    "redact --dry-run": (["redact", "--dry-run"], False),
    "redact": (["redact"], True),
    "import": (["import", "bundle.jsonl"], True),
    "export": (["export", *EXPORT_FLAGS, "-o", "out.jsonl"], True),
    "backup": (["backup", "copies/"], True),
}

FLAGS = ("--json", "--nl", "--csv", "--tsv")


#: Commands that work on an SQLite file (on PostgreSQL they refuse: test_cli.py).
SQLITE_COMMANDS = {"doctor", "vacuum", "backup"}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("formats")
    build_demo_store(work / "demo.db")
    with SessionDB(work / "demo.db") as store:
        store.export_bundle(work / "bundle.jsonl")
    return work


@pytest.fixture(scope="module")
def server_demo(pg: Server) -> Iterator[str]:
    """The demo store in a PostgreSQL database of this module (copied for each change)."""
    url = pg.new_database(keep=True)
    with SessionDB(url) as store:
        build_demo(store)
    yield url
    pg.drop(url)


@dataclass
class Stores:
    """The demo store of the test's backend, and the folder the script runs in."""

    template: Path
    tmp_path: Path
    server: Server | None = None
    demo_url: str = ""

    def demo(self, changes: bool) -> tuple[Path, str]:
        """The folder to run in and the ``--db`` of the demo store: the module's own, or,
        for a command that changes it, a fresh copy (at the same path each time)."""
        work = self.template
        if changes:
            work = self.tmp_path / "work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(self.template, work)
        if self.server is None:
            return work, "demo.db"
        return work, self.server.copy_database(self.demo_url) if changes else self.demo_url

    def empty(self) -> str:
        """The ``--db`` of a store to import into: a new file, or an empty database."""
        return "fresh.db" if self.server is None else self.server.new_database()

    def library(self) -> SessionDB:
        """The demo store, read-only, through the library."""
        if self.server is None:
            return SessionDB(self.template / "demo.db", read_only=True)
        return SessionDB(self.demo_url, read_only=True)


@pytest.fixture
def stores(backend: str, template: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Stores:
    if backend == "postgresql":
        server = request.getfixturevalue("pg")
        return Stores(template, tmp_path, server, request.getfixturevalue("server_demo"))
    return Stores(template, tmp_path)


def records(command: str, flag: str, stores: Stores) -> list[dict[str, Any]]:
    """What ``command`` prints with ``flag``; a command that changes the store runs on a
    fresh copy of it."""
    args, changes = COMMANDS[command]
    work, db = stores.demo(changes)
    if command == "import":
        db = stores.empty()
    result = run(*args, "--db", db, flag, cwd=work)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # A backup is named after the second it was made in.
    text = re.sub(r"demo-\d{8}T\d{6}Z", "demo-<time>", result.stdout)
    if changes and stores.server is not None:  # each fresh copy is a database of a new name
        text = text.replace(parse_url(db).label(), "<copy>")
    if flag == "--json":
        assert text.startswith("[") and text.endswith("]\n")
        rows = json.loads(text)
        assert isinstance(rows, list)
    elif flag == "--nl":
        rows = [json.loads(line) for line in text.splitlines()]
    else:
        dialect = "excel-tab" if flag == "--tsv" else "excel"
        rows = list(csv.DictReader(io.StringIO(text), dialect=dialect))
    # How long a run took (erase, retain) differs from run to run.
    for row in rows:
        if "seconds" in row:
            assert float(row["seconds"]) >= 0
            row["seconds"] = "<seconds>"
    return rows


def as_cells(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``rows`` as CSV cells: every column of any row, lists and dicts as JSON."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    columns = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: cell(row.get(key)) for key in columns} for row in rows]


def same_records_in_four_formats(command: str, stores: Stores) -> None:
    found = {flag: records(command, flag, stores) for flag in FLAGS}
    assert found["--json"], f"{command} printed no records"
    assert found["--nl"] == found["--json"]
    cells = as_cells(found["--json"])
    assert found["--csv"] == cells
    assert found["--tsv"] == cells


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - SQLITE_COMMANDS))
def test_the_four_formats_carry_the_same_records(command: str, stores: Stores) -> None:
    same_records_in_four_formats(command, stores)


@pytest.mark.backends("sqlite")  # commands of a file
@pytest.mark.parametrize("command", sorted(SQLITE_COMMANDS))
def test_the_sqlite_commands_carry_the_same_records_in_four_formats(
    command: str, stores: Stores
) -> None:
    same_records_in_four_formats(command, stores)


def test_every_command_with_a_format_flag_has_the_four_and_is_tested_in_them() -> None:
    # A command that prints records takes the four flags, and its records are compared
    # in the four formats above: its entry in COMMANDS is its test, as a row of the
    # matrix of tests/test_cli_script.py is for every other command.
    tested = {args[0] for args, _ in COMMANDS.values()}
    tested.add("copy")  # SRC and DST, no --db: tests/test_copy.py runs it with --json
    # Need the encryption extra (tox env encrypted): tests/test_encryption.py runs them in
    # the four formats.
    tested |= {"encrypt", "decrypt", "rekey"}
    for name, command in cli.commands.items():
        flags = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if flags & set(FLAGS):
            assert set(FLAGS) <= flags, name
            assert name in tested, f"{name} has the format flags: add it to COMMANDS"
    assert len(tested) >= 14


def test_records_are_what_the_library_returns(stores: Stores) -> None:
    def get(command: str) -> list[dict[str, Any]]:
        return records(command, "--json", stores)

    with stores.library() as store:
        assert get("sessions") == store.list_sessions_rich(limit=None)
        assert get("search") == store.search_messages("asyncio OR 事件循环")
        assert get("search --sessions") == store.search_sessions("checkpoint OR jitter")
        assert get("show") == [
            *store.get_messages("demo-retries", include_inactive=True),
            *store.get_messages("demo-retries-2", include_inactive=True),
        ]
    assert [row["id"] for row in get("lineage")] == [
        "demo-retries",
        "demo-retries-2",
        "demo-subagent",
    ]
    [report] = get("stats")
    assert (report["sessions"], report["messages"]) == (6, 22)
    assert [(row["id"], row["effect"]) for row in get("delete --dry-run")] == [
        ("demo-asyncio", "deleted"),
        ("demo-asyncio-branch", "kept as a root"),
    ]
    [exported] = get("export")
    assert (exported["sessions"], exported["messages"], exported["format"]) == (6, 22, "jsonl")
    [imported] = get("import")
    assert (imported["sessions_added"], imported["messages_added"]) == (6, 22)


@pytest.mark.backends("sqlite")  # commands of a file
def test_sqlite_command_records_are_what_the_library_returns(stores: Stores) -> None:
    def get(command: str) -> list[dict[str, Any]]:
        return records(command, "--json", stores)

    assert [(row["name"], row["ok"]) for row in get("doctor")][-3:] == [
        ("session counters", True),
        ("message id sequence", True),
        ("privacy", True),
    ]
    [copied] = get("backup")
    assert copied["integrity"] == "ok" and copied["removed"] == []
    [vacuumed] = get("vacuum")
    assert vacuumed["indexes_optimized"] == 2


def test_export_to_standard_output_has_no_summary_to_format(stores: Stores) -> None:
    work, db = stores.demo(changes=False)
    result = run("export", "--db", db, "--json", cwd=work)
    assert result.returncode == 2
    assert result.stderr == (
        "Error: --json describes the file written with --output "
        "(see 'hermes-models export --help')\n"
    )


def test_an_empty_result_is_an_empty_array(stores: Stores) -> None:
    work, db = stores.demo(changes=False)
    result = run("search", "--db", db, "zebra", "--json", cwd=work)
    assert (result.returncode, result.stdout) == (0, "[]\n")
    for flag in ("--nl", "--csv", "--tsv"):
        result = run("search", "--db", db, "zebra", flag, cwd=work)
        assert (result.returncode, result.stdout) == (0, "")
