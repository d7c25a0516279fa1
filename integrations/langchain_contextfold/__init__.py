"""contextfold for LangChain and LangGraph.

One line makes a chat model, a chain or an agent compaction-aware; the full history stays
in the caller's state (and in a contextfold store when one is given), only what the model
sees is compacted, and it is always a valid sequence within the budget::

    import contextfold as cf
    from langchain_contextfold import CompactionMiddleware, with_compaction

    model = with_compaction(chat_model, policy=cf.ThresholdPolicy(), budget=budget)
    agent = create_agent(chat_model, tools,
                         middleware=[CompactionMiddleware(policy=..., budget=budget)])
"""

from contextfold.integration import require_extra

require_extra("langchain_core", extra="langchain", feature="langchain_contextfold",
              package="langchain-core")
require_extra("langchain", extra="langchain", feature="langchain_contextfold")

from ._convert import LANGCHAIN_KEY, SOURCE_KEY, from_core, pin, to_core
from ._events import COMPACTION_EVENT, IDLE_EVENT
from ._history import CompactingChatMessageHistory
from ._hooks import CompactionHook
from ._middleware import CompactionMiddleware
from ._overflow import is_context_overflow, overflow_figures
from ._runnable import CompactingChatModel, with_compaction
from ._summarizer import ChatModelSummarizer
from ._tools import (
    READ_ORIGINAL_GUIDANCE,
    SEARCH_GUIDANCE,
    compact_context_tool_for,
    read_original_tool_for,
    search_tools_for,
    tool_from_spec,
)

__all__ = [
    "COMPACTION_EVENT",
    "IDLE_EVENT",
    "LANGCHAIN_KEY",
    "READ_ORIGINAL_GUIDANCE",
    "SEARCH_GUIDANCE",
    "SOURCE_KEY",
    "ChatModelSummarizer",
    "CompactingChatMessageHistory",
    "CompactingChatModel",
    "CompactionHook",
    "CompactionMiddleware",
    "compact_context_tool_for",
    "from_core",
    "is_context_overflow",
    "overflow_figures",
    "pin",
    "read_original_tool_for",
    "search_tools_for",
    "to_core",
    "tool_from_spec",
    "with_compaction",
]
