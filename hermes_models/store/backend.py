"""The one interface of a store handle: a SQLite file or a PostgreSQL database.

Both handles — :class:`hermes_models.store.db.HermesDatabase` (a file) and
:class:`hermes_models.store.postgres.PostgresDatabase` (a server) — are peewee
databases that implement :class:`Backend`. The parts above the store reach the
handle their code runs on through :func:`hermes_models.store.current`, typed as
this interface, and never ask which one it is: what the two dialects spell
apart is a method of the handle (its dialect class:
:class:`hermes_models.store.sqlite_sql.SqliteDialect`,
:class:`hermes_models.store.postgres_sql.PostgresDialect`), as each backend of
yoyo carries its own SQL.

:class:`SqliteFile` adds what only a file has (its write transaction's
callbacks, the journal policy); the store's SQLite modules take that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from .redaction import Redactor
    from .shape import FileShape

T = TypeVar("T")


@runtime_checkable
class Backend(Protocol):
    """What every store handle offers."""

    #: ``"sqlite"`` or ``"postgresql"``: part of the key of every statement cached.
    dialect: str
    #: True for a handle that pools its connections (the server's).
    pooled: bool
    #: True when the store was opened to read only.
    read_only: bool
    #: The redaction applied to what this handle writes (:mod:`hermes_models.store.redaction`);
    #: None: off.
    redactor: Redactor | None
    #: What the store holds (tables, columns, indexes; its dialect), probed at open.
    shape: FileShape | None
    #: The placeholder its driver takes (``?`` or ``%s``).
    param: str

    @property
    def path(self) -> Any:
        """The file's path, or the server URL without its password."""
        ...

    def connection(self) -> Any:
        """This thread's connection (opened when it has none)."""
        ...

    def execute_sql(self, sql: str, params: Any = None, commit: Any = None) -> Any:
        """Run one statement; returns its cursor."""
        ...

    def execute(self, query: Any, **context: Any) -> Any:
        """Run one peewee query; returns its cursor."""
        ...

    def run(self, sql: str, params: Any) -> Any:
        """Run one statement the package rendered
        (:class:`hermes_models.store.statements.Prepared`); returns its cursor."""
        ...

    def atomic(self, *args: Any, **kwargs: Any) -> Any:
        """A transaction, or a savepoint inside one (peewee's)."""
        ...

    def in_transaction(self) -> bool:
        """True inside a transaction on this thread's connection."""
        ...

    def release(self) -> None:
        """Hand this thread's connection back to the pool (nothing on a file)."""
        ...

    def write(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as one write transaction, retried as the backend retries."""
        ...

    def write_deletion(self, fn: Callable[[], T]) -> T:
        """:meth:`write` for a transaction that deletes sessions and what hangs from
        them (on a server its rules are kept by row locks and foreign keys)."""
        ...

    def refuse_writes(self) -> None:
        """Raise when this handle may not write (read-only, or a newer Hermes file)."""
        ...

    def ensure_grams(self) -> bool:
        """True when the gram index of one- and two-character CJK terms can be used."""
        ...

    def bound_wal(self) -> bool:
        """Keep the write-ahead log bounded now; True when it was."""
        ...

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Checkpoint the write-ahead log (nothing to do on a server)."""
        ...

    def forget_connections(self) -> None:
        """Drop the connections a forked child inherited, unused."""
        ...

    def close(self) -> bool:
        """Close this handle's connections."""
        ...

    # -- what the dialects spell apart (the dialect classes) ----------------------------

    def starts_with(self, field: Any, prefix: str) -> Any:
        """``field`` begins with ``prefix``, compared exactly."""
        ...

    def starts_with_ascii_nocase(self, field: Any, prefix: str) -> Any:
        """``field`` begins with ``prefix``, ASCII letters without case."""
        ...

    def json_text(self, field: Any, key: str) -> Any:
        """``field``'s JSON object member ``key`` (NULL when absent or not JSON)."""
        ...

    def starts_with_nul(self, field: Any) -> Any:
        """``field`` begins with a NUL character."""
        ...

    def position(self, haystack: Any, needle: Any) -> Any:
        """Where ``needle`` first starts in ``haystack`` (1-based; 0 when absent)."""
        ...

    def limit_value(self, limit: int) -> int | None:
        """The value bound to a ``LIMIT`` for ``limit`` (negative: no limit)."""
        ...

    def literal_limit(self, limit: int) -> int | None:
        """The ``LIMIT`` written into a statement's SQL, or None to bind it."""
        ...

    def json_array_length(self, field: Any) -> Any:
        """The length of ``field`` when it holds a JSON array, else NULL."""
        ...

    def among(self, field: Any, values: Sequence[Any]) -> Any:
        """``field`` is one of ``values``, bound as one parameter."""
        ...

    def returning_id(self, insert: Any, column: Any) -> Any:
        """``insert`` made to give back the new row's id (``column``)."""
        ...

    def deepest_per_root(self, walk: Any) -> Any:
        """Of a walk CTE ``(root_id, id, depth, ...)``, each root's deepest row."""
        ...

    #: Which value a JSON object's key given twice reads as: ``"first"`` (SQLite's
    #: ``json_extract``) or ``"last"`` (PostgreSQL's ``jsonb``).
    json_duplicate_key: str
    #: True when the database refuses a counter's sum that overflows (PostgreSQL), so
    #: an increment needs no read to check it first; False: SQLite, which stores an
    #: integer past 2**63-1 as an inexact float.
    refuses_overflow: bool
    #: True when every store of this kind has a unique index on session titles, so a
    #: title is set without a read first (the index refuses one taken); False: read.
    titles_unique_by_index: bool

    def titles_beginning(self, titles: Sequence[str]) -> set[str]:
        """The session titles that are one of ``titles``, or one of them followed by a
        space and more."""
        ...

    def optimize_indexes(self) -> int:
        """Merge the search indexes' segments; returns how many of Hermes' two
        (words, trigrams) were optimized."""
        ...

    def update_grams(
        self, *, rebuild: bool | None = None, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, Any]:
        """Bring the gram index of one- and two-character CJK terms up to date
        (:func:`hermes_models.conversations.maintenance.update_gram_index` says what
        it returns)."""
        ...

    def message_sequence(self) -> int | None:
        """The last message id handed out, None before any."""
        ...

    def set_message_sequence(self, top: int) -> None:
        """Make the message id sequence stand at ``top`` (0: as if none was handed out)."""
        ...

    def hold_message_inserts(self) -> None:
        """Hold other writers' inserts of messages off until this transaction ends."""
        ...

    def inserted_id(self, cursor: Any) -> int:
        """The id of the row the INSERT run on ``cursor`` added (see :meth:`returning_id`)."""
        ...

    def compact(self) -> None:
        """Give back the space deleted rows left (after the indexes are optimized)."""
        ...

    def erase_traces(self) -> dict[str, Any]:
        """After a deletion, leave none of the deleted text in the search indexes and
        shorten what the backend keeps of it (a file's WAL, a server's dead rows);
        returns ``indexes_merged``, ``wal_truncated``, ``wal_blocked``, ``vacuumed``
        and ``notes``."""
        ...


@runtime_checkable
class SqliteFile(Backend, Protocol):
    """What only a SQLite file's handle offers, to the store's modules that run on one."""

    #: The file, an absolute path as text.
    file: str
    #: The ``file:`` URI parameters a read-only handle opens the file with; None when it writes.
    uri_params: dict[str, str] | None
    #: The journal mode the file was in when this thread's connection opened.
    journal: str | None

    def install_once(self, name: str, install: Callable[[Any], None]) -> None:
        """Run ``install`` on this thread's connection once (an SQL function, say)."""
        ...

    def while_unchanged(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, kept while the file is unchanged."""
        ...

    def read_leniently(self) -> None:
        """Read text another program stored that is not UTF-8 with U+FFFD from now on."""
        ...

    def _reading_once(self) -> Any: ...

    def push_transaction(self, transaction: Any) -> None:
        """Enter ``transaction`` on peewee's transaction stack."""
        ...

    def pop_transaction(self) -> Any:
        """Leave the innermost transaction of peewee's stack."""
        ...
