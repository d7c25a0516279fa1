"""Compose policies in order: each pass sees the previous pass's output.

The recommended order, and why::

    Pipeline(StripImagesPass(), <clear old tool results>, ThresholdPolicy())

1. **strip images** first: analysed screenshots are the largest items and are of no use
   after the step that looked at them; removing them costs nothing and is exact;
2. **clear old tool results** next: replacing stale results with a placeholder is cheap,
   needs no LLM, and (batched) keeps the provider's prompt cache stable;
3. **threshold** (or tiered) last: it triggers on what is still too big after the cheap
   passes, so the one summary it asks for covers only what had to go.

Cheap, lossless or nearly lossless passes come before lossy ones, and passes that need no
LLM before the one that does: a later pass may find it has nothing to do.

A pass that must see every call (``always_run``, such as ``LoopSlicePolicy``) makes the
whole pipeline run on every call; the other passes then see the input below the trigger
too and leave it alone.

Every pass gets the same context, except that a calibrated ``known_tokens`` is lowered by
what the earlier passes saved, so a later pass does not act on a stale size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .._contract.policy import CompactionContext, Policy, PolicyOutcome, PolicyRun, Target
from .._messages.model import Message
from ..errors import ConfigurationError

__all__ = ["Pipeline"]


class Pipeline:
    """Run ``passes`` in order; the output of one is the input of the next.

    Summary requests of every pass go through to the driver. The outcome's method is
    ``"pipeline(a+b)"`` with the methods of the passes that changed something; targets are
    merged, their ``index`` mapped back to the pipeline's input by message id (``-1`` for a
    message an earlier pass created, such as a summary). The input object itself comes back
    when no pass changed anything.

    Raises:
        ConfigurationError: no passes, or a pass that is not a policy.
    """

    def __init__(self, *passes: Policy) -> None:
        if not passes:
            raise ConfigurationError("Pipeline needs at least one pass")
        for p in passes:
            if not isinstance(p, Policy):
                raise ConfigurationError(
                    f"Pipeline passes must be policies (a name and run()), got {p!r}"
                )
        self.passes: tuple[Policy, ...] = passes
        """The passes, in the order they run."""
        self.name = "pipeline(" + "+".join(p.name for p in passes) + ")"
        self.always_run: bool = any(p.always_run for p in passes)
        """True when any pass must run on every call (the Compactor then never skips the
        pipeline below the trigger)."""

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(map(repr, self.passes))})"

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Run every pass in order, forwarding their summary requests."""
        positions = {m.id: i for i, m in enumerate(messages)}
        current: Sequence[Message] = messages
        ran: list[tuple[str, PolicyOutcome]] = []
        for p in self.passes:
            step_context = _narrowed(context, messages, current)
            outcome = yield from p.run(current, step_context)
            ran.append((p.name, outcome))
            current = outcome.messages
        if current is messages:
            return PolicyOutcome(
                messages=messages, notes=_notes(ran), details=_details(ran),
            )
        changed = [o.method for _, o in ran if o.method != "none"]
        return PolicyOutcome(
            messages=current,
            method="pipeline(" + "+".join(changed) + ")",
            targets=_targets(ran, messages, positions),
            notes=_notes(ran),
            details=_details(ran),
        )


def _narrowed(
    context: CompactionContext, original: Sequence[Message], current: Sequence[Message]
) -> CompactionContext:
    """The context for a later pass: ``known_tokens`` less what earlier passes saved."""
    if current is original or context.known_tokens is None:
        return context
    saved = context.measure(original) - context.measure(current)
    return replace(context, known_tokens=max(0, context.known_tokens - saved))


def _targets(
    ran: list[tuple[str, PolicyOutcome]], original: Sequence[Message], positions: dict[str, int]
) -> tuple[Target, ...]:
    out: list[Target] = []
    current: Sequence[Message] = original
    for _, outcome in ran:
        for t in outcome.targets:
            at = t.index
            if current is not original:
                at = positions.get(current[t.index].id, -1) if 0 <= t.index < len(current) else -1
            out.append(replace(t, index=at))
        current = outcome.messages
    return tuple(out)


def _notes(ran: list[tuple[str, PolicyOutcome]]) -> tuple[str, ...]:
    return tuple(note for _, o in ran for note in o.notes)


def _details(ran: list[tuple[str, PolicyOutcome]]) -> dict[str, Any]:
    return {
        "passes": [
            {"name": name, "method": o.method, "targets": len(o.targets), "details": o.details}
            for name, o in ran
        ]
    }
