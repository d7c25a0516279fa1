"""Anthropic's own compaction behind contextfold's contract, end to end against the loopback
Messages API server: the provider's request fields go out, its ``compaction`` block comes
back and is sent back unchanged, what it replaced is readable through a handle, a ledger
names it, and the report says what was compacted."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

import contextfold as cf
from contextfold.providers import ANTHROPIC_COMPACTION_BETA, AnthropicCompaction, request_fields
from contextfold.stores import read_original
from langchain_contextfold import with_compaction
from openai_server import DocumentAgent

pytestmark = pytest.mark.anthropic_http

MODEL = "claude-sonnet-4-6"
SYSTEM = "You read documents with read_document and report their reference codes."
ANTHROPIC_TOOL = {"name": "read_document", "description": "Read one document by its number.",
                  "input_schema": DocumentAgent.TOOL["function"]["parameters"]}
LEDGER = "[Compaction ledger"


def returned_blocks(server: Any) -> list[dict[str, Any]]:
    """The compaction blocks the server returned, in order."""
    return [b for r in server.messages for b in r.sent.get("content", [])
            if b["type"] == "compaction"]


def sent_back(server: Any, block: dict[str, Any]) -> list[Any]:
    """The requests that carry ``block``, compared whole (fields a client sends as null,
    as ChatAnthropic does for the optional ones, are absent ones)."""
    return [r for r in server.messages if any(
        {k: v for k, v in b.items() if v is not None} == block
        for m in r.body.get("messages", []) if m["role"] == "assistant"
        and isinstance(m["content"], list) for b in m["content"])]


def test_the_sdk_and_a_compactor_keep_the_providers_block_and_its_originals(
    anthropic_server: Any,
) -> None:
    agent = DocumentAgent(16, tokens=(1_500, 3_000))
    server = anthropic_server(window=200_000, responder=agent)
    client = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    policy = AnthropicCompaction(trigger=12_000, instructions="Keep every reference code.")
    compactor = cf.Compactor(policy=policy, budget=cf.Budget(context_window=200_000,
                                                             model=MODEL),
                             tools=[DocumentAgent.TOOL], conversation_id="c1")
    reports: list[cf.CompactionReport] = []
    history = [cf.Message(role="system", content=SYSTEM),
               cf.Message(role="user", content=agent.task())]
    for _ in range(40):
        result = compactor.compact(history)
        if result.report.method != "none":
            reports.append(result.report)
        system, messages = cf.to_anthropic(result.messages)
        reply = client.beta.messages.create(model=MODEL, max_tokens=1_024, system=system or "",
                                            messages=messages, tools=[ANTHROPIC_TOOL],
                                            **request_fields(policy))
        compactor.observe_usage(reply.usage.input_tokens)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        history += cf.from_anthropic([{"role": "assistant", "content": content}])
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        history += [cf.Message(role="tool", content=agent.document(c.input["number"]),
                               tool_call_id=c.id, name=c.name) for c in calls]
    blocks = returned_blocks(server)
    print(f"\nSDK: {len(server.messages)} requests, {len(blocks)} provider compactions, "
          f"{len(reports)} reports, {len(server.rejected)} rejected")
    assert server.rejected == []
    assert "Codes found" in history[-1].text
    # The provider's request fields went out with every request.
    first = server.messages[0]
    assert ANTHROPIC_COMPACTION_BETA in first.headers["anthropic-beta"]
    assert first.body["context_management"]["edits"][0] == {
        "type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 12_000},
        "instructions": "Keep every reference code."}
    # The provider compacted; its block went back unchanged on every later request.
    assert blocks
    later = sent_back(server, blocks[0])
    assert later and all(r.accepted for r in later)
    # What the provider replaced is behind a handle, named in a ledger after the block.
    report = reports[0]
    assert report.method == "anthropic_compaction"
    provider = report.details["provider"]
    assert provider["replaced"] >= 3 and provider["tokens_after"] < provider["tokens_before"]
    handle = provider["handle"]
    dropped = [t for t in report.targets if t.method == "dropped"]
    assert len(dropped) == provider["replaced"] and {t.handle for t in dropped} == {handle}
    assert [t.method for t in report.targets if t not in dropped] == ["pinned"]  # the block
    original = read_original(compactor, "c1", handle, limit=20_000)
    assert "error" not in original, original
    assert "Document 1." in original["content"]
    body = later[0].body["messages"]
    at = next(i for i, m in enumerate(body) if blocks[0] in (m["content"] if isinstance(
        m["content"], list) else []))
    assert at == 1  # the opening request, then the block's turn: the rest is gone
    ledger = json.dumps(body[at + 1:])
    assert LEDGER in ledger and handle in ledger


def test_with_compaction_sends_the_fields_and_round_trips_the_block_through_langchain(
    anthropic_server: Any,
) -> None:
    agent = DocumentAgent(16, tokens=(1_500, 3_000))
    server = anthropic_server(window=200_000, responder=agent)
    policy = cf.Pipeline(AnthropicCompaction(trigger=12_000), cf.ThresholdPolicy())
    model = with_compaction(
        ChatAnthropic(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0,
                      max_tokens=1_024),
        policy=policy, budget=cf.Budget(context_window=64_000, model=MODEL),
    ).bind_tools([DocumentAgent.TOOL])
    history: list[Any] = [SystemMessage(SYSTEM), HumanMessage(agent.task())]
    for _ in range(40):
        reply = model.invoke(history, config={"configurable": {"thread_id": "t"}})
        history.append(reply)
        if not reply.tool_calls:
            break
        history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                    for c in reply.tool_calls]
    blocks = returned_blocks(server)
    print(f"\nLangChain: {len(server.messages)} requests, {len(blocks)} provider compactions, "
          f"{len(server.rejected)} rejected")
    assert server.rejected == []
    assert "Codes found" in str(history[-1].content)
    assert all(r.body["context_management"] == request_fields(policy)["context_management"]
               for r in server.messages)
    later = sent_back(server, blocks[0]) if blocks else []
    assert later and all(r.accepted for r in later)
    # The originals the provider replaced are readable through the handle the ledger names.
    compactor = model.bound.engine.conversations.get("t").compactor
    ledger = next(m for m in later[-1].body["messages"] if LEDGER in json.dumps(m))
    found = re.search(r"ctx_[0-9a-f]{12}", json.dumps(ledger))
    assert found is not None
    handle = found.group(0)
    original = read_original(compactor, "t", handle, limit=20_000)
    assert "error" not in original and "Document 1." in original["content"]


def test_compaction_middleware_sends_the_fields_through_create_agent(
    anthropic_server: Any,
) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from langchain_contextfold import CompactionMiddleware

    agent = DocumentAgent(12, tokens=(1_500, 3_000))
    server = anthropic_server(window=200_000, responder=agent)

    @tool
    def read_document(number: int) -> str:
        """Read one document by its number."""
        return agent.document(number)

    policy = cf.Pipeline(AnthropicCompaction(trigger=10_000), cf.ThresholdPolicy())
    graph = create_agent(
        ChatAnthropic(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0,
                      max_tokens=1_024), [read_document], system_prompt=SYSTEM,
        middleware=[CompactionMiddleware(policy=policy, budget=cf.Budget(
            context_window=64_000, model=MODEL))])
    state = graph.invoke({"messages": [HumanMessage(agent.task())]},
                         config={"recursion_limit": 200})
    blocks = returned_blocks(server)
    assert server.rejected == [] and "Codes found" in str(state["messages"][-1].content)
    assert all(ANTHROPIC_COMPACTION_BETA in r.headers.get("anthropic-beta", "")
               for r in server.messages)
    assert blocks and sent_back(server, blocks[-1])


def test_context_editing_names_what_the_provider_clears_and_keeps_the_originals(
    anthropic_server: Any,
) -> None:
    from contextfold.providers import ANTHROPIC_CONTEXT_EDITING_BETA, AnthropicContextEditing

    agent = DocumentAgent(12, tokens=(1_500, 3_000))
    server = anthropic_server(window=200_000, responder=agent)
    client = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    policy = AnthropicContextEditing(trigger=8_000, keep=2)
    compactor = cf.Compactor(policy=policy, budget=cf.Budget(context_window=200_000,
                                                             model=MODEL),
                             counter=cf.EndpointCounter.anthropic(client, MODEL),
                             tools=[DocumentAgent.TOOL], conversation_id="c2")
    history = [cf.Message(role="system", content=SYSTEM),
               cf.Message(role="user", content=agent.task())]
    named: list[int] = []
    handles: set[str] = set()
    for _ in range(30):
        result = compactor.compact(history)
        provider = result.report.details.get("provider") or {}
        named.append(provider.get("cleared_tool_uses", 0))
        handles |= {t.handle for t in result.report.targets if t.handle}
        system, messages = cf.to_anthropic(result.messages)
        reply = client.beta.messages.create(model=MODEL, max_tokens=1_024, system=system or "",
                                            messages=messages, tools=[ANTHROPIC_TOOL],
                                            **request_fields(policy))
        compactor.observe_usage(reply.usage.input_tokens)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        history += cf.from_anthropic([{"role": "assistant", "content": content}])
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        history += [cf.Message(role="tool", content=agent.document(c.input["number"]),
                               tool_call_id=c.id, name=c.name) for c in calls]
    applied = [next((e["cleared_tool_uses"] for e in r.applied_edits
                     if e["type"] == "clear_tool_uses_20250919"), 0) for r in server.messages]
    print(f"\ncontext editing: {len(server.messages)} requests, cleared per request by the "
          f"provider {applied}, named by the pass {named}")
    assert server.rejected == [] and "Codes found" in history[-1].text
    assert all(ANTHROPIC_CONTEXT_EDITING_BETA in r.headers["anthropic-beta"]
               for r in server.messages)
    assert max(applied) >= 3
    assert named == applied  # the pass names exactly what the provider clears
    # The client sent every result whole; the originals are behind the handles the ledger
    # of the last request names.
    last = json.dumps(server.messages[-1].body["messages"])
    assert LEDGER in last and all(agent.codes[k] in last for k in range(1, 13))
    for handle in re.findall(r"ctx_[0-9a-f]{12}", last):
        assert handle in handles
        original = read_original(compactor, "c2", handle, limit=20_000)
        assert "error" not in original and "Reference code: REF-" in original["content"]
