"""The real HTTP path through llama-index-llms-openai: overflow retry and usage calibration.

The cassettes under ``tests/cassettes/llamaindex/`` are written by hand from OpenAI's
documented wire format (each says so at its top) and replayed with vcrpy, record mode
``none``: no network is ever used.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
import vcr
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.llms.openai import OpenAI

import contextfold as cf
from llama_index.memory.contextfold import CompactingLLM, from_llama_index

CASSETTES = os.path.join(os.path.dirname(__file__), "..", "cassettes", "llamaindex")
BUDGET = cf.Budget(context_window=4000, model="gpt-4o-mini")

pytestmark = pytest.mark.cassette

_VCR = vcr.VCR(cassette_library_dir=CASSETTES, record_mode="none",
               match_on=["method", "scheme", "host", "port", "path"])


class _Sent:
    """Captures the JSON body of every request the OpenAI client sends."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def hook(self, request: httpx.Request) -> None:
        self.bodies.append(json.loads(request.content))

    async def ahook(self, request: httpx.Request) -> None:
        self.hook(request)

    def messages(self, i: int) -> list[cf.Message]:
        return cf.from_openai(self.bodies[i]["messages"])


def _llm(sent: _Sent, counter: cf.TokenCounter, **kwargs: Any) -> CompactingLLM:
    base = OpenAI(
        api_key="sk-test", model="gpt-4o-mini", max_retries=0,
        http_client=httpx.Client(event_hooks={"request": [sent.hook]}),
        async_http_client=httpx.AsyncClient(event_hooks={"request": [sent.ahook]}),
        **kwargs,
    )
    return CompactingLLM(llm=base, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=counter,
                         conversation_id="shipments")


def _history(rounds: int = 6, words: int = 100) -> list[ChatMessage]:
    history = [ChatMessage(role="system", content="You track shipments."),
               ChatMessage(role="user", content="Check orders 1 to 6.")]
    for n in range(1, rounds + 1):
        history += [
            ChatMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id=f"call_{n}", tool_name="order_status", tool_kwargs={"order": n})]),
            ChatMessage(role="tool", content=f"order {n}: " + "scan event " * words,
                        additional_kwargs={"tool_call_id": f"call_{n}"}),
        ]
    return history


def _assert_retry_shrank(sent: _Sent) -> None:
    assert len(sent.bodies) == 2
    first, retry = sent.messages(0), sent.messages(1)
    assert cf.validate(retry) == []
    assert cf.EstimatingCounter().count_messages(retry) < cf.EstimatingCounter().count_messages(
        first)
    assert retry[0].role == "system" and retry[1].text == "Check orders 1 to 6."


def test_overflow_400_is_retried_with_forced_compaction(counter: cf.TokenCounter) -> None:
    sent = _Sent()
    llm = _llm(sent, counter)
    history = _history()
    assert counter.count_messages(from_llama_index(history)) < BUDGET.trigger_tokens
    with _VCR.use_cassette("overflow_then_success.yaml") as cassette:
        response = llm.chat(history)
        assert cassette.all_played
    assert response.message.content == "Orders 1 to 6 all shipped; order 4 was late."
    _assert_retry_shrank(sent)
    assert llm.compactor.last_output_tokens == 14  # the 200's usage was observed


async def test_overflow_400_is_retried_async(counter: cf.TokenCounter) -> None:
    sent = _Sent()
    llm = _llm(sent, counter)
    with _VCR.use_cassette("overflow_then_success.yaml") as cassette:
        response = await llm.achat(_history())
        assert cassette.all_played
    assert "order 4 was late" in (response.message.content or "")
    _assert_retry_shrank(sent)


async def test_streamed_overflow_is_retried_and_usage_read(counter: cf.TokenCounter) -> None:
    sent = _Sent()
    llm = _llm(sent, counter, additional_kwargs={"stream_options": {"include_usage": True}})
    with _VCR.use_cassette("stream_overflow_then_success.yaml") as cassette:
        stream = await llm.astream_chat(_history())
        chunks = [chunk async for chunk in stream]
        assert cassette.all_played
    assert chunks[-1].message.content == "All six shipped."
    _assert_retry_shrank(sent)
    assert sent.bodies[1]["stream"] is True
    assert llm.compactor.last_output_tokens == 3  # from the final usage chunk


def test_reported_usage_makes_the_next_request_compact(counter: cf.TokenCounter) -> None:
    sent = _Sent()
    llm = _llm(sent, counter)
    history = _history(rounds=6, words=60)
    estimate = counter.count_messages(from_llama_index(history))
    assert estimate < BUDGET.trigger_tokens < 3390  # the first response's prompt_tokens
    with _VCR.use_cassette("usage_calibration.yaml") as cassette:
        first = llm.chat(history)
        history = [*history, first.message, ChatMessage(role="user", content="Which was late?")]
        assert counter.count_messages(from_llama_index(history)) < BUDGET.trigger_tokens
        llm.chat(history)
        assert cassette.all_played
    sent_first, sent_second = sent.messages(0), sent.messages(1)
    assert len(sent_first) == len(history) - 2  # sent whole: the estimate was low
    assert cf.validate(sent_second) == []
    # Compacted on the strength of the reported 3390 tokens although our own estimate of
    # the second request is still under the trigger.
    assert cf.EstimatingCounter(4).count_messages(sent_second) < cf.EstimatingCounter(
        4).count_messages(sent_first)
    assert sent_second[-1].text == "Which was late?"
