"""Summaries made by a LangChain chat model, sync and async.

:class:`ChatModelSummarizer` implements contextfold's summarizer protocol
(``summarize`` / ``asummarize``) over any chat model's ``invoke`` / ``ainvoke``.
Retries, splitting of long spans, the content-hash cache, verification and the fallback
on failure are added around it by contextfold's summary service, so a failure here is
raised, never returned as text: a failed summary never becomes the summary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from contextfold import Message, SummarizerError, SummaryRequest

__all__ = ["SUMMARY_SYSTEM_PROMPT", "ChatModelSummarizer", "render_transcript"]

SUMMARY_SYSTEM_PROMPT = (
    "You compress the history of an AI agent's conversation so the agent can continue its "
    "work from your summary alone. Keep every fact the agent needs: the user's goals and "
    "constraints, decisions taken, identifiers (ids, file paths, URLs, numbers, names), "
    "tool results that still matter, errors met, and what remains to be done. Do not "
    "invent anything. Write the summary only, with no preamble."
)
"""The system prompt of every summary call."""

SUMMARY_RUN_NAME = "contextfold_summary"
"""The run name and tag of summary calls, so traces and streams can tell them apart."""


def render_transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text, one block per message, for a summary prompt."""
    blocks = []
    for m in messages:
        head = m.role.upper() + (f" ({m.name})" if m.name else "")
        if m.role == "tool":
            head += f" result of {m.tool_call_id}" + (" [error]" if m.is_error else "")
        lines = [f"{head}:"]
        if m.reasoning:
            lines.append(f"[reasoning] {m.reasoning}")
        if m.text:
            lines.append(m.text)
        for image in m.images:
            lines.append(f"[image {image.url[:80]}]")
        for call in m.tool_calls:
            lines.append(f"[calls {call.name}({call.arguments}) id={call.id}]")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


class ChatModelSummarizer:
    """Summarizes with a LangChain chat model (sync ``invoke``, async ``ainvoke``).

    Args:
        model: the chat model (``ChatOpenAI(model="gpt-4o-mini")``...). ``with_compaction``
            uses the wrapped model when no summarizer is given.
        system_prompt: the summary call's system prompt.
        config: extra ``RunnableConfig`` for the summary calls (callbacks, tags).

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
    ) -> None:
        self.model = model
        self.system_prompt = system_prompt
        self.config = config

    def prompt(self, request: SummaryRequest) -> list[BaseMessage]:
        """The messages sent to the model for ``request``."""
        parts = [request.instructions.strip()]
        if request.max_tokens:
            parts.append(f"Keep the summary under {request.max_tokens} tokens.")
        parts.append("The conversation:\n\n" + render_transcript(request.messages))
        return [SystemMessage(self.system_prompt), HumanMessage("\n\n".join(parts))]

    def _config(self) -> RunnableConfig:
        config: dict[str, Any] = dict(self.config or {})
        config.setdefault("run_name", SUMMARY_RUN_NAME)
        # "nostream" keeps summary tokens out of LangGraph's "messages" stream.
        config["tags"] = [*config.get("tags", []), SUMMARY_RUN_NAME, "nostream"]
        return config  # type: ignore[return-value]

    def summarize(self, request: SummaryRequest) -> str:
        """The summary text; raises :class:`contextfold.SummarizerError` on failure."""
        try:
            reply = self.model.invoke(self.prompt(request), self._config())
        except Exception as exc:
            raise SummarizerError(f"summary model failed: {type(exc).__name__}: {exc}") from exc
        return _text_of(reply)

    async def asummarize(self, request: SummaryRequest) -> str:
        """The async form of :meth:`summarize`."""
        try:
            reply = await self.model.ainvoke(self.prompt(request), self._config())
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
