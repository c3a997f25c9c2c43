"""The package's own source, read and parsed once per test run.

Several test modules inspect every module of ``hermes_models`` with ``ast``
(its import graph, where its SQL is written, the comments on its imports).
Each module is parsed here once and the trees are shared. Tests must not change a tree.

A module is named by its dotted path inside the package: ``store.files`` for
``hermes_models/store/files.py``, ``store`` for that part's face
(``hermes_models/store/__init__.py``), ``__init__`` for the package itself.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_models"


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if len(parts) > 1 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


#: Modules of the package by dotted name.
MODULES = sorted(_name(path) for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts)

#: Parts of the package: its subpackages, and its top-level modules.
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def path_of(module: str) -> Path:
    """The file of the package module ``module``."""
    if module == "__init__":
        return PACKAGE / "__init__.py"
    if module in PACKAGES:
        return PACKAGE / module / "__init__.py"
    return PACKAGE / (module.replace(".", "/") + ".py")


def part_of(module: str) -> str:
    """The part ``module`` belongs to: its subpackage, or itself at the top."""
    return module.split(".")[0]


@functools.cache
def source(module: str) -> str:
    """The text of the package module ``module``."""
    return path_of(module).read_text(encoding="utf-8")


@functools.cache
def tree(module: str) -> ast.Module:
    """The parsed package module ``module`` (shared: read it, never change it)."""
    return ast.parse(source(module))
