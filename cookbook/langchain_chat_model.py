"""A LangChain chat model with with_compaction(): your own agent loop, bounded.

Run: python cookbook/langchain_chat_model.py

`with_compaction` returns a chat model: bind tools, invoke, stream, batch as before. Your
list keeps every message; each call sends a compacted, valid view within the budget, one
Compactor per thread id, calibrated on the usage the provider reports, and on a
context-overflow error it compacts harder and retries. Offline a scripted model plays the
agent; with OPENAI_API_KEY set, gpt-4o-mini does.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

import contextfold as cf
from _scripted import RequestSizes, langchain_model, page_text
from langchain_contextfold import to_core, with_compaction


@tool
def read_page(page: int) -> str:
    """Read one page of the quarterly report."""
    return page_text(page)


budget = cf.Budget(context_window=10_000, output_reserve=1_000)
model = with_compaction(langchain_model(), policy=cf.ThresholdPolicy(), budget=budget,
                        summarizer=cf.ExtractiveSummarizer()).bind_tools([read_page])
sizes = RequestSizes()  # what the model receives, measured
config = {"configurable": {"thread_id": "report-reader"}, "callbacks": [sizes]}

history = [SystemMessage("Read pages 0 to 39 with read_page, one per call, then report."),
           HumanMessage("Read the whole report.")]
while True:
    reply = model.invoke(history, config=config)
    history.append(reply)
    if not reply.tool_calls:
        break
    for call in reply.tool_calls:
        history.append(ToolMessage(read_page.invoke(call["args"]), tool_call_id=call["id"]))

counter = cf.counter_for_model("gpt-4o")
total = counter.count_messages(to_core(history))
print(reply.content)
print(f"history: {len(history)} messages, {total:,} tokens; the largest of the "
      f"{len(sizes.tokens)} requests the model received held {max(sizes.tokens):,} "
      f"(budget {budget.input_budget:,})")
assert total > budget.input_budget >= max(sizes.tokens)
