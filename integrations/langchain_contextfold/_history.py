"""A chat-message history whose ``messages`` are the compacted view.

``RunnableWithMessageHistory`` users get compaction by swapping the history factory::

    def get_history(session_id: str) -> CompactingChatMessageHistory:
        return CompactingChatMessageHistory(
            FileChatMessageHistory(f"{session_id}.json"),
            policy=cf.ThresholdPolicy(), budget=budget, conversation_id=session_id,
        )

    chain = RunnableWithMessageHistory(prompt | model, get_history, ...)

Every message is kept in the wrapped history (and in the contextfold store when one is
given); ``messages`` / ``aget_messages`` return what the model should see. Use
[`full_messages`][langchain_contextfold.CompactingChatMessageHistory.full_messages] for everything.

``BaseChatMessageHistory`` and ``RunnableWithMessageHistory`` are deprecated since
langchain-core 1.6 (LangGraph persistence replaces them) but still widely used; this
wrapper is supported while they exist. New code should prefer ``CompactionMiddleware``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from contextfold import Budget, TokenCounter
from contextfold.errors import ConfigurationError
from contextfold.integration import AnySummarizer
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._convert import from_core, to_core
from ._engine import Engine

__all__ = ["CompactingChatMessageHistory"]


class CompactingChatMessageHistory(BaseChatMessageHistory):
    """Wraps a chat history (or a contextfold store): full storage, compacted reading.

    Args:
        history: the history that keeps every message; ``None`` keeps them in ``store``.
        policy: the compaction policy.
        budget: the budget of the history's part of the prompt: leave room for what the
            prompt adds around it (system prompt, the new question).
        summarizer: makes summaries; default ``cf.ExtractiveSummarizer``.
        store: a contextfold store that also receives every message (searchable).
        conversation_id: the conversation's key in the store (the session id).
        counter: how to count; default ``counter_for_model(budget.model)``.
        tools: tool definitions sent with the requests, so they count against the budget.

    Raises:
        ConfigurationError: neither ``history`` nor ``store`` was given.
    """

    def __init__(
        self,
        history: BaseChatMessageHistory | None = None,
        *,
        policy: Policy,
        budget: Budget,
        summarizer: AnySummarizer | None = None,
        store: HistoryStore | None = None,
        conversation_id: str = "default",
        counter: TokenCounter | None = None,
        tools: Sequence[Any] | None = None,
    ) -> None:
        if history is None and store is None:
            raise ConfigurationError("CompactingChatMessageHistory needs a history or a store")
        self.history = history
        self.store = store
        self.conversation_id = conversation_id
        self.engine = Engine(policy=policy, budget=budget, counter=counter,
                             summarizer=summarizer, store=store, persist=False)
        self.tools = list(tools or [])

    @property
    def full_messages(self) -> list[BaseMessage]:
        """Every message, as stored."""
        if self.history is not None:
            return list(self.history.messages)
        return self._stored()

    def _stored(self) -> list[BaseMessage]:
        assert self.store is not None  # __init__ requires a history or a store
        return from_core(self.store.load(self.conversation_id))

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The compacted view of the history (what the model should see)."""
        loop = self.engine.conversations.get(self.conversation_id)
        return loop.view(self.full_messages, tools=self.engine.tool_dicts(self.tools)).messages

    async def aget_messages(self) -> list[BaseMessage]:
        """The async form of
        [`messages`][langchain_contextfold.CompactingChatMessageHistory.messages]."""
        if self.history is not None:
            full = list(await self.history.aget_messages())
        else:
            full = self._stored()
        loop = self.engine.conversations.get(self.conversation_id)
        view = await loop.aview(full, tools=self.engine.tool_dicts(self.tools))
        return view.messages

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Keep ``messages`` in the wrapped history and in the store."""
        if self.history is not None:
            self.history.add_messages(messages)
        if self.store is not None:
            self.store.append(self.conversation_id, to_core(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """The async form of
        [`add_messages`][langchain_contextfold.CompactingChatMessageHistory.add_messages]."""
        if self.history is not None:
            await self.history.aadd_messages(messages)
        if self.store is not None:
            self.store.append(self.conversation_id, to_core(messages))

    def clear(self) -> None:
        """Clear the wrapped history and the store's conversation, and start over."""
        if self.history is not None:
            self.history.clear()
        if self.store is not None:
            self.store.clear(self.conversation_id)
        self.engine.conversations.get(self.conversation_id).compactor.reset()
