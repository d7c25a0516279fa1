"""A LlamaIndex FunctionAgent whose single long run stays bounded: CompactingLLM.

Run: python cookbook/llamaindex_function_agent.py

LlamaIndex agents keep the run's tool calls in a scratchpad that bypasses memory, so a
memory class alone cannot bound one long run. Wrapping the LLM compacts every request the
agent makes (tools counted, calibrated on reported usage, one forced retry on a
context-overflow error). Offline a scripted LLM plays the agent; with OPENAI_API_KEY set,
gpt-4o-mini does.
"""

from __future__ import annotations

import asyncio

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool

import contextfold as cf
from _scripted import llama_index_llm, page_text
from llama_index.memory.contextfold import CompactingLLM


def read_page(page: int) -> str:
    """Read one page of the quarterly report."""
    return page_text(page)


budget = cf.Budget(context_window=9_000, output_reserve=1_000)
llm = CompactingLLM(llm=llama_index_llm(), policy=cf.ThresholdPolicy(), budget=budget)
seen: list[cf.CompactionApplied] = []


# add_listener reaches every conversation the wrapper serves: the agent's run is one of
# them, told apart by its opening messages (llm.compactor is only the one served last).
@llm.add_listener
def on_event(event: object) -> None:
    if isinstance(event, cf.CompactionApplied):
        seen.append(event)
        print(f"compaction: {event.report.tokens_before:,} -> {event.report.tokens_after:,} "
              f"tokens, {event.llm_calls} summary call(s)")


agent = FunctionAgent(tools=[FunctionTool.from_defaults(read_page)], llm=llm,
                      system_prompt="Read pages 0 to 29 with read_page, one per call, then report.")


async def main() -> None:
    answer = await agent.run("Read the whole report.", max_iterations=100)
    print(answer)
    peak = max(e.report.tokens_after for e in seen)
    print(f"{len(seen)} compactions under a budget of {budget.input_budget:,} input tokens; "
          f"the largest request after one was {peak:,} tokens")
    assert seen, "30 pages of about 700 tokens cannot fit 8,000 tokens without compacting"
    assert peak <= budget.input_budget


asyncio.run(main())
