"""Both of Anthropic's context-overflow wordings are recognised, with the figures they state,
and answered by one retry below the limit, through the real clients."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

import contextfold as cf
from contextfold.errors import ContextOverflowError
from contextfold.integration import overflow_of
from langchain_contextfold import with_compaction
from openai_server import DocumentAgent

pytestmark = pytest.mark.anthropic_http

MODEL = "claude-sonnet-4-6"
SYSTEM = "You read documents with read_document and report their reference codes."


def chat_anthropic(server: Any, **kwargs: Any) -> ChatAnthropic:
    kwargs.setdefault("max_tokens", 1_024)
    return ChatAnthropic(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0,
                         **kwargs)


def rejection(server: Any, words: int, max_tokens: int) -> anthropic.BadRequestError:
    sdk = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model=MODEL, max_tokens=max_tokens,
                            messages=[{"role": "user", "content": "word " * words}])
    return caught.value


def test_the_max_tokens_wording_states_prompt_completion_and_window(anthropic_server: Any) -> None:
    server = anthropic_server(window=1_000)
    error = rejection(server, 900, 200)
    found = overflow_of(error)
    assert found is not None, str(error)
    assert (found.limit, found.prompt_tokens, found.completion_tokens) == (
        1_000, server.messages[0].prompt_tokens, 200)
    assert found.input_limit == 800


def test_the_prompt_wording_states_prompt_and_window(anthropic_server: Any) -> None:
    server = anthropic_server(window=1_000)
    found = overflow_of(rejection(server, 1_200, 100))
    assert found is not None
    assert (found.limit, found.prompt_tokens) == (1_000, server.messages[0].prompt_tokens)


@pytest.mark.parametrize(("window", "wording"), [
    (7_000, "input length and `max_tokens` exceed context limit"),
    (6_000, "prompt is too long"),
])
def test_with_compaction_recovers_from_either_wording(
    anthropic_server: Any, window: int, wording: str
) -> None:
    # Configured for a 16k window, the model takes less: the first overflow states the
    # limit, the call loop compacts below it and the run goes on.
    agent = DocumentAgent(12, tokens=(1_500, 2_500))
    server = anthropic_server(window=window, responder=agent)
    model = with_compaction(chat_anthropic(server), policy=cf.ThresholdPolicy(),
                            budget=cf.Budget(context_window=16_384, output_reserve=1_024,
                                             model=MODEL)).bind_tools([DocumentAgent.TOOL])
    history: list[Any] = [SystemMessage(SYSTEM), HumanMessage(agent.task())]
    for _ in range(40):
        reply = model.invoke(history, config={"configurable": {"thread_id": "t"}})
        history.append(reply)
        if not reply.tool_calls:
            break
        history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                    for c in reply.tool_calls]
    reasons = [r.reason for r in server.rejected]
    print(f"\nwindow {window}: {len(server.requests)} requests, rejected: {reasons}")
    assert len(reasons) == 1 and wording in str(reasons[0])
    assert not history[-1].tool_calls and "Codes found" in str(history[-1].content)


def test_an_overflow_no_compaction_can_fit_raises_the_typed_error(anthropic_server: Any) -> None:
    # max_tokens leaves 10 tokens of a 300-token window: the system prompt and the request
    # cannot fit, so the call ends with the typed error instead of a pointless retry.
    server = anthropic_server(window=300)
    model = with_compaction(chat_anthropic(server, max_tokens=290), policy=cf.ThresholdPolicy(),
                            budget=cf.Budget(context_window=16_384, model=MODEL))
    with pytest.raises(ContextOverflowError) as caught:
        model.invoke([SystemMessage(SYSTEM), HumanMessage("word " * 200)])
    assert isinstance(caught.value.__cause__, Exception)
    assert 1 <= len(server.rejected) <= 2
    assert all("exceed context limit" in str(r.reason) for r in server.rejected)
