"""Recognising a provider's "the input is too long for the context window" error.

Seed 004's third layer of defence: when a request overflows despite the estimate and the
calibration, compaction runs with ``force=True`` and the call is retried. Recognised:

* OpenAI's ``context_length_exceeded`` code on an ``openai.BadRequestError`` (older
  langchain-openai releases re-raise it as a plain invalid-request error);
* Anthropic's ``prompt is too long`` (``anthropic.BadRequestError``), and the wording of
  other providers and proxies (Google, Mistral, vLLM, LiteLLM, Ollama).

The exception chain (``__cause__`` / ``__context__``) is searched too, since wrappers
re-raise provider errors. No provider SDK or framework is imported here; the adapters add
their framework's own overflow classes (``extra_classes``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["OVERFLOW_PHRASES", "is_context_overflow", "overflow_figures"]

OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceeds the context window",
    "context window exceeded",
    "contextwindowexceedederror",
    "input tokens exceed the configured limit",
    "exceeds the maximum number of tokens allowed",
    "context length exceeded",
    "input is too long",
    "too many input tokens",
)
"""Lower-case phrases that mark a context-overflow error message."""

_CODES = frozenset({"context_length_exceeded", "context_window_exceeded"})

# "maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens"
_OPENAI = re.compile(r"maximum context length is (\d+) tokens.*?resulted in (\d+) tokens", re.S)
# "prompt is too long: 208310 tokens > 200000 maximum"
_ANTHROPIC = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
# "... your messages resulted in 9000 tokens" without the limit
_RESULTED = re.compile(r"resulted in (\d+) tokens")


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _code_of(error: BaseException) -> Any:
    code = getattr(error, "code", None)
    if code is None:
        body = getattr(error, "body", None)
        if isinstance(body, dict):
            inner = body.get("error", body)
            code = inner.get("code") if isinstance(inner, dict) else None
    return code


def is_context_overflow(
    error: BaseException, extra_classes: tuple[type[BaseException], ...] = ()
) -> bool:
    """True when ``error`` (or an error it was raised from) says the input was too long.

    Example::

        try:
            model.invoke(messages)
        except Exception as exc:
            if is_context_overflow(exc):
                ...  # compact with force=True and retry
    """
    for exc in _chain(error):
        if extra_classes and isinstance(exc, extra_classes):
            return True
        if _code_of(exc) in _CODES:
            return True
        text = str(exc).lower()
        if any(phrase in text for phrase in OVERFLOW_PHRASES):
            return True
    return False


def overflow_figures(error: BaseException) -> tuple[int | None, int | None]:
    """``(input_tokens, limit)`` when the error message states them, else ``None`` each.

    Calibration input: the provider's own count of the rejected request is the best
    estimate of what the history weighs.
    """
    for exc in _chain(error):
        text = str(exc)
        match = _OPENAI.search(text)
        if match:
            return int(match.group(2)), int(match.group(1))
        match = _ANTHROPIC.search(text)
        if match:
            return int(match.group(1)), int(match.group(2))
        match = _RESULTED.search(text)
        if match:
            return int(match.group(1)), None
    return None, None
