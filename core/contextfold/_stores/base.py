"""The store contract: small protocols by capability, and the ABC our backends share.

A history store keeps every message of every conversation, in order, forever (until
``clear``). Compaction only changes what the model sees; the store is where the agent
finds what compaction left out (the loop-slice design: "full memory in SQLite").

Capabilities are separate protocols so a user's own store needs only the part it uses:

- ``HistoryStore``: ``append``, ``load``, ``load_recent``, ``system_message``, ``clear``.
- ``SearchableStore``: ``search_messages``, ``search_reasoning``, ``get_message``.
- ``BroadcastStore``: ``broadcast``, ``most_recent_broadcast``, ``search_broadcasts``,
  ``join_swarm``.
- ``SummaryStore``: ``get_summary``, ``put_summary`` (the compactor's summary cache).
- ``ReferenceStore``: ``put_original``, ``get_original`` (full text behind a handle).
- ``CountStore``: ``put_counts``, ``stored_counts`` (token counts kept with the messages,
  so a resumed conversation is not tokenized again; see ``_counts.py``).
- ``StateStore``: ``get_state``, ``put_state`` (the compaction state beside the messages,
  written only over the version the writer read, so any process resumes the conversation).

Broadcasts are stored twice on purpose: once in the swarm's broadcast log (so
``search_broadcasts`` and the commander fallback see them) and once in each recipient's own
history as a user message with ``source="broadcast"`` (so each agent's memory holds what it
was told, in order). With ``recipients=None`` the recipients are the conversations that
joined the swarm with ``join_swarm``.

Isolation: every read names its conversation (or swarm) and sees only that one's rows.
``get_message`` takes an optional ``scope``; the search tools always pass one, so a handle
of another conversation reads as ``None`` unless that conversation was granted.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal

from .._messages.model import Message
from ..errors import ConfigurationError
from .counts import StoredCounts, held_counts
from .protocols import (
    BroadcastStore,
    CountStore,
    HistoryStore,
    ReferenceStore,
    SearchableStore,
    SearchHit,
    SearchKind,
    SummaryStore,
    Tracer,
)

if TYPE_CHECKING:
    from .._counting.counters import TokenCounter

__all__ = [
    "BaseStore",
    "BroadcastStore",
    "CountStore",
    "HistoryStore",
    "ReferenceStore",
    "SearchHit",
    "SearchKind",
    "SearchableStore",
    "SummaryStore",
    "Tracer",
    "parse_handle",
    "query_terms",
]

_HANDLE = re.compile(r"^([mb]):([0-9]{1,19})$")
_TERM = re.compile(r"\S+")
_WORD = re.compile(r"\w", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """The search terms of a user query: whitespace-separated chunks holding a word character.

    Every chunk is searched for literally (as a phrase of its words); punctuation-only
    chunks are dropped, so operators and SQL in a query are plain text.
    """
    if not isinstance(query, str):
        raise ConfigurationError(f"query must be a string, got {type(query).__name__}")
    return [t for t in _TERM.findall(query.replace("\x00", " ")) if _WORD.search(t)]


def parse_handle(handle: str) -> tuple[Literal["m", "b"], int] | None:
    """``(kind, row id)`` for a handle made by a store, else ``None``."""
    match = _HANDLE.match(handle) if isinstance(handle, str) else None
    if match is None:
        return None
    return ("m" if match.group(1) == "m" else "b"), int(match.group(2))


def _check_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
    return limit


class BaseStore(ABC):
    """Shared logic of contextfold's own stores; backends implement the ``_`` primitives.

    Argument checking, query parsing, handle scoping, the broadcast fan-out and the
    the message-format guarantee fallback live here once, so every backend behaves the same.
    """

    # -- HistoryStore -------------------------------------------------------------------

    def append(
        self, conversation_id: str, messages: Sequence[Message], *,
        counter: TokenCounter | None = None,
    ) -> None:
        """Append ``messages`` in one transaction; durable when it returns.

        The token counts each message holds are kept with it (see
        [`put_counts`][contextfold.stores.BaseStore.put_counts]); with ``counter``, each message is
        counted first (its count is cached on it, as counting does).
        """
        _check_id("conversation_id", conversation_id)
        batch = _checked_messages(messages)
        if counter is not None:
            for message in batch:
                counter.count_message(message)
        if batch:
            self._append(conversation_id, batch)

    def load(self, conversation_id: str) -> list[Message]:
        """Every message of the conversation, oldest first, with the token counts kept for
        them already cached on them (counting those costs nothing)."""
        return self._load(_check_id("conversation_id", conversation_id), None)

    def load_recent(self, conversation_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages, oldest first (with their kept counts, as ``load``)."""
        _check_id("conversation_id", conversation_id)
        if _check_limit(limit) == 0:
            return []
        return self._load(conversation_id, limit)

    def system_message(self, conversation_id: str) -> Message | None:
        """The first message with role ``system`` or ``developer``, or ``None``."""
        return self._system_message(_check_id("conversation_id", conversation_id))

    def clear(self, conversation_id: str) -> None:
        """Delete the conversation's messages and stored originals."""
        self._clear(_check_id("conversation_id", conversation_id))

    # -- CountStore ---------------------------------------------------------------------

    def put_counts(
        self, conversation_id: str, messages: Sequence[Message], *,
        counter: TokenCounter | None = None,
    ) -> None:
        """Keep the token counts ``messages`` hold (counted with ``counter`` first when
        given) with the conversation's stored messages of the same id and content.

        A message the conversation does not hold, or holds with other content (checked by
        the digest of its stored form), gets none; a count already kept under a counter
        name stays. Counts are a cache: the stored messages are unchanged, and the SQL
        stores commit them without waiting for the disk (a power cut may lose the last
        ones: they are then counted again).
        """
        _check_id("conversation_id", conversation_id)
        batch = _checked_messages(messages)
        if counter is not None:
            for message in batch:
                counter.count_message(message)
        kept = [(m, held) for m in batch if (held := held_counts(m))]
        if kept:
            self._put_counts(conversation_id, kept)

    def stored_counts(self, conversation_id: str) -> StoredCounts:
        """The conversation's stored message ids and the counts kept for them, without
        decoding its messages (what a resumed call loop needs)."""
        return self._stored_counts(_check_id("conversation_id", conversation_id))

    # -- SearchableStore ----------------------------------------------------------------

    def search_messages(
        self, conversation_id: str, query: str, limit: int = 20
    ) -> list[SearchHit]:
        """Messages whose text or tool calls contain every term of ``query``, best first."""
        return self._run_search("messages", conversation_id, query, limit)

    def search_reasoning(
        self, conversation_id: str, query: str, limit: int = 20
    ) -> list[SearchHit]:
        """Messages whose reasoning contains every term of ``query``, best first."""
        return self._run_search("reasoning", conversation_id, query, limit)

    def get_message(self, handle: str, *, scope: Collection[str] | None = None) -> Message | None:
        """The message behind ``handle``; ``None`` if unknown or its owner is not in ``scope``.

        The owner is the conversation for message hits and the swarm for broadcast hits.
        """
        parsed = parse_handle(handle)
        if parsed is None:
            return None
        found = self._fetch(*parsed)
        if found is None:
            return None
        owner, message = found
        if scope is not None and owner not in scope:
            return None
        return message

    def _run_search(
        self, kind: SearchKind, owner: str, query: str, limit: int
    ) -> list[SearchHit]:
        _check_id("swarm_id" if kind == "broadcasts" else "conversation_id", owner)
        terms = query_terms(query)
        if not terms or _check_limit(limit) == 0:
            return []
        return self._search(kind, owner, terms, limit)

    # -- BroadcastStore -----------------------------------------------------------------

    def join_swarm(self, conversation_id: str, swarm_id: str) -> None:
        """Record that the conversation belongs to the swarm (idempotent)."""
        self._join_swarm(_check_id("conversation_id", conversation_id),
                         _check_id("swarm_id", swarm_id))

    def broadcast(
        self, swarm_id: str, content: str, *, sender_id: str = "",
        recipients: Sequence[str] | None = None,
    ) -> Message:
        """Store a broadcast and append it to each recipient's history, in one transaction.

        ``sender_id=""`` marks the commander. ``recipients=None`` means every
        conversation that joined the swarm; explicit recipients join it. Returns the stored
        user message (``source="broadcast"``).
        """
        _check_id("swarm_id", swarm_id)
        if not isinstance(content, str) or not isinstance(sender_id, str):
            raise ConfigurationError("content and sender_id must be strings")
        targets = (
            self._swarm_members(swarm_id) if recipients is None
            else list(dict.fromkeys(_check_id("recipient", r) for r in recipients))
        )
        message = Message(
            role="user", content=content, source="broadcast", sender_id=sender_id,
            created_at=datetime.now(timezone.utc),
        )
        self._broadcast(swarm_id, message, targets)
        return message

    def most_recent_broadcast(
        self, conversation_id: str, swarm_id: str | None = None
    ) -> Message | None:
        """This conversation's latest broadcast, else the latest commander broadcast.

        The fallback looks in ``swarm_id`` when given, else in every swarm the
        conversation joined: a new agent inherits the swarm's current mission.
        """
        _check_id("conversation_id", conversation_id)
        own = self._latest_broadcast(conversation_id)
        if own is not None:
            return own
        swarms = [_check_id("swarm_id", swarm_id)] if swarm_id is not None else \
            self._swarms_of(conversation_id)
        return self._latest_commander_broadcast(swarms) if swarms else None

    def search_broadcasts(self, swarm_id: str, query: str, limit: int = 20) -> list[SearchHit]:
        """The swarm's broadcasts containing every term of ``query``, best first."""
        return self._run_search("broadcasts", swarm_id, query, limit)

    # -- summaries and originals ----------------------------------------------------------

    def get_summary(self, key: str) -> str | None:
        """The summary stored under ``key``, or ``None``."""
        return self._get_summary(_check_id("key", key))

    def put_summary(self, key: str, text: str) -> None:
        """Store (or replace) the summary under ``key``."""
        self._put_summary(_check_id("key", key), _check_text(text))

    def put_original(self, conversation_id: str, handle: str, text: str) -> None:
        """Store (or replace) the original text behind ``handle`` in this conversation."""
        self._put_original(_check_id("conversation_id", conversation_id),
                           _check_id("handle", handle), _check_text(text))

    def get_original(self, conversation_id: str, handle: str) -> str | None:
        """The text behind ``handle`` in this conversation; ``None`` for any other."""
        return self._get_original(_check_id("conversation_id", conversation_id),
                                  _check_id("handle", handle))

    def get_state(self, conversation_id: str) -> tuple[int, str] | None:
        """The conversation's compaction state and its version, or ``None``."""
        return self._get_state(_check_id("conversation_id", conversation_id))

    def put_state(self, conversation_id: str, state: str, *, after: int) -> bool:
        """Write ``state`` as version ``after + 1`` if the stored version is still ``after``
        (0: none stored); ``False`` when another writer came first."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ConfigurationError(f"after must be a version >= 0, got {after!r}")
        return self._put_state(_check_id("conversation_id", conversation_id),
                               _check_text(state), after)

    # -- life cycle ---------------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections. The store is unusable afterwards."""

    def __enter__(self) -> BaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- backend primitives -------------------------------------------------------------

    @abstractmethod
    def _append(self, conversation_id: str, messages: list[Message]) -> None: ...

    @abstractmethod
    def _load(self, conversation_id: str, limit: int | None) -> list[Message]: ...

    @abstractmethod
    def _put_counts(
        self, conversation_id: str, batch: list[tuple[Message, dict[str, int]]]
    ) -> None: ...

    @abstractmethod
    def _stored_counts(self, conversation_id: str) -> StoredCounts: ...

    @abstractmethod
    def _system_message(self, conversation_id: str) -> Message | None: ...

    @abstractmethod
    def _clear(self, conversation_id: str) -> None: ...

    @abstractmethod
    def _search(
        self, kind: SearchKind, owner: str, terms: list[str], limit: int
    ) -> list[SearchHit]: ...

    @abstractmethod
    def _fetch(self, kind: Literal["m", "b"], row_id: int) -> tuple[str, Message] | None: ...

    @abstractmethod
    def _join_swarm(self, conversation_id: str, swarm_id: str) -> None: ...

    @abstractmethod
    def _swarm_members(self, swarm_id: str) -> list[str]: ...

    @abstractmethod
    def _swarms_of(self, conversation_id: str) -> list[str]: ...

    @abstractmethod
    def _broadcast(self, swarm_id: str, message: Message, recipients: list[str]) -> None: ...

    @abstractmethod
    def _latest_broadcast(self, conversation_id: str) -> Message | None: ...

    @abstractmethod
    def _latest_commander_broadcast(self, swarm_ids: Iterable[str]) -> Message | None: ...

    @abstractmethod
    def _get_summary(self, key: str) -> str | None: ...

    @abstractmethod
    def _put_summary(self, key: str, text: str) -> None: ...

    @abstractmethod
    def _put_original(self, conversation_id: str, handle: str, text: str) -> None: ...

    @abstractmethod
    def _get_original(self, conversation_id: str, handle: str) -> str | None: ...

    @abstractmethod
    def _get_state(self, conversation_id: str) -> tuple[int, str] | None: ...

    @abstractmethod
    def _put_state(self, conversation_id: str, state: str, after: int) -> bool: ...


def _checked_messages(messages: Sequence[Message]) -> list[Message]:
    batch = list(messages)
    for i, message in enumerate(batch):
        if not isinstance(message, Message):
            raise ConfigurationError(
                f"messages[{i}] must be a contextfold Message, got {type(message).__name__}"
            )
    return batch


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise ConfigurationError(f"text must be a string, got {type(text).__name__}")
    return text
