"""Conversion between OpenAI chat-completions message dicts and core Messages.

``from_openai`` reads the chat-completions shape: roles ``system``, ``developer``,
``user``, ``assistant``, ``tool`` and the legacy ``function``; content as text, ``null``
or a list of parts (``text``, ``image_url``; any other part is kept verbatim as an
[`OpaquePart`][contextfold.policy.OpaquePart]); ``tool_calls``; the legacy ``function_call``;
``name``; ``reasoning_content``; ``tool_call_id``. ``to_openai`` writes it back.

Round trips are lossless: ``to_openai(from_openai(x)) == x`` for every canonical ``x``.
What is normalised (so the equality holds after it):

* keys whose value is ``null`` are dropped (``name: null``, ``function_call: null``,
  ``tool_calls: null``, a call's ``index: null``), except ``content``, which is kept as
  given (``null``, ``""`` or absent);
* ``tool_calls: []`` is dropped; a tool call without ``"type"`` gets ``"type": "function"``.

Wire details with no place in [`Message`][contextfold.Message] are kept under the reserved
metadata key ``"openai"`` (`OPENAI_KEY`): unknown message keys such as ``refusal``
or ``audio`` (``extra``), unknown keys of a tool call (``call_extra``), how an empty
content was written (``content``) and the legacy function-calling form (``legacy``).
``to_openai`` emits only the standard keys plus what came in this way, never contextfold's
own fields (``id``, ``source``, other metadata).

A legacy ``function_call`` becomes a [`ToolCall`][contextfold.ToolCall] with the
deterministic id ``function_call_<index>``; the ``function`` message after it answers it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..errors import ConversionError
from .model import (
    ContentPart,
    ImagePart,
    Message,
    OpaquePart,
    Role,
    TextPart,
    ToolCall,
    detached,
)

__all__ = ["OPENAI_KEY", "from_openai", "to_openai"]

OPENAI_KEY = "openai"
"""The metadata key holding OpenAI wire details that ``to_openai`` needs to write back."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_KNOWN = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "reasoning_content"}
)
_CALL_KNOWN = frozenset({"id", "type", "function"})


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Convert OpenAI chat-completions message dicts into Messages.

    Raises:
        ConversionError: the input is not a list of message dicts, or a message has an
            unknown role, a field of the wrong type, a tool result without
            ``tool_call_id``, or call arguments that are not a JSON string. The error
            names the message index and the field.
    """
    if not isinstance(messages, (list, tuple)):
        raise ConversionError(f"expected a list of message dicts, got {type(messages).__name__}")
    out: list[Message] = []
    legacy_call: str | None = None
    for index, raw in enumerate(messages):
        # Read in place: what a message keeps of ``raw`` is either immutable (strings) or
        # detached (unknown keys' values, opaque parts), so changing the caller's dicts
        # later never reaches it, and a message of plain text copies nothing.
        message = _read_plain(raw) if raw.__class__ is dict else None
        if message is None:
            message = _read_message(raw, index, legacy_call)
        if message.metadata.get(OPENAI_KEY, {}).get("legacy") == "function_call":
            legacy_call = message.tool_calls[0].id
        out.append(message)
    return out


_PLAIN_KEYS = frozenset({"role", "content", "name", "tool_call_id", "tool_calls"})
_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_PLAIN_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_STR_OR_NONE = (str, type(None))


def _read_plain(raw: dict[str, Any]) -> Message | None:
    """The message of the most common shapes (text content, tool calls with an id, a type
    and a function, a name, a call id; nothing else), built without the general reading;
    ``None`` for any other shape, or anything wrong with this one, which
    `_read_message` then reads (and names the error of). The message is the one
    `_read_message` makes of the same dict."""
    if not raw.keys() <= _PLAIN_KEYS:
        return None
    role, content = raw.get("role"), raw.get("content")
    name, call_id = raw.get("name"), raw.get("tool_call_id")
    if (role.__class__ is not str or role not in _PLAIN_ROLES or name.__class__ not in _STR_OR_NONE
            or call_id.__class__ not in _STR_OR_NONE or (role == "tool" and call_id is None)):
        return None
    raw_calls = raw.get("tool_calls")
    calls: tuple[ToolCall, ...] = ()
    if raw_calls is not None:
        if raw_calls.__class__ is not list or not raw_calls or role != "assistant":
            return None
        read = [_plain_call(item) for item in raw_calls]
        if None in read:
            return None
        calls = tuple(read)  # type: ignore[arg-type]
    if content.__class__ is not str:
        if "content" not in raw:
            return None  # absent: how it was written is kept
        # ``null`` is read as "" and written back as ``null`` only beside tool calls.
        if content is not None or not calls:
            return None
        content = ""
    elif not content and calls:
        return None  # an empty string beside tool calls: how it was written is kept
    try:
        return Message(cast(Role, role), content, calls, call_id, name)
    except ConversionError:
        return None


def _plain_call(item: Any) -> ToolCall | None:
    """A tool call of ``{"id", "type": "function", "function": {"name", "arguments"}}``
    with valid JSON arguments, else ``None``."""
    if item.__class__ is not dict or item.keys() != _PLAIN_CALL_KEYS:
        return None
    fn, call_id = item["function"], item["id"]
    if (item["type"] != "function" or fn.__class__ is not dict or fn.keys() != _FUNCTION_KEYS
            or call_id.__class__ is not str or not call_id):
        return None
    name, arguments = fn["name"], fn["arguments"]
    if name.__class__ is not str or arguments.__class__ is not str:
        return None
    try:
        json.loads(arguments)
        return ToolCall(call_id, name, arguments)
    except (ValueError, RecursionError, ConversionError):
        return None


def _read_message(raw: Any, index: int, legacy_call: str | None) -> Message:
    if not isinstance(raw, Mapping):
        raise ConversionError(f"expected a dict, got {type(raw).__name__}", index=index)
    role = raw.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise ConversionError(f"unknown role {role!r}", index=index, field="role")
    wire: dict[str, Any] = {}
    calls = _read_calls(raw, index, wire)
    content = _read_content(raw, index)
    name = _opt_str(raw, "name", index)
    reasoning = _opt_str(raw, "reasoning_content", index)
    tool_call_id = _opt_str(raw, "tool_call_id", index)
    if role == "function":
        if name is None:
            raise ConversionError("function message without name", index=index, field="name")
        wire["legacy"] = "function"
        role, tool_call_id = "tool", legacy_call or f"function_call_{index}"
    elif role == "tool" and tool_call_id is None:
        raise ConversionError("tool message without tool_call_id", index=index,
                              field="tool_call_id")
    if calls and role != "assistant":
        raise ConversionError(f"{role} message with tool calls", index=index, field="tool_calls")
    mark = _content_mark(raw, role, bool(calls))
    if mark is not None:
        wire["content"] = mark
    extra = {k: detached(v) for k, v in raw.items() if k not in _KNOWN and v is not None}
    if extra:
        wire["extra"] = extra
    metadata = {OPENAI_KEY: wire} if wire else {}
    return Message(role=cast(Role, role), content=content, tool_calls=calls,
                   tool_call_id=tool_call_id, name=name, reasoning=reasoning, metadata=metadata)


def _opt_str(raw: Mapping[str, Any], key: str, index: int) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ConversionError(f"expected a string, got {type(value).__name__}", index=index,
                              field=key)
    return value


def _default_null(role: str, has_calls: bool) -> bool:
    """Whether ``to_openai`` writes an empty content as ``null`` by default."""
    return role == "assistant" and has_calls


def _content_mark(raw: Mapping[str, Any], role: str, has_calls: bool) -> str | None:
    """How an empty content was written, when it differs from ``to_openai``'s default."""
    if "content" not in raw:
        return "absent"
    value = raw["content"]
    if value is None:
        return None if _default_null(role, has_calls) else "null"
    if value == "" and _default_null(role, has_calls):
        return "empty"
    return None


def _read_content(raw: Mapping[str, Any], index: int) -> str | tuple[ContentPart, ...]:
    value = raw.get("content")
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ConversionError(f"expected a string, null or a list of parts, got "
                              f"{type(value).__name__}", index=index, field="content")
    return tuple(_read_part(p, index, f"content[{j}]") for j, p in enumerate(value))


def _read_part(part: Any, index: int, where: str) -> ContentPart:
    if not isinstance(part, Mapping):
        raise ConversionError(f"expected a dict, got {type(part).__name__}", index=index,
                              field=where)
    kind = part.get("type")
    if not isinstance(kind, str):
        raise ConversionError("content part without a string type", index=index,
                              field=f"{where}.type")
    if kind == "text" and set(part) == {"type", "text"} and isinstance(part["text"], str):
        return TextPart(part["text"])
    if kind == "image_url" and set(part) == {"type", "image_url"}:
        image = part["image_url"]
        if (isinstance(image, Mapping) and isinstance(image.get("url"), str)
                and set(image) <= {"url", "detail"}
                and isinstance(image.get("detail", ""), str)):
            return ImagePart(url=image["url"], detail=image.get("detail"))
    return OpaquePart(kind=kind, data=detached(dict(part)))


def _read_calls(raw: Mapping[str, Any], index: int, wire: dict[str, Any]) -> tuple[ToolCall, ...]:
    calls_raw = raw.get("tool_calls")
    legacy = raw.get("function_call")
    if calls_raw is not None and not isinstance(calls_raw, list):
        raise ConversionError(f"expected a list, got {type(calls_raw).__name__}", index=index,
                              field="tool_calls")
    if legacy is not None:
        if calls_raw:
            raise ConversionError("both tool_calls and function_call", index=index,
                                  field="function_call")
        name, arguments = _read_function(legacy, index, "function_call")
        wire["legacy"] = "function_call"
        return (ToolCall(id=f"function_call_{index}", name=name, arguments=arguments),)
    calls: list[ToolCall] = []
    call_extra: dict[str, Any] = {}
    for k, item in enumerate(calls_raw or ()):
        where = f"tool_calls[{k}]"
        if not isinstance(item, Mapping):
            raise ConversionError(f"expected a dict, got {type(item).__name__}", index=index,
                                  field=where)
        call_id = item.get("id")
        if not isinstance(call_id, str):
            raise ConversionError("tool call without a string id", index=index,
                                  field=f"{where}.id")
        if item.get("type", "function") != "function":
            raise ConversionError(f"unsupported tool call type {item.get('type')!r}",
                                  index=index, field=f"{where}.type")
        name, arguments = _read_function(item.get("function"), index, f"{where}.function")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        extra = {k2: detached(v) for k2, v in item.items()
                 if k2 not in _CALL_KNOWN and v is not None}
        if extra:
            call_extra[call_id] = extra
    if call_extra:
        wire["call_extra"] = call_extra
    return tuple(calls)


def _read_function(fn: Any, index: int, where: str) -> tuple[str, str]:
    if not isinstance(fn, Mapping):
        raise ConversionError("expected a dict with name and arguments", index=index, field=where)
    name, arguments = fn.get("name"), fn.get("arguments")
    if not isinstance(name, str):
        raise ConversionError("function name must be a string", index=index,
                              field=f"{where}.name")
    if not isinstance(arguments, str):
        raise ConversionError(f"arguments must be a JSON string, got {type(arguments).__name__}",
                              index=index, field=f"{where}.arguments")
    try:
        json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        raise ConversionError(f"arguments are not valid JSON ({exc})", index=index,
                              field=f"{where}.arguments") from exc
    return name, arguments


# -- writing ---------------------------------------------------------------------------


def to_openai(messages: Sequence[Message], *, reasoning: bool = True) -> list[dict[str, Any]]:
    """Convert Messages into OpenAI chat-completions message dicts.

    Images are written as ``image_url`` parts (size and media type are not part of the
    format), opaque parts verbatim, ``reasoning`` as ``reasoning_content`` unless
    ``reasoning=False`` (some endpoints, DeepSeek's among them, reject it in requests).
    The inverse of [`from_openai`][contextfold.from_openai] (see the module notes for what is
    normalised).
    """
    # Every dict is new; what comes from a message's metadata (unknown keys, opaque
    # parts) is detached, so changing the dicts never reaches the messages.
    return [_write_message(m, reasoning) for m in messages]


def _write_message(m: Message, with_reasoning: bool) -> dict[str, Any]:
    wire: Mapping[str, Any] = m.metadata.get(OPENAI_KEY) or {}
    legacy = wire.get("legacy")
    out: dict[str, Any] = detached(dict(wire.get("extra") or {}))
    out["role"] = m.role
    content: str | list[dict[str, Any]] | None = _write_content(m.content)
    mark = wire.get("content")
    if content == "" and (mark == "null" or (mark is None and _default_null(m.role,
                                                                           bool(m.tool_calls)))):
        content = None
    if mark != "absent" or content != "":
        out["content"] = content
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning is not None and with_reasoning:
        out["reasoning_content"] = m.reasoning
    if m.role == "tool" and legacy == "function":
        out["role"] = "function"
    elif m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        if legacy == "function_call" and len(m.tool_calls) == 1:
            call = m.tool_calls[0]
            out["function_call"] = {"name": call.name, "arguments": call.arguments}
        else:
            extras: Mapping[str, Any] = wire.get("call_extra") or {}
            out["tool_calls"] = [_write_call(c, extras.get(c.id)) for c in m.tool_calls]
    return out


def _write_call(call: ToolCall, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = detached(dict(extra or {}))
    out.update(id=call.id, type="function",
               function={"name": call.name, "arguments": call.arguments})
    return out


def _write_content(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for p in content:
        if isinstance(p, TextPart):
            parts.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            image: dict[str, Any] = {"url": p.url}
            if p.detail is not None:
                image["detail"] = p.detail
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append(_thaw(p.data))
    return parts


def _thaw(data: Mapping[str, Any]) -> dict[str, Any]:
    return detached(dict(data))
