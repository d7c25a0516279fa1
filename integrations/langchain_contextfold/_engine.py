"""What every LangChain hook shares: the settings, one call loop per conversation, and the
LangChain side of a call (conversion, usage, the idle reply).

Conversations share state only through an explicit id (the run's ``thread_id``,
``session_id`` or ``conversation_id``). A call that names none gets a loop of its own that
lives no longer than its run and keeps nothing in the store: two users who open alike can
never meet in one loop, one Compactor or one stored conversation.

The call itself (compaction, the overflow retry, calibration, idle, persistence) is
contextfold's [`CallLoop`][contextfold.integration.CallLoop]; this module only tells it how to
convert LangChain messages and how to read a reply.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from contextfold import Budget, Compactor, Message, TokenCounter
from contextfold.errors import ConfigurationError
from contextfold.integration import (
    AnySummarizer,
    CallLoop,
    Conversations,
    Usage,
    with_stable_id,
)
from contextfold.policy import Policy
from contextfold.stores import HistoryStore

from ._convert import message_from_core, message_to_core
from ._overflow import overflow_classes

__all__ = [
    "IDLE_TEXT", "RUN_PREFIX", "Engine", "Loop", "idle_reply", "new_run_key", "thread_key",
    "usage_of",
]

Loop = CallLoop[BaseMessage]

IDLE_TEXT = "[contextfold: conversation idle: {reason}. Waiting for a new user message.]"
"""The reply that ends an agent loop when the conversation went idle."""

RUN_PREFIX = "run-"
"""Key prefix of the loop of a run that names no conversation (a random id follows)."""


def to_core(message: BaseMessage, position: int) -> Message:
    """One message at a position of the conversation; one without an id of its own gets a
    stable one, so a restarted process recognises what its store holds."""
    core = message_to_core(message, index=position)
    return core if message.id is not None else with_stable_id(position, core)


class Engine:
    """The shared machinery: settings and a bounded map of conversations.

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
        summarizer: AnySummarizer | None = None,
        store: HistoryStore | None = None,
        max_conversations: int = 1024,
        persist: bool = True,
    ) -> None:
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"budget must be a contextfold.Budget, got {budget!r}")
        if not isinstance(policy, Policy):
            raise ConfigurationError(f"policy must be a contextfold policy, got {policy!r}")
        self.policy = policy
        self.budget = budget
        self.counter = counter
        self.summarizer = summarizer
        self.store = store
        self.persist = persist
        self.conversations: Conversations[BaseMessage] = Conversations(
            self._new_loop, max_conversations)
        # the loops of runs that name no conversation, while their run lasts (the
        # middleware drops them when the agent ends); never stored, never looked up by content
        self.runs: Conversations[BaseMessage] = Conversations(
            self._new_run_loop, max_conversations)
        self._tools_memo: tuple[tuple[int, ...], list[Any], list[dict[str, Any]]] | None = None

    def _new_loop(self, key: str, *, store: HistoryStore | None = None,
                  persist: bool | None = None) -> Loop:
        compactor = Compactor(
            policy=self.policy, budget=self.budget, counter=self.counter,
            summarizer=self.summarizer, store=self.store if persist is None else store,
            conversation_id=key,
        )
        return CallLoop(compactor, to_core=to_core, from_core=message_from_core,
                        persist=self.persist if persist is None else persist,
                        overflow_classes=overflow_classes())

    def _new_run_loop(self, key: str) -> Loop:
        return self._new_loop(key, store=None, persist=False)

    def loop(self, config: RunnableConfig | None, run: str | None = None) -> Loop:
        """The loop of a call: its thread id's, else its run's (``run``: a key from
        `new_run_key` the run carries), else one for this call alone."""
        key = thread_key(config)
        if key is not None:
            return self.conversations.get(key)
        if run is not None:
            return self.runs.get(run)
        return self._new_run_loop(new_run_key())

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


def new_run_key() -> str:
    """A fresh key for a run that names no conversation."""
    return RUN_PREFIX + uuid.uuid4().hex


def usage_of(reply: BaseMessage | None) -> Usage | None:
    """The usage a reply reports (``usage_metadata``), for calibration: the figures as
    given (the call loop leaves out of calibration those that are not token counts)."""
    usage = getattr(reply, "usage_metadata", None)
    if not usage or not usage.get("input_tokens"):
        return None
    return Usage(usage["input_tokens"], usage.get("output_tokens"))


def idle_reply(reason: str) -> AIMessage:
    """The reply that ends an agent loop: no tool calls, says why."""
    return AIMessage(IDLE_TEXT.format(reason=reason), response_metadata={"contextfold_idle": True})


def thread_key(config: RunnableConfig | None) -> str | None:
    """The conversation a run names: ``thread_id``, else ``session_id`` or
    ``conversation_id``; ``None`` when it names none."""
    configurable = (config or {}).get("configurable") or {}
    for name in ("thread_id", "session_id", "conversation_id"):
        value = configurable.get(name)
        if value is not None and value != "":
            return str(value)
    return None
