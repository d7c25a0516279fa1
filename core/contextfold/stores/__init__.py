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

import importlib
from typing import TYPE_CHECKING, Any

from ._base import (
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
from ._counts import StoredCounts
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore
from ._tools import SEARCH_GUIDANCE, SearchToolSpec, search_tools

if TYPE_CHECKING:
    from .._lossless.learning import record_searches
    from .._lossless.references import (
        READ_ORIGINAL_GUIDANCE,
        ReferenceCache,
        default_references,
        read_original,
        read_original_tool,
    )
    from .._summaries.cache import LRUSummaryCache, SummaryCache

# Originals behind handles and cached summaries are kept by stores too, but their modules
# import the store protocols: they are loaded on first use to keep the imports acyclic.
_ELSEWHERE = {
    "record_searches": "contextfold._lossless.learning",
    "READ_ORIGINAL_GUIDANCE": "contextfold._lossless.references",
    "ReferenceCache": "contextfold._lossless.references",
    "default_references": "contextfold._lossless.references",
    "read_original": "contextfold._lossless.references",
    "read_original_tool": "contextfold._lossless.references",
    "LRUSummaryCache": "contextfold._summaries.cache",
    "SummaryCache": "contextfold._summaries.cache",
}


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
