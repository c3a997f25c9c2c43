"""A continuation started 1 ms before its parent's end is a continuation.

Hermes v16's ``get_compression_tip`` followed a child only when ``started_at >=
ended_at`` of a parent ended by compression, and its picker projected a root to its
tip the same way. Every Hermes since v17 drops the time clause (a gateway may write
the continuation before its parent's end; a clock may step back): the rule is the
parent's ``end_reason``. This package answers as v17 on, also on v16 files (a
difference from v16 listed in ``docs/hermes-compatibility.md``), for the tip, the
resume target and the picker, and keeps every row whatever the clocks say. The
test builds the file with Hermes v16, then asks Hermes v17 (on a copy: it upgrades
the file) and this package the same questions.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hermes_release import HermesProcess

from hermes_models import SessionDB

pytestmark = pytest.mark.slow  # starts Hermes v16 in a process of its own

T0 = 1_767_603_600.0


def _answers(store: Any) -> dict[str, Any]:
    call = store.call if isinstance(store, HermesProcess) else None

    def ask(method: str, *args: Any, **kwargs: Any) -> Any:
        return call(method, *args, **kwargs) if call else getattr(store, method)(*args, **kwargs)

    return {
        "tip": ask("get_compression_tip", "root"),
        "resume": ask("resolve_resume_session_id", "root"),
        "picker": [
            (row["id"], row.get("_lineage_root_id"), row["message_count"])
            for row in ask("list_sessions_rich", limit=20)
        ],
        "sessions": sorted(
            row["id"] for row in ask("list_sessions_rich", limit=20, include_children=True)
        ),
    }


@pytest.mark.parametrize("skew", [-0.001, 0.0, 0.001])
def test_a_continuation_started_around_its_parents_end_is_answered_as_hermes_v16(
    tmp_path: Path, skew: float
) -> None:
    path = tmp_path / "state.db"
    with HermesProcess("v16", path) as hermes:
        hermes.call("create_session", "root", "cli")
        hermes.call("append_message", "root", "user", "hello")
        hermes.call("create_session", "cont", "cli", parent_session_id="root")
        hermes.call("append_message", "cont", "user", "continued")
        hermes.call(
            "create_session",
            "br",
            "cli",
            parent_session_id="cont",
            model_config={"_branched_from": "cont"},
        )
        hermes.call("append_message", "br", "user", "branched")
        # The continuation started `skew` seconds after its parent ended by compression.
        hermes.sql(
            "UPDATE sessions SET started_at = ?, ended_at = ?, end_reason = 'compression'"
            " WHERE id = 'root'",
            [T0, T0 + 100.0],
        )
        hermes.sql("UPDATE sessions SET started_at = ? WHERE id = 'cont'", [T0 + 100.0 + skew])
        hermes.sql("UPDATE sessions SET started_at = ? WHERE id = 'br'", [T0 + 200.0])
        v16 = _answers(hermes)
    copy = tmp_path / "v17.db"
    shutil.copyfile(path, copy)
    with HermesProcess("v17", copy) as hermes:
        theirs = _answers(hermes)
    with SessionDB(path, read_only=True) as ours:
        assert _answers(ours) == theirs
    # Whatever the clocks said, every session is still there, and the tip is the
    # continuation.
    assert theirs["sessions"] == ["br", "cont", "root"]
    assert theirs["tip"] == theirs["resume"] == "cont"
    # Hermes v16 agreed, except with the clock stepped back: it took the root for the tip.
    assert v16 == theirs if skew >= 0 else v16["tip"] == "root"
