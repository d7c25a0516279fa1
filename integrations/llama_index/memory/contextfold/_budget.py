"""Budgets from a LlamaIndex LLM's metadata."""

from __future__ import annotations

from llama_index.core.base.llms.types import LLMMetadata

import contextfold as cf

__all__ = ["budget_of"]


def budget_of(metadata: LLMMetadata) -> cf.Budget:
    """A budget from an LLM's metadata: its context window, ``num_output`` reserved (when
    it is under half the window) and its model name."""
    window = int(metadata.context_window)
    reserve = max(0, int(metadata.num_output))
    reserve = reserve if reserve < window // 2 else 0
    model = metadata.model_name if metadata.model_name not in ("", "unknown") else None
    return cf.Budget(context_window=window, output_reserve=reserve, model=model)
