"""The model's own control over its context: the ``compact_context`` tool.

An agent that knows it is about to change subject, or that its context is full of what it
no longer needs, asks for a compaction itself, naming what must survive::

    spec = compact_context_tool(compactor.request_compaction)
    spec(focus="the refund for order ORD-0042")   # the next call compacts, keeping that

The adapters wrap it for their frameworks (``compact_context_tool_for``). The tool only
records the request: the compaction happens at the next model call, before the request is
sent, like any other, and its summaries are asked to keep the focus word for word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._stores.tools import SearchToolSpec

__all__ = ["COMPACT_CONTEXT_DESCRIPTION", "compact_context_tool"]

COMPACT_CONTEXT_DESCRIPTION = (
    "Compact your context before your next step: older messages are summarized or cut (the "
    "originals stay readable through their handles). Call it when you move to a new part "
    "of the task or your context is full of what you no longer need. `focus` says what "
    "must be kept above all (ids, files, decisions)."
)


def compact_context_tool(request: Callable[[str], object]) -> SearchToolSpec:
    """The ``compact_context`` tool: calling it with ``focus`` calls ``request(focus)``
    (a :meth:`Compactor.request_compaction`, or an adapter's), and tells the model what
    happens next."""

    def run(focus: Any = "") -> dict[str, Any]:
        if not isinstance(focus, str):
            return {"error": "focus must be a string"}
        request(focus.strip()[:2_000])
        return {"status": "The context will be compacted before your next step"
                          + (f", keeping: {focus.strip()[:200]}" if focus.strip() else ".")}

    return SearchToolSpec(
        name="compact_context", description=COMPACT_CONTEXT_DESCRIPTION,
        parameters={"type": "object", "properties": {"focus": {
            "type": "string", "description": "What the compaction must keep above all."}},
            "required": []},
        function=run,
    )
