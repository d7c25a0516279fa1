"""Summaries made by any LlamaIndex LLM, sync and async.

:class:`LLMSummarizer` implements contextfold's summarizer protocol (``summarize`` /
``asummarize``) over an LLM's ``chat`` / ``achat``. Retries, splitting of long spans, the
content-hash cache, verification and the fallback on failure are added around it by the
summary service, so a failure here is raised, never returned as text: a failed summary
never becomes the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms import LLM

from contextfold import Message, SummarizerError, SummaryRequest

__all__ = ["SUMMARY_SYSTEM_PROMPT", "LLMSummarizer", "render_transcript"]

SUMMARY_SYSTEM_PROMPT = (
    "You compress the history of an AI agent's conversation so the agent can continue its "
    "work from your summary alone. Keep every fact the agent needs: the user's goals and "
    "constraints, decisions taken, identifiers (ids, file paths, URLs, numbers, names), "
    "tool results that still matter, errors met, and what remains to be done. Do not "
    "invent anything. Write the summary only, with no preamble."
)
"""The system prompt of every summary call."""


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
        lines.extend(f"[image {image.url[:80]}]" for image in m.images)
        lines.extend(f"[calls {c.name}({c.arguments}) id={c.id}]" for c in m.tool_calls)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


class LLMSummarizer:
    """Summarizes with a LlamaIndex LLM (``chat`` sync, ``achat`` async).

    Args:
        llm: any LlamaIndex LLM (``OpenAI(model="gpt-4o-mini")``, a local model...).
            ``CompactingLLM`` uses the LLM it wraps when no summarizer is given; pass the
            inner LLM here, not a ``CompactingLLM``, so summary calls are not compacted.
        system_prompt: the summary call's system prompt.
        chat_kwargs: extra keyword arguments for every ``chat`` call.

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
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a llama_index LLM, got {type(llm).__name__}")
        self.llm = llm
        self.system_prompt = system_prompt
        self.chat_kwargs = dict(chat_kwargs or {})

    def __repr__(self) -> str:
        return f"LLMSummarizer({type(self.llm).__name__})"

    def messages(self, request: SummaryRequest) -> list[ChatMessage]:
        """The chat messages of one summary call."""
        size = f"\nKeep the summary under about {request.max_tokens} tokens." if (
            request.max_tokens) else ""
        prompt = (
            f"{request.instructions}{size}\n\n"
            f"<conversation>\n{render_transcript(request.messages)}\n</conversation>"
        )
        return [
            ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt),
            ChatMessage(role=MessageRole.USER, content=prompt),
        ]

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request`` (raises :class:`SummarizerError` on an empty reply)."""
        return _text(self.llm.chat(self.messages(request), **self.chat_kwargs))

    async def asummarize(self, request: SummaryRequest) -> str:
        """The async form of :meth:`summarize`."""
        return _text(await self.llm.achat(self.messages(request), **self.chat_kwargs))


def _text(response: ChatResponse) -> str:
    text = (response.message.content or "").strip()
    if not text:
        raise SummarizerError("the LLM returned an empty summary")
    return text
