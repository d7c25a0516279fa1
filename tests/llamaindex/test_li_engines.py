"""CompactingMemory inside LlamaIndex's own engines and agents, sync and async: every
request stays valid and bounded across many turns, and the store keeps everything."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from li_fakes import COUNTER, RecordingMockLLM, ScriptedAgentLLM, page_text
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, JsonSerializer

import contextfold as cf
from llama_index.memory.contextfold import CompactingLLM, CompactingMemory, from_llama_index

BUDGET = cf.Budget(context_window=2500)
SYSTEM = "You answer questions about the quarterly report."


def _memory(**kwargs: Any) -> CompactingMemory:
    return CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                          counter=COUNTER, **kwargs)


def _question(i: int) -> str:
    return f"Question {i}: what happened to order {i}? " + "Please explain in detail. " * 12


def _assert_requests(requests: Sequence[Sequence[ChatMessage]], limit: int) -> None:
    assert requests
    for i, request in enumerate(requests):
        core = from_llama_index(request)
        assert cf.validate(core) == [], f"request {i} is invalid"
        assert COUNTER.count_messages(core) <= limit, f"request {i} is too large"


def fetch_page(page: int) -> str:
    """Fetch one page of the quarterly report."""
    return page_text(page, words=120)


TOOL = FunctionTool.from_defaults(fn=fetch_page)


# -- chat engines ------------------------------------------------------------------------


def test_simple_chat_engine_sync_and_streaming() -> None:
    llm = RecordingMockLLM(max_tokens=60)
    memory = _memory()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM)
    for i in range(25):
        if i % 5 == 4:
            response = engine.stream_chat(_question(i))
            for _ in response.response_gen:
                pass
        else:
            engine.chat(_question(i))
    _assert_requests(llm.requests, BUDGET.input_budget)
    assert all(r[0].content == SYSTEM for r in llm.requests)
    assert len(memory.get_all()) == 50  # every question and answer is stored
    assert len(llm.requests[-1]) < 50


async def test_simple_chat_engine_async_with_memory_cls() -> None:
    llm = RecordingMockLLM(max_tokens=60)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory_cls=CompactingMemory)
    memory = engine._memory
    assert isinstance(memory, CompactingMemory)
    for i in range(10):
        await engine.achat(_question(i))
    assert len(memory.get_all()) == 20
    _assert_requests(llm.requests, memory.budget.input_budget)


def _index() -> VectorStoreIndex:
    docs = [Document(text=f"Order {i} shipped on day {i} from warehouse {i % 3}.")
            for i in range(12)]
    return VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))


def test_condense_plus_context_chat_engine_sync() -> None:
    llm = RecordingMockLLM(max_tokens=60)
    memory = _memory()
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=_index().as_retriever(similarity_top_k=2), llm=llm, memory=memory)
    for i in range(15):
        engine.chat(_question(i))
    assert len(memory.get_all()) == 30
    _assert_view_fits(memory)


async def test_condense_plus_context_chat_engine_async() -> None:
    llm = RecordingMockLLM(max_tokens=60)
    memory = _memory()
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=_index().as_retriever(similarity_top_k=2), llm=llm, memory=memory)
    for i in range(15):
        await engine.achat(_question(i))
    assert len(await memory.aget_all()) == 30
    _assert_view_fits(memory)


def _assert_view_fits(memory: CompactingMemory) -> None:
    view = from_llama_index(memory.get())
    assert cf.validate(view) == []
    assert COUNTER.count_messages(view) <= BUDGET.input_budget


# -- agents ------------------------------------------------------------------------------


async def test_function_agent_many_turns_with_memory() -> None:
    inner = ScriptedAgentLLM(rounds=0)
    agent = FunctionAgent(tools=[TOOL], llm=inner, system_prompt=SYSTEM)
    memory = _memory(system_prompt=SYSTEM, tools=[TOOL])
    for i in range(20):
        await agent.run(_question(i), memory=memory)
    assert len(memory.get_all()) == 40
    limit = BUDGET.input_budget
    for request in inner.requests:  # system prompt and tools are what the memory reserved
        assert cf.validate(request.core) == [] and request.tokens <= limit


async def test_function_agent_tool_rounds_land_in_memory_and_stay_bounded() -> None:
    inner = ScriptedAgentLLM(rounds=6)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    agent = FunctionAgent(tools=[TOOL], llm=llm, system_prompt=SYSTEM)
    memory = _memory(system_prompt=SYSTEM, tools=[TOOL])
    await agent.run("Read the pages.", memory=memory, max_iterations=50)
    stored = from_llama_index(memory.get_all())
    assert sum(1 for m in stored if m.role == "tool") == 7  # 6 rounds, one of them parallel
    assert cf.validate(stored) == []
    for request in inner.requests:
        assert cf.validate(request.core) == [] and request.tokens <= BUDGET.input_budget


def _react_llm() -> MockFunctionCallingLLM:
    calls = {"n": 0}

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        calls["n"] += 1
        if calls["n"] % 2:
            text = ("Thought: I need the page.\nAction: fetch_page\n"
                    f'Action Input: {{"page": {calls["n"]}}}')
        else:
            text = "Thought: I can answer without using any more tools.\nAnswer: all shipped"
        return ChatMessage(role="assistant", content=text)

    return MockFunctionCallingLLM(response_generator=respond)


async def test_react_agent_with_memory() -> None:
    memory = _memory()
    agent = ReActAgent(tools=[TOOL], llm=_react_llm())
    for i in range(8):
        result = await agent.run(_question(i), memory=memory)
        assert "all shipped" in str(result)
    stored = memory.get_all()
    assert sum(1 for m in stored if m.role.value == "user" and "Question" in (m.content or "")) == 8
    _assert_view_fits(memory)


async def test_agent_workflow_with_memory() -> None:
    inner = ScriptedAgentLLM(rounds=0)
    worker = FunctionAgent(name="analyst", description="Answers report questions.",
                           tools=[TOOL], llm=inner, system_prompt=SYSTEM)
    workflow = AgentWorkflow(agents=[worker], root_agent="analyst")
    memory = _memory(system_prompt=SYSTEM)
    for i in range(12):
        await workflow.run(user_msg=_question(i), memory=memory)
    assert len(memory.get_all()) == 24
    for request in inner.requests:
        assert cf.validate(request.core) == []
        assert COUNTER.count_messages(request.core) <= BUDGET.input_budget


async def test_memory_survives_a_workflow_context_round_trip() -> None:
    inner = ScriptedAgentLLM(rounds=1)
    agent = FunctionAgent(tools=[TOOL], llm=inner, system_prompt=SYSTEM)
    memory = _memory(session_id="ctx-test")
    ctx = Context(agent)
    await agent.run("First question.", ctx=ctx, memory=memory)
    data = ctx.to_dict(serializer=JsonSerializer())
    text = json.dumps(data)  # JSON-safe
    restored = Context.from_dict(agent, json.loads(text), serializer=JsonSerializer())
    again = await restored.store.get("memory")
    assert isinstance(again, CompactingMemory) and again.session_id == "ctx-test"
    assert [m.model_dump() for m in again.get_all()] == [
        m.model_dump() for m in memory.get_all()
    ]
    await agent.run("Second question.", ctx=restored)
    contents = [m.content for m in again.get_all()]
    assert "First question." in contents and "Second question." in contents
