"""Which SQLite every connection of the package runs on, chosen once, here.

SQLite 3.7.0 to 3.51.2 has the WAL-reset bug: a file in WAL mode that several
connections write and checkpoint at the same time can be corrupted (fixed in
3.51.3, and in the 3.50.7 and 3.44.6 backports). Many Pythons link such a
build. The ``pysqlite3`` wheel, an install requirement where a wheel exists,
bundles a fixed SQLite behind the standard :mod:`sqlite3` interface.

:data:`sqlite3` is the module the package uses for every connection it opens
(peewee's, yoyo's, backups', the checks', the quick path's): ``sqlcipher3``
where it is installed (the ``encryption`` extra) and its SQLite lacks the bug,
else the first of ``pysqlite3`` and the standard library's :mod:`sqlite3` whose
SQLite lacks the bug, else the newer of the two. ``HERMES_MODELS_SQLITE``
chooses instead (``sqlcipher3``, ``pysqlite3`` or ``sqlite3``; ``auto`` or
unset: the rule above). A module is named ``sqlite3`` in this package whichever
it is; this module is the only one that imports any of them.

``sqlcipher3`` bundles SQLCipher, an SQLite (3.53.4 in its 0.6.4 wheels, with
FTS5 and the trigram tokenizer) that encrypts a file whose connections are given
a key (:mod:`hermes_models.store.cipher`); a connection given none reads and
writes plain files as any SQLite does. It is the process's one module rather
than a module for encrypted files alone: the package's cursors, rows and
exception classes are those of one module, and a connection of another module
would not take them.

Code written against the standard library catches its exception classes. The
``pysqlite3`` module's are its own, so when it is chosen each of its classes
below ``Error`` (``DatabaseError``, ``OperationalError``, ``IntegrityError``,
``InterfaceError``, …) gets the standard class of the same name as a second
base: an error it raises is an instance of both. Its ``Error`` and ``Warning``
cannot be given a second base (Python refuses to change the bases of a class
made directly from ``Exception``); :func:`standard_error` turns those into
classes that have both, and every store connection is a :data:`Connection`,
whose cursors do it (for a caller's raw SQL through ``SessionDB._conn`` too).
``pysqlite3`` raises its ``Warning`` only when one ``execute`` is given several
statements; the class made is then the standard ``Warning`` (what Python 3.10's
:mod:`sqlite3` raises there) and ``ProgrammingError`` (3.11+'s).
"""

from __future__ import annotations

import os
import sqlite3 as _standard
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

_cipher: ModuleType | None
try:
    from sqlcipher3 import dbapi2 as _cipher_dbapi2  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError:  # the encryption extra is not installed
    _cipher = None
else:
    _cipher = _cipher_dbapi2

_bundled: ModuleType | None
try:
    from pysqlite3 import dbapi2 as _dbapi2  # type: ignore[import-untyped]
except ImportError:  # no wheel for this platform, or not installed
    _bundled = None
else:
    _bundled = _dbapi2

#: The SQLite build's source id (its exact version and check-in).
SOURCE_ID = "SELECT sqlite_source_id()"

#: The environment variable that chooses the module: ``auto``, ``sqlcipher3``,
#: ``pysqlite3`` or ``sqlite3``.
MODULE_VARIABLE = "HERMES_MODELS_SQLITE"
_CHOICES = ("auto", "sqlcipher3", "pysqlite3", "sqlite3")

#: The DB-API exception classes below ``Error``, parents before children.
_JOINABLE = (
    "DatabaseError",
    "InterfaceError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
)


def has_wal_reset_bug(version: tuple[int, ...]) -> bool:
    """True when an SQLite of ``version`` (``(3, 40, 1)``) has the WAL-reset bug:
    3.7.0 (the first with WAL) to 3.51.2, except 3.44.6+ and 3.50.7+ of their lines."""
    info = tuple(version[:3]) + (0,) * (3 - len(version[:3]))
    if info < (3, 7, 0) or info >= (3, 51, 3):
        return False
    return not ((3, 44, 6) <= info < (3, 45, 0) or (3, 50, 7) <= info < (3, 51, 0))


def join_exceptions(module: ModuleType) -> bool:
    """Give each of ``module``'s exception classes below ``Error`` the standard library's
    class of the same name as a second base; True when every one is (now) a subclass."""
    if module is _standard:
        return True
    for name in _JOINABLE:
        cls, standard = getattr(module, name), getattr(_standard, name)
        if issubclass(cls, standard):
            continue
        try:
            cls.__bases__ = (*cls.__bases__, standard)
        except TypeError:
            return False
    return True


def _candidates() -> list[ModuleType]:
    return [m for m in (_cipher, _bundled, _standard) if m is not None]


def choose(setting: str | None = None) -> ModuleType:
    """The module for ``setting`` (see the module's docstring; None reads
    :data:`MODULE_VARIABLE`).

    Raises:
        ImportError: the setting is not one of ``auto``, ``pysqlite3``, ``sqlite3``,
            or names ``pysqlite3`` where it is not installed.
    """
    raw = os.environ.get(MODULE_VARIABLE, "") if setting is None else setting
    choice = raw.strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ImportError(f"{MODULE_VARIABLE}={raw!r}: expected one of {', '.join(_CHOICES)}")
    if choice == "sqlite3":
        return _standard
    if choice == "sqlcipher3":
        if _cipher is None:
            raise ImportError(
                f"{MODULE_VARIABLE}=sqlcipher3, but sqlcipher3 is not installed"
                " (pip install 'hermes_models[encryption]')"
            )
        return _cipher
    if choice == "pysqlite3":
        if _bundled is None:
            raise ImportError(f"{MODULE_VARIABLE}=pysqlite3, but pysqlite3 is not installed")
        return _bundled
    fixed = [m for m in _candidates() if not has_wal_reset_bug(m.sqlite_version_info)]
    if _cipher is not None and _cipher in fixed:
        # Installed only with the encryption extra: asked for, and it opens a plain
        # file as any SQLite does (see the module's docstring).
        return _cipher
    pool = [m for m in (fixed or _candidates()) if m is not _cipher] or _candidates()
    # The newest; the standard library's on a tie (nothing more to load or trust).
    newest: ModuleType = max(reversed(pool), key=lambda m: m.sqlite_version_info)
    return newest


def _chosen() -> ModuleType:
    module = choose()
    if not join_exceptions(module):
        # Its errors could not be made the standard library's: callers written for
        # sqlite3 would miss them. The standard module is the safe choice then.
        return _standard
    return module


if TYPE_CHECKING:
    import sqlite3 as sqlite3
else:
    #: The module every connection of the package is opened with.
    sqlite3 = _chosen()

#: The standard library's :mod:`sqlite3` (for the classes Hermes' callers catch).
standard = _standard

#: The SQLite the package runs on, as ``"3.53.4"`` and ``(3, 53, 4)``.
SQLITE_VERSION: str = sqlite3.sqlite_version
SQLITE_VERSION_INFO: tuple[int, int, int] = sqlite3.sqlite_version_info
#: Whether that SQLite has the WAL-reset bug (the journal policy of
#: :mod:`hermes_models.store.journal` then keeps files out of WAL).
WAL_RESET_BUG: bool = has_wal_reset_bug(SQLITE_VERSION_INFO)
#: The module's import name: ``"sqlcipher3.dbapi2"``, ``"pysqlite3.dbapi2"`` or ``"sqlite3"``.
MODULE_NAME: str = sqlite3.__name__
#: Whether connections can open and write encrypted files (the module is sqlcipher3).
ENCRYPTION: bool = _cipher is not None and sqlite3 is _cipher

_joined: dict[type[BaseException], type[BaseException]] = {}


def standard_error(exc: BaseException) -> BaseException:
    """``exc`` if it is an instance of a standard :mod:`sqlite3` class (or not an
    SQLite error at all); else the same error as a class that has both."""
    kind = type(exc)
    if isinstance(exc, (_standard.Error, _standard.Warning)):
        return exc
    if not isinstance(exc, (sqlite3.Error, sqlite3.Warning)):
        return exc
    joined = _joined.get(kind)
    if joined is None:
        # pysqlite3 raises its Warning for several statements in one execute, where the
        # standard library raised Warning up to Python 3.10 and ProgrammingError since:
        # the class made is both, for callers written against either.
        bases: tuple[type[BaseException], ...] = (
            (_standard.Warning, _standard.ProgrammingError)
            if isinstance(exc, sqlite3.Warning)
            else (_standard.Error,)
        )
        for name in _JOINABLE:
            if isinstance(exc, getattr(sqlite3, name)):
                bases = (getattr(_standard, name),)
                break
        joined = _joined[kind] = type(kind.__name__, (kind, *bases), {"__module__": __name__})
    new = joined(*exc.args)
    for attribute in ("sqlite_errorcode", "sqlite_errorname"):
        if hasattr(exc, attribute):
            setattr(new, attribute, getattr(exc, attribute))
    return new


def _translated(exc: BaseException) -> BaseException | None:
    """The error to raise instead of ``exc`` (see :func:`standard_error`), None to keep it."""
    new = standard_error(exc)
    return None if new is exc else new


if TYPE_CHECKING or sqlite3 is _standard:
    #: The connection class of every store connection (see :data:`Connection`).
    Connection = sqlite3.Connection
else:

    class _Cursor(sqlite3.Cursor):  # type: ignore[misc,name-defined]
        """A cursor whose errors are all the standard library's (``Warning``, ``Error``)."""

        def execute(self, *args: Any) -> Any:
            try:
                return super().execute(*args)
            except (sqlite3.Warning, sqlite3.Error) as exc:
                new = _translated(exc)
                if new is None:
                    raise
                raise new from None

        def executemany(self, *args: Any) -> Any:
            try:
                return super().executemany(*args)
            except (sqlite3.Warning, sqlite3.Error) as exc:
                new = _translated(exc)
                if new is None:
                    raise
                raise new from None

        def executescript(self, *args: Any) -> Any:
            try:
                return super().executescript(*args)
            except (sqlite3.Warning, sqlite3.Error) as exc:
                new = _translated(exc)
                if new is None:
                    raise
                raise new from None

    class Connection(sqlite3.Connection):  # type: ignore[misc,name-defined,no-redef]
        """The bundled module's connection, whose cursors (``execute`` makes one too)
        raise only errors that are instances of the standard library's classes: the
        ``Warning`` and ``Error`` that cannot take a second base (a caller's raw SQL
        through ``SessionDB._conn``) become classes of both."""

        def cursor(self, factory: Any = _Cursor) -> Any:
            return super().cursor(factory)


#: Where a mask of :func:`whole_arguments` starts its bits saying which values are text.
TEXT_BITS = 3


class UndecodedText(ValueError):
    """A text argument of an SQL function came as None: text that is not UTF-8, which
    pysqlite3 hands over as None where the standard library's module fails the call."""


def whole_arguments(mask: int, values: tuple[object, ...]) -> tuple[object, ...]:
    """``values`` with those a search's scan handed over as UTF-8 bytes (text holding a
    NUL; bit ``i`` of ``mask`` set for the ``i``-th) as text again.

    Bit ``TEXT_BITS + i`` set says the ``i``-th is text in the file: when it came as
    None, the text is not UTF-8 and :class:`UndecodedText` is raised, so that the
    call fails as it does on the standard library's module (the caller then reads
    the text as bytes) instead of seeing no text at all.

    Raises:
        UndecodedText: a value the mask says is text came as None.
    """
    if mask >> TEXT_BITS and None in values:
        for i, value in enumerate(values):
            if value is None and mask >> (TEXT_BITS + i) & 1:
                raise UndecodedText(f"argument {i + 1} is text that is not UTF-8")
    mask &= (1 << TEXT_BITS) - 1
    if not mask:
        return values
    return tuple(
        bytes(value).decode("utf-8", "surrogateescape")
        if mask >> i & 1 and isinstance(value, (bytes, memoryview))
        else value
        for i, value in enumerate(values)
    )


_keeps_failed_row: bool | None = None


def keeps_failed_row() -> bool:
    """True when a cursor that failed to convert a row (text that is not UTF-8) hands
    that row over at the next ``fetchone`` once conversion can succeed (the standard
    library's module). pysqlite3 reads a row ahead: the failure loses the row it was
    about to return and ends the statement, so a reader must run it again. Found out
    once, on a database in memory."""
    global _keeps_failed_row
    if _keeps_failed_row is None:
        conn = sqlite3.connect(":memory:")
        try:
            # Three text values, the second not UTF-8.
            cursor = conn.execute(
                "SELECT CAST(column1 AS TEXT) FROM (VALUES (x'61'), (x'ff'), (x'62'))"
            )
            rows: list[object] = []
            for _ in range(5):
                try:
                    rows.append(cursor.fetchone())
                except sqlite3.OperationalError:
                    conn.text_factory = lambda data: data.decode("utf-8", "replace")
            _keeps_failed_row = rows[:3] == [("a",), ("\ufffd",), ("b",)]
        finally:
            conn.close()
    return _keeps_failed_row


_source_id: str | None = None


def source_id() -> str:
    """``sqlite_source_id()`` of the SQLite the package runs on (its exact build)."""
    global _source_id
    if _source_id is None:
        conn = sqlite3.connect(":memory:")
        try:
            _source_id = str(conn.execute(SOURCE_ID).fetchone()[0])
        finally:
            conn.close()
    return _source_id


def sqlite_info() -> dict[str, object]:
    """The SQLite the package runs on, for ``stats`` and ``doctor``: ``module``,
    ``version``, ``source_id``, ``wal_reset_bug``, and the standard library's
    ``standard_version`` beside it."""
    return {
        "module": MODULE_NAME,
        "version": SQLITE_VERSION,
        "source_id": source_id(),
        "wal_reset_bug": WAL_RESET_BUG,
        "standard_version": _standard.sqlite_version,
    }


__all__ = [
    "ENCRYPTION",
    "MODULE_NAME",
    "MODULE_VARIABLE",
    "SQLITE_VERSION",
    "SQLITE_VERSION_INFO",
    "TEXT_BITS",
    "WAL_RESET_BUG",
    "Connection",
    "UndecodedText",
    "choose",
    "has_wal_reset_bug",
    "join_exceptions",
    "keeps_failed_row",
    "source_id",
    "sqlite3",
    "sqlite_info",
    "standard",
    "standard_error",
    "whole_arguments",
]
