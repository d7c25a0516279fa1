"""The chat-history wrapper, the search tools and the chat-model summarizer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from lc_fakes import COUNTER, ToolCallingFakeModel, big_result, tool_round
from pydantic import Field

import contextfold as cf
from contextfold.errors import ConfigurationError, SummarizerError
from contextfold.policy import SummaryRequest
from contextfold.testing import assert_valid_within
from langchain_contextfold import (
    SEARCH_GUIDANCE,
    ChatModelSummarizer,
    CompactingChatMessageHistory,
    search_tools_for,
    to_core,
    with_compaction,
)

BUDGET = cf.Budget(context_window=8_000, output_reserve=1_000)
DEPRECATED = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")


def conversation(rounds: int) -> list[BaseMessage]:
    history: list[BaseMessage] = [HumanMessage("Fetch every page about iron ore")]
    for page in range(rounds):
        reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"c{page}"}])
        history += [reply, *tool_round(reply, 2000)]
    return history


# -- chat history -----------------------------------------------------------------------


@DEPRECATED
async def test_history_keeps_everything_and_reads_compacted() -> None:
    inner = InMemoryChatMessageHistory()
    store = cf.MemoryStore()
    history = CompactingChatMessageHistory(inner, policy=cf.ThresholdPolicy(), budget=BUDGET,
                                           counter=COUNTER, store=store, conversation_id="s1")
    messages = conversation(20)
    history.add_messages(messages[:21])
    await history.aadd_messages(messages[21:])
    assert inner.messages == messages and history.full_messages == messages
    assert len(store.load("s1")) == len(messages)
    view = history.messages
    assert_valid_within(to_core(view), BUDGET, COUNTER)
    assert COUNTER.count_messages(to_core(messages)) > BUDGET.input_budget
    assert [m.content for m in await history.aget_messages()] == [m.content for m in view]
    history.clear()
    assert inner.messages == [] and store.load("s1") == [] and history.messages == []


def test_history_in_the_store_alone() -> None:
    store = cf.MemoryStore()
    history = CompactingChatMessageHistory(policy=cf.TruncationPolicy(), budget=BUDGET,
                                           counter=COUNTER, store=store, conversation_id="s2")
    messages = conversation(20)
    history.add_messages(messages)
    assert [m.text for m in store.load("s2")] == [m.text for m in to_core(messages)]
    assert [m.content for m in history.full_messages] == [m.content for m in messages]
    assert_valid_within(to_core(history.messages), BUDGET, COUNTER)


def test_history_needs_somewhere_to_keep_messages() -> None:
    with pytest.raises(ConfigurationError):
        CompactingChatMessageHistory(policy=cf.ThresholdPolicy(), budget=BUDGET)


@DEPRECATED
def test_runnable_with_message_history_sees_the_compacted_view() -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    fake = ToolCallingFakeModel(rounds=0, check_sequence=False)
    sessions: dict[str, CompactingChatMessageHistory] = {}
    # The history is one part of the prompt: its budget leaves room for the rest.
    history_budget = cf.Budget(context_window=BUDGET.input_budget - 1_500)

    def get_history(session_id: str) -> CompactingChatMessageHistory:
        if session_id not in sessions:
            sessions[session_id] = CompactingChatMessageHistory(
                InMemoryChatMessageHistory(), policy=cf.TruncationPolicy(), budget=history_budget,
                counter=COUNTER, conversation_id=session_id)
        return sessions[session_id]

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer."), MessagesPlaceholder("history"), ("human", "{question}")])
    chain = RunnableWithMessageHistory(prompt | fake, get_history, input_messages_key="question",
                                       history_messages_key="history")
    for i in range(12):
        chain.invoke({"question": big_result(i, 0, 3000)},
                     config={"configurable": {"session_id": "u1"}})
    assert len(sessions["u1"].full_messages) == 24
    assert all(r.tokens <= BUDGET.input_budget for r in fake.requests)
    assert fake.requests[-1].tokens < COUNTER.count_messages(
        to_core(sessions["u1"].full_messages))


# -- search tools -----------------------------------------------------------------------


def test_search_tools_find_what_compaction_hid() -> None:
    store = cf.MemoryStore()
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = with_compaction(fake, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                            store=store, summarizer=cf.ExtractiveSummarizer())
    messages = conversation(20)
    model.invoke(messages, config={"configurable": {"thread_id": "t9"}})
    first = big_result(0, 0, 2000)[:40]  # the result's own text: "page 0.0: row0-0 row0-1..."
    assert not any(first in m.text for m in fake.requests[-1].core[2:])  # hidden now
    tools = {t.name: t for t in search_tools_for(store, "t9")}
    assert set(tools) == {"search_messages", "search_reasoning", "read_message"}
    found = json.loads(tools["search_messages"].invoke({"query": "row0-1"}))
    assert found["count"] >= 1
    handle = found["results"][0]["handle"]
    full = json.loads(tools["read_message"].invoke({"handle": handle}))
    assert full["content"] == big_result(0, 0, 2000)
    other = json.loads(tools["read_message"].invoke({"handle": "m:999999"}))
    assert "error" in other
    assert "search" in SEARCH_GUIDANCE


# -- summarizer -------------------------------------------------------------------------


def request(instructions: str = "Summarize: TASK, PROGRESS.") -> SummaryRequest:
    return SummaryRequest(messages=tuple(to_core(conversation(2))),
                             instructions=instructions, max_tokens=300, purpose="threshold")


class Recording(GenericFakeChatModel):
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    configs: list[Any] = Field(default_factory=list)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        self.seen.append(list(input))
        self.configs.append(config)
        return super().invoke(input, config, **kwargs)


async def test_chat_model_summarizer_sync_and_async() -> None:
    model = Recording(messages=iter(["TASK: fetch pages", AIMessage("PROGRESS: 2 pages")]))
    summarizer = ChatModelSummarizer(model)
    assert summarizer.summarize(request()) == "TASK: fetch pages"
    assert await summarizer.asummarize(request()) == "PROGRESS: 2 pages"
    system, prompt = model.seen[0]
    assert isinstance(system, SystemMessage)
    assert "TASK, PROGRESS" in prompt.content and "300 tokens" in prompt.content
    assert "fetch_page" in prompt.content and "row1-" in prompt.content
    assert "nostream" in model.configs[0]["tags"]


@pytest.mark.parametrize("reply", ["", "   ", RuntimeError("HTTP 503")])
def test_chat_model_summarizer_failures_are_raised_not_returned(reply: Any) -> None:
    class Failing(GenericFakeChatModel):
        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
            if isinstance(reply, Exception):
                raise reply
            return AIMessage(reply)

    with pytest.raises(SummarizerError):
        ChatModelSummarizer(Failing(messages=iter([]))).summarize(request())


def test_a_model_whose_api_joins_turns_gets_summary_requests_in_todays_form() -> None:
    # Anthropic's Messages API joins consecutive user turns (and tool results into them),
    # so a cache-true instruction naming messages by position would name others.
    from langchain_anthropic import ChatAnthropic

    claude = ChatAnthropic(model="claude-sonnet-4-6", api_key="test")  # type: ignore[call-arg]
    assert ChatModelSummarizer(claude, cache_true=True).cache_true is False
    assert ChatModelSummarizer(claude.bind_tools([]), cache_true=True).cache_true is False
    fake = GenericFakeChatModel(messages=iter([]))
    assert ChatModelSummarizer(fake, cache_true=True).cache_true is True
    assert ChatModelSummarizer(fake).cache_true is False


def test_with_compaction_summarizes_with_the_wrapped_model_by_default() -> None:
    summaries = GenericFakeChatModel(messages=iter(["TASK: iron ore. PROGRESS: pages 0-19"] * 5))
    model = with_compaction(summaries, policy=cf.SummaryPolicy(), budget=BUDGET,
                            counter=COUNTER)
    engine = model.engine
    assert isinstance(engine.summarizer, ChatModelSummarizer)
    assert engine.summarizer.model is summaries
