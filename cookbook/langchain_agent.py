"""A LangChain agent that never outgrows its context: CompactionMiddleware in create_agent.

Run: python cookbook/langchain_agent.py

The agent reads 40 long pages. The agent's state keeps every message; each model call
receives the compacted view (valid, within the budget, system prompt and tools counted),
and every compaction shows in the graph's "custom" stream. Offline, a scripted model plays
the agent; with OPENAI_API_KEY set, gpt-4o-mini does.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import contextfold as cf
from langchain_contextfold import COMPACTION_EVENT, CompactionMiddleware, to_core

PAGES = 40


@tool
def read_page(page: int) -> str:
    """Read one page of the report (long)."""
    return f"Page {page}: reference RF-{1000 + page}. " + "Quarterly figures, row by row. " * 90


class ScriptedAgent(BaseChatModel):
    """Reads the next page after the newest result it can see, then answers."""

    @property
    def _llm_type(self) -> str:
        return "scripted-agent"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        seen = [m for m in messages if isinstance(m, ToolMessage)]
        page = int(str(seen[-1].content).split(":")[0].split()[1]) + 1 if seen else 0
        if page < PAGES:
            reply = AIMessage("", tool_calls=[{"name": "read_page", "args": {"page": page},
                                               "id": f"call_{page}"}])
        else:
            last = str(seen[-1].content).split(".")[0]
            reply = AIMessage(f"Read all {PAGES} pages; the last one is {last}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def main() -> None:
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        model: BaseChatModel = ChatOpenAI(model="gpt-4o-mini")
    else:
        model = ScriptedAgent()
    budget = cf.Budget(context_window=12_000, output_reserve=2_000)
    agent = create_agent(
        model, [read_page],
        system_prompt=f"Read pages 0 to {PAGES - 1} with read_page, one at a time, then report.",
        middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=budget,
                                         summarizer=cf.ExtractiveSummarizer())],
    )
    state: dict[str, Any] = {}
    compactions = 0
    for mode, chunk in agent.stream({"messages": [HumanMessage("Read the whole report.")]},
                                    config={"recursion_limit": 200},
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
    print(f"the state kept all {len(history)} messages ({tokens:,} tokens); "
          f"each call fit {budget.input_budget:,} tokens")


if __name__ == "__main__":
    main()
