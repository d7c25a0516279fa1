"""Loop slices: the system prompt, one prompt source and the latest tool loop.

Every request carries only three components, so the context stays small and stable
however long the agent runs, while the full history stays in the store::

    [system prompt]            the leading system block of the full history
    [prompt source]            the current turn's start (see ``prompt_source``)
    [latest tool loop]         the assistant message with tool calls and all its results

Loop-slice compacts on every call (it is not threshold based); it returns the input object
itself when the slice is the whole input. Every run of messages it leaves out gets a
one-line notice where it was, with the handles that read it back
(`notices`), unless ``notices=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from .._config import Ge, check
from .._contract.policy import CompactionContext, PolicyOutcome, Target
from .._head_tail import HeadTail
from .._lossless.ledger import Ledger
from .._messages.model import Message
from .._messages.structure import Group, leading_system_count
from ..errors import BudgetExceededError
from .fitting import fits_budget, same, shrink_largest_first, squeeze, targets
from .notices import Marks, mark_removals
from .prompt_source import NudgeConfig, PromptChoice, choose_prompt, prompt_notes, restored_on_error
from .simple import SimplePolicy
from .temporal import TemporalContext

__all__ = ["LoopSlicePolicy", "fit_loop", "latest_loop"]


def latest_loop(messages: Sequence[Message], first: int, window_start: int) -> Group | None:
    """The latest tool loop of ``messages[first:]`` that reaches into the scan window
    (``messages[window_start:]``); a loop whose call sits just before the window counts."""
    for i in range(len(messages) - 1, first - 1, -1):
        m = messages[i]
        if m.tool_calls:
            j = i + 1
            while j < len(messages) and messages[j].role == "tool":
                j += 1
            return Group(i, j, tuple(messages[i:j])) if j > window_start else None
        if i < window_start and m.role != "tool":
            return None
    return None


def fit_loop(
    out: list[Message], head_len: int, context: CompactionContext, shape: HeadTail
) -> tuple[list[Message], list[str]]:
    """Fit ``out`` = head (system block and prompt) + one tool loop into the budget.

    Order: the loop's largest tool results are cut head+tail (the threshold design's shape); then
    every result is cut to the largest common size that fits; if even labels alone do not
    fit, the loop is dropped whole (never split). The call's reasoning stays: the loop is
    under way, and a provider with extended thinking requires its signed reasoning back.

    Raises:
        BudgetExceededError: the head alone does not fit.
    """
    fits = fits_budget(context)
    if fits(out):
        return out, []
    head = out[:head_len]
    if not fits(head):
        raise BudgetExceededError(
            "the system prompt and the prompt source",
            needed=context.measure(head),
            available=context.budget.input_budget,
        )
    positions = [k for k in range(head_len, len(out)) if out[k].role == "tool"]
    originals = [out[k] for k in positions]
    work = list(out)
    if shrink_largest_first(work, positions, fits, shape, context):
        return work, ["cut the latest loop's largest tool results head+tail"]
    if fits(work) or squeeze(work, positions, originals, fits, shape, context, handles=True):
        return work, ["cut every tool result of the latest loop head+tail to fit"]
    return head, ["the latest tool loop does not fit even cut to its labels; left it out"]


class LoopSlicePolicy(SimplePolicy):
    """System prompt + the current prompt source + the latest tool loop.

    The prompt source is chosen in the scan window (the last ``max_context_messages``
    messages after the system block), with the message-format guarantee's sliding-window protection
    and, when nothing is found, exactly one synthetic nudge (see ``prompt_source``).

    This policy **updates** ``context.state`` (the per-conversation state the ``Compactor``
    keeps): a real prompt resets ``encouragement_count`` and clears ``idle``; a nudge
    increments the count and, at ``nudges.max_encouragements``, sets ``idle`` and
    ``idle_reason``. It mutates nothing else.

    Composition rules:

    * The system block is every system message that opens the full history.
    * The latest loop is the newest assistant message with tool calls and all its results,
      when it reaches into the window. When the prompt source comes *after* that loop (the
      user spoke since), the output is the system block and the prompt only: the old loop
      answered an earlier request, and placing it after the new prompt would tell the model
      it had already acted on it. The store keeps it searchable.
    * Messages after the loop (a final assistant text) are not part of the slice.
    * Over budget, the loop's tool results are cut head+tail, never split
      (`fit_loop`); ``BudgetExceededError`` only when system and prompt alone
      do not fit.

    Args:
        max_context_messages: the scan window for the prompt source and the loop.
        nudges: the nudge texts and the idle limit.
        swarm_id: the swarm whose commander broadcast a new agent inherits (store lookup).
        include_search_guidance: append ``nudges.search_guidance`` to each nudge.
        selection: ``"recency"`` (the most recent real prompt in the window, the loop-slice design's
            turn boundary) or ``"priority"`` (the most recent prompt of the highest kind
            present: direct, then commander broadcast, then swarm broadcast).
        shape: head+tail proportions for cutting tool results.
        temporal: inject the current date and time into the system prompt on every build.
        ledger: the compaction ledger's settings; ``None`` (the default) keeps no ledger.
        notices: leave a one-line notice with its handles where each run of left-out
            messages was (the default; the notices count in the budget, bare or left out
            when they do not fit beside the prompt); ``False`` sends the slice alone.

    Raises:
        ConfigurationError: an out-of-range parameter.
    """

    name = "loop_slice"
    always_run = True
    """Rebuilt from the full history on every call (the ``Compactor`` never appends to a
    previous output), so the prompt choice and the counter see every call."""

    def __init__(
        self,
        max_context_messages: int = 20,
        *,
        nudges: NudgeConfig | None = None,
        swarm_id: str | None = None,
        include_search_guidance: bool = False,
        selection: Literal["recency", "priority"] = "recency",
        shape: HeadTail | None = None,
        temporal: TemporalContext | None = None,
        ledger: Ledger | None = None,
        notices: bool = True,
    ) -> None:
        check("LoopSlicePolicy", "max_context_messages", max_context_messages,
              Annotated[int, Ge(1)])
        check("LoopSlicePolicy", "notices", notices, bool)
        self.notices = notices
        check("LoopSlicePolicy", "ledger", ledger, Ledger | None)
        self.ledger = ledger
        check("LoopSlicePolicy", "selection", selection, Literal["recency", "priority"])
        self.max_context_messages = max_context_messages
        self.nudges = nudges or NudgeConfig()
        self.swarm_id = swarm_id
        self.include_search_guidance = include_search_guidance
        self.selection: Literal["recency", "priority"] = selection
        self.shape = shape or HeadTail()
        self.temporal = temporal

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Compose the slice for ``messages`` (updates ``context.state``; left as it was
        when this raises)."""
        with restored_on_error(context.state):
            return self._apply(messages, context)

    def _apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        n_sys = leading_system_count(messages)
        window_start = max(n_sys, len(messages) - self.max_context_messages)
        choice = choose_prompt(
            messages, window_start, context, nudges=self.nudges, swarm_id=self.swarm_id,
            selection=self.selection, search_guidance=self.include_search_guidance,
        )
        loop = latest_loop(messages, n_sys, window_start)
        if loop is not None and choice.index is not None and choice.index > loop.start:
            loop = None
        system = list(messages[:n_sys])
        if self.temporal is not None:
            system = list(self.temporal.inject(system, context.now))
        loop_messages = list(loop.messages) if loop else []
        out = [*system, choice.message, *loop_messages]
        details = _details(choice, loop, context)
        head_len = len(system) + 1
        origins = list(range(loop.start, loop.end)) if loop else []
        placed: list[int | None] = [*([None] * len(system)), choice.index, *origins]
        marks, fitted, notes = self._fitted(messages, out, placed, head_len, context)
        if same(fitted, messages):
            return PolicyOutcome(messages=messages, method="none", details=details)
        changed: list[Target] = targets(out[head_len:], fitted[head_len:], origins, context)
        details["loop_messages"] = len(fitted) - head_len
        if marks is not None:
            fitted = marks.messages
            changed = sorted([*changed, *marks.targets], key=lambda t: t.index)
            details["notices"] = sum(o is None for o in marks.origins[head_len:])
        return PolicyOutcome(
            messages=fitted,
            method=self.name,
            targets=tuple(changed),
            notes=(*prompt_notes(choice, context.state, self.nudges), *notes),
            details=details,
        )

    def _fitted(
        self, messages: Sequence[Message], out: list[Message], origins: list[int | None],
        head_len: int, context: CompactionContext,
    ) -> tuple[Marks | None, list[Message], list[str]]:
        """The slice fitted with room for its notices (`fit_loop`), and the notices
        for what it leaves out: detailed when they fit, else bare, else none (with a
        note); the room is reserved before the loop is cut, so the notices never push the
        output over the budget."""
        if not self.notices:
            return (None, *fit_loop(out, head_len, context, self.shape))
        fits = fits_budget(context)
        for detail in (True, False):
            planned = mark_removals(messages, out, origins, context, detail=detail)
            extra = context.measure(planned.messages) - context.measure(out)
            roomy = replace(context, fixed_tokens=context.fixed_tokens + max(0, extra))
            try:
                fitted, notes = fit_loop(out, head_len, roomy, self.shape)
            except BudgetExceededError:
                continue
            # What stays of the loop (all of it, cut or not, or none) decides the runs.
            kept = origins[: len(fitted)]
            marks = (planned.placed(fitted, kept) if len(fitted) == len(out)
                     else mark_removals(messages, fitted, kept, context, detail=detail))
            if fits(marks.messages):
                return marks, fitted, notes
        fitted, notes = fit_loop(out, head_len, context, self.shape)
        return None, fitted, [*notes, "no room for the removal notices beside the prompt"]


def _details(
    choice: PromptChoice, loop: Group | None, context: CompactionContext
) -> dict[str, Any]:
    return {
        "prompt_kind": choice.kind,
        "prompt_origin": choice.origin,
        "encouragement_count": context.state.encouragement_count,
        "idle": context.state.idle,
        "loop_messages": len(loop) if loop else 0,
    }
