"""HERMES_V16 §3.8: listings, counts, cron runs and session-id search."""

from __future__ import annotations

import time

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = time.time() - 1_000_000
TIP_KEYS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "last_active",
    "preview",
    "model",
    "system_prompt",
    "cwd",
)


def make(store: SessionDB, session_id: str, at: float, **options: object) -> None:
    store.create_session(session_id, options.pop("source", "cli"), started_at=T0 + at, **options)  # type: ignore[arg-type]


def say(store: SessionDB, session_id: str, role: str, content: object, at: float) -> int:
    return store.append_message(session_id, role, content, timestamp=T0 + at)


def compress(store: SessionDB, session_id: str, at: float) -> None:
    store.end_session(session_id, "compression")
    store._conn.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (T0 + at, session_id))
    store._conn.commit()


def ids(rows: list[dict[str, object]]) -> list[object]:
    return [row["id"] for row in rows]


@pytest.fixture
def chain(store: SessionDB) -> SessionDB:
    """root -(compression)-> mid -(compression)-> tip, plus a lone session."""
    make(store, "root", 0, model="m-root", system_prompt="p-root", cwd="/r")
    store.set_session_title("root", "Project")
    say(store, "root", "user", "first question", 1)
    say(store, "root", "assistant", "first answer", 2)
    compress(store, "root", 10)
    make(store, "mid", 11, parent_session_id="root", model="m-mid")
    say(store, "mid", "user", "[summary one]", 12)
    compress(store, "mid", 20)
    make(store, "tip", 21, parent_session_id="mid", model="m-tip", system_prompt="p-tip", cwd="/t")
    store.set_session_title("tip", "Project #3")
    say(store, "tip", "user", "[summary two]", 22)
    store.append_message(
        "tip",
        "assistant",
        None,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        timestamp=T0 + 23,
    )
    make(store, "lone", 5)
    say(store, "lone", "user", "lonely", 6)
    return store


def test_a_compression_chain_is_listed_once_as_its_root_with_the_tips_values(
    chain: SessionDB,
) -> None:
    rows = chain.list_sessions_rich()
    assert ids(rows) == ["lone", "tip"]  # ordered by the root's start
    projected = rows[1]
    tip = chain.get_session("tip")
    root = chain.get_session("root")
    assert {key: projected[key] for key in TIP_KEYS} == {
        "id": "tip",
        "ended_at": None,
        "end_reason": None,
        "message_count": 2,
        "tool_call_count": 1,
        "title": "Project #3",
        "last_active": T0 + 23,
        "preview": "[summary two]",
        "model": "m-tip",
        "system_prompt": "p-tip",
        "cwd": "/t",
    }
    assert projected["_lineage_root_id"] == "root"
    for key in set(root) - set(TIP_KEYS):
        assert projected[key] == root[key], key
    assert projected["started_at"] == root["started_at"] != tip["started_at"]
    lone = rows[0]
    assert "_lineage_root_id" not in lone
    assert lone == {**chain.get_session("lone"), "preview": "lonely", "last_active": T0 + 6}


def test_without_projection_the_root_row_is_raw(chain: SessionDB) -> None:
    rows = chain.list_sessions_rich(project_compression_tips=False)
    assert ids(rows) == ["lone", "root"]
    assert rows[1]["preview"] == "first question"
    assert rows[1]["last_active"] == T0 + 2
    assert "_lineage_root_id" not in rows[1]


def test_min_message_count_is_judged_on_the_root(chain: SessionDB) -> None:
    # The root holds 2 messages and the tip 2: a minimum of 2 keeps the chain.
    assert ids(chain.list_sessions_rich(min_message_count=2)) == ["tip"]
    chain.clear_messages("root")
    assert ids(chain.list_sessions_rich(min_message_count=2)) == []
    assert chain.session_count(min_message_count=2) == 1  # tip itself, counted as a child


def test_children_hidden_unless_asked(store: SessionDB) -> None:
    make(store, "parent", 0)
    make(store, "branch", 1, parent_session_id="parent", model_config={"_branched_from": "parent"})
    make(
        store, "subagent", 2, parent_session_id="parent", model_config={"_delegate_from": "parent"}
    )
    make(store, "untagged", 3, parent_session_id="parent")
    assert ids(store.list_sessions_rich()) == ["branch", "parent"]
    assert ids(store.list_sessions_rich(include_children=True)) == [
        "untagged",
        "subagent",
        "branch",
        "parent",
    ]
    assert store.session_count() == 4
    assert store.session_count(exclude_children=True) == 2


def test_filters_and_paging(store: SessionDB) -> None:
    for index, source in enumerate(("cli", "telegram", "discord", "cli", "tool")):
        make(store, f"s{index}", index, source=source)
    assert ids(store.list_sessions_rich(source="cli")) == ["s3", "s0"]
    assert ids(store.list_sessions_rich(exclude_sources=["tool", "cli"])) == ["s2", "s1"]
    assert ids(store.list_sessions_rich(exclude_sources=[])) == ["s4", "s3", "s2", "s1", "s0"]
    assert ids(store.list_sessions_rich(limit=2, offset=1)) == ["s3", "s2"]
    assert store.session_count(source="cli") == 2
    assert store.session_count(exclude_sources=["tool"]) == 4


def test_archived_sessions_are_left_out_by_default(store: SessionDB) -> None:
    make(store, "live", 0)
    make(store, "hidden", 1)
    store.set_session_archived("hidden", True)
    assert ids(store.list_sessions_rich()) == ["live"]
    assert ids(store.list_sessions_rich(archived_only=True)) == ["hidden"]
    assert ids(store.list_sessions_rich(include_archived=True)) == ["hidden", "live"]
    assert store.session_count() == 1
    assert store.session_count(archived_only=True) == 1
    assert store.session_count(include_archived=True) == 2


@pytest.mark.parametrize(
    ("content", "preview"),
    [
        ("short", "short"),
        ("line one\r\nline two", "line one  line two"),
        ("  padded  ", "padded"),
        ("x" * 60, "x" * 60),
        ("x" * 61, "x" * 60 + "..."),
        ("x" * 62 + "\n" + "y", "x" * 60 + "..."),
        ("y" * 59 + "   " + "z" * 10, "y" * 59 + " ..."),
    ],
)
def test_preview_rules(store: SessionDB, content: str, preview: str) -> None:
    make(store, "s", 0)
    say(store, "s", "assistant", "an assistant message first is skipped", 1)
    say(store, "s", "user", None, 2)
    say(store, "s", "user", content, 3)
    say(store, "s", "user", "later", 4)
    assert store.list_sessions_rich()[0]["preview"] == preview


def test_no_user_message_previews_empty_and_last_active_counts_rewound_rows(
    store: SessionDB,
) -> None:
    make(store, "quiet", 0)
    assert store.list_sessions_rich()[0]["preview"] == ""
    assert store.list_sessions_rich()[0]["last_active"] == T0
    first = say(store, "quiet", "user", "go", 5)
    say(store, "quiet", "assistant", "gone", 9)
    store.rewind_to_message("quiet", first)
    row = store.list_sessions_rich()[0]
    assert (row["preview"], row["last_active"]) == ("go", T0 + 9)


def test_order_by_last_active_uses_the_whole_chain(chain: SessionDB) -> None:
    make(chain, "newer", 30)
    say(chain, "newer", "user", "made later, quiet since", 31)
    assert ids(chain.list_sessions_rich()) == ["newer", "lone", "tip"]
    say(chain, "lone", "user", "touched now", 40)
    assert ids(chain.list_sessions_rich(order_by_last_active=True)) == ["lone", "newer", "tip"]
    say(chain, "tip", "user", "the tip is busy", 50)
    assert ids(chain.list_sessions_rich(order_by_last_active=True)) == ["tip", "lone", "newer"]
    assert ids(chain.list_sessions_rich(order_by_last_active=True, limit=1, offset=1)) == ["lone"]


def test_id_query_matches_any_id_of_a_chain_only_when_ordering_by_activity(
    chain: SessionDB,
) -> None:
    assert ids(chain.list_sessions_rich(order_by_last_active=True, id_query="MID")) == ["tip"]
    assert ids(chain.list_sessions_rich(order_by_last_active=True, id_query="on")) == ["lone"]
    assert ids(chain.list_sessions_rich(order_by_last_active=True, id_query="%")) == []
    # Without order_by_last_active the query is not applied, as in Hermes.
    assert ids(chain.list_sessions_rich(id_query="MID")) == ["lone", "tip"]


def test_message_count_counts_every_row(store: SessionDB) -> None:
    make(store, "a", 0)
    make(store, "b", 1)
    first = say(store, "a", "user", "1", 2)
    say(store, "a", "assistant", "2", 3)
    say(store, "b", "user", "3", 4)
    store.rewind_to_message("a", first)
    assert store.message_count("a") == 2
    assert store.message_count() == 3
    assert store.message_count("nope") == 0


# -- list_cron_job_runs -----------------------------------------------------------------------


def cron_run(store: SessionDB, job: str, index: int, at: float, source: str = "cron") -> str:
    session_id = f"cron_{job}_{index:08d}"
    make(store, session_id, at, source=source)
    say(store, session_id, "user", f"run {index} for {job}", at + 1)
    say(store, session_id, "assistant", "done", at + 2)
    store.end_session(session_id, "completed")
    return session_id


def test_cron_job_runs_are_one_jobs_runs_newest_first(store: SessionDB) -> None:
    for index in range(5):
        cron_run(store, "alpha", index, index * 60)
    cron_run(store, "xalpha", 0, 500)
    cron_run(store, "alpha2", 0, 600)
    cron_run(store, "beta", 0, 700)
    cron_run(store, "alpha", 99, 800, source="cli")
    runs = store.list_cron_job_runs("alpha")
    assert ids(runs) == [f"cron_alpha_{index:08d}" for index in (4, 3, 2, 1, 0)]
    assert runs[0]["preview"] == "run 4 for alpha"
    assert runs[0]["last_active"] == T0 + 242
    assert runs[0]["end_reason"] == "completed"
    assert ids(store.list_cron_job_runs("alpha", limit=2, offset=2)) == [
        "cron_alpha_00000002",
        "cron_alpha_00000001",
    ]
    assert store.list_cron_job_runs("nobody") == []


@pytest.mark.backends("sqlite")  # reads SQLite's own query plan or trace
def test_cron_job_runs_read_the_source_and_id_index(store: SessionDB) -> None:
    plan = store._conn.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM sessions WHERE source = 'cron' AND id >= ? AND id < ?",
        ("cron_alpha_", "cron_alpha`"),
    ).fetchall()
    detail = " ".join(row["detail"] for row in plan)
    assert "idx_sessions_source_id" in detail


# -- search_sessions_by_id --------------------------------------------------------------------


def test_search_sessions_by_id_ranks_exact_then_prefix_then_substring(store: SessionDB) -> None:
    make(store, "x_20260603_abcd12", 0)
    make(store, "20260603_abcd12_child", 1)
    make(store, "20260603_abcd12", 2)
    make(store, "20260602_other", 3)
    found = store.search_sessions_by_id("20260603_ABCD12")
    assert ids(found) == ["20260603_abcd12", "20260603_abcd12_child", "x_20260603_abcd12"]
    assert ids(store.search_sessions_by_id(" 20260603_abcd12 ", limit=2)) == [
        "20260603_abcd12",
        "20260603_abcd12_child",
    ]
    assert store.search_sessions_by_id("") == []
    assert store.search_sessions_by_id("abcd", limit=0) == []


def test_search_sessions_by_id_and_archives(store: SessionDB) -> None:
    make(store, "run_live", 0)
    make(store, "run_archived", 1)
    store.set_session_archived("run_archived", True)
    assert ids(store.search_sessions_by_id("run_")) == ["run_archived", "run_live"]
    assert ids(store.search_sessions_by_id("run_", include_archived=False)) == ["run_live"]


def test_search_sessions_by_id_finds_a_chain_by_its_root_id(chain: SessionDB) -> None:
    found = chain.search_sessions_by_id("root")
    assert ids(found) == ["tip"]
    assert found[0]["_lineage_root_id"] == "root"
