"""Pinned messages: content every policy keeps verbatim.

A message is pinned by ``metadata["pinned"]`` ([`contextfold.Message.pin`][contextfold.Message.pin],
or the adapters' ``pin()``). Policies differ in what they keep (a summary of the head, the latest
loop, the newest turns), so the guarantee is kept here, around any policy, the same way
for all of them:

1. the policy runs as usual;
2. each pinned message's group (a pinned tool result comes with its call and the call's
   other results, so the sequence stays valid) is put back verbatim: a copy the policy cut
   is replaced by the original in place, a group the policy left out is inserted where it
   stood, after the output message that came before it in the history (with the request
   that opened its turn when that is not in view: a tool call must follow a request);
3. when the result does not fit, the policy runs once more with the room of what step 2
   put back reserved, and the pinned groups are put back again.

When even that does not fit, the pinned messages take more room than the budget leaves:
``BudgetExceededError`` says how many tokens they hold.

A policy's copy of a message (a cut, a placeholder) keeps the message's ``id``, which is
how a pinned message's copy is found in the output and where a left-out group goes back.
Ids come from frameworks and checkpoints and need not be unique: when messages share one,
the policy runs on copies of them that each have an id of their own, and the output gets
the caller's ids (and the caller's messages where the policy kept them) back. Otherwise a
message sharing a pinned message's id (the latest answer) was taken for its copy and
replaced by it: the answer vanished and the pin was sent twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from .._contract.policy import CompactionContext, PolicyOutcome, PolicyRun
from .._counting.counters import _shared_prefix
from .._messages.model import Message, _with_id
from .._messages.structure import Group, leading_system_count, split_groups
from ..errors import BudgetExceededError

__all__ = ["PinScan", "keep_pinned"]


class PinScan:
    """Whether a conversation's input holds a pinned message, scanning only what was
    appended since the previous call (an input that starts with the previous one's
    messages, as an agent loop's does)."""

    def __init__(self) -> None:
        self._seen: list[Message] = []
        self._found = False

    def any_pinned(self, messages: Sequence[Message]) -> bool:
        seen = self._seen
        k = _shared_prefix(seen, messages)
        found = self._found if k == len(seen) else any(m.is_pinned for m in messages[:k])
        found = found or any(m.is_pinned for m in messages[k:])
        self._seen, self._found = list(messages), found
        return found


def keep_pinned(
    run: Callable[[Sequence[Message], CompactionContext], PolicyRun],
    messages: Sequence[Message], context: CompactionContext, scan: PinScan | None = None,
    *, pinned: bool | None = None,
) -> PolicyRun:
    """``run`` (a policy's) with every pinned message kept verbatim: see the module
    docstring. ``scan`` (one per conversation) spares a rescan of what earlier calls saw;
    ``pinned`` says whether ``messages`` hold a pinned message, when the caller knows."""
    if pinned is None:
        pinned = (scan.any_pinned(messages) if scan is not None
                  else any(m.is_pinned for m in messages))
    if not pinned:
        return (yield from run(messages, context))
    unique, origin = _own_ids(messages)
    if not origin:
        return (yield from _kept_pinned(run, messages, context))
    outcome = yield from _kept_pinned(run, unique, context)
    return _ids_given_back(outcome, unique, messages, origin)


def _kept_pinned(
    run: Callable[[Sequence[Message], CompactionContext], PolicyRun],
    messages: Sequence[Message], context: CompactionContext,
) -> PolicyRun:
    """`keep_pinned` on ``messages`` that hold a pinned message, each with an id of
    its own."""
    n_sys = leading_system_count(messages)
    groups = [g for g in split_groups(messages, n_sys) if any(m.is_pinned for m in g.messages)]
    state = context.state
    saved = (state.encouragement_count, state.idle, state.idle_reason)
    outcome = yield from run(messages, context)
    out, moved, back = _restored(messages, outcome.messages, groups)
    if moved and context.measure(out) > context.budget.input_budget:
        reserve = sum(context.counter.count_message(messages[i]) for i in back)
        # The second run stands for the first: counters it updates start where they were.
        state.encouragement_count, state.idle, state.idle_reason = saved
        inner = replace(context, fixed_tokens=context.fixed_tokens + reserve)
        try:
            outcome = yield from run(messages, inner)
        except BudgetExceededError as error:
            raise _too_big(groups, context, error.needed + reserve) from error
        out, moved, back = _restored(messages, outcome.messages, groups)
    if context.measure(out) > context.budget.input_budget:
        raise _too_big(groups, context, context.measure(out))
    if not moved:
        return outcome
    return PolicyOutcome(
        messages=out, method=outcome.method,
        targets=tuple(t for t in outcome.targets if t.index not in back),
        notes=outcome.notes, details={**outcome.details, "pinned_restored": len(groups)},
    )


def _own_ids(messages: Sequence[Message]) -> tuple[Sequence[Message], dict[str, int]]:
    """``messages`` with an id of its own for each message whose id an earlier one has,
    and the position of each message given one (empty, and ``messages`` itself, when
    every id is unique)."""
    seen: set[str] = set()
    origin: dict[str, int] = {}
    unique: list[Message] | None = None
    for i, m in enumerate(messages):
        if m.id not in seen:
            seen.add(m.id)
            continue
        if unique is None:
            unique = list(messages)
        own = uuid.uuid4().hex
        unique[i] = _with_id(m, own)
        origin[own] = i
    return (messages if unique is None else unique), origin


def _ids_given_back(
    outcome: PolicyOutcome, unique: Sequence[Message], messages: Sequence[Message],
    origin: dict[str, int],
) -> PolicyOutcome:
    """``outcome`` of a run on ``unique`` with the ids of ``messages``: the caller's own
    message where the output kept one, a copy's id put back where the policy made one."""
    if outcome.messages is unique:
        return replace(outcome, messages=messages)
    out = []
    for m in outcome.messages:
        i = origin.get(m.id)
        out.append(m if i is None else messages[i] if m is unique[i]
                   else _with_id(m, messages[i].id))
    return replace(outcome, messages=out)


def _too_big(groups: Sequence[Group], context: CompactionContext, needed: int
             ) -> BudgetExceededError:
    pinned = sum(context.counter.count_message(m) for g in groups for m in g.messages)
    return BudgetExceededError(
        f"{sum(len(g) for g in groups)} pinned message(s) ({pinned} tokens with their calls "
        "and results) beside what the policy must keep (unpin some, or raise the budget)",
        needed=needed, available=context.budget.input_budget,
    )


def _restored(
    messages: Sequence[Message], out: Sequence[Message], groups: Sequence[Group],
) -> tuple[list[Message], list[Group], set[int]]:
    """``out`` with every pinned group verbatim, the groups that had to be restored or
    inserted, and the input positions put back. A policy's copy of a message keeps its
    ``id``, which is how a cut copy is found. A group that opens with an assistant message
    is inserted with the user message that opened its turn when that one is not in view,
    so that it follows a request, in its place."""
    result = list(out)
    moved: list[Group] = []
    back: set[int] = set()
    position = {m.id: i for i, m in enumerate(messages)}
    for group in groups:
        where = {m.id: k for k, m in enumerate(result)}
        found = [where[m.id] for m in group.messages if m.id in where]
        whole = len(found) == len(group)
        if whole and all(result[k] is m for k, m in zip(found, group.messages, strict=True)):
            continue
        moved.append(group)
        back.update(range(group.start, group.end))
        if whole:
            for k, m in zip(found, group.messages, strict=True):
                result[k] = m
            continue
        present = set(found)
        result = [m for k, m in enumerate(result) if k not in present]
        unit, start = list(group.messages), group.start
        if group.head.role != "user":
            prompt = next((i for i in range(group.start - 1, -1, -1)
                           if messages[i].role == "user"), None)
            if prompt is not None and messages[prompt].id not in where:
                # In the prompt's place, unless what is in view between the prompt and the
                # group (another pinned group of the turn) would then follow it; there the
                # group goes alone after it, or with the prompt when no request precedes.
                between = any(prompt < position.get(m.id, -1) < group.start for m in result)
                at = _insertion_point(position, result, group.start, False)
                if not between:
                    unit, start = [messages[prompt], *unit], prompt
                    back.add(prompt)
                elif not any(m.role == "user" for m in result[:at]):
                    unit = [messages[prompt], *unit]
                    back.add(prompt)
        at = _insertion_point(position, result, start, unit[0].role == "user")
        result[at:at] = unit
    return result, moved, back


def _insertion_point(
    position: dict[str, int], out: Sequence[Message], start: int, opens_with_user: bool,
) -> int:
    """Where messages that stood at ``start`` go back in ``out``: after the last output
    message that came before them in the history (and its tool results), after the
    system messages, and after the first user message unless they open with one."""
    at = leading_system_count(out)
    for k, m in enumerate(out):
        origin = position.get(m.id)
        if origin is not None and origin < start:
            at = k + 1
    if not opens_with_user:
        first_user = next((k for k, m in enumerate(out) if m.role == "user"), None)
        if first_user is not None and at <= first_user:
            at = first_user + 1
    while at < len(out) and out[at].role == "tool":
        at += 1  # never between a call and its results
    return at
