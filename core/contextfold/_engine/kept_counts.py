"""A conversation's token counts kept in its store, so a resumed thread is not counted again.

The call loop stores every message a conversation sees before compacting it, and the
compaction counts them afterwards (only those it needs: cheap bounds decide the rest).
[`CountKeeper`][contextfold.integration.CountKeeper] closes the gap on both sides:

- resuming (a new process, a framework checkpoint converted again into new message
  objects with the same stable ids), [`resume`][contextfold.integration.CountKeeper.resume] caches
  on those messages the counts the store kept for their ids and content, so the first compaction
  tokenizes only what was never counted;
- after each compaction, [`flush`][contextfold.integration.CountKeeper.flush] hands the store the
  counts its counter made of stored messages since the last flush (one ``put_counts`` call).

Counts are a cache beside the history: keeping them never changes a stored message. A store
that keeps no counts (a third party's ``HistoryStore`` without ``put_counts``) is read with
``load`` as before, and whatever counts its messages come back with are reused.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._stores.counts import COUNT_PREFIX, StoredCounts
from .._stores.protocols import CountStore, HistoryStore

__all__ = ["CountKeeper"]


class CountKeeper:
    """Keeps one conversation's counts under ``counter`` in ``store`` (see the module
    docstring). Not thread-safe: its owner serialises calls, as the call loop does.

    Args:
        store: the conversation's history store.
        conversation_id: the conversation's key in the store.
        counter: the counter whose counts are kept (the compactor's).
    """

    def __init__(self, store: HistoryStore, conversation_id: str, counter: TokenCounter) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.counter = counter
        self._keeper: CountStore | None = store if isinstance(store, CountStore) else None
        self._pending: list[Message] = []  # stored, their count under ``counter`` not kept

    @property
    def pending(self) -> int:
        """Stored messages whose count under the counter is not kept yet."""
        return len(self._pending)

    def resume(self, messages: Iterable[Message]) -> set[str]:
        """The ids the store holds for the conversation; the counts kept for ``messages``
        (same id, same content) are cached on them."""
        stored = self._stored()
        stored.fill(messages)
        return set(stored.ids)

    def track(self, messages: Iterable[Message]) -> None:
        """``messages`` are stored: keep their counts under the counter once they have
        one (those that hold one were kept with them)."""
        if self._keeper is not None:
            key = COUNT_PREFIX + self.counter.name
            self._pending.extend(m for m in messages if not m.has_derived(key))

    def forget(self) -> None:
        """Track nothing (the conversation was replaced or cleared)."""
        self._pending = []

    def flush(self, *, full: bool = True) -> int:
        """Hand the store the counts made of the tracked messages since the last flush
        ([`take`][contextfold.integration.CountKeeper.take], then
        [`keep`][contextfold.integration.CountKeeper.keep]); how many messages had one."""
        counted = self.take(full=full)
        self.keep(counted)
        return len(counted)

    def take(self, *, full: bool = True) -> list[Message]:
        """The tracked messages counted since the last time, tracked no longer.

        With ``full=False`` only the newest tracked messages are looked at, back to the
        first one still without a count: what a compaction that ran no policy counts (the
        new messages, and the newest uncounted ones while a bound is over the trigger),
        at a cost that does not grow with the history. A later full take finds whatever
        else was counted meanwhile.
        """
        pending = self._pending
        if not pending:
            return []
        key = COUNT_PREFIX + self.counter.name
        if full:
            counted = [m for m in pending if m.has_derived(key)]
            if counted:
                self._pending = [m for m in pending if not m.has_derived(key)]
            return counted
        k = len(pending)
        while k and pending[k - 1].has_derived(key):
            k -= 1
        counted, self._pending = pending[k:], pending[:k]
        return counted

    def keep(self, counted: list[Message]) -> None:
        """Keep the counts of ``counted`` (from [`take`][contextfold.integration.CountKeeper.take])
        in the store, in one call; tracked again if the store fails."""
        if counted and self._keeper is not None:
            try:
                self._keeper.put_counts(self.conversation_id, counted)
            except BaseException:
                self._pending.extend(counted)
                raise

    def _stored(self) -> StoredCounts:
        if self._keeper is not None:
            return self._keeper.stored_counts(self.conversation_id)
        return StoredCounts.of_messages(self.store.load(self.conversation_id))
