"""The harness that runs Hermes' released code (``hermes_release``) does what it says.

Each release is installed from the package index and writes a store through its
own ``SessionDB``; this package then reads that file and must see the same
messages. Hermes v16 also reads and writes a file this package made.
"""

from __future__ import annotations

from pathlib import Path

import hermes_release
import pytest
from hermes_release import HermesError, HermesProcess

from hermes_models import SessionDB

pytestmark = [
    pytest.mark.slow,  # installs and starts Hermes' releases
    pytest.mark.plaintext_file,  # Hermes opens the file with the standard library's sqlite3
]

#: The columns of a message at v16: every release returns at least these.
V16_MESSAGE_KEYS = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
    "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active",
)  # fmt: skip


def v16_keys(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{key: message[key] for key in V16_MESSAGE_KEYS} for message in messages]


@pytest.mark.parametrize("release", sorted(hermes_release.RELEASES))
def test_each_release_writes_a_store_this_package_reads_alike(release: str, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with HermesProcess(release, path) as hermes:
        assert hermes.sqlite_version.startswith("3.")
        hermes.call("create_session", "s1", "cli", model="m1")
        first = hermes.call("append_message", "s1", "user", "你好 世界 hello")
        hermes.call("append_message", "s1", "assistant", "hi there")
        written = hermes.call("get_messages", "s1")
        assert [m["id"] for m in written] == [first, first + 1]
        assert hermes.sql("SELECT count(*) FROM messages") == [[2]]
    with SessionDB(path, read_only=True) as ours:
        # Whole answers of newer releases are the Hermes-compatibility suite's subject.
        assert v16_keys(ours.get_messages("s1")) == v16_keys(written)
        assert ours.get_session("s1")["model"] == "m1"


def test_hermes_v16_and_this_package_write_one_file_in_turn(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as ours:
        ours.create_session("ours", "cli")
        ours.append_message("ours", "user", "written by hermes_models 数据")
    with HermesProcess("v16", path) as hermes:
        assert hermes.schema_version == 16
        hermes.call("append_message", "ours", "assistant", "written by Hermes")
        assert [m["content"] for m in hermes.call("get_messages", "ours")] == [
            "written by hermes_models 数据",
            "written by Hermes",
        ]
        assert hermes.call("get_session", "ours")["message_count"] == 2
        with pytest.raises(HermesError) as error:
            hermes.call("set_session_title", "ours", "x" * 500)
        assert error.value.kind == "ValueError"
    with SessionDB(path) as ours:
        assert [m["content"] for m in ours.get_messages("ours")] == [
            "written by hermes_models 数据",
            "written by Hermes",
        ]
        assert [hit["id"] for hit in ours.search_messages("数据")] == [1]
