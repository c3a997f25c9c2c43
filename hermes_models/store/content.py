"""Message content as one line of text: the one rule, :func:`content_text`.

A message's content is text, or (multimodal messages) a list of parts -
``{"type": "text", "text": ...}``, ``{"type": "image_url", ...}`` - or a
dict, stored as Hermes' ``"\\x00json:"`` JSON. Every place the package turns
decoded content into text goes through :func:`content_text`:

- previews of recent user messages and what the command line shows use
  Hermes' own rule (the defaults): text parts only, else
  ``[multimodal content]``; the command line adds ``[image]`` markers;
- a search hit's ``context`` (:func:`hermes_models.search.present.text_of`)
  follows Hermes' rule too;
- listing previews (:func:`hermes_models.conversations.listing.preview_text`) keep the
  text of every part that has some, and ``""`` when none has (where Hermes
  shows the stored JSON envelope);
- search snippets (:func:`hermes_models.models.tables.readable`) keep every part
  with text too, so that a word the search matched in, say, an
  ``input_text`` part is visible, and show the JSON when no part has text.

The three differ only in the arguments below, so a fix to the rule is made
once.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from . import sqlite_sql

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

logger = logging.getLogger("hermes_models")

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
    :func:`hermes_models.models.tables.encode_content`."""
    if not isinstance(stored, str) or not stored.startswith(CONTENT_JSON_PREFIX):
        return stored  # text, NULL, or a value another writer stored (a BLOB, a number)

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

    return json.dumps(content, ensure_ascii=False)


# -- text that is not UTF-8 ---------------------------------------------------------------------
# Another program may store text whose bytes are not UTF-8 (a truncated multi-byte
# write). sqlite3 fails reading such a value ("Could not decode to UTF-8 column ...").
# The rule: such text is read with U+FFFD for each invalid sequence (Python's
# errors="replace"), the gram index indexes that text (hermes_models.store.grams), and
# the commands say which row it is. Reading every value that way costs ~75 ns a
# value, so a handle switches to it only once it met such text (``lenient_text``).

#: The words of sqlite3's error reading text that is not UTF-8.
DECODE_ERROR = "Could not decode to UTF-8"
#: The words of sqlite3's error when such text is handed to an SQL function of ours.
FUNCTION_ERROR = "user-defined function raised exception"

#: Files whose text this process reads with :func:`lenient_text` (one met such text).
LENIENT_FILES: set[str] = set()


def is_decode_error(exc: BaseException) -> bool:
    """True when ``exc`` (or the sqlite3 error it wraps) is sqlite3 failing to read text
    that is not UTF-8."""
    for error in (exc, getattr(exc, "orig", None), exc.__cause__):
        if error is not None and DECODE_ERROR in str(error):
            return True
    return False


def lenient_text(data: bytes) -> str:
    """A text value read as UTF-8, each invalid sequence as U+FFFD (a ``text_factory``)."""
    return data.decode("utf-8", "replace")


#: The tables whose text columns are looked at for bytes that are not UTF-8.
DAMAGE_TABLES = ("sessions", "messages")


def damaged_text(conn: Any, limit: int = 10) -> tuple[list[tuple[str, Any, str]], int]:
    """Values whose text is not UTF-8: up to ``limit`` of ``(table, key, column)`` (the key:
    a message's id, a session's id as read with U+FFFD), and how many there are. Reads
    every text column of every row of :data:`DAMAGE_TABLES`, each value as its bytes
    (for the command that met one, and ``doctor``)."""
    found: list[tuple[str, Any, str]] = []
    total = 0
    for table in DAMAGE_TABLES:
        info = conn.execute(sqlite_sql.table_info(table)).fetchall()
        columns = [str(row[1]) for row in info if "TEXT" in str(row[2]).upper()]
        if not columns:
            continue
        for row in conn.execute(sqlite_sql.text_as_bytes(table, columns)):
            values = dict(zip(columns, row[1:]))
            for column, value in values.items():
                if value is not None and not _utf8(value):
                    total += 1
                    if len(found) < limit:
                        key = row[0] if table == "messages" else values.get("id")
                        key = lenient_text(key) if isinstance(key, bytes) else key
                        found.append((table, key, column))
    return found, total


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def describe_damage(label: str, found: list[tuple[str, Any, str]], total: int) -> str:
    """One line naming the rows :func:`damaged_text` found."""
    named = ", ".join(
        f"{'message' if table == 'messages' else 'session'} {key!r} ({column})"
        for table, key, column in found
    )
    more = f" and {total - len(found)} more" if total > len(found) else ""
    return (
        f"{label}: text that is not UTF-8 in {named}{more}; shown with U+FFFD replacement "
        "characters"
    )


def rows_read_leniently(db: Any, cursor: Any) -> Iterator[Any]:
    """The rows of ``cursor`` (a cursor of ``db``'s connection), read as they come; text
    that is not UTF-8 switches ``db`` to :func:`lenient_text` and the same row is read
    again (sqlite3 keeps it), so a stream of rows never stops at such a value."""
    while True:
        try:
            row = cursor.fetchone()
        except Exception as exc:
            if not is_decode_error(exc) or db.file in LENIENT_FILES:
                raise
            db.read_leniently()
            continue
        if row is None:
            return
        yield row
