"""Message content as one line of text: the one rule, :func:`content_text`.

A message's content is text, or (multimodal messages) a list of parts -
``{"type": "text", "text": ...}``, ``{"type": "image_url", ...}`` - or a
dict, stored as Hermes' ``"\\x00json:"`` JSON. Every place the package turns
decoded content into text goes through :func:`content_text`:

- previews of recent user messages and what the command line shows use
  Hermes' own rule (the defaults): text parts only, else
  ``[multimodal content]``; the command line adds ``[image]`` markers;
- a search hit's ``context`` (:func:`hermes_models.present.text_of`)
  follows Hermes' rule too;
- listing previews (:func:`hermes_models.listing.preview_text`) keep the
  text of every part that has some, and ``""`` when none has (where Hermes
  shows the stored JSON envelope);
- search snippets (:func:`hermes_models.models.readable`) keep every part
  with text too, so that a word the search matched in, say, an
  ``input_text`` part is visible, and show the JSON when no part has text.

The three differ only in the arguments below, so a fix to the rule is made
once.
"""

from __future__ import annotations

from .hints import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

#: What a multimodal message without any text part reads as (Hermes' words).
MULTIMODAL = "[multimodal content]"
#: The marker the command line puts where a message has a picture.
IMAGE = "[image]"

#: Prefix Hermes puts before JSON-encoded (list or dict) message content.
CONTENT_JSON_PREFIX = "\x00json:"


def stored_text(value: object) -> str:
    """A column's value shown as text: text as it is, a BLOB (bytes) as UTF-8, as
    ``CAST(... AS TEXT)`` reads it (bytes that are not UTF-8 replaced), any other
    value as its ``str()``. (Search's substring matching does not read a BLOB so:
    ``LIKE`` never matches one.)"""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def decode_content(stored: str | None) -> Any:
    """Message content as appended: the inverse of
    :func:`hermes_models.models.encode_content`."""
    if not isinstance(stored, str) or not stored.startswith(CONTENT_JSON_PREFIX):
        return stored  # text, NULL, or a value another writer stored (a BLOB, a number)
    import json  # loaded on the first JSON content: a listing of text starts faster

    try:
        return json.loads(stored[len(CONTENT_JSON_PREFIX) :])
    except (ValueError, RecursionError):
        return stored


def content_text(
    content: Any,
    *,
    image: str | None = None,
    every_part: bool = False,
    empty: str | None = MULTIMODAL,
) -> str:
    """Decoded message content as text.

    Text stays as it is and None is ``""``. A list of parts (a dict counts as
    one part) becomes the non-empty ``text`` of its parts, joined by spaces:
    of its ``type: "text"`` parts (Hermes' rule), or of every part with
    ``every_part`` (parts that are not objects are skipped). With ``image`` given,
    each part whose type names an image and that has no text adds that marker
    in its place (Hermes leaves pictures out). When no part gives text the
    result is ``empty``, or with ``empty=None`` the content's JSON. Hermes'
    rule also strips the joined text, so whitespace-only parts read as
    ``empty``. Bytes (a BLOB another writer stored) read as UTF-8, as SQLite
    reads a BLOB as text; any other value is its ``str()``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        parts: list[Any] = [content]
    elif isinstance(content, list):
        parts = content
    else:
        return stored_text(content)
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = str(part.get("type") or "")
        text = part.get("text")
        if (every_part or kind == "text") and isinstance(text, str) and text:
            texts.append(text)
        elif image is not None and "image" in kind:
            texts.append(image)
    joined = " ".join(texts)
    if not every_part:
        joined = joined.strip()
    if joined:
        return joined
    if empty is not None:
        return empty
    import json  # loaded on the first content without text: a listing starts faster

    return json.dumps(content, ensure_ascii=False)


__all__ = [
    "CONTENT_JSON_PREFIX",
    "IMAGE",
    "MULTIMODAL",
    "content_text",
    "decode_content",
    "stored_text",
]
