"""History stores: the full conversation memory behind compaction (seeds 000, 001).

``MemoryStore`` for tests, ``SQLiteStore`` (stdlib, the default) for one process,
``PostgresStore`` (extra ``postgres``) for many workers. ``search_tools`` turns a store
into framework-neutral tool specs for the adapters.
"""

from __future__ import annotations

from ._base import (
    BaseStore,
    BroadcastStore,
    HistoryStore,
    ReferenceStore,
    SearchableStore,
    SearchHit,
    SummaryStore,
    Tracer,
)
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore
from ._tools import SEARCH_GUIDANCE, SearchToolSpec, search_tools

__all__ = [
    "SEARCH_GUIDANCE",
    "BaseStore",
    "BroadcastStore",
    "HistoryStore",
    "MemoryStore",
    "PostgresStore",
    "ReferenceStore",
    "SQLiteStore",
    "SearchHit",
    "SearchToolSpec",
    "SearchableStore",
    "SummaryStore",
    "Tracer",
    "search_tools",
]
