"""The threshold policy's plan: the degradation levels, what each protects, and the
report's targets and details."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._lossless.references import handle_for
from .._messages.model import Message
from .._messages.structure import SYSTEM_ROLES, split_groups
from .contract import CompactionContext, Target
from .fitting import shrink_message, squeeze
from .head_tail import HeadTail
from .threshold_fit import dropped_note, insert_summary

__all__ = [
    "Level",
    "Plan",
    "cut_to_fit",
    "drop_groups",
    "plan_details",
    "plan_originals",
    "plan_targets",
    "protected_at",
]


@dataclass(frozen=True)
class Level:
    """One step of the degradation: what stays protected."""

    name: str
    recent: int  # messages of each role kept verbatim at the end
    cut_protected: bool = False  # errors and pinned messages may be truncated
    drop_protected: bool = False  # groups holding them may be dropped


@dataclass
class Plan:
    """What the policy decided before asking for the summary."""

    work: Sequence[Message]
    strip_targets: tuple[Target, ...]
    frozen: frozenset[int]  # never truncated
    anchored: frozenset[int]  # never dropped
    offset: int
    reserve: int
    level: str = "none"
    chosen: dict[int, Message] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    passes: dict[str, int] = field(default_factory=dict)
    note: str = ""

    def kept(self) -> list[Message]:
        """The messages sent, without the summary."""
        return [self.chosen.get(i, m) for i, m in enumerate(self.work) if i not in self.dropped]


def protected_at(
    work: Sequence[Message], level: Level
) -> tuple[frozenset[int], frozenset[int]]:
    """(never truncated, never dropped) at ``level``: system messages, the first user
    message, the last ``level.recent`` of each role, errors and pinned messages unless the
    level cuts or drops them; the newest group is never dropped, and at ``recent`` 0 its
    last message of each role is never truncated."""
    frozen: set[int] = set()
    important: set[int] = set()
    seen = {"tool": 0, "assistant": 0, "user": 0}
    first_user = None
    for i in range(len(work) - 1, -1, -1):
        m = work[i]
        if m.role in seen:
            if seen[m.role] < level.recent:
                frozen.add(i)
            seen[m.role] += 1
        if m.role == "user":
            first_user = i
        if m.role in SYSTEM_ROLES:
            frozen.add(i)
        elif m.is_error or m.is_pinned:
            important.add(i)
    if first_user is not None:
        frozen.add(first_user)
    groups = split_groups(work)
    newest = set(range(groups[-1].start, groups[-1].end)) if groups else set()
    if level.recent == 0 and newest:  # its last message of each role stays verbatim
        last = {work[i].role: i for i in sorted(newest)}
        frozen.update(last.values())
    if not level.cut_protected:
        frozen |= important
    anchored = frozen | newest | (set() if level.drop_protected else important)
    return frozenset(frozen), frozenset(anchored)


def plan_targets(plan: Plan, context: CompactionContext) -> tuple[Target, ...]:
    """The report's targets: stripped images, truncated and dropped messages."""
    count = context.counter.count_message
    out = list(plan.strip_targets)
    span = handle_for(plan.work[i] for i in sorted(plan.dropped)) if plan.dropped else None
    for i in sorted(set(plan.chosen) | plan.dropped):
        m = plan.work[i]
        dropped = i in plan.dropped
        out.append(Target(
            index=i, role=m.role, method="dropped" if dropped else "truncated",
            original_tokens=count(m), new_tokens=0 if dropped else count(plan.chosen[i]),
            tool_name=m.name if m.role == "tool" else None,
            handle=span if dropped else handle_for(m),
        ))
    return tuple(out)


def plan_details(
    messages: Sequence[Message], plan: Plan, context: CompactionContext, *,
    summary: str, origin: str | None = None,
) -> dict[str, object]:
    """The report's details, with the degradation level used."""
    return {
        "estimate_tokens": context.measure(messages),
        "known_tokens": context.known_tokens,
        "effective_tokens": context.measure(messages) + plan.offset,
        "trigger_tokens": context.budget.trigger_tokens,
        "target_tokens": context.budget.target_tokens,
        "forced": context.force,
        "images_stripped": len(plan.strip_targets),
        "truncated": len(plan.chosen) - len(plan.dropped & set(plan.chosen)),
        "passes": dict(plan.passes),
        "dropped": len(plan.dropped),
        "degradation": plan.level,
        "summary_kind": summary,
        "summary_origin": origin,
    }


def drop_groups(plan: Plan, context: CompactionContext, need: int) -> None:
    """Drop whole groups not anchored, oldest first (groups holding an error or pinned
    message after all others), until ``need`` tokens are saved."""
    count = context.counter.count_message
    saved = 0
    groups = [g for g in split_groups(plan.work)
              if not any(i in plan.anchored for i in range(g.start, g.end))]
    groups.sort(key=lambda g: any(m.is_error or m.is_pinned for m in g.messages))
    for group in groups:
        if saved >= need:
            break
        indices = range(group.start, group.end)
        saved += sum(count(plan.chosen.get(i, plan.work[i])) for i in indices)
        plan.dropped.update(indices)
    if plan.dropped:
        span = handle_for(plan.work[i] for i in sorted(plan.dropped))
        plan.note = dropped_note(span, len(plan.dropped), context)


def cut_to_fit(
    plan: Plan, context: CompactionContext, shape: HeadTail, notices: Sequence[Message],
    notice_room: int,
) -> list[Message] | None:
    """Cut the kept messages but the system ones (the first user message and the newest
    group, once everything else is dropped) head+tail to the largest common size that fits
    with the summary's reserve under the target, else with ``notice_room`` under the budget,
    else with each of ``notices`` (the short one last). Records the cuts in ``plan.chosen``
    and returns ``None``; when not even their labels fit, returns that floor."""
    kept = [i for i in range(len(plan.work)) if i not in plan.dropped]
    out = [plan.chosen.get(i, plan.work[i]) for i in kept]
    spots = [k for k, i in enumerate(kept) if plan.work[i].role not in SYSTEM_ROLES]
    originals = [plan.work[kept[k]] for k in spots]
    limit = context.budget.input_budget
    target = context.budget.target_tokens - plan.offset
    notice = notices[-1]
    steps = [(plan.reserve, min(target, limit), notice), (notice_room, limit, notice),
             *((0, limit, n) for n in notices)]
    for room, ceiling, last in steps:
        def fits(candidate: Sequence[Message], room: int = room, top: int = ceiling,
                 last: Message = last) -> bool:
            if room:
                return context.measure(candidate) + room <= top
            return context.measure(insert_summary(list(candidate), last)) <= top
        if squeeze(out, spots, originals, fits, shape, context):
            for k in spots:
                if out[k] is not plan.work[kept[k]]:
                    plan.chosen[kept[k]] = out[k]
            return None
    floor = list(out)
    for k, original in zip(spots, originals, strict=True):
        floor[k] = shrink_message(original, shape, max_chars=0)
    return insert_summary(floor, notice)


def plan_originals(plan: Plan) -> tuple[Message, ...]:
    """The full text of every target and dropped message, in order, after the first user
    message (kept verbatim in the context, sent along so the summary can state the TASK)."""
    picked = sorted(set(plan.chosen) | plan.dropped)
    first_user = next((i for i, m in enumerate(plan.work) if m.role == "user"), None)
    if first_user is not None and first_user not in plan.chosen:
        picked = [first_user, *(i for i in picked if i != first_user)]
    return tuple(plan.work[i] for i in picked)
