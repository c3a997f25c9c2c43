"""Redacting a store that already holds secrets: ``hermes-models redact``.

:func:`redact_store` reads every message and session title in id order and
rewrites those a :class:`~hermes_models.store.redaction.Redactor` changes, a
batch per short write transaction (``BEGIN IMMEDIATE`` with the package's
retries, :func:`~hermes_models.store.write`), so a gateway appending meanwhile
waits at most one batch. Each batch reads its rows again inside its
transaction: a row another writer changed or deleted since is redacted as it
is now, never overwritten with older text. The ``UPDATE`` of a message keeps
the word and trigram indexes in step through Hermes' triggers, and the gram
index through the triggers and refresh of the package's own writes.

Then the old text is erased as far as the store can: the full-text indexes'
segments are merged (an optimize), so no older segment still lists the terms
the secrets made; with ``secure_delete`` on (every connection of the package)
freed pages are zeroed; and the ``-wal`` file is checkpointed and truncated,
unless a reader still needs it (``wal_truncated`` False says so).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..checks import check_flag
from ..models import Message, Session
from ..store import SqliteFile, current, redaction, write
from .titles import next_title

if TYPE_CHECKING:
    from ..store import Redactor

logger = logging.getLogger("hermes_models")

#: Rows read and rewritten per write transaction.
BATCH_ROWS = 500

#: The message columns a redaction rewrites.
MESSAGE_COLUMNS = ("content", "tool_calls", "reasoning", "reasoning_content")


@dataclass
class RedactReport:
    """What :func:`redact_store` found and changed."""

    #: Messages and sessions read.
    messages_scanned: int = 0
    sessions_scanned: int = 0
    #: Messages and session titles rewritten (would be, with ``dry_run``).
    messages_changed: int = 0
    titles_changed: int = 0
    #: Secrets replaced, by pattern name.
    by_pattern: dict[str, int] = field(default_factory=dict)
    #: True when nothing was written.
    dry_run: bool = False
    #: Indexes optimized afterwards (0 on a dry run or when nothing changed).
    indexes_optimized: int = 0
    #: True when the ``-wal`` file was emptied afterwards; False when a reader kept it
    #: (run again when it is gone) or on a dry run; None on a server.
    wal_truncated: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as plain values (the CLI's ``--json``)."""
        return {
            "messages_scanned": self.messages_scanned,
            "sessions_scanned": self.sessions_scanned,
            "messages_changed": self.messages_changed,
            "titles_changed": self.titles_changed,
            "by_pattern": dict(sorted(self.by_pattern.items())),
            "dry_run": self.dry_run,
            "indexes_optimized": self.indexes_optimized,
            "wal_truncated": self.wal_truncated,
        }


def _message_batch(
    redactor: Redactor, dry_run: bool, after: int
) -> tuple[int, int, int, Counter[str]]:
    """Redact the next :data:`BATCH_ROWS` messages after id ``after`` (inside a write
    unless ``dry_run``); returns (last id read, rows read, rows changed, secrets
    replaced by pattern). Safe to run again (a write retried after a lock)."""
    counts: Counter[str] = Counter()
    fields = [getattr(Message, name) for name in MESSAGE_COLUMNS]
    rows = list(
        Message.select(Message.id, *fields)
        .where(Message.id > after)
        .order_by(Message.id)
        .limit(BATCH_ROWS)
        .tuples()
    )
    changed = 0
    for message_id, *values in rows:
        found: Counter[str] = Counter()
        cleaned = redactor.row(MESSAGE_COLUMNS, values, found)
        if not found:
            continue
        changed += 1
        counts.update(found)
        if not dry_run:
            update = {field: new for field, old, new in zip(fields, values, cleaned) if new != old}
            Message.update(update).where(Message.id == message_id).execute()
    last = int(rows[-1][0]) if rows else after
    return last, len(rows), changed, counts


def _title_batch(
    redactor: Redactor, dry_run: bool, after: str
) -> tuple[str, int, int, Counter[str]]:
    """Redact the titles of the next :data:`BATCH_ROWS` sessions after id ``after``,
    as :func:`_message_batch` does messages; a redacted title another session holds
    takes the next free ``"title #N"``."""
    counts: Counter[str] = Counter()
    rows = list(
        Session.select(Session.id, Session.title)
        .where(Session.id > after)
        .order_by(Session.id)
        .limit(BATCH_ROWS)
        .tuples()
    )
    changed = 0
    for session_id, title in rows:
        if not isinstance(title, str):
            continue
        found: Counter[str] = Counter()
        clean = redactor.text(title, found)
        if not found:
            continue
        changed += 1
        counts.update(found)
        if not dry_run:
            taken = (
                Session.select(Session.id)
                .where(Session.title == clean, Session.id != session_id)
                .exists()
            )
            if taken:
                clean = next_title(clean)
            Session.update(title=clean).where(Session.id == session_id).execute()
    last = str(rows[-1][0]) if rows else after
    return last, len(rows), changed, counts


def redact_store(
    redactor: Redactor | None = None,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> RedactReport:
    """Redact the secrets every message (content, tool calls, tool output,
    reasoning) and session title of the current store holds, a batch per short
    write, then merge the search indexes and truncate the WAL (see the module text).

    ``redactor`` defaults to the store handle's own, else the maintained patterns
    (and those of ``HERMES_MODELS_REDACT_PATTERNS``). ``dry_run`` counts what would
    change and writes nothing. ``progress(rows)`` is called after each batch.

    Raises:
        SchemaTooNewError: the file is newer than the v16 schema this package writes.
        ReadOnlyDatabaseError: the handle is read-only (unless ``dry_run``).
    """
    dry_run = check_flag(dry_run, "dry_run")
    db = current()
    chosen = redactor or db.redactor or redaction.default_redactor()
    if not dry_run:
        db.refuse_writes()
    report = RedactReport(dry_run=dry_run)
    counts: Counter[str] = Counter()

    def run(step: Callable[..., Any], after: Any) -> tuple[Any, int, int]:
        batch = functools.partial(step, chosen, dry_run, after)
        last, read, changed, found = batch() if dry_run else write(batch)
        counts.update(found)
        if progress is not None and read:
            progress(read)
        return last, read, changed

    after: Any = 0
    while True:
        after, read, changed = run(_message_batch, after)
        report.messages_scanned += read
        report.messages_changed += changed
        if read < BATCH_ROWS:
            break
    after = ""
    while True:
        after, read, changed = run(_title_batch, after)
        report.sessions_scanned += read
        report.titles_changed += changed
        if read < BATCH_ROWS:
            break
    report.by_pattern = dict(counts)
    if not dry_run and (report.messages_changed or report.titles_changed):
        erase_old_text(db, report)
    return report


def erase_old_text(db: Any, report: RedactReport) -> None:
    """Leave no copy of the text just rewritten where the store can reach it, as
    ``erase`` does after its deletion (:meth:`~hermes_models.store.Backend.erase_traces`):
    the gram index caught up, every search index merged in short steps, then the
    ``-wal`` file checkpointed and truncated unless a reader blocks it.

    ``secure_delete`` is on for every connection of the package, so the pages the
    old rows and segments freed are zeroed as they are freed.
    """
    traces = db.erase_traces()
    report.indexes_optimized = len(traces["indexes_merged"])
    if isinstance(db, SqliteFile):
        report.wal_truncated = bool(traces["wal_truncated"])
        if traces["wal_blocked"]:
            logger.warning(
                "%s: a reader still uses the WAL; its old frames (which may hold the text "
                "before redaction) stay until it is checkpointed: run "
                "'hermes-models redact' again when it has gone",
                db.file,
            )
