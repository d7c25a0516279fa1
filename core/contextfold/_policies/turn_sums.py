"""Turn-aware composition of a long history by its token sums, kept call to call.

An agent loop's current turn grows by a step at every call, and ``TurnAwarePolicy``'s
degradation (its class docstring) walks it whole at each one: it cuts every older tool
result, then drops the oldest groups until the rest fits. With a counter whose request
count is the sum of its message counts (``additive``), each step's outcome follows from
running sums over the positions instead: the tokens of each message, as it is and with
its tool result cut, extended by what was appended (`TurnSums`, kept in the
lineage), and the past turns, compressed once when they close. `fit_by_sums` then
decides the same steps the policy's ``_fit`` takes, touching only what stays in view.

It answers only where the answer cannot depend on the order of the cuts: when the older
loops' results must all be cut (even all of them cut, the plan is over the budget). When
some cuts might be enough, or the whole plan fits, it answers ``None`` and the policy
fits by hand (such a turn holds no more than the budget does).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._contract.policy import CompactionContext
from .._head_tail import HeadTail
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from .._messages.prompt_kinds import prompt_kind
from .._messages.structure import Group
from .fitting import shrink_if_fewer_tokens
from .scans import GroupScan

__all__ = ["SumsFit", "TurnSums", "fit_by_sums"]


class TurnSums:
    """Per conversation (in the lineage): the compressed past turns and the running sums of
    cut tool results, for one counter and one head+tail shape."""

    def __init__(self) -> None:
        # Past turns: those closed before group ``closed`` (a later prompt opened another).
        self.closed = 0
        self.turns: list[list[int]] = []  # input positions each compressed turn keeps
        self.turn_tokens: list[int] = []
        self.open: list[int] = []  # groups of the turn still open
        # cut[i]: tokens before position i with every tool result of a loop cut head+tail
        # (where the cut takes fewer tokens, as the policy cuts them); saved[i]: the positive
        # savings of those cuts; loops[i]: loop heads before i.
        self.cut = [0]
        self.saved = [0]
        self.loops = [0]

    @classmethod
    def key(cls, context: CompactionContext, shape: HeadTail) -> str:
        # The labels name handles as the store or the memory cache shows them.
        where = handle_text("", context)
        return f"turn_sums:{getattr(context.counter, 'name', '')}:{shape!r}:{where}"

    def history(self, messages: Sequence[Message], scan: GroupScan, at: int,
                compress: object) -> list[list[int]]:
        """The compressed turns before group ``at`` (where the current prompt stands)."""
        if at < self.closed:  # never in a lineage (the prompt only moves on): start over
            self.closed, self.turns, self.turn_tokens, self.open = 0, [], [], []
        for k in range(self.closed, at):
            if self.open and prompt_kind(messages[scan.starts[k]]) is not None:
                self._close(messages, scan, compress)
            self.open.append(k)
        if self.open and at > self.closed:
            self._close(messages, scan, compress)  # group ``at`` opens the current turn
        self.closed = max(self.closed, at)
        return self.turns

    def _close(self, messages: Sequence[Message], scan: GroupScan, compress: object) -> None:
        groups = [scan.group(messages, k) for k in self.open]
        kept: list[int] = compress(groups)  # type: ignore[operator]
        self.open = []
        if kept:  # a turn that keeps nothing is not a turn of the history
            self.turns.append(kept)
            self.turn_tokens.append(sum(scan.tokens(i, i + 1) for i in kept))

    def extend_cuts(self, messages: Sequence[Message], scan: GroupScan, end: int,
                    context: CompactionContext, shape: HeadTail) -> None:
        """Extend the cut sums to position ``end``."""
        count = context.counter.count_message
        cut, saved, loops = self.cut, self.saved, self.loops
        for i in range(len(cut) - 1, end):
            m = messages[i]
            n = scan.tokens(i, i + 1)
            c = n
            if m.role == "tool" and _in_loop(messages, scan, i):
                c = count(shrink_if_fewer_tokens(
                    m, shape, count, handle=handle_text(handle_for(m), context)))
            cut.append(cut[-1] + c)
            saved.append(saved[-1] + max(0, n - c))
            loops.append(loops[-1] + bool(m.tool_calls and i >= scan.n_sys))


def _in_loop(messages: Sequence[Message], scan: GroupScan, i: int) -> bool:
    """True when position ``i`` belongs to a group that is a tool loop."""
    k = bisect_left(scan.starts, i + 1) - 1
    return k >= 0 and bool(messages[scan.starts[k]].tool_calls)


@dataclass
class SumsFit:
    """What the degradation steps decided."""

    steps: list[str]
    """The steps taken, as the policy's ``_fit`` names them."""
    history_from: int = 0
    """The first past turn kept."""
    middle_from: int = 0
    """The first group of the current turn's middle kept."""
    loop_cut: set[int] = field(default_factory=set)
    """Positions of the latest loop's results that were cut."""
    fits: bool = True
    """False: only the prompt and the latest loop remain, fitted by ``fit_loop``."""
    older_cut: bool = False
    """Every tool result of the middle's loops was cut."""


def fit_by_sums(
    messages: Sequence[Message], context: CompactionContext, scan: GroupScan,
    sums: TurnSums, shape: HeadTail, *, head: int, history: int,
    middle: tuple[int, int], loop: Group | None,
) -> SumsFit | None:
    """The steps ``TurnAwarePolicy._fit`` takes, decided from the sums (see the module
    docstring), or ``None`` when they depend on more than the sums tell.

    Args:
        head: the measure of the system block and the prompt (with the fixed parts).
        history: how many past turns (``sums.turns[:history]``) the plan holds.
        middle: the groups between the prompt and the latest loop, ``(first, end)``.
        loop: the latest loop, when there is one; the trailing groups follow it.
    """
    limit = context.budget.input_budget
    g0, g1 = middle
    mid_start = scan.starts[g0] if g0 < g1 else (loop.start if loop else scan.length)
    mid_end = scan.starts[g1] if g1 < len(scan.starts) else scan.length
    sums.extend_cuts(messages, scan, mid_end, context, shape)
    past = sum(sums.turn_tokens[:history])
    rest_start = loop.start if loop is not None else mid_end
    total = (head + past + scan.tokens(mid_start, mid_end)
             + scan.tokens(rest_start, scan.length))
    if total <= limit:
        return None  # it all fits: as much as the budget holds, fitted by hand
    steps: list[str] = []
    fit = SumsFit(steps, history_from=history, middle_from=g0)
    if sums.loops[mid_end] > sums.loops[mid_start]:  # the middle holds older loops
        saving = sums.saved[mid_end] - sums.saved[mid_start]
        if total - limit <= saving:
            return None  # some cuts may be enough: which ones depends on their order
        steps.append("cut older loops of the current turn")
        fit.older_cut = True
        total -= scan.tokens(mid_start, mid_end) - (sums.cut[mid_end] - sums.cut[mid_start])
    if total > limit and history:
        steps.append("dropped historical turns, oldest first")
        room = limit - (total - past)
        keep = history
        for k in range(history - 1, -1, -1):
            room -= sums.turn_tokens[k]
            if room < 0:
                break
            keep = k
        fit.history_from = keep
        total -= sum(sums.turn_tokens[:keep])
    if total > limit and loop is not None:
        steps.append("cut the latest loop")
        over = total - limit
        tools = [i for i in range(loop.start, loop.end) if messages[i].role == "tool"]
        for i in sorted(tools, key=lambda i: _size(messages[i]), reverse=True):
            if over <= 0:
                break
            new = shrink_if_fewer_tokens(messages[i], shape, context.counter.count_message,
                                         handle=handle_text(handle_for(messages[i]), context))
            over -= scan.tokens(i, i + 1) - context.counter.count_message(new)
            if new is not messages[i]:
                fit.loop_cut.add(i)
        total = over + limit
    if total > limit and g0 < g1:
        steps.append("dropped the current turn's earlier groups, oldest first")
        over = total - limit

        def dropped(d: int) -> int:  # the tokens of the first d groups of the middle
            return sums.cut[scan.starts[g0 + d] if g0 + d < g1 else mid_end] - sums.cut[mid_start]

        d = bisect_left(range(1, g1 - g0 + 1), over, key=dropped) + 1
        d = min(d, g1 - g0)
        fit.middle_from = g0 + d
        total -= dropped(d)
    fit.fits = total <= limit
    return fit


def _size(message: Message) -> int:
    """The order ``shrink_largest_first`` cuts in."""
    return len(message.text) + 2_000 * len(message.images)
