"""The package keeps its shape: parts stacked one way, each reached through its face.

Every module of ``hermes_models`` is parsed with ``ast``. An import of another
package module is an edge of the import graph wherever it stands: at the top,
inside a function, or under ``if TYPE_CHECKING:`` (a dependency all the same).

* The package is built of parts (:data:`PARTS`, bottom first): its subpackages
  and a few top-level modules. A module imports only from its own part and the
  parts below it.
* Another part is reached through its face (the subpackage's ``__init__``), never
  through a module inside it; a face only re-exports names of its own modules.
* The modules form no cycle, counting every import.
* No module imports another module's private (``_``) name.
* An import inside a function is for a heavy optional dependency
  (:data:`LOADED_WHEN_USED`) and says why in a comment.
* docs/architecture.md names every part and every module, and every name the
  README and the docs import from the package exists where they say.
"""

from __future__ import annotations

import ast
import importlib
import keyword
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_models import SessionDB

import package_source
from package_source import MODULES, part_of

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: The parts, bottom first: each imports only from the parts before it.
PARTS = (
    "version",
    "driver",
    "errors",
    "checks",
    "store",
    "models",
    "conversations",
    "search",
    "transfer",
    "health",
    "sessiondb",
    "hermes_state",
    "hermes_shim",
    "cli",
    "__init__",
    "__main__",
)

#: Imports inside a part that close a cycle, (importer, imported) -> why.
ALLOWED_CYCLE: dict[tuple[str, str], str] = {}

#: Third-party modules a function may import when it runs: heavy and optional, or rare.
LOADED_WHEN_USED = ("psycopg", "yoyo", "sqlparse", "rich.progress")


@dataclass(frozen=True)
class Import:
    """One import of a package module by another."""

    importer: str
    imported: str
    names: tuple[str, ...]
    line: int
    in_function: bool
    #: The module the statement names (a part's face, when ``imported`` is one of its
    #: modules that the face exports).
    via: str


def _resolve(importer: str, node: ast.ImportFrom) -> str | None:
    """The package module an ``import from`` names (None: not the package)."""
    if node.level == 0:
        module = node.module or ""
        if module != "hermes_models" and not module.startswith("hermes_models."):
            return None
        inner = module.partition(".")[2]
        return inner or "__init__"
    base = importer.split(".")
    is_face = importer in package_source.PACKAGES or importer == "__init__"
    if importer == "__init__":
        base = []
    elif not is_face:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    dotted = ".".join([*base, *(node.module.split(".") if node.module else [])])
    return dotted or "__init__"


def _is_module(module: str, name: str) -> bool:
    """Whether ``name`` of the package module ``module`` is a module (a face may publish a
    function named as the module that defines it)."""
    if module not in package_source.PACKAGES:
        return True
    for node in package_source.tree(module).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if any((alias.asname or alias.name) == name for alias in node.names):
                return False
    return True


def _targets(
    importer: str, node: ast.Import | ast.ImportFrom
) -> list[tuple[str, tuple[str, ...], str]]:
    """(package module, names imported from it, module named) of one import statement."""
    if isinstance(node, ast.Import):
        found = []
        for alias in node.names:
            if alias.name == "hermes_models" or alias.name.startswith("hermes_models."):
                module = alias.name.partition(".")[2] or "__init__"
                found.append((module, (), module))
        return found
    module = _resolve(importer, node)
    if module is None:
        return []
    names = tuple(alias.name for alias in node.names)
    found = []
    for name in names:
        submodule = name if module == "__init__" else f"{module}.{name}"
        if submodule in MODULES and _is_module(module, name):  # ``from . import x``
            found.append((submodule, (), module))
        else:
            found.append((module, (name,), module))
    return found


def imports_of(module: str) -> list[Import]:
    """Every import of a package module by ``module``, wherever it stands."""
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target, names, via in _targets(module, child):
                    found.append(Import(module, target, names, child.lineno, in_function, via))
            inside = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            visit(child, inside)

    visit(package_source.tree(module), False)
    return found


ALL_IMPORTS = [found for module in MODULES for found in imports_of(module)]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = walk(start)
            if cycle:
                return cycle
    return None


# -- the parts ----------------------------------------------------------------------------


def test_the_parser_reads_relative_imports_at_every_depth() -> None:
    found = {(i.imported, i.names) for i in imports_of("__main__")}
    assert found == {("cli", ("main",))}
    faces = {(i.imported, i.names) for i in imports_of("cli")}
    assert ("cli.commands", ("cli",)) in faces


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_every_module_belongs_to_a_part() -> None:
    assert sorted({part_of(m) for m in MODULES} - set(PARTS)) == []
    assert sorted(set(PARTS) - {part_of(m) for m in MODULES}) == []


def test_imports_go_down_the_parts() -> None:
    rank = {part: index for index, part in enumerate(PARTS)}
    climbing = [
        f"{i.importer}:{i.line} imports {i.imported} ({part_of(i.imported)} is not below "
        f"{part_of(i.importer)})"
        for i in ALL_IMPORTS
        if part_of(i.imported) != part_of(i.importer)
        and rank[part_of(i.imported)] >= rank[part_of(i.importer)]
    ]
    assert climbing == []


def test_another_part_is_reached_through_its_face() -> None:
    """A statement names another part itself, never a module inside it; a module it gets
    that way is one the face publishes (a noun whose functions are its verbs)."""
    through_a_side_door = [
        f"{i.importer}:{i.line} imports from {i.via}"
        for i in ALL_IMPORTS
        if part_of(i.imported) != part_of(i.importer) and i.via != part_of(i.via)
    ]
    assert through_a_side_door == []


def test_modules_form_no_cycle() -> None:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for i in ALL_IMPORTS:
        if i.imported != i.importer:
            if (i.importer, i.imported) not in ALLOWED_CYCLE:
                edges[i.importer].add(i.imported)
    assert find_cycle(edges) is None
    for edge in ALLOWED_CYCLE:
        edges[edge[0]].add(edge[1])
        assert find_cycle(edges) is not None, f"{edge} closes no cycle: drop the allowance"
        edges[edge[0]].discard(edge[1])


def test_no_module_imports_a_private_name_of_another() -> None:
    private = [
        f"{i.importer}:{i.line} imports {name} from {i.imported}"
        for i in ALL_IMPORTS
        for name in i.names
        if name.startswith("_") and not name.startswith("__") and i.imported != i.importer
    ]
    assert private == []


@pytest.mark.parametrize("face", package_source.PACKAGES)
def test_a_face_only_names_what_its_modules_define(face: str) -> None:
    tree = package_source.tree(face)
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and n is tree.body[0])]
    imported: list[str] = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            imported += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__all__"
        ]:
            continue
        else:
            pytest.fail(f"{face}/__init__.py line {node.lineno}: a face only imports")
    loaded = importlib.import_module(f"hermes_models.{face}")
    assert sorted(loaded.__all__) == sorted(imported)


def imports_in_functions(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement (of any module) inside a function of ``tree``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return found


def test_imports_inside_functions_are_heavy_optional_modules_and_say_why() -> None:
    wrong = []
    for module in MODULES:
        lines = package_source.source(module).splitlines()
        for node in imports_in_functions(package_source.tree(module)):
            here = lines[node.lineno - 1]
            above = node.lineno - 2
            while lines[above].strip().startswith(("from ", "import ")):
                above -= 1
            said = "#" in here or lines[above].strip().startswith("#")
            # The package's own modules are imported at the top, always.
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            allowed = not relative and (name or "").startswith(LOADED_WHEN_USED)
            if not (allowed and said):
                wrong.append(f"{module}:{node.lineno}: {here.strip()}")
    assert sorted(set(wrong)) == []


# -- docs/architecture.md -----------------------------------------------------------------


def test_the_page_names_every_part_and_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.]+)`", text))
    missing = [
        m
        for m in MODULES
        if m not in ("__init__", "__main__")
        and m.rpartition(".")[2] not in named
        and m not in named
    ]
    assert missing == []
    assert [p for p in PARTS if p not in ("__init__", "__main__") and p not in named] == []


# -- the public names ----------------------------------------------------------------------


def public_module(name: str) -> object:
    return importlib.import_module("hermes_models" + ("" if name == "__init__" else f".{name}"))


FENCE = re.compile(r"^(`{3,})[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
FROM_IMPORT = re.compile(
    r"\bfrom\s+(hermes_models(?:\.\w+)*)\s+import\s+(\([^)]*\)|[\w ,]+(?:\\\n[\w ,]+)*)"
)
DOTTED = re.compile(r"(?<![\w.])hermes_models((?:\.\w+)+)")


def code_of(text: str) -> list[str]:
    """The fenced blocks and the inline code spans of a Markdown page."""
    blocks = [match.group(2) for match in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    return blocks + INLINE.findall(prose)


def _split_dotted(parts: list[str]) -> tuple[str, str]:
    """(module, name) of a dotted reference: the longest module prefix, then one name."""
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            return module, (parts[cut] if cut < len(parts) else "")
    return "__init__", parts[0]


def documented_names() -> set[tuple[str, str, str]]:
    """(page, module, name) for each package name the pages import or spell out dotted."""
    found: set[tuple[str, str, str]] = set()
    for page in PAGES:
        for code in code_of(page.read_text(encoding="utf-8")):
            for module, names in FROM_IMPORT.findall(code):
                module = module.partition(".")[2] or "__init__"
                for part in names.strip("()").replace("\\\n", " ").split(","):
                    name = part.split(" as ")[0].strip()
                    if name:
                        found.add((page.name, module, name))
            for dotted in DOTTED.findall(code):
                parts = dotted.strip(".").split(".")
                if keyword.iskeyword(parts[0]):
                    continue  # ``hermes_models.import``: a key in state_meta, not code
                module, name = _split_dotted(parts)
                found.add((page.name, module, name))
    return found


def test_the_docs_name_package_code_the_test_can_read() -> None:
    found = documented_names()
    assert ("README.md", "__init__", "SessionDB") in found
    assert any(module.startswith("search") for _, module, _ in found)


def test_every_name_the_docs_import_exists() -> None:
    missing = []
    for page, module, name in sorted(documented_names()):
        if module not in MODULES:
            missing.append(f"{page}: hermes_models.{module} is no module")
            continue
        if not name:
            continue
        loaded = public_module(module)
        if f"{module}.{name}".removeprefix("__init__.") in MODULES:
            continue  # a module of a part
        if not hasattr(loaded, name):
            missing.append(f"{page}: hermes_models.{module} has no {name}")
    assert missing == []


def test_the_package_face_is_its_public_api() -> None:
    import hermes_models

    assert sorted(hermes_models.__all__) == sorted(set(hermes_models.__all__))
    assert [n for n in hermes_models.__all__ if not hasattr(hermes_models, n)] == []


def _climbs(call: Callable[[], object]) -> list[tuple[str, str]]:
    """``(from, to)`` of each call ``call()`` makes into a package module already on the
    call stack below the caller: the call goes back up to a module it had left."""
    stack: list[str] = []
    climbs: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("hermes_models"):
            return
        if event == "call":
            if stack and name != stack[-1] and name in stack[:-1]:
                climbs.append((stack[-1], name))
            stack.append(name)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return climbs


@pytest.mark.parametrize(
    "query", ["loop", "事件循环 OR asyncio", "loop NOT 数据 OR 事 wal*", "数据库 事件"]
)
def test_a_search_climbs_back_to_a_module_it_left_at_most_three_times(
    tmp_path: Path, query: str
) -> None:
    # The pipeline goes one way: parse -> plan -> execute -> present, each stage reached
    # from the orchestrator; a callback into a stage it left is a climb. The first
    # search of a shape builds its statements; the second finds them kept.
    store = SessionDB(tmp_path / "state.db")
    store.create_session("s", "cli", started_at=1_700_000_000.0)
    for n, text in enumerate(["asyncio event loop", "事件循环 数据库", "sqlite wal"]):
        store.append_message("s", "user", text, timestamp=1_700_000_000.0 + n)
    first = _climbs(lambda: store.search_messages(query))
    again = _climbs(lambda: store.search_messages(query))
    store.close()
    assert len(first) <= 3, first
    assert again == []
