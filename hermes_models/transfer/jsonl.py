"""Reading JSON Lines files that may be hostile: bounded lines, every failure named.

Bundles and legacy transcripts are JSON Lines. A line is read with a limit
(:data:`MAX_LINE_BYTES`), so a file with one enormous line costs at most
that much memory before it is refused. Every way a line can fail — too
long, not UTF-8, not JSON, nested too deeply for Python's parser, not a
JSON object — becomes a :class:`~hermes_models.errors.BundleError` that
starts with ``"<file>:<line>: "``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from ..errors import BundleError

#: Longest line read, in bytes (characters when reading a text stream).
MAX_LINE_BYTES = 64 * 1024 * 1024


def _too_long(where: str) -> BundleError:
    return BundleError(f"{where}: line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB")


def lines(handle: IO[Any], origin: str) -> Iterator[tuple[int, str, str]]:
    """``(line number, "origin:line", text)`` for each line of a binary or text stream.

    Binary streams are decoded as strict UTF-8, line by line.

    Raises:
        BundleError: a line is longer than :data:`MAX_LINE_BYTES` or not UTF-8.
    """
    number = 0
    while True:
        chunk = handle.readline(MAX_LINE_BYTES + 1)
        if not chunk:
            return
        number += 1
        where = f"{origin}:{number}"
        if len(chunk) > MAX_LINE_BYTES and chunk[-1:] not in ("\n", b"\n"):
            raise _too_long(where)
        if isinstance(chunk, bytes):
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BundleError(
                    f"{where}: not UTF-8 text (byte {exc.start + 1} of the line is "
                    f"0x{chunk[exc.start]:02x})"
                ) from None
        else:
            text = chunk
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise BundleError(
                        f"{where}: holds text that cannot be stored as UTF-8 (a lone surrogate)"
                    ) from None
        yield number, where, text


def parse_object(text: str, where: str) -> dict[str, Any]:
    """One line parsed as a JSON object.

    Raises:
        BundleError: the text is not JSON, is nested too deeply, or is not an object.
    """
    try:
        record = json.loads(text)
    except RecursionError:
        raise BundleError(f"{where}: JSON nested too deeply to read") from None
    except json.JSONDecodeError:
        raise BundleError(f"{where}: not valid JSON") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise BundleError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(record, dict):
        raise BundleError(f"{where}: a line must be a JSON object")
    if "\\u" in text and _has_lone_surrogate(record):
        raise BundleError(f"{where}: holds text that cannot be stored as UTF-8 (a lone surrogate)")
    return record


def _has_lone_surrogate(value: Any) -> bool:
    """True when a string in ``value`` (keys included) has a lone surrogate, which only a
    ``\\ud800``-style escape can produce; walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def objects(handle: IO[Any], origin: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line number, "origin:line", object)`` for each non-blank line.

    Raises:
        BundleError: a line fails as described in :func:`lines` and :func:`parse_object`.
    """
    for number, where, text in lines(handle, origin):
        if text.strip():
            yield number, where, parse_object(text, where)
