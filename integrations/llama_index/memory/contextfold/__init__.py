"""contextfold for LlamaIndex: a drop-in memory class, an LLM wrapper that bounds one agent
run, summaries by any LlamaIndex LLM, search tools and instrumentation events.

    from llama_index.memory.contextfold import CompactingMemory, CompactingLLM

    memory = CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=budget)
    llm = CompactingLLM(llm=base_llm, policy=cf.ThresholdPolicy(), budget=budget)
"""

from ._convert import (
    from_llama_index,
    message_from_llama_index,
    message_to_llama_index,
    to_llama_index,
)

__all__ = [
    "from_llama_index",
    "message_from_llama_index",
    "message_to_llama_index",
    "to_llama_index",
]
