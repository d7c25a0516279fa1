"""What every LangChain hook shares: one Compactor per conversation, conversion with
memory, the compacted view, calibration from usage, and the overflow retry.

Conversion is memoised per conversation by object identity: an agent loop sends the same
message objects call after call, so only new messages are converted, and messages the
policy left alone go back to the model as the very objects the caller passed.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from contextfold import (
    Budget,
    CompactionError,
    CompactionResult,
    Compactor,
    ConfigurationError,
    Message,
    NoProgressError,
    Policy,
    TokenCounter,
)

from ._convert import message_from_core, message_to_core
from ._overflow import is_context_overflow, overflow_figures

__all__ = ["DEFAULT_CONVERSATION", "MAX_OVERFLOW_RETRIES", "Conversation", "Engine", "View"]

DEFAULT_CONVERSATION = "default"
"""The conversation key when the config names none."""

MAX_OVERFLOW_RETRIES = 2
"""Forced compactions after a context-overflow error before the error is raised."""

IDLE_TEXT = "[contextfold: conversation idle: {reason}. Waiting for a new user message.]"
"""The reply that ends an agent loop when the conversation went idle (seed 001)."""

T = TypeVar("T")


@dataclass(frozen=True)
class View:
    """The compacted input of one model call."""

    messages: list[BaseMessage]
    """What the model receives."""
    result: CompactionResult
    """The core result with its report."""

    @property
    def changed(self) -> bool:
        """True when the model receives something other than the full input."""
        r = self.result.report
        return r.changed or r.messages_after != r.messages_before


class Conversation:
    """One conversation: its Compactor and the conversion memo."""

    def __init__(self, key: str, compactor: Compactor) -> None:
        self.key = key
        self.compactor = compactor
        self._lc: list[BaseMessage] = []  # the last input, as given
        self._core: list[Message] = []  # its conversion
        self._back: dict[int, BaseMessage] = {}  # id(core) -> LangChain, for self._core only
        self._out_core: list[Message] = []  # the last view, both ways
        self._out_lc: list[BaseMessage] = []
        self._stored: set[str] | None = None
        self.lock = threading.Lock()
        """Held while a sync call compacts (the Compactor serves one call at a time)."""
        self._alocks: dict[int, asyncio.Lock] = {}
        self.fresh = 0
        """Index of the first message of the last input that was converted anew."""

    def alock(self) -> asyncio.Lock:
        """The lock async calls hold while they compact (one per event loop)."""
        loop = id(asyncio.get_running_loop())
        lock = self._alocks.get(loop)
        if lock is None:
            lock = self._alocks[loop] = asyncio.Lock()
        return lock

    def to_core(self, messages: Sequence[BaseMessage]) -> list[Message]:
        """Core messages for ``messages``; the previous input's conversions are reused.

        An agent loop passes the previous input plus new messages: the prefix is checked
        in one C-level comparison (identity first) and only the new messages are converted.
        Messages are treated as immutable, as LangGraph's state does.
        """
        messages = list(messages)
        n = len(self._lc)
        if n and len(messages) >= n and messages[:n] == self._lc:
            new = [message_to_core(m, index=n + i) for i, m in enumerate(messages[n:])]
            self._back.update(zip(map(id, new), messages[n:], strict=True))
            self._core.extend(new)
            self.fresh = n
        else:
            known = {id(lc): core for lc, core in zip(self._lc, self._core, strict=True)}
            self._core = [known.get(id(m)) or message_to_core(m, index=i)
                          for i, m in enumerate(messages)]
            self._back = dict(zip(map(id, self._core), messages, strict=True))
            self.fresh = 0
        self._lc = messages
        return list(self._core)

    def persist(self, store: Any, messages: Sequence[Message]) -> None:
        """Append to ``store`` the messages it does not hold yet (by message id)."""
        if self._stored is None:
            self._stored = {m.id for m in store.load(self.key)}
        new = [m for m in messages if m.id not in self._stored]
        if new:
            store.append(self.key, new)
            self._stored.update(m.id for m in new)

    def from_core(self, messages: Sequence[Message]) -> list[BaseMessage]:
        """LangChain messages for the view: the caller's own objects where unchanged."""
        out = list(messages)
        k = len(self._out_core)
        if k and len(out) >= k and out[:k] == self._out_core:
            lc = self._out_lc + [self._original(m) for m in out[k:]]
        else:
            lc = [self._original(m) for m in out]
        self._out_core, self._out_lc = out, lc
        return list(lc)

    def _original(self, message: Message) -> BaseMessage:
        original = self._back.get(id(message))
        return original if original is not None else message_from_core(message)

    def observe(self, reply: BaseMessage) -> None:
        """Calibrate from the reply's ``usage_metadata`` and record a real response.

        The nudge counter is left to the policy, which resets it when a real prompt
        arrives (seed 001: three nudged iterations go idle even when the model answers
        them); ``record_response`` is only called outside a nudge streak.
        """
        usage = getattr(reply, "usage_metadata", None)
        if usage and usage.get("input_tokens"):
            self.compactor.observe_usage(
                input_tokens=int(usage["input_tokens"]),
                output_tokens=int(usage.get("output_tokens") or 0) or None,
            )
        if not self.compactor.state.encouragement_count:
            self.compactor.record_response()

    def observe_overflow(self, error: BaseException) -> None:
        """Calibrate from the token count an overflow error states, when it states one."""
        used, _ = overflow_figures(error)
        if used:
            self.compactor.observe_usage(input_tokens=used)

    @property
    def idle_reason(self) -> str | None:
        """Why the conversation is idle, or ``None`` while it is active."""
        state = getattr(self.compactor, "state", None)
        if state is None or not state.idle:
            return None
        return str(state.idle_reason or "no user prompt after repeated nudges")


class Engine:
    """The shared machinery: settings, a bounded map of conversations, the retry loop.

    Args:
        policy: the compaction policy.
        budget: the token budget.
        counter: how to count; default ``counter_for_model(budget.model)``.
        summarizer: makes summaries (sync and/or async).
        store: the history store, when one is configured.
        max_conversations: conversations kept in memory (least recently used dropped).
        persist: append every message a call sees to ``store`` (once, by message id).
    """

    def __init__(
        self,
        *,
        policy: Policy,
        budget: Budget,
        counter: TokenCounter | None = None,
        summarizer: Any = None,
        store: Any = None,
        max_conversations: int = 1024,
        persist: bool = True,
    ) -> None:
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"budget must be a contextfold.Budget, got {budget!r}")
        if not callable(getattr(policy, "run", None)):
            raise ConfigurationError(f"policy must be a contextfold policy, got {policy!r}")
        if max_conversations < 1:
            raise ConfigurationError(f"max_conversations must be >= 1, got {max_conversations}")
        self.policy = policy
        self.budget = budget
        self.counter = counter
        self.summarizer = summarizer
        self.store = store
        self.max_conversations = max_conversations
        self.persist = persist
        self._conversations: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()
        self._tools_memo: tuple[tuple[int, ...], list[Any], list[dict[str, Any]]] | None = None

    def new_compactor(self, key: str) -> Compactor:
        """A Compactor for conversation ``key``."""
        return Compactor(
            policy=self.policy, budget=self.budget, counter=self.counter,
            summarizer=self.summarizer, store=self.store, conversation_id=key,
        )

    def conversation(self, key: str | None = None) -> Conversation:
        """The conversation for ``key`` (created on first use)."""
        key = key or DEFAULT_CONVERSATION
        with self._lock:
            conv = self._conversations.get(key)
            if conv is None:
                conv = self._conversations[key] = Conversation(key, self.new_compactor(key))
                while len(self._conversations) > self.max_conversations:
                    self._conversations.popitem(last=False)
            else:
                self._conversations.move_to_end(key)
            return conv

    def tool_dicts(self, tools: Sequence[Any] | None) -> list[dict[str, Any]]:
        """Tool definitions as OpenAI tool dicts, for counting. The same tools give the
        same list object, so the Compactor counts them once."""
        if not tools:
            return []
        key = tuple(map(id, tools))
        hit = self._tools_memo
        if hit is not None and hit[0] == key:  # hit[1] holds the tools, so ids are theirs
            return hit[2]
        from langchain_core.utils.function_calling import convert_to_openai_tool

        converted = [dict(t) if isinstance(t, Mapping) else convert_to_openai_tool(t)
                     for t in tools]
        self._tools_memo = (key, list(tools), converted)
        return converted

    # -- one call ----------------------------------------------------------------------

    def view(
        self, conv: Conversation, messages: Sequence[BaseMessage], tools: list[dict[str, Any]],
        *, force: bool = False,
    ) -> View:
        """Compact ``messages`` for one model call (and keep them in the store)."""
        with conv.lock:
            core = self._core(conv, messages)
            result = conv.compactor.compact(core, force=force, tools=tools or None)
            return View(conv.from_core(result.messages), result)

    async def aview(
        self, conv: Conversation, messages: Sequence[BaseMessage], tools: list[dict[str, Any]],
        *, force: bool = False,
    ) -> View:
        """The async form of :meth:`view`."""
        async with conv.alock():
            core = self._core(conv, messages)
            result = await conv.compactor.acompact(core, force=force, tools=tools or None)
            return View(conv.from_core(result.messages), result)

    def _core(self, conv: Conversation, messages: Sequence[BaseMessage]) -> list[Message]:
        core = conv.to_core(messages)
        if self.persist and self.store is not None:
            conv.persist(self.store, core[conv.fresh:])
        return core

    def call(
        self, conv: Conversation, messages: Sequence[BaseMessage], tools: list[dict[str, Any]],
        send: Callable[[View], T], reply_of: Callable[[T], BaseMessage | None],
    ) -> T:
        """Compact, send, and on a context overflow compact with force and send again
        (at most :data:`MAX_OVERFLOW_RETRIES` times)."""
        overflow: BaseException | None = None
        for attempt in range(MAX_OVERFLOW_RETRIES + 1):
            try:
                view = self.view(conv, messages, tools, force=overflow is not None)
            except CompactionError as exc:
                raise _stuck(exc, overflow) from overflow
            try:
                out = send(view)
            except Exception as exc:
                if attempt == MAX_OVERFLOW_RETRIES or not is_context_overflow(exc):
                    raise
                overflow = _overflowed(conv, exc, overflow)
                continue
            return _delivered(conv, out, reply_of)
        raise AssertionError("unreachable")  # pragma: no cover

    async def acall(
        self, conv: Conversation, messages: Sequence[BaseMessage], tools: list[dict[str, Any]],
        send: Callable[[View], Awaitable[T]], reply_of: Callable[[T], BaseMessage | None],
    ) -> T:
        """The async form of :meth:`call`."""
        overflow: BaseException | None = None
        for attempt in range(MAX_OVERFLOW_RETRIES + 1):
            try:
                view = await self.aview(conv, messages, tools, force=overflow is not None)
            except CompactionError as exc:
                raise _stuck(exc, overflow) from overflow
            try:
                out = await send(view)
            except Exception as exc:
                if attempt == MAX_OVERFLOW_RETRIES or not is_context_overflow(exc):
                    raise
                overflow = _overflowed(conv, exc, overflow)
                continue
            return _delivered(conv, out, reply_of)
        raise AssertionError("unreachable")  # pragma: no cover


def _overflowed(
    conv: Conversation, error: BaseException, previous: BaseException | None
) -> BaseException:
    """Record a context overflow before the forced retry; the first one calibrates (later
    ones would clear the no-progress guard)."""
    if previous is None:
        conv.observe_overflow(error)
    return error


def _delivered(conv: Conversation, out: T, reply_of: Callable[[T], BaseMessage | None]) -> T:
    """A successful call: calibrate and count the reply, return the output."""
    reply = reply_of(out)
    if reply is not None:
        conv.observe(reply)
    return out


def _stuck(error: CompactionError, overflow: BaseException | None) -> BaseException:
    """The error to raise when a forced compaction after an overflow cannot shrink."""
    if overflow is None or not isinstance(error, NoProgressError):
        return error
    return NoProgressError(
        f"the model rejected the input as too long ({overflow}) and a forced compaction "
        f"could not shrink it further ({error})"
    )


def idle_reply(reason: str) -> AIMessage:
    """The reply that ends an agent loop: no tool calls, says why."""
    return AIMessage(IDLE_TEXT.format(reason=reason), response_metadata={"contextfold_idle": True})


def conversation_key(config: RunnableConfig | None) -> str:
    """The conversation key of a run: ``thread_id``, else ``session_id``, else the default."""
    configurable = (config or {}).get("configurable") or {}
    for name in ("thread_id", "session_id", "conversation_id"):
        value = configurable.get(name)
        if value is not None and value != "":
            return str(value)
    return DEFAULT_CONVERSATION
