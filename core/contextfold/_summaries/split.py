"""Splitting a summary request that exceeds the summarizer's window, merging the parts,
and appending verified identifiers under DATA.

Parts keep whole groups (a tool call with its results) whenever a group fits; a group
that alone exceeds the window is written out as transcript text in user messages, cut
into pieces, so every part is still a sequence a chat model accepts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from .._contract.policy import SummaryRequest
from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.structure import split_groups

__all__ = ["MERGE_INSTRUCTIONS", "append_to_data", "merge_request", "split_request"]

MERGE_INSTRUCTIONS = (
    "The input holds summaries of consecutive parts of one conversation, oldest first. "
    "Merge them into one summary with the same sections, keeping every identifier, number "
    "and name verbatim."
)
"""Appended to the original instructions for the merge call."""

_OTHER_HEADING = re.compile(r"^(TASK|PROGRESS|REMAINING|DECISIONS|ERRORS):")
_DATA_HEADING = re.compile(r"^DATA:")


def split_request(
    request: SummaryRequest, window: int, counter: TokenCounter
) -> list[SummaryRequest]:
    """``request`` cut into parts whose input fits ``window`` tokens each."""
    room = max(window - counter.count_text(request.instructions) - 16, 32)
    parts: list[list[Message]] = []
    current: list[Message] = []
    used = 0

    def flush() -> None:
        nonlocal current, used
        if current:
            parts.append(current)
        current, used = [], 0

    for group in split_groups(request.messages):
        size = sum(counter.count_message(m) for m in group.messages)
        if size > room:
            flush()
            for piece in _pieces(group.messages, room, counter):
                parts.append([piece])
            continue
        if used + size > room:
            flush()
        current.extend(group.messages)
        used += size
    flush()
    n = len(parts)
    return [
        replace(request, messages=tuple(p), purpose=f"{request.purpose}:part{k}/{n}",
                sent=None)
        for k, p in enumerate(parts, 1)
    ]


def _pieces(messages: Sequence[Message], room: int, counter: TokenCounter) -> list[Message]:
    """An oversized group as transcript text in user messages of at most ``room`` tokens."""
    lines = []
    for m in messages:
        who = f"{m.role} {m.name}" if m.name else m.role
        calls = "".join(f"\n[call {c.name}({c.arguments})]" for c in m.tool_calls)
        lines.append(f"[{who}]\n{m.text}{calls}")
    text = "\n\n".join(lines)
    tokens = max(counter.count_text(text), 1)
    step = max(int(len(text) * room / tokens * 0.85) - 40, 200)
    chunks = [text[i : i + step] for i in range(0, len(text), step)]
    n = len(chunks)
    return [
        Message(role="user", content=f"[transcript part {k} of {n}]\n{chunk}")
        for k, chunk in enumerate(chunks, 1)
    ]


def merge_request(request: SummaryRequest, texts: Sequence[str]) -> SummaryRequest:
    """The request that merges the parts' summaries into one."""
    n = len(texts)
    body = "\n\n".join(f"[summary of part {k} of {n}]\n{t}" for k, t in enumerate(texts, 1))
    return replace(
        request,
        messages=(Message(role="user", content=body),),
        instructions=f"{request.instructions}\n\n{MERGE_INSTRUCTIONS}",
        purpose=f"{request.purpose}:merge",
        sent=None,
    )


def append_to_data(text: str, values: Sequence[str]) -> str:
    """``text`` with ``values`` added at the end of its DATA section (made if missing)."""
    items = [f"- {v}" for v in values]
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _DATA_HEADING.match(ln)), None)
    if start is None:
        return "\n".join([text.rstrip(), "DATA:", *items])
    end = start + 1
    while end < len(lines) and not _OTHER_HEADING.match(lines[end]) and not (
        lines[end].startswith("[") and end > start + 1
    ):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # insert before blank lines that close the section
    return "\n".join([*lines[:end], *items, *lines[end:]])
