"""The base of policies that never need a summary: implement ``apply``."""

from __future__ import annotations

from collections.abc import Sequence

from .._contract.policy import CompactionContext, PolicyOutcome, PolicyRun
from .._lossless.ledger import Ledger, run_with_ledger
from .._messages.model import Message

__all__ = ["SimplePolicy"]


class SimplePolicy:
    """Base for policies that never need a summary: implement ``apply``.

    A subclass whose ``ledger`` is set records what ``apply`` removed or cut in the
    compaction ledger ([`contextfold.Ledger`][contextfold.Ledger]).
    """

    name: str = "simple"
    always_run: bool = False
    ledger: Ledger | None = None

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Return the outcome for ``messages``."""
        raise NotImplementedError

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Run ``apply`` (within the ledger when the policy keeps one); never yields."""
        if self.ledger is not None:
            return (yield from run_with_ledger(self._applied, messages, context, self.ledger))
        return self.apply(messages, context)
        yield  # pragma: no cover - makes this a generator

    def _applied(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        return self.apply(messages, context)
        yield  # pragma: no cover - makes this a generator
