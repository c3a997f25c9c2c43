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
