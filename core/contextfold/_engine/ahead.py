"""Compactions prepared ahead of time, so the call that crosses the trigger does not wait
for an LLM summary.

With an LLM summarizer, a compaction costs a model call (seconds). The Compactor runs the
next compaction in the background, on the view it has just sent, as soon as either

* the projected growth crosses the trigger: the tokens the recent calls added (the
  largest of the last few steps) times the calls expected while a summary runs (the last
  prepared summary's duration over the time between recent calls; one call before any
  summary was timed) would take the next calls past the trigger (:class:`Growth`); a
  conversation that grows by whole documents starts one call before the jump, and one
  whose calls come fast starts as many calls ahead as the summary takes; or
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
import math
import operator
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .._contract.policy import PolicyOutcome
from .._messages.model import Message
from .._summaries.service import SummaryService

__all__ = ["Growth", "Prepared", "prepare_in_task", "prepare_in_thread"]

_STEPS = 4  # recent calls the growth is read from
_MAX_AHEAD = 64  # calls to look ahead at most (a summary many calls long is no forecast)


class Growth:
    """How a conversation grows: the tokens and seconds of its recent appended calls and
    how long its last prepared summary took, to project when it will cross the trigger.

    A step is what a call's input added to what the previous call sent (a compaction's
    drop is no growth); the time between calls counts whatever the call did.
    """

    def __init__(self) -> None:
        self.summary_seconds: float | None = None
        """How long the last prepared compaction took (``None`` before any finished)."""
        self._last: tuple[float, int] | None = None  # (perf_counter, tokens) of the last call
        self._tokens: deque[int] = deque(maxlen=_STEPS)  # tokens the recent steps added
        self._seconds: deque[float] = deque(maxlen=_STEPS)  # seconds between recent calls

    def observe(self, tokens: int, sent: int | None = None, now: float | None = None) -> None:
        """A call came with ``tokens`` input tokens (its fixed parts included) and sent
        ``sent`` (fewer when it compacted; default ``tokens``): its step is what it added
        to what the previous call sent."""
        now = time.perf_counter() if now is None else now
        if self._last is not None:
            then, before = self._last
            self._seconds.append(max(now - then, 0.0))
            if tokens > before:
                self._tokens.append(tokens - before)
        self._last = (now, tokens if sent is None else sent)

    def calls_ahead(self) -> int:
        """Calls expected while a summary started now runs: the last prepared summary's
        duration over the median time between recent calls; 1 before either is known."""
        if self.summary_seconds is None or not self._seconds:
            return 1
        interval = statistics.median(self._seconds)
        if interval <= 0:
            return _MAX_AHEAD
        return max(1, min(_MAX_AHEAD, math.ceil(self.summary_seconds / interval)))

    def projected(self, tokens: int) -> int | None:
        """The input ``tokens`` grow to by the time a summary started now is ready (the
        largest recent step per call expected meanwhile); ``None`` before any step."""
        if not self._tokens:
            return None
        return tokens + max(self._tokens) * self.calls_ahead()

    def forget(self) -> None:
        """Forget the steps (the conversation was reset or replaced); the summarizer's
        duration stays what it was."""
        self._last = None
        self._tokens.clear()
        self._seconds.clear()

    def time(self, prepared: Prepared) -> None:
        """Take the duration of ``prepared`` as the summary's, once it succeeds."""
        def done(future: Future[PolicyOutcome]) -> None:
            if not future.cancelled() and future.exception() is None:
                self.summary_seconds = time.perf_counter() - prepared.started

        prepared.future.add_done_callback(done)



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

    def applies_to(self, view: tuple[Message, ...]) -> bool:
        """True when ``view`` still starts with the snapshot (the same message objects)."""
        n = len(self.snapshot)
        return len(view) >= n and all(map(operator.is_, self.snapshot, view[:n]))


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
