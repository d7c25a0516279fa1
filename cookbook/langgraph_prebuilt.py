"""LangGraph's prebuilt agent with a pre_model_hook.

Run: python cookbook/langgraph_prebuilt.py

The hook returns `llm_input_messages`: the graph's state keeps every message, the model
sees the compacted view (never empty, always valid). The agent adds its prompt and the
tool definitions after the hook, so the hook is given both: they count against the budget.
For overflow retries wrap the model with `with_compaction` as well; the hook alone cannot
retry a call made in another node.
"""

from __future__ import annotations

import warnings

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

import contextfold as cf
from _scripted import RequestSizes, langchain_model, page_text
from langchain_contextfold import CompactionHook, to_core


@tool
def read_page(page: int) -> str:
    """Read one page of the quarterly report."""
    return page_text(page)


PROMPT = "You read reports page by page and report what they say."
budget = cf.Budget(context_window=10_000, output_reserve=1_000)
hook = CompactionHook(policy=cf.TurnAwarePolicy(), budget=budget, tools=[read_page],
                      system_prompt=PROMPT)
with warnings.catch_warnings():  # LangGraph 1.x points new code to langchain.agents
    warnings.simplefilter("ignore", DeprecationWarning)
    agent = create_react_agent(langchain_model(), [read_page], prompt=PROMPT,
                               pre_model_hook=hook.pre_model_hook,
                               post_model_hook=hook.post_model_hook)

sizes = RequestSizes()  # what the model receives, measured
state = agent.invoke({"messages": [HumanMessage("Read pages 0 to 39, then report.")]},
                     config={"recursion_limit": 200, "callbacks": [sizes]})
messages = state["messages"]
total = cf.counter_for_model("gpt-4o").count_messages(to_core(messages))
print(messages[-1].content)
print(f"the state holds {len(messages)} messages ({total:,} tokens); the largest of the "
      f"{len(sizes.tokens)} requests the model received held {max(sizes.tokens):,} "
      f"(budget {budget.input_budget:,})")
assert total > budget.input_budget >= max(sizes.tokens)
