"""LlamaIndex <-> core conversions: lossless round trips and the mapping of each field."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.base.llms.types import (
    AudioBlock,
    CachePoint,
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.tools import FunctionTool

import contextfold as cf
from contextfold.testing import histories
from llama_index.memory.contextfold import (
    from_llama_index,
    message_from_llama_index,
    message_to_llama_index,
    to_llama_index,
    tool_definitions,
)


def _png(width: int, height: int) -> bytes:
    """A valid PNG header of the given size (enough for size sniffing)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))


def _dump(message: ChatMessage) -> dict[str, Any]:
    return message.model_dump(mode="json")


# -- strategies --------------------------------------------------------------------------

_text = st.text(max_size=40)
_ids = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=10)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ids, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _tool_call_blocks(draw: st.DrawFn) -> ToolCallBlock:
    kwargs = draw(st.dictionaries(_ids, _json_values, max_size=3)
                  | st.sampled_from(['{"a":1}', "not json", "[1, 2]", '{"b": "x"}']))
    return ToolCallBlock(tool_call_id=draw(st.none() | _ids), tool_name=draw(_ids),
                         tool_kwargs=kwargs)


_images = st.one_of(
    st.builds(lambda w, h: ImageBlock(image=_png(w, h)), st.integers(1, 4000),
              st.integers(1, 4000)),
    st.builds(lambda u, d: ImageBlock(url=f"https://example.com/{u}.png", detail=d), _ids,
              st.none() | st.sampled_from(["low", "high", "auto"])),
    st.builds(lambda u: ImageBlock(url=f"data:image/png;base64,{u}"), st.just("iVBORw0KGgo=")),
)
_blocks = st.one_of(
    st.builds(TextBlock, text=_text),
    _images,
    st.builds(ThinkingBlock, content=st.none() | _text, num_tokens=st.none() | st.integers(0, 9)),
    _tool_call_blocks(),
    st.builds(lambda u: AudioBlock(url=f"https://example.com/{u}.mp3", format="mp3"), _ids),
    st.just(CachePoint(cache_control={"type": "ephemeral"})),  # type: ignore[arg-type]
)


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    """Any ChatMessage LlamaIndex can carry: every role, every block, OpenAI kwargs."""
    role = draw(st.sampled_from(list(MessageRole)))
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):
        kwargs["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in draw(st.lists(st.tuples(_ids, _ids, st.sampled_from(
                ['{"q":"x"}', "{}", '{"a": [1, 2]}'])), max_size=2))
        ]
    if draw(st.booleans()):
        kwargs["tool_call_id"] = draw(_ids)
    if draw(st.booleans()):
        kwargs["name"] = draw(st.just("") | _ids)
    if draw(st.booleans()):
        kwargs["custom"] = draw(_json_values)
    blocks = draw(st.lists(_blocks, max_size=5))
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs)


# -- round trips -------------------------------------------------------------------------


@given(chat_messages())
def test_llama_index_round_trip_is_lossless(message: ChatMessage) -> None:
    before = _dump(message)
    back = message_to_llama_index(message_from_llama_index(message))
    assert _dump(back) == before
    assert _dump(message) == before  # the input was not touched


@given(histories(imperfect=True))
def test_core_round_trip_keeps_every_field_llama_index_has(messages: list[cf.Message]) -> None:
    again = from_llama_index(to_llama_index(messages))
    for original, converted in zip(messages, again, strict=True):
        assert converted.role == original.role
        assert converted.tool_calls == original.tool_calls
        assert converted.tool_call_id == (original.tool_call_id if original.role == "tool"
                                          else None)
        assert converted.name == original.name
        assert converted.reasoning == original.reasoning
        assert converted.text == original.text
        assert [(p.url, p.detail) for p in converted.images] == [
            (p.url, p.detail) for p in original.images
        ]


@given(histories())
def test_converted_history_stays_valid(messages: list[cf.Message]) -> None:
    assert cf.validate(from_llama_index(to_llama_index(messages))) == []


# -- field mapping -----------------------------------------------------------------------


def test_openai_style_tool_calls_in_kwargs_become_core_calls() -> None:
    msg = ChatMessage(role="assistant", content=None, additional_kwargs={"tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"sku": "A-1"}'}},
    ]})
    core = message_from_llama_index(msg)
    assert core.tool_calls == (cf.ToolCall("call_1", "lookup", '{"sku": "A-1"}'),)
    result = message_from_llama_index(ChatMessage(
        role="tool", content="42 left", additional_kwargs={"tool_call_id": "call_1",
                                                           "name": "lookup"}))
    assert (result.role, result.tool_call_id, result.name) == ("tool", "call_1", "lookup")
    assert cf.validate([cf.Message("user", "stock?"), core, result]) == []


def test_tool_call_blocks_win_over_kwargs_duplicates() -> None:
    # The OpenAI integration returns both forms for the same calls.
    msg = ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="f", tool_kwargs='{"x":1}')],
        additional_kwargs={"tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
        ]},
    )
    core = message_from_llama_index(msg)
    assert core.tool_calls == (cf.ToolCall("c1", "f", '{"x":1}'),)


def test_legacy_roles_map_and_come_back() -> None:
    for role, core_role in (("function", "tool"), ("chatbot", "assistant"),
                            ("model", "assistant"), ("developer", "developer")):
        msg = ChatMessage(role=role, content="x")
        core = message_from_llama_index(msg)
        assert core.role == core_role
        assert message_to_llama_index(core).role.value == role


def test_image_size_is_read_from_png_bytes_and_counted() -> None:
    def image(w: int, h: int) -> cf.Message:
        return message_from_llama_index(
            ChatMessage(role="user", blocks=[ImageBlock(image=_png(w, h))]))

    big, small = image(2048, 2048), image(64, 64)
    assert (big.images[0].width, big.images[0].height) == (2048, 2048)
    counter = cf.EstimatingCounter()
    assert counter.count_message(big) > counter.count_message(small)


def test_policy_changes_win_over_kept_extras() -> None:
    msg = ChatMessage(role="assistant", blocks=[
        ThinkingBlock(content="plan", num_tokens=4), TextBlock(text=""),
        ToolCallBlock(tool_call_id="c1", tool_name="f", tool_kwargs={"a": 1}),
    ], additional_kwargs={"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]})
    core = message_from_llama_index(msg)
    from dataclasses import replace

    changed = replace(core, content="[truncated]", reasoning=None, tool_calls=())
    back = message_to_llama_index(changed)
    assert [type(b).__name__ for b in back.blocks] == ["TextBlock"]
    assert back.content == "[truncated]"
    assert "tool_calls" not in back.additional_kwargs


def test_non_json_kwargs_are_kept_as_json() -> None:
    from openai.types.chat import ChatCompletionMessageToolCall

    call = ChatCompletionMessageToolCall.model_validate(
        {"id": "c9", "type": "function", "function": {"name": "g", "arguments": "{}"}})
    core = message_from_llama_index(ChatMessage(role="assistant",
                                                additional_kwargs={"tool_calls": [call]}))
    assert core.tool_calls == (cf.ToolCall("c9", "g", "{}"),)
    json.dumps(dict(core.metadata))  # storable as JSON


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(cf.ConversionError, match="message 1"):
        from_llama_index([ChatMessage(role="user", content="x"), {"role": "user"}])  # type: ignore[list-item]
    with pytest.raises(cf.ConversionError, match="name"):
        message_from_llama_index(ChatMessage(role="assistant",
                                             additional_kwargs={"tool_calls": [{"id": "x"}]}))


def test_tool_definitions_accept_tools_and_dicts() -> None:
    def lookup(sku: str) -> str:
        """Look up a product by SKU."""
        return sku

    defs = tool_definitions([FunctionTool.from_defaults(fn=lookup),
                             {"type": "function", "function": {"name": "x"}}])
    assert defs[0]["function"]["name"] == "lookup"
    assert cf.EstimatingCounter().count_tools(defs) > 0


def test_image_paths_round_trip_even_when_the_file_is_gone(tmp_path: Any) -> None:
    path = tmp_path / "chart one.png"
    path.write_bytes(_png(640, 480))
    msg = ChatMessage(role="user", blocks=[TextBlock(text="see"), ImageBlock(path=path)])
    core = message_from_llama_index(msg)
    assert core.images[0].url.startswith("file:")
    assert _dump(message_to_llama_index(core)) == _dump(msg)
    path.unlink()
    back = message_to_llama_index(core)
    assert back.blocks[1].path == path  # kept as a reference, not dropped
