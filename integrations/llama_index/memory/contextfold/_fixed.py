"""Tokens outside the messages that count against the budget, and budgets from metadata.

The Compactor counts tool definitions as fixed tokens. A memory also has to reserve what
its caller adds around ``get()``: the system prompt the agent prepends and the caller's
``initial_token_count``. :class:`FixedTools` carries those tokens with the tool
definitions and :class:`FixedAwareCounter` adds them where the tools are counted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import LLMMetadata

import contextfold as cf

__all__ = ["FixedAwareCounter", "FixedTools", "budget_of"]


def budget_of(metadata: LLMMetadata) -> cf.Budget:
    """A budget from an LLM's metadata: its context window, ``num_output`` reserved (when
    it is under half the window) and its model name."""
    window = int(metadata.context_window)
    reserve = max(0, int(metadata.num_output))
    reserve = reserve if reserve < window // 2 else 0
    model = metadata.model_name if metadata.model_name not in ("", "unknown") else None
    return cf.Budget(context_window=window, output_reserve=reserve, model=model)


class FixedTools(Sequence[Mapping[str, Any]]):
    """Tool definitions carrying extra fixed tokens (system prompt, caller's prefix)."""

    __slots__ = ("extra", "tools")

    def __init__(self, tools: Sequence[Mapping[str, Any]], extra: int) -> None:
        self.tools, self.extra = list(tools), extra

    def __len__(self) -> int:
        return len(self.tools)

    def __bool__(self) -> bool:
        return bool(self.tools) or self.extra > 0

    def __getitem__(self, index: Any) -> Any:
        return self.tools[index]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.tools)


class FixedAwareCounter:
    """A counter that adds a ``FixedTools``' extra tokens to the tools' count."""

    def __init__(self, inner: cf.TokenCounter) -> None:
        self.inner = inner
        self.name = inner.name

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def count_message(self, message: cf.Message) -> int:
        return self.inner.count_message(message)

    def count_messages(self, messages: Sequence[cf.Message]) -> int:
        return self.inner.count_messages(messages)

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        extra = tools.extra if isinstance(tools, FixedTools) else 0
        real = list(tools)
        return (self.inner.count_tools(real) if real else 0) + extra
