"""OpenTelemetry spans and metrics for compactions and summaries, read back with the SDK's
in-memory exporter and metric reader."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import StatusCode

import contextfold as cf
from contextfold import _telemetry
from contextfold.testing import ScriptedSummarizer, generate_history

BUDGET = cf.Budget(context_window=6_000, output_reserve=1_000, model="gpt-4o")
NO_WAIT = cf.RetryPolicy(max_attempts=2, base_delay=0)

_EXPORTER = InMemorySpanExporter()
_READER = InMemoryMetricReader()


class _OwnRandomIds(IdGenerator):
    """Span and trace ids from a generator of its own. The SDK's default draws them from
    the global ``random`` module, and the provider outlives this module: a compaction
    prepared in a background thread during a later property test would then move the global
    random state while Hypothesis generates data (which it reports as a flaky strategy)."""

    def __init__(self) -> None:
        self._random = random.Random()
        self._lock = threading.Lock()

    def generate_span_id(self) -> int:
        with self._lock:
            return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        with self._lock:
            return self._random.getrandbits(128) or 1


@pytest.fixture(scope="module", autouse=True)
def _providers() -> None:
    # The global providers can be set once per process; later tests only clear the exporter.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(id_generator=_OwnRandomIds())
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    _READER.get_metrics_data()  # drains what earlier tests recorded (cumulative still adds)
    yield _EXPORTER


def _points(name: str) -> list[Any]:
    data = _READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += list(metric.data.data_points)
    return found


def _by_name(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def _compactor(summarizer: Any) -> cf.Compactor:
    return cf.Compactor(cf.ThresholdPolicy(), BUDGET, counter=cf.TiktokenCounter("cl100k_base"),
                        summarizer=summarizer, conversation_id="thread-7", retry=NO_WAIT)


def test_a_compaction_is_a_span_with_its_figures_and_summaries_are_its_children(
        spans: InMemorySpanExporter) -> None:
    summarizer = ScriptedSummarizer(default=lambda r: "TASK: book HAT001\nPROGRESS: seat 4A")
    history = generate_history(3, turns=10, tool_chars=1_500)
    result = _compactor(summarizer).compact(history)
    assert result.report.method != "none" and result.report.llm_calls >= 1
    (compaction,) = _by_name(spans, "compact_context")
    assert compaction.name == "compact_context gpt-4o"
    attrs = dict(compaction.attributes or {})
    assert attrs["gen_ai.operation.name"] == "compact_context"
    assert attrs["gen_ai.request.model"] == "gpt-4o"
    assert attrs["gen_ai.conversation.id"] == "thread-7"
    assert attrs["contextfold.policy"] == "threshold"
    assert attrs["contextfold.tokens_before"] == result.report.tokens_before
    assert attrs["contextfold.tokens_after"] == result.report.tokens_after
    assert attrs["contextfold.tokens_saved"] == result.report.tokens_saved > 0
    assert attrs["contextfold.llm_calls"] == result.report.llm_calls
    summaries = _by_name(spans, "summarize ")
    assert len(summaries) == summarizer.calls == result.report.llm_calls
    for span in summaries:
        assert span.parent is not None and span.parent.span_id == compaction.context.span_id
        sattrs = dict(span.attributes or {})
        assert sattrs["gen_ai.operation.name"] == "summarize"
        assert sattrs["gen_ai.usage.input_tokens"] > 100
        assert sattrs["gen_ai.usage.output_tokens"] == cf.TiktokenCounter(
            "cl100k_base").count_text("TASK: book HAT001\nPROGRESS: seat 4A")
    # Metrics: the compaction's duration and tokens saved; the summaries' GenAI client usage.
    saved = [p for p in _points("contextfold.compaction.tokens_saved")
             if p.attributes["contextfold.method"] == result.report.method]
    assert saved and saved[0].sum >= result.report.tokens_saved
    usage = {p.attributes["gen_ai.token.type"]: p for p in _points("gen_ai.client.token.usage")}
    assert set(usage) == {"input", "output"} and usage["input"].count >= len(summaries)
    assert _points("gen_ai.client.operation.duration")
    assert _points("contextfold.compaction.duration")


def test_a_failed_summary_call_is_an_error_span_and_the_compaction_still_succeeds(
        spans: InMemorySpanExporter) -> None:
    failing = ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(TimeoutError("slow")))
    result = _compactor(failing).compact(generate_history(4, turns=10, tool_chars=1_500))
    assert result.report.tokens_after <= BUDGET.input_budget  # the extractive fallback
    failed = _by_name(spans, "summarize ")
    assert len(failed) == failing.calls >= 2  # every attempt, retries included
    for span in failed:
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "TimeoutError"
    (compaction,) = _by_name(spans, "compact_context")
    assert compaction.status.status_code is not StatusCode.ERROR


def test_calls_that_do_not_compact_make_no_span(spans: InMemorySpanExporter) -> None:
    compactor = _compactor(None)
    history = generate_history(5, turns=2, tool_chars=200)
    for n in range(2, len(history) + 1):
        assert compactor.compact(history[:n]).report.method == "none"
    assert spans.get_finished_spans() == ()


def test_without_opentelemetry_compaction_runs_untraced(
        spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_telemetry, "_available", lambda: False)
    summarizer = ScriptedSummarizer(default=lambda r: "TASK: t")
    result = _compactor(summarizer).compact(generate_history(3, turns=10, tool_chars=1_500))
    assert result.report.method != "none"
    assert spans.get_finished_spans() == ()
