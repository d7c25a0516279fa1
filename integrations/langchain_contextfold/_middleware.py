"""``CompactionMiddleware``: compaction for ``langchain.agents.create_agent``.

Built on ``wrap_model_call`` / ``awrap_model_call``: the agent's state keeps every message;
only the request the model receives is compacted (``request.override(messages=...)``).
The system prompt and the tool definitions count against the budget. A context-overflow
error from the model compacts with force and retries (at most twice). A conversation that
went idle (the message-format guarantee: nudged repeatedly without a real user prompt) ends the
loop: the model is not called and the agent receives an ``AIMessage`` without tool calls saying so.

Example::

    agent = create_agent(
        "openai:gpt-4o", tools,
        middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(),
                                         budget=cf.Budget.for_model("gpt-4o"))],
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import ensure_config
from typing_extensions import NotRequired

from contextfold import Budget, TokenCounter
from contextfold.integration import AnySummarizer, Usage, View
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._engine import Engine, Loop, idle_reply, new_run_key, thread_key, usage_of
from ._events import COMPACTION_EVENT, IDLE_EVENT, aemit, emit, report_payload
from ._summarizer import ChatModelSummarizer

__all__ = ["CompactionMiddleware"]

Result = ModelResponse[Any] | AIMessage

RUN_FIELD = "contextfold_run"
"""The state field that carries the key of a run that names no conversation."""


class CompactionState(AgentState[Any]):
    """The agent's state with the key of a run that names no thread (private: never in the
    agent's input or output)."""

    contextfold_run: NotRequired[Annotated[str | None, PrivateStateAttr]]


class _AgentModelSummarizer(ChatModelSummarizer):
    """Summarizes with the model of the request being compacted (set before each call)."""

    def __init__(self) -> None:
        super().__init__(model=None, max_input_tokens=None,  # type: ignore[arg-type]
                         cache_true=True)


def _reply_of(result: Any) -> BaseMessage | None:
    if isinstance(result, AIMessage):
        return result
    response = getattr(result, "model_response", result)  # ExtendedModelResponse
    for message in getattr(response, "result", ()):
        if isinstance(message, AIMessage):
            return message
    return None


def _usage(result: Any) -> Usage | None:
    return usage_of(_reply_of(result))


class CompactionMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Compacts what the agent's model sees on every call; the state keeps everything.

    Args:
        policy: the compaction policy (``cf.ThresholdPolicy()``, ``cf.LoopSlicePolicy()``...).
        budget: the model's token budget.
        summarizer: makes summaries; default a
            [`ChatModelSummarizer`][langchain_contextfold.ChatModelSummarizer] over the agent's own
            model: each summary is one more request to it, billed like the agent's own (the span
                being summarized in, the summary out; a span longer than its
            window takes a request per part and one to merge them), counted in
            ``report.llm_calls`` and the ``contextfold_compaction`` event's ``llm_calls``.
            Pass ``cf.ExtractiveSummarizer()`` for summaries without an LLM, or a
            ``ChatModelSummarizer`` over a cheaper model.
        store: a history store; every message of the conversation is kept there.
        counter: how to count; default ``counter_for_model(budget.model)``.
        max_conversations: conversations (thread ids) kept in memory.

    One Compactor per ``thread_id`` of the run's config. A run without one is a conversation
    of its own: its Compactor lives while the agent runs and is dropped when it ends, and
    nothing of it is stored (give a ``thread_id`` to keep and resume a conversation).
    """

    state_schema = CompactionState

    def __init__(
        self,
        *,
        policy: Policy,
        budget: Budget,
        summarizer: AnySummarizer | None = None,
        store: HistoryStore | None = None,
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

    # -- the run: a key for a run without a thread id, dropped when the agent ends --------

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Give a run that names no thread a key of its own, carried in its state."""
        if thread_key(ensure_config()) is not None or state.get(RUN_FIELD):
            return None
        return {RUN_FIELD: new_run_key()}

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The async form of
        [`before_agent`][langchain_contextfold.CompactionMiddleware.before_agent]."""
        return self.before_agent(state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The run ended. A thread's store receives the agent's final answer (no model call
        of this run carries it); a run without a thread id leaves nothing behind."""
        key = thread_key(ensure_config())
        if key is None:
            run = state.get(RUN_FIELD)
            if run:
                self.engine.runs.drop(run)
                return {RUN_FIELD: None}
            return None
        if key in self.engine.conversations:
            loop = self.engine.conversations.get(key)
            messages: list[BaseMessage] = list(state.get("messages") or [])
            last = loop.last_input
            # the system prompt the model calls carried is not in the state: put it back
            # where they had it, so every message keeps its position (and stable id)
            if last and isinstance(last[0], SystemMessage) and (
                    not messages or messages[0] is not last[0]):
                messages.insert(0, last[0])
            loop.record(messages)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The async form of
        [`after_agent`][langchain_contextfold.CompactionMiddleware.after_agent]."""
        return self.after_agent(state, runtime)

    def _begin(self, request: ModelRequest) -> tuple[Loop, list[BaseMessage], Any]:
        if self._agent_summarizer is not None:
            self._agent_summarizer.model = request.model
        messages: list[BaseMessage] = list(request.messages)
        if request.system_message is not None:
            messages.insert(0, request.system_message)
        run = (request.state or {}).get(RUN_FIELD)
        loop = self.engine.loop(ensure_config(), run if isinstance(run, str) else None)
        return loop, messages, self.engine.tool_dicts(request.tools)

    def _compacted(self, request: ModelRequest, view: View[BaseMessage]) -> ModelRequest:
        out: list[Any] = view.messages  # AnyMessage: every class from_core builds
        if view.request:  # the provider fields the policy sends (its own compaction)
            request = request.override(model_settings={**request.model_settings,
                                                       **view.request})
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
        loop, messages, tools = self._begin(request)
        writer = getattr(request.runtime, "stream_writer", None)

        def announce(view: View[BaseMessage]) -> None:
            if view.changed:
                emit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
                     writer=writer)
            if loop.idle_reason is not None:
                emit(IDLE_EVENT, {"conversation_id": loop.key, "reason": loop.idle_reason},
                     writer=writer)

        def send(view: View[BaseMessage]) -> Result:
            announce(view)
            return handler(self._compacted(request, view))

        def idle(reason: str, view: View[BaseMessage]) -> Result:
            announce(view)
            return idle_reply(reason)

        return loop.call(messages, send, usage=_usage, tools=tools, idle=idle)

    async def awrap_model_call(
        self, request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """The async form of
        [`wrap_model_call`][langchain_contextfold.CompactionMiddleware.wrap_model_call]."""
        loop, messages, tools = self._begin(request)
        writer = getattr(request.runtime, "stream_writer", None)

        async def announce(view: View[BaseMessage]) -> None:
            if view.changed:
                await aemit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
                            writer=writer)
            if loop.idle_reason is not None:
                await aemit(IDLE_EVENT, {"conversation_id": loop.key,
                                         "reason": loop.idle_reason}, writer=writer)

        async def send(view: View[BaseMessage]) -> Result:
            await announce(view)
            return await handler(self._compacted(request, view))

        async def idle(reason: str, view: View[BaseMessage]) -> Result:
            await announce(view)
            return idle_reply(reason)

        return await loop.acall(messages, send, usage=_usage, tools=tools, idle=idle)
