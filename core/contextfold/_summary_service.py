"""Answers policies' summary requests with a summarizer, safely.

A failing summarizer never becomes the summary and never deletes history: its error is
recorded and the reply falls back (see ``SummaryService``).
"""

from __future__ import annotations

import inspect
from typing import Any

from ._policy import SummaryReply, SummaryRequest

__all__ = ["SummaryService"]


class SummaryService:
    """Runs one summarizer for a compaction pass and counts its calls."""

    def __init__(self, summarizer: Any = None) -> None:
        self.summarizer = summarizer
        self.llm_calls = 0
        self.notes: list[str] = []

    def answer(self, request: SummaryRequest) -> SummaryReply:
        """Summarize synchronously."""
        if self.summarizer is None:
            return SummaryReply(text=None, origin="failed", error="no summarizer configured")
        self.llm_calls += 1
        try:
            text = self.summarizer.summarize(request)
        except Exception as exc:
            return self._failed(exc)
        return SummaryReply(text=text)

    async def aanswer(self, request: SummaryRequest) -> SummaryReply:
        """Summarize asynchronously (``asummarize`` when the summarizer has it)."""
        if self.summarizer is None:
            return SummaryReply(text=None, origin="failed", error="no summarizer configured")
        self.llm_calls += 1
        try:
            method = getattr(self.summarizer, "asummarize", None)
            if method is not None and inspect.iscoroutinefunction(method):
                text = await method(request)
            else:
                text = self.summarizer.summarize(request)
        except Exception as exc:
            return self._failed(exc)
        return SummaryReply(text=text)

    def _failed(self, exc: Exception) -> SummaryReply:
        error = f"{type(exc).__name__}: {exc}"
        self.notes.append(f"summarizer failed ({error})")
        return SummaryReply(text=None, origin="failed", error=error)
