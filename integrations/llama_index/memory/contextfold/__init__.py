"""contextfold for LlamaIndex: a drop-in memory class, an LLM wrapper that bounds one agent
run, summaries by any LlamaIndex LLM, search tools and instrumentation events.

    import contextfold as cf
    from llama_index.memory.contextfold import CompactingLLM, CompactingMemory

    budget = cf.Budget.for_model("gpt-4o-mini")
    memory = CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=budget)
    llm = CompactingLLM(llm=OpenAI(model="gpt-4o-mini"), policy=cf.ThresholdPolicy(),
                        budget=budget)
    agent = FunctionAgent(tools=tools, llm=llm)
    await agent.run("...", memory=memory)
"""

from contextfold.integration import require_extra

require_extra("llama_index.core", extra="llamaindex", feature="llama_index.memory.contextfold",
              package="llama-index-core")

from ._convert import (
    from_llama_index,
    message_from_llama_index,
    message_to_llama_index,
    pin,
    to_llama_index,
)
from ._instrumentation import (
    CompactionAppliedEvent,
    CompactionStartedEvent,
    ConversationIdleEvent,
)
from ._llm import CompactingLLM, is_context_overflow, reported_usage
from ._memory import DEFAULT_CONTEXT_WINDOW, CompactingMemory
from ._summarizer import SUMMARY_SYSTEM_PROMPT, LLMSummarizer, render_transcript
from ._tools import (
    compact_context_tool_for,
    read_original_tool_for,
    search_tools_for,
    tool_definitions,
    tool_from_spec,
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "SUMMARY_SYSTEM_PROMPT",
    "CompactingLLM",
    "CompactingMemory",
    "CompactionAppliedEvent",
    "CompactionStartedEvent",
    "ConversationIdleEvent",
    "LLMSummarizer",
    "compact_context_tool_for",
    "from_llama_index",
    "is_context_overflow",
    "message_from_llama_index",
    "message_to_llama_index",
    "pin",
    "read_original_tool_for",
    "render_transcript",
    "reported_usage",
    "search_tools_for",
    "to_llama_index",
    "tool_definitions",
    "tool_from_spec",
]
