"""Compaction calls: the per-conversation ``Compactor``, and ``compact``/``acompact``, which
are one-shot compactors. Every compaction in the library goes through this one path.

One call, in order:

1. **Plan** (`contextfold._engine.decision`): what the call works on, and the fast paths that answer
   it without running the policy (an extension, or a valid input, under the trigger).
2. **Prepare.** Check the input's types, repair the in-flight view of an invalid history
   (never the caller's list) and build the policy's
   [`CompactionContext`][contextfold.policy.CompactionContext].
3. **Drive** (`contextfold._engine.drive`). Run the policy's generator, answering its summary
   requests through the summary service (sync or async: the policy is written once).
4. **Finish.** Validate the output (format rules and budget), keep the originals behind the
   handles the policy gave and the handles of what it left out (`contextfold._engine.books`), build
   the report with the usage breakdown, emit events.

Calibration: ``observe_usage`` records the provider's input tokens; the next decision uses
``max(estimate, reported + estimate of what was added since)``, that estimate scaled by
how the provider's count of the last request compared with ours (`contextfold._engine.calibration`).
``compact(messages, force=True)`` compacts regardless of the trigger (the overflow-retry
path); a forced pass that cannot shrink the context makes the next forced call raise
[`NoProgressError`][contextfold.errors.NoProgressError] at once instead of looping.

A policy whose output must be rebuilt on every call (a loop slice, a nudge) declares
``always_run = True``; the Compactor then runs it on the full input every time.

Ahead of time: with an LLM summarizer, once an appended call passes ``budget.prepare`` the
next compaction runs in the background on the view just sent, and the call that crosses
the trigger sends its output plus what was appended since (`contextfold._engine.ahead`).

Reports describe the input a call worked on: the previous output plus the new messages
when the call was incremental (``details["incremental"]``), else the caller's input.
``details`` also holds the calibrated figure of the input (``known_tokens``) and of what
goes out (``calibrated_tokens``, in the provider's tokens once a usage was reported), the
usage breakdown (``usage``) and, for policy runs, the summary figures (``summary``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent import futures
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import Annotated, Any

from .._config import Ge, check
from .._contract.policy import (
    CompactionContext,
    ConversationState,
    Policy,
    PolicyOutcome,
    Target,
)
from .._contract.report import CompactionReport, CompactionResult, on_read
from .._counting.bounds import count_within
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, counter_for_model
from .._counting.usage import UsageBreakdown, usage_of
from .._lossless.handles import Block
from .._lossless.references import keeps_originals
from .._messages.model import Message
from .._messages.validation import repair, validate
from .._policies.learning import LearnedImportance, learning_of
from .._stores.protocols import HistoryStore
from .._stores.reference_cache import ReferenceCache, default_references
from .._summaries.cache import LRUSummaryCache, SummaryCache, cache_for
from .._summaries.extractive import ExtractiveSummarizer
from .._summaries.service import OnSummaryFailure, RetryPolicy, SummaryService
from .._summaries.summarizer import AnySummarizer, AsyncSummarizer, Summarizer
from .._telemetry import NO_SPAN, CompactionSpan, compaction_span
from ..errors import BudgetExceededError, CompactionError, ConfigurationError
from .ahead import Growth, Prepared, abandon, ahead_budget, prepare_in_task, prepare_in_thread
from .books import Books, Once, counted_targets
from .calibration import Calibration
from .decision import CallDecision, Tools
from .drive import adrive, afocused, aprepared_outcome, drive, focused, prepared_outcome
from .events import (
    CompactionApplied,
    CompactionStarted,
    ConversationIdle,
    Listener,
)
from .floor import floor_outcome
from .incremental import APPENDABLE, Plan, Prefix
from .pins import PinScan, keep_pinned
from .rebuild import RebuildMemo
from .saved import Saved, SavedAhead, SeenDigest, dump_prefix, load_prefix

__all__ = ["Compactor", "acompact", "compact"]

logger = logging.getLogger("contextfold")

_TAKEN_OUT = frozenset({"summarized", "dropped", "truncated", "cleared", "inputs_cleared",
                        "image_stripped", "superseded"})
"""Target methods that take content out of view: a run with one of them is a compaction."""


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

    A one-shot [`Compactor`][contextfold.Compactor]: no state carries over to the next call.
    Originals behind handles are kept in the module-level reference cache
    ([`default_references`][contextfold.stores.default_references]).

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
    """The async form of [`compact`][contextfold.compact]: summaries are awaited
    (``asummarize``)."""
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


class Compactor(CallDecision):
    """Compacts one conversation across calls: incremental, calibrated, failure-safe.

    Args:
        policy: what to do (``ThresholdPolicy()``, ``TruncationPolicy()``...).
        budget: the token budget.
        counter: how to count; default ``counter_for_model(budget.model)``.
        summarizer: makes summaries (an LLM through an adapter); default
            [`ExtractiveSummarizer`][contextfold.ExtractiveSummarizer], which needs no LLM.
        store: the history store; when it can hold summaries (``SummaryStore``) the summary
            cache is persisted there, when it can hold originals (``ReferenceStore``) the
            originals behind handles go there. Policies may read it (sliding-window lookups).
        conversation_id: the conversation's key in the store and in events.
        tools: tool definitions sent with every request (their tokens count).
        retry: retries and backoff for the summarizer.
        cache: the in-memory summary cache; default ``LRUSummaryCache()``.
        on_summary_failure: ``"extractive"`` (the fallback summary) or ``"notice"`` (the
            policy writes its failure notice) when the summarizer fails.
        listeners: callables receiving events ([`CompactionStarted`][contextfold.CompactionStarted],
            [`CompactionApplied`][contextfold.CompactionApplied],
            [`ConversationIdle`][contextfold.ConversationIdle]).
        references: where originals behind handles are kept when the store does not keep
            them (no store, or no ``conversation_id``); default ``ReferenceCache()``.

    Not thread-safe: one compactor serves one conversation, one call at a time.
    """

    last_output_tokens: int | None
    """The output tokens of the last reported usage, when given."""

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
        self._books = Books(self)
        self._pins = PinScan()
        self._rebuild = RebuildMemo()
        self.references = references if references is not None else ReferenceCache()
        self._state = ConversationState()
        self._stalled: tuple[int, int] | None = None
        self._requested: str | None = None
        self._asked_call: str | None = None
        self._tools_seen: tuple[str | None, int] = (None, 0)
        self._last_tools: Tools | None = None
        self._prepared: Prepared | None = None
        self._growth = Growth()
        self.calibration = Calibration()
        """Provider tokens per counted token, from the last usage report."""
        self._seen_digest = SeenDigest()
        self._ahead: tuple[Any, ...] | None = None  # what is being prepared, for the state
        self._forget()

    # -- public ----------------------------------------------------------------------

    @property
    def state(self) -> ConversationState:
        """The conversation's state, passed to every policy run (nudges, idle)."""
        return self._state

    @property
    def learning(self) -> LearnedImportance:
        """What this conversation taught about importance: the originals the agent read
        back and the search hits it needed (kept in [`state`][contextfold.Compactor.state])."""
        return learning_of(self._state)

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
        self._answered()
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
        self._requested = self._asked_call = None

    def saved_state(self) -> str:
        """What the next call builds on, as a document for the conversation's store
        (`saved`): the prefix as sent, calibration, nudges."""
        state = self._state
        return Saved(
            prefix=dump_prefix(self._prefix, self._seen_digest), known=self._known,
            since=self._since,
            ratio=self.calibration.ratio, last_output_tokens=self.last_output_tokens,
            encouragement_count=state.encouragement_count, idle=state.idle,
            idle_reason=state.idle_reason, context_window=self.budget.context_window,
            ahead=list(self._ahead) if self._prepared is not None and self._ahead else None,
        ).dumps()

    def _resume_ahead(self, ahead: SavedAhead | None) -> None:
        """Prepare again what the process that wrote the state was preparing: the same
        snapshot under the same budget, so the call that crosses the trigger sends what it
        would have sent (its summaries, if that process finished them, are in the store)."""
        if ahead is None or self.policy.always_run:
            return
        try:
            budget = replace(self.budget, trigger=ahead.trigger, target=ahead.target)
        except ConfigurationError:  # not a state we wrote
            return
        if 0 < ahead.size <= len(out := self._prefix.out):
            self._start_ahead(out[:ahead.size], budget, ahead.known, ahead.started,
                              in_loop=False, answered=True)

    def resume_state(self, text: str, messages: Sequence[Message]) -> bool:
        """Take up a state [`saved_state`][contextfold.Compactor.saved_state] wrote (in this process
        or another), for a call whose input is ``messages``. The prefix is taken only when
        ``messages`` starts with the very messages it was made from; a document that does not read
        leaves this Compactor as it was. True when the prefix was taken."""
        saved = Saved.loads(text)
        if saved is None:
            return False
        try:
            prefix = None if saved.prefix is None else load_prefix(saved.prefix, messages)
        except (ValueError, KeyError, TypeError, IndexError):  # not a document we wrote
            return False
        self._forget()
        if prefix is not None:
            self._prefix = prefix
            self._known, self._since = saved.known, saved.since
        self.calibration.ratio = saved.ratio
        self.last_output_tokens = saved.last_output_tokens
        self._state.encouragement_count = saved.encouragement_count
        self._state.idle, self._state.idle_reason = saved.idle, saved.idle_reason
        if saved.context_window < self.budget.context_window:  # a provider lowered it
            self.budget = replace(self.budget, context_window=saved.context_window)
        if prefix is not None:
            self._resume_ahead(saved.prepared_ahead())
        return prefix is not None

    def settle(self, timeout: float | None = None) -> bool:
        """Wait for a compaction being prepared in a background thread to finish (tests, an
        orderly shutdown: its summaries reach the cache and the store); its result stays
        ready for the next call. True when nothing is left running.

        A preparation running as a task of an event loop is not waited for here."""
        self._answered()  # its cache-true requests stop waiting for the last one's answer
        prepared = self._prepared
        if prepared is None or prepared.future.done():
            return True
        if not prepared.threaded:
            return False
        futures.wait([prepared.future], timeout)
        return prepared.future.done()

    def request_compaction(self, focus: str = "") -> None:
        """Compact at the next call whatever the trigger says (the application asks; the
        model's ``compact_context`` call in the messages asks the same, see
        `controls`).

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
        self._answered()  # the caller moved on: the request it sent last was answered
        plan = self._plan(messages, force, tools, extra_tokens=extra_tokens, complete=complete)
        if isinstance(plan, CompactionResult):
            self._prepare_ahead(in_loop=False)
            return plan
        prepared = self._prepared_for(plan)
        if prepared is not None:
            self._prepared = None  # used once, whatever comes of it
            # A task of an event loop cannot be waited for here: only when it is done.
            ready = (prepared_outcome(prepared) if prepared.threaded or prepared.future.done()
                     else None)
            result = self._use_prepared(plan, prepared, ready) if ready else None
            if result is not None:
                return result
        return self._run(plan)

    async def acompact(
        self, messages: Sequence[Message], *, force: bool = False, tools: Tools | None = None,
        extra_tokens: int = 0, complete: bool = True,
    ) -> CompactionResult:
        """The async form of [`compact`][contextfold.Compactor.compact] (summaries are awaited)."""
        self._answered()  # the caller moved on: the request it sent last was answered
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
            ready = await aprepared_outcome(prepared) if usable else None
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
            abandon(self._prepared)  # for the larger budget
            self._prepared = None

    # -- 2-4. prepare, drive, finish ------------------------------------------------

    def _run(self, plan: Plan) -> CompactionResult:
        try:
            with self._span(plan) as span:
                view, repairs, context = self._prepare(plan)
                service = self._service(context.counter)
                service.follow(self._prefix.out, view, plan.tools)  # cache-true summaries
                answer = focused(service.answer, self._take_request())
                try:
                    run = keep_pinned(self.policy.run, view, context, self._pins,
                                      pinned=plan.pinned)
                    outcome = drive(run, answer)
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
                service.follow(self._prefix.out, view, plan.tools)  # cache-true summaries
                aanswer = afocused(service.aanswer, self._take_request())
                try:
                    run = keep_pinned(self.policy.run, view, context, self._pins,
                                      pinned=plan.pinned)
                    outcome = await adrive(run, aanswer)
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
        before = Once(lambda: plan.estimate if plan.exact else context.measure(snapshot))
        compacted = outcome.method == "floor" or any(
            t.method in _TAKEN_OUT for t in outcome.targets)
        if (out is not view and not plan.force and compacted
                and not (not plan.exact and {*map(id, view)}.issuperset(map(id, out)))
                and self._grew(plan, snapshot, tokens_after)):
            # (An output made only of the input's own message objects cannot be larger than it
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
        usage = self._books.usage(messages, tokens_after, plan.fixed)
        cached = self._books.cached_prefix(self._prefix.out, messages, plan.fixed)
        targets: tuple[Target, ...]
        details: dict[str, Any]
        if not plan.exact and out is not view and not keeps_originals(
                self.store, self.conversation_id):
            targets, details = self._books.handled_later(view, messages, outcome, figures, usage,
                                                   cached)
        else:
            targets = outcome.targets
            blocks: Sequence[Block] = ()
            # In a rebuild's chain, the previous call kept what it left out of the view that
            # this one starts with.
            settled = (plan.grown or 0) if context.lineage is not None else 0
            if out is not view:  # everything left out gets a handle, whichever policy left it
                targets, blocks = self._books.with_handles(view, messages, targets, context,
                                                          self._rebuild)
            details = {**outcome.details, **figures,
                       **self._books.keep_originals(view, targets, blocks, settled),
                       "usage": usage, "cached_prefix": cached}
            # Counted when read: a policy may give a bound for what it dropped uncounted
            # (the call did not need them, or a repair made them).
            targets = on_read(partial(counted_targets, targets, tuple(view), self.counter))
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

    def _remember(
        self, plan: Plan, out: Sequence[Message], tokens: int, changed: bool
    ) -> None:
        """Keep the output (``tokens`` with the fixed parts, exact) as the next prefix."""
        # A rebuild's input that extended the previous one is in the snapshot already.
        restarted = plan.messages if plan.new_tokens is None and plan.grown is None else None
        self._prefix.remember(restarted, out, plan.fixed, self.counter, tokens=tokens - plan.fixed)
        if changed:
            self._known, self._since = None, 0  # the reported usage was of another prefix
            abandon(self._prepared)  # its view is no longer the prefix
            self._prepared = None
        elif plan.new_tokens is not None:
            self._since += plan.new_tokens

    # -- ahead of time ----------------------------------------------------------------

    def _prepare_ahead(self, *, in_loop: bool) -> None:
        """Start the next compaction in the background when the projected growth crosses
        the trigger or an appended call passed ``budget.prepare`` (see `contextfold._engine.ahead`).
        It aims below the target by what the conversation is expected to grow until the call
        that crosses the trigger (at least to the trigger), so that call lands at the
        target; not at all when that leaves less than a tenth of the budget."""
        budget, summarizer, prefix = self.budget, self.summarizer, self._prefix
        mark = budget.prepare_tokens
        if mark is None or not prefix.out_valid:
            return
        known = None if self._known is None else self._known + self.calibration.scaled(
            self._since)
        effective = max(prefix.out_tokens + prefix.fixed, known or 0)
        self._growth.observe(effective)
        if (self._prepared is not None or self.policy.always_run
                or isinstance(summarizer, ExtractiveSummarizer) or self._requested is not None):
            return
        projected = self._growth.projected(effective)
        if effective <= mark and (projected is None or projected <= budget.trigger_tokens):
            return
        if not prefix.out_exact:  # decided on a bound: the exact figure decides
            effective = max(self.counter.count_messages(prefix.out) + prefix.fixed, known or 0)
        ahead = ahead_budget(budget, effective, projected)
        if ahead is not None:
            self._start_ahead(prefix.out, ahead, known, datetime.now(timezone.utc),
                              in_loop=in_loop)

    def _start_ahead(self, snapshot: tuple[Message, ...], ahead: Budget, known: int | None,
                     now: datetime, *, in_loop: bool, answered: bool = False) -> None:
        """Prepare the compaction of ``snapshot`` under ``ahead`` in the background (kept
        in the saved state, so a process that resumes the conversation prepares the same).
        ``answered``: the request ``snapshot`` was sent in has had its answer (else its
        cache-true summary requests wait for it: `Prepared.answered`)."""
        prefix, summarizer = self._prefix, self.summarizer
        self._ahead = (len(snapshot), ahead.trigger, ahead.target, known, now.isoformat())
        service = self._service(self.counter)
        context = CompactionContext(
            budget=ahead, counter=self.counter, known_tokens=known,
            fixed_tokens=prefix.fixed, now=now, state=self._state,
            store=self.store, conversation_id=self.conversation_id, references=self.references,
        )
        service.follow(snapshot, snapshot, self._last_tools)
        prepared = Prepared(snapshot, service)
        if answered:
            prepared.answered.set()
        if isinstance(summarizer, Summarizer):
            self._prepared = prepare_in_thread(prepared, lambda: drive(
                keep_pinned(self.policy.run, list(snapshot), context), service.answer))
        elif in_loop and isinstance(summarizer, AsyncSummarizer):
            async def run() -> PolicyOutcome:
                return await adrive(keep_pinned(self.policy.run, list(snapshot), context),
                                     service.aanswer)
            self._prepared = prepare_in_task(prepared, run)

    def _answered(self) -> None:
        """The request the running preparation follows was answered (see
        `Prepared.answered`): a usage report, the next call, or a rejection."""
        if self._prepared is not None:
            self._prepared.answered.set()

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

    def _forget(self) -> None:
        self._prefix = Prefix()
        self._prepared = None
        self._growth.forget()
        self._rebuild.forget()
        self._known = None
        self._since = 0
        self.last_output_tokens = None
