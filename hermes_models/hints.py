"""What the package takes from :mod:`typing` at run time, without importing it.

Every module has ``from __future__ import annotations``, so annotations are
never evaluated and :mod:`typing` serves type checkers only — apart from
``cast``, which is called, and ``Generic``, which a class names as its base.
Importing :mod:`typing` costs about 3 ms, a tenth of what the package adds to
peewee's own start-up, so modules take these names from here instead and
import the rest of :mod:`typing` under ``if TYPE_CHECKING:``. For a type
checker (which reads ``TYPE_CHECKING`` as true by its name) they are
:mod:`typing`'s own.
"""

from __future__ import annotations

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Generic as Generic
    from typing import cast as cast
else:

    def cast(kind, value):
        """``value`` itself: ``kind`` only tells a type checker what it is."""
        return value

    class Generic:
        """Stands in for :class:`typing.Generic` as a base: ``Generic[K, V]`` is this class."""

        __slots__ = ()

        def __class_getitem__(cls, params):
            return cls


__all__ = ["TYPE_CHECKING", "Generic", "cast"]
