"""The shim: Hermes' own processes importing this package as their ``hermes_state``.

Hermes reaches its store through the module ``hermes_state`` (``from hermes_state
import SessionDB``, in its CLI, gateway, cron, tools, TUI and web server). A folder
put first on ``PYTHONPATH`` does not stay first: those entry points insert
Hermes' own folder at the head of ``sys.path`` as they start. What works is a
finder on ``sys.meta_path``, installed at interpreter start by a ``.pth`` file:

- :func:`install` writes ``hermes_models_shim.pth`` into the site-packages folder
  of the Python running it (run it with the Python of Hermes' environment);
  :func:`remove` deletes it. The file's one line runs the hook
  (``hook/hermes_models_hook.py``, standard library only) at each start.
- When a process imports ``hermes_state``, the hook hands it the module beside
  it, which puts :func:`served_module` in its place: this package's
  :mod:`hermes_models.hermes_state`, one module object shared with the package.

Only a Hermes whose own ``hermes_state`` declares schema version 16 is served
(hermes-agent 0.17): later releases import names this package does not have
(``AsyncSessionDB`` from 0.18 on) and write stores this package only reads.
:func:`install` refuses any other Hermes; a Hermes updated to a later release
after the install keeps its own module, said in its log. So does a Hermes v16
whose store (``$HERMES_HOME/state.db``) a later Hermes wrote: this package would
open it read-only, and Hermes' gateway drops a refused write with a debug line.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hermes_state
from ..driver import sqlite3
from ..errors import HermesModelsError
from ..store import FileShape, open_file, probe, read_only_params, resolve_path, sqlite_uri
from .hook import hermes_models_hook as hook

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

logger = logging.getLogger("hermes_models")

#: The name of the ``.pth`` file in site-packages.
FILE_NAME = "hermes_models_shim.pth"
#: The schema version of the Hermes this package stands in for.
SERVED_SCHEMA = 16
#: The environment variable that turns the shim off in one process (``off``, ``0``).
SWITCH = hook.SWITCH

_SCHEMA_LINE = re.compile(r"^SCHEMA_VERSION\s*=\s*(\d+)\s*$", re.M)


@dataclass(frozen=True)
class HermesModule:
    """Hermes' own ``hermes_state`` module: its file, and the schema version it
    declares (None when it declares none at the top of the module)."""

    path: Path
    schema_version: int | None


def site_packages() -> Path:
    """The site-packages folder of the running Python, where the ``.pth`` file goes."""
    return Path(sysconfig.get_path("purelib"))


def pth_text() -> str:
    """The text of the ``.pth`` file: a comment, and the line that runs the hook
    (nothing when the package, and so the hook's folder, is gone)."""
    folder = hook.FOLDER
    return (
        "# hermes_models: Hermes' `import hermes_state` gives hermes_models.hermes_state;"
        " `python -m hermes_models.hermes_shim remove` removes this file\n"
        f"import os, sys; p = {folder!r}; os.path.isdir(p) and not sys.path.append(p)"
        " and __import__('hermes_models_hook').install()\n"
    )


def find_hermes(entries: Sequence[str] | None = None) -> HermesModule | None:
    """Hermes' own ``hermes_state`` on ``entries`` (default ``sys.path``), the hook's
    folder left out; None when there is none."""
    search = [
        entry
        for entry in (sys.path if entries is None else entries)
        if os.path.abspath(entry or os.curdir) != hook.FOLDER
    ]
    spec = PathFinder.find_spec(hook.NAME, search)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    text = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    match = _SCHEMA_LINE.search(text)
    return HermesModule(Path(spec.origin), int(match.group(1)) if match else None)


def installed() -> Path | None:
    """The ``.pth`` file of the running Python's environment, None when there is none."""
    target = site_packages() / FILE_NAME
    return target if target.is_file() else None


def install() -> Path:
    """Write the ``.pth`` file into the running Python's site-packages; its path.

    Raises:
        HermesModelsError: this Python has no Hermes, or one of another schema than 16.
        OSError: the folder cannot be written.
    """
    hermes = find_hermes()
    if hermes is None:
        raise HermesModelsError(
            "no Hermes in this Python environment (no hermes_state module on its path): "
            "run this with the Python that runs hermes"
        )
    if hermes.schema_version != SERVED_SCHEMA:
        raise HermesModelsError(
            f"{hermes.path} is Hermes' store module of schema {hermes.schema_version or 'unknown'};"
            f" the shim serves Hermes of schema {SERVED_SCHEMA} (hermes-agent 0.17) only: later"
            " releases import names hermes_models does not have, and write stores it only reads"
        )
    target = site_packages() / FILE_NAME
    target.write_text(pth_text(), encoding="utf-8")
    return target


def remove() -> Path | None:
    """Delete the running Python's ``.pth`` file; its path, None when there was none.

    Raises:
        OSError: it cannot be deleted.
    """
    target = site_packages() / FILE_NAME
    try:
        target.unlink()
    except FileNotFoundError:
        return None
    return target


def newer_store(path: Path) -> FileShape | None:
    """The structure of the store ``path`` when a Hermes later than v16 wrote it (this
    package only reads such a file); None for no file, a v16 or older file, or one
    SQLite cannot read. Nothing is written."""
    if not path.is_file():
        return None
    try:
        conn = open_file(sqlite_uri(path, **read_only_params(path)), uri=True)
        try:
            shape = probe(conn)
        finally:
            conn.close()
    except (sqlite3.Error, HermesModelsError, OSError, ValueError):  # encrypted, no key
        return None
    return shape if shape.newer else None


def _load_own(hermes: HermesModule) -> ModuleType:
    """Import Hermes' own module from its file, as ``hermes_state``."""
    spec = importlib.util.spec_from_file_location(hook.NAME, hermes.path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {hermes.path}", name=hook.NAME)
    module = importlib.util.module_from_spec(spec)
    sys.modules[hook.NAME] = module
    spec.loader.exec_module(module)
    return module


def served_module() -> ModuleType:
    """The module a Hermes process gets as ``hermes_state``: this package's; Hermes' own,
    said in the log, when its own module declares another schema than 16 or its store
    (``$HERMES_HOME/state.db``) was written by a later Hermes."""
    hermes = find_hermes()
    if hermes is None:
        return hermes_state
    if hermes.schema_version != SERVED_SCHEMA:
        logger.warning(
            "%s is Hermes' store module of schema %s, not %d: Hermes keeps its own "
            "hermes_state (`python -m hermes_models.hermes_shim remove` removes the shim)",
            hermes.path,
            hermes.schema_version or "unknown",
            SERVED_SCHEMA,
        )
        return _load_own(hermes)
    path = resolve_path(None)
    shape = newer_store(path)
    if shape is not None:
        logger.warning(
            "%s has Hermes schema version %s, newer than %d, which hermes_models only reads: "
            "Hermes keeps its own hermes_state",
            path,
            shape.describe_version(),
            SERVED_SCHEMA,
        )
        return _load_own(hermes)
    return hermes_state


__all__ = [
    "FILE_NAME",
    "SERVED_SCHEMA",
    "SWITCH",
    "HermesModule",
    "find_hermes",
    "install",
    "installed",
    "newer_store",
    "pth_text",
    "remove",
    "served_module",
    "site_packages",
]
