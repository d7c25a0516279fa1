"""What the rebuild policies look up in the whole history at every call, read once per
message and extended by what was appended (through the context's
[`Lineage`][contextfold.policy.Lineage]).

* `PromptScan`: where the real prompts, broadcasts and final answers are, so that
  `choose_prompt` finds the prompt source
  without walking back through a long turn.
* `GroupScan`: where each atomic group starts and the running token sums over the
  positions, so that turn-aware composition reads the groups and the sizes of a long turn
  without splitting and counting it again.

Each answers exactly what the scan over the whole list answers (the functions they stand
for say what); they hold positions and content-derived facts only, never messages to send.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Literal

from .._contract.policy import CompactionContext
from .._messages.model import Message
from .._messages.prompt_kinds import PROMPT_PRIORITY, prompt_kind
from .._messages.structure import SYSTEM_ROLES, Group

__all__ = ["GroupScan", "PromptScan"]


class PromptScan:
    """Positions of the real prompts (by kind), the broadcasts and the final answers of a
    history, read as it grows."""

    def __init__(self) -> None:
        self.length = 0
        self.prompts: list[int] = []
        self.by_kind: dict[str, list[int]] = {kind: [] for kind in PROMPT_PRIORITY}
        self.broadcasts: list[int] = []
        self.answers: list[int] = []

    @classmethod
    def of(cls, messages: Sequence[Message], context: CompactionContext) -> PromptScan | None:
        """The scan of ``messages`` kept in the context's lineage (extended to them), or
        ``None`` without one (the caller then scans the list itself)."""
        lineage = context.lineage
        scan = lineage.slot(messages, "prompt_scan", cls) if lineage is not None else None
        return scan.extend(messages) if scan is not None else None

    def extend(self, messages: Sequence[Message]) -> PromptScan:
        """Read ``messages[self.length:]`` (``messages`` extends what was read)."""
        for i in range(self.length, len(messages)):
            m = messages[i]
            kind = prompt_kind(m)
            if kind is not None:
                self.prompts.append(i)
                self.by_kind[kind].append(i)
            if m.role == "user" and m.source == "broadcast":
                self.broadcasts.append(i)
            if m.role == "assistant" and not m.tool_calls and m.text.strip():
                self.answers.append(i)
        self.length = max(self.length, len(messages))
        return self

    def find_prompt(
        self, start: int, end: int, selection: Literal["recency", "priority"] = "recency",
    ) -> int | None:
        """``find_prompt(messages[:end], start, selection=selection)``."""
        if selection == "recency":
            return _last_in(self.prompts, start, end)
        for kind in PROMPT_PRIORITY:  # highest priority first: its most recent one
            found = _last_in(self.by_kind[kind], start, end)
            if found is not None:
                return found
        return None

    def unanswered_prompt(self, end: int) -> int | None:
        """``unanswered_prompt(messages, end)``: the latest real prompt before ``end`` when
        no final answer follows it anywhere in the history."""
        index = _last_in(self.prompts, 0, end)
        if index is None or (self.answers and self.answers[-1] > index):
            return None
        return index

    def latest_broadcast(self, end: int) -> int | None:
        """``latest_broadcast(messages, end)``."""
        return _last_in(self.broadcasts, 0, end)


def _last_in(positions: list[int], start: int, end: int) -> int | None:
    """The last of ``positions`` (ascending) in ``start..end - 1``, or ``None``."""
    k = bisect_left(positions, end) - 1
    return positions[k] if k >= 0 and positions[k] >= start else None


class GroupScan:
    """The groups of a history after its leading system messages (``split_groups``), and
    running token sums over its positions, read as it grows. ``starts[k]`` is where group
    ``k`` starts; the last group runs to the end of what was read and may still grow (tool
    results appended after their call)."""

    def __init__(self) -> None:
        self.length = 0
        self.n_sys = 0
        self.starts: list[int] = []
        self.loops: list[int] = []  # the groups that are tool loops
        self.sums = [0]  # sums[i]: tokens of the messages before position i

    @classmethod
    def of(cls, messages: Sequence[Message], context: CompactionContext) -> GroupScan | None:
        """The scan of ``messages`` kept in the context's lineage (extended to them), or
        ``None`` without one. Keyed by the counter: the sums are its counts."""
        lineage = context.lineage
        key = "group_scan:" + getattr(context.counter, "name", type(context.counter).__name__)
        scan = lineage.slot(messages, key, cls) if lineage is not None else None
        return scan.extend(messages, context) if scan is not None else None

    def extend(self, messages: Sequence[Message], context: CompactionContext) -> GroupScan:
        """Read ``messages[self.length:]`` (``messages`` extends what was read)."""
        n = len(messages)
        if self.n_sys == self.length:  # only system messages so far: the block may grow
            while self.n_sys < n and messages[self.n_sys].role in SYSTEM_ROLES:
                self.n_sys += 1
        starts, loops = self.starts, self.loops
        # The last group may grow: a call's results are appended after it.
        i = self.n_sys
        if starts:
            i = starts.pop()
            if loops and loops[-1] == len(starts):
                loops.pop()
        while i < n:
            j = i + 1
            if messages[i].tool_calls:
                loops.append(len(starts))
                while j < n and messages[j].role == "tool":
                    j += 1
            starts.append(i)
            i = j
        count, sums = context.counter.count_message, self.sums
        for k in range(self.length, n):
            sums.append(sums[-1] + count(messages[k]))
        self.length = max(self.length, n)
        return self

    def end(self, k: int) -> int:
        """Where group ``k`` ends."""
        return self.starts[k + 1] if k + 1 < len(self.starts) else self.length

    def group(self, messages: Sequence[Message], k: int) -> Group:
        """Group ``k`` as ``split_groups`` gives it, made of ``messages``' own objects."""
        start, end = self.starts[k], self.end(k)
        return Group(start, end, tuple(messages[start:end]))

    def index_of(self, position: int) -> int:
        """The group that starts at ``position``."""
        k = bisect_left(self.starts, position)
        assert k < len(self.starts) and self.starts[k] == position
        return k

    def last_loop(self, first: int) -> int | None:
        """The last group from ``first`` on that is a tool loop, or ``None``."""
        return self.loops[-1] if self.loops and self.loops[-1] >= first else None

    def tokens(self, start: int, end: int) -> int:
        """Tokens of the messages at ``start..end - 1`` (each counted on its own)."""
        return self.sums[end] - self.sums[start]
