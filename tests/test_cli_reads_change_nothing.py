"""Commands that only read never change a store: a live Hermes v16 file, with a
Hermes process writing beside it, keeps every table, trigger and index, its journal
mode and its file mode through every read command of the installed script; the first
command that writes adopts it, says so once, and leaves its mode alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from console_script import run
from hermes_release import HermesProcess

from hermes_models.driver import sqlite3

pytestmark = pytest.mark.slow  # a Hermes release in a process of its own

#: Every command that only reads, with the arguments that make it read something.
READ_COMMANDS = [
    ["sessions"],
    ["sessions", "--json"],
    ["search", "asyncio"],
    ["search", "事件循环", "--sessions"],
    ["show", "s1", "--json"],
    ["lineage", "s2"],
    ["resume", "s1"],
    ["export", "-o", "{out}/bundle.jsonl"],
    ["export", "--format", "md", "-o", "{out}/notes.md"],
    ["stats"],
    ["doctor"],
]


def layout(path: Path) -> list[tuple[str, str, str]]:
    """Every schema object of the file: type, name, SQL."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [tuple(row) for row in rows]


def journal_mode(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def test_every_read_command_leaves_a_live_hermes_file_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    with HermesProcess("v16", path) as hermes:
        hermes.call("create_session", "s1", "cli")
        hermes.call("append_message", "s1", "user", "asyncio 事件循环 question")
        hermes.call("end_session", "s1", "compression")
        hermes.call("create_session", "s2", "cli", parent_session_id="s1")
        hermes.call("append_message", "s2", "assistant", "an answer")
        os.chmod(path, 0o644)  # as Hermes' gateway leaves it under umask 022
        before = (layout(path), journal_mode(path), stat.S_IMODE(path.stat().st_mode))
        assert not any(name.startswith(("_yoyo", "yoyo")) for _, name, _ in before[0])
        for n, args in enumerate(READ_COMMANDS):
            hermes.call("append_message", "s2", "user", f"written beside command {n}")
            argv = [arg.format(out=out) for arg in args]
            result = run(*argv, "--db", str(path), cwd=tmp_path)
            assert result.returncode == 0, (argv, result.stderr)
            after = (layout(path), journal_mode(path), stat.S_IMODE(path.stat().st_mode))
            assert after == before, argv
        # Hermes goes on writing, and every message it wrote is there.
        hermes.call("append_message", "s2", "user", "after the commands")
        assert hermes.sql("SELECT count(*) FROM messages WHERE session_id = 's2'") == [
            [len(READ_COMMANDS) + 2]
        ]
        # The first command that writes adopts the file and says so, once; the file's
        # mode stays the one Hermes gave it.
        first = run("archive", "s1", "--db", str(path), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert first.stderr.count("adopted this Hermes v16 store") == 1
        second = run("archive", "--undo", "s1", "--db", str(path), cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        assert "adopted" not in second.stderr
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        hermes.call("append_message", "s2", "user", "after the adoption")
