"""File names as SQLite reads them in a ``file:`` URI, without :mod:`urllib`.

A store is opened through a ``file:`` URI (read-only modes, ``immutable``),
where SQLite decodes ``%XX`` escapes and stops the name at ``?`` or ``#``. The
escaping is done here rather than with :func:`urllib.parse.quote`: importing
:mod:`urllib.parse` (with :mod:`ipaddress`, which it loads) costs about as
much as everything else opening a store does. The quick path of
``hermes-models sessions`` (:mod:`hermes_models.quick`), which loads no peewee,
escapes its names here too.
"""

from __future__ import annotations

import os

#: Bytes a name keeps as they are: what :func:`urllib.parse.quote` keeps with ``safe="/"``.
_KEPT = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-~")


def uri_path(path: str | os.PathLike[str]) -> str:
    """``path`` for a ``file:`` URI: every byte of its file-system encoding but ASCII
    letters, digits and ``/._-~`` percent-encoded (a name that cannot be written in
    UTF-8 keeps its bytes, as :func:`os.fsencode` gives them)."""
    return "".join(chr(byte) if byte in _KEPT else f"%{byte:02X}" for byte in os.fsencode(path))


def sqlite_uri(path: str | os.PathLike[str], **params: str) -> str:
    """A ``file:`` URI for ``path`` with ``#``, ``?``, ``%`` and spaces escaped, and
    ``params`` (``mode=ro``, ``immutable=1``) after it."""
    uri = "file:" + uri_path(path)
    if params:
        uri += "?" + "&".join(f"{key}={value}" for key, value in params.items())
    return uri


__all__ = ["sqlite_uri", "uri_path"]
