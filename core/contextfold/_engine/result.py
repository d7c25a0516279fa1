"""What a compaction returns: the messages and a report of what was done."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._messages.model import Message
from .._policies.contract import Target

__all__ = ["CompactionReport", "CompactionResult"]


@dataclass(frozen=True)
class CompactionReport:
    """Figures of one compaction (the threshold design's compaction card)."""

    tokens_before: int
    """Input tokens (messages plus fixed parts) before compaction."""
    tokens_after: int
    """Input tokens after compaction."""
    messages_before: int
    """Number of messages before."""
    messages_after: int
    """Number of messages after."""
    method: str
    """What the policy did (``"none"`` when nothing was needed)."""
    targets: tuple[Target, ...] = ()
    """Each changed message with its original and new size."""
    llm_calls: int = 0
    """Summarizer calls made (cache hits excluded)."""
    duration: float = 0.0
    """Wall-clock seconds the compaction took."""
    forced: bool = False
    """True when compaction ran regardless of the trigger (overflow retry)."""
    repairs: tuple[str, ...] = ()
    """Repairs applied to the in-flight view of an invalid input (never to stored history)."""
    notes: tuple[str, ...] = ()
    """Remarks from the policy and the summarizer (fallbacks, verification)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Policy-specific figures (tier budgets, residuals, usage breakdown...)."""

    @property
    def tokens_saved(self) -> int:
        """Tokens removed from the input."""
        return self.tokens_before - self.tokens_after

    @property
    def changed(self) -> bool:
        """True when the messages differ from the input."""
        return self.method != "none" or bool(self.repairs)


@dataclass(frozen=True)
class CompactionResult:
    """The compacted messages and the report."""

    messages: list[Message]
    """The messages to send to the model."""
    report: CompactionReport
    """What was done."""
