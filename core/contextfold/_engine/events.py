"""Compaction events (the threshold design's ``compaction.started`` and ``compaction.applied``).

A [`Compactor`][contextfold.Compactor] delivers them to its listeners: plain sync callables
taking one event. A listener that raises is logged and skipped; it never breaks a
compaction::

    compactor.add_listener(lambda e: print(type(e).__name__, e))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Union

from .._contract.report import CompactionReport, _ReadOnce

__all__ = [
    "CompactionApplied",
    "CompactionEvent",
    "CompactionStarted",
    "ConversationIdle",
    "Listener",
    "emit",
]

logger = logging.getLogger("contextfold")


@dataclass(frozen=True, slots=True)
class CompactionStarted:
    """Compaction begins: the trigger was crossed or compaction was forced."""

    conversation_id: str | None
    """The conversation, when the compactor has an id."""
    messages_count: int
    """Messages the policy works on."""
    forced: bool
    """True on the overflow-retry path (``force=True``)."""


@dataclass(frozen=True)
class CompactionApplied:
    """Compaction changed the messages (the threshold design's compaction card).

    ``tokens_saved`` and ``targets_count`` are read from the report when the Compactor
    left its figures to be counted when first read (see
    [`CompactionReport`][contextfold.CompactionReport]): a listener that never reads them costs
    nothing."""

    conversation_id: str | None
    """The conversation, when the compactor has an id."""
    report: CompactionReport
    """The full report: per-target original size, new size and method, notes."""
    tokens_saved: int
    """Input tokens removed."""
    targets_count: int
    """Messages changed."""
    forced: bool
    """True on the overflow-retry path."""
    duration: float
    """Wall-clock seconds of the pass."""


    @property
    def llm_calls(self) -> int:
        """Calls the summarizer made for this pass (``report.llm_calls``): with an LLM
        summarizer, each is one more model request, billed as any other."""
        return self.report.llm_calls


for _name in ("tokens_saved", "targets_count"):
    setattr(CompactionApplied, _name, _ReadOnce(_name))


@dataclass(frozen=True, slots=True)
class ConversationIdle:
    """The conversation went idle (the message-format guarantee: no response after repeated
    nudges)."""

    conversation_id: str | None
    """The conversation, when the compactor has an id."""
    reason: str
    """Why, e.g. ``"failed to respond after 3 encouragements"``."""


CompactionEvent = Union[CompactionStarted, CompactionApplied, ConversationIdle]
"""Any event a compactor emits."""

Listener = Callable[[CompactionEvent], object]
"""A sync callable receiving each event."""


def emit(listeners: Iterable[Listener], event: CompactionEvent) -> None:
    """Deliver ``event`` to every listener; a listener's exception is logged, not raised."""
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            logger.exception(
                "contextfold: listener %r failed on %s", listener, type(event).__name__
            )
