"""What a store file really holds, read once per open from ``sqlite_master``.

Hermes kept changing its file after schema v16 (columns appended to
``sessions`` and ``messages``, system prompts moved into a table of their
own, full-text tables rebuilt over views, a CJK index whose tokenizer is a
C extension). A file's ``schema_version`` row alone does not say which of
these it has: forks stamp their own numbers, and upgraded files carry new
columns at the end of a table. So every open reads the structure itself
(:func:`probe`), and the package decides from that structure, not from the
number, how to read the file:

* which columns a ``SELECT`` may name (a v2, a v16 and a v31 file are read
  by the same code);
* whether the file is *newer* than the v16 schema this package writes. A
  newer file is opened read-only and never changed;
* which full-text tables can be used, and which rows each one lacks.

Nothing here writes; the probe runs on any connection, read-only ones included.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..driver import sqlite3
from . import sqlite_sql

if TYPE_CHECKING:
    from typing import Any

#: The Hermes schema version this package writes and migrates to.
WRITES_VERSION = 16

#: Columns Hermes added to ``sessions`` after v16, in the order a fresh v31
#: file declares them (``git_repo_root`` came late in v16 and does not make a
#: file newer on its own).
NEWER_SESSION_COLUMNS = (
    "runtime_revision",
    "runtime_generation",
    "created_source",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
    "expiry_finalized",
    "system_prompt_hash",
    "git_repo_root",
    "git_metadata_generation",
    "title_source",
    "last_activity_at",
    "last_activity_description",
    "last_activity_provenance",
    "compression_failure_cooldown_until",
    "compression_failure_error",
    "compression_fallback_streak",
    "compression_ineffective_count",
    "compression_recovery_deadline",
    "compression_overload_streak",
    "profile_name",
    "transport_profile",
    "pinned",
    "hidden",
    "auto_archived",
    "last_read_at",
    "tool_names",
)

#: Columns Hermes added to ``messages`` after v16 (``compacted`` came late in v16).
NEWER_MESSAGE_COLUMNS = (
    "effect_disposition",
    "_compressed_summary",
    "compacted",
    "api_content",
    "display_kind",
    "display_metadata",
    "display_identity",
    "display_order",
    "message_uid",
    "absorbed_message_uids",
    "tool_call_uids",
    "tool_call_uid",
)

#: Columns of late v16 files: known, read, but no sign of a newer file.
_LATE_V16 = frozenset({"git_repo_root", "compacted"})

#: Tables only files newer than v16 have.
NEWER_TABLES = frozenset(
    {
        "system_prompts",
        "session_model_usage",
        "gateway_routing",
        "gateway_hygiene_state",
        "conversation_generations",
        "gateway_heartbeats",
        "session_turn_leases",
        "async_delegations",
        "runtime_epoch",
        "session_admissions",
        "worker_executions",
        "worker_receipts",
        "messages_fts_cjk",
    }
)

#: Tables whose columns are probed.
PROBED = ("sessions", "messages")

#: What the trigram index of a file lacks, and a LIKE must look at instead.
TRIGRAM_COMPLETE = ""  # every row (the v16 layout this package writes)
TRIGRAM_NO_TOOLS = "tool rows"  # Hermes' later layouts never index tool rows in full
TRIGRAM_NO_TOOLS_OR_RUNS = "tool rows, cron and subagent sessions"  # layout 3 view (v29/v30)


@dataclasses.dataclass(frozen=True)
class FileShape:
    """The structure of one store file (see the module docstring): read only, and
    equal to another shape with the same fields (``migrations`` aside)."""

    #: The ``schema_version`` row (None: no such table or row).
    version: int | None
    #: Columns of ``sessions`` and ``messages``, in file order.
    columns: Mapping[str, tuple[str, ...]]
    #: Every table name of the file.
    tables: frozenset[str]
    #: Full-text layout of ``messages_fts`` (Hermes' ``fts_storage_version``):
    #: 0 inline text (v16), 1-3 external content; None without the table.
    fts_layout: int | None = None
    #: The rows the trigram index lacks (one of the ``TRIGRAM_*`` values).
    trigram_gaps: str = TRIGRAM_COMPLETE
    #: False while Hermes marks the word and trigram indexes stale or half rebuilt.
    fts_servable: bool = True
    #: ``messages_fts_cjk``: ``""`` absent, ``"triggers"`` with its sync triggers,
    #: ``"stale"`` without them. This package never reads it (its tokenizer is
    #: a C extension plain SQLite lacks).
    cjk: str = ""
    #: Hermes' ``state_meta`` flags about the indexes (``fts_*`` keys).
    fts_meta: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: True when the file has :data:`TIME_INDEX` (files of this package's migration
    #: 0008; never Hermes' own).
    time_index: bool = False
    #: The keys of the migrations yoyo recorded as applied (None: no yoyo table).
    #: Read with the rest, so that opening an up-to-date file needs no other read.
    migrations: frozenset[str] | None = dataclasses.field(default=None, compare=False)
    #: The SQL dialect of the store: ``"sqlite"`` (a file) or ``"postgresql"``.
    dialect: str = "sqlite"

    def __hash__(self) -> int:
        return hash((self.version, self.tables, self.dialect))

    # Both are asked on every statement: worked out once per shape (it never changes).
    @functools.cached_property
    def newer(self) -> bool:
        """True when the file has structure beyond the v16 schema this package writes."""
        if self.version is not None and self.version > WRITES_VERSION:
            return True
        if self.tables & NEWER_TABLES:
            return True
        known = {*NEWER_SESSION_COLUMNS, *NEWER_MESSAGE_COLUMNS} - _LATE_V16
        return any(name in known for cols in self.columns.values() for name in cols)

    @functools.cached_property
    def rules_version(self) -> int:
        """The Hermes schema whose reading rules apply: the file's own when it is newer
        than v16, else 16 (what this package writes, on a file or a server)."""
        if self.newer and self.version is not None:
            return int(self.version)
        return WRITES_VERSION

    @functools.cached_property
    def storage3(self) -> bool:
        """Written by Hermes 0.21.5 or later, as the file shows it: search layout 3, or
        schema 31 and later (those releases add export timings, keep /steer prompts and
        the reply after a run of review prompts)."""
        return self.newer and ((self.fts_layout or 0) >= 3 or self.rules_version >= 31)

    def has(self, table: str, column: str) -> bool:
        """True when ``table`` has ``column``."""
        return column in self.columns.get(table, ())

    @functools.cached_property
    def key(self) -> tuple[Any, ...]:
        """What SQL built for this file depends on (a cache key)."""
        return (
            tuple(self.columns.get(t, ()) for t in PROBED),
            self.newer,
            self.trigram_gaps,
            self.time_index,
            self.dialect,
        )

    def evidence(self) -> str | None:
        """The first sign of a newer file: a table or ``table.column`` only later Hermes
        versions create (None when there is none)."""
        for name in sorted(self.tables & NEWER_TABLES):
            return f"table {name}"
        known = {*NEWER_SESSION_COLUMNS, *NEWER_MESSAGE_COLUMNS} - _LATE_V16
        for table in PROBED:
            for name in self.columns.get(table, ()):
                if name in known:
                    return f"column {table}.{name}"
        return None

    def describe_version(self) -> str:
        """The version as people read it: ``"30"``; ``"16 (with column sessions.session_key
        of a later Hermes)"`` when the structure is newer than the number; ``"unknown"``."""
        number = "unknown" if self.version is None else str(self.version)
        if self.version is not None and self.version > WRITES_VERSION:
            return number
        sign = self.evidence()
        return number if sign is None else f"{number} (with {sign} of a later Hermes)"


#: The index of messages by time (migration 0008): pages of hits newest first use it.
TIME_INDEX = "idx_messages_time"


def _table_sql(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Tables and views by name (type, CREATE text), and the time index when it exists."""
    rows = conn.execute(sqlite_sql.TABLES_AND_VIEWS, (TIME_INDEX,)).fetchall()
    return {str(row[0]): (str(row[1]), str(row[2])) for row in rows}


def _columns(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(str(row[1]) for row in conn.execute(sqlite_sql.table_info(table)))


def _version(conn: sqlite3.Connection, tables: Mapping[str, Any]) -> int | None:
    if "schema_version" not in tables:
        return None
    try:
        row = conn.execute(sqlite_sql.SCHEMA_VERSION).fetchone()
    except sqlite3.OperationalError:
        return None
    try:
        return None if row is None or row[0] is None else int(row[0])
    except (TypeError, ValueError):
        return None


def _fts_meta(conn: sqlite3.Connection, tables: Mapping[str, Any]) -> dict[str, str]:
    if "state_meta" not in tables:
        return {}
    try:
        rows = conn.execute(sqlite_sql.FTS_META).fetchall()
    except sqlite3.OperationalError:
        return {}
    return {str(row[0]): "" if row[1] is None else str(row[1]) for row in rows}


def _applied(conn: sqlite3.Connection, tables: Mapping[str, Any]) -> frozenset[str] | None:
    if "_yoyo_migration" not in tables:
        return None
    try:
        rows = conn.execute(sqlite_sql.APPLIED_MIGRATIONS).fetchall()
    except sqlite3.OperationalError:
        return None
    return frozenset(str(row[0]) for row in rows)


def fts_layout(sql: Mapping[str, tuple[str, str]]) -> int | None:
    """The layout of ``messages_fts`` by Hermes' own reading of its CREATE text.

    0: inline text (no ``tool_name`` column); 3: read through the
    ``messages_fts_src`` view; 1 or 2: external content over ``messages``,
    told apart by whether the trigram table declares ``tool_calls``.
    """
    words = sql.get("messages_fts")
    if words is None:
        return None
    text = words[1].lower()
    if "tool_name" not in text:
        return 0
    if "messages_fts_src" in text:
        return 3
    trigram = sql.get("messages_fts_trigram", ("", ""))[1].lower()
    return 1 if "tool_calls" in trigram else 2


def _trigram_gaps(sql: Mapping[str, tuple[str, str]], newer: bool) -> str:
    if not newer:
        return TRIGRAM_COMPLETE
    view = sql.get("messages_fts_trigram_src", ("", ""))[1].lower()
    if "cron" in view or "_delegate_from" in view:
        return TRIGRAM_NO_TOOLS_OR_RUNS
    return TRIGRAM_NO_TOOLS


def _cjk(conn: sqlite3.Connection, sql: Mapping[str, Any]) -> str:
    if "messages_fts_cjk" not in sql:
        return ""
    row = conn.execute(sqlite_sql.CJK_TRIGGER_COUNT).fetchone()
    return "triggers" if row[0] else "stale"


def probe(conn: sqlite3.Connection) -> FileShape:
    """Read the structure of the file ``conn`` has open (no write, no FTS table opened)."""
    sql = _table_sql(conn)
    tables = frozenset(name for name, (kind, _) in sql.items() if kind == "table")
    columns = {table: _columns(conn, table) for table in PROBED if table in tables}
    version = _version(conn, sql)
    meta = _fts_meta(conn, sql)
    draft = FileShape(version, columns, tables)
    newer = draft.newer
    # Hermes' trigger gate leaves ids between the two markers out of the index.
    rebuilding = "fts_rebuild_high_water" in meta
    return FileShape(
        version,
        columns,
        tables,
        fts_layout=fts_layout(sql),
        trigram_gaps=_trigram_gaps(sql, newer),
        fts_servable=not (meta.get("fts_stale") == "1" or rebuilding),
        cjk=_cjk(conn, sql),
        fts_meta=meta,
        time_index=sql.get(TIME_INDEX, ("", ""))[0] == "index",
        migrations=_applied(conn, sql),
    )
