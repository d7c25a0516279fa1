"""Handles for everything a compaction left out, whichever policy left it out.

:func:`with_handles` completes a policy's targets: a message of the policy's input that is
not in its output becomes a ``"dropped"`` target when the policy did not report it, and a
run of such messages shares one handle per block of :data:`HANDLE_BLOCK` positions (the
block's original is its transcript). Blocks end at fixed positions, so a history left out
more at every call (what a loop slice leaves out of an agent loop) keeps the handles of its
full blocks; :class:`HandleMemo` hands them back, with their targets, instead of hashing
and reporting the same messages again.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._messages.model import Message
from .._policies.contract import Target
from .ledger import LEDGER_SOURCE
from .references import handle_for

__all__ = ["HANDLE_BLOCK", "Block", "HandleMemo", "with_handles"]

HANDLE_BLOCK = 256
"""Positions per handle block: a run of left-out messages gets one handle per block."""


@dataclass(frozen=True, slots=True)
class Block:
    """Consecutive left-out positions ``start..end - 1`` that share ``handle``, and the
    ``"dropped"`` targets made for those of them the policy did not report."""

    start: int
    end: int
    handle: str
    dropped: tuple[Target, ...]


class HandleMemo:
    """What :func:`with_handles` made at the previous call of one conversation: the handle
    of each block and the ``"dropped"`` target of each left-out message. A policy that
    rebuilds its view at every call (a loop slice) leaves out the same messages again,
    and they get the same objects back instead of being hashed and reported anew.
    ``blocks`` lists the blocks of the latest call, in order."""

    def __init__(self) -> None:
        self.handles: dict[tuple[int, int], tuple[tuple[Message, ...], str]] = {}
        self.targets: dict[tuple[int, int, str], tuple[Target, ...]] = {}
        self.blocks: list[Block] = []
        self._used: dict[tuple[int, int], tuple[tuple[Message, ...], str]] = {}
        self._used_targets: dict[tuple[int, int, str], tuple[Target, ...]] = {}

    def handle(self, view: Sequence[Message], start: int, end: int, settled: int = 0) -> str:
        """The handle of ``view[start:end]``. A block that ends by ``settled`` (the caller
        checked that ``view[:settled]`` equals the view of the previous call, message for
        message) has the content it had then, and its handle is taken as it was."""
        key = (start, end)
        hit = self.handles.get(key)
        if hit is None or end > settled:
            members = tuple(view[start:end])
            if hit is None or len(hit[0]) != len(members) or not all(
                    map(operator.is_, hit[0], members)):
                hit = (members, handle_for(members))
        self._used[key] = hit
        return hit[1]

    def dropped(self, view: Sequence[Message], start: int, end: int, handle: str,
                reported: Sequence[int], counter: Any) -> tuple[Target, ...]:
        """The ``"dropped"`` targets of the positions ``start..end - 1`` the policy did not
        report (``reported``: sorted positions). Called right after :meth:`handle` for the
        same block, whose handle stands for its content."""
        def made(skip: Collection[int] = ()) -> tuple[Target, ...]:
            return tuple(
                Target(index=i, role=view[i].role, method="dropped",
                       original_tokens=counter.count_message(view[i]), new_tokens=0,
                       tool_name=view[i].name if view[i].role == "tool" else None,
                       handle=handle)
                for i in range(start, end) if i not in skip)

        first = bisect_left(reported, start)
        if first < len(reported) and reported[first] < end:
            return made(set(reported))  # the policy reported some itself: not the usual set
        key = (start, end, handle)
        found = self.targets.get(key) or made()
        self._used_targets[key] = found
        return found

    def keep_used(self, blocks: list[Block]) -> None:
        """Forget the blocks this call did not use (the memo holds one call's worth)."""
        self.handles, self._used = self._used, {}
        self.targets, self._used_targets = self._used_targets, {}
        self.blocks = blocks


def with_handles(
    view: Sequence[Message], out: Sequence[Message], targets: Sequence[Target],
    counter: Any, memo: HandleMemo | None = None, *, kept: Collection[int] | None = None,
    settled: int = 0,
) -> tuple[Target, ...]:
    """``targets`` completed so that everything taken out of view has a handle (see the
    module docstring); a removed or summarized message reported without a handle gets its
    block's. Earlier ledgers are not counted: they are merged, not removed.

    Args:
        memo: one per conversation; hands back what the previous call made for the same
            messages.
        kept: the positions of ``view`` whose message is in ``out`` or is a ledger, when
            the caller knows them: the rest is left out, and ``view`` is not scanned.
        settled: ``view[:settled]`` equals the view ``memo`` saw last (the caller checked):
            the handles of blocks within it are taken from ``memo`` as they are.
    """
    memo = memo if memo is not None else HandleMemo()
    handled = {t.index for t in targets if t.handle is not None}
    if kept is None:
        present = {id(m) for m in out}
        # Positions left out and not yet given a handle (a ledger is merged, not removed).
        left = [i for i, m in enumerate(view) if id(m) not in present]
        skip: Collection[int] = handled | {i for i in left if view[i].source == LEDGER_SOURCE}
        runs = _runs(left, skip)
    else:
        runs = _gaps(len(view), {*kept, *handled})
    reported = sorted({t.index for t in targets})
    blocks = []
    for start, end in runs:
        # One handle per block of a run, computed once: a run may hold thousands of
        # messages. Blocks end at fixed positions, so a run that grows at every call (the
        # history a slice leaves out) keeps the handles of its full blocks and only its
        # last block is new; so do the block's "dropped" targets.
        for a, b in _blocks(start, end):
            handle = memo.handle(view, a, b, settled)
            blocks.append(Block(a, b, handle, memo.dropped(view, a, b, handle, reported,
                                                           counter)))
    memo.keep_used(blocks)
    if not blocks:
        return tuple(targets)
    starts = [b.start for b in blocks]

    def block_of(i: int) -> Block | None:
        k = bisect_right(starts, i) - 1
        return blocks[k] if k >= 0 and i < blocks[k].end else None

    done = []
    for t in targets:
        block = block_of(t.index) if t.handle is None else None
        done.append(t if block is None else replace(t, handle=block.handle))
    for block in blocks:  # in position order already: runs and blocks ascend
        done.extend(block.dropped)
    return tuple(done)


def _runs(left: list[int], skip: Collection[int]) -> list[tuple[int, int]]:
    """The runs of consecutive positions of ``left`` (ascending) not in ``skip``, as
    ``(start, end)`` ranges."""
    runs: list[tuple[int, int]] = []
    start = previous = -2
    for i in left:
        if i in skip:
            continue
        if i != previous + 1:
            if previous >= 0:
                runs.append((start, previous + 1))
            start = i
        previous = i
    if previous >= 0:
        runs.append((start, previous + 1))
    return runs


def _gaps(n: int, taken: Collection[int]) -> list[tuple[int, int]]:
    """The ranges of ``0..n - 1`` between the positions of ``taken``."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in sorted(taken):
        if i >= n:
            break
        if i > start:
            runs.append((start, i))
        start = max(start, i + 1)
    if start < n:
        runs.append((start, n))
    return runs


def _blocks(start: int, end: int) -> Iterator[tuple[int, int]]:
    """``start..end - 1`` cut where a position is a multiple of HANDLE_BLOCK."""
    while start < end:
        stop = min(end, (start // HANDLE_BLOCK + 1) * HANDLE_BLOCK)
        yield start, stop
        start = stop
