"""Token counting: one protocol, an exact tiktoken counter and an estimating one.

Per-message overhead follows OpenAI's published recipe for chat models: 3 tokens per
message, 1 more when a ``name`` is set, and 3 to prime the reply. Tool calls count their
name and JSON arguments; images count by OpenAI's tile formula when their size is known.

Counts are cached on each (immutable) message per counter, so recounting an unchanged
long history is a sum over cached integers.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._encodings import load_encoding
from ._errors import ConfigurationError
from ._messages import ImagePart, Message, OpaquePart, TextPart

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "IMAGE_FLAT_TOKENS",
    "EstimatingCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_for_model",
    "encoding_for_model",
]

logger = logging.getLogger("contextfold")

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 7  # wrapper tokens around each call's name and arguments
IMAGE_FLAT_TOKENS = 765
"""Tokens charged for an image whose size is unknown: a 1024x1024 image at high detail."""

_ENCODING_BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("text-embedding", "cl100k_base"),
)


def encoding_for_model(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model, or ``None`` for other providers' models."""
    key = model.lower().rsplit("/", 1)[-1]
    for prefix, encoding in _ENCODING_BY_PREFIX:
        if key == prefix or (key.startswith(prefix) and not key[len(prefix)].isalnum()):
            return encoding
    return None


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text, messages and tool definitions."""

    name: str
    """Identifies the counter; message counts are cached per name."""

    def count_text(self, text: str) -> int:
        """Tokens of plain text."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included."""
        ...

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a request's messages, reply priming included."""
        ...

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of tool definitions (OpenAI ``tools`` entries or JSON schemas)."""
        ...


def image_tokens(part: ImagePart) -> int:
    """OpenAI's tile formula: 85 base + 170 per 512px tile after scaling; 85 at low detail."""
    if part.detail == "low":
        return 85
    if not part.width or not part.height:
        return IMAGE_FLAT_TOKENS
    w, h = float(part.width), float(part.height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 85 + 170 * tiles


class _BaseCounter:
    """Shared message arithmetic; subclasses implement ``count_text``."""

    name: str = "base"

    def count_text(self, text: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _count_uncached(self, message: Message) -> int:
        n = TOKENS_PER_MESSAGE + self.count_text(message.role)
        if message.name:
            n += TOKENS_PER_NAME + self.count_text(message.name)
        if isinstance(message.content, str):
            n += self.count_text(message.content)
        else:
            for part in message.content:
                if isinstance(part, TextPart):
                    n += self.count_text(part.text)
                elif isinstance(part, ImagePart):
                    n += image_tokens(part)
                elif isinstance(part, OpaquePart):
                    n += self.count_text(json.dumps(dict(part.data), default=str))
        if message.reasoning:
            n += self.count_text(message.reasoning)
        for call in message.tool_calls:
            n += TOKENS_PER_TOOL_CALL + self.count_text(call.name) + self.count_text(call.arguments)
        if message.tool_call_id:
            n += self.count_text(message.tool_call_id)
        return n

    def count_message(self, message: Message) -> int:
        cache: dict[str, int] | None = message.__dict__.get("_token_counts")
        if cache is None:
            cache = {}
            object.__setattr__(message, "_token_counts", cache)
        n = cache.get(self.name)
        if n is None:
            n = cache[self.name] = self._count_uncached(message)
        return n

    def count_messages(self, messages: Sequence[Message]) -> int:
        name = self.name
        total = REPLY_PRIMING
        for m in messages:
            cache = m.__dict__.get("_token_counts")
            n = cache.get(name) if cache is not None else None
            total += n if n is not None else self.count_message(m)
        return total

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        if not tools:
            return 0
        return sum(self.count_text(json.dumps(t, sort_keys=True, default=str)) for t in tools) + 12


class TiktokenCounter(_BaseCounter):
    """Exact counts with a tiktoken encoding (``o200k_base``, ``cl100k_base``...).

    Raises:
        ConfigurationError: the encoding cannot be loaded from any local copy or download.
            ``counter_for_model`` falls back to the estimator instead of raising.
    """

    def __init__(self, encoding: str | tiktoken.Encoding = "o200k_base") -> None:
        if isinstance(encoding, str):
            loaded = load_encoding(encoding)
            if loaded is None:
                raise ConfigurationError(
                    f"tiktoken encoding {encoding!r} could not be loaded (no local copy, "
                    "download failed or disabled); use EstimatingCounter or counter_for_model"
                )
            encoding = loaded
        self.encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        # disallowed_special=() counts "<|endoftext|>" in user text as text instead of raising.
        return len(self.encoding.encode(text, disallowed_special=()))


class EstimatingCounter(_BaseCounter):
    """Estimates tokens from characters. Conservative by default (seed 004: 1.5 chars/token),
    so it overcounts rather than letting a request overflow."""

    def __init__(self, chars_per_token: float = 1.5) -> None:
        if not chars_per_token > 0:
            raise ConfigurationError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.chars_per_token = chars_per_token
        self.name = f"estimate:{chars_per_token}"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


_warned: set[str] = set()


def counter_for_model(model: str | None = None, *, chars_per_token: float = 1.5) -> TokenCounter:
    """The best counter for ``model``: tiktoken with the model's encoding when it loads,
    else an :class:`EstimatingCounter` (with one warning per encoding per process).

    Models of other providers (no local tokenizer) get the estimator without a warning.
    """
    encoding = encoding_for_model(model) if model else "o200k_base"
    if encoding is None:
        return EstimatingCounter(chars_per_token)
    loaded = load_encoding(encoding)
    if loaded is None:
        if encoding not in _warned:
            _warned.add(encoding)
            warnings.warn(
                f"contextfold: tiktoken encoding {encoding!r} is not available offline and "
                "could not be downloaded; counting tokens with a conservative estimate "
                f"({chars_per_token} chars/token) instead",
                RuntimeWarning,
                stacklevel=2,
            )
        return EstimatingCounter(chars_per_token)
    return TiktokenCounter(loaded)
