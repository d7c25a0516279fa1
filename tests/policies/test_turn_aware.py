"""TurnAwarePolicy: historical turns compressed, the current turn complete."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.references import handle_for
from contextfold._messages.prompt_kinds import prompt_kind
from contextfold._policies.notices import is_notice
from contextfold.policy import (
    CompactionContext,
    ConversationState,
    HeadTail,
    shrink_message,
    split_groups,
)
from contextfold.testing import assert_valid_within, histories

M, TC = cf.Message, cf.ToolCall
NOW = datetime(2026, 1, 13, 14, 30, tzinfo=timezone.utc)
BIG = cf.Budget(context_window=200_000)


def loop(call_id: str, result: str, name: str = "tool") -> list[cf.Message]:
    return [M("assistant", "", tool_calls=(TC(call_id, name, "{}"),)),
            M("tool", result, tool_call_id=call_id, name=name)]


def kept(messages):
    """The output without its removal notices (their own tests are below)."""
    return [m for m in messages if not is_notice(m)]


def compact(messages, budget=BIG, counter=None, policy=None):
    return cf.compact(messages, policy=policy or cf.TurnAwarePolicy(), budget=budget,
                      counter=counter or cf.EstimatingCounter(4.0), now=NOW)


def seed_example():
    """The loop-slice design's example: one historical turn, then a multi-step current turn."""
    system = M("system", "You are an agent.")
    # The old loop's results are plain prose: a notice naming identifiers that costs more
    # than what it replaces is not worth sending (the policy keeps the loop instead).
    old = [M("user", "old question"), *loop("c1", "the first lookup found nothing useful"),
           *loop("c2", "the second lookup found the answer"),
           M("assistant", "old answer")]
    current = [M("user", "new question"), *loop("login", "session_id: abc123"),
               *loop("status", "status_result")]
    return system, old, current


def test_seed_example_compresses_history_and_keeps_the_current_turn():
    system, old, current = seed_example()
    out = compact([system, *old, *current]).messages
    # old turn: prompt, latest loop (c2) and the final answer; current turn complete; the
    # loop the old turn left out is marked where it was, with its handle.
    handle = handle_for(old[1:3])
    notice = M("user", f'[2 messages removed (tools: tool); read_original("{handle}")]',
               source="summary", metadata={"compaction": "notice", "removed": 2})
    assert out == [system, old[0], notice, *old[3:5], old[5], *current]
    plain = compact([system, *old, *current], policy=cf.TurnAwarePolicy(notices=False))
    assert plain.messages == [system, old[0], *old[3:5], old[5], *current]


def test_single_turn_history_comes_back_as_the_input_itself():
    history = [M("system", "s"), M("user", "q"), *loop("a", "r1"), *loop("b", "r2")]
    context = CompactionContext(budget=BIG, counter=cf.EstimatingCounter(4.0))
    outcome = cf.TurnAwarePolicy().apply(history, context)
    assert outcome.messages is history
    assert outcome.method == "none"


def test_historical_turn_without_loop_keeps_prompt_and_answer():
    history = [M("user", "hi"), M("assistant", "hello"), M("user", "fetch"), *loop("a", "r")]
    assert compact(history).messages == history


def test_non_prompt_user_messages_do_not_start_turns():
    summary = M("user", "[CONTEXT SUMMARY] ...", source="summary")
    history = [summary, *loop("a", "r0"), M("user", "go"), *loop("b", "r1")]
    out = compact(history).messages
    assert out == history  # the summary prefix is kept like a historical turn


def test_no_prompt_anywhere_gets_one_nudge_and_counts_it():
    history = [M("system", "s"), *loop("a", "r1"), *loop("b", "r2")]
    state = ConversationState()
    context = CompactionContext(budget=BIG, counter=cf.EstimatingCounter(4.0), state=state)
    outcome = cf.TurnAwarePolicy().apply(history, context)
    assert [m.role for m in outcome.messages] == ["system", "user", *(m.role for m in history[1:])]
    assert outcome.messages[1].source == "nudge"
    assert state.encouragement_count == 1


def _sizes(n_turns: int, big: int) -> list[cf.Message]:
    history = [M("system", "s")]
    for t in range(n_turns):
        history += [M("user", f"question {t}"), *loop(f"h{t}", f"answer {t} " * 50)]
    history += [M("user", "current"), *loop("old", "O" * big + " end"), *loop("new", "latest")]
    return history


def test_older_loops_of_the_current_turn_are_cut_before_history_is_dropped(counter):
    history = _sizes(3, 6_000)
    full = counter.count_messages(history)
    budget = cf.Budget(context_window=full - 500)
    result = compact(history, budget=budget, counter=counter)
    out = result.messages
    assert "[TRUNCATED" in next(m for m in out if m.tool_call_id == "old").text
    assert [m.text for m in out if m.role == "user"][:3] == [f"question {t}" for t in range(3)]
    assert out[-2:] == history[-2:]
    assert_valid_within(out, budget, counter)


def test_history_is_dropped_oldest_first_then_the_current_turn_shrinks(counter):
    history = _sizes(4, 400)
    current = history[-5:]
    needed = counter.count_messages([history[0], *current])
    budget = cf.Budget(context_window=needed + 200)
    out = compact(history, budget=budget, counter=counter).messages
    prompts = [m.text for m in kept(out) if m.role == "user"]
    assert prompts[-1] == "current"
    assert prompts[:-1] == [f"question {t}" for t in range(4)][4 - len(prompts[:-1]):]
    assert [m.id for m in out[-len(current):]] == [m.id for m in current]  # all kept
    assert out[-2:] == current[-2:]  # the latest loop untouched
    tight = cf.Budget(context_window=counter.count_messages([history[0], *current[:1],
                                                              *current[-2:]]) + 60)
    out = compact(history, budget=tight, counter=counter).messages
    assert [m.text for m in kept(out) if m.role == "user"] == ["current"]
    assert out[-2:] == current[-2:] or "[TRUNCATED" in out[-1].text
    assert_valid_within(out, tight, counter)


def test_an_older_result_whose_cut_takes_more_tokens_stays_whole(counter):
    # A cut is shorter in characters, but its label's digits and punctuation take more
    # tokens than the words of a short result: kept, it pushed a current turn that fits
    # over the budget, and the turn's earlier loop was dropped.
    words = ("order flight agent cabin report report config trade cancelled retry cancelled "
             "request route error line station baggage mark")
    system = M("system", "You are an agent.")
    old = [M("user", "old question"), *loop("h", "history " * 300)]
    current = [M("user", "new question"), *loop("short", words), *loop("latest", "done")]
    cut = shrink_message(current[2], HeadTail())
    assert counter.count_message(cut) > counter.count_message(current[2])
    budget = cf.Budget(context_window=counter.count_messages([system, *current]))
    out = compact([system, *old, *current], budget=budget, counter=counter).messages
    assert out == [system, *current]


def test_budget_error_only_when_system_and_prompt_do_not_fit(counter):
    history = [M("system", "rule " * 400), M("user", "go"), *loop("a", "r")]
    with pytest.raises(cf.BudgetExceededError, match="system prompt and the prompt source"):
        compact(history, budget=cf.Budget(context_window=300), counter=counter)


# -- invariants -------------------------------------------------------------------------


def _current_turn(messages: list[cf.Message]) -> list[cf.Message]:
    start = max((k for k, m in enumerate(messages) if prompt_kind(m) is not None), default=None)
    return [] if start is None else messages[start:]


@settings(max_examples=max(200, settings.default.max_examples))
@given(
    st.one_of(histories(max_turns=6, max_tool_chars=12_000),
              histories(max_turns=6, max_tool_chars=12_000, imperfect=True)),
    st.integers(200, 15_000),
)
def test_valid_within_budget_and_whole_current_turn_when_it_fits(counter, messages, window):
    budget = cf.Budget(context_window=window)
    try:
        result = compact(messages, budget=budget, counter=counter)
    except cf.BudgetExceededError as exc:
        assert exc.what == "the system prompt and the prompt source"
        assert exc.needed > exc.available
        return
    out = result.messages
    assert_valid_within(out, budget, counter)
    view = cf.repair(messages)[0]
    current = _current_turn(view)
    systems = [m for m in view if m.role in ("system", "developer")]
    if current and counter.count_messages([*systems, *current]) <= budget.input_budget:
        # every message of the current turn, in order, at the end; only tool results of
        # older loops may be cut head+tail, and the latest loop is untouched.
        # (repair's synthetic results get fresh ids on each run: compared by content)
        tail = out[-len(current):]
        same = [a.id == b.id or b.metadata.get("synthetic") for a, b in zip(tail, current,
                                                                             strict=True)]
        assert all(same)
        for kept, original in zip(tail, current, strict=True):
            cut = "[TRUNCATED" in kept.text or "omitted from context" in kept.text
            assert kept == original or (original.role == "tool" and cut)
        latest = [g for g in split_groups(current) if g.is_tool_loop]
        if latest:
            assert all(tail[k] == current[k] for k in range(latest[-1].start, latest[-1].end))


@given(histories(max_turns=6, max_tool_chars=2_000))
def test_historical_turns_hold_at_most_prompt_loop_and_answer(counter, messages):
    result = compact(messages, counter=counter)
    if any("would have grown the context" in note for note in result.report.notes):
        return  # the notices cost more than the short messages they stand for: the input
        # goes out as it is (a compaction never grows the context)
    out = kept(result.messages)
    view = cf.repair(messages)[0]
    current = _current_turn(view)
    if not current:
        return  # no real prompt: the whole history is the current turn, behind a nudge
    history_part = out[len([m for m in out if m.role == "system"]): len(out) - len(current)]
    starts = [k for k, m in enumerate(history_part) if prompt_kind(m) is not None
              or (k == 0 and m.role == "user")]
    assert not history_part or starts[:1] == [0]
    for a, b in zip(starts, [*starts[1:], len(history_part)][: len(starts)], strict=True):
        turn = history_part[a:b]
        groups = split_groups(turn)
        assert len(groups) <= 3
        assert sum(g.is_tool_loop for g in groups) <= 1
