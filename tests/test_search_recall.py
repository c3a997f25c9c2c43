"""Chinese, Japanese and Korean search is exact: every active message containing the
query, and no other, for queries of 1, 2, 3, 4 and more characters on every route."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_models import SessionDB

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0

ALPHABETS = {
    "zh": "的一是在不了有和人这中大为上个国我以要他时来用们生到作"
    "地于出就分对成会可主发年动同工也能下过子说产种面而方后",
    "ja": "あいうかきくさしすたちつなにのはひふまみむやゆよらりる"
    "をんアイカキサシタチナニハヒマミラリンー検索会話履歴",
    "ko": "가나다라마바사아자차카타파하세션메시지검색한국어기록대화",
}
LENGTHS = (1, 2, 3, 4, 6, 9)


def _word(rng: random.Random, alphabet: str) -> str:
    # A small alphabet and few distinct letters per word: short queries hit often,
    # long ones sometimes.
    letters = alphabet[: rng.randint(8, len(alphabet))]
    return "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))


def _text(rng: random.Random, alphabet: str) -> str:
    return " ".join(_word(rng, alphabet) for _ in range(rng.randint(1, 6)))


def build(store: SessionDB, seed: int) -> list[dict[str, Any]]:
    """A generated corpus; returns every message as written (with ``active``)."""
    rng = random.Random(seed)
    written = []
    for s in range(24):
        lang = list(ALPHABETS)[s % 3]
        alphabet = ALPHABETS[lang]
        session_id = f"{lang}-{s}"
        store.create_session(session_id, "cli", started_at=T0 + s)
        for n in range(25):
            role = ("user", "assistant", "tool")[n % 3]
            fields: dict[str, Any] = {}
            content: Any = _text(rng, alphabet)
            kind = rng.random()
            if kind < 0.15:
                content = [
                    {"type": "text", "text": content},
                    {"type": "image_url", "image_url": {"url": "u"}},
                ]
            elif kind < 0.25 and role == "assistant":
                fields["tool_calls"] = [
                    {"id": f"c{n}", "function": {"name": "f", "arguments": _word(rng, alphabet)}}
                ]
            elif kind < 0.30 and role == "tool":
                fields["tool_name"] = _word(rng, alphabet)
            elif kind < 0.33:
                content = None
            message_id = store.append_message(
                session_id, role, content, timestamp=T0 + s * 100 + n, **fields
            )
            written.append(
                {
                    "id": message_id,
                    "session_id": session_id,
                    "content": content,
                    "active": True,
                    **fields,
                }
            )
        # Rewind the tail of every other session from its 19th message (a user message):
        # those messages must never be found.
        if s % 2 == 0:
            session_rows = written[-25:]
            store.rewind_to_message(session_id, session_rows[18]["id"])
            for row in session_rows[18:]:
                row["active"] = False
    return written


def haystacks(message: dict[str, Any]) -> Iterator[str]:
    """The texts a message is searched in, as plain Python sees them."""
    content = message["content"]
    if isinstance(content, list):
        yield " ".join(part["text"] for part in content if "text" in part)
    elif content is not None:
        yield content
    if message.get("tool_name"):
        yield message["tool_name"]
    if message.get("tool_calls"):
        yield json.dumps(message["tool_calls"], ensure_ascii=False)


def expected(corpus: list[dict[str, Any]], query: str) -> set[int]:
    return {m["id"] for m in corpus if m["active"] and any(query in text for text in haystacks(m))}


def queries(corpus: list[dict[str, Any]], lang: str, length: int, rng: random.Random) -> list[str]:
    """Substrings of words in the corpus (so most have hits), plus random strings."""
    words = [
        w
        for m in corpus
        if m["session_id"].startswith(lang)
        for text in haystacks(m)
        for w in text.split()
        if len(w) >= length and all(c in ALPHABETS[lang] for c in w)
    ]
    out = []
    for _ in range(12):
        word = rng.choice(words)
        start = rng.randint(0, len(word) - length)
        out.append(word[start : start + length])
    out += ["".join(rng.choice(ALPHABETS[lang]) for _ in range(length)) for _ in range(3)]
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    path = tmp_path_factory.mktemp("recall") / "state.db"
    with SessionDB(path) as store:
        written = build(store, seed=20260105)
    yield path, written


def test_corpus_has_every_kind_of_row(corpus: tuple[Path, list[dict[str, Any]]]) -> None:
    _, written = corpus
    assert len(written) == 600
    assert sum(not m["active"] for m in written) >= 40
    assert sum(isinstance(m["content"], list) for m in written) >= 40
    assert sum("tool_calls" in m for m in written) >= 10
    assert sum("tool_name" in m for m in written) >= 5


@pytest.mark.parametrize("lang", list(ALPHABETS))
@pytest.mark.parametrize("length", LENGTHS)
def test_search_finds_exactly_the_messages_containing_the_query(
    corpus: tuple[Path, list[dict[str, Any]]], lang: str, length: int
) -> None:
    path, written = corpus
    rng = random.Random(f"{lang}-{length}")
    with SessionDB(path) as store:
        total = 0
        for query in queries(written, lang, length, rng):
            want = expected(written, query)
            got = [hit["id"] for hit in store.search_messages(query, limit=None)]
            assert len(got) == len(set(got)), query
            assert set(got) == want, query
            total += len(want)
            with_inactive = {
                h["id"] for h in store.search_messages(query, limit=None, include_inactive=True)
            }
            assert with_inactive == {
                m["id"] for m in written if any(query in text for text in haystacks(m))
            }, query
        assert total > 0


@pytest.mark.parametrize("lang", list(ALPHABETS))
def test_session_hit_counts_are_exact(corpus: tuple[Path, list[dict[str, Any]]], lang: str) -> None:
    path, written = corpus
    rng = random.Random(lang)
    by_id = {m["id"]: m for m in written}
    with SessionDB(path) as store:
        for length in (2, 4):
            for query in queries(written, lang, length, rng)[:5]:
                want = Counter(by_id[i]["session_id"] for i in expected(written, query))
                rows = store.search_sessions(query, limit=None)
                assert {row["id"]: row["hits"] for row in rows} == dict(want), query
