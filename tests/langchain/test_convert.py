"""Converters: LangChain messages <-> core messages, lossless for what LangChain carries."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

import contextfold as cf
from langchain_contextfold import LANGCHAIN_KEY, from_core, to_core

# -- strategies -----------------------------------------------------------------------

text = st.text(max_size=30)
ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
json_scalar = st.none() | st.booleans() | st.integers(-10**6, 10**6) | text | st.floats(
    allow_nan=False, allow_infinity=False)
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(ident, inner, max_size=3), max_leaves=8)
json_dict = st.dictionaries(ident, json_value, max_size=3)

text_block = st.builds(lambda t, extra: {"type": "text", "text": t, **extra}, text,
                       st.dictionaries(st.sampled_from(["id", "annotations"]), json_scalar,
                                       max_size=1))
image_block = st.sampled_from([
    {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
    {"type": "image_url", "image_url": "https://x.test/b.png"},
    {"type": "image", "url": "https://x.test/c.png"},
    {"type": "image", "base64": "aGVsbG8=", "mime_type": "image/png"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "eHl6"}},
])
reasoning_block = st.one_of(
    st.builds(lambda t: {"type": "reasoning", "reasoning": t}, text),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, text, ident),
    st.builds(lambda t, i: {"type": "reasoning", "id": i,
                            "summary": [{"type": "summary_text", "text": t}]}, text, ident),
)
opaque_block = st.builds(lambda k, d: {"type": k, **d},
                         st.sampled_from(["file", "audio", "server_tool_call"]), json_dict)
block = st.one_of(text, text_block, image_block, reasoning_block, opaque_block)
content = st.one_of(text, st.lists(block, max_size=4))
ids = st.none() | ident
source_section = st.fixed_dictionaries({}, optional={
    "source": st.sampled_from(["direct", "broadcast", "nudge"]),
    "sender_id": st.sampled_from(["", "mysis-2"]),
    "created_at": st.just("2025-01-06T09:00:00+00:00"),
    "metadata": st.fixed_dictionaries({"pinned": st.booleans()}),
})
kwargs = st.fixed_dictionaries({}, optional={"contextfold": source_section,
                                             "reasoning_content": text, "refusal": text})
tool_call = st.builds(lambda n, a, i: {"name": n, "args": a, "id": i, "type": "tool_call"},
                      ident, json_dict, ident)
usage = st.none() | st.builds(lambda i, o: {"input_tokens": i, "output_tokens": o,
                                            "total_tokens": i + o},
                              st.integers(0, 10**6), st.integers(0, 10**4))


@st.composite
def lc_messages(draw: Any) -> BaseMessage:
    kind = draw(st.sampled_from(["system", "human", "ai", "tool", "chat", "chunk"]))
    common = {"content": draw(content), "id": draw(ids), "name": draw(st.none() | ident),
              "additional_kwargs": draw(kwargs), "response_metadata": draw(json_dict)}
    if kind == "system":
        return SystemMessage(**common)
    if kind == "human":
        return HumanMessage(**common)
    if kind == "chat":
        return ChatMessage(role=draw(st.sampled_from(["user", "assistant", "developer"])),
                           **common)
    if kind == "tool":
        return ToolMessage(tool_call_id=draw(ident),
                           status=draw(st.sampled_from(["success", "error"])),
                           artifact=draw(st.none() | json_dict), **common)
    invalid = draw(st.lists(st.builds(
        lambda n, a, i: {"name": n, "args": a, "id": i, "error": "bad json",
                         "type": "invalid_tool_call"}, ident, text, ident), max_size=1))
    if kind == "chunk":
        return AIMessageChunk(tool_call_chunks=[], **common)
    return AIMessage(tool_calls=draw(st.lists(tool_call, max_size=3)),
                     invalid_tool_calls=invalid, usage_metadata=draw(usage), **common)


# -- properties -----------------------------------------------------------------------


@given(st.lists(lc_messages(), max_size=6))
def test_round_trip_is_lossless(messages: list[BaseMessage]) -> None:
    back = from_core(to_core(messages))
    assert back == messages
    assert [type(m) for m in back] == [type(m) for m in messages]


@given(st.lists(lc_messages(), max_size=6))
def test_conversion_is_deterministic_and_leaves_the_input_alone(
    messages: list[BaseMessage],
) -> None:
    snapshot = [m.model_copy(deep=True) for m in messages]
    assert to_core(messages) == to_core(messages)
    assert messages == snapshot


@given(lc_messages())
def test_changed_text_keeps_the_extras(message: BaseMessage) -> None:
    core = to_core([message])[0]
    changed = replace(core, content="[TRUNCATED]")
    back = from_core([changed])[0]
    assert type(back) is type(message)
    assert back.content == "[TRUNCATED]" or isinstance(back.content, list)
    assert back.id == message.id and back.response_metadata == message.response_metadata
    if isinstance(message, ToolMessage):
        assert isinstance(back, ToolMessage)
        assert (back.tool_call_id, back.status) == (message.tool_call_id, message.status)


# -- fields ---------------------------------------------------------------------------


def test_fields_map_to_the_core_model() -> None:
    ai = AIMessage(
        content=[{"type": "thinking", "thinking": "plan", "signature": "sig"},
                 {"type": "text", "text": "calling"}],
        tool_calls=[{"name": "get", "args": {"q": [1, 2]}, "id": "c1"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        id="ai-1",
    )
    tool = ToolMessage("boom", tool_call_id="c1", status="error", name="get")
    core = to_core([HumanMessage("hi", id="u-1"), ai, tool])
    assert core[0].role == "user" and core[0].id == "u-1"
    assert core[1].role == "assistant" and core[1].reasoning == "plan" and core[1].text == "calling"
    assert core[1].tool_calls == (cf.ToolCall(id="c1", name="get", arguments='{"q": [1, 2]}'),)
    assert core[1].metadata[LANGCHAIN_KEY]["usage_metadata"]["input_tokens"] == 10
    assert core[2].role == "tool" and core[2].is_error and core[2].tool_call_id == "c1"
    assert cf.validate(core) == []


def test_prompt_sources_ride_in_additional_kwargs() -> None:
    human = HumanMessage("Mine iron ore", additional_kwargs={"contextfold": {
        "source": "broadcast", "sender_id": "", "created_at": "2025-01-06T09:00:00+00:00",
        "metadata": {"pinned": True}}})
    core = to_core([human])[0]
    assert (core.source, core.sender_id, core.is_pinned) == ("broadcast", "", True)
    assert core.created_at == datetime(2025, 1, 6, 9, tzinfo=timezone.utc)
    made = cf.Message(role="user", content="Continue your mission.", source="nudge")
    back = from_core([made])[0]
    assert isinstance(back, HumanMessage)
    assert back.additional_kwargs == {"contextfold": {"source": "nudge"}}
    assert to_core([back])[0].source == "nudge"


def test_messages_a_policy_made_become_plain_classes() -> None:
    made = [cf.Message(role="system", content="s"), cf.Message(role="developer", content="d"),
            cf.Message(role="assistant", content="", tool_calls=(cf.ToolCall("x", "f"),)),
            cf.Message(role="tool", content="r", tool_call_id="x",
                       metadata={"is_error": True})]
    back = from_core(made)
    assert [type(m) for m in back] == [SystemMessage, SystemMessage, AIMessage, ToolMessage]
    assert back[1].additional_kwargs["__openai_role__"] == "developer"
    assert back[2].tool_calls[0]["args"] == {} and back[3].status == "error"


def test_arguments_cut_below_json_stay_visible() -> None:
    core = cf.Message(role="assistant", tool_calls=(cf.ToolCall("c", "f", '{"q": "abc'),))
    assert from_core([core])[0].tool_calls[0]["args"] == {"arguments": '{"q": "abc'}


def test_changed_reasoning_replaces_the_blocks() -> None:
    ai = AIMessage(content=[{"type": "thinking", "thinking": "long", "signature": "s"},
                            {"type": "text", "text": "answer"}])
    core = to_core([ai])[0]
    assert from_core([replace(core, reasoning=None)])[0].content == [
        {"type": "text", "text": "answer"}]
    assert from_core([replace(core, reasoning="short")])[0].content == [
        {"type": "reasoning", "reasoning": "short"}, {"type": "text", "text": "answer"}]


@pytest.mark.parametrize("bad", [
    RemoveMessage(id="x"),
    FunctionMessage(content="r", name="f"),
    ChatMessage(role="wizard", content="x"),
])
def test_unsupported_messages_are_refused_with_a_typed_error(bad: BaseMessage) -> None:
    with pytest.raises(cf.ConversionError) as info:
        to_core([HumanMessage("ok"), bad])
    assert info.value.index == 1


def test_non_messages_and_bad_sections_are_refused() -> None:
    with pytest.raises(cf.ConversionError):
        to_core(["hello"])  # type: ignore[list-item]
    with pytest.raises(cf.ConversionError) as info:
        to_core([HumanMessage("x", additional_kwargs={"contextfold": {"created_at": "nope"}})])
    assert "created_at" in str(info.value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=3),
    max_leaves=8)


@given(_JSON)
def test_call_arguments_are_encoded_as_the_json_encoder_does(value: object) -> None:
    from langchain_contextfold import _convert

    assert _convert._arguments_text(value) == _convert._ARGUMENTS.encode(value)


def test_call_arguments_that_are_not_json_fail_as_the_encoder_does() -> None:
    from langchain_contextfold import _convert

    loop: dict[str, object] = {}
    loop["self"] = loop
    for bad in ({"when": object()}, loop):
        with pytest.raises((TypeError, ValueError)) as ours:
            _convert._arguments_text(bad)
        with pytest.raises((TypeError, ValueError)) as theirs:
            _convert._ARGUMENTS.encode(bad)
        assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
