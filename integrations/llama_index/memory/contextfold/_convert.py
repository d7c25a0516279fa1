"""Conversions between LlamaIndex ``ChatMessage`` and ``contextfold.Message``.

``ChatMessage -> Message -> ChatMessage`` is lossless for everything LlamaIndex carries:
roles (``function``, ``chatbot`` and ``model`` included), every content block, tool calls
as ``ToolCallBlock`` or OpenAI-style ``additional_kwargs["tool_calls"]``, tool results
(``additional_kwargs["tool_call_id"]``), names and the rest of ``additional_kwargs``.

What the core model has no field for is kept under ``metadata["llama_index"]`` (only
when needed, so plain messages carry no metadata): the original role, the block order,
``additional_kwargs``, thinking-block extras and tool-call argument forms. On the way back
the core fields win: a policy that truncated a text or dropped a call gets its change,
and the kept extras apply only where they still describe the message.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, unquote

from llama_index.core.base.llms.types import (
    ChatMessage,
    ContentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from pydantic import TypeAdapter

from contextfold import ConversionError, ImagePart, Message, TextPart, ToolCall
from contextfold.integration import with_stable_id
from contextfold.policy import ContentPart, OpaquePart, Role

from ._images import image_size

__all__ = [
    "copy_message",
    "from_llama_index",
    "message_from_llama_index",
    "message_to_llama_index",
    "pin",
    "to_llama_index",
]

META_KEY = "llama_index"
"""The ``Message.metadata`` key holding what only LlamaIndex carries."""

_ROLE_IN: Mapping[str, Role] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
    "chatbot": "assistant",
    "model": "assistant",
}
_BLOCKS: TypeAdapter[ContentBlock] = TypeAdapter(ContentBlock)


# -- LlamaIndex -> core ------------------------------------------------------------------


def message_from_llama_index(message: ChatMessage, *, index: int | None = None) -> Message:
    """Convert one ``ChatMessage``; ``index`` only labels errors.

    Raises:
        ConversionError: the message is not a ``ChatMessage`` or has an unknown role.
    """
    return _converted(message, index, None)


PENDING_ID = "cf-pending"
"""The id of a converted message that is about to get its stable one (no uuid made)."""


def _converted(message: ChatMessage, index: int | None, message_id: str | None) -> Message:
    """[`message_from_llama_index`][llama_index.memory.contextfold.message_from_llama_index] with
    ``message_id`` (default a new uuid)."""
    if not isinstance(message, ChatMessage):
        raise ConversionError(
            f"expected llama_index ChatMessage, got {type(message).__name__}", index=index
        )
    li_role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    role = _ROLE_IN.get(li_role)
    if role is None:
        raise ConversionError(f"unknown role {li_role!r}", index=index, field="role")
    extras: dict[str, Any] = {}
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    thinking: list[ThinkingBlock] = []
    forms: list[dict[str, bool]] = []
    calling = role == "assistant"  # only an assistant's tool calls are calls for providers
    layout = [_block_in(b, parts, calls, thinking, forms, index, calling)
              for b in message.blocks]
    kwargs = _json_kwargs(message)
    if calling and not calls and kwargs.get("tool_calls"):
        calls = _kwargs_calls(kwargs["tool_calls"], index)
        extras["kwargs_calls"] = True  # calls live only in additional_kwargs
    content = parts[0].text if len(parts) == 1 and isinstance(parts[0], TextPart) else (
        tuple(parts) if parts else ""
    )
    reasoning = "\n\n".join(t.content or "" for t in thinking) if thinking else None
    if li_role != role:
        extras["role"] = li_role
    n_blocks = 0 if extras.get("kwargs_calls") else len(calls)
    if layout != _default_layout(content, n_blocks, reasoning is not None):
        extras["layout"] = layout
    if len(thinking) > 1 or any(t.num_tokens is not None or t.additional_information
                                or t.content is None for t in thinking):
        extras["thinking"] = [t.model_dump(mode="json") for t in thinking]
    if any(forms):
        extras["calls"] = forms
    tool_call_id = kwargs.get("tool_call_id") if role == "tool" else None
    tool_call_id = tool_call_id if isinstance(tool_call_id, str) else None
    name = kwargs.get("name")
    name = name if isinstance(name, str) and name else None
    kept = {k: v for k, v in kwargs.items()
            if not (k == "tool_call_id" and tool_call_id is not None)
            and not (k == "name" and name is not None)}
    if kept:
        extras["kwargs"] = kept
    if "tool_calls" in kept:
        extras["calls_sig"] = _calls_sig(calls)
    try:
        return Message(
            role,  # type: ignore[arg-type]
            content,
            tuple(calls),
            tool_call_id,
            name,
            reasoning,
            None,
            None,
            None,
            {**_own_metadata(kwargs), **({META_KEY: extras} if extras else {})},
            *((message_id,) if message_id else ()),  # else Message's own default, a uuid4
        )
    except ConversionError as exc:  # name the position (as ``at_index`` does)
        if exc.index is not None or index is None:
            raise
        raise ConversionError(exc.reason, index=index, field=exc.field) from exc


PIN_KEY = "contextfold"
"""The ``additional_kwargs`` key whose ``"metadata"`` becomes the core message's metadata
(``{"pinned": True}`` from [`pin`][llama_index.memory.contextfold.pin]); it rides back out with the
other kwargs."""


def _own_metadata(kwargs: dict[str, Any]) -> dict[str, Any]:
    section = kwargs.get(PIN_KEY)
    metadata = section.get("metadata") if isinstance(section, dict) else None
    return {k: v for k, v in metadata.items() if k != META_KEY} \
        if isinstance(metadata, dict) else {}


def pin(message: ChatMessage) -> ChatMessage:
    """A copy of ``message`` that every policy keeps verbatim (in ``CompactingMemory``,
    ``CompactingLLM`` and any core policy), with its tool call and results when it has
    them. The mark is ``additional_kwargs["contextfold"]["metadata"]["pinned"]``, so it
    survives serialization and stores::

        memory.put(pin(ChatMessage(role="user", content="Refunds above $500 need approval.")))
    """
    kwargs = dict(message.additional_kwargs)
    section = dict(kwargs.get(PIN_KEY) or {})
    section["metadata"] = {**(section.get("metadata") or {}), "pinned": True}
    kwargs[PIN_KEY] = section
    return message.model_copy(update={"additional_kwargs": kwargs})


def stably_identified(message: ChatMessage, position: int) -> Message:
    """One message at a position of a conversation, with the stable id ``stable_id`` gives
    it there (``ChatMessage`` has none of its own)."""
    return with_stable_id(position, _converted(message, position, PENDING_ID))


def from_llama_index(messages: Iterable[ChatMessage]) -> list[Message]:
    """Convert LlamaIndex messages to core messages (the input is not modified)."""
    return [message_from_llama_index(m, index=i) for i, m in enumerate(messages)]


def _block_in(
    block: Any,
    parts: list[ContentPart],
    calls: list[ToolCall],
    thinking: list[ThinkingBlock],
    call_forms: list[dict[str, bool]],
    place: int | None,
    calling: bool,
) -> str:
    """Add one block to the right list; return its layout token."""
    if isinstance(block, TextBlock):
        parts.append(TextPart(block.text))
        return "text"
    if isinstance(block, ImageBlock):
        part, token = _image_in(block)
        parts.append(part)
        return token
    if isinstance(block, ThinkingBlock):
        thinking.append(block)
        return "thinking"
    if isinstance(block, ToolCallBlock) and calling:
        form: dict[str, bool] = {}
        if isinstance(block.tool_kwargs, str):
            arguments = block.tool_kwargs
            form["str"] = True
        else:
            arguments = _ARGUMENTS.encode(block.tool_kwargs)
        if block.tool_call_id is None:
            form["no_id"] = True
        # A block without an id (some integrations send none) gets one that depends only on
        # its place, so converting the same history twice gives the same ids.
        call_id = block.tool_call_id if block.tool_call_id else f"call_{len(calls)}_{place}"
        calls.append(ToolCall(id=call_id, name=block.tool_name, arguments=arguments))
        call_forms.append(form)
        return "tool_call"
    data = block.model_dump(mode="json") if hasattr(block, "model_dump") else dict(block)
    parts.append(OpaquePart(kind=str(data.get("block_type", "unknown")), data=data))
    return "opaque"


def _image_in(block: ImageBlock) -> tuple[ContentPart, str]:
    """An image block as an ``ImagePart`` and where its data lived (url/bytes/path).

    A block holding more than one source is kept whole as an opaque part.
    """
    sources = [k for k in ("url", "image", "path") if getattr(block, k) is not None]
    mime, detail = block.image_mimetype, block.detail
    if len(sources) > 1:
        return OpaquePart(kind="image", data=block.model_dump(mode="json")), "opaque"
    if sources == ["url"]:
        return ImagePart(url=str(block.url), detail=detail, media_type=mime), "image:url"
    if sources == ["image"]:
        raw = block.image if isinstance(block.image, bytes) else _read_io(block.image)
        b64 = raw.decode("ascii", errors="replace")
        width, height = image_size(b64) or (None, None)
        return ImagePart(url=f"data:{mime or ''};base64,{b64}", detail=detail, width=width,
                         height=height, media_type=mime), "image:bytes"
    if sources == ["path"]:
        url = "file:" + quote(str(block.path))
        return ImagePart(url=url, detail=detail, media_type=mime), "image:path"
    return ImagePart(url="", detail=detail, media_type=mime), "image:empty"


def _read_io(stream: Any) -> bytes:
    stream.seek(0)
    data = stream.read()
    return base64.b64encode(data) if isinstance(data, bytes) else str(data).encode()


def _default_layout(
    content: str | tuple[ContentPart, ...], n_calls: int, has_reasoning: bool
) -> list[str]:
    """The block order rebuilt when no layout is kept: thinking, content, tool calls."""
    out = ["thinking"] if has_reasoning else []
    if isinstance(content, str):
        out += ["text"] if content else []
    else:
        out += [_part_token(p) for p in content]
    return out + ["tool_call"] * n_calls


def _part_token(part: ContentPart) -> str:
    if isinstance(part, TextPart):
        return "text"
    if isinstance(part, ImagePart):
        if part.url.startswith("data:"):
            return "image:bytes"
        if part.url.startswith("file:"):
            return "image:path"
        return "image:url" if part.url else "image:empty"
    return "opaque"


_ARGUMENTS = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps(kwargs, ensure_ascii=False, default=str)`` with one encoder."""
_SCALARS = frozenset({str, int, bool, type(None)})  # (a float may be NaN: pydantic's job)


def _json_kwargs(message: ChatMessage) -> dict[str, Any]:
    """``additional_kwargs`` as JSON values (provider objects dumped to dicts)."""
    kwargs = message.additional_kwargs
    if not kwargs:
        return {}
    if all(k.__class__ is str and v.__class__ in _SCALARS for k, v in kwargs.items()):
        return dict(kwargs)  # already JSON values (a tool result's call id and name)
    try:
        dumped = message.model_dump(mode="json", include={"additional_kwargs"})
        value = dumped["additional_kwargs"]
    except Exception:  # an object pydantic cannot serialize: keep its text form
        value = json.loads(json.dumps(message.additional_kwargs, default=str))
    return cast(dict[str, Any], value)


def _kwargs_calls(raw: Any, index: int | None) -> list[ToolCall]:
    """``additional_kwargs["tool_calls"]`` (already JSON) as core tool calls.

    Accepts OpenAI's shape (``{"id", "function": {"name", "arguments"}}``) and the flat
    one some integrations use (``{"id", "name", "input" | "arguments"}``).
    """
    if not raw:
        return []
    if not isinstance(raw, list):
        raise ConversionError("tool_calls must be a list", index=index, field="tool_calls")
    calls = []
    for k, item in enumerate(raw):
        fn = item.get("function") if isinstance(item, dict) else None
        if not isinstance(fn, dict):
            fn = item if isinstance(item, dict) else {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ConversionError(
                "each tool call needs a name", index=index, field=f"tool_calls[{k}]"
            )
        arguments = fn.get("arguments", fn.get("input"))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise ConversionError(f"tool call without an id ({call_id!r}): its result could not "
                                  "name it", index=index, field=f"tool_calls[{k}].id")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return calls


# -- core -> LlamaIndex ------------------------------------------------------------------


def message_to_llama_index(message: Message) -> ChatMessage:
    """Convert one core message back to a ``ChatMessage``."""
    extras = message.metadata.get(META_KEY) or {}
    role = extras.get("role", message.role)
    if _ROLE_IN.get(role) != message.role:  # the policy changed the role: follow it
        role = message.role
    blocks = _blocks_out(message, extras)
    kwargs = _kwargs_out(message, extras)
    return ChatMessage(role=MessageRole(role), blocks=blocks, additional_kwargs=kwargs)


def to_llama_index(messages: Iterable[Message]) -> list[ChatMessage]:
    """Convert core messages to LlamaIndex messages."""
    return [message_to_llama_index(m) for m in messages]


def copy_message(message: ChatMessage) -> ChatMessage:
    """A copy whose blocks and ``additional_kwargs`` can be changed without touching the
    original (blocks are copied one level deep; nested kwargs values are shared)."""
    return ChatMessage.model_construct(
        role=message.role,
        additional_kwargs=dict(message.additional_kwargs),
        blocks=[block.model_copy() for block in message.blocks],
    )


def _blocks_out(message: Message, extras: Mapping[str, Any]) -> list[Any]:
    content = message.content
    parts: list[ContentPart] = list(content) if not isinstance(content, str) else (
        [TextPart(content)] if content else []
    )
    thinking = _thinking_out(message, extras)
    calls = () if extras.get("kwargs_calls") else message.tool_calls
    layout = extras.get("layout")
    if not isinstance(layout, list) or not _layout_fits(layout, parts, calls, len(thinking),
                                                         message.content):
        layout = _default_layout(content, len(calls), bool(thinking))
    elif not parts and "text" in layout:
        parts = [TextPart("")]  # an empty text block LlamaIndex had (streamed tool calls)
    forms = extras.get("calls")
    if not isinstance(forms, list) or len(forms) != len(calls):
        forms = [{}] * len(calls)
    part_iter, call_iter = iter(parts), iter(zip(calls, forms, strict=True))
    thinking_iter = iter(thinking)
    blocks: list[Any] = []
    for token in layout:
        if token == "thinking":
            blocks.append(next(thinking_iter))
        elif token == "tool_call":
            call, form = next(call_iter)
            blocks.append(_call_out(call, form))
        else:
            blocks.append(_part_out(next(part_iter), token))
    return blocks


def _layout_fits(
    layout: Sequence[str],
    parts: list[ContentPart],
    calls: Sequence[ToolCall],
    n_thinking: int,
    content: str | tuple[ContentPart, ...],
) -> bool:
    """True when a kept layout still describes the message (a policy may have changed it)."""
    content_tokens = [t for t in layout if t not in ("thinking", "tool_call")]
    if isinstance(content, str) and not content:
        ok_content = content_tokens in ([], ["text"])
    else:
        kinds = [t.split(":")[0] for t in content_tokens]
        ok_content = kinds == [_part_token(p).split(":")[0] for p in parts]
    return (
        ok_content
        and layout.count("tool_call") == len(calls)
        and layout.count("thinking") == n_thinking
    )


def _thinking_out(message: Message, extras: Mapping[str, Any]) -> list[ThinkingBlock]:
    if message.reasoning is None:
        return []
    kept = extras.get("thinking")
    if isinstance(kept, list) and kept:
        blocks = [ThinkingBlock.model_validate(b) for b in kept]
        if "\n\n".join(b.content or "" for b in blocks) == message.reasoning:
            return blocks
    return [ThinkingBlock(content=message.reasoning)]


def _call_out(call: ToolCall, form: Mapping[str, Any]) -> ToolCallBlock:
    kwargs: dict[str, Any] | str = call.arguments
    if not form.get("str"):
        try:
            parsed = json.loads(call.arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and json.dumps(parsed, ensure_ascii=False) == call.arguments:
            kwargs = parsed
    return ToolCallBlock(
        tool_call_id=None if form.get("no_id") else call.id,
        tool_name=call.name,
        tool_kwargs=kwargs,
    )


def _part_out(part: ContentPart, token: str) -> Any:
    if isinstance(part, TextPart):
        return TextBlock(text=part.text)
    if isinstance(part, ImagePart):
        return _image_out(part, token)
    return _BLOCKS.validate_python(dict(part.data))


def _image_out(part: ImagePart, token: str) -> ImageBlock:
    url, mime, detail = part.url, part.media_type, part.detail
    if url.startswith("data:") and token != "image:url":
        header, _, b64 = url.partition(",")
        mime = mime or header[5:].split(";")[0] or None
        return ImageBlock(image=b64.encode("ascii"), image_mimetype=mime, detail=detail)
    if url.startswith("file:") and token != "image:url":
        path = Path(unquote(url[5:]))
        try:
            return ImageBlock(path=path, image_mimetype=mime, detail=detail)
        except ValueError:  # the file is gone: keep the reference without validation
            return ImageBlock.model_construct(path=path, image_mimetype=mime, detail=detail)
    if not url:
        return ImageBlock(image_mimetype=mime, detail=detail)
    return ImageBlock(url=url, image_mimetype=mime, detail=detail)


def _kwargs_out(message: Message, extras: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = dict(extras.get("kwargs") or {})
    if message.role == "tool" and message.tool_call_id is not None:
        kwargs["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        kwargs["name"] = message.name
    if "tool_calls" in kwargs and extras.get("calls_sig") != _calls_sig(message.tool_calls):
        # A policy changed the calls: say so in the OpenAI form too.
        if message.tool_calls:
            kwargs["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ]
        else:
            del kwargs["tool_calls"]
    return kwargs


def _calls_sig(calls: Sequence[ToolCall]) -> str:
    """A short signature of tool calls, to notice when a policy changed them."""
    text = json.dumps([[c.id, c.name, c.arguments] for c in calls], ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()
