"""Search tools as FunctionTools, scoped to one session; summaries by a LlamaIndex LLM."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from li_fakes import COUNTER, RecordingMockLLM
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM

import contextfold as cf
from contextfold.errors import SummarizerError
from contextfold.integration import SentRequest
from contextfold.policy import SummaryRequest
from llama_index.memory.contextfold import (
    CompactingMemory,
    LLMSummarizer,
    from_llama_index,
    search_tools_for,
)


def _memory(session_id: str, store: Any, **kwargs: Any) -> CompactingMemory:
    return CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), counter=COUNTER,
                                          budget=cf.Budget(context_window=1500), store=store,
                                          session_id=session_id, **kwargs)


# -- search tools ------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if request.param == "memory":
        return cf.MemoryStore()
    return cf.SQLiteStore(tmp_path / "history.db")


def test_search_tools_read_only_their_session(store: Any) -> None:
    mine, other = _memory("mine", store), _memory("other", store)
    mine.put_messages([ChatMessage(role="user", content="Where is the iron ore cargo?"),
                       ChatMessage(role="assistant", content="Iron ore is at station 7.")])
    other.put(ChatMessage(role="user", content="iron ore secret of another user"))
    tools = {t.metadata.name: t for t in search_tools_for(mine.store, mine.session_id)}
    assert set(tools) == {"search_messages", "search_reasoning", "read_message"}
    found = json.loads(tools["search_messages"].call(query="iron ore").content)
    texts = [r["content"] for r in found["results"]]
    assert texts and all("another user" not in t for t in texts)
    handle = found["results"][0]["handle"]
    whole = json.loads(tools["read_message"].call(handle=handle).content)
    assert "iron ore" in whole["content"].lower()
    theirs = json.loads(search_tools_for(store, "other")[0].call(query="secret").content)
    foreign = json.loads(tools["read_message"].call(handle=theirs["results"][0]["handle"]).content)
    assert "error" in foreign


def test_search_tool_schema_is_the_specs(store: Any) -> None:
    tool = search_tools_for(store, "s")[0]
    schema = tool.metadata.to_openai_tool()["function"]["parameters"]
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"]["maximum"] == 50
    bad = json.loads(tool.call(query="  ").content)
    assert "error" in bad  # the model is told, not crashed


async def test_search_tools_async_call(store: Any) -> None:
    memory = _memory("a", store)
    await memory.aput(ChatMessage(role="user", content="the refund for order 991"))
    tool = search_tools_for(memory.store, "a")[0]
    out = await tool.acall(query="refund 991")
    assert json.loads(out.content)["count"] == 1


# -- summaries by a LlamaIndex LLM -------------------------------------------------------


def _request() -> SummaryRequest:
    messages = from_llama_index([
        ChatMessage(role="user", content="Book flight AB123 for Ada."),
        ChatMessage(role="assistant", content="Booked AB123, ref XK9."),
    ])
    return SummaryRequest(messages=tuple(messages), instructions="Summarize.", max_tokens=90)


def test_llm_summarizer_sync_and_prompt() -> None:
    llm = RecordingMockLLM(max_tokens=12)
    text = LLMSummarizer(llm).summarize(_request())
    assert text.startswith("text")
    prompt = llm.requests[0]
    assert prompt[0].role.value == "system"
    assert "AB123" in prompt[1].content and "ref XK9" in prompt[1].content
    assert "about 90 tokens" in prompt[1].content


def test_a_cache_true_request_repeats_the_previous_request() -> None:
    llm = RecordingMockLLM(max_tokens=12)
    previous = _request().messages
    request = replace(_request(), sent=SentRequest(
        messages=(*previous,), positions=(0, 1), tools=()))
    summarizer = LLMSummarizer(llm, cache_true=True)
    assert summarizer.summarize(request).startswith("text")
    sent = llm.requests[0]
    # The previous request's messages as they were, then the instruction naming them.
    assert [m.content for m in sent[:2]] == ["Book flight AB123 for Ada.", "Booked AB123, ref XK9."]
    assert sent[-1].role.value == "user" and "compress messages 1 to 2 above" in sent[-1].content
    assert "about 90 tokens" in sent[-1].content


def test_an_llm_whose_api_joins_turns_gets_summary_requests_in_todays_form() -> None:
    # Anthropic's Messages API joins consecutive user turns: positions would name others.
    from llama_index.llms.anthropic import Anthropic

    assert LLMSummarizer(Anthropic(api_key="test"), cache_true=True).cache_true is False
    assert LLMSummarizer(RecordingMockLLM(max_tokens=12), cache_true=True).cache_true is True


async def test_llm_summarizer_async() -> None:
    llm = RecordingMockLLM(max_tokens=12)
    assert (await LLMSummarizer(llm).asummarize(_request())).startswith("text")
    assert len(llm.requests) == 1


def test_llm_summarizer_raises_on_an_empty_reply() -> None:
    def empty(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        return ChatMessage(role="assistant", content="   ")

    with pytest.raises(SummarizerError):
        LLMSummarizer(MockFunctionCallingLLM(response_generator=empty)).summarize(_request())
    with pytest.raises(TypeError):
        LLMSummarizer("gpt-4o")  # type: ignore[arg-type]


async def test_memory_summarizes_through_the_llm() -> None:
    llm = RecordingMockLLM(max_tokens=15)
    memory = _memory("sum", cf.MemoryStore(), summarizer=LLMSummarizer(llm))
    for i in range(20):
        await memory.aput(ChatMessage(role="user", content=f"step {i}: " + "detail " * 40))
        await memory.aput(ChatMessage(role="assistant", content=f"done {i}: " + "note " * 40))
        await memory.aget()
    assert llm.requests  # the summary calls went through the LlamaIndex LLM
    view = await memory.aget()
    assert any("text text" in (m.content or "") for m in view)
