"""Model instances stay true to their rows: actions reload them, and saving writes
only what changed, so an instance held across other writes never puts back stale
values (an end, counters, lineage)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import plain_connection, target_of

from hermes_models import HermesDatabase, Message, Session, SessionDB
from hermes_models.checks import EPOCH_MAX, EPOCH_MIN
from hermes_models.driver import sqlite3

from factories import EPOCH, SessionFactory

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def row(session_id: str) -> dict[str, Any]:
    return dict(Session.get_by_id(session_id).__data__)


def same_as_row(session: Session) -> bool:
    return dict(session.__data__) == row(session.id)


def test_every_action_leaves_the_instance_equal_to_its_row(database: HermesDatabase) -> None:
    s = SessionFactory(id="chat")
    first = s.append("user", "hello", timestamp=EPOCH + 1)
    assert (s.message_count, same_as_row(s)) == (1, True)
    s.append(
        "assistant",
        "calling",
        tool_calls=[{"id": "c1", "function": {"name": "web", "arguments": "{}"}}],
        timestamp=EPOCH + 2,
    )
    assert (s.message_count, s.tool_call_count, same_as_row(s)) == (2, 1, True)
    assert s.rewind_to(first.id) == 2
    # Hermes' counters keep rewound messages.
    assert (s.message_count, s.tool_call_count, s.rewind_count, same_as_row(s)) == (2, 1, 1, True)
    assert s.restore_rewound(first.id) == 2
    assert (s.message_count, s.tool_call_count, same_as_row(s)) == (2, 1, True)
    run = s.delegate(session_id="chat-run", at=EPOCH + 3)
    assert (run.parent_session_id, same_as_row(s), same_as_row(run)) == ("chat", True, True)
    fork = s.branch(session_id="chat-fork", at=EPOCH + 4)
    assert (s.end_reason, s.ended_at, same_as_row(s)) == ("branched", EPOCH + 4, True)
    assert same_as_row(fork)
    s.reopen()
    assert (s.end_reason, s.ended_at, same_as_row(s)) == (None, None, True)
    cont = s.compress([{"role": "user", "content": "summary"}], session_id="chat-2", at=EPOCH + 5)
    assert (s.end_reason, s.ended_at, same_as_row(s)) == ("compression", EPOCH + 5, True)
    assert (cont.message_count, same_as_row(cont)) == (1, True)
    s.reopen()
    assert s.end("done", at=EPOCH + 6) is True
    assert (s.end_reason, s.ended_at, same_as_row(s)) == ("done", EPOCH + 6, True)
    assert s.end("again", at=EPOCH + 7) is False
    assert (s.end_reason, s.ended_at, same_as_row(s)) == ("done", EPOCH + 6, True)


def test_an_end_that_loses_shows_the_winner(database: HermesDatabase, db_path: Any) -> None:
    held = SessionFactory(id="chat")
    with SessionDB(target_of(database)) as other:
        other.end_session("chat", "user_exit")
        other.append_message("chat", "user", "from elsewhere")
    assert held.end("mine", at=EPOCH + 50) is False
    assert (held.end_reason, held.message_count, same_as_row(held)) == ("user_exit", 1, True)


def test_a_stale_instance_saved_changes_only_what_it_changed(
    database: HermesDatabase, db_path: Any
) -> None:
    parent = SessionFactory(id="parent")
    held = SessionFactory(id="child", parent=parent)
    with SessionDB(target_of(database)) as other:
        other.append_message("child", "user", "one")
        other.update_token_counts("child", input_tokens=10)
        other.end_session("child", "compression")
        other.delete_session("parent")
    before = row("child")
    assert held.save() is False  # nothing changed on the instance: nothing written
    held.title = "renamed"
    assert held.save() == 1
    assert row("child") == {**before, "title": "renamed"}
    assert before["parent"] is None and before["ended_at"] is not None


def test_refresh_keeps_unsaved_changes(database: HermesDatabase) -> None:
    s = SessionFactory(id="chat")
    s.title = "pending"
    s.append("user", "hi", timestamp=EPOCH + 1)
    assert (s.title, s.message_count) == ("pending", 1)
    assert Session.get_by_id("chat").title is None
    s.save()
    assert Session.get_by_id("chat").title == "pending"


def test_refresh_of_a_deleted_session_raises(database: HermesDatabase, db_path: Any) -> None:
    s = SessionFactory(id="chat")
    with SessionDB(target_of(database)) as other:
        other.delete_session("chat")
    with pytest.raises(Session.DoesNotExist, match="chat"):
        s.refresh()


@pytest.mark.parametrize("value", [1e308, -1e308, EPOCH_MAX + 1, EPOCH_MIN - 1, 2.6e11])
def test_saving_a_time_no_date_can_stand_for_is_refused(
    database: HermesDatabase, raw: Any, value: float
) -> None:
    with pytest.raises(ValueError, match="started_at"):
        SessionFactory(id="far", started_at=value)
    s = SessionFactory(id="near")
    s.ended_at = value
    with pytest.raises(ValueError, match="ended_at"):
        s.save()
    with pytest.raises(ValueError, match="timestamp"):
        Message.create(session=s, role="user", content="x", timestamp=value)
    with pytest.raises(ValueError, match="at"):
        s.end("done", at=value)
    assert [r[0] for r in raw.execute("SELECT id FROM sessions")] == ["near"]
    assert raw.execute("SELECT ended_at FROM sessions").fetchall() == [(None,)]


@pytest.mark.parametrize("value", ["yesterday", "1700000000", True, b"1"])
def test_saving_a_time_that_is_not_a_number_is_refused(
    database: HermesDatabase, raw: Any, value: Any
) -> None:
    # peewee's DoubleField hands text it cannot convert to the database as it is: the
    # REAL column of a file would hold TEXT.
    with pytest.raises(TypeError, match=r"^started_at must be a number"):
        SessionFactory(id="far", started_at=value)
    s = SessionFactory(id="near")
    s.ended_at = value
    with pytest.raises(TypeError, match=r"^ended_at must be a number"):
        s.save()
    with pytest.raises(TypeError, match=r"^timestamp must be a number"):
        Message.create(session=s, role="user", content="x", timestamp=value)
    assert [r[0] for r in raw.execute("SELECT id FROM sessions")] == ["near"]
    assert raw.execute("SELECT ended_at FROM sessions").fetchall() == [(None,)]
    assert raw.execute("SELECT COUNT(*) FROM messages").fetchall() == [(0,)]


def test_a_row_with_such_a_time_loads_and_saves_other_fields(
    database: HermesDatabase, raw: sqlite3.Connection
) -> None:
    raw.execute("INSERT INTO sessions (id, source, started_at) VALUES ('far', 'cli', 1e308)")
    raw.commit()
    s = Session.get_by_id("far")
    assert s.started_at == 1e308
    s.title = "still usable"
    assert s.save() == 1
    assert raw.execute("SELECT title, started_at FROM sessions").fetchall() == [
        ("still usable", 1e308)
    ]


@pytest.fixture
def raw(db_path: Any, database: HermesDatabase) -> Any:
    """A connection of its own to the store, for checking what was stored."""
    with plain_connection(database, db_path) as conn:
        yield conn
