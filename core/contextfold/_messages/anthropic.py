"""Conversion between Anthropic Messages API payloads and core Messages.

``from_anthropic(messages, system=None)`` reads ``user`` / ``assistant`` messages whose
content is text or a list of blocks: ``text``, ``image`` (base64 or url source),
``tool_use``, ``tool_result``, ``thinking`` and ``redacted_thinking``; any other block is
kept verbatim as an [`OpaquePart`][contextfold.policy.OpaquePart]. ``to_anthropic(messages)``
returns ``(system, messages)`` ready for ``client.messages.create(system=..., messages=...)``.

The two models differ in one way: Anthropic sends tool results inside a user message,
contextfold keeps one ``tool`` message per result. So a user message's ``tool_result``
blocks become tool messages, in order, and its other blocks become a user message after
them; ``to_anthropic`` merges consecutive tool results (and a user message right after
them) back into one user message, and merges any other consecutive messages of the same
role, as Anthropic requires.

Round trips are lossless for what Anthropic carries: ``to_anthropic(from_anthropic(x,
s)) == (s, x)`` when roles alternate and ``tool_result`` blocks come first in their user
message (the API requires both). Wire details with no place in
[`Message`][contextfold.Message] live under the reserved metadata key ``"anthropic"``
(`ANTHROPIC_KEY`): thinking blocks with their signatures, the block order of an
assistant message when it is not thinking-text-tool_use, unknown keys of messages and
blocks (``cache_control``...). Reasoning without an Anthropic signature (from another
provider) is not sent: the API only accepts thinking blocks it signed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from ..errors import ConversionError
from .model import ContentPart, ImagePart, Message, OpaquePart, TextPart, ToolCall, detached
from .structure import SYSTEM_ROLES

__all__ = ["ANTHROPIC_KEY", "from_anthropic", "to_anthropic"]

ANTHROPIC_KEY = "anthropic"
"""The metadata key holding Anthropic wire details that ``to_anthropic`` writes back."""

_Blocks = list[dict[str, Any]]
_THINKING = frozenset({"thinking", "redacted_thinking"})


def _fail(reason: str, index: int | None, field: str | None = None) -> ConversionError:
    return ConversionError(reason, index=index, field=field)


def _type_name(value: Any) -> str:
    return type(value).__name__


# -- reading ---------------------------------------------------------------------------


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], system: str | Sequence[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Convert an Anthropic ``messages`` list (and its ``system`` parameter) into Messages.

    Raises:
        ConversionError: the input is not a list of message dicts, or a message has an
            unknown role, a block of the wrong shape, a ``tool_result`` without
            ``tool_use_id`` or a ``tool_use`` whose ``input`` is not an object. The error
            names the message index and the field (``system`` for the system parameter).
    """
    if not isinstance(messages, (list, tuple)):
        raise _fail(f"expected a list of message dicts, got {_type_name(messages)}", None)
    out: list[Message] = []
    if system is not None:
        out.append(_read_system(detached(system)))
    names: dict[str, str] = {}
    for index, given in enumerate(messages):
        raw = detached(given)  # the caller's stay apart; strings are shared, not copied
        if not isinstance(raw, Mapping):
            raise _fail(f"expected a dict, got {_type_name(raw)}", index)
        role = raw.get("role")
        if role not in ("user", "assistant"):
            raise _fail(f"unknown role {role!r}", index, "role")
        content = raw.get("content")
        if not isinstance(content, (str, list)):
            raise _fail(f"expected a string or a list of blocks, got {_type_name(content)}",
                        index, "content")
        extra = {k: v for k, v in raw.items() if k not in ("role", "content")}
        if role == "assistant":
            message = _read_assistant(content, index, extra)
            names.update((c.id, c.name) for c in message.tool_calls)
            out.append(message)
        else:
            out.extend(_read_user(content, index, extra, names))
    return out


def _read_system(system: Any) -> Message:
    if isinstance(system, str):
        return Message(role="system", content=system)
    if not isinstance(system, list):
        raise _fail(f"expected a string or a list of blocks, got {_type_name(system)}",
                    None, "system")
    parts = tuple(_read_part(b, None, f"system[{j}]") for j, b in enumerate(system))
    return Message(role="system", content=parts)


def _block(block: Any, index: int | None, where: str) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(block, Mapping):
        raise _fail(f"expected a block dict, got {_type_name(block)}", index, where)
    kind = block.get("type")
    if not isinstance(kind, str):
        raise _fail("block without a string type", index, f"{where}.type")
    return kind, block


def _read_part(raw: Any, index: int | None, where: str) -> ContentPart:
    """A text, image or opaque block; anything with extra keys stays opaque (lossless)."""
    kind, block = _block(raw, index, where)
    if kind == "text" and set(block) == {"type", "text"} and isinstance(block["text"], str):
        return TextPart(block["text"])
    if kind == "image" and set(block) == {"type", "source"}:
        image = _read_image(block["source"])
        if image is not None:
            return image
    return OpaquePart(kind=kind, data=dict(block))


def _read_image(source: Any) -> ImagePart | None:
    if not isinstance(source, Mapping):
        return None
    if set(source) == {"type", "media_type", "data"} and source["type"] == "base64":
        media, data = source["media_type"], source["data"]
        if isinstance(media, str) and isinstance(data, str):
            return ImagePart(url=f"data:{media};base64,{data}", media_type=media)
    if set(source) == {"type", "url"} and source["type"] == "url":
        url = source["url"]
        if isinstance(url, str) and not url.startswith("data:"):
            return ImagePart(url=url)
    return None


def _read_assistant(content: str | list[Any], index: int, extra: dict[str, Any]) -> Message:
    wire: dict[str, Any] = {"extra": extra} if extra else {}
    if isinstance(content, str):
        return Message(role="assistant", content=content, metadata=_meta(wire))
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    thinking: _Blocks = []
    call_extra: dict[str, Any] = {}
    order = ""
    for j, raw in enumerate(content):
        where = f"content[{j}]"
        kind, block = _block(raw, index, where)
        if kind == "tool_use":
            call, more = _read_tool_use(block, index, where)
            calls.append(call)
            if more:
                call_extra[call.id] = more
            order += "t"
        elif kind in _THINKING:
            if kind == "thinking" and not isinstance(block.get("thinking"), str):
                raise _fail("thinking block without thinking text", index, f"{where}.thinking")
            thinking.append(dict(block))
            order += "r"
        elif kind == "tool_result":
            raise _fail("tool_result in an assistant message", index, where)
        else:
            parts.append(_read_part(block, index, where))
            order += "c"
    texts = [b["thinking"] for b in thinking if b["type"] == "thinking"]
    if thinking:
        wire["thinking"] = thinking
    if call_extra:
        wire["call_extra"] = call_extra
    if order != _canonical_order(order):
        wire["order"] = order
    return Message(role="assistant", content=tuple(parts), tool_calls=tuple(calls),
                   reasoning="\n".join(texts) if texts else None, metadata=_meta(wire))


def _canonical_order(order: str) -> str:
    return "r" * order.count("r") + "c" * order.count("c") + "t" * order.count("t")


def _read_tool_use(
    block: Mapping[str, Any], index: int, where: str
) -> tuple[ToolCall, dict[str, Any]]:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str):
        raise _fail("tool_use without a string id", index, f"{where}.id")
    if not isinstance(name, str):
        raise _fail("tool_use without a string name", index, f"{where}.name")
    if not isinstance(args, Mapping):
        raise _fail(f"tool_use input must be an object, got {_type_name(args)}", index,
                    f"{where}.input")
    try:
        arguments = json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise _fail(f"tool_use input is not JSON ({exc})", index, f"{where}.input") from exc
    more = {k: v for k, v in block.items() if k not in ("type", "id", "name", "input")}
    return ToolCall(id=call_id, name=name, arguments=arguments), more


def _read_user(
    content: str | list[Any], index: int, extra: dict[str, Any], names: Mapping[str, str]
) -> list[Message]:
    if isinstance(content, str):
        return [Message(role="user", content=content, metadata=_meta({"extra": extra}))]
    out: list[Message] = []
    rest: list[ContentPart] = []
    for j, raw in enumerate(content):
        where = f"content[{j}]"
        kind, block = _block(raw, index, where)
        if kind == "tool_result":
            out.append(_read_tool_result(block, index, where, names))
        elif kind in ("tool_use", *_THINKING):
            raise _fail(f"{kind} in a user message", index, where)
        else:
            rest.append(_read_part(block, index, where))
    if rest or not out:
        out.append(Message(role="user", content=tuple(rest)))
    if extra:
        first = out[0]
        wire = {**first.metadata.get(ANTHROPIC_KEY, {}), "extra": extra}
        out[0] = replace(first, metadata={**first.metadata, ANTHROPIC_KEY: wire})
    return out


def _read_tool_result(
    block: Mapping[str, Any], index: int, where: str, names: Mapping[str, str]
) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise _fail("tool_result without a string tool_use_id", index, f"{where}.tool_use_id")
    wire: dict[str, Any] = {}
    content: str | tuple[ContentPart, ...] = ""
    if "content" not in block:
        wire["content_absent"] = True
    elif isinstance(block["content"], str):
        content = block["content"]
    elif isinstance(block["content"], list):
        content = tuple(_read_part(b, index, f"{where}.content[{k}]")
                        for k, b in enumerate(block["content"]))
    else:
        raise _fail(f"expected a string or a list of blocks, got {_type_name(block['content'])}",
                    index, f"{where}.content")
    is_error = block.get("is_error") is True
    more = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
    if is_error:
        del more["is_error"]
    if more:
        wire["block"] = more
    metadata: dict[str, Any] = {"is_error": True} if is_error else {}
    if wire:
        metadata[ANTHROPIC_KEY] = wire
    return Message(role="tool", content=content, tool_call_id=call_id, name=names.get(call_id),
                   metadata=metadata)


def _meta(wire: dict[str, Any]) -> dict[str, Any]:
    wire = {k: v for k, v in wire.items() if v}
    return {ANTHROPIC_KEY: wire} if wire else {}


# -- writing ---------------------------------------------------------------------------


def to_anthropic(
    messages: Sequence[Message],
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Convert Messages into Anthropic's ``(system, messages)``.

    Leading system and developer messages become ``system`` (a string for one plain-text
    system message, else a list of blocks); tool results become ``tool_result`` blocks in
    a user message; consecutive messages of one role are merged.

    Raises:
        ConversionError: a system message after the start (run [`repair`][contextfold.repair]
            first), a non-assistant message with tool calls, or call arguments that are not a JSON
            object.
    """
    lead = 0
    while lead < len(messages) and messages[lead].role in SYSTEM_ROLES:
        lead += 1
    system = _write_system(messages[:lead])
    out: list[dict[str, Any]] = []
    for index in range(lead, len(messages)):
        m = messages[index]
        if m.role in SYSTEM_ROLES:
            raise _fail("system message after the start; run repair() first", index, "role")
        if m.tool_calls and m.role != "assistant":
            raise _fail(f"{m.role} message with tool calls", index, "tool_calls")
        wire: Mapping[str, Any] = m.metadata.get(ANTHROPIC_KEY) or {}
        role = "assistant" if m.role == "assistant" else "user"
        if role == "assistant":
            content = _write_assistant(m, index, wire)
        else:
            content = _write_user(m, index, wire)
        entry: dict[str, Any] = {**(wire.get("extra") or {}), "role": role, "content": content}
        if out and out[-1]["role"] == role:
            _merge(out[-1], entry)
        else:
            out.append(entry)
    return detached((system, out))  # the messages' metadata stays apart


def _write_system(systems: Sequence[Message]) -> str | list[dict[str, Any]] | None:
    if not systems:
        return None
    if len(systems) == 1 and isinstance(systems[0].content, str):
        return systems[0].content
    blocks: _Blocks = []
    for m in systems:
        blocks.extend(_as_blocks(_write_parts(m.content)))
    return blocks


def _merge(into: dict[str, Any], entry: dict[str, Any]) -> None:
    content = _as_blocks(into["content"]) + _as_blocks(entry.pop("content"))
    into.update(entry)
    into["content"] = content


def _as_blocks(content: str | _Blocks) -> _Blocks:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _write_parts(content: str | tuple[ContentPart, ...]) -> str | _Blocks:
    if isinstance(content, str):
        return content
    blocks: _Blocks = []
    for p in content:
        if isinstance(p, TextPart):
            blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            blocks.append({"type": "image", "source": _write_source(p)})
        else:
            blocks.append(dict(p.data))
    return blocks


def _write_source(p: ImagePart) -> dict[str, Any]:
    head, sep, data = p.url.partition(";base64,")
    if p.url.startswith("data:") and sep:
        return {"type": "base64", "media_type": head[len("data:"):], "data": data}
    return {"type": "url", "url": p.url}


def _write_user(m: Message, index: int, wire: Mapping[str, Any]) -> str | _Blocks:
    if m.role != "tool":
        return _write_parts(m.content)
    if not m.tool_call_id:
        raise _fail("tool message without tool_call_id", index, "tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
    if not (wire.get("content_absent") and m.content == ""):
        block["content"] = _write_parts(m.content)
    if m.is_error:
        block["is_error"] = True
    block.update(wire.get("block") or {})
    return [block]


def _write_assistant(m: Message, index: int, wire: Mapping[str, Any]) -> str | _Blocks:
    thinking: _Blocks = []
    raw_thinking: _Blocks = list(wire.get("thinking") or [])
    texts = [b.get("thinking") for b in raw_thinking if b.get("type") == "thinking"]
    if raw_thinking and "\n".join(cast(list[str], texts)) == (m.reasoning or ""):
        thinking = [dict(b) for b in raw_thinking]
    parts = _write_parts(m.content)
    if not thinking and not m.tool_calls:
        return parts
    extras: Mapping[str, Any] = wire.get("call_extra") or {}
    calls = [_write_tool_use(c, extras.get(c.id), index, k) for k, c in enumerate(m.tool_calls)]
    queues = {"r": thinking, "c": _as_blocks(parts), "t": calls}
    default = "r" * len(thinking) + "c" * len(queues["c"]) + "t" * len(calls)
    order = wire.get("order")
    if not isinstance(order, str) or len(order) != len(default) or (
        _canonical_order(order) != default
    ):
        order = default
    return [queues[kind].pop(0) for kind in order]


def _write_tool_use(call: ToolCall, extra: Any, index: int, k: int) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments)
    except (ValueError, RecursionError) as exc:
        raise _fail(f"arguments are not JSON ({exc})", index,
                    f"tool_calls[{k}].arguments") from exc
    if not isinstance(args, dict):
        raise _fail("arguments must be a JSON object for Anthropic", index,
                    f"tool_calls[{k}].arguments")
    block: dict[str, Any] = dict(extra) if isinstance(extra, Mapping) else {}
    block.update(type="tool_use", id=call.id, name=call.name, input=args)
    return block

