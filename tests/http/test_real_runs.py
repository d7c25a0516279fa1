"""Whole agent runs with the real OpenAI clients against a server that enforces a 16,384-token
window: what users run, measured the way they would notice it (rejected requests, codes the
agent still sees at the end, summary calls that fit)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

import contextfold as cf
from langchain_contextfold import CompactionMiddleware, with_compaction
from llama_index.memory.contextfold import CompactingLLM
from openai_server import ENCODING, DocumentAgent

pytestmark = [pytest.mark.http, pytest.mark.slow]

WINDOW = 16_384
BUDGET = cf.Budget(context_window=16_384, output_reserve=1_024)
SYSTEM = "You read documents with read_document and report their reference codes."


def chat_openai(server: Any, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="test",
                      max_retries=0, **kwargs)


def codes_in_view_at_the_end(server: Any, agent: DocumentAgent) -> int:
    """Codes present in the last request the agent made (what it saw when it answered)."""
    return len(agent.visible_codes(str(server.agent_requests[-1].body["messages"])))


def lc_tool(agent: DocumentAgent) -> Any:
    @tool
    def read_document(number: int) -> str:
        """Read one document by its number."""
        return agent.document(number)

    return read_document


def cached_prefixes(server: Any) -> tuple[float, float]:
    """Of consecutive agent requests: the share that repeat the previous request whole, and
    the share that repeat at least 1,024 tokens of it from the start (what a provider's
    prompt cache can reuse; OpenAI caches from 1,024 tokens)."""
    requests = [r for r in server.requests if not r.summary and r.accepted]
    whole = long = 0
    for previous, request in itertools.pairwise(requests):
        sent = json.dumps(previous.body["messages"], sort_keys=True).encode()
        whole += request.shared_prefix >= len(sent) - 1  # all but its closing bracket
        shared = sent[: request.shared_prefix].decode("utf-8", "ignore")
        long += len(ENCODING.encode(shared, disallowed_special=())) >= 1_024
    pairs = max(1, len(requests) - 1)
    return whole / pairs, long / pairs


def test_create_agent_with_the_default_summarizer_reads_60_documents(openai_server: Any) -> None:
    agent = DocumentAgent(60)
    server = openai_server(window=WINDOW, responder=agent)
    graph = create_agent(chat_openai(server), [lc_tool(agent)], system_prompt=SYSTEM,
                         middleware=[CompactionMiddleware(policy=cf.ThresholdPolicy(),
                                                          budget=BUDGET)])
    state = graph.invoke({"messages": [HumanMessage(agent.task())]},
                         config={"recursion_limit": 400})
    summaries = [r for r in server.requests if r.summary]
    whole, long = cached_prefixes(server)
    cached, total = server.summary_cache()
    print(f"\n60 docs create_agent: {len(server.requests)} requests, "
          f"{len(summaries)} summary calls, {len(server.rejected)} rejected, "
          f"{codes_in_view_at_the_end(server, agent)}/60 codes in view; of consecutive "
          f"requests {whole:.0%} repeat the previous whole, {long:.0%} its first 1,024 tokens; "
          f"{cached:,} of the summary calls' {total:,} tokens repeat an agent request "
          f"({cached / max(total, 1):.0%})")
    assert server.rejected == []  # agent and summary calls alike: nothing over the window
    assert summaries, "the default summarizer (the agent's model) made the summaries"
    assert codes_in_view_at_the_end(server, agent) >= 57
    assert "Codes found" in str(state["messages"][-1].content)
    # Rolling compaction leaves what earlier passes wrote as it was sent: most requests,
    # compacted ones included, repeat a prefix a provider caches.
    assert long >= 0.8
    # Summary calls repeat the agent's previous request (cache-true): a provider serves
    # most of their tokens from its prompt cache.
    assert cached >= 0.8 * total


# Raised inside llama-index-workflows (see tests/llamaindex/conftest.py).
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_function_agent_on_compacting_llm_reads_40_documents(openai_server: Any) -> None:
    agent = DocumentAgent(40)
    server = openai_server(window=WINDOW, responder=agent)
    llm = CompactingLLM(llm=OpenAI(model="gpt-4o-mini", api_base=server.base_url,
                                   api_key="test", max_retries=0),
                        policy=cf.ThresholdPolicy(), budget=BUDGET, conversation_id="docs")
    tool_ = FunctionTool.from_defaults(fn=agent.document, name="read_document",
                                       description="Read one document by its number.")
    workflow = FunctionAgent(tools=[tool_], llm=llm, system_prompt=SYSTEM)

    async def run() -> Any:
        return await workflow.run(agent.task(), max_iterations=200)

    result = asyncio.run(run())
    print(f"\n40 docs FunctionAgent: {len(server.requests)} requests, "
          f"{len(server.rejected)} rejected, {codes_in_view_at_the_end(server, agent)}/40 codes")
    assert server.rejected == []
    assert codes_in_view_at_the_end(server, agent) >= 38
    assert "Codes found" in str(result)


# Threshold and Tiered keep a ledger of what they cut by default; the turn-aware and
# truncation policies carry one when asked, and without it the scripted agent (which only
# knows what it sees) loses track of what it read.
@pytest.mark.parametrize("policy", [
    cf.ThresholdPolicy(),
    cf.TieredPolicy(),
    cf.TurnAwarePolicy(ledger=cf.Ledger(share=0.1)),
    cf.TruncationPolicy(ledger=cf.Ledger(share=0.1))],
                         ids=lambda p: p.name)
def test_a_budget_larger_than_the_real_window_costs_at_most_one_rejection(
    openai_server: Any, policy: cf.Policy
) -> None:
    # Configured for 16,384 tokens, the model takes 10,000: the first overflow states the
    # limit, the call loop lowers the budget below it and the run goes on.
    agent = DocumentAgent(25)
    server = openai_server(window=10_000, responder=agent)
    model = with_compaction(chat_openai(server), policy=policy,
                            budget=cf.Budget(context_window=16_384)).bind_tools(
        [DocumentAgent.TOOL])
    history: list[Any] = [SystemMessage(SYSTEM), HumanMessage(agent.task())]
    for _ in range(60):
        reply = model.invoke(history, config={"configurable": {"thread_id": policy.name}})
        history.append(reply)
        if not reply.tool_calls:
            break
        history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                    for c in reply.tool_calls]
    print(f"\n{policy.name}: {len(server.requests)} requests, {len(server.rejected)} rejected, "
          f"finished: {not getattr(history[-1], 'tool_calls', True)}")
    assert len(server.rejected) <= 1
    assert isinstance(history[-1], AIMessage) and not history[-1].tool_calls, "it finished"


def test_streaming_and_a_batch_of_three_conversations_stay_in_the_window(
    openai_server: Any,
) -> None:
    agents = [DocumentAgent(8, seed=s) for s in (1, 2, 3)]

    def respond(body: dict[str, Any]) -> Any:
        task = next(m for m in body["messages"] if m["role"] == "user")["content"]
        return agents[int(task.split("#")[1].split(":")[0])](body)

    server = openai_server(window=WINDOW, responder=respond)
    model = with_compaction(chat_openai(server, stream_usage=True),
                            policy=cf.ThresholdPolicy(), budget=BUDGET).bind_tools(
        [DocumentAgent.TOOL])
    histories: list[list[Any]] = [
        [SystemMessage(SYSTEM), HumanMessage(f"Conversation #{k}: {agents[k].task()}")]
        for k in range(3)]
    for _ in range(12):  # batch() of three conversations without thread ids
        replies = model.batch(histories)
        for history, reply, agent in zip(histories, replies, agents, strict=True):
            history.append(reply)
            history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                        for c in reply.tool_calls]
    streamed = list(model.stream(histories[0]))  # and one streamed call
    assert streamed
    assert server.rejected == []
    inner = model.bound if hasattr(model, "bound") else model
    assert len(inner.engine.conversations) == 0  # no ids: each call its own, none kept
