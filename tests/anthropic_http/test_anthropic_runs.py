"""Whole agent runs with the real Anthropic clients against a server that validates like the
Messages API and enforces a 16,384-token window: LangChain's ``ChatAnthropic`` through
``create_agent`` + ``CompactionMiddleware`` and through ``with_compaction`` (streaming,
signed thinking), LlamaIndex's ``Anthropic`` through ``FunctionAgent`` + ``CompactingLLM``,
and the ``anthropic`` SDK itself driving a ``Compactor``. Measured the way users would
notice: requests the API would reject, and the codes the agent still sees at the end."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.anthropic import Anthropic

import contextfold as cf
from anthropic_server.wire import as_chat
from langchain_contextfold import CompactionMiddleware, with_compaction
from llama_index.memory.contextfold import CompactingLLM
from openai_server import DocumentAgent, summary_span

pytestmark = [pytest.mark.anthropic_http, pytest.mark.slow]

MODEL = "claude-sonnet-4-6"
WINDOW = 16_384
BUDGET = cf.Budget(context_window=WINDOW, output_reserve=1_024, model=MODEL)
SYSTEM = "You read documents with read_document and report their reference codes."
ANTHROPIC_TOOL = {"name": "read_document", "description": "Read one document by its number.",
                  "input_schema": DocumentAgent.TOOL["function"]["parameters"]}


def chat_anthropic(server: Any, **kwargs: Any) -> ChatAnthropic:
    kwargs.setdefault("max_tokens", 1_024)
    return ChatAnthropic(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0,
                         **kwargs)


def codes_in_view_at_the_end(server: Any, agent: DocumentAgent) -> int:
    """Codes present in the last request the agent made (what it saw when it answered)."""
    return len(agent.visible_codes(str(server.agent_requests[-1].body["messages"])))


def lc_tool(agent: DocumentAgent) -> Any:
    @tool
    def read_document(number: int) -> str:
        """Read one document by its number."""
        return agent.document(number)

    return read_document


def report(name: str, server: Any, agent: DocumentAgent) -> None:
    summaries = [r for r in server.messages if r.summary]
    print(f"\n{name}: {len(server.messages)} requests ({len(summaries)} summary calls), "
          f"{len(server.rejected)} rejected, {codes_in_view_at_the_end(server, agent)}/"
          f"{agent.n_docs} codes in view at the end")


def test_create_agent_with_chat_anthropic_reads_60_documents(anthropic_server: Any) -> None:
    agent = DocumentAgent(60)
    server = anthropic_server(window=WINDOW, responder=agent)
    graph = create_agent(chat_anthropic(server), [lc_tool(agent)], system_prompt=SYSTEM,
                         middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(),
                                                          budget=BUDGET)])
    state = graph.invoke({"messages": [HumanMessage(agent.task())]},
                         config={"recursion_limit": 400})
    report("create_agent + CompactionMiddleware", server, agent)
    assert server.rejected == []  # agent and summary calls alike: valid and in the window
    assert any(r.summary for r in server.messages), "the agent's model made the summaries"
    # The Messages API joins consecutive user turns, so an instruction naming messages by
    # position would name others: Claude's summary requests carry their span themselves.
    assert not [r for r in server.messages if r.summary and summary_span(as_chat(r.body))]
    assert codes_in_view_at_the_end(server, agent) >= 57
    assert "Codes found" in str(state["messages"][-1].content)


def test_with_compaction_streams_signed_thinking_through_a_60_document_run(
    anthropic_server: Any,
) -> None:
    # Thinking on: the assistant turn of every open tool loop must start with the signed
    # thinking block the model returned, through conversion, compaction and streaming.
    agent = DocumentAgent(60)
    server = anthropic_server(window=WINDOW, responder=agent)
    thinking = {"type": "enabled", "budget_tokens": 1_024}
    model = with_compaction(chat_anthropic(server, max_tokens=2_048, thinking=thinking),
                            policy=cf.ThresholdPolicy(),
                            budget=cf.Budget(context_window=WINDOW, output_reserve=2_048,
                                             model=MODEL)).bind_tools([DocumentAgent.TOOL])
    history: list[Any] = [SystemMessage(SYSTEM), HumanMessage(agent.task())]
    for _ in range(80):
        chunks = list(model.stream(history, config={"configurable": {"thread_id": "t"}}))
        reply = chunks[0]
        for chunk in chunks[1:]:
            reply = reply + chunk
        history.append(reply)
        if not reply.tool_calls:
            break
        history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                    for c in reply.tool_calls]
    report("with_compaction, streamed, thinking", server, agent)
    assert server.rejected == []
    assert all(r.body.get("stream") for r in server.agent_requests)
    opened = [r for r in server.agent_requests if len(r.body["messages"]) > 1]
    assert opened and all(r.body["messages"][-2]["content"][0]["type"] == "thinking"
                          for r in opened if r.body["messages"][-1]["content"][0].get(
                              "type") == "tool_result")
    assert codes_in_view_at_the_end(server, agent) >= 57
    assert isinstance(history[-1], AIMessage) and "Codes found" in str(history[-1].content)


# Raised inside llama-index-workflows (see tests/llamaindex/conftest.py).
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_function_agent_on_compacting_llm_reads_60_documents(anthropic_server: Any) -> None:
    agent = DocumentAgent(60)
    server = anthropic_server(window=WINDOW, responder=agent)
    # Opus 4.7 takes no temperature, which LlamaIndex's Anthropic LLM sends for other models
    # and the installed SDK no longer accepts.
    llm = CompactingLLM(llm=Anthropic(model="claude-opus-4-7", base_url=server.base_url,
                                      api_key="test", max_retries=0, max_tokens=1_024),
                        policy=cf.ThresholdPolicy(), budget=BUDGET)
    tool_ = FunctionTool.from_defaults(fn=agent.document, name="read_document",
                                       description="Read one document by its number.")
    workflow = FunctionAgent(tools=[tool_], llm=llm, system_prompt=SYSTEM)

    async def run() -> Any:
        return await workflow.run(agent.task(), max_iterations=200)

    result = asyncio.run(run())
    report("FunctionAgent + CompactingLLM", server, agent)
    assert server.rejected == []
    assert codes_in_view_at_the_end(server, agent) >= 57
    assert "Codes found" in str(result)


def test_the_sdk_driving_a_compactor_reads_60_documents(anthropic_server: Any) -> None:
    # Framework-free: the core converts to and from the Messages API's shapes, the
    # Compactor decides, the SDK sends, the usage calibrates.
    agent = DocumentAgent(60)
    server = anthropic_server(window=WINDOW, responder=agent)
    sdk = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=BUDGET,
                             tools=[DocumentAgent.TOOL])
    history = [cf.Message(role="system", content=SYSTEM),
               cf.Message(role="user", content=agent.task())]
    for _ in range(80):
        system, messages = cf.to_anthropic(compactor.compact(history).messages)
        reply = sdk.messages.create(model=MODEL, max_tokens=1_024, system=system or "",
                                    messages=messages, tools=[ANTHROPIC_TOOL])
        compactor.observe_usage(reply.usage.input_tokens, reply.usage.output_tokens)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        history += cf.from_anthropic([{"role": "assistant", "content": content}])
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        history += [cf.Message(role="tool", content=agent.document(c.input["number"]),
                               tool_call_id=c.id, name=c.name) for c in calls]
    report("anthropic SDK + Compactor", server, agent)
    assert server.rejected == []
    assert codes_in_view_at_the_end(server, agent) >= 57
    assert "Codes found" in history[-1].text
