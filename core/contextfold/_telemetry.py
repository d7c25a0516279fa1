"""OpenTelemetry spans and metrics for compactions and summaries, when OpenTelemetry is there.

With ``opentelemetry-api`` installed (the ``otel`` extra) every compaction pass is a span
``compact_context {model}`` and every call to an LLM summarizer a child span
``summarize {summarizer}``, named and attributed after the GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.conversation.id``,
``gen_ai.usage.input_tokens``/``output_tokens``, ``error.type``), with the compaction's own
figures under ``contextfold.*``. Summaries also record the conventions' client metrics
(``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``); compactions record
``contextfold.compaction.duration`` and ``contextfold.compaction.tokens_saved``.

Whatever SDK and exporters the application configured receive them; without an SDK the API
is a no-op, and without the package nothing here runs. Calls that need no compaction (the
fast path) never reach this module, so they cost nothing more.

Telemetry never fails what it observes: the SDK runs the application's span processors
when a span starts and ends, outside any guard of its own (it contains only exporters'
errors), so a processor that raises there leaves that pass without its span (or its end
unrecorded), logged once, and the compaction or summary goes on.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._contract.report import CompactionReport

__all__ = [
    "INSTRUMENTATION",
    "NO_SPAN",
    "NO_SUMMARY_SPAN",
    "CompactionSpan",
    "SummarySpan",
    "compaction_span",
    "summary_span",
]

INSTRUMENTATION = "contextfold"
"""The instrumentation scope name of contextfold's tracer and meter."""

logger = logging.getLogger("contextfold")
_logged = False  # a failure of the application's telemetry was logged once at warning level


@cache
def _available() -> bool:
    return importlib.util.find_spec("opentelemetry") is not None


_HISTOGRAMS = {
    "compaction_duration": ("contextfold.compaction.duration", "s",
                            "Duration of a compaction pass"),
    "tokens_saved": ("contextfold.compaction.tokens_saved", "{token}",
                     "Input tokens a compaction pass removed"),
    "operation_duration": ("gen_ai.client.operation.duration", "s",
                           "GenAI operation duration"),
    "token_usage": ("gen_ai.client.token.usage", "{token}",
                    "Number of input and output tokens used"),
}
"""Key -> (metric name, unit, description) of every histogram recorded here."""


@cache
def _meters() -> dict[str, Any]:
    from opentelemetry import metrics

    meter = metrics.get_meter(INSTRUMENTATION)
    return {key: meter.create_histogram(name, unit=unit, description=description)
            for key, (name, unit, description) in _HISTOGRAMS.items()}


def _metered() -> bool:
    """True when the application set a meter provider (the API's defaults drop everything)."""
    from opentelemetry import metrics

    return type(metrics.get_meter_provider()).__name__ not in (
        "_ProxyMeterProvider", "NoOpMeterProvider")


@contextmanager
def _started(name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    """The current span ``name`` while the block runs; ``None`` without OpenTelemetry, or
    when the application's span processors raise as it starts. An error of the block is
    recorded on the span and raised; an error of the processors as the span ends is not."""
    if not _available():
        yield None
        return
    from opentelemetry import trace

    def start() -> Any:
        return trace.get_tracer(INSTRUMENTATION).start_span(
            name, kind=trace.SpanKind.INTERNAL, attributes=attributes)

    span = _contained(start, "start")
    if span is None:
        yield None
        return
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=True,
                            set_status_on_exception=True):
            yield span
    finally:
        _contained(span.end, "end")


def _contained(call: Callable[[], Any], what: str) -> Any:
    """``call()``, or ``None`` when it raises (logged: once at warning level)."""
    global _logged
    try:
        return call()
    except Exception as exc:  # the application's span processors: never the caller's error
        log = logger.debug if _logged else logger.warning
        _logged = True
        log("contextfold: OpenTelemetry raised as a span was to %s (%s: %s); going on "
            "without it", what, type(exc).__name__, exc)
        return None


class CompactionSpan:
    """The open span of one compaction pass; `record` sets its figures."""

    def __init__(self, span: Any, attributes: dict[str, Any]) -> None:
        self.span = span
        self.attributes = attributes

    def record(self, report: CompactionReport) -> None:
        """Put the report's figures on the span and the compaction metrics. A report's
        token figures may be counted when first read: they are read only when a span is
        recorded or a meter provider is set (not for the API's no-op defaults)."""
        if self.span is None or not (self.span.is_recording() or _metered()):
            return
        figures = {
            "contextfold.method": report.method,
            "contextfold.tokens_before": report.tokens_before,
            "contextfold.tokens_after": report.tokens_after,
            "contextfold.tokens_saved": report.tokens_saved,
            "contextfold.messages_before": report.messages_before,
            "contextfold.messages_after": report.messages_after,
            "contextfold.targets": len(report.targets),
            "contextfold.llm_calls": report.llm_calls,
            "contextfold.forced": report.forced,
            "gen_ai.usage.input_tokens": report.tokens_after,
        }
        self.span.set_attributes(figures)
        meters = _meters()
        labels = {k: v for k, v in self.attributes.items()
                  if k in ("contextfold.policy", "gen_ai.request.model")}
        labels["contextfold.method"] = report.method
        meters["compaction_duration"].record(report.duration, labels)
        meters["tokens_saved"].record(max(0, report.tokens_saved), labels)


NO_SPAN = CompactionSpan(None, {})
"""The span of a pass that is not traced."""


@contextmanager
def compaction_span(
    *, policy: str, model: str | None, conversation_id: str | None, forced: bool
) -> Iterator[CompactionSpan]:
    """A span around one compaction pass (a no-op without OpenTelemetry)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "compact_context",
        "contextfold.policy": policy,
        "contextfold.forced": forced,
    }
    if model:
        attributes["gen_ai.request.model"] = model
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    name = f"compact_context {model}" if model else "compact_context"
    with _started(name, attributes) as span:
        yield CompactionSpan(span, attributes)


class SummarySpan:
    """The open span of one summarizer call; `finish` records its outcome."""

    def __init__(self, span: Any, attributes: dict[str, Any]) -> None:
        self.span = span
        self.attributes = attributes
        self.started = time.perf_counter()

    def finish(self, *, input_tokens: int, output_tokens: int | None,
               error: BaseException | None) -> None:
        """Set the token usage or the error, and record the GenAI client metrics."""
        if self.span is None:
            return
        meters = _meters()
        labels = dict(self.attributes)
        self.span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        meters["token_usage"].record(input_tokens, {**labels, "gen_ai.token.type": "input"})
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            labels["error.type"] = type(error).__qualname__
            self.span.set_attribute("error.type", labels["error.type"])
            self.span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        elif output_tokens is not None:
            self.span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
            meters["token_usage"].record(output_tokens,
                                         {**labels, "gen_ai.token.type": "output"})
        meters["operation_duration"].record(time.perf_counter() - self.started, labels)


NO_SUMMARY_SPAN = SummarySpan(None, {})
"""The span of a summarizer call that is not traced."""


@contextmanager
def summary_span(summarizer: str) -> Iterator[SummarySpan]:
    """A span around one call to an LLM summarizer (a no-op without OpenTelemetry)."""
    attributes = {"gen_ai.operation.name": "summarize", "contextfold.summarizer": summarizer}
    with _started(f"summarize {summarizer}", attributes) as span:
        yield SummarySpan(span, attributes)
