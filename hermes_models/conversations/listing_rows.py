"""Listing rows as the SQL returns them, finished in Python: previews and chain tips.

Shared by :mod:`hermes_models.conversations.listing` and the command's quick path
(:mod:`hermes_models.quick`), which must not load peewee.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store import CONTENT_JSON_PREFIX, content_text, decode_content

if TYPE_CHECKING:
    from typing import Any

#: Characters of a preview before it is cut and ``...`` appended.
PREVIEW_CHARS = 60
#: Characters of the first user message a preview is made from.
PREVIEW_SOURCE_CHARS = 63
#: The columns a compressed chain's row takes from its tip (with preview and last_active).
TIP_COLUMNS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "model",
    "system_prompt",
    "cwd",
)
#: What a row takes from its tip besides, on files of Hermes v17 and later.
NEWER_TIP_COLUMNS = ("git_branch", "git_repo_root")


def preview_text(content: Any) -> str:
    """The preview of a first user message, as Hermes makes it.

    Line breaks become spaces, the first 63 characters are kept and
    stripped, and more than 60 left become 60 plus ``...``. List content
    (stored as JSON) is previewed by its text parts, dict content by its JSON.
    Where Hermes previews the stored JSON envelope of list content, listings
    show the text of every part that has one, and ``""`` when none has
    (:func:`hermes_models.store.content.content_text` with ``every_part``).
    """
    if isinstance(content, str) and content.startswith(CONTENT_JSON_PREFIX):
        decoded = decode_content(content)
        content = decoded if isinstance(decoded, list) else content[len(CONTENT_JSON_PREFIX) :]
    if isinstance(content, list):
        text = content_text(content, every_part=True, empty="")
    else:
        text = content if isinstance(content, str) else "" if content is None else str(content)
    raw = text.replace("\n", " ").replace("\r", " ")[:PREVIEW_SOURCE_CHARS].strip()
    return raw if len(raw) <= PREVIEW_CHARS else raw[:PREVIEW_CHARS] + "..."


def preview_of(row: dict[str, Any], prefix: str) -> str:
    """The preview of ``row`` from its ``{prefix}preview`` and ``{prefix}preview_json``
    columns, which it takes out of the row."""
    stored_json = row.pop(f"{prefix}preview_json")
    head = row.pop(f"{prefix}preview")
    return preview_text(stored_json if stored_json is not None else head)


def finish_row(row: dict[str, Any], *, root_title: bool = False) -> dict[str, Any]:
    """A listing row as the SQL gave it, finished: its preview made, and a chain's
    row given its tip's columns (the ``_tip_`` ones; ``_lineage_root_id`` naming the
    surfaced row). ``root_title``: a tip without a title shows the root's (Hermes v30+)."""
    root_id = row.pop("_root_id")
    row["preview"] = preview_of(row, "")
    if "_tip_id" not in row:
        return row
    tip_preview = preview_of(row, "_tip_")
    tip = {key[len("_tip_") :]: row.pop(key) for key in [k for k in row if k.startswith("_tip_")]}
    tip["preview"] = tip_preview
    if tip["id"] is not None and tip["id"] != root_id:
        title = row.get("title")
        row.update(tip)
        row["_lineage_root_id"] = root_id
        if root_title and row.get("title") is None:
            row["title"] = title
    return row
