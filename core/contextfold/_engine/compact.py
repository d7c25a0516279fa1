"""``compact`` and ``acompact``: run one policy once, sync or async.

The flow: repair the in-flight view of an invalid input (never the caller's list), run
the policy's generator answering its summary requests, check the output (format rules,
budget), and build the report. The ``Compactor`` drives the same steps per conversation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from .._counting.budget import Budget
from .._counting.counters import TokenCounter, counter_for_model
from .._lossless.references import default_references, persist_originals
from .._messages.model import Message
from .._messages.validation import repair, validate
from .._summaries.service import SummaryService
from ..errors import BudgetExceededError, CompactionError
from ..policy import (
    CompactionContext,
    ConversationState,
    Policy,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
)
from .result import CompactionReport, CompactionResult

__all__ = ["acompact", "compact", "drive_async", "drive_sync", "finish", "prepare"]


def drive_sync(
    run: PolicyRun, answer: Callable[[SummaryRequest], SummaryReply]
) -> PolicyOutcome:
    """Run a policy generator to completion, answering each request with ``answer``."""
    try:
        request = next(run)
        while True:
            request = run.send(answer(request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        return outcome


async def drive_async(
    run: PolicyRun, answer: Callable[[SummaryRequest], Awaitable[SummaryReply]]
) -> PolicyOutcome:
    """Like :func:`drive_sync` with an async ``answer``."""
    try:
        request = next(run)
        while True:
            request = run.send(await answer(request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        return outcome


def prepare(
    messages: Sequence[Message],
    *,
    budget: Budget,
    counter: TokenCounter | None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    force: bool = False,
    known_tokens: int | None = None,
    now: datetime | None = None,
    state: ConversationState | None = None,
    store: Any = None,
    conversation_id: str | None = None,
    references: Any = None,
) -> tuple[Sequence[Message], tuple[str, ...], CompactionContext]:
    """Repair the in-flight view if needed and build the policy's context."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise TypeError(f"messages must be a sequence of Message, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise TypeError(
                f"messages[{i}] is {type(m).__name__}, not contextfold.Message "
                "(convert with contextfold.from_openai or an adapter)"
            )
    counter = counter or counter_for_model(budget.model)
    view: Sequence[Message] = messages
    repairs: tuple[str, ...] = ()
    if validate(messages):
        fixed, notes = repair(messages)
        view, repairs = fixed, tuple(notes)
    context = CompactionContext(
        budget=budget,
        counter=counter,
        force=force,
        known_tokens=known_tokens,
        fixed_tokens=counter.count_tools(tools) if tools else 0,
        now=now or datetime.now(timezone.utc),
        state=state if state is not None else ConversationState(),
        store=store,
        conversation_id=conversation_id,
        references=references,
    )
    return view, repairs, context


def finish(
    original: Sequence[Message],
    view: Sequence[Message],
    outcome: PolicyOutcome,
    context: CompactionContext,
    *,
    repairs: tuple[str, ...],
    llm_calls: int,
    notes: tuple[str, ...],
    started: float,
    details: Mapping[str, Any] | None = None,
) -> CompactionResult:
    """Check the policy's output and build the result (``details`` join the policy's).

    Raises:
        CompactionError: the policy returned an invalid sequence (a bug in the policy).
        BudgetExceededError: the output does not fit the budget.
    """
    out = outcome.messages
    if out is not view:
        problems = validate(out)
        if problems:
            raise CompactionError(
                f"policy produced an invalid sequence: {'; '.join(map(str, problems[:5]))}"
            )
    tokens_after = context.measure(out)
    if tokens_after > context.budget.input_budget:
        raise BudgetExceededError(
            f"the output of policy {outcome.method!r} ({len(out)} messages)",
            needed=tokens_after,
            available=context.budget.input_budget,
        )
    report = CompactionReport(
        tokens_before=context.measure(original),
        tokens_after=tokens_after,
        messages_before=len(original),
        messages_after=len(out),
        method=outcome.method,
        targets=outcome.targets,
        llm_calls=llm_calls,
        duration=time.perf_counter() - started,
        forced=context.force,
        repairs=repairs,
        notes=notes + outcome.notes,
        details={**outcome.details, **(details or {})},
    )
    messages = out if isinstance(out, list) else list(out)
    return CompactionResult(messages=messages, report=report)


def compact(
    messages: Sequence[Message],
    *,
    policy: Policy,
    budget: Budget,
    counter: TokenCounter | None = None,
    summarizer: Any = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    force: bool = False,
    known_tokens: int | None = None,
    now: datetime | None = None,
) -> CompactionResult:
    """Compact ``messages`` once with ``policy`` so they fit ``budget``.

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
    started = time.perf_counter()
    view, repairs, context = prepare(
        messages, budget=budget, counter=counter, tools=tools, force=force,
        known_tokens=known_tokens, now=now, references=default_references(),
    )
    service = SummaryService(summarizer, counter=context.counter)
    outcome = drive_sync(policy.run(view, context), service.answer)
    return finish(
        messages, view, outcome, context, repairs=repairs, llm_calls=service.llm_calls,
        notes=tuple(service.notes), started=started,
        details=_details(service, _keep_originals(view, outcome)),
    )


async def acompact(
    messages: Sequence[Message],
    *,
    policy: Policy,
    budget: Budget,
    counter: TokenCounter | None = None,
    summarizer: Any = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    force: bool = False,
    known_tokens: int | None = None,
    now: datetime | None = None,
) -> CompactionResult:
    """The async form of :func:`compact`: summaries are awaited (``asummarize``)."""
    started = time.perf_counter()
    view, repairs, context = prepare(
        messages, budget=budget, counter=counter, tools=tools, force=force,
        known_tokens=known_tokens, now=now, references=default_references(),
    )
    service = SummaryService(summarizer, counter=context.counter)
    outcome = await drive_async(policy.run(view, context), service.aanswer)
    return finish(
        messages, view, outcome, context, repairs=repairs, llm_calls=service.llm_calls,
        notes=tuple(service.notes), started=started,
        details=_details(service, _keep_originals(view, outcome)),
    )


def _keep_originals(view: Sequence[Message], outcome: PolicyOutcome) -> dict[str, Any]:
    """Keep the originals behind the outcome's handles so ``read_original`` can return them
    (in the module-level reference cache: plain calls have no store)."""
    return persist_originals(view, outcome.targets, cache=default_references())


def _details(service: SummaryService, kept: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's figures for the report: the summary service's, and the originals kept."""
    return {"summary": service.details(), **({"references": kept} if kept else {})}
