"""The documentation keeps up with the code: every CLI command and option has
help and a section in docs/cli.md, every page is in the mkdocs nav, every
SessionDB method is in docs/sessiondb.md with its real parameters, and every
snippet of the README and of every page runs as written on a fresh machine
(``python`` blocks in-process, ``sh`` blocks in bash, ``console`` blocks
command by command with their output compared)."""

from __future__ import annotations

import gc
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import hermes_models
from hermes_models import SessionDB
from hermes_models.cli.commands import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"

#: Every page with snippets: the README and each page of the site.
SNIPPET_PAGES = ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))]
#: Fenced blocks that run; ``text`` (and other) blocks are illustrations or output.
RUNNABLE = ("python", "sh", "console")
#: What a reader's home folder is called in the documented output.
DOCUMENTED_HOME = "/home/me"


# -- helpers ---------------------------------------------------------------------------


def walk_commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` as ("name" or "group name", command), groups included."""
    for name in sorted(group.commands):
        command = group.commands[name]
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from walk_commands(command, path + " ")


COMMANDS = dict(walk_commands(cli))


def headings(text: str) -> list[tuple[int, str, int]]:
    """Markdown ATX headings outside code fences: (level, text, offset)."""
    found, fenced, offset = [], False, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            match = re.match(r"(#{1,6})\s+(.*\S)", line)
            if match:
                found.append((len(match.group(1)), match.group(2), offset))
        offset += len(line)
    return found


def section(text: str, heading_pattern: str) -> str:
    """The text under the one heading matching ``heading_pattern``, up to the next
    heading of the same or a higher level; "" when no heading matches."""
    marks = headings(text)
    matching = [i for i, (_, title, _) in enumerate(marks) if re.search(heading_pattern, title)]
    assert len(matching) <= 1, f"several headings match {heading_pattern!r}"
    if not matching:
        return ""
    level, _, start = marks[matching[0]]
    end = next((o for lv, _, o in marks[matching[0] + 1 :] if lv <= level), len(text))
    return text[start:end]


def command_heading(path: str) -> str:
    """The heading pattern of a command's section: ``hermes-models <path>``."""
    return rf"hermes-models {re.escape(path)}(?![\w-])"


#: The program's own section (global options): ``hermes-models`` with no command after it.
PROGRAM_HEADING = r"hermes-models(?![\w-]| [a-z])"


def mentions(text: str, flag: str) -> bool:
    """True when ``flag`` (``--limit``, ``-o``) appears as a whole flag in ``text``."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def described_flags(body: str) -> str:
    """The first cells of the table rows in a section: where its options are described."""
    return "\n".join(
        line.split("|")[1] for line in body.splitlines() if line.startswith("|") and "|" in line[1:]
    )


def options(command: click.Command) -> list[click.Option]:
    return [param for param in command.params if isinstance(param, click.Option)]


def nav_entries() -> list[tuple[str, str]]:
    """(title, page) of each ``- Title: page.md`` line of the mkdocs nav."""
    text = MKDOCS.read_text(encoding="utf-8")
    block = re.search(r"^nav:\n((?:[ \t]+.*\n?)+)", text, re.M)
    assert block is not None, "mkdocs.yml has no nav"
    entries = re.findall(r"^\s*-\s*(.+?):\s*(\S+\.md)\s*$", block.group(1), re.M)
    assert entries, "the nav lists no pages"
    return entries


def public_members(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_"))


def documented_signatures(text: str) -> dict[str, list[str]]:
    """``name -> parameter names`` for each table row starting with `` `name(...)` ``."""
    found: dict[str, list[str]] = {}
    for name, params in re.findall(r"^\|\s*`(\w+)\(([^`]*)\)`", text, re.M):
        names = []
        for part in (p.strip() for p in _top_level_split(params)):
            if part and part != "*":
                names.append(part.split("=")[0].strip())
        found[name] = names
    return found


def _top_level_split(params: str) -> list[str]:
    """``params`` split at the commas outside brackets (a default may be a tuple)."""
    parts, depth, current = [], 0, ""
    for char in params:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def real_parameters(function: object) -> list[str]:
    names = []
    for param in inspect.signature(function).parameters.values():
        if param.name == "self":
            continue
        prefix = "**" if param.kind is inspect.Parameter.VAR_KEYWORD else ""
        prefix = "*" if param.kind is inspect.Parameter.VAR_POSITIONAL else prefix
        names.append(prefix + param.name)
    return names


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, indented ones (in lists) included."""
    found = []
    pattern = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
    for indent, language, body in pattern.findall(text):
        found.append((language, textwrap.dedent(body) if indent else body))
    return found


def page_text(page: str) -> str:
    return (ROOT / page if page == "README.md" else DOCS / page).read_text(encoding="utf-8")


# -- the CLI reference -------------------------------------------------------------------


def test_the_cli_has_commands_to_check() -> None:
    assert {"migrate", "sessions", "show", "search", "export", "import"} <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_has_help_and_a_section(path: str) -> None:
    command = COMMANDS[path]
    assert (command.help or "").strip(), f"hermes-models {path} has no help text"
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert section(text, command_heading(path)), (
        f"docs/cli.md has no heading containing 'hermes-models {path}'"
    )


@pytest.mark.parametrize("path", ["", *sorted(COMMANDS)])
def test_every_option_has_help_and_a_row_in_its_section(path: str) -> None:
    command = COMMANDS[path] if path else cli
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    body = section(text, command_heading(path) if path else PROGRAM_HEADING)
    assert body, f"docs/cli.md has no section for hermes-models {path}".rstrip()
    table = described_flags(body)
    for option in options(command):
        flags = [*option.opts, *option.secondary_opts]
        assert (option.help or "").strip(), f"hermes-models {path} {flags[0]} has no help text"
        missing = [flag for flag in flags if not mentions(table, flag)]
        assert missing == [], f"no row describes {missing} in the section of hermes-models {path}"


def test_every_section_names_a_real_command() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    named = set()
    for _, title, _ in headings(text):
        match = re.search(r"hermes-models ([a-z][\w-]*(?: [a-z][\w-]*)*)", title)
        if match:
            named.add(match.group(1))
    assert named == set(COMMANDS)


# -- the site ----------------------------------------------------------------------------


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    entries = nav_entries()
    listed = [page for _, page in entries]
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert sorted(set(listed) - pages) == [], "nav entries without a page"
    assert sorted(pages - set(listed)) == [], "pages missing from the nav"
    assert len(listed) == len(set(listed)), "a page is listed twice"
    titles = [title for title, _ in entries]
    assert len(titles) == len(set(titles)), "two nav entries share a title"


def test_the_site_builds_strictly() -> None:
    text = MKDOCS.read_text(encoding="utf-8")
    assert re.search(r"^strict:\s*true\s*$", text, re.M)
    assert re.search(r"^theme:\n\s+name:\s*material\s*$", text, re.M)


#: Names of the design notes kept outside the repository: a reader of the docs, the
#: help or the code cannot open them, so nothing shipped may send them there.
PRIVATE_NOTES = re.compile(r"POSTGRES\.md|\bSPEC\b|HERMES_V16|HERMES_NEWER|§")


def shipped_texts() -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every page, the README, and every module of the package."""
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "hermes_models").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_nothing_shipped_cites_notes_outside_the_repository() -> None:
    cited = [
        f"{name}:{number}: {line.strip()}"
        for name, text in shipped_texts()
        for number, line in enumerate(text.splitlines(), 1)
        if PRIVATE_NOTES.search(line)
    ]
    assert cited == []


# -- the SessionDB table -----------------------------------------------------------------


def test_every_public_sessiondb_member_is_documented() -> None:
    text = (DOCS / "sessiondb.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\|\s*`(\w+)[`(]", text, re.M))
    missing = [name for name in public_members(SessionDB) if name not in rows]
    assert missing == []


def test_documented_signatures_match_the_code() -> None:
    text = (DOCS / "sessiondb.md").read_text(encoding="utf-8")
    documented = documented_signatures(text)
    real = {
        name: real_parameters(getattr(SessionDB, name))
        for name in public_members(SessionDB)
        if callable(getattr(SessionDB, name)) and name in documented
    }
    real["SessionDB"] = real_parameters(SessionDB.__init__)
    assert {name: documented[name] for name in real} == real
    assert sorted(set(documented) - set(real)) == [], "rows for methods SessionDB lacks"


# -- the snippets --------------------------------------------------------------------------


class Sandbox:
    """A fresh machine: an empty home folder (the working folder too), no HERMES_HOME,
    UTC, 80 columns, the installed scripts on PATH, and a checkout's migrations."""

    def __init__(self, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.home = home
        home.mkdir()
        shutil.copytree(ROOT / "migrations", home / "migrations")
        shutil.copy(ROOT / "yoyo.ini", home / "yoyo.ini")
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("HERMES_", "COLUMNS", "LINES", "FORCE_COLOR", "TTY_"))
        }
        bin_dir = str(Path(sys.executable).parent)
        self.env.update(
            HOME=str(home),
            TZ="UTC",
            COLUMNS="80",
            PATH=f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}",
        )
        monkeypatch.delenv("HERMES_HOME", raising=False)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.chdir(home)

    def bash(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.home,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
            check=False,
        )

    def documented(self, output: str) -> list[str]:
        """Output as the documentation shows it: the home folder is /home/me."""
        return output.replace(str(self.home), DOCUMENTED_HOME).splitlines()


def short_home(tmp_path: Path) -> Path:
    """A home folder with a short path, so paths in tables fit 80 columns as documented."""
    del tmp_path  # pytest's folders have long names
    return Path(tempfile.mkdtemp(prefix="hm", dir="/tmp")) / "home"


def installs(line: str) -> bool:
    """A ``pip install`` line: what CI's .ci/run does on a fresh machine, not a test."""
    return line.strip().startswith("pip install ")


#: The README's test command: CI's .ci/run runs it; a test cannot run the suite it is in.
TEST_COMMAND = "pip install tox && tox"


def run_sh(sandbox: Sandbox, body: str, where: str) -> None:
    lines = body.splitlines()
    for line in lines:
        if installs(line):
            # Only the install itself is skipped: what follows `&&` runs.
            assert re.fullmatch(r"pip install (\.|tox|hermes_models)( .*)?", line.strip()), line
    script = "\n".join(
        line.split("&&", 1)[1] if installs(line) and "&&" in line else line
        for line in lines
        if (not installs(line) or "&&" in line) and line.strip() != TEST_COMMAND
    )
    result = sandbox.bash(script)
    assert result.returncode == 0, f"{where} failed:\n{script}\n{result.stdout}"


def matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` fits ``expected``: a line ``...`` stands for any lines, ``...`` in a
    line for any text."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(part) for part in head.split("..."))
    return re.fullmatch(pattern, actual[0]) is not None and matches(rest, actual[1:])


def run_console(sandbox: Sandbox, body: str, where: str) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{where}: output before the first command"
            commands[-1][1].append(line)
    for command, expected in commands:
        exported = re.fullmatch(r"export (\w+)=(\S+)", command)
        if exported:
            sandbox.env[exported.group(1)] = exported.group(2)
            continue
        result = sandbox.bash(command)
        actual = sandbox.documented(result.stdout)
        fails = any(line.startswith("Error: ") for line in expected)
        assert (result.returncode != 0) == fails, f"{where}: $ {command}\n{result.stdout}"
        assert matches(expected, actual), (
            f"{where}: $ {command}\nexpected:\n"
            + "\n".join(expected)
            + "\nactual:\n"
            + "\n".join(actual)
        )


def _close_databases(folder: Path) -> None:
    """Close the cached handles the examples opened on files under ``folder``."""
    for path in sorted(folder.rglob("*.db")):
        if path.is_file() and path.stat().st_size:
            hermes_models.connect(path, migrate=False).close()


def test_every_page_with_snippets_is_run() -> None:
    pages = [
        page
        for page in SNIPPET_PAGES
        if any(language in RUNNABLE for language, _ in fenced_blocks(page_text(page)))
    ]
    assert {"README.md", "cli.md", "backup.md", "quickstart.md", "export.md"} <= set(pages)


#: Pages whose snippets read the store with the standard library's sqlite3 as well:
#: under HERMES_TEST_ENCRYPTED=1 their stores stay plain.
PLAIN_SQLITE_PAGES = {"search.md"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [
        pytest.param(page, marks=pytest.mark.plaintext_file) if page in PLAIN_SQLITE_PAGES else page
        for page in SNIPPET_PAGES
    ],
)
def test_snippets_run_as_written_on_a_fresh_machine(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = Sandbox(short_home(tmp_path), monkeypatch)
    namespace: dict[str, object] = {"__name__": f"docs.{page}"}
    # A reader's own store: no Python snippet creates or changes it.
    own = sandbox.home / ".hermes" / "state.db"

    def own_store() -> bytes | None:
        return own.read_bytes() if own.exists() else None

    def run_python(body: str, where: str, namespace: dict[str, object]) -> None:
        before = own_store()
        exec(compile(body, where, "exec"), namespace)
        gc.collect()  # a connection left open fails here, at its block
        assert own_store() == before, f"{where} wrote to the store in $HERMES_HOME"

    blocks = list(fenced_blocks(page_text(page)))
    try:
        for index, (language, body) in enumerate(blocks):
            where = f"{page}[{index}]"
            if language == "python":
                run_python(body, where, namespace)
            elif language == "sh":
                run_sh(sandbox, body, where)
            elif language == "console":
                run_console(sandbox, body, where)
            # A snippet that leaves a connection open fails here, at its block,
            # not wherever the garbage collector happens to run later.
            gc.collect()
        # A reader runs an example again: every Python snippet, in order, a second time.
        again: dict[str, object] = {"__name__": f"docs.{page}.again"}
        for index, (language, body) in enumerate(blocks):
            if language == "python":
                run_python(body, f"{page}[{index}], run again", again)
    finally:
        _close_databases(sandbox.home)
        shutil.rmtree(sandbox.home.parent, ignore_errors=True)


def test_the_readme_keeps_its_two_set_up_commands() -> None:
    blocks = [body.strip() for language, body in fenced_blocks(page_text("README.md"))]
    assert "pip install . && hermes-models demo" in blocks
    assert TEST_COMMAND in blocks


@pytest.mark.slow
def test_the_readme_deploy_line_makes_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = Sandbox(tmp_path / "home", monkeypatch)
    [line] = [
        body.strip()
        for language, body in fenced_blocks(page_text("README.md"))
        if language == "sh" and "yoyo apply" in body
    ]
    assert not (sandbox.home / ".hermes").exists()
    result = sandbox.bash(line)
    assert result.returncode == 0, result.stdout
    store = sandbox.home / ".hermes" / "state.db"
    assert oct(store.stat().st_mode & 0o777) == oct(0o600)
    with SessionDB(store, read_only=True) as opened:
        assert opened.session_count() == 0
