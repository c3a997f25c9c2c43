"""Parent chains longer than Python's recursion limit, through the console script."""

from __future__ import annotations

import json
from pathlib import Path

from console_script import run

from hermes_models import SessionDB
from hermes_models.models.lineage import MAX_DEPTH

LINKS = 1500  # above both Python's recursion limit (1,000) and the walks' depth bound


def _chain(path: Path) -> None:
    with SessionDB(path) as store:
        parent = None
        for i in range(LINKS):
            store.create_session(f"s{i}", "cli", parent_session_id=parent)
            parent = f"s{i}"


def test_lineage_of_a_chain_longer_than_the_recursion_limit(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _chain(path)
    done = run("lineage", "s0", "--json", "--db", str(path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    rows = json.loads(done.stdout)
    # The walk down stops at its depth bound; each level is its own parent's child.
    shown = MAX_DEPTH + 1
    assert [(r["id"], r["depth"], r["parent_session_id"]) for r in rows] == [
        (f"s{i}", i, f"s{i - 1}" if i else None) for i in range(shown)
    ]
    drawn = run("lineage", "s0", "--db", str(path), cwd=tmp_path)
    assert (drawn.returncode, drawn.stderr) == (0, "")
    assert drawn.stdout.splitlines()[0].startswith("s0  root")
