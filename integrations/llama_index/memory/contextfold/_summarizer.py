"""Summaries made by any LlamaIndex LLM, sync and async.

[`LLMSummarizer`][llama_index.memory.contextfold.LLMSummarizer] implements contextfold's summarizer
protocol (``summarize`` / ``asummarize``) over an LLM's ``chat`` / ``achat``. Retries, splitting of
long spans, the content-hash cache, verification and the fallback on failure are added around it by
the summary service, so a failure here is raised, never returned as text: a failed summary
never becomes the summary.

With ``cache_true=True``, a summary request repeats the agent's previous request (its
messages converted back, its tool definitions passed as the ``tools`` argument, which
LlamaIndex's OpenAI-compatible LLMs forward to the API) with the instruction appended as
the last message, so the provider serves it mostly from its prompt cache.
"""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms import LLM

from contextfold.errors import SummarizerError
from contextfold.integration import (
    SUMMARY_SYSTEM_PROMPT,
    cache_true_messages,
    positions_hold,
    render_transcript,
    summary_prompt,
)
from contextfold.policy import SummaryRequest

from ._convert import to_llama_index

__all__ = ["SUMMARY_SYSTEM_PROMPT", "LLMSummarizer", "render_transcript"]

class LLMSummarizer:
    """Summarizes with a LlamaIndex LLM (``chat`` sync, ``achat`` async).

    Args:
        llm: any LlamaIndex LLM (``OpenAI(model="gpt-4o-mini")``, a local model...); each
            summary is one request to it, billed like any other. ``CompactingLLM`` and
            ``CompactingMemory`` summarize with the extractive summarizer (no model) when
            no summarizer is given. To summarize with the LLM a ``CompactingLLM`` wraps,
            pass that inner LLM here, not the ``CompactingLLM``, so summary calls are not
            compacted.
        system_prompt: the summary call's system prompt.
        chat_kwargs: extra keyword arguments for every ``chat`` call.
        max_input_tokens: the LLM's input window; summary requests over it are split and
            merged. ``"metadata"`` (the default) takes the LLM's ``metadata.context_window``
            less its ``num_output``; ``None`` states none (the conversation's budget
            applies).
        cache_true: repeat the agent's previous request with the summary instruction
            appended (see the module docstring). Worth it when ``llm`` is the LLM the
            agent's calls go to (the same provider cache); where the previous request would
            not fit ``max_input_tokens``, or ``llm``'s API joins consecutive turns of one
            role (``Anthropic``, Gemini, Bedrock: the instruction names messages by
            position, and those APIs renumber them), today's form is used.

    Example::

        memory = CompactingMemory.from_defaults(
            policy=cf.ThresholdPolicy(), budget=budget,
            summarizer=LLMSummarizer(OpenAI(model="gpt-4o-mini")),
        )
    """

    def __init__(
        self,
        llm: LLM,
        *,
        system_prompt: str = SUMMARY_SYSTEM_PROMPT,
        chat_kwargs: dict[str, Any] | None = None,
        max_input_tokens: int | Literal["metadata"] | None = "metadata",
        cache_true: bool = False,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a llama_index LLM, got {type(llm).__name__}")
        self.llm = llm
        self.system_prompt = system_prompt
        self.chat_kwargs = dict(chat_kwargs or {})
        self._window = max_input_tokens
        self._cache_true = cache_true

    @property
    def cache_true(self) -> bool:
        """Whether summary requests repeat the agent's previous request: as asked, for an
        LLM that sees the messages at the positions they were sent."""
        return self._cache_true and positions_hold(self.llm)

    @cache_true.setter
    def cache_true(self, value: bool) -> None:
        self._cache_true = value

    @property
    def max_input_tokens(self) -> int | None:
        """The window summary requests must fit (see the class docstring)."""
        if self._window != "metadata":
            return self._window
        metadata = self.llm.metadata
        window = int(metadata.context_window or 0) - max(0, int(metadata.num_output or 0))
        return window if window > 0 else None

    def __repr__(self) -> str:
        return f"LLMSummarizer({type(self.llm).__name__})"

    def messages(self, request: SummaryRequest) -> list[ChatMessage]:
        """The chat messages of one summary call: the previous request and the instruction
        for a cache-true request, else the summary system prompt and the transcript."""
        if request.sent is not None:
            return to_llama_index(cache_true_messages(request))
        return [
            ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt),
            ChatMessage(role=MessageRole.USER, content=summary_prompt(request)),
        ]

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request`` (raises
        [`SummarizerError`][contextfold.errors.SummarizerError] on an empty reply)."""
        return _text(self.llm.chat(self.messages(request), **self._kwargs(request)))

    async def asummarize(self, request: SummaryRequest) -> str:
        """The async form of
        [`summarize`][llama_index.memory.contextfold.LLMSummarizer.summarize]."""
        return _text(await self.llm.achat(self.messages(request), **self._kwargs(request)))

    def _kwargs(self, request: SummaryRequest) -> dict[str, Any]:
        """``chat_kwargs``, with the previous request's tools for a cache-true request."""
        tools = request.sent.tools if request.sent is not None else ()
        return {**self.chat_kwargs, "tools": [dict(t) for t in tools]} if tools else \
            self.chat_kwargs


def _text(response: ChatResponse) -> str:
    text = (response.message.content or "").strip()
    if not text:
        raise SummarizerError("the LLM returned an empty summary")
    return text
