"""
The v16 data step as Hermes does it, corrected, on files an older Hermes wrote.

0004_tag_delegate_children tagged every child that was not a /branch or a
compression continuation *by timestamps* ("_delegate_from": <parent id>).
A continuation whose started_at lay a moment before its parent's ended_at (a
clock stepped back, or a parent reopened and ended again) was tagged too,
and a tagged session is deleted with its parent. This step:

1. removes the tag 0004 wrote (the value equal to the parent's id) from every
   child whose parent ended with 'compression' or 'branched', whatever the
   timestamps: such a child is a continuation or a fork, never deleted with
   its parent. A subagent run that really ran under such a parent loses its
   tag too; it stays hidden as an untagged child while its parent exists and
   is kept (orphaned) when the parent is deleted - the safe side;
2. tags with "_delegate_from": "__orphaned__" the parentless sessions Hermes
   v16 treats as lost subagent runs (no title, no tag, at most 25 messages,
   at least one 'tool' message, no children) among the sessions that already
   existed when 0004 ran.

Both run only where 0004 ran its data step on rows an older Hermes wrote:
0004 applied (not marked) on a sessions table that 0002 did not create. A
file this package created, or a Hermes v16 file adopted as it was, is left
alone: its tags were written by Hermes or by this package, not guessed.

Rolling back changes nothing: the tags cannot be told apart from others.
"""

import re
from datetime import datetime, timezone
from pathlib import Path

from yoyo import step

UPGRADE_STEP = "0004_tag_delegate_children"
ORPHANED = "__orphaned__"


def _squash(sql):
    return re.sub(r"\s+", " ", sql or "").strip().lower()


def _created_by_0002(cursor):
    """True when the sessions table is the one 0002 creates (a fresh file)."""
    cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'")
    row = cursor.fetchone()
    if row is None:
        return True
    try:
        text = Path(__file__).with_name("0002_hermes_v16_schema.sql").read_text("utf-8")
    except OSError:
        return False
    match = re.search(r"CREATE TABLE IF NOT EXISTS sessions (\(.*?\n\));", text, re.S)
    return match is not None and _squash("CREATE TABLE sessions " + match.group(1)) == _squash(
        row[0]
    )


def _upgrade_time(cursor):
    """When 0004 ran its data step (epoch seconds), or None when it did not run one."""
    try:
        cursor.execute(
            "SELECT operation FROM _yoyo_log WHERE migration_id = ?"
            " ORDER BY created_at_utc DESC LIMIT 1",
            (UPGRADE_STEP,),
        )
        logged = cursor.fetchone()
        cursor.execute(
            "SELECT applied_at_utc FROM _yoyo_migration WHERE migration_id = ?", (UPGRADE_STEP,)
        )
        applied = cursor.fetchone()
    except Exception:
        return None
    if logged is None or logged[0] != "apply" or applied is None:
        return None
    try:
        moment = applied[0]
        if not isinstance(moment, datetime):
            moment = datetime.fromisoformat(str(moment))
        return moment.replace(tzinfo=timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


# A JSON object (or NULL) model_config; anything else is left as it is.
_OBJECT = (
    "(model_config IS NULL OR (json_valid(model_config) AND json_type(model_config) = 'object'))"
)


def _tag(column):
    return (
        f"(CASE WHEN json_valid({column}) AND json_type({column}) = 'object'"
        f" THEN json_extract({column}, '$._delegate_from') END)"
    )


def _untag_continuations(cursor):
    removed = "json_remove(model_config, '$._delegate_from')"
    cursor.execute(
        f"UPDATE sessions SET model_config = CASE WHEN {removed} = '{{}}' THEN NULL"
        f" ELSE {removed} END"
        f" WHERE parent_session_id IS NOT NULL AND {_tag('model_config')} = parent_session_id"
        "   AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = sessions.parent_session_id"
        "               AND p.end_reason IN ('compression', 'branched'))"
    )


def _tag_orphaned_runs(cursor, upgraded_at):
    branched = (
        "(CASE WHEN json_valid(model_config) AND json_type(model_config) = 'object'"
        " THEN json_extract(model_config, '$._branched_from') END)"
    )
    cursor.execute(
        "UPDATE sessions SET model_config ="
        " json_set(COALESCE(model_config, '{}'), '$._delegate_from', ?)"
        f" WHERE parent_session_id IS NULL AND {_OBJECT}"
        f"   AND {_tag('model_config')} IS NULL AND {branched} IS NULL"
        "   AND title IS NULL AND message_count <= 25 AND started_at <= ?"
        "   AND EXISTS (SELECT 1 FROM messages AS m"
        "               WHERE m.session_id = sessions.id AND m.role = 'tool')"
        "   AND NOT EXISTS (SELECT 1 FROM sessions AS c"
        "                   WHERE c.parent_session_id = sessions.id)",
        (ORPHANED, upgraded_at),
    )


def apply_step(conn):
    cursor = conn.cursor()
    upgraded_at = _upgrade_time(cursor)
    if upgraded_at is None or _created_by_0002(cursor):
        return
    _untag_continuations(cursor)
    _tag_orphaned_runs(cursor, upgraded_at)


def rollback_step(conn):
    """The tags cannot be told apart from tags written otherwise: nothing to undo."""


steps = [step(apply_step, rollback_step)]
