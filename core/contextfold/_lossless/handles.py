"""Handles for everything a compaction left out, whichever policy left it out.

`with_handles` completes a policy's targets: a message of the policy's input that is
not in its output becomes a ``"dropped"`` target when the policy did not report it, and a
run of such messages shares one handle per block of `HANDLE_BLOCK` positions (the
block's original is its transcript). Blocks end at fixed positions, so a history left out
more at every call (what a loop slice leaves out of an agent loop) keeps the handles of its
full blocks; `HandleMemo` hands them back, with their targets, instead of hashing
and reporting the same messages again.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._contract.policy import Target
from .._messages.model import Message
from .ledger_payload import is_ledger
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
    members: tuple[Message, ...] = ()
    """The messages it was made of (what a later call compares its own with)."""
    whole: bool = True
    """The policy reported none of its positions: ``dropped`` holds one target for each."""


@dataclass(frozen=True, slots=True)
class _Run:
    """The blocks of one left-out run and their targets joined, as one call made them."""

    blocks: list[Block]
    ends: list[int]  # where each block ends
    offsets: list[int]  # where each block's targets end in ``joined``
    joined: list[Target]  # the next call's run from the same start takes it over
    whole: int  # how many leading blocks are whole


class HandleMemo:
    """What `with_handles` made at the previous call of one conversation: the blocks
    with their handles and ``"dropped"`` targets, and each run's targets joined. A policy
    that rebuilds its view at every call (a loop slice) leaves out the same messages
    again, and they get the same objects back instead of being hashed and reported anew;
    a run that only grew keeps its leading blocks and their joined targets whole.
    ``blocks`` lists the blocks of the latest call, in order."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._by_range: dict[tuple[int, int], Block] = {}
        self._runs: dict[int, _Run] = {}

    def block(self, view: Sequence[Message], start: int, end: int, settled: int,
              reported: Sequence[int], counter: Any) -> Block:
        """The block of ``view[start:end]``: the previous call's when it holds the same
        messages, else made. A block that ends by ``settled`` (the caller checked that
        ``view[:settled]`` equals the previous call's view, message for message) has the
        content it had then and is not compared again."""
        old = self._by_range.get((start, end))
        whole = not _reports(reported, start, end)
        members: tuple[Message, ...] = ()
        same = old is not None and end <= settled
        if old is not None and not same:
            members = tuple(view[start:end])
            same = len(old.members) == len(members) and all(
                map(operator.is_, old.members, members))
        if same and old is not None:
            if old.whole and whole:
                return old
            handle, members = old.handle, old.members
        else:
            members = members or tuple(view[start:end])
            handle = handle_for(members)
        skip = set(reported) if not whole else ()
        dropped = tuple(
            Target(index=i, role=view[i].role, method="dropped",
                   original_tokens=counter.count_message(view[i]), new_tokens=0,
                   tool_name=view[i].name if view[i].role == "tool" else None, handle=handle)
            for i in range(start, end) if i not in skip)
        return Block(start, end, handle, dropped, members, whole)

    def run(self, view: Sequence[Message], start: int, end: int, settled: int,
            reported: Sequence[int], counter: Any) -> _Run:
        """The blocks of the left-out run ``start..end - 1``. When the previous call had a
        run from ``start`` too, its leading blocks that are complete and settled are taken
        with their joined targets as they are (a run that grows at every call, the history
        a slice leaves out, makes only its last block again)."""
        previous = self._runs.get(start) if settled else None
        kept: list[Block] = []
        ends: list[int] = []
        offsets: list[int] = []
        joined: list[Target] = []
        at = start
        if previous is not None:
            k = min(bisect_right(previous.ends, min(end, settled)), previous.whole)
            while k and previous.ends[k - 1] % HANDLE_BLOCK and previous.ends[k - 1] != end:
                k -= 1  # a block that ended with the old run is longer now
            if k and not _reports(reported, start, previous.ends[k - 1]):
                kept, ends = previous.blocks[:k], previous.ends[:k]
                offsets = previous.offsets[:k]
                # The previous run's list, cut where its kept blocks end: no copy of what
                # stays (the memo holds one call's worth, and a report has its own tuple).
                joined, at = previous.joined, ends[-1]
                del joined[offsets[-1]:]
        new = [self.block(view, a, b, settled, reported, counter) for a, b in _blocks(at, end)]
        whole = len(kept)  # the kept blocks are whole: then the new ones, up to one not
        for b in new:
            if not b.whole:
                break
            whole += 1
        for b in new:
            ends.append(b.end)
            offsets.append((offsets[-1] if offsets else 0) + len(b.dropped))
        for b in new:
            joined += b.dropped
        return _Run([*kept, *new], ends, offsets, joined, whole)

    def keep(self, runs: dict[int, _Run]) -> None:
        """Keep this call's runs (the memo holds one call's worth)."""
        self._runs = runs
        self.blocks = [b for run in runs.values() for b in run.blocks]
        self._by_range = {(b.start, b.end): b for b in self.blocks}


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
        skip: Collection[int] = handled | {i for i in left if is_ledger(view[i])}
        runs = _runs(left, skip)
    else:
        runs = _gaps(len(view), {*kept, *handled})
    reported = sorted({t.index for t in targets})
    # One handle per block of a run, computed once: a run may hold thousands of messages.
    # Blocks end at fixed positions, so a run that grows at every call (the history a
    # slice leaves out) keeps the handles of its full blocks and only its last block is
    # new; so do the block's "dropped" targets.
    made = {start: memo.run(view, start, end, settled, reported, counter)
            for start, end in runs}
    memo.keep(made)
    blocks = memo.blocks
    if not blocks:
        return tuple(targets)
    starts = [b.start for b in blocks]

    def block_of(i: int) -> Block | None:
        k = bisect_right(starts, i) - 1
        return blocks[k] if k >= 0 and i < blocks[k].end else None

    done: list[Target] = []
    for t in targets:
        block = block_of(t.index) if t.handle is None else None
        done.append(t if block is None else replace(t, handle=block.handle))
    joined = [run.joined for run in made.values()]
    if not done and len(joined) == 1:
        return tuple(joined[0])
    for part in joined:  # the runs' targets ascend: so do the runs and their blocks
        done += part
    return tuple(done)


def _reports(reported: Sequence[int], start: int, end: int) -> bool:
    """True when one of ``reported`` (sorted) lies in ``start..end - 1``."""
    first = bisect_left(reported, start)
    return first < len(reported) and reported[first] < end


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
