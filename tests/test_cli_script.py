"""The installed ``hermes-models`` script, run as a subprocess: the exit status of every
command when it succeeds, finds nothing, gets bad input and fails; a reader that goes
away; ``python -m hermes_models``; what ``--db`` accepts; shell completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_cli_formats
from conftest import ENCRYPTED_RUN, EXPORT_FLAGS
from console_script import (
    SCRIPT,
    build_demo_store,
    environment,
    in_shell,
    make_read_only,
    run,
    run_module,
    run_unprivileged,
)

from hermes_models import SessionDB
from hermes_models.cli.commands import cli
from hermes_models.driver import WAL_RESET_BUG, sqlite3

from snapshots import snapshot

pytestmark = pytest.mark.slow

T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files every case may use: a demo store, an empty one, junk, bundles, transcripts."""
    work = tmp_path_factory.mktemp("template")
    build_demo_store(work / "demo.db")
    with SessionDB(work / "empty.db"):
        pass
    (work / "junk.db").write_bytes(b"this is not a database\n" * 10)
    with SessionDB(work / "demo.db") as store:
        store.export_bundle(work / "bundle.jsonl")
    lines = (work / "bundle.jsonl").read_text(encoding="utf-8").splitlines()
    (work / "bad.jsonl").write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    # Well formed, refused by the import itself: the parent is in neither the bundle
    # nor the (new) database.
    orphan = {"type": "session", "id": "child", "source": "cli", "started_at": T0}
    header = {**json.loads(lines[0]), "sessions": 1, "messages": 0}
    (work / "orphan.jsonl").write_text(
        f"{json.dumps(header)}\n{json.dumps({**orphan, 'parent_session_id': 'gone'})}\n",
        encoding="utf-8",
    )
    folder = work / "transcripts"
    folder.mkdir()
    (folder / "good-1.jsonl").write_text(
        json.dumps({"role": "user", "content": "hi", "timestamp": T0}) + "\n", encoding="utf-8"
    )
    (folder / "broken-2.jsonl").write_text("{not json\n", encoding="utf-8")
    broken = work / "broken-transcripts"
    broken.mkdir()
    (broken / "broken-3.jsonl").write_text("{not json\n", encoding="utf-8")
    (work / "empty-folder").mkdir()
    unhealthy = work / "unhealthy.db"
    shutil.copy(work / "demo.db", unhealthy)
    conn = sqlite3.connect(unhealthy)
    conn.execute("DROP TRIGGER messages_fts_trigram_update")
    conn.commit()
    conn.close()
    for leftover in work.glob("*.db-*"):
        leftover.unlink()
    return work


@pytest.fixture
def work(template: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh copy of the template files for one test (its demo store made again,
    plain, for a test marked plaintext_file when the template's is encrypted)."""
    target = tmp_path / "work"
    shutil.copytree(template, target)
    if ENCRYPTED_RUN and request.node.get_closest_marker("plaintext_file") is not None:
        (target / "demo.db").unlink()
        build_demo_store(target / "demo.db")
    return target


def error_line(stderr: str) -> str:
    """The ``Error: ...`` line that ends what the script wrote to stderr."""
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else ""


# -- every command: success, nothing found, bad input, failure --------------------------------

# (case, arguments, stdin, exit status, text the output must contain)
CASES = [
    ("migrate: creates a file", ["migrate", "--db", "new/state.db"], "", 0, "schema up to date"),
    ("migrate: not a database", ["migrate", "--db", "junk.db"], "", 1, "not an SQLite database"),
    ("migrate: unknown URL", ["migrate", "--db", "mysql://h/db"], "", 2, "'mysql'"),
    (
        "migrate: no server",
        ["migrate", "--db", "postgresql://postgres@127.0.0.1:1/db"],
        "",
        1,
        "Connection refused",
    ),
    ("migrate: read-only", ["--read-only", "migrate", "--db", "demo.db"], "", 2, "--read-only"),
    ("sessions: rows", ["sessions", "--db", "demo.db"], "", 0, "demo-chinese"),
    # A path holding a newline is named on one line, the newline escaped.
    ("sessions: a newline", ["sessions", "--db", "a\nb.db"], "", 1, "a\\nb.db does not exist"),
    ("sessions: sqlite://name", ["sessions", "--db", "sqlite://x.db"], "", 2, "names no file"),
    ("sessions: none", ["sessions", "--db", "empty.db"], "", 0, "no sessions"),
    # An empty --source (an unset variable) is refused: listings read "" as every
    # source, searches as a source no session has.
    ("sessions: empty source", ["sessions", "--db", "demo.db", "--source", ""], "", 2, "empty"),
    ("search: empty source", ["search", "--db", "demo.db", "x", "--source", " "], "", 2, "empty"),
    ("sessions: bad limit", ["sessions", "--db", "demo.db", "--limit", "-1"], "", 2, "--limit"),
    (
        "sessions: limit past 2**63-1",
        ["sessions", "--db", "demo.db", "--limit", str(2**63)],
        "",
        2,
        "is more than 9,223,372,036,854,775,807",
    ),
    ("prune: nan days", ["prune", "--db", "demo.db", "--older-than", "nan"], "", 2, "finite"),
    ("sessions: no file", ["sessions", "--db", "missing.db"], "", 1, "does not exist"),
    (
        "sessions: after",
        ["sessions", "--db", "demo.db", "--after", "demo-chinese"],
        "",
        0,
        "demo-asyncio",
    ),
    ("sessions: after none", ["sessions", "--db", "demo.db", "--after", "nope"], "", 1, "'nope'"),
    (
        "sessions: after, recent",
        ["sessions", "--db", "demo.db", "--after", "demo-chinese", "--recent"],
        "",
        2,
        "--after pages the start order",
    ),
    ("show: a session", ["show", "--db", "demo.db", "demo-chinese"], "", 0, "事件循环"),
    ("show: unknown id", ["show", "--db", "demo.db", "nope"], "", 1, "no session matches"),
    ("show: ambiguous", ["show", "--db", "demo.db", "demo-ret"], "", 1, "ambiguous"),
    ("show: no id", ["show", "--db", "demo.db"], "", 2, "Missing argument"),
    ("show: not a database", ["show", "--db", "junk.db", "x"], "", 1, "not an SQLite"),
    ("lineage: a tree", ["lineage", "--db", "demo.db", "demo-subagent"], "", 0, "<- resume"),
    ("lineage: unknown id", ["lineage", "--db", "demo.db", "nope"], "", 1, "no session"),
    ("lineage: no id", ["lineage", "--db", "demo.db"], "", 2, "Missing argument"),
    ("resume: the tip", ["resume", "--db", "demo.db", "demo-retries"], "", 0, "demo-retries-2"),
    ("resume: unknown id", ["resume", "--db", "demo.db", "nope"], "", 1, "no session"),
    ("search: hits", ["search", "--db", "demo.db", "事件循环"], "", 0, ">>>事件循环<<<"),
    ("search: no hits", ["search", "--db", "demo.db", "zebra"], "", 0, "no matches"),
    ("search: odd query", ["search", "--db", "demo.db", '"C++ AND'], "", 0, "no matches"),
    # A blank query finds nothing, by session too (the library lists every session then).
    ("search: blank, sessions", ["search", "--db", "demo.db", " ", "--sessions"], "", 0, "no matc"),
    (
        "search: blank, sessions, JSON",
        ["search", "--db", "demo.db", "", "--sessions", "--json"],
        "",
        0,
        "[]",
    ),
    ("search: bad sort", ["search", "--db", "demo.db", "x", "--sort", "up"], "", 2, "--sort"),
    (
        "search: a rank window",
        ["search", "--db", "demo.db", "事件循环", "--rank-window", "1"],
        "",
        0,
        ">>>事件循环<<<",
    ),
    (
        "search: bad rank window",
        ["search", "--db", "demo.db", "x", "--rank-window", "0"],
        "",
        2,
        "--rank-window",
    ),
    ("search: no file", ["search", "--db", "missing.db", "x"], "", 1, "does not exist"),
    (
        "export: a bundle",
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "-o", "out.jsonl"],
        "",
        0,
        "wrote 6",
    ),
    (
        "export: unknown",
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "--session", "nope"],
        "",
        1,
        "no session",
    ),
    ("export: bad format", ["export", "--db", "demo.db", "--format", "xml"], "", 2, "--format"),
    (
        "export: bad folder",
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "-o", "no/dir/x.jsonl"],
        "",
        1,
        "Error",
    ),
    (
        "export: no file can be made there",
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "-o", "/proc/x.jsonl"],
        "",
        1,
        "Error: cannot write /proc/x.jsonl: No such file or directory\n",
    ),
    ("copy: to a file", ["copy", "demo.db", "copied.db"], "", 0, "verified: 6 sessions"),
    ("copy: no source", ["copy", "missing.db", "copied.db"], "", 1, "does not exist"),
    ("copy: no target", ["copy", "demo.db"], "", 2, "Missing argument 'DST'"),
    ("import: a bundle", ["import", "bundle.jsonl", "--db", "copy.db"], "", 0, "imported 6"),
    (
        "import: again",
        ["import", "bundle.jsonl", "--db", "demo.db"],
        "",
        0,
        "6 sessions already present",
    ),
    ("import: bad file", ["import", "bad.jsonl", "--db", "copy.db"], "", 1, "bad.jsonl"),
    ("import: one bad", ["import", "transcripts", "--db", "copy.db"], "", 1, "broken-2.jsonl"),
    ("import: empty dir", ["import", "empty-folder", "--db", "c.db"], "", 1, "no <session_id>"),
    ("import: no path", ["import", "nowhere.jsonl", "--db", "copy.db"], "", 2, "nowhere"),
    ("stats: report", ["stats", "--db", "demo.db"], "", 0, "messages_fts"),
    ("stats: no file", ["stats", "--db", "missing.db"], "", 1, "does not exist"),
    ("stats: bad option", ["stats", "--db", "demo.db", "--bogus"], "", 2, "--bogus"),
    # With or without the encryption extra, these three refuse the same way (their
    # successes: tests/test_encryption.py, tox env encrypted).
    ("encrypt: no new key", ["encrypt", "--db", "demo.db"], "", 1, "Error: no new key: set"),
    ("decrypt: a plain file", ["decrypt", "--db", "demo.db"], "", 1, "demo.db is not encrypted"),
    ("rekey: a plain file", ["rekey", "--db", "demo.db"], "", 1, "not encrypted (encrypt gives"),
    ("encrypt: no file", ["encrypt", "--db", "missing.db"], "", 1, "does not exist"),
    ("erase: unknown id", ["erase", "--db", "demo.db", "-y", "nope"], "", 1, "no session"),
    ("erase: off a terminal", ["erase", "--db", "demo.db", "demo-chinese"], "n\n", 1, "pass --yes"),
    ("retain: no policy", ["retain", "--db", "demo.db", "-y"], "", 2, "retain needs a policy"),
    ("retain: bad size", ["retain", "--db", "demo.db", "--max-size", "big"], "", 2, "--max-size"),
    ("doctor: healthy", ["doctor", "--db", "demo.db"], "", 0, "healthy"),
    ("doctor: a check fails", ["doctor", "--db", "unhealthy.db"], "", 1, "1 of 17 checks failed"),
    ("doctor: no file", ["doctor", "--db", "missing.db"], "", 1, "no database"),
    ("doctor: bad option", ["doctor", "--db", "demo.db", "--bogus"], "", 2, "--bogus"),
    ("archive: done", ["archive", "--db", "demo.db", "demo-chinese"], "", 0, "archived"),
    ("archive: unknown id", ["archive", "--db", "demo.db", "nope"], "", 1, "no session"),
    ("archive: no id", ["archive", "--db", "demo.db"], "", 2, "Missing argument"),
    ("delete: done", ["delete", "--db", "demo.db", "-y", "demo-chinese"], "", 0, "deleted 1"),
    ("delete: declined", ["delete", "--db", "demo.db", "demo-chinese"], "n\n", 1, "not confirmed"),
    ("delete: no answer", ["delete", "--db", "demo.db", "demo-chinese"], "", 1, "not confirmed"),
    ("delete: unknown id", ["delete", "--db", "demo.db", "-y", "nope"], "", 1, "no session"),
    ("delete: no id", ["delete", "--db", "demo.db"], "", 2, "Missing argument"),
    ("prune: done", ["prune", "--db", "demo.db", "--older-than", "0", "-y"], "", 0, "pruned 3"),
    (
        "prune: nothing",
        ["prune", "--db", "demo.db", "--older-than", "99999", "-y"],
        "",
        0,
        "nothing to",
    ),
    (
        "prune: declined",
        ["prune", "--db", "demo.db", "--older-than", "0"],
        "n\n",
        1,
        "not confirmed",
    ),
    ("prune: bad age", ["prune", "--db", "demo.db", "--older-than", "-1"], "", 2, "--older"),
    ("optimize: done", ["optimize", "--db", "demo.db"], "", 0, "indexed 0 messages"),
    ("optimize: no file", ["optimize", "--db", "missing.db"], "", 1, "does not exist"),
    ("optimize: read-only", ["--read-only", "optimize", "--db", "demo.db"], "", 2, "--read-only"),
    ("optimize: bad option", ["optimize", "--db", "demo.db", "--bogus"], "", 2, "--bogus"),
    ("vacuum: done", ["vacuum", "--db", "demo.db"], "", 0, "optimized 2 search indexes"),
    ("vacuum: no file", ["vacuum", "--db", "missing.db"], "", 1, "does not exist"),
    ("vacuum: read-only", ["--read-only", "vacuum", "--db", "demo.db"], "", 2, "--read-only"),
    ("backup: a copy", ["backup", "--db", "demo.db", "copies/"], "", 0, "integrity_check ok"),
    ("backup: file exists", ["backup", "--db", "demo.db", "junk.db"], "", 1, "already exists"),
    ("backup: bad keep", ["backup", "--db", "demo.db", "c/", "--keep", "0"], "", 2, "--keep"),
    ("backup: no file", ["backup", "--db", "missing.db", "c/"], "", 1, "nothing to back up"),
    # What is there but is no database says so, as every other command does.
    # The command line's words, not the library's ("pass overwrite=True").
    (
        "export: file exists",
        ["export", "--db", "demo.db", *EXPORT_FLAGS, "-o", "junk.db"],
        "",
        1,
        "junk.db already exists (--force replaces it)",
    ),
    ("backup: a folder", ["backup", "--db", ".", "c/"], "", 1, "is a directory, not an SQLite"),
    ("backup: a device", ["backup", "--db", "/dev/null", "c/"], "", 1, "a character device"),
    ("backup: junk", ["backup", "--db", "junk.db", "c/"], "", 1, "junk.db is not an SQLite"),
    ("backup: empty DEST", ["backup", "--db", "demo.db", ""], "", 2, "DEST: must not be empty"),
    (
        "backup: no file can be made there",
        ["backup", "--db", "demo.db", "/proc/x.db"],
        "",
        1,
        "Error: cannot write /proc/x.db: No such file or directory\n",
    ),
    ("demo: shows", ["demo"], "", 0, "/resume demo-retries opens demo-retries-2"),
    ("demo: existing db", ["demo", "--db", "demo.db"], "", 1, "already exists"),
    ("demo: bad option", ["demo", "--bogus"], "", 2, "--bogus"),
    ("program: version", ["--version"], "", 0, "hermes-models, version"),
    ("program: help", ["--help"], "", 0, "Commands:"),
    ("program: no command", ["nosuch"], "", 2, "No such command"),
]


#: Rows about a plain file; under HERMES_TEST_ENCRYPTED=1 their store stays plain.
PLAIN_FILE_ROWS = {"encrypt: no new key", "decrypt: a plain file", "rekey: a plain file"}


@pytest.mark.parametrize(
    ("args", "stdin", "status", "expected"),
    [
        pytest.param(
            *case[1:],
            id=case[0],
            marks=[pytest.mark.plaintext_file] if case[0] in PLAIN_FILE_ROWS else [],
        )
        for case in CASES
    ],
)
def test_exit_status_of_every_command(
    work: Path, args: list[str], stdin: str, status: int, expected: str
) -> None:
    result = run(*args, cwd=work, stdin=stdin)
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if status == 0:
        assert expected in result.stdout
    else:
        assert expected in result.stderr + result.stdout
    if result.stderr and status != 0:
        assert error_line(result.stderr).startswith(("Error: ", "failed: ")), result.stderr
    if "checks failed" in expected:
        assert result.stderr == ""  # doctor's verdict is on stdout
    elif status == 2 or (status == 1 and expected not in ("not confirmed", "broken-2.jsonl")):
        assert result.stderr.count("\n") == 1, result.stderr  # a failure is one line


def test_every_command_is_in_the_matrix() -> None:
    # A command that prints records is run by tests/test_cli_formats.py in its four
    # formats (its test there); every other one has a row here.
    named = {case[1][0] if case[1][0] != "--read-only" else case[1][1] for case in CASES}
    named |= {args[0] for args, _ in test_cli_formats.COMMANDS.values()}
    assert set(cli.commands) <= named


def test_refusals_change_nothing(work: Path) -> None:
    before = snapshot(work / "demo.db")
    for args in (
        ["delete", "--db", "demo.db", "demo-chinese"],
        ["prune", "--db", "demo.db", "--older-than", "0"],
    ):
        assert run(*args, cwd=work, stdin="n\n").returncode == 1
    assert run("import", "bad.jsonl", "--db", "demo.db", cwd=work).returncode == 1
    assert run("--read-only", "vacuum", "--db", "demo.db", cwd=work).returncode == 2
    assert snapshot(work / "demo.db") == before
    assert run("migrate", "--db", "junk.db", cwd=work).returncode == 1
    assert (work / "junk.db").read_bytes() == b"this is not a database\n" * 10


# -- a reader that goes away ------------------------------------------------------------------


@pytest.fixture
def big_store(tmp_path: Path) -> Path:
    path = tmp_path / "big.db"
    with SessionDB(path) as store:
        for index in range(400):
            session_id = f"s{index:04d}"
            store.create_session(session_id, "cli", started_at=T0 + index)
            store.append_message(session_id, "user", "x" * 500, timestamp=T0 + index)
    return path


@pytest.mark.parametrize("fmt", ["--json", "--nl", "--csv"])
def test_a_closed_pipe_ends_quietly_with_status_0(big_store: Path, fmt: str) -> None:
    command = f"'{SCRIPT}' sessions {fmt} --limit all --db '{big_store}' | head -1"
    result = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        env=environment(big_store.parent),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    first = result.stdout.splitlines()[0]
    if fmt == "--json":
        assert json.loads(first[1:-1])["id"] == "s0399"
    elif fmt == "--nl":
        assert json.loads(first)["id"] == "s0399"
    else:
        assert first.startswith("id,source,")


def test_a_closed_pipe_of_a_table_ends_quietly(big_store: Path) -> None:
    process = subprocess.Popen(
        [str(SCRIPT), "sessions", "--limit", "all", "--db", str(big_store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(big_store.parent),
    )
    assert process.stdout is not None and process.stderr is not None
    header = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    assert (process.wait(timeout=60), err) == (0, b"")
    assert header.split()[:3] == [b"ID", b"Source", b"Msgs"]


# -- python -m, and --db -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["sessions"], ["sessions", "--json"], ["export", *EXPORT_FLAGS], ["stats"]]
)
def test_a_closed_standard_output_is_one_error_line_and_changes_nothing(
    work: Path, args: list[str]
) -> None:
    before = (work / "demo.db").read_bytes()
    command = " ".join([str(SCRIPT), *args, "--db", "demo.db"])
    result = in_shell(f"{command} >&-", work)
    assert (result.returncode, result.stderr) == (
        1,
        "Error: standard output is closed; nothing was done\n",
    )
    assert (work / "demo.db").read_bytes() == before


def test_a_closed_standard_input_reads_as_empty(work: Path) -> None:
    before = (work / "demo.db").read_bytes()
    result = in_shell(f"{SCRIPT} delete demo-asyncio --db demo.db <&-", work)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "Error: not confirmed; nothing was deleted"
    assert "Traceback" not in result.stderr
    assert (work / "demo.db").read_bytes() == before


def test_python_dash_m_runs_the_cli(work: Path) -> None:
    result = run_module("resume", "--db", "demo.db", "demo-retries", cwd=work)
    assert (result.returncode, result.stdout, result.stderr) == (0, "demo-retries-2\n", "")
    usage = subprocess.run(
        [sys.executable, "-m", "hermes_models", "--bogus"],
        env=environment(work),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (usage.returncode, usage.stderr) == (
        2,
        "Error: No such option '--bogus'. (see 'python -m hermes_models --help')\n",
    )


@pytest.mark.parametrize(
    "spelling",
    ["demo.db", "./demo.db", "sqlite:///demo.db", "sqlite:///{work}/demo.db", "{work}/demo.db"],
)
def test_db_accepts_paths_and_sqlite_urls(work: Path, spelling: str) -> None:
    target = spelling.format(work=work)
    for args, env in (
        (["--db", target, "resume", "demo-retries"], environment(work)),
        (["resume", "demo-retries"], environment(work, HERMES_MODELS_DB=target)),
    ):
        result = run(*args, cwd=work, env=env)
        assert (result.returncode, result.stdout, result.stderr) == (0, "demo-retries-2\n", "")
    assert sorted(p.name for p in work.iterdir() if ":" in p.name) == []


@pytest.mark.parametrize(
    ("spelling", "message"),
    [
        (
            "mysql://h/db",
            "unsupported URL scheme 'mysql'; only sqlite:/// and postgresql:// are supported",
        ),
        ("postgresql://h/", "the PostgreSQL URL names no database: 'postgresql://h/'"),
        (
            "postgres://h/db?schema=a-b",
            "schema must be a lower-case identifier (letters, digits and _, at most 63), not 'a-b'",
        ),
        (":memory:", "in-memory databases are not supported (WAL needs a file)"),
        ("sqlite:///:memory:", "in-memory databases are not supported (WAL needs a file)"),
        ("", "empty database path"),
    ],
)
def test_db_refuses_what_connect_refuses_and_creates_nothing(
    work: Path, spelling: str, message: str
) -> None:
    before = sorted(p.name for p in work.rglob("*"))
    for command in (["migrate"], ["sessions"], ["stats"], ["doctor"]):
        result = run("--db", spelling, *command, cwd=work)
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"Error: --db: {message} (see 'hermes-models --help')\n"
        if spelling:  # an empty HERMES_MODELS_DB is the same as none
            env = environment(work, HERMES_MODELS_DB=spelling)
            from_env = run(*command, cwd=work, env=env)
            assert from_env.stderr == (
                f"Error: HERMES_MODELS_DB: {message} (see 'hermes-models --help')\n"
            )
            assert from_env.returncode == 2
    assert sorted(p.name for p in work.rglob("*")) == before


# -- the demo and HERMES_MODELS_DB --------------------------------------------------------------


def test_demo_ignores_hermes_models_db_unless_db_is_typed(work: Path) -> None:
    env = environment(work, HERMES_MODELS_DB=str(work / "demo.db"))
    before = (work / "demo.db").read_bytes()
    result = run("demo", cwd=work, env=env)
    assert result.returncode == 0, result.stderr
    assert "demo database:" not in result.stdout
    assert (work / "demo.db").read_bytes() == before
    typed = run("--db", "demo.db", "demo", cwd=work, env=env)
    assert typed.returncode == 1
    assert error_line(typed.stderr).endswith(
        "already exists; the demo writes a new database (pick a new path)"
    )
    fresh = run("demo", "--db", "fresh.db", cwd=work, env=env)
    assert fresh.returncode == 0
    assert fresh.stdout.endswith(f"demo database: {work / 'fresh.db'}\n")


# -- stored text that a terminal or rich would read as commands -----------------------------------


def test_stored_escape_sequences_and_markup_are_printed_as_inert_text(tmp_path: Path) -> None:
    path = tmp_path / "odd.db"
    with SessionDB(path) as store:
        store.create_session("[/]x", "[/]", started_at=T0)
        store.create_session("e1", "cli", started_at=T0 + 1)
        store.set_session_title("e1", "[bold]loud[/bold] title")
        store.append_message("e1", "user", "clear \x1b[2J\x1b[H screen \x1b]0;PWNED\x07 x\x9by")
    env = {**environment(tmp_path), "COLUMNS": "100"}
    for args in (
        ["sessions"],
        ["show", "e1"],
        ["search", "screen"],
        ["search", "screen", "--sessions"],
    ):
        result = run(*args, "--db", str(path), cwd=tmp_path, env=env)
        assert (result.returncode, result.stderr) == (0, ""), args
        assert not any(c in result.stdout for c in "\x1b\x07\x9b"), (args, result.stdout)
        if args[0] != "search":
            assert "[bold]loud[/bold] title" in result.stdout  # markup is text
    listing = run("sessions", "--db", str(path), cwd=tmp_path, env=env).stdout
    assert listing.splitlines()[-1].split() == ["[/]x", "[/]", "0", "2026-01-05", "09:00"]
    shown = run("show", "e1", "--db", str(path), cwd=tmp_path, env=env).stdout
    assert "clear [2J[H screen ]0;PWNED xy" in shown


# -- narrow terminals ------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [10, 40, 60, 66])
def test_a_table_too_wide_for_the_terminal_is_stacked_and_nothing_is_cut(
    work: Path, width: int
) -> None:
    with SessionDB(work / "demo.db", read_only=True) as store:
        rows = store.list_sessions_rich(limit=None)
    env = {**environment(work), "COLUMNS": str(width)}
    result = run("sessions", "--db", "demo.db", "--limit", "all", cwd=work, env=env)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert [line for line in lines if len(line) > width] == []
    flat = "".join(result.stdout.split())
    for row in rows:
        for text in (row["title"], row["preview"], "Msgs:" + str(row["message_count"])):
            assert "".join(str(text or "").split()) in flat, (width, text)
    assert sum(line.startswith("Source:") for line in lines) == len(rows)


def test_a_terminal_of_no_columns_is_laid_out_for_80(work: Path) -> None:
    outputs = {
        columns: run(
            "sessions", "--db", "demo.db", cwd=work, env={**environment(work), "COLUMNS": columns}
        )
        for columns in ("0", "80")
    }
    assert outputs["0"].returncode == 0
    assert outputs["0"].stdout == outputs["80"].stdout
    assert "demo-chinese" in outputs["0"].stdout


# -- help on an 80-column terminal --------------------------------------------------------------


@pytest.mark.parametrize("command", [None, *sorted(cli.commands)])
def test_help_fits_80_columns(tmp_path: Path, command: str | None) -> None:
    env = {**environment(tmp_path), "COLUMNS": "80"}
    result = run(*([command] if command else []), "--help", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    wide = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert wide == []


# -- paging by the id the table shows ------------------------------------------------------------


def test_after_takes_the_shortened_id_the_table_prints(tmp_path: Path) -> None:
    path = tmp_path / "ids.db"
    ids = [f"20260105_09{minute:02d}00_{minute:08x}" for minute in range(5)]
    with SessionDB(path) as store:
        for index, session_id in enumerate(ids):
            store.create_session(session_id, "cli", started_at=T0 + index)
    first = run("sessions", "--db", str(path), "--limit", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    shown = [line.split()[0] for line in first.stdout.splitlines()[1:]]
    assert len(shown) == 2 and shown[-1] != ids[3] and ids[3].startswith(shown[-1])
    after = run("sessions", "--db", str(path), "--limit", "2", "--after", shown[-1], cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert [line.split()[0] for line in after.stdout.splitlines()[1:]] == [
        ids[2][: len(shown[-1])],
        ids[1][: len(shown[-1])],
    ]


# -- ambiguous prefixes -------------------------------------------------------------------------


def test_an_ambiguous_prefix_lists_the_first_candidates(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with SessionDB(path) as store:
        for index in range(8):
            store.create_session(f"20260105_09000{index}_abcd", "cli", started_at=T0 + index)
    result = run("show", "--db", str(path), "20260105_09", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "Error: '20260105_09' is ambiguous: several session ids start with it "
        "(20260105_090000_abcd, 20260105_090001_abcd, 20260105_090002_abcd, "
        "20260105_090003_abcd, 20260105_090004_abcd, ...); type more of it\n"
    )
    two = run("show", "--db", str(path), "20260105_090000", cwd=tmp_path)
    assert two.returncode == 0
    assert two.stdout.startswith("20260105_090000_abcd\n")


# -- import refuses before it creates -----------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["bad.jsonl", "junk.db", "transcripts/broken-2.jsonl", "orphan.jsonl"]
)
def test_refused_import_input_creates_no_database(work: Path, bad: str) -> None:
    target = work / "fresh" / "state.db"
    result = run("import", bad, "--db", str(target), cwd=work)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    assert not target.parent.exists()


def test_a_folder_whose_every_transcript_fails_creates_no_database(work: Path) -> None:
    target = work / "fresh" / "state.db"
    result = run("import", "broken-transcripts", "--db", str(target), cwd=work)
    assert result.returncode == 1
    assert result.stdout == (
        "imported 0 sessions and 0 messages from 1 transcript file (0 already present, "
        "0 lines skipped)\n"
    )
    assert result.stderr.startswith("failed: ") and result.stderr.count("\n") == 1
    assert not target.parent.exists()


# -- shell completion ---------------------------------------------------------------------------


def complete(work: Path, words: str, env: dict[str, str] | None = None) -> list[str]:
    parts = words.split(" ")
    result = run(
        cwd=work,
        env={
            **(env or environment(work)),
            "_HERMES_MODELS_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
        },
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_completion_offers_session_ids(work: Path) -> None:
    assert complete(work, "hermes-models show --db demo.db demo-re") == [
        "plain,demo-retries",
        "plain,demo-retries-2",
    ]
    env = environment(work, HERMES_MODELS_DB=str(work / "demo.db"))
    assert complete(work, "hermes-models lineage demo-s", env) == ["plain,demo-subagent"]
    assert complete(work, "hermes-models delete -y demo-c", env) == ["plain,demo-chinese"]
    assert complete(work, "hermes-models show --db missing.db demo") == []
    assert complete(work, "hermes-models show --db junk.db demo") == []
    assert "plain,sessions" in complete(work, "hermes-models sess")


def test_the_completion_script_is_what_the_docs_say(work: Path) -> None:
    result = run(cwd=work, env={**environment(work), "_HERMES_MODELS_COMPLETE": "bash_source"})
    assert result.returncode == 0
    assert "_hermes_models_completion()" in result.stdout
    assert "complete -o nosort -F _hermes_models_completion hermes-models" in result.stdout
    assert os.environ.get("_HERMES_MODELS_COMPLETE") is None


# -- files that cannot be written -----------------------------------------------------------------

READING = [
    ["sessions"],
    ["show", "demo-chinese"],
    ["lineage", "demo-subagent"],
    ["resume", "demo-retries"],
    ["search", "事件循环"],
    ["search", "asyncio", "--sessions"],
    ["export", *EXPORT_FLAGS],
    ["stats"],
    ["doctor"],
    ["prune", "--older-than", "0", "--dry-run"],
    ["delete", "demo-asyncio", "--dry-run"],
    ["backup", "copy.db"],
]


@pytest.mark.parametrize("folder_writable", [True, False], ids=["file", "folder"])
def test_reading_commands_read_what_they_cannot_write(
    tmp_path: Path, folder_writable: bool
) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    path = build_demo_store(folder / "state.db")
    before = snapshot(path)
    make_read_only(path, *([] if folder_writable else [folder]))
    out = tmp_path / "out"
    out.mkdir()
    try:
        results = [run_unprivileged(*args, "--db", str(path), cwd=out) for args in READING]
        writing = run_unprivileged("archive", "demo-chinese", "--db", str(path), cwd=out)
    finally:
        folder.chmod(0o755)
        path.chmod(0o600)
    for args, result in zip(READING, results):
        assert result.returncode == 0, (args, result.stderr)
        assert "read_only=True" not in result.stderr
        assert "Error" not in result.stderr, (args, result.stderr)
    assert "demo-chinese" in results[0].stdout
    assert results[3].stdout == "demo-retries-2\n"
    assert writing.returncode == 1
    assert writing.stderr.splitlines()[-1] == (
        f"Error: {path} cannot be written here (the file or its folder is read-only)"
    )
    assert snapshot(path) == before


def store_in_a_read_only_folder(tmp_path: Path, journal_mode: str) -> Path:
    """The demo store in ``journal_mode``, alone in a folder made read-only (no ``-wal``
    or ``-shm`` beside it)."""
    folder = tmp_path / "store"
    folder.mkdir()
    path = build_demo_store(folder / "state.db")
    conn = sqlite3.connect(path)
    assert conn.execute(f"PRAGMA journal_mode={journal_mode}").fetchone()[0] == journal_mode
    conn.close()
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"]
    make_read_only(path, folder)
    return path


def snapshot_warning(path: Path) -> str:
    return (
        f"Warning: {path}: the folder is read-only and the file has no -shm index; reading it "
        "as an immutable snapshot (later changes by other processes are not seen)\n"
    )


@pytest.mark.parametrize("flags", [[], ["--read-only"]], ids=["cannot-write", "read-only"])
def test_doctor_on_a_store_it_cannot_write_warns_once(tmp_path: Path, flags: list[str]) -> None:
    path = store_in_a_read_only_folder(tmp_path, "wal")
    try:
        result = run_unprivileged(*flags, "doctor", "--db", str(path), cwd=tmp_path)
    finally:
        path.parent.chmod(0o755)
    assert result.returncode == (1 if WAL_RESET_BUG else 0), result.stderr
    assert result.stderr == snapshot_warning(path)
    assert result.stdout.splitlines()[-1].startswith(f"{path}: ")


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_stats_and_doctor_report_the_journal_mode_of_a_file_read_as_a_snapshot(
    tmp_path: Path, journal_mode: str
) -> None:
    # In a read-only folder a WAL file without its -shm is read as an immutable
    # snapshot, whose SQLite says "delete" whatever the file is in.
    path = store_in_a_read_only_folder(tmp_path, journal_mode)
    try:
        stats = run_unprivileged("stats", "--json", "--db", str(path), cwd=tmp_path)
        table = run_unprivileged("stats", "--db", str(path), cwd=tmp_path)
        doctor = run_unprivileged("doctor", "--json", "--db", str(path), cwd=tmp_path)
    finally:
        path.parent.chmod(0o755)
    warnings = snapshot_warning(path) if journal_mode == "wal" else ""
    assert (stats.returncode, stats.stderr) == (0, warnings)
    # An encrypted file's header, where the mode is recorded, is encrypted too.
    shown = "unknown" if ENCRYPTED_RUN and journal_mode == "wal" else journal_mode
    assert json.loads(stats.stdout)[0]["journal_mode"] == shown
    assert f"schema                v16 ({shown} journal)" in table.stdout.splitlines()
    [check] = [c for c in json.loads(doctor.stdout) if c["name"] == "journal mode"]
    assert check["detail"].split(":")[0] == shown, check


def test_a_read_only_shm_file_left_by_a_reader_does_not_refuse_a_write(work: Path) -> None:
    # A reader of a read-only file leaves its -shm with that file's mode (SQLite makes it
    # so); once the file is writable again, a writer gives the -shm it owns write access
    # back before mapping it (it failed with "the file or its folder is read-only").
    path = work / "demo.db"
    shm = work / "demo.db-shm"
    shm.write_bytes(b"")
    shm.chmod(0o400)
    result = run_unprivileged("archive", "demo-chinese", "--db", str(path), cwd=work)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.startswith("archived demo-chinese")
    with SessionDB(path, read_only=True) as store:
        session = store.get_session("demo-chinese")
    assert session is not None
    assert session["archived"] == 1


def test_read_only_flag_reads_without_touching_the_file(work: Path) -> None:
    path = work / "demo.db"
    before = (path.read_bytes(), snapshot(path))
    for args in READING[:-1]:
        result = run("--read-only", *args, "--db", "demo.db", cwd=work)
        assert result.returncode == 0, (args, result.stderr)
    assert (path.read_bytes(), snapshot(path)) == before
    for args in (["archive", "demo-chinese"], ["delete", "-y", "demo-chinese"], ["vacuum"]):
        refused = run("--read-only", *args, "--db", "demo.db", cwd=work)
        assert refused.returncode == 2
        assert refused.stderr == (
            f"Error: --read-only: 'hermes-models {args[0]}' changes the database "
            f"(see 'hermes-models {args[0]} --help')\n"
        )
    assert (path.read_bytes(), snapshot(path)) == before
