"""Chains and cycles of parent links 10,000 long, through the console script.

Each walk over parent links once kept the path it had walked, in a string it
searched at every step: time quadratic in the chain, and a depth bound of 1,000
that cut longer chains. `lineage` stopped at depth 1,000 with a warning,
`search --sessions` ran out of its time budget on a 10,000-link chain (0 rows;
2.2 s at 1,000 links), and a drawn tree indented every level. The chains here
are written with plain SQL, as another writer of the file would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from console_script import run

from hermes_models import SessionDB
from hermes_models.driver import sqlite3

pytestmark = pytest.mark.slow  # two stores of 10,000 sessions, about 45 s in all

LINKS = 10_000
T0 = 1_767_603_600.0


def _store(path: Path, *, cycle: bool = False) -> Path:
    """A compression chain c0 -> c1 -> ... -> c9999, one message each; ``cycle``: c0's
    parent is the last link."""
    with SessionDB(path) as store:
        store.create_session("seed", "cli")  # the schema; removed below
    links = [
        (
            f"c{i}",
            "cli",
            f"c{i - 1}" if i else None,
            T0 + i,
            T0 + i + 1 if cycle or i < LINKS - 1 else None,
            "compression" if cycle or i < LINKS - 1 else None,
        )
        for i in range(LINKS)
    ]
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM sessions WHERE id = 'seed'")
        conn.executemany(
            "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at,"
            " end_reason) VALUES (?, ?, ?, ?, ?, ?)",
            links,
        )
        if cycle:
            conn.execute(f"UPDATE sessions SET parent_session_id = 'c{LINKS - 1}' WHERE id = 'c0'")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [(f"c{i}", "user", f"quokka link {i}", T0 + i + 0.5) for i in range(LINKS)],
        )
        conn.execute("UPDATE sessions SET message_count = 1")
    conn.close()
    return path


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("chain") / "state.db")


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("cycle") / "state.db", cycle=True)


def _records(path: Path, *args: str) -> list[dict[str, object]]:
    done = run(*args, "--json", "--db", str(path), cwd=path.parent)
    assert (done.returncode, done.stderr) == (0, "")
    rows = json.loads(done.stdout)
    assert isinstance(rows, list)
    return rows


@pytest.mark.parametrize("asked", ["c0", "c5000", f"c{LINKS - 1}"])
def test_lineage_of_a_chain_of_ten_thousand_links_is_whole(chain: Path, asked: str) -> None:
    rows = _records(chain, "lineage", asked)
    assert [(r["id"], r["depth"], r["parent_session_id"], r["kind"]) for r in rows] == [
        (f"c{i}", i, f"c{i - 1}" if i else None, "compression" if i else "root")
        for i in range(LINKS)
    ]
    assert [r["id"] for r in rows if r["asked"]] == [asked]


def test_a_drawn_lineage_stops_indenting_and_names_the_depth(chain: Path) -> None:
    done = run("lineage", "c3", "--db", str(chain), cwd=chain.parent)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    # One line per session, none cut; c100's (the resume target: the compression tip
    # walk takes Hermes' 100 hops at most) is the one too long for 80 columns.
    assert len(lines) == LINKS + 1
    assert lines[100:102] == [
        "                └── c100  compression  <- resume  1 msg  ended: compression",
        "(depth 100)",
    ]
    assert lines[:7] == [
        "c0  root  1 msg  ended: compression",
        "└── c1  compression  1 msg  ended: compression",
        "    └── c2  compression  1 msg  ended: compression",
        "        └── c3  compression  (asked)  1 msg  ended: compression",
        "            └── c4  compression  1 msg  ended: compression",
        "                └── c5  compression  1 msg  ended: compression",
        "                └── c6  compression  1 msg  ended: compression  (depth 6)",
    ]
    assert lines[-1] == f"                └── c{LINKS - 1}  compression  1 msg  (depth {LINKS - 1})"


def test_a_chain_of_ten_thousand_links_is_one_conversation_in_search_sessions(
    chain: Path,
) -> None:
    rows = _records(chain, "search", "quokka", "--sessions")
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in rows] == [
        ("c0", LINKS, f"c{LINKS - 1}")
    ]


def test_archive_takes_a_chain_of_ten_thousand_links_and_gives_it_back(
    chain: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    done = run("copy", str(chain), str(copy), cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    def archived() -> list[tuple[int, int]]:
        with sqlite3.connect(copy) as conn:
            found = conn.execute(
                "SELECT archived, count(*) FROM sessions GROUP BY archived"
            ).fetchall()
        conn.close()
        return found

    assert archived() == [(0, LINKS)]
    assert run("archive", "c5000", "--db", str(copy), cwd=tmp_path).returncode == 0
    assert archived() == [(1, LINKS)]
    assert run("archive", "--undo", "c9", "--db", str(copy), cwd=tmp_path).returncode == 0
    assert archived() == [(0, LINKS)]
    # The copy holds the whole chain, every link to its parent.
    assert _records(copy, "lineage", "c0") == _records(chain, "lineage", "c0")


def test_a_cycle_of_ten_thousand_links_is_walked_once(cycle: Path, tmp_path: Path) -> None:
    # Asked from c5000: the walk up goes round to c5001 (the one whose parent it is).
    rows = _records(cycle, "lineage", "c5000")
    expected = [f"c{(5001 + i) % LINKS}" for i in range(LINKS)]
    assert [r["id"] for r in rows] == expected
    assert [r["depth"] for r in rows] == list(range(LINKS))
    # Each session's hits count for the one its walk up reaches last.
    found = _records(cycle, "search", "quokka", "--sessions", "--limit", "3")
    # Newest hit first: c9999's counts for c0 (whose parent it is), c9998's for c9999.
    last = LINKS - 1
    assert [(r["id"], r["hits"], r["matched_session_id"]) for r in found] == [
        ("c0", 1, f"c{last}"),
        (f"c{last}", 1, f"c{last - 1}"),
        (f"c{last - 1}", 1, f"c{last - 2}"),
    ]
    copy = tmp_path / "copy.db"
    done = run("copy", str(cycle), str(copy), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run("archive", "c77", "--db", str(copy), cwd=tmp_path).returncode == 0
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM sessions WHERE archived = 1").fetchone() == (
            LINKS,
        )
    conn.close()
