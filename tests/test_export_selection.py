"""Which sessions an export holds: a lineage, or a source, always with every ancestor.

The expected sets are computed here in Python from the parent links alone
(follow children down, then parents up), on parent graphs hypothesis draws
with forks, dangling parent ids, loops and chains deeper than the walks'
usual bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import examples, fresh_store_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_models import Session, SessionDB
from hermes_models.transfer.bundle import selection

pytestmark = pytest.mark.backends("sqlite", "postgresql")

IDS = [f"s{n}" for n in range(12)]
SOURCES = ["cli", "telegram"]


def expected(
    parents: dict[str, str | None],
    sources: dict[str, str],
    session_id: str | None,
    source: str | None,
) -> list[str]:
    children: dict[str, list[str]] = {}
    for sid, pid in parents.items():
        if pid is not None:
            children.setdefault(pid, []).append(sid)
    chosen: set[str] = set()
    if session_id is not None:
        todo = [session_id]
        while todo:
            here = todo.pop()
            if here in chosen:
                continue
            chosen.add(here)
            todo.extend(children.get(here, ()))
    if source is not None:
        chosen |= {sid for sid, src in sources.items() if src == source}
    climbed: set[str] = set()  # sessions whose every ancestor is chosen
    for sid in list(chosen):
        up = parents[sid]
        seen = {sid}
        while up is not None and up in parents and up not in seen and up not in climbed:
            chosen.add(up)
            seen.add(up)
            up = parents[up]
        climbed |= seen
    return sorted(chosen)


def build(store: SessionDB, parents: dict[str, str | None], sources: dict[str, str]) -> None:
    for n, sid in enumerate(parents):
        store.create_session(sid, sources[sid], started_at=1_700_000_000.0 + n)
    # Raw parent links, as an old or damaged file may hold them: loops, and (on
    # SQLite, whose foreign keys can be turned off) ids of sessions that do not
    # exist. A PostgreSQL server checks every link: loops only.
    sqlite = store.database.dialect == "sqlite"
    if sqlite:
        store.database.execute_sql("PRAGMA foreign_keys = OFF")
    for sid, pid in parents.items():
        Session.update(parent=pid).where(Session.id == sid).execute()
    if sqlite:
        store.database.execute_sql("PRAGMA foreign_keys = ON")


graphs = st.dictionaries(
    st.sampled_from(IDS),
    st.tuples(st.none() | st.sampled_from([*IDS, "gone"]), st.sampled_from(SOURCES)),
    min_size=1,
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(graph=graphs, data=st.data())
def test_selection_matches_the_parent_links(
    graph: dict[str, tuple[str | None, str]],
    data: st.DataObject,
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    migrated_template: Path,
) -> None:
    parents = {sid: pid for sid, (pid, _) in graph.items()}
    if backend == "postgresql":  # the server refuses a link to no session
        parents = {sid: (pid if pid in graph else None) for sid, pid in parents.items()}
    sources = {sid: src for sid, (_, src) in graph.items()}
    session_id = data.draw(st.none() | st.sampled_from(sorted(graph)))
    source = data.draw(st.none() | st.sampled_from(SOURCES))
    if backend == "postgresql":
        target: Any = request.getfixturevalue("pg").new_database()
    else:
        target = fresh_store_file(
            migrated_template, tmp_path_factory.mktemp("selection") / "state.db"
        )
    with SessionDB(target) as store:
        build(store, parents, sources)
        got = selection(session_id, source)
    if session_id is None and source is None:
        assert got is None
    else:
        assert got == expected(parents, sources, session_id, source)


@pytest.mark.slow  # 10,000 sessions
def test_a_chain_of_ten_thousand_links_is_exported_whole(store: SessionDB) -> None:
    depth = 10_000
    parents: dict[str, str | None] = {
        f"c{n:05d}": (f"c{n - 1:05d}" if n else None) for n in range(depth)
    }
    sources = {sid: ("cli" if n % 2 else "telegram") for n, sid in enumerate(parents)}
    # Written in multi-row inserts, parents first (a session at a time, 20,000
    # transactions, took half a minute on the server).
    rows = [
        {"id": sid, "source": sources[sid], "parent": pid, "started_at": 1_700_000_000.0 + n}
        for n, (sid, pid) in enumerate(parents.items())
    ]
    with store.database.atomic():
        for start in range(0, depth, 500):
            Session.insert_many(rows[start : start + 500]).execute()
    assert Session.select().count() == depth
    if store.database.dialect == "postgresql":
        # What autovacuum does within a minute of a bulk load, and `copy` right
        # after one: a planner that believes the table holds a few hundred rows
        # walks the chain with a hash join per step, quadratic (13 s here).
        store.database.execute_sql("ANALYZE sessions")
    middle = f"c{depth // 2:05d}"
    assert selection(middle) == sorted(parents)
    assert selection("c00000") == sorted(parents)  # every step down
    assert selection(f"c{depth - 1:05d}") == sorted(parents)  # every step up
    # The last session is a cli one: its ancestors are every other session.
    assert selection(source="cli") == sorted(parents)
    assert selection(source="telegram") == sorted(parents)[: depth - 1]
    for session_id, source in ((middle, None), (None, "telegram"), (middle, "cli")):
        assert selection(session_id, source) == expected(parents, sources, session_id, source)


def test_an_unknown_session_is_refused(store: SessionDB) -> None:
    store.create_session("here", "cli")
    with pytest.raises(ValueError, match="session_id 'nowhere' does not exist"):
        selection("nowhere")
