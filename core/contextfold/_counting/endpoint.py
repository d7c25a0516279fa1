"""Exact counts from a provider's token-counting endpoint.

For families without a local tokenizer (Claude, Gemini) the provider itself can count:
Anthropic's ``POST /v1/messages/count_tokens``, Gemini's ``countTokens``. Each message is
sent once, as the text of one user message, and its count is kept on the message like any
other counter's, so an agent loop pays one request per new message, and a cold history is
counted by several requests at a time. Answers are also kept by content (a digest of the
request's text, `ANSWERS_KEPT` of them): the same text in another message object (a
policy's cut made again at the next call, a line of a summary) is never asked twice.

A request that fails is never the agent's failure: an error of the client, or an answer
that is not a whole number of tokens >= 0 once the request's framing is taken off (``None``,
a string, NaN, infinity, a negative number, a bool), counts that text or message by the
fallback counter (the family's approximation), and a warning is issued once per counter.
Such a figure is not an answer of the endpoint: it is never kept on the message under the
endpoint's name, so no store keeps it for a later process, and for ``retry_after`` seconds
after a failure the endpoint is not asked (a down endpoint costs one failed request per
``retry_after`` seconds, not one per message).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from .._config import Ge, check
from .._messages.model import Message
from ..errors import ConfigurationError
from .counters import (
    TOKENS_PER_MESSAGE,
    TokenCounter,
    _BaseCounter,
    content_texts,
    counter_for_model,
)
from .reported import is_token_count

__all__ = ["ANSWERS_KEPT", "EndpointCounter", "anthropic_tool"]

logger = logging.getLogger("contextfold")

_PROBE = "a"  # one token in every tokenizer: its request measures the endpoint's framing

ANSWERS_KEPT = 65_536
"""Answers an [`EndpointCounter`][contextfold.EndpointCounter] keeps by content (least recently used
dropped)."""


class _Failed(Exception):
    """A request that gave no usable count."""


_Asked = TypeVar("_Asked")


def _usable(ask: Callable[[_Asked], Any], what: _Asked) -> int:
    """The endpoint's answer to ``ask(what)`` as a whole number of tokens; `_Failed`
    when the request raises or answers anything else (None, a string, NaN, a negative)."""
    try:
        answer = ask(what)
    except Exception as exc:  # any client's error
        raise _Failed(f"the request failed ({exc!r})") from exc
    if not is_token_count(answer):
        raise _Failed(f"it answered {answer!r}, not a whole number of tokens")
    return int(answer)


class EndpointCounter(_BaseCounter):
    """Counts with a provider's token-counting endpoint.

    Args:
        count: Returns the provider's input-token count of a request holding ``text`` as
            one user message (the endpoint call). Called from worker threads.
        name: Names the counter in reports (``"endpoint:anthropic:claude-sonnet-4"``).
        fallback: Counts a message whose request failed; default: ``counter_for_model``
            of ``model``, the family's stated approximation.
        model: The model whose tokenizer the endpoint uses.
        workers: Requests in flight at once when a history has many uncounted messages.
        retry_after: Seconds after a failed request during which the endpoint is not
            asked (the fallback counts meanwhile).
        count_tools: Returns the provider's count of tool definitions as a request carries
            them (the system prompt a provider adds for tools included); default: their
            JSON text through ``count`` plus the fallback's ``tool_prompt`` (Claude's
            tool-use system prompt, `TOOL_USE_PROMPTS`).

    The framing of one request (what the endpoint adds around a one-token message) is
    measured once and subtracted, so each message counts its own text plus the per-message
    overhead every counter here uses.

    With Gemini's SDK: ``EndpointCounter(lambda text: client.models.count_tokens(
    model=m, contents=text).total_tokens, name=f"endpoint:gemini:{m}", model=m)``.
    """

    def __init__(
        self,
        count: Callable[[str], int],
        *,
        name: str,
        model: str | None = None,
        fallback: TokenCounter | None = None,
        workers: int = 8,
        retry_after: float = 30.0,
        count_tools: Callable[[Sequence[Mapping[str, Any]]], int] | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigurationError(f"workers must be >= 1, got {workers}")
        check("EndpointCounter", "retry_after", retry_after, Annotated[float, Ge(0)])
        self._count = count
        self._count_tools = count_tools
        self.name = name
        self.fallback = fallback or counter_for_model(model)
        self.workers = workers
        self.retry_after = retry_after
        self._framing: int | None = None
        self._warned = False
        self._down_until = 0.0
        self._answers: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def anthropic(cls, client: Any, model: str, **kwargs: Any) -> EndpointCounter:
        """Counts with Anthropic's ``messages.count_tokens`` through an ``anthropic.Anthropic``
        client (``input_tokens`` of a one-message request). Tool definitions are counted as
        a request carries them: the count with ``tools`` less the count without, which takes
        in the tool-use system prompt Anthropic adds."""
        probe = [{"role": "user", "content": _PROBE}]

        def count(text: str) -> int:
            reply = client.messages.count_tokens(
                model=model, messages=[{"role": "user", "content": text}])
            return reply.input_tokens  # type: ignore[no-any-return]  # checked by the counter

        def count_tools(tools: Sequence[Mapping[str, Any]]) -> int:
            with_tools = client.messages.count_tokens(
                model=model, messages=probe, tools=[anthropic_tool(t) for t in tools])
            return int(with_tools.input_tokens) - count(_PROBE)

        kwargs.setdefault("count_tools", count_tools)
        return cls(count, name=f"endpoint:anthropic:{model}", model=model, **kwargs)

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """The provider's count of tool definitions (see ``count_tools`` above); the
        fallback's where the request fails or gives no usable answer."""
        if not tools:
            return 0
        if self._count_tools is None:
            return super().count_tools(tools) + getattr(self.fallback, "tool_prompt", 0)
        if time.monotonic() < self._down_until:
            return self.fallback.count_tools(tools)
        try:
            return _usable(self._count_tools, tools)
        except _Failed as failed:
            self._failed(failed)
            return self.fallback.count_tools(tools)

    # -- asking the endpoint -------------------------------------------------------------

    def _request(self, text: str) -> int:
        """The endpoint's answer for ``text``; `_Failed` when it gives none usable."""
        return _usable(self._count, text)

    def _framing_tokens(self) -> int:
        if self._framing is None:
            self._framing = self._request(_PROBE) - 1
            if self._framing < 0:
                self._framing = None
                raise _Failed("it counted no token in a one-token request")
        return self._framing

    def _ask(self, text: str) -> int | None:
        """The endpoint's count of ``text`` without the request's framing (an answer kept
        for the same text when there is one), or ``None`` when it gives none usable."""
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            known = self._answers.get(key)
            if known is not None:
                self._answers.move_to_end(key)
                return known
            if time.monotonic() < self._down_until:
                return None
        try:
            tokens = self._request(text) - self._framing_tokens()
            if tokens < 0:
                raise _Failed("it counted fewer tokens than the framing of a request")
        except _Failed as failed:
            self._failed(failed)
            return None
        with self._lock:
            self._answers[key] = tokens
            if len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
        return tokens

    def _failed(self, failed: _Failed) -> None:
        logger.debug("contextfold: token-counting request of %s failed: %s", self.name, failed)
        with self._lock:
            self._down_until = time.monotonic() + self.retry_after
            if self._warned:
                return
            self._warned = True
        warnings.warn(
            f"contextfold: the token-counting endpoint of {self.name} gave no count ({failed}); "
            f"counting with {self.fallback.name} where it fails",
            RuntimeWarning, stacklevel=5,
        )

    # -- counting ------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """The endpoint's count of ``text`` (the fallback's when the request fails)."""
        if not text:
            return 0
        asked = self._ask(text)
        return self.fallback.count_text(text) if asked is None else asked

    def count_message(self, message: Message) -> int:
        """Tokens of one message: the endpoint's count is cached on the message; the
        fallback's, for a request that failed, is not (so no store keeps it)."""
        key = "tokens:" + self.name
        if message.has_derived(key):
            return message.derived(key, self._count_uncached)  # the cached count
        asked = self._asked(message)
        if asked is None:
            return self.fallback.count_message(message)
        return message.derived(key, lambda _message: asked)

    def _asked(self, message: Message) -> int | None:
        # One request per message: its labels and texts joined, images by the tile formula.
        texts, images = content_texts(message)
        parts = [message.role, message.name or "", *texts, *(c.name for c in message.tool_calls)]
        asked = self._ask("\n".join(p for p in parts if p))
        return None if asked is None else TOKENS_PER_MESSAGE + asked + images

    def _count_uncached(self, message: Message) -> int:
        asked = self._asked(message)
        return self.fallback.count_message(message) if asked is None else asked

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a request; messages not counted yet are sent ``workers`` at a time."""
        seq = messages if isinstance(messages, (list, tuple)) else list(messages)
        key = "tokens:" + self.name
        new = [m for m in seq if not m.has_derived(key)]
        if len(new) > 1 and self.workers > 1 and self._framing_known():
            with ThreadPoolExecutor(self.workers, thread_name_prefix="contextfold-count") as pool:
                list(pool.map(self.count_message, new))
        return super().count_messages(seq)

    def _framing_known(self) -> bool:
        """Whether the framing is measured (measured now, before threads start, if the
        endpoint is not resting after a failure)."""
        if self._framing is not None:
            return True
        if time.monotonic() < self._down_until:
            return False
        try:
            self._framing_tokens()
        except _Failed as failed:
            self._failed(failed)
            return False
        return True


def anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic ``tools`` entry for a tool definition given as an OpenAI tools entry
    (``{"type": "function", "function": {...}}``), a bare function definition (``name``,
    ``parameters``), an Anthropic entry (returned as it is: ``input_schema``, or a server
    tool's own ``type``) or a JSON schema (named by its ``title``)."""
    kind = tool.get("type")
    if "input_schema" in tool or (isinstance(kind, str) and kind not in ("function", "object")):
        return dict(tool)
    function = tool.get("function") if kind == "function" else tool
    if not isinstance(function, Mapping) or "name" not in function:
        return {"name": str(tool.get("title") or "tool"), "input_schema": dict(tool)}
    out: dict[str, Any] = {"name": str(function["name"]), "input_schema": dict(
        function.get("parameters") or {"type": "object", "properties": {}})}
    if function.get("description"):
        out["description"] = str(function["description"])
    return out
