"""Reading provider errors: a context overflow and the figures it states, and whether any
other failure is worth retrying.

The third layer of defence: when a request overflows despite the estimate and the
calibration, the call loop learns the limit the error states, compacts below it and retries
once. Recognised:

* OpenAI's ``context_length_exceeded`` code on an ``openai.BadRequestError`` (older
  langchain-openai releases re-raise it as a plain invalid-request error);
* Anthropic's two wordings (``anthropic.BadRequestError``): ``prompt is too long: N tokens
  > W maximum`` when the prompt alone is over the window, and ``input length and
  `max_tokens` exceed context limit: P + M > W`` when it fits but not with the requested
  ``max_tokens``;
* the wording of other providers and proxies (Google, Mistral, vLLM, LiteLLM, Ollama).

The exception chain (``__cause__`` / ``__context__``) is searched too, since wrappers
re-raise provider errors. No provider SDK or framework is imported here; the adapters add
their framework's own overflow classes (``extra_classes``).

[`error_kind`][contextfold.integration.error_kind] sorts any failure for retry decisions:
``"overflow"`` (split or compact, never wait), ``"transient"`` (429, 5xx, timeouts, connection
errors: back off and retry), ``"fatal"`` (other 4xx such as a bad request or a refused key: retrying
    cannot help).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "OVERFLOW_PHRASES",
    "ErrorKind",
    "Overflow",
    "error_kind",
    "is_context_overflow",
    "overflow_figures",
    "overflow_of",
]

ErrorKind = Literal["overflow", "transient", "fatal"]
"""How a failed provider call should be handled."""

OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed context limit",
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
# "input length and `max_tokens` exceed context limit: 9117 + 1024 > 10000, decrease ..."
_ANTHROPIC_MAX_TOKENS = re.compile(r"exceed context limit: (\d+) \+ (\d+) > (\d+)")
# "... your messages resulted in 9000 tokens" without the limit
_RESULTED = re.compile(r"resulted in (\d+) tokens")
# "maximum context length is 16385 tokens. However, you requested 17000 tokens (15000 in
# the messages, 2000 in the completion)"
_REQUESTED = re.compile(
    r"maximum context length is (\d+) tokens.*?requested (\d+) tokens \((\d+) in the "
    r"messages, (\d+) in the completion\)", re.S,
)


@dataclass(frozen=True, slots=True)
class Overflow:
    """A context-overflow error and the figures its message states (``None`` when not)."""

    limit: int | None
    """The context window the provider states, in its own tokens."""
    prompt_tokens: int | None
    """The provider's count of the rejected request's input."""
    completion_tokens: int | None = None
    """The completion size the request asked for, when the provider counts it in the limit."""

    @property
    def input_limit(self) -> int | None:
        """The most input tokens the provider accepts beside the requested completion."""
        if self.limit is None:
            return None
        return self.limit - (self.completion_tokens or 0)


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


def overflow_of(
    error: BaseException, extra_classes: tuple[type[BaseException], ...] = ()
) -> Overflow | None:
    """The overflow ``error`` reports, with the figures it states, or ``None`` when ``error``
    is not a context overflow."""
    if not is_context_overflow(error, extra_classes):
        return None
    return _stated(error)


def overflow_figures(error: BaseException) -> tuple[int | None, int | None]:
    """``(input_tokens, limit)`` when the error message states them, else ``None`` each."""
    stated = _stated(error)
    return stated.prompt_tokens, stated.limit


def _stated(error: BaseException) -> Overflow:
    """The figures the first error along the chain states (``None`` where none does)."""
    for exc in _chain(error):
        text = str(exc)
        match = _REQUESTED.search(text)
        if match:
            return Overflow(int(match.group(1)), int(match.group(3)), int(match.group(4)))
        match = _OPENAI.search(text)
        if match:
            return Overflow(int(match.group(1)), int(match.group(2)))
        match = _ANTHROPIC_MAX_TOKENS.search(text)
        if match:
            return Overflow(int(match.group(3)), int(match.group(1)), int(match.group(2)))
        match = _ANTHROPIC.search(text)
        if match:
            return Overflow(int(match.group(2)), int(match.group(1)))
        match = _RESULTED.search(text)
        if match:
            return Overflow(None, int(match.group(1)))
    return Overflow(None, None)


_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_TRANSIENT_NAMES = ("timeout", "ratelimit", "connection", "overloaded", "unavailable",
                    "internalserver", "serviceunavailable", "temporar")


def _status_of(error: BaseException) -> int | None:
    for name in ("status_code", "status", "http_status"):
        value = getattr(error, name, None)
        if isinstance(value, int):
            return value
    response = getattr(error, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def error_kind(
    error: BaseException, extra_classes: tuple[type[BaseException], ...] = ()
) -> ErrorKind:
    """How to handle a failed provider call: ``"overflow"``, ``"transient"`` or ``"fatal"``.

    A failure with neither an HTTP status nor a recognisable name (a bug in a summarizer, an
    unknown client) counts as transient: it gets the bounded retries.
    """
    if is_context_overflow(error, extra_classes):
        return "overflow"
    for exc in _chain(error):
        if isinstance(exc, (TimeoutError, ConnectionError)):
            return "transient"
        status = _status_of(exc)
        if status is not None:
            if status >= 500 or status in _TRANSIENT_STATUS:
                return "transient"
            if 400 <= status < 500:
                return "fatal"
        name = type(exc).__name__.lower()
        if any(part in name for part in _TRANSIENT_NAMES):
            return "transient"
        if "authentication" in name or "permission" in name or "badrequest" in name:
            return "fatal"
    return "transient"
