"""Summaries made by a LangChain chat model, sync and async.

[`ChatModelSummarizer`][langchain_contextfold.ChatModelSummarizer] implements contextfold's
summarizer protocol (``summarize`` / ``asummarize``) over any chat model's ``invoke`` / ``ainvoke``.
Retries, splitting of long spans, the content-hash cache, verification and the fallback
on failure are added around it by contextfold's summary service, so a failure here is
raised, never returned as text: a failed summary never becomes the summary.

With ``cache_true=True`` (what ``with_compaction`` and ``CompactionMiddleware`` use when
they summarize with the conversation's own model), a summary request repeats the agent's
previous request (its messages, converted back as the agent sent them, and its tools
bound) with the instruction appended as the last message, so the provider serves it
mostly from its prompt cache. Models whose API joins consecutive turns of one role
(``ChatAnthropic``, Gemini, Bedrock) get today's form: the instruction names messages by
position, and those APIs renumber them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from contextfold.errors import SummarizerError
from contextfold.integration import (
    SUMMARY_SYSTEM_PROMPT,
    cache_true_messages,
    positions_hold,
    render_transcript,
    summary_prompt,
)
from contextfold.policy import SummaryRequest

from ._convert import from_core

__all__ = ["SUMMARY_SYSTEM_PROMPT", "ChatModelSummarizer", "render_transcript"]

SUMMARY_RUN_NAME = "contextfold_summary"
"""The run name and tag of summary calls, so traces and streams can tell them apart."""


class ChatModelSummarizer:
    """Summarizes with a LangChain chat model (sync ``invoke``, async ``ainvoke``).

    Args:
        model: the chat model (``ChatOpenAI(model="gpt-4o-mini")``...). ``with_compaction``
            and ``CompactionMiddleware`` use the conversation's own model when no
            summarizer is given; each summary is then one more request to that model.
        system_prompt: the summary call's system prompt.
        config: extra ``RunnableConfig`` for the summary calls (callbacks, tags).
        max_input_tokens: the model's input window; summary requests over it are split and
            merged. ``"profile"`` (the default) reads the model's profile
            (``model.profile["max_input_tokens"]``); ``None`` states no window, so the
            conversation's budget applies (what the adapters use when the summarizer is the
            conversation's own model, whose real window the budget describes).
        cache_true: repeat the agent's previous request, byte for byte, with the summary
            instruction appended (see the module docstring). Worth it when ``model`` is the
            agent's own model (the same provider cache); where the previous request would
            not fit ``max_input_tokens``, or ``model``'s API joins consecutive turns (see
            the module docstring), today's form is used.

    Example::

        summarizer = ChatModelSummarizer(ChatOpenAI(model="gpt-4o-mini"))
        model = with_compaction(chat_model, policy=cf.ThresholdPolicy(), budget=budget,
                                summarizer=summarizer)
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        system_prompt: str = SUMMARY_SYSTEM_PROMPT,
        config: RunnableConfig | None = None,
        max_input_tokens: int | Literal["profile"] | None = "profile",
        cache_true: bool = False,
    ) -> None:
        self.model = model
        self._cache_true = cache_true
        self.system_prompt = system_prompt
        self.config = config
        self._window = max_input_tokens

    @property
    def cache_true(self) -> bool:
        """Whether summary requests repeat the agent's previous request: as asked, for a
        model that sees the messages at the positions they were sent."""
        return self._cache_true and (self.model is None or positions_hold(self.model))

    @cache_true.setter
    def cache_true(self, value: bool) -> None:
        self._cache_true = value

    @property
    def max_input_tokens(self) -> int | None:
        """The window summary requests must fit (see the class docstring)."""
        if self._window != "profile":
            return self._window
        profile = getattr(self.model, "profile", None) or {}
        value = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        return value if isinstance(value, int) and value > 0 else None

    def prompt(self, request: SummaryRequest) -> list[BaseMessage]:
        """The messages sent to the model for ``request``: the previous request and the
        instruction for a cache-true request, else the summary system prompt and the
        span's transcript."""
        if request.sent is not None:
            return from_core(cache_true_messages(request))
        return [SystemMessage(self.system_prompt), HumanMessage(summary_prompt(request))]

    def _model(self, request: SummaryRequest) -> Any:
        """The model with the previous request's tools bound, for a cache-true request
        that had tools (the instruction asks for text; the tools are there to keep the
        request's prefix what the provider cached)."""
        tools = request.sent.tools if request.sent is not None else ()
        return self.model.bind_tools([dict(t) for t in tools]) if tools else self.model

    def _config(self) -> RunnableConfig:
        config: dict[str, Any] = dict(self.config or {})
        config.setdefault("run_name", SUMMARY_RUN_NAME)
        # "nostream" keeps summary tokens out of LangGraph's "messages" stream.
        config["tags"] = [*config.get("tags", []), SUMMARY_RUN_NAME, "nostream"]
        return config  # type: ignore[return-value]

    def summarize(self, request: SummaryRequest) -> str:
        """The summary text; raises
        [`contextfold.SummarizerError`][contextfold.errors.SummarizerError] on failure."""
        try:
            reply = self._model(request).invoke(self.prompt(request), self._config())
        except Exception as exc:
            raise SummarizerError(f"summary model failed: {type(exc).__name__}: {exc}") from exc
        return _text_of(reply)

    async def asummarize(self, request: SummaryRequest) -> str:
        """The async form of [`summarize`][langchain_contextfold.ChatModelSummarizer.summarize]."""
        try:
            reply = await self._model(request).ainvoke(self.prompt(request), self._config())
        except Exception as exc:
            raise SummarizerError(f"summary model failed: {type(exc).__name__}: {exc}") from exc
        return _text_of(reply)


def _text_of(reply: BaseMessage) -> str:
    text = str(reply.text)
    if not text.strip():
        calls = [c["name"] for c in getattr(reply, "tool_calls", None) or []]
        asked = f" (it asked for tools: {json.dumps(calls)})" if calls else ""
        raise SummarizerError("summary model returned no text" + asked)
    return text.strip()
