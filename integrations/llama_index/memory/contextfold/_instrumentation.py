"""Compaction events through LlamaIndex's instrumentation dispatcher.

Every compaction runs inside a span (``compact_in_span`` / ``acompact_in_span``), and the
Compactor's events are re-dispatched as LlamaIndex events inside that span, so any
handler on the root dispatcher (Arize Phoenix, Langfuse, a custom ``BaseEventHandler``)
sees them beside the LLM events::

    from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Printer(BaseEventHandler):
        def handle(self, event, **kwargs):
            if isinstance(event, CompactionAppliedEvent):
                print(event.report["tokens_before"], "->", event.report["tokens_after"])

    get_dispatcher().add_event_handler(Printer())
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.instrumentation.events import BaseEvent

from contextfold import (
    CompactionApplied,
    CompactionReport,
    CompactionResult,
    CompactionStarted,
    Compactor,
    ConversationIdle,
    Message,
)

__all__ = [
    "CompactionAppliedEvent",
    "CompactionStartedEvent",
    "ConversationIdleEvent",
    "acompact_in_span",
    "compact_in_span",
    "forward_event",
    "report_dict",
]

dispatcher = get_dispatcher(__name__)


class CompactionStartedEvent(BaseEvent):
    """Compaction begins: the trigger was crossed, or it was forced after an overflow."""

    conversation_id: str | None = None
    """The conversation (the memory's ``session_id``), when known."""
    messages_count: int = 0
    """Messages the policy works on."""
    forced: bool = False
    """True on the overflow-retry path."""

    @classmethod
    def class_name(cls) -> str:
        """The event's name for handlers."""
        return "CompactionStartedEvent"


class CompactionAppliedEvent(BaseEvent):
    """Compaction changed the messages; ``report`` is the full report as a JSON-safe dict."""

    conversation_id: str | None = None
    """The conversation (the memory's ``session_id``), when known."""
    report: dict[str, Any]
    """``CompactionReport`` fields: tokens and messages before and after, method, targets
    (index, role, method, original and new tokens), summarizer calls, notes, details."""
    tokens_saved: int = 0
    """Input tokens removed."""
    targets_count: int = 0
    """Messages changed."""
    llm_calls: int = 0
    """Calls the summarizer made for this pass: with ``LLMSummarizer``, model requests."""
    forced: bool = False
    """True on the overflow-retry path."""
    duration: float = 0.0
    """Wall-clock seconds of the pass."""

    @classmethod
    def class_name(cls) -> str:
        """The event's name for handlers."""
        return "CompactionAppliedEvent"


class ConversationIdleEvent(BaseEvent):
    """The conversation went idle (no real prompt after repeated nudges)."""

    conversation_id: str | None = None
    """The conversation, when known."""
    reason: str = ""
    """Why it went idle."""

    @classmethod
    def class_name(cls) -> str:
        """The event's name for handlers."""
        return "ConversationIdleEvent"


def report_dict(report: CompactionReport) -> dict[str, Any]:
    """A report as JSON-safe data (tuples become lists, unknown values their text)."""
    data: dict[str, Any] = {
        f.name: getattr(report, f.name) for f in dataclasses.fields(report)
        if f.name not in ("targets", "details")
    }
    data["targets"] = [
        {f.name: getattr(t, f.name) for f in dataclasses.fields(t)} for t in report.targets
    ]
    data["details"] = _json_safe(report.details)
    data["repairs"], data["notes"] = list(report.repairs), list(report.notes)
    data["tokens_saved"] = report.tokens_saved
    return data


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.loads(json.dumps(value, default=str))


def _handled() -> bool:
    """Whether an event dispatched here reaches a handler that does something: building
    one reads its report whole (the figures a pass decided without counting are counted
    then), so nothing is built for the root's null handler alone."""
    c: Any = dispatcher
    while c is not None:
        if any(not isinstance(h, NullEventHandler) for h in c.event_handlers):
            return True
        c = c.parent if c.propagate else None
    return False


def forward_event(event: object) -> None:
    """A Compactor listener: dispatch the core event as a LlamaIndex event (when a handler
    other than LlamaIndex's null one would receive it)."""
    if not _handled():
        return
    if isinstance(event, CompactionApplied):
        dispatcher.event(CompactionAppliedEvent(
            conversation_id=event.conversation_id, report=report_dict(event.report),
            tokens_saved=event.tokens_saved, targets_count=event.targets_count,
            llm_calls=event.llm_calls, forced=event.forced, duration=event.duration,
        ))
    elif isinstance(event, CompactionStarted):
        dispatcher.event(CompactionStartedEvent(
            conversation_id=event.conversation_id, messages_count=event.messages_count,
            forced=event.forced,
        ))
    elif isinstance(event, ConversationIdle):
        dispatcher.event(ConversationIdleEvent(conversation_id=event.conversation_id,
                                               reason=event.reason))


@dispatcher.span
def compact_in_span(
    compactor: Compactor,
    messages: Sequence[Message],
    *,
    force: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    extra_tokens: int = 0,
) -> CompactionResult:
    """``compactor.compact`` inside a span, so its events carry the span's id."""
    return compactor.compact(messages, force=force, tools=tools, extra_tokens=extra_tokens)


@dispatcher.span
async def acompact_in_span(
    compactor: Compactor,
    messages: Sequence[Message],
    *,
    force: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    extra_tokens: int = 0,
) -> CompactionResult:
    """``compactor.acompact`` inside a span."""
    return await compactor.acompact(messages, force=force, tools=tools,
                                    extra_tokens=extra_tokens)
