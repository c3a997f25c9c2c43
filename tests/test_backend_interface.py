"""Both store handles implement the one declared backend interface, and what the two
dialects spell apart answers alike on both."""

from __future__ import annotations

import pytest

from hermes_models import Message, Session, SessionDB
from hermes_models.store import Backend, HermesDatabase, SqliteFile, current, using

pytestmark = pytest.mark.backends("sqlite", "postgresql")

T0 = 1_700_000_000.0


def test_each_handle_is_a_backend_and_only_a_file_is_a_sqlite_file(
    store: SessionDB, backend: str
) -> None:
    db = store.database
    assert isinstance(db, Backend)
    assert isinstance(db, SqliteFile) == (backend == "sqlite")
    assert isinstance(db, HermesDatabase) == (backend == "sqlite")
    assert db.dialect == backend


def test_the_dialect_methods_answer_alike(store: SessionDB) -> None:
    store.create_session("s-1", "cli", started_at=T0, model_config='{"a": 1, "a": 2}')
    store.create_session("s-2", "cli", started_at=T0 + 1)
    first = store.append_message("s-1", "user", "alpha", timestamp=T0)
    second = store.append_message("s-1", "user", ["x"], timestamp=T0 + 1)
    store.set_session_title("s-1", "plan")
    store.set_session_title("s-2", "plan #2")
    with using(store.database):
        db = current()
        ids = [m.id for m in Message.select().where(db.among(Message.session, ["s-1"]))]
        assert sorted(ids) == [first, second]
        starts = Session.select(Session.id).where(db.starts_with(Session.id, "s-"))
        assert sorted(s.id for s in starts) == ["s-1", "s-2"]
        nocase = Session.select(Session.id).where(db.starts_with_ascii_nocase(Session.id, "S-1"))
        assert [s.id for s in nocase] == ["s-1"]
        assert db.titles_beginning(["plan"]) == {"plan", "plan #2"}
        assert db.titles_beginning(["nothing"]) == set()
        sequence = db.message_sequence()
        assert sequence is not None and sequence >= second
        assert db.limit_value(5) == 5


def test_the_parity_differences_docs_postgresql_lists(store: SessionDB, backend: str) -> None:
    # docs/postgresql.md, "Differences from SQLite" and "The tokenizer": each pinned.
    store.create_session("s", "cli", started_at=T0)
    store.append_message("s", "user", "alpha\x00beta", timestamp=T0)
    store.append_message("s", "assistant", "①②③", timestamp=T0 + 1)
    [row] = store.list_sessions_rich()
    assert row["preview"] == ("alpha" if backend == "sqlite" else "alpha\x00beta")
    found = [h["id"] for h in store.search_messages("①", limit=None)]
    assert len(found) == (0 if backend == "sqlite" else 1)


def test_time_fields_compare_with_datetimes_and_dates(store: SessionDB) -> None:
    # Session.started_at > datetime(2026, 11, 1) compared a REAL with the datetime's
    # text and found nothing; it is now the datetime's seconds (a naive one read as
    # local time, a date as its local midnight), and the field still reads a number.
    import datetime as dt

    noon = dt.datetime(2026, 11, 15, 12, 0, tzinfo=dt.timezone.utc)
    for n, day in enumerate((1, 10, 20, 30)):
        when = dt.datetime(2026, 11, day, 12, 0, tzinfo=dt.timezone.utc).timestamp()
        store.create_session(f"s{n}", "cli", started_at=when)
        store.append_message(f"s{n}", "user", "hello", timestamp=when)
    with using(store.database):
        after = Session.select().where(Session.started_at > noon).order_by(Session.id)
        assert [s.id for s in after] == ["s2", "s3"]
        assert isinstance(after[0].started_at, float)
        local = dt.datetime.fromtimestamp(noon.timestamp())  # naive, local time
        before = Session.select().where(Session.started_at < local).order_by(Session.id)
        assert [s.id for s in before] == ["s0", "s1"]
        since = dt.date(2026, 11, 21)
        newer = Message.select().where(Message.timestamp >= since).order_by(Message.id)
        assert [m.session_id for m in newer] == ["s3"]
        between = Session.select().where(Session.started_at.between(dt.date(2026, 11, 5), noon))
        assert [s.id for s in between] == ["s1"]
        made = Session.create(id="s9", source="cli", started_at=noon)
        assert Session.get_by_id("s9").started_at == noon.timestamp() == made.started_at


def test_a_search_as_a_peewee_query_is_a_file_s_and_says_so_on_a_server(
    store: SessionDB, backend: str
) -> None:
    store.create_session("s", "cli", started_at=T0)
    first = store.append_message("s", "user", "asyncio loop", timestamp=T0)
    with using(store.database):
        if backend == "sqlite":
            assert [m.id for m in Message.matching("asyncio")] == [first]
        else:
            with pytest.raises(NotImplementedError, match=r"Message\.search"):
                Message.matching("asyncio")


def test_a_message_decodes_its_tool_calls(store: SessionDB) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    store.create_session("s", "cli", started_at=T0)
    with_calls = store.append_message("s", "assistant", None, tool_calls=calls, timestamp=T0)
    without = store.append_message("s", "user", "no calls", timestamp=T0 + 1)
    with using(store.database):
        assert Message.get_by_id(with_calls).calls == calls
        assert isinstance(Message.get_by_id(with_calls).tool_calls, str)  # as stored
        assert Message.get_by_id(without).calls == []
