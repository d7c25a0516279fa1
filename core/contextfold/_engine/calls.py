"""The model-call loop: one conversation's model calls, end to end, written once.

A framework adapter supplies only conversion (its message type to and from core messages)
and the send; everything else about a call happens here, the same for every framework::

    convert (memoised: only new messages)  ->  persist new messages (stable identity)
      ->  compact (every fixed cost counted: tools and extra prompt text)
      ->  keep the counts the compaction made with the stored messages
      ->  idle? answer without calling the model
      ->  send  --context overflow-->  learn the stated limit, lower the budget for this
                                       and later calls, compact below it, send once more;
                                       overflowing again raises ContextOverflowError
      ->  calibrate from the reported usage, reset the nudge counter

The steps are one generator ([`CallLoop.flow`][contextfold.integration.CallLoop.flow]) that yields
two kinds of effects, ``Compact`` and ``Send``; a sync and an async driver
([`CallLoop.call`][contextfold.integration.CallLoop.call],
[`CallLoop.acall`][contextfold.integration.CallLoop.acall]) perform them, so both calling styles
share every decision (the sans-IO shape of httpx's auth flows).

[`Conversations`][contextfold.integration.Conversations] keeps one loop per conversation, least
recently used dropped first. Conversations are told apart only by an explicit key: the adapters give
a call that names no conversation a loop of its own for its run (never one found by its content,
which two users who open alike would share).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypeVar, Union

from .._config import Ge, check
from .._contract.report import CompactionResult
from .._counting.budget import Budget
from .._counting.reported import is_token_count
from .._messages.model import Message, _with_id
from .._messages.structure import SYSTEM_ROLES
from .._policies.provider_native import request_fields
from .._provider_errors import Overflow, overflow_of
from .._stores.protocols import HistoryStore, StateStore
from ..errors import CompactionError, ConfigurationError, ContextOverflowError, StoreError
from .compactor import Compactor
from .decision import Tools
from .kept_counts import CountKeeper

__all__ = [
    "CallLoop",
    "Conversations",
    "Usage",
    "View",
    "opening_key",
    "stable_id",
    "with_stable_id",
]

F = TypeVar("F")  # the framework's message type
R = TypeVar("R")  # what the framework's send returns

logger = logging.getLogger("contextfold")

SAFETY_MARGIN = 0.97
"""Share of a provider's stated limit a recompaction aims below (counters differ a little)."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What the provider reported about one call."""

    input_tokens: int | None
    """Input (prompt) tokens the provider billed, when reported."""
    output_tokens: int | None = None
    """Output (completion) tokens, when reported."""


@dataclass(frozen=True)
class View(Generic[F]):
    """What one model call sends: the framework's messages and the compaction behind them."""

    messages: list[F]
    """The compacted input, as framework messages (the caller's own objects where unchanged)."""
    result: CompactionResult
    """The core result with its report."""
    retry: bool
    """True for the one send after a context overflow."""
    request: Mapping[str, Any] = field(default_factory=dict)
    """Provider request fields the policy sends with every call (``betas``,
    ``context_management``...: [`request_fields`][contextfold.providers.request_fields]); the
    adapter adds them to the call."""

    @property
    def changed(self) -> bool:
        """True when the model receives something other than the full input."""
        r = self.result.report
        return r.changed or r.messages_after != r.messages_before


@dataclass(frozen=True, slots=True)
class _Compact:
    messages: list[Message]
    force: bool


@dataclass(frozen=True, slots=True)
class _Send:
    result: CompactionResult
    retry: bool


@dataclass(frozen=True, slots=True)
class _Idle:
    reason: str
    result: CompactionResult


_Effect = Union[_Compact, _Send]


def stable_id(position: int, message: Message) -> str:
    """An id for a message that came without one: the same message at the same position of
    a conversation gets the same id in every process, so a restarted adapter recognises
    what its store already holds."""
    digest = hashlib.blake2b(f"{position}\0{message.fingerprint}".encode(), digest_size=12)
    return "cf-" + digest.hexdigest()


def with_stable_id(position: int, message: Message) -> Message:
    """``message`` with the id [`stable_id`][contextfold.integration.stable_id] gives it at
    ``position`` (a copy, made without building and checking the message again)."""
    return _with_id(message, stable_id(position, message))


def opening_key(messages: Sequence[Message]) -> str:
    """A key from a conversation's opening system messages and its first user message,
    when one is among ``messages`` (pass the first few).

    Calls that continue the same conversation share it, because its opening never changes
    as it grows. It is not an identity: two users who open with the same prompt and the
    same first message share it, so it must never select state that one user could see
    (the adapters key such calls by their run instead).
    """
    h = hashlib.blake2b(digest_size=8)
    for m in messages:
        if m.role in SYSTEM_ROLES or m.role == "user":
            h.update(m.fingerprint.encode())
        if m.role == "user":
            break
    return "auto-" + h.hexdigest()


class CallLoop(Generic[F]):
    """One conversation's model calls (see the module docstring).

    Args:
        compactor: the conversation's Compactor (policy, budget, summarizer, store).
        to_core: converts one framework message at a position of the conversation. Give a
            message that has no id of its own [`stable_id`][contextfold.integration.stable_id].
        from_core: converts one core message back, for messages the policy made or changed.
        store: where every message the conversation sees is appended once (by id); default
            the compactor's store. ``persist=False`` turns persistence off. The token counts
            the compactor's counter makes of stored messages are kept there too, and a
            resumed conversation (its messages converted again, same ids) reuses the counts
            kept for them ([`CountKeeper`][contextfold.integration.CountKeeper]).
        overflow_classes: the framework's own context-overflow exception classes.

    Calls of one loop are serialised (a lock for sync calls; async callers of one loop
    must not overlap, which an agent loop never does).
    """

    def __init__(
        self,
        compactor: Compactor,
        *,
        to_core: Callable[[F, int], Message],
        from_core: Callable[[Message], F],
        store: HistoryStore | None = None,
        persist: bool = True,
        overflow_classes: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.compactor = compactor
        self.key = compactor.conversation_id or "default"
        self._to_core = to_core
        self._from_core = from_core
        self.store = store if store is not None else compactor.store
        self.persist = persist
        self.overflow_classes = overflow_classes
        self.lock = threading.Lock()
        self._in: list[F] = []  # the last input, as given
        self._core: list[Message] = []  # its conversion
        self._back: dict[int, F] = {}  # id(core) -> framework message, for self._core only
        self._out_core: list[Message] = []  # the last view, both ways
        self._out: list[F] = []
        self._stored: set[str] | None = None
        # self._core[:self._unstored] is in the store; the rest is stored by the next call
        # (a failed append leaves it there, so no message of a failed call is ever skipped)
        self._unstored = 0
        self._counts: CountKeeper | None = (
            CountKeeper(self.store, self.key, compactor.counter)
            if persist and self.store is not None else None)
        self._usage_logged = False  # an unusable usage report was logged for this conversation
        # the compaction state beside the messages: written after each call, read back when
        # another process (or worker) wrote a version this loop has not seen
        self._states: StateStore | None = (
            self.store if persist and isinstance(self.store, StateStore) else None)
        self._version = 0  # of the state this loop's compactor holds (-1: unknown)

    # -- state the adapters read ---------------------------------------------------------

    @property
    def idle_reason(self) -> str | None:
        """Why the conversation is idle, or ``None`` while it is active."""
        state = self.compactor.state
        if not state.idle:
            return None
        return str(state.idle_reason or "no user prompt after repeated nudges")

    @property
    def budget(self) -> Budget:
        """The budget calls are compacted to (lowered when a provider stated a smaller one)."""
        return self.compactor.budget

    # -- the flow --------------------------------------------------------------------------

    def flow(self, messages: Sequence[F]) -> Generator[_Effect, Any, _Idle | CompactionResult]:
        """The steps of one call as effects; returns the last compaction's result (or an
        idle marker). The driver answers ``_Compact`` with a ``CompactionResult`` and
        ``_Send`` with the send's return value, or throws the send's exception in."""
        core = self._take_up(messages)
        result: CompactionResult = yield _Compact(core, False)
        reason = self.idle_reason
        if reason is not None:
            return _Idle(reason, result)
        try:
            yield _Send(result, False)
            return result
        except Exception as error:
            overflow = overflow_of(error, self.overflow_classes)
            if overflow is None:
                raise
            first = error
        self._lower_budget(overflow, result)
        try:
            result = yield _Compact(core, True)
        except CompactionError as stuck:  # no progress, or not even the minimum fits
            raise ContextOverflowError(
                f"the provider rejected the input as too long ({first}) and compaction "
                f"cannot shrink it below the limit ({stuck})", provider_error=first,
            ) from first
        try:
            yield _Send(result, True)
        except Exception as error:
            if overflow_of(error, self.overflow_classes) is None:
                raise
            raise ContextOverflowError(
                f"the provider rejected the input as too long twice, the second time after "
                f"compacting to {result.report.tokens_after} tokens under a budget of "
                f"{self.budget.input_budget}: {error}", provider_error=error,
            ) from error
        return result

    # -- drivers -----------------------------------------------------------------------------

    def call(
        self, messages: Sequence[F], send: Callable[[View[F]], R], *,
        usage: Callable[[R], Usage | None] | None = None, tools: Tools | None = None,
        extra_tokens: int = 0, idle: Callable[[str, View[F]], R] | None = None,
    ) -> R:
        """One model call, synchronously.

        Args:
            messages: the whole conversation as the framework holds it.
            send: calls the model with the view's messages; raises the provider's error.
            usage: reads the reply's usage (``None`` for a stream: call
                [`delivered`][contextfold.integration.CallLoop.delivered] when it ends).
            tools: the tool definitions sent with the call (counted).
            extra_tokens: other prompt text the framework adds that is not in ``messages``
                (retrieved context, a structured-output schema).
            idle: makes the reply of an idle conversation (no model call); default raises.
        """
        with self.lock:
            flow = self.flow(messages)
            value: Any = None
            error: BaseException | None = None
            sent: R | None = None
            while True:
                try:
                    effect = flow.throw(error) if error is not None else flow.send(value)
                except StopIteration as stop:
                    self._keep_counts(None)  # what the send counted (its report's figures)
                    return self._finish(stop.value, sent, usage, idle)
                value, error = None, None
                try:
                    if isinstance(effect, _Compact):
                        value = self.compactor.compact(
                            effect.messages, force=effect.force, tools=tools,
                            extra_tokens=extra_tokens,
                        )
                        self._keep_counts(value)
                    else:
                        sent = send(self._view(effect))
                except Exception as exc:
                    error = exc

    async def acall(
        self, messages: Sequence[F], send: Callable[[View[F]], Awaitable[R]], *,
        usage: Callable[[R], Usage | None] | None = None, tools: Tools | None = None,
        extra_tokens: int = 0,
        idle: Callable[[str, View[F]], R | Awaitable[R]] | None = None,
    ) -> R:
        """The async form of [`call`][contextfold.integration.CallLoop.call] (summaries and the send
        are awaited; so is the idle reply when ``idle`` returns an awaitable)."""
        flow = self.flow(messages)
        value: Any = None
        error: BaseException | None = None
        sent: R | None = None
        while True:
            try:
                effect = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration as stop:
                self._keep_counts(None)  # what the send counted (its report's figures)
                outcome = stop.value
                if isinstance(outcome, _Idle):
                    self._save()
                if isinstance(outcome, _Idle) and idle is not None:
                    reply = idle(outcome.reason, self._idle_view(outcome))
                    return await reply if inspect.isawaitable(reply) else reply
                return self._finish(outcome, sent, usage, None)
            value, error = None, None
            try:
                if isinstance(effect, _Compact):
                    value = await self.compactor.acompact(
                        effect.messages, force=effect.force, tools=tools,
                        extra_tokens=extra_tokens,
                    )
                    self._keep_counts(value)
                else:
                    sent = await send(self._view(effect))
            except Exception as exc:
                error = exc

    def view(
        self, messages: Sequence[F], *, tools: Tools | None = None, extra_tokens: int = 0,
    ) -> View[F]:
        """Only the compaction step of a call, for hooks that cannot send (a graph node that
        hands the messages to the model node). No retry is possible there."""
        with self.lock:
            core = self._take_up(messages)
            result = self.compactor.compact(core, tools=tools, extra_tokens=extra_tokens,
                                            complete=False)
            self._keep_counts(result)
            self._save()
            return View(self.from_core(result.messages), result, False, self._request())

    async def aview(
        self, messages: Sequence[F], *, tools: Tools | None = None, extra_tokens: int = 0,
    ) -> View[F]:
        """The async form of [`view`][contextfold.integration.CallLoop.view]."""
        core = self._take_up(messages)
        result = await self.compactor.acompact(core, tools=tools, extra_tokens=extra_tokens,
                                               complete=False)
        self._keep_counts(result)
        self._save()
        return View(self.from_core(result.messages), result, False, self._request())

    @property
    def last_input(self) -> list[F]:
        """The messages of the last call (or [`record`][contextfold.integration.CallLoop.record]),
        as the framework gave them."""
        return list(self._in)

    def record(self, messages: Sequence[F]) -> None:
        """The conversation went on without a model call (the agent's final answer, which
        no later call of this run will carry): store its new messages, compacting nothing.

        ``messages`` is the whole conversation, as a call would pass it.
        """
        with self.lock:
            if self.persist and self.store is not None:
                self._take_up(messages)
                self._keep_counts(None)

    def delivered(self, usage: Usage | None) -> None:
        """A reply arrived: calibrate from its usage and reset the nudge counter.

        The counter is left to the policy during a nudge streak (three nudged iterations go
        idle even when the model answers them); otherwise a reply resets it.
        """
        figures = self._calibration(usage)
        if figures is not None:
            self.compactor.observe_usage(input_tokens=figures[0], output_tokens=figures[1])
        if not self.compactor.state.encouragement_count:
            self.compactor.record_response()
        self._save()

    def _calibration(self, usage: Usage | None) -> tuple[int, int | None] | None:
        """The input and output tokens of ``usage`` calibration takes, or ``None``.

        The reply is paid for and reaches the caller whatever its usage says: a count that
        is not a whole number >= 0 (-1, NaN, 1.5, a bool) is left out of calibration, and
        logged once per conversation; 0 or ``None`` input tokens mean nothing was reported.
        """
        if usage is None or usage.input_tokens is None or usage.input_tokens == 0:
            return None
        given, output = usage.input_tokens, usage.output_tokens
        if not is_token_count(given):
            self._unusable(f"input_tokens={given!r}")
            return None
        if output is not None and not is_token_count(output):
            self._unusable(f"output_tokens={output!r}")
            output = None
        return given, output or None

    def _read_usage(self, read: Callable[[R], Usage | None], reply: R) -> Usage | None:
        """``read(reply)``; ``None`` when the reader fails on what the reply reports."""
        try:
            return read(reply)
        except Exception as exc:  # the reply is paid for: never lost to its usage report
            self._unusable(f"{type(exc).__name__}: {exc}")
            return None

    def _unusable(self, what: str) -> None:
        log = logger.debug if self._usage_logged else logger.warning
        self._usage_logged = True
        log("contextfold: conversation %r: ignored a usage report calibration cannot take "
            "(%s); the reply is returned as it came", self.key, what)

    # -- conversion and persistence --------------------------------------------------------

    def to_core(self, messages: Sequence[F]) -> list[Message]:
        """Core messages for ``messages``; the previous input's conversions are reused, and
        new messages are appended to the store.

        An agent loop passes the previous input plus new messages: the prefix is checked in
        one C-level comparison (identity first) and only the new messages are converted.
        Framework messages are treated as immutable, as LangGraph's state does.
        """
        given = list(messages)
        n = len(self._in)
        converted: list[Message] | None = None  # converted anew, when not an extension
        if n and len(given) >= n and given[:n] == self._in:
            new = [self._to_core(m, n + i) for i, m in enumerate(given[n:])]
            self._back.update(zip(map(id, new), given[n:], strict=True))
            self._core.extend(new)
            fresh = min(n, self._unstored)
        else:
            known = {id(f): c for f, c in zip(self._in, self._core, strict=True)}
            converted = []
            self._core = [known.get(id(m)) or _noted(converted, self._to_core(m, i))
                          for i, m in enumerate(given)]
            self._back = dict(zip(map(id, self._core), given, strict=True))
            fresh = 0
        self._in = given
        if self.persist and self.store is not None:
            self._unstored = min(self._unstored, fresh)
            self._store_new(self._core[fresh:], converted)  # raises StoreError on failure
            self._unstored = len(self._core)
        return list(self._core)

    def from_core(self, messages: Sequence[Message]) -> list[F]:
        """Framework messages for a compacted view: the caller's own objects where unchanged."""
        out = list(messages)
        k = len(self._out_core)
        if k and len(out) >= k and out[:k] == self._out_core:
            converted = self._out + [self._original(m) for m in out[k:]]
        else:
            converted = [self._original(m) for m in out]
        self._out_core, self._out = out, converted
        return list(converted)

    def _original(self, message: Message) -> F:
        original = self._back.get(id(message))
        return original if original is not None else self._from_core(message)

    def _store_new(self, messages: Sequence[Message],
                   converted: Sequence[Message] | None = None) -> None:
        """Append the messages the store does not hold yet (by id).

        The first time, and when an input that does not extend the last one brought
        messages the store holds but this loop had not converted, the counts the store kept
        for those are reused. The new messages of an input that extends the last one are
        counted first (the compaction counts them anyway), so their counts are kept in the
        same transaction; others are counted only if the compaction needs it, and kept then.
        """
        assert self.store is not None and self._counts is not None
        counts = self._counts
        if self._stored is None:
            self._stored = counts.resume(messages)
        elif converted is not None and any(m.id in self._stored for m in converted):
            self._stored |= counts.resume(converted)
        new = [m for m in messages if m.id not in self._stored]
        if new:
            if converted is None:
                for message in new:
                    self.compactor.counter.count_message(message)
            self.store.append(self.key, new)
            self._stored.update(m.id for m in new)
        if converted is not None:  # a first or replaced input: every message is stored now
            counts.forget()
            counts.track(messages)
        else:
            counts.track(new)

    def _keep_counts(self, result: CompactionResult | None) -> None:
        """Keep the counts made of stored messages with them: after a compaction (one that
        ran no policy counted only the newest ones), and after the send (an adapter that
        reads the report's figures counts the messages they need; the newest are looked
        at, and all of them when all were counted)."""
        if self._counts is not None:
            self._counts.flush(full=result is not None and result.report.method != "none")

    def _take_up(self, messages: Sequence[F]) -> list[Message]:
        """[`to_core`][contextfold.integration.CallLoop.to_core], after taking up what another
        process (a restart, another worker) did since this loop last served the conversation: the
        messages it stored are read again, so none is stored twice, and its compaction state is
        resumed."""
        held = None if self._states is None else self._states.get_state(self.key)
        if held is None or held[0] == self._version:
            return self.to_core(messages)
        self._stored = None  # read again from the store before storing anything
        core = self.to_core(messages)
        self._version = held[0]
        self.compactor.resume_state(held[1], core)
        return core

    def _save(self) -> None:
        """Write the state the next call builds on over the version this loop read. When
        another writer came first, its state is read at the next call. The reply is paid
        for: a store that fails here is logged, not raised."""
        if self._states is None:
            return
        after = max(self._version, 0)
        try:
            written = self._states.put_state(self.key, self.compactor.saved_state(),
                                             after=after)
        except (StoreError, ValueError) as exc:  # ValueError: content the codec refuses
            logger.warning("contextfold: conversation %r: compaction state not kept (%s)",
                           self.key, exc)
            written = False
        self._version = after + 1 if written else -1

    # -- helpers -----------------------------------------------------------------------------

    def _idle_view(self, outcome: _Idle) -> View[F]:
        return View(self.from_core(outcome.result.messages), outcome.result, False,
                    self._request())

    def _view(self, effect: _Send) -> View[F]:
        return View(self.from_core(effect.result.messages), effect.result, effect.retry,
                    self._request())

    def _request(self) -> dict[str, Any]:
        return request_fields(self.compactor.policy)

    def _finish(
        self, outcome: _Idle | CompactionResult, sent: R | None,
        usage: Callable[[R], Usage | None] | None, idle: Callable[[str, View[F]], R] | None,
    ) -> R:
        if isinstance(outcome, _Idle):
            self._save()
            if idle is None:
                raise ConfigurationError(f"conversation {self.key!r} is idle: {outcome.reason}")
            return idle(outcome.reason, self._idle_view(outcome))
        assert sent is not None  # the flow ends after a successful send
        if usage is not None:
            self.delivered(self._read_usage(usage, sent))  # saves the state too
        else:
            self._save()
        return sent

    def _lower_budget(self, overflow: Overflow, sent: CompactionResult) -> None:
        """Lower the conversation's input budget below what the provider accepts.

        The provider's limit is in its own tokens; ours may count differently, so the limit
        is scaled by how the provider's count of the rejected input compares with ours.
        Without a stated limit, the input that was rejected is the ceiling.
        """
        ours = max(sent.report.tokens_after, 1)
        ratio = max(1.0, (overflow.prompt_tokens or ours) / ours)
        limit = overflow.input_limit
        if limit is not None and overflow.completion_tokens is None:
            limit -= self.budget.output_reserve
        ceiling = limit if limit is not None else min(ours, overflow.prompt_tokens or ours)
        self.compactor.limit_input(max(1, int(ceiling / ratio * SAFETY_MARGIN)))


def _noted(into: list[Message], message: Message) -> Message:
    into.append(message)
    return message


class Conversations(Generic[F]):
    """One [`CallLoop`][contextfold.integration.CallLoop] per conversation key, the least recently
    used dropped first.

    Args:
        make: builds the loop of a new key.
        max_conversations: loops kept in memory.
    """

    def __init__(self, make: Callable[[str], CallLoop[F]], max_conversations: int = 1024) -> None:
        check("Conversations", "max_conversations", max_conversations, Annotated[int, Ge(1)])
        self._make = make
        self.max_conversations = max_conversations
        self._loops: OrderedDict[str, CallLoop[F]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> CallLoop[F]:
        """The loop of ``key``, created on first use."""
        with self._lock:
            loop = self._loops.get(key)
            if loop is None:
                loop = self._loops[key] = self._make(key)
                while len(self._loops) > self.max_conversations:
                    self._loops.popitem(last=False)
            else:
                self._loops.move_to_end(key)
            return loop

    def drop(self, key: str) -> CallLoop[F] | None:
        """Forget the loop of ``key`` (its run ended); the loop, or ``None`` if none."""
        with self._lock:
            return self._loops.pop(key, None)

    def loops(self) -> list[CallLoop[F]]:
        """The loops kept, least recently used first (their order is left as it is)."""
        with self._lock:
            return list(self._loops.values())

    def keys(self) -> list[str]:
        """The conversation keys, least recently used first."""
        with self._lock:
            return list(self._loops)

    def __contains__(self, key: object) -> bool:
        return key in self._loops

    def __len__(self) -> int:
        return len(self._loops)

