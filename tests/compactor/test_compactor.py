"""The Compactor: incremental runs against from-scratch compaction, calibration,
hysteresis, forced compaction, events, failure safety and the persisted summary cache."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
from compactor_helpers import NOTICE, FoldPolicy, call_points, edited
from hypothesis import event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.errors import CompactionError, ConfigurationError, NoProgressError
from contextfold.policy import CompactionContext, PolicyOutcome, SimplePolicy, SummaryRequest
from contextfold.testing import ScriptedSummarizer, assert_valid_within, generate_history, histories

BUDGET = cf.Budget(context_window=5_000, output_reserve=1_000)
NO_WAIT = cf.RetryPolicy(base_delay=0)
SMALL = cf.Budget(context_window=2_500, output_reserve=500)


def _policies() -> list[Any]:
    return [FoldPolicy(), cf.TruncationPolicy()]


def _fingerprints(messages: list[cf.Message]) -> list[str]:
    return [m.fingerprint for m in messages]


# -- the central invariant -----------------------------------------------------------


@settings(max_examples=max(150, settings.default.max_examples))  # the central invariant
@given(
    history=histories(min_turns=3, max_turns=8, max_tool_chars=1_500, images=False),
    policy_index=st.integers(0, 1),
    data=st.data(),
)
def test_every_step_is_valid_and_within_budget_like_from_scratch(
    history: list[cf.Message], policy_index: int, data: st.DataObject, counter: cf.TokenCounter
) -> None:
    policy = _policies()[policy_index]
    compactor = cf.Compactor(policy, SMALL, counter=counter, retry=NO_WAIT)
    points = call_points(history)
    compacted = 0
    for k, n in enumerate(points):
        step = history[:n]
        action = data.draw(st.sampled_from(["extend", "extend", "extend", "edit", "rewind"]))
        if action == "edit" and n > 2:
            step = edited(step, data.draw(st.integers(0, n - 2)))
        elif action == "rewind" and k > 0:
            step = history[: points[data.draw(st.integers(0, k - 1))]]
        before = list(step)
        try:
            scratch = cf.compact(step, policy=policy, budget=SMALL, counter=counter)
        except cf.BudgetExceededError:
            scratch = None
        try:
            result = compactor.compact(step)
        except cf.BudgetExceededError:
            assert scratch is None, "the compactor failed where a from-scratch pass fits"
            continue
        assert step == before  # the caller's list is never modified
        assert_valid_within(result.messages, SMALL, counter)
        compacted += result.report.method != "none"
        if scratch is not None:
            assert_valid_within(scratch.messages, SMALL, counter)
        if scratch is not None and scratch.report.method == "none" and result.report.changed:
            # the compactor compacted earlier, so its prefix differs; still below the trigger
            assert counter.count_messages(result.messages) <= SMALL.input_budget
    event(f"{type(policy).__name__} compacted: {min(compacted, 3)}+")


def test_never_triggering_run_equals_the_input_at_every_step(counter: cf.TokenCounter) -> None:
    history = generate_history(3, turns=6, tool_chars=300)
    big = cf.Budget(context_window=1_000_000)
    compactor = cf.Compactor(FoldPolicy(), big, counter=counter)
    for n in call_points(history):
        result = compactor.compact(history[:n])
        assert result.messages == history[:n]
        assert result.report.method == "none"


# -- incremental behaviour and hysteresis -------------------------------------------


def _long_run(counter: cf.TokenCounter, steps: int, **kw: Any) -> tuple[cf.Compactor, list[Any]]:
    history = generate_history(7, turns=steps // 3 + 2, tool_chars=600)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter, **kw)
    results = []
    for n in call_points(history)[:steps]:
        results.append((n, compactor.compact(history[:n])))
    return compactor, results


def test_prefix_is_byte_stable_between_compactions(counter: cf.TokenCounter) -> None:
    _, results = _long_run(counter, 60)
    compactions = 0
    for (_, prev), (_, cur) in pairwise(results):
        if cur.report.method != "none":
            compactions += 1
            continue
        k = len(prev.messages)
        assert _fingerprints(cur.messages[:k]) == _fingerprints(prev.messages)
        assert cur.report.details["incremental"] is True
    assert compactions >= 2  # the run crossed the trigger more than once


def test_hysteresis_compacts_to_target_then_waits_for_the_trigger(
    counter: cf.TokenCounter,
) -> None:
    _, results = _long_run(counter, 60)
    sizes = [counter.count_messages(r.messages) for _, r in results]
    for (_, r), size in zip(results, sizes, strict=True):
        if r.report.method == "fold":
            assert size <= BUDGET.target_tokens + 300  # down to the target (summary slack)
        else:
            assert size <= BUDGET.trigger_tokens  # untouched until the trigger is crossed
    fold_steps = [i for i, (_, r) in enumerate(results) if r.report.method == "fold"]
    assert all(b - a > 1 for a, b in pairwise(fold_steps))


def test_edited_history_starts_over(counter: cf.TokenCounter) -> None:
    history = generate_history(5, turns=3, tool_chars=200)
    compactor = cf.Compactor(FoldPolicy(), cf.Budget(context_window=100_000), counter=counter)
    points = call_points(history)
    compactor.compact(history[: points[-2]])
    changed = edited(history[: points[-1]], 1)
    result = compactor.compact(changed)
    assert result.messages == changed
    assert result.report.details["incremental"] is False


def test_equal_but_not_identical_messages_extend(counter: cf.TokenCounter) -> None:
    history = generate_history(5, turns=3, tool_chars=200)
    points = call_points(history)
    compactor = cf.Compactor(FoldPolicy(), cf.Budget(context_window=100_000), counter=counter)
    compactor.compact(history[: points[0]])
    copies = [replace(m) for m in history[: points[1]]]
    assert all(c is not m for c, m in zip(copies, history[: len(copies)], strict=True))
    result = compactor.compact(copies)
    assert result.report.details["incremental"] is True
    assert result.messages == copies


# -- calibration -------------------------------------------------------------------


def test_reported_usage_triggers_compaction_the_estimate_would_not(
    counter: cf.TokenCounter,
) -> None:
    history = generate_history(2, turns=2, tool_chars=300)
    points = call_points(history)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    first = compactor.compact(history[: points[2]])
    assert first.report.method == "none"
    compactor.observe_usage(input_tokens=BUDGET.trigger_tokens + 10)
    second = compactor.compact(history[: points[3]])
    assert second.report.details["known_tokens"] > BUDGET.trigger_tokens
    assert second.report.method == "fold"


def test_calibration_adds_the_estimate_of_new_messages(counter: cf.TokenCounter) -> None:
    history = generate_history(2, turns=2, tool_chars=300)
    points = call_points(history)
    compactor = cf.Compactor(FoldPolicy(), cf.Budget(context_window=100_000), counter=counter)
    compactor.compact(history[: points[1]])
    compactor.observe_usage(input_tokens=1_000, output_tokens=20)
    result = compactor.compact(history[: points[2]])
    added = sum(counter.count_message(m) for m in history[points[1] : points[2]])
    # What was added is scaled by how the provider's count of the first request (1,000)
    # compared with the counter's.
    ratio = 1_000 / counter.count_messages(history[: points[1]])
    assert compactor.calibration.ratio == pytest.approx(ratio)
    assert result.report.details["known_tokens"] == 1_000 + round(added * ratio)
    assert result.report.details["calibrated_tokens"] == result.report.details["known_tokens"]


def test_calibration_scales_what_goes_out_by_the_providers_ratio(
    counter: cf.TokenCounter,
) -> None:
    history = generate_history(2, turns=3, tool_chars=300)
    points = call_points(history)
    compactor = cf.Compactor(FoldPolicy(), cf.Budget(context_window=100_000), counter=counter)
    first = compactor.compact(history[: points[1]])
    assert first.report.details["calibrated_tokens"] == first.report.tokens_after  # no report
    for k in (1, 2):  # a provider that counts 1.25 times what the counter does
        compactor.observe_usage(round(1.25 * compactor.compact(history[: points[k]])
                                      .report.tokens_after))
    result = compactor.compact(history[: points[3]])
    figure = result.report.details["calibrated_tokens"]
    assert figure == pytest.approx(1.25 * result.report.tokens_after, rel=0.002)
    compactor.reset()
    assert compactor.calibration.ratio is None


def test_calibration_is_per_compactor(counter: cf.TokenCounter) -> None:
    history = generate_history(2, turns=2, tool_chars=300)
    points = call_points(history)
    a = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    b = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    for c in (a, b):
        c.compact(history[: points[1]])
    a.observe_usage(input_tokens=BUDGET.input_budget)
    assert a.compact(history[: points[2]]).report.method == "fold"
    assert b.compact(history[: points[2]]).report.method == "none"


def test_observe_usage_rejects_nonsense() -> None:
    compactor = cf.Compactor(FoldPolicy(), BUDGET)
    with pytest.raises(ConfigurationError):
        compactor.observe_usage(input_tokens=-1)


# -- forced compaction -------------------------------------------------------------


def test_force_compacts_below_the_trigger(counter: cf.TokenCounter) -> None:
    history = generate_history(4, turns=3, tool_chars=300)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    step = history[: call_points(history)[-1]]
    assert compactor.compact(step).report.method == "none"
    forced = compactor.compact(step, force=True)
    assert forced.report.forced and forced.report.method == "fold"
    assert forced.report.tokens_after < forced.report.tokens_before


def test_force_without_progress_fails_fast_next_time(counter: cf.TokenCounter) -> None:
    call = cf.ToolCall(id="c1", name="read_file", arguments='{"path": "a.txt"}')
    step = [cf.Message(role="system", content="You are an agent."),
            cf.Message(role="user", content="Read a.txt"),
            cf.Message(role="assistant", tool_calls=(call,)),
            cf.Message(role="tool", content="hello", tool_call_id="c1", name="read_file")]
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    first = compactor.compact(step, force=True)  # folding a 3-word prompt cannot shrink it
    assert first.report.tokens_after >= first.report.tokens_before
    with pytest.raises(NoProgressError, match="no progress"):
        compactor.compact(step, force=True)
    compactor.observe_usage(input_tokens=100)  # a successful call clears the guard
    compactor.compact(step, force=True)


def test_repeated_forcing_shrinks_until_it_cannot(counter: cf.TokenCounter) -> None:
    history = generate_history(4, turns=8, tool_chars=500)
    step = history[: call_points(history)[-1]]
    compactor = cf.Compactor(FoldPolicy(), cf.Budget(context_window=60_000), counter=counter)
    sizes = []
    with pytest.raises(NoProgressError):
        for _ in range(20):
            sizes.append(compactor.compact(step, force=True).report.tokens_after)
    assert len(sizes) < 20
    assert sizes[0] > sizes[-1]


# -- events and logging ------------------------------------------------------------


def test_events_describe_each_compaction(counter: cf.TokenCounter) -> None:
    events: list[Any] = []
    _, results = _long_run(counter, 40, conversation_id="c1", listeners=[events.append])
    started = [e for e in events if isinstance(e, cf.CompactionStarted)]
    applied = [e for e in events if isinstance(e, cf.CompactionApplied)]
    folds = [r for _, r in results if r.report.method == "fold"]
    assert len(applied) == len(folds) >= 1
    assert len(started) >= len(applied)
    for applied_event, result in zip(applied, folds, strict=True):
        assert applied_event.conversation_id == "c1" and not applied_event.forced
        assert applied_event.tokens_saved == result.report.tokens_saved > 0
        assert applied_event.targets_count == len(result.report.targets) > 0
        assert all(t.original_tokens > 0 for t in applied_event.report.targets)
    assert all(e.messages_count > 0 and e.conversation_id == "c1" for e in started)


def test_a_failing_listener_does_not_break_compaction(
    counter: cf.TokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError("listener down")

    seen: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="contextfold"):
        _, results = _long_run(counter, 40, listeners=[broken, seen.append])
    assert any(r.report.method == "fold" for _, r in results)
    assert seen and "listener down" in caplog.text


def test_debug_log_line_has_the_decision_figures(
    counter: cf.TokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    history = generate_history(1, turns=1)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    with caplog.at_level(logging.DEBUG, logger="contextfold"):
        compactor.compact(history[: call_points(history)[0]])
    line = caplog.records[-1].getMessage()
    for figure in ("estimate=", "last_known=", "effective=", "budget=4000", "threshold=3000",
                   "messages=", "force=False", "needs_compaction=False"):
        assert figure in line


class _IdlePolicy(SimplePolicy):
    name = "idle"
    always_run = True

    def apply(self, messages: Any, context: CompactionContext) -> PolicyOutcome:
        context.state.encouragement_count += 1
        if context.state.encouragement_count >= 3:
            context.state.idle, context.state.idle_reason = True, "no response after 3 nudges"
        return PolicyOutcome(messages)


def test_always_run_policies_run_every_call_and_idle_is_an_event(
    counter: cf.TokenCounter,
) -> None:
    history = generate_history(1, turns=2)
    events: list[Any] = []
    compactor = cf.Compactor(_IdlePolicy(), BUDGET, counter=counter, listeners=[events.append])
    for n in call_points(history)[:4]:
        compactor.compact(history[:n])
    idle = [e for e in events if isinstance(e, cf.ConversationIdle)]
    assert len(idle) == 1 and idle[0].reason == "no response after 3 nudges"
    assert compactor.state.encouragement_count == 4
    compactor.record_response()
    assert compactor.state.encouragement_count == 0


# -- failure safety, the persisted cache -------------------------------------------


class _SpyStore(cf.MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def put_summary(self, key: str, text: str) -> None:
        self.writes += 1
        super().put_summary(key, text)


@pytest.mark.parametrize("mode", ["extractive", "notice"])
def test_a_summarizer_that_always_fails_never_loses_history(
    counter: cf.TokenCounter, mode: Any
) -> None:
    failing = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(TimeoutError("down")))
    store = _SpyStore()
    history = generate_history(9, turns=12, tool_chars=600)
    # Nothing prepared ahead: a compaction a background thread prepares and a later call
    # discards still calls the summarizer, whenever its thread gets to it.
    budget = dataclasses.replace(BUDGET, prepare=None)
    compactor = cf.Compactor(FoldPolicy(), budget, counter=counter, summarizer=failing,
                             store=store, retry=NO_WAIT, on_summary_failure=mode)
    folds = 0
    for n in call_points(history):
        step = history[:n]
        before = list(step)
        result = compactor.compact(step)
        assert step == before
        assert_valid_within(result.messages, BUDGET, counter)
        if result.report.method == "fold":
            folds += 1
            summary = next(m for m in result.messages if m.source == "summary").text
            assert "down" not in summary and "TimeoutError" not in summary
            assert ("TASK:" in summary) == (mode == "extractive")
            assert (NOTICE in summary) == (mode == "notice")
            assert any("failed after 5 attempt" in note for note in result.report.notes)
    assert folds >= 1 and failing.calls == folds * 5
    assert store.writes == 0 and store.load("any") == []


def _replay(store: Any, counter: cf.TokenCounter, history: list[cf.Message],
            summarizer: ScriptedSummarizer) -> list[cf.CompactionResult]:
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter, summarizer=summarizer,
                             store=store, conversation_id="replay")
    results = [compactor.compact(history[:n]) for n in call_points(history)[:200]]
    assert compactor.settle(timeout=30)  # a preparation still running reaches the store
    return results


def test_replaying_200_steps_with_the_persisted_cache_makes_no_summarizer_calls(
    counter: cf.TokenCounter, tmp_path: Any
) -> None:
    history = generate_history(11, turns=70, tools_per_turn=2, tool_chars=500)
    assert len(call_points(history)) >= 200
    path = tmp_path / "history.db"
    first = ScriptedSummarizer(default=lambda r: f"TASK: replay\nDATA:\n- {r.cache_key[:12]}")
    with cf.SQLiteStore(path) as store:
        original = _replay(store, counter, history, first)
    assert first.calls >= 3
    again = ScriptedSummarizer()  # raises if it is ever called
    with cf.SQLiteStore(path) as store:
        replayed = _replay(store, counter, history, again)
    assert again.calls == 0
    assert [r.messages for r in replayed] == [r.messages for r in original]
    hits = [r.report.details["summary"]["cache_hits"] for r in replayed
            if r.report.method != "none"]
    # Every summary a step used comes from the cache (a compaction prepared at the last
    # steps, which no step used, made one more call the first time).
    assert sum(hits) == sum(r.report.llm_calls for r in original) <= first.calls
    assert all(r.report.llm_calls == 0 for r in replayed)


def test_one_summarizer_call_per_compaction_pass(counter: cf.TokenCounter) -> None:
    summarizer = ScriptedSummarizer(default="TASK: t\nPROGRESS:\n1. step")
    _, results = _long_run(counter, 60, summarizer=summarizer)
    for _, r in results:
        assert r.report.llm_calls == (1 if r.report.method == "fold" else 0)


# -- async, usage, reset -----------------------------------------------------------


async def test_acompact_matches_compact(counter: cf.TokenCounter) -> None:
    history = generate_history(7, turns=10, tool_chars=600)
    sync = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    asyn = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    for n in call_points(history)[:30]:
        a = sync.compact(history[:n])
        b = await asyn.acompact(history[:n])
        assert a.messages == b.messages and a.report.method == b.report.method


def test_usage_breakdown(counter: cf.TokenCounter) -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    history = generate_history(1, turns=2)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter, tools=tools)
    usage = compactor.usage(history)
    assert usage.system_tokens == counter.count_message(history[0]) > 0
    assert usage.tool_tokens == counter.count_tools(tools) > 0
    assert usage.total == counter.count_messages(history) + usage.tool_tokens
    assert usage.total == usage.system_tokens + usage.tool_tokens + usage.message_tokens
    assert usage.budget == BUDGET.input_budget
    assert usage.available == BUDGET.input_budget - usage.total
    assert usage.over_budget == (usage.total > BUDGET.input_budget)
    assert usage.as_dict()["total"] == usage.total


def test_tool_definitions_count_against_the_trigger(counter: cf.TokenCounter) -> None:
    history = generate_history(2, turns=2, tool_chars=300)
    step = history[: call_points(history)[2]]
    heavy = [{"type": "function", "function": {"name": "t", "description": "x " * 2_900}}]
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    plain = compactor.compact(step).report
    assert plain.method == "none"
    fixed = counter.count_tools(heavy)
    assert plain.tokens_before <= BUDGET.trigger_tokens < plain.tokens_before + fixed
    with_tools = compactor.compact(step, tools=heavy).report
    # The policy ran (its fold, or the input kept because the fold would have grown it).
    assert with_tools.method == "fold" or "would have grown" in " ".join(with_tools.notes)
    assert with_tools.tokens_before == plain.tokens_before + fixed


def test_reset_forgets_the_conversation(counter: cf.TokenCounter) -> None:
    history = generate_history(2, turns=2)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    compactor.compact(history[: call_points(history)[1]])
    compactor.state.encouragement_count = 2
    compactor.reset()
    assert compactor.state.encouragement_count == 0
    assert compactor.compact(history[: call_points(history)[2]]).report.details[
        "incremental"] is False


def test_configuration_is_checked() -> None:
    with pytest.raises(ConfigurationError):
        cf.Compactor(FoldPolicy(), BUDGET, on_summary_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        cf.Compactor(object(), BUDGET)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        cf.RetryPolicy(max_attempts=0)


@given(
    history=histories(min_turns=3, max_turns=8, max_tool_chars=1_500, images=False),
    mode=st.sampled_from(["extractive", "notice"]),
    raises=st.sampled_from([TimeoutError("timed out"), RuntimeError("HTTP 500"), ""]),
)
def test_property_failing_summarizer_leaves_input_and_store_untouched(
    history: list[cf.Message], mode: Any, raises: Any, counter: cf.TokenCounter
) -> None:
    # "" stands for a summarizer that answers with an empty summary: a failure too.
    summarizer = ScriptedSummarizer(default=lambda r: _fail(raises))
    store = _SpyStore()
    compactor = cf.Compactor(FoldPolicy(), SMALL, counter=counter, summarizer=summarizer,
                             store=store, retry=cf.RetryPolicy(max_attempts=2, base_delay=0),
                             on_summary_failure=mode)
    for n in call_points(history):
        step = history[:n]
        before = list(step)
        try:
            result = compactor.compact(step)
        except cf.BudgetExceededError:
            continue
        assert step == before
        assert_valid_within(result.messages, SMALL, counter)
        for m in result.messages:
            assert ("HTTP 500" not in m.text and "timed out" not in m.text) or m in history
    assert store.writes == 0


def _fail(what: Any) -> str:
    if isinstance(what, BaseException):
        raise what
    return str(what)


def test_every_report_carries_the_usage_breakdown(counter: cf.TokenCounter) -> None:
    _, results = _long_run(counter, 40)
    for _, r in results:
        usage = r.report.details["usage"]
        assert usage["total"] == r.report.tokens_after == counter.count_messages(r.messages)
        assert usage["system_tokens"] == counter.count_message(r.messages[0])
        assert usage["available"] == BUDGET.input_budget - usage["total"]
        assert usage["over_budget"] is False


def test_a_caller_that_keeps_the_compacted_output_stays_incremental(
    counter: cf.TokenCounter,
) -> None:
    history = generate_history(7, turns=14, tool_chars=600)
    points = call_points(history)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter)
    state: list[cf.Message] = []  # like a framework state that stores what was sent
    folded = False
    for prev_n, n in pairwise([0, *points]):
        state = [*state, *history[prev_n:n]]
        result = compactor.compact(state)
        if result.report.method == "fold":
            folded = True
        elif folded:
            assert result.report.details["incremental"] is True
            assert result.messages == state
        state = result.messages
        assert_valid_within(state, BUDGET, counter)
    assert folded


async def test_acompact_awaits_an_async_only_summarizer_with_retries(
    counter: cf.TokenCounter,
) -> None:
    waits: list[float] = []

    async def asleep(seconds: float) -> None:
        waits.append(seconds)

    class AsyncOnly:
        def __init__(self) -> None:
            self.calls = 0

        async def asummarize(self, request: SummaryRequest) -> str:
            self.calls += 1
            if self.calls % 2:
                raise ConnectionError("flaky")
            return "TASK: keep going\nDATA:\n- none"

    summarizer = AsyncOnly()
    history = generate_history(7, turns=10, tool_chars=600)
    compactor = cf.Compactor(FoldPolicy(), BUDGET, counter=counter, summarizer=summarizer,
                             retry=cf.RetryPolicy(base_delay=0.5, asleep=asleep))
    folds = 0
    for n in call_points(history):
        result = await compactor.acompact(history[:n])
        if result.report.method == "fold":
            folds += 1
            assert result.report.llm_calls == 2
            summary = next(m for m in result.messages if m.source == "summary").text
            assert "keep going" in summary and "flaky" not in summary
    assert folds >= 1 and summarizer.calls == 2 * folds and waits == [0.5] * folds
    with pytest.raises(ConfigurationError, match="async only"):
        cf.Compactor(FoldPolicy(), cf.Budget(context_window=3_000), counter=counter,
                     summarizer=AsyncOnly()).compact(history, force=True)


@given(
    history=histories(min_turns=3, max_turns=8, max_tool_chars=1_500, images=False,
                      imperfect=True),
    policy_index=st.integers(0, 1),
)
def test_defective_histories_at_every_length_are_repaired_like_from_scratch(
    history: list[cf.Message], policy_index: int, counter: cf.TokenCounter
) -> None:
    policy = _policies()[policy_index]
    compactor = cf.Compactor(policy, SMALL, counter=counter)
    for n in range(1, len(history) + 1):
        step = history[:n]
        # A typed refusal (over budget, or a history no provider could take: no user
        # message yet) must come from both paths alike; any output is valid.
        try:
            scratch = cf.compact(step, policy=policy, budget=SMALL, counter=counter)
        except CompactionError:
            scratch = None
        try:
            result = compactor.compact(step)
        except CompactionError:
            assert scratch is None, "the compactor failed where a from-scratch pass fits"
            continue
        assert scratch is not None, "the compactor passed where a from-scratch pass fails"
        assert_valid_within(scratch.messages, SMALL, counter)
        assert_valid_within(result.messages, SMALL, counter)


def test_an_events_figures_are_read_from_its_report_when_read(
    counter: cf.TokenCounter,
) -> None:
    from unittest import mock

    from contextfold import _telemetry

    events: list[Any] = []
    history = [dataclasses.replace(m) for m in generate_history(6, turns=120, tool_chars=400)]
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=8_000),
                             counter=counter, listeners=[events.append])
    # (a tracer or meter provider an earlier test set would read the report's figures)
    with mock.patch.object(_telemetry.CompactionSpan, "record", lambda self, report: None):
        result = compactor.compact(history)
    applied = next(e for e in events if isinstance(e, cf.CompactionApplied))
    key = "tokens:" + counter.name
    assert not all(m.has_derived(key) for m in history)  # nothing read yet: not all counted
    assert applied.targets_count == len(result.report.targets) > 0
    assert applied.tokens_saved == result.report.tokens_saved
    assert result.report.tokens_before == counter.count_messages(history)
