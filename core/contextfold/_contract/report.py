"""What a compaction returns: the messages and a report of what was done.

A report's token figures are exact, and computed when first read when the call itself
did not need them: a call on a long history nothing has counted yet (a resumed thread)
decides from cheap upper bounds (`count_within`)
and tokenizes only what it sends or must weigh; the exact count of ``tokens_before``,
``tokens_after``, the ``targets``' original sizes and the ``details`` built from them is
left to whoever reads them (the overflow retry does; an agent step that only sends does
not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .._messages.model import Message
from .policy import Target, _Later, on_read, resolved

__all__ = ["CompactionReport", "CompactionResult", "on_read"]


class _ReadOnce:
    """A data descriptor holding a field's value in the instance dict; a `_Later`
    value is computed on the first read and replaced by its result. Details holding
    `on_read` figures (a policy's) are computed whole on their first read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # no class-level default
        value = obj.__dict__[self.name]
        if isinstance(value, _Later):
            value = value.compute()
            if self.name == "details":
                value = resolved(value)
            obj.__dict__[self.name] = value
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        if isinstance(value, dict) and resolved(value, compute=False) is not value:
            value = on_read(partial(resolved, value))
        obj.__dict__[self.name] = value


@dataclass(frozen=True)
class CompactionReport:
    """Figures of one compaction (the threshold design's compaction card)."""

    tokens_before: int
    """Input tokens (messages plus fixed parts) before compaction. Exact; counted when first
    read when the call did not need it (see the module docstring)."""
    tokens_after: int
    """Input tokens after compaction: exact, like ``tokens_before``."""
    messages_before: int
    """Number of messages before."""
    messages_after: int
    """Number of messages after."""
    method: str
    """What the policy did (``"none"`` when nothing was needed)."""
    targets: tuple[Target, ...] = ()
    """Each changed message with its original and new size (exact; counted when first read
    when the call decided from bounds, like ``tokens_before``)."""
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
    """Policy-specific figures (tier budgets, residuals, usage breakdown...); built when
    first read when its token figures were (see ``tokens_before``)."""

    def __getstate__(self) -> dict[str, Any]:
        # Figures not read yet are computed: what is pickled or copied holds values.
        return {name: getattr(self, name) for name in self.__dict__}

    @property
    def tokens_saved(self) -> int:
        """Tokens removed from the input."""
        return self.tokens_before - self.tokens_after

    @property
    def changed(self) -> bool:
        """True when the messages differ from the input."""
        return self.method != "none" or bool(self.repairs)


for _name in ("tokens_before", "tokens_after", "targets", "details"):
    setattr(CompactionReport, _name, _ReadOnce(_name))


@dataclass(frozen=True)
class CompactionResult:
    """The compacted messages and the report."""

    messages: list[Message]
    """The messages to send to the model."""
    report: CompactionReport
    """What was done."""
