"""``CompactingLLM``: an LLM wrapper that bounds every model call, even inside one agent run.

LlamaIndex agents keep a run's tool calls and results in a scratchpad that bypasses
memory, so memory alone cannot bound a long run. Wrapping the LLM can: every ``chat`` /
``achat`` / ``stream_chat`` / ``astream_chat`` (and so every ``*_chat_with_tools``, which
LlamaIndex routes through them) passes its messages through a Compactor first, with the
tool definitions counted. The threshold design's three layers:

1. the estimate decides before the call (incremental: a step counts only new messages);
2. the provider's reported usage (``prompt_tokens``) calibrates the next decision;
3. a context-overflow error lowers the budget to the limit it states, compacts below it and
   retries once (the core's call loop, shared with the LangChain adapter).

Tool calling is untouched: ``metadata`` (``is_function_calling_model``...),
``_prepare_chat_with_tools``, ``get_tool_calls_from_response`` and the response checks are
the wrapped LLM's, so ``FunctionAgent`` accepts the wrapper.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny
from llama_index.core.llms import LLM
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.integration import (
    AnySummarizer,
    CallLoop,
    Conversations,
    Usage,
    View,
    is_context_overflow,
)
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._budget import budget_of
from ._convert import message_to_llama_index, stably_identified
from ._instrumentation import forward_event
from ._tools import tool_definitions

__all__ = ["IDLE_TEXT", "CompactingLLM", "is_context_overflow", "reported_usage"]

Loop = CallLoop[ChatMessage]

IDLE_TEXT = "[contextfold: conversation idle: {reason}. Waiting for a new user message.]"
"""The reply of an idle conversation, made without calling the model."""

RUN_PREFIX = "run-"
"""Key prefix of the loop of a call that names no conversation (a random id follows)."""


def to_core(message: ChatMessage, position: int) -> cf.Message:
    """One message at a position of the conversation, with a stable id (``ChatMessage`` has
    none of its own)."""
    return stably_identified(message, position)


def reported_usage(response: ChatResponse) -> tuple[int | None, int | None]:
    """``(input_tokens, output_tokens)`` a response reports, from LlamaIndex's
    ``additional_kwargs`` (``prompt_tokens``) or the raw response's ``usage``."""
    extra = response.additional_kwargs or {}
    prompt, completion = extra.get("prompt_tokens"), extra.get("completion_tokens")
    if not isinstance(prompt, int) or prompt <= 0:
        raw = response.raw
        usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
        prompt = _field(usage, "prompt_tokens", "input_tokens")
        completion = _field(usage, "completion_tokens", "output_tokens")
    if not isinstance(prompt, int) or prompt <= 0:
        return None, None
    return prompt, completion if isinstance(completion, int) and completion >= 0 else None


def usage_of(response: ChatResponse | None) -> Usage | None:
    """The usage a response reports, for calibration."""
    if response is None:
        return None
    prompt, completion = reported_usage(response)
    return Usage(prompt, completion) if prompt is not None else None


def _field(usage: Any, *names: str) -> Any:
    for name in names:
        value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
        if isinstance(value, int):
            return value
    return None


def idle_response(reason: str) -> ChatResponse:
    """The reply of an idle conversation: no tool calls, says why."""
    message = ChatMessage(role=MessageRole.ASSISTANT, content=IDLE_TEXT.format(reason=reason),
                          additional_kwargs={"contextfold_idle": True})
    return ChatResponse(message=message, delta="")


class CompactingLLM(FunctionCallingLLM):
    """Wraps any LlamaIndex LLM so every chat call's messages fit the budget.

    Args:
        llm: the LLM to wrap (``OpenAI(...)``, ``MockFunctionCallingLLM()``...).
        policy: the compaction policy; default ``ThresholdPolicy()``.
        budget: the token budget; default from ``llm.metadata`` (context window and
            ``num_output``).
        summarizer: makes summaries; default ``cf.ExtractiveSummarizer``, which makes no
            model call. ``LLMSummarizer(llm)`` summarizes with an LLM: each summary is then
            one more request to it, counted in ``report.llm_calls`` and the events'
            ``llm_calls``.
        counter: counts tokens; default ``counter_for_model`` of the budget's model.
        store: a history store for the Compactor (summary cache, sliding-window lookups).
        conversation_id: the conversation this LLM serves (its Compactor is kept across
            calls, its messages in ``store``). Without one, each call is a conversation of
            its own, compacted from scratch and never stored: calls that name no
            conversation never share state, even when they open alike.
        retry: retries and backoff of a failing summarizer (``RetryPolicy``).

    Example::

        llm = CompactingLLM(llm=OpenAI(model="gpt-4o-mini"), policy=cf.ThresholdPolicy(),
                            budget=cf.Budget.for_model("gpt-4o-mini"))
        agent = FunctionAgent(tools=tools, llm=llm)
    """

    llm: SerializeAsAny[LLM] = Field(description="The wrapped LLM.")

    _conversations: Conversations[ChatMessage] = PrivateAttr()
    _conversation_id: str | None = PrivateAttr(default=None)
    _last: Loop | None = PrivateAttr(default=None)
    _make: Any = PrivateAttr(default=None)
    _listeners: list[Any] = PrivateAttr(default_factory=list)
    _tools_cache: tuple[str, list[dict[str, Any]]] | None = PrivateAttr(default=None)

    def __init__(
        self,
        llm: LLM,
        policy: Policy | None = None,
        budget: cf.Budget | None = None,
        summarizer: AnySummarizer | None = None,
        counter: cf.TokenCounter | None = None,
        *,
        store: HistoryStore | None = None,
        conversation_id: str | None = None,
        retry: cf.RetryPolicy | None = None,
        listeners: Sequence[Any] = (),
        max_conversations: int = 1024,
        **kwargs: Any,
    ) -> None:
        if not isinstance(llm, LLM):
            raise ConfigurationError(f"llm must be a llama_index LLM, got {llm!r}")
        super().__init__(llm=llm, callback_manager=llm.callback_manager, **kwargs)
        budget = budget if budget is not None else budget_of(llm.metadata)
        policy = policy if policy is not None else cf.ThresholdPolicy()
        counter = counter or cf.counter_for_model(budget.model)
        self._listeners = [forward_event, *listeners]

        def make(key: str, kept: bool = True) -> Loop:
            compactor = cf.Compactor(policy, budget, counter, summarizer,
                                     store if kept else None,
                                     conversation_id=key, retry=retry,
                                     listeners=self._listeners)
            return CallLoop(compactor, to_core=to_core, from_core=message_to_llama_index)

        self._conversations = Conversations(make, max_conversations)
        self._make = make
        self._conversation_id = conversation_id

    @classmethod
    def class_name(cls) -> str:
        """The component name LlamaIndex serializers record."""
        return "CompactingLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """The wrapped LLM's metadata (``is_function_calling_model`` included)."""
        return self.llm.metadata

    @property
    def conversations(self) -> Conversations[ChatMessage]:
        """The conversation this LLM serves when ``conversation_id`` is given (without one,
        each call is a conversation of its own and none is kept)."""
        return self._conversations

    @property
    def compactor(self) -> cf.Compactor:
        """The Compactor of the conversation served last (of ``conversation_id`` before
        any call): read its ``state``, ``usage()`` and last calibration."""
        if self._last is not None:
            return self._last.compactor
        return self._conversations.get(self._conversation_id or "default").compactor

    def add_listener(self, listener: Any) -> Any:
        """Deliver every conversation's events to ``listener`` (returned, so this works as
        a decorator)."""
        self._listeners.append(listener)
        for loop in self._conversations.loops():
            loop.compactor.add_listener(listener)
        return listener

    # -- chat ------------------------------------------------------------------------

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Compact ``messages``, then chat; an overflow is retried once below the limit the
        provider states, then raised as ``contextfold.errors.ContextOverflowError``."""
        loop = self._loop(messages)
        return loop.call(messages, lambda view: self.llm.chat(view.messages, **kwargs),
                         usage=usage_of, tools=self._definitions(kwargs.get("tools")),
                         idle=lambda reason, view: idle_response(reason))

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The async form of [`chat`][llama_index.memory.contextfold.CompactingLLM.chat]."""
        loop = self._loop(messages)

        async def send(view: View[ChatMessage]) -> ChatResponse:
            return await self.llm.achat(view.messages, **kwargs)

        return await loop.acall(messages, send, usage=usage_of,
                                tools=self._definitions(kwargs.get("tools")),
                                idle=lambda reason, view: idle_response(reason))

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Compact, then stream; an overflow before the first chunk is retried once."""
        loop = self._loop(messages)

        def send(view: View[ChatMessage]) -> tuple[ChatResponse | None, Iterator[ChatResponse]]:
            stream = self.llm.stream_chat(view.messages, **kwargs)
            return next(stream, None), stream  # an overflow surfaces on the first chunk

        first, rest = loop.call(messages, send, tools=self._definitions(kwargs.get("tools")),
                                idle=lambda reason, view: (idle_response(reason), iter(())))
        return self._relay(loop, first, rest)

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """The async form of
        [`stream_chat`][llama_index.memory.contextfold.CompactingLLM.stream_chat]."""
        loop = self._loop(messages)

        async def send(
            view: View[ChatMessage],
        ) -> tuple[ChatResponse | None, AsyncIterator[ChatResponse]]:
            stream = await self.llm.astream_chat(view.messages, **kwargs)
            return await anext(stream, None), stream

        first, rest = await loop.acall(
            messages, send, tools=self._definitions(kwargs.get("tools")),
            idle=lambda reason, view: (idle_response(reason), _empty()),
        )
        return self._arelay(loop, first, rest)

    # -- tool calling: the wrapped LLM's own ----------------------------------------

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return self._inner_fc()._prepare_chat_with_tools_compat(
            tools, user_msg=user_msg, chat_history=chat_history, verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls, tool_required=tool_required,
            **kwargs,
        )

    def _validate_chat_with_tools_response(
        self, response: ChatResponse, tools: Sequence[Any],
        allow_parallel_tool_calls: bool = False, **kwargs: Any,
    ) -> ChatResponse:
        return self._inner_fc()._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The wrapped LLM's tool calls of ``response``."""
        return self._inner_fc().get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )

    def _inner_fc(self) -> FunctionCallingLLM:
        if not isinstance(self.llm, FunctionCallingLLM):
            raise TypeError(f"{type(self.llm).__name__} does not support function calling")
        return self.llm

    # -- completion: passed through (a single prompt has nothing to compact) -------

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The wrapped LLM's ``complete``."""
        return self.llm.complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        """The wrapped LLM's ``acomplete``."""
        return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """The wrapped LLM's ``stream_complete``."""
        return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """The wrapped LLM's ``astream_complete``."""
        return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)

    # -- internals -------------------------------------------------------------------

    def _loop(self, messages: Sequence[ChatMessage]) -> Loop:
        """The loop of ``conversation_id``; without one, a loop for this call alone: two
        users who open alike never share state, and nothing of the call is stored."""
        key = self._conversation_id
        if key is None:
            self._last = self._make(RUN_PREFIX + uuid.uuid4().hex, False)
        else:
            self._last = self._conversations.get(key)
        return self._last

    def _definitions(self, tools: Any) -> list[dict[str, Any]] | None:
        """Tool definitions to count, the same list object while they do not change (the
        Compactor caches their count by identity)."""
        if not tools:
            return None
        defs = tool_definitions(tools)
        key = json.dumps(defs, sort_keys=True, default=str)
        if self._tools_cache is None or self._tools_cache[0] != key:
            self._tools_cache = (key, defs)
        return self._tools_cache[1]

    @staticmethod
    def _relay(
        loop: Loop, first: ChatResponse | None, stream: Iterator[ChatResponse]
    ) -> ChatResponseGen:
        def gen() -> ChatResponseGen:
            if first is None:
                return
            usage = first
            yield first
            for chunk in stream:
                if reported_usage(chunk)[0] is not None:
                    usage = chunk
                yield chunk
            if not first.message.additional_kwargs.get("contextfold_idle"):
                loop.delivered(usage_of(usage))

        return gen()

    @staticmethod
    def _arelay(
        loop: Loop, first: ChatResponse | None, stream: AsyncIterator[ChatResponse]
    ) -> ChatResponseAsyncGen:
        async def gen() -> ChatResponseAsyncGen:
            if first is None:
                return
            usage = first
            yield first
            async for chunk in stream:
                if reported_usage(chunk)[0] is not None:
                    usage = chunk
                yield chunk
            if not first.message.additional_kwargs.get("contextfold_idle"):
                loop.delivered(usage_of(usage))

        return gen()


async def _empty() -> AsyncIterator[ChatResponse]:
    return
    yield  # pragma: no cover
