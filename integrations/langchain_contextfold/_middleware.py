"""``CompactionMiddleware``: compaction for ``langchain.agents.create_agent``.

Built on ``wrap_model_call`` / ``awrap_model_call``: the agent's state keeps every message;
only the request the model receives is compacted (``request.override(messages=...)``).
The system prompt and the tool definitions count against the budget. A context-overflow
error from the model compacts with force and retries (at most twice). A conversation that
went idle (seed 001: nudged repeatedly without a real user prompt) ends the loop: the
model is not called and the agent receives an ``AIMessage`` without tool calls saying so.

Example::

    agent = create_agent(
        "openai:gpt-4o", tools,
        middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(),
                                         budget=cf.Budget.for_model("gpt-4o"))],
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import ensure_config

from contextfold import Budget, Policy, TokenCounter

from ._engine import Conversation, Engine, View, conversation_key, idle_reply
from ._events import COMPACTION_EVENT, IDLE_EVENT, aemit, emit, report_payload
from ._summarizer import ChatModelSummarizer

__all__ = ["CompactionMiddleware"]

Result = ModelResponse[Any] | AIMessage


class _AgentModelSummarizer(ChatModelSummarizer):
    """Summarizes with the model of the request being compacted (set before each call)."""

    def __init__(self) -> None:
        super().__init__(model=None)  # type: ignore[arg-type]


def _reply_of(result: Any) -> BaseMessage | None:
    if isinstance(result, AIMessage):
        return None if result.response_metadata.get("contextfold_idle") else result
    response = getattr(result, "model_response", result)  # ExtendedModelResponse
    for message in getattr(response, "result", ()):
        if isinstance(message, AIMessage):
            return message
    return None


class CompactionMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Compacts what the agent's model sees on every call; the state keeps everything.

    Args:
        policy: the compaction policy (``cf.ThresholdPolicy()``, ``cf.LoopSlicePolicy()``...).
        budget: the model's token budget.
        summarizer: makes summaries; default a :class:`ChatModelSummarizer` over the agent's
            own model. Pass ``cf.ExtractiveSummarizer()`` for summaries without an LLM.
        store: a history store; every message of the conversation is kept there.
        counter: how to count; default ``counter_for_model(budget.model)``.
        max_conversations: conversations (thread ids) kept in memory.

    One Compactor per ``thread_id`` of the run's config (``"default"`` without one).
    """

    def __init__(
        self,
        *,
        policy: Policy,
        budget: Budget,
        summarizer: Any = None,
        store: Any = None,
        counter: TokenCounter | None = None,
        max_conversations: int = 1024,
    ) -> None:
        super().__init__()
        self._agent_summarizer = _AgentModelSummarizer() if summarizer is None else None
        self.engine = Engine(
            policy=policy, budget=budget, counter=counter,
            summarizer=summarizer if summarizer is not None else self._agent_summarizer,
            store=store, max_conversations=max_conversations,
        )

    def _begin(self, request: ModelRequest) -> tuple[Conversation, list[BaseMessage], Any]:
        if self._agent_summarizer is not None:
            self._agent_summarizer.model = request.model
        conv = self.engine.conversation(conversation_key(ensure_config()))
        messages: list[BaseMessage] = list(request.messages)
        if request.system_message is not None:
            messages.insert(0, request.system_message)
        return conv, messages, self.engine.tool_dicts(request.tools)

    def _compacted(self, request: ModelRequest, view: View) -> ModelRequest:
        out: list[Any] = view.messages  # AnyMessage: every class from_core builds
        system = request.system_message
        if system is not None and out and out[0] is system:
            return request.override(messages=list(out[1:]))
        if out and isinstance(out[0], SystemMessage):
            return request.override(system_message=out[0], messages=list(out[1:]))
        return request.override(system_message=None, messages=list(out))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse[Any]],
    ) -> Any:
        """Compact the request, call the model, retry on overflow, end an idle loop."""
        conv, messages, tools = self._begin(request)
        writer = getattr(request.runtime, "stream_writer", None)

        def send(view: View) -> Result:
            if view.changed:
                emit(COMPACTION_EVENT, report_payload(view.result.report, conv.key), writer=writer)
            reason = conv.idle_reason
            if reason is not None:
                emit(IDLE_EVENT, {"conversation_id": conv.key, "reason": reason}, writer=writer)
                return idle_reply(reason)
            return handler(self._compacted(request, view))

        return self.engine.call(conv, messages, tools, send, _reply_of)

    async def awrap_model_call(
        self, request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """The async form of :meth:`wrap_model_call`."""
        conv, messages, tools = self._begin(request)
        writer = getattr(request.runtime, "stream_writer", None)

        async def send(view: View) -> Result:
            if view.changed:
                await aemit(COMPACTION_EVENT, report_payload(view.result.report, conv.key),
                            writer=writer)
            reason = conv.idle_reason
            if reason is not None:
                await aemit(IDLE_EVENT, {"conversation_id": conv.key, "reason": reason},
                            writer=writer)
                return idle_reply(reason)
            return await handler(self._compacted(request, view))

        return await self.engine.acall(conv, messages, tools, send, _reply_of)
