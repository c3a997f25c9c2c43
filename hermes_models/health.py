"""How a store file is doing: counts and sizes (:func:`stats`), a check-up
(:func:`doctor`) and the repairs it can make (:func:`repair`).

The check-up runs SQLite's own checks (``PRAGMA integrity_check``, FTS5
``'integrity-check'`` on each search index, ``PRAGMA foreign_key_check``) and
this package's invariants: the schema version is 16, each search index has
its three triggers and holds exactly one entry per message with the text the
triggers write, every session's counters agree with its messages, and the
message id sequence is far from its limit (2**63-1, after which no message
can ever be appended again).

It never writes, and works on a handle opened read-only. FTS5 runs its
``'integrity-check'`` as an ``INSERT``, which needs the file's write lock;
instead, each index's tables are copied from one read snapshot into a
scratch file in a temporary folder and checked there, so the check costs
time and temporary space in proportion to the index, and no lock.

Every function returns plain dicts; printing them is the CLI's job.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, cast

from peewee import JOIN, fn

from .checks import INT64_MAX
from .conversations import counter_totals, recount
from .driver import WAL_RESET_BUG, sqlite3, sqlite_info
from .models import Message, Session, order_sessions
from .store import (
    SCHEMA_VERSION,
    Backend,
    FileShape,
    IndexCheck,
    PostgresDatabase,
    SqliteFile,
    check_index,
    current,
    exposure,
    grams,
    header_journal_mode,
    open_file,
    opened_key,
    postgres,
    postgres_sql,
    present_indexes,
    split_integrity,
    sqlite_sql,
    sqlite_uri,
    stored_schema_version,
    using,
)

#: ``doctor`` flags the message id sequence when fewer ids than this are left.
SEQUENCE_HEADROOM = 2**32
#: Sessions named in the detail of a failed counter check.
_SAMPLE = 5

_TRIGGERS = ("insert", "delete", "update")


def _rows(db: Backend, sql: str) -> list[tuple[Any, ...]]:
    handle: Any = db
    return cast(list[tuple[Any, ...]], handle.execute_sql(sql).fetchall())


def _version(db: Backend) -> int | None:
    handle: Any = db
    return stored_schema_version(cast(sqlite3.Connection, handle.connection()))


def _one(db: Backend, sql: str) -> Any:
    return _rows(db, sql)[0][0]


def _names(db: Backend, kind: str) -> set[str]:
    names = sqlite_sql.TABLE_NAMES if kind == "table" else sqlite_sql.TRIGGER_NAMES
    return {row[0] for row in _rows(db, names)}


def present_fts_tables(db: Backend) -> list[str]:
    """The message search indexes the file has."""
    with using(db):
        return [model._meta.table_name for model in present_indexes()]


def _size(path: str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def gram_state(db: Backend) -> dict[str, Any]:
    """The gram index's state (:func:`hermes_models.store.grams.status`); ``present`` False
    when the file lacks it or this build cannot read it."""
    absent = {"present": False, "changed": None, "held": None}
    try:
        if isinstance(db, SqliteFile) and grams.usable(db.connection()):
            return grams.status(db)
        return absent
    except sqlite3.Error:
        return absent


def search_indexes(db: Backend) -> dict[str, str]:
    """Each full-text table of the file, and whether (and how) this process uses it."""
    shape = db.shape
    if shape is None:
        return {}
    usable = set(present_fts_tables(db)) if shape.fts_servable else set()
    out: dict[str, str] = {}
    for table in ("messages_fts", "messages_fts_trigram"):
        if table not in shape.tables:
            continue
        if table not in usable:
            out[table] = "not used (marked stale or half rebuilt by Hermes: LIKE instead)"
        elif table == "messages_fts_trigram" and shape.trigram_gaps:
            out[table] = f"used (lacks {shape.trigram_gaps}: LIKE finds those)"
        else:
            out[table] = "used"
    gram = gram_state(db)
    if gram["present"]:
        if gram["changed"]:
            out[grams.TABLE] = (
                f"used ({gram['changed']} messages written or changed since indexed: "
                "searches read them themselves until hermes-models optimize)"
            )
        else:
            out[grams.TABLE] = "used"
    if shape.cjk:
        state = "its triggers dropped, stale" if shape.cjk == "stale" else "with its triggers"
        out["messages_fts_cjk"] = (
            f"not used ({state}; its tokenizer cjk_unicode61 is a C extension "
            "plain SQLite lacks: short CJK terms use LIKE)"
        )
    return out


def _server_stats(db: Backend) -> dict[str, Any]:
    """:func:`stats` of a PostgreSQL store: the same keys; what belongs to a file (its
    journal, sizes, FTS5 tables and layout) is None or empty, and the search indexes
    are the server's own, kept in step by it."""
    with using(db):
        messages = int(Message.select().count())
        active = int(Message.select().where(Message.active == 1).count())
        sessions = int(Session.select().count())
    indexes = dict.fromkeys((*postgres_sql.SEARCH_INDEXES, postgres_sql.GRAM_INDEX), "used")
    trigram = _trigram_state(db)
    if trigram != "present":
        indexes[postgres_sql.TRIGRAM_INDEX] = _TRIGRAM_MISSING[trigram]
    return {
        "path": str(db.path),
        "schema_version": int(_one(db, postgres_sql.SCHEMA_VERSION)),
        "journal_mode": None,
        "sessions": sessions,
        "messages": messages,
        "active_messages": active,
        "inactive_messages": messages - active,
        "file_bytes": None,
        "wal_bytes": None,
        "fts_rows": {},
        "fts_in_step": None,
        "fts_layout": None,
        "newer_than_writes": False,
        "search_indexes": indexes,
    }


#: How ``stats`` names a trigram index that is not there (see :func:`_trigram_state`).
_TRIGRAM_MISSING = {
    "absent": "absent (pg_trgm could not be created: substring terms scan every message)",
    "invalid": "not used (its build failed half-way: substring terms scan every message)",
}


def _trigram_state(db: Backend) -> str:
    """``"present"``, ``"absent"`` or ``"invalid"``: the server store's trigram index."""
    return str(cast(PostgresDatabase, db).trigram_index())


def _trigram_check(db: Backend) -> dict[str, Any]:
    """The server's search indexes: the trigram one (pg_trgm) may be missing, which
    costs speed, not answers: a warning."""
    state = _trigram_state(db)
    if state == "present":
        return _check(
            "search indexes",
            True,
            "words (tsvector), substrings (pg_trgm trigrams) and 1-2-character CJK terms "
            "(gram index)",
        )
    why = (
        "pg_trgm could not be created on the server (not installed, not allowed, or "
        "this role lacks CREATE on the database)"
        if state == "absent"
        else "its build failed half-way"
    )
    return _check(
        "search indexes",
        True,
        f"{WARNING}no trigram index ({why}): {postgres.SCANNING}; `hermes-models doctor "
        "--fix` adds it once pg_trgm can be created",
    )


def stats(db: Backend | None = None) -> dict[str, Any]:
    """Counts and sizes: sessions, messages (active/inactive), file and WAL bytes, index
    rows; the Hermes schema version, the full-text layout and which indexes are used.
    (A PostgreSQL store: :func:`_server_stats`.)"""
    db = db or current()
    if not isinstance(db, SqliteFile):
        return _server_stats(db)
    messages = int(_one(db, sqlite_sql.COUNT_MESSAGES))
    with using(db):  # through the model: a file without ``active`` (v2-v11) has all live
        active = int(Message.select().where(Message.active == 1).count())
    fts = {table: int(_one(db, sqlite_sql.count_rows(table))) for table in present_fts_tables(db)}
    shape = db.shape
    newer = shape is not None and shape.newer
    journal = _journal_mode(db)
    return {
        "path": str(db.path),
        "schema_version": _version(db),
        "journal_mode": journal,
        # The SQLite this process runs on, and whether the file is exposed to its bug.
        "sqlite": sqlite_info(),
        "exposed": journal == "wal" and WAL_RESET_BUG,
        "sessions": int(_one(db, sqlite_sql.COUNT_SESSIONS)),
        "messages": messages,
        "active_messages": active,
        "inactive_messages": messages - active,
        "file_bytes": _size(db.path),
        "wal_bytes": _size(f"{db.path}-wal"),
        "fts_rows": fts,
        # Hermes' later indexes leave rows out by design: not judged there.
        "fts_in_step": None if newer else all(rows == messages for rows in fts.values()),
        "fts_layout": None if shape is None else shape.fts_layout,
        "newer_than_writes": newer,
        "search_indexes": search_indexes(db),
    }


def _schema_version_check(version: int | None) -> dict[str, Any]:
    """The ``schema_version`` check, the same on a file and on a server."""
    return _check(
        "schema_version",
        version == SCHEMA_VERSION,
        f"{version}"
        if version == SCHEMA_VERSION
        else f"{version}: expected {SCHEMA_VERSION} (run `hermes-models migrate`)",
    )


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _integrity(db: Backend, indexes: list[str] | None = None) -> dict[str, Any]:
    """``PRAGMA integrity_check``; what it says of the search ``indexes`` (SQLite 3.44+
    runs FTS5's check too) is left to their own checks (:mod:`hermes_models.store.fts_check`)."""
    found = [str(row[0]) for row in _rows(db, sqlite_sql.INTEGRITY_CHECK)]
    found, _ = split_integrity(found, indexes or [])
    if found in (["ok"], []):
        return _check("integrity_check", True, "ok")
    return _check("integrity_check", False, "; ".join(found[:5]))


def describe_sqlite() -> str:
    """The SQLite this process runs on, in one line: version, module, source id, and
    whether it has the WAL-reset bug."""
    info = sqlite_info()
    bug = "has the WAL-reset bug" if info["wal_reset_bug"] else "without the WAL-reset bug"
    return f"{info['version']} ({info['module']}; source {info['source_id']}), {bug}"


def _sqlite_check() -> dict[str, Any]:
    return _check("sqlite", True, describe_sqlite())


def _journal_mode(db: Backend) -> str:
    """The journal mode the file is in, lower-cased. A handle reading an immutable
    snapshot (a WAL file in a read-only folder without its ``-shm``) reads no WAL and
    says ``delete`` whatever the file is in: the file's header says instead, and
    ``"unknown"`` when it cannot (an encrypted file's header is encrypted)."""
    params = db.uri_params if isinstance(db, SqliteFile) else None
    if params is not None and params.get("immutable") == "1":
        # An encrypted file keeps its header encrypted: its mode is not known then.
        return header_journal_mode(db.path) or "unknown"
    return str(_one(db, sqlite_sql.JOURNAL_MODE)).lower()


def _journal_check(db: Backend) -> dict[str, Any]:
    """The file's journal mode; a file in WAL mode on an SQLite with the WAL-reset bug
    is exposed to it (a failed check: the detail says what to do)."""
    mode = _journal_mode(db)
    if mode == "wal" and WAL_RESET_BUG:
        return _check(
            "journal mode",
            False,
            f"wal: exposed to the WAL-reset bug of SQLite {sqlite_info()['version']}, which "
            "can corrupt a WAL file that several processes write and checkpoint; run every "
            "process on SQLite 3.51.3 or later (`pip install pysqlite3`), or stop them all "
            "and open the file once with journal_mode=delete",
        )
    if mode != "wal" and WAL_RESET_BUG:
        return _check(
            "journal mode",
            True,
            f"{mode}: not exposed (this SQLite has the WAL-reset bug, so the file is kept out "
            "of WAL)",
        )
    return _check("journal mode", True, mode)


def _foreign_keys(db: Backend) -> dict[str, Any]:
    found = _rows(db, sqlite_sql.FOREIGN_KEY_CHECK)
    if not found:
        return _check("foreign_key_check", True, "no dangling references")
    sample = ", ".join(f"{table} row {rowid} -> {parent}" for table, rowid, parent, _ in found[:5])
    return _check("foreign_key_check", False, f"{len(found)} dangling reference(s): {sample}")


def _source_uri(db: Backend) -> str:
    """A read-only URI for the file ``db`` reads, as ``db`` reads it (an immutable
    snapshot where it must be one: that was found, and said, when ``db`` was opened)."""
    params = db.uri_params if isinstance(db, SqliteFile) else None
    return sqlite_uri(db.path, **(params or {"mode": "ro"}))


def _shadow_tables(db: Backend, table: str) -> list[str]:
    names = _names(db, "table")
    return [f"{table}_{part}" for part in _SHADOWS if f"{table}_{part}" in names]


def _content_tables(tables: list[str]) -> list[str]:
    """The external content tables of the indexes ``tables`` (the gram index's held grams)."""
    return [grams.HELD_TABLE] if grams.TABLE in tables else []


_SHADOWS = ("data", "idx", "content", "docsize", "config")


def _scratch_key(db: Backend) -> str | None:
    """The key of ``db``'s file (None: plain): the scratch copy of its indexes is
    encrypted as the store is (and attaches the store with that key)."""
    return opened_key(str(db.path)) if isinstance(db, SqliteFile) else None


def _copy_indexes(db: Backend, tables: list[str], scratch: Path) -> None:
    """Copy the tables of the search indexes ``tables`` into ``scratch``, from one snapshot."""
    key = _scratch_key(db)
    conn = open_file(str(scratch), key, isolation_level=None)
    try:
        conn.execute(sqlite_sql.JOURNAL_MODE_OFF)
        conn.execute(sqlite_sql.SYNCHRONOUS_OFF)
        for table in (*_content_tables(tables), *tables):
            conn.execute(_one(db, sqlite_sql.table_sql(table)))
        if key is None:
            conn.execute(sqlite_sql.ATTACH_SOURCE, (_source_uri(db),))
        else:
            conn.execute(sqlite_sql.ATTACH_SOURCE_WITH_KEY, (_source_uri(db), key))
        conn.execute(sqlite_sql.BEGIN)
        for content in _content_tables(tables):
            conn.execute(sqlite_sql.copy_from_source(content))
        for table in tables:
            for shadow in _shadow_tables(db, table):
                conn.execute(sqlite_sql.clear_main(shadow))
                conn.execute(sqlite_sql.copy_from_source(shadow))
        conn.execute(sqlite_sql.COMMIT)
        conn.execute(sqlite_sql.DETACH_SOURCE)
    finally:
        conn.close()


def _fts_integrity(db: Backend, tables: list[str]) -> list[dict[str, Any]]:
    """FTS5's own ``integrity-check`` of each index, run on a scratch copy of it."""
    names = [f"fts integrity-check {table}" for table in tables]
    with tempfile.TemporaryDirectory(prefix="hermes-models-doctor-") as folder:
        scratch = Path(folder) / "indexes.db"
        try:
            _copy_indexes(db, tables, scratch)
        except sqlite3.Error as exc:
            return [_check(name, False, f"cannot read the index: {exc}") for name in names]
        conn = open_file(str(scratch), _scratch_key(db), isolation_level=None)
        checks = []
        try:
            for name, table in zip(names, tables):
                # The gram index is checked against the grams it holds, too (rank 1).
                full = table == grams.TABLE
                try:
                    if full:  # its own content is the grams it holds: no version differs
                        conn.execute(sqlite_sql.GRAM_INTEGRITY)
                        found = IndexCheck(True, "ok")
                    else:
                        found = check_index(conn, table, str(_one(db, sqlite_sql.table_sql(table))))
                except sqlite3.Error as exc:
                    checks.append(_check(name, False, str(exc)))
                else:
                    checks.append(_check(name, found.ok, found.detail))
        finally:
            conn.close()
    return checks


def _fts_triggers(db: Backend, table: str) -> dict[str, Any]:
    missing = [f"{table}_{op}" for op in _TRIGGERS if f"{table}_{op}" not in _names(db, "trigger")]
    if missing:
        return _check(f"{table} triggers", False, "missing " + ", ".join(missing))
    return _check(f"{table} triggers", True, "insert, delete and update triggers present")


def _fts_in_step(db: Backend, table: str) -> dict[str, Any]:
    missing = _one(db, sqlite_sql.messages_not_indexed(table))
    extra = _one(db, sqlite_sql.stray_index_rows(table))
    stale = _one(db, sqlite_sql.stale_index_rows(table))
    name = f"{table} matches messages"
    if missing or extra or stale:
        return _check(
            name, False, f"{missing} message(s) not indexed, {extra} stray, {stale} out of date"
        )
    return _check(name, True, "one entry per message, text up to date")


def counter_mismatches(db: Backend | None = None) -> list[dict[str, Any]]:
    """Sessions whose ``message_count`` / ``tool_call_count`` disagree with their messages:
    ``{"id", "message_count", "messages", "tool_call_count", "tool_calls"}`` each."""
    db = db or current()
    with using(db):
        totals = counter_totals().alias("totals")
        counted = fn.COALESCE(totals.c.messages, 0)
        calls = fn.COALESCE(totals.c.tool_calls, 0)
        query = (
            Session.select(
                Session.id, Session.message_count, counted, Session.tool_call_count, calls
            )
            .join(totals, JOIN.LEFT_OUTER, on=(totals.c.session_id == Session.id))
            .where(
                (fn.COALESCE(Session.message_count, 0) != counted)
                | (fn.COALESCE(Session.tool_call_count, 0) != calls)
            )
            .order_by(Session.id)
            .tuples()
        )
        keys = ("id", "message_count", "messages", "tool_call_count", "tool_calls")
        return [dict(zip(keys, row)) for row in cast("list[tuple[Any, ...]]", query)]


def _parent_loops(db: Backend) -> dict[str, Any]:
    """Sessions whose chain of parents goes round (a damaged file): no listing shows
    them, as each has a parent; lineage walks and deletions stop at the loop."""
    links = (
        postgres_sql.COPY_SESSION_LINKS
        if isinstance(db, PostgresDatabase)
        else sqlite_sql.COPY_SESSION_LINKS
    )
    parents = {row[0]: row[1] for row in _rows(db, links)}
    _, looped, cut = order_sessions(parents)
    if not looped:
        return _check("parent links", True, "no session is its own ancestor")
    shown = ", ".join(repr(s) for s in sorted(cut)[:5]) + (", ..." if len(cut) > 5 else "")
    return _check(
        "parent links",
        False,
        f"{len(looped)} session(s) in or below {len(cut)} loop(s) of parent links, "
        f"hidden from listings (a loop starts at {shown}); set one parent_session_id "
        "of each loop to NULL to show them",
    )


def _counters(db: Backend) -> dict[str, Any]:
    wrong = counter_mismatches(db)
    if not wrong:
        return _check("session counters", True, "every session's counters match its messages")
    sample = ", ".join(
        f"{row['id']} (message_count {row['message_count']}, {row['messages']} messages; "
        f"tool_call_count {row['tool_call_count']}, {row['tool_calls']} tool calls)"
        for row in wrong[:_SAMPLE]
    )
    more = f" and {len(wrong) - _SAMPLE} more" if len(wrong) > _SAMPLE else ""
    return _check(
        "session counters",
        False,
        f"{len(wrong)} session(s) disagree with their messages: {sample}{more} "
        "(`hermes-models doctor --fix` recounts them)",
    )


def message_sequence(db: Backend | None = None) -> dict[str, int | None]:
    """The message id sequence: ``{"sequence", "max_id", "remaining"}`` (None before any id)."""
    db = db or current()
    sequence = db.message_sequence()
    with using(db):
        highest = Message.select(fn.MAX(Message.id)).scalar()
    top = max(v for v in (sequence, highest, 0) if v is not None)
    return {
        "sequence": sequence,
        "max_id": None if highest is None else int(highest),
        "remaining": INT64_MAX - int(top),
    }


def _sequence(db: Backend) -> dict[str, Any]:
    state = message_sequence(db)
    remaining = int(state["remaining"] or 0)
    if remaining >= SEQUENCE_HEADROOM:
        return _check("message id sequence", True, f"{remaining:,} ids left")
    fixable = state["max_id"] is None or INT64_MAX - int(state["max_id"]) >= SEQUENCE_HEADROOM
    hint = (
        "`hermes-models doctor --fix` lowers it to the highest id in use"
        if fixable
        else "the highest message id itself is that close: the messages must be renumbered"
    )
    return _check(
        "message id sequence",
        False,
        f"at {state['sequence']}: only {remaining:,} ids left before 2**63-1, after which "
        f"no message can be appended ({hint})",
    )


#: How the detail of a check that passes with a warning begins (the CLI marks it ``warn``).
WARNING = "warning: "


def _privacy(db: Backend) -> dict[str, Any]:
    """Who else can read the store: the database and its sidecars should be private
    (0600), and their folder writable by its owner alone; a warning, not a failure
    (the package never changes the mode of a file it did not create)."""
    found = exposure(db.path)
    if not found:
        return _check("privacy", True, "only the owner can read the store's files")
    named = "; ".join(f"{path} is mode {mode:04o}" for path, mode in found)
    files = [path for path, _ in found if not os.path.isdir(path)]
    advice = []
    if files:
        advice.append("`hermes-models doctor --fix` makes the files 0600")
    if len(files) < len(found):
        advice.append("others can write the folder: keep the store in a private one (0700)")
    return _check(
        "privacy", True, f"{WARNING}others can read or plant files: {named}; " + "; ".join(advice)
    )


def doctor(db: Backend | None = None) -> dict[str, Any]:
    """Check the file without writing to it; returns ``{"path", "ok", "checks": [{"name",
    "ok", "detail"}]}``. (A PostgreSQL store: :func:`_server_doctor`.)"""
    db = db or current()
    if isinstance(db, PostgresDatabase):
        return _server_doctor(db)
    version = _version(db)
    shape = db.shape
    if shape is not None and shape.newer:
        return _doctor_newer(db, shape)
    checks = [
        _sqlite_check(),
        _journal_check(db),
        _schema_version_check(version),
        _integrity(db, present_fts_tables(db)),
        _foreign_keys(db),
        _parent_loops(db),
    ]
    tables = present_fts_tables(db)
    if not tables:
        built_in = any("FTS5" in str(row[0]) for row in _rows(db, sqlite_sql.COMPILE_OPTIONS))
        detail = "none in the file" + ("" if built_in else " (this SQLite lacks FTS5: LIKE search)")
        checks.append(_check("search indexes", not built_in, detail))
    integrity = _fts_integrity(db, tables) if tables else []
    for table, check in zip(tables, integrity):
        checks.append(check)
        if version == SCHEMA_VERSION:
            checks.append(_fts_triggers(db, table))
            checks.append(_fts_in_step(db, table))
    checks.extend(_gram_checks(db, tables))
    if version == SCHEMA_VERSION:
        checks.append(_counters(db))
    checks.append(_sequence(db))
    if isinstance(db, SqliteFile):
        checks.append(_privacy(db))
    return {"path": str(db.path), "ok": all(c["ok"] for c in checks), "checks": checks}


def _server_doctor(db: PostgresDatabase) -> dict[str, Any]:
    """:func:`doctor` of a PostgreSQL store: what the package keeps (the schema
    version, parent links, counters, the id sequence) and which search indexes the
    store has; pages and indexes are the server's to check (``amcheck``)."""
    version = int(_one(db, postgres_sql.SCHEMA_VERSION))
    checks = [
        _check("server", True, f"PostgreSQL {_one(db, postgres_sql.SERVER_VERSION)}"),
        _schema_version_check(version),
        _parent_loops(db),
        _trigram_check(db),
        _counters(db),
        _sequence(db),
    ]
    return {"path": str(db.path), "ok": all(c["ok"] for c in checks), "checks": checks}


#: Ids named in the detail of a failed gram index check.
_IDS_SHOWN = 10


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:_IDS_SHOWN])
    return shown + (f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else "")


def _gram_checks(db: Backend, fts_tables: list[str]) -> list[dict[str, Any]]:
    """The gram index checked by what it holds (:func:`hermes_models.store.grams.check`), its
    triggers, FTS5's own check of it against the grams it holds, and the text of the
    messages it read that is not UTF-8."""
    conn = db.connection()
    names = _names(db, "table")
    if grams.TABLE not in names:
        return []
    missing = [name for name in grams.FILE_TRIGGERS if name not in _names(db, "trigger")]
    if missing or grams.HELD_TABLE not in names or grams.CHANGED_TABLE not in names:
        return [
            _check(
                "gram index",
                False,
                "incomplete (missing " + ", ".join(missing or ["its tables"]) + "): searches "
                "read every row; opening the file writable (any hermes-models command "
                "that writes) puts it back",
            )
        ]
    if not isinstance(db, SqliteFile) or not grams.usable(conn) or not fts_tables:
        return []  # this build cannot read it (no FTS5): the search indexes check says so
    found = grams.check(db)
    out = [_gram_held_check(found), *_fts_integrity(db, [grams.TABLE])]
    if found.damaged:
        where = "of the sampled messages " if found.sampled else ""
        out.append(
            _check(
                "message text",
                False,
                f"{_plural(len(found.damaged), 'message')} {where}hold text that is "
                f"not UTF-8: id {_ids(found.damaged)} (read, indexed and shown with "
                "U+FFFD replacement characters; rewrite or delete them to mend)",
            )
        )
    return out


def _plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def _gram_held_check(found: grams.GramCheck) -> dict[str, Any]:
    how = (
        f"{found.checked:,} of {found.messages:,} messages checked (a random sample)"
        if found.sampled
        else f"{found.checked:,} messages checked"
    )
    pending = (
        f"; {found.changed:,} written or changed since indexed (searches read them "
        "themselves; `hermes-models optimize` indexes them)"
        if found.changed
        else ""
    )
    if found.wrong or found.stray:
        parts = []
        if found.wrong:
            parts.append(
                f"{len(found.wrong)} message(s) whose grams differ: id {_ids(found.wrong)}"
            )
        if found.stray:
            parts.append(f"{len(found.stray)} id(s) held that are no message: {_ids(found.stray)}")
        return _check(
            "gram index matches messages",
            False,
            "; ".join(parts) + f" ({how}; `hermes-models doctor --fix` or "
            "`hermes-models optimize` indexes them again)",
        )
    return _check(
        "gram index matches messages", True, f"the grams of each message, no other ({how}{pending})"
    )


def _doctor_newer(db: Backend, shape: FileShape) -> dict[str, Any]:
    """The checks of a file newer than v16: nothing that needs a write, no index read
    through a tokenizer this process lacks, no counter rule of ours imposed on Hermes'."""
    layout = "none" if shape.fts_layout is None else str(shape.fts_layout)
    checks = [
        _sqlite_check(),
        _journal_check(db),
        _check(
            "schema_version",
            True,
            f"{shape.describe_version()}: newer than {SCHEMA_VERSION}, read only "
            f"(full-text layout {layout})",
        ),
        _integrity(db, present_fts_tables(db)),
        _foreign_keys(db),
    ]
    inline = [
        table
        for table in present_fts_tables(db)
        if "content=" not in str(_one(db, sqlite_sql.table_sql(table)))
    ]
    checks.extend(_fts_integrity(db, inline) if inline else [])
    for table, use in search_indexes(db).items():
        checks.append(_check(f"{table} use", True, use))
    checks.append(_sequence(db))
    return {"path": str(db.path), "ok": all(c["ok"] for c in checks), "checks": checks}


def repair(db: Backend | None = None) -> dict[str, Any]:
    """Fix what :func:`doctor` can fix, in one write: recount the sessions whose counters
    disagree with their messages, and lower a message id sequence near its limit to the
    highest id in use; then index again, in short transactions, the messages whose
    grams the gram index holds wrongly (:func:`mend_grams`); on a PostgreSQL store
    without the trigram index, create pg_trgm and build it where the server now allows
    (:func:`hermes_models.store.postgres.add_trigram_index`). Returns ``{"recounted":
    [ids], "sequence": [old, new] or None, "regrammed": [ids], "trigram_index": None
    (nothing to do) or the index's state after: "present", or "absent" when pg_trgm
    still cannot be created}``.

    Lowering the sequence lets ids of messages deleted since be used again.
    """
    db = db or current()
    # On a server other clients take ids while the repair runs: a sequence lowered to
    # the highest id the repair saw could be set below one handed out meanwhile. So
    # when the sequence looks near its limit, the repair holds their inserts off from
    # its first statement (before its snapshot; those under way finish first).
    hold = int(message_sequence(db)["remaining"] or 0) < SEQUENCE_HEADROOM

    def run() -> dict[str, Any]:
        if hold:
            db.hold_message_inserts()
        wrong = [row["id"] for row in counter_mismatches(db)]
        with using(db):
            for session_id in wrong:
                recount(session_id)
        state = message_sequence(db)
        lowered = None
        top = state["max_id"] or 0
        if (
            int(state["remaining"] or 0) < SEQUENCE_HEADROOM
            and INT64_MAX - top >= SEQUENCE_HEADROOM
        ):
            db.set_message_sequence(top)
            lowered = [state["sequence"], top]
        return {"recounted": wrong, "sequence": lowered}

    fixed = db.write(run)
    fixed["regrammed"] = mend_grams(db)
    fixed["trigram_index"] = None
    if isinstance(db, PostgresDatabase) and db.trigram_index() != "present":
        fixed["trigram_index"] = db.add_trigram_index()
    return fixed


def mend_grams(db: Backend, *, sample: int | None = None) -> list[int]:
    """The ids :func:`hermes_models.store.grams.check` finds the gram index wrong about (all
    messages, or a sample on a large store, as ``doctor`` checks), listed as changed
    and indexed again, a chunk per short write transaction. Nothing on PostgreSQL or
    a file without the index."""
    if not isinstance(db, SqliteFile):  # a server keeps its gram index itself
        return []
    conn = db.connection()
    if not grams.present(conn) or not grams.usable(conn):
        return []
    found = grams.check(db, sample=sample)
    ids = sorted({*found.wrong, *found.stray})
    if ids:
        grams.relist(db, ids)
        grams.catch_up(db)
    return ids


__all__ = [
    "SEQUENCE_HEADROOM",
    "counter_mismatches",
    "describe_sqlite",
    "doctor",
    "gram_state",
    "mend_grams",
    "message_sequence",
    "present_fts_tables",
    "repair",
    "search_indexes",
    "stats",
]
