"""The model's own control over its context: the ``compact_context`` tool.

An agent that knows it is about to change subject, or that its context is full of what it
no longer needs, asks for a compaction itself, naming what must survive::

    spec = compact_context_tool()
    spec(focus="the refund for order ORD-0042")   # the next call compacts, keeping that

The request rides in the conversation itself: the tool's call (its ``focus`` argument) and
its result, which the agent's framework appends to that conversation like any tool round.
A [`Compactor`][contextfold.Compactor] that finds them closing the messages it is given
(`asked_compaction`) compacts that call whatever the trigger says, and that pass's
summaries are asked to keep the focus word for word; it serves each call of the tool once.
So the request reaches the conversation of the agent that called the tool and no other, with
or without a thread id, in any process that resumes it, and no state outside the
conversation holds it. The adapters wrap the tool for their frameworks
(``compact_context_tool_for``); an application can also ask a compactor directly
([`request_compaction`][contextfold.Compactor.request_compaction], or
``compact_context_tool(request)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .._messages.model import Message
from .._stores.tools import SearchToolSpec

__all__ = ["COMPACT_CONTEXT_DESCRIPTION", "CompactionAsked", "asked_compaction",
           "compact_context_tool"]

COMPACT_CONTEXT_DESCRIPTION = (
    "Compact your context before your next step: older messages are summarized or cut (the "
    "originals stay readable through their handles). Call it when you move to a new part "
    "of the task or your context is full of what you no longer need. `focus` says what "
    "must be kept above all (ids, files, decisions)."
)

TOOL_NAME = "compact_context"
ACCEPTED = "The context will be compacted before your next step"
"""The start of the tool's answer when it took the request: the mark of an accepted call."""
_FOCUS_CHARS = 2_000


def compact_context_tool(request: Callable[[str], object] | None = None) -> SearchToolSpec:
    """The ``compact_context`` tool. Its call and answer, in the conversation, are the
    request (see the module docstring); ``request(focus)`` is called as well when given
    (a [`Compactor.request_compaction`][contextfold.Compactor.request_compaction] of a loop that
    does not pass tool rounds to its compactor)."""

    def run(focus: Any = "") -> dict[str, Any]:
        if not isinstance(focus, str):
            return {"error": "focus must be a string"}
        if request is not None:
            request(_focus(focus))
        return {"status": ACCEPTED
                          + (f", keeping: {focus.strip()[:200]}" if focus.strip() else ".")}

    return SearchToolSpec(
        name=TOOL_NAME, description=COMPACT_CONTEXT_DESCRIPTION,
        parameters={"type": "object", "properties": {"focus": {
            "type": "string", "description": "What the compaction must keep above all."}},
            "required": []},
        function=run,
    )


class CompactionAsked(NamedTuple):
    """A compaction the conversation asks for with the ``compact_context`` tool."""

    call_id: str
    """The id of the tool's call (each is served once)."""
    focus: str
    """What the compaction must keep above all (``""`` for nothing in particular)."""


def asked_compaction(messages: Sequence[Message]) -> CompactionAsked | None:
    """The compaction ``messages`` ask for: their last tool round holds a call of the
    ``compact_context`` tool that the tool accepted (its result says so). Reads only that
    round: the tool results that close ``messages`` and the call before them."""
    if not isinstance(messages, (list, tuple, Sequence)):
        return None  # (an input of something else is refused where it is checked)
    results: dict[str, Message] = {}
    k = len(messages) - 1
    while k >= 0 and isinstance(messages[k], Message) and messages[k].role == "tool":
        results[messages[k].tool_call_id or ""] = messages[k]
        k -= 1
    if not results or k < 0 or not isinstance(messages[k], Message):
        return None
    for call in messages[k].tool_calls:
        answer = results.get(call.id)
        if call.name == TOOL_NAME and answer is not None and ACCEPTED in answer.text:
            return CompactionAsked(call.id, _focus(_argument(call.arguments)))
    return None


def _argument(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return ""
    focus = parsed.get("focus") if isinstance(parsed, dict) else None
    return focus if isinstance(focus, str) else ""


def _focus(text: str) -> str:
    return text.strip()[:_FOCUS_CHARS]
