"""Message (de)serialization for the stores: one JSON document per message.

Every field of ``Message`` round-trips, ``id`` included: text or parts (text, images,
opaque blocks), tool calls, metadata, reasoning, source, sender and ``created_at`` (ISO
8601, offset kept). Metadata and opaque data must hold JSON values (dicts with string
keys, lists, strings, numbers, booleans, ``None``); anything else is refused on the way in
instead of coming back changed. Text may hold NUL and lone surrogates (escaped in the
JSON); a surrogate pair held as two code points comes back as the character it encodes.

Decoding is strict: a document that does not have the expected shape raises
``CodecError``; each backend turns it into ``CorruptRowError`` naming the table and row.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast, get_args

from .._messages.model import ContentPart, ImagePart, Message, OpaquePart, Role, TextPart, ToolCall
from ..errors import CorruptRowError, StoreError

__all__ = [
    "CodecError", "body_digest", "decode", "decode_row", "dumps", "encode", "indexable", "loads",
    "search_text", "stored_digest", "stored_form",
]

FORMAT = 1
"""The document version written by ``encode``; ``decode`` refuses any other."""

_ROLES = frozenset(get_args(Role))


class CodecError(ValueError):
    """A stored document does not decode to a message."""


# -- encoding ---------------------------------------------------------------------------


def encode(message: Message) -> dict[str, Any]:
    """``message`` as a JSON-safe dict (keys with default values are left out)."""
    doc: dict[str, Any] = {"v": FORMAT, "id": message.id, "role": message.role}
    if isinstance(message.content, str):
        doc["content"] = message.content
    else:
        doc["parts"] = [_encode_part(p) for p in message.content]
    if message.tool_calls:
        doc["tool_calls"] = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    for name in ("tool_call_id", "name", "reasoning", "source", "sender_id"):
        value = getattr(message, name)
        if value is not None:
            doc[name] = value
    if message.created_at is not None:
        doc["created_at"] = message.created_at.isoformat()
    if message.metadata:
        try:
            doc["metadata"] = _json_value(message.metadata, "metadata")
        except RecursionError:
            raise StoreError("metadata: nested too deeply to be stored") from None
    return doc


def dumps(message: Message) -> str:
    """``message`` as compact JSON text, valid UTF-8 even when a string holds a lone
    surrogate (then every non-ASCII character is escaped, which JSON reads back exactly)."""
    return _dumps(message)[0]


def _dumps(message: Message) -> tuple[str, bool]:
    """``dumps(message)``, and whether its surrogates had to be escaped."""
    doc = encode(message)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, ensure_ascii=True, separators=(",", ":"), allow_nan=False), True
    return text, False


def stored_form(message: Message) -> tuple[str, str, bool]:
    """What a store keeps of ``message``: its JSON text, the digest of that text (what the
    stores key token counts with: `stored_digest`), and whether it reads back as
    ``message`` itself (equal content), so that the counts ``message`` holds are counts of
    the stored content.

    It does, except for text holding a surrogate pair as two code points, which reads back
    as the one character it encodes (see the module docstring)."""
    text, escaped = _dumps(message)
    digest = body_digest(text)
    same = not escaped or loads(text) == message
    message.derived(_DIGEST, lambda _message: digest if same else None)
    return text, digest, same


def body_digest(text: str) -> str:
    """The digest of a stored message's JSON text (BLAKE2b, 32 hex digits)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def stored_digest(message: Message) -> str | None:
    """A digest of a stored text that holds exactly ``message``'s content, so a stored row
    whose body has this digest holds it: for a message read from a store, the digest of
    the text it was read from; else that of the text a store keeps for it, when that text
    reads back as ``message`` (``None`` when it does not). Computed once per message."""
    if not message.has_derived(_DIGEST):
        stored_form(message)
    return message.derived(_DIGEST, _stored_digest)


def _stored_digest(message: Message) -> str | None:  # pragma: no cover - set by stored_form
    _, digest, same = stored_form(message)
    return digest if same else None


_DIGEST = "stored_digest"


def indexable(text: str | None) -> str | None:
    """``text`` for an indexed or queried column: lone surrogates (not valid UTF-8)
    become U+FFFD. The JSON body keeps the exact text."""
    if not text:
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


def search_text(message: Message) -> str:
    """The text a full-text index holds for ``message``: its text and its tool calls."""
    pieces = [message.text]
    pieces.extend(f"{c.name} {c.arguments}" for c in message.tool_calls)
    return indexable("\n".join(p for p in pieces if p)) or ""


def _encode_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        doc: dict[str, Any] = {"type": "image", "url": part.url}
        for name in ("detail", "width", "height", "media_type"):
            value = getattr(part, name)
            if value is not None:
                doc[name] = value
        return doc
    return {"type": "opaque", "kind": part.kind, "data": _json_value(part.data, "opaque data")}


def _json_value(value: Any, where: str) -> Any:
    """A plain JSON copy of ``value``; refuses what would not come back equal."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(f"{where}: {value!r} cannot be stored (JSON has no {value!r})")
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StoreError(f"{where}: keys must be strings, got {type(key).__name__}")
            out[key] = _json_value(item, where)
        return out
    if isinstance(value, list):
        return [_json_value(item, where) for item in value]
    raise StoreError(
        f"{where}: a value of type {type(value).__name__} cannot be stored; "
        "use JSON values (dict, list, str, int, float, bool, None)"
    )


# -- decoding ---------------------------------------------------------------------------


def loads(text: str | bytes) -> Message:
    """The message stored as ``text``; ``CodecError`` when it is not one (also for nesting
    deeper than any message holds, and for NaN or Infinity, which no message holds)."""
    try:  # the parser and the decoder both recurse into nested values
        try:
            doc = json.loads(text, parse_constant=_no_constant)
        except (ValueError, TypeError) as exc:
            raise CodecError(f"not JSON: {exc}") from None
        return decode(doc)
    except RecursionError:
        raise CodecError("nested too deeply to be a message") from None


def _no_constant(name: str) -> Any:
    raise CodecError(f"{name} is not a JSON value a message holds")


def decode_row(table: str, row_id: object, body: object) -> Message:
    """The message stored in row ``row_id`` of ``table``; ``CorruptRowError`` naming both."""
    try:
        if not isinstance(body, (str, bytes)):
            raise CodecError(f"body must be text, got {type(body).__name__}")
        message = loads(body)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptRowError(
            f"row {row_id} of table {table} cannot be decoded: {exc}"
        ) from exc
    # The row holds exactly this message's content: its body's digest says so.
    digest = body_digest(body if isinstance(body, str) else body.decode("utf-8", "replace"))
    message.derived(_DIGEST, lambda _message: digest)
    return message


def decode(doc: Any) -> Message:
    """The message ``doc`` (from ``encode``) describes; ``CodecError`` when it is malformed."""
    if not isinstance(doc, dict):
        raise CodecError(f"expected an object, got {type(doc).__name__}")
    if doc.get("v") != FORMAT:
        raise CodecError(f"unknown document version {doc.get('v')!r}")
    role = doc.get("role")
    if role not in _ROLES:
        raise CodecError(f"unknown role {role!r}")
    content: str | tuple[ContentPart, ...]
    if "parts" in doc:
        content = tuple(_decode_part(p) for p in _typed(doc, "parts", list))
    else:
        content = _typed(doc, "content", str)
    created = _optional(doc, "created_at", str)
    try:
        created_at = datetime.fromisoformat(created) if created is not None else None
    except ValueError:
        raise CodecError(f"bad created_at {created!r}") from None
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CodecError("metadata must be an object")
    return Message(
        role=cast(Role, role),
        content=content,
        tool_calls=tuple(_decode_call(c) for c in doc.get("tool_calls", [])),
        tool_call_id=_optional(doc, "tool_call_id", str),
        name=_optional(doc, "name", str),
        reasoning=_optional(doc, "reasoning", str),
        source=_optional(doc, "source", str),
        sender_id=_optional(doc, "sender_id", str),
        created_at=created_at,
        metadata=metadata,
        id=_typed(doc, "id", str),
    )


def _decode_part(doc: Any) -> ContentPart:
    if not isinstance(doc, dict):
        raise CodecError("a content part must be an object")
    kind = doc.get("type")
    if kind == "text":
        return TextPart(_typed(doc, "text", str))
    if kind == "image":
        return ImagePart(
            url=_typed(doc, "url", str),
            detail=_optional(doc, "detail", str),
            width=_optional(doc, "width", int),
            height=_optional(doc, "height", int),
            media_type=_optional(doc, "media_type", str),
        )
    if kind == "opaque":
        return OpaquePart(kind=_typed(doc, "kind", str), data=_typed(doc, "data", dict))
    raise CodecError(f"unknown content part type {kind!r}")


def _decode_call(doc: Any) -> ToolCall:
    if not (isinstance(doc, list) and len(doc) == 3 and all(isinstance(x, str) for x in doc)):
        raise CodecError(f"bad tool call {doc!r}")
    return ToolCall(id=doc[0], name=doc[1], arguments=doc[2])


def _typed(doc: dict[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CodecError(f"field {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _optional(doc: dict[str, Any], key: str, kind: type) -> Any:
    return None if doc.get(key) is None else _typed(doc, key, kind)
