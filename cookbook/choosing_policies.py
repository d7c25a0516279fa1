"""Choosing and composing policies: every policy on the same long agent history.

Run: python cookbook/choosing_policies.py

Each policy gets the same budget and the same exact counter; the table shows what the
model would see. A Pipeline composes passes in order: strip images first (they are the
largest and never needed again), then threshold compaction on what is left.
With a real model nothing changes here: policies are pure functions over messages.
"""

from __future__ import annotations

import contextfold as cf
from contextfold.policy import Policy
from contextfold.testing import generate_history

history = generate_history(seed=3, turns=40, tools_per_turn=3, tool_chars=3_000, images=True)
counter = cf.counter_for_model("gpt-4o")
budget = cf.Budget(context_window=24_000, output_reserve=2_000)

policies: dict[str, Policy] = {
    "truncation (oldest_first)": cf.TruncationPolicy(),
    "truncation (middle_out)": cf.TruncationPolicy(strategy="middle_out"),
    "turn-aware": cf.TurnAwarePolicy(),
    "loop-slice": cf.LoopSlicePolicy(),
    "summary": cf.SummaryPolicy(),
    "threshold": cf.ThresholdPolicy(),
    "tiered": cf.TieredPolicy(),
    "images, then threshold": cf.Pipeline(cf.StripImagesPass(), cf.ThresholdPolicy()),
}

before = counter.count_messages(history)
print(f"history: {len(history)} messages, {before:,} tokens; budget {budget.input_budget:,}")
print(f"{'policy':<26} {'messages':>8} {'tokens':>8} {'saved':>6}  method")
for name, policy in policies.items():
    result = cf.compact(history, policy=policy, budget=budget, counter=counter)
    assert cf.validate(result.messages) == []
    assert result.report.tokens_after <= budget.input_budget
    print(f"{name:<26} {len(result.messages):>8} {result.report.tokens_after:>8,} "
          f"{1 - result.report.tokens_after / before:>6.0%}  {result.report.method}")
