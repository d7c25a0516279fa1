"""Turn-aware composition: past turns compressed, the current turn complete.

::

    [system prompt]
    [historical turn 1: prompt, latest tool loop, final answer]
    ...
    [current turn: prompt and everything after it, uncompressed]

The current turn starts at the most recent real prompt (direct message or broadcast; see
``prompt_source``). Keeping it whole preserves multi-step reasoning: a session id returned
by a login call three loops ago stays visible for the rest of the turn.

Each historical turn keeps its prompt, its latest tool loop and its final assistant answer
(the last message of the turn when it is an assistant text). The seed keeps only the loop;
the prompt keeps the sequence valid (a loop must follow a user message) and says what the
loop was for, and the answer is what the user was told, which later turns build on.

Nothing leaves view unmarked: each run of messages the composition leaves out (a past
turn's earlier loops, past turns dropped for room, the current turn's earlier groups) gets
a one-line notice where it was, with the handles that read it back
(`notices`), and every head+tail label names the handle of
its original. The notices count in the budget (their room is reserved before the fit);
``notices=False`` leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._config import check
from .._contract.policy import CompactionContext, PolicyOutcome
from .._head_tail import HeadTail
from .._lossless.ledger import Ledger
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from .._messages.prompt_kinds import prompt_kind
from .._messages.structure import Group, leading_system_count, split_groups
from ..errors import BudgetExceededError
from .fitting import (
    BudgetFit,
    fits_budget,
    originals,
    same,
    shrink_if_fewer_tokens,
    shrink_largest_first,
    targets,
)
from .loop_slice import fit_loop
from .notices import Marks, fitted_marks, mark_removals
from .prompt_source import NudgeConfig, PromptChoice, choose_prompt, prompt_notes, restored_on_error
from .scans import GroupScan
from .simple import SimplePolicy
from .temporal import TemporalContext
from .turn_sums import SumsFit, TurnSums, fit_by_sums

__all__ = ["TurnAwarePolicy", "compress_turn"]

_BEFORE_THE_TURN = ("cut older loops of the current turn", "dropped historical turns, oldest first")
"""The degradation steps that keep every message of the current turn: the room the
notices need may be taken by these, never by the steps after them."""


def compress_turn(groups: Sequence[Group]) -> list[int]:
    """Input indices a historical turn keeps: its prompt, latest loop and final answer.

    A turn that does not open with a user message (only possible before the first prompt)
    keeps nothing: placed in the middle of the output it would break the format.
    """
    if not groups or groups[0].head.role != "user":
        return []
    keep: list[Group] = [groups[0]]
    loops = [g for g in groups[1:] if g.is_tool_loop]
    if loops:
        keep.append(loops[-1])
    last = groups[-1]
    if len(groups) > 1 and last.head.role == "assistant" and not last.is_tool_loop:
        keep.append(last)
    return [i for g in keep for i in range(g.start, g.end)]


@dataclass
class _Plan:
    """The composition being fitted; message positions refer to the policy's input."""

    system: list[Message]
    history: list[list[int]]
    prompt: Message
    prompt_index: int | None
    middle: list[Group]
    loop: Group | None
    trailing: list[Group]
    replaced: dict[int, Message] = field(default_factory=dict)
    all_history: int = -1  # past turns before any was dropped (-1: len(history))

    def __post_init__(self) -> None:
        if self.all_history < 0:
            self.all_history = len(self.history)

    def current_indices(self) -> list[int]:
        groups = [*self.middle, *([self.loop] if self.loop else []), *self.trailing]
        return [i for g in groups for i in range(g.start, g.end)]

    def build(self, messages: Sequence[Message]) -> tuple[list[Message], list[int | None]]:
        origins: list[int | None] = [None] * len(self.system)
        origins += [i for turn in self.history for i in turn]
        origins.append(self.prompt_index)
        origins += self.current_indices()
        out = list(self.system)
        for o in origins[len(self.system):]:
            if o is None or o == self.prompt_index:
                out.append(self.prompt)
            else:
                out.append(self.replaced.get(o, messages[o]))
        return out, origins

    def shrink(self, messages: Sequence[Message], indices: set[int], fits: BudgetFit,
               shape: HeadTail, context: CompactionContext) -> bool:
        """Cut tool results at input ``indices`` head+tail, largest first, until it fits;
        each label names its original's handle."""
        out, origins = self.build(messages)
        positions = [k for k, o in enumerate(origins)
                     if o is not None and o in indices and out[k].role == "tool"]
        done = shrink_largest_first(out, positions, fits, shape, context)
        for k in positions:
            o = origins[k]
            if o is not None and out[k] is not messages[o]:
                self.replaced[o] = out[k]
        return done


class TurnAwarePolicy(SimplePolicy):
    """System prompt + historical turns compressed to their latest loop + the current turn
    complete.

    Over budget, it degrades in this order, stopping as soon as the output fits:

    1. the tool results of the current turn's *older* loops are cut head+tail, largest
       first (every message of the turn stays);
    2. historical turns are dropped, oldest first;
    3. the tool results of the current turn's latest loop are cut head+tail;
    4. the current turn's messages between its prompt and its latest loop are dropped,
       oldest group first;
    5. the messages after the latest loop are dropped, and the latest loop is cut to the
       largest common head+tail size that fits, or left out whole if even that fails.

    So the whole current turn is kept whenever it fits with its older loops cut, and a
    loop is never split. ``BudgetExceededError`` only when the system prompt and the
    current prompt alone do not fit.

    Like [`LoopSlicePolicy`][contextfold.LoopSlicePolicy], this policy **updates**
    ``context.state``: a real prompt resets the encouragement counter; a history with no real prompt
    (and no broadcast in the store) gets the message-format guarantee's synthetic nudge as its
    prompt, which counts toward idle.

    Args:
        nudges: the nudge texts and the idle limit.
        swarm_id: the swarm whose commander broadcast a new agent inherits (store lookup).
        include_search_guidance: append ``nudges.search_guidance`` to each nudge.
        shape: head+tail proportions for cutting tool results.
        temporal: inject the current date and time into the system prompt on every build.
        ledger: the compaction ledger's settings; ``None`` (the default) keeps no ledger.
        notices: leave a one-line notice with its handles where each run of left-out
            messages was (the default); ``False`` leaves them out.
    """

    name = "turn_aware"
    always_run = True
    """Rebuilt from the full history on every call (the ``Compactor`` never appends to a
    previous output), so the prompt choice and the counter see every call."""

    def __init__(
        self,
        *,
        nudges: NudgeConfig | None = None,
        swarm_id: str | None = None,
        include_search_guidance: bool = False,
        shape: HeadTail | None = None,
        temporal: TemporalContext | None = None,
        ledger: Ledger | None = None,
        notices: bool = True,
    ) -> None:
        check("TurnAwarePolicy", "nudges", nudges, NudgeConfig | None)
        check("TurnAwarePolicy", "notices", notices, bool)
        self.notices = notices
        check("TurnAwarePolicy", "ledger", ledger, Ledger | None)
        self.ledger = ledger
        self.nudges = nudges or NudgeConfig()
        self.swarm_id = swarm_id
        self.include_search_guidance = include_search_guidance
        self.shape = shape or HeadTail()
        self.temporal = temporal

    def _compose(
        self, messages: Sequence[Message], context: CompactionContext, choice: PromptChoice,
    ) -> tuple[_Plan, PromptChoice, SumsFit | None]:
        """The uncut composition around ``choice`` and, for a long turn in a
        conversation's lineage, the fit decided by its sums."""
        n_sys = leading_system_count(messages)
        system = list(messages[:n_sys])
        if self.temporal is not None:
            system = list(self.temporal.inject(system, context.now))
        scan = GroupScan.of(messages, context)
        if scan is not None and scan.n_sys == n_sys:
            return self._scanned(messages, context, scan, choice, system)
        groups = split_groups(messages, n_sys)
        if choice.index is None:  # no real prompt anywhere: the whole body is the turn
            history: list[list[int]] = []
            current = groups
        else:
            at = next(k for k, g in enumerate(groups) if g.start == choice.index)
            history = _history(groups[:at])
            current = groups[at + 1:]
        loop_at = max((k for k, g in enumerate(current) if g.is_tool_loop), default=None)
        if loop_at is None:
            middle, loop, trailing = list(current), None, []
        else:
            middle, loop, trailing = current[:loop_at], current[loop_at], current[loop_at + 1:]
        plan = _Plan(system, history, choice.message, choice.index, middle, loop, trailing)
        return plan, choice, None

    def _scanned(
        self, messages: Sequence[Message], context: CompactionContext, scan: GroupScan,
        choice: PromptChoice, system: list[Message],
    ) -> tuple[_Plan, PromptChoice, SumsFit | None]:
        """`_compose` from the groups and past turns kept in the lineage: the groups
        are made only for what stays in view, when the sums decide the fit."""
        lineage = context.lineage
        assert lineage is not None
        sums = lineage.slot(messages, TurnSums.key(context, self.shape), TurnSums)
        assert sums is not None
        if choice.index is None:
            history: list[list[int]] = []
            first = 0
        else:
            at = scan.index_of(choice.index)
            history = sums.history(messages, scan, at, compress_turn)
            first = at + 1
        count = len(scan.starts)
        loop_at = scan.last_loop(first)
        end = loop_at if loop_at is not None else count
        loop = scan.group(messages, loop_at) if loop_at is not None else None
        fit = None
        if getattr(context.counter, "additive", False) is True:
            head = context.measure([*system, choice.message])
            fit = fit_by_sums(messages, context, scan, sums, self.shape, head=head,
                              history=len(history), middle=(first, end), loop=loop)
        kept_from, turns = (fit.middle_from, history[fit.history_from:]) if fit else (
            first, list(history))
        middle = [scan.group(messages, k) for k in range(kept_from, end)]
        trailing = [scan.group(messages, k) for k in range(end + 1, count)] if loop else []
        plan = _Plan(system, turns, choice.message, choice.index, middle, loop, trailing)
        plan.all_history = len(history)
        if fit is not None:  # the cuts the steps made, where they stay in view
            cut = [i for g in middle if g.is_tool_loop for i in range(g.start, g.end)
                   if messages[i].role == "tool"] if fit.older_cut else []
            for i in [*cut, *fit.loop_cut]:
                new = shrink_if_fewer_tokens(messages[i], self.shape, context.counter.count_message,
                                             handle=handle_text(handle_for(messages[i]), context))
                if new is not messages[i]:
                    plan.replaced[i] = new
        return plan, choice, fit

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Compose and fit (updates ``context.state``; left as it was when this raises)."""
        with restored_on_error(context.state):
            return self._apply(messages, context)

    def _apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        choice = choose_prompt(
            messages, leading_system_count(messages), context, nudges=self.nudges,
            swarm_id=self.swarm_id, search_guidance=self.include_search_guidance,
        )
        plan, fitted, fitted_origins, steps, marks = self._marked(messages, context, choice)
        details: dict[str, Any] = {"prompt_kind": choice.kind, "prompt_origin": choice.origin,
                   "encouragement_count": context.state.encouragement_count,
                   "idle": context.state.idle, "history_turns": plan.all_history}
        before = originals(messages, fitted, fitted_origins)
        changed = targets(before, fitted, fitted_origins, context)
        details["history_turns_kept"] = len(plan.history)
        details["degradation"] = steps
        if same(fitted, messages):
            return PolicyOutcome(messages=messages, method="none", details=details)
        notes = [*prompt_notes(choice, context.state, self.nudges),
                 *(f"over budget: {s}" for s in steps)]
        if marks is not None:
            fitted = marks.messages
            changed = sorted([*changed, *marks.targets], key=lambda t: t.index)
            details["notices"] = sum(o is None for o in marks.origins) - (
                sum(o is None for o in fitted_origins))
        elif self.notices:
            notes.append("no room for the removal notices")
        return PolicyOutcome(messages=fitted, method=self.name, targets=tuple(changed),
                             notes=tuple(notes), details=details)

    def _marked(
        self, messages: Sequence[Message], context: CompactionContext, choice: PromptChoice,
    ) -> tuple[_Plan, list[Message], list[int | None], list[str], Marks | None]:
        """The fitted composition and its removal notices. The notices' room is reserved
        by fitting again with it taken from the budget when the first fit leaves too little
        (the notices of a tighter fit are rarely more: dropping more joins runs); ``None``
        for the notices when they are off or not even bare ones find room."""
        reserve = 0
        fits = fits_budget(context)
        first: tuple[_Plan, list[Message], list[int | None], list[str]] | None = None
        for _ in range(3):
            roomy = replace(context, fixed_tokens=context.fixed_tokens + reserve)
            try:
                plan, fitted, origins, steps = self._fitted(messages, roomy, choice)
            except BudgetExceededError:
                if first is None:
                    raise
                break
            if first is None:
                first = plan, fitted, origins, steps
                if not self.notices:
                    return (*first, None)
            elif not set(steps) <= {*first[3], *_BEFORE_THE_TURN}:
                break  # the notices would cost the current turn: it goes first
            marks = fitted_marks(messages, fitted, origins, context, fits)
            if marks is not None:
                return plan, fitted, origins, steps, marks
            # The next fit leaves the bare notices' excess free: the room already unused
            # under the budget does not count towards it (a reserve that grew only by the
            # excess stayed inside that room, and the fit never changed).
            wanted = mark_removals(messages, fitted, origins, context, detail=False)
            unused = context.budget.input_budget - context.measure(fitted)
            reserve = max(reserve + 1, unused + fits.over(wanted.messages))
        assert first is not None
        return (*first, None)

    def _fitted(
        self, messages: Sequence[Message], context: CompactionContext, choice: PromptChoice,
    ) -> tuple[_Plan, list[Message], list[int | None], list[str]]:
        """The composition fitted to ``context``'s budget, by hand or by the sums."""
        plan, choice, decided = self._compose(messages, context, choice)
        if decided is None:
            fitted, fitted_origins, steps = self._fit(plan, messages, context)
        elif decided.fits:
            steps = decided.steps
            fitted, fitted_origins = plan.build(messages)
        else:
            steps = decided.steps
            fitted, fitted_origins = self._last_resort(plan, messages, context, steps)
        return plan, fitted, fitted_origins, steps

    def _fit(
        self, plan: _Plan, messages: Sequence[Message], context: CompactionContext
    ) -> tuple[list[Message], list[int | None], list[str]]:
        """Apply the degradation steps of the class docstring until the output fits."""
        fits = fits_budget(context)
        steps: list[str] = []

        def done() -> bool:
            return fits(plan.build(messages)[0])

        older = {i for g in plan.middle if g.is_tool_loop for i in range(g.start, g.end)}
        if not done() and older:
            steps.append("cut older loops of the current turn")
            plan.shrink(messages, older, fits, self.shape, context)
        if not done() and plan.history:
            steps.append("dropped historical turns, oldest first")
            # One pass: the newest turns whose counts fit the room left without any history
            # (rebuilding and recounting after each dropped turn was quadratic). A counter
            # that is not additive gets the exact check below.
            turns, plan.history = plan.history, []
            room = context.budget.input_budget - context.measure(plan.build(messages)[0])
            count = context.counter.count_message
            keep = len(turns)
            for k in range(len(turns) - 1, -1, -1):
                room -= sum(count(plan.replaced.get(i, messages[i])) for i in turns[k])
                if room < 0:
                    break
                keep = k
            plan.history = turns[keep:]
            while plan.history and not done():
                plan.history.pop(0)
        latest = set(range(plan.loop.start, plan.loop.end)) if plan.loop else set()
        if not done() and latest:
            steps.append("cut the latest loop")
            plan.shrink(messages, latest, fits, self.shape, context)
        if not done() and plan.middle:
            steps.append("dropped the current turn's earlier groups, oldest first")
            # As for historical turns: the oldest groups whose counts cover the excess go
            # in one pass, then the exact check (dropping one at a time was quadratic).
            over = fits.over(plan.build(messages)[0])
            count = context.counter.count_message
            drop = 0
            while drop < len(plan.middle) and over > 0:
                over -= sum(count(plan.replaced.get(i, messages[i]))
                            for i in range(plan.middle[drop].start, plan.middle[drop].end))
                drop += 1
            del plan.middle[:drop]
            while plan.middle and not done():
                plan.middle.pop(0)
        if done():
            out, origins = plan.build(messages)
            return out, origins, steps
        fitted, origins = self._last_resort(plan, messages, context, steps)
        return fitted, origins, steps

    def _last_resort(
        self, plan: _Plan, messages: Sequence[Message], context: CompactionContext,
        steps: list[str],
    ) -> tuple[list[Message], list[int | None]]:
        """Step 5: the prompt and the latest loop, fitted by ``fit_loop`` (history and
        the turn's earlier groups are gone by now)."""
        steps.append("kept only the prompt and the latest loop")
        plan.trailing = []
        plan.history, plan.middle = [], []
        out, origins = plan.build(messages)
        head_len = len(plan.system) + 1
        if plan.loop is not None:  # fit_loop cuts from the original loop, not the cut one
            out[head_len:] = list(plan.loop.messages)
        fitted, notes = fit_loop(out, head_len, context, self.shape)
        steps.extend(notes)
        return fitted, origins[: len(fitted)]


def _history(groups: Sequence[Group]) -> list[list[int]]:
    """The compressed historical turns of ``groups`` (everything before the current turn)."""
    turns: list[list[Group]] = []
    for g in groups:
        if not turns or prompt_kind(g.head) is not None:
            turns.append([])
        turns[-1].append(g)
    kept = [compress_turn(t) for t in turns]
    return [t for t in kept if t]
