"""The package keeps its layers: imports between its modules go one way down.

Every module of ``hermes_models`` is parsed with ``ast``. An import of
another package module is an edge of the import graph, whether it sits at
the top of the module or inside a function (an import inside a function is
still a dependency; it only runs later). The graph must have no cycle, apart
from the few upward edges listed in :data:`ALLOWED_UPWARD`, each with its
reason. No module imports another module's private (``_``) names; every
import inside a function says why in a comment; every module declares
``__all__``, and every name the README and the docs import from the package
is in the ``__all__`` of the module it is imported from.
"""

from __future__ import annotations

import ast
import importlib
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import package_source

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hermes_models"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Modules of the package by name (``__init__`` is the package itself).
MODULES = package_source.MODULES

#: Upward imports allowed, (importer, imported) -> why. Each must be an import
#: inside a function: the importer is lower in the layers than the imported.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("models", "children"): (
        "Session.branch/compress/delegate/compression_tip/resume_target are carried out by "
        "the module that creates and follows child sessions, which is built on the models"
    ),
    ("models", "transcript"): (
        "Session.append/rewind_to/restore_rewound are carried out by the transcript "
        "module, which is built on the models"
    ),
    ("models", "search"): (
        "Message.search is the search pipeline, which is built on the models and the indexes"
    ),
}


@dataclass(frozen=True)
class Import:
    """One import of a package module by another."""

    importer: str
    imported: str
    names: tuple[str, ...]
    line: int
    in_function: bool


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _targets(node: ast.Import | ast.ImportFrom) -> list[tuple[str, tuple[str, ...]]]:
    """(package module, names imported from it) of one import statement."""
    found: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "hermes_models":
                found.append((parts[1] if len(parts) > 1 else "__init__", ()))
        return found
    if node.level > 1:
        raise AssertionError(f"line {node.lineno}: the package has no subpackages")
    if node.level == 1:
        module = node.module
    elif node.module and node.module.split(".")[0] == "hermes_models":
        module = node.module.partition(".")[2] or None
    else:
        return found
    names = tuple(alias.name for alias in node.names)
    if module is None:  # ``from . import x``: x is a module or a name of the package
        for name in names:
            found.append((name, ()) if name in MODULES else ("__init__", (name,)))
    else:
        found.append((module, names))
    return found


def imports_of(module: str) -> list[Import]:
    """Every import of a package module by ``module`` (``if TYPE_CHECKING`` blocks aside:
    they never run)."""
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_block(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target, names in _targets(child):
                    found.append(Import(module, target, names, child.lineno, in_function))
            inside = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            visit(child, inside)

    visit(package_source.tree(module), False)
    return found


ALL_IMPORTS = [found for module in MODULES for found in imports_of(module)]


def graph(*, allowed: bool) -> dict[str, set[str]]:
    """Importer -> imported modules; without the allowed upward edges unless ``allowed``."""
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in ALL_IMPORTS:
        if found.imported == found.importer:
            continue
        if not allowed and (found.importer, found.imported) in ALLOWED_UPWARD:
            continue
        edges[found.importer].add(found.imported)
    return edges


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


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other (directly or not), largest first."""
    reach = {node: _reachable(edges, node) for node in edges}
    groups = {
        frozenset(other for other in reach[node] if node in reach[other]) | {node} for node in edges
    }
    return sorted((sorted(g) for g in groups if len(g) > 1), key=lambda g: (-len(g), g))


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# -- the import graph ----------------------------------------------------------------------


def test_the_parser_finds_the_imports_of_a_known_module() -> None:
    found = {(i.imported, i.names) for i in imports_of("__main__")}
    assert found == {("cli", ("main",))}


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_imports_between_package_modules_form_no_cycle() -> None:
    edges = graph(allowed=False)
    assert strongly_connected(edges) == [], "modules that import each other"
    assert find_cycle(edges) is None


def test_module_level_imports_alone_form_no_cycle_even_with_the_allowed_edges() -> None:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in ALL_IMPORTS:
        if not found.in_function and found.imported != found.importer:
            edges[found.importer].add(found.imported)
    assert find_cycle(edges) is None


def test_every_allowed_upward_import_is_used_and_only_inside_functions() -> None:
    for (importer, imported), reason in ALLOWED_UPWARD.items():
        assert reason.strip(), (importer, imported)
        used = [i for i in ALL_IMPORTS if (i.importer, i.imported) == (importer, imported)]
        assert used, f"{importer} no longer imports {imported}: drop the allowance"
        lines = [i.line for i in used if not i.in_function]
        assert lines == [], f"{importer} imports {imported} at module level (lines {lines})"
    # Each allowance is an exception to the layers: removing it makes a cycle.
    for edge in ALLOWED_UPWARD:
        edges = graph(allowed=False)
        edges[edge[0]].add(edge[1])
        assert find_cycle(edges) is not None, f"{edge} is not upward: import it at the top"


def test_no_module_imports_a_private_name_of_another() -> None:
    private = [
        f"{i.importer}:{i.line} imports {name} from {i.imported}"
        for i in ALL_IMPORTS
        for name in i.names
        if name.startswith("_") and not name.startswith("__") and i.imported != i.importer
    ]
    assert private == []


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


def test_every_import_inside_a_function_says_why() -> None:
    """An import inside a function carries a comment: on its line, or above the group
    of imports it belongs to."""
    silent = []
    for module in MODULES:
        lines = package_source.source(module).splitlines()
        for node in imports_in_functions(package_source.tree(module)):
            here = lines[node.lineno - 1]
            above = node.lineno - 2
            while lines[above].strip().startswith(("from ", "import ")):
                above -= 1
            if "#" not in here and not lines[above].strip().startswith("#"):
                silent.append(f"{module}:{node.lineno}: {here.strip()}")
    assert sorted(set(silent)) == []


# -- the picture in docs/architecture.md ---------------------------------------------------


def pictured_rows() -> dict[str, int]:
    """Module -> row of the layer picture in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = next(b for b in code_of(text) if b.lstrip().startswith("row"))
    lines = block.splitlines()
    names_at, role_at = lines[0].index("modules"), lines[0].index("role")
    rows: dict[str, int] = {}
    row = -1
    for line in lines[2:]:
        number = line[:names_at].strip()
        if number:
            row = int(number)
        for name in line[names_at:role_at].split():
            rows["__init__" if name == "__init__" else name] = row
    return rows


def test_the_picture_shows_every_module_once_above_what_it_imports() -> None:
    rows = pictured_rows()
    assert sorted(rows) == sorted(m for m in MODULES if m != "__main__")
    wrong = [
        f"{importer} (row {rows[importer]}) imports {imported} (row {rows[imported]})"
        for importer, imports in graph(allowed=False).items()
        if importer in rows
        for imported in imports
        if rows[imported] >= rows[importer]
    ]
    assert wrong == []


def test_the_page_says_what_every_module_owns() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    owned = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert sorted(set(MODULES) - {"__main__", "__init__"} - owned) == []


# -- the public names ----------------------------------------------------------------------


def public_module(name: str) -> object:
    return importlib.import_module("hermes_models" + ("" if name == "__init__" else f".{name}"))


@pytest.mark.parametrize("module", [m for m in MODULES if m != "__main__"])
def test_every_module_declares_all_of_names_it_has(module: str) -> None:
    loaded = public_module(module)
    names = getattr(loaded, "__all__", None)
    assert isinstance(names, list), f"hermes_models.{module} has no __all__ list"
    assert len(names) == len(set(names)), "a name listed twice"
    assert [n for n in names if not hasattr(loaded, n)] == []
    assert [n for n in names if n.startswith("_")] == []


FENCE = re.compile(r"^(`{3,})[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
FROM_IMPORT = re.compile(
    r"\bfrom\s+(hermes_models(?:\.\w+)?)\s+import\s+(\([^)]*\)|[\w ,]+(?:\\\n[\w ,]+)*)"
)
DOTTED = re.compile(r"(?<![\w.])hermes_models((?:\.\w+)+)")


def code_of(text: str) -> list[str]:
    """The fenced blocks and the inline code spans of a Markdown page."""
    blocks = [match.group(2) for match in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    return blocks + INLINE.findall(prose)


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
                if parts[0] in MODULES:
                    if len(parts) > 1:
                        found.add((page.name, parts[0], parts[1]))
                    else:
                        found.add((page.name, parts[0], ""))
                else:
                    found.add((page.name, "__init__", parts[0]))
    return found


def test_the_docs_name_package_code_the_test_can_read() -> None:
    found = documented_names()
    assert ("models.md", "lineage", "kind_expr") in found
    assert ("models.md", "fts", "MessageIndex") in found
    assert ("README.md", "__init__", "SessionDB") in found


def test_every_name_the_docs_import_exists_and_is_in_all() -> None:
    missing, unlisted = [], []
    for page, module, name in sorted(documented_names()):
        if module not in MODULES:
            missing.append(f"{page}: hermes_models.{module} is no module")
            continue
        loaded = public_module(module)
        if not name:
            continue
        if name in MODULES and module == "__init__":
            continue  # ``from hermes_models import db``: a module
        if not hasattr(loaded, name):
            missing.append(f"{page}: hermes_models.{module} has no {name}")
        elif name not in getattr(loaded, "__all__", ()):
            unlisted.append(f"{page}: {name} is not in hermes_models.{module}.__all__")
    assert missing == []
    assert unlisted == []
