"""One behaviour suite for both adapters, over the real OpenAI clients: the overflow retry,
the typed error after it, calibration from usage, idle, and other errors passing through.
Both adapters drive the same core call loop, so each case must come out the same."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.llms.openai import OpenAI

import contextfold as cf
from contextfold.errors import ContextOverflowError
from langchain_contextfold import with_compaction
from llama_index.memory.contextfold import CompactingLLM
from openai_server import Refusal, Reply

pytestmark = pytest.mark.http

BIG = "row data " * 1_500  # about 3,000 tokens


@dataclass
class Adapter:
    """One adapter over the server: ``call`` sends a history given as (role, text) pairs
    (``"call"`` for a tool call, ``"result"`` for its result); ``compactor`` is the
    conversation's."""

    call: Callable[[list[tuple[str, str]]], str]
    compactor: Callable[[], cf.Compactor]


def langchain(server: Any, policy: cf.Policy, budget: cf.Budget) -> Adapter:
    model = with_compaction(ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url,
                                       api_key="test", max_retries=0),
                            policy=policy, budget=budget)
    config = {"configurable": {"thread_id": "t"}}

    def call(history: list[tuple[str, str]]) -> str:
        messages: list[Any] = []
        for k, (role, text) in enumerate(history):
            if role == "system":
                messages.append(SystemMessage(text))
            elif role == "user":
                messages.append(HumanMessage(text))
            elif role == "assistant":
                messages.append(AIMessage(text))
            elif role == "call":
                messages.append(AIMessage("", tool_calls=[{"name": "read", "args": {},
                                                           "id": f"c{k}"}]))
            else:
                messages.append(ToolMessage(text, tool_call_id=f"c{k - 1}"))
        return str(model.invoke(messages, config=config).content)

    return Adapter(call, lambda: model.engine.conversations.get("t").compactor)


def llamaindex(server: Any, policy: cf.Policy, budget: cf.Budget) -> Adapter:
    llm = CompactingLLM(llm=OpenAI(model="gpt-4o-mini", api_base=server.base_url,
                                   api_key="test", max_retries=0),
                        policy=policy, budget=budget, conversation_id="t")

    def call(history: list[tuple[str, str]]) -> str:
        messages: list[ChatMessage] = []
        for k, (role, text) in enumerate(history):
            if role in ("system", "user", "assistant"):
                messages.append(ChatMessage(role=role, content=text))
            elif role == "call":
                messages.append(ChatMessage(role=MessageRole.ASSISTANT, content="",
                                            additional_kwargs={"tool_calls": [{
                                                "id": f"c{k}", "type": "function",
                                                "function": {"name": "read",
                                                             "arguments": "{}"}}]}))
            else:
                messages.append(ChatMessage(role=MessageRole.TOOL, content=text,
                                            additional_kwargs={"tool_call_id": f"c{k - 1}"}))
        return str(llm.chat(messages).message.content)

    return Adapter(call, lambda: llm.compactor)


ADAPTERS = pytest.mark.parametrize("make", [langchain, llamaindex],
                                   ids=["langchain", "llamaindex"])


def reading(steps: int) -> list[tuple[str, str]]:
    history = [("system", "You read files."), ("user", "Read every file.")]
    for _ in range(steps):
        history += [("call", ""), ("result", BIG)]
    return history


@ADAPTERS
def test_an_overflow_is_retried_once_below_the_stated_limit(openai_server: Any,
                                                            make: Any) -> None:
    server = openai_server(window=8_000)
    adapter = make(server, cf.ThresholdPolicy(), cf.Budget(context_window=16_384))
    for steps in range(1, 8):
        assert adapter.call(reading(steps)).startswith("echo")
    assert len(server.rejected) == 1  # once learned, the limit holds for later calls
    assert adapter.compactor().budget.input_budget < 8_000


@ADAPTERS
def test_a_second_overflow_is_a_typed_error_wrapping_the_providers(openai_server: Any,
                                                                   make: Any) -> None:
    server = openai_server(window=400)
    adapter = make(server, cf.TruncationPolicy(), cf.Budget(context_window=16_384))
    with pytest.raises(ContextOverflowError) as caught:
        # the system prompt alone is over the window: nothing a compaction may shrink
        adapter.call([("system", "word " * 2_000), ("user", "hi")])
    assert isinstance(caught.value.provider_error, openai.BadRequestError)
    assert len(server.requests) == 1


@ADAPTERS
def test_a_request_over_the_window_goes_out_cut_with_its_handle(openai_server: Any,
                                                               make: Any) -> None:
    server = openai_server(window=400)
    adapter = make(server, cf.TruncationPolicy(), cf.Budget(context_window=16_384))
    request = "start " + "word " * 2_000 + "end"
    assert adapter.call([("user", request)]).startswith("echo")
    first, second = server.requests
    assert not first.accepted and second.accepted
    [sent] = [m["content"] for m in second.body["messages"] if m["role"] == "user"]
    assert sent.startswith("start") and sent.rstrip().endswith("end")
    assert "[TRUNCATED" in sent and re.search(r"ctx_[0-9a-f]{12}", sent)


@ADAPTERS
def test_usage_calibrates_the_next_decision(openai_server: Any, make: Any) -> None:
    server = openai_server(window=100_000)
    adapter = make(server, cf.ThresholdPolicy(), cf.Budget(context_window=100_000))
    adapter.call(reading(1))
    compactor = adapter.compactor()
    assert compactor.last_output_tokens is not None
    assert compactor.last_output_tokens > 0


@ADAPTERS
def test_other_errors_pass_through_untouched(openai_server: Any, make: Any) -> None:
    def refuse(body: dict[str, Any]) -> Reply:
        raise Refusal(401, "Incorrect API key provided", code="invalid_api_key")

    server = openai_server(responder=refuse)
    adapter = make(server, cf.ThresholdPolicy(), cf.Budget(context_window=16_384))
    with pytest.raises(openai.AuthenticationError):
        adapter.call(reading(1))
    assert len(server.requests) == 1


@ADAPTERS
def test_an_idle_conversation_is_answered_without_a_request(openai_server: Any,
                                                            make: Any) -> None:
    server = openai_server(strict=False)  # a history without a user message, on purpose
    adapter = make(server, cf.LoopSlicePolicy(), cf.Budget(context_window=16_384))
    history = [("system", "You mine asteroids on your own.")]
    replies = []
    for _ in range(6):
        replies.append(adapter.call(history))
        history += [("assistant", replies[-1][:40])]
    assert len(server.requests) == 2  # two nudged calls; the third nudge turns it idle
    assert all("idle" in r for r in replies[2:])
