"""The one kind of cache the package keeps: small, bounded, least recently used first out.

Rendering SQL costs more than running it, so statements are cached by the
shape of what they do — and shapes come from user input (how many terms a
query has, how many sources a filter names). Every cache is therefore a
:class:`BoundedCache` with a fixed number of entries, and every "warn once"
record a :class:`BoundedSet`; both register themselves so a test can check
that none outgrows its bound.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_registry: weakref.WeakSet[Any] = weakref.WeakSet()


class BoundedCache(Generic[K, V]):
    """A mapping of at most ``size`` entries; the least recently used goes first."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        _registry.add(self)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value for ``key``, made (outside the lock) and kept when missing."""
        value = self.find(key)
        return self.keep(key, make()) if value is None else value

    def find(self, key: K) -> V | None:
        """The value kept for ``key``, or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def keep(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` (the least recently used entry goes when full);
        returns it."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[K]:
        """The keys held now, least recently used first."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()


class BoundedSet(Generic[K]):
    """A set of at most ``size`` members (for "only once" records); the oldest goes first."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self._members: OrderedDict[K, None] = OrderedDict()
        self._lock = threading.Lock()
        _registry.add(self)

    def add(self, member: K) -> bool:
        """Add ``member``; True when it was not there yet."""
        with self._lock:
            if member in self._members:
                return False
            self._members[member] = None
            while len(self._members) > self.size:
                self._members.popitem(last=False)
            return True

    def discard(self, member: K) -> None:
        """Remove ``member`` if present."""
        with self._lock:
            self._members.pop(member, None)

    def __contains__(self, member: object) -> bool:
        return member in self._members

    def __len__(self) -> int:
        return len(self._members)


def registered() -> list[BoundedCache[Any, Any] | BoundedSet[Any]]:
    """Every cache and set made so far (alive), for checks."""
    return sorted(_registry, key=lambda cache: cache.name)
