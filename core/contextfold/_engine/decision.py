"""A compactor's decision for one call: what it works on, and the fast paths.

When the call's messages extend the previous call's input (the same message
objects, or equal ones, as a prefix), the previous *output* is reused as the prefix and
only the new messages are counted. Under ``budget.trigger_tokens`` the result is that
prefix plus the new messages, without running the policy (the prefix stays byte-stable,
so provider prompt caches keep hitting). Over it, or forced, the policy runs on prefix
plus new messages and compacts down to the target; the prefix is then left alone until
the trigger is crossed again (hysteresis). Any other input (an edited or rewound history)
starts over from scratch: under the trigger it goes out as it is (repaired in flight
when invalid) without running the policy, as an extension would, unless the policy
declares ``always_run``; the one-shot ``compact()`` always runs the policy.
The decision tokenizes only what it needs: messages nothing has counted yet are
bounded from their UTF-8 length (`count_within`)
and counted exactly, newest first, only while the bound is over the trigger. A call
that sends what it did not count leaves the exact figures of its report to be counted
when first read (see `contextfold._contract.report`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from .._config import Ge, check
from .._contract.policy import ConversationState, Policy
from .._contract.report import CompactionReport, CompactionResult, on_read
from .._counting.bounds import count_within
from .._counting.budget import Budget
from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.validation import repair, validate
from .._policies.learning import learned_in
from .._summaries.cache import SummaryCache
from .._summaries.service import OnSummaryFailure, RetryPolicy, SummaryService
from .._summaries.summarizer import AnySummarizer
from ..errors import NoProgressError
from .books import Books, shared_prefix
from .calibration import Calibration
from .controls import asked_compaction
from .events import CompactionApplied, CompactionEvent, Listener, emit
from .incremental import APPENDABLE, Plan, Prefix
from .rebuild import RebuildMemo

__all__ = ["CallDecision", "Tools"]

logger = logging.getLogger("contextfold")

Tools = Sequence[Mapping[str, Any]]
"""Tool definitions as sent to the provider (their tokens count against the budget)."""


class CallDecision:
    """The decision half of [`Compactor`][contextfold.Compactor]: the plan of a call and the
    paths that answer it without running the policy. The compactor sets every attribute."""

    policy: Policy
    budget: Budget
    counter: TokenCounter
    summarizer: AnySummarizer
    conversation_id: str | None
    tools: Tools | None
    retry: RetryPolicy
    cache: SummaryCache | None
    on_summary_failure: OnSummaryFailure
    _listeners: list[Listener]
    _books: Books
    _rebuild: RebuildMemo
    _state: ConversationState
    _stalled: tuple[int, int] | None
    _requested: str | None
    _asked_call: str | None  # the last compact_context call this conversation served
    _tools_seen: tuple[str | None, int]
    _last_tools: Tools | None  # the tool definitions of the last call (sent with it)
    _prefix: Prefix  # the previous input and output
    _known: int | None  # provider-reported input tokens of the previous output
    _since: int  # estimated tokens added since that report
    calibration: Calibration
    """Provider tokens per counted token, from the last usage report."""

    def _plan(
        self, messages: Sequence[Message], force: bool, tools: Tools | None, *,
        extra_tokens: int = 0, known_tokens: int | None = None, now: datetime | None = None,
        complete: bool = True, passes: bool = True,
    ) -> Plan | CompactionResult:
        """Decide what this call works on; the result itself when a fast path applies (an
        extension under the trigger; with ``passes``, a valid input under it)."""
        started = time.perf_counter()
        asked = asked_compaction(messages)
        if asked is not None and asked.call_id != self._asked_call:
            self._asked_call, self._requested = asked.call_id, asked.focus
        if force and self._stalled is not None:
            before, after = self._stalled
            raise NoProgressError(
                f"forced compaction with policy {self.policy.name!r} made no progress last "
                f"time ({before} -> {after} tokens); the context cannot shrink further"
            )
        tools = self._last_tools = tools if tools is not None else self.tools
        check("Compactor.compact", "extra_tokens", extra_tokens, Annotated[int, Ge(0)])
        fixed = self._fixed_tokens(tools) + extra_tokens
        prefix = self._prefix
        always = self.policy.always_run
        new = prefix.extension(messages) if fixed == prefix.fixed or always else None
        # A rebuild's input that extends the previous input: only the rest is new to it.
        grown = prefix.grown if always and new is not None else None
        if new is not None and (always or not prefix.appendable(new)):
            new = None  # rebuilt on every call, or the extension needs the full history
        if new is None:
            messages = _checked_input(messages, grown or 0)  # the caller's own list if one
            self._known, self._since = None, 0  # the reported usage was of another input
            new_tokens = None
            if always:  # counted once per call, the unchanged part of a chain not again
                figure, exact = self._rebuild.count(messages, grown, self.counter), True
            else:  # exact only where the trigger needs it: a bound under it tokenizes none
                figure, exact = count_within(self.counter, messages,
                                             self.budget.trigger_tokens - fixed)
            estimate = figure + fixed
            known = known_tokens
            size = len(messages)
        else:
            new_tokens = sum(map(self.counter.count_message, new))
            estimate, exact = self._extended(new, new_tokens, fixed)
            known = None if self._known is None else self._known + self.calibration.scaled(
                self._since + new_tokens)
            size = len(prefix.out) + len(new)
        effective = max(estimate, known or 0)
        needs = force or self._requested is not None or effective > self.budget.trigger_tokens
        self._log(estimate, known, effective, size, fixed, force, needs)
        plan = Plan(messages=messages, new=new, new_tokens=new_tokens, estimate=estimate,
                    exact=exact, force=force, needs=needs, fixed=fixed, tools=tools,
                    known=known, started=started, was_idle=self._state.idle, now=now,
                    complete=complete, grown=grown)
        if new is not None and not needs:
            return self._append(plan, new)
        if new is None and not needs and passes and not self.policy.always_run:
            passed = self._pass(plan)
            if passed is not None:
                return passed
        return plan

    def _extended(self, new: list[Message], new_tokens: int, fixed: int) -> tuple[int, bool]:
        """The estimate of the previous output plus ``new`` (and whether it is exact)."""
        prefix = self._prefix
        if prefix.out_exact:
            # The counter's own total, not the sum of message counts: a counter need not
            # be additive, and the fast path must fit by the same count as any output.
            return self.counter.count_messages([*prefix.out, *new]) + fixed, True
        # A bound (only counters whose totals are sums of message counts give one):
        # tightened, newest first, only when it crosses the trigger.
        if prefix.out_tokens + new_tokens + fixed <= self.budget.trigger_tokens:
            return prefix.out_tokens + new_tokens + fixed, False
        figure, exact = count_within(self.counter, [*prefix.out, *new],
                                     self.budget.trigger_tokens - fixed)
        return figure + fixed, exact

    def _append(self, plan: Plan, new: list[Message]) -> CompactionResult:
        """The fast path: the previous output, untouched, plus the new messages."""
        previous = len(self._prefix.out)
        out = self._prefix.append(new, plan.estimate - plan.fixed, plan.exact)
        new_tokens = plan.new_tokens or 0
        self._since += new_tokens
        total = self._total(out, plan)

        def details() -> dict[str, Any]:
            tokens = total()
            return {"known_tokens": plan.known, "incremental": True,
                    "calibrated_tokens": self._calibrated(tokens, plan.known),
                    "usage": self._books.usage(out, tokens, plan.fixed),
                    "cached_prefix": {"messages": previous, "tokens": tokens - new_tokens,
                                      "previous_messages": previous}}

        return CompactionResult(messages=list(out), report=self._unchanged(
            plan, len(out), total, details))

    def _pass(self, plan: Plan) -> CompactionResult | None:
        """A call that starts over under the trigger: the input (repaired in flight when
        invalid) goes out without running the policy, as an extension under the trigger
        does. ``None`` when a repaired view is still invalid or no longer fits: the
        policy path then decides."""
        messages: list[Message] = plan.messages  # type: ignore[assignment]  # a list: checked
        view, repairs, valid = self._repaired(messages, plan)
        if view is None:
            return None
        if view is not messages:  # the repaired view's own figure (its new messages)
            figure, exact = count_within(self.counter, view,
                                         self.budget.trigger_tokens - plan.fixed)
            if figure + plan.fixed > self.budget.trigger_tokens:
                return None
            before = self._total(tuple(messages), plan)
            plan = replace(plan, estimate=figure + plan.fixed, exact=exact)
        # What is counted when read is a snapshot: the caller may change its list later.
        frozen: Sequence[Message] = view if plan.exact else tuple(view)
        total = self._total(frozen, plan)
        if view is messages:
            before = total
        shared, previous = shared_prefix(self._prefix.out, view), len(self._prefix.out)
        summary = self._service(self.counter).details()
        known = learned_in(self._state)
        learned = {"learned": known.as_dict()} if known is not None else {}
        counter, fixed = self.counter, plan.fixed

        def details() -> dict[str, Any]:
            return {
                "summary": summary,
                "known_tokens": plan.known,
                "calibrated_tokens": self._calibrated(total(), plan.known),
                "incremental": False,
                **learned,
                "usage": self._books.usage(frozen, total(), fixed),
                "cached_prefix": {
                    "messages": shared, "previous_messages": previous,
                    "tokens": counter.count_messages(frozen[:shared]) + fixed if shared else 0,
                },
            }

        report = self._unchanged(plan, len(view), total, details, before=before,
                                 messages_before=len(messages), repairs=repairs)
        self._prefix.remember(messages, view, fixed, counter,
                              tokens=plan.estimate - fixed, exact=plan.exact, valid=valid)
        if repairs and self._listeners:  # the event's figure is counted when read
            self._emit(CompactionApplied(self.conversation_id, report,
                                         on_read(lambda: report.tokens_saved), 0, False,
                                         report.duration))
        return CompactionResult(messages=view, report=report)

    def _repaired(
        self, messages: list[Message], plan: Plan
    ) -> tuple[list[Message] | None, tuple[str, ...], bool]:
        """The view to send (``messages`` itself when valid), its repair notes and whether
        it is valid; ``None`` for a view a repair cannot make sendable."""
        if not validate(messages):
            return messages, (), True
        view, notes = repair(messages)
        problems = validate(view)
        if problems and plan.complete:
            return None, (), False
        if any(p.code not in APPENDABLE for p in problems):
            return None, (), False
        return view, tuple(notes), not problems

    def _total(self, out: Sequence[Message], plan: Plan) -> Callable[[], int]:
        """The exact tokens of ``out`` plus the fixed parts: the plan's estimate when that
        is exact, else a count (cheap once made: counts are cached on the messages)."""
        if plan.exact:
            return lambda: plan.estimate
        counter, fixed = self.counter, plan.fixed
        return lambda: counter.count_messages(out) + fixed

    def _unchanged(
        self, plan: Plan, n: int, total: Callable[[], int],
        details: Callable[[], dict[str, Any]], *, before: Callable[[], int] | None = None,
        messages_before: int | None = None, repairs: tuple[str, ...] = (),
    ) -> CompactionReport:
        """The report of a call that sends its input without running the policy (repaired
        when ``repairs``); its token figures are counted when first read when the call
        decided from a bound."""
        before = before or total
        return CompactionReport(
            tokens_before=plan.estimate if plan.exact and before is total else on_read(before),
            tokens_after=plan.estimate if plan.exact else on_read(total),
            messages_before=n if messages_before is None else messages_before,
            messages_after=n, method="none", repairs=repairs,
            duration=time.perf_counter() - plan.started,
            details=details() if plan.exact else on_read(details),
        )

    def _service(self, counter: TokenCounter) -> SummaryService:
        return SummaryService(
            self.summarizer, counter=counter, retry=self.retry, cache=self.cache,
            on_failure=self.on_summary_failure, window=self.budget.input_budget,
        )

    def _calibrated(self, tokens: int, known: int | None) -> int:
        """The provider's likely count of a request of ``tokens`` (ours): the calibrated
        ``known`` figure when the request is the input it was made for."""
        return known if known is not None else self.calibration.scaled(tokens)

    def _fixed_tokens(self, tools: Tools | None) -> int:
        """Tokens of the tool definitions, counted again only when their content changed
        (a caller may edit its tools list in place between calls)."""
        if not tools:
            return 0
        key = json.dumps(tools, sort_keys=True, default=str)
        if self._tools_seen[0] != key:
            self._tools_seen = (key, self.counter.count_tools(tools))
        return self._tools_seen[1]

    def _emit(self, event: CompactionEvent) -> None:
        if self._listeners:
            emit(self._listeners, event)

    def _log(
        self, estimate: int, known: int | None, effective: int, n: int, fixed: int,
        force: bool, needs: bool,
    ) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "[compactor] conversation=%s estimate=%d last_known=%s effective=%d budget=%d "
                "threshold=%d (%d%%) messages=%d fixed=%d force=%s needs_compaction=%s",
                self.conversation_id, estimate, known, effective, self.budget.input_budget,
                self.budget.trigger_tokens, round(self.budget.trigger * 100), n, fixed,
                force, needs,
            )


def _checked_input(messages: Sequence[Message], start: int = 0) -> list[Message]:
    """``messages`` as a list, after checking that it is a sequence of core messages (from
    ``start`` on: the caller knows the first ``start`` are)."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise TypeError(f"messages must be a sequence of Message, got {type(messages).__name__}")
    for i in range(start, len(messages)):
        m = messages[i]
        if not isinstance(m, Message):
            raise TypeError(
                f"messages[{i}] is {type(m).__name__}, not contextfold.Message "
                "(convert with contextfold.from_openai or an adapter)"
            )
    return messages if isinstance(messages, list) else list(messages)
