"""Driving a policy: its generator run to the end, each summary request answered (sync or
async: a policy is written once), with a requested compaction's focus added to the
requests; and the outcome of a compaction prepared ahead, once it is ready."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from .._contract.policy import PolicyOutcome, PolicyRun, SummaryReply, SummaryRequest
from .._policies.provider_native import ProviderRequest, performed
from .ahead import Prepared

__all__ = ["adrive", "afocused", "aprepared_outcome", "drive", "focused", "prepared_outcome"]

logger = logging.getLogger("contextfold")


def drive(run: PolicyRun, answer: Callable[[SummaryRequest], SummaryReply]) -> PolicyOutcome:
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


async def adrive(
    run: PolicyRun, answer: Callable[[SummaryRequest], Awaitable[SummaryReply]]
) -> PolicyOutcome:
    """Like `drive` with an async ``answer``."""
    try:
        request = next(run)
        while True:
            request = run.send(await asyncio.to_thread(performed, request)
                               if isinstance(request, ProviderRequest)
                               else await answer(request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        return outcome


def _focus_note(focus: str) -> str:
    return (f"\n\nThe agent asked for this compaction to keep, above all: {focus}. Keep "
            "everything about it, and its names, ids and values exactly as written.")


def focused(answer: Callable[[SummaryRequest], SummaryReply], focus: str | None
             ) -> Callable[[SummaryRequest], SummaryReply]:
    """``answer`` with a requested compaction's focus added to each summary request."""
    if not focus:
        return answer
    return lambda request: answer(
        replace(request, instructions=request.instructions + _focus_note(focus)))


def afocused(answer: Callable[[SummaryRequest], Awaitable[SummaryReply]], focus: str | None
              ) -> Callable[[SummaryRequest], Awaitable[SummaryReply]]:
    """`focused` for an async ``answer``."""
    if not focus:
        return answer
    return lambda request: answer(
        replace(request, instructions=request.instructions + _focus_note(focus)))


def prepared_outcome(prepared: Prepared) -> PolicyOutcome | None:
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


async def aprepared_outcome(prepared: Prepared) -> PolicyOutcome | None:
    """`prepared_outcome`, awaited."""
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
