"""Offline stand-ins for a real model, shared by the recipes.

A recipe uses a real OpenAI model when ``OPENAI_API_KEY`` is set and one of these
otherwise, so every recipe runs as written in the test suite. Both act only on what they
are sent: each reads the page after the newest result it can see, then answers with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

PAGE = re.compile(r"^Page (\d+):")


def page_text(page: int) -> str:
    """A long page whose first line names it and carries a reference number."""
    return f"Page {page}: reference RF-{1000 + page}. " + "Quarterly figures, row by row. " * 90


def next_page(results: Sequence[str]) -> int:
    """The page after the newest one among ``results`` (0 when none is visible)."""
    for text in reversed(results):
        found = PAGE.match(text)
        if found:
            return int(found.group(1)) + 1
    return 0


class RequestSizes(BaseCallbackHandler):
    """Records the tokens of every request a chat model was started with (its messages,
    counted like gpt-4o): what the model was really sent, after compaction.

    A model wrapped by ``with_compaction`` starts twice per call: the wrapper with the
    whole history, then the model inside it with the compacted one. Only the innermost
    start of each call is a request the model received."""

    def __init__(self) -> None:
        self._starts: dict[Any, tuple[Any, int]] = {}  # run id -> (parent run id, tokens)

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *,
                            run_id: Any, parent_run_id: Any = None, **kwargs: Any) -> None:
        import contextfold as cf
        from langchain_contextfold import to_core

        tokens = cf.counter_for_model("gpt-4o").count_messages(to_core(messages[0]))
        self._starts[run_id] = (parent_run_id, tokens)

    @property
    def tokens(self) -> list[int]:
        """The tokens of each request the model received, in order."""
        parents = {parent for parent, _ in self._starts.values()}
        return [tokens for run, (_, tokens) in self._starts.items() if run not in parents]


class PageReaderModel(BaseChatModel):
    """A LangChain chat model that reads ``pages`` pages with ``read_page``, then answers."""

    pages: int = 40

    @property
    def _llm_type(self) -> str:
        return "cookbook-page-reader"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        seen = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        page = next_page(seen)
        if page < self.pages:
            reply = AIMessage("", tool_calls=[{"name": "read_page", "args": {"page": page},
                                               "id": f"call_{page}", "type": "tool_call"}])
        else:
            reply = AIMessage(f"Read all {self.pages} pages; the last was {seen[-1][:28]}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def langchain_model() -> BaseChatModel:
    """``ChatOpenAI`` with an API key in the environment, else :class:`PageReaderModel`."""
    import os

    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model="gpt-4o-mini")
    return PageReaderModel()


def llama_index_llm() -> Any:
    """llama-index's ``OpenAI`` with an API key in the environment, else
    :class:`PageReaderLLM`."""
    import os

    if os.environ.get("OPENAI_API_KEY"):
        from llama_index.llms.openai import OpenAI

        return OpenAI(model="gpt-4o-mini")
    return _page_reader_llm_class()()


def _page_reader_llm_class() -> Any:
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        LLMMetadata,
        ToolCallBlock,
    )
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    class PageReaderLLM(MockFunctionCallingLLM):
        """A LlamaIndex function-calling LLM that reads ``pages`` pages, then answers."""

        pages: int = 30

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(is_function_calling_model=True, is_chat_model=True,
                               context_window=128_000, model_name="cookbook-page-reader")

        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            seen = [m.content or "" for m in messages if m.role.value == "tool"]
            page = next_page(seen)
            if kwargs.get("tools") and page < self.pages:
                call = ToolCallBlock(tool_call_id=f"call_{page}", tool_name="read_page",
                                     tool_kwargs={"page": page})
                message = ChatMessage(role="assistant", blocks=[call])
            elif seen:
                message = ChatMessage(role="assistant",
                                      content=f"Read {page} pages; the last was {seen[-1][:28]}")
            else:
                last = messages[-1].content or ""
                message = ChatMessage(role="assistant", content=f"You said: {last[:60]}")
            return ChatResponse(message=message)

        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return self.chat(messages, **kwargs)

        def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            yield self.chat(messages, **kwargs)

        async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            response = self.chat(messages, **kwargs)

            async def one() -> Any:
                yield response

            return one()

    return PageReaderLLM


def __getattr__(name: str) -> Any:
    # Built on first use, so LangChain-only recipes never import LlamaIndex.
    if name == "PageReaderLLM":
        return _page_reader_llm_class()
    raise AttributeError(name)
