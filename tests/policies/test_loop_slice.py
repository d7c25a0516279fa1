"""LoopSlicePolicy: system + one prompt source + the latest complete tool loop."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._messages.prompt_kinds import prompt_kind
from contextfold._policies.notices import is_notice
from contextfold._policies.prompt_source import FIRM, GENTLE
from contextfold.errors import ConfigurationError
from contextfold.policy import CompactionContext, ConversationState, NudgeConfig, tool_loops
from contextfold.prompts import TemporalContext
from contextfold.testing import assert_valid_within, histories

M, TC = cf.Message, cf.ToolCall
NOW = datetime(2026, 1, 13, 14, 30, tzinfo=timezone.utc)
BIG = cf.Budget(context_window=200_000)


def loop(call_id: str, *results: str, name: str = "get_status") -> list[cf.Message]:
    """An assistant message calling one tool per result, and the results."""
    ids = [f"{call_id}-{k}" for k in range(len(results))]
    calls = tuple(TC(i, name, '{"q": 1}') for i in ids)
    return [M("assistant", "", tool_calls=calls),
            *(M("tool", r, tool_call_id=i, name=name) for i, r in zip(ids, results, strict=True))]


def kept(messages):
    """The slice without its removal notices (their own tests are at the end)."""
    return [m for m in messages if not is_notice(m)]


def run(messages, policy=None, budget=BIG, counter=None, state=None, store=None, conv=None):
    """One policy run outside the driver, so tests can look at the outcome and the state."""
    policy = policy or cf.LoopSlicePolicy()
    context = CompactionContext(
        budget=budget, counter=counter or cf.EstimatingCounter(4.0), now=NOW,
        state=state if state is not None else ConversationState(), store=store,
        conversation_id=conv,
    )
    outcome = policy.apply(messages, context)
    return outcome, context.state


def test_keeps_system_prompt_and_latest_loop_only(counter):
    system = M("system", "You are a miner.")
    prompt = M("user", "Mine iron ore.", source="direct")
    first, latest = loop("a", "old result"), loop("b", "new 1", "new 2")
    history = [system, prompt, *first, M("assistant", "thinking"), *latest]
    out = kept(cf.compact(history, policy=cf.LoopSlicePolicy(), budget=BIG,
                          counter=counter).messages)
    assert out == [system, prompt, *latest]
    assert all(a is b for a, b in zip(out, [system, prompt, *latest], strict=True))


def test_returns_the_input_itself_when_it_already_is_a_slice():
    history = [M("system", "s"), M("user", "go"), *loop("a", "r")]
    outcome, _ = run(history)
    assert outcome.messages is history
    assert outcome.method == "none"


def test_prompt_after_the_latest_loop_gives_system_and_prompt_only():
    history = [M("system", "s"), M("user", "first"), *loop("a", "r"), M("assistant", "done"),
               M("user", "second request", source="direct")]
    outcome, _ = run(history)
    assert [m.text for m in kept(outcome.messages)] == ["s", "second request"]


def test_a_final_answer_after_the_loop_is_not_part_of_the_slice():
    history = [M("user", "q"), *loop("a", "r"), M("assistant", "the answer")]
    outcome, _ = run(history)
    assert [m.role for m in kept(outcome.messages)] == ["user", "assistant", "tool"]


def test_recency_picks_the_newest_prompt_and_priority_the_highest_kind():
    direct = M("user", "direct order", source="direct")
    swarm = M("user", "enemy spotted", source="broadcast", sender_id="agent-7")
    history = [M("system", "s"), direct, *loop("a", "r"), swarm, *loop("b", "r2")]
    by_recency, _ = run(history)
    by_priority, _ = run(history, cf.LoopSlicePolicy(selection="priority"))
    assert kept(by_recency.messages)[1] is swarm
    assert by_priority.messages[1] is direct


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (M("user", "x", source="direct"), "direct"),
        (M("user", "x"), "direct"),
        (M("user", "x", source="broadcast", sender_id=""), "commander_broadcast"),
        (M("user", "x", source="broadcast"), "commander_broadcast"),
        (M("user", "x", source="broadcast", sender_id="agent-2"), "swarm_broadcast"),
        (M("user", "x", source="nudge"), None),
        (M("user", "x", source="summary"), None),
        (M("assistant", "x"), None),
    ],
)
def test_prompt_kinds_follow_seed_000(message, kind):
    assert prompt_kind(message) == kind


def test_commander_broadcast_outranks_a_swarm_broadcast_under_priority():
    commander = M("user", "explore", source="broadcast", sender_id="")
    swarm = M("user", "help me", source="broadcast", sender_id="agent-3")
    history = [commander, *loop("a", "r"), swarm, *loop("b", "r")]
    outcome, _ = run(history, cf.LoopSlicePolicy(selection="priority"))
    assert outcome.messages[0] is commander


def test_broadcast_outside_the_window_is_found_in_the_history():
    mission = M("user", "Explore the universe!", source="broadcast", sender_id="")
    work = [m for k in range(8) for m in (*loop(f"c{k}", f"r{k}"), M("assistant", f"step {k}"))]
    history = [M("system", "s"), mission, *work]
    outcome, state = run(history, state=ConversationState(encouragement_count=2))
    assert outcome.messages[1] is mission
    assert outcome.details["prompt_origin"] == "history"
    assert state.encouragement_count == 0


def test_direct_message_outside_the_window_is_not_a_mission():
    order = M("user", "Look around once.", source="direct")
    work = [m for k in range(8) for m in (*loop(f"c{k}", f"r{k}"), M("assistant", f"step {k}"))]
    outcome, state = run([order, *work])
    assert outcome.messages[0].source == "nudge"
    assert state.encouragement_count == 1


def test_window_size_is_configurable():
    order = M("user", "Look around once.", source="direct")
    work = [m for k in range(8) for m in (*loop(f"c{k}", f"r{k}"), M("assistant", f"step {k}"))]
    outcome, _ = run([order, *work], cf.LoopSlicePolicy(max_context_messages=40))
    assert outcome.messages[0] is order


def test_nudge_is_synthetic_escalates_and_keeps_the_latest_loop():
    history = [M("system", "s"), *loop("a", "r1"), *loop("b", "r2")]
    state = ConversationState()
    first, _ = run(history, state=state)
    second, _ = run(history, state=state)
    nudge = first.messages[1]
    assert (nudge.role, nudge.source, nudge.text) == ("user", "nudge", GENTLE)
    assert nudge not in history
    assert second.messages[1].text == FIRM
    assert kept(first.messages)[2:] == history[3:]
    assert first.notes[0].startswith("no prompt source found; added nudge 1/3")


def test_search_guidance_and_custom_texts():
    nudges = NudgeConfig(texts=("Keep going.",), search_guidance="Search your memory.")
    policy = cf.LoopSlicePolicy(nudges=nudges, include_search_guidance=True)
    outcome, _ = run([M("system", "s")], policy)
    assert outcome.messages[1].text == "Keep going.\nSearch your memory."


def test_unprompted_history_through_the_driver_keeps_its_latest_loop(counter):
    history = [M("system", "s"), *loop("a", "r1"), *loop("b", "r2")]
    result = cf.compact(history, policy=cf.LoopSlicePolicy(), budget=BIG, counter=counter)
    assert [m.role for m in kept(result.messages)] == ["system", "user", "assistant", "tool"]
    assert kept(result.messages)[3].text == "r2"
    assert cf.validate(result.messages) == []


def test_over_budget_cuts_the_largest_results_head_and_tail_never_splits(counter):
    history = [M("system", "s"), M("user", "go"),
               *loop("a", "A" * 20 + "x " * 6_000 + "Z" * 20, "small result")]
    budget = cf.Budget(context_window=2_500)
    result = cf.compact(history, policy=cf.LoopSlicePolicy(), budget=budget, counter=counter)
    out = result.messages
    assert [m.role for m in out] == ["system", "user", "assistant", "tool", "tool"]
    assert out[3].text.startswith("AAAA") and out[3].text.endswith("ZZZZ")
    assert "[TRUNCATED" in out[3].text
    assert out[4] is history[4]
    assert result.report.targets[0].index == 3
    assert_valid_within(out, budget, counter)


def test_loop_that_cannot_fit_is_left_out_whole(counter):
    arguments = '{"text": "%s"}' % ("w " * 3000)
    huge_call = M("assistant", "", tool_calls=(TC("c1", "write", arguments),))
    history = [M("user", "go"), huge_call, M("tool", "ok", tool_call_id="c1")]
    budget = cf.Budget(context_window=500)
    result = cf.compact(history, policy=cf.LoopSlicePolicy(), budget=budget, counter=counter)
    assert kept(result.messages) == [history[0]]
    assert any("left it out" in n for n in result.report.notes)
    # The loop left out is marked where it was, with its handle.
    notice = result.messages[1]
    assert is_notice(notice) and result.report.targets[0].handle in notice.text


def test_budget_error_only_when_system_and_prompt_do_not_fit(counter):
    history = [M("system", "rule " * 400), M("user", "go"), *loop("a", "r")]
    with pytest.raises(cf.BudgetExceededError, match="system prompt and the prompt source"):
        cf.compact(history, policy=cf.LoopSlicePolicy(), budget=cf.Budget(context_window=300),
                   counter=counter)


def test_temporal_context_refreshes_the_date_line():
    history = [M("system", "s"), M("user", "go"), *loop("a", "r")]
    policy = cf.LoopSlicePolicy(temporal=TemporalContext(tz=timezone.utc))
    outcome, _ = run(history, policy)
    assert outcome.messages[0].text == "s\n\nCurrent date: 2026-01-13, Current time: 14:30 (UTC)"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_context_messages": 0}, {"max_context_messages": 2.5}, {"selection": "newest"}],
)
def test_bad_configuration_fails_at_construction(kwargs):
    with pytest.raises(ConfigurationError):
        cf.LoopSlicePolicy(**kwargs)


def test_bad_nudge_configuration_fails_at_construction():
    with pytest.raises(ConfigurationError, match="max_encouragements"):
        NudgeConfig(max_encouragements=0)
    with pytest.raises(ConfigurationError):
        NudgeConfig(texts=())


# -- invariants -------------------------------------------------------------------------


def _is_slice(out: list[cf.Message], n_sys: int) -> bool:
    """System block, one user prompt, then at most one complete tool loop."""
    rest = kept(out[n_sys:])
    if not rest or rest[0].role != "user":
        return False
    tail = rest[1:]
    if not tail:
        return True
    return bool(tail[0].tool_calls) and all(m.role == "tool" for m in tail[1:]) and \
        {m.tool_call_id for m in tail[1:]} == {c.id for c in tail[0].tool_calls}


@settings(max_examples=max(200, settings.default.max_examples))
@given(
    st.one_of(histories(max_turns=6, max_tool_chars=12_000),
              histories(max_turns=6, max_tool_chars=12_000, imperfect=True)),
    st.integers(200, 12_000),
    st.integers(1, 30),
)
def test_output_is_a_valid_slice_within_budget(counter, messages, window, scan):
    budget = cf.Budget(context_window=window)
    policy = cf.LoopSlicePolicy(max_context_messages=scan)
    try:
        result = cf.compact(messages, policy=policy, budget=budget, counter=counter)
    except cf.BudgetExceededError as exc:  # only when system + prompt alone do not fit
        assert exc.what == "the system prompt and the prompt source"
        assert exc.needed > exc.available
        return
    out = result.messages
    assert_valid_within(out, budget, counter)
    if result.report.method == "floor":  # the policy refused; the engine's floor answered
        return
    if any("would have grown" in n for n in result.report.notes):
        return  # a short history whose notice outweighs what it left out is kept whole
    n_sys = next(k for k, m in enumerate(out) if m.role not in ("system", "developer"))
    assert _is_slice(out, n_sys)
    # tool results are cut only when the uncut slice would not fit
    by_id = {m.id: m for m in cf.repair(messages)[0]}
    uncut = [by_id.get(m.id, m) for m in out]
    if any(a is not b for a, b in zip(out, uncut, strict=True)):
        assert counter.count_messages(uncut) > budget.input_budget


def test_a_failed_run_leaves_the_counter_as_it_was(counter):
    state = ConversationState(encouragement_count=2)
    context = CompactionContext(budget=cf.Budget(context_window=200), counter=counter,
                                   state=state)
    with pytest.raises(cf.BudgetExceededError):
        cf.LoopSlicePolicy().apply([M("system", "rule " * 400), *loop("a", "r")], context)
    assert (state.encouragement_count, state.idle) == (2, False)


@given(histories(max_turns=5))
def test_the_loop_is_the_latest_one_and_unchanged_when_it_fits(counter, messages):
    result = cf.compact(messages, policy=cf.LoopSlicePolicy(max_context_messages=10_000),
                        budget=BIG, counter=counter)
    if any("would have grown" in n for n in result.report.notes):
        return  # a notice that outweighs what it left out: the input goes whole
    out = kept(result.messages)
    loops = tool_loops(messages)
    calls = [m for m in out if m.tool_calls]
    if calls:
        assert calls[0] is loops[-1].head
        assert out[-len(loops[-1]):] == list(loops[-1].messages)


@given(histories(max_turns=5, max_tool_chars=6_000), st.integers(600, 6_000))
def test_call_by_call_through_the_compactor(counter, messages, window):
    """As an agent loop uses it: the history grows, every call gets a valid slice."""
    budget = cf.Budget(context_window=window)
    compactor = cf.Compactor(cf.LoopSlicePolicy(), budget, counter)
    cuts = [i for i, m in enumerate(messages) if m.role == "assistant"] + [len(messages)]
    for cut in cuts:
        try:
            result = compactor.compact(messages[:cut])
        except cf.BudgetExceededError as exc:
            assert exc.what == "the system prompt and the prompt source"
            continue
        out = result.messages
        assert_valid_within(out, budget, counter)
        if result.report.method == "floor":  # the policy refused; the engine's floor answered
            continue
        if any("would have grown" in n for n in result.report.notes):
            continue  # a notice that outweighs what it left out: the input goes whole
        n_sys = next(k for k, m in enumerate(out) if m.role not in ("system", "developer"))
        assert _is_slice(out, n_sys)
        assert compactor.state.encouragement_count <= 3
