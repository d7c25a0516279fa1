"""Conversion to and from OpenAI Responses API items: role messages, function calls and
their outputs, and items of any other type (a compaction) kept whole."""

from __future__ import annotations

import pytest

import contextfold as cf
from contextfold.errors import ConversionError
from contextfold.policy import OpaquePart
from contextfold.providers import from_responses, to_responses

ITEMS = [
    {"role": "user", "content": "Read document 1."},
    {"type": "function_call", "call_id": "c1", "name": "read_document",
     "arguments": '{"number": 1}'},
    {"type": "function_call", "call_id": "c2", "name": "read_document",
     "arguments": '{"number": 2}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Document 1."},
    {"type": "function_call_output", "call_id": "c2", "output": "Document 2."},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "b3BhcXVl.sig"},
    {"role": "assistant", "content": "Both read."},
]


def test_items_round_trip_and_other_items_stay_whole() -> None:
    messages = from_responses(ITEMS)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant",
                                          "assistant"]
    assert [c.id for c in messages[1].tool_calls] == ["c1", "c2"]
    assert messages[2].name == "read_document"
    part = messages[4].content[0]
    assert isinstance(part, OpaquePart) and part.kind == "compaction"
    instructions, items = to_responses([cf.Message(role="system", content="Be brief."),
                                        *messages])
    assert instructions == "Be brief." and items == ITEMS
    items[5]["id"] = "changed"  # the output is the caller's own: the messages stay apart
    assert dict(part.data)["id"] == "cmp_1"


def test_output_messages_read_their_text_parts() -> None:
    output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Codes: ", "annotations": []},
                           {"type": "output_text", "text": "REF-1", "annotations": []}]}]
    assert from_responses(output) == [cf.Message(role="assistant", content="Codes: REF-1")]


@pytest.mark.parametrize("bad", [["not an item"], [{"role": "robot", "content": "x"}],
                                 [{"type": "function_call_output", "output": "x"}]])
def test_bad_items_raise_a_conversion_error(bad: list[object]) -> None:
    with pytest.raises(ConversionError):
        from_responses(bad)  # type: ignore[arg-type]
