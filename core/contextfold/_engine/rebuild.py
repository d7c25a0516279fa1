"""The rebuild path: what a Compactor remembers for a policy that rebuilds its view at every
call (``always_run``: a loop slice, turn-aware composition).

Such a policy's output is small, but each call worked over the whole input: validating it,
scanning it for pins, finding what was left out and giving it handles, the policy's own
scans. In an agent loop each call's input is the previous one plus a step, so that work
is remembered here and a call reads only what was appended, while a *chain* holds:

1. the input extends the previous call's input (equal messages as a prefix: the
   Compactor's ``Prefix`` checks it with one comparison of the two lists);
2. the previous call's view (what its policy ran on) was its input, or an equal copy (an
   unprompted history, whose repair changes nothing);
3. so is this call's.

Then every view since the chain began is a prefix of this one, message for message, and
what was derived from a prefix of any of them holds now: the validation scan, whether a
message is pinned, where each message stands, the handles of left-out blocks, and the
policy's own facts (its [`Lineage`][contextfold.policy.Lineage] slots). Only content-derived
facts and positions are kept, never message objects to send: an equal message is not the
same object, and what a call emits or reports as left out is decided on this call's own
objects. Any other call (an edited or rewound history, a repaired view, a failure) starts
the memory over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contract.policy import Lineage
from .._counting.counters import TokenCounter
from .._lossless.ledger_payload import is_ledger
from .._messages.model import Message
from .._messages.validation import NO_USER_NOTE, Validation, repair

__all__ = ["RebuildMemo"]


class RebuildMemo:
    """One conversation's memory for the rebuild path (see the module docstring)."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Start over: nothing known about any input."""
        self._counted: tuple[int, int] | None = None  # (length, tokens) of the last input
        self._restart()

    def count(self, messages: Sequence[Message], grown: int | None,
              counter: TokenCounter) -> int:
        """``counter.count_messages(messages)``; for an additive counter and an input that
        extends the previous one (``grown``), that one's count plus the appended messages'
        (counting the whole list again checks it against the counter's memo, message for
        message)."""
        counted = self._counted
        if (grown is not None and counted is not None and counted[0] == grown
                and getattr(counter, "additive", False) is True):
            total = counted[1] + sum(map(counter.count_message, messages[grown:]))
        else:
            total = counter.count_messages(messages)
        self._counted = (len(messages), total)
        return total

    def _restart(self) -> None:
        """Start the chain over (the counts of the inputs still hold)."""
        self.viewed: int | None = None  # length of the previous view, in the chain
        self.handles_chained = False  # the HandleMemo's blocks were made in this chain
        self._validation = Validation()
        self._pins_read = 0
        self._pinned = False
        self._indexed = 0
        self._where: dict[str, list[int]] = {}  # fingerprint -> positions holding it
        self._ledgers: list[int] = []
        self._slots: dict[str, Any] = {}

    def prepare(
        self, view: list[Message], grown: int | None
    ) -> tuple[list[Message], tuple[str, ...], Lineage | None]:
        """The policy's input (repaired in flight when invalid), the repairs, and the
        policy's lineage while the chain holds (from its second call on: a first call
        runs as a one-shot compaction does). ``grown``: the input extends the previous
        call's input, which held that many messages (``None``: it does not)."""
        chained = grown is not None and grown == self.viewed
        if not chained:
            self._restart()
        problems = self._validation.feed(view).problems()
        if problems and not self._validation.unprompted_only():
            self._restart()  # the view is a repaired copy: nothing carries over
            repaired, made = repair(view)
            return repaired, tuple(made), None
        self.viewed = len(view)
        # No user message yet: repair would give an equal copy and one note.
        notes: tuple[str, ...] = (NO_USER_NOTE,) if problems else ()
        if problems:
            view = list(view)
        return view, notes, Lineage(view, self._slots) if chained else None

    def any_pinned(self, view: Sequence[Message]) -> bool:
        """Whether ``view`` (this call's, in the chain) holds a pinned message."""
        self._pinned = self._pinned or any(m.is_pinned for m in view[self._pins_read:])
        self._pins_read = len(view)
        return self._pinned

    def kept(self, view: Sequence[Message], out: Sequence[Message]) -> set[int]:
        """The positions of ``view`` (this call's, in the chain) whose message is in
        ``out`` (the same object), or is a ledger: what ``with_handles`` must not count as
        left out. Found through an index of positions by fingerprint, extended by what
        was appended: an equal message stands where an equal one stood before."""
        where = self._where
        for i in range(self._indexed, len(view)):
            m = view[i]
            where.setdefault(m.fingerprint, []).append(i)
            if is_ledger(m):
                self._ledgers.append(i)
        self._indexed = len(view)
        found = set(self._ledgers)
        for m in out:
            at = where.get(m.fingerprint)
            if at is not None:  # a cut copy or a nudge stands nowhere
                found.update(i for i in at if view[i] is m)
        return found
