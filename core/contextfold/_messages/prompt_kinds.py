"""Which user messages are prompts, and where the task, the latest and the open request
are.

A *prompt* is a user message that drives the model. Its kind, highest priority first:
``direct`` (a commander's direct message, or a plain user message with no ``source``),
``commander_broadcast`` (``source="broadcast"`` with an empty ``sender_id``),
``swarm_broadcast`` (a broadcast from another agent), and ``nudge`` (synthetic, made by
the prompt-source pass when nothing else exists). User messages whose ``source`` is in
`NON_PROMPT_SOURCES` (earlier nudges, summaries, session markers, the ledger) are
context, not prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .model import Message

__all__ = [
    "LEDGER_SOURCE",
    "NON_PROMPT_SOURCES",
    "PROMPT_PRIORITY",
    "PromptKind",
    "find_prompt",
    "latest_broadcast",
    "open_request",
    "prompt_kind",
    "task_prompt",
    "unanswered_prompt",
]

PromptKind = Literal["direct", "commander_broadcast", "swarm_broadcast", "nudge"]
"""What drives the current turn, in the loop-slice design's priority order."""

LEDGER_SOURCE = "ledger"
"""The source of the compaction ledger's message: context, never a prompt."""

NON_PROMPT_SOURCES = frozenset({"nudge", "summary", "session", "system", LEDGER_SOURCE})
"""User-message sources that never count as a real prompt: synthetic nudges (``"system"``
is the loop-slice design's own source for them), summaries and session markers."""


PROMPT_PRIORITY: dict[str, int] = {"direct": 0, "commander_broadcast": 1, "swarm_broadcast": 2}
"""The rank of each real prompt kind (lower wins when selecting by priority)."""


def prompt_kind(message: Message) -> PromptKind | None:
    """The kind of prompt ``message`` is, or ``None`` when it is not a real prompt."""
    if message.role != "user":
        return None
    if message.source == "broadcast":
        return "swarm_broadcast" if message.sender_id else "commander_broadcast"
    if message.source in NON_PROMPT_SOURCES:
        return None
    return "direct"


def find_prompt(
    messages: Sequence[Message],
    start: int,
    *,
    selection: Literal["recency", "priority"] = "recency",
) -> int | None:
    """Index of the prompt source in ``messages[start:]``, or ``None``.

    ``"recency"``: the most recent real prompt (the loop-slice design's
    ``findLastUserPromptIndex``). ``"priority"``: the most recent prompt of the highest-priority
    kind present.
    """
    best: int | None = None
    best_rank = len(PROMPT_PRIORITY)
    for i in range(len(messages) - 1, start - 1, -1):
        kind = prompt_kind(messages[i])
        if kind is None:
            continue
        if selection == "recency":
            return i
        if PROMPT_PRIORITY[kind] < best_rank:
            best, best_rank = i, PROMPT_PRIORITY[kind]
            if best_rank == 0:
                break
    return best


def task_prompt(messages: Sequence[Message]) -> int | None:
    """Index of the conversation's task prompt: its first real prompt (a session marker,
    summary or nudge before it is context, not the task), else its first user message;
    ``None`` when there is no user message."""
    first = None
    for i, m in enumerate(messages):
        if m.role != "user":
            continue
        if prompt_kind(m) is not None:
            return i
        if first is None:
            first = i
    return first


def unanswered_prompt(messages: Sequence[Message], end: int) -> int | None:
    """Index of the most recent real prompt in ``messages[:end]`` when no final answer (an
    assistant message with text and no tool calls) follows it anywhere, else ``None``."""
    index = find_prompt(messages[:end], 0)
    if index is None:
        return None
    for m in messages[index + 1 :]:
        if m.role == "assistant" and not m.tool_calls and m.text.strip():
            return None
    return index


def open_request(messages: Sequence[Message]) -> str | None:
    """The text of the conversation's latest real prompt while nothing has answered it
    (what a summary must keep as the task and as remaining), else ``None``."""
    index = unanswered_prompt(messages, len(messages))
    return messages[index].text if index is not None else None


def latest_broadcast(messages: Sequence[Message], end: int) -> int | None:
    """Index of the most recent broadcast in ``messages[:end]``, or ``None``."""
    for i in range(min(end, len(messages)) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and m.source == "broadcast":
            return i
    return None
