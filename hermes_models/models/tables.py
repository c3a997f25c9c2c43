"""Peewee models of the Hermes v16 tables.

The fields mirror the schema the migrations create, column for column (a
test compares them). Epoch times are ``DoubleField``; JSON columns are text
with helpers that decode them. Methods here return queries or single rows;
anything that writes goes through :func:`hermes_models.store.binding.write`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import peewee
from peewee import BlobField, DoubleField, ForeignKeyField, IntegerField, TextField, fn

from ..checks import INT64_MAX, check_flag, check_json_depth, check_text, check_ttl
from ..checks import check_epoch as check_epoch  # re-exported: callers import it from here
from ..driver import sqlite3
from ..store import CONTENT_JSON_PREFIX as CONTENT_JSON_PREFIX  # re-exported
from ..store import (
    IMAGE,
    Prepared,
    content_text,
    current,
    database,
    holder_is_gone,
    sqlite_sql,
    write,
)
from ..store import decode_content as decode_content  # re-exported
from . import lineage

if TYPE_CHECKING:
    from typing import Any

logger = logging.getLogger("hermes_models")


#: Message roles Hermes writes.
ROLES = ("system", "user", "assistant", "tool")


def encode_content(content: Any) -> str | None:
    """Message content as stored: text as is, lists and dicts as prefixed JSON."""
    if content is None:
        return None
    if isinstance(content, str):
        if content.startswith(CONTENT_JSON_PREFIX):
            # Encoded as well, so it cannot be mistaken for JSON on the way back.
            return CONTENT_JSON_PREFIX + json.dumps(content, ensure_ascii=False)
        return content
    if isinstance(content, (list, dict)):
        check_json_depth(content, "content")
        try:
            return CONTENT_JSON_PREFIX + json.dumps(content, ensure_ascii=False)
        except TypeError as exc:
            raise TypeError(f"content is not JSON-serialisable: {exc}") from None
    raise TypeError(f"content must be str, list, dict or None, not {type(content).__name__}")


def readable(stored: str | None) -> str:
    """Stored message content as the text search snippets show: the text of
    every part, ``[image]`` for pictures, the JSON when no part has text
    (:func:`hermes_models.store.content.content_text`)."""
    if isinstance(stored, str) and not stored.startswith(CONTENT_JSON_PREFIX):
        return stored  # text, the common case: as stored
    return content_text(decode_content(stored), image=IMAGE, every_part=True, empty=None)


def encode_json(value: Any, argument: str) -> str | None:
    """A JSON column value: None stays NULL, text is kept, anything else is dumped.

    NaN and infinities are refused: SQLite's JSON functions, which read
    these columns, would take the text for invalid JSON.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        check_json_depth(value, argument)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"{argument} is not JSON-serialisable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{argument} cannot be stored as JSON: {exc}") from None


def unencodable_path(value: Any, path: str) -> str | None:
    """Where in ``value`` text sits that UTF-8 cannot encode (a lone surrogate), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    try:
        if isinstance(value, Mapping):
            for key, item in value.items():
                found = unencodable_path(key, f"{path} key {key!r}") or unencodable_path(
                    item, f"{path}[{key!r}]"
                )
                if found:
                    return found
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                found = unencodable_path(item, f"{path}[{index}]")
                if found:
                    return found
    except RecursionError:
        return path
    return None


def unencodable_error(arguments: Mapping[str, Any]) -> ValueError:
    """A ValueError naming the first argument that holds text UTF-8 cannot encode."""
    for name, value in arguments.items():
        found = unencodable_path(value, name)
        if found:
            return ValueError(
                f"{found} contains text that cannot be stored as UTF-8 (a lone surrogate)"
            )
    return ValueError("a value contains text that cannot be stored as UTF-8 (a lone surrogate)")


def decode_json(stored: str | None) -> Any:
    """A JSON column decoded, or the text itself when it is not valid JSON."""
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except (ValueError, RecursionError):
        return stored


class EpochField(DoubleField):
    """Seconds since the epoch (``REAL``, as Hermes stores them); :meth:`BaseModel.save`
    refuses values no date can stand for (see :func:`hermes_models.checks.check_epoch`).

    The field reads as a number. A :class:`~datetime.datetime` or :class:`~datetime.date`
    it is compared with (``Session.started_at > datetime(2026, 11, 1)``) or given
    is turned into seconds: an aware datetime exactly, a naive one as local time (as
    :meth:`datetime.datetime.timestamp` reads it), a date as its local midnight.
    """

    def db_value(self, value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, datetime.date):
            return datetime.datetime(value.year, value.month, value.day).timestamp()
        return super().db_value(value)


class NewerField:
    """Marks a field of a column Hermes added after v16 (see :mod:`hermes_models.store.shape`).

    The migrations never create these columns. A file that has one is read
    through the field; on a file without it the field reads None.
    """


class NewerText(TextField, NewerField):
    """A text column of Hermes v17 or later."""


class NewerInteger(IntegerField, NewerField):
    """An integer column of Hermes v17 or later."""


class NewerDouble(DoubleField, NewerField):
    """A real column of Hermes v17 or later (epoch seconds for ``*_at`` columns)."""


class NewerBlob(BlobField, NewerField):
    """A blob column of Hermes v17 or later."""


def _newer(kind: type[peewee.Field], column: str | None = None) -> Any:
    return kind(null=True, column_name=column)


def stored_fields(model: type[peewee.Model]) -> list[peewee.Field]:
    """The fields of the columns the migrations create (the v16 schema), in table order."""
    return [f for f in model._meta.sorted_fields if not isinstance(f, NewerField)]


_present: dict[tuple[type[Any], tuple[Any, ...]], tuple[peewee.Field, ...]] = {}


def present_fields(model: type[peewee.Model]) -> tuple[peewee.Field, ...] | None:
    """The fields of ``model`` whose columns the bound file has; None when it has them all.

    Read from the structure :func:`hermes_models.connect` probed, so a default
    ``SELECT`` names only columns that exist: one code path reads a v2, a v16
    and a v31 file.
    """
    db = database.obj
    shape = getattr(db, "shape", None)
    table = model._meta.table_name
    if shape is None or table not in shape.columns:
        return None
    key = (model, shape.key)
    found = _present.get(key)
    if found is None:
        columns = set(shape.columns[table])
        found = tuple(f for f in model._meta.sorted_fields if f.column_name in columns)
        if len(_present) > 256:
            _present.clear()
        _present[key] = found
    return None if len(found) == len(model._meta.sorted_fields) else found


def extra_columns(table: str) -> tuple[str, ...]:
    """Columns of ``table`` in the bound file that no model field stands for (a fork's own)."""
    shape = current().shape
    model = {m._meta.table_name: m for m in all_models()}[table]
    known = {f.column_name for f in model._meta.sorted_fields}
    return () if shape is None else tuple(c for c in shape.columns.get(table, ()) if c not in known)


def with_extra(query: Any, model: type[peewee.Model]) -> Any:
    """``query`` (a default ``SELECT`` of ``model``) also reading the file's fork columns,
    for readers that return rows as dicts (as Hermes' ``SELECT *`` does)."""
    names = extra_columns(model._meta.table_name)
    if not names:
        return query
    return query.select_extend(*[peewee.Column(model, name) for name in names])


def absent_column(field: Any, ctx: Any) -> Any:
    """What ``field`` reads as in SQL when the bound file lacks its column, or None
    when the column is there (or this is no place for a value: an INSERT's column
    list, a CREATE). A missing column reads as its default (``active`` 1,
    ``archived`` 0, counters 0) or NULL: an old file opened read-only is read by the
    same statements as a v16 one."""
    if ctx.scope not in (peewee.SCOPE_NORMAL, peewee.SCOPE_SOURCE):
        return None
    shape = getattr(database.obj, "shape", None)
    if shape is None:
        return None
    columns = shape.columns.get(field.model._meta.table_name)
    if columns is None or field.column_name in columns:
        return None
    default = field.default
    if isinstance(default, int) and not isinstance(default, bool):
        return peewee.SQL(str(default))
    return peewee.SQL("NULL")


class _Probed:
    """Mixin of the fields of tables whose columns vary by file (see :func:`absent_column`)."""

    def __sql__(self, ctx: Any) -> Any:
        absent = absent_column(self, ctx)
        return super().__sql__(ctx) if absent is None else ctx.sql(absent)  # type: ignore[misc]


class _ProbedAlias(_Probed):
    """The same for a field of a model alias."""

    field: Any

    def __sql__(self, ctx: Any) -> Any:
        absent = absent_column(self.field, ctx)
        if absent is None:
            return peewee.FieldAlias.__sql__(self, ctx)  # type: ignore[arg-type]
        return ctx.sql(absent)


#: The probed class of each field class, and the alias class of each probed class.
_probed_classes: dict[type[Any], type[Any]] = {}
_alias_classes: dict[type[Any], type[Any]] = {}


def probe_fields(model: type[peewee.Model]) -> None:
    """Make every field of ``model`` read a column the file lacks as its default."""
    for field in model._meta.sorted_fields:
        if isinstance(field, _Probed):
            continue
        kind = _probed_classes.get(type(field))
        if kind is None:
            kind = type(f"Probed{type(field).__name__}", (_Probed, type(field)), {})
            _probed_classes[type(field)] = kind
        field.__class__ = kind


class _Alias(peewee.ModelAlias):
    """An alias whose default ``SELECT`` names only the columns the file has, and whose
    fields read a missing column as its default."""

    def __getattr__(self, attr: str) -> Any:
        found = super().__getattr__(attr)
        if isinstance(found, peewee.FieldAlias) and not isinstance(found, _ProbedAlias):
            # As peewee's FieldAlias.create, with one class per field class (not per call).
            kind = _alias_classes.get(type(found.field))
            if kind is None:
                name = f"ProbedAlias{type(found.field).__name__}"
                kind = type(name, (_ProbedAlias, peewee.FieldAlias, type(found.field)), {})
                _alias_classes[type(found.field)] = kind
            found = kind(self, found.field)
            self.__dict__[attr] = found
        return found

    def get_field_aliases(self) -> list[Any]:
        fields = present_fields(self.model)
        if fields is None:
            return list(super().get_field_aliases())
        return [getattr(self, f.name) for f in fields]


class BaseModel(peewee.Model):
    """Saving writes only the fields changed since the instance was loaded or saved,
    so an instance held across other writes never puts back values it read earlier.

    A ``SELECT`` without fields names only the columns the open file has
    (:func:`present_fields`); fields of columns it lacks read None.
    """

    class Meta:
        database = database
        legacy_table_names = False
        only_save_dirty = True

    @classmethod
    def select(cls, *fields: Any) -> peewee.ModelSelect[Any]:
        if not fields:
            present = present_fields(cls)
            if present is not None:
                return peewee.ModelSelect(cls, present, is_default=True)
        return super().select(*fields)

    @classmethod
    def alias(cls, alias: str | None = None) -> Any:
        return _Alias(cls, alias)

    @property
    def extra(self) -> dict[str, Any]:
        """The columns of this row that no field stands for (a fork's own), by name.

        Empty for files of Hermes' own schemas. Read from the file on each access.
        """
        table = self._meta.table_name
        names = extra_columns(table)
        if not names:
            return {}
        pk = cast("peewee.Field", self._meta.primary_key)
        sql = sqlite_sql.columns_by_key(table, names, pk.column_name)
        row = current().execute_sql(sql, [getattr(self, pk.name)]).fetchone()
        return {} if row is None else dict(zip(names, row))

    def save(self, force_insert: bool = False, only: Any = None) -> Any:
        """Write the changed fields (all of them for an insert).

        Raises:
            ValueError: a time field holds a value no date can stand for.
            TypeError: a time field holds something that is not a number (peewee
                would store text such as ``"yesterday"`` in the REAL column).
        """
        data: dict[str, Any] = self.__data__
        dirty: set[str] = cast("Any", self)._dirty
        for field in self._meta.sorted_fields:
            value = data.get(field.name)
            written = force_insert or field.name in dirty
            if isinstance(field, EpochField) and written and value is not None:
                if isinstance(value, datetime.date):
                    value = data[field.name] = field.db_value(value)
                check_epoch(value, field.name)
        return super().save(force_insert=force_insert, only=only)


class SchemaVersion(BaseModel):
    """The single row holding the Hermes schema version (16)."""

    version = IntegerField()

    class Meta:
        table_name = "schema_version"
        primary_key = False


class Session(BaseModel):
    """One conversation; ``parent`` links branches, continuations and subagent runs."""

    id = TextField(primary_key=True)
    source = TextField()
    user_id = TextField(null=True)
    # Named model_name: ``model`` is taken by peewee model aliases.
    model_name = TextField(null=True, column_name="model")
    model_config = TextField(null=True)
    system_prompt = TextField(null=True)
    parent = ForeignKeyField(
        "self", null=True, backref="children", column_name="parent_session_id", lazy_load=True
    )
    started_at = EpochField()
    ended_at = EpochField(null=True)
    end_reason = TextField(null=True)
    message_count = IntegerField(null=True, default=0)
    tool_call_count = IntegerField(null=True, default=0)
    input_tokens = IntegerField(null=True, default=0)
    output_tokens = IntegerField(null=True, default=0)
    cache_read_tokens = IntegerField(null=True, default=0)
    cache_write_tokens = IntegerField(null=True, default=0)
    reasoning_tokens = IntegerField(null=True, default=0)
    cwd = TextField(null=True)
    git_branch = TextField(null=True)
    billing_provider = TextField(null=True)
    billing_base_url = TextField(null=True)
    billing_mode = TextField(null=True)
    estimated_cost_usd = DoubleField(null=True)
    actual_cost_usd = DoubleField(null=True)
    cost_status = TextField(null=True)
    cost_source = TextField(null=True)
    pricing_version = TextField(null=True)
    title = TextField(null=True)
    api_call_count = IntegerField(null=True, default=0)
    handoff_state = TextField(null=True)
    handoff_platform = TextField(null=True)
    handoff_error = TextField(null=True)
    rewind_count = IntegerField(default=0)
    archived = IntegerField(default=0)
    # Columns of Hermes v17-v31 (docs/newer-hermes.md); None where
    # the file lacks them. Files that have them are opened read-only.
    runtime_revision = _newer(NewerInteger)
    runtime_generation = _newer(NewerInteger)
    created_source = _newer(NewerText)
    session_key = _newer(NewerText)
    chat_id = _newer(NewerText)
    chat_type = _newer(NewerText)
    thread_id = _newer(NewerText)
    display_name = _newer(NewerText)
    origin_json = _newer(NewerText)
    expiry_finalized = _newer(NewerInteger)
    system_prompt_hash = _newer(NewerText)
    git_repo_root = _newer(NewerText)
    git_metadata_generation = _newer(NewerInteger)
    title_source = _newer(NewerText)
    last_activity_at = _newer(NewerDouble)
    last_activity_description = _newer(NewerText)
    last_activity_provenance = _newer(NewerText)
    compression_failure_cooldown_until = _newer(NewerDouble)
    compression_failure_error = _newer(NewerText)
    compression_fallback_streak = _newer(NewerInteger)
    compression_ineffective_count = _newer(NewerInteger)
    compression_recovery_deadline = _newer(NewerDouble)
    compression_overload_streak = _newer(NewerInteger)
    profile_name = _newer(NewerText)
    transport_profile = _newer(NewerText)
    pinned = _newer(NewerInteger)
    hidden = _newer(NewerInteger)
    auto_archived = _newer(NewerInteger)
    last_read_at = _newer(NewerDouble)
    tool_names = _newer(NewerText)

    class Meta:
        table_name = "sessions"

    parent_session_id: str | None

    def __str__(self) -> str:
        return f"Session({self.id!r})"

    @property
    def prompt(self) -> str | None:
        """The system prompt: through ``system_prompt_hash`` on files of Hermes v25 and
        later (where ``system_prompt`` is NULL), else ``system_prompt`` itself."""
        row = resolve_prompts(
            {"system_prompt": self.system_prompt, "system_prompt_hash": self.system_prompt_hash}
        )
        return cast("str | None", row["system_prompt"])

    @property
    def config(self) -> dict[str, Any]:
        """``model_config`` decoded; ``{}`` when empty or not a JSON object."""
        value = decode_json(self.model_config)
        return value if isinstance(value, dict) else {}

    # -- lineage: queries ------------------------------------------------------

    @property
    def kind(self) -> str:
        """``'root'``, ``'branch'``, ``'compression'`` or ``'ephemeral'``."""
        return lineage.kind_of(self)

    def ancestors(self) -> peewee.ModelSelect[Session]:
        """The parent chain, nearest first (cycle-safe)."""
        return lineage.ancestors(type(self), self.id)

    def root(self) -> Session:
        """The oldest ancestor, or this session when it has no parent."""
        return cast("Session", lineage.root_of(self))

    def descendants(self) -> peewee.ModelSelect[Session]:
        """Every session below this one, nearest first (cycle-safe)."""
        return lineage.descendants(type(self), self.id)

    def branches(self) -> peewee.ModelSelect[Session]:
        """Children that are /branch forks."""
        return lineage.children_of_kind(type(self), self.id, "branch")

    def compression_children(self) -> peewee.ModelSelect[Session]:
        """Children that continue this session after a context compression."""
        return lineage.children_of_kind(type(self), self.id, "compression")

    def ephemeral_children(self) -> peewee.ModelSelect[Session]:
        """Children that are delegated subagent runs."""
        return lineage.children_of_kind(type(self), self.id, "ephemeral")

    def compression_tip(self) -> Session:
        """The latest continuation of this session's compression chain (this session
        when it has none)."""
        tip = _load(type(self), _TIP_ROW.execute(current(), start=self.id))
        return self if tip is None or tip.id == self.id else tip

    def resume_target(self) -> Session:
        """The session a /resume of this one should open."""
        target = resume_target_id(type(self), self.id)
        if target is None or target == self.id:
            return self
        found = _load(type(self), _BY_ID.execute(current(), subquery=target))
        return found or self

    @classmethod
    def listable(cls) -> peewee.ModelSelect[Session]:
        """Sessions a picker shows: roots and branches, not ephemeral, not archived.

        A compression chain is here by its root; ``hermes-models sessions`` and
        ``SessionDB.list_sessions_rich`` show each chain once, by its tip (the
        latest continuation), and leave Hermes' internal sources out."""
        return cls.select().where(lineage.listable_expr(cls), cls.archived == 0)

    # -- actions -----------------------------------------------------------------
    # Each action writes through the rules of its noun, then reloads this instance
    # from its row: what it shows afterwards is what the file holds. The rules live
    # in the parts built on these models (conversations, search) and reach the
    # models as ``Rules`` (see :func:`use_rules`).

    def refresh(self) -> Session:
        """Reload from the row every field not changed on this instance since it was
        loaded or saved (changes not yet saved stay, and stay to be saved).

        Raises:
            Session.DoesNotExist: the row was deleted.
        """
        cls = type(self)
        fresh = cls.get_or_none(cls.id == self.id)
        if fresh is None:
            raise cast("Any", cls).DoesNotExist(f"session {self.id!r} no longer exists")
        data: dict[str, Any] = self.__data__
        dirty: set[str] = cast("Any", self)._dirty
        for name, value in fresh.__data__.items():
            if name not in dirty:
                data[name] = value
        if "parent" not in dirty:
            self.__rel__.pop("parent", None)
        return self

    def append(self, role: str, content: Any = None, **fields: Any) -> Message:
        """Append a message and update this session's counters."""
        message_id = rules().append_message(self.id, role, content, **fields)
        self.refresh()
        return Message.get_by_id(message_id)

    def end(self, reason: str, *, at: float | None = None) -> bool:
        """End this session with ``reason``; the first end wins. True if this call ended it."""
        check_text(reason, "reason", empty=False)
        ended_at = time.time() if at is None else check_epoch(at, "at")
        cls = type(self)

        def run() -> int:
            return int(
                cls.update(ended_at=ended_at, end_reason=reason)
                .where(cls.id == self.id, cls.ended_at.is_null())
                .execute()
            )

        changed = write(run) > 0
        self.refresh()
        return changed

    def reopen(self) -> None:
        """Clear ``ended_at`` and ``end_reason`` so the session can be continued."""
        cls = type(self)
        write(lambda: cls.update(ended_at=None, end_reason=None).where(cls.id == self.id).execute())
        self.refresh()

    def branch(self, **options: Any) -> Session:
        """Fork this session (see :func:`hermes_models.conversations.children.branch`)."""
        child = rules().branch(self, **options)
        self.refresh()
        return child

    def compress(self, summary_messages: Sequence[dict[str, Any]], **options: Any) -> Session:
        """Continue this session in a new one holding ``summary_messages``."""
        child = rules().compress(self, summary_messages, **options)
        self.refresh()
        return child

    def delegate(self, **options: Any) -> Session:
        """Start a subagent run under this session (a child tagged ``_delegate_from``)."""
        child = rules().delegate(self, **options)
        self.refresh()
        return child

    def rewind_to(self, user_message_id: int) -> int:
        """Soft-delete a user message and everything after it; returns how many."""
        count = rules().rewind_to_message(self.id, user_message_id)
        self.refresh()
        return count

    def restore_rewound(self, since_id: int) -> int:
        """Reactivate soft-deleted messages from ``since_id`` on; returns how many."""
        count = rules().restore_rewound(self.id, since_id, argument="since_id")
        self.refresh()
        return count


class Message(BaseModel):
    """One message of a session; ``active = 0`` marks it soft-deleted."""

    id = peewee.AutoField()
    session = ForeignKeyField(Session, backref="messages", column_name="session_id")
    role = TextField()
    content = TextField(null=True)
    tool_call_id = TextField(null=True)
    tool_calls = TextField(null=True)
    tool_name = TextField(null=True)
    timestamp = EpochField()
    token_count = IntegerField(null=True)
    finish_reason = TextField(null=True)
    reasoning = TextField(null=True)
    reasoning_content = TextField(null=True)
    reasoning_details = TextField(null=True)
    codex_reasoning_items = TextField(null=True)
    codex_message_items = TextField(null=True)
    platform_message_id = TextField(null=True)
    observed = IntegerField(null=True, default=0)
    active = IntegerField(default=1)
    # Columns of Hermes v17-v31 (see Session); None where the file lacks them.
    effect_disposition = _newer(NewerText)
    compressed_summary = _newer(NewerInteger, "_compressed_summary")
    compacted = _newer(NewerInteger)
    api_content = _newer(NewerText)
    display_kind = _newer(NewerText)
    display_metadata = _newer(NewerText)
    display_identity = _newer(NewerBlob)
    display_order = _newer(NewerInteger)
    message_uid = _newer(NewerText)
    absorbed_message_uids = _newer(NewerText)
    tool_call_uids = _newer(NewerText)
    tool_call_uid = _newer(NewerText)

    class Meta:
        table_name = "messages"

    session_id: str

    @property
    def value(self) -> Any:
        """The content as appended (lists and dicts decoded)."""
        return decode_content(self.content)

    @property
    def calls(self) -> list[Any]:
        """``tool_calls`` decoded (the column keeps the JSON text, as Hermes stores it);
        ``[]`` when there are none or the text is not a JSON list."""
        value = decode_json(self.tool_calls)
        return value if isinstance(value, list) else []

    @classmethod
    def for_session(
        cls, session_id: str, include_inactive: bool = False
    ) -> peewee.ModelSelect[Message]:
        """Messages of a session ordered by id; soft-deleted ones only when asked."""
        check_text(session_id, "session_id")
        query = cls.select().where(cls.session == session_id)
        if not check_flag(include_inactive, "include_inactive"):
            query = query.where(cls.active == 1)
        return query.order_by(cls.id)

    @classmethod
    def search(cls, query: str, **options: Any) -> list[dict[str, Any]]:
        """Full-text search over messages (see
        :func:`hermes_models.search.pipeline.search_messages`)."""
        return rules().search_messages(query, **options)

    @classmethod
    def matching(cls, query: str, *, include_inactive: bool = False) -> peewee.ModelSelect[Message]:
        """The messages matching ``query`` as a peewee query to filter, order and page
        further, as playhouse's ``FTS5Model.search`` returns one (see
        :func:`hermes_models.search.pipeline.matching`; SQLite stores)."""
        return rules().matching(query, include_inactive=include_inactive)


class SystemPrompt(BaseModel):
    """``system_prompts`` of Hermes v25 and later: prompt texts by SHA-256 hash.

    The migrations never create this table; it exists in newer Hermes files,
    where ``sessions.system_prompt`` is NULL and ``system_prompt_hash`` points here.
    """

    hash = TextField(primary_key=True)
    prompt = TextField()

    class Meta:
        table_name = "system_prompts"


# -- following children: the compression tip and the resume target ----------------------
# Rendered once (Prepared): they run on every /resume and listing.


def _tip_query(start: str) -> Any:
    cte = lineage.descend(Session, start, compression_only=True, hops=lineage.TIP_MAX_HOPS)
    return cte.select_from(cte.c.id).order_by(cte.c.depth.desc()).limit(1)


def _resume_query(tip: str) -> Any:
    cte = lineage.descend(Session, tip, compression_only=False, hops=lineage.RESUME_MAX_DEPTH)
    # Any message row, rewound ones too, as Hermes v16 counts them.
    has_message = peewee.fn.EXISTS(
        Message.select(peewee.SQL("1")).where(Message.session == cte.c.id)
    )
    return cte.select_from(cte.c.id).where(has_message).order_by(cte.c.depth).limit(1)


def _session_where_id_is(subquery: Any) -> Any:
    return Session.select().where(Session.id == subquery)


_TIP = Prepared(_tip_query, "start")
_RESUME = Prepared(_resume_query, "tip")
_TIP_ROW = Prepared(lambda start: _session_where_id_is(_tip_query(start)), "start")
_BY_ID = Prepared(_session_where_id_is, "subquery")


def _load(model: type[Session], cursor: Any) -> Session | None:
    """The model instance of the first row of ``cursor`` (a ``SELECT *`` of sessions)."""
    row = cursor.fetchone()
    if row is None:
        return None
    names = {field.column_name: field.name for field in model._meta.sorted_fields}
    columns = [names.get(column[0]) for column in cursor.description]
    values = {name: value for name, value in zip(columns, row) if name is not None}
    instance = model(__no_default__=1, **values)
    cast("Any", instance)._dirty.clear()  # loaded, not changed
    return instance


def compression_tip_id(model: type[Session], session_id: str) -> str | None:
    """Id of the latest continuation of ``session_id``'s compression chain.

    While the current session ended with ``'compression'``, step to its most
    recently started child that started at or after that end and is not a
    branch or subagent; at most :data:`~hermes_models.models.lineage.TIP_MAX_HOPS` steps. None for
    an
    unknown id.
    """
    row = _TIP.execute(current(), start=session_id).fetchone()
    return None if row is None else str(row[0])


def resume_target_id(model: type[Session], session_id: str) -> str | None:
    """Id of the session a /resume of ``session_id`` opens; None when unknown.

    The compression tip when it has a message (rewound ones count, as in
    Hermes); else, walking down at most :data:`~hermes_models.models.lineage.RESUME_MAX_DEPTH`
    levels
    through the most recently started child that is not a branch or
    subagent, the first session with a message; else the tip.
    """
    tip_id = compression_tip_id(model, session_id)
    if tip_id is None:
        return None
    row = _RESUME.execute(current(), tip=tip_id).fetchone()
    return tip_id if row is None else str(row[0])


# -- the rules the actions run ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rules:
    """The functions the models' actions run (``Session.append`` and the others): the
    rules of conversations and search, which are built on these models. The package
    hands them over once, on import (:func:`use_rules`), so that the models import
    nothing above themselves."""

    append_message: Callable[..., int]
    branch: Callable[..., Session]
    compress: Callable[..., Session]
    delegate: Callable[..., Session]
    rewind_to_message: Callable[[str, int], int]
    restore_rewound: Callable[..., int]
    search_messages: Callable[..., list[dict[str, Any]]]
    matching: Callable[..., peewee.ModelSelect[Message]]


_RULES: list[Rules] = []


def use_rules(given: Rules) -> None:
    """Make ``given`` the rules the models' actions run (the package does it on import)."""
    _RULES[:] = [given]


def rules() -> Rules:
    """The rules the models' actions run.

    Raises:
        RuntimeError: none were handed over (the package's ``__init__`` does it).
    """
    if not _RULES:
        raise RuntimeError("the models' actions have no rules: import hermes_models first")
    return _RULES[0]


def _looks_like_hash(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def recency(x: Any, latest: Any) -> Any:
    """When session ``x`` was last active (an expression; ``latest`` an alias of
    :class:`Message`): its newest message, else its start; on files with Hermes'
    activity heartbeat (v24+) the later of that and ``last_activity_at``."""
    newest = fn.COALESCE(
        latest.select(fn.MAX(latest.timestamp)).where(latest.session == x.id), x.started_at
    )
    shape = getattr(current(), "shape", None)
    if shape is not None and shape.has("sessions", "last_activity_at"):
        return fn.MAX(newest, fn.COALESCE(x.last_activity_at, newest))
    return newest


def resolve_prompts(row: dict[str, Any]) -> dict[str, Any]:
    """A session row with its system prompt (and tool list) read as Hermes v25+ reads them.

    ``system_prompt`` becomes the text ``system_prompt_hash`` points to in
    ``system_prompts``, the column's own value as the fallback; a
    ``tool_names`` holding the hash of a stored tool list becomes that list's
    text. Rows of files without ``system_prompts`` come back unchanged.
    """
    resolve_prompts_of([row])
    return row


#: Markers Hermes v31 lifts out of ``model_config`` into the session rows it returns.
LIFTED_MARKERS = ("_reset_from", "_branched_from")


def lift_markers(row: dict[str, Any]) -> None:
    """Put the /new and /branch markers of ``row``'s ``model_config`` beside its
    columns, as Hermes v31 returns session rows: each that is non-empty text, stripped."""
    config = row.get("model_config")
    if isinstance(config, str) and config:
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return
    if not isinstance(config, dict):
        return
    for key in LIFTED_MARKERS:
        value = config.get(key)
        if isinstance(value, str) and value.strip() and not row.get(key):
            row[key] = value.strip()


def resolve_prompts_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`resolve_prompts` of every row, with one query for all of them; on files
    of schema 31 and later each row's markers are lifted too (:func:`lift_markers`)."""
    shape = current().shape
    if shape is not None and shape.rules_version >= 31:
        for row in rows:
            lift_markers(row)
    if shape is None or "system_prompts" not in shape.tables or not rows:
        return rows
    wanted = {h for row in rows for h in (row.get("system_prompt_hash"), row.get("tool_names"))}
    hashes = sorted(str(h) for h in wanted if _looks_like_hash(h))
    if not hashes:
        return rows
    found = dict(
        SystemPrompt.select(SystemPrompt.hash, SystemPrompt.prompt)
        .where(SystemPrompt.hash.in_(hashes))
        .tuples()
    )
    for row in rows:
        prompt = found.get(row.get("system_prompt_hash"))
        if prompt is not None:
            row["system_prompt"] = prompt
        tools = found.get(row.get("tool_names"))
        if tools is not None:
            row["tool_names"] = tools
    return rows


#: The ``state_meta`` key holding when ``maybe_auto_prune_and_vacuum`` last ran.
AUTO_PRUNE_KEY = "last_auto_prune"


class StateMeta(BaseModel):
    """Free-form key/value metadata of the store."""

    key = TextField(primary_key=True)
    value = TextField(null=True)

    class Meta:
        table_name = "state_meta"

    @classmethod
    def get_value(cls, key: str, default: str | None = None) -> str | None:
        """The value stored under ``key``, or ``default``."""
        check_text(key, "key")
        row = _META_VALUE.first(current(), key=key)
        return default if row is None else row[0]

    @classmethod
    def set_value(cls, key: str, value: str | None) -> None:
        """Store ``value`` under ``key``, replacing what was there."""
        check_text(key, "key")
        check_text(value, "value", optional=True)
        db = current()
        write(lambda: _META_UPSERT.execute(db, key=key, value=value), db=db)


# Meta reads and writes run on every agent turn: rendered once (see Prepared).
_META_VALUE = Prepared(
    lambda key: StateMeta.select(StateMeta.value).where(StateMeta.key == key), "key"
)
_META_UPSERT = Prepared(
    lambda key, value: StateMeta.insert(key=key, value=value).on_conflict(
        conflict_target=[StateMeta.key], preserve=[StateMeta.value]
    ),
    "key",
    "value",
)


class CompressionLock(BaseModel):
    """A lease that lets one process at a time compress a session."""

    session_id = TextField(primary_key=True)
    owner = TextField(column_name="holder")
    acquired_at = EpochField()
    expires_at = EpochField()

    class Meta:
        table_name = "compression_locks"

    @classmethod
    def acquire(cls, session_id: str, holder: str, ttl: float = 300.0) -> bool:
        """Take the lock for ``holder``; True iff it is now ours.

        An expired lease is dropped first, and so is the lease of a holder
        made by :func:`hermes_models.store.holders.local_holder` whose process is
        provably gone (killed on this host). Taking a lock already held by
        the same holder succeeds without extending it. Any database error
        counts as not acquired.
        """
        if _lock_key(session_id) is None:
            return False
        if _check_holder(holder) == "":
            raise ValueError("holder must not be empty")
        ttl = check_ttl(ttl)
        reclaimed: list[str] = []

        def run() -> bool:
            reclaimed.clear()
            now = time.time()
            cls.delete().where(cls.session_id == session_id, cls.expires_at < now).execute()
            other = cls.holder_of(session_id, now)
            if other is not None and other != holder and holder_is_gone(other):
                cls.delete().where(cls.session_id == session_id, cls.owner == other).execute()
                reclaimed.append(other)
            cls.insert(
                session_id=session_id, owner=holder, acquired_at=now, expires_at=now + ttl
            ).on_conflict_ignore().execute()
            return cls.holder_of(session_id, now) == holder

        try:
            won = write(run)
        except (peewee.DatabaseError, sqlite3.Error) as exc:
            logger.warning("could not take the compression lock of session %s: %s", session_id, exc)
            return False
        for gone in reclaimed:
            logger.warning(
                "took over the compression lock of session %s from %s, whose process is gone",
                session_id,
                gone,
            )
        return won

    @classmethod
    def release(cls, session_id: str, holder: str) -> None:
        """Drop the lock if ``holder`` has it; otherwise do nothing."""
        if _lock_key(session_id) is None or not _check_holder(holder):
            return
        write(
            lambda: cls.delete().where(cls.session_id == session_id, cls.owner == holder).execute()
        )

    @classmethod
    def holder(cls, session_id: str) -> str | None:
        """Who holds the lock now; None when nobody does or the lease expired."""
        if _lock_key(session_id) is None:
            return None
        return cls.holder_of(session_id, time.time())

    @classmethod
    def holder_of(cls, session_id: str, now: float) -> str | None:
        """Who holds the lock at time ``now``."""
        row = (
            cls.select(cls.owner)
            .where(cls.session_id == session_id, cls.expires_at >= now)
            .tuples()
            .first()
        )
        return None if row is None else str(row[0])


def check_increments(session_id: str, increments: Mapping[Any, int | float]) -> None:
    """Refuse, inside the caller's write, increments of ``Session`` counters that would
    take an integer past 2**63-1 (SQLite would store it as an inexact float) or a
    cost past the largest float.

    Raises:
        ValueError: naming the counter, its value and the increment.
    """
    fields = [field for field, amount in increments.items() if amount]
    if not fields:
        return
    row = Session.select(*fields).where(Session.id == session_id).tuples().first()
    if row is None:
        return
    for field, stored in zip(fields, row):
        if isinstance(stored, bool) or not isinstance(stored, (int, float)):
            continue
        amount = increments[field]
        total = stored + amount
        if isinstance(field, IntegerField) and isinstance(stored, int) and total > INT64_MAX:
            raise ValueError(
                f"{field.column_name}: adding {amount} to {stored} would pass 2**63-1, "
                "the largest integer SQLite stores"
            )
        if isinstance(total, float) and not math.isfinite(total):
            raise ValueError(f"{field.column_name}: adding {amount} to {stored} overflows")


def _lock_key(session_id: Any) -> str | None:
    """A lock's session id; None for None or "" (callers treat that as no lock)."""
    if session_id is None or session_id == "":
        return None
    return check_text(session_id, "session_id")


def _check_holder(holder: Any) -> str:
    return str(check_text(holder, "holder"))


probe_fields(Session)
probe_fields(Message)


def all_models() -> Iterable[type[BaseModel]]:
    """The table models, in the order their tables are created."""
    return (SchemaVersion, Session, Message, StateMeta, CompressionLock)
