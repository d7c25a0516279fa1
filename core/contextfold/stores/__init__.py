"""History stores: the full conversation memory behind compaction.

``MemoryStore`` for tests, ``SQLiteStore`` (stdlib, the default) for one process,
``PostgresStore`` (extra ``postgres``) for many workers; third-party stores implement the
protocols (``HistoryStore`` and the capabilities they offer), our backends share
``BaseStore``. Our stores keep the token counts of the messages beside them
(``CountStore``, ``StoredCounts``), so a resumed conversation is not tokenized again.
``search_tools`` and ``read_original_tool`` turn a store into framework-neutral tool specs
the adapters wrap; originals behind handles live in the store or, without one, in a
``ReferenceCache``; summaries are cached by content hash.
"""

from __future__ import annotations

from .._lossless.originals import READ_ORIGINAL_GUIDANCE, read_original, read_original_tool
from .._policies.learning import record_searches
from .._stores.base import (
    BaseStore,
    BroadcastStore,
    CountStore,
    HistoryStore,
    ReferenceStore,
    SearchableStore,
    SearchHit,
    SummaryStore,
    Tracer,
)
from .._stores.counts import StoredCounts
from .._stores.memory import MemoryStore
from .._stores.postgres import PostgresStore
from .._stores.reference_cache import ReferenceCache, default_references
from .._stores.sqlite import SQLiteStore
from .._stores.tools import SEARCH_GUIDANCE, SearchToolSpec, search_tools
from .._summaries.cache import LRUSummaryCache, SummaryCache

__all__ = [
    "READ_ORIGINAL_GUIDANCE",
    "SEARCH_GUIDANCE",
    "BaseStore",
    "BroadcastStore",
    "CountStore",
    "HistoryStore",
    "LRUSummaryCache",
    "MemoryStore",
    "PostgresStore",
    "ReferenceCache",
    "ReferenceStore",
    "SQLiteStore",
    "SearchHit",
    "SearchToolSpec",
    "SearchableStore",
    "StoredCounts",
    "SummaryCache",
    "SummaryStore",
    "Tracer",
    "default_references",
    "read_original",
    "read_original_tool",
    "record_searches",
    "search_tools",
]
