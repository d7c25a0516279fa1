"""The usage breakdown an agent can read about its own context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .._messages.model import Message
from .._messages.structure import leading_system_count
from .budget import Budget
from .counters import TokenCounter

__all__ = ["UsageBreakdown", "usage_of"]


@dataclass(frozen=True, slots=True)
class UsageBreakdown:
    """Where the input's tokens go, against the budget (the context-manager design's
    ``get_token_usage``)."""

    system_tokens: int
    """The system prompt: the system/developer messages that open the history."""
    tool_tokens: int
    """Tool definitions sent with the request."""
    message_tokens: int
    """Every other message, with the reply priming."""
    total: int
    """All of the above."""
    budget: int
    """The input budget (context window less the output reserve)."""
    available: int
    """``budget - total``; negative when over budget."""
    over_budget: bool
    """True when ``total`` exceeds ``budget``."""

    def as_dict(self) -> dict[str, int | bool]:
        """The figures as a plain dict (for reports, logs and tool results)."""
        return asdict(self)


def usage_of(
    messages: Sequence[Message], *, counter: TokenCounter, budget: Budget, tool_tokens: int = 0,
    total: int | None = None,
) -> UsageBreakdown:
    """The breakdown of ``messages`` plus ``tool_tokens`` under ``counter`` and ``budget``;
    ``total`` is the whole count when the caller already has it (no recount)."""
    system = sum(counter.count_message(m) for m in messages[: leading_system_count(messages)])
    if total is None:
        total = counter.count_messages(messages) + tool_tokens
    everything = total - tool_tokens
    return UsageBreakdown(
        system_tokens=system,
        tool_tokens=tool_tokens,
        message_tokens=everything - system,
        total=total,
        budget=budget.input_budget,
        available=budget.input_budget - total,
        over_budget=total > budget.input_budget,
    )
