"""Originals behind handles, in memory: the cache that keeps them when no store does."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Annotated

from .._config import Ge, check

__all__ = ["DEFAULT_REFERENCE_CAPACITY", "ReferenceCache", "default_references"]

DEFAULT_REFERENCE_CAPACITY = 256
"""Originals a [`ReferenceCache`][contextfold.stores.ReferenceCache] keeps by default."""

_NO_SCOPE = ""


class ReferenceCache:
    """Originals behind handles, in memory, least recently used evicted first.

    It has the store's ``put_original``/``get_original`` shape, scoped the same way by
    conversation: nothing it answers about one conversation depends on what it holds for
    another. Evicted handles are remembered (up to ``4 * capacity`` of them) so a read
    answers "expired" instead of "unknown". Thread-safe.

    Args:
        capacity: the most originals kept (over every conversation).
    """

    def __init__(self, capacity: int = DEFAULT_REFERENCE_CAPACITY) -> None:
        check("ReferenceCache", "capacity", capacity, Annotated[int, Ge(1)])
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._expired: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ReferenceCache(capacity={self.capacity}, size={len(self)})"

    def put_original(self, conversation_id: str | None, handle: str, text: str) -> None:
        """Keep ``text`` behind ``handle`` in this conversation (the newest entry)."""
        key = (conversation_id or _NO_SCOPE, handle)
        with self._lock:
            self._items[key] = text
            self._items.move_to_end(key)
            self._expired.pop(key, None)
            while len(self._items) > self.capacity:
                old, _ = self._items.popitem(last=False)
                self._expired[old] = None
                if len(self._expired) > 4 * self.capacity:
                    self._expired.popitem(last=False)

    def get_original(self, conversation_id: str | None, handle: str) -> str | None:
        """The text behind ``handle`` in this conversation (marked recently used), or ``None``."""
        key = (conversation_id or _NO_SCOPE, handle)
        with self._lock:
            text = self._items.get(key)
            if text is not None:
                self._items.move_to_end(key)
            return text

    def held(self, conversation_id: str | None, handles: Iterable[str]) -> set[str]:
        """Those of ``handles`` this conversation still holds, each marked recently used in
        the order given (as ``get_original`` would, under one lock)."""
        scope = conversation_id or _NO_SCOPE
        found = set()
        with self._lock:
            for handle in handles:
                key = (scope, handle)
                if key in self._items:
                    self._items.move_to_end(key)
                    found.add(handle)
        return found

    def expired(self, conversation_id: str | None, handle: str) -> bool:
        """True when this conversation's ``handle`` was evicted."""
        return (conversation_id or _NO_SCOPE, handle) in self._expired

    def clear(self) -> None:
        """Forget every original."""
        with self._lock:
            self._items.clear()
            self._expired.clear()


_DEFAULT = ReferenceCache()


def default_references() -> ReferenceCache:
    """The module-level cache that plain ``compact()``/``acompact()`` calls keep originals in."""
    return _DEFAULT
