"""Compaction calls: the per-conversation ``Compactor``, and ``compact``/``acompact``, which
are one-shot compactors. Every compaction in the library goes through this one path.

One call, in order:

1. **Plan.** When the call's messages extend the previous call's input (the same message
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
   bounded from their UTF-8 length (:func:`~contextfold._counting.counters.count_within`)
   and counted exactly, newest first, only while the bound is over the trigger. A call
   that sends what it did not count leaves the exact figures of its report to be counted
   when first read (see :mod:`contextfold._engine.result`).
2. **Prepare.** Check the input's types, repair the in-flight view of an invalid history
   (never the caller's list) and build the policy's :class:`~contextfold.policy.CompactionContext`.
3. **Drive.** Run the policy's generator, answering its summary requests through the
   summary service (sync or async: the policy is written once).
4. **Finish.** Validate the output (format rules and budget), keep the originals behind the
   handles the policy gave, build the report with the usage breakdown, emit events.

Calibration: ``observe_usage`` records the provider's input tokens; the next decision uses
``max(estimate, reported + estimate of what was added since)``, that estimate scaled by
how the provider's count of the last request compared with ours (:mod:`.calibration`).
``compact(messages, force=True)`` compacts regardless of the trigger (the overflow-retry
path); a forced pass that cannot shrink the context makes the next forced call raise
:class:`NoProgressError` at once instead of looping.

A policy whose output must be rebuilt on every call (a loop slice, a nudge) declares
``always_run = True``; the Compactor then runs it on the full input every time.

Ahead of time: with an LLM summarizer, once an appended call passes ``budget.prepare`` the
next compaction runs in the background on the view just sent, and the call that crosses
the trigger sends its output plus what was appended since (:mod:`.ahead`).

Reports describe the input a call worked on: the previous output plus the new messages
when the call was incremental (``details["incremental"]``), else the caller's input.
``details`` also holds the calibrated figure of the input (``known_tokens``) and of what
goes out (``calibrated_tokens``, in the provider's tokens once a usage was reported), the
usage breakdown (``usage``) and, for policy runs, the summary figures (``summary``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent import futures
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import Annotated, Any, Generic, TypeVar

from .._config import Ge, check
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, _shared_prefix, count_within, counter_for_model
from .._counting.usage import UsageBreakdown, usage_of
from .._lossless.handles import Block, HandleMemo, with_handles
from .._lossless.learning import learned_in, learning_of
from .._lossless.references import (
    ReferenceCache,
    _keeps_originals,
    default_references,
    persist_originals,
)
from .._messages.model import Message
from .._messages.validation import repair, validate
from .._policies.contract import (
    CompactionContext,
    ConversationState,
    Policy,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
    Target,
)
from .._policies.provider_native import ProviderRequest, performed
from .._summaries.cache import LRUSummaryCache, SummaryCache, cache_for
from .._summaries.extractive import ExtractiveSummarizer
from .._summaries.service import OnSummaryFailure, RetryPolicy, SummaryService
from .._summaries.summarizer import AnySummarizer, AsyncSummarizer, Summarizer
from .._telemetry import NO_SPAN, CompactionSpan, compaction_span
from ..errors import BudgetExceededError, CompactionError, ConfigurationError, NoProgressError
from ..stores._protocols import HistoryStore
from .ahead import Prepared, prepare_in_task, prepare_in_thread
from .calibration import Calibration
from .events import (
    CompactionApplied,
    CompactionEvent,
    CompactionStarted,
    ConversationIdle,
    Listener,
    emit,
)
from .floor import floor_outcome
from .incremental import APPENDABLE, Plan, Prefix
from .pins import PinScan, keep_pinned
from .rebuild import RebuildMemo
from .result import CompactionReport, CompactionResult, on_read

__all__ = ["Compactor", "acompact", "compact"]

logger = logging.getLogger("contextfold")

_KEPT_HANDLES = 100_000  # handles whose originals this compactor remembers having kept

_TAKEN_OUT = frozenset({"summarized", "dropped", "truncated", "cleared", "inputs_cleared",
                        "image_stripped", "superseded"})
"""Target methods that take content out of view: a run with one of them is a compaction."""

Tools = Sequence[Mapping[str, Any]]
T = TypeVar("T")


def compact(
    messages: Sequence[Message],
    *,
    policy: Policy,
    budget: Budget,
    counter: TokenCounter | None = None,
    summarizer: AnySummarizer | None = None,
    tools: Tools | None = None,
    force: bool = False,
    known_tokens: int | None = None,
    now: datetime | None = None,
) -> CompactionResult:
    """Compact ``messages`` once with ``policy`` so they fit ``budget``.

    A one-shot :class:`Compactor`: no state carries over to the next call. Originals
    behind handles are kept in the module-level reference cache
    (:func:`~contextfold.stores.default_references`).

    Args:
        messages: the history, oldest first. Never modified.
        policy: what to do (``ThresholdPolicy()``, ``TruncationPolicy()``...).
        budget: the token budget.
        counter: how to count; default ``counter_for_model(budget.model)``.
        summarizer: makes summaries when the policy asks; default ``ExtractiveSummarizer``.
        tools: tool definitions sent with the request; their tokens count against the budget.
        force: compact even below the trigger.
        known_tokens: the provider-reported input size, when known (calibration).
        now: the time to stamp summaries with.

    Raises:
        BudgetExceededError: even the protected minimum does not fit.
    """
    compactor = _one_shot(policy, budget, counter, summarizer, tools)
    plan = compactor._plan(messages, force, tools, known_tokens=known_tokens, now=now,
                           passes=False)
    return plan if isinstance(plan, CompactionResult) else compactor._run(plan)


async def acompact(
    messages: Sequence[Message],
    *,
    policy: Policy,
    budget: Budget,
    counter: TokenCounter | None = None,
    summarizer: AnySummarizer | None = None,
    tools: Tools | None = None,
    force: bool = False,
    known_tokens: int | None = None,
    now: datetime | None = None,
) -> CompactionResult:
    """The async form of :func:`compact`: summaries are awaited (``asummarize``)."""
    compactor = _one_shot(policy, budget, counter, summarizer, tools)
    plan = compactor._plan(messages, force, tools, known_tokens=known_tokens, now=now,
                           passes=False)
    return plan if isinstance(plan, CompactionResult) else await compactor._arun(plan)


def _one_shot(
    policy: Policy, budget: Budget, counter: TokenCounter | None,
    summarizer: AnySummarizer | None, tools: Tools | None,
) -> Compactor:
    return Compactor(policy, budget, counter, summarizer, tools=tools,
                     references=default_references())


class Compactor:
    """Compacts one conversation across calls: incremental, calibrated, failure-safe.

    Args:
        policy: what to do (``ThresholdPolicy()``, ``TruncationPolicy()``...).
        budget: the token budget.
        counter: how to count; default ``counter_for_model(budget.model)``.
        summarizer: makes summaries (an LLM through an adapter); default
            :class:`ExtractiveSummarizer`, which needs no LLM.
        store: the history store; when it can hold summaries (``SummaryStore``) the summary
            cache is persisted there, when it can hold originals (``ReferenceStore``) the
            originals behind handles go there. Policies may read it (sliding-window lookups).
        conversation_id: the conversation's key in the store and in events.
        tools: tool definitions sent with every request (their tokens count).
        retry: retries and backoff for the summarizer.
        cache: the in-memory summary cache; default ``LRUSummaryCache()``.
        on_summary_failure: ``"extractive"`` (the fallback summary) or ``"notice"`` (the
            policy writes its failure notice) when the summarizer fails.
        listeners: callables receiving events (:class:`~contextfold.CompactionStarted`,
            :class:`~contextfold.CompactionApplied`, :class:`~contextfold.ConversationIdle`).
        references: where originals behind handles are kept when the store does not keep
            them (no store, or no ``conversation_id``); default ``ReferenceCache()``.

    Not thread-safe: one compactor serves one conversation, one call at a time.
    """

    last_output_tokens: int | None
    """The output tokens of the last reported usage, when given."""
    _prefix: Prefix  # the previous input and output
    _known: int | None  # provider-reported input tokens of the previous output
    _since: int  # estimated tokens added since that report

    def __init__(
        self,
        policy: Policy,
        budget: Budget,
        counter: TokenCounter | None = None,
        summarizer: AnySummarizer | None = None,
        store: HistoryStore | None = None,
        *,
        conversation_id: str | None = None,
        tools: Tools | None = None,
        retry: RetryPolicy | None = None,
        cache: SummaryCache | None = None,
        on_summary_failure: OnSummaryFailure = "extractive",
        listeners: Sequence[Listener] = (),
        references: ReferenceCache | None = None,
    ) -> None:
        if not isinstance(policy, Policy):
            raise ConfigurationError(
                f"policy must be a contextfold policy (name, always_run and run()), got {policy!r}"
            )
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"budget must be a contextfold.Budget, got {budget!r}")
        check("Compactor", "on_summary_failure", on_summary_failure, OnSummaryFailure)
        self.policy = policy
        self.budget = budget
        self.counter = counter or counter_for_model(budget.model)
        self.summarizer: AnySummarizer = summarizer if summarizer is not None else (
            ExtractiveSummarizer(counter=self.counter))
        self.store = store
        self.conversation_id = conversation_id
        self.tools = tools
        self.retry = retry or RetryPolicy()
        self.cache = cache_for(cache if cache is not None else LRUSummaryCache(), store)
        self.on_summary_failure: OnSummaryFailure = on_summary_failure
        self._listeners: list[Listener] = list(listeners)
        self._kept_handles: set[str] = set()
        self._handles = HandleMemo()
        self._pins = PinScan()
        self._rebuild = RebuildMemo()
        self.references = references if references is not None else ReferenceCache()
        self._state = ConversationState()
        self._stalled: tuple[int, int] | None = None
        self._requested: str | None = None
        self._tools_seen: tuple[str | None, int] = (None, 0)
        self._prepared: Prepared | None = None
        self.calibration = Calibration()
        """Provider tokens per counted token, from the last usage report."""
        self._forget()

    # -- public ----------------------------------------------------------------------

    @property
    def state(self) -> ConversationState:
        """The conversation's state, passed to every policy run (nudges, idle)."""
        return self._state

    def add_listener(self, listener: Listener) -> Listener:
        """Deliver events to ``listener`` (returned, so this works as a decorator)."""
        self._listeners.append(listener)
        return listener

    def remove_listener(self, listener: Listener) -> None:
        """Stop delivering events to ``listener``."""
        self._listeners.remove(listener)

    def observe_usage(self, input_tokens: int, output_tokens: int | None = None) -> None:
        """Record the provider-reported usage of the last request (calibration).

        The next decision uses the larger of the estimate and ``input_tokens`` plus the
        estimate of the messages added since. A reported usage also means the request
        succeeded, which clears the forced-compaction guard.
        """
        check("Compactor.observe_usage", "input_tokens", input_tokens, Annotated[int, Ge(0)])
        check("Compactor.observe_usage", "output_tokens", output_tokens,
              Annotated[int, Ge(0)] | None)
        prefix = self._prefix
        if prefix.out:  # the request the usage is of: the output last sent
            sent = prefix.out_tokens if prefix.out_exact else self.counter.count_messages(
                prefix.out)
            self.calibration.observe(input_tokens, sent + prefix.fixed)
        self._known, self._since = input_tokens, 0
        self.last_output_tokens = output_tokens
        self._stalled = None

    def record_response(self) -> None:
        """A model response arrived: reset the nudge counter and the forced-compaction guard."""
        self._state.encouragement_count = 0
        self._stalled = None

    def usage(self, messages: Sequence[Message]) -> UsageBreakdown:
        """Tokens of system prompt, tool definitions and messages against the budget."""
        return usage_of(messages, counter=self.counter, budget=self.budget,
                        tool_tokens=self._fixed_tokens(self.tools))

    def reset(self) -> None:
        """Forget everything about the conversation: prefix, calibration, state, guard."""
        self._forget()
        self.calibration = Calibration()
        self._state = ConversationState()
        self._stalled = None
        self._requested = None

    def settle(self, timeout: float | None = None) -> bool:
        """Wait for a compaction being prepared in a background thread to finish (tests, an
        orderly shutdown: its summaries reach the cache and the store); its result stays
        ready for the next call. True when nothing is left running.

        A preparation running as a task of an event loop is not waited for here."""
        prepared = self._prepared
        if prepared is None or prepared.future.done():
            return True
        if not prepared.threaded:
            return False
        futures.wait([prepared.future], timeout)
        return prepared.future.done()

    def request_compaction(self, focus: str = "") -> None:
        """Compact at the next call whatever the trigger says (the model asked for it with
        the ``compact_context`` tool, or the application did).

        Args:
            focus: what the compaction must keep above all; summaries made by that pass are
                asked to keep it, word for word where it names things.
        """
        check("Compactor.request_compaction", "focus", focus, str)
        self._requested = focus.strip()

    def compact(
        self, messages: Sequence[Message], *, force: bool = False, tools: Tools | None = None,
        extra_tokens: int = 0, complete: bool = True,
    ) -> CompactionResult:
        """The messages to send for this call (see the module docstring).

        Args:
            messages: the whole history, oldest first. Never modified.
            force: compact regardless of the trigger (after a context overflow).
            tools: the tool definitions of this call (default the compactor's); counted.
            extra_tokens: tokens of other prompt parts sent beside the messages (retrieved
                context, a schema); they count against the budget like the tools.
            complete: ``messages`` is the whole request. ``False`` when the caller appends
                a new user message before sending (a chat history, a graph's hook): a
                history without a user message yet is then not an error.

        Raises:
            NoProgressError: forced, and the previous forced pass could not shrink the input.
            BudgetExceededError: even the policy's protected minimum does not fit.
        """
        plan = self._plan(messages, force, tools, extra_tokens=extra_tokens, complete=complete)
        if isinstance(plan, CompactionResult):
            self._prepare_ahead(in_loop=False)
            return plan
        prepared = self._prepared_for(plan)
        if prepared is not None:
            self._prepared = None  # used once, whatever comes of it
            # A task of an event loop cannot be waited for here: only when it is done.
            ready = _settled(prepared) if prepared.threaded or prepared.future.done() else None
            result = self._use_prepared(plan, prepared, ready) if ready else None
            if result is not None:
                return result
        return self._run(plan)

    async def acompact(
        self, messages: Sequence[Message], *, force: bool = False, tools: Tools | None = None,
        extra_tokens: int = 0, complete: bool = True,
    ) -> CompactionResult:
        """The async form of :meth:`compact` (summaries are awaited)."""
        plan = self._plan(messages, force, tools, extra_tokens=extra_tokens, complete=complete)
        if isinstance(plan, CompactionResult):
            self._prepare_ahead(in_loop=True)
            return plan
        prepared = self._prepared_for(plan)
        if prepared is not None:
            self._prepared = None  # used once, whatever comes of it
            # A task of another event loop cannot be awaited here: only when it is done.
            usable = prepared.threaded or prepared.future.done() or \
                prepared.loop is asyncio.get_running_loop()
            ready = await _asettled(prepared) if usable else None
            result = self._use_prepared(plan, prepared, ready) if ready else None
            if result is not None:
                return result
        return await self._arun(plan)

    def limit_input(self, tokens: int) -> None:
        """Lower the input budget to at most ``tokens`` for this call and every later one
        (a provider stated a smaller window than the budget assumed). Never raises it."""
        check("Compactor.limit_input", "tokens", tokens, Annotated[int, Ge(1)])
        if tokens < self.budget.input_budget:
            self.budget = replace(self.budget, context_window=tokens + self.budget.output_reserve)
            self._prepared = None  # prepared for the larger budget

    # -- 1. plan ---------------------------------------------------------------------

    def _plan(
        self, messages: Sequence[Message], force: bool, tools: Tools | None, *,
        extra_tokens: int = 0, known_tokens: int | None = None, now: datetime | None = None,
        complete: bool = True, passes: bool = True,
    ) -> Plan | CompactionResult:
        """Decide what this call works on; the result itself when a fast path applies (an
        extension under the trigger; with ``passes``, a valid input under it)."""
        started = time.perf_counter()
        if force and self._stalled is not None:
            before, after = self._stalled
            raise NoProgressError(
                f"forced compaction with policy {self.policy.name!r} made no progress last "
                f"time ({before} -> {after} tokens); the context cannot shrink further"
            )
        tools = tools if tools is not None else self.tools
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
                    "usage": self._usage(out, tokens, plan.fixed),
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
        shared, previous = self._shared(view), len(self._prefix.out)
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
                "usage": self._usage(frozen, total(), fixed),
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

    # -- 2-4. prepare, drive, finish ------------------------------------------------

    def _run(self, plan: Plan) -> CompactionResult:
        try:
            with self._span(plan) as span:
                view, repairs, context = self._prepare(plan)
                service = self._service(context.counter)
                answer = _focused(service.answer, self._take_request())
                try:
                    run = keep_pinned(self.policy.run, view, context, self._pins,
                                      pinned=plan.pinned)
                    outcome = _drive(run, answer)
                except BudgetExceededError as error:
                    outcome = floor_outcome(view, context, error, self.policy.name)
                result = self._finish(plan, view, repairs, context, outcome, service)
                span.record(result.report)
                return result
        except BaseException:
            self._forget()
            raise

    async def _arun(self, plan: Plan) -> CompactionResult:
        try:
            with self._span(plan) as span:
                view, repairs, context = self._prepare(plan)
                service = self._service(context.counter)
                aanswer = _afocused(service.aanswer, self._take_request())
                try:
                    run = keep_pinned(self.policy.run, view, context, self._pins,
                                      pinned=plan.pinned)
                    outcome = await _adrive(run, aanswer)
                except BudgetExceededError as error:
                    outcome = floor_outcome(view, context, error, self.policy.name)
                result = self._finish(plan, view, repairs, context, outcome, service)
                span.record(result.report)
                return result
        except BaseException:
            self._forget()
            raise

    def _take_request(self) -> str | None:
        """The focus of a requested compaction (``""`` for none), once: this pass serves it."""
        requested, self._requested = self._requested, None
        return requested

    def _span(self, plan: Plan) -> AbstractContextManager[CompactionSpan]:
        """The telemetry span of a pass that compacts (none for a rebuild below the trigger)."""
        if not plan.needs:
            return nullcontext(NO_SPAN)
        return compaction_span(policy=self.policy.name, model=self.budget.model,
                               conversation_id=self.conversation_id, forced=plan.force)

    def _prepare(
        self, plan: Plan
    ) -> tuple[list[Message], tuple[str, ...], CompactionContext]:
        """The policy's input (repaired in flight when invalid) and its context."""
        if plan.new is None:  # checked when planned (the caller's own list when it is one)
            plan.base = plan.messages if isinstance(plan.messages, list) else list(plan.messages)
        else:
            plan.base = [*self._prefix.out, *plan.new]
        if plan.needs:
            self._emit(CompactionStarted(self.conversation_id, len(plan.base), plan.force))
        view: list[Message] = plan.base
        repairs: tuple[str, ...] = ()
        lineage = None
        if self.policy.always_run:
            view, repairs, lineage = self._rebuild.prepare(view, plan.grown)
            if lineage is not None:
                plan.pinned = self._rebuild.any_pinned(view)
        elif validate(view):
            view, notes = repair(view)
            repairs = tuple(notes)
        context = CompactionContext(
            budget=self.budget, counter=self.counter,
            force=plan.force or self._requested is not None,
            known_tokens=plan.known, fixed_tokens=plan.fixed,
            now=plan.now or datetime.now(timezone.utc), state=self._state, store=self.store,
            conversation_id=self.conversation_id, references=self.references,
            lineage=lineage,
        )
        return view, repairs, context

    def _service(self, counter: TokenCounter) -> SummaryService:
        return SummaryService(
            self.summarizer, counter=counter, retry=self.retry, cache=self.cache,
            on_failure=self.on_summary_failure, window=self.budget.input_budget,
        )

    def _finish(
        self, plan: Plan, view: list[Message], repairs: tuple[str, ...],
        context: CompactionContext, outcome: PolicyOutcome, service: SummaryService,
    ) -> CompactionResult:
        """Check the policy's output, keep the originals, report, remember, emit.

        Raises:
            CompactionError: the policy returned an invalid sequence (a bug in the policy).
            BudgetExceededError: the output does not fit the budget.
        """
        original = plan.base
        out = outcome.messages
        problems = validate(out)  # an unchanged input too: every output is checked
        if not plan.complete:  # the caller adds the user message before sending
            problems = [p for p in problems if p.code not in APPENDABLE]
        if problems:
            said = "; ".join(map(str, problems[:5]))
            if out is view:
                raise CompactionError(
                    f"the history cannot be sent to a provider as it is, and policy "
                    f"{self.policy.name!r} left it unchanged: {said} (a provider needs a user "
                    "message before the first assistant message; LoopSlicePolicy adds a nudge "
                    "when there is none)"
                )
            raise CompactionError(f"policy {self.policy.name!r} produced an invalid sequence: "
                                  f"{said}")
        tokens_after = context.measure(out)
        if tokens_after > self.budget.input_budget:
            outcome = floor_outcome(view, context, BudgetExceededError(
                f"the output of policy {outcome.method!r} ({len(out)} messages)",
                needed=tokens_after, available=self.budget.input_budget,
            ), self.policy.name)
            out = outcome.messages
            tokens_after = context.measure(out)
        # What is counted when read is a snapshot: the caller may change its list later.
        snapshot = original if plan.exact else tuple(original)
        before = _Once(lambda: plan.estimate if plan.exact else context.measure(snapshot))
        compacted = outcome.method == "floor" or any(
            t.method in _TAKEN_OUT for t in outcome.targets)
        if (out is not view and not plan.force and compacted
                and not (not plan.exact and _kept_only(out, view))
                and self._grew(plan, snapshot, tokens_after)):
            # (An output made only of the input's own messages cannot be larger than it
            # under a counter whose totals are sums, the only kind that gives bounds: the
            # input is not counted for this.)
            # A compaction never grows the context: when its summaries, labels and notices
            # cost more than what they replaced, the (repaired) input goes out as it is if
            # it fits, by the provider's figure too. A forced run (an overflow) never goes
            # back. Rewrites that take nothing out (a reloaded prompt) are the policy's call.
            kept = context.measure(view)
            if max(kept, plan.known or 0) <= self.budget.input_budget and not validate(view):
                outcome = PolicyOutcome(messages=view, method="none", notes=(
                    f"policy {outcome.method!r} would have grown the context ({before()}"
                    f" -> {tokens_after} tokens); the input was kept",))
                out, tokens_after = view, kept
        messages = out if isinstance(out, list) else list(out)
        figures = {
            "summary": service.details(),
            "known_tokens": plan.known,
            "calibrated_tokens": self._calibrated(tokens_after,
                                                  plan.known if out is view else None),
            "incremental": plan.new_tokens is not None,
        }
        usage = self._usage(messages, tokens_after, plan.fixed)
        cached = self._cached_prefix(messages, plan.fixed)
        targets: tuple[Target, ...]
        details: dict[str, Any]
        if not plan.exact and out is not view and not _keeps_originals(
                self.store, self.conversation_id):
            targets, details = self._handled_later(view, messages, outcome, figures, usage,
                                                   cached)
        else:
            targets = outcome.targets
            blocks: Sequence[Block] = ()
            # In a rebuild's chain, the previous call kept what it left out of the view that
            # this one starts with.
            settled = (plan.grown or 0) if context.lineage is not None else 0
            if out is not view:  # everything left out gets a handle, whichever policy left it
                targets, blocks = self._with_handles(view, messages, targets, context)
            details = {**outcome.details, **figures,
                       **self._keep_originals(view, targets, blocks, settled),
                       "usage": usage, "cached_prefix": cached}
            # Counted when read: a policy may give a bound for what it dropped uncounted
            # (the call did not need them, or a repair made them).
            targets = on_read(partial(_counted_targets, targets, tuple(view), self.counter))
        report = CompactionReport(
            tokens_before=before() if plan.exact else on_read(before),
            tokens_after=tokens_after,
            messages_before=len(original),
            messages_after=len(messages),
            method=outcome.method,
            targets=targets,
            llm_calls=service.llm_calls,
            duration=time.perf_counter() - plan.started,
            forced=plan.force,
            repairs=repairs,
            notes=tuple(service.notes) + outcome.notes,
            details=details,
        )
        changed = out is not view or bool(repairs)
        self._remember(plan, messages, tokens_after, changed)
        if plan.force:
            shrunk = report.tokens_after < report.tokens_before
            self._stalled = None if shrunk else (report.tokens_before, report.tokens_after)
        if changed and self._listeners:  # the event's figures are read for listeners only
            self._emit(CompactionApplied(
                self.conversation_id, report, on_read(lambda: report.tokens_saved),
                on_read(lambda: len(report.targets)), plan.force, report.duration,
            ))
        if self._state.idle and not plan.was_idle:
            self._emit(ConversationIdle(self.conversation_id, self._state.idle_reason or "idle"))
        return CompactionResult(messages=messages, report=report)

    def _grew(self, plan: Plan, before: Sequence[Message], tokens_after: int) -> bool:
        """Whether ``tokens_after`` is more than ``before`` holds (with the fixed parts),
        tokenizing of an input decided from bounds only what that takes."""
        if plan.exact:
            return tokens_after > plan.estimate
        limit = tokens_after - plan.fixed - 1
        figure, _ = count_within(self.counter, before, limit)
        return figure <= limit

    def _handled_later(
        self, view: list[Message], out: list[Message], outcome: PolicyOutcome,
        figures: dict[str, Any], usage: dict[str, Any], cached: dict[str, int],
    ) -> tuple[tuple[Target, ...], dict[str, Any]]:
        """The report's targets and details of a pass that decided from bounds and keeps
        originals in memory, made when first read: the handles of what the policy left out
        without one, and their originals, are made then (only the report can name them:
        nothing in view does); the originals behind the policy's own handles, which the
        model may read at once, are kept now."""
        given = outcome.targets
        self._keep_originals(view, [t for t in given if t.handle], (), 0)
        view, out = list(view), list(out)  # snapshots: the caller may change its lists
        learning, known = learning_of(self._state), learned_in(self._state)
        learned = {"learned": known.as_dict()} if known is not None else {}  # as of now
        counter, kept = self.counter, self._kept_handles

        def complete() -> tuple[tuple[Target, ...], dict[str, Any]]:
            targets = with_handles(view, out, given, counter, HandleMemo())
            references = persist_originals(
                view, targets, store=self.store, cache=self.references,
                conversation_id=self.conversation_id, learning=learning, kept=kept)
            return _counted_targets(targets, view, counter), {
                **({"references": references} if references else {}),
                **learned}

        made = _Once(complete)
        return on_read(lambda: made()[0]), on_read(lambda: {
            **outcome.details, **figures, **made()[1], "usage": usage, "cached_prefix": cached})

    def _remember(
        self, plan: Plan, out: Sequence[Message], tokens: int, changed: bool
    ) -> None:
        """Keep the output (``tokens`` with the fixed parts, exact) as the next prefix."""
        # A rebuild's input that extended the previous one is in the snapshot already.
        restarted = plan.messages if plan.new_tokens is None and plan.grown is None else None
        self._prefix.remember(restarted, out, plan.fixed, self.counter, tokens=tokens - plan.fixed)
        if changed:
            self._known, self._since = None, 0  # the reported usage was of another prefix
            self._prepared = None  # it compacted a view that is no longer the prefix
        elif plan.new_tokens is not None:
            self._since += plan.new_tokens

    # -- ahead of time ----------------------------------------------------------------

    def _prepare_ahead(self, *, in_loop: bool) -> None:
        """Start the next compaction in the background when an appended call passed
        ``budget.prepare`` (see :mod:`.ahead`). It aims below the target by what the
        conversation must still grow to reach the trigger, so the call that crosses it
        lands at the target."""
        budget, summarizer, prefix = self.budget, self.summarizer, self._prefix
        mark = budget.prepare_tokens
        if (mark is None or self._prepared is not None or self.policy.always_run
                or isinstance(summarizer, ExtractiveSummarizer) or self._requested is not None
                or not prefix.out_valid):
            return
        known = None if self._known is None else self._known + self.calibration.scaled(
            self._since)
        effective = max(prefix.out_tokens + prefix.fixed, known or 0)
        if effective <= mark:
            return
        if not prefix.out_exact:  # past the mark by a bound: the exact figure decides
            effective = max(self.counter.count_messages(prefix.out) + prefix.fixed, known or 0)
        aim = budget.target_tokens - (budget.trigger_tokens - effective)
        if not mark < effective <= budget.trigger_tokens or aim < budget.input_budget // 10:
            return
        # Below the lowered trigger, the policy compacts this view as it would past the
        # real one (a forced run would read as an overflow).
        ahead = replace(budget, trigger=(effective - 1) / budget.input_budget,
                        target=aim / budget.input_budget)
        snapshot = prefix.out
        service = self._service(self.counter)
        context = CompactionContext(
            budget=ahead, counter=self.counter, known_tokens=known,
            fixed_tokens=prefix.fixed, now=datetime.now(timezone.utc), state=self._state,
            store=self.store, conversation_id=self.conversation_id, references=self.references,
        )
        prepared = Prepared(snapshot, service)
        if isinstance(summarizer, Summarizer):
            self._prepared = prepare_in_thread(prepared, lambda: _drive(
                keep_pinned(self.policy.run, list(snapshot), context), service.answer))
        elif in_loop and isinstance(summarizer, AsyncSummarizer):
            async def run() -> PolicyOutcome:
                return await _adrive(keep_pinned(self.policy.run, list(snapshot), context),
                                     service.aanswer)
            self._prepared = prepare_in_task(prepared, run)

    def _prepared_for(self, plan: Plan) -> Prepared | None:
        """The prepared compaction this call may use: one of the view this call extends,
        for a call that is neither forced nor asked for a focus."""
        prepared = self._prepared
        if (prepared is None or plan.new is None or plan.force or self._requested is not None
                or not prepared.applies_to(self._prefix.out)):
            return None
        return prepared

    def _use_prepared(
        self, plan: Plan, prepared: Prepared, outcome: PolicyOutcome
    ) -> CompactionResult | None:
        """The prepared output plus the messages appended since, finished like any pass;
        ``None`` when that is not a valid request under the trigger (or nothing was cut)."""
        snapshot = prepared.snapshot
        if outcome.method == "none" or list(outcome.messages) == list(snapshot):
            return None
        assert plan.new is not None
        base = [*self._prefix.out, *plan.new]
        messages = [*outcome.messages, *base[len(snapshot):]]
        problems = validate(messages)
        if not plan.complete:
            problems = [p for p in problems if p.code not in APPENDABLE]
        if problems or self.counter.count_messages(messages) + plan.fixed > \
                self.budget.trigger_tokens:
            return None
        plan.base = base
        self._emit(CompactionStarted(self.conversation_id, len(base), False))
        context = CompactionContext(
            budget=self.budget, counter=self.counter, known_tokens=plan.known,
            fixed_tokens=plan.fixed, now=plan.now or datetime.now(timezone.utc),
            state=self._state, store=self.store, conversation_id=self.conversation_id,
            references=self.references,
        )
        ready = replace(outcome, messages=messages, details={**outcome.details, "prepared": {
            "snapshot_messages": len(snapshot),
            "appended_messages": len(base) - len(snapshot),
            "ahead_ms": round((plan.started - prepared.started) * 1e3, 1),
            "waited_ms": round(prepared.waited * 1e3, 1),
        }})
        try:
            with self._span(plan) as span:
                result = self._finish(plan, base, (), context, ready, prepared.service)
                span.record(result.report)
                return result
        except BaseException:
            self._forget()
            raise

    # -- helpers ---------------------------------------------------------------------

    def _cached_prefix(self, out: Sequence[Message], fixed: int) -> dict[str, int]:
        """How much of the previous request this one repeats from its start (what a
        provider's prompt cache can reuse): messages, and their tokens with the tools and
        other fixed parts sent before them."""
        k = self._shared(out)
        tokens = self.counter.count_messages(list(out[:k])) + fixed if k else 0
        return {"messages": k, "tokens": tokens, "previous_messages": len(self._prefix.out)}

    def _shared(self, out: Sequence[Message]) -> int:
        """How many leading messages of ``out`` repeat the previous request's."""
        previous = self._prefix.out
        k = _shared_prefix(previous, out)
        while k < min(len(previous), len(out)) and previous[k] == out[k]:
            k += 1  # an equal message is the same bytes on the wire
        return k

    def _with_handles(
        self, view: list[Message], out: list[Message], targets: tuple[Target, ...],
        context: CompactionContext,
    ) -> tuple[tuple[Target, ...], Sequence[Block]]:
        """The targets with a handle for everything left out, and the blocks of left-out
        runs among them. In a rebuild's chain the left-out positions come from the
        rebuild memory, and blocks the memo made in the chain are taken as they are."""
        kept = settled = None
        if context.lineage is not None:
            kept = self._rebuild.kept(view, out)
            settled = len(view) if self._rebuild.handles_chained else 0
            self._rebuild.handles_chained = True
        done = with_handles(view, out, targets, self.counter, self._handles, kept=kept,
                            settled=settled or 0)
        return done, self._handles.blocks

    def _keep_originals(
        self, view: Sequence[Message], targets: Sequence[Target], blocks: Sequence[Block],
        settled: int,
    ) -> dict[str, Any]:
        """Keep the originals behind the targets' handles; the report's figures."""
        if len(self._kept_handles) > _KEPT_HANDLES:
            self._kept_handles.clear()  # bounded; at worst an original is kept again
        # The blocks' "dropped" targets close the list: they are read block by block.
        own = targets[: len(targets) - sum(len(b.dropped) for b in blocks)]
        kept = persist_originals(
            view, own, store=self.store, cache=self.references,
            conversation_id=self.conversation_id, learning=learning_of(self._state),
            kept=self._kept_handles, blocks=blocks, settled=settled,
        )
        learned = learned_in(self._state)
        return {**({"references": kept} if kept else {}),
                **({"learned": learned.as_dict()} if learned is not None else {})}

    def _forget(self) -> None:
        self._prefix = Prefix()
        self._prepared = None
        self._rebuild.forget()
        self._known = None
        self._since = 0
        self.last_output_tokens = None

    def _calibrated(self, tokens: int, known: int | None) -> int:
        """The provider's likely count of a request of ``tokens`` (ours): the calibrated
        ``known`` figure when the request is the input it was made for."""
        return known if known is not None else self.calibration.scaled(tokens)

    def _usage(self, out: Sequence[Message], total: int, fixed: int) -> dict[str, int | bool]:
        """The usage breakdown of an output whose total is known."""
        return usage_of(out, counter=self.counter, budget=self.budget, tool_tokens=fixed,
                        total=total).as_dict()

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


class _Once(Generic[T]):
    """A value computed on the first call and kept."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute: Callable[[], T] | None = compute
        self._value: T | None = None

    def __call__(self) -> T:
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value  # type: ignore[return-value]  # set on the first call


def _kept_only(out: Sequence[Message], view: Sequence[Message]) -> bool:
    """True when every message of ``out`` is one of ``view``'s own objects."""
    present = set(map(id, view))
    return all(id(m) in present for m in out)


def _counted_targets(
    targets: tuple[Target, ...], view: Sequence[Message], counter: TokenCounter
) -> tuple[Target, ...]:
    """``targets`` with the exact count of each original: a policy that decided from bounds
    may have given a message nothing counted its bound."""
    count = counter.count_message
    return tuple(
        t if not 0 <= t.index < len(view) or (n := count(view[t.index])) == t.original_tokens
        else replace(t, original_tokens=n)
        for t in targets)


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


def _focus_note(focus: str) -> str:
    return (f"\n\nThe agent asked for this compaction to keep, above all: {focus}. Keep "
            "everything about it, and its names, ids and values exactly as written.")


def _focused(answer: Callable[[SummaryRequest], SummaryReply], focus: str | None
             ) -> Callable[[SummaryRequest], SummaryReply]:
    """``answer`` with a requested compaction's focus added to each summary request."""
    if not focus:
        return answer
    return lambda request: answer(
        replace(request, instructions=request.instructions + _focus_note(focus)))


def _afocused(answer: Callable[[SummaryRequest], Awaitable[SummaryReply]], focus: str | None
              ) -> Callable[[SummaryRequest], Awaitable[SummaryReply]]:
    """:func:`_focused` for an async ``answer``."""
    if not focus:
        return answer
    return lambda request: answer(
        replace(request, instructions=request.instructions + _focus_note(focus)))


def _drive(run: PolicyRun, answer: Callable[[SummaryRequest], SummaryReply]) -> PolicyOutcome:
    """Run a policy generator to completion, answering each request with ``answer`` (a
    provider call, with the call itself)."""
    try:
        request = next(run)
        while True:
            request = run.send(performed(request) if isinstance(request, ProviderRequest)
                               else answer(request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        return outcome


def _settled(prepared: Prepared) -> PolicyOutcome | None:
    """The prepared outcome, waiting for it; ``None`` when it failed (the call then
    compacts as it would have without it)."""
    started = time.perf_counter()
    try:
        outcome = prepared.future.result()
    except BaseException as error:
        if not (prepared.future.done() and prepared.future.exception() is error):
            raise  # not the background run's failure: this call's own interruption
        logger.debug("contextfold: prepared compaction failed: %r", error)
        return None
    prepared.waited = time.perf_counter() - started
    return outcome


async def _asettled(prepared: Prepared) -> PolicyOutcome | None:
    """:func:`_settled`, awaited."""
    started = time.perf_counter()
    try:
        outcome = await asyncio.wrap_future(prepared.future)
    except BaseException as error:
        if not prepared.future.done() or isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise  # this call itself was cancelled or interrupted
        logger.debug("contextfold: prepared compaction failed: %r", error)
        return None
    prepared.waited = time.perf_counter() - started
    return outcome


async def _adrive(
    run: PolicyRun, answer: Callable[[SummaryRequest], Awaitable[SummaryReply]]
) -> PolicyOutcome:
    """Like :func:`_drive` with an async ``answer``."""
    try:
        request = next(run)
        while True:
            request = run.send(await asyncio.to_thread(performed, request)
                               if isinstance(request, ProviderRequest)
                               else await answer(request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        return outcome
