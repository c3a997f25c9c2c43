"""Child sessions: creating them (a /branch fork, a compression continuation, a
subagent run), and closing continuations nobody picked up. Following them (the
compression tip, the session a /resume opens) is a query of the models
(:meth:`hermes_models.models.Session.compression_tip`).

The kinds of child and the walks over parent links are the rules of
:mod:`hermes_models.models.lineage`; here they are applied to rows. Each action runs
in one write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from peewee import SQL, fn

from ..checks import check_epoch, check_flag, check_session_id, check_text
from ..errors import CompressionInProgressError
from ..models import (
    CompressionLock,
    Message,
    Session,
    encode_json,
)
from ..store import local_holder, write
from .titles import next_title_in_lineage, stored_title
from .transcript import copy_messages as copy_transcript
from .transcript import insert_messages, normalise_messages, recount

if TYPE_CHECKING:
    from typing import Any

# -- creating children ---------------------------------------------------------------


def new_session_id() -> str:
    """A fresh session id in the Hermes style: ``YYYYmmdd_HHMMSS_<8 hex>``."""
    return f"{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:8]}"


def _child_fields(parent: Session, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": parent.source,
        "user_id": parent.user_id,
        "model_name": parent.model_name,
        "model_config": encode_json(config, "model_config"),
        "system_prompt": parent.system_prompt,
        "parent": parent.id,
        "cwd": parent.cwd,
        "git_branch": parent.git_branch,
    }


def _child_id(session_id: Any) -> str:
    """The id a new child gets: ``session_id`` checked, or a fresh one when None."""
    if session_id is None:
        return new_session_id()
    return check_session_id(session_id)


def _moment(at: Any) -> float | None:
    return None if at is None else check_epoch(at, "at")


def _plain_config(parent: Session) -> dict[str, Any]:
    config = dict(parent.config)
    config.pop("_branched_from", None)
    config.pop("_delegate_from", None)
    return config


def branch(
    session: Session,
    *,
    session_id: str | None = None,
    title: str | None = None,
    copy_messages: bool = True,
    at: float | None = None,
) -> Session:
    """Fork ``session``: a child marked ``_branched_from``, the active
    transcript copied, and the parent ended with ``'branched'`` (unless it
    had already ended)."""
    model = type(session)
    child_id = _child_id(session_id)
    clean_title = stored_title(title)
    copy = check_flag(copy_messages, "copy_messages")
    moment = _moment(at)

    def run() -> None:
        now = time.time() if moment is None else moment
        model.update(ended_at=now, end_reason="branched").where(
            model.id == session.id, model.ended_at.is_null()
        ).execute()
        parent = model.get_by_id(session.id)
        config = {**_plain_config(parent), "_branched_from": parent.id}
        started = max(now, parent.ended_at or now)
        model.insert(
            id=child_id, started_at=started, title=clean_title, **_child_fields(parent, config)
        ).execute()
        if copy:
            copy_transcript(session.id, child_id)
            recount(child_id)

    write(run)
    return model.get_by_id(child_id)


def compress(
    session: Session,
    summary_messages: Sequence[dict[str, Any]],
    *,
    holder: str | None = None,
    session_id: str | None = None,
    title: str | None = None,
    ttl: float = 300.0,
    at: float | None = None,
) -> Session:
    """Continue ``session`` in a new session that starts with ``summary_messages``.

    Takes the compression lock, ends ``session`` with ``'compression'``,
    creates the continuation (started no earlier than that end, titled with
    the next lineage title), writes the summary and releases the lock.

    Raises:
        CompressionInProgressError: another holder has the lock; nothing changes.
        ValueError: ``session`` has already ended (compressed, branched, closed):
            moving its end would re-classify its existing children, so it
            must be reopened first.
    """
    rows = normalise_messages(summary_messages, "summary_messages")
    model = type(session)
    if holder is not None:
        check_text(holder, "holder", empty=False)
    me = holder or local_holder()
    child_id = _child_id(session_id)
    new_title = stored_title(title)
    moment = _moment(at)
    if not CompressionLock.acquire(session.id, me, ttl=ttl):
        other = CompressionLock.holder(session.id)
        raise CompressionInProgressError(
            f"session {session.id} is being compressed by {other or 'another holder'}"
        )
    try:

        def run() -> None:
            parent = model.get_by_id(session.id)
            if parent.end_reason == "compression":
                raise ValueError(f"session {parent.id} was already compressed")
            if parent.ended_at is not None:
                raise ValueError(
                    f"session {parent.id} already ended ({parent.end_reason or 'no reason'});"
                    " reopen it before compressing"
                )
            now = time.time() if moment is None else moment
            model.update(ended_at=now, end_reason="compression").where(
                model.id == parent.id
            ).execute()
            child_title = new_title
            if child_title is None and parent.title:
                child_title = next_title_in_lineage(parent.title)
            model.insert(
                id=child_id,
                started_at=now,
                title=child_title,
                **_child_fields(parent, _plain_config(parent)),
            ).execute()
            insert_messages(child_id, rows, start=now, argument="summary_messages")
            recount(child_id)

        write(run)
    finally:
        CompressionLock.release(session.id, me)
    return model.get_by_id(child_id)


def delegate(
    session: Session,
    *,
    session_id: str | None = None,
    source: str | None = None,
    model_name: str | None = None,
    system_prompt: str | None = None,
    at: float | None = None,
) -> Session:
    """Start a subagent run under ``session``: a child marked ``_delegate_from``."""
    model = type(session)
    child_id = _child_id(session_id)
    given = {
        "source": check_text(source, "source", optional=True, empty=False),
        "model_name": check_text(model_name, "model_name", optional=True),
        "system_prompt": check_text(system_prompt, "system_prompt", optional=True),
    }
    moment = _moment(at)

    def run() -> None:
        parent = model.get_by_id(session.id)
        fields = _child_fields(parent, {**_plain_config(parent), "_delegate_from": parent.id})
        fields.update({name: value for name, value in given.items() if value is not None})
        started = time.time() if moment is None else moment
        model.insert(id=child_id, started_at=started, **fields).execute()

    write(run)
    return model.get_by_id(child_id)


#: Age after which an unfinished continuation nobody used is closed.
ORPHANED_CONTINUATION_AGE_S = 7 * 86400.0


def finalize_orphaned_compression_sessions() -> int:
    """End, with ``'orphaned_compression'``, the continuations no agent ever picked up.

    A continuation qualifies when its parent ended with ``'compression'``,
    it holds messages (the summary) but never made an API call, it is still
    open, and it started more than a week ago. Nothing is deleted. Returns
    how many were ended.
    """
    now = time.time()
    parent = Session.alias("compressed")
    compressed = parent.select(SQL("1")).where(
        parent.id == Session.parent,
        parent.end_reason == "compression",
        parent.ended_at.is_null(False),
    )
    has_messages = Message.select(SQL("1")).where(Message.session == Session.id)
    query = Session.update(ended_at=now, end_reason="orphaned_compression").where(
        Session.api_call_count == 0,
        Session.end_reason.is_null(),
        Session.ended_at.is_null(),
        Session.started_at < now - ORPHANED_CONTINUATION_AGE_S,
        Session.parent.is_null(False),
        fn.EXISTS(compressed),
        fn.EXISTS(has_messages),
    )
    return int(write(query.execute))
