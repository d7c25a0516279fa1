"""Compactions prepared ahead of time, so the call that crosses the trigger does not wait
for an LLM summary.

With an LLM summarizer, a compaction costs a model call (seconds). The Compactor runs the
next compaction in the background, on the view it has just sent, as soon as either

* the projected next call crosses the trigger: the view just sent plus the largest of
  the last few steps (what a call added to what the previous one sent) is past it
  (`Growth`); a conversation that grows by whole documents starts one call
  before the jump; or
* the conversation passes ``budget.prepare`` (60% of the input budget by default), the
  latest point at which preparing starts (``prepare=None`` turns preparing off)::

    call at 62%   sent as usual (appended); the policy runs, forced, on that view in the
                  background, aiming below the target by what the conversation still has
                  to grow before the trigger
    calls ...     sent as usual, appended
    call at 76%   the prepared output plus what was appended since goes out at once

The prepared output is used only while it still applies: the view it compacted is still
the start of the conversation's view (nothing rewrote it since), nothing forced the call
(an overflow) or asked for a focus, and the prepared output plus the new messages is a
valid request under the trigger. When the background run is still going, the call waits
for it (it started earlier than a new one would); when it failed or does not apply, the
call compacts as it would have without it.

Only policies that keep their output between compactions are prepared (``always_run``
policies rebuild at every call); the extractive summarizer needs no preparing.
"""

from __future__ import annotations

import asyncio
import contextvars
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from .._contract.policy import PolicyOutcome
from .._counting.budget import Budget
from .._messages.model import Message
from .._summaries.service import SummaryService

__all__ = ["Growth", "Prepared", "abandon", "ahead_budget", "prepare_in_task", "prepare_in_thread"]

_STEPS = 4  # recent calls the growth is read from


class Growth:
    """How a conversation grows: the tokens its recent calls added, to project whether
    the next call will cross the trigger.

    A step is what a call's input added to what the previous call sent (a compaction's
    drop is no growth).
    """

    def __init__(self) -> None:
        self._last: int | None = None  # what the last call sent
        self._tokens: deque[int] = deque(maxlen=_STEPS)  # tokens the recent steps added

    def observe(self, tokens: int, sent: int | None = None) -> None:
        """A call came with ``tokens`` input tokens (its fixed parts included) and sent
        ``sent`` (fewer when it compacted; default ``tokens``): its step is what it added
        to what the previous call sent."""
        if self._last is not None and tokens > self._last:
            self._tokens.append(tokens - self._last)
        self._last = tokens if sent is None else sent

    def projected(self, tokens: int) -> int | None:
        """The input the next call is expected to bring: ``tokens`` plus the largest of
        the recent steps; ``None`` before any step.

        The forecast counts tokens, never seconds, so the same history prepares at the
        same calls in every run (a replay finds every summary it asks for cached)."""
        if not self._tokens:
            return None
        return tokens + max(self._tokens)

    def forget(self) -> None:
        """Forget the steps (the conversation was reset or replaced)."""
        self._last = None
        self._tokens.clear()


@dataclass
class Prepared:
    """A compaction running (or done) in the background."""

    snapshot: tuple[Message, ...]
    """The view it compacts: the conversation's view when it started."""
    service: SummaryService
    """The summary service it uses (its figures go into the report)."""
    future: Future[PolicyOutcome] = field(default_factory=Future)
    """The policy's outcome for ``snapshot``."""
    threaded: bool = True
    """It runs in a thread (a sync caller may wait for it); else in an event loop's task."""
    started: float = field(default_factory=time.perf_counter)
    """``perf_counter`` when it started."""
    loop: asyncio.AbstractEventLoop | None = None
    """The event loop of its task, when it runs in one."""
    waited: float = 0.0
    """Seconds the call that used it waited for it."""
    answered: threading.Event = field(default_factory=threading.Event)
    """Set once the agent's request ``snapshot`` was sent in has its answer (a usage
    report, the next call, or a rejection that also abandons the preparation). Its
    cache-true summary requests repeat that request, which the provider caches only once
    it has served it, and may reject as over a window smaller than the budget assumed:
    they wait for it (``SummaryService.sent_settled``)."""

    def __post_init__(self) -> None:
        self.service.sent_settled = self.answered

    def applies_to(self, view: tuple[Message, ...]) -> bool:
        """True when ``view`` still starts with the snapshot (the same message objects)."""
        n = len(self.snapshot)
        return len(view) >= n and all(map(operator.is_, self.snapshot, view[:n]))


def abandon(prepared: Prepared | None) -> None:
    """Stop ``prepared`` (when there is one) from sending more summary requests: its
    outcome will not be used (the budget was lowered, or its view rewritten)."""
    if prepared is not None:
        prepared.service.abandoned = True
        prepared.answered.set()


def ahead_budget(budget: Budget, effective: int, projected: int | None) -> Budget | None:
    """The budget a preparation of a view of ``effective`` tokens runs under, or ``None``
    when there is too little room left for one.

    What is appended until the crossing call (the trigger, or the ``projected`` jump past
    it) comes on top of the prepared output: it aims below the target by that. Past
    ``budget.prepare``, aim as before; started by the projection alone, aim below it by the
    projected step. Too little room left (a step as large as the target): the prepared
    output could not take the next step, and the crossing call would wait for it in vain.
    Below the lowered trigger, the policy compacts the view as it would past the real one
    (a forced run would read as an overflow)."""
    mark = budget.prepare_tokens
    reach = budget.trigger_tokens if mark is not None and effective > mark else max(
        budget.trigger_tokens, projected or 0)
    aim = budget.target_tokens - (reach - effective)
    if effective > budget.trigger_tokens or aim < budget.input_budget // 10:
        return None
    return replace(budget, trigger=(effective - 1) / budget.input_budget,
                   target=aim / budget.input_budget)


def prepare_in_thread(prepared: Prepared, run: Callable[[], PolicyOutcome]) -> Prepared:
    """Run ``run`` in a daemon thread (it never holds up the interpreter's exit) and settle
    ``prepared.future`` with its outcome or error. The thread runs in a copy of the caller's
    context, so a framework's callbacks and the current trace span see the summary calls
    as part of the run that started them."""

    def work() -> None:
        if not prepared.future.set_running_or_notify_cancel():
            return
        try:
            prepared.future.set_result(run())
        except BaseException as exc:  # handed to whoever takes the result
            prepared.future.set_exception(exc)

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(work,), name="contextfold-prepare",
                     daemon=True).start()
    return prepared


def prepare_in_task(
    prepared: Prepared, run: Callable[[], Coroutine[Any, Any, PolicyOutcome]]
) -> Prepared:
    """Run the coroutine ``run()`` as a task of the running event loop (for a summarizer
    that is async only). A task the loop cancels (the loop ended) settles the future with
    the cancellation, so nobody waits for it."""
    prepared.threaded = False
    prepared.loop = asyncio.get_running_loop()
    prepared.future.set_running_or_notify_cancel()

    async def work() -> None:
        try:
            prepared.future.set_result(await run())
        except BaseException as exc:
            prepared.future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    task = prepared.loop.create_task(work())
    _TASKS.add(task)  # the loop keeps only a weak reference to its tasks
    task.add_done_callback(_TASKS.discard)
    return prepared


_TASKS: set[asyncio.Task[None]] = set()
