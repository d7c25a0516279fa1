"""A prompt segment registry: conditional system-prompt parts under a token budget.

The tiered design's example 3 (progressive disclosure): the system prompt is assembled from
segments, each included only when its condition holds for the current context
(``has_error_occurred``, ``is_multi_agent``...), and when the budget is short the
lower-priority segments switch to their condensed variants, then are left out::

    registry = PromptSegmentRegistry([
        PromptSegment("core", CORE, priority=100, required=True),
        PromptSegment("tools", TOOLS_FULL, condensed=TOOLS_SHORT, priority=50,
                      condition=lambda c: c.get("has_tools", False)),
        PromptSegment("errors", ERROR_HELP, priority=40,
                      condition=lambda c: c.get("has_error_occurred", False)),
    ])
    system_prompt = registry.build({"has_tools": True}, budget_tokens=2500, counter=counter)

Assembly, step by step: (1) keep the segments whose condition holds; (2) when their full
texts do not fit, condense segments from the lowest priority up (ties: the later
registered first) until they fit; (3) when even all condensed variants do not fit, leave
out non-required segments from the lowest priority up. Segments keep their registration
order in the prompt. A required segment that cannot fit even condensed raises
[`BudgetExceededError`][contextfold.BudgetExceededError].
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._counting.counters import TokenCounter
from ..errors import BudgetExceededError, ConfigurationError

__all__ = ["AssembledPrompt", "PromptSegment", "PromptSegmentRegistry"]

Condition = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class PromptSegment:
    """One part of a system prompt."""

    name: str
    """A unique name (reports say which segments were used)."""
    text: str
    """The full text."""
    condensed: str | None = None
    """A shorter variant used when the budget is short."""
    condition: Condition | None = None
    """Included only when this returns true for the context; ``None``: always."""
    priority: int = 0
    """Higher keeps its full text longer and is left out last."""
    required: bool = False
    """Never left out (it may still be condensed)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"segment name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise ConfigurationError(f"segment {self.name!r}: text must not be empty")
        if self.condensed is not None and not self.condensed.strip():
            raise ConfigurationError(f"segment {self.name!r}: condensed must not be empty")
        if self.condition is not None and not callable(self.condition):
            raise ConfigurationError(f"segment {self.name!r}: condition must be callable")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ConfigurationError(f"segment {self.name!r}: priority must be an int")


@dataclass(frozen=True)
class AssembledPrompt:
    """A built prompt and how it was built."""

    text: str
    """The system prompt."""
    tokens: int
    """Its tokens under the counter used."""
    included: tuple[str, ...]
    """Segments in the prompt, in order."""
    condensed: tuple[str, ...] = ()
    """Segments that used their condensed variant."""
    omitted: tuple[str, ...] = ()
    """Segments whose condition held but that did not fit."""
    skipped: tuple[str, ...] = ()
    """Segments whose condition did not hold."""


@dataclass
class PromptSegmentRegistry:
    """Segments in registration order; ``build`` assembles them under a budget.

    Args:
        segments: the initial segments.
        separator: the text between segments.
    """

    segments: list[PromptSegment] = field(default_factory=list)
    separator: str = "\n\n"

    def __post_init__(self) -> None:
        initial, self.segments = list(self.segments), []
        for segment in initial:
            self.register(segment)

    def register(self, segment: PromptSegment) -> PromptSegment:
        """Add ``segment`` (its name must be new); returns it."""
        if not isinstance(segment, PromptSegment):
            raise ConfigurationError(f"expected a PromptSegment, got {segment!r}")
        if any(s.name == segment.name for s in self.segments):
            raise ConfigurationError(f"a segment named {segment.name!r} is already registered")
        self.segments.append(segment)
        return segment

    def build(self, context: Mapping[str, Any], budget_tokens: int,
              counter: TokenCounter) -> str:
        """The system prompt for ``context`` within ``budget_tokens`` (see the module doc)."""
        return self.assemble(context, budget_tokens, counter).text

    def assemble(self, context: Mapping[str, Any], budget_tokens: int,
                 counter: TokenCounter) -> AssembledPrompt:
        """Like [`build`][contextfold.prompts.PromptSegmentRegistry.build], with what was included,
        condensed, omitted and skipped."""
        if not isinstance(budget_tokens, int) or budget_tokens < 0:
            raise ConfigurationError(f"budget_tokens must be an int >= 0, got {budget_tokens!r}")
        active = [s for s in self.segments if s.condition is None or s.condition(context)]
        skipped = tuple(s.name for s in self.segments if s not in active)
        order = sorted(range(len(active)), key=lambda k: (active[k].priority, -k))
        texts = {s.name: s.text for s in active}
        condensed: list[str] = []
        kept = list(active)

        def size() -> int:
            return counter.count_text(self._join(kept, texts))

        for k in order:
            if size() <= budget_tokens:
                break
            segment = active[k]
            if segment.condensed is not None:
                texts[segment.name] = segment.condensed
                condensed.append(segment.name)
        omitted: list[str] = []
        for k in order:
            if size() <= budget_tokens:
                break
            if not active[k].required:
                kept.remove(active[k])
                omitted.append(active[k].name)
        tokens = size()
        if tokens > budget_tokens:
            raise BudgetExceededError("the required prompt segments", needed=tokens,
                                      available=budget_tokens)
        return AssembledPrompt(
            text=self._join(kept, texts), tokens=tokens, included=tuple(s.name for s in kept),
            condensed=tuple(n for n in condensed if any(s.name == n for s in kept)),
            omitted=tuple(omitted), skipped=skipped,
        )

    def _join(self, kept: Iterable[PromptSegment], texts: Mapping[str, str]) -> str:
        return self.separator.join(texts[s.name] for s in kept)
