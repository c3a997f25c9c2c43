"""archive, delete, prune, vacuum and backup from the installed script: what goes is
named before it goes, a dry run changes nothing, large deletions suggest a vacuum, long
work shows progress on a terminal, and backups are private checked copies."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
from conftest import EXPORT_FLAGS, target_of
from console_script import build_demo_store, environment, run

from hermes_models import SessionDB
from hermes_models.cli import views
from hermes_models.cli.demo import build_demo
from hermes_models.transfer.backups import MANIFEST

from snapshots import snapshot, store_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite", "postgresql")]

T0 = 1_767_603_600.0


@pytest.fixture
def demo_db(store: SessionDB) -> str:
    """The demo store (its ``--db``: a file or a PostgreSQL URL)."""
    build_demo(store)
    return str(target_of(store.database))


def ids(path: str) -> list[str]:
    with SessionDB(path, read_only=True) as store:
        return sorted(s["id"] for s in store.list_sessions(limit=None, include_archived=True))


def test_archive_hides_the_whole_chain_and_undo_brings_it_back(
    demo_db: str, tmp_path: Path
) -> None:
    # The title names the newest "writer retry policy #N", the chain's tip.
    result = run("archive", "--db", demo_db, "writer retry policy", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "archived demo-retries-2\n")
    with SessionDB(demo_db) as store:
        every = store.list_sessions(limit=None, include_archived=True)
        assert sorted(s["id"] for s in every if s["archived"]) == ["demo-retries", "demo-retries-2"]
    result = run("archive", "--db", demo_db, "--undo", "demo-retries-2", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "unarchived demo-retries-2\n")
    with SessionDB(demo_db) as store:
        assert [s["id"] for s in store.list_sessions(limit=None) if s["archived"]] == []


def test_delete_takes_subagent_runs_and_keeps_branches(demo_db: str, tmp_path: Path) -> None:
    result = run(
        "delete",
        "--db",
        demo_db,
        "--yes",
        "demo-retries-2",
        "demo-asyncio",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "deleted 3 sessions (8 messages); 1 child kept as a root\n"
    assert ids(demo_db) == ["demo-asyncio-branch", "demo-chinese", "demo-retries"]
    with SessionDB(demo_db) as store:
        assert store.get_session("demo-asyncio-branch")["parent_session_id"] is None


def test_the_question_names_what_goes_and_no_changes_nothing(demo_db: str, tmp_path: Path) -> None:
    before = store_snapshot(demo_db)
    result = run("delete", "--db", demo_db, "demo-retries-2", cwd=tmp_path, stdin="n\n")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "delete 2 sessions (4 messages):",
        "ID              Source    Msgs  Started (UTC)     Effect / title",
        "demo-retries-2  cli          2  2026-01-05 09:31  deleted",
        "                                                  writer retry policy #2",
        "demo-subagent   delegate     2  2026-01-05 09:31  deleted with its parent",
        "Delete 2 sessions and 4 messages? [y/N]: ",
        "Error: not confirmed; nothing was deleted",
    ]
    assert store_snapshot(demo_db) == before
    yes = run("delete", "--db", demo_db, "demo-retries-2", cwd=tmp_path, stdin="y\n")
    assert yes.returncode == 0
    assert yes.stdout == "deleted 2 sessions (4 messages)\n"


def test_prune_dry_run_names_what_would_go_and_changes_nothing(
    demo_db: str, tmp_path: Path
) -> None:
    before = store_snapshot(demo_db)
    result = run("prune", "--db", demo_db, "--older-than", "0", "--dry-run", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "would delete 3 sessions (10 messages); 2 children stay as roots:",
        "ID                   Source    Msgs  Started (UTC)     Effect / title",
        "demo-asyncio         cli          4  2026-01-05 09:00  deleted",
        "                                                       asyncio file IO",
        "demo-asyncio-branch  cli          6  2026-01-05 09:20  kept as a root",
        "                                                       asyncio, take two",
        "demo-retries         cli          4  2026-01-05 09:30  deleted",
        "                                                       writer retry policy",
        "demo-retries-2       cli          2  2026-01-05 09:31  kept as a root",
        "                                                       writer retry policy #2",
        "demo-subagent        delegate     2  2026-01-05 09:31  deleted",
    ]
    records = run("prune", "--db", demo_db, "--older-than", "0", "--dry-run", "--nl", cwd=tmp_path)
    assert [(r["id"], r["effect"]) for r in map(json.loads, records.stdout.splitlines())] == [
        ("demo-asyncio", "deleted"),
        ("demo-asyncio-branch", "kept as a root"),
        ("demo-retries", "deleted"),
        ("demo-retries-2", "kept as a root"),
        ("demo-subagent", "deleted"),
    ]
    nothing = run("prune", "--db", demo_db, "--older-than", "99999", "--dry-run", cwd=tmp_path)
    assert (nothing.returncode, nothing.stdout) == (0, "nothing to prune\n")
    assert store_snapshot(demo_db) == before


def test_prune_deletes_what_the_dry_run_named(demo_db: str, tmp_path: Path) -> None:
    result = run(
        "prune",
        "--db",
        demo_db,
        "--older-than",
        "30",
        "--source",
        "cli",
        "--yes",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "pruned 2 sessions (8 messages); 2 children kept as roots\n"
    assert ids(demo_db) == [
        "demo-asyncio-branch",
        "demo-chinese",
        "demo-retries-2",
        "demo-subagent",
    ]


def test_a_large_deletion_suggests_vacuum_and_a_small_one_does_not(
    store: SessionDB, tmp_path: Path
) -> None:
    for index in range(40):
        store.create_session(f"s{index:02d}", "cli", started_at=T0 + index)
        store.append_message(f"s{index:02d}", "user", "hello", timestamp=T0 + index)
    path = str(target_of(store.database))
    small = run("delete", "--db", path, "-y", "s00", cwd=tmp_path)
    assert (small.returncode, small.stderr) == (0, "")
    large = run("delete", "--db", path, "-y", "s01", "s02", "s03", cwd=tmp_path)
    assert large.returncode == 0
    if store.database.dialect == "postgresql":  # vacuum is for files; autovacuum reuses it
        assert large.stderr == ""
    else:
        assert large.stderr == (
            "hint: 8% of the messages went; `hermes-models vacuum` gives the space back to the "
            "file system\n"
        )
    assert store.session_count() == 36


def forced_terminal(tmp_path: Path) -> dict[str, str]:
    """Rich takes the pipes for an interactive terminal: progress is drawn."""
    return environment(tmp_path, TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")


@pytest.mark.backends("sqlite")  # vacuum compacts a file (a server store refuses: test_cli.py)
def test_vacuum_shows_its_steps_while_it_works(demo_db: str, tmp_path: Path) -> None:
    demo_path = Path(demo_db)
    with SessionDB(demo_db) as store:
        before = store.message_count(include_inactive=True)
    wal = demo_path.with_name(demo_path.name + "-wal")
    size = views.size(demo_path.stat().st_size + (wal.stat().st_size if wal.exists() else 0))
    result = run("vacuum", "--db", demo_db, cwd=tmp_path, env=forced_terminal(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "merging search index segments" in result.stderr
    assert f"compacting {size}" in result.stderr
    assert " ".join(result.stdout.split()).startswith(
        f"optimized 2 search indexes; {demo_db}: {size} -> "
    )
    quiet = run("vacuum", "--db", demo_db, cwd=tmp_path)
    assert (quiet.returncode, quiet.stderr) == (0, "")
    with SessionDB(demo_db) as store:
        assert store.message_count(include_inactive=True) == before


@pytest.mark.backends("sqlite")  # a copy of the file (a server store refuses: test_cli.py)
def test_backup_from_the_command_line(demo_db: str, tmp_path: Path) -> None:
    folder = tmp_path / "copies"
    first = run(
        "backup", "--db", demo_db, f"{folder}/", cwd=tmp_path, env=forced_terminal(tmp_path)
    )
    assert first.returncode == 0, first.stderr
    assert "backing up" in first.stderr
    [copy] = [p for p in folder.iterdir() if p.name != MANIFEST]
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert snapshot(copy) == snapshot(Path(demo_db))
    for _ in range(3):
        again = run(
            "--read-only", "backup", "--db", demo_db, str(folder), "--keep", "2", cwd=tmp_path
        )
        assert again.returncode == 0, again.stderr
    assert len([p for p in folder.iterdir() if p.name != MANIFEST]) == 2
    assert again.stdout.splitlines()[-1].startswith(f"removed old copy {folder}/state-")


#: What rich colours a progress bar with, and what it draws one again with (moves of
#: the cursor, erasures, carriage returns).
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_REDRAW = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\r\n]")

#: Each command with a progress bar, its label and what it counts; the files are those
#: :func:`test_progress_names_what_it_counts` makes (the demo store, its bundle, a
#: folder of one transcript).
PROGRESS = [
    (["export", "--db", "demo.db", *EXPORT_FLAGS, "-o", "out.jsonl"], "exporting", "messages"),
    (
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "--format", "md", "-o", "out.md"],
        "exporting",
        "sessions",
    ),
    (["import", "demo.jsonl", "--db", "new.db"], "importing", "rows"),
    (["import", "transcripts", "--db", "new.db"], "importing", "files"),
    (["optimize", "--rebuild", "--db", "demo.db"], "indexing", "messages"),
    (["backup", "--db", "demo.db", "copy.db"], "backing up", "pages"),
    (["copy", "demo.db", "copied.db"], "copying and checking", "rows"),
]


@pytest.mark.parametrize(("args", "label", "unit"), PROGRESS, ids=lambda v: " ".join(v)[:24])
def test_progress_names_what_it_counts(
    tmp_path: Path, args: list[str], label: str, unit: str
) -> None:
    build_demo_store(tmp_path / "demo.db")
    with SessionDB(tmp_path / "demo.db") as store:
        store.export_bundle(tmp_path / "demo.jsonl")
    (tmp_path / "transcripts").mkdir()
    (tmp_path / "transcripts" / "s-1.jsonl").write_text(
        json.dumps({"role": "user", "content": "hi", "timestamp": T0}) + "\n", encoding="utf-8"
    )
    result = run(*args, cwd=tmp_path, env=forced_terminal(tmp_path))
    assert result.returncode == 0, result.stderr
    frames = [frame for frame in _REDRAW.split(_COLOUR.sub("", result.stderr)) if frame]
    last = re.fullmatch(rf"{label} \S+ (\d+)/(\d+) (\w+) \d+:\d\d:\d\d", frames[-1])
    assert last is not None, frames
    done, total, counted = last.groups()
    assert (counted, int(done) > 0, done == total) == (unit, True, True)
