"""``CompactingMemory``: a LlamaIndex ``BaseMemory`` backed by contextfold.

Use it wherever ``ChatMemoryBuffer`` or ``Memory`` goes (chat engines, ``FunctionAgent``,
``ReActAgent``, ``AgentWorkflow``). ``put`` appends to the history store, which keeps the
full history; ``get`` returns the compacted, valid view a Compactor builds from it:

* the first non-system message is a user message, no tool result is orphaned and no call
  is left unanswered (the in-flight view is repaired, never the stored history; a tool
  round still waiting for its results joins the view when they arrive);
* it fits the budget together with the tokens the caller adds: ``initial_token_count``,
  the ``system_prompt`` the agent prepends, the ``tools`` it sends, the ``input`` a chat
  engine adds after the history, and ``reserved_tokens`` for what else it adds (a
  ``ContextChatEngine``'s retrieved context and template);
* successive ``get`` calls reuse the compacted prefix and count only the new messages,
  so a conversation of n messages costs O(n) in total, not O(n^2);
* the token counts a ``get`` makes are kept in the store beside the messages (when it
  keeps counts, as contextfold's stores do), so a memory that loads the session again in
  another process does not tokenize what was counted (the stored history is unchanged).

The memory is truthy even when empty (agents test ``memory or default``), and
``to_dict``/``from_dict`` are JSON-safe so it survives a workflow ``Context`` round trip.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory
from pydantic import Field, PrivateAttr

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.integration import CountKeeper
from contextfold.policy import Policy

from . import _serde
from ._budget import budget_of
from ._convert import copy_message, from_llama_index, message_to_llama_index, to_llama_index
from ._instrumentation import acompact_in_span, compact_in_span, forward_event
from ._tools import tool_definitions

__all__ = ["DEFAULT_CONTEXT_WINDOW", "CompactingMemory"]

DEFAULT_CONTEXT_WINDOW = 30_000
"""The context window assumed when neither ``budget``, ``token_limit`` nor ``llm`` says."""


class CompactingMemory(BaseMemory):
    """Chat memory that keeps the full history in a store and returns a compacted view.

    Build it with [`from_defaults`][llama_index.memory.contextfold.CompactingMemory.from_defaults].
    ``session_id`` names the conversation in the store (and in events); ``system_prompt`` is the
    system prompt the agent prepends to what ``get`` returns, counted against the budget but not
    stored.
    """

    session_id: str = Field(default_factory=lambda: "session-" + uuid.uuid4().hex)
    """The conversation's key in the store."""
    system_prompt: str | None = None
    """The system prompt the agent adds in front of ``get()``; its tokens are reserved."""
    reserved_tokens: int = 0
    """Tokens the caller adds beside the history on every call besides the system prompt,
    tools and input (a ``ContextChatEngine``'s retrieved context and its template)."""

    _parts: _serde.Parts = PrivateAttr()
    _compactor: cf.Compactor = PrivateAttr()
    _tools: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _converted: dict[int, tuple[cf.Message, ChatMessage]] = PrivateAttr(default_factory=dict)

    @classmethod
    def class_name(cls) -> str:
        """The component name LlamaIndex serializers record."""
        return "CompactingMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        policy: Policy | None = None,
        budget: cf.Budget | None = None,
        *,
        store: Any = None,
        session_id: str | None = None,
        summarizer: Any = None,
        counter: cf.TokenCounter | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        retry: cf.RetryPolicy | None = None,
        reserved_tokens: int = 0,
        chat_history: Sequence[ChatMessage] | None = None,
        llm: Any = None,
        token_limit: int | None = None,
        **ignored: Any,
    ) -> CompactingMemory:
        """Build a memory.

        Args:
            policy: the compaction policy; default ``ThresholdPolicy()``.
            budget: the token budget; default from ``token_limit``, else from ``llm``'s
                metadata, else a ``DEFAULT_CONTEXT_WINDOW`` window.
            store: where the full history lives: a store object, ``"memory"`` (default),
                ``"sqlite"`` (a file under the data directory), ``"sqlite:///path"``, a
                ``.db`` path, or a ``postgresql://`` URL.
            session_id: the conversation's key in the store; default a new random id.
            summarizer: makes summaries; default ``cf.ExtractiveSummarizer``, which makes
                no model call. ``LLMSummarizer(llm)`` summarizes with an LLM: each summary
                is then one more request to it, counted in ``report.llm_calls`` and the
                events' ``llm_calls``.
            counter: counts tokens; default ``counter_for_model(budget.model)``.
            system_prompt: the system prompt the agent prepends (its tokens are reserved).
            tools: the tools the agent sends with each call (their definitions' tokens are
                reserved).
            retry: retries and backoff of a failing summarizer (``RetryPolicy``).
            reserved_tokens: tokens the caller adds beside the history besides the system
                prompt, tools and input: with a ``ContextChatEngine``, its retrieved context
                (about ``similarity_top_k`` times the chunk size) and context template.
            chat_history: messages to start with (replaces the session's stored history).
            llm: accepted for ``memory_cls.from_defaults(...)`` call sites.
            token_limit: accepted for ``memory_cls.from_defaults(...)`` call sites.
            **ignored: other keyword arguments chat engines pass are accepted and ignored.
        """
        if budget is None:
            budget = _default_budget(token_limit, llm)
        memory = cls(
            policy=policy, budget=budget, store=store, session_id=session_id,
            summarizer=summarizer, counter=counter, system_prompt=system_prompt, tools=tools,
            retry=retry, reserved_tokens=reserved_tokens,
        )
        if chat_history:
            memory.set(list(chat_history))
        return memory

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        budget: cf.Budget | None = None,
        store: Any = None,
        session_id: str | None = None,
        summarizer: Any = None,
        counter: cf.TokenCounter | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        retry: cf.RetryPolicy | None = None,
        reserved_tokens: int = 0,
        parts: _serde.Parts | None = None,
        **ignored: Any,
    ) -> None:
        if not isinstance(reserved_tokens, int) or reserved_tokens < 0:
            raise ConfigurationError(
                f"reserved_tokens must be an int >= 0, got {reserved_tokens!r}")
        fields: dict[str, Any] = {"system_prompt": system_prompt,
                                  "reserved_tokens": reserved_tokens}
        if session_id is not None:
            fields["session_id"] = session_id
        super().__init__(**fields)
        if parts is None:
            budget = budget if budget is not None else _default_budget(None, None)
            if not isinstance(budget, cf.Budget):
                raise ConfigurationError(f"budget must be a contextfold.Budget, "
                                            f"got {budget!r}")
            opened, url = _serde.open_store(store)
            parts = _serde.Parts(
                policy=policy if policy is not None else cf.ThresholdPolicy(),
                budget=budget, counter=counter or cf.counter_for_model(budget.model),
                summarizer=summarizer, store=opened, retry=retry, store_url=url,
                owns_store=opened is not store,
            )
        self._parts = parts
        self._tools = tool_definitions(tools)
        self._compactor = cf.Compactor(
            parts.policy, parts.budget, parts.counter, parts.summarizer,
            parts.store, conversation_id=self.session_id, retry=parts.retry,
            listeners=[forward_event],
        )

    # -- what users may read ----------------------------------------------------------

    @property
    def store(self) -> Any:
        """The history store (search it with ``search_tools_for(memory.store, ...)``)."""
        return self._parts.store

    @property
    def policy(self) -> Policy:
        """The compaction policy."""
        return self._parts.policy  # type: ignore[no-any-return]

    @property
    def budget(self) -> cf.Budget:
        """The token budget."""
        return self._parts.budget

    @property
    def compactor(self) -> cf.Compactor:
        """The Compactor (add listeners, read ``state``, ``observe_usage``)."""
        return self._compactor

    @property
    def tokenizer_fn(self) -> Any:
        """A tokenizer for callers that count their own prefix (``SimpleChatEngine``):
        returns a list as long as the token count of the text."""
        counter = self._parts.counter
        encoding = getattr(counter, "encoding", None)
        if encoding is not None:
            return lambda text: encoding.encode(text, disallowed_special=())
        return lambda text: [0] * counter.count_text(text)

    def __bool__(self) -> bool:
        """Always true, even when empty: agents test ``memory or default_memory``."""
        return True

    # -- reading ---------------------------------------------------------------------

    def get(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The compacted, valid view of the history (the full history stays stored)."""
        history = _settled(self._loaded())
        if not _compactable(history):
            return to_llama_index(history)
        result = compact_in_span(self._compactor, history, tools=self._tools or None,
                                 extra_tokens=self._extra_tokens(history, input,
                                                                 initial_token_count))
        self._counts().flush(full=result.report.method != "none")
        return self._view(result.messages)

    async def aget(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The async form of [`get`][llama_index.memory.contextfold.CompactingMemory.get] (summaries
        are awaited)."""
        history = _settled(await self._aloaded())
        if not _compactable(history):
            return to_llama_index(history)
        result = await acompact_in_span(self._compactor, history, tools=self._tools or None,
                                        extra_tokens=self._extra_tokens(history, input,
                                                                        initial_token_count))
        counted = self._counts().take(full=result.report.method != "none")
        if counted:
            await self._io(self._counts().keep, counted)
        return self._view(result.messages)

    def get_all(self) -> list[ChatMessage]:
        """The full stored history, uncompacted."""
        return to_llama_index(self._loaded())

    async def aget_all(self) -> list[ChatMessage]:
        """The async form of
        [`get_all`][llama_index.memory.contextfold.CompactingMemory.get_all]."""
        return to_llama_index(await self._aloaded())

    # -- writing ---------------------------------------------------------------------

    def put(self, message: ChatMessage) -> None:
        """Append one message to the stored history."""
        self.put_messages([message])

    async def aput(self, message: ChatMessage) -> None:
        """The async form of [`put`][llama_index.memory.contextfold.CompactingMemory.put]."""
        await self.aput_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Append messages in one store transaction (the list is not modified). With a
        durable store they are counted first (the next ``get`` counts them anyway), so
        their counts are kept with them."""
        # Read from pydantic's dict of private attributes: ``self._parts`` goes through
        # BaseModel.__getattr__ (1.7 us, a tenth of a put).
        parts: _serde.Parts = self.__pydantic_private__["_parts"]  # type: ignore[index]
        converted = _counted(from_llama_index(messages), parts)
        session = self.session_id
        history = parts.histories.get(session)
        if history is None:
            history = self._loaded()
        parts.store.append(session, converted)
        history.extend(converted)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """The async form of
        [`put_messages`][llama_index.memory.contextfold.CompactingMemory.put_messages]."""
        converted = _counted(from_llama_index(messages), self._parts)
        history = await self._aloaded()
        await self._io(self.store.append, self.session_id, converted)
        history.extend(converted)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the stored history of this session with ``messages``."""
        converted = from_llama_index(messages)
        self.store.clear(self.session_id)
        self.store.append(self.session_id, converted)
        self._replaced(list(converted))

    async def aset(self, messages: list[ChatMessage]) -> None:
        """The async form of [`set`][llama_index.memory.contextfold.CompactingMemory.set]."""
        converted = from_llama_index(messages)
        await self._io(self.store.clear, self.session_id)
        await self._io(self.store.append, self.session_id, converted)
        self._replaced(list(converted))

    def reset(self) -> None:
        """Delete this session's history from the store."""
        self.store.clear(self.session_id)
        self._replaced([])

    async def areset(self) -> None:
        """The async form of [`reset`][llama_index.memory.contextfold.CompactingMemory.reset]."""
        await self._io(self.store.clear, self.session_id)
        self._replaced([])

    def close(self) -> None:
        """Close the store when this memory opened it (from a name, path or URL)."""
        if self._parts.owns_store:
            close = getattr(self.store, "close", None)
            if callable(close):
                close()

    # -- serialization ---------------------------------------------------------------

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """A JSON-safe description (see the `_serde` module for what survives a new
        process)."""
        parts = self._parts
        return {
            "class_name": self.class_name(),
            "session_id": self.session_id,
            "system_prompt": self.system_prompt,
            "reserved_tokens": self.reserved_tokens,
            "tools": self._tools,
            "budget": _serde.describe_budget(parts.budget),
            "counter": _serde.describe_counter(parts.counter),
            "policy": _serde.describe_policy(parts.policy),
            "store": _serde.describe_store(parts.store, parts.store_url, self.session_id),
            "live": parts.key,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> CompactingMemory:  # type: ignore[override]
        """Rebuild a memory from
        [`to_dict`][llama_index.memory.contextfold.CompactingMemory.to_dict]; ``policy=``,
        ``summarizer=``, ``store=``, ``counter=`` override what the dict describes."""
        session_id = str(data["session_id"])
        parts = _serde.find_live(data.get("live"))
        if parts is None or kwargs:
            parts = _revive_parts(data, session_id, parts, kwargs)
        memory = cls(session_id=session_id, system_prompt=data.get("system_prompt"),
                     reserved_tokens=int(data.get("reserved_tokens") or 0), parts=parts)
        memory._tools = [dict(t) for t in data.get("tools") or ()]
        return memory

    # -- internals -------------------------------------------------------------------

    def _view(self, messages: Sequence[cf.Message]) -> list[ChatMessage]:
        """The view as fresh ``ChatMessage`` objects the caller may change freely.

        Each core message is converted once while it stays in the view; every ``get``
        returns copies of the conversions (agents edit the last message in place).
        """
        done, kept = self._converted, {}
        out = []
        for m in messages:
            pair = done.get(id(m))
            if pair is None or pair[0] is not m:
                pair = (m, message_to_llama_index(m))
            kept[id(m)] = pair
            out.append(copy_message(pair[1]))
        self._converted = kept
        return out

    def _loaded(self) -> list[cf.Message]:
        """The session's history, loaded once (with the counts the store kept for it) and
        then kept in step with every write."""
        histories = self._parts.histories
        if self.session_id not in histories:
            self._track_loaded(self.store.load(self.session_id))
        return histories[self.session_id]

    async def _aloaded(self) -> list[cf.Message]:
        histories = self._parts.histories
        if self.session_id not in histories:
            loaded = await self._io(self.store.load, self.session_id)
            if self.session_id not in histories:
                self._track_loaded(loaded)
        return histories[self.session_id]

    def _track_loaded(self, loaded: list[cf.Message]) -> None:
        """Hold the session's history as loaded; what it holds without counts is tracked,
        so that the counts ``get`` makes of it are kept."""
        self._parts.histories[self.session_id] = loaded
        keeper = self._parts.keepers[self.session_id] = self._new_keeper()
        keeper.track(loaded)

    def _replaced(self, history: list[cf.Message]) -> None:
        """The stored history was replaced (``set``, ``reset``)."""
        self._track_loaded(history)
        self._compactor.reset()

    def _new_keeper(self) -> CountKeeper:
        return CountKeeper(self._parts.store, self.session_id, self._parts.counter)

    def _counts(self) -> CountKeeper:
        """The session's counts not yet kept in the store (shared like its history)."""
        keepers = self._parts.keepers
        keeper = keepers.get(self.session_id)
        if keeper is None:  # nothing loaded yet, so nothing to track
            keeper = keepers[self.session_id] = self._new_keeper()
        return keeper

    async def _io(self, fn: Any, *args: Any) -> Any:
        """Run a store call: in a thread unless the store lives in memory."""
        if isinstance(self.store, cf.MemoryStore):
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    def _extra_tokens(
        self, history: Sequence[cf.Message], input: Any, initial_token_count: int
    ) -> int:
        """What the caller adds beside the returned history: its prefix count, the system
        prompt it prepends, the input it appends (unless already stored) and the reserve."""
        if not isinstance(initial_token_count, int) or initial_token_count < 0:
            raise ConfigurationError(
                f"initial_token_count must be an int >= 0, got {initial_token_count!r}")
        counter = self._parts.counter
        extra = initial_token_count + self.reserved_tokens
        if self.system_prompt:
            extra += counter.count_message(cf.Message("system", self.system_prompt))
        if isinstance(input, str) and input and not (history and history[-1].text == input):
            extra += counter.count_message(cf.Message("user", input))
        return extra


def _default_budget(token_limit: int | None, llm: Any) -> cf.Budget:
    if token_limit is not None:
        return cf.Budget(context_window=int(token_limit))
    metadata = getattr(llm, "metadata", None)
    if metadata is not None:
        return budget_of(metadata)
    return cf.Budget(context_window=DEFAULT_CONTEXT_WINDOW)


def _counted(messages: list[cf.Message], parts: _serde.Parts) -> list[cf.Message]:
    """``messages``, counted first when the store outlives the process. A store in memory
    lives no longer than the counts the history's messages cache themselves, so there the
    next ``get`` counts them (tokenizing was half the cost of a put)."""
    if not isinstance(parts.store, cf.MemoryStore):
        for message in messages:
            parts.counter.count_message(message)
    return messages


def _settled(history: list[cf.Message]) -> Sequence[cf.Message]:
    """The history without a trailing tool round still waiting for results.

    A call without its result cannot be sent to a provider, and answering it with a
    placeholder would tell the model it failed; the round joins the view once its last
    result is put. Holding it back also keeps the Compactor on its incremental path.
    """
    k = len(history)
    while k and history[k - 1].role == "tool":
        k -= 1
    if k == 0 or not history[k - 1].tool_calls:
        return history
    answered = {m.tool_call_id for m in history[k:]}
    if all(c.id in answered for c in history[k - 1].tool_calls):
        return history
    return history[: k - 1]


def _compactable(history: Sequence[cf.Message]) -> bool:
    """Whether a view can be built: a history without any user message is returned as is."""
    return any(m.role == "user" for m in history)


def _revive_parts(
    data: Mapping[str, Any], session_id: str, live: _serde.Parts | None, kwargs: Mapping[str, Any]
) -> _serde.Parts:
    budget = kwargs.get("budget") or (live.budget if live else
                                      _serde.revive_budget(data["budget"]))
    owns = True
    if "store" in kwargs:
        store, url = _serde.open_store(kwargs["store"])
        owns = store is not kwargs["store"]
    elif live is not None:
        store, url, owns = live.store, live.store_url, live.owns_store
    else:
        store, url = _serde.revive_store(data["store"], session_id)
    return _serde.Parts(
        policy=kwargs.get("policy") or (live.policy if live else
                                        _serde.revive_policy(data["policy"])),
        budget=budget,
        counter=kwargs.get("counter") or (live.counter if live else
                                          _serde.revive_counter(data.get("counter"), budget)),
        summarizer=kwargs.get("summarizer") or (live.summarizer if live else None),
        retry=kwargs.get("retry") or (live.retry if live else None),
        store=store, store_url=url, owns_store=owns,
    )
