"""Running the installed ``hermes-models`` console script as users do: a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hermes_models import SessionDB
from hermes_models.cli.demo import build_demo

#: The console script installed next to the interpreter running the tests.
SCRIPT = Path(sys.executable).parent / "hermes-models"

#: Variables of the outer environment that would change how output looks.
_LOOKS = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def environment(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: HERMES_HOME under ``home``, UTC, 80 columns, no database set."""
    env = {k: v for k, v in os.environ.items() if k not in _LOOKS and k != "HERMES_MODELS_DB"}
    env.update({"HERMES_HOME": str(home / "hermes-home"), "TZ": "UTC", "COLUMNS": "80"})
    env.update(extra)
    return env


def run(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """``hermes-models ARGS`` in ``cwd``; stdin is empty unless given."""
    return _spawn([str(SCRIPT), *args], cwd, env, stdin, **options)


def _spawn(
    command: list[str], cwd: Path, env: dict[str, str] | None, stdin: str | None, **options: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=env if env is not None else environment(cwd),
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **options,
    )


def run_module(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m hermes_models ARGS`` in ``cwd``: always the full command (click), never
    the console script's quick path."""
    return _spawn([sys.executable, "-m", "hermes_models", *args], cwd, env, None)


def in_shell(line: str, work: Path) -> subprocess.CompletedProcess[str]:
    """``line`` run by ``sh`` in ``work`` (for redirections such as ``>&-``)."""
    return subprocess.run(
        ["sh", "-c", line],
        cwd=work,
        env=environment(work),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def build_demo_store(path: Path) -> Path:
    """The demo store (six sessions: English, Chinese, a branch, a chain, a subagent run)."""
    with SessionDB(path) as store:
        build_demo(store)
    return path


def unprivileged() -> list[str]:
    """A command prefix that takes away root's power to ignore file modes (nothing when
    not root): files and folders without write permission then cannot be written."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]


def run_unprivileged(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``hermes-models ARGS`` as a process that file modes apply to, even when run by root."""
    return subprocess.run(
        [*unprivileged(), str(SCRIPT), *args],
        cwd=cwd,
        env=env if env is not None else environment(cwd),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def make_read_only(*paths: Path) -> None:
    """Take write permission away from files (0444) and folders (0555)."""
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
