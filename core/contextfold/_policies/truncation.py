"""Token-budget truncation over atomic groups (the context-manager design's ``oldest_first`` and
``middle_out``).

The history after the leading system messages is split into atomic groups (a standalone
message, or an assistant message with its tool calls and their results), and whole groups
are kept or dropped, so a call is never separated from its result.

* ``oldest_first`` keeps the newest groups that fit and drops everything older.
* ``middle_out`` also keeps the first group (the task prompt) and drops from the middle.

What is always true of the output (for a valid input; ``compact()`` repairs the in-flight
view of an invalid one first):

* the leading system messages are kept, unchanged;
* the most recent group is kept. When it cannot fit even alone, its largest tool results
  are cut head+tail with the threshold design's visible label (largest first, tighter and tighter)
  instead of failing or splitting the group;
* the first message after the system messages is a user message. The context-manager design keeps a
suffix of groups, which may start with an assistant tool loop of a long-running turn; a
  provider rejects an assistant message before any user message, and the tool loops
  answer that turn's request, so the turn's prompt (the nearest user message before the
  kept groups) is kept too and its tokens are reserved up front;
* apart from middle_out's task prompt and the turn's prompt, the kept groups are
  contiguous: a newer group is never dropped to keep an older one;
* pinned messages are never cut; one dropped with its group is put back verbatim by the
  ``Compactor``'s pin guarantee, with the room it needs reserved;
* every run of dropped messages leaves a one-line notice where it was, naming how many
  went, their tools and identifiers, and the handles that read them back
  (`notices`); the notices count in the budget, bare (count
  and handles) when the detailed ones do not fit, left out only when not even a bare
  notice fits beside the most recent group. ``notices=False`` gives ``trim_messages``-like
  output: the kept messages only.

``BudgetExceededError`` is raised only when the system messages plus the most recent
group (with its prompt, and its tool results cut down to their labels) do not fit.

Cost: one pass over the messages to find the groups, one backward pass over the groups
and one count of the output; nothing is recounted in a loop. Only what the plan reads is
tokenized: whether the input fits is decided from upper bounds
(`count_within`), and a group's size is counted
when the plan reaches it, newest first, so a long history that nothing has counted yet
costs the tokens of what is kept (and of the turn's prompt), not of all of it. The
``original_tokens`` of a message dropped uncounted is its bound in the policy's outcome;
the Compactor's report counts it exactly when its targets are first read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .._config import check
from .._contract.policy import CompactionContext, PolicyOutcome, Target, dropped_targets
from .._counting.bounds import count_within, token_bounds
from .._counting.counters import TokenCounter
from .._head_tail import HeadTail
from .._lossless.ledger import Ledger
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from .._messages.prompt_kinds import prompt_kind
from .._messages.structure import leading_system_count
from ..errors import BudgetExceededError
from .fitting import shrink_message
from .notices import Marks, mark_removals
from .simple import SimplePolicy

__all__ = ["TruncationPolicy"]

Strategy = Literal["oldest_first", "middle_out"]
_ROUNDS = 4  # water-filling rounds when cutting the last group's tool results
_RETRIES = 5  # re-plans when a counter's totals are not the sum of its message counts


class _Sizes:
    """The token counts of a history's groups, each counted when first read (the plan reads
    the newest groups, the prompts it keeps and the head: rarely all of them)."""

    def __init__(self, messages: Sequence[Message], bounds: list[int],
                 count: Callable[[Message], int]) -> None:
        self._messages, self._bounds, self._count = messages, bounds, count
        self._known: list[int | None] = [None] * (len(bounds) - 1)

    def __len__(self) -> int:
        return len(self._known)

    def __getitem__(self, g: int) -> int:
        size = self._known[g]
        if size is None:
            a, b = self._bounds[g], self._bounds[g + 1]
            size = self._known[g] = sum(map(self._count, self._messages[a:b]))
        return size


@dataclass(frozen=True)
class _Layout:
    """The groups of a history as index ranges, with their token counts."""

    n_sys: int
    """Leading system/developer messages."""
    bounds: list[int]
    """Start of each group after the system messages, then ``len(messages)``."""
    sizes: _Sizes
    """Tokens of each group (counted when read)."""
    need: list[int]
    """For each group, the user-headed group that must come before it when it is the
    first one kept (its turn's prompt); -1 for a user message or when there is none."""

    def group(self, messages: Sequence[Message], g: int) -> Sequence[Message]:
        return messages[self.bounds[g] : self.bounds[g + 1]]


@dataclass(frozen=True)
class _Plan:
    """Which groups to keep: ``head`` (middle_out's task prompt), ``prompt`` (the kept turn's
    prompt) and every group from ``start`` on; ``tail`` replaces the last group if shrunk."""

    start: int
    head: int | None = None
    prompt: int | None = None
    tail: tuple[Message, ...] | None = None

    def kept(self, n_groups: int) -> set[int]:
        """Indices of the kept groups."""
        kept = set(range(self.start, n_groups))
        kept.update(i for i in (self.head, self.prompt) if i is not None)
        return kept


class TruncationPolicy(SimplePolicy):
    """Drop whole groups of old messages until the history fits the budget.

    Args:
        strategy: ``"oldest_first"`` keeps the newest groups that fit; ``"middle_out"``
            keeps the first group (the task prompt) as well and drops from the middle,
            falling back to ``oldest_first`` when the two ends together cannot fit.
        shape: the head+tail proportions used when the most recent group alone is too big.
        ledger: the compaction ledger's settings; ``None`` (the default) keeps no ledger.
        notices: leave a one-line notice with its handle where each run of dropped
            messages was (the default); ``False`` keeps only the kept messages.

    Runs when the input exceeds the budget's ``input_budget`` (less the fixed tokens), or
    when forced; a forced run (the overflow retry) aims for ``target_tokens`` instead so
    it makes progress. Returns the input object itself when nothing needs to change.
    """

    name = "truncation"

    def __init__(
        self, strategy: Strategy = "oldest_first", *, shape: HeadTail | None = None,
        ledger: Ledger | None = None, notices: bool = True,
    ):
        check("TruncationPolicy", "strategy", strategy, Strategy)
        check("TruncationPolicy", "ledger", ledger, Ledger | None)
        check("TruncationPolicy", "notices", notices, bool)
        self.notices = notices
        self.ledger = ledger
        self.strategy: Strategy = strategy
        self.shape = shape or HeadTail()

    def __repr__(self) -> str:
        notices = "" if self.notices else ", notices=False"
        return f"TruncationPolicy(strategy={self.strategy!r}{notices})"

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Keep the system messages and the newest groups (and the task prompt) that fit,
        with a notice where each run of dropped messages was."""
        if not context.force and _fits(messages, context):
            return PolicyOutcome(messages=messages)
        if not self.notices:
            return self._apply(messages, context, notices=False)
        try:
            return self._apply(messages, context, notices=True)
        except BudgetExceededError:
            # Not even bare notices fit beside the most recent group cut to its labels: the
            # removals go unmarked rather than the call failing (the report still names
            # every handle).
            outcome = self._apply(messages, context, notices=False)
            note = "truncation: no room for the removal notices beside the most recent group"
            return replace(outcome, notes=(*outcome.notes, note))

    def _apply(self, messages: Sequence[Message], context: CompactionContext, *,
               notices: bool) -> PolicyOutcome:
        counter = context.counter
        known = context.known_tokens
        limit = self._limit(context, context.measure(messages) if known else 0)
        layout = _layout(messages, counter)
        # The empty request's priming and the system messages.
        base = counter.count_messages(messages[: layout.n_sys])
        allowance = limit - base
        out: list[Message] = []
        marks: Marks | None = None
        for attempt in range(_RETRIES):
            try:
                plan = self._plan(messages, layout, allowance, context.fixed_tokens + base,
                                  context)
            except BudgetExceededError:
                if not attempt:
                    raise
                # A counter that is not additive shrank the room by the difference each
                # time: the figures that matter are the real count and the real budget.
                raise BudgetExceededError(
                    f"the truncated history ({len(out)} messages) under counter "
                    f"{counter.name!r}",
                    needed=counter.count_messages(out) + context.fixed_tokens,
                    available=limit + context.fixed_tokens,
                ) from None
            out, origins = _assemble(messages, layout, plan)
            marks = _marked(messages, out, origins, context, limit) if notices else None
            if marks is not None:
                out, origins = marks.messages, marks.origins
            total = counter.count_messages(out)
            if total <= limit:
                break
            # Over the limit: the notices did not fit in the room the kept groups left, or
            # the counter is not additive (the kept messages cost more together than their
            # counts), which also scales the room by the ratio just measured. The groups get
            # less than they took, so the plan drops (or cuts) one more, whose run the
            # notices then name, rather than choosing the same groups again.
            held = sum(counter.count_message(m)
                       for m, o in zip(out[layout.n_sys:], origins[layout.n_sys:], strict=True)
                       if o is not None)
            planned = sum(counter.count_message(m) for m in out[layout.n_sys:])
            used = max(total - base, 1)
            allowance = min(allowance - (total - limit), held - 1,
                            (limit - base) * planned // used - 1)
        else:
            raise BudgetExceededError(
                f"the truncated history ({len(out)} messages) under counter {counter.name!r}",
                needed=counter.count_messages(out) + context.fixed_tokens,
                available=limit + context.fixed_tokens,
            )
        if plan.tail is None and len(plan.kept(len(layout.sizes))) == len(layout.sizes):
            return PolicyOutcome(messages=messages)
        return self._outcome(messages, out, layout, plan, context, limit, marks)

    # -- planning -------------------------------------------------------------------

    def _limit(self, context: CompactionContext, measured: int) -> int:
        """Tokens the messages may take: ``available``, scaled down when the provider's
        reported usage shows our counter undercounts, and the target when forced."""
        limit = context.available
        if context.force:
            limit = min(limit, context.budget.target_tokens - context.fixed_tokens)
        known = context.known_tokens
        if known is not None and known > measured > 0:
            limit = limit * measured // known
        return limit

    def _plan(
        self,
        messages: Sequence[Message],
        layout: _Layout,
        allowance: int,
        outside: int,
        context: CompactionContext,
    ) -> _Plan:
        """The plan that keeps the most groups within ``allowance``; ``outside`` is what
        the request costs besides the groups (fixed tokens, system messages, priming)."""
        sizes, need = layout.sizes, layout.need
        if not sizes:
            plan = None
        elif self.strategy == "middle_out" and len(sizes) > 1 and need[0] == -1:
            plan = _newest_that_fit(sizes, need, 1, allowance - sizes[0])
            plan = replace(plan, head=0) if plan else _newest_that_fit(sizes, need, 0, allowance)
        else:
            plan = _newest_that_fit(sizes, need, 0, allowance)
        return plan or self._shrunk_tail(messages, layout, allowance, outside, context)

    def _shrunk_tail(
        self,
        messages: Sequence[Message],
        layout: _Layout,
        allowance: int,
        outside: int,
        context: CompactionContext,
    ) -> _Plan:
        """The most recent group (and its prompt) with its largest tool results cut."""
        available = outside + allowance
        last = len(layout.sizes) - 1
        if last < 0:
            raise BudgetExceededError("the system messages", needed=outside, available=available)
        prompt = layout.need[last] if layout.need[last] >= 0 else None
        prompt_size = layout.sizes[prompt] if prompt is not None else 0
        group = layout.group(messages, last)
        tail, size = _shrink_to(group, allowance - prompt_size, self.shape, context)
        if size + prompt_size > allowance:
            what = "the system messages and the most recent group"
            if prompt is not None:
                what += " with its turn's prompt"
            raise BudgetExceededError(
                f"{what} ({len(group)} messages, tool results already cut head+tail)",
                needed=outside + prompt_size + size,
                available=available,
            )
        return _Plan(start=last, prompt=prompt, tail=tail)

    # -- reporting ------------------------------------------------------------------

    def _outcome(
        self,
        messages: Sequence[Message],
        out: list[Message],
        layout: _Layout,
        plan: _Plan,
        context: CompactionContext,
        limit: int,
        marks: Marks | None,
    ) -> PolicyOutcome:
        """The outcome with a target per dropped or cut message, in input order."""
        found = (list(marks.targets) if marks is not None
                 else _dropped(messages, layout, plan, context.counter))
        dropped = len(found)
        if plan.tail is not None:
            start, count = layout.bounds[-2], context.counter.count_message
            for i, new in enumerate(plan.tail, start):
                old = messages[i]
                if new is not old:
                    found.append(_target(i, old, "truncated", count(old), count(new),
                                         handle_for(old)))
        kept = plan.kept(len(layout.sizes))
        details = {
            "strategy": self.strategy,
            "limit": limit,
            "groups_before": len(layout.sizes),
            "groups_kept": len(kept),
            "messages_dropped": dropped,
            "messages_truncated": len(found) - dropped,
            "kept_task_prompt": plan.head is not None,
            "kept_turn_prompt": plan.prompt is not None,
            "notices": sum(o is None for o in marks.origins) if marks is not None else 0,
        }
        notes: tuple[str, ...] = ()
        if self.strategy == "middle_out" and 0 not in kept:
            notes = ("middle_out: the task prompt did not fit beside the newest groups",)
        return PolicyOutcome(
            messages=out, method="truncation", targets=tuple(found), notes=notes, details=details
        )


def _fits(messages: Sequence[Message], context: CompactionContext) -> bool:
    """Whether the input fits the budget (``context.input_tokens`` within it), tokenizing
    only what the decision needs."""
    known = context.known_tokens
    if known is not None and known > context.budget.input_budget:
        return False
    figure, _ = count_within(context.counter, messages, context.available)
    return figure <= context.available


def _layout(messages: Sequence[Message], counter: TokenCounter) -> _Layout:
    """Group ranges (as ``split_groups`` draws them) and their sizes (counted when read),
    in one pass."""
    n_sys = leading_system_count(messages)
    bounds: list[int] = []
    i, n = n_sys, len(messages)
    while i < n:
        bounds.append(i)
        i += 1
        if messages[i - 1].tool_calls:
            while i < n and messages[i].role == "tool":
                i += 1
    bounds.append(n)
    sizes = _Sizes(messages, bounds, counter.count_message)
    need: list[int] = []
    last_user = last_prompt = -1
    for g, start in enumerate(bounds[:-1]):
        if messages[start].role == "user":
            need.append(-1)
            last_user = g
            if prompt_kind(messages[start]) is not None:
                last_prompt = g
        else:
            # The turn's prompt is its real request, not a summary or an earlier removal
            # notice after it (those are user messages too: any keeps the format valid).
            need.append(last_prompt if last_prompt >= 0 else last_user)
    return _Layout(n_sys, bounds, sizes, need)


def _newest_that_fit(
    sizes: _Sizes, need: Sequence[int], first: int, allowance: int
) -> _Plan | None:
    """The plan keeping groups ``start..`` for the smallest ``start >= first`` that fits
    together with the prompt its first group needs; ``None`` when not even the last does.

    Prompts before ``first`` are already kept (middle_out's head) and cost nothing here.
    """
    best: tuple[int, int | None] | None = None
    suffix = 0
    for start in range(len(sizes) - 1, first - 1, -1):
        suffix += sizes[start]
        if suffix > allowance:
            break
        prompt = need[start]
        if prompt < first:
            best = (start, None)
        elif suffix + sizes[prompt] <= allowance:
            best = (start, prompt)
    return _Plan(start=best[0], prompt=best[1]) if best is not None else None


def _assemble(
    messages: Sequence[Message], layout: _Layout, plan: _Plan
) -> tuple[list[Message], list[int | None]]:
    """The kept messages in input order, the shrunk last group in place of the original,
    and the input position of each."""
    bounds = layout.bounds
    out = list(messages[: layout.n_sys])
    origins: list[int | None] = list(range(layout.n_sys))
    for g in (plan.head, plan.prompt):
        if g is not None:
            out.extend(layout.group(messages, g))
            origins.extend(range(bounds[g], bounds[g + 1]))
    if plan.tail is None:
        out.extend(messages[bounds[plan.start] :])
    else:
        out.extend(messages[bounds[plan.start] : bounds[-2]])
        out.extend(plan.tail)
    origins.extend(range(bounds[plan.start], len(messages)) if bounds else ())
    return out, origins


def _marked(
    messages: Sequence[Message], out: list[Message], origins: list[int | None],
    context: CompactionContext, limit: int,
) -> Marks:
    """``out`` with its removal notices: detailed when they fit within ``limit``, else
    bare (the caller plans again with less room when even those do not fit)."""
    full = mark_removals(messages, out, origins, context)
    if context.counter.count_messages(full.messages) <= limit:
        return full
    return mark_removals(messages, out, origins, context, detail=False)


def _dropped(
    messages: Sequence[Message], layout: _Layout, plan: _Plan, counter: TokenCounter
) -> list[Target]:
    """A ``"dropped"`` target for every message of the groups before ``plan.start`` that
    are neither the head nor the prompt, in input order; a message nothing counted carries
    its bound (`token_bound`), not a count."""
    bounds = layout.bounds
    ranges: list[tuple[int, int]] = []
    cursor = bounds[0] if bounds else 0
    for g in sorted(g for g in (plan.head, plan.prompt) if g is not None):
        ranges.append((cursor, bounds[g]))
        cursor = bounds[g + 1]
    ranges.append((cursor, bounds[plan.start] if bounds else 0))
    figures = token_bounds(counter, messages)
    return dropped_targets(messages, (i for a, b in ranges for i in range(a, b)), figures)


def _shrink_to(
    messages: Sequence[Message], room: int, shape: HeadTail, context: CompactionContext
) -> tuple[tuple[Message, ...], int]:
    """``messages`` with their largest unpinned tool results cut head+tail until they take
    at most ``room`` tokens (or nothing more can be cut), and their size.

    The results above a common level are cut down to it (water-filling), so the largest
    lose the most and small ones stay whole; each cut starts from the original text.
    """
    count = context.counter.count_message
    out = list(messages)
    size = sum(map(count, out))
    live = [i for i, m in enumerate(out) if m.role == "tool" and not m.is_pinned]
    for _ in range(_ROUNDS):
        if size <= room:
            break
        current = {i: count(out[i]) for i in live}
        level = _water_level(list(current.values()), size - room)
        changed = False
        for i, before in current.items():
            if before > level:
                ref = handle_text(handle_for(messages[i]), context)
                cut = _cut(messages[i], level, shape, count, ref)
                if count(cut) < before:
                    out[i], size, changed = cut, size + count(cut) - before, True
        if not changed:
            break
    return tuple(out), size


def _water_level(sizes: Sequence[int], excess: int) -> int:
    """The level ``L`` such that cutting every size above ``L`` down to it removes at
    least ``excess``."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for j, size in enumerate(ordered, 1):
        total += size
        level = (total - excess) // j
        if level >= (ordered[j] if j < len(ordered) else 0):
            return max(level, 0)
    return 0


def _cut(
    message: Message, goal: int, shape: HeadTail, count: Callable[[Message], int], ref: str,
) -> Message:
    """``message`` cut head+tail to at most ``goal`` tokens: the threshold design's proportions
    first, then the largest ``max_chars`` that reaches the goal (bisection), else the label alone
    (the label names ``ref``, the original's handle)."""
    first = shrink_message(message, shape, handle=ref)
    if first is message or count(first) <= goal:
        return first
    best = shrink_message(message, shape, max_chars=0, handle=ref)
    if count(best) > goal:
        return best
    lo, hi = 0, sum(shape.sizes(len(message.text)))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        candidate = shrink_message(message, shape, max_chars=mid, handle=ref)
        if count(candidate) <= goal:
            lo, best = mid, candidate
        else:
            hi = mid - 1
    return best


def _target(
    index: int, m: Message, method: str, before: int, after: int, handle: str | None = None,
) -> Target:
    return Target(
        index=index,
        role=m.role,
        method=method,
        original_tokens=before,
        new_tokens=after,
        tool_name=m.name if m.role == "tool" else None,
        handle=handle,
    )
