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


def _warning(asked: str, top: str, goes_on: str) -> str:
    return (
        f"Warning: the lineage of {asked} is more than {MAX_DEPTH} links deep: the tree is"
        f" shown from {top} to depth {MAX_DEPTH}, and goes on {goes_on}\n"
    )


def test_lineage_of_a_chain_longer_than_the_recursion_limit(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _chain(path)
    done = run("lineage", "s0", "--json", "--db", str(path), cwd=tmp_path)
    cut = _warning("s0", "s0", f"below s{MAX_DEPTH}")
    assert (done.returncode, done.stderr) == (0, cut)
    rows = json.loads(done.stdout)
    # The walk down stops at its depth bound; each level is its own parent's child.
    assert [(r["id"], r["depth"], r["parent_session_id"]) for r in rows] == [
        (f"s{i}", i, f"s{i - 1}" if i else None) for i in range(MAX_DEPTH + 1)
    ]
    drawn = run("lineage", "s0", "--db", str(path), cwd=tmp_path)
    assert (drawn.returncode, drawn.stderr) == (0, cut)
    assert drawn.stdout.splitlines()[0].startswith("s0  root")


def test_lineage_says_where_the_bounded_walk_up_stopped(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _chain(path)
    last = f"s{LINKS - 1}"
    top = f"s{LINKS - 1 - MAX_DEPTH}"
    done = run("lineage", last, "--json", "--db", str(path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, _warning(last, top, f"above {top}"))
    rows = json.loads(done.stdout)
    assert [r["id"] for r in rows] == [f"s{i}" for i in range(LINKS - 1 - MAX_DEPTH, LINKS)]


def test_a_chain_within_the_bound_draws_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as store:
        parent = None
        for i in range(MAX_DEPTH + 1):  # depth 0 to MAX_DEPTH: all of it shown
            store.create_session(f"s{i}", "cli", parent_session_id=parent)
            parent = f"s{i}"
    for asked in ("s0", f"s{MAX_DEPTH}"):
        done = run("lineage", asked, "--json", "--db", str(path), cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, "")
        assert len(json.loads(done.stdout)) == MAX_DEPTH + 1
