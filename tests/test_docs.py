"""The documentation keeps up with the code: every CLI command and option has
help and a section in docs/cli.md, every page is in the mkdocs nav, every
SessionDB method is in docs/sessiondb.md with its real parameters, and the
Python examples of the main pages run."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import hermes_models
from hermes_models import SessionDB
from hermes_models.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"

#: Pages whose ``python`` blocks run, in order, as one program each.
RUNNABLE_PAGES = ("quickstart.md", "models.md", "sessiondb.md")


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
        for part in (p.strip() for p in params.split(",")):
            if part and part != "*":
                names.append(part.split("=")[0].strip())
        found[name] = names
    return found


def real_parameters(function: object) -> list[str]:
    names = []
    for param in inspect.signature(function).parameters.values():
        if param.name == "self":
            continue
        prefix = "**" if param.kind is inspect.Parameter.VAR_KEYWORD else ""
        prefix = "*" if param.kind is inspect.Parameter.VAR_POSITIONAL else prefix
        names.append(prefix + param.name)
    return names


def python_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


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


# -- the examples --------------------------------------------------------------------------


def _close_databases(folder: Path) -> None:
    """Close the cached handles the examples opened on files under ``folder``."""
    for path in sorted(folder.rglob("*.db")):
        hermes_models.connect(path, migrate=False).close()


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_python_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(page)
    assert blocks, f"docs/{page} has no python examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs.{page}"}
    try:
        for index, block in enumerate(blocks):
            exec(compile(block, f"docs/{page}[{index}]", "exec"), namespace)
    finally:
        _close_databases(tmp_path)
