"""Lineage rules: kinds, walks, tips, resume targets and the actions that create children."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from hermes_models import CompressionInProgressError, CompressionLock, Message, Session, SessionDB
from hermes_models.models.lineage import (
    RESUME_MAX_DEPTH,
    TIP_MAX_HOPS,
    compression_chain_ids,
    kind_expr,
    kind_of,
)

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def make(
    store: SessionDB,
    session_id: str,
    at: float,
    parent: str | None = None,
    config: dict[str, Any] | None = None,
    messages: int = 0,
    source: str = "cli",
) -> str:
    store.create_session(
        session_id, source, parent_session_id=parent, model_config=config, started_at=T0 + at
    )
    for n in range(messages):
        role = "user" if n % 2 == 0 else "assistant"
        store.append_message(session_id, role, f"{session_id} says {n}", timestamp=T0 + at + n + 1)
    return session_id


def end(session_id: str, reason: str, at: float) -> None:
    assert Session.get_by_id(session_id).end(reason, at=T0 + at)


def kinds(*ids: str) -> dict[str, str]:
    return {sid: Session.get_by_id(sid).kind for sid in ids}


def sql_kinds() -> dict[str, str]:
    rows = Session.select(Session.id, kind_expr(Session).alias("kind")).tuples()
    return dict(rows)


@pytest.fixture
def family(store: SessionDB) -> SessionDB:
    """A root with every kind of child, and the tricky near misses."""
    make(store, "root", 0, messages=2)
    make(store, "marked-branch", 10, parent="root", config={"_branched_from": "root"})
    # Ends with compression at +100.
    end("root", "compression", 100)
    make(store, "continuation", 100, parent="root", messages=2)
    make(store, "early-sub", 50, parent="root")  # started while root was live
    make(store, "late-delegate", 150, parent="root", config={"_delegate_from": "root"})
    make(store, "fork-parent", 200, messages=2)
    end("fork-parent", "branched", 300)
    make(store, "heuristic-branch", 300, parent="fork-parent")
    make(store, "before-fork", 250, parent="fork-parent")
    make(store, "orphan-delegate", 400, config={"_delegate_from": "gone"})
    make(store, "bad-config", 500, parent="root")
    Session.update(model_config="{not json").where(Session.id == "bad-config").execute()
    return store


def test_kind_of_each_rule(family: SessionDB) -> None:
    assert kinds(
        "root",
        "marked-branch",
        "continuation",
        "early-sub",
        "late-delegate",
        "fork-parent",
        "heuristic-branch",
        "before-fork",
        "orphan-delegate",
        "bad-config",
    ) == {
        "root": "root",
        "marked-branch": "branch",
        "continuation": "compression",
        # Untagged, under a parent that ended with 'compression': a continuation,
        # whenever it started (Hermes v17 on; v16 read the time).
        "early-sub": "compression",
        "late-delegate": "ephemeral",
        "fork-parent": "root",
        "heuristic-branch": "branch",
        "before-fork": "ephemeral",
        "orphan-delegate": "ephemeral",
        "bad-config": "compression",
    }


def test_sql_kind_expression_agrees_with_python(family: SessionDB) -> None:
    python = {s.id: s.kind for s in Session.select()}
    assert sql_kinds() == python


def test_child_queries_by_kind(family: SessionDB) -> None:
    root = Session.get_by_id("root")
    assert [s.id for s in root.branches()] == ["marked-branch"]
    assert [s.id for s in root.compression_children()] == [
        "early-sub",
        "continuation",
        "bad-config",
    ]
    assert [s.id for s in root.ephemeral_children()] == ["late-delegate"]
    fork = Session.get_by_id("fork-parent")
    assert [s.id for s in fork.branches()] == ["heuristic-branch"]
    assert [s.id for s in fork.ephemeral_children()] == ["before-fork"]
    with pytest.raises(ValueError, match="kind must be one of"):
        from hermes_models.models.lineage import children_of_kind

        children_of_kind(Session, "root", "cousin")


def test_listable_hides_ephemeral_and_compression_children(family: SessionDB) -> None:
    assert sorted(s.id for s in Session.listable()) == [
        "fork-parent",
        "heuristic-branch",
        "marked-branch",
        "root",
    ]
    Session.update(archived=1).where(Session.id == "marked-branch").execute()
    assert "marked-branch" not in {s.id for s in Session.listable()}


def test_ancestors_root_and_descendants(store: SessionDB) -> None:
    make(store, "a", 0)
    make(store, "b", 10, parent="a")
    make(store, "c", 20, parent="b")
    make(store, "d", 30, parent="c")
    make(store, "c2", 25, parent="b")
    d = Session.get_by_id("d")
    assert [s.id for s in d.ancestors()] == ["c", "b", "a"]
    assert d.root().id == "a"
    assert Session.get_by_id("a").root().id == "a"
    assert list(Session.get_by_id("a").ancestors()) == []
    assert [s.id for s in Session.get_by_id("a").descendants()] == ["b", "c", "c2", "d"]
    # The queries compose like any peewee query.
    assert [s.id for s in d.ancestors().where(Session.id != "b")] == ["c", "a"]


@pytest.fixture
def chain(store: SessionDB) -> SessionDB:
    """root -> c1 -> c2 by compression, with distractors at every level."""
    make(store, "r", 0, messages=2)
    end("r", "compression", 100)
    make(store, "c1", 100, parent="r", messages=2)
    make(
        store, "r-sub", 90, parent="r", messages=2
    )  # untagged, started while r was live: a continuation too (Hermes v17 on), not the tip
    make(store, "r-branch", 150, parent="r", config={"_branched_from": "r"}, messages=2)
    end("c1", "compression", 200)
    make(store, "c2", 200, parent="c1", messages=2)
    make(store, "c1-late-delegate", 250, parent="c1", config={"_delegate_from": "c1"}, messages=2)
    return store


def test_compression_tip_follows_only_continuations(chain: SessionDB) -> None:
    assert Session.get_by_id("r").compression_tip().id == "c2"
    assert Session.get_by_id("c1").compression_tip().id == "c2"
    assert Session.get_by_id("c2").compression_tip().id == "c2"
    assert chain.get_compression_tip("r") == "c2"
    assert chain.get_compression_tip("r-branch") == "r-branch"


def test_branch_started_after_compression_end_is_not_a_tip(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    end("p", "compression", 100)
    make(store, "cont", 100, parent="p", messages=2)
    make(store, "later-branch", 500, parent="p", config={"_branched_from": "p"}, messages=2)
    assert store.get_compression_tip("p") == "cont"


def test_a_tagged_subagent_run_is_never_followed(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    make(store, "sub", 50, parent="p", messages=2, config={"_delegate_from": "p"})
    end("p", "compression", 100)
    assert store.get_compression_tip("p") == "p"
    assert store.resolve_resume_session_id("p") == "p"


def test_an_untagged_child_continues_a_compressed_parent_whenever_it_started(
    store: SessionDB,
) -> None:
    # Hermes v17 on (v16 read the time): the rule is the parent's end_reason.
    make(store, "p", 0, messages=2)
    make(store, "early", 50, parent="p", messages=2)
    end("p", "compression", 100)
    assert store.get_compression_tip("p") == "early"
    assert store.resolve_resume_session_id("p") == "early"
    make(store, "later", 110, parent="p", messages=1)
    assert store.get_compression_tip("p") == "later"


def test_tip_takes_the_most_recent_continuation(store: SessionDB) -> None:
    make(store, "p", 0)
    end("p", "compression", 100)
    make(store, "first", 110, parent="p", messages=1)
    make(store, "second", 120, parent="p", messages=1)
    assert store.get_compression_tip("p") == "second"


def test_resume_walks_past_empty_heads(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    end("p", "compression", 100)
    make(store, "empty-tip", 100, parent="p")
    # The tip never got a message; its own newest unmarked child did.
    make(store, "grandchild-old", 110, parent="empty-tip", messages=1)
    make(store, "grandchild-new", 120, parent="empty-tip")
    make(store, "great-grandchild", 130, parent="grandchild-new", messages=3)
    make(
        store, "marked", 140, parent="empty-tip", config={"_branched_from": "empty-tip"}, messages=1
    )
    assert store.get_compression_tip("p") == "empty-tip"
    assert store.resolve_resume_session_id("p") == "great-grandchild"
    assert Session.get_by_id("p").resume_target().id == "great-grandchild"


def test_the_kind_of_a_session_reads_model_config_as_the_sql_does(
    store: SessionDB, backend: str
) -> None:
    # Text Python's json reads but SQLite's json_valid and PostgreSQL's jsonb refuse
    # (NaN, Infinity: what json.dumps writes for such floats), and a key given twice
    # (SQLite takes the first value, PostgreSQL's jsonb the last).
    make(store, "p", 0)
    end("p", "compression", 100)
    configs = {
        "nan-tagged": '{"temperature": NaN, "_delegate_from": "p"}',
        "inf-branch": '{"top_p": Infinity, "_branched_from": "p"}',
        "twice": '{"_delegate_from": null, "_delegate_from": "p"}',
        "plain-tagged": '{"_delegate_from": "p"}',
    }
    for n, (sid, text) in enumerate(configs.items()):
        make(store, sid, 150 + n, parent="p")  # after the end: untagged, a continuation
        store.update_session_meta(sid, text)
    python = kinds(*configs)
    assert python == {sid: sql_kinds()[sid] for sid in configs}
    twice = "ephemeral" if backend == "postgresql" else "compression"
    assert python == {
        "nan-tagged": "compression",  # not JSON to the database: no tag
        "inf-branch": "compression",
        "twice": twice,
        "plain-tagged": "ephemeral",
    }
    listed = {row["id"] for row in store.list_sessions_rich(limit=None, include_children=True)}
    assert {sid for sid, kind in python.items() if kind != "ephemeral"} <= listed


def test_resume_of_an_empty_tip_without_children_is_the_tip(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    end("p", "compression", 100)
    make(store, "empty-tip", 100, parent="p")
    assert store.resolve_resume_session_id("p") == "empty-tip"


def test_resume_counts_rewound_messages_as_hermes_does(store: SessionDB) -> None:
    # HERMES_V16 §3.7 B: the tip is the target when it has any message row, "active
    # or not" (§6.12: the has-messages check ignores the soft delete).
    make(store, "p", 0, messages=2)
    end("p", "compression", 100)
    make(store, "tip", 100, parent="p", messages=0)
    first = store.append_message("tip", "user", "soon rewound", timestamp=T0 + 101)
    make(store, "below", 110, parent="tip", messages=1)
    assert store.resolve_resume_session_id("p") == "tip"
    store.rewind_to_message("tip", first)
    assert store.resolve_resume_session_id("p") == "tip"
    store.clear_messages("tip")  # no row at all: down to the child that has one
    assert store.resolve_resume_session_id("p") == "below"


def test_resume_and_tip_of_unknown_or_empty_ids(store: SessionDB) -> None:
    assert store.resolve_resume_session_id("nope") == "nope"
    assert store.get_compression_tip("nope") == "nope"
    assert store.resolve_resume_session_id("") == ""
    assert store.resolve_resume_session_id(None) is None  # type: ignore[arg-type]


def test_tip_walk_stops_after_the_hop_limit(store: SessionDB) -> None:
    previous = make(store, "n0", 0)
    for hop in range(1, TIP_MAX_HOPS + 6):
        end(previous, "compression", hop * 10)
        previous = make(store, f"n{hop}", hop * 10, parent=previous)
    assert store.get_compression_tip("n0") == f"n{TIP_MAX_HOPS}"


def test_resume_descends_at_most_the_depth_limit(store: SessionDB) -> None:
    previous = make(store, "d0", 0)
    for depth in range(1, RESUME_MAX_DEPTH + 3):
        previous = make(store, f"d{depth}", depth, parent=previous)
    store.append_message(previous, "user", "too deep", timestamp=T0 + 999)
    assert store.resolve_resume_session_id("d0") == "d0"
    store.append_message(f"d{RESUME_MAX_DEPTH}", "user", "just reachable", timestamp=T0 + 999)
    assert store.resolve_resume_session_id("d0") == f"d{RESUME_MAX_DEPTH}"


@pytest.fixture
def cycle(store: SessionDB) -> SessionDB:
    """Three sessions whose parent links form a loop, every one ended by compression."""
    make(store, "x", 0, messages=1)
    make(store, "y", 10, parent="x", messages=1)
    make(store, "z", 20, parent="y", messages=1)
    Session.update(parent="z").where(Session.id == "x").execute()
    for sid in ("x", "y", "z"):
        end(sid, "compression", -100)
    return store


def test_a_cycle_in_parent_links_hangs_nothing(cycle: SessionDB) -> None:
    done = threading.Event()
    results: dict[str, Any] = {}

    def run() -> None:
        with cycle.database.connection_context():
            from hermes_models.store.binding import using

            with using(cycle.database):
                x = Session.get_by_id("x")
                results["ancestors"] = [s.id for s in x.ancestors()]
                results["descendants"] = [s.id for s in x.descendants()]
                results["root"] = x.root().id
                results["tip"] = cycle.get_compression_tip("x")
                results["resume"] = cycle.resolve_resume_session_id("x")
                results["chain"] = compression_chain_ids(Session, "x")
                results["kind"] = x.kind
                results["listing"] = [
                    r["id"] for r in cycle.list_sessions_rich(include_children=True)
                ]
        done.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    assert done.wait(20), "a lineage walk looped on the cycle"
    assert results == {
        "ancestors": ["z", "y"],
        "descendants": ["y", "z"],
        "root": "y",
        "tip": "z",
        "resume": "z",
        "chain": ["x", "y", "z"],
        "kind": "compression",
        "listing": ["z", "y", "x"],
    }


def test_delete_in_a_cycle_terminates(cycle: SessionDB) -> None:
    assert cycle.delete_session("x") is True
    assert sorted(s.id for s in Session.select()) == ["y", "z"]
    if cycle.database.dialect == "sqlite":  # PostgreSQL checks every foreign key as it writes
        assert cycle._conn.execute("PRAGMA foreign_key_check").fetchall() == []


# -- actions ---------------------------------------------------------------------------


def test_branch_copies_the_active_transcript_and_ends_the_parent(store: SessionDB) -> None:
    make(store, "p", 0, messages=4)
    rewound = store.get_messages("p")[2]["id"]
    store.rewind_to_message("p", rewound)
    parent = Session.get_by_id("p")
    child = parent.branch(session_id="fork", title="  my   fork ", at=T0 + 500)
    parent = Session.get_by_id("p")
    assert (parent.end_reason, parent.ended_at) == ("branched", T0 + 500)
    assert child.kind == "branch"
    assert json.loads(child.model_config) == {"_branched_from": "p"}
    assert (child.title, child.started_at, child.message_count) == ("my fork", T0 + 500, 2)
    assert [(m["role"], m["content"]) for m in store.get_messages("fork")] == [
        ("user", "p says 0"),
        ("assistant", "p says 1"),
    ]
    assert store.get_messages("p", include_inactive=True)[2]["active"] == 0


def test_branch_of_an_ended_session_keeps_its_end(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    end("p", "user_exit", 50)
    child = Session.get_by_id("p").branch(session_id="fork", at=T0 + 60)
    parent = Session.get_by_id("p")
    assert (parent.end_reason, parent.ended_at) == ("user_exit", T0 + 50)
    assert child.kind == "branch"
    assert [s["id"] for s in store.list_sessions_rich()] == ["fork", "p"]


def test_compress_creates_a_titled_continuation(store: SessionDB) -> None:
    make(store, "p", 0, messages=4, config={"temperature": 0.2, "_branched_from": "older"})
    store.set_session_title("p", "planning")
    summary = [
        {"role": "user", "content": "[summary] we planned"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"id": "t1"}]},
    ]
    child = Session.get_by_id("p").compress(summary, session_id="p2", holder="me", at=T0 + 700)
    parent = Session.get_by_id("p")
    assert (parent.end_reason, parent.ended_at) == ("compression", T0 + 700)
    assert (child.id, child.kind, child.title, child.started_at) == (
        "p2",
        "compression",
        "planning #2",
        T0 + 700,
    )
    assert json.loads(child.model_config) == {"temperature": 0.2}
    assert (child.message_count, child.tool_call_count) == (2, 1)
    assert [(m["role"], m["content"]) for m in store.get_messages("p2")] == [
        ("user", "[summary] we planned"),
        ("assistant", "ok"),
    ]
    assert CompressionLock.holder("p") is None
    assert store.get_compression_tip("p") == "p2"
    again = child.compress([{"role": "user", "content": "second summary"}], session_id="p3")
    assert (again.title, store.get_compression_tip("p")) == ("planning #3", "p3")


def test_compress_refuses_while_another_holder_has_the_lock(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    assert store.try_acquire_compression_lock("p", "gateway-7")
    before = (store.get_session("p"), store.session_count(), store.message_count())
    with pytest.raises(CompressionInProgressError, match="gateway-7"):
        Session.get_by_id("p").compress([{"role": "user", "content": "s"}], holder="cli-1")
    assert (store.get_session("p"), store.session_count(), store.message_count()) == before
    assert store.get_compression_lock_holder("p") == "gateway-7"


def test_compress_twice_is_refused_and_releases_the_lock(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    session = Session.get_by_id("p")
    session.compress([{"role": "user", "content": "s"}], session_id="p2")
    with pytest.raises(ValueError, match="already compressed"):
        session.compress([{"role": "user", "content": "s"}], session_id="p3")
    assert store.get_session("p3") is None
    assert CompressionLock.holder("p") is None


def test_compress_rejects_bad_summaries_before_touching_anything(store: SessionDB) -> None:
    make(store, "p", 0, messages=2)
    with pytest.raises(TypeError, match="summary_messages"):
        Session.get_by_id("p").compress("not a list")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no role"):
        Session.get_by_id("p").compress([{"content": "x"}])
    assert store.get_session("p")["ended_at"] is None


def test_delegate_creates_an_ephemeral_child(store: SessionDB) -> None:
    make(store, "p", 0, messages=2, config={"provider": "x"})
    sub = Session.get_by_id("p").delegate(session_id="sub", source="delegate", at=T0 + 5)
    assert (sub.kind, sub.source, sub.parent_session_id) == ("ephemeral", "delegate", "p")
    assert json.loads(sub.model_config) == {"provider": "x", "_delegate_from": "p"}
    assert Session.get_by_id("p").ended_at is None
    assert "sub" not in {r["id"] for r in store.list_sessions_rich()}


def test_session_end_and_reopen(store: SessionDB) -> None:
    make(store, "p", 0)
    session = Session.get_by_id("p")
    assert session.end("done", at=T0 + 5) is True
    assert session.end("again", at=T0 + 9) is False
    assert (Session.get_by_id("p").end_reason, Session.get_by_id("p").ended_at) == ("done", T0 + 5)
    session.reopen()
    assert (Session.get_by_id("p").end_reason, Session.get_by_id("p").ended_at) == (None, None)
    with pytest.raises(ValueError, match="reason"):
        session.end("")


def test_kind_of_matches_kind_property(family: SessionDB) -> None:
    for session in Session.select():
        assert kind_of(session) == session.kind


def test_message_for_session_survives_lineage_actions(store: SessionDB) -> None:
    make(store, "p", 0, messages=3)
    Session.get_by_id("p").branch(session_id="b")
    assert [m.content for m in Message.for_session("b")] == ["p says 0", "p says 1", "p says 2"]


# -- command line ----------------------------------------------------------------------


def test_cli_lineage_tree_and_resume(chain: SessionDB) -> None:
    from click.testing import CliRunner

    from hermes_models.cli.commands import cli

    chain.set_session_title("r", "deep work")
    runner = CliRunner()
    result = runner.invoke(cli, ["lineage", "c1", "--db", str(chain.db_path)])
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.output.splitlines()]
    assert lines == [
        "r  root  'deep work'  2 msgs  ended: compression",
        "├── r-sub  compression  2 msgs",
        "├── c1  compression  (asked)  2 msgs  ended: compression",
        "│   ├── c2  compression  <- resume  2 msgs",
        "│   └── c1-late-delegate  ephemeral  2 msgs",
        "└── r-branch  branch  2 msgs",
    ]
    result = runner.invoke(cli, ["resume", "r", "--db", str(chain.db_path)])
    assert (result.exit_code, result.output) == (0, "c2\n")
    result = runner.invoke(cli, ["resume", "deep work", "--db", str(chain.db_path)])
    assert (result.exit_code, result.output) == (0, "c2\n")
    result = runner.invoke(cli, ["lineage", "nope", "--db", str(chain.db_path)])
    assert result.exit_code == 1
    assert result.output == "Error: no session matches 'nope'\n"


def test_cli_sessions_hide_what_pickers_hide(chain: SessionDB) -> None:
    from click.testing import CliRunner

    from hermes_models.cli.commands import cli

    result = CliRunner().invoke(cli, ["sessions", "--nl", "--db", str(chain.db_path)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(row["id"], row.get("_lineage_root_id")) for row in rows] == [
        ("r-branch", None),
        ("c2", "r"),
    ]


def test_compress_refuses_a_session_that_already_ended(store: SessionDB) -> None:
    """Moving the end would turn a branch started after it into an ephemeral child."""
    make(store, "p", 0, messages=2)
    end("p", "branched", 50)
    make(store, "hermes-branch", 60, parent="p", messages=1)  # no marker: Hermes' heuristic
    assert kinds("hermes-branch") == {"hermes-branch": "branch"}
    with pytest.raises(ValueError, match=r"already ended \(branched\); reopen it"):
        Session.get_by_id("p").compress([{"role": "user", "content": "s"}], session_id="p2")
    assert store.get_session("p2") is None
    assert (Session.get_by_id("p").end_reason, kinds("hermes-branch")) == (
        "branched",
        {"hermes-branch": "branch"},
    )
    store.reopen_session("p")
    cont = Session.get_by_id("p").compress([{"role": "user", "content": "s"}], session_id="p2")
    assert cont.kind == "compression"
