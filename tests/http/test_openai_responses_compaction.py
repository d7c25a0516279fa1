"""OpenAI's ``responses.compact`` behind contextfold's contract, end to end with the real
``openai`` SDK against the loopback server's Responses API: the policy asks for the
provider's compaction, the opaque ``compaction`` item goes back unchanged with every later
request, what it replaced reads back through a handle, and the report says so."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

import contextfold as cf
from contextfold.policy import OpaquePart
from contextfold.providers import (
    OpenAIResponsesCompaction,
    from_responses,
    openai_responses_compact,
    to_responses,
)
from contextfold.stores import read_original
from openai_server import DocumentAgent

pytestmark = pytest.mark.http

MODEL = "gpt-5"
SYSTEM = "You read documents with read_document and report their reference codes."
TOOL = {"type": "function", "name": "read_document",
        "description": "Read one document by its number.",
        "parameters": DocumentAgent.TOOL["function"]["parameters"]}


def _compaction_items(messages: list[cf.Message]) -> list[dict[str, Any]]:
    return [dict(p.data) for m in messages if not isinstance(m.content, str)
            for p in m.content if isinstance(p, OpaquePart) and p.kind == "compaction"]


def test_responses_compact_runs_behind_the_policy_contract(openai_server: Any) -> None:
    agent = DocumentAgent(16, tokens=(1_500, 3_000))
    server = openai_server(window=16_384, responder=agent)
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    policy = OpenAIResponsesCompaction(openai_responses_compact(client, MODEL))
    compactor = cf.Compactor(policy=policy, budget=cf.Budget(context_window=16_384,
                                                             output_reserve=1_024),
                             tools=[DocumentAgent.TOOL], conversation_id="r1")
    history = [cf.Message(role="system", content=SYSTEM),
               cf.Message(role="user", content=agent.task())]
    reports: list[cf.CompactionReport] = []
    carried: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    for _ in range(60):
        result = compactor.compact(history)
        if result.report.method == policy.name:
            reports.append(result.report)
        instructions, items = to_responses(result.messages)
        response = client.responses.create(model=MODEL, instructions=instructions,
                                           input=items, tools=[TOOL])  # type: ignore[arg-type]
        sent = [i for i in server.requests[-1].body["input"] if i.get("type") == "compaction"]
        carried.append((_compaction_items(list(result.messages)), sent))
        compactor.observe_usage(response.usage.input_tokens)  # type: ignore[union-attr]
        history += from_responses([o.model_dump(exclude_none=True) for o in response.output])
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            break
        history += [cf.Message(role="tool", tool_call_id=c.call_id, name=c.name,
                               content=agent.document(json.loads(c.arguments)["number"]))
                    for c in calls]
    compactions = [r for r in server.requests if r.summary]
    print(f"\nresponses.compact: {len(server.requests)} requests, {len(compactions)} "
          f"compactions, {len(server.rejected)} rejected")
    assert server.rejected == []
    assert "Codes found" in history[-1].text
    assert compactions and reports
    # The provider's item, exactly as it came back, went out with every later request.
    after = [(ours, sent) for ours, sent in carried if ours]
    assert after and all(len(ours) == 1 and sent == ours for ours, sent in after)
    # What it replaced is behind one handle, named by a ledger after the item.
    report = reports[0]
    provider = report.details["provider"]
    assert provider["endpoint"] == "responses.compact" and provider["replaced"] >= 3
    assert provider["tokens_after"] < provider["tokens_before"]
    handles = {t.handle for t in report.targets}
    assert handles == {provider["handle"]}
    original = read_original(compactor, "r1", provider["handle"], limit=20_000)
    assert "error" not in original and "Document 1." in original["content"]
    first = next(r.body["input"] for r in server.requests
                 if not r.summary and any(i.get("type") == "compaction" for i in r.body["input"]))
    at = next(k for k, i in enumerate(first) if i.get("type") == "compaction")
    assert "[Compaction ledger" in json.dumps(first[at + 1:])
