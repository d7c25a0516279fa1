"""Token counts kept with stored messages, per counter name.

A counter caches each message's count on the message itself (``Message.derived`` under
``"tokens:" + counter.name``). A store keeps those counts beside the messages it holds, so
a process that resumes a conversation reads them back instead of tokenizing its history
again:

- ``append`` keeps the counts each message holds (counting it first with the ``counter``
  the caller gives, if any);
- ``put_counts`` keeps counts made later (a compaction counts messages after they were
  stored), for the stored messages of the same id *and content*: a message of that id
  whose content differs (a framework that replaced it) gets none;
- ``load`` and ``load_recent`` return messages whose counts are already cached, and
  ``stored_counts`` returns them without decoding the messages
  ([`StoredCounts`][contextfold.stores.StoredCounts]).

A count is only reused for the content it was made from and under the name of the counter
that made it. Content: each stored row keeps the digest of its body (the message's JSON
text, `stored_digest`); a count added later is kept only
for a row whose digest is the given message's, and a resumed message takes only the counts
of a row of its id and digest. Name: the counter's name says its encoding and any factor
(``tiktoken:o200k_base``, ``approx:claude=cl100k_base*1.3``); a counter that counts
differently must have another name.

Counts are metadata about the stored content, not content: keeping them changes no stored
message, and the history reads back exactly as it was appended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._messages.model import Message
from ..errors import CorruptRowError
from .codec import body_digest, decode_row, stored_digest
from .migrations import T

__all__ = [
    "COUNT_PREFIX", "StoredCounts", "check_count", "digests_of", "held_counts",
    "restore_counts", "restore_rows", "stored_counts_of",
]

COUNT_PREFIX = "tokens:"
"""The ``Message.derived`` key of a count is this prefix and the counter's name."""


def _is_count(value: object) -> bool:
    return value.__class__ is int and value >= 0  # type: ignore[operator]


def held_counts(message: Message) -> dict[str, int]:
    """The counts cached on ``message``: counter name -> tokens."""
    memo: dict[str, Any] | None = message.__dict__.get("_derived")
    if not memo:
        return {}
    n = len(COUNT_PREFIX)
    return {key[n:]: value for key, value in memo.items()
            if key.startswith(COUNT_PREFIX) and _is_count(value)}


def restore_counts(message: Message, counts: Mapping[str, int]) -> None:
    """Cache ``counts`` on ``message`` as its counters would (a count it holds stays)."""
    for name, tokens in counts.items():
        message.derived(COUNT_PREFIX + name, _known(tokens))


def _known(tokens: int) -> Callable[[Message], int]:
    return lambda _message: tokens


def check_count(table: str, row_id: object, counter: object, tokens: object) -> tuple[str, int]:
    """A kept count read back; ``CorruptRowError`` naming the table and the message's row
    when it is not a non-empty counter name and a whole number of tokens >= 0."""
    if not isinstance(counter, str) or not counter:
        raise CorruptRowError(f"row {row_id} of table {table} cannot be decoded: a counter "
                              f"name must be a non-empty string, got {counter!r}")
    if not _is_count(tokens):
        raise CorruptRowError(f"row {row_id} of table {table} cannot be decoded: the count "
                              f"of {counter!r} must be an integer >= 0, got {tokens!r}")
    return counter, tokens  # type: ignore[return-value]


class StoredCounts:
    """What a store holds of one conversation, read without decoding its messages: the id
    of every stored message, and the counts kept for each stored content.

    Args:
        ids: every stored message id.
        counts: ``(message id, digest of the stored body, counts)`` for each stored message
            with counts.
    """

    __slots__ = ("_counts", "ids")

    def __init__(self, ids: Iterable[str],
                 counts: Iterable[tuple[str, str, Mapping[str, int]]] = ()) -> None:
        self.ids: frozenset[str] = frozenset(ids)
        """Every stored message id of the conversation."""
        self._counts: dict[str, dict[str, dict[str, int]]] = {}
        for message_id, digest, kept in counts:
            if kept:
                self._counts.setdefault(message_id, {}).setdefault(digest, {}).update(kept)

    @classmethod
    def of_messages(cls, messages: Sequence[Message]) -> StoredCounts:
        """From loaded messages (a store that keeps no counts of its own: the counts they
        hold, if any)."""
        return cls((m.id for m in messages),
                   ((m.id, digest, held) for m in messages
                    if (held := held_counts(m)) and (digest := stored_digest(m)) is not None))

    def __len__(self) -> int:
        """Stored messages that have counts kept."""
        return sum(len(by_content) for by_content in self._counts.values())

    def counts_of(self, message: Message) -> Mapping[str, int]:
        """The counts kept for ``message``'s id and content (empty when there are none);
        its content is checked only when its id has counts."""
        by_content = self._counts.get(message.id)
        if by_content is None:
            return {}
        digest = stored_digest(message)
        return {} if digest is None else by_content.get(digest, {})

    def fill(self, messages: Iterable[Message]) -> int:
        """Cache the kept counts on each of ``messages`` that has some; how many had."""
        filled = 0
        for message in messages:
            kept = self.counts_of(message)
            if kept:
                restore_counts(message, kept)
                filled += 1
        return filled


def restore_rows(table: str, messages: Mapping[Any, Message],
                 rows: Iterable[Sequence[Any]]) -> None:
    """Cache the kept counts ``rows`` hold (message row id, counter name, tokens) on the
    messages of those rows (``messages`` by row id); ``table`` names the counts' table
    in a ``CorruptRowError``."""
    for row_id, counter, tokens in rows:
        message = messages.get(row_id)
        if message is not None:
            name, n = check_count(table, row_id, counter, tokens)
            message.derived(COUNT_PREFIX + name, _known(n))


def stored_counts_of(rows: Iterable[Sequence[Any]]) -> StoredCounts:
    """[`StoredCounts`][contextfold.stores.StoredCounts] from rows of (message row id, message id,
    digest, counter name or ``None``, tokens, body or ``None``). A body is read only for the rows
    whose id column may differ from the message's id (an id the column could not hold as it is),
    so that every id is exact."""
    ids: set[str] = set()
    kept: dict[Any, tuple[str, str, dict[str, int]]] = {}
    for row_id, column_id, digest, counter, tokens, body in rows:
        message_id = column_id if body is None else decode_row(T.messages, row_id, body).id
        ids.add(message_id)
        if counter is not None and isinstance(digest, str):
            name, n = check_count(T.token_counts, row_id, counter, tokens)
            kept.setdefault(row_id, (message_id, digest, {}))[2][name] = n
    return StoredCounts(ids, kept.values())


def digests_of(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, str]]:
    """``(row id, digest)`` for rows of ``(row id, body)`` stored without their digest (by
    schema 1)."""
    out = []
    for row_id, body in rows:
        if not isinstance(body, str):
            raise CorruptRowError(f"row {row_id} of table {T.messages} cannot be decoded: "
                                  f"body must be text, got {type(body).__name__}")
        out.append((row_id, body_digest(body)))
    return out
