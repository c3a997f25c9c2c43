"""``hermes-models search`` and the search part of ``hermes-models demo``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import target_of

from hermes_models import SessionDB
from hermes_models.cli.commands import cli
from hermes_models.models.clock import when

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_767_603_600.0  # 2026-01-05 09:00 UTC


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["--utc", *args], env={"COLUMNS": "200"})


@pytest.fixture
def filled(store: SessionDB) -> str:
    """Two sessions, English and Chinese (the store's ``--db``)."""
    store.create_session("en", "cli", started_at=T0)
    store.create_session("zh", "telegram", started_at=T0 + 60)
    store.append_message("en", "user", "How do I use the asyncio event loop?", timestamp=T0 + 1)
    store.append_message(
        "en", "assistant", "Run [bold]asyncio[/bold].run(main()).\nDone.", timestamp=T0 + 2
    )
    store.append_message("zh", "user", "事件循环是怎么工作的？", timestamp=T0 + 61)
    store.append_message(
        "zh", "assistant", "事件循环调度协程。", tool_name="explain", timestamp=T0 + 62
    )
    return str(target_of(store.database))


def test_search_prints_hits_with_marked_matches(filled: str) -> None:
    result = invoke("search", "--db", filled, "asyncio")
    assert result.exit_code == 0, result.output
    assert result.output == (
        "en assistant #2 2026-01-05 09:00 UTC cli\n"
        "  Run [bold]>>>asyncio<<<[/bold].run(main()). Done.\n"
        "en user #1 2026-01-05 09:00 UTC cli\n"
        "  How do I use the >>>asyncio<<< event loop?\n"
    )


def test_search_cjk_role_source_and_limit(filled: str) -> None:
    out = invoke("search", "--db", filled, "事件循环", "--role", "assistant").output
    assert out == (
        "zh assistant:explain #4 2026-01-05 09:01 UTC telegram\n"
        "  >>>事件循环<<<调度协程。 explain\n"
    )
    best = invoke(
        "search", "--db", filled, "事件循环 OR asyncio", "--source", "cli", "--limit", "1"
    ).output
    if filled.startswith("postgresql://"):
        # 事件循环 is a substring there (unranked): BM25 of asyncio ranks the shorter
        # message first (docs/postgresql.md).
        assert best == (
            "en assistant #2 2026-01-05 09:00 UTC cli\n"
            "  Run [bold]>>>asyncio<<<[/bold].run(main()). Done.\n"
        )
    else:
        # One trigram pass ranks the query by BM25: the shorter message comes first.
        assert best == (
            "en user #1 2026-01-05 09:00 UTC cli\n  How do I use the >>>asyncio<<< event loop?\n"
        )
    assert (
        invoke("search", "--db", filled, "asyncio", "--source", "telegram").output == "no matches\n"
    )


def test_search_sessions(filled: str) -> None:
    result = invoke(
        "search", "--db", filled, "事件循环 OR asyncio", "--sessions", "--source", "telegram"
    )
    assert result.exit_code == 0, result.output
    with SessionDB(filled) as store:
        best = store.search_messages("事件循环 OR asyncio", source_filter="telegram")[0]["snippet"]
        score = store.search_sessions("事件循环 OR asyncio", source="telegram")[0]["score"]
        started = when(store.get_session("zh")["started_at"], utc=True, zone=True)  # type: ignore[index]
    assert result.output == (
        f"zh 2 hits score {score:.2f}\n  started {started}\n  {best.rstrip()}\n"
    )


def test_search_json_is_the_library_result(filled: str) -> None:
    out = invoke("search", "--db", filled, "事件循环", "--json").output
    with SessionDB(filled) as store:
        assert json.loads(out) == store.search_messages("事件循环")
    out = invoke("search", "--db", filled, "asyncio", "--json", "--sessions").output
    with SessionDB(filled) as store:
        assert json.loads(out) == store.search_sessions("asyncio")


@pytest.mark.parametrize("query", ['"unbalanced', "C++", "AND", "foo:bar", "^*"])
def test_search_never_fails_on_odd_queries(filled: str, query: str) -> None:
    result = invoke("search", "--db", filled, query)
    assert (result.exit_code, result.output) == (0, "no matches\n")


def test_search_errors_are_one_line(tmp_path: Path, filled: str) -> None:
    missing = tmp_path / "nope.db"
    result = invoke("search", "--db", str(missing), "x")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {missing} does not exist (create it with: hermes-models migrate --db {missing})\n"
    )
    assert not missing.exists()
    result = invoke("search", "--db", filled, "x", "--sessions", "--role", "user")
    assert result.exit_code == 2
    assert "--role cannot be combined with --sessions" in result.output


def test_demo_shows_english_chinese_and_session_searches() -> None:
    result = invoke("demo")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Search messages: asyncio thread" in out
    assert (
        "  Wrap it: await >>>asyncio<<<.wait_for(>>>asyncio<<<.to_>>>thread<<<(read_file, path),"
        " timeout=5)." in out
    )
    assert "Search messages: 事件循环" in out
    assert "  请解释一下 Python 异步编程中的>>>事件循环<<<是怎么工作的？" in out
    assert "Search messages: 异步" in out
    assert "  请解释一下 Python >>>异步<<<编程中的事件循环是怎么工作的？" in out
    assert "demo-retries 3 hits score 3.04 'writer retry policy'" in out
    assert "  started 2026-01-05 09:30 UTC · best hit in demo-subagent" in out
