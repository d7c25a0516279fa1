"""The structure of a history: atomic groups, turns and tool loops.

* A **group** is the smallest unit a policy may keep or drop: a standalone message, or an
  assistant message with tool calls together with the tool results that follow it. Keeping
  or dropping whole groups never orphans a result or leaves a call unanswered.
* A **turn** starts at a user prompt and runs up to the next one.
* A **tool loop** is one group that holds tool calls (the loop-slice design's loop slice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import Message

__all__ = [
    "Group",
    "Turn",
    "is_prompt",
    "leading_system_count",
    "newest_group",
    "open_loop_call",
    "split_groups",
    "split_turns",
    "tool_loops",
]

SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class Group:
    """An atomic run of messages: ``messages[start:end]`` of the sequence it came from."""

    start: int
    """Index of the first message."""
    end: int
    """Index one past the last message."""
    messages: tuple[Message, ...]
    """The messages themselves."""

    @property
    def is_tool_loop(self) -> bool:
        """True when the group is an assistant message with tool calls and its results."""
        return bool(self.messages[0].tool_calls)

    @property
    def head(self) -> Message:
        """The first message of the group."""
        return self.messages[0]

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Turn:
    """A user prompt and everything after it up to the next prompt."""

    start: int
    """Index of the prompt (or of the first message when the history has no prompt yet)."""
    end: int
    """Index one past the turn's last message."""
    groups: tuple[Group, ...]
    """The turn's groups, in order."""

    @property
    def prompt(self) -> Message | None:
        """The user message that opened the turn, if any."""
        head = self.groups[0].head if self.groups else None
        return head if head is not None and is_prompt(head) else None


def is_prompt(message: Message) -> bool:
    """True for a user message that starts a turn (any user message; nudges included)."""
    return message.role == "user"


def open_loop_call(messages: Sequence[Message]) -> int | None:
    """Index of the assistant message whose tool calls are still under way: the last one
    with tool calls when only tool results follow it; ``None`` when none is open."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant":
            return i if m.tool_calls else None
        if m.role != "tool":
            return None
    return None


def leading_system_count(messages: Sequence[Message]) -> int:
    """How many system/developer messages open the sequence."""
    n = 0
    for m in messages:
        if m.role not in SYSTEM_ROLES:
            break
        n += 1
    return n


def split_groups(messages: Sequence[Message], start: int = 0) -> list[Group]:
    """Split ``messages[start:]`` into atomic groups.

    An assistant message with tool calls takes every directly following tool message
    into its group (results of the same call set; stray results also stay attached rather
    than becoming leading orphans). A tool message with no call before it is a group of its
    own; ``validate`` reports it as an orphan.
    """
    groups: list[Group] = []
    i, n = start, len(messages)
    while i < n:
        j = i + 1
        if messages[i].tool_calls:
            while j < n and messages[j].role == "tool":
                j += 1
        groups.append(Group(i, j, tuple(messages[i:j])))
        i = j
    return groups


def newest_group(messages: Sequence[Message], start: int = 0) -> Group | None:
    """``split_groups(messages, start)[-1]`` (``None`` when there is none), read from the
    end: the trailing tool results and the call before them when it has tool calls, else
    the last message alone."""
    n = len(messages)
    if n <= start:
        return None
    i = n - 1
    while i > start and messages[i].role == "tool":
        i -= 1
    if i == n - 1 or not messages[i].tool_calls:
        i = n - 1  # a message without tool calls before results: each result stands alone
        return Group(i, n, (messages[i],))
    return Group(i, n, tuple(messages[i:n]))


def split_turns(messages: Sequence[Message]) -> list[Turn]:
    """Split the non-system part of ``messages`` into turns, each opened by a user prompt.

    Messages before the first prompt (an assistant greeting) form a turn of their own.
    """
    groups = split_groups(messages, leading_system_count(messages))
    turns: list[Turn] = []
    current: list[Group] = []
    for g in groups:
        if current and is_prompt(g.head):
            turns.append(Turn(current[0].start, current[-1].end, tuple(current)))
            current = []
        current.append(g)
    if current:
        turns.append(Turn(current[0].start, current[-1].end, tuple(current)))
    return turns


def tool_loops(messages: Sequence[Message]) -> list[Group]:
    """Every tool loop of ``messages``, oldest first."""
    return [g for g in split_groups(messages) if g.is_tool_loop]
