"""Reading transcript files: shapes, formats, and errors that name file and position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import contextfold as cf
from contextfold.cli.transcripts import load_transcripts
from contextfold.errors import TranscriptError

CHAT = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Change reservation ABC123."},
    {"role": "assistant", "content": None, "function_call": None,
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_reservation", "arguments": '{"id": "ABC123"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"status": "confirmed"}'},
    {"role": "assistant", "content": "Done."},
]


def test_a_message_list_is_one_transcript(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT))
    [t] = load_transcripts(path)
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert t.messages[2].tool_calls[0].name == "get_reservation"
    assert cf.validate(t.messages) == []


def test_jsonl_of_messages_and_of_records(tmp_path: Path) -> None:
    lines = tmp_path / "chat.jsonl"
    lines.write_text("\n".join(json.dumps(m) for m in CHAT) + "\n")
    [t] = load_transcripts(lines)
    assert len(t.messages) == len(CHAT)
    records = tmp_path / "set.jsonl"
    records.write_text("\n".join(json.dumps({"messages": CHAT}) for _ in range(3)))
    assert [t.name for t in load_transcripts(records)] == ["set.jsonl#0", "set.jsonl#1",
                                                            "set.jsonl#2"]


def test_a_data_set_keeps_gold_values(tmp_path: Path) -> None:
    record = {"traj": CHAT, "info": {"task": {"actions": [
        {"name": "update", "kwargs": {"reservation_id": "ABC123", "cabin": "business",
                                      "flights": [{"flight_number": "HAT136"}], "ok": True}}]}}}
    path = tmp_path / "set.json"
    path.write_text(json.dumps([record, record]))
    transcripts = load_transcripts(path)
    assert len(transcripts) == 2
    assert transcripts[0].gold_values == ["ABC123", "business", "HAT136"]


def test_anthropic_format_is_detected(tmp_path: Path) -> None:
    data = {"system": "Be brief.", "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "tu1", "name": "weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "18C"}]},
    ]}
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(data))
    [t] = load_transcripts(path)
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "tool"]
    assert t.messages[3].tool_call_id == "tu1"


@pytest.mark.parametrize(
    ("name", "text", "position"),
    [
        ("broken.json", '[{"role": "user", "content": "hi"}', "line 1"),
        ("broken.jsonl", '{"role": "user", "content": "hi"}\n{oops', "line 2"),
        ("badrole.json", json.dumps([{"role": "wizard", "content": "x"}]), "message 0"),
        ("badset.json", json.dumps([{"messages": CHAT}, {"nothing": 1}]), "record 1"),
    ],
)
def test_errors_name_the_file_and_the_position(
    tmp_path: Path, name: str, text: str, position: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TranscriptError) as info:
        load_transcripts(path)
    assert str(path) in str(info.value)
    assert position in str(info.value)


def test_missing_file_is_a_transcript_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="cannot read"):
        load_transcripts(tmp_path / "nope.json")
