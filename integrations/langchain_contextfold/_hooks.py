"""Compaction for LangGraph's prebuilt agent (``create_react_agent``).

The ``pre_model_hook`` returns ``{"llm_input_messages": [...]}``: the graph's state keeps
every message, the model receives the compacted view (never an empty list). The optional
``post_model_hook`` feeds the reply's ``usage_metadata`` back for calibration. A hook
cannot retry the model call, so the overflow retry needs the model wrapped with
[`with_compaction`][langchain_contextfold.with_compaction] (which also ends the loop when the
conversation goes idle).

The prebuilt agent adds its prompt and sends the tool definitions after the hook ran, so
the hook must be told both: ``tools`` and ``system_prompt`` are required (pass ``[]`` and
``None`` when the agent has none), and both count against the budget.

Example::

    hook = CompactionHook(policy=cf.ThresholdPolicy(), budget=budget, tools=tools,
                          system_prompt=prompt)
    agent = create_react_agent(model, tools, prompt=prompt,
                               pre_model_hook=hook.pre_model_hook,
                               post_model_hook=hook.post_model_hook)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from contextfold import Budget, TokenCounter
from contextfold.integration import AnySummarizer, View
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._engine import Engine, Loop, thread_key, usage_of
from ._events import COMPACTION_EVENT, IDLE_EVENT, aemit, emit, report_payload

__all__ = ["CompactionHook"]


def _messages_of(state: Any) -> list[BaseMessage]:
    messages = state.get("messages") if isinstance(state, dict) else state.messages
    return list(messages or [])


class CompactionHook:
    """The hooks for LangGraph's prebuilt agent, sharing one Compactor per thread.

    Args:
        policy: the compaction policy.
        budget: the model's token budget.
        tools: the agent's tools, so their definitions count against the budget (``[]``
            when it has none).
        system_prompt: the agent's prompt (added after the hook), so it counts too
            (``None`` when it has none).
        summarizer: makes summaries; default ``cf.ExtractiveSummarizer``.
        store: a history store; every message of the conversation is kept there.
        counter: how to count; default ``counter_for_model(budget.model)``.
        max_conversations: conversations (thread ids) kept in memory.
    """

    def __init__(
        self,
        *,
        policy: Policy,
        budget: Budget,
        tools: Sequence[Any],
        system_prompt: str | SystemMessage | None,
        summarizer: AnySummarizer | None = None,
        store: HistoryStore | None = None,
        counter: TokenCounter | None = None,
        max_conversations: int = 1024,
    ) -> None:
        self.engine = Engine(policy=policy, budget=budget, counter=counter,
                             summarizer=summarizer, store=store,
                             max_conversations=max_conversations)
        self.tools = list(tools or [])
        self.system = SystemMessage(system_prompt) if isinstance(system_prompt, str) \
            else system_prompt

    def _inputs(self, state: Any, config: RunnableConfig) -> tuple[Loop, list[BaseMessage]]:
        messages = _messages_of(state)
        if self.system is not None:
            messages.insert(0, self.system)
        return self.engine.loop(config), messages

    def _output(self, view: View[BaseMessage], state: Any) -> dict[str, Any]:
        out = list(view.messages)
        if self.system is not None and out and out[0] is self.system:
            out = out[1:]
        return {"llm_input_messages": out or _messages_of(state)}

    def _pre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        loop, messages = self._inputs(state, config)
        view = loop.view(messages, tools=self.engine.tool_dicts(self.tools))
        if view.changed:
            emit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
                 config=config)
        if loop.idle_reason is not None:
            emit(IDLE_EVENT, {"conversation_id": loop.key, "reason": loop.idle_reason},
                 config=config)
        return self._output(view, state)

    async def _apre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        loop, messages = self._inputs(state, config)
        view = await loop.aview(messages, tools=self.engine.tool_dicts(self.tools))
        if view.changed:
            await aemit(COMPACTION_EVENT, lambda: report_payload(view.result.report, loop.key),
                        config=config)
        if loop.idle_reason is not None:
            await aemit(IDLE_EVENT, {"conversation_id": loop.key, "reason": loop.idle_reason},
                        config=config)
        return self._output(view, state)

    def _post(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _messages_of(state)
        if thread_key(config) is None:  # the call's own loop is gone with the call
            return {}
        if messages and isinstance(messages[-1], AIMessage):
            loop, _ = self._inputs(state, config)
            loop.delivered(usage_of(messages[-1]))
        return {}

    async def _apost(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return self._post(state, config)

    @property
    def pre_model_hook(self) -> Runnable[Any, dict[str, Any]]:
        """The node to pass as ``create_react_agent(pre_model_hook=...)``."""
        return RunnableLambda(self._pre, afunc=self._apre, name="contextfold_pre_model_hook")

    @property
    def post_model_hook(self) -> Runnable[Any, dict[str, Any]]:
        """The node to pass as ``create_react_agent(post_model_hook=...)`` (calibration)."""
        return RunnableLambda(self._post, afunc=self._apost, name="contextfold_post_model_hook")

