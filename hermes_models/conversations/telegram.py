"""Telegram DM topic mode: private chats that opted in, and the topic each session lives in.

The two tables exist only once topic mode was first used: they come from
the opt-in migration set ``migrations/telegram_topics`` (see
:func:`hermes_models.store.schema.migrate_optional`), or on a PostgreSQL store
``migrations/postgresql/telegram_topics`` (the same id and tables, see
:func:`hermes_models.store.postgres.migrate`), which :func:`apply` applies.
Enabling topic mode and binding a topic apply it first; every read works on
a store without the tables and answers "nothing" (None, ``[]``, False), and
disabling is then a no-op.

A session is bound to at most one (chat, thread); binding it elsewhere is
refused. Deleting a session drops its binding (``ON DELETE CASCADE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import peewee
from peewee import SQL, CompositeKey, DoubleField, ForeignKeyField, IntegerField, TextField, fn

from ..checks import check_flag, check_int64, check_key
from ..driver import sqlite3
from ..errors import ReadOnlyDatabaseError
from ..models import BaseModel, Session
from ..store import (
    TELEGRAM_TOPICS,
    current,
    fetch_dicts,
    migrate_optional,
    migration_hash,
    migration_ids,
    newer_file,
    postgres,
    postgres_sql,
    refuse_newer_schema,
    sqlite_sql,
    write,
)
from .listing import enriched_sessions

if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")


class TelegramTopicMode(BaseModel):
    """A private chat that turned topic mode on (or off again)."""

    chat_id = TextField(primary_key=True)
    user_id = TextField()
    enabled = IntegerField(default=1)
    activated_at = DoubleField()
    updated_at = DoubleField()
    has_topics_enabled = IntegerField(null=True)
    allows_users_to_create_topics = IntegerField(null=True)
    capability_checked_at = DoubleField(null=True)
    intro_message_id = TextField(null=True)
    pinned_message_id = TextField(null=True)

    class Meta:
        table_name = "telegram_dm_topic_mode"


class TelegramTopicBinding(BaseModel):
    """One topic thread of a chat and the session it continues."""

    chat_id = TextField()
    thread_id = TextField()
    user_id = TextField()
    session_key = TextField()
    session = ForeignKeyField(Session, backref="+", column_name="session_id", on_delete="CASCADE")
    managed_mode = TextField(default="auto")
    linked_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        table_name = "telegram_dm_topic_bindings"
        primary_key = CompositeKey("chat_id", "thread_id")


#: What a session already bound elsewhere is refused with.
ALREADY_LINKED = "session is already linked to another Telegram topic"


#: PostgreSQL's SQLSTATE for a table that does not exist (undefined_table).
_UNDEFINED_TABLE = "42P01"


def _missing_table(exc: BaseException) -> bool:
    """True when ``exc`` says the topic tables were never created: SQLite's "no
    such table", PostgreSQL's undefined_table."""
    if isinstance(exc, peewee.ProgrammingError):
        return getattr(getattr(exc, "orig", None), "sqlstate", None) == _UNDEFINED_TABLE
    return isinstance(exc, (sqlite3.OperationalError, peewee.OperationalError)) and (
        "no such table" in str(exc)
    )


#: What a read of the tables may raise when they do not exist (on either backend).
_READ_ERRORS = (sqlite3.OperationalError, peewee.OperationalError, peewee.ProgrammingError)


def _read(fn: Callable[[], T]) -> T:
    """``fn()``; inside a transaction on PostgreSQL, in a savepoint, so that a
    missing table fails the read alone, not the caller's transaction."""
    db = current()
    if db.dialect == "postgresql" and db.in_transaction():
        with db.atomic():
            return fn()
    return fn()


def _flag(value: Any, argument: str) -> int | None:
    return None if value is None else int(check_flag(value, argument))


def apply() -> list[str]:
    """Create the topic-mode tables (idempotent); returns the migration ids applied.

    Raises:
        SchemaTooNewError: the file is newer than the v16 schema this package writes.
        ReadOnlyDatabaseError: the store was opened read-only.
    """
    db = current()
    refuse_newer_schema(db.path, db.shape, "setting up topic mode")
    if db.read_only:
        raise ReadOnlyDatabaseError(f"{db.path} was opened read-only; topic mode cannot be set up")
    if db.dialect == "postgresql":
        server = cast("postgres.PostgresDatabase", db)
        if _applied_on_server(server):
            return []
        return postgres.migrate(server.url, optional=TELEGRAM_TOPICS)
    return migrate_optional(db.path, TELEGRAM_TOPICS)


def _applied_on_server(db: Any) -> bool:
    """True when the store on a server has every migration of the topic set: one
    read, where applying takes yoyo's lock and two connections of its own."""

    folder = postgres.optional_migrations_dir(TELEGRAM_TOPICS)
    wanted = [migration_hash(migration_id) for migration_id in migration_ids(folder)]
    try:
        found = _read(
            lambda: db.execute_sql(postgres_sql.applied_among(None), (wanted,)).fetchall()
        )
    except _READ_ERRORS:
        return False
    return len(found) == len(wanted)


def enable(
    chat_id: Any,
    user_id: Any,
    has_topics_enabled: bool | None = None,
    allows_users_to_create_topics: bool | None = None,
) -> None:
    """Turn topic mode on for a chat (creating the tables first); the first
    activation time is kept, the capabilities are replaced."""
    chat, user = check_key(chat_id, "chat_id"), check_key(user_id, "user_id")
    topics = _flag(has_topics_enabled, "has_topics_enabled")
    creating = _flag(allows_users_to_create_topics, "allows_users_to_create_topics")
    apply()
    now = time.time()
    mode = TelegramTopicMode
    query = mode.insert(
        chat_id=chat,
        user_id=user,
        enabled=1,
        activated_at=now,
        updated_at=now,
        has_topics_enabled=topics,
        allows_users_to_create_topics=creating,
        capability_checked_at=now,
    ).on_conflict(
        conflict_target=[mode.chat_id],
        update={
            mode.user_id: user,
            mode.enabled: 1,
            mode.updated_at: now,
            mode.has_topics_enabled: topics,
            mode.allows_users_to_create_topics: creating,
            mode.capability_checked_at: now,
        },
    )
    write(query.execute)


def disable(chat_id: Any, clear_bindings: bool = True) -> None:
    """Turn topic mode off for a chat, dropping its bindings unless ``clear_bindings=False``."""
    chat = check_key(chat_id, "chat_id")
    clear = check_flag(clear_bindings, "clear_bindings")

    def run() -> None:
        TelegramTopicMode.update(enabled=0, updated_at=time.time()).where(
            TelegramTopicMode.chat_id == chat
        ).execute()
        if clear:
            TelegramTopicBinding.delete().where(TelegramTopicBinding.chat_id == chat).execute()

    try:
        write(run)
    except _READ_ERRORS as exc:
        if not _missing_table(exc):
            raise


def is_enabled(chat_id: Any, user_id: Any) -> bool:
    """True when the chat turned topic mode on and the user matches."""
    chat, user = check_key(chat_id, "chat_id"), check_key(user_id, "user_id")
    query = TelegramTopicMode.select(TelegramTopicMode.enabled).where(
        TelegramTopicMode.chat_id == chat, TelegramTopicMode.user_id == user
    )
    try:
        row = _read(query.tuples().first)
    except _READ_ERRORS as exc:
        if _missing_table(exc):
            return False
        raise
    return bool(row and row[0])


def _later_columns() -> list[str]:
    """Columns a later Hermes added to the bindings table (``profile_name``, v31), read
    from the file: a binding is returned with every column, as Hermes' ``SELECT *``."""
    if not newer_file():
        return []
    info = current().execute_sql(sqlite_sql.table_info(TelegramTopicBinding._meta.table_name))
    known = {f.column_name for f in TelegramTopicBinding._meta.sorted_fields}
    return [str(row[1]) for row in info.fetchall() if row[1] not in known]


def _bindings(*conditions: Any, order: Any = None) -> list[dict[str, Any]]:
    query = TelegramTopicBinding.select().where(*conditions)
    later = _later_columns()
    if later:
        query = query.select_extend(*[peewee.Column(TelegramTopicBinding, c) for c in later])
    if order is not None:
        query = query.order_by(order)
    try:
        return _read(lambda: fetch_dicts(query))
    except _READ_ERRORS as exc:
        if _missing_table(exc):
            return []
        raise


def binding(chat_id: Any, thread_id: Any) -> dict[str, Any] | None:
    """The binding of one topic thread, or None."""
    chat, thread = check_key(chat_id, "chat_id"), check_key(thread_id, "thread_id")
    rows = _bindings(TelegramTopicBinding.chat_id == chat, TelegramTopicBinding.thread_id == thread)
    return rows[0] if rows else None


def bindings_for_chat(chat_id: Any) -> list[dict[str, Any]]:
    """Every binding of a chat, most recently updated first."""
    chat = check_key(chat_id, "chat_id")
    return _bindings(
        TelegramTopicBinding.chat_id == chat, order=TelegramTopicBinding.updated_at.desc()
    )


def binding_of_session(session_id: Any) -> dict[str, Any] | None:
    """The binding of a session, or None."""
    rows = _bindings(TelegramTopicBinding.session == check_key(session_id, "session_id"))
    return rows[0] if rows else None


def bind(
    chat_id: Any,
    thread_id: Any,
    user_id: Any,
    session_key: Any,
    session_id: Any,
    managed_mode: str = "auto",
) -> None:
    """Bind a topic thread to a session (creating the tables first).

    Binding the same pair again updates it; a thread bound to another
    session is moved to this one.

    Raises:
        ValueError: the session is bound to another (chat, thread).
        sqlite3.IntegrityError: there is no session ``session_id``.
    """
    chat, thread = check_key(chat_id, "chat_id"), check_key(thread_id, "thread_id")
    user, key = check_key(user_id, "user_id"), check_key(session_key, "session_key")
    session = check_key(session_id, "session_id")
    mode = check_key(managed_mode, "managed_mode")
    apply()
    now = time.time()
    table = TelegramTopicBinding

    def run() -> None:
        held = (
            table.select(table.chat_id, table.thread_id)
            .where(table.session == session)
            .tuples()
            .first()
        )
        if held is not None and tuple(held) != (chat, thread):
            raise ValueError(ALREADY_LINKED)
        table.insert(
            chat_id=chat,
            thread_id=thread,
            user_id=user,
            session_key=key,
            session=session,
            managed_mode=mode,
            linked_at=now,
            updated_at=now,
        ).on_conflict(
            conflict_target=[table.chat_id, table.thread_id],
            update={
                table.user_id: user,
                table.session_key: key,
                table.session: session,
                table.managed_mode: mode,
                table.updated_at: now,
            },
        ).execute()

    write(run)


def is_linked(session_id: Any) -> bool:
    """True when the session is bound to a topic."""
    return binding_of_session(session_id) is not None


def unlinked_sessions(chat_id: Any, user_id: Any, limit: int = 10) -> list[dict[str, Any]]:
    """The user's Telegram sessions bound to no topic, most recently active first.

    Rows carry ``preview`` and ``last_active``. As in Hermes, the sessions
    are those of the user on any chat (``chat_id`` only has to be valid).
    """
    check_key(chat_id, "chat_id")
    user = check_key(user_id, "user_id")
    limit = check_int64(limit, "limit", minimum=0)

    def terms(s: Any, unbound: bool) -> list[Any]:
        found = [s.source == "telegram", s.user_id == user]
        if unbound:
            bound = TelegramTopicBinding.select(SQL("1")).where(
                TelegramTopicBinding.session == s.id
            )
            found.append(~fn.EXISTS(bound))
        return found

    def order(s: Any) -> tuple[Any, ...]:
        return (SQL('"last_active"').desc(), s.started_at.desc(), s.id.desc())

    try:
        return _read(lambda: enriched_sessions(lambda s: terms(s, True), order=order, limit=limit))
    except _READ_ERRORS as exc:
        if not _missing_table(exc):
            raise
    return enriched_sessions(lambda s: terms(s, False), order=order, limit=limit)
