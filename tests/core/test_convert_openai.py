"""from_openai / to_openai: lossless round trips, legacy forms, typed errors on bad input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.policy import OpaquePart
from contextfold.testing import histories

# -- strategies ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)
words = st.text(max_size=40)
call_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)


@st.composite
def arguments(draw: st.DrawFn) -> str:
    """JSON text as a model writes it: compact, spaced, or with stray whitespace."""
    value = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
    style = draw(st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]))
    return draw(st.sampled_from(["", " ", "\n"])) + json.dumps(value, separators=style)


text_part = st.builds(lambda t: {"type": "text", "text": t}, words)
image_part = st.builds(
    lambda url, detail: {"type": "image_url",
                         "image_url": {"url": url} if detail is None else {"url": url,
                                                                             "detail": detail}},
    st.sampled_from(["https://x.test/a.png", "data:image/png;base64,AAAA"]),
    st.sampled_from([None, "low", "high", "auto"]),
)
opaque_part = st.one_of(
    st.just({"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}),
    st.builds(lambda t: {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}},
              words),
    st.just({"type": "file", "file": {"file_id": "file-1"}}),
)
contents = st.one_of(words, st.lists(st.one_of(text_part, image_part, opaque_part), max_size=4))


@st.composite
def canonical_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat-completions messages in canonical form (no null keys, no empty tool_calls)."""
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["system", "developer", "user", "assistant", "calls",
                                     "legacy"]))
        msg: dict[str, Any]
        if kind in ("system", "developer", "user"):
            msg = {"role": kind, "content": draw(contents if kind == "user" else words)}
        elif kind == "assistant":
            msg = {"role": "assistant", "content": draw(st.one_of(words, st.none()))}
            if draw(st.booleans()):
                msg["refusal"] = draw(words)
        elif kind == "calls":
            ids = draw(st.lists(call_ids, min_size=1, max_size=3, unique=True))
            msg = {"role": "assistant", "tool_calls": [
                {"id": i, "type": "function",
                 "function": {"name": draw(words), "arguments": draw(arguments())}}
                for i in ids
            ]}
            content = draw(st.sampled_from(["null", "absent", "empty", "text"]))
            if content != "absent":
                msg["content"] = {"null": None, "empty": "", "text": "let me check"}[content]
            out.append(msg)
            for i in ids:
                out.append({"role": "tool", "tool_call_id": i, "content": draw(contents)})
            continue
        else:
            out.append({"role": "assistant", "content": None,
                        "function_call": {"name": "lookup", "arguments": draw(arguments())}})
            msg = {"role": "function", "name": "lookup", "content": draw(words)}
        if draw(st.booleans()) and kind != "legacy":
            msg["name"] = draw(st.text(min_size=1, max_size=8))
        if kind == "assistant" and draw(st.booleans()):
            msg["reasoning_content"] = draw(words)
        out.append(msg)
    return out


# -- round trips --------------------------------------------------------------------------


@given(canonical_messages())
def test_round_trip_is_lossless(x: list[dict[str, Any]]) -> None:
    messages = cf.from_openai(x)
    assert cf.to_openai(messages) == x
    assert cf.from_openai(cf.to_openai(messages)) == messages


@given(st.lists(st.one_of(canonical_messages(), st.lists(st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_call_id", "tool_calls", "refusal"]),
    st.one_of(json_values, st.sampled_from(["user", "assistant", "tool", "system"])),
    max_size=5), max_size=3)), max_size=3))
def test_common_shapes_read_as_every_message_is(chunks: list[list[dict[str, Any]]]) -> None:
    # Common shapes take a shorter way in; it must make the message (or raise the error)
    # the general reading makes, whatever the dict holds.
    x = [m for chunk in chunks for m in chunk]
    try:
        expected: Any = _general(x)
    except cf.ConversionError as exc:
        expected = (exc.index, exc.field)
    try:
        got: Any = cf.from_openai(x)
    except cf.ConversionError as exc:
        got = (exc.index, exc.field)
    assert got == expected


def _general(x: list[dict[str, Any]]) -> list[cf.Message]:
    """Every message read the general way (a legacy function result names the call of
    the legacy call before it)."""
    from contextfold._messages.openai import _read_message

    out, legacy = [], None
    for index, raw in enumerate(x):
        message = _read_message(raw, index, legacy)
        if message.metadata.get("openai", {}).get("legacy") == "function_call":
            legacy = message.tool_calls[0].id
        out.append(message)
    return out


def _scramble(value: Any) -> None:
    """Change every dict and list inside ``value`` in place, however deep."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _scramble(item)
        value["scrambled"] = [1]
    elif isinstance(value, list):
        for item in value:
            _scramble(item)
        value.append({"scrambled": 1})


@given(canonical_messages(), st.dictionaries(st.text(min_size=1, max_size=8), json_values,
                                             min_size=1, max_size=3))
def test_conversions_never_share_what_can_change(
    x: list[dict[str, Any]], audio: dict[str, Any]
) -> None:
    # An unknown key holding nested data, and opaque parts (in the strategy), are what a
    # message keeps of its dicts besides strings.
    if x:
        x[0]["audio"] = audio
    before = copy.deepcopy(x)
    messages = cf.from_openai(x)
    assert x == before  # reading never changes the caller's dicts
    _scramble(x)
    written = cf.to_openai(messages)
    assert written == before  # nor does changing them afterwards reach the messages
    _scramble(written)
    assert cf.to_openai(messages) == before  # nor does changing what was written


def test_plain_text_is_shared_not_copied() -> None:
    text = "a long tool result " * 1000
    raw = [{"role": "user", "content": text}]
    (message,) = cf.from_openai(raw)
    assert message.content is text  # a string cannot change: sharing it is safe
    assert cf.to_openai([message])[0]["content"] is text


def _projection(m: cf.Message) -> tuple[Any, ...]:
    return (m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.reasoning)


@given(histories(images=False, max_turns=4, max_tool_chars=500))
def test_core_histories_survive_the_openai_format(history: list[cf.Message]) -> None:
    back = cf.from_openai(cf.to_openai(history))
    assert [_projection(m) for m in back] == [_projection(m) for m in history]
    assert cf.validate(back) == []


def test_null_keys_and_empty_tool_calls_are_normalised() -> None:
    raw = [
        {"role": "system", "content": "s", "name": None, "tool_calls": None,
         "function_call": None, "tool_call_id": None},
        {"role": "user", "content": "hi", "tool_calls": []},
    ]
    assert cf.to_openai(cf.from_openai(raw)) == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "hi"}
    ]


def test_assistant_content_null_with_tool_calls() -> None:
    raw = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    (m,) = cf.from_openai(raw)
    assert m.content == "" and m.tool_calls == (cf.ToolCall("c1", "f", "{}"),)
    assert "openai" not in m.metadata  # null is the default form: nothing to remember
    assert cf.to_openai([m]) == raw


def test_unknown_keys_are_kept_and_written_back() -> None:
    raw = [{"role": "assistant", "content": None, "refusal": "I can't help with that.",
            "audio": {"id": "a1"}}]
    (m,) = cf.from_openai(raw)
    assert m.metadata["openai"]["extra"] == {"refusal": "I can't help with that.",
                                             "audio": {"id": "a1"}}
    assert cf.to_openai([m]) == raw


def test_own_fields_are_never_written() -> None:
    m = cf.Message(role="user", content="x", source="broadcast", sender_id="agent-2",
                   metadata={"pinned": True, "importance": 0.9})
    assert cf.to_openai([m]) == [{"role": "user", "content": "x"}]


def test_parts_images_and_opaque_blocks() -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "high"}},
        {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
    ]
    (m,) = cf.from_openai([{"role": "user", "content": parts}])
    assert m.content == (
        cf.TextPart("look"),
        cf.ImagePart(url="https://x.test/a.png", detail="high"),
        OpaquePart(kind="input_audio", data=parts[2]),
    )
    assert m.text == "look"
    assert cf.to_openai([m]) == [{"role": "user", "content": parts}]


def test_legacy_function_call_round_trips_and_validates() -> None:
    raw = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"role": "function", "name": "get_weather", "content": "4 C"},
    ]
    messages = cf.from_openai(raw)
    call = messages[1].tool_calls[0]
    assert call == cf.ToolCall("function_call_1", "get_weather", '{"city": "Oslo"}')
    assert messages[2].role == "tool" and messages[2].tool_call_id == call.id
    assert cf.validate(messages) == []
    assert cf.to_openai(messages) == raw


def test_reasoning_content_and_name() -> None:
    raw = [{"role": "assistant", "content": "42", "reasoning_content": "6*7", "name": "bot"}]
    (m,) = cf.from_openai(raw)
    assert (m.reasoning, m.name) == ("6*7", "bot")
    assert cf.to_openai([m]) == raw
    assert cf.to_openai([m], reasoning=False) == [{"role": "assistant", "content": "42",
                                                   "name": "bot"}]


# -- errors --------------------------------------------------------------------------------

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("raw", "index", "field"),
    [
        ([{"role": "user", "content": "a"}, "not a dict"], 1, None),
        ([{"role": "robot", "content": "a"}], 0, "role"),
        ([{"content": "a"}], 0, "role"),
        ([{"role": "tool", "content": "a"}], 0, "tool_call_id"),
        ([{"role": "tool", "content": "a", "tool_call_id": 7}], 0, "tool_call_id"),
        ([{"role": "user", "content": 5}], 0, "content"),
        ([{"role": "user", "content": ["x"]}], 0, "content[0]"),
        ([{"role": "user", "content": [{"text": "x"}]}], 0, "content[0].type"),
        ([{"role": "user", "content": "a", "name": 3}], 0, "name"),
        ([{"role": "user", "content": "a", "tool_calls": [CALL]}], 0, "tool_calls"),
        ([{"role": "assistant", "tool_calls": {"id": "c1"}}], 0, "tool_calls"),
        ([{"role": "assistant", "tool_calls": [{**CALL, "id": None}]}], 0, "tool_calls[0].id"),
        ([{"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}], 0,
         "tool_calls[0].type"),
        ([{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f",
                                                                     "arguments": "{oops"}}]}],
         0, "tool_calls[0].function.arguments"),
        ([{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f",
                                                                     "arguments": {"a": 1}}}]}],
         0, "tool_calls[0].function.arguments"),
        ([{"role": "assistant", "tool_calls": [{**CALL, "function": {"arguments": "{}"}}]}], 0,
         "tool_calls[0].function.name"),
        ([{"role": "assistant", "tool_calls": [CALL], "function_call": {"name": "f",
                                                                        "arguments": "{}"}}],
         0, "function_call"),
        ([{"role": "function", "content": "x"}], 0, "name"),
        ([{"role": "assistant", "content": "a", "reasoning_content": ["x"]}], 0,
         "reasoning_content"),
    ],
)
def test_bad_input_names_index_and_field(raw: Any, index: int, field: str | None) -> None:
    with pytest.raises(cf.ConversionError) as info:
        cf.from_openai(raw)
    assert (info.value.index, info.value.field) == (index, field)
    assert f"message {index}" in str(info.value)


@pytest.mark.parametrize("raw", [None, "user: hi", {"role": "user"}, 3])
def test_non_list_input_is_refused(raw: Any) -> None:
    with pytest.raises(cf.ConversionError, match="expected a list"):
        cf.from_openai(raw)


# -- fuzzing -------------------------------------------------------------------------------

shaped = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "name", "tool_calls", "tool_call_id",
                         "function_call", "reasoning_content", "refusal"]),
        st.one_of(st.sampled_from(["user", "assistant", "tool", "function", "system"]),
                  json_values,
                  st.lists(st.fixed_dictionaries({"id": json_values, "type": json_values,
                                                  "function": json_values}), max_size=2)),
    ),
    max_size=5,
)


@given(st.one_of(json_values, shaped))
def test_arbitrary_json_raises_only_conversion_error(raw: Any) -> None:
    try:
        messages = cf.from_openai(raw)
    except cf.ConversionError:
        return
    assert cf.from_openai(cf.to_openai(messages)) == messages
