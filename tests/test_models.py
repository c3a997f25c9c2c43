"""The peewee models: they mirror the migrated schema, and their own methods behave."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import peewee
import pytest
from conftest import plain_connection
from playhouse.sqlite_ext import FTS5Model, RowIDField, SearchField

from hermes_models import (
    CompressionLock,
    HermesDatabase,
    Message,
    SchemaVersion,
    Session,
    StateMeta,
)
from hermes_models.driver import sqlite3
from hermes_models.models.tables import (
    CONTENT_JSON_PREFIX,
    EpochField,
    NewerField,
    all_models,
    stored_fields,
)
from hermes_models.store.fts import MessageIndex, MessageTrigramIndex

from factories import EPOCH, MessageFactory, SessionFactory

pytestmark = pytest.mark.backends("sqlite", "postgresql")

#: SQLite's declared type for each peewee field class the models may use.
DECLARED_TYPE = {
    peewee.AutoField: "INTEGER",
    peewee.IntegerField: "INTEGER",
    peewee.TextField: "TEXT",
    peewee.DoubleField: "REAL",
    EpochField: "REAL",
}

TABLE_MODELS = {model._meta.table_name: model for model in all_models()}


def declared_type(field: peewee.Field) -> str:
    """The SQLite type a model field stands for (a foreign key: its target's)."""
    if isinstance(field, peewee.ForeignKeyField):
        return declared_type(field.rel_field)
    # The models' fields are probed subclasses of these (see models.probe_fields).
    return next(DECLARED_TYPE[kind] for kind in type(field).__mro__ if kind in DECLARED_TYPE)


def model_columns(model: type[peewee.Model]) -> list[tuple[str, str, int, str | None, int]]:
    """(name, type, notnull, default, pk) of each field, as PRAGMA table_info would say.

    SQLite reports a PRIMARY KEY column declared without NOT NULL as nullable,
    so a primary key counts as notnull 0.
    """
    return [
        (
            field.column_name,
            declared_type(field),
            int(not field.null and not field.primary_key),
            None if field.default is None else str(field.default),
            int(bool(field.primary_key)),
        )
        for field in model._meta.sorted_fields
        if not isinstance(field, NewerField)
    ]


def table_columns(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    return [row[1:] for row in conn.execute(f"PRAGMA table_info({table})")]


@pytest.fixture
def raw(database: HermesDatabase, db_path: Path) -> Any:
    """A connection of its own to the store, for checking what was stored."""
    with plain_connection(database, db_path) as conn:
        yield conn


# -- schema mirror --------------------------------------------------------------------


@pytest.mark.backends(
    "sqlite"
)  # SQLite's catalog; PostgreSQL's columns match it (test_postgres_schema)
@pytest.mark.parametrize("table", sorted(TABLE_MODELS))
def test_model_fields_mirror_the_migrated_columns(raw: sqlite3.Connection, table: str) -> None:
    assert model_columns(TABLE_MODELS[table]) == table_columns(raw, table)


def test_mirror_covers_the_five_hermes_tables() -> None:
    assert sorted(TABLE_MODELS) == [
        "compression_locks",
        "messages",
        "schema_version",
        "sessions",
        "state_meta",
    ]


@pytest.mark.backends(
    "sqlite"
)  # SQLite's catalog; PostgreSQL's columns match it (test_postgres_schema)
def test_every_plain_table_of_the_file_has_a_model(raw: sqlite3.Connection) -> None:
    tables = {
        name
        for (name,) in raw.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        )
        # Index tables hold what follows from messages (the gram index's mark and
        # list of changed rows included: see hermes_models.store.grams); no model reads them.
        if not name.startswith(("sqlite_", "_yoyo", "yoyo_", "messages_fts", "messages_cjk"))
    }
    assert tables == set(TABLE_MODELS)


@pytest.mark.backends(
    "sqlite"
)  # SQLite's catalog; PostgreSQL's columns match it (test_postgres_schema)
@pytest.mark.parametrize("table", sorted(TABLE_MODELS))
def test_foreign_keys_mirror_the_schema(raw: sqlite3.Connection, table: str) -> None:
    model = TABLE_MODELS[table]
    in_model = sorted(
        (field.column_name, field.rel_model._meta.table_name, field.rel_field.column_name)
        for field in model._meta.sorted_fields
        if isinstance(field, peewee.ForeignKeyField)
    )
    in_file = sorted(
        (row[3], row[2], row[4]) for row in raw.execute(f"PRAGMA foreign_key_list({table})")
    )
    assert in_model == in_file


@pytest.mark.backends(
    "sqlite"
)  # SQLite's catalog; PostgreSQL's columns match it (test_postgres_schema)
@pytest.mark.parametrize(
    ("model", "table", "tokenizer"),
    [
        (MessageIndex, "messages_fts", None),
        (MessageTrigramIndex, "messages_fts_trigram", "trigram"),
    ],
)
def test_fts_models_mirror_their_virtual_tables(
    raw: sqlite3.Connection, model: type[FTS5Model], table: str, tokenizer: str | None
) -> None:
    assert issubclass(model, FTS5Model)
    assert model._meta.table_name == table
    fields = model._meta.sorted_fields
    assert [(f.name, type(f)) for f in fields] == [("rowid", RowIDField), ("content", SearchField)]
    searchable = [f.column_name for f in fields if not isinstance(f, RowIDField)]
    assert searchable == [row[1] for row in raw.execute(f"PRAGMA table_info({table})")]
    (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    assert "USING fts5" in sql
    assert (f"tokenize='{tokenizer}'" in sql) == (tokenizer is not None)
    assert model._meta.options.get("tokenize") == tokenizer


def test_no_field_is_a_float_field() -> None:
    floats = [
        f"{model.__name__}.{field.name}"
        for model in (*all_models(), MessageIndex, MessageTrigramIndex)
        for field in model._meta.sorted_fields
        if type(field) is peewee.FloatField
    ]
    assert floats == []


def test_epoch_times_and_costs_are_double_fields() -> None:
    doubles = sorted(
        f"{model._meta.table_name}.{field.column_name}"
        for model in all_models()
        for field in stored_fields(model)
        if isinstance(field, peewee.DoubleField)
    )
    assert doubles == [
        "compression_locks.acquired_at",
        "compression_locks.expires_at",
        "messages.timestamp",
        "sessions.actual_cost_usd",
        "sessions.ended_at",
        "sessions.estimated_cost_usd",
        "sessions.started_at",
    ]


def test_schema_version_row_reads_16(database: HermesDatabase) -> None:
    assert [row.version for row in SchemaVersion.select()] == [16]


# -- relations --------------------------------------------------------------------------


def test_parent_children_and_messages_relations(database: HermesDatabase) -> None:
    parent = SessionFactory()
    child = SessionFactory(parent=parent)
    first = MessageFactory(session=parent)
    second = MessageFactory(session=parent, role="assistant")
    assert Session.get_by_id(child.id).parent.id == parent.id
    assert [s.id for s in parent.children] == [child.id]
    assert [m.id for m in parent.messages.order_by(Message.id)] == [first.id, second.id]
    assert Message.get_by_id(first.id).session.id == parent.id
    assert Session.get_by_id(child.id).parent_session_id == parent.id


def test_session_config_decodes_model_config(database: HermesDatabase) -> None:
    assert SessionFactory(model_config='{"a": [1, 2]}').config == {"a": [1, 2]}
    assert SessionFactory(model_config="not json").config == {}
    assert SessionFactory(model_config="[1]").config == {}
    assert SessionFactory(model_config=None).config == {}


# -- content through Session.append and Message.value ----------------------------------

CONTENT_CASES = {
    "text": "plain text",
    "empty": "",
    "list": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}],
    "dict": {"a": 1, "b": [None, True, 2.5], "c": {"d": "e"}},
    "empty list": [],
    "prefix text": CONTENT_JSON_PREFIX + '{"not": "really json"}',
    "prefix only": CONTENT_JSON_PREFIX,
    "nul bytes": "a\x00b\x00\x00c",
    "emoji": "🦄 ok 👍🏽 family 👨‍👩‍👧",
    "cjk": "事件循环不断从就绪队列中取出协程 — 日本語のテキスト — 한국어",
    "rtl and combining": "שלום e\u0301 \u202eabc",
}


@pytest.mark.parametrize("case", sorted(CONTENT_CASES))
def test_append_round_trips_content(database: HermesDatabase, case: str) -> None:
    session = SessionFactory()
    content = CONTENT_CASES[case]
    message = session.append("user", content, timestamp=EPOCH)
    assert message.value == content
    assert Message.get_by_id(message.id).value == content
    assert Session.get_by_id(session.id).message_count == 1


def test_list_and_dict_content_is_stored_the_hermes_way(
    database: HermesDatabase, raw: sqlite3.Connection
) -> None:
    session = SessionFactory()
    listed = session.append("user", [{"type": "text", "text": "é"}])
    keyed = session.append("user", {"k": "v"})
    text = session.append("user", "just text")
    stored = dict(raw.execute("SELECT id, content FROM messages"))
    assert stored == {
        listed.id: '\x00json:[{"type": "text", "text": "é"}]',
        keyed.id: '\x00json:{"k": "v"}',
        text.id: "just text",
    }


def test_text_that_looks_encoded_is_encoded_again(
    database: HermesDatabase, raw: sqlite3.Connection
) -> None:
    session = SessionFactory()
    tricky = CONTENT_JSON_PREFIX + "[1, 2]"
    message = session.append("user", tricky)
    (stored,) = raw.execute("SELECT content FROM messages WHERE id = ?", (message.id,)).fetchone()
    assert stored == CONTENT_JSON_PREFIX + '"\\u0000json:[1, 2]"'
    assert message.value == tricky


@pytest.mark.slow
def test_append_round_trips_ten_megabytes(database: HermesDatabase) -> None:
    session = SessionFactory()
    big = ("0123456789abcdef" * 65536 + "é") * 10
    message = session.append("assistant", big)
    assert Message.get_by_id(message.id).value == big
    assert len(big) == 10 * (16 * 65536 + 1)


def test_append_round_trips_deeply_nested_tool_calls(database: HermesDatabase) -> None:
    session = SessionFactory()
    nested: Any = {"leaf": "🦄"}
    for depth in range(200):
        nested = {"level": depth, "items": [nested, None, "x"]}
    calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": nested}}]
    message = session.append("assistant", None, tool_calls=calls)
    stored = Message.get_by_id(message.id)
    assert stored.value is None
    assert json.loads(stored.tool_calls) == calls
    assert Session.get_by_id(session.id).tool_call_count == 1
    assert session.tool_call_count == 1


@pytest.mark.parametrize(
    ("content", "fields", "argument"),
    [
        ("bad \ud800 text", {}, "content"),
        (["ok", {"deep": "\udfff"}], {}, "content[1]['deep']"),
        ("fine", {"tool_name": "t\ud800"}, "tool_name"),
        ("fine", {"tool_calls": [{"id": "\ud83d"}]}, "tool_calls[0]['id']"),
        ("fine", {"reasoning": "\udc80"}, "reasoning"),
    ],
)
def test_lone_surrogates_are_refused_and_nothing_is_written(
    database: HermesDatabase,
    raw: sqlite3.Connection,
    content: Any,
    fields: dict[str, Any],
    argument: str,
) -> None:
    session = SessionFactory()
    session.append("user", "before")
    with pytest.raises(ValueError) as caught:
        session.append("assistant", content, **fields)
    assert str(caught.value).startswith(f"{argument} contains text that cannot be stored")
    assert raw.execute("SELECT role, content FROM messages").fetchall() == [("user", "before")]
    assert Session.get_by_id(session.id).message_count == 1
    assert Session.get_by_id(session.id).tool_call_count == 0


def test_append_to_a_missing_session_is_an_integrity_error(database: HermesDatabase) -> None:
    ghost = Session(id="ghost", source="cli", started_at=EPOCH)
    with pytest.raises(peewee.IntegrityError):
        ghost.append("user", "hello")
    assert Message.select().count() == 0


# -- Session.end / reopen ---------------------------------------------------------------


def test_end_first_end_wins_and_reopen_clears_it(database: HermesDatabase) -> None:
    session = SessionFactory()
    assert session.end("user_exit", at=EPOCH + 100) is True
    assert (session.ended_at, session.end_reason) == (EPOCH + 100, "user_exit")
    other = Session.get_by_id(session.id)
    assert other.end("compression", at=EPOCH + 200) is False
    assert (other.ended_at, other.end_reason) == (EPOCH + 100, "user_exit")
    stored = Session.get_by_id(session.id)
    assert (stored.ended_at, stored.end_reason) == (EPOCH + 100, "user_exit")
    session.reopen()
    assert (session.ended_at, session.end_reason) == (None, None)
    stored = Session.get_by_id(session.id)
    assert (stored.ended_at, stored.end_reason) == (None, None)
    assert stored.end("done", at=EPOCH + 300) is True
    assert Session.get_by_id(session.id).end_reason == "done"


@pytest.mark.parametrize(
    ("reason", "at", "error", "argument"),
    [
        ("", None, ValueError, "reason"),
        (None, None, TypeError, "reason"),
        ("done", "yesterday", TypeError, "at"),
        ("done", float("nan"), ValueError, "at"),
    ],
)
def test_end_rejects_bad_arguments(
    database: HermesDatabase, reason: Any, at: Any, error: type[Exception], argument: str
) -> None:
    session = SessionFactory()
    with pytest.raises(error, match=f"^{argument} "):
        session.end(reason, at=at)
    assert Session.get_by_id(session.id).ended_at is None


# -- Message.for_session ----------------------------------------------------------------


def test_for_session_orders_by_id_and_hides_inactive(database: HermesDatabase) -> None:
    session = SessionFactory()
    other = SessionFactory()
    late = MessageFactory(session=session, timestamp=EPOCH + 50)
    early = MessageFactory(session=session, timestamp=EPOCH + 10)
    MessageFactory(session=other)
    hidden = MessageFactory(session=session, timestamp=EPOCH + 60)
    Message.update(active=0).where(Message.id == hidden.id).execute()
    assert [m.id for m in Message.for_session(session.id)] == [late.id, early.id]
    assert [m.id for m in Message.for_session(session.id, include_inactive=True)] == [
        late.id,
        early.id,
        hidden.id,
    ]
    assert isinstance(Message.for_session(session.id), peewee.ModelSelect)


# -- StateMeta ------------------------------------------------------------------------


def test_state_meta_upserts(database: HermesDatabase, raw: sqlite3.Connection) -> None:
    assert StateMeta.get_value("k") is None
    assert StateMeta.get_value("k", "fallback") == "fallback"
    StateMeta.set_value("k", "one")
    StateMeta.set_value("other", "x")
    StateMeta.set_value("k", "two")
    assert StateMeta.get_value("k") == "two"
    StateMeta.set_value("k", None)
    assert StateMeta.get_value("k", "fallback") is None
    assert sorted(raw.execute("SELECT key, value FROM state_meta")) == [
        ("k", None),
        ("other", "x"),
    ]


@pytest.mark.parametrize(
    ("key", "value", "error", "argument"),
    [
        (1, "v", TypeError, "key"),
        ("k", 5, TypeError, "value"),
        ("k", b"bytes", TypeError, "value"),
        ("k\ud800", "v", ValueError, "key"),
        ("k", "v\ud800", ValueError, "value"),
    ],
)
def test_state_meta_rejects_bad_arguments(
    database: HermesDatabase, key: Any, value: Any, error: type[Exception], argument: str
) -> None:
    with pytest.raises(error, match=f"^{argument} "):
        StateMeta.set_value(key, value)
    assert StateMeta.select().count() == 0


def test_state_meta_get_value_rejects_non_text_keys(database: HermesDatabase) -> None:
    with pytest.raises(TypeError, match=r"^key "):
        StateMeta.get_value(5)  # type: ignore[arg-type]


# -- CompressionLock ----------------------------------------------------------------------


def lock_row(session_id: str) -> tuple[str, float, float] | None:
    row = CompressionLock.get_or_none(CompressionLock.session_id == session_id)
    return None if row is None else (row.owner, row.acquired_at, row.expires_at)


def test_lock_acquire_release_and_holder(database: HermesDatabase) -> None:
    before = time.time()
    assert CompressionLock.acquire("s1", "worker-a", ttl=60) is True
    owner, acquired_at, expires_at = lock_row("s1")  # type: ignore[misc]
    assert owner == "worker-a"
    assert before <= acquired_at <= time.time()
    assert expires_at == pytest.approx(acquired_at + 60)
    assert CompressionLock.holder("s1") == "worker-a"
    assert CompressionLock.acquire("s1", "worker-b") is False
    assert CompressionLock.acquire("s2", "worker-b") is True
    CompressionLock.release("s1", "worker-b")
    assert CompressionLock.holder("s1") == "worker-a"
    CompressionLock.release("s1", "worker-a")
    assert CompressionLock.holder("s1") is None
    assert lock_row("s1") is None
    CompressionLock.release("s1", "worker-a")
    assert CompressionLock.holder("s2") == "worker-b"


def test_same_holder_again_succeeds_without_extending(database: HermesDatabase) -> None:
    assert CompressionLock.acquire("s1", "me", ttl=30) is True
    first = lock_row("s1")
    time.sleep(0.01)
    assert CompressionLock.acquire("s1", "me", ttl=3000) is True
    assert lock_row("s1") == first


def test_expired_lock_is_free_for_anyone(database: HermesDatabase) -> None:
    assert CompressionLock.acquire("s1", "slow", ttl=0.05) is True
    time.sleep(0.1)
    assert CompressionLock.holder("s1") is None
    assert CompressionLock.acquire("s1", "fast", ttl=60) is True
    assert CompressionLock.holder("s1") == "fast"
    assert lock_row("s1")[0] == "fast"  # type: ignore[index]
    CompressionLock.release("s1", "slow")
    assert CompressionLock.holder("s1") == "fast"


@pytest.mark.parametrize("empty", ["", None])
def test_empty_session_id_means_no_lock(database: HermesDatabase, empty: Any) -> None:
    assert CompressionLock.acquire(empty, "me") is False
    assert CompressionLock.release(empty, "me") is None
    assert CompressionLock.holder(empty) is None
    assert CompressionLock.select().count() == 0


@pytest.mark.parametrize(
    ("session_id", "holder", "ttl", "error", "argument"),
    [
        ("s1", "me", 0, ValueError, "ttl"),
        ("s1", "me", -5, ValueError, "ttl"),
        ("s1", "me", float("nan"), ValueError, "ttl"),
        ("s1", "me", float("inf"), ValueError, "ttl"),
        ("s1", "me", "300", TypeError, "ttl"),
        ("s1", "me", True, TypeError, "ttl"),
        ("s1", "", 300, ValueError, "holder"),
        ("s1", None, 300, TypeError, "holder"),
        (7, "me", 300, TypeError, "session_id"),
    ],
)
def test_acquire_rejects_bad_arguments(
    database: HermesDatabase,
    session_id: Any,
    holder: Any,
    ttl: Any,
    error: type[Exception],
    argument: str,
) -> None:
    with pytest.raises(error, match=f"^{argument} "):
        CompressionLock.acquire(session_id, holder, ttl=ttl)
    assert CompressionLock.select().count() == 0


def test_release_and_holder_reject_non_text(database: HermesDatabase) -> None:
    CompressionLock.acquire("s1", "me")
    with pytest.raises(TypeError, match=r"^holder "):
        CompressionLock.release("s1", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^session_id "):
        CompressionLock.holder(3)  # type: ignore[arg-type]
    assert CompressionLock.holder("s1") == "me"


def test_acquire_turns_a_database_error_into_false(
    database: HermesDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(CompressionLock, "holder_of", classmethod(broken))
    assert CompressionLock.acquire("s1", "me") is False
    monkeypatch.undo()
    assert CompressionLock.select().count() == 0
    assert CompressionLock.acquire("s1", "me") is True


# -- factories --------------------------------------------------------------------------------


def test_factory_sequences_restart_in_every_test(database: HermesDatabase) -> None:
    first = SessionFactory()
    message = MessageFactory(session=first)
    assert (first.id, first.started_at) == ("session-0000", EPOCH)
    assert (message.content, message.timestamp) == ("message number 0", EPOCH + 1.0)
    assert Session.get_by_id(first.id).message_count == 1


def test_message_factory_builds_its_session_through_the_write_path(
    database: HermesDatabase,
) -> None:
    message = MessageFactory(role="assistant", tool_calls=[{"id": "c"}])
    session = Session.get_by_id(message.session_id)
    assert (session.id, session.message_count, session.tool_call_count) == ("session-0000", 1, 1)
