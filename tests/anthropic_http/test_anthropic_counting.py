"""Counting Claude: the tool-use system prompt Anthropic adds when tools are present is
counted by the approximation and by ``EndpointCounter``, and the endpoint counter asks the
real SDK's ``count_tokens`` for the tools as the API counts them."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import contextfold as cf
from anthropic_server import TOOL_USE_SYSTEM_PROMPT
from openai_server import DocumentAgent

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
