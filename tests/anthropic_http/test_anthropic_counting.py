"""Counting Claude: the tool-use system prompt Anthropic adds when tools are present is
counted by the approximation and by ``EndpointCounter``, and the endpoint counter asks the
real SDK's ``count_tokens`` for the tools as the API counts them."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import contextfold as cf
from anthropic_server import TOOL_USE_SYSTEM_PROMPT
from openai_server import DocumentAgent, Reply

pytestmark = pytest.mark.anthropic_http

MODEL = "claude-sonnet-4-6"
SYSTEM = "You read documents with read_document and report their reference codes."
ANTHROPIC_TOOL = {"name": "read_document", "description": "Read one document by its number.",
                  "input_schema": DocumentAgent.TOOL["function"]["parameters"]}


def sdk(server: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)


def provider_count(server: Any, messages: list[cf.Message], tools: bool) -> int:
    system, wire = cf.to_anthropic(messages)
    extra: dict[str, Any] = {"tools": [ANTHROPIC_TOOL]} if tools else {}
    if system is not None:
        extra["system"] = system
    return sdk(server).messages.count_tokens(model=MODEL, messages=wire, **extra).input_tokens


SHORT = [cf.Message(role="system", content=SYSTEM),
         cf.Message(role="user", content="Read document 1 and tell me its code.")]


def test_the_approximation_never_counts_a_request_with_tools_under_the_provider(
    anthropic_server: Any,
) -> None:
    server = anthropic_server()
    counter = cf.counter_for_model(MODEL)
    ours = counter.count_messages(SHORT) + counter.count_tools([DocumentAgent.TOOL])
    theirs = provider_count(server, SHORT, tools=True)
    # The tool-use system prompt (346 tokens) is most of this request's cost.
    assert theirs - provider_count(server, SHORT, tools=False) > TOOL_USE_SYSTEM_PROMPT["auto"]
    assert ours >= theirs, (ours, theirs)


def test_the_endpoint_counts_tools_as_the_api_does(anthropic_server: Any) -> None:
    server = anthropic_server()
    counter = cf.EndpointCounter.anthropic(sdk(server), MODEL, workers=1)
    tools = counter.count_tools([DocumentAgent.TOOL])
    assert tools == (provider_count(server, SHORT, tools=True)
                     - provider_count(server, SHORT, tools=False))
    ours = counter.count_messages(SHORT) + tools
    theirs = provider_count(server, SHORT, tools=True)
    assert abs(ours - theirs) <= 0.02 * theirs, (ours, theirs)


def test_tools_fall_back_to_the_approximation_with_the_tool_prompt() -> None:
    def broken(tools: Any) -> int:
        raise ConnectionError("counting endpoint down")

    fallback = cf.counter_for_model(MODEL)
    plain = cf.EndpointCounter(len, name="endpoint:test", model=MODEL)
    failing = cf.EndpointCounter(len, name="endpoint:test", model=MODEL, count_tools=broken)
    tools = [DocumentAgent.TOOL]
    assert plain.count_tools(tools) >= TOOL_USE_SYSTEM_PROMPT["auto"]
    with pytest.warns(RuntimeWarning, match="token-counting endpoint"):
        assert failing.count_tools(tools) == fallback.count_tools(tools)
    assert fallback.count_tools(tools) > TOOL_USE_SYSTEM_PROMPT["auto"]
    assert plain.count_tools([]) == failing.count_tools([]) == fallback.count_tools([]) == 0


@pytest.mark.parametrize("given", [
    DocumentAgent.TOOL,
    DocumentAgent.TOOL["function"],
    ANTHROPIC_TOOL,
])
def test_tool_definitions_convert_to_anthropic_entries(given: dict[str, Any]) -> None:
    from contextfold._counting.endpoint import anthropic_tool

    assert anthropic_tool(given) == ANTHROPIC_TOOL
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    assert anthropic_tool(search) == search
    schema = {"title": "lookup", "type": "object", "properties": {"q": {"type": "string"}}}
    assert anthropic_tool(schema) == {"name": "lookup", "input_schema": schema}


# An agent's system prompt of about 1,500 tokens (its rules), the size real agents open with:
# the first reply's usage then tells the ratio of the provider's counts to ours on text,
# not on per-message framing.
POLICY = SYSTEM + "\n" + "\n".join(
    f"Rule {k}: when a document mentions the {w} of a {v}, report it with its reference code "
    f"and the section it came from; never guess a code that was not read in full."
    for k, (w, v) in enumerate((w, v) for w in ("budget", "schedule", "supplier", "contract",
                                                  "forecast", "audit", "policy", "margin")
                                for v in ("region", "customer", "product", "partner",
                                          "quarter", "team")))


def _run(server: Any, counter: cf.TokenCounter, *, tools: bool, steps: int,
         system: str = POLICY) -> list[float]:
    """A conversation through a Compactor and the SDK; for every request after the first
    reply, the relative error of the Compactor's calibrated figure of what it sent
    (``details["calibrated_tokens"]``) against ``count_tokens`` of that very request."""
    agent = DocumentAgent(steps, tokens=(1_500, 4_000), seed=11)
    client = sdk(server)
    definitions = [DocumentAgent.TOOL] if tools else None
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=cf.Budget(
        context_window=16_384, output_reserve=1_024, model=MODEL), counter=counter,
        tools=definitions)
    history = [cf.Message(role="system", content=system),
               cf.Message(role="user", content=agent.task())]
    errors: list[float] = []
    for step in range(1, steps + 1):
        result = compactor.compact(history)
        system, messages = cf.to_anthropic(result.messages)
        request: dict[str, Any] = {"model": MODEL, "system": system or "", "messages": messages}
        if tools:
            request["tools"] = [ANTHROPIC_TOOL]
        reply = client.messages.create(max_tokens=1_024, **request)
        if step > 1:
            theirs = client.messages.count_tokens(**request).input_tokens
            errors.append(abs(result.report.details["calibrated_tokens"] - theirs) / theirs)
        compactor.observe_usage(reply.usage.input_tokens, reply.usage.output_tokens)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        history += cf.from_anthropic([{"role": "assistant", "content": content}])
        if tools:
            history += [cf.Message(role="tool", content=agent.document(b.input["number"]),
                                   tool_call_id=b.id, name=b.name)
                        for b in reply.content if b.type == "tool_use"]
        else:  # the user pastes the next document
            history.append(cf.Message(role="user", content=agent.document(step)))
    return errors


@pytest.mark.slow
@pytest.mark.parametrize("tools", [True, False], ids=["tools", "no_tools"])
@pytest.mark.parametrize("counting", ["approximation", "endpoint"])
def test_after_the_first_reply_claude_is_counted_within_2_percent(
    anthropic_server: Any, tools: bool, counting: str
) -> None:
    def respond(body: dict[str, Any]) -> Any:
        return agent(body) if tools else Reply(content="Noted.")

    agent = DocumentAgent(25, tokens=(1_500, 4_000), seed=11)
    server = anthropic_server(window=16_384, responder=respond)
    counter = (cf.counter_for_model(MODEL) if counting == "approximation"
               else cf.EndpointCounter.anthropic(sdk(server), MODEL))
    errors = _run(server, counter, tools=tools, steps=25)
    print(f"\n{counting}, {'tools' if tools else 'no tools'}: {len(errors)} requests, error "
          f"mean {sum(errors) / len(errors):.2%}, max {max(errors):.2%}")
    assert len(errors) == 24 and max(errors) <= 0.02
