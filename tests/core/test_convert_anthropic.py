"""from_anthropic / to_anthropic: lossless round trips, tool-result splitting and merging,
thinking blocks, typed errors on bad input."""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import histories

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)
words = st.text(max_size=40)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)

text_block = st.builds(lambda t: {"type": "text", "text": t}, words)
cached_text = st.builds(
    lambda t: {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}, words
)
image_block = st.one_of(
    st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}),
    st.just({"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}}),
)
document_block = st.just(
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
)
user_block = st.one_of(text_block, cached_text, image_block, document_block)


@st.composite
def tool_result(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": draw(ids)}
    content = draw(st.sampled_from(["absent", "str", "blocks"]))
    if content == "str":
        block["content"] = draw(words)
    elif content == "blocks":
        block["content"] = draw(st.lists(st.one_of(text_block, image_block), max_size=3))
    flag = draw(st.sampled_from([None, True, False]))
    if flag is not None:
        block["is_error"] = flag
    if draw(st.booleans()):
        block["cache_control"] = {"type": "ephemeral"}
    return block


thinking_block = st.builds(
    lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, words, st.text(max_size=10)
)
redacted_block = st.just({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
tool_use = st.builds(
    lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
    ids, words, st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
assistant_block = st.one_of(text_block, cached_text, thinking_block, redacted_block, tool_use)


@st.composite
def canonical(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    """An Anthropic ``(system, messages)`` pair: alternating roles, tool results first."""
    system = draw(st.one_of(st.none(), words, st.lists(st.one_of(text_block, cached_text),
                                                       max_size=3)))
    messages: list[dict[str, Any]] = []
    for k in range(draw(st.integers(0, 8))):
        if k % 2:
            content: Any = draw(st.one_of(words, st.lists(assistant_block, max_size=5)))
            messages.append({"role": "assistant", "content": content})
            continue
        if draw(st.booleans()):
            content = draw(words)
        else:
            content = draw(st.lists(tool_result(), max_size=3)) + draw(
                st.lists(user_block, max_size=3))
        messages.append({"role": "user", "content": content})
    return system, messages


@given(canonical())
def test_round_trip_is_lossless(pair: tuple[Any, list[dict[str, Any]]]) -> None:
    system, x = pair
    messages = cf.from_anthropic(x, system=system)
    assert cf.to_anthropic(messages) == (system, x)
    assert cf.from_anthropic(*reversed(cf.to_anthropic(messages))) == messages


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


@given(canonical())
def test_conversions_never_share_what_can_change(pair: tuple[Any, list[dict[str, Any]]]) -> None:
    system, x = pair
    before = copy.deepcopy(pair)
    messages = cf.from_anthropic(x, system=system)
    assert (system, x) == before  # reading never changes the caller's data
    _scramble(x)
    _scramble(system)
    written = cf.to_anthropic(messages)
    assert written == before  # nor does changing it afterwards reach the messages
    _scramble(written[0])
    _scramble(written[1])
    assert cf.to_anthropic(messages) == before  # nor does changing what was written


def _calls(messages: list[cf.Message]) -> list[tuple[str, str, Any]]:
    return [(c.id, c.name, json.loads(c.arguments)) for m in messages for c in m.tool_calls]


def _results(messages: list[cf.Message]) -> list[tuple[str | None, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if m.role == "tool"]


@given(histories(max_turns=4, max_tool_chars=500))
def test_core_histories_survive_the_anthropic_format(history: list[cf.Message]) -> None:
    system, payload = cf.to_anthropic(history)
    back = cf.from_anthropic(payload, system=system)
    assert cf.validate(back) == []
    assert _calls(back) == _calls(history)
    assert _results(back) == _results(history)
    roles = [m["role"] for m in payload]
    assert all(a != b for a, b in pairwise(roles)), "roles must alternate"
    assert cf.to_anthropic(back) == (system, payload)


def test_tool_results_split_into_tool_messages_and_merge_back() -> None:
    x = [
        {"role": "user", "content": "book it"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "seat", "input": {"row": 3}},
            {"type": "tool_use", "id": "t2", "name": "price", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "3A free"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "declined", "is_error": True},
            {"type": "text", "text": "also add a bag"},
        ]},
    ]
    messages = cf.from_anthropic(x)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[1].tool_calls[0] == cf.ToolCall("t1", "seat", '{"row": 3}')
    assert (messages[2].tool_call_id, messages[2].name, messages[2].is_error) == (
        "t1", "seat", False)
    assert (messages[3].tool_call_id, messages[3].is_error) == ("t2", True)
    assert messages[4].text == "also add a bag"
    assert cf.validate(messages) == []
    assert cf.to_anthropic(messages) == (None, x)


def test_thinking_is_reasoning_and_keeps_its_signature() -> None:
    x = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "first", "signature": "sig1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "answer"},
    ]}]
    messages = cf.from_anthropic(x)
    assert messages[1].reasoning == "first"
    assert cf.to_anthropic(messages) == (None, x)


def test_reasoning_without_signature_is_not_sent() -> None:
    messages = [cf.Message(role="user", content="q"),
                cf.Message(role="assistant", content="a", reasoning="from another provider")]
    assert cf.to_anthropic(messages) == (
        None, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])


def test_block_order_is_kept_when_unusual() -> None:
    x = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}},
        {"type": "text", "text": "between"},
        {"type": "tool_use", "id": "b", "name": "g", "input": {}},
    ]}]
    assert cf.to_anthropic(cf.from_anthropic(x)) == (None, x)


def test_system_leading_messages_become_the_system_parameter() -> None:
    messages = [cf.Message(role="system", content="a"), cf.Message(role="developer",
                                                                   content="b"),
                cf.Message(role="user", content="hi")]
    system, payload = cf.to_anthropic(messages)
    assert system == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert payload == [{"role": "user", "content": "hi"}]


def test_consecutive_same_role_messages_are_merged() -> None:
    messages = [cf.Message(role="user", content="a"), cf.Message(role="user", content="b")]
    assert cf.to_anthropic(messages)[1] == [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]


def test_openai_images_become_anthropic_sources() -> None:
    (m,) = cf.from_openai([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}]}])
    assert cf.to_anthropic([m])[1][0]["content"] == [{"type": "image", "source": {
        "type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}]


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "index", "field"),
    [
        ([{"role": "user", "content": "a"}, 1], 1, None),
        ([{"role": "system", "content": "a"}], 0, "role"),
        ([{"role": "user", "content": 5}], 0, "content"),
        ([{"role": "user"}], 0, "content"),
        ([{"role": "user", "content": ["x"]}], 0, "content[0]"),
        ([{"role": "user", "content": [{"text": "x"}]}], 0, "content[0].type"),
        ([{"role": "user", "content": [{"type": "tool_result"}]}], 0, "content[0].tool_use_id"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                        "content": 3}]}], 0, "content[0].content"),
        ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                        "input": {}}]}], 0, "content[0]"),
        ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
         0, "content[0]"),
        ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                             "input": "{}"}]}], 0, "content[0].input"),
        ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
         0, "content[0].id"),
        ([{"role": "assistant", "content": [{"type": "thinking"}]}], 0, "content[0].thinking"),
    ],
)
def test_bad_input_names_index_and_field(raw: Any, index: int, field: str | None) -> None:
    with pytest.raises(cf.ConversionError) as info:
        cf.from_anthropic(raw)
    assert (info.value.index, info.value.field) == (index, field)


def test_bad_system_parameter() -> None:
    with pytest.raises(cf.ConversionError) as info:
        cf.from_anthropic([], system=7)  # type: ignore[arg-type]
    assert info.value.field == "system"


@pytest.mark.parametrize(
    ("messages", "index", "field"),
    [
        ([cf.Message(role="user", content="a"), cf.Message(role="system", content="late")],
         1, "role"),
        ([cf.Message(role="tool", content="r")], 0, "tool_call_id"),
        ([cf.Message(role="assistant", tool_calls=(cf.ToolCall("c", "f", "[1, 2]"),))],
         0, "tool_calls[0].arguments"),
        ([cf.Message(role="assistant", tool_calls=(cf.ToolCall("c", "f", "{oops"),))],
         0, "tool_calls[0].arguments"),
    ],
)
def test_unsendable_messages_name_index_and_field(
    messages: list[cf.Message], index: int, field: str
) -> None:
    with pytest.raises(cf.ConversionError) as info:
        cf.to_anthropic(messages)
    assert (info.value.index, info.value.field) == (index, field)


def test_a_message_no_provider_could_take_cannot_be_built() -> None:
    with pytest.raises(cf.ConversionError) as info:
        cf.Message(role="user", tool_calls=(cf.ToolCall("c", "f"),))
    assert info.value.field == "tool_calls"


# -- fuzzing -------------------------------------------------------------------------------

shaped = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"])},
        optional={"content": st.one_of(json_values, st.lists(st.one_of(
            json_values,
            st.fixed_dictionaries({"type": st.sampled_from(
                ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"])},
                optional={"text": json_values, "id": json_values, "name": json_values,
                          "input": json_values, "tool_use_id": json_values,
                          "content": json_values, "is_error": json_values,
                          "source": json_values, "thinking": json_values}),
        ), max_size=4))},
    ),
    max_size=4,
)


@given(st.one_of(json_values, shaped), st.one_of(st.none(), json_values))
def test_arbitrary_json_raises_only_conversion_error(raw: Any, system: Any) -> None:
    try:
        messages = cf.from_anthropic(raw, system=system)
    except cf.ConversionError:
        return
    try:
        system2, payload = cf.to_anthropic(messages)
    except cf.ConversionError:
        return
    if cf.validate(messages) == []:
        # One conversion normalises (merges same-role runs); the next one changes nothing.
        assert cf.to_anthropic(cf.from_anthropic(payload, system=system2)) == (system2, payload)
