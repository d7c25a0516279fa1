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
from _scripted import langchain_model, page_text
from langchain_contextfold import to_core, with_compaction


@tool
def read_page(page: int) -> str:
    """Read one page of the quarterly report."""
    return page_text(page)


budget = cf.Budget(context_window=10_000, output_reserve=1_000)
model = with_compaction(langchain_model(), policy=cf.ThresholdPolicy(), budget=budget,
                        summarizer=cf.ExtractiveSummarizer()).bind_tools([read_page])
config = {"configurable": {"thread_id": "report-reader"}}

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
print(reply.content)
print(f"history: {len(history)} messages, {counter.count_messages(to_core(history)):,} tokens; "
      f"each call's input was compacted to fit {budget.input_budget:,} tokens")
