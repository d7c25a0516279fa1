"""The plan of a [`TieredPolicy`][contextfold.TieredPolicy] pass, and what it reports.

`TierPlan` says where each group of the input goes (residual, pinned, the latest
request kept verbatim, or a tier) and how much room each tier summary has; the functions
below build the tier summary messages and the report's targets and figures from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._contract.policy import CompactionContext, Target
from .._head_tail import HeadTail
from .._lossless.references import handle_for
from .._messages.model import Message
from .._messages.structure import Group
from .budget_allocation import BudgetAllocation
from .fitting import fits_budget, squeeze
from .importance import ImportanceScore, keyword_truncate

__all__ = ["FixedParts", "TierPlan", "cut_newest", "cut_targets", "fit_lines",
           "header_message", "tier_details", "tier_targets"]


@dataclass
class TierPlan:
    """The groups and where each goes."""

    groups: list[Group]
    scores: list[ImportanceScore]
    lead: int
    offset: int
    target: int  # the tokens the plan aims at (the budget's target)
    kept: set[int] = field(default_factory=set)  # residual groups
    pinned: set[int] = field(default_factory=set)
    latest: int | None = None  # the latest user request's group (when not pinned)
    request: set[int] = field(default_factory=set)  # {latest} when it is kept out of tiers
    tier_of: dict[int, int] = field(default_factory=dict)
    allocation: BudgetAllocation | None = None
    rooms: dict[int, int] = field(default_factory=dict)  # tier -> tokens for its message
    headers: dict[int, int] = field(default_factory=dict)
    needs: dict[int, int] = field(default_factory=dict)  # tier -> header + preserved share
    cut_newest: bool = False  # the newest group must be cut head+tail to fit
    cut_groups: dict[int, tuple[Message, ...]] = field(default_factory=dict)
    """Tier-0 groups kept with their tool results cut (in the room a summary left)."""

    def members(self, tier: int) -> list[int]:
        """The groups in ``tier``, oldest first."""
        return [g for g, t in sorted(self.tier_of.items()) if t == tier]

@dataclass(frozen=True)
class FixedParts:
    """What the allocation takes before the tiers."""

    parts: dict[str, int]  # system prompt, tools, calibration, the current message's reserve
    residuals: int  # tokens of the residual and pinned groups
    header: int  # the largest tier header


def header_message(tier: int, count: int, text: str = "", ref: str = "") -> Message:
    """A tier's summary message: its header, then ``text``. The header says the messages
    were summarized only when a summary follows it."""
    full = f"; full text: {ref}" if ref else ""
    summarized = " summarized" if text else ""
    header = f"[Compacted history — tier {tier}: {count} earlier messages{summarized}{full}]"
    return Message(role="user", content=f"{header}\n\n{text}" if text else header,
                   source="summary", metadata={"compaction": "tiered", "tier": tier})

_SECTION = re.compile(r"[A-Z][A-Z /&-]{1,30}:")
"""A summary's section heading at the start of a line ("TASK:", "REMAINING:")."""
_LEAST_CUT = 20
"""The fewest characters of a heading's or first item's line worth keeping cut."""


def fit_lines(text: str, max_chars: int, keywords: Iterable[str] = ()) -> str:
    """``text`` shortened to at most ``max_chars``, its lines whole and in their order.

    A structured summary keeps its shape: the section headings first, then each section's
    first item (the task, what remains), then the lines naming the most ``keywords``, the
    earlier first among equals; a heading or first item too long for what is left is cut
    with ``…``. Text of a single line is shortened by its sentences
    (`keyword_truncate`).
    """
    if len(text) <= max_chars:
        return text
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return keyword_truncate(text, max_chars, keywords)
    words = [k.lower() for k in keywords if k]
    rank: list[tuple[int, int, int]] = []
    after_heading = False
    for k, line in enumerate(lines):
        heading = _SECTION.match(line) is not None
        kind = 0 if heading else 1 if after_heading else 2
        after_heading = heading and len(line.split(":", 1)[1].strip()) == 0
        lowered = line.lower()
        rank.append((kind, -sum(1 for w in words if w in lowered), k))
    chosen: dict[int, str] = {}
    used = 0
    for kind, _, k in sorted(rank):
        line = lines[k]
        left = max_chars - used - (1 if chosen else 0)
        if len(line) > left and kind < 2 and left >= _LEAST_CUT:
            line = line[: left - 1].rstrip() + "\u2026"
        if len(line) <= left:
            chosen[k] = line
            used += len(line) + (1 if len(chosen) > 1 else 0)
    return "\n".join(chosen[k] for k in sorted(chosen))


def tier_targets(plan: TierPlan, context: CompactionContext) -> tuple[Target, ...]:
    """The report's targets: every summarized message, with its tier's handle."""
    count = context.counter.count_message
    spans = {t: handle_for(m for g in plan.members(t) for m in plan.groups[g].messages)
             for t in (1, 2, 3) if plan.members(t)}
    return tuple(
        Target(index=i, role=m.role, method=f"summarized:tier{t}",
               original_tokens=count(m), new_tokens=0,
               tool_name=m.name if m.role == "tool" else None, handle=spans[t])
        for g, t in sorted(plan.tier_of.items()) if t
        for i, m in enumerate(plan.groups[g].messages, start=plan.groups[g].start)
    )

def tier_details(
    messages: Sequence[Message], out: Sequence[Message], plan: TierPlan,
    context: CompactionContext,
) -> dict[str, Any]:
    """Compression metrics, residuals with their factors, tiers and the budget report."""
    original, compressed = context.measure(messages), context.measure(out)
    residual_indices = [
        i for g in sorted(plan.kept) for i in range(plan.groups[g].start, plan.groups[g].end)
    ]
    tiers = {f"tier{t}": sum(len(plan.groups[g]) for g in plan.members(t)) for t in range(4)}
    # The latest request is raw like tier 0, and nearly always among its messages.
    tiers["tier0"] += sum(len(plan.groups[g]) for g in plan.request)
    budget = plan.allocation.as_dict() if plan.allocation is not None else None
    if budget is not None:
        budget["used_tokens"] = compressed + plan.offset
        budget["used_percent"] = round(100 * (compressed + plan.offset) / budget["total"], 2)
    return {
        "original_tokens": original,
        "compressed_tokens": compressed,
        "ratio": round(compressed / original, 4) if original else 1.0,
        "residual_count": len(residual_indices),
        "residuals": [
            {"index": i, "score": plan.scores[i].score, "factors": list(plan.scores[i].factors)}
            for i in residual_indices if plan.scores[i].is_residual
        ],
        "pinned_count": sum(len(plan.groups[g]) for g in plan.pinned),
        "tiers": tiers,
        "budget": budget,
    }

def cut_newest(out: list[Message], plan: TierPlan, context: CompactionContext) -> bool:
    """Cut the newest group's messages (at the end of ``out``) head+tail, in place, to
    the largest common size that fits; False when not even their labels fit. A request
    (a user message) is cut only with its handle: the engine's floor sends it whole, or
    cut with its handle, rather than as a label the model could not read back."""
    newest = plan.groups[-1].messages if plan.groups else ()
    if not newest or out[-len(newest):] != list(newest):
        return False
    spots = list(range(len(out) - len(newest), len(out)))
    plan.cut_newest = True
    return squeeze(out, spots, newest, fits_budget(context), HeadTail(), context,
                   handles=any(m.role == "user" for m in newest))

def cut_targets(
    before: Sequence[Message], after: Sequence[Message], context: CompactionContext
) -> tuple[Target, ...]:
    """A ``"truncated"`` target for each message ``after`` replaced (same positions)."""
    count = context.counter.count_message
    return tuple(
        Target(index=i, role=old.role, method="truncated", original_tokens=count(old),
               new_tokens=count(new), tool_name=old.name if old.role == "tool" else None,
               handle=handle_for(old))
        for i, (old, new) in enumerate(zip(before, after, strict=True)) if new is not old
    )
