"""The real HTTP path with ``ChatOpenAI``: overflow retry and usage calibration.

The cassettes under ``tests/cassettes/langchain/`` are written by hand from OpenAI's
documented wire format (each says so at its top), replayed with vcrpy; requests match on
method and URI only, and nothing is recorded (``record_mode="none"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import vcr
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from lc_fakes import COUNTER, tool_round

import contextfold as cf
from langchain_contextfold import COMPACTION_EVENT, to_core, with_compaction

CASSETTES = Path(__file__).resolve().parent.parent / "cassettes" / "langchain"
REPLAY = vcr.VCR(cassette_library_dir=str(CASSETTES), record_mode="none",
                 match_on=["method", "uri"])
BUDGET = cf.Budget(context_window=16_000, output_reserve=2_000)


@tool
def fetch_page(page: int, part: int = 0) -> str:
    """Fetch one part of a page."""
    return ""


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == COMPACTION_EVENT:
            self.reports.append(data)


def history(rounds: int, size: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage("You fetch pages."),
                                   HumanMessage("Fetch every page, then summarize.")]
    for page in range(rounds):
        reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"call_{page}"}])
        messages += [reply, *tool_round(reply, size)]
    return messages


def openai_model(bodies: list[dict[str, Any]], *, asynchronous: bool = False) -> ChatOpenAI:
    def capture(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    async def acapture(request: httpx.Request) -> None:
        capture(request)

    client: dict[str, Any] = (
        {"http_async_client": httpx.AsyncClient(event_hooks={"request": [acapture]})}
        if asynchronous else {"http_client": httpx.Client(event_hooks={"request": [capture]})}
    )
    return ChatOpenAI(model="gpt-4o-mini", api_key="sk-test", max_retries=0,  # type: ignore[arg-type]
                      **client)


def wrapped(model: ChatOpenAI, policy: Any) -> Any:
    return with_compaction(model, policy=policy, budget=BUDGET, counter=COUNTER,
                           summarizer=cf.ExtractiveSummarizer()).bind_tools([fetch_page])


@pytest.mark.cassette
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_context_length_exceeded_is_retried_after_forced_compaction(
    asynchronous: bool,
) -> None:
    bodies: list[dict[str, Any]] = []
    model = wrapped(openai_model(bodies, asynchronous=asynchronous), cf.TruncationPolicy())
    messages = history(10, 2000)
    events = Events()
    config = {"callbacks": [events], "configurable": {"thread_id": "t"}}
    with REPLAY.use_cassette("context_length_exceeded_then_success.yaml") as cassette:
        if asynchronous:
            reply = await model.ainvoke(messages, config=config)
        else:
            reply = model.invoke(messages, config=config)
        assert cassette.all_played
    assert reply.content == "Page 9 lists rows 9-0 to 9-39."
    assert reply.usage_metadata["input_tokens"] == 6120
    assert len(bodies) == 2
    assert len(bodies[0]["messages"]) == len(messages)  # under the trigger: sent whole
    assert len(bodies[1]["messages"]) < len(messages)
    assert bodies[1]["messages"][0] == {"role": "system", "content": "You fetch pages."}
    assert bodies[1]["messages"][-1]["tool_call_id"] == "call_9"
    assert bodies[1]["tools"][0]["function"]["name"] == "fetch_page"
    assert [r["forced"] for r in events.reports] == [True]


@pytest.mark.cassette
def test_reported_usage_makes_the_next_call_compact() -> None:
    bodies: list[dict[str, Any]] = []
    model = wrapped(openai_model(bodies), cf.ThresholdPolicy())
    messages = history(10, 1500)
    estimate = COUNTER.count_messages(to_core(messages))
    assert estimate < BUDGET.trigger_tokens  # our own count would not compact
    config = {"configurable": {"thread_id": "calibration"}}
    with REPLAY.use_cassette("usage_calibration.yaml") as cassette:
        first = model.invoke(messages, config=config)
        assert first.tool_calls[0]["args"] == {"page": 10}
        assert first.usage_metadata["input_tokens"] == 14_900 > BUDGET.trigger_tokens
        messages += [first, *tool_round(first, 1500)]
        second = model.invoke(messages, config=config)
        assert cassette.all_played
    assert second.content == "All ten pages are fetched."
    assert len(bodies[0]["messages"]) == 22
    assert COUNTER.count_messages(to_core(messages)) < BUDGET.trigger_tokens  # still
    assert len(bodies[1]["messages"]) < len(messages)  # compacted on the provider's figure
    sent_results = [m.get("tool_call_id") for m in bodies[1]["messages"]]
    assert first.tool_calls[0]["id"] in sent_results  # the newest loop is kept
