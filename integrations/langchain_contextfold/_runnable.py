"""``with_compaction``: one line makes a chat model (or a chain around one) compaction-aware.

The wrapper is a ``BaseChatModel`` subclass,
[`CompactingChatModel`][langchain_contextfold.CompactingChatModel], not a generic ``Runnable``:
LangChain's agents (``create_agent``, LangGraph's prebuilt agent) accept only chat models, and a
chat model keeps ``invoke``/``ainvoke``/``stream``/``astream``/``batch``/ ``abatch``, callbacks,
caching and rate limiting working as users expect. ``bind_tools`` and ``with_structured_output`` ask
the wrapped model to do the binding (so provider-native tool formats and structured output stay) and
put the wrapper back in front.

The wrapped model runs as a child run (visible in LangSmith traces with the compacted
input) with streaming handlers removed, so tokens reach ``astream_events`` and LangGraph's
``"messages"`` stream once, from the wrapper.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, BaseLanguageModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from pydantic import BaseModel, ConfigDict, Field

from contextfold import Budget, TokenCounter
from contextfold.errors import ConfigurationError
from contextfold.integration import AnySummarizer, View
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._engine import Engine, Loop, idle_reply, thread_key, usage_of
from ._events import COMPACTION_EVENT, IDLE_EVENT, aemit, emit, report_payload
from ._summarizer import ChatModelSummarizer

__all__ = ["CompactingChatModel", "with_compaction"]

_KEY = "_contextfold_conversation"
"""The call kwarg carrying the conversation key from ``invoke`` to ``_generate``."""
_RUN = "_contextfold_run_id"
_CALLBACKS = "_contextfold_callbacks"

M = TypeVar("M", CallbackManagerForLLMRun, AsyncCallbackManagerForLLMRun)

INNER_TAG = "contextfold_inner"
"""Tag of the wrapped model's child run."""


def _streaming(handler: Any) -> bool:
    """True for astream_events / astream_log / LangGraph stream handlers."""
    return hasattr(handler, "tap_output_iter") or any(
        c.__name__ == "_V2StreamingCallbackHandler" for c in type(handler).__mro__
    )


def _inner_config(run_manager: Any) -> RunnableConfig:
    """Config for the wrapped model: a child of the wrapper's run, without stream handlers."""
    if run_manager is None:
        return {"callbacks": [], "tags": [INNER_TAG, "nostream"]}
    cls = AsyncCallbackManager if isinstance(run_manager, AsyncCallbackManagerForLLMRun) \
        else CallbackManager
    handlers = [h for h in run_manager.inheritable_handlers if not _streaming(h)]
    manager = cls(
        handlers=handlers, inheritable_handlers=handlers, parent_run_id=run_manager.run_id,
        tags=list(run_manager.inheritable_tags),
        inheritable_tags=list(run_manager.inheritable_tags),
        metadata=dict(run_manager.inheritable_metadata),
        inheritable_metadata=dict(run_manager.inheritable_metadata),
    )
    return {"callbacks": manager, "tags": [INNER_TAG, "nostream"]}


def _streaming_run(kwargs: dict[str, Any], cls: type[M]) -> M | None:
    """A run manager for the streaming run ``stream`` opened (same run id, same callbacks)."""
    run_id = kwargs.get(_RUN)
    callbacks, tags, metadata = kwargs.get(_CALLBACKS) or (None, None, None)
    if run_id is None:
        return None
    manager = CallbackManager.configure(callbacks, None, False, tags, None, metadata, None)
    return cls(
        run_id=run_id, handlers=manager.handlers,
        inheritable_handlers=manager.inheritable_handlers, parent_run_id=manager.parent_run_id,
        tags=manager.tags, inheritable_tags=manager.inheritable_tags,
        metadata=manager.metadata, inheritable_metadata=manager.inheritable_metadata,
    )


class CompactingChatModel(BaseChatModel):
    """A chat model that compacts its input before the wrapped model sees it.

    Build it with [`with_compaction`][langchain_contextfold.with_compaction]. One Compactor per
    conversation, keyed by ``config["configurable"]["thread_id"]`` (or ``session_id``). A call
    without one is a conversation of its own: it is compacted from scratch, nothing of it is kept
    after the call and nothing is stored (give a ``thread_id`` to keep rolling compaction, idle
    detection and the stored history across calls).
    """

    model: BaseChatModel
    """The wrapped chat model."""
    engine: Engine = Field(exclude=True)
    """The shared state: settings and conversations (shared with bound copies)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @property
    def _llm_type(self) -> str:
        return f"contextfold:{self.model._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"wrapped": self.model._llm_type, **self.model._identifying_params}

    # -- the conversation key travels as a call kwarg -------------------------------------

    def invoke(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
        stop: list[str] | None = None, **kwargs: Any,
    ) -> AIMessage:
        kwargs.setdefault(_KEY, thread_key(ensure_config(config)))
        return super().invoke(input, config, stop=stop, **kwargs)

    async def ainvoke(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
        stop: list[str] | None = None, **kwargs: Any,
    ) -> AIMessage:
        kwargs.setdefault(_KEY, thread_key(ensure_config(config)))
        return await super().ainvoke(input, config, stop=stop, **kwargs)

    # ``stream`` does not hand its run manager to ``_stream``: the run id is chosen here
    # and the run's callbacks travel with it, so events attach to the streaming run.

    def stream(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
        stop: list[str] | None = None, **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        config = ensure_config(config)
        kwargs.setdefault(_KEY, thread_key(config))
        config["run_id"] = kwargs[_RUN] = config.get("run_id") or uuid.uuid4()
        kwargs[_CALLBACKS] = (config.get("callbacks"), config.get("tags"), config.get("metadata"))
        yield from super().stream(input, config, stop=stop, **kwargs)

    async def astream(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
        stop: list[str] | None = None, **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        config = ensure_config(config)
        kwargs.setdefault(_KEY, thread_key(config))
        config["run_id"] = kwargs[_RUN] = config.get("run_id") or uuid.uuid4()
        kwargs[_CALLBACKS] = (config.get("callbacks"), config.get("tags"), config.get("metadata"))
        async for chunk in super().astream(input, config, stop=stop, **kwargs):
            yield chunk

    # -- generation ---------------------------------------------------------------------

    def _start(
        self, messages: list[BaseMessage], kwargs: dict[str, Any]
    ) -> tuple[Loop, list[dict[str, Any]]]:
        kwargs.pop(_RUN, None)
        kwargs.pop(_CALLBACKS, None)
        key = kwargs.pop(_KEY, None)
        loop = self.engine.conversations.get(key) if key else self.engine.loop(None)
        return loop, self.engine.tool_dicts(kwargs.get("tools"))

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        loop, tools = self._start(messages, kwargs)

        def send(view: View[BaseMessage]) -> BaseMessage:
            _announce(view, loop, run_manager)
            return self.model.invoke(view.messages, _inner_config(run_manager), stop=stop,
                                     **{**kwargs, **view.request})

        def idle(reason: str, view: View[BaseMessage]) -> BaseMessage:
            _announce(view, loop, run_manager)
            return idle_reply(reason)

        reply = loop.call(messages, send, usage=usage_of, tools=tools, idle=idle)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        loop, tools = self._start(messages, kwargs)

        async def send(view: View[BaseMessage]) -> BaseMessage:
            await _aannounce(view, loop, run_manager)
            return await self.model.ainvoke(view.messages, _inner_config(run_manager),
                                            stop=stop, **{**kwargs, **view.request})

        async def idle(reason: str, view: View[BaseMessage]) -> BaseMessage:
            await _aannounce(view, loop, run_manager)
            return idle_reply(reason)

        reply = await loop.acall(messages, send, usage=usage_of, tools=tools, idle=idle)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        run_manager = run_manager or _streaming_run(kwargs, CallbackManagerForLLMRun)
        loop, tools = self._start(messages, kwargs)

        def send(view: View[BaseMessage]) -> tuple[AIMessageChunk, Iterator[AIMessageChunk]]:
            _announce(view, loop, run_manager)
            chunks = self.model.stream(view.messages, _inner_config(run_manager), stop=stop,
                                       **{**kwargs, **view.request})
            return next(chunks), chunks  # an overflow error surfaces on the first chunk

        def idle(reason: str, view: View[BaseMessage]) -> tuple[AIMessageChunk, Iterator[Any]]:
            _announce(view, loop, run_manager)
            return _as_chunk(idle_reply(reason)), iter(())

        first, rest = loop.call(messages, send, tools=tools, idle=idle)
        total = first
        yield ChatGenerationChunk(message=first)
        for chunk in rest:
            total = total + chunk
            yield ChatGenerationChunk(message=chunk)
        if not total.response_metadata.get("contextfold_idle"):
            loop.delivered(usage_of(total))

    async def _astream(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        run_manager = run_manager or _streaming_run(kwargs, AsyncCallbackManagerForLLMRun)
        loop, tools = self._start(messages, kwargs)

        async def send(
            view: View[BaseMessage],
        ) -> tuple[AIMessageChunk, AsyncIterator[AIMessageChunk]]:
            await _aannounce(view, loop, run_manager)
            chunks = self.model.astream(view.messages, _inner_config(run_manager), stop=stop,
                                        **{**kwargs, **view.request})
            return await chunks.__anext__(), chunks

        async def idle(
            reason: str, view: View[BaseMessage]
        ) -> tuple[AIMessageChunk, AsyncIterator[AIMessageChunk]]:
            await _aannounce(view, loop, run_manager)
            return _as_chunk(idle_reply(reason)), _empty()

        first, rest = await loop.acall(messages, send, tools=tools, idle=idle)
        total = first
        yield ChatGenerationChunk(message=first)
        async for chunk in rest:
            total = total + chunk
            yield ChatGenerationChunk(message=chunk)
        if not total.response_metadata.get("contextfold_idle"):
            loop.delivered(usage_of(total))

    # -- binding --------------------------------------------------------------------------

    def _wrap(self, model: BaseChatModel) -> CompactingChatModel:
        if model is self.model:
            return self
        if isinstance(model, CompactingChatModel):
            return model
        return CompactingChatModel(model=model, engine=self.engine)

    def bind_tools(  # type: ignore[override]
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The wrapped model's ``bind_tools``, with this wrapper in front of the model."""
        bound = self.model.bind_tools(tools, **kwargs)
        swapped: Runnable[LanguageModelInput, AIMessage] = _swap(bound, self.model, self._wrap)
        if swapped is bound:  # the model bound a copy of itself: wrap whatever it returned
            swapped = _swap(bound, None, self._wrap)
        return swapped

    def with_structured_output(  # type: ignore[override]
        self, schema: Any, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """The wrapped model's structured output, with this wrapper in front of the model."""
        inner = self.model.with_structured_output(schema, **kwargs)
        swapped: Runnable[LanguageModelInput, Any] = _swap(inner, self.model, self._wrap)
        if swapped is inner:  # the model is not reachable inside: bind tools ourselves
            return super().with_structured_output(schema, **kwargs)
        return swapped


def _as_chunk(message: AIMessage) -> AIMessageChunk:
    return AIMessageChunk(content=message.content, response_metadata=message.response_metadata)


async def _empty() -> AsyncIterator[AIMessageChunk]:
    return
    yield  # pragma: no cover


def _announce(view: View[BaseMessage], loop: Loop, run_manager: Any) -> None:
    """Send the compaction event (when the input changed) and the idle event (when idle)."""
    if view.changed:
        emit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
             run_manager=run_manager)
    reason = loop.idle_reason
    if reason is not None:
        emit(IDLE_EVENT, {"conversation_id": loop.key, "reason": reason}, run_manager=run_manager)


async def _aannounce(view: View[BaseMessage], loop: Loop, run_manager: Any) -> None:
    if view.changed:
        await aemit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
                    run_manager=run_manager)
    reason = loop.idle_reason
    if reason is not None:
        await aemit(IDLE_EVENT, {"conversation_id": loop.key, "reason": reason},
                    run_manager=run_manager)


def _swap(obj: Any, target: Any, wrap: Callable[[Any], Any], depth: int = 0) -> Any:
    """``obj`` with ``target`` replaced by ``wrap(target)`` wherever it sits inside a
    composed runnable (bindings, sequences, parallels, fallbacks); ``obj`` itself when the
    target is not inside."""
    if obj is target or (target is None and isinstance(obj, BaseChatModel)):
        return wrap(obj)
    if depth > 8 or isinstance(obj, BaseLanguageModel) or not isinstance(obj, BaseModel):
        return obj
    updates: dict[str, Any] = {}
    for name in type(obj).model_fields:
        value = getattr(obj, name, None)
        if isinstance(value, Runnable):
            new: Any = _swap(value, target, wrap, depth + 1)
        elif isinstance(value, dict):
            new = {k: _swap(v, target, wrap, depth + 1) for k, v in value.items()}
            new = value if all(new[k] is value[k] for k in value) else new
        elif isinstance(value, list):
            new = [_swap(v, target, wrap, depth + 1) for v in value]
            new = value if all(a is b for a, b in zip(new, value, strict=True)) else new
        else:
            continue
        if new is not value:
            updates[name] = new
    return obj.model_copy(update=updates) if updates else obj


def with_compaction(
    model_or_runnable: BaseChatModel | Runnable[Any, Any],
    *,
    policy: Policy,
    budget: Budget,
    summarizer: AnySummarizer | None = None,
    store: HistoryStore | None = None,
    counter: TokenCounter | None = None,
    max_conversations: int = 1024,
) -> Any:
    """Make a chat model, a bound model or a chain compaction-aware.

    Args:
        model_or_runnable: a chat model, ``model.bind_tools(...)``, or a runnable that
            contains a chat model (``prompt | model | parser``); each chat model inside is
            wrapped.
        policy: the compaction policy (``cf.ThresholdPolicy()``...).
        budget: the token budget of the model.
        summarizer: makes summaries; default a
            [`ChatModelSummarizer`][langchain_contextfold.ChatModelSummarizer] over the wrapped
            model: each summary is one more request to that model, billed like the others (its input
                is the span being summarized, its output the summary; a
            span longer than the model's window takes a request per part and one to merge
            them). ``report.llm_calls`` and the ``contextfold_compaction`` event's
            ``llm_calls`` count them. Pass ``cf.ExtractiveSummarizer()`` for summaries
            without a model, or a ``ChatModelSummarizer`` over a cheaper model.
        store: a history store; every message the Compactor sees is kept there.
        counter: how to count; default ``counter_for_model(budget.model)``.
        max_conversations: conversations (thread ids) kept in memory.

    Returns:
        A [`CompactingChatModel`][langchain_contextfold.CompactingChatModel] for a chat model, else
        the runnable with its chat model wrapped.

    Raises:
        ConfigurationError: nothing to wrap, or a bad policy or budget.
    """
    engines: dict[int, Engine] = {}

    def wrap(model: BaseChatModel) -> CompactingChatModel:
        engine = engines.get(id(model))
        if engine is None:
            engine = engines[id(model)] = Engine(
                policy=policy, budget=budget, counter=counter,
                summarizer=summarizer if summarizer is not None else ChatModelSummarizer(
                    # the conversation's budget is its window; its requests are cached
                    model, max_input_tokens=None, cache_true=True),
                store=store, max_conversations=max_conversations,
            )
        return CompactingChatModel(model=model, engine=engine, profile=model.profile)

    if isinstance(model_or_runnable, CompactingChatModel):
        raise ConfigurationError("this model is already wrapped by with_compaction")
    wrapped = _swap(model_or_runnable, None, wrap)
    if wrapped is model_or_runnable:
        raise ConfigurationError(
            f"with_compaction needs a chat model or a runnable containing one, got "
            f"{type(model_or_runnable).__name__}"
        )
    return wrapped
