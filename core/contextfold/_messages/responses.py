"""Conversion between OpenAI Responses API input items and core Messages.

``to_responses(messages)`` returns ``(instructions, items)`` for
``client.responses.create(instructions=..., input=...)``: leading system and developer
messages become ``instructions``, user and assistant text become role messages, tool calls
``function_call`` items and tool results ``function_call_output`` items. ``from_responses``
reads items back, ``output`` items of a response included (``message`` items with
``output_text`` parts). Any other item (a ``compaction`` item of ``responses.compact``,
``reasoning``...) is kept whole as an [`OpaquePart`][contextfold.policy.OpaquePart] of an assistant
message of its own and written back exactly as it came.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConversionError
from .model import Message, OpaquePart, TextPart, ToolCall
from .structure import SYSTEM_ROLES

__all__ = ["from_responses", "to_responses"]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ConversionError(f"expected a string or a list of parts, got "
                              f"{type(content).__name__}", index=index, field="content")
    return "".join(str(p.get("text", "")) for p in content
                   if isinstance(p, Mapping) and p.get("type") in _TEXT_PARTS)


def _parts(message: Message) -> tuple[Any, ...]:
    return () if isinstance(message.content, str) else message.content


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Convert Responses API items into Messages (see the module docstring).

    Raises:
        ConversionError: an item that is not a dict, a message with an unknown role, or a
            ``function_call``/``function_call_output`` without a ``call_id``.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    for index, raw in enumerate(copy.deepcopy(list(items))):
        if not isinstance(raw, Mapping):
            raise ConversionError(f"expected an item dict, got {type(raw).__name__}",
                                  index=index)
        kind = raw.get("type", "message")
        if kind == "message":
            role = raw.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ConversionError(f"unknown role {role!r}", index=index, field="role")
            out.append(Message(role=role, content=_text(raw.get("content", ""), index)))
        elif kind in ("function_call", "function_call_output"):
            call_id = raw.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ConversionError(f"{kind} without a call_id", index=index,
                                      field="call_id")
            if kind == "function_call":
                call = ToolCall(id=call_id, name=str(raw.get("name", "")),
                                arguments=str(raw.get("arguments", "")))
                names[call_id] = call.name
                last = out[-1] if out else None
                if last is not None and last.role == "assistant" and not any(
                        isinstance(p, OpaquePart) for p in _parts(last)):
                    out[-1] = Message(role="assistant", content=last.content,
                                      tool_calls=(*last.tool_calls, call))
                else:
                    out.append(Message(role="assistant", content="", tool_calls=(call,)))
            else:
                output = raw.get("output", "")
                out.append(Message(role="tool", tool_call_id=call_id, name=names.get(call_id),
                                   content=output if isinstance(output, str)
                                   else _text(output, index)))
        else:
            out.append(Message(role="assistant",
                               content=(OpaquePart(kind=str(kind), data=dict(raw)),)))
    return out


def to_responses(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert Messages into ``(instructions, input items)`` for the Responses API.

    Raises:
        ConversionError: a system message after the start (run [`repair`][contextfold.repair]
            first).
    """
    lead = 0
    while lead < len(messages) and messages[lead].role in SYSTEM_ROLES:
        lead += 1
    instructions = "\n\n".join(m.text for m in messages[:lead]) or None
    items: list[dict[str, Any]] = []
    for index in range(lead, len(messages)):
        m = messages[index]
        if m.role in SYSTEM_ROLES:
            raise ConversionError("system message after the start; run repair() first",
                                  index=index, field="role")
        if m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.tool_call_id,
                          "output": m.text})
            continue
        for part in _parts(m):
            if isinstance(part, OpaquePart):
                items.append(dict(part.data))
        text = m.content if isinstance(m.content, str) else "".join(
            p.text for p in m.content if isinstance(p, TextPart))
        if text:
            items.append({"role": m.role, "content": text})
        items.extend({"type": "function_call", "call_id": c.id, "name": c.name,
                      "arguments": c.arguments} for c in m.tool_calls)
    return instructions, copy.deepcopy(items)
