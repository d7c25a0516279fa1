"""Offline stand-ins for a real model, shared by the recipes.

A recipe uses a real OpenAI model when ``OPENAI_API_KEY`` is set and one of these
otherwise, so every recipe runs as written in the test suite. Both act only on what they
are sent: each reads the page after the newest result it can see, then answers with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

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
