"""What makes two agent runs against ``tests/openai_server`` comparable byte for byte: tool
call ids and completion ids numbered by the request they answer, and a frozen clock for the
timestamps compaction writes into summaries."""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import datetime, timezone
from typing import Any

import pytest

import contextfold._engine.compactor as compactor_module
import openai_server as server_module

__all__ = ["number_replies", "stop_the_clock"]


def number_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replies and tool calls numbered by the request they answer, in each run (call again
    for the next run), whatever summary replies the server made in between (those made
    while preparing ahead land among the agent's in any order)."""
    numbers = itertools.count(1)
    completion = server_module._completion

    def calls(reply: Any) -> list[dict[str, Any]]:
        return [{"id": f"call_{next(numbers):06d}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for name, args in reply.tool_calls]

    def completion_of(body: dict[str, Any], reply: Any, usage: Any) -> dict[str, Any]:
        made: dict[str, Any] = completion(body, reply, usage)
        digest = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=8)
        return {**made, "id": "chatcmpl-" + digest.hexdigest()}

    monkeypatch.setattr(server_module, "_calls", calls)
    monkeypatch.setattr(server_module, "_completion", completion_of)


class _Frozen(datetime):
    """The clock summaries are stamped with, fixed so that two runs can be compared."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)


def stop_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Compactor stamps every summary with one fixed time."""
    monkeypatch.setattr(compactor_module, "datetime", _Frozen)
