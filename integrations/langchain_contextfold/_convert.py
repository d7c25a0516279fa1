"""Converters between LangChain messages and [`contextfold.Message`][contextfold.Message].

[`to_core`][langchain_contextfold.to_core] turns LangChain messages into core messages,
[`from_core`][langchain_contextfold.from_core] turns them back, and ``from_core(to_core(msgs)) ==
msgs`` for everything LangChain carries. What the core model has a field for (text, content parts,
tool calls, reasoning, tool-call ids, names, ``status="error"``) maps to that field, so policies
count and change it; everything else (``additional_kwargs``, ``response_metadata``,
``usage_metadata``, ``invalid_tool_calls``, artifacts, block extras, the message class) rides in the
core message's ``metadata`` under the reserved key
[`LANGCHAIN_KEY`][langchain_contextfold.LANGCHAIN_KEY] and is put back on the way out. A message a
policy changed keeps its extras; a message a policy made (a summary, a nudge) becomes the plain
LangChain class for its role.

Prompt sources ride in ``additional_kwargs["contextfold"]``::

    HumanMessage("Mine iron ore", additional_kwargs={"contextfold": {"source": "broadcast",
                                                                     "sender_id": ""}})

with optional ``created_at`` (ISO 8601) and ``metadata`` (``pinned``, ``importance``...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from types import MappingProxyType
from typing import Any, TypeVar

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)

from contextfold import ConversionError, ImagePart, Message, TextPart, ToolCall
from contextfold.policy import OpaquePart

__all__ = [
    "LANGCHAIN_KEY",
    "SOURCE_KEY",
    "from_core",
    "message_from_core",
    "message_to_core",
    "pin",
    "to_core",
]

LANGCHAIN_KEY = "langchain"
"""The reserved ``Message.metadata`` key holding what only LangChain carries."""

SOURCE_KEY = "contextfold"
"""The ``additional_kwargs`` key holding prompt-source fields."""

_CLASSES: dict[str, type[BaseMessage]] = {
    c.__name__: c
    for c in (AIMessage, AIMessageChunk, HumanMessage, HumanMessageChunk, SystemMessage,
              SystemMessageChunk, ToolMessage, ToolMessageChunk, ChatMessage, ChatMessageChunk)
}
_DEFAULT_CLASS = {"system": "SystemMessage", "developer": "SystemMessage", "user": "HumanMessage",
                  "assistant": "AIMessage", "tool": "ToolMessage"}
_CHAT_ROLES = {"system": "system", "developer": "developer", "user": "user", "human": "user",
               "assistant": "assistant", "ai": "assistant", "tool": "tool"}
_REASONING_TYPES = frozenset({"reasoning", "thinking"})


# -- LangChain -> core ----------------------------------------------------------------


def to_core(messages: Sequence[BaseMessage]) -> list[Message]:
    """Core messages for LangChain ``messages`` (in order; the input is not modified).

    Raises:
        ConversionError: a ``RemoveMessage`` (a state-update instruction, not a message), a
            legacy ``FunctionMessage``, a ``ChatMessage`` with an unknown role, or anything
            that is not a LangChain message. ``index`` names the offending position.
    """
    return [message_to_core(m, index=i) for i, m in enumerate(messages)]


def message_to_core(message: BaseMessage, *, index: int | None = None) -> Message:
    """One core message for one LangChain message; see
    [`to_core`][langchain_contextfold.to_core]."""
    role = _ROLE_BY_CLASS.get(type(message)) or _role_of(message, index)
    extras = _common_extras(message, role)
    kwargs = message.additional_kwargs
    content: str | tuple[TextPart | ImagePart | OpaquePart, ...]
    reasoning = None
    if message.content.__class__ is str:
        content = message.content  # type: ignore[assignment]
    else:
        content, reasoning = _content_in(message.content, extras)
    if reasoning is None and kwargs and isinstance(kwargs.get("reasoning_content"), str):
        reasoning = kwargs["reasoning_content"]
    tool_calls: tuple[ToolCall, ...] = ()
    metadata: dict[str, Any] = {}
    tool_call_id = None
    if role == "assistant" and isinstance(message, AIMessage):
        if message.tool_calls:
            tool_calls = _calls_in(message, index)
        _ai_extras(message, extras)
    elif role == "tool" and isinstance(message, ToolMessage):
        tool_call_id = message.tool_call_id
        if message.status == "error":
            metadata["is_error"] = True
        if message.artifact is not None:
            extras["artifact"] = message.artifact
    section: Mapping[str, Any] = _NO_SECTION
    if kwargs:
        if role == "system" and kwargs.get("__openai_role__") == "developer":
            role = "developer"
        section = _source_section(kwargs.get(SOURCE_KEY), index)
        if section.get("metadata"):
            metadata.update(section["metadata"])
    metadata[LANGCHAIN_KEY] = extras  # (read-only from here: the message keeps it as is)
    created_at = section.get("created_at")
    if created_at is not None:
        created_at = _parse_time(created_at, index)
    try:
        return Message(
            role,  # type: ignore[arg-type]
            content,
            tool_calls,
            tool_call_id,
            message.name,
            reasoning,
            section.get("source"),
            section.get("sender_id"),
            created_at,
            MappingProxyType(metadata),
            *(() if message.id is None else (message.id,)),
        )
    except ConversionError as exc:  # name the position (as ``at_index`` does)
        if exc.index is not None or index is None:
            raise
        raise ConversionError(exc.reason, index=index, field=exc.field) from exc


_NO_SECTION: Mapping[str, Any] = {}
_ROLE_BY_CLASS: dict[type, str] = {
    SystemMessage: "system", SystemMessageChunk: "system", HumanMessage: "user",
    HumanMessageChunk: "user", AIMessage: "assistant", AIMessageChunk: "assistant",
    ToolMessage: "tool", ToolMessageChunk: "tool",
}
"""The role of each LangChain class whose role needs no look at the message (exact
types: subclasses and ``ChatMessage`` go through ``_role_of``)."""
_ARGUMENTS = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(args, ensure_ascii=False)``, without building an encoder per call."""


def _arguments_text(args: Any) -> str:
    """``_ARGUMENTS.encode(args)``: the C encoder ``encode`` would make (with a new
    circular-reference memo, as ``encode`` makes one), called at once, without the
    ``JSONEncoder`` methods around it."""
    if c_make_encoder is None:  # pragma: no cover - a Python without the C accelerator
        return _ARGUMENTS.encode(args)
    encode = c_make_encoder({}, _ARGUMENTS.default, encode_basestring, None, ": ", ", ",
                            False, False, True)
    return "".join(encode(args, 0))


def _common_extras(message: BaseMessage, role: str) -> dict[str, Any]:
    """What every LangChain message carries beyond the core fields."""
    extras: dict[str, Any] = {}
    cls = type(message).__name__
    if cls != _DEFAULT_CLASS[role]:
        extras["cls"] = cls
    if isinstance(message, ChatMessage):
        extras["role"] = message.role
    if message.additional_kwargs:
        extras["additional_kwargs"] = message.additional_kwargs
    if message.response_metadata:
        extras["response_metadata"] = message.response_metadata
    if message.__pydantic_extra__:
        extras["extra"] = dict(message.__pydantic_extra__)
    if message.id is None:
        extras["no_id"] = True
    return extras


def _role_of(message: Any, index: int | None) -> str:
    if isinstance(message, RemoveMessage):
        raise ConversionError(
            "RemoveMessage is a state-update instruction, not a message; apply it to the "
            "state (add_messages) before compacting",
            index=index,
        )
    if isinstance(message, (SystemMessage, SystemMessageChunk)):
        return "system"
    if isinstance(message, (HumanMessage, HumanMessageChunk)):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, (ToolMessage, ToolMessageChunk)):
        return "tool"
    if isinstance(message, ChatMessage):
        role = _CHAT_ROLES.get(message.role)
        if role is None:
            raise ConversionError(f"unknown ChatMessage role {message.role!r}", index=index,
                                  field="role")
        return role
    if isinstance(message, BaseMessage):
        raise ConversionError(
            f"{type(message).__name__} is not supported (legacy function messages have no "
            "tool-call id); convert it to a ToolMessage",
            index=index,
        )
    raise ConversionError(f"expected a LangChain message, got {type(message).__name__}",
                          index=index)


def _ai_extras(message: AIMessage, extras: dict[str, Any]) -> None:
    if message.invalid_tool_calls:
        extras["invalid_tool_calls"] = [dict(c) for c in message.invalid_tool_calls]
    if message.usage_metadata is not None:
        extras["usage_metadata"] = dict(message.usage_metadata)
    if isinstance(message, AIMessageChunk):
        extras["chunk"] = {
            "tool_call_chunks": [dict(c) for c in message.tool_call_chunks],
            "chunk_position": message.chunk_position,
        }


def _calls_in(message: AIMessage, index: int | None) -> tuple[ToolCall, ...]:
    calls = []
    for k, call in enumerate(message.tool_calls):
        try:
            arguments = _arguments_text(call["args"])
        except (TypeError, ValueError) as exc:
            raise ConversionError(f"tool call arguments are not JSON: {exc}", index=index,
                                  field=f"tool_calls[{k}].args") from exc
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise ConversionError(f"tool call without an id ({call_id!r}): its result could not "
                                  "name it", index=index, field=f"tool_calls[{k}].id")
        calls.append(ToolCall(id=call_id, name=call["name"], arguments=arguments))
    return tuple(calls)


def _content_in(
    content: str | list[str | dict[str, Any]], extras: dict[str, Any]
) -> tuple[str | tuple[TextPart | ImagePart | OpaquePart, ...], str | None]:
    """Core content and reasoning text; block templates go into ``extras``."""
    if isinstance(content, str):
        return content, None
    parts: list[TextPart | ImagePart | OpaquePart] = []
    templates: list[Any] = []
    thoughts: list[list[Any]] = []
    texts: list[str] = []
    for position, block in enumerate(content):
        if isinstance(block, str):
            parts.append(TextPart(block))
            templates.append(None)
            continue
        kind = block.get("type")
        thought = _reasoning_text(block) if kind in _REASONING_TYPES else None
        if thought is not None:
            thoughts.append([position, block])
            texts.append(thought)
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
            templates.append({k: v for k, v in block.items() if k != "text"})
        else:
            image = _image_in(block)
            parts.append(image or OpaquePart(kind=str(kind), data=block))
            templates.append(block if image else "opaque")
    extras["blocks"] = templates
    if thoughts:
        extras["reasoning_blocks"] = thoughts
        return tuple(parts), "\n".join(texts)
    return tuple(parts), None


def _reasoning_text(block: Mapping[str, Any]) -> str | None:
    for key in ("reasoning", "thinking"):
        if isinstance(block.get(key), str):
            return str(block[key])
    summary = block.get("summary")
    if isinstance(summary, list) and all(isinstance(s, dict) for s in summary):
        return "\n".join(str(s.get("text", "")) for s in summary)
    return None


def _image_in(block: Mapping[str, Any]) -> ImagePart | None:
    kind = block.get("type")
    if kind == "image_url":
        inner = block.get("image_url")
        if isinstance(inner, str):
            return ImagePart(url=inner)
        if isinstance(inner, Mapping) and isinstance(inner.get("url"), str):
            return ImagePart(url=inner["url"], detail=inner.get("detail"))
        return None
    if kind != "image":
        return None
    mime = block.get("mime_type")
    if isinstance(block.get("url"), str):
        return ImagePart(url=block["url"], media_type=mime)
    data = block.get("base64") or block.get("data")
    if isinstance(data, str) and mime:
        return ImagePart(url=f"data:{mime};base64,{data}", media_type=mime)
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        media = source.get("media_type")
        return ImagePart(url=f"data:{media};base64,{source.get('data')}", media_type=media)
    if isinstance(source, Mapping) and isinstance(source.get("url"), str):
        return ImagePart(url=source["url"])
    return None


def _source_section(section: Any, index: int | None) -> Mapping[str, Any]:
    if section is None:
        return {}
    if section.__class__ is not dict and not isinstance(section, Mapping):  # (an ABC check)
        raise ConversionError(
            f"additional_kwargs[{SOURCE_KEY!r}] must be a mapping, got {type(section).__name__}",
            index=index, field=f"additional_kwargs.{SOURCE_KEY}",
        )
    return section


def _parse_time(value: Any, index: int | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ConversionError(f"created_at is not ISO 8601: {value!r}", index=index,
                              field=f"additional_kwargs.{SOURCE_KEY}.created_at") from exc


# -- core -> LangChain ----------------------------------------------------------------


def from_core(messages: Sequence[Message]) -> list[BaseMessage]:
    """LangChain messages for core ``messages``; inverts
    [`to_core`][langchain_contextfold.to_core]."""
    return [message_from_core(m) for m in messages]


def message_from_core(message: Message) -> BaseMessage:
    """One LangChain message for one core message; see
    [`from_core`][langchain_contextfold.from_core]."""
    extras: Mapping[str, Any] = message.metadata.get(LANGCHAIN_KEY) or {}
    cls_name = extras.get("cls") or _DEFAULT_CLASS[message.role]
    cls = _CLASSES.get(cls_name, _CLASSES[_DEFAULT_CLASS[message.role]])
    fields: dict[str, Any] = dict(extras.get("extra") or {})
    fields["content"] = _content_out(message, extras)
    fields["additional_kwargs"] = _kwargs_out(message, extras)
    if message.role == "developer" and issubclass(cls, SystemMessage):
        fields["additional_kwargs"]["__openai_role__"] = "developer"
    fields["response_metadata"] = dict(extras.get("response_metadata") or {})
    fields["name"] = message.name
    fields["id"] = None if extras.get("no_id") else message.id
    if issubclass(cls, ChatMessage):
        fields["role"] = extras.get("role") or message.role
    if issubclass(cls, AIMessage):
        fields["tool_calls"] = [_call_out(c) for c in message.tool_calls]
        fields["invalid_tool_calls"] = list(extras.get("invalid_tool_calls") or [])
        fields["usage_metadata"] = extras.get("usage_metadata")
        if issubclass(cls, AIMessageChunk):
            chunk = extras.get("chunk") or {}
            fields["tool_call_chunks"] = list(chunk.get("tool_call_chunks") or [])
            fields["chunk_position"] = chunk.get("chunk_position")
    elif issubclass(cls, ToolMessage):
        fields["tool_call_id"] = message.tool_call_id or ""
        fields["status"] = "error" if message.is_error else "success"
        fields["artifact"] = extras.get("artifact")
    return cls(**fields)


def _call_out(call: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):
        # A policy shortened the arguments below valid JSON: keep the text visible.
        args = {"arguments": call.arguments}
    return {"name": call.name, "args": args, "id": call.id or None, "type": "tool_call"}


def _content_out(message: Message, extras: Mapping[str, Any]) -> str | list[Any]:
    content = message.content
    thoughts = _reasoning_out(message, extras)
    if isinstance(content, str):
        if not thoughts:
            return content
        return [b for _, b in thoughts] + ([{"type": "text", "text": content}] if content else [])
    templates = extras.get("blocks")
    if not isinstance(templates, list) or len(templates) != len(content):
        templates = [None if isinstance(p, TextPart) else "fresh" for p in content]
    blocks: list[Any] = [_part_out(p, t) for p, t in zip(content, templates, strict=True)]
    for position, block in thoughts:
        blocks.insert(min(position, len(blocks)), block)
    return blocks


def _part_out(part: TextPart | ImagePart | OpaquePart, template: Any) -> Any:
    if isinstance(part, TextPart):
        if template is None:
            return part.text
        if isinstance(template, dict) and template.get("type") == "text":
            return {**template, "text": part.text}
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if isinstance(template, dict) and _image_in(template) == part:
            return template
        image: dict[str, Any] = {"url": part.url}
        if part.detail:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    return dict(part.data)


def _reasoning_out(message: Message, extras: Mapping[str, Any]) -> list[tuple[int, Any]]:
    """Reasoning blocks to put back: the originals when the reasoning is unchanged."""
    originals = extras.get("reasoning_blocks")
    if not originals or message.reasoning is None:
        return []
    if message.reasoning == "\n".join(_reasoning_text(b) or "" for _, b in originals):
        return [(int(p), b) for p, b in originals]
    return [(int(originals[0][0]), {"type": "reasoning", "reasoning": message.reasoning})]


def _kwargs_out(message: Message, extras: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = dict(extras.get("additional_kwargs") or {})
    if not extras.get("reasoning_blocks"):
        if message.reasoning is None:
            kwargs.pop("reasoning_content", None)
        elif message.reasoning != kwargs.get("reasoning_content"):
            kwargs["reasoning_content"] = message.reasoning
    section = _section_out(message)
    old = kwargs.get(SOURCE_KEY)
    if old is not None and _same_section(old, section):
        return kwargs
    if section:
        kwargs[SOURCE_KEY] = section
    else:
        kwargs.pop(SOURCE_KEY, None)
    return kwargs


def _section_out(message: Message) -> dict[str, Any]:
    section: dict[str, Any] = {}
    if message.source is not None:
        section["source"] = message.source
    if message.sender_id is not None:
        section["sender_id"] = message.sender_id
    if message.created_at is not None:
        section["created_at"] = message.created_at.isoformat()
    own = {k: v for k, v in message.metadata.items() if k not in (LANGCHAIN_KEY, "is_error")}
    if message.role != "tool" and message.metadata.get("is_error"):
        own["is_error"] = True
    if own:
        section["metadata"] = own
    return section


def _same_section(old: Any, new: Mapping[str, Any]) -> bool:
    if not isinstance(old, Mapping):
        return False
    parsed = {k: v for k, v in old.items() if v is not None and v != {}}
    if "created_at" in parsed and isinstance(parsed["created_at"], str):
        try:
            parsed["created_at"] = datetime.fromisoformat(parsed["created_at"]).isoformat()
        except ValueError:
            return False
    return parsed == new


BaseMessageT = TypeVar("BaseMessageT", bound=BaseMessage)


def pin(message: BaseMessageT) -> BaseMessageT:
    """A copy of ``message`` that every policy keeps verbatim (in ``with_compaction``,
    ``CompactionMiddleware`` and any core policy), with its tool call and results when it
    has them. The mark is ``additional_kwargs["contextfold"]["metadata"]["pinned"]``, so it
    survives LangGraph checkpoints::

        state["messages"].append(pin(HumanMessage("Refunds above $500 need approval.")))
    """
    kwargs = dict(message.additional_kwargs)
    section = dict(kwargs.get(SOURCE_KEY) or {})
    section["metadata"] = {**(section.get("metadata") or {}), "pinned": True}
    kwargs[SOURCE_KEY] = section
    return message.model_copy(update={"additional_kwargs": kwargs})
