"""Reading events: what compaction did, call by call.

Run: python cookbook/reading_events.py

A Compactor (one per conversation) tells its listeners when a pass starts and what it
changed (the threshold design's compaction card: targets with original and new sizes, tokens saved,
duration); `observe_usage` calibrates it on what the provider billed. In an agent, call
`compactor.compact(history)` before each model call and `observe_usage` after it.
"""

from __future__ import annotations

import logging

import contextfold as cf
from contextfold.testing import generate_history

logging.basicConfig(level=logging.WARNING)
logging.getLogger("contextfold").setLevel(logging.INFO)  # DEBUG shows every decision

history = generate_history(seed=11, turns=30, tools_per_turn=2, tool_chars=2_500)
budget = cf.Budget(context_window=16_000, output_reserve=1_000)
compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=budget, conversation_id="demo")


applied: list[cf.CompactionApplied] = []


@compactor.add_listener
def show(event: object) -> None:
    if isinstance(event, cf.CompactionApplied):
        applied.append(event)
    if isinstance(event, cf.CompactionStarted):
        print(f"  compaction started on {event.messages_count} messages (forced: {event.forced})")
    elif isinstance(event, cf.CompactionApplied):
        report = event.report
        print(f"  compaction applied: {report.tokens_before:,} -> {report.tokens_after:,} tokens, "
              f"{len(report.targets)} targets, {event.llm_calls} summary call(s) to a model")
        for target in report.targets[:3]:
            print(f"    {target.tool_name or target.role}: {target.original_tokens} -> "
                  f"{target.new_tokens} tokens ({target.method})")


# Replay the history as an agent loop would: one model call before each assistant message.
calls, largest = 0, 0
for end in range(2, len(history) + 1):
    if history[end - 1].role != "assistant":
        continue
    result = compactor.compact(history[: end - 1])
    calls += 1
    largest = max(largest, result.report.tokens_after)
    # A provider would report its own count; here we pretend it bills 5% more than we count.
    compactor.observe_usage(input_tokens=int(result.report.tokens_after * 1.05))
usage = compactor.usage(history)
print(f"{calls} model calls, {len(applied)} compactions; the full history is {usage.total:,} "
      f"tokens against a budget of {usage.budget:,} ({'over' if usage.over_budget else 'within'}"
      f" budget uncompacted); the largest request sent was {largest:,} tokens")
assert applied and usage.over_budget and largest <= usage.budget
