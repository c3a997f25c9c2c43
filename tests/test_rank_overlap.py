"""The same top hits on SQLite and PostgreSQL (issue #37 point 3): a store of the corpus
``benchmarks/search.py`` generates, copied to a server, ranks each of that benchmark's
word queries alike on both backends (FTS5's BM25 on SQLite; on PostgreSQL the same BM25
computed from the same statistics, migration 0011): at least 18 of the top 20 hits
shared, every hit ranked (the default)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_server import Server

from hermes_models import SessionDB
from hermes_models.transfer import copy_store

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = 12_000
#: Shared hits of the top 20 each query needs at the least.
SHARED = 18


def _corpus_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_search", ROOT / "benchmarks/search.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _corpus_module()
#: The benchmark's word queries (the routes its table calls BM25).
WORD_QUERIES = [query for name, (query, _) in BENCH.QUERIES.items() if name.startswith("BM25")]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, pg: Server) -> Iterator[Any]:
    """The corpus in a file and the same rows on a server (``hermes-models copy``'s copy)."""
    path = tmp_path_factory.mktemp("overlap") / "state.db"
    BENCH.build(path, MESSAGES)
    url = pg.new_database(keep=True)
    copy_store(path, url)
    with SessionDB(path, read_only=True) as lite, SessionDB(url, read_only=True) as server:
        yield lite, server
    pg.drop(url)


def overlap(lite: SessionDB, pg: SessionDB, query: str, limit: int = 20) -> tuple[int, int]:
    """``(shared, page)``: hits both top pages hold, and the page's length on SQLite."""
    ours = [hit["id"] for hit in lite.search_messages(query, limit=limit, time_budget=None)]
    theirs = [hit["id"] for hit in pg.search_messages(query, limit=limit, time_budget=None)]
    return len(set(ours) & set(theirs)), len(ours)


def test_the_benchmark_has_word_queries() -> None:
    assert WORD_QUERIES == ["checkpoint", "asyncio timeout", "migrat*", '"event loop" OR vacuum']


@pytest.mark.parametrize("query", WORD_QUERIES)
def test_the_top_20_are_shared_by_both_backends(stores: Any, query: str) -> None:
    lite, pg = stores
    shared, page = overlap(lite, pg, query)
    print(f"overlap {query!r}: {shared} of {page}")
    assert page == 20
    assert shared >= SHARED, (query, shared)
