"""Summary compaction of NEXUS3's context manager.

When the context approaches capacity (the budget's trigger, or a forced run), the policy
walks back from the newest message keeping whole groups until ``recent_preserve_ratio`` of
the message budget is used (or, when the budget's target leaves more beside a summary of
that size, until what the target leaves), asks for ONE summary of everything older, of at
most ``recent_preserve_ratio`` of the message budget, and returns::

    [system prompt]            optionally reloaded (the design reloads its prompt files)
    [CONTEXT SUMMARY] ...      a user message with the design's prefix and when it was made
    [pinned older groups]      kept verbatim, never folded into a summary; so is the latest
                               user request when it is older than the preserved tail
    [preserved recent groups]

The summary is a user message; the preserved part may start with any role after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Annotated

from .._config import Gt, Lt, NonBlank, check, config_error
from .._contract.policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
    Target,
)
from .._head_tail import HeadTail, truncate_head_tail
from .._lossless.ledger import Ledger, run_with_ledger
from .._lossless.references import handle_for, replaced_line
from .._messages.model import Message
from .._messages.prompt_kinds import find_prompt, open_request
from .._messages.structure import Group, leading_system_count, split_groups
from ..errors import BudgetExceededError
from .fitting import fits_budget, originals, same, shrink_largest_first, squeeze, targets
from .temporal import local_time

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_NOTICE",
    "SUMMARY_PREFIX",
    "SummaryPolicy",
    "summary_message",
]

SUMMARY_PREFIX = (
    "[CONTEXT SUMMARY]\n"
    "The following is a summary of our previous conversation. It was automatically\n"
    "generated when the context window needed compaction. Treat this as established\n"
    "context - you don't need to re-confirm decisions already made.\n"
    "\n"
    "---\n"
)
"""The context-manager design's marker and explanation, placed before every summary."""

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation below so that it can replace these messages in the "
    "context. Keep: what the user asked for and why; decisions and confirmations; key "
    "facts and exact values (names, ids, numbers, dates, paths, URLs, errors); what was "
    "done with which result; and what remains to be done. Write plain, concise text."
)
"""What the summarizer is asked for."""

SUMMARY_NOTICE = (
    "[CONTEXT NOTICE]\n"
    "Older messages ({dropped} of them) were removed to fit the context window and a "
    "summary of them could not be generated. Continue from the messages below; if you "
    "need something that is no longer shown, search the history or ask."
)

"""The message that replaces a failed summary, so no history is lost silently."""


def summary_message(text: str, now: datetime | None, tz: tzinfo | None = None,
                    replaced: tuple[int, str] | None = None) -> Message:
    """The ``[CONTEXT SUMMARY]`` user message for ``text``, stamped with when it was made
    and, with ``replaced`` (how many messages it summarizes, their handle), naming the
    handle their full text is read back with."""
    moment, label = local_time(now, tz)
    stamp = f"[Summary generated: {moment:%Y-%m-%d %H:%M} ({label})]\n"
    if replaced is not None:
        stamp += replaced_line(*replaced) + "\n"
    stamp += "\n"
    return Message(
        role="user",
        content=SUMMARY_PREFIX + stamp + text.strip(),
        source="summary",
        created_at=now,
        metadata={"compaction": "summary"},
    )


class SummaryPolicy:
    """LLM summary compaction with a preserved recent tail.

    Runs when the input passes ``budget.trigger_tokens`` (or when forced) and returns the
    input itself otherwise. One [`SummaryRequest`][contextfold.policy.SummaryRequest] (purpose
    ``"summary"``) covers every message older than the preserved tail, except pinned groups and the
    latest user request, which stay verbatim after the summary.

    When the summary fails (``reply.text is None``) nothing is folded: the newest groups
    that fit the budget's target are kept verbatim (at least the last group, and the latest
    user request), the older ones are dropped, and a ``[CONTEXT NOTICE]`` says so, in the
    messages and in the report's notes.

    When the result is still over budget: the preserved tool results are cut head+tail,
    then the summary text is cut head+tail to fit; ``BudgetExceededError`` when the system
    prompt, a label-only summary and the preserved groups cut to labels still do not fit.

    Args:
        recent_preserve_ratio: share of the message budget (the input budget less the
            system prompt and tool definitions) kept verbatim at the end, in (0, 1), and
            the most the summary is asked for. With a target above twice this share, the
            tail kept verbatim is what the target leaves beside the summary, so the output
            lands near the target.
        reload_system_prompt: called on each compaction for a fresh system prompt
            (the context-manager design reloads the prompt files then); it replaces the first
            system message. If it raises, the old prompt is kept and the report says why.
        instructions: what the summarizer is asked for.
        tz: the zone of the summary's timestamp (default: the machine's local zone).
        shape: head+tail proportions for cutting tool results and the summary.
    """

    name = "summary"
    always_run = False

    def __init__(
        self,
        recent_preserve_ratio: float = 0.25,
        *,
        reload_system_prompt: Callable[[], str] | None = None,
        instructions: str = SUMMARY_INSTRUCTIONS,
        tz: tzinfo | None = None,
        shape: HeadTail | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        check("SummaryPolicy", "recent_preserve_ratio", recent_preserve_ratio,
              Annotated[float, Gt(0), Lt(1)])
        if reload_system_prompt is not None and not callable(reload_system_prompt):
            raise config_error("SummaryPolicy", "reload_system_prompt", "callable or None",
                               reload_system_prompt)
        check("SummaryPolicy", "instructions", instructions, Annotated[str, NonBlank])
        check("SummaryPolicy", "ledger", ledger, Ledger | None)
        self.ledger = ledger
        self.recent_preserve_ratio = recent_preserve_ratio
        self.reload_system_prompt = reload_system_prompt
        self.instructions = instructions
        self.tz = tz
        self.shape = shape or HeadTail()

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Summarize the older part when the trigger is reached (one request at most),
        recording what was summarized in the compaction ledger when ``ledger`` is set."""
        if self.ledger is None:
            return (yield from self._run(messages, context))
        return (yield from run_with_ledger(self._run, messages, context, self.ledger,
                                          reserve=False))  # its target leaves the room

    def _run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        if not context.force and context.input_tokens(messages) <= context.budget.trigger_tokens:
            return PolicyOutcome(messages=messages, method="none")
        n_sys = leading_system_count(messages)
        system, notes = self._system(messages[:n_sys])
        groups = split_groups(messages, n_sys)
        count = context.counter.count_message
        room = context.available - context.counter.count_messages(system)
        summary_room = int(room * self.recent_preserve_ratio)
        # The tail kept verbatim: its share of the room, or what the target leaves after the
        # summary's room when that is more (a target above half the budget).
        target_room = context.budget.target_tokens - context.measure(system)
        keep_from = _preserve_from(
            groups, max(summary_room, target_room - summary_room - _SUMMARY_FRAME), count)
        older, recent = groups[:keep_from], groups[keep_from:]
        latest = find_prompt(messages, n_sys)

        def verbatim(g: Group) -> bool:  # pinned, or the latest user request
            return any(m.is_pinned for m in g.messages) or (
                latest is not None and g.start <= latest < g.end)

        folded = [g for g in older if not verbatim(g)]
        if not folded:
            return self._fit_only(messages, system, groups, context, notes)
        # The request stays where it was relative to what is folded: before the summary when
        # folded work came after it (a long turn), after it otherwise (a chat's last request).
        first = [g for g in older if verbatim(g) and g.start < folded[-1].start
                 and not any(m.is_pinned for m in g.messages)]
        pinned = [g for g in older if verbatim(g) and g not in first]
        kept = [m for g in (*first, *pinned, *recent) for m in g.messages]
        spare = room - sum(count(m) for m in kept) - _SUMMARY_FRAME
        summarized = tuple(m for g in folded for m in g.messages)
        reply: SummaryReply = yield SummaryRequest(
            messages=summarized,
            instructions=self.instructions,
            max_tokens=max(64, min(spare, summary_room)),
            purpose="summary",
            open_request=open_request(messages),
            latest_request=(messages[latest].text
                            if latest is not None and latest >= folded[-1].end else None),
        )
        if reply.text is None:
            return self._failed(messages, system, groups, context, notes, reply)
        replaced = (len(summarized), handle_for(summarized))
        summary = summary_message(reply.text, context.now, self.tz, replaced)
        head = [m for g in first for m in g.messages]
        out = [*system, *head, summary, *(m for g in (*pinned, *recent) for m in g.messages)]
        at = len(system) + len(head)  # where the summary is
        origins: list[int | None] = [None] * len(system)
        origins += [i for g in first for i in range(g.start, g.end)]
        origins.append(None)
        origins += [i for g in (*pinned, *recent) for i in range(g.start, g.end)]
        fitted = self._fit(out, origins, at, reply.text, context, replaced)
        changed = targets(originals(messages, out, origins), fitted, origins, context)
        folded_targets = [
            Target(i, messages[i].role, "summarized", count(messages[i]), 0,
                   messages[i].name if messages[i].role == "tool" else None,
                   handle=replaced[1])
            for g in folded for i in range(g.start, g.end)
        ]
        return PolicyOutcome(
            messages=fitted, method=self.name, targets=(*folded_targets, *changed),
            notes=tuple(notes),
            details={"summarized_messages": len(folded_targets), "preserved_messages": len(kept),
                     "summary_origin": reply.origin},
        )

    # -- pieces ---------------------------------------------------------------------

    def _system(self, block: Sequence[Message]) -> tuple[list[Message], list[str]]:
        """The system block, with the first system message reloaded when configured."""
        if self.reload_system_prompt is None:
            return list(block), []
        try:
            fresh = self.reload_system_prompt()
        except Exception as exc:
            return list(block), [f"system prompt reload failed ({type(exc).__name__}: {exc})"]
        if not block:
            return [Message(role="system", content=fresh)], ["system prompt reloaded"]
        first = block[0] if block[0].content == fresh else replace(block[0], content=fresh)
        return [first, *block[1:]], ["system prompt reloaded"]

    def _fit(
        self,
        out: list[Message],
        origins: list[int | None],
        at: int,
        text: str,
        context: CompactionContext,
        replaced: tuple[int, str],
    ) -> list[Message]:
        """Fit summary + kept groups: cut kept tool results, then the summary text."""
        fits = fits_budget(context)
        tools = [k for k, m in enumerate(out) if k > at and m.role == "tool"]
        saved = [out[k] for k in tools]
        if fits(out) or shrink_largest_first(out, tools, fits, self.shape, context):
            return out
        lo, hi = 0, len(text)

        def with_summary(cap: int) -> list[Message]:
            cut = truncate_head_tail(text, HeadTail(0.6, 10**9, 0.3, 10**9), max_chars=cap)
            candidate = list(out)
            candidate[at] = summary_message(cut, context.now, self.tz, replaced)
            return candidate

        if not fits(with_summary(0)):
            shrunk = with_summary(0)
            _squeeze_or_raise(shrunk, tools, saved, context, self.shape,
                              "the system prompt, the summary label and the preserved messages")
            return shrunk
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(with_summary(mid)):
                lo = mid
            else:
                hi = mid - 1
        return with_summary(lo)

    def _fit_only(
        self,
        messages: Sequence[Message],
        system: list[Message],
        groups: Sequence[Group],
        context: CompactionContext,
        notes: list[str],
    ) -> PolicyOutcome:
        """Nothing older than the preserved tail can be folded: keep everything, cut tool
        results head+tail if it does not fit."""
        out = [*system, *(m for g in groups for m in g.messages)]
        origins: list[int | None] = [None] * len(system)
        origins += [i for g in groups for i in range(g.start, g.end)]
        fits = fits_budget(context)
        tools = [k for k, m in enumerate(out) if k >= len(system) and m.role == "tool"]
        saved = [out[k] for k in tools]
        if not shrink_largest_first(out, tools, fits, self.shape, context):
            _squeeze_or_raise(out, tools, saved, context, self.shape,
                              "the system prompt and the newest group")
        if same(out, messages):
            return PolicyOutcome(messages=messages, method="none",
                                 notes=("nothing older than the preserved tail to summarize",))
        changed = targets(originals(messages, out, origins), out, origins, context)
        return PolicyOutcome(
            messages=out, method=self.name, targets=tuple(changed),
            notes=(*notes, "nothing older than the preserved tail to summarize"),
        )

    def _failed(
        self,
        messages: Sequence[Message],
        system: list[Message],
        groups: Sequence[Group],
        context: CompactionContext,
        notes: list[str],
        reply: SummaryReply,
    ) -> PolicyOutcome:
        """No summary: keep the newest groups that fit the target, verbatim, with the pinned
        ones and the latest request, and a notice."""
        count = context.counter.count_message
        placeholder = _notice(len(messages), context.now, "ctx_" + "0" * 12)  # its size
        base = context.measure([*system, placeholder])
        latest = find_prompt(messages, len(system))
        pinned = [g for g in groups if any(m.is_pinned for m in g.messages)
                  or (latest is not None and g.start <= latest < g.end)]  # and the request
        base += sum(count(m) for g in pinned for m in g.messages)
        keep_from = _preserve_from(groups, context.budget.target_tokens - base, count)
        kept = [g for k, g in enumerate(groups) if k >= keep_from or g in pinned]
        dropped = [g for g in groups if g not in kept]
        n_dropped = sum(len(g) for g in dropped)
        span = handle_for(m for g in dropped for m in g.messages) if dropped else None
        out = [*system, _notice(n_dropped, context.now, span),
               *(m for g in kept for m in g.messages)]
        origins: list[int | None] = [None] * (len(system) + 1)
        origins += [i for g in kept for i in range(g.start, g.end)]
        fits = fits_budget(context)
        tools = [k for k, m in enumerate(out) if k > len(system) and m.role == "tool"]
        saved = [out[k] for k in tools]
        if not shrink_largest_first(out, tools, fits, self.shape, context):
            _squeeze_or_raise(out, tools, saved, context, self.shape,
                              "the system prompt, the notice and the newest group")
        changed = targets(originals(messages, out, origins), out, origins, context)
        gone = [Target(i, messages[i].role, "dropped", count(messages[i]), 0,
                       messages[i].name if messages[i].role == "tool" else None,
                       handle=span)
                for g in dropped for i in range(g.start, g.end)]
        return PolicyOutcome(
            messages=out, method=self.name, targets=(*gone, *changed),
            notes=(*notes, f"summary failed ({reply.error or 'no text'}): dropped the "
                   f"{n_dropped} oldest messages and kept {len(out) - len(system) - 1} "
                   "verbatim with a notice"),
            details={"summarized_messages": 0, "dropped_messages": n_dropped,
                     "summary_origin": reply.origin},
        )


_SUMMARY_FRAME = 80  # tokens of the summary message around its text (prefix, stamp)


def _notice(dropped: int, now: datetime | None, handle: str | None) -> Message:
    text = SUMMARY_NOTICE.format(dropped=dropped)
    if dropped and handle is not None:
        text += "\n" + replaced_line(dropped, handle)
    return Message(role="user", content=text, source="summary", created_at=now,
                   metadata={"compaction": "notice"})


def _preserve_from(groups: Sequence[Group], limit: int, count: Callable[[Message], int]) -> int:
    """Index of the first group of the newest run of groups within ``limit`` tokens; the
    last group is always preserved, and a group is never split."""
    used, k = 0, len(groups)
    while k > 0:
        size = sum(count(m) for m in groups[k - 1].messages)
        if k < len(groups) and used + size > limit:
            break
        used += size
        k -= 1
    return k


def _squeeze_or_raise(
    out: list[Message],
    positions: list[int],
    originals: list[Message],
    context: CompactionContext,
    shape: HeadTail,
    what: str,
) -> None:
    """Cut the tool results at ``positions`` to the largest size that fits, or raise."""
    fits = fits_budget(context)
    if fits(out) or squeeze(out, positions, originals, fits, shape, context, handles=True):
        return
    raise BudgetExceededError(what, needed=context.measure(out),
                              available=context.budget.input_budget)
