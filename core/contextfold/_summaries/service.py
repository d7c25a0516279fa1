"""Answers policies' summary requests: cache, split, retry, verify, fall back.

The flow is written once, as a generator of *effects* (``_Call``: run the summarizer on a
request; ``_Sleep``: wait before a retry; ``_Settled``: wait for the agent's request a
prepared cache-true request repeats to be answered), and two thin drivers perform the effects with a
sync or an async summarizer (the sans-IO shape of httpx's auth flows)::

    cache hit? ── yes ──> reply (origin "cache"; no call counted)
       │ no
    fits the summarizer's window? ── no ──> split into parts, summarize each, merge them
       │ yes
    call ── too long for the model ──> split at once (half the window)
       │ ── a refused request (400, 401, 403...) ──> extractive fallback at once
       │ ── 429, 5xx, timeout ──> retry with exponential backoff
       │                          ── all failed ──> extractive fallback
       │                                            (or None: the policy's notice)
    verify: identifiers of the originals missing from the text are appended under DATA
       │
    cache it, reply

Cache-true requests: for a summarizer whose ``cache_true`` attribute is ``True``, the
engine tells the service what it last sent (`SummaryService.follow`); a request
whose span lies, message for message, in what was sent (or appended since) then carries
it ([`SentRequest`][contextfold.integration.SentRequest]) and the summarizer repeats that
request with the instruction appended, so the provider serves it mostly from its prompt
cache. Where that request would not fit the summarizer's window, is not a valid request,
or the model rejects it as too long, today's form (the span alone) is used instead.

The window a request must fit is the request's ``max_input_tokens``, else the
summarizer's ``max_input_tokens`` attribute (the adapters' summarizers read it from their
model's profile), else the conversation's input budget; the request, the summary's own size
and the prompt's wrapping must fit it together.

A failing summarizer never becomes the summary and never deletes history: its error is
recorded in the notes and the reply falls back.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, TypeVar

from .._config import Ge, Gt, check, check_fields
from .._contract.policy import SentRequest, SummaryReply, SummaryRequest
from .._counting.counters import EstimatingCounter, TokenCounter
from .._identifiers.values import message_identifiers
from .._messages.model import Message
from .._messages.validation import validate
from .._provider_errors import error_kind, overflow_of
from .._telemetry import NO_SUMMARY_SPAN, SummarySpan, summary_span
from ..errors import ConfigurationError, SummarizerError
from .cache import SummaryCache
from .extractive import ExtractiveSummarizer
from .prompt import summary_instruction
from .split import append_to_data, merge_request, split_request
from .summarizer import AnySummarizer, AsyncSummarizer, Summarizer

__all__ = ["OnSummaryFailure", "RetryPolicy", "SummaryService"]

T = TypeVar("T")
OnSummaryFailure = Literal["extractive", "notice"]
_MAX_DEPTH = 4
_PROMPT_OVERHEAD = 256  # the summary prompt's system text and transcript labels
_DEFAULT_SUMMARY_TOKENS = 1_024  # room for the reply when the request gives no size
_MIN_WINDOW = 512  # below this a split cannot leave room for a useful part
_PUNCTUATION = ".,;:!?()[]{}<>\"'`*"
_STATED_SHARE = 0.97  # of a window the model stated: counters differ a little between texts


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failing summarizer is retried (the threshold design: 5 tries,
    waiting 1, 2, 4, 8 s between them, at most 16 s). Use zero delays in tests:
    ``RetryPolicy(base_delay=0)``."""

    max_attempts: Annotated[int, Ge(1)] = 5
    """Calls per request before giving up, the first included."""
    base_delay: Annotated[float, Ge(0)] = 1.0
    """Seconds to wait after the first failure."""
    factor: Annotated[float, Ge(1)] = 2.0
    """Each wait is this many times the previous one."""
    max_delay: Annotated[float, Ge(0)] = 16.0
    """The longest wait."""
    timeout: Annotated[float, Gt(0)] | None = None
    """Seconds one call may take before it counts as failed (``None``: no limit)."""
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    """How the sync driver waits."""
    asleep: Callable[[float], Awaitable[None]] = field(
        default=asyncio.sleep, compare=False, repr=False
    )
    """How the async driver waits."""

    def __post_init__(self) -> None:
        check_fields(self)

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        return float(min(self.base_delay * self.factor ** (failures - 1), self.max_delay))


@dataclass(frozen=True, slots=True)
class _Call:
    request: SummaryRequest


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Settled:
    event: threading.Event
    timeout: float


@dataclass(frozen=True, slots=True)
class _Outcome:
    text: str | None
    error: BaseException | None = None


_Flow = Generator["_Call | _Sleep | _Settled", "_Outcome | bool | None", T]

_SENT_WAIT = 600.0
"""Seconds a prepared cache-true request waits for the agent's request it repeats to be
answered before it takes today's form instead."""


class _TooLong(Exception):
    """The summarizer's model rejected the request as longer than its window."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Failed(Exception):
    def __init__(self, request: SummaryRequest, error: BaseException, attempts: int) -> None:
        super().__init__(str(error))
        self.request = request
        self.error = error
        self.attempts = attempts


class SummaryService:
    """Runs one summarizer for a compaction pass, safely, and counts what it did.

    Args:
        summarizer: a ``Summarizer`` and/or ``AsyncSummarizer``; default
            [`ExtractiveSummarizer`][contextfold.ExtractiveSummarizer] (no LLM: no cache, retries or
            verification).
        counter: measures requests against the summarizer's window (``max_input_tokens``
            on the summarizer or the request).
        retry: retry and backoff settings.
        cache: a content-hash cache shared across passes.
        on_failure: ``"extractive"`` replies with the extractive summary when the
            summarizer failed; ``"notice"`` replies ``None`` so the policy writes its notice.
        window: the input window to assume when neither the request nor the summarizer
            states one (the Compactor passes the conversation's input budget).
    """

    def __init__(
        self,
        summarizer: AnySummarizer | None = None,
        *,
        counter: TokenCounter | None = None,
        retry: RetryPolicy | None = None,
        cache: SummaryCache | None = None,
        on_failure: OnSummaryFailure = "extractive",
        window: int | None = None,
    ) -> None:
        check("SummaryService", "on_failure", on_failure, OnSummaryFailure)
        self.counter = counter or EstimatingCounter()
        self.fallback = ExtractiveSummarizer(counter=counter)
        self.summarizer: AnySummarizer = summarizer if summarizer is not None else self.fallback
        self.llm = not isinstance(self.summarizer, ExtractiveSummarizer)
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self.on_failure = on_failure
        self.window = window
        self._stated: int | None = None  # the window the model stated, in our tokens
        self.llm_calls = 0
        """Calls to an LLM summarizer (the extractive one and cache hits excluded)."""
        self.counts = dict.fromkeys(
            ("summarizer_calls", "cache_hits", "retries", "splits", "fallbacks", "failures",
             "verified_missing", "verified_unfit", "too_long", "refused", "cache_true"), 0,
        )
        """Figures for the report: every call, hits, retries, splits, fallbacks..."""
        self.notes: list[str] = []
        """Remarks for the report (failures, fallbacks, verification)."""
        self._sent: _Sent | None = None
        self.abandoned = False
        """Set (from any thread) when the pass's outcome will not be used, such as a
        compaction prepared ahead for a budget a provider has since lowered: no further
        summary request is sent (it would be sized for the old budget)."""
        self.sent_settled: threading.Event | None = None
        """For a compaction prepared ahead: set once the agent's request it follows was
        answered (or rejected, with `abandoned`). Its cache-true requests repeat that
        request, which the provider caches only once it has served it and may reject as
        over a window smaller than the budget assumed, so they wait for it."""

    @property
    def cache_true(self) -> bool:
        """Whether the summarizer asks for cache-true requests (its ``cache_true`` is True)."""
        return self.llm and getattr(self.summarizer, "cache_true", False) is True

    def follow(self, sent: Sequence[Message], view: Sequence[Message],
               tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        """What the agent's model last received (``sent``, with ``tools``) and the policy's
        input (``view``), for cache-true requests. Nothing is kept unless ``view`` starts
        with ``sent`` (the same message objects): only then is the previous request the
        start of what the policy summarizes."""
        self._sent = None
        if not self.cache_true or not sent or len(view) < len(sent):
            return
        if all(a is b for a, b in zip(sent, view[:len(sent)], strict=True)):
            self._sent = _Sent(len(sent), tuple(view), tuple(tools or ()))

    def details(self) -> dict[str, int]:
        """The pass's figures, for ``CompactionReport.details["summary"]``."""
        return {"llm_calls": self.llm_calls, **self.counts}

    # -- drivers ---------------------------------------------------------------------

    def answer(self, request: SummaryRequest) -> SummaryReply:
        """Answer ``request`` synchronously."""
        flow = self._flow(request)
        try:
            effect = next(flow)
            while True:
                if isinstance(effect, _Sleep):
                    if effect.seconds > 0:
                        self.retry.sleep(effect.seconds)
                    effect = flow.send(None)
                elif isinstance(effect, _Settled):
                    effect = flow.send(effect.event.wait(effect.timeout))
                else:
                    effect = flow.send(self._call_sync(effect.request))
        except StopIteration as stop:
            reply: SummaryReply = stop.value
            return reply

    async def aanswer(self, request: SummaryRequest) -> SummaryReply:
        """Answer ``request`` asynchronously: ``asummarize`` when the summarizer has it,
        else its ``summarize`` is called in place."""
        flow = self._flow(request)
        try:
            effect = next(flow)
            while True:
                if isinstance(effect, _Sleep):
                    if effect.seconds > 0:
                        await self.retry.asleep(effect.seconds)
                    effect = flow.send(None)
                elif isinstance(effect, _Settled):
                    effect = flow.send(await _settled(effect))
                else:
                    effect = flow.send(await self._call_async(effect.request))
        except StopIteration as stop:
            reply: SummaryReply = stop.value
            return reply

    def _call_sync(self, request: SummaryRequest) -> _Outcome:
        if not isinstance(self.summarizer, Summarizer):
            raise ConfigurationError(
                f"{type(self.summarizer).__name__} is async only (no summarize); use acompact"
            )
        method = self.summarizer.summarize
        with self._span() as span:
            try:
                if self.retry.timeout is None:
                    outcome = _checked(method(request))
                else:
                    outcome = _checked(_within(method, request, self.retry.timeout))
            except Exception as exc:
                outcome = _Outcome(None, exc)
            return self._traced(span, request, outcome)

    async def _call_async(self, request: SummaryRequest) -> _Outcome:
        if not isinstance(self.summarizer, AsyncSummarizer):
            return self._call_sync(request)
        method = self.summarizer.asummarize
        with self._span() as span:
            try:
                if self.retry.timeout is None:
                    outcome = _checked(await method(request))
                else:
                    outcome = _checked(await asyncio.wait_for(method(request),
                                                              self.retry.timeout))
            except Exception as exc:
                outcome = _Outcome(None, exc)
            return self._traced(span, request, outcome)

    def _span(self) -> AbstractContextManager[SummarySpan]:
        """A telemetry span for a call to an LLM summarizer (the extractive one is not)."""
        if not self.llm:
            return nullcontext(NO_SUMMARY_SPAN)
        return summary_span(getattr(self.summarizer, "name", type(self.summarizer).__name__))

    def _traced(self, span: SummarySpan, request: SummaryRequest, outcome: _Outcome) -> _Outcome:
        if span.span is not None:
            span.finish(
                input_tokens=self._input_tokens(request),
                output_tokens=None if outcome.text is None else self.counter.count_text(
                    outcome.text),
                error=outcome.error if outcome.text is None else None,
            )
        return outcome

    # -- the flow (written once) -----------------------------------------------------

    def _flow(self, request: SummaryRequest) -> _Flow[SummaryReply]:
        if not self.llm:
            self.counts["summarizer_calls"] += 1
            outcome = yield _Call(request)
            assert not isinstance(outcome, bool)  # a call is answered with its outcome
            if outcome is not None and outcome.text is not None:
                return SummaryReply(text=outcome.text)
            error = outcome.error if outcome else None
            return self._give_up(_Failed(request, error or SummarizerError("no summary"), 1))
        key = request.cache_key
        cached = self._cache_get(key)
        if cached is not None:
            return SummaryReply(text=cached, origin="cache")
        request = self._cache_true(request)
        try:
            text = yield from self._summarize(request, 0)
        except _Failed as failed:  # the whole request falls back, not only the failed part
            return self._give_up(_Failed(request, failed.error, failed.attempts))
        text = self._verify(request, text)
        self._cache_put(key, text)
        return SummaryReply(text=text)

    def _summarize(
        self, request: SummaryRequest, depth: int, window: int | None = None
    ) -> _Flow[str]:
        """The summary of ``request``: split into parts when it does not fit ``window``
        (the summarizer's, else the conversation's, never above what the model stated),
        at once again below the window the model states when it rejects it as too long.
        Raises `_Failed` only (the whole request then falls back)."""
        window = self._window_for(request, window)
        needed = self._input_tokens(request) + _reserve(request, window)
        # A cache-true request goes to the agent's own model: it must also fit the
        # conversation's window, lowered when that model stated a smaller one.
        fit = window if self.window is None else min(window or self.window, self.window)
        if request.sent is not None and fit is not None and needed > fit:
            request = replace(request, sent=None)  # today's form, the span alone
            needed = self._input_tokens(request) + _reserve(request, window)
        if window is not None and depth < _MAX_DEPTH and needed > window:
            room = window - _reserve(request, window)  # left for the input itself
            parts = split_request(request, room, self.counter)
            if len(parts) >= 2:
                return (yield from self._parts(request, parts, depth, window))
        if request.sent is not None and self.sent_settled is not None:
            answered = yield _Settled(self.sent_settled, _SENT_WAIT)
            if self.abandoned:
                raise _Failed(request, SummarizerError("the compaction was abandoned"), 0)
            if answered is not True:  # its fate unknown: the span alone
                request = replace(request, sent=None)
        if request.sent is not None:
            self.counts["cache_true"] += 1  # sent as the previous request plus instruction
        try:
            return (yield from self._attempts(request))
        except _TooLong as too_long:
            # The model's real window is smaller than assumed: split at once, no waiting.
            self.counts["too_long"] += 1
            if request.sent is not None:  # the span alone first: the previous request is
                # what overflowed; the limit the model stated holds for later requests too,
                # so no other cache-true request of this size is sent to be rejected again.
                if overflow_of(too_long.error) is not None:
                    self._learned_window(too_long.error, request, needed, window)
                return (yield from self._summarize(
                    replace(request, sent=None), depth, window))
            smaller = self._learned_window(too_long.error, request, needed, window)
            if depth >= _MAX_DEPTH or smaller < _MIN_WINDOW:
                raise _Failed(request, too_long.error, 1) from None
            return (yield from self._summarize(request, depth + 1, smaller))

    def _parts(
        self, request: SummaryRequest, parts: list[SummaryRequest], depth: int, window: int,
    ) -> _Flow[str]:
        """Each part summarized (a part the model rejects is split in turn), then merged."""
        self.counts["splits"] += 1
        texts: list[str] = []
        for part in parts:
            cached = self._cache_get(part.cache_key)
            if cached is None:
                cached = yield from self._summarize(part, depth + 1, window)
                self._cache_put(part.cache_key, cached)
            texts.append(cached)
        merged = merge_request(request, texts)
        if self._input_tokens(merged) >= self._input_tokens(request):
            # Summaries no shorter than what they summarize: merging them again would only
            # grow (and a summarizer that pads its replies never converges), so give up here.
            raise _Failed(request, SummarizerError(
                "the parts' summaries are no shorter than the parts themselves"), 1)
        return (yield from self._summarize(merged, depth + 1, window))

    def _window_for(self, request: SummaryRequest, window: int | None) -> int | None:
        """The window ``request`` must fit: ``window`` when a split chose it, else the
        request's or summarizer's, else the conversation's; never above the window the
        model stated when it rejected a request of this pass."""
        window = window or _window(self.summarizer, request) or self.window
        if self._stated is not None:
            window = self._stated if window is None else min(window, self._stated)
        return window

    def _learned_window(self, error: BaseException, request: SummaryRequest, needed: int,
                        window: int | None) -> int:
        """The window below which to split ``request`` the model rejected: the limit its
        error states, in our tokens (scaled by how its count of the request compares with
        ours), kept for the rest of the pass; half the request when it states none."""
        stated = overflow_of(error)
        if stated is None or stated.limit is None:
            return min(window or needed, needed) // 2
        ours = max(self._input_tokens(request), 1)
        ratio = max(1.0, (stated.prompt_tokens or ours) / ours)
        learned = min(int(stated.limit / ratio * _STATED_SHARE), needed - 1)
        self._stated = learned if self._stated is None else min(self._stated, learned)
        return self._stated

    def _attempts(self, request: SummaryRequest) -> _Flow[str]:
        error: BaseException = SummarizerError("no attempt made")
        for attempt in range(1, self.retry.max_attempts + 1):
            if self.abandoned:  # its outcome will not be used: send nothing more
                raise _Failed(request, SummarizerError("the compaction was abandoned"), attempt)
            self.counts["summarizer_calls"] += 1
            self.llm_calls += 1
            outcome = yield _Call(request)
            assert not isinstance(outcome, bool)  # a call is answered with its outcome
            if outcome is not None and outcome.text is not None:
                return outcome.text
            error = outcome.error if outcome and outcome.error else SummarizerError("no summary")
            kind = error_kind(error)
            if kind == "overflow":
                raise _TooLong(error)
            if kind == "fatal":  # a refused request: retrying cannot help
                self.counts["refused"] += 1
                raise _Failed(request, error, attempt)
            if attempt < self.retry.max_attempts:
                self.counts["retries"] += 1
                yield _Sleep(self.retry.delay(attempt))
        raise _Failed(request, error, self.retry.max_attempts)

    # -- helpers ---------------------------------------------------------------------

    def _give_up(self, failed: _Failed) -> SummaryReply:
        self.counts["failures"] += 1
        error = f"{type(failed.error).__name__}: {failed.error}"
        what = f"summarizer failed after {failed.attempts} attempt(s) ({error})"
        if self.on_failure == "extractive" and self.llm:
            try:
                text = self.fallback.summarize(failed.request)
            except Exception as exc:  # a bug in the fallback must not lose history either
                error = f"{error}; extractive fallback: {type(exc).__name__}: {exc}"
            else:
                self.counts["fallbacks"] += 1
                self.notes.append(f"{what}; used the extractive summary")
                return SummaryReply(text=text, origin="fallback", error=error)
        self.notes.append(f"{what}; no summary (the policy writes its notice)")
        return SummaryReply(text=None, origin="failed", error=error)

    def _verify(self, request: SummaryRequest, text: str) -> str:
        """Append the originals' identifiers the summary lacks under DATA, within the size
        hint; what does not fit is counted and named in the notes, never dropped silently."""
        # Most identifiers appear as whole words: a set of the text's words answers for
        # them; only the rest (multi-word dates and amounts, or missing) need a substring scan.
        words = text.split()
        present = {*words, *(w.strip(_PUNCTUATION) for w in words)}
        missing = [
            v for v in message_identifiers(request.messages) if v not in present and v not in text
        ]
        if not missing:
            return text
        fitting = missing
        if request.max_tokens is not None:
            room = request.max_tokens - self.counter.count_text(text) - 4
            fitting = []
            for value in missing:
                room -= self.counter.count_text(value) + 2
                if room < 0:
                    break
                fitting.append(value)
        self.counts["verified_missing"] += len(fitting)
        self.counts["verified_unfit"] += len(missing) - len(fitting)
        if fitting:
            self.notes.append(
                f"verification: appended {len(fitting)} identifier(s) missing from the summary "
                "to DATA"
            )
        if len(fitting) < len(missing):
            self.notes.append(
                f"verification: {len(missing) - len(fitting)} identifier(s) missing from the "
                f"summary did not fit its size hint ({request.max_tokens} tokens), e.g. "
                f"{', '.join(missing[len(fitting):][:3])}"
            )
        return append_to_data(text, fitting) if fitting else text

    def _input_tokens(self, request: SummaryRequest) -> int:
        sent = request.sent
        if sent is not None:  # the whole request repeated, and its instruction
            return (self.counter.count_messages(sent.messages) + self.counter.count_tools(
                sent.tools) + self.counter.count_text(summary_instruction(request)))
        return self.counter.count_messages(request.messages) + self.counter.count_text(
            request.instructions
        )

    def _cache_true(self, request: SummaryRequest) -> SummaryRequest:
        """``request`` carrying the previous request (see the module docstring) when its
        span lies in what was followed, message for message, and the result is a valid
        request; else ``request`` itself."""
        sent = self._sent
        if sent is None or not request.messages or request.sent is not None:
            return request
        # Every message of the span in the view, in order (a policy may leave out of the
        # span messages inside its range: earlier summaries it keeps as written).
        positions = sent.positions_of(request.messages)
        if positions is None:
            return request
        cut = max(sent.length, positions[-1] + 1)
        while cut < len(sent.view) and sent.view[cut].role == "tool":
            cut += 1  # the rest of a tool call's results: the request must be whole
        messages = sent.view[:cut]
        if validate([*messages, Message("user", "?")]):
            return request  # the span ends inside a tool call's exchange, or worse
        return replace(request, sent=SentRequest(messages, tuple(positions), sent.tools))

    def _cache_get(self, key: str) -> str | None:
        text = self.cache.get(key) if self.cache is not None else None
        if text is not None:
            self.counts["cache_hits"] += 1
        return text

    def _cache_put(self, key: str, text: str) -> None:
        if self.cache is not None:
            self.cache.put(key, text)


@dataclass
class _Sent:
    """What `SummaryService.follow` keeps: the length of the previous request, the
    policy's input that starts with it, and the tools sent with it."""

    length: int
    view: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    _positions: dict[int, list[int]] | None = None

    def positions_of(self, span: Sequence[Message]) -> list[int] | None:
        """Where the messages of ``span`` (these very objects) are in the view, each after
        the one before (a message the view holds twice is taken where the order allows);
        ``None`` when one is not there."""
        if self._positions is None:
            self._positions = {}
            for i, m in enumerate(self.view):
                self._positions.setdefault(id(m), []).append(i)
        out: list[int] = []
        for message in span:
            after = out[-1] if out else -1
            found = next((i for i in self._positions.get(id(message), ()) if i > after), None)
            if found is None:
                return None
            out.append(found)
        return out


_MAX_OVERRUNNING = 4
"""Calls that overran their timeout and still run: a sync call cannot be stopped, so at
most this many are left running before further calls fail at once instead of piling up."""
_overrunning = 0
_overrunning_lock = threading.Lock()


def _within(method: Callable[[SummaryRequest], str], request: SummaryRequest,
            timeout: float) -> str:
    """``method(request)`` in a daemon thread, waited for ``timeout`` seconds.

    A daemon thread never blocks the interpreter's exit (a pool's worker would: the pool
    joins its threads at exit); one that overran is counted until it ends.
    """
    global _overrunning
    with _overrunning_lock:
        if _overrunning >= _MAX_OVERRUNNING:
            raise SummarizerError(f"{_overrunning} earlier summary calls are still running "
                                  "past their timeout; not starting another")
    outcome: list[Any] = []
    done = threading.Event()
    state = {"overran": False}

    def call() -> None:
        global _overrunning
        try:
            outcome.append(method(request))
        except BaseException as exc:  # handed to the caller below
            outcome.append(exc)
        finally:
            with _overrunning_lock:
                done.set()
                if state["overran"]:
                    _overrunning -= 1

    threading.Thread(target=call, name="contextfold-summary", daemon=True).start()
    if not done.wait(timeout):
        with _overrunning_lock:
            if not done.is_set():
                state["overran"] = True
                _overrunning += 1
                raise TimeoutError(f"the summarizer did not answer within {timeout} s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result  # type: ignore[no-any-return]


def _checked(text: object) -> _Outcome:
    if not isinstance(text, str):
        return _Outcome(None, SummarizerError(f"summarizer returned {type(text).__name__}"))
    if not text.strip():
        return _Outcome(None, SummarizerError("summarizer returned an empty summary"))
    return _Outcome(text)


def _reserve(request: SummaryRequest, window: int | None) -> int:
    """What a call takes of the window besides the input: the prompt's wrapping and room
    for the summary itself (at most a quarter and a tenth of a small window)."""
    reply = request.max_tokens or _DEFAULT_SUMMARY_TOKENS
    if window is None:
        return _PROMPT_OVERHEAD + reply
    return min(_PROMPT_OVERHEAD, window // 10) + min(reply, window // 4)


def _window(summarizer: AnySummarizer, request: SummaryRequest) -> int | None:
    """The summarizer's input window: the request's ``max_input_tokens`` or the summarizer's."""
    for value in (getattr(request, "max_input_tokens", None),
                  getattr(summarizer, "max_input_tokens", None)):
        if isinstance(value, int) and value > 0:
            return value
    return None


async def _settled(effect: _Settled) -> bool:
    """``effect``'s event set within its timeout, waited for without blocking the loop."""
    deadline = time.monotonic() + effect.timeout
    while not effect.event.is_set():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True
