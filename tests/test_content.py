"""content_text: the one rule turning message content into text, and the places that use it.

The expected values come from Hermes (HERMES_V16.md §3.9, §3.10): recent user
messages and a search hit's ``context`` show a multimodal message as its text
parts joined, or ``[multimodal content]`` when it has none. Listing previews
(text of every part, ``""`` when none) and search snippets (every part,
``[image]``, the JSON when no part has text) are this package's documented
choices, made through the same function.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_models import SessionDB
from hermes_models.conversations.listing import preview_text
from hermes_models.models.tables import encode_content, readable
from hermes_models.store.content import IMAGE, MULTIMODAL, content_text

T0 = 1_700_000_000.0

PICTURE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
TOOL_RESULT = {"type": "tool_result", "text": "exit 0"}

# content, Hermes' rule, the command line's, listing previews', search snippets'
CASES: list[tuple[Any, str, str, str, str]] = [
    ("plain text", "plain text", "plain text", "plain text", "plain text"),
    (None, "", "", "", ""),
    (
        [{"type": "text", "text": "look"}, PICTURE, {"type": "text", "text": "here"}],
        "look here",
        f"look {IMAGE} here",
        "look here",
        f"look {IMAGE} here",
    ),
    ([PICTURE], MULTIMODAL, IMAGE, "", IMAGE),
    ([], MULTIMODAL, MULTIMODAL, "", "[]"),
    (
        [{"type": "text", "text": "run it"}, TOOL_RESULT],
        "run it",
        "run it",
        "run it exit 0",
        "run it exit 0",
    ),
    ([{"type": "text", "text": "  "}], MULTIMODAL, MULTIMODAL, "", "  "),
    (
        [{"type": "text", "text": ""}, "bare", 7],
        MULTIMODAL,
        MULTIMODAL,
        "",
        '[{"type": "text", "text": ""}, "bare", 7]',
    ),
    (
        {"type": "text", "text": "one part"},
        "one part",
        "one part",
        '{"type": "text", "text": "one part"}',
        "one part",
    ),
]


@pytest.mark.parametrize(("content", "hermes", "cli", "listing", "snippet"), CASES)
def test_each_use_of_the_rule(
    content: Any, hermes: str, cli: str, listing: str, snippet: str
) -> None:
    assert content_text(content) == hermes
    assert content_text(content, image=IMAGE) == cli
    stored = encode_content(content)
    assert preview_text(stored) == listing
    assert readable(stored) == snippet


def test_values_that_are_not_content_read_as_their_str() -> None:
    assert content_text(12) == "12"
    assert content_text(1.5, every_part=True, empty="") == "1.5"


def test_search_context_and_recent_messages_follow_hermes(store: SessionDB) -> None:
    store.create_session("s", "cli", started_at=T0)
    before = store.append_message("s", "user", [PICTURE], timestamp=T0)
    hit = store.append_message(
        "s",
        "assistant",
        [{"type": "text", "text": "a kestrel on the wire"}, PICTURE],
        timestamp=T0 + 1,
    )
    store.append_message(
        "s", "user", [{"type": "text", "text": "nice"}, TOOL_RESULT], timestamp=T0 + 2
    )
    [found] = store.search_messages("kestrel")
    assert found["id"] == hit
    assert found["snippet"] == f"a >>>kestrel<<< on the wire {IMAGE}"
    assert found["context"] == [
        {"role": "user", "content": MULTIMODAL},
        {"role": "assistant", "content": "a kestrel on the wire"},
        {"role": "user", "content": "nice"},
    ]
    recent = store.list_recent_user_messages("s")
    assert [(r["id"], r["preview"]) for r in recent] == [
        (hit + 1, "nice"),
        (before, MULTIMODAL),
    ]
    [row] = store.list_sessions_rich()
    assert row["preview"] == ""
