"""``SessionDB``: the Hermes session store API, returning plain dicts.

Code written against Hermes' own ``SessionDB`` keeps working: the method
names, arguments and return shapes are the same, rows come back as dicts of
every column (``model_config`` stays JSON text, flags stay ints), and
constraint violations raise ``sqlite3.IntegrityError``. Underneath, every
method is a call into the modules that hold the rules (sessions, titles,
transcript, history, listing, children, maintenance, search, ...); this
class converts arguments and return shapes and has no rules or SQL of its own.

Each instance works on its own file even when several are open: its methods
run with the models routed to its database (:func:`hermes_models.store.using`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import peewee

from .checks import (
    check_days,
    check_flag,
    check_id_list,
    check_int64,
    check_lookup_key,
    check_session_id,
    check_ttl,
)
from .conversations import (
    META_FIELDS,
    finalize_orphaned_compression_sessions,
    handoff,
    history,
    listing,
    maintenance,
    new_session_id,
    redact,
    retention,
    sessions,
    telegram,
    timings,
    titles,
    transcript,
)
from .driver import sqlite3
from .errors import SQLITE_ERRORS, is_malformed_db_error
from .models import (
    AUTO_PRUNE_KEY,
    CompressionLock,
    Session,
    StateMeta,
    compression_tip_id,
    resume_target_id,
    unencodable_error,
)
from .search import search_messages, search_sessions
from .store import (
    LENIENT_FILES,
    Backend,
    NewerFileConnection,
    QmarkConnection,
    Redactor,
    SqliteFile,
    bind_current,
    claim_repair_attempt,
    connect,
    constraint_message,
    is_decode_error,
    is_postgres_url,
    redaction,
    repair_state_db_schema,
    resolve_file,
    unbind_current,
)
from .store import settings as journal_settings
from .transfer import backup, export_bundle, export_markdown, import_bundle, import_transcripts

if TYPE_CHECKING:
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])
    T = TypeVar("T")

logger = logging.getLogger("hermes_models")


def _named_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """A call's arguments by parameter name (``**fields`` spread out, ``self`` left out)."""
    bound = signature.bind(*args, **kwargs).arguments
    named: dict[str, Any] = {}
    for name, value in list(bound.items())[1:]:
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _api(method: F) -> F:
    """Run a SessionDB method on its own database, with sqlite3's exception types."""

    @functools.wraps(method)
    def wrapper(self: SessionDB, *args: Any, **kwargs: Any) -> Any:
        db = self._db
        if db is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        token = bind(db)  # what using() does, without a generator
        try:
            try:
                return method(self, *args, **kwargs)
            except (sqlite3.OperationalError, peewee.OperationalError) as exc:
                # Another program stored text that is not UTF-8: read it with U+FFFD from
                # now on (the warning names the rows) and run the method again.
                if not isinstance(db, SqliteFile) or not is_decode_error(exc):
                    raise
                if db.file in LENIENT_FILES:
                    raise
                db.read_leniently()
                return method(self, *args, **kwargs)
        except peewee.PeeweeException as exc:
            # The error sqlite3 raised, itself (with its sqlite_errorcode), when
            # peewee wrapped one; a copy of sqlite3's type otherwise.
            original = getattr(exc, "orig", None)
            if isinstance(original, sqlite3.Error):
                raise original from None

            kind = SQLITE_ERRORS.get(type(exc).__name__, sqlite3.DatabaseError)
            raise kind(constraint_message(exc) or str(exc)) from exc
        except UnicodeEncodeError:
            # Text with a lone surrogate reached SQLite; the write was rolled back.
            # The signature is read here, not at import: only this error needs it.
            named = _named_arguments(inspect.signature(method), (self, *args), kwargs)
            raise unencodable_error(named) from None
        finally:
            unbind(token)
            if db.pooled:  # on a server, the thread's connection goes back to the pool
                db.release()

    bind, unbind = bind_current, unbind_current  # looked up once, not per call
    return cast("F", wrapper)


#: Stands for "not passed" where None is a meaningful argument.
_UNSET: Any = object()


class SessionDB:
    """The Hermes session store on one SQLite file.

    ``db_path`` defaults to ``$HERMES_HOME/state.db``. ``read_only=True``
    opens an existing file for reading and searching only. ``journal_mode``
    (``"wal"``, ``"delete"``) and ``synchronous`` (``"off"``, ``"normal"``,
    ``"full"``, ``"extra"``, 0-3) are the journal settings of
    :mod:`hermes_models.store.journal` (None: ``HERMES_MODELS_JOURNAL_MODE``,
    ``HERMES_MODELS_SYNCHRONOUS``, else the policy's defaults). ``redact=True``
    (or a :class:`~hermes_models.store.redaction.Redactor`) replaces secrets in every
    message, tool call and title it writes with ``[REDACTED:<pattern>]``
    (None: ``HERMES_MODELS_REDACT``, off unless set; see :mod:`hermes_models.store.redaction`).
    A writable open
    of a file whose schema SQLite cannot parse repairs it once per process
    (:func:`hermes_models.store.repair.repair_state_db_schema`, a copy first) and
    opens it again, as Hermes does.
    """

    #: Longest session title accepted, in characters.
    MAX_TITLE_LENGTH = titles.MAX_TITLE_LENGTH

    def __init__(
        self,
        db_path: Any = None,
        read_only: bool = False,
        *,
        journal_mode: str | None = None,
        synchronous: str | int | None = None,
        redact: bool | Redactor | None = None,
        key: str | None = None,
    ) -> None:
        #: The file this store opened (or the server's URL); ``db_path`` gives it back.
        self._target = self._resolve(db_path)
        #: What was assigned to ``db_path`` since, if anything.
        self._shown: str | None = None
        self._read_only = check_flag(read_only, "read_only")
        #: The journal settings, checked (a bad value is a ValueError before any open).
        self._journal = journal_settings(journal_mode, synchronous)
        #: The redaction of what this store writes (None: off), checked before any open.
        self._redactor = redaction.settings(redact)
        #: The encryption key given (None: the environment's, if any).
        self._key = key
        #: Hermes callers that reach past the methods take this lock around raw
        #: ``_conn`` reads. The store's own methods do not need it: every thread
        #: has its own connection and writes are serialised by SQLite.
        self._lock = threading.Lock()
        self._db: Backend | None = self._open()

    @staticmethod
    def _resolve(db_path: Any) -> str:
        """The file ``db_path`` names, as text, or a server's URL as it was given."""
        if is_postgres_url(db_path):
            return cast(str, db_path)
        return resolve_file(db_path, argument="db_path")

    @property
    def db_path(self) -> Any:
        """The file, as a :class:`~pathlib.Path` (as Hermes has it), or for a store on
        a server its ``postgresql://`` URL. Assigning it changes only what it gives
        back: the store, its ``repr`` and :meth:`backup` stay on the file it opened."""
        shown = self._target if self._shown is None else self._shown
        if is_postgres_url(shown):
            return shown

        return Path(shown)

    @db_path.setter
    def db_path(self, value: Any) -> None:
        self._shown = self._resolve(value)

    def _open(self) -> Backend:
        try:
            return self._connect()
        except (sqlite3.DatabaseError, peewee.DatabaseError) as exc:
            cause = getattr(exc, "orig", None) or exc
            if not self._read_only and is_malformed_db_error(cause):
                # Loaded to repair alone: most processes never repair a file, and an
                # open refused for another reason (a read-only file) loads nothing.

                repairing = claim_repair_attempt(self._target)
            else:
                repairing = False
            if not repairing:
                if cause is not exc and isinstance(cause, sqlite3.Error):
                    raise cause from None  # sqlite3's own class, as Hermes raises
                raise
            logger.error("%s: the schema is malformed (%s); repairing it", self._target, cause)
            if not repair_state_db_schema(self._target)["repaired"]:
                raise
        return self._connect()

    def _connect(self) -> Backend:
        return connect(
            self._target,
            read_only=self._read_only,
            journal_mode=self._journal.mode,
            synchronous=self._journal.synchronous,
            redact=self._redactor or False,
            key=self._key,
        )

    # -- handle ------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """True when this store refuses writes: opened with ``read_only=True``, or a file
        newer than the schema this package writes (opened read-only by itself)."""
        return self._read_only or (self._db is not None and self._db.read_only)

    @property
    def _conn(self) -> sqlite3.Connection:
        """The DB-API connection of this thread (for raw SQL)."""
        if self._db is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._db.dialect == "postgresql":
            # Hermes code runs raw SQL written for sqlite3 through this.

            return cast("sqlite3.Connection", QmarkConnection(self._db.connection()))
        conn = cast("sqlite3.Connection", self._db.connection())
        shape = self._db.shape
        if shape is not None and shape.newer:
            # Raw SQL that writes is refused as the package's own writes are.
            return cast("sqlite3.Connection", NewerFileConnection(conn, self._target, shape))
        return conn

    def _execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(_conn)`` as one ``BEGIN IMMEDIATE`` write, retried while locked.

        The hook Hermes modules use for their own tables: ``fn`` must be safe
        to run again; what it returns is returned; any error rolls the
        transaction back and propagates.
        """
        return self.database.write(lambda: fn(self._conn))

    @property
    def database(self) -> Backend:
        """The peewee database this store uses."""
        if self._db is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._db

    def close(self) -> None:
        """Checkpoint the WAL and close this thread's connection; idempotent."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else ("read-only" if self.read_only else "open")
        return f"<SessionDB {self._target} {state}>"

    # -- sessions ------------------------------------------------------------------

    @_api
    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Any = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        started_at: float | None = None,
    ) -> str:
        """Create a session unless it exists (the first write wins); returns its id."""
        return sessions.create(
            session_id,
            source,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            parent_session_id=parent_session_id,
            cwd=cwd,
            started_at=started_at,
        )

    def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """Make sure a session exists, creating it with ``fields`` if not; returns its id."""
        return self.create_session(session_id, source, model=model, **fields)

    @_api
    def end_session(self, session_id: str, end_reason: str | None) -> bool:
        """End a session; the first end wins. True if this call ended it."""
        return sessions.end(session_id, end_reason)

    @_api
    def reopen_session(self, session_id: str) -> bool:
        """Clear a session's end so it can continue. True if it exists."""
        return sessions.reopen(session_id)

    @_api
    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Every column of one session, or None."""
        return sessions.get(session_id)

    @_api
    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """The id itself if it exists, else the one session id it is a unique prefix of."""
        return sessions.resolve_id(session_id_or_prefix)

    @_api
    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> bool:
        """Replace a session's system prompt. True if the session exists."""
        return sessions.set_system_prompt(session_id, system_prompt)

    @_api
    def update_session_model(
        self, session_id: str, model: str | None, model_config: Any = None
    ) -> bool:
        """Set a session's model (and its config, when given). True if it exists."""
        return sessions.set_model(session_id, model, model_config)

    @_api
    def update_session_cwd(
        self, session_id: str, cwd: str | None, git_branch: str | None = None
    ) -> bool:
        """Record a session's working directory and, when known, its git branch.

        Nothing happens without an id or a directory; a blank branch (a
        failed probe) leaves the stored one. True if the session exists.
        """
        return sessions.set_cwd(session_id, cwd, git_branch)

    @_api
    def update_session_meta(
        self,
        session_id: str,
        model_config_json: Any = _UNSET,
        model: str | None = None,
        **fields: Any,
    ) -> bool:
        """Replace a session's ``model_config`` (and its model when given). True if it exists.

        Hermes' form, ``update_session_meta(id, model_config_json, model=None)``,
        overwrites ``model_config`` whole (lineage markers in it included) and
        leaves the model alone when ``model`` is None. Without
        ``model_config_json``, the named columns of :data:`META_FIELDS` are
        set instead (``model_config`` may then be a dict); ``model`` keeps
        Hermes' meaning in both forms.
        """
        given = dict(fields)
        if model_config_json is not _UNSET:
            if given:
                raise TypeError(
                    "update_session_meta: model_config_json cannot be combined with "
                    f"{', '.join(sorted(given))}"
                )
            given["model_config"] = model_config_json
        return sessions.update_meta(session_id, given, model)

    @_api
    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None:
        """Add to (or with ``absolute=True`` set) a session's token and cost counters.

        An unknown session is created with ``source='unknown'``. ``model``
        and the billing fields are filled only while NULL. As in Hermes, the
        estimated cost counts a missing value as 0 (so ``absolute=True``
        without one resets it to 0), while a missing actual cost is left alone.
        """
        sessions.add_token_counts(
            session_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd,
            cost_status=cost_status,
            cost_source=cost_source,
            pricing_version=pricing_version,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
            api_call_count=api_call_count,
            absolute=absolute,
        )

    @_api
    def list_sessions(
        self,
        limit: int | None = 20,
        source: str | None = None,
        offset: int = 0,
        include_archived: bool = False,
    ) -> list[dict[str, Any]]:
        """Every session (children too), newest first."""
        return listing.plain_listing(
            limit=limit, offset=offset, source=source, include_archived=include_archived
        )

    @_api
    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int | None = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        *,
        after: str | None = None,
        include_hidden: bool = False,
        since: Any = None,
        until: Any = None,
    ) -> list[dict[str, Any]]:
        """The rows a session picker shows, with ``preview`` and ``last_active``
        (see :mod:`hermes_models.conversations.listing`). ``after`` (not in Hermes: the ``id`` of
        the last row of the previous page) pages by key instead of ``offset``;
        ``include_hidden`` lists the sessions Hermes v26+ hid too, as in Hermes;
        ``since``/``until`` (ours: epoch seconds or ``datetime``) keep the sessions
        started at or after ``since`` and before ``until``."""
        return listing.rich_listing(
            source=source,
            exclude_sources=exclude_sources,
            limit=limit,
            offset=offset,
            include_children=include_children,
            min_message_count=min_message_count,
            project_compression_tips=project_compression_tips,
            order_by_last_active=order_by_last_active,
            include_archived=include_archived,
            archived_only=archived_only,
            id_query=id_query,
            after=after,
            include_hidden=include_hidden,
            since=since,
            until=until,
        )

    @_api
    def list_cron_job_runs(
        self, job_id: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The sessions a cron job ran (ids ``cron_<job_id>_...``), newest first,
        with ``preview`` and ``last_active``."""
        return listing.cron_job_runs(job_id, limit, offset)

    @_api
    def search_sessions_by_id(
        self, query: str, limit: int = 20, include_archived: bool = True
    ) -> list[dict[str, Any]]:
        """Listed sessions whose id (or compression chain's ids) contains ``query``:
        exact matches first, then prefixes, then the rest."""
        return listing.sessions_by_id(query, limit, include_archived)

    @_api
    def session_count(
        self,
        source: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
    ) -> int:
        """How many sessions match the filters; archived ones only when asked, as in Hermes.

        ``exclude_children`` counts what :meth:`list_sessions_rich` lists
        (roots and branches, no subagent runs).
        """
        return listing.count_sessions(
            source=source,
            exclude_sources=exclude_sources,
            include_children=not check_flag(exclude_children, "exclude_children"),
            include_archived=include_archived,
            archived_only=archived_only,
            min_message_count=check_int64(min_message_count, "min_message_count", minimum=0),
        )

    @_api
    def message_count(self, session_id: str | None = None, include_inactive: bool = True) -> int:
        """How many message rows one session (or the whole store) holds, rewound ones
        included as Hermes counts them; ``include_inactive=False`` counts active ones."""
        return transcript.count_messages(session_id, include_inactive)

    @_api
    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive (or unarchive) a session's whole compression chain. True if it exists."""
        return sessions.set_archived(session_id, archived)

    # -- titles ----------------------------------------------------------------------

    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        """A title cleaned of control and invisible characters; None when empty."""
        return titles.sanitize_title(title)

    @_api
    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or with an empty title, clear) a session's title. True if it exists.

        Raises:
            ValueError: another session already has the title, or it is too long.
        """
        return titles.set_title(session_id, title)

    @_api
    def get_session_title(self, session_id: str) -> str | None:
        """A session's title, or None."""
        return titles.title_of(session_id)

    @_api
    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """The session with exactly this title, or None."""
        return titles.session_by_title(title)

    @_api
    def resolve_session_by_title(self, title: str) -> str | None:
        """Id of the session titled ``title``, preferring its newest ``"title #N"``."""
        return titles.resolve_by_title(title)

    @_api
    def get_next_title_in_lineage(self, base_title: str) -> str:
        """The title for the next continuation: ``"t"`` -> ``"t #2"``."""
        return titles.next_title(base_title)

    # -- messages --------------------------------------------------------------------

    @_api
    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        timestamp: float | None = None,
    ) -> int:
        """Append a message to a session and bump its counters; returns the message id."""
        return transcript.append_message(
            session_id,
            role,
            content,
            tool_name=tool_name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            token_count=token_count,
            finish_reason=finish_reason,
            reasoning=reasoning,
            reasoning_content=reasoning_content,
            reasoning_details=reasoning_details,
            codex_reasoning_items=codex_reasoning_items,
            codex_message_items=codex_message_items,
            platform_message_id=platform_message_id,
            observed=observed,
            timestamp=timestamp,
        )

    @_api
    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
        """A session's messages by id, every column: ``content`` and ``tool_calls``
        decoded, the other JSON columns as stored text (as Hermes returns them)."""
        check_session_id(session_id)
        return history.messages_of(session_id, check_flag(include_inactive, "include_inactive"))

    @_api
    def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        *,
        include_row_ids: bool = False,
    ) -> list[dict[str, Any]]:
        """OpenAI-style messages as the Hermes that wrote the file replays them.

        Each has ``role`` and ``content`` (user and assistant text cleaned of
        recalled-memory blocks) and, when set, ``timestamp``, ``tool_call_id``,
        ``tool_name``, ``tool_calls``, ``message_id`` (the platform's id),
        ``observed``; assistant messages add ``finish_reason``, ``reasoning``,
        ``reasoning_content`` and the decoded reasoning details. A v16 file is
        replayed by (timestamp, id); a file of a later Hermes by id, with the keys
        that Hermes adds (``api_content`` beside ``content``, ``display_kind``,
        ``display_metadata``, ``effect_disposition``, ``_db_persisted``, the v31
        uids) and its clean-ups. With ``include_ancestors`` the sessions the
        conversation continues come first (the root first) and a prompt re-sent
        on resume is dropped; ``include_row_ids`` (keyword only, as Hermes v25 on
        take it) adds each message's id as ``_row_id``. See
        :func:`hermes_models.conversations.history.conversation`.
        """
        check_session_id(session_id)
        return history.conversation(
            session_id,
            include_ancestors=include_ancestors,
            include_inactive=include_inactive,
            include_row_ids=include_row_ids,
        )

    @_api
    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """Up to ``window`` messages either side of one message (see
        :func:`hermes_models.conversations.history.messages_around`)."""
        check_session_id(session_id)
        return history.messages_around(session_id, around_message_id, window)

    @_api
    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """A window around one message plus the session's opening and closing turns
        (see :func:`hermes_models.conversations.history.anchored_view`)."""
        check_session_id(session_id)
        return history.anchored_view(session_id, around_message_id, window, bookend, keep_roles)

    @_api
    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The latest user messages, newest first, as ``{id, timestamp, preview}``."""
        check_session_id(session_id)
        return history.recent_user_messages(session_id, limit, include_inactive)

    @_api
    def replace_messages(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
        """Replace all messages of a session; returns how many were written."""
        return transcript.replace_messages(session_id, messages)

    @_api
    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict[str, Any]:
        """Soft-delete a user message and everything after it.

        Returns ``rewound_count``, ``target_message`` and ``new_head_id``;
        ``rewind_count`` goes up by one, ``message_count`` stays.

        Raises:
            ValueError: the message is not in the session or is not a user message.
        """
        return transcript.rewind(session_id, target_message_id)

    @_api
    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Reactivate soft-deleted messages from ``since_message_id`` on; returns how many."""
        return transcript.restore_rewound(session_id, since_message_id)

    @_api
    def clear_messages(self, session_id: str) -> int:
        """Delete every message of a session; returns how many."""
        return transcript.clear_messages(session_id)

    # -- lineage ---------------------------------------------------------------------

    @_api
    def get_compression_tip(self, session_id: str) -> str:
        """The latest continuation of a session's compression chain (the id itself if none)."""
        if check_lookup_key(session_id, "session_id") is None:
            return session_id
        return compression_tip_id(Session, session_id) or session_id

    @_api
    def resolve_resume_session_id(self, session_id: str) -> str:
        """The session a /resume of ``session_id`` opens; unknown ids come back unchanged."""
        if check_lookup_key(session_id, "session_id") is None:
            return session_id
        return resume_target_id(Session, session_id) or session_id

    # -- locks and metadata --------------------------------------------------------------

    @_api
    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Take the compression lock of a session; True iff ``holder`` now has it."""
        ttl = check_ttl(ttl_seconds, "ttl_seconds")
        shape = getattr(self.database, "shape", None)
        if shape is not None and shape.newer:
            self.database.refuse_writes()  # SchemaTooNewError, as every write on it
        if self.read_only:
            return False  # as Hermes: a write that cannot be made is a lock not taken
        return CompressionLock.acquire(session_id, holder, ttl=ttl)

    @_api
    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` has it."""
        CompressionLock.release(session_id, holder)

    @_api
    def get_compression_lock_holder(self, session_id: str) -> str | None:
        """Who holds a session's compression lock now, or None."""
        return CompressionLock.holder(session_id)

    @_api
    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        return StateMeta.get_value(key)

    @_api
    def set_meta(self, key: str, value: str | None) -> None:
        """Store ``value`` under ``key``."""
        StateMeta.set_value(key, value)

    @staticmethod
    def new_session_id() -> str:
        """A fresh session id in the Hermes style."""
        return new_session_id()

    # -- lifecycle upkeep ------------------------------------------------------------------

    @_api
    def finalize_orphaned_compression_sessions(self) -> int:
        """End week-old continuations that hold messages but never ran (see
        :func:`hermes_models.conversations.children.finalize_orphaned_compression_sessions`)."""
        return finalize_orphaned_compression_sessions()

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: float = 90,
        min_interval_hours: float = 24,
        vacuum: bool = True,
        sessions_dir: Any = None,
    ) -> dict[str, Any]:
        """Prune old sessions (and ``VACUUM`` when any went) at most once per interval.

        The last run's time is kept in ``state_meta`` under ``last_auto_prune``
        (an unreadable value counts as no run); a call within
        ``min_interval_hours`` of it returns ``skipped=True``. Never raises:
        returns ``{"skipped", "pruned", "vacuumed"}`` plus ``"error"`` (the
        message) when something failed. Pruning goes through
        :meth:`prune_sessions`, with its rules.
        """
        return maintenance.auto_prune_and_vacuum(
            self, retention_days, min_interval_hours, vacuum, sessions_dir
        )

    # -- handoff (handoff.py) ------------------------------------------------------------------

    @_api
    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Ask for the session to move to ``platform``; False when one is already in flight
        (pending or running) or the session is unknown."""
        return handoff.request(session_id, platform)

    @_api
    def claim_handoff(self, session_id: str) -> bool:
        """Take a pending handoff (pending -> running); True if this call took it."""
        return handoff.claim(session_id)

    @_api
    def complete_handoff(self, session_id: str) -> None:
        """Mark the session's handoff completed."""
        handoff.complete(session_id)

    @_api
    def fail_handoff(self, session_id: str, error: str) -> None:
        """Mark the session's handoff failed, keeping the first 500 characters of ``error``."""
        handoff.fail(session_id, error)

    @_api
    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        """``{"state", "platform", "error"}`` of a session, or None when unknown (or unreadable)."""
        try:
            return handoff.state(session_id)
        except (sqlite3.Error, peewee.PeeweeException) as exc:
            logger.warning("%s: reading the handoff state failed: %s", self, exc)
            return None

    @_api
    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        """Sessions waiting for a handoff, oldest first (``[]`` when unreadable)."""
        try:
            return handoff.pending()
        except (sqlite3.Error, peewee.PeeweeException) as exc:
            logger.warning("%s: listing pending handoffs failed: %s", self, exc)
            return []

    # -- Telegram DM topic mode (telegram.py) ----------------------------------------------------

    @_api
    def apply_telegram_topic_migration(self) -> None:
        """Create the topic-mode tables (the opt-in ``migrations/telegram_topics`` set);
        idempotent, never run on open."""
        telegram.apply()

    @_api
    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turn topic mode on for a private chat (creating the tables first)."""
        telegram.enable(chat_id, user_id, has_topics_enabled, allows_users_to_create_topics)

    @_api
    def disable_telegram_topic_mode(self, *, chat_id: str, clear_bindings: bool = True) -> None:
        """Turn topic mode off for a chat and, unless told not to, drop its bindings."""
        telegram.disable(chat_id, clear_bindings)

    @_api
    def is_telegram_topic_mode_enabled(self, *, chat_id: str, user_id: str) -> bool:
        """True when the chat has topic mode on for this user."""
        return telegram.is_enabled(chat_id, user_id)

    @_api
    def get_telegram_topic_binding(self, *, chat_id: str, thread_id: str) -> dict[str, Any] | None:
        """The session binding of one topic thread, or None."""
        return telegram.binding(chat_id, thread_id)

    @_api
    def list_telegram_topic_bindings_for_chat(self, *, chat_id: str) -> list[dict[str, Any]]:
        """Every binding of a chat, most recently updated first."""
        return telegram.bindings_for_chat(chat_id)

    @_api
    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """The topic binding of a session, or None."""
        return telegram.binding_of_session(session_id)

    @_api
    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
    ) -> None:
        """Bind a topic thread to a session (creating the tables first).

        Raises:
            ValueError: the session is already bound to another topic.
        """
        telegram.bind(chat_id, thread_id, user_id, session_key, session_id, managed_mode)

    @_api
    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """True when the session is bound to a topic."""
        return telegram.is_linked(session_id)

    @_api
    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str, user_id: str, limit: int = 10
    ) -> list[dict[str, Any]]:
        """The user's Telegram sessions bound to no topic, most recently active first."""
        return telegram.unlinked_sessions(chat_id, user_id, limit)

    # -- deletion and maintenance --------------------------------------------------------

    @_api
    def delete_session(self, session_id: str, sessions_dir: Any = None) -> bool:
        """Delete a session, its messages and the subagent runs tagged ``_delegate_from``
        below it (recursively); every other child is kept as a root. True if it existed.

        With ``sessions_dir``, the transcript files of every deleted session
        are removed after the commit.
        """
        check_session_id(session_id)
        return maintenance.delete_session(session_id, sessions_dir=sessions_dir)

    @_api
    def delete_sessions(self, session_ids: Iterable[Any], sessions_dir: Any = None) -> int:
        """Delete several sessions (as :meth:`delete_session`) in one transaction; returns
        how many existed. Entries that are not non-empty strings are skipped."""
        ids = check_id_list(session_ids, "session_ids")
        return maintenance.delete_sessions(ids, sessions_dir=sessions_dir)

    @_api
    def erase_sessions(
        self, session_ids: Iterable[Any], sessions_dir: Any = None
    ) -> dict[str, Any]:
        """Delete sessions as :meth:`delete_sessions` does and leave none of their text in
        the store (search indexes merged, the WAL emptied unless a reader blocks it);
        returns the report as a dict (see
        :class:`hermes_models.conversations.EraseReport`). Not in Hermes' store."""
        ids = check_id_list(session_ids, "session_ids")
        return maintenance.erase_sessions(ids, sessions_dir=sessions_dir).as_dict()

    @_api
    def prune_sessions(
        self, older_than_days: float = 90, source: str | None = None, sessions_dir: Any = None
    ) -> int:
        """Delete ended sessions started more than ``older_than_days`` ago, orphaning their
        children; returns how many were deleted."""
        return maintenance.prune(older_than_days, source, sessions_dir=sessions_dir)

    def _retention_policy(
        self,
        older_than_days: float | None,
        max_bytes: int | None,
        sources: Iterable[str] | None,
        archived_only: bool,
    ) -> retention.RetentionPolicy:
        cutoff = None
        if older_than_days is not None:
            cutoff = time.time() - check_days(older_than_days, "older_than_days") * 86400.0
        if isinstance(sources, str):
            raise ValueError(f"sources must be a list of source names, not {sources!r}")
        return retention.RetentionPolicy(
            started_before=cutoff,
            max_bytes=max_bytes,
            sources=tuple(sources or ()),
            archived_only=archived_only,
        )

    @_api
    def plan_retention(
        self,
        older_than_days: float | None = None,
        max_bytes: int | None = None,
        sources: Iterable[str] | None = None,
        archived_only: bool = False,
    ) -> dict[str, Any]:
        """What :meth:`retain_sessions` would erase now with the same policy: ``sessions``
        (age first, then the oldest the size limit is estimated to take), ``by_age``,
        ``by_size``, the file's ``used_bytes`` and the ``estimated_bytes`` after."""
        plan = retention.plan_retention(
            self._retention_policy(older_than_days, max_bytes, sources, archived_only)
        )
        return {
            "sessions": plan.targets,
            "by_age": plan.by_age,
            "by_size": plan.by_size,
            "used_bytes": plan.used_bytes,
            "estimated_bytes": plan.estimated_bytes,
        }

    @_api
    def retain_sessions(
        self,
        older_than_days: float | None = None,
        max_bytes: int | None = None,
        sources: Iterable[str] | None = None,
        archived_only: bool = False,
        batch_size: int = retention.BATCH_SIZE,
        sessions_dir: Any = None,
    ) -> dict[str, Any]:
        """Erase what a retention policy lets go, ``batch_size`` sessions per short write:
        ended, unpinned sessions started more than ``older_than_days`` ago and/or the
        oldest while the file's used size is over ``max_bytes``, of ``sources`` /
        archived only; subagent runs go with them (see :meth:`erase_sessions`).
        Returns the report (``erased``, ``messages``, ``batches``, ``used_bytes_before``,
        ``used_bytes_after``, ``wal_blocked``, ``seconds``)."""
        policy = self._retention_policy(older_than_days, max_bytes, sources, archived_only)
        report = retention.retain(policy, batch_size=batch_size, sessions_dir=sessions_dir)
        return report.as_dict()

    @_api
    def count_empty_sessions(self) -> int:
        """Sessions without any message that ended and are not archived."""
        return maintenance.count_empty_sessions()

    @_api
    def delete_empty_sessions(self, sessions_dir: Any = None) -> int:
        """Delete the sessions :meth:`count_empty_sessions` counts, orphaning their
        children; returns how many."""
        return maintenance.delete_empty_sessions(sessions_dir=sessions_dir)

    @_api
    def delete_session_if_empty(self, session_id: str, sessions_dir: Any = None) -> bool:
        """Delete a session only if it has no title, no message and no child; True if
        it was deleted."""
        check_session_id(session_id)
        return maintenance.delete_session_if_empty(session_id, sessions_dir=sessions_dir)

    @_api
    def prune_empty_ghost_sessions(self, sessions_dir: Any = None) -> int:
        """Delete ended TUI sessions without title or message started over a day ago,
        orphaning their children; returns how many."""
        return maintenance.prune_empty_ghost_sessions(sessions_dir=sessions_dir)

    @_api
    def optimize_fts(self) -> int:
        """Merge the full-text index segments; returns how many indexes were optimized."""
        return maintenance.optimize_fts()

    @_api
    def update_search_index(
        self,
        *,
        rebuild: bool | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Bring the index of one- and two-character CJK terms up to date (messages other
        processes wrote, a chunk per short transaction): see
        :func:`hermes_models.conversations.maintenance.update_gram_index`. Not in Hermes' store."""
        return maintenance.update_gram_index(rebuild=rebuild, progress=progress)

    @_api
    def vacuum(self) -> int:
        """Optimize the search indexes and compact the file (checkpointing the WAL before
        and after); returns how many indexes were optimized."""
        return maintenance.vacuum()

    @_api
    def backup(
        self,
        dest: Any,
        *,
        keep: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Copy the store to ``dest`` (a new file, or a folder) while it stays in use,
        checked before it is kept (see :func:`hermes_models.transfer.backups.backup`)."""

        return backup(self._target, dest, keep=keep, progress=progress)

    # -- search (fts.py) ------------------------------------------------------------------

    @_api
    def search_messages(
        self,
        query: str,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int | None = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        *,
        time_budget: Any = ...,
        since: Any = None,
        until: Any = None,
        rank_window: int | None = None,
    ) -> list[dict[str, Any]]:
        """Messages matching ``query`` with ``>>>``/``<<<`` snippets and context; never
        raises for any query text (see :func:`hermes_models.search.pipeline.search_messages`,
        which also explains ``time_budget``, the ``since``/``until`` window and
        ``rank_window``: None ranks every hit, ``N`` only the newest ``N``)."""

        return search_messages(
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort,
            include_inactive=include_inactive,
            time_budget=time_budget,
            since=since,
            until=until,
            rank_window=rank_window,
        )

    @_api
    def search_sessions(
        self,
        query: str | None = None,
        limit: int | None = 10,
        rank_mode: str | None = None,
        *,
        source: str | Sequence[str] | None = None,
        offset: int = 0,
        time_budget: Any = ...,
        since: Any = None,
        until: Any = None,
        rank_window: int | None = None,
    ) -> list[dict[str, Any]]:
        """One row per lineage root whose messages match ``query`` (``hits``, ``score``,
        ``best_snippet``, ``matched_session_id``); without a query, every session.
        ``since``/``until`` (ours) keep roots started in that window; ``rank_window``
        (ours) ranks and counts only the newest that many hits (None: every hit)."""

        return search_sessions(
            query,
            limit,
            rank_mode,
            source=source,
            offset=offset,
            time_budget=time_budget,
            since=since,
            until=until,
            rank_window=rank_window,
        )

    # -- export and import (bundle.py) ----------------------------------------------------

    @_api
    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """One session's columns with its ``messages`` (as :meth:`get_messages`), or None."""
        session = self.get_session(session_id)
        if session is None:
            return None
        return self._exported(session, self.get_messages(session_id))

    @_api
    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every session (children and archived ones too, most recently active first,
        with ``last_active``) as :meth:`export_session` gives it."""
        rows = self.search_sessions(None, limit=None, source=source)
        messages = history.messages_of_sessions([str(row["id"]) for row in rows])
        return [self._exported(row, messages[str(row["id"])]) for row in rows]

    def _exported(self, session: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
        """A session's export: its row and messages, and on files of Hermes 0.21.5 and
        later the ``timings`` those releases add (:mod:`.conversations.timings`)."""
        exported = {**session, "messages": messages}
        if timings.in_exports():  # called by the export methods, bound to this store
            exported["timings"] = timings.export_timings(messages, session["id"])
        return exported

    @_api
    def export_bundle(
        self,
        target: Any,
        *,
        session_id: str | None = None,
        source: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        overwrite: bool = False,
        since: Any = None,
        until: Any = None,
        redact: bool | Redactor = False,
    ) -> dict[str, int]:
        """Write the lossless JSONL bundle to a path or text stream (see :mod:`.bundle`).

        ``session_id`` exports that session's lineage, ``source`` the sessions
        of one source, ``since``/``until`` the sessions started in that window;
        ancestors come along. An existing file is replaced only with
        ``overwrite=True``. ``redact=True`` (or a ``Redactor``) writes messages, tool
        calls and titles with their secrets redacted; the store is unchanged.
        Returns the session and message counts.
        """

        return export_bundle(
            target,
            session_id=session_id,
            source=source,
            progress=progress,
            overwrite=overwrite,
            since=since,
            until=until,
            redact=redact,
        )

    @_api
    def export_markdown(
        self,
        target: Any,
        *,
        session_id: str | None = None,
        source: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        overwrite: bool = False,
        since: Any = None,
        until: Any = None,
        redact: bool | Redactor = False,
    ) -> int:
        """Write the sessions as readable Markdown; returns how many sessions (an
        existing file is replaced only with ``overwrite=True``; ``since``/``until`` as
        :meth:`export_bundle` takes them; ``redact`` as :meth:`export_bundle` takes it)."""

        return export_markdown(
            target,
            session_id=session_id,
            source=source,
            progress=progress,
            overwrite=overwrite,
            since=since,
            until=until,
            redact=redact,
        )

    @_api
    def redact_secrets(
        self,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Redact the secrets the stored messages (content, tool calls, tool output,
        reasoning) and session titles hold, a batch per short write, then merge the
        search indexes and truncate the WAL so the old text is gone from the file
        (:func:`hermes_models.conversations.redact.redact_store`). Uses this store's
        redaction patterns, else the maintained ones. ``dry_run`` only counts.
        Returns what was found and changed (counts, ``by_pattern``)."""
        return redact.redact_store(
            self.database.redactor, dry_run=dry_run, progress=progress
        ).as_dict()

    @_api
    def import_bundle(
        self, source: Any, *, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, int]:
        """Add the sessions of a bundle (path or text stream) this file lacks, with their
        messages; sessions already here are left as they are (see :mod:`.importer`).

        Raises:
            BundleError: the bundle is malformed, truncated or newer than this package.
            ImportConflictError: another import into this file is running.
        """

        return import_bundle(source, progress=progress)

    @_api
    def import_transcripts(
        self,
        path: Any,
        *,
        source: str = "cli",
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Import legacy ``<session_id>.jsonl`` transcripts: one file, or a folder of them.

        Raises:
            BundleError: ``path`` is one file that cannot be read as a transcript.
        """
        # loaded on first use: the package imports faster

        return import_transcripts(path, source=source, progress=progress)


__all__ = [
    "AUTO_PRUNE_KEY",
    "META_FIELDS",
    "SessionDB",
]
