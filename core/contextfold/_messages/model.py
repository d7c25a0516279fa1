"""The core message model: small frozen dataclasses, no framework, no I/O.

Messages are immutable. Policies build changed messages with
``dataclasses.replace`` and return the input object itself when nothing changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, TypeVar, Union

from ..errors import ConversionError

__all__ = [
    "ContentPart",
    "ImagePart",
    "Message",
    "OpaquePart",
    "Role",
    "Source",
    "TextPart",
    "ToolCall",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
"""Who wrote a message. ``developer`` is OpenAI's newer name for a system message."""

Source = str
"""Where a message came from: ``"direct"``, ``"broadcast"``, ``"nudge"``,
``"summary"``, ``"system"``... Free text so applications can add their own."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})
T = TypeVar("T")


def _freeze(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not mapping:
        return _EMPTY
    if isinstance(mapping, MappingProxyType):
        return mapping
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class TextPart:
    """A piece of text inside a multi-part message."""

    text: str
    """The text itself."""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image inside a message (a screenshot, a photo)."""

    url: str
    """An ``http(s)://`` address or a ``data:`` URL holding base64 bytes."""
    detail: str | None = None
    """OpenAI's ``detail`` hint (``"low"``, ``"high"``, ``"auto"``), when given."""
    width: int | None = None
    """Width in pixels when known; token counting uses it (OpenAI's tile formula)."""
    height: int | None = None
    """Height in pixels when known."""
    media_type: str | None = None
    """MIME type such as ``image/png`` when known (Anthropic base64 sources carry it)."""


@dataclass(frozen=True, slots=True)
class OpaquePart:
    """A content block contextfold does not interpret (audio, files, provider extras).

    It is kept byte for byte so conversions round-trip; token counters count its JSON.
    """

    kind: str
    """The block's ``type`` as the provider named it."""
    data: Mapping[str, Any]
    """The whole block as the provider gave it."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not isinstance(self.data, Mapping):
            raise ConversionError(f"an opaque part needs a str kind and a mapping of data, got "
                                  f"{self.kind!r} and {type(self.data).__name__}")
        object.__setattr__(self, "data", _freeze(self.data))

    def __getstate__(self) -> dict[str, Any]:
        return {"kind": self.kind, "data": dict(self.data)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "kind", state["kind"])
        object.__setattr__(self, "data", _freeze(state["data"]))


ContentPart = Union[TextPart, ImagePart, OpaquePart]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A request by the assistant to run a tool."""

    id: str
    """The call id; the tool result names it in ``tool_call_id``."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as JSON text, exactly as the model produced them."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConversionError(f"a tool call needs a non-empty id, got {self.id!r}",
                                  field="tool_calls.id")
        if not isinstance(self.name, str):
            raise ConversionError(f"a tool call's name must be a string, got {self.name!r}",
                                  field="tool_calls.name")
        if not isinstance(self.arguments, str):
            raise ConversionError(
                f"a tool call's arguments must be JSON text, got {type(self.arguments).__name__}",
                field="tool_calls.arguments")


def _new_id() -> str:
    """``uuid.uuid4().hex`` without the ``UUID`` object: 16 random bytes with the version
    (4) and variant (RFC 4122) bits ``uuid.UUID(bytes=..., version=4)`` sets."""
    n = int.from_bytes(os.urandom(16), "big")
    n = (n & _VERSION_BITS) | _VERSION_4
    return f"{n:032x}"


_VERSION_BITS = ~(0xF000 << 64) & ~(0xC000 << 48)
_VERSION_4 = (0x4000 << 64) | (0x8000 << 48)


class _NewId(str):
    """The default of ``Message.id``: a fresh id is made (``uuid4().hex``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a new uuid4 hex>"


_NEW_ID = _NewId()


@dataclass(frozen=True, init=False)
class Message:
    """One message of a conversation.

    Equality compares content, not the ``id``: the same message converted twice is equal.
    A message that a provider could not take (an unknown role, a tool call on a user
    message, a field of the wrong type) raises [`ConversionError`][contextfold.ConversionError] when
    it is built, naming the field.
    """

    role: Role
    """Who wrote it."""
    content: str | tuple[ContentPart, ...] = ""
    """Plain text, or a tuple of parts (text, images, opaque blocks)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For ``role="tool"``: the id of the call this result answers."""
    name: str | None = None
    """Participant name (user/assistant) or tool name (tool results)."""
    reasoning: str | None = None
    """Reasoning or thinking text the model produced with this message."""
    source: Source | None = None
    """Where the message came from: ``direct``, ``broadcast``, ``nudge``, ``summary``..."""
    sender_id: str | None = None
    """Who sent a broadcast; empty string for the commander."""
    created_at: datetime | None = None
    """When the message was created, when known."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Free metadata: ``importance``, ``is_error``, ``pinned``, adapter extras. Read-only."""
    id: str = field(default_factory=_new_id, compare=False)
    """A stable identifier; kept through stores and adapters, ignored by equality."""

    def __init__(
        self,
        role: Role,
        content: str | tuple[ContentPart, ...] = "",
        tool_calls: tuple[ToolCall, ...] = (),
        tool_call_id: str | None = None,
        name: str | None = None,
        reasoning: str | None = None,
        source: Source | None = None,
        sender_id: str | None = None,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] = _EMPTY,
        id: str = _NEW_ID,
    ) -> None:
        # Written out (not generated) because every converted message is built here: the
        # fields go into the instance dict in one update instead of one frozen-dataclass
        # ``object.__setattr__`` each, and the checks take one fast test when they pass.
        if isinstance(content, list):
            content = tuple(content)
        if isinstance(tool_calls, list):
            tool_calls = tuple(tool_calls)
        self.__dict__.update(
            role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id,
            name=name, reasoning=reasoning, source=source, sender_id=sender_id,
            created_at=created_at, metadata=metadata,
            id=_new_id() if id is _NEW_ID else id,
        )
        _check(self)
        self.__dict__["metadata"] = _freeze(metadata)

    def __post_init__(self) -> None:
        # What ``__init__`` does after setting the fields, for a dataclass subclass whose
        # generated ``__init__`` sets them and then calls this.
        if isinstance(self.content, list):
            object.__setattr__(self, "content", tuple(self.content))
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        _check(self)
        object.__setattr__(self, "metadata", _freeze(self.metadata))

    # Pickling and deep copies carry the fields only (the read-only metadata as a plain
    # dict); values derived from the content are computed again when asked.
    def __getstate__(self) -> dict[str, Any]:
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["metadata"] = dict(self.metadata)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, _freeze(value) if key == "metadata" else value)

    # -- convenience -----------------------------------------------------------------

    @property
    def text(self) -> str:
        """The message's text: the content, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts of the content."""
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if isinstance(p, ImagePart))

    @property
    def is_error(self) -> bool:
        """True for a tool result marked as an error (``metadata["is_error"]``)."""
        return bool(self.metadata.get("is_error", False))

    @property
    def is_pinned(self) -> bool:
        """True when the application pinned this message: no policy may change it."""
        return bool(self.metadata.get("pinned", False))

    def pin(self) -> Message:
        """A copy that every policy keeps verbatim (``metadata["pinned"]``; same ``id``).

        A pinned tool result keeps its call and the call's other results with it; when the
        pinned messages cannot fit beside what a policy must keep, compaction raises
        [`BudgetExceededError`][contextfold.BudgetExceededError] instead of dropping them.
        """
        if self.is_pinned:
            return self
        return replace(self, metadata={**self.metadata, "pinned": True})

    @property
    def has_tool_calls(self) -> bool:
        """True for an assistant message that requests tools."""
        return bool(self.tool_calls)

    @property
    def char_count(self) -> int:
        """Characters of text, reasoning and tool-call arguments (images excluded)."""
        n = len(self.text) + len(self.reasoning or "")
        for call in self.tool_calls:
            n += len(call.name) + len(call.arguments)
        return n

    @property
    def fingerprint(self) -> str:
        """A content hash over every compared field (not ``id``); computed once."""
        return self.derived("fingerprint", _fingerprint)

    def derived(self, key: str, compute: Callable[[Message], T]) -> T:
        """A value derived from this message's content, computed once per ``key``.

        The message is immutable, so anything computed from its content (its fingerprint,
        its tokens under one counter, its identifiers) stays true for its lifetime; this is
        the one place such values are kept. ``key`` names the computation, including its
        parameters (``"tokens:cl100k_base"``). Not part of equality, hashing or ``repr``.
        """
        memo: dict[str, Any] | None = self.__dict__.get("_derived")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_derived", memo)
        try:
            value: T = memo[key]
        except KeyError:
            value = memo[key] = compute(self)
        return value

    def has_derived(self, key: str) -> bool:
        """True when [`derived`][contextfold.Message.derived] has computed ``key`` for this
        message."""
        memo: dict[str, Any] | None = self.__dict__.get("_derived")
        return memo is not None and key in memo

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        shown = [f"role={self.role!r}"]
        for f in fields(self):
            if f.name in ("role", "id"):
                continue
            value = getattr(self, f.name)
            if value or (f.name == "sender_id" and value == ""):
                if isinstance(value, MappingProxyType):
                    value = dict(value)
                shown.append(f"{f.name}={value!r}")
        return f"Message({', '.join(shown)})"


_SHARED = (str, int, float, bool, type(None))
"""Values a conversion may share with the caller's data: nothing can change them."""


def detached(value: T) -> T:
    """``value`` apart from whoever holds it, sharing what cannot change: strings, numbers,
    booleans and ``None`` are returned as they are, dicts, lists and tuples are rebuilt
    around detached items, anything else is deep-copied. The conversions keep a caller's
    mutable data (an unknown key's value, an opaque block) this way, so changing it later
    never reaches the messages, while a message of plain text copies nothing at all."""
    cls = value.__class__
    if cls in _SHARED:
        return value
    if cls is dict:
        return {k: v if v.__class__ in _SHARED else detached(v)  # type: ignore[return-value]
                for k, v in value.items()}  # type: ignore[attr-defined]
    if cls is list:
        return [v if v.__class__ in _SHARED else detached(v)  # type: ignore[return-value]
                for v in value]  # type: ignore[attr-defined]
    if cls is tuple:
        return tuple(detached(v) for v in value)  # type: ignore[return-value,attr-defined]
    return copy.deepcopy(value)


_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, default=str, ensure_ascii=False)
"""``json.dumps(..., sort_keys=True, default=str, ensure_ascii=False)`` with one encoder."""


def _with_id(message: Message, new_id: str) -> Message:
    """``dataclasses.replace(message, id=new_id)`` without building the message again: the
    id takes no part in equality or in anything derived from the content, so the copy
    keeps the checked fields and the derived values (fingerprint, counts) as they are."""
    if not isinstance(new_id, str) or not new_id:
        raise ConversionError(f"id must be a non-empty string, got {new_id!r}", field="id")
    copy = object.__new__(Message)
    copy.__dict__.update(message.__dict__)
    copy.__dict__["id"] = new_id
    derived = message.__dict__.get("_derived")
    if derived is not None:
        copy.__dict__["_derived"] = dict(derived)
    return copy


def _payload(message: Message) -> str:
    """``_CANONICAL_JSON.encode(_canonical(message))``, written out for a message of plain
    text (the same characters: each string through the encoder's own string function, the
    keys in their sorted order): the encoder builds a dict and walks it, twice as slow."""
    d = message.__dict__
    content, created = d["content"], d["created_at"]
    if content.__class__ is not str or not (created is None or isinstance(created, datetime)):
        return _CANONICAL_JSON.encode(_canonical(message))
    metadata, calls = d["metadata"], d["tool_calls"]
    encode = _ENCODE_STRING
    try:
        return _plain_payload(d, content, created, metadata, calls, encode)
    except TypeError:  # a field of another type (a message built without its checks)
        return _CANONICAL_JSON.encode(_canonical(message))


def _plain_payload(d: dict[str, Any], content: str, created: datetime | None,
                   metadata: Mapping[str, Any], calls: tuple[ToolCall, ...],
                   encode: Callable[[str], str]) -> str:
    return "".join((
        '{"content": ', encode(content),
        ', "created_at": ', "null" if created is None else encode(created.isoformat()),
        ', "metadata": ', _CANONICAL_JSON.encode(dict(metadata)) if metadata else "{}",
        ', "name": ', _encoded(d["name"]),
        ', "reasoning": ', _encoded(d["reasoning"]),
        ', "role": ', encode(d["role"]),
        ', "sender_id": ', _encoded(d["sender_id"]),
        ', "source": ', _encoded(d["source"]),
        ', "tool_call_id": ', _encoded(d["tool_call_id"]),
        ', "tool_calls": [',
        ", ".join(f"[{encode(c.id)}, {encode(c.name)}, {encode(c.arguments)}]" for c in calls),
        "]}",
    ))


_ENCODE_STRING = json.encoder.encode_basestring  # the C function the encoder uses


def _encoded(value: str | None) -> str:
    return "null" if value is None else _ENCODE_STRING(value)


def _fingerprint(message: Message) -> str:
    payload = _payload(message)
    # "surrogatepass": text from JSON may hold a lone surrogate (half of a broken emoji),
    # which strict UTF-8 refuses; the hash only needs the same bytes for the same text.
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@contextmanager
def at_index(index: int | None) -> Iterator[None]:
    """Name the position of the message being built in a
    [`ConversionError`][contextfold.ConversionError] raised without one (a converter building
    message ``index`` of a list)."""
    try:
        yield
    except ConversionError as exc:
        if exc.index is not None or index is None:
            raise
        raise ConversionError(exc.reason, index=index, field=exc.field) from exc


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_OPTIONAL_STR = ("name", "reasoning", "source", "sender_id")


_NONE_OR_STR = (type(None), str)
_PLAIN_MAPPINGS = (dict, MappingProxyType)


def _check(m: Message) -> None:
    """Refuse a message a provider could not take, naming the field (at construction, so a
    policy never meets one). One test for the common message, the detailed checks (which
    name the field) when it fails."""
    d = m.__dict__
    role, content, calls, call_id = d["role"], d["content"], d["tool_calls"], d["tool_call_id"]
    if (role in _ROLES and content.__class__ is str and calls.__class__ is tuple
            and (not calls or (role == "assistant" and (
                calls[0].__class__ is ToolCall if len(calls) == 1
                else all(c.__class__ is ToolCall for c in calls))))
            and (call_id is None or (role == "tool" and call_id.__class__ is str and call_id))
            and d["name"].__class__ in _NONE_OR_STR and d["reasoning"].__class__ in _NONE_OR_STR
            and d["source"].__class__ in _NONE_OR_STR
            and d["sender_id"].__class__ in _NONE_OR_STR
            and (d["created_at"] is None or d["created_at"].__class__ is datetime)
            and d["metadata"].__class__ in _PLAIN_MAPPINGS
            and d["id"].__class__ is str and d["id"]):
        return
    _check_fields(m)


def _check_fields(m: Message) -> None:
    """The checks of `_check`, one field at a time, raising for the first that fails."""
    if m.role not in _ROLES:
        raise ConversionError(f"unknown role {m.role!r}; expected one of {sorted(_ROLES)}",
                              field="role")
    if isinstance(m.content, tuple):
        bad = next((p for p in m.content if not isinstance(p, (TextPart, ImagePart, OpaquePart))),
                   None)
        if bad is not None:
            raise ConversionError(f"content parts must be TextPart, ImagePart or OpaquePart, "
                                  f"got {type(bad).__name__}", field="content")
    elif not isinstance(m.content, str):
        raise ConversionError(f"content must be a string or a tuple of parts, got "
                              f"{type(m.content).__name__}", field="content")
    if not isinstance(m.tool_calls, tuple) or not all(isinstance(c, ToolCall)
                                                      for c in m.tool_calls):
        raise ConversionError("tool_calls must be a tuple of ToolCall", field="tool_calls")
    if m.tool_calls and m.role != "assistant":
        raise ConversionError(f"only an assistant message can call tools, not a {m.role} "
                              "message", field="tool_calls")
    if m.tool_call_id is not None and (m.role != "tool" or not isinstance(m.tool_call_id, str)
                                       or not m.tool_call_id):
        raise ConversionError(f"tool_call_id belongs on a tool message and must be a "
                              f"non-empty string, got {m.tool_call_id!r} on a {m.role} message",
                              field="tool_call_id")
    for name in _OPTIONAL_STR:
        value = getattr(m, name)
        if value is not None and not isinstance(value, str):
            raise ConversionError(f"{name} must be a string or None, got {type(value).__name__}",
                                  field=name)
    if m.created_at is not None and not isinstance(m.created_at, datetime):
        raise ConversionError(f"created_at must be a datetime or None, got "
                              f"{type(m.created_at).__name__}", field="created_at")
    if not isinstance(m.metadata, Mapping):
        raise ConversionError(f"metadata must be a mapping, got {type(m.metadata).__name__}",
                              field="metadata")
    if not isinstance(m.id, str) or not m.id:
        raise ConversionError(f"id must be a non-empty string, got {m.id!r}", field="id")


def _canonical(message: Message) -> dict[str, Any]:
    """Every compared field (not ``id``) as JSON-ready values: the fingerprint's payload."""
    d = message.__dict__
    content, created = d["content"], d["created_at"]
    return {
        "role": d["role"],
        "content": content if isinstance(content, str) else [_part_dict(p) for p in content],
        "tool_calls": [[c.id, c.name, c.arguments] for c in d["tool_calls"]],
        "tool_call_id": d["tool_call_id"],
        "name": d["name"],
        "reasoning": d["reasoning"],
        "source": d["source"],
        "sender_id": d["sender_id"],
        "created_at": created.isoformat() if isinstance(created, datetime) else created,
        "metadata": dict(d["metadata"]),
    }


def _part_dict(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"t": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"t": "image", "url": part.url, "detail": part.detail, "w": part.width,
                "h": part.height, "mt": part.media_type}
    return {"t": "opaque", "kind": part.kind, "data": dict(part.data)}
