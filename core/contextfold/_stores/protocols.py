"""The store protocols, one per capability, and the search hit they return.

A user's own store implements only the protocols it needs; contextfold's own backends
share ``BaseStore`` (``base.py``). See ``base.py`` for the contract as a whole.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from .._messages.model import Message, Role
from .counts import StoredCounts

__all__ = [
    "BroadcastStore",
    "CountStore",
    "HistoryStore",
    "ReferenceStore",
    "SearchHit",
    "SearchKind",
    "SearchableStore",
    "StateStore",
    "SummaryStore",
    "Tracer",
]

Tracer = Callable[[str, Any], None]
"""Called with ``(sql, parameters)`` before every statement a SQL store runs."""

SearchKind = Literal["messages", "reasoning", "broadcasts"]

@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result, best first in a result list."""

    message: Message
    """The whole stored message."""
    conversation_id: str
    """The conversation it belongs to (the swarm id for ``search_broadcasts`` hits)."""
    position: int
    """Its position in that conversation (0-based, gap-free until ``clear``)."""
    role: Role
    """The message's role."""
    source: str | None
    """The message's source (``direct``, ``broadcast``...)."""
    snippet: str
    """The matching passage, matched words in ``[brackets]``."""
    created_at: datetime | None
    """When the message was created, when known."""
    score: float
    """Relevance; higher is better. Comparable only within one result list."""
    handle: str
    """Opaque handle: ``store.get_message(handle)`` returns the whole message."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe view for tool results."""
        return {
            "handle": self.handle,
            "conversation_id": self.conversation_id,
            "position": self.position,
            "role": self.role,
            "source": self.source,
            "sender_id": self.message.sender_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "snippet": self.snippet,
            "score": round(self.score, 6),
        }


@runtime_checkable
class HistoryStore(Protocol):
    """The full history of conversations, in order."""

    def append(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages`` in one transaction; durable when it returns."""
        ...

    def load(self, conversation_id: str) -> list[Message]:
        """Every message of the conversation, oldest first."""
        ...

    def load_recent(self, conversation_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages, oldest first."""
        ...

    def system_message(self, conversation_id: str) -> Message | None:
        """The first system (or developer) message, or ``None``."""
        ...

    def clear(self, conversation_id: str) -> None:
        """Delete the conversation's messages and references."""
        ...


@runtime_checkable
class SearchableStore(Protocol):
    """Full-text search over one conversation's messages and reasoning."""

    def search_messages(
        self, conversation_id: str, query: str, limit: int = 20
    ) -> list[SearchHit]:
        """Messages whose text or tool calls contain every word of ``query``, best first."""
        ...

    def search_reasoning(
        self, conversation_id: str, query: str, limit: int = 20
    ) -> list[SearchHit]:
        """Messages whose reasoning contains every word of ``query``, best first."""
        ...

    def get_message(self, handle: str, *, scope: Collection[str] | None = None) -> Message | None:
        """The message behind a search hit's handle (``None`` if unknown or out of scope)."""
        ...


@runtime_checkable
class BroadcastStore(Protocol):
    """Swarm broadcasts with the commander fallback of the message-format guarantee."""

    def join_swarm(self, conversation_id: str, swarm_id: str) -> None:
        """Record that the conversation belongs to the swarm."""
        ...

    def broadcast(
        self, swarm_id: str, content: str, *, sender_id: str = "",
        recipients: Sequence[str] | None = None,
    ) -> Message:
        """Store a broadcast and append it to each recipient's history; return it."""
        ...

    def most_recent_broadcast(
        self, conversation_id: str, swarm_id: str | None = None
    ) -> Message | None:
        """This conversation's latest broadcast, else its swarm's latest commander one."""
        ...

    def search_broadcasts(self, swarm_id: str, query: str, limit: int = 20) -> list[SearchHit]:
        """The swarm's broadcasts containing every word of ``query``, best first."""
        ...


@runtime_checkable
class SummaryStore(Protocol):
    """A persistent key/value cache of summaries (keys are content hashes)."""

    def get_summary(self, key: str) -> str | None:
        """The summary stored under ``key``, or ``None``."""
        ...

    def put_summary(self, key: str, text: str) -> None:
        """Store (or replace) the summary under ``key``."""
        ...


@runtime_checkable
class CountStore(Protocol):
    """Token counts kept with the stored messages, per counter name, so that a process
    resuming a conversation does not tokenize its history again."""

    def put_counts(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Keep the counts ``messages`` hold with the stored messages of the same id and
        content (none for a message the conversation does not hold as it is)."""
        ...

    def stored_counts(self, conversation_id: str) -> StoredCounts:
        """The stored message ids and the counts kept for them."""
        ...


@runtime_checkable
class StateStore(Protocol):
    """Keeps a conversation's compaction state beside its messages (an opaque text the
    Compactor writes and reads back), so any process resumes the conversation where the
    last one left it."""

    def get_state(self, conversation_id: str) -> tuple[int, str] | None:
        """The conversation's state and its version (the number of writes), or ``None``."""
        ...

    def put_state(self, conversation_id: str, state: str, *, after: int) -> bool:
        """Write ``state`` as version ``after + 1`` if the stored version is still
        ``after`` (0: none stored); ``False`` when another writer came first."""
        ...


@runtime_checkable
class ReferenceStore(Protocol):
    """Original texts behind handles, scoped to a conversation."""

    def put_original(self, conversation_id: str, handle: str, text: str) -> None:
        """Store (or replace) the original text behind ``handle``."""
        ...

    def get_original(self, conversation_id: str, handle: str) -> str | None:
        """The text behind ``handle`` in this conversation; ``None`` elsewhere."""
        ...
