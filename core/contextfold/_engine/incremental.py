"""The Compactor's memory of the previous call: the input it saw and the output it sent.

When the next input extends the previous one, the previous output is the prefix of the
next: only the new messages need counting and checking, and the prefix stays byte-stable.

The prefix's token figure is exact, or an upper bound when the call that made it sent a
history it had no need to count (`count_within`);
a bound is tightened, by counting newest first, only when it crosses the trigger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.structure import SYSTEM_ROLES
from .._messages.validation import validate

__all__ = ["APPENDABLE", "Plan", "Prefix"]

APPENDABLE = frozenset({"no_user", "assistant_before_user", "empty"})
"""Problems a history may have while more is still to come (a user message appended later)."""


@dataclass
class Plan:
    """One call's decision: what the policy works on and the figures behind it."""

    messages: Sequence[Message]
    """The caller's input."""
    new: list[Message] | None
    """The messages added since the previous input; ``None`` when the call started over."""
    new_tokens: int | None
    """Tokens of the new messages; ``None`` when the call started over."""
    estimate: int
    """Tokens of what the call works on (messages with priming, plus ``fixed``): exact
    when ``exact``, else an upper bound."""
    exact: bool
    force: bool
    """Compact regardless of the trigger."""
    needs: bool
    """The trigger was crossed (or forced)."""
    fixed: int
    """Tokens of the tool definitions."""
    tools: Sequence[Mapping[str, Any]] | None
    """The tool definitions."""
    known: int | None
    """The calibrated input size, when a usage report applies."""
    started: float
    """``perf_counter`` at the start of the call."""
    was_idle: bool
    """The conversation's idle flag before the call."""
    now: datetime | None = None
    """The time to stamp summaries with (``None``: the clock's)."""
    complete: bool = True
    """The messages are the whole request (no user message will be appended)."""
    base: list[Message] = field(default_factory=list)
    """What the policy works on, built when it runs: the previous output plus the new
    messages, or the caller's input."""
    grown: int | None = None
    """For a policy that rebuilds its view: the input extends the previous call's input,
    which held this many messages (``None``: it does not)."""
    pinned: bool | None = None
    """Whether the policy's input holds a pinned message, when already known."""


class Prefix:
    """The previous call's input (a snapshot) and output, for incremental calls. After
    `extension`, ``grown`` is the length of the previous input when the new one
    extends it (``None`` otherwise, or when it extends the previous output instead)."""

    def __init__(self) -> None:
        self.primed = False
        self.seen: list[Message] = []
        self.out: tuple[Message, ...] = ()
        self.out_tokens = 0  # of ``out``, reply priming included
        self.out_exact = True  # False: ``out_tokens`` is an upper bound
        self._out_valid: bool | None = False
        self.call_ids: set[str] = set()
        self.fixed = 0
        self.grown: int | None = None

    def extension(self, messages: Sequence[Message]) -> list[Message] | None:
        """The messages added since the previous input (or since the previous output, when
        the caller replaced its history with it), or ``None`` when ``messages`` starts with
        neither. The snapshot follows the input on a match."""
        self.grown = None
        if not self.primed:
            return None
        seen, n = self.seen, len(self.seen)
        if len(messages) >= n:
            new = list(messages[n:])
            seen.extend(new)
            # One C-level pass: identity first for every element, equality where not.
            if seen == (messages if isinstance(messages, list) else list(messages)):
                self.grown = n
                return new
            del seen[n:]
        k = len(self.out)
        if len(messages) >= k and list(messages[:k]) == list(self.out):
            # The caller kept the compacted output as its history (a framework state that
            # stores what was sent): that is the prefix now.
            self.seen = list(messages)
            return list(messages[k:])
        return None

    @property
    def out_valid(self) -> bool:
        """The previous output passes ``validate``."""
        if self._out_valid is None:
            self._out_valid = not validate(self.out)
        return self._out_valid

    def appendable(self, new: Sequence[Message]) -> bool:
        """True when the (valid) previous output followed by ``new`` is still valid."""
        if not self.out_valid:
            return False
        if not new:
            return True
        for m in new:
            if m.role in SYSTEM_ROLES or any(c.id in self.call_ids for c in m.tool_calls):
                return False
        return all(p.code in APPENDABLE for p in validate(new))

    def append(
        self, new: Sequence[Message], tokens: int, exact: bool
    ) -> tuple[Message, ...]:
        """Extend the output with ``new`` (checked with `appendable`), whose tokens
        with the prefix's are now ``tokens`` (exact or a bound); return it."""
        self.out = self.out + tuple(new)
        self.out_tokens, self.out_exact = tokens, exact
        self.call_ids.update(c.id for m in new for c in m.tool_calls)
        return self.out

    def remember(
        self, messages: Sequence[Message] | None, out: Sequence[Message], fixed: int,
        counter: TokenCounter, *, tokens: int | None = None, exact: bool = True,
        valid: bool | None = None,
    ) -> None:
        """Keep ``out`` as the next prefix; ``messages`` is the new snapshot when the call
        started over (``None``: the snapshot was already extended). ``tokens`` is what the
        call knows of ``out``'s count (a bound unless ``exact``; counted when ``None``),
        ``valid`` whether the call found ``out`` valid (checked when ``None``)."""
        if messages is not None:
            self.seen = list(messages)
        self.primed = True
        self.fixed = fixed
        self.out = tuple(out)
        if tokens is None:
            tokens, exact = counter.count_messages(self.out), True
        self.out_tokens, self.out_exact = tokens, exact
        self._out_valid = valid  # None: checked when an append needs it
        self.call_ids = {c.id for m in self.out for c in m.tool_calls}
