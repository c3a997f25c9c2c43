"""The package's own source, read and parsed once per test run.

Several test modules inspect every module of ``hermes_models`` with ``ast``
(its import graph, where its SQL is written, the comments on its imports).
Parsing the whole package costs about a third of a second; each module is
parsed here once and the trees are shared. Tests must not change a tree.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_models"

#: Modules of the package by name (``__init__`` is the package itself).
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py"))


@functools.cache
def source(module: str) -> str:
    """The text of the package module ``module``."""
    return (PACKAGE / f"{module}.py").read_text(encoding="utf-8")


@functools.cache
def tree(module: str) -> ast.Module:
    """The parsed package module ``module`` (shared: read it, never change it)."""
    return ast.parse(source(module))
