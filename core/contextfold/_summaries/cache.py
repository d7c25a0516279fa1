"""Content-hash summary caches: the same span is never summarized twice.

Keys are [`SummaryRequest.cache_key`][contextfold.policy.SummaryRequest.cache_key] (a hash of the
messages' fingerprints, the instructions and the size hint).
[`LRUSummaryCache`][contextfold.stores.LRUSummaryCache] keeps recent summaries in memory with LRU
eviction; `StoreSummaryCache` persists them in a history store that has
``get_summary``/``put_summary``; `LayeredSummaryCache` puts memory in front of a store so a fresh
process reuses what an earlier one paid for.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Annotated, Protocol, runtime_checkable

from .._config import Ge, check
from .._stores.protocols import HistoryStore, SummaryStore
from ..errors import ConfigurationError

__all__ = ["LRUSummaryCache", "LayeredSummaryCache", "StoreSummaryCache", "SummaryCache"]

logger = logging.getLogger("contextfold")


@runtime_checkable
class SummaryCache(Protocol):
    """Where summaries are kept by content hash."""

    def get(self, key: str) -> str | None:
        """The summary stored under ``key``, or ``None``."""
        ...

    def put(self, key: str, text: str) -> None:
        """Store ``text`` under ``key``."""
        ...


class LRUSummaryCache:
    """An in-memory cache that evicts the least recently used summary past ``maxsize``.

    Thread-safe; ``hits`` and ``misses`` count lookups.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        check("LRUSummaryCache", "maxsize", maxsize, Annotated[int, Ge(1)])
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The summary under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            text = self._data.get(key)
            if text is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return text

    def put(self, key: str, text: str) -> None:
        """Store ``text``; evict the least recently used entry when full."""
        with self._lock:
            self._data[key] = text
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data


class StoreSummaryCache:
    """A cache persisted in a history store (``get_summary(key)``/``put_summary(key, text)``).

    A store that fails is logged and treated as a miss: a broken cache never breaks
    compaction.
    """

    def __init__(self, store: SummaryStore) -> None:
        if not isinstance(store, SummaryStore):
            raise ConfigurationError(
                f"{type(store).__name__} has no get_summary/put_summary; it cannot hold summaries"
            )
        self.store = store

    def get(self, key: str) -> str | None:
        """The persisted summary, or ``None`` (also when the store fails)."""
        try:
            text = self.store.get_summary(key)
        except Exception:
            logger.warning("contextfold: summary cache read failed", exc_info=True)
            return None
        return text if isinstance(text, str) else None

    def put(self, key: str, text: str) -> None:
        """Persist ``text``; a failing store is logged, not raised."""
        try:
            self.store.put_summary(key, text)
        except Exception:
            logger.warning("contextfold: summary cache write failed", exc_info=True)


class LayeredSummaryCache:
    """Looks up each layer in order; a hit in a later layer is copied to the earlier ones."""

    def __init__(self, *layers: SummaryCache) -> None:
        if not layers:
            raise ConfigurationError("LayeredSummaryCache needs at least one layer")
        self.layers = layers

    def get(self, key: str) -> str | None:
        """The first layer's hit, promoted to the layers before it."""
        for i, layer in enumerate(self.layers):
            text = layer.get(key)
            if text is not None:
                for earlier in self.layers[:i]:
                    earlier.put(key, text)
                return text
        return None

    def put(self, key: str, text: str) -> None:
        """Store in every layer."""
        for layer in self.layers:
            layer.put(key, text)


def cache_for(cache: SummaryCache | None, store: HistoryStore | None) -> SummaryCache | None:
    """The cache a compactor uses: ``cache`` (default an LRU) in front of ``store`` when the
    store can hold summaries."""
    if not isinstance(store, SummaryStore):
        return cache
    return LayeredSummaryCache(cache or LRUSummaryCache(), StoreSummaryCache(store))
