"""A LangChain agent that never outgrows its context: CompactionMiddleware in create_agent.

Run: python cookbook/langchain_agent.py

The agent reads 40 long pages. The agent's state keeps every message; each model call
receives the compacted view (valid, within the budget, system prompt and tools counted),
and every compaction shows in the graph's "custom" stream. Offline, a scripted model plays
the agent; with OPENAI_API_KEY set, gpt-4o-mini does.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

import contextfold as cf
from _scripted import RequestSizes, langchain_model, page_text
from langchain_contextfold import COMPACTION_EVENT, CompactionMiddleware, to_core

PAGES = 40


@tool
def read_page(page: int) -> str:
    """Read one page of the report (long)."""
    return page_text(page)


def main() -> None:
    model = langchain_model()  # gpt-4o-mini with OPENAI_API_KEY set, else scripted
    budget = cf.Budget(context_window=12_000, output_reserve=2_000)
    agent = create_agent(
        model, [read_page],
        system_prompt=f"Read pages 0 to {PAGES - 1} with read_page, one at a time, then report.",
        middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=budget,
                                         summarizer=cf.ExtractiveSummarizer())],
    )
    state: dict[str, Any] = {}
    compactions = 0
    sizes = RequestSizes()  # what the model receives, measured
    for mode, chunk in agent.stream({"messages": [HumanMessage("Read the whole report.")]},
                                    config={"recursion_limit": 200, "callbacks": [sizes]},
                                    stream_mode=["custom", "values"]):
        if mode == "custom" and COMPACTION_EVENT in chunk:
            report = chunk[COMPACTION_EVENT]
            compactions += 1
            print(f"compaction {compactions}: {report['messages_before']} messages, "
                  f"{report['tokens_before']:,} -> {report['tokens_after']:,} tokens "
                  f"({report['method']})")
        elif mode == "values":
            state = chunk
    history = state["messages"]
    tokens = cf.counter_for_model("gpt-4o").count_messages(to_core(history))
    print(f"\nfinal answer: {history[-1].content}")
    print(f"the state kept all {len(history)} messages ({tokens:,} tokens); the largest of "
          f"the {len(sizes.tokens)} requests the model received held {max(sizes.tokens):,} "
          f"(budget {budget.input_budget:,})")
    assert compactions > 0 and tokens > budget.input_budget >= max(sizes.tokens)


if __name__ == "__main__":
    main()
