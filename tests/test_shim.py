"""The shim's parts in this process (``hermes_models.hermes_shim``): which Hermes module
it finds and serves, its finder, its ``.pth`` line. Hermes' own programs running on it
in an environment of their own are ``test_hermes_shim.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import hermes_models.hermes_state
from hermes_models import SessionDB
from hermes_models.hermes_shim import (
    HermesModule,
    find_hermes,
    newer_store,
    pth_text,
    served_module,
)
from hermes_models.hermes_shim.hook import hermes_models_hook as hook

import newer


def hermes_module(folder: Path, text: str) -> Path:
    folder.mkdir()
    (folder / "hermes_state.py").write_text(text)
    return folder / "hermes_state.py"


def test_find_hermes_reads_the_schema_hermes_module_declares(tmp_path: Path) -> None:
    v16 = hermes_module(tmp_path / "v16", '"""State."""\nimport sqlite3\n\nSCHEMA_VERSION = 16\n')
    v17 = hermes_module(tmp_path / "v17", "SCHEMA_VERSION = 17  \n")
    moved = hermes_module(tmp_path / "v31", "from hermes_state_common import SCHEMA_VERSION\n")
    assert find_hermes([str(v16.parent)]) == HermesModule(v16, 16)
    assert find_hermes([str(v17.parent), str(v16.parent)]) == HermesModule(v17, 17)
    assert find_hermes([str(moved.parent)]) == HermesModule(moved, None)
    assert find_hermes([str(tmp_path)]) is None


def test_the_shim_is_never_taken_for_hermes_own_module() -> None:
    assert os.path.isfile(os.path.join(hook.FOLDER, "hermes_state.py"))
    assert find_hermes([hook.FOLDER]) is None


def test_without_hermes_on_the_path_this_package_module_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if find_hermes([p]) is None])
    assert served_module() is hermes_models.hermes_state


def test_the_finder_answers_for_top_level_hermes_state_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(hook.SWITCH, raising=False)
    spec = hook.Finder.find_spec("hermes_state")
    assert spec is not None
    assert (spec.name, spec.origin, spec.has_location) == ("hermes_state", hook.SHIM, True)
    assert hook.Finder.find_spec("hermes_state", ["/somewhere"]) is None
    assert hook.Finder.find_spec("hermes_statex") is None
    for off in ("off", "0", " No ", "FALSE"):
        monkeypatch.setenv(hook.SWITCH, off)
        assert hook.Finder.find_spec("hermes_state") is None
    monkeypatch.setenv(hook.SWITCH, "on")
    assert hook.Finder.find_spec("hermes_state") is not None


def test_the_pth_line_runs_the_hook_only_while_its_folder_exists() -> None:
    comment, line = pth_text().splitlines()
    assert comment.startswith("# hermes_models: ")
    assert line.startswith("import os, sys; ")  # site.py runs lines that start with "import"
    assert repr(hook.FOLDER) in line
    gone = line.replace(repr(hook.FOLDER), repr(hook.FOLDER + "-gone"))
    before = list(sys.path)
    exec(gone, {})
    assert sys.path == before


def test_newer_store_tells_a_file_of_a_later_hermes_and_changes_nothing(tmp_path: Path) -> None:
    later = newer.build(tmp_path / "v31.db", "v31")
    before = later.read_bytes()
    shape = newer_store(later)
    assert shape is not None and shape.describe_version() == "31"
    assert later.read_bytes() == before
    SessionDB(tmp_path / "v16.db").close()
    assert newer_store(tmp_path / "v16.db") is None
    assert newer_store(tmp_path / "absent.db") is None
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    assert newer_store(tmp_path / "junk.db") is None
