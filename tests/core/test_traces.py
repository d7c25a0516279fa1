"""Agent traces convert, validate, round-trip through both formats, and repair: the shipped
samples, and the real traces when ``../shared/traces`` is there.

Two genuine defects live in the real data (and the samples have them too) and are asserted
exactly:

* tau-bench (GPT-4o airline agent) reuses tool call ids across turns (the same id for two
  different calls, each answered right after it): ``duplicate_call_id``, which Anthropic
  rejects. ``repair`` gives the reused ids fresh ones and keeps every message.
* The OpenHands trajectories end on a tool call whose result was never recorded:
  ``unanswered_call`` on the last message. ``repair`` answers it as interrupted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import contextfold as cf
from trace_sets import TraceSet


def _canonical(raw: dict[str, Any]) -> dict[str, Any]:
    """The message as canonical chat-completions JSON: null keys dropped (not content)."""
    out = {k: v for k, v in raw.items() if v is not None or k == "content"}
    if "tool_calls" in out:
        out["tool_calls"] = [{k: v for k, v in c.items() if v is not None}
                             for c in out["tool_calls"]]
    return out


def _load(path: Path, key: str) -> list[list[dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        return [record[key] for record in json.load(f)]


@pytest.fixture
def tau(traces: TraceSet) -> list[list[dict[str, Any]]]:
    raw = _load(traces.airline, "traj")
    assert len(raw) == traces.airline_records
    return raw


@pytest.fixture
def openhands(traces: TraceSet) -> list[list[dict[str, Any]]]:
    raw = _load(traces.coding, "messages")
    assert len(raw) == traces.coding_records
    return raw


def _round_trips(raw: list[dict[str, Any]]) -> list[cf.Message]:
    messages = cf.from_openai(raw)
    assert cf.to_openai(messages) == [_canonical(m) for m in raw]
    assert cf.from_openai(cf.to_openai(messages)) == messages
    return messages


def _anthropic_round_trip(messages: list[cf.Message]) -> None:
    system, payload = cf.to_anthropic(messages)
    back = cf.from_anthropic(payload, system=system)
    assert cf.validate(back) == []
    assert [m.text for m in back if m.role == "tool"] == [
        m.text for m in messages if m.role == "tool"]
    assert cf.to_anthropic(back) == (system, payload)


def test_tau_bench_trajectories(tau: list[list[dict[str, Any]]]) -> None:
    with_reuse = 0
    for raw in tau:
        messages = _round_trips(raw)
        problems = cf.validate(messages)
        assert {p.code for p in problems} <= {"duplicate_call_id"}
        if not problems:
            _anthropic_round_trip(messages)
            continue
        with_reuse += 1
        fixed, notes = cf.repair(messages)
        assert cf.validate(fixed) == []
        assert len(fixed) == len(messages)
        assert [m.text for m in fixed] == [m.text for m in messages]
        assert len(notes) == len(problems)
        assert all("fresh id" in n for n in notes)
        _anthropic_round_trip(fixed)
    assert with_reuse > 0  # the defect is real; the test must keep seeing it


def test_openhands_trajectories(openhands: list[list[dict[str, Any]]]) -> None:
    for raw in openhands:
        messages = _round_trips(raw)
        problems = cf.validate(messages)
        last = len(messages) - 1
        assert [(p.code, p.index) for p in problems] == [("unanswered_call", last)]
        assert messages[last].tool_calls
        fixed, notes = cf.repair(messages)
        assert cf.validate(fixed) == []
        assert fixed[:-1] == messages
        assert fixed[-1].tool_call_id == messages[last].tool_calls[0].id
        assert fixed[-1].is_error and "interrupted" in fixed[-1].text
        assert len(notes) == 1
        _anthropic_round_trip(fixed)


def test_openhands_tool_outputs_are_large(openhands: list[list[dict[str, Any]]]) -> None:
    """Tool outputs reach tens of thousands of characters, as in real coding runs."""
    longest = max(len(m.text) for raw in openhands for m in cf.from_openai(raw)
                  if m.role == "tool")
    assert longest > 10_000
