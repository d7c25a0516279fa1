"""The compactor's books: what each pass leaves behind besides its messages.

The handles it gave to what the policy left out (runs of left-out messages share one per
block), the originals kept behind them (in the store or the compactor's cache, each kept
once), and the figures of the report: the usage breakdown and how much of the previous
request this one repeats (the cached prefix).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Generic, Protocol, TypeVar

from .._contract.policy import CompactionContext, ConversationState, PolicyOutcome, Target
from .._contract.report import on_read
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, _shared_prefix
from .._counting.usage import usage_of
from .._lossless.handles import Block, HandleMemo, with_handles
from .._lossless.originals import persist_originals
from .._messages.model import Message
from .._policies.learning import learned_in, learning_of
from .._stores.protocols import HistoryStore
from .._stores.reference_cache import ReferenceCache
from .rebuild import RebuildMemo

__all__ = ["Books", "BooksOwner", "Once", "counted_targets", "shared_prefix"]

T = TypeVar("T")

_KEPT_HANDLES = 100_000  # handles whose originals the books remember having kept


class BooksOwner(Protocol):
    """What the books read of the compactor they keep, at every call (the compactor's
    attributes may be set anew between calls)."""

    counter: TokenCounter
    budget: Budget
    store: HistoryStore | None
    conversation_id: str | None
    references: ReferenceCache

    @property
    def state(self) -> ConversationState:
        """The conversation's state (what it learned from read-backs)."""
        ...


class Books:
    """One compactor's books: the handles it gave and the originals it kept.

    Args:
        owner: the compactor whose store, cache, counter and budget the books use.
    """

    def __init__(self, owner: BooksOwner) -> None:
        self._owner = owner
        self.kept_handles: set[str] = set()
        """Handles whose originals were kept (a handle is a content hash: kept once)."""
        self.handles = HandleMemo()
        """The handles of left-out runs, by block, across calls."""

    def usage(self, out: Sequence[Message], total: int, fixed: int) -> dict[str, int | bool]:
        """The usage breakdown of an output whose total is known."""
        owner = self._owner
        return usage_of(out, counter=owner.counter, budget=owner.budget, tool_tokens=fixed,
                        total=total).as_dict()

    def cached_prefix(
        self, previous: Sequence[Message], out: Sequence[Message], fixed: int
    ) -> dict[str, int]:
        """How much of the previous request this one repeats from its start (what a
        provider's prompt cache can reuse): messages, and their tokens with the tools and
        other fixed parts sent before them."""
        k = shared_prefix(previous, out)
        tokens = self._owner.counter.count_messages(list(out[:k])) + fixed if k else 0
        return {"messages": k, "tokens": tokens, "previous_messages": len(previous)}

    def with_handles(
        self, view: list[Message], out: list[Message], targets: tuple[Target, ...],
        context: CompactionContext, rebuild: RebuildMemo,
    ) -> tuple[tuple[Target, ...], Sequence[Block]]:
        """The targets with a handle for everything left out, and the blocks of left-out
        runs among them. In a rebuild's chain the left-out positions come from the
        rebuild memory, and blocks the memo made in the chain are taken as they are."""
        kept = settled = None
        if context.lineage is not None:
            kept = rebuild.kept(view, out)
            settled = len(view) if rebuild.handles_chained else 0
            rebuild.handles_chained = True
        done = with_handles(view, out, targets, self._owner.counter, self.handles, kept=kept,
                            settled=settled or 0)
        return done, self.handles.blocks

    def keep_originals(
        self, view: Sequence[Message], targets: Sequence[Target], blocks: Sequence[Block],
        settled: int,
    ) -> dict[str, Any]:
        """Keep the originals behind the targets' handles; the report's figures."""
        if len(self.kept_handles) > _KEPT_HANDLES:
            self.kept_handles.clear()  # bounded; at worst an original is kept again
        # The blocks' "dropped" targets close the list: they are read block by block.
        own = targets[: len(targets) - sum(len(b.dropped) for b in blocks)]
        owner = self._owner
        kept = persist_originals(
            view, own, store=owner.store, cache=owner.references,
            conversation_id=owner.conversation_id, learning=learning_of(owner.state),
            kept=self.kept_handles, blocks=blocks, settled=settled,
        )
        learned = learned_in(owner.state)
        return {**({"references": kept} if kept else {}),
                **({"learned": learned.as_dict()} if learned is not None else {})}

    def handled_later(
        self, view: list[Message], out: list[Message], outcome: PolicyOutcome,
        figures: dict[str, Any], usage: dict[str, Any], cached: dict[str, int],
    ) -> tuple[tuple[Target, ...], dict[str, Any]]:
        """The report's targets and details of a pass that decided from bounds and keeps
        originals in memory, made when first read: the handles of what the policy left out
        without one, and their originals, are made then (only the report can name them:
        nothing in view does); the originals behind the policy's own handles, which the
        model may read at once, are kept now."""
        given = outcome.targets
        self.keep_originals(view, [t for t in given if t.handle], (), 0)
        view, out = list(view), list(out)  # snapshots: the caller may change its lists
        owner = self._owner
        learning, known = learning_of(owner.state), learned_in(owner.state)
        learned = {"learned": known.as_dict()} if known is not None else {}  # as of now
        counter, kept = owner.counter, self.kept_handles
        store, cache, conversation_id = owner.store, owner.references, owner.conversation_id

        def complete() -> tuple[tuple[Target, ...], dict[str, Any]]:
            targets = with_handles(view, out, given, counter, HandleMemo())
            references = persist_originals(
                view, targets, store=store, cache=cache, conversation_id=conversation_id,
                learning=learning, kept=kept)
            return counted_targets(targets, view, counter), {
                **({"references": references} if references else {}),
                **learned}

        made = Once(complete)
        return on_read(lambda: made()[0]), on_read(lambda: {
            **outcome.details, **figures, **made()[1], "usage": usage, "cached_prefix": cached})


def shared_prefix(previous: Sequence[Message], out: Sequence[Message]) -> int:
    """How many leading messages of ``out`` repeat ``previous`` (the previous request)."""
    k = _shared_prefix(previous, out)
    while k < min(len(previous), len(out)) and previous[k] == out[k]:
        k += 1  # an equal message is the same bytes on the wire
    return k


def counted_targets(
    targets: tuple[Target, ...], view: Sequence[Message], counter: TokenCounter
) -> tuple[Target, ...]:
    """``targets`` with the exact count of each original: a policy that decided from bounds
    may have given a message nothing counted its bound."""
    count = counter.count_message
    return tuple(
        t if not 0 <= t.index < len(view) or (n := count(view[t.index])) == t.original_tokens
        else replace(t, original_tokens=n)
        for t in targets)


class Once(Generic[T]):
    """A value computed on the first call and kept."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute: Callable[[], T] | None = compute
        self._value: T | None = None

    def __call__(self) -> T:
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value  # type: ignore[return-value]  # set on the first call
