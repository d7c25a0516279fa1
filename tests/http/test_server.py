"""The loopback server behaves like the OpenAI API where compaction is concerned: the real
clients talk to it, it enforces the window and the format rules with the API's error body,
counts like OpenAI's cookbook, and streams with usage."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from llama_index.core.base.llms.types import ChatMessage
from llama_index.llms.openai import OpenAI

from contextfold.integration import overflow_of
from openai_server import ENCODING, DocumentAgent, Reply, count_prompt

pytestmark = pytest.mark.http


def chat_openai(server: Any, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="test",
                      max_retries=0, **kwargs)


def test_the_real_clients_get_replies_with_usage(openai_server: Any) -> None:
    server = openai_server(window=4_000)
    reply = chat_openai(server).invoke([HumanMessage("Hello there")])
    assert reply.content.startswith("echo: Hello there")
    assert reply.usage_metadata["input_tokens"] == server.requests[0].prompt_tokens
    li = OpenAI(model="gpt-4o-mini", api_base=server.base_url, api_key="test", max_retries=0)
    response = li.chat([ChatMessage(role="user", content="Hi from LlamaIndex")])
    assert "Hi from LlamaIndex" in str(response.message.content)
    assert response.raw.usage.prompt_tokens == server.requests[1].prompt_tokens


async def test_streaming_ends_with_a_usage_chunk(openai_server: Any) -> None:
    server = openai_server(window=4_000)
    model = chat_openai(server, stream_usage=True)
    chunks = [c async for c in model.astream([HumanMessage("stream me please")])]
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert "stream me please" in str(total.content)
    assert total.usage_metadata["input_tokens"] == server.requests[0].prompt_tokens


def test_streamed_tool_calls_arrive_whole(openai_server: Any) -> None:
    server = openai_server(responder=lambda body: Reply(tool_calls=[("read_document",
                                                                     {"number": 12})]))
    model = chat_openai(server).bind_tools([DocumentAgent.TOOL])
    chunks = list(model.stream([HumanMessage("read 12")]))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.tool_calls[0]["name"] == "read_document"
    assert total.tool_calls[0]["args"] == {"number": 12}


def test_the_window_is_enforced_with_the_apis_overflow_body(openai_server: Any) -> None:
    server = openai_server(window=200)
    with pytest.raises(openai.BadRequestError) as caught:
        chat_openai(server).invoke([HumanMessage("word " * 400)])
    assert caught.value.code == "context_length_exceeded"
    found = overflow_of(caught.value)
    assert found is not None and found.limit == 200
    assert found.prompt_tokens == server.requests[0].prompt_tokens > 200
    with pytest.raises(openai.BadRequestError) as requested:
        chat_openai(server, max_tokens=150).invoke([HumanMessage("word " * 60)])
    stated = overflow_of(requested.value)
    assert stated is not None and stated.completion_tokens == 150


CALL = AIMessage("", tool_calls=[{"name": "read_document", "args": {"number": 1}, "id": "c1"}])


@pytest.mark.parametrize(("messages", "complaint"), [
    ([HumanMessage("go"), CALL], "did not have response messages"),
    ([HumanMessage("go"), CALL, HumanMessage("wait"), ToolMessage("r", tool_call_id="c1")],
     "must be followed by tool messages"),
    ([HumanMessage("go"), ToolMessage("r", tool_call_id="zz")],
     "must be a response to a preceeding message"),
    ([HumanMessage("go"), CALL, ToolMessage("r", tool_call_id="c1"),
      ToolMessage("r", tool_call_id="c1")], "must be a response to a preceeding message"),
    ([AIMessage("hello"), HumanMessage("go")], "first non-system message must be a user"),
    ([HumanMessage("go"), SystemMessage("late")], "system message must come before"),
])
def test_format_rules_are_enforced(openai_server: Any, messages: list[Any],
                                   complaint: str) -> None:
    server = openai_server()
    with pytest.raises(openai.BadRequestError, match=complaint):
        chat_openai(server).invoke(messages)
    assert server.rejected and server.rejected[0].reason


def test_counts_follow_openais_formula(openai_server: Any) -> None:
    body = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Hello", "name": "ana"}]}
    expected = 3 + (3 + 1 + 3) + (3 + 1 + 1 + 1 + 1)  # priming, system, user with a name
    assert count_prompt(body) == expected
    assert count_prompt(body) == 3 + sum(
        3 + len(ENCODING.encode(m["role"])) + len(ENCODING.encode(m["content"]))
        + (1 + len(ENCODING.encode(m["name"])) if "name" in m else 0) for m in body["messages"])


def test_the_document_agent_plays_a_whole_run(openai_server: Any) -> None:
    agent = DocumentAgent(3, tokens=(300, 500))
    server = openai_server(window=16_384, responder=agent)
    model = chat_openai(server).bind_tools([DocumentAgent.TOOL])
    history: list[Any] = [SystemMessage("You read documents."), HumanMessage(agent.task())]
    for _ in range(10):
        reply = model.invoke(history)
        history.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            history.append(ToolMessage(agent.document(call["args"]["number"]),
                                       tool_call_id=call["id"]))
    assert agent.visible_codes(str(history[-1].content)) == set(agent.codes.values())
    assert not server.rejected and len(server.requests) == 4
