"""Exact counts from a provider's token-counting endpoint.

For families without a local tokenizer (Claude, Gemini) the provider itself can count:
Anthropic's ``POST /v1/messages/count_tokens``, Gemini's ``countTokens``. Each message is
sent once, as the text of one user message, and its count is kept on the message like any
other counter's, so an agent loop pays one request per new message, and a cold history is
counted by several requests at a time.

A request that fails is never the agent's failure: that message is counted by the fallback
counter (the family's approximation) and a warning is issued once per counter.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._messages.model import Message
from ..errors import ConfigurationError
from .counters import (
    TOKENS_PER_MESSAGE,
    TokenCounter,
    _BaseCounter,
    content_texts,
    counter_for_model,
)

__all__ = ["EndpointCounter"]

logger = logging.getLogger("contextfold")

_PROBE = "a"  # one token in every tokenizer: its request measures the endpoint's framing


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
        count_tools: Returns the provider's count of tool definitions as a request carries
            them (the system prompt a provider adds for tools included); default: their
            JSON text through ``count`` plus the fallback's ``tool_prompt`` (Claude's
            tool-use system prompt, :data:`~contextfold._counting.counters.TOOL_USE_PROMPTS`).

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
        count_tools: Callable[[Sequence[Mapping[str, Any]]], int] | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigurationError(f"workers must be >= 1, got {workers}")
        self._count = count
        self._count_tools = count_tools
        self.name = name
        self.fallback = fallback or counter_for_model(model)
        self.workers = workers
        self._framing: int | None = None
        self._warned = False

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
            return int(reply.input_tokens)

        def count_tools(tools: Sequence[Mapping[str, Any]]) -> int:
            with_tools = client.messages.count_tokens(
                model=model, messages=probe, tools=[anthropic_tool(t) for t in tools])
            return int(with_tools.input_tokens) - count(_PROBE)

        kwargs.setdefault("count_tools", count_tools)
        return cls(count, name=f"endpoint:anthropic:{model}", model=model, **kwargs)

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """The provider's count of tool definitions (see ``count_tools`` above); the
        fallback's where the request fails."""
        if not tools:
            return 0
        if self._count_tools is None:
            return super().count_tools(tools) + getattr(self.fallback, "tool_prompt", 0)
        try:
            return max(0, int(self._count_tools(tools)))
        except Exception as exc:  # any client's error: the fallback counts them
            self._failed(exc)
            return self.fallback.count_tools(tools)

    def _framing_tokens(self) -> int:
        if self._framing is None:
            self._framing = max(0, self._count(_PROBE) - 1)
        return self._framing

    def _ask(self, text: str) -> int | None:
        try:
            return max(0, self._count(text) - self._framing_tokens())
        except Exception as exc:  # any client's error: count this one by the fallback
            self._failed(exc)
            return None

    def _failed(self, exc: Exception) -> None:
        logger.debug("contextfold: token-counting request failed: %s", exc)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"contextfold: the token-counting endpoint of {self.name} failed ({exc!r}); "
                f"counting with {self.fallback.name} where it fails",
                RuntimeWarning, stacklevel=5,
            )

    def count_text(self, text: str) -> int:
        """The endpoint's count of ``text`` (the fallback's when the request fails)."""
        if not text:
            return 0
        asked = self._ask(text)
        return self.fallback.count_text(text) if asked is None else asked

    def _count_uncached(self, message: Message) -> int:
        # One request per message: its labels and texts joined, images by the tile formula.
        texts, images = content_texts(message)
        parts = [message.role, message.name or "", *texts, *(c.name for c in message.tool_calls)]
        asked = self._ask("\n".join(p for p in parts if p))
        if asked is None:
            return self.fallback.count_message(message)
        return TOKENS_PER_MESSAGE + asked + images

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a request; messages not counted yet are sent ``workers`` at a time."""
        seq = messages if isinstance(messages, (list, tuple)) else list(messages)
        key = "tokens:" + self.name
        new = [m for m in seq if not m.has_derived(key)]
        if len(new) > 1 and self.workers > 1:
            self._framing_tokens()  # measured once, before the threads start
            with ThreadPoolExecutor(self.workers, thread_name_prefix="contextfold-count") as pool:
                list(pool.map(self.count_message, new))
        return super().count_messages(seq)


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
