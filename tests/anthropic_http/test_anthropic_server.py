"""The loopback server behaves like the Messages API where compaction is concerned: the real
``anthropic`` SDK talks to it, it enforces the format rules and the window with the API's
error body and wordings, counts the tool-use system prompt, and streams the documented
event sequence."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from anthropic_server import TOOL_USE_SYSTEM_PROMPT, sign
from anthropic_server.wire import ENCODING
from openai_server import Reply

pytestmark = pytest.mark.anthropic_http

MODEL = "claude-sonnet-4-6"
TOOL = {"name": "read_document", "description": "Read one document by its number.",
        "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}},
                         "required": ["number"]}}


def client(server: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)


def tokens(text: str) -> int:
    return len(ENCODING.encode(text))


def test_the_sdk_gets_replies_with_usage_and_counts_agree(anthropic_server: Any) -> None:
    server = anthropic_server(window=4_000)
    sdk = client(server)
    messages = [{"role": "user", "content": "Hello there"}]
    reply = sdk.messages.create(model=MODEL, max_tokens=256, system="Be brief.",
                                messages=messages)
    assert reply.content[0].text.startswith("echo: Hello there")
    counted = sdk.messages.count_tokens(model=MODEL, system="Be brief.", messages=messages)
    assert reply.usage.input_tokens == counted.input_tokens == server.messages[0].prompt_tokens
    assert counted.input_tokens == 3 + tokens("Be brief.") + 3 + tokens("Hello there")


@pytest.mark.parametrize(("choice", "added"), [(None, 346), ({"type": "auto"}, 346),
                                               ({"type": "none"}, 346), ({"type": "any"}, 313),
                                               ({"type": "tool", "name": "read_document"}, 313)])
def test_tools_add_their_definitions_and_the_tool_use_system_prompt(
    anthropic_server: Any, choice: dict[str, Any] | None, added: int
) -> None:
    sdk = client(anthropic_server())
    messages = [{"role": "user", "content": "read 1"}]
    bare = sdk.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    extra = {"tool_choice": choice} if choice else {}
    with_tools = sdk.messages.count_tokens(model=MODEL, messages=messages, tools=[TOOL],
                                           **extra).input_tokens
    assert TOOL_USE_SYSTEM_PROMPT[(choice or {"type": "auto"})["type"]] == added
    assert with_tools - bare == tokens(json.dumps([TOOL], sort_keys=True)) + added


def test_streaming_follows_the_documented_event_sequence(anthropic_server: Any) -> None:
    server = anthropic_server(responder=lambda body: Reply(
        content="Reading it now.", tool_calls=[("read_document", {"number": 12})]))
    sdk = client(server)
    kinds: list[str] = []
    with sdk.messages.stream(model=MODEL, max_tokens=512, tools=[TOOL],
                             messages=[{"role": "user", "content": "read 12"}]) as stream:
        kinds.extend(event.type for event in stream)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds and kinds.count("content_block_stop") == 2
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"number": 12} and final.stop_reason == "tool_use"
    assert final.usage.input_tokens == server.messages[0].prompt_tokens


def _overflow(sdk: anthropic.Anthropic, words: int, max_tokens: int) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model=MODEL, max_tokens=max_tokens,
                            messages=[{"role": "user", "content": "word " * words}])
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    return caught.value.body["error"]["message"]  # type: ignore[index,no-any-return]


def test_the_window_is_enforced_in_both_wordings(anthropic_server: Any) -> None:
    server = anthropic_server(window=1_000)
    sdk = client(server)
    too_long = _overflow(sdk, 1_200, 100)
    prompt = server.messages[0].prompt_tokens
    assert too_long == f"prompt is too long: {prompt} tokens > 1000 maximum"
    with_max = _overflow(sdk, 900, 200)
    prompt = server.messages[1].prompt_tokens
    assert prompt <= 1_000 < prompt + 200
    assert with_max.startswith(f"input length and `max_tokens` exceed context limit: {prompt} + "
                               "200 > 1000")


CALL = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"number": 1}}]}
RESULT = {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "text of 1"}]}
ASK = {"role": "user", "content": "go"}


@pytest.mark.parametrize(("messages", "complaint"), [
    ([{"role": "system", "content": "x"}, ASK], 'Unexpected role "system"'),
    ([ASK, ASK], "roles must alternate"),
    ([{"role": "assistant", "content": "hi"}, ASK], 'first message must use the "user" role'),
    ([ASK, CALL], "`tool_use` ids were found without `tool_result` blocks"),
    ([ASK, CALL, ASK], "`tool_use` ids were found without `tool_result` blocks"),
    ([ASK, CALL, {"role": "user", "content": [{"type": "text", "text": "first"},
                                               *RESULT["content"]]}],
     "`tool_result` blocks must come first"),
    ([ASK, {"role": "assistant", "content": "ok"}, RESULT], "unexpected `tool_use_id`"),
    ([ASK, {"role": "assistant", "content": [{"type": "text", "text": "x", "meta": 1}]}, ASK],
     "Extra inputs are not permitted"),
])
def test_format_rules_are_enforced(anthropic_server: Any, messages: list[Any],
                                   complaint: str) -> None:
    server = anthropic_server()
    with pytest.raises(anthropic.BadRequestError, match=complaint):
        client(server).messages.create(model=MODEL, max_tokens=100, tools=[TOOL],
                                       messages=messages)
    assert server.rejected and complaint in str(server.rejected[0].reason)


def test_tool_blocks_need_tools_and_max_tokens_is_required(anthropic_server: Any) -> None:
    server = anthropic_server()
    sdk = client(server)
    with pytest.raises(anthropic.BadRequestError, match="must define tools"):
        sdk.messages.create(model=MODEL, max_tokens=100, messages=[ASK, CALL, RESULT])
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Field required"):
        sdk.post("/v1/messages", cast_to=object, body={"model": MODEL, "messages": [ASK]})


def test_thinking_must_open_the_assistant_turn_of_a_tool_loop_and_be_signed(
    anthropic_server: Any,
) -> None:
    server = anthropic_server(responder=lambda body: Reply(
        tool_calls=[("read_document", {"number": 1})]))
    sdk = client(server)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = sdk.messages.create(model=MODEL, max_tokens=2048, tools=[TOOL], thinking=thinking,
                                messages=[ASK])
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    result = {"role": "user", "content": [{"type": "tool_result",
                                           "tool_use_id": blocks[1]["id"], "content": "r"}]}
    ok = sdk.messages.create(model=MODEL, max_tokens=2048, tools=[TOOL], thinking=thinking,
                             messages=[ASK, {"role": "assistant", "content": blocks}, result])
    assert ok.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        sdk.messages.create(model=MODEL, max_tokens=2048, tools=[TOOL], thinking=thinking,
                            messages=[ASK, {"role": "assistant", "content": blocks[1:]}, result])
    forged = [{**blocks[0], "thinking": "something else"}, blocks[1]]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        sdk.messages.create(model=MODEL, max_tokens=2048, tools=[TOOL], thinking=thinking,
                            messages=[ASK, {"role": "assistant", "content": forged}, result])
    assert blocks[0]["signature"] == sign(blocks[0]["thinking"])
