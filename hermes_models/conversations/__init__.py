"""The rules of a conversation: sessions, their messages, children, titles,
listings, history, deletion."""

from __future__ import annotations

from . import (
    handoff,
    history,
    listing,
    maintenance,
    redact,
    retention,
    sessions,
    telegram,
    timings,
    titles,
    transcript,
)
from .children import (
    branch,
    compress,
    delegate,
    finalize_orphaned_compression_sessions,
    new_session_id,
)
from .listing import INTERNAL_SOURCES, ids_starting_with
from .maintenance import (
    EraseReport,
    describe,
    erase_sessions,
    plan_delete,
    plan_prune,
    sessions_to_erase,
)
from .retention import RetentionPolicy, plan_retention
from .sessions import META_FIELDS
from .transcript import append_message, counter_totals, recount, restore_rewound, rewind_to_message

__all__ = [
    "INTERNAL_SOURCES",
    "META_FIELDS",
    "EraseReport",
    "RetentionPolicy",
    "append_message",
    "branch",
    "compress",
    "counter_totals",
    "delegate",
    "describe",
    "erase_sessions",
    "finalize_orphaned_compression_sessions",
    "handoff",
    "history",
    "ids_starting_with",
    "listing",
    "maintenance",
    "new_session_id",
    "plan_delete",
    "plan_prune",
    "plan_retention",
    "recount",
    "redact",
    "restore_rewound",
    "retention",
    "rewind_to_message",
    "sessions",
    "sessions_to_erase",
    "telegram",
    "timings",
    "titles",
    "transcript",
]
