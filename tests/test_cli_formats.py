"""``--json`` (one array), ``--nl`` (an object a line), ``--csv`` and ``--tsv`` on every
command that lists or reports, from the installed script: the four formats carry the
same records, and the records are what the library returns."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from console_script import build_demo_store, run

from hermes_models import SessionDB
from hermes_models.cli import cli

pytestmark = pytest.mark.slow

# (command line, whether it changes the store)
COMMANDS = {
    "sessions": (["sessions", "--limit", "0"], False),
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
    "import": (["import", "bundle.jsonl"], True),
    "export": (["export", "-o", "out.jsonl"], True),
    "backup": (["backup", "copies/"], True),
}

FLAGS = ("--json", "--nl", "--csv", "--tsv")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("formats")
    build_demo_store(work / "demo.db")
    with SessionDB(work / "demo.db") as store:
        store.export_bundle(work / "bundle.jsonl")
    return work


def records(command: str, flag: str, template: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """What ``command`` prints with ``flag``; a command that changes the store runs on a
    fresh copy of it, at the same path each time."""
    args, changes = COMMANDS[command]
    work = template
    if changes:
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work)
    db = "fresh.db" if command == "import" else "demo.db"
    result = run(*args, "--db", db, flag, cwd=work)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # A backup is named after the second it was made in.
    text = re.sub(r"demo-\d{8}T\d{6}Z", "demo-<time>", result.stdout)
    if flag == "--json":
        assert text.startswith("[") and text.endswith("]\n")
        rows = json.loads(text)
        assert isinstance(rows, list)
        return rows
    if flag == "--nl":
        return [json.loads(line) for line in text.splitlines()]
    reader = csv.DictReader(io.StringIO(text), dialect="excel-tab" if flag == "--tsv" else "excel")
    return list(reader)


def as_cells(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``rows`` as CSV cells: every column of any row, lists and dicts as JSON."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    columns = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: cell(row.get(key)) for key in columns} for row in rows]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_four_formats_carry_the_same_records(
    command: str, template: Path, tmp_path: Path
) -> None:
    found = {flag: records(command, flag, template, tmp_path) for flag in FLAGS}
    assert found["--json"], f"{command} printed no records"
    assert found["--nl"] == found["--json"]
    cells = as_cells(found["--json"])
    assert found["--csv"] == cells
    assert found["--tsv"] == cells


def test_every_listing_or_report_command_has_the_four_flags() -> None:
    with_formats = {
        name
        for name, command in cli.commands.items()
        if {"--json", "--nl", "--csv", "--tsv"}
        <= {opt for param in command.params for opt in getattr(param, "opts", [])}
    }
    assert with_formats == {
        "backup",
        "delete",
        "doctor",
        "export",
        "import",
        "lineage",
        "optimize",
        "prune",
        "search",
        "sessions",
        "show",
        "stats",
        "vacuum",
    }


def test_records_are_what_the_library_returns(template: Path, tmp_path: Path) -> None:
    def get(command: str) -> list[dict[str, Any]]:
        return records(command, "--json", template, tmp_path)

    with SessionDB(template / "demo.db", read_only=True) as store:
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
    assert [(row["name"], row["ok"]) for row in get("doctor")][-2:] == [
        ("session counters", True),
        ("message id sequence", True),
    ]
    [report] = get("stats")
    assert (report["sessions"], report["messages"]) == (6, 22)
    assert [(row["id"], row["effect"]) for row in get("delete --dry-run")] == [
        ("demo-asyncio", "deleted"),
        ("demo-asyncio-branch", "kept as a root"),
    ]
    [imported] = get("import")
    assert (imported["sessions_added"], imported["messages_added"]) == (6, 22)
    [exported] = get("export")
    assert (exported["sessions"], exported["messages"], exported["format"]) == (6, 22, "jsonl")
    [copied] = get("backup")
    assert copied["integrity"] == "ok" and copied["removed"] == []
    [vacuumed] = get("vacuum")
    assert vacuumed["indexes_optimized"] == 2


def test_export_to_standard_output_has_no_summary_to_format(template: Path) -> None:
    result = run("export", "--db", "demo.db", "--json", cwd=template)
    assert result.returncode == 2
    assert result.stderr == (
        "Error: --json describes the file written with --output "
        "(see 'hermes-models export --help')\n"
    )


def test_an_empty_result_is_an_empty_array(template: Path) -> None:
    result = run("search", "--db", "demo.db", "zebra", "--json", cwd=template)
    assert (result.returncode, result.stdout) == (0, "[]\n")
    for flag in ("--nl", "--csv", "--tsv"):
        result = run("search", "--db", "demo.db", "zebra", flag, cwd=template)
        assert (result.returncode, result.stdout) == (0, "")
