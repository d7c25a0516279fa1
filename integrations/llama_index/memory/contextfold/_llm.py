"""``CompactingLLM``: an LLM wrapper that bounds every model call, even inside one agent run.

LlamaIndex agents keep a run's tool calls and results in a scratchpad that bypasses
memory, so memory alone cannot bound a long run. Wrapping the LLM can: every ``chat`` /
``achat`` / ``stream_chat`` / ``astream_chat`` (and so every ``*_chat_with_tools``, which
LlamaIndex routes through them) passes its messages through a Compactor first, with the
tool definitions counted. Seed 004's three layers:

1. the estimate decides before the call (incremental: a step counts only new messages);
2. the provider's reported usage (``prompt_tokens``) calibrates the next decision;
3. a context-overflow error forces compaction and the call is retried once.

Tool calling is untouched: ``metadata`` (``is_function_calling_model``...),
``_prepare_chat_with_tools``, ``get_tool_calls_from_response`` and the response checks are
the wrapped LLM's, so ``FunctionAgent`` accepts the wrapper.
"""

from __future__ import annotations

import json
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
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny
from llama_index.core.llms import LLM
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

import contextfold as cf
from contextfold._engine.overflow import is_context_overflow, overflow_figures

from ._convert import from_llama_index, message_to_llama_index
from ._fixed import budget_of
from ._instrumentation import acompact_in_span, compact_in_span, forward_event
from ._tools import tool_definitions

__all__ = ["CompactingLLM", "is_context_overflow", "reported_usage"]

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


def _field(usage: Any, *names: str) -> Any:
    for name in names:
        value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
        if isinstance(value, int):
            return value
    return None


class CompactingLLM(FunctionCallingLLM):
    """Wraps any LlamaIndex LLM so every chat call's messages fit the budget.

    Args:
        llm: the LLM to wrap (``OpenAI(...)``, ``MockFunctionCallingLLM()``...).
        policy: the compaction policy; default ``ThresholdPolicy()``.
        budget: the token budget; default from ``llm.metadata`` (context window and
            ``num_output``).
        summarizer: makes summaries (``LLMSummarizer(llm)``); default extractive.
        counter: counts tokens; default ``counter_for_model`` of the budget's model.
        store: a history store for the Compactor (summary cache, sliding-window lookups).
        conversation_id: names the conversation in events.
        retry: retries and backoff of a failing summarizer (``RetryPolicy``).

    Example::

        llm = CompactingLLM(llm=OpenAI(model="gpt-4o-mini"), policy=cf.ThresholdPolicy(),
                            budget=cf.Budget.for_model("gpt-4o-mini"))
        agent = FunctionAgent(tools=tools, llm=llm)
    """

    llm: SerializeAsAny[LLM] = Field(description="The wrapped LLM.")

    _compactor: cf.Compactor = PrivateAttr()
    _tools_cache: tuple[str, list[dict[str, Any]]] | None = PrivateAttr(default=None)

    def __init__(
        self,
        llm: LLM,
        policy: cf.Policy | None = None,
        budget: cf.Budget | None = None,
        summarizer: Any = None,
        counter: cf.TokenCounter | None = None,
        *,
        store: Any = None,
        conversation_id: str | None = None,
        retry: cf.RetryPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(llm, LLM):
            raise cf.ConfigurationError(f"llm must be a llama_index LLM, got {llm!r}")
        super().__init__(llm=llm, callback_manager=llm.callback_manager, **kwargs)
        budget = budget if budget is not None else budget_of(llm.metadata)
        self._compactor = cf.Compactor(
            policy if policy is not None else cf.ThresholdPolicy(), budget,
            counter or cf.counter_for_model(budget.model), summarizer, store,
            conversation_id=conversation_id, retry=retry, listeners=[forward_event],
        )

    @classmethod
    def class_name(cls) -> str:
        """The component name LlamaIndex serializers record."""
        return "CompactingLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """The wrapped LLM's metadata (``is_function_calling_model`` included)."""
        return self.llm.metadata

    @property
    def compactor(self) -> cf.Compactor:
        """The Compactor (add listeners, read the last report's figures)."""
        return self._compactor

    # -- chat ------------------------------------------------------------------------

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Compact ``messages``, then chat; retried once, forced, on a context overflow."""
        core, sent = self._compact(messages, kwargs.get("tools"))
        try:
            response = self.llm.chat(sent, **kwargs)
        except Exception as exc:
            sent = self._forced(exc, messages, core, kwargs.get("tools"))
            response = self.llm.chat(sent, **kwargs)
        self._calibrate(response)
        return response

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The async form of :meth:`chat`."""
        core, sent = await self._acompact(messages, kwargs.get("tools"))
        try:
            response = await self.llm.achat(sent, **kwargs)
        except Exception as exc:
            sent = await self._aforced(exc, messages, core, kwargs.get("tools"))
            response = await self.llm.achat(sent, **kwargs)
        self._calibrate(response)
        return response

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Compact, then stream; an overflow before the first chunk is retried once."""
        core, sent = self._compact(messages, kwargs.get("tools"))
        try:
            stream = self.llm.stream_chat(sent, **kwargs)
            first = next(stream, None)
        except Exception as exc:
            sent = self._forced(exc, messages, core, kwargs.get("tools"))
            stream = self.llm.stream_chat(sent, **kwargs)
            first = next(stream, None)
        return self._relay(first, stream)

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """The async form of :meth:`stream_chat`."""
        core, sent = await self._acompact(messages, kwargs.get("tools"))
        try:
            stream = await self.llm.astream_chat(sent, **kwargs)
            first = await anext(stream, None)
        except Exception as exc:
            sent = await self._aforced(exc, messages, core, kwargs.get("tools"))
            stream = await self.llm.astream_chat(sent, **kwargs)
            first = await anext(stream, None)
        return self._arelay(first, stream)

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

    def _compact(
        self, messages: Sequence[ChatMessage], tools: Any
    ) -> tuple[list[cf.Message], list[ChatMessage]]:
        core = from_llama_index(messages)
        result = compact_in_span(self._compactor, core, tools=self._definitions(tools))
        return core, _back(messages, core, result.messages)

    async def _acompact(
        self, messages: Sequence[ChatMessage], tools: Any
    ) -> tuple[list[cf.Message], list[ChatMessage]]:
        core = from_llama_index(messages)
        result = await acompact_in_span(self._compactor, core, tools=self._definitions(tools))
        return core, _back(messages, core, result.messages)

    def _forced(
        self, error: Exception, messages: Sequence[ChatMessage], core: list[cf.Message],
        tools: Any,
    ) -> list[ChatMessage]:
        self._before_retry(error)
        try:
            result = compact_in_span(self._compactor, core, force=True,
                                     tools=self._definitions(tools))
        except cf.NoProgressError as stuck:
            raise error from stuck
        return _back(messages, core, result.messages)

    async def _aforced(
        self, error: Exception, messages: Sequence[ChatMessage], core: list[cf.Message],
        tools: Any,
    ) -> list[ChatMessage]:
        self._before_retry(error)
        try:
            result = await acompact_in_span(self._compactor, core, force=True,
                                            tools=self._definitions(tools))
        except cf.NoProgressError as stuck:
            raise error from stuck
        return _back(messages, core, result.messages)

    def _before_retry(self, error: Exception) -> None:
        """Re-raise anything but an overflow; calibrate from the size it reports."""
        if not is_context_overflow(error):
            raise error
        reported, _ = overflow_figures(error)
        if reported is not None:
            self._compactor.observe_usage(input_tokens=reported)

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

    def _calibrate(self, response: ChatResponse | None) -> None:
        if response is None:
            return
        prompt, completion = reported_usage(response)
        if prompt is not None:
            self._compactor.observe_usage(input_tokens=prompt, output_tokens=completion)
        self._compactor.record_response()

    def _relay(self, first: ChatResponse | None, stream: Iterator[ChatResponse]) -> ChatResponseGen:
        def gen() -> ChatResponseGen:
            if first is None:
                return
            usage = first
            yield first
            for chunk in stream:
                if reported_usage(chunk)[0] is not None:
                    usage = chunk
                yield chunk
            self._calibrate(usage)

        return gen()

    def _arelay(
        self, first: ChatResponse | None, stream: AsyncIterator[ChatResponse]
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
            self._calibrate(usage)

        return gen()


def _back(
    messages: Sequence[ChatMessage], core: list[cf.Message], out: Sequence[cf.Message]
) -> list[ChatMessage]:
    """The LlamaIndex messages to send: the caller's own objects where a message is
    unchanged (all of them when nothing changed), converted ones elsewhere."""
    if len(out) == len(core) and all(a is b or a == b for a, b in zip(out, core, strict=True)):
        return list(messages)
    originals = {id(m): messages[i] for i, m in enumerate(core)}
    return [originals.get(id(m)) or message_to_llama_index(m) for m in out]
