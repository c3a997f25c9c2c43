"""Message content as one line of text.

A message's content is text, or (multimodal messages) a list of parts -
``{"type": "text", "text": ...}``, ``{"type": "image_url", ...}`` - or a
dict, stored as Hermes' ``"\\x00json:"`` JSON. Wherever the package shows
decoded content as text (previews of recent user messages and of listings,
what the command line shows) it uses :func:`content_text`, which follows
Hermes' own rule: a multimodal message is flattened to its text parts, or
``[multimodal content]`` when it has none.
"""

from __future__ import annotations

from typing import Any

#: What a multimodal message without any text part reads as (Hermes' words).
MULTIMODAL = "[multimodal content]"
#: The marker the command line puts where a message has a picture.
IMAGE = "[image]"


def content_text(content: Any, *, image: str | None = None) -> str:
    """Decoded message content as text, by Hermes' rule.

    Text stays as it is and None is ``""``. A list of parts (a dict counts as
    one part) becomes the non-empty ``text`` of its ``type: "text"`` parts,
    joined by spaces and stripped, or :data:`MULTIMODAL` when it has none;
    with ``image`` given, each part whose type names an image adds that
    marker in its place (Hermes leaves pictures out). Any other value is
    its ``str()``.
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
        return str(content)
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if isinstance(text, str) and text:
                texts.append(text)
        elif image is not None and "image" in str(kind or ""):
            texts.append(image)
    return " ".join(texts).strip() or MULTIMODAL


__all__ = ["IMAGE", "MULTIMODAL", "content_text"]
