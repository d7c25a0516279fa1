"""Reading transcripts from files: OpenAI or Anthropic format, JSON or JSONL.

Accepted shapes:

* a JSON list of message dicts (one transcript);
* a JSON object with ``messages`` (or ``traj``), optionally ``system`` (Anthropic) and
  ``tools``;
* a JSON list of such objects (a data set: tau-bench's records, SWE-Gym's trajectories);
* JSONL: one message per line (one transcript) or one record per line (a data set).

Every error names the file and the position (line, record, message).

`generated_chats` makes transcripts without a file: long multi-session chats with
planted facts (``contextfold.testing.generate_chat``), whose late questions the
evaluation checks against what each call was given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._messages.model import Message
from ..errors import ConversionError, TranscriptError

__all__ = ["Transcript", "generated_chats", "load_transcripts"]


@dataclass(frozen=True)
class Transcript:
    """One conversation read from a file."""

    name: str
    """``file.json`` or ``file.json#3`` for the fourth record of a data set."""
    messages: list[Message]
    """The conversation, converted."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool definitions, when the file gives them."""
    gold_values: list[str] = field(default_factory=list)
    """Values the final action needs (tau-bench's gold action arguments), when given."""
    asked: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Facts the conversation asks for: for the model call that writes message ``n`` (the
    history ``messages[:n]``), the values its answer needs (generated chats)."""
    source: str = ""
    """The file or data set it came from (figures are averaged per source); empty means
    the part of `name` before ``#``."""


def _is_anthropic(messages: Sequence[Any], record: Mapping[str, Any] | None) -> bool:
    if record is not None and isinstance(record.get("system"), (str, list)):
        return True
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in (
                    "tool_use", "tool_result", "thinking",
                ):
                    return True
    return False


def _gold_values(record: Mapping[str, Any]) -> list[str]:
    info = record.get("info")
    task = info.get("task") if isinstance(info, Mapping) else None
    actions = task.get("actions") if isinstance(task, Mapping) else None
    if not isinstance(actions, list):
        return []
    values: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, (str, int, float)):
            text = str(value)
            if len(text) >= 3 and text not in values:
                values.append(text)

    for action in actions:
        if isinstance(action, Mapping):
            walk(action.get("kwargs"))
    return values


def _convert(raw: Any, record: Mapping[str, Any] | None, path: str, position: str) -> list[Message]:
    from .._messages.anthropic import from_anthropic
    from .._messages.openai import from_openai

    if not isinstance(raw, list):
        raise TranscriptError("expected a list of messages", path=path, position=position)
    cleaned = [
        {k: v for k, v in m.items() if not (k in ("function_call", "tool_calls") and v is None)}
        if isinstance(m, Mapping)
        else m
        for m in raw
    ]
    try:
        if _is_anthropic(cleaned, record):
            system = record.get("system") if record is not None else None
            return from_anthropic(cleaned, system=system)
        return from_openai(cleaned)
    except ConversionError as exc:
        where = position + (f", message {exc.index}" if exc.index is not None else "")
        raise TranscriptError(exc.reason if exc.index is None else str(exc), path=path,
                              position=where) from exc


def _from_record(record: Any, path: str, position: str, name: str) -> Transcript:
    source = name.split("#")[0]
    if isinstance(record, list):
        return Transcript(name=name, messages=_convert(record, None, path, position),
                          source=source)
    if not isinstance(record, Mapping):
        raise TranscriptError("expected a message list or an object with 'messages'",
                              path=path, position=position)
    raw = record.get("messages", record.get("traj"))
    if raw is None:
        raise TranscriptError("object has neither 'messages' nor 'traj'", path=path,
                              position=position)
    tools = record.get("tools")
    return Transcript(
        name=name,
        messages=_convert(raw, record, path, position),
        tools=list(tools) if isinstance(tools, list) else [],
        gold_values=_gold_values(record),
        source=source,
    )


def _looks_like_message(item: Any) -> bool:
    return isinstance(item, Mapping) and "role" in item and "messages" not in item


def load_transcripts(path: str | Path) -> list[Transcript]:
    """Every transcript in the file at ``path``.

    Raises:
        TranscriptError: the file cannot be read, parsed or converted (names the position).
    """
    p = Path(path)
    label = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TranscriptError(f"cannot read file: {exc}", path=label) from exc
    items: list[Any]
    if p.suffix == ".jsonl":
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TranscriptError(f"invalid JSON: {exc.msg}", path=label,
                                      position=f"line {number}") from exc
            except RecursionError:
                raise TranscriptError("JSON nested too deeply", path=label,
                                      position=f"line {number}") from None
        if items and all(_looks_like_message(i) for i in items):
            return [_from_record(items, label, "messages", p.name)]
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"invalid JSON: {exc.msg}", path=label,
                                  position=f"line {exc.lineno}, column {exc.colno}") from exc
        except RecursionError:
            raise TranscriptError("JSON nested too deeply", path=label) from None
        if isinstance(data, Mapping) or (
            isinstance(data, list) and (not data or _looks_like_message(data[0]))
        ):
            return [_from_record(data, label, "top level", p.name)]
        if not isinstance(data, list):
            raise TranscriptError("expected a JSON list or object", path=label)
        items = data
    return [
        _from_record(item, label, f"record {i}", f"{p.name}#{i}") for i, item in enumerate(items)
    ]


def generated_chats(count: int, *, seed: int = 0, sessions: int = 12) -> list[Transcript]:
    """``count`` generated long chats (seeds ``seed`` to ``seed + count - 1``), each with
    its questions as `Transcript.asked`."""
    from .._chats import generate_chat

    chats = [(s, generate_chat(s, sessions=sessions)) for s in range(seed, seed + count)]
    return [Transcript(name=f"chat#{s}", messages=c.messages, asked=c.questions,
                       source="generated chats") for s, c in chats]
