"""PostgreSQL: every SQL function the migrations create is labelled truthfully for
parallel plans, and the store works whichever plan the server picks.

``hermes_json_text`` and ``hermes_json_array_length`` catch errors, which starts a
subtransaction; no process may start one while a parallel plan runs. They were
declared ``PARALLEL SAFE``, so an import of 50,018 messages and a ``delete`` on a
store of 60,000 sessions failed with "cannot start subtransactions during a
parallel operation" once the planner chose a parallel plan. Here the planner is
made to choose one wherever it can (``pg_server.parallel_settings``): the import,
listing, delete and search of a store give the answers they give without it, and
the same tests of those modules are run again under it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pg_server
import pytest

from hermes_models import SessionDB
from hermes_models.store.postgres import parse_url

pytestmark = pytest.mark.postgresql

HERE = Path(__file__).parent


def test_functions_that_catch_errors_are_labelled_parallel_unsafe(pg_url: str) -> None:
    with pg_server.connect(parse_url(pg_url).url) as conn:
        labels = dict(
            conn.execute(
                "SELECT proname, proparallel FROM pg_proc"
                " WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'hermes%'"
            ).fetchall()
        )
        catching = {
            name
            for (name,) in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
                " AND proname LIKE 'hermes%' AND prosrc ~* '\\mEXCEPTION\\M'"
            ).fetchall()
        }
    assert labels == {
        "hermes_json_text": "u",
        "hermes_json_array_length": "u",
        "hermes_words": "s",
        "hermes_search_text": "s",
        "hermes_cjk_grams": "s",
        # 0011's ranking: pure computations, and a read of the statistics (parallel
        # workers may read tables); the statistics' writers are left unsafe.
        "hermes_token_count": "s",
        "hermes_bm25_terms": "s",
        "hermes_phrase_hits": "s",
        "hermes_lexeme_hits": "s",
        "hermes_bm25_term": "s",
        "hermes_bm25": "s",
        "hermes_search_stats_add": "u",
        "hermes_search_stats_inserted": "u",
        "hermes_search_stats_deleted": "u",
        "hermes_search_stats_updated": "u",
        "hermes_search_stats_truncated": "u",
    }
    # The rule itself: a function with an EXCEPTION block is never parallel safe.
    assert catching == {"hermes_json_text", "hermes_json_array_length"}


def _fill(store: SessionDB) -> None:
    """Roots with delegate children and a branch, messages with tool calls."""
    for i in range(12):
        store.create_session(f"root{i}", "cli", model_config={"temperature": i})
        store.append_message(f"root{i}", "user", f"parallel hello {i}")
        store.append_message(
            f"root{i}",
            "assistant",
            f"calling a tool {i}",
            tool_calls=[{"id": f"c{i}", "type": "function", "function": {"name": "x"}}],
        )
        if i % 3 == 0:
            child = f"child{i}"
            store.create_session(
                child,
                "cli",
                parent_session_id=f"root{i}",
                model_config={"_delegate_from": f"root{i}"},
            )
            store.append_message(child, "user", f"delegated hello {i}")
    store.create_session(
        "branch", "cli", parent_session_id="root1", model_config={"_branched_from": "root1"}
    )
    store.append_message("branch", "user", "branched hello")


def _answers(url: str, bundle: Path) -> dict[str, Any]:
    with SessionDB(url) as store:
        imported = store.import_bundle(bundle)
        answers: dict[str, Any] = {"imported": imported}
        answers["listing"] = [
            (row["id"], row["message_count"]) for row in store.list_sessions_rich(limit=None)
        ]
        answers["children"] = [
            row["id"] for row in store.list_sessions_rich(limit=None, include_children=True)
        ]
        answers["search"] = [
            (hit["session_id"], hit["snippet"])
            for hit in store.search_messages("hello", limit=100, sort="oldest")
        ]
        answers["tool calls"] = [
            m["tool_calls"] for m in store.get_messages("root2") if m["tool_calls"]
        ]
        answers["deleted"] = store.delete_session("root0")
        answers["deleted together"] = store.delete_sessions(["root3", "root6"])
        answers["after"] = sorted(
            row["id"] for row in store.list_sessions_rich(limit=None, include_children=True)
        )
    return answers


def test_import_listing_delete_and_search_under_parallel_plans(
    pg: pg_server.Server, tmp_path: Path
) -> None:
    with SessionDB(tmp_path / "source.db") as source:
        _fill(source)
        source.export_bundle(tmp_path / "bundle.jsonl")
    plain = _answers(pg.new_database(), tmp_path / "bundle.jsonl")
    parallel = _answers(pg.parallel_database(), tmp_path / "bundle.jsonl")
    assert parallel == plain
    # And the answers are the store's, not two alike failures.
    roots = [f"root{i}" for i in range(12)]
    assert plain["imported"]["sessions_added"] == 17
    assert plain["imported"]["messages_added"] == 29
    assert plain["listing"] == [("branch", 1)] + [(root, 2) for root in reversed(roots)]
    assert len(plain["children"]) == 17
    assert len(plain["search"]) == 17
    assert plain["tool calls"] == [[{"id": "c2", "type": "function", "function": {"name": "x"}}]]
    assert plain["deleted"] is True
    # A delegate child goes with its parent.
    assert plain["after"] == sorted({"branch", "child9", *roots} - {"root0", "root3", "root6"})


@pytest.mark.slow  # a second pytest run of six modules' PostgreSQL tests (about a minute)
def test_the_import_listing_delete_and_search_tests_pass_under_parallel_plans(
    pg: pg_server.Server,
) -> None:
    env = {**os.environ, pg_server.ENV_PARALLEL: "1", pg_server.ENV_URL: pg.admin_url}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "_hypothesis_pytestplugin",
            "-q",
            "-m",
            "postgresql",
            "-p",
            "no:cacheprovider",
            # Its kill -9 at random moments is about processes, not plans.
            "--deselect",
            str(HERE / "test_copy.py::test_a_killed_copy_finishes_when_run_again"),
            *(
                str(HERE / name)
                for name in (
                    "test_bundle.py",
                    "test_copy.py",
                    "test_listing.py",
                    "test_cli_deletion.py",
                    "test_deletion_trees.py",
                    "test_search.py",
                )
            ),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
    assert "failed" not in done.stdout.splitlines()[-1]
