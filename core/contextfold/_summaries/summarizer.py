"""The summarizer protocol and the scripted test double.

A summarizer turns a [`SummaryRequest`][contextfold.policy.SummaryRequest] into text. Sync
summarizers implement ``summarize``; async ones ``asummarize``; a class may implement both. Retries,
splitting, caching, verification and fallback are added around any summarizer by the summary
service, so implementations stay small.

A summarizer that sets ``cache_true = True`` receives, where it fits, the agent's previous
request with each request ([`SummaryRequest.sent`][contextfold.policy.SummaryRequest.sent]) and
sends that request again with the instruction appended
([`cache_true_messages`][contextfold.integration.cache_true_messages]), so the provider serves it
mostly from its prompt cache. It is opt-in: a summarizer over a model other than the agent's gains
nothing from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, Union, runtime_checkable

from .._contract.policy import SummaryRequest

__all__ = ["AnySummarizer", "AsyncSummarizer", "ScriptedSummarizer", "Summarizer"]


@runtime_checkable
class Summarizer(Protocol):
    """Makes a summary synchronously."""

    def summarize(self, request: SummaryRequest) -> str:
        """The summary text for ``request``; raise on failure (never return error text)."""
        ...


@runtime_checkable
class AsyncSummarizer(Protocol):
    """Makes a summary asynchronously."""

    async def asummarize(self, request: SummaryRequest) -> str:
        """The summary text for ``request``; raise on failure."""
        ...


AnySummarizer = Union[Summarizer, AsyncSummarizer]
"""What the engine accepts as a summarizer: sync, async, or both (a class implementing both
is used sync by ``compact`` and async by ``acompact``)."""


class ScriptedSummarizer:
    """A summarizer for tests: answers from a script and records every request.

    Each script item is a string (returned), an exception instance (raised) or a callable
    taking the request. When the script runs out, ``default`` is used (a callable or text);
    with no default a ``RuntimeError`` says so. ``max_input_tokens`` plays the window of a
    real model's summarizer.

    Example::

        s = ScriptedSummarizer(["first summary", TimeoutError("down"), "third"])
    """

    max_input_tokens: int | None = None
    """The window it claims, as an LLM summarizer's model profile states one (requests over
    it are split); ``None``: the conversation's budget applies."""

    cache_true: bool = False
    """Ask for cache-true requests (the agent's previous request in ``request.sent``)."""

    def __init__(
        self,
        script: Iterable[str | BaseException | Callable[[SummaryRequest], str]] = (),
        *,
        default: str | Callable[[SummaryRequest], str] | None = None,
        max_input_tokens: int | None = None,
        cache_true: bool = False,
    ) -> None:
        self._script = list(script)
        self.cache_true = cache_true
        self.default = default
        if max_input_tokens is not None:
            self.max_input_tokens = max_input_tokens
        self.requests: list[SummaryRequest] = []
        """Every request received, in order."""

    @property
    def calls(self) -> int:
        """How many requests were received."""
        return len(self.requests)

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        item: str | BaseException | Callable[[SummaryRequest], str] | None
        item = self._script.pop(0) if self._script else self.default
        if item is None:
            raise RuntimeError("ScriptedSummarizer: script exhausted and no default given")
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item(request)
        return item

    async def asummarize(self, request: SummaryRequest) -> str:
        return self.summarize(request)
