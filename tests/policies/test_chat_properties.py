"""Every policy on long plain chats (no tool calls): a valid output within the budget that
fills its target when the input is over it, with the system prompt and the latest request.

The chats come from ``contextfold.testing.chats`` (sessions of small talk and tasks, facts
planted and corrected); each policy runs through ``compact()`` with the default extractive
summarizer, as a user would run it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._messages.prompt_kinds import find_prompt
from contextfold.testing import assert_valid_within, chats, generate_chat

# What each policy fills, and at least how much of it: the threshold-based ones compact
# towards the budget's target; Truncation and TurnAware drop whole turns until the input
# fits the budget, so the input budget is theirs (TurnAware's, or what its design keeps of
# past turns, their requests and answers, when that is less). SummaryPolicy's one summary
# is as long as the summarizer makes it: the extractive one writes less than its room for
# a short span of chat with long answers (down to 0.70 of the target in 600 examples when
# the input is just over the trigger). TieredPolicy's tier summary and its ledger's least
# room take most of the smallest targets (under about 600 tokens, the input just over the
# trigger): 0.78-0.80 of the target there, 0.85-0.95 above. TurnAwarePolicy compresses
# every past turn at once and replaces each run it drops with a notice: on short chats
# whose turns are a request, an answer and a session marker, that lands at 0.80-0.95 of
# the input budget (0.798 the least seen). LoopSlicePolicy keeps the current request and
# tool loop by design: its own test below.
FILLS: dict[str, tuple[Callable[[], cf.policy.Policy], str, float]] = {
    "threshold": (cf.ThresholdPolicy, "target", 0.8),
    "tiered": (cf.TieredPolicy, "target", 0.75),
    "summary": (cf.SummaryPolicy, "target", 0.65),
    "truncation": (cf.TruncationPolicy, "input", 0.8),
    "turn_aware": (cf.TurnAwarePolicy, "input", 0.75),
}
EVERY = {**{name: make for name, (make, _, _) in FILLS.items()},
         "loop_slice": cf.LoopSlicePolicy}


def _sized(messages: list[cf.Message], answered: bool) -> list[cf.Message]:
    """The chat as a model call sees it (ending with the user's message), or after the
    answer (a memory read between calls)."""
    return messages if answered else messages[:-1]


@pytest.mark.parametrize("name", sorted(FILLS))
@settings(max_examples=max(60, settings.default.max_examples))  # central invariant
@given(chat=chats(max_sessions=8), answered=st.booleans(), place=st.floats(0, 1))
def test_every_policy_fills_its_target_on_chat(
    counter: cf.TokenCounter, chat: list[cf.Message], answered: bool, place: float, name: str,
) -> None:
    messages = _sized(chat, answered)
    total = counter.count_messages(messages)
    largest = max(counter.count_message(m) for m in messages)
    make, of, share = FILLS[name]
    # Where the history allows: the target holds ten of its largest messages (a policy
    # that keeps whole messages may leave up to one unused), and the input is over what
    # the policy aims at: the trigger, or the input budget for those that fill it.
    low, high = 20 * largest, int(total / 0.8) if of == "target" else total - 1
    assume(low < high)
    budget = cf.Budget(context_window=int(low + place * (high - low)))
    result = cf.compact(messages, policy=make(), budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    assert result.messages[0] == messages[0]
    used = counter.count_messages(result.messages)
    goal = budget.target_tokens if of == "target" else budget.input_budget
    if name == "turn_aware":  # by design it keeps every past turn's request and answer only
        whole = cf.compact(messages, policy=make(), budget=cf.Budget(context_window=10**7),
                           counter=counter)
        goal = min(goal, counter.count_messages(whole.messages))
    event(f"{name}: fills {min(used / goal, 1.5):.1f} of its {of}")
    assert used >= share * goal, f"{name} filled {used / goal:.0%} of its {of}"


@pytest.mark.parametrize("name", sorted(EVERY))
@settings(max_examples=max(60, settings.default.max_examples))  # central invariant
@given(chat=chats(max_sessions=6), answered=st.booleans(), share=st.floats(0.02, 1.2))
def test_every_policy_keeps_the_system_prompt_and_the_latest_request(
    counter: cf.TokenCounter, chat: list[cf.Message], answered: bool, share: float, name: str,
) -> None:
    messages = _sized(chat, answered)
    latest = find_prompt(messages, 1)
    assert latest is not None
    budget = cf.Budget(context_window=max(30, int(counter.count_messages(messages) * share)))
    assume(counter.count_messages([messages[0], messages[latest]]) <= budget.input_budget)
    result = cf.compact(messages, policy=EVERY[name](), budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    assert result.messages[0] == messages[0]
    assert any(m is messages[latest] for m in result.messages), (
        f"{name} ({result.report.method}) left out the latest request")
    event(f"{name}: {result.report.method}")


def test_loop_slice_keeps_only_the_system_prompt_and_the_current_request(
    counter: cf.TokenCounter,
) -> None:
    # By design: the prompt source and the latest tool loop, and a chat has no tool loop.
    messages = generate_chat(1, sessions=4).messages[:-1]
    result = cf.compact(messages, policy=cf.LoopSlicePolicy(),
                        budget=cf.Budget(context_window=100_000), counter=counter)
    # What it leaves out is one run, marked before the request with its handle.
    handle = next(t.handle for t in result.report.targets)
    assert [m.text for m in result.messages] == [
        messages[0].text, result.messages[1].text, messages[-1].text]
    assert result.messages[1].source == "summary"
    assert f'read_original("{handle}")' in result.messages[1].text
    assert result.messages[1].text.startswith(f"[{len(messages) - 2} messages removed")
