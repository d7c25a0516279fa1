"""What a threshold plan drops: whole groups in their order and, without counting them,
those beyond reach.

The threshold design cuts targets (largest tool results first) until the projected
savings cover the excess, then drops whole groups, oldest first, until they do. On a long
history nothing has counted yet (a resumed thread, a first call), the cuts cannot reach
the target: every cut is made, and most groups go. Counting every message to find that
out costs more than everything else the pass does.

When a request's count is the sum of its messages' (an ``additive`` counter), the
outcome follows from the other end: the groups are dropped in their order until the rest
fits, so the groups kept are the longest run at the end of that order that fits beside
what is never dropped. `drop_beyond_reach` counts what is never dropped and then
the groups from the end of the order, each with the cuts the selection would make in it,
until the next group does not fit: that group and every one before it are dropped. Once
that happens the cuts provably could not reach the target (what was counted is already
over it, and every count is at least 0), so the selection would have cut every target
and the drops would have stopped exactly there; the plan is the one the exact path
makes, without counting, cutting or hashing what it drops. When every group fits, the
selection might stop before it has cut them all: the exact path decides.
"""

from __future__ import annotations

from collections.abc import Callable

from .._contract.policy import CompactionContext
from .._messages.model import Message
from .._messages.structure import Group, split_groups
from .threshold_plan import Plan, note_dropped

__all__ = ["drop_beyond_reach", "drop_groups", "drop_order"]


def drop_order(plan: Plan) -> list[Group]:
    """The groups the plan may drop, in the order it drops them: oldest first, groups
    holding an error or a pinned message after all others; none holding an anchored
    message or one already dropped."""
    anchored, dropped = plan.anchored, plan.dropped
    if plan.groups is None:
        plan.groups = split_groups(plan.work)
    groups = [g for g in plan.groups
              if not any(i in anchored or i in dropped for i in range(g.start, g.end))]
    groups.sort(key=lambda g: any(m.is_error or m.is_pinned for m in g.messages))
    return groups


def drop_beyond_reach(
    plan: Plan, context: CompactionContext, limit: int,
    cut: Callable[[int], tuple[Message, str] | None],
) -> bool:
    """Drop the groups the exact plan drops to bring what it keeps within ``limit`` tokens
    (reply priming and fixed parts included), and record the cuts of what it keeps, when
    every cut together cannot get there; ``False`` with the plan untouched otherwise, or
    when the counter's request is not the sum of its messages.

    ``cut(i)`` is what the selection would make of ``plan.work[i]`` (the cut copy and the
    pass that makes it), ``None`` for a message it never cuts; a cut that saves nothing is
    not made, as in the selection.
    """
    counter = context.counter
    if getattr(counter, "additive", False) is not True:
        return False
    count = counter.count_message
    work, dropped = plan.work, plan.dropped
    groups = drop_order(plan)
    cuts: dict[int, tuple[Message, str]] = {}

    def size(i: int) -> int:
        tokens = count(work[i])
        made = cut(i)
        if made is not None:
            cut_tokens = count(made[0])
            if cut_tokens < tokens:
                cuts[i] = made
                return cut_tokens
        return tokens

    grouped = bytearray(len(work))
    for g in groups:
        grouped[g.start:g.end] = b"\x01" * (g.end - g.start)
    total = counter.count_messages(()) + context.fixed_tokens
    total += sum(size(i) for i in range(len(work)) if not grouped[i] and i not in dropped)
    keep = len(groups)  # groups[keep:] are kept
    while keep:
        group = groups[keep - 1]
        grown = total + sum(size(i) for i in range(group.start, group.end))
        if grown > limit:
            break
        total, keep = grown, keep - 1
    else:
        return False  # everything fits once cut: the selection may stop before the end
    for g in groups[:keep]:
        dropped.update(range(g.start, g.end))
    for i, (new, pass_name) in cuts.items():
        if i not in dropped:
            plan.chosen[i] = new
            plan.pass_of[i] = pass_name
    return True


def drop_groups(plan: Plan, context: CompactionContext, need: int) -> None:
    """Drop whole groups not anchored, oldest first (groups holding an error or pinned
    message after all others), until ``need`` tokens are saved."""
    count = context.counter.count_message
    saved = 0
    for group in drop_order(plan):
        if saved >= need:
            break
        indices = range(group.start, group.end)
        saved += sum(count(plan.chosen.get(i, plan.work[i])) for i in indices)
        plan.dropped.update(indices)
    note_dropped(plan, context)
