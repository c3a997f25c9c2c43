"""Which database the models use: the proxy every model is bound to, and the
handle it points at here.

Models are bound to :data:`database`, a proxy that points at the database
most recently opened by :func:`hermes_models.connect`, or, inside
:func:`using`, at the database a piece of code asked for (``SessionDB`` uses
that to keep two open files apart). What :func:`using` chooses lives in a
context variable, so it applies only in the thread (or asyncio task) that chose it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import peewee

if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

    from .backend import Backend


_current: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "hermes_models_database", default=None
)


class _Binding(peewee.DatabaseProxy):
    """The proxy models are bound to: :func:`using` first, else the last connect()."""

    __slots__ = ("_default",)

    def __init__(self) -> None:
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "_default", None)

    @property
    def obj(self) -> Backend | None:
        return _current.get() or self._default

    def initialize(self, obj: Any) -> None:
        object.__setattr__(self, "_default", obj)
        for callback in self._callbacks:
            callback(obj)

    def __setattr__(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)


#: What every model's ``Meta.database`` points at.
database = _Binding()


#: ``bind_current(db)`` routes the models to ``db`` here until
#: ``unbind_current(token)`` (see :func:`using`). They are the context variable's
#: own methods: every ``SessionDB`` call runs them, and a Python function around
#: each would cost more than the variable itself.
bind_current: Callable[[Backend], contextvars.Token[Backend | None]] = _current.set
unbind_current: Callable[[contextvars.Token[Backend | None]], None] = _current.reset


@contextlib.contextmanager
def using(db: Backend) -> Iterator[Backend]:
    """Make the models use ``db`` in this thread (or task) inside the block."""
    token = _current.set(db)
    try:
        yield db
    finally:
        _current.reset(token)


def current() -> Backend:
    """The database the models use here.

    Raises:
        RuntimeError: nothing was connected yet.
    """
    db = _current.get() or database.obj  # the first is the common case, and cheaper
    if db is None:
        raise RuntimeError("no database: call hermes_models.connect() first")
    return db


def file_key() -> tuple[Any, ...]:
    """What SQL built for the bound file depends on (:attr:`FileShape.key`; ``()`` unknown)."""
    shape = current().shape
    return () if shape is None else shape.key


def newer_file() -> bool:
    """True when the bound file is newer than v16 (read with Hermes' later rules)."""
    shape = current().shape
    return shape is not None and shape.newer


def file_has(table: str, column: str) -> bool:
    """True when ``table`` of the bound file has ``column`` (as probed at open)."""
    shape = current().shape
    return shape is not None and shape.has(table, column)


def write(fn: Callable[[], T], *, db: Backend | None = None) -> T:
    """Run ``fn`` as one write transaction, retried (on a file, ``BEGIN IMMEDIATE``:
    :meth:`hermes_models.store.db.HermesDatabase.write`)."""
    return (db or current()).write(fn)


def write_deletion(fn: Callable[[], T], *, db: Backend | None = None) -> T:
    """:func:`write` for a transaction that deletes sessions and what hangs from them
    (on a server at ``REPEATABLE READ``:
    :meth:`hermes_models.store.postgres.PostgresDatabase.write_deletion`)."""
    return (db or current()).write_deletion(fn)
