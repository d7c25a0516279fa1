"""The threshold policy's plan: its degradation levels, what each protects, what the plan
cuts and drops, and the report's figures (see `contextfold._policies.threshold` for the steps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._contract.policy import CompactionContext, Target, dropped_targets, on_read
from .._counting.bounds import token_bounds
from .._head_tail import HeadTail
from .._lossless.references import handle_for
from .._messages.model import Message
from .._messages.prompt_kinds import find_prompt, task_prompt
from .._messages.structure import SYSTEM_ROLES, Group, newest_group
from .fitting import shrink_message, squeeze
from .rolling import block_position, is_block
from .threshold_summary import dropped_note, insert_summary

__all__ = [
    "PASSES",
    "Level",
    "Plan",
    "cut_to_fit",
    "fold_blocks",
    "note_dropped",
    "plan_details",
    "plan_originals",
    "plan_targets",
    "protected_at",
    "requests",
    "verbatim_request",
]

PASSES = (("tool_results", "tool"), ("assistant", "assistant"), ("user", "user"))
"""The target passes in their order: (the pass's name, the role it cuts)."""


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
    pass_of: dict[int, str] = field(default_factory=dict)  # the pass that cut each target
    note: str = ""
    stable: int = 0  # work[:stable] is frozen (rolling): left byte-identical
    rolling: bool = False  # the summary goes where the next rolling pass can freeze it
    groups: list[Group] | None = field(default=None, repr=False, compare=False)  # split, once

    def passes(self) -> dict[str, int]:
        """How many of the messages sent each pass cut (a target cut and then dropped with
        its group counts as dropped, not as cut)."""
        cut = [self.pass_of[i] for i in self.chosen if i in self.pass_of and
               i not in self.dropped]
        return {name: n for name, _ in PASSES if (n := cut.count(name))}

    def kept(self) -> list[Message]:
        """The messages sent, without the summary."""
        return [self.chosen.get(i, m) for i, m in enumerate(self.work) if i not in self.dropped]

    def place(self, kept: list[Message], summary: Message) -> list[Message]:
        """``kept`` with the summary where it goes: right after what was cut or dropped
        (rolling: `block_position`), else where
        `insert_summary` puts it."""
        if not self.rolling:
            return insert_summary(kept, summary)
        changed = {*self.chosen, *self.dropped, *(t.index for t in self.strip_targets)}
        at = block_position(self.work, changed, self.stable)
        k = at - sum(1 for i in self.dropped if i < at)
        return [*kept[:k], summary, *kept[k:]]


def protected_at(
    work: Sequence[Message], level: Level, stable: int = 0
) -> tuple[frozenset[int], frozenset[int]]:
    """(never truncated, never dropped) at ``level``: system messages, the task prompt and
    the latest request (`requests`), the last ``level.recent`` of each role, errors
    and pinned messages unless the level cuts or drops them, and the frozen part of a
    rolling pass (``work[:stable]``); the newest group is never dropped, and at ``recent`` 0
    its last message of each role is never truncated."""
    frozen: set[int] = set(range(stable))
    important: set[int] = set()
    seen = {"tool": 0, "assistant": 0, "user": 0}
    for i in range(len(work) - 1, -1, -1):
        m = work[i]
        if m.role in seen:
            if seen[m.role] < level.recent:
                frozen.add(i)
            seen[m.role] += 1
        if m.role in SYSTEM_ROLES:
            frozen.add(i)
        elif m.is_error or m.is_pinned:
            important.add(i)
    frozen.update(i for i in requests(work) if i is not None)
    group = newest_group(work)
    newest = set(range(group.start, group.end)) if group is not None else set()
    if level.recent == 0 and newest:  # its last message of each role stays verbatim
        last = {work[i].role: i for i in sorted(newest)}
        frozen.update(last.values())
    if not level.cut_protected:
        frozen |= important
    anchored = frozen | newest | (set() if level.drop_protected else important)
    return frozenset(frozen), frozenset(anchored)


def requests(work: Sequence[Message]) -> tuple[int | None, int | None]:
    """(the task prompt, the latest request): the first real prompt, else the first user
    message; the latest real prompt (``None`` without one: the task prompt is all there is)."""
    return task_prompt(work), find_prompt(work, 0)


def verbatim_request(plan: Plan, context: CompactionContext) -> int | None:
    """The latest request when it fits the input budget beside the system messages: then
    it is never cut (the library's promise); else ``None``, and it is cut like the task
    prompt when nothing else is left to take."""
    latest = requests(plan.work)[1]
    if latest is None:
        return None
    pair = [m for m in plan.work if m.role in SYSTEM_ROLES] + [plan.work[latest]]
    return latest if context.measure(pair) <= context.budget.input_budget else None


def plan_targets(plan: Plan, context: CompactionContext) -> tuple[Target, ...]:
    """The report's targets: stripped images, truncated and dropped messages. A dropped
    message nothing counted carries its bound (`token_bound`); the report counts it
    when read."""
    counter = context.counter
    count = counter.count_message
    out = list(plan.strip_targets)
    dropped = sorted(plan.dropped)
    span = handle_for(plan.work[i] for i in dropped) if dropped else None
    bounds = token_bounds(counter, plan.work) if dropped else []
    gone = iter(dropped_targets(plan.work, dropped, bounds, span))
    for i in sorted(set(plan.chosen) | plan.dropped):
        m = plan.work[i]
        if i in plan.dropped:
            out.append(next(gone))
            continue
        out.append(Target(
            index=i, role=m.role, method="truncated", original_tokens=count(m),
            new_tokens=count(plan.chosen[i]), tool_name=m.name if m.role == "tool" else None,
            handle=handle_for(m),
        ))
    return tuple(out)


def plan_details(
    messages: Sequence[Message], plan: Plan, context: CompactionContext, *,
    summary: str, origin: str | None = None,
) -> dict[str, object]:
    """The report's details, with the degradation level used (the input's estimate counted
    when read: the plan needs it only when the provider's figure or an overflow says
    more)."""
    offset = plan.offset
    return {
        "estimate_tokens": on_read(lambda: context.measure(messages)),
        "known_tokens": context.known_tokens,
        "effective_tokens": on_read(lambda: context.measure(messages) + offset),
        "trigger_tokens": context.budget.trigger_tokens,
        "target_tokens": context.budget.target_tokens,
        "forced": context.force,
        "images_stripped": len(plan.strip_targets),
        "truncated": len(plan.chosen) - len(plan.dropped & set(plan.chosen)),
        "passes": plan.passes(),
        "dropped": len(plan.dropped),
        "degradation": plan.level,
        "rolling": {"frozen_messages": plan.stable} if plan.stable else False,
        "summary_kind": summary,
        "summary_origin": origin,
    }


def fold_blocks(plan: Plan, context: CompactionContext) -> int:
    """Drop the summaries earlier passes wrote (outside the newest group), so that a
    consolidating pass summarizes them again into one; the tokens this saves."""
    last = newest_group(plan.work)
    newest = last.start if last is not None else len(plan.work)
    blocks = [i for i in range(newest) if is_block(plan.work[i])
              and plan.work[i].source == "summary" and not plan.work[i].is_pinned]
    plan.dropped.update(blocks)
    note_dropped(plan, context)
    return sum(context.counter.count_message(plan.work[i]) for i in blocks)


def note_dropped(plan: Plan, context: CompactionContext) -> None:
    """The summary's line naming the handle of everything the plan dropped."""
    if plan.dropped:
        span = handle_for(plan.work[i] for i in sorted(plan.dropped))
        plan.note = dropped_note(span, len(plan.dropped), context)


def cut_to_fit(
    plan: Plan, context: CompactionContext, shape: HeadTail, notices: Sequence[Message],
    notice_room: int, keep: int | None = None, *, handles: bool = False,
) -> list[Message] | None:
    """Cut the kept messages but the system ones and ``keep`` (the task prompt, the newest
    group and the latest request unless it is ``keep``, once everything else is dropped)
    head+tail to the largest common size that fits with the summary's reserve under the
    target, else with ``notice_room`` under the budget, else with each of ``notices`` (the
    short one last). Records the cuts in ``plan.chosen`` and returns ``None``; when not even
    their labels fit (with their originals' handles, when ``handles`` requires them),
    returns that floor."""
    kept = [i for i in range(len(plan.work)) if i not in plan.dropped]
    out = [plan.chosen.get(i, plan.work[i]) for i in kept]
    spots = [k for k, i in enumerate(kept)
             if plan.work[i].role not in SYSTEM_ROLES and i != keep]
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
            return context.measure(plan.place(list(candidate), last)) <= top
        if squeeze(out, spots, originals, fits, shape, context, handles=handles):
            for k in spots:
                if out[k] is not plan.work[kept[k]]:
                    plan.chosen[kept[k]] = out[k]
            return None
    floor = list(out)
    for k, original in zip(spots, originals, strict=True):
        floor[k] = shrink_message(original, shape, max_chars=0)
    return plan.place(floor, notice)


def plan_originals(plan: Plan) -> tuple[tuple[Message, ...], str | None]:
    """(the full text of every target and dropped message, the latest request when it comes
    after them all).

    The originals go in order, with the task prompt and the latest request (kept verbatim
    in the context) where they stand among them, so the summary can state the TASK: the
    latest request, and the earlier ones under it. A latest request after every original
    goes apart, as [`latest_request`][contextfold.policy.SummaryRequest.latest_request]: the
    summary's TASK, answered or not (an unanswered one is the request's ``open_request`` too)."""
    picked = set(plan.chosen) | plan.dropped
    task, latest = requests(plan.work)
    after = None
    if latest is not None and latest not in picked:
        if picked and latest < max(picked):
            picked.add(latest)
        else:
            after = plan.work[latest].text
    if task is not None:
        picked.add(task)
    return tuple(plan.work[i] for i in sorted(picked)), after
