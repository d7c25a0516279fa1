"""``MemoryStore``: the whole contract in process memory, for tests and short scripts.

Nothing survives the process. The store keeps its own copy of each appended message and
loads copies of it, so the caller's objects and the store's are never the same: the copy
holds the token counts the message held when appended, and those kept later
(``put_counts``); counting a loaded message keeps nothing, as with the SQL stores.

Search has the stores' one semantics: every whitespace-separated term of the query must
appear as a phrase of its words, each word matched by its Porter stem (as SQLite's FTS5
``porter`` tokenizer and PostgreSQL's English configuration match them), ranked with BM25
over the stems.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import snowballstemmer

from .._messages.model import Message, _with_id
from .base import BaseStore, SearchHit, SearchKind
from .codec import encode, search_text, stored_digest
from .counts import StoredCounts, restore_counts
from .snippet import make_snippet, snippet_pattern

__all__ = ["MemoryStore"]

_WORDS = re.compile(r"\w+", re.UNICODE)
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class _Row:
    row_id: int
    owner: str
    position: int
    message: Message


class MemoryStore(BaseStore):
    """An in-memory store implementing every capability; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rows: dict[str, list[_Row]] = {}
        self._by_message: dict[tuple[str, str], list[_Row]] = {}  # (conversation, message id)
        self._next_position: dict[str, int] = {}
        self._broadcasts: dict[str, list[_Row]] = {}
        self._by_id: dict[tuple[str, int], _Row] = {}
        self._members: dict[str, dict[str, None]] = {}
        self._summaries: dict[str, str] = {}
        self._originals: dict[tuple[str, str], str] = {}
        self._states: dict[str, tuple[int, str]] = {}
        self._next_row = 1

    def __repr__(self) -> str:
        return f"MemoryStore(conversations={len(self._rows)})"

    # -- history --------------------------------------------------------------------------

    def _append(self, conversation_id: str, messages: list[Message]) -> None:
        for message in messages:
            encode(message)  # refuse what a database could not store, like the SQL stores
        with self._lock:
            rows = self._rows.setdefault(conversation_id, [])
            position = self._next_position.get(conversation_id, 0)
            for message in messages:
                row = _Row(self._next_row, conversation_id, position, _copy(message))
                rows.append(row)
                self._by_message.setdefault((conversation_id, message.id), []).append(row)
                self._by_id["m", row.row_id] = row
                self._next_row += 1
                position += 1
            self._next_position[conversation_id] = position

    def _load(self, conversation_id: str, limit: int | None) -> list[Message]:
        with self._lock:
            rows = self._rows.get(conversation_id, [])
            chosen = rows if limit is None else rows[-limit:]
            return [_copy(r.message) for r in chosen]

    def _put_counts(self, conversation_id: str,
                    batch: list[tuple[Message, dict[str, int]]]) -> None:
        with self._lock:
            for message, held in batch:
                digest = stored_digest(message)
                for row in self._by_message.get((conversation_id, message.id), ()):
                    if digest is not None and stored_digest(row.message) == digest:
                        restore_counts(row.message, held)

    def _stored_counts(self, conversation_id: str) -> StoredCounts:
        with self._lock:
            messages = [r.message for r in self._rows.get(conversation_id, [])]
        return StoredCounts.of_messages(messages)

    def _system_message(self, conversation_id: str) -> Message | None:
        with self._lock:
            for row in self._rows.get(conversation_id, []):
                if row.message.role in _SYSTEM_ROLES:
                    return _copy(row.message)
        return None

    def _clear(self, conversation_id: str) -> None:
        with self._lock:
            for row in self._rows.pop(conversation_id, []):
                del self._by_id["m", row.row_id]
                self._by_message.pop((conversation_id, row.message.id), None)
            self._next_position.pop(conversation_id, None)
            for key in [k for k in self._originals if k[0] == conversation_id]:
                del self._originals[key]
            self._states.pop(conversation_id, None)

    # -- search -----------------------------------------------------------------------------

    def _search(
        self, kind: SearchKind, owner: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        with self._lock:
            rows = list(self._broadcasts.get(owner, []) if kind == "broadcasts"
                        else self._rows.get(owner, []))
        texts = [_text(kind, r.message) for r in rows]
        scored = _bm25(texts, [_stems(t) for t in terms])
        prefix = "b" if kind == "broadcasts" else "m"
        pattern = snippet_pattern(terms)
        hits = [
            SearchHit(
                message=_copy(rows[i].message), conversation_id=owner, position=rows[i].position,
                role=rows[i].message.role, source=rows[i].message.source,
                snippet=make_snippet(texts[i], pattern), created_at=rows[i].message.created_at,
                score=score, handle=f"{prefix}:{rows[i].row_id}",
            )
            for i, score in scored
        ]
        hits.sort(key=lambda h: (-h.score, -h.position))
        return hits[:limit]

    def _fetch(self, kind: Literal["m", "b"], row_id: int) -> tuple[str, Message] | None:
        with self._lock:
            row = self._by_id.get((kind, row_id))
        return None if row is None else (row.owner, _copy(row.message))

    # -- broadcasts -------------------------------------------------------------------------

    def _join_swarm(self, conversation_id: str, swarm_id: str) -> None:
        with self._lock:
            self._members.setdefault(swarm_id, {})[conversation_id] = None

    def _swarm_members(self, swarm_id: str) -> list[str]:
        with self._lock:
            return list(self._members.get(swarm_id, {}))

    def _swarms_of(self, conversation_id: str) -> list[str]:
        with self._lock:
            return [s for s, members in self._members.items() if conversation_id in members]

    def _broadcast(self, swarm_id: str, message: Message, recipients: list[str]) -> None:
        with self._lock:
            log = self._broadcasts.setdefault(swarm_id, [])
            row = _Row(self._next_row, swarm_id, len(log), message)
            self._next_row += 1
            log.append(row)
            self._by_id["b", row.row_id] = row
            for conversation_id in recipients:
                self._join_swarm(conversation_id, swarm_id)
                self._append(conversation_id, [message])

    def _latest_broadcast(self, conversation_id: str) -> Message | None:
        with self._lock:
            for row in reversed(self._rows.get(conversation_id, [])):
                if row.message.source == "broadcast":
                    return _copy(row.message)
        return None

    def _latest_commander_broadcast(self, swarm_ids: Iterable[str]) -> Message | None:
        with self._lock:
            candidates = [
                row for swarm in swarm_ids for row in self._broadcasts.get(swarm, [])
                if row.message.sender_id == ""
            ]
        return max(candidates, key=lambda r: r.row_id).message if candidates else None

    # -- summaries and originals ------------------------------------------------------------

    def _get_summary(self, key: str) -> str | None:
        return self._summaries.get(key)

    def _get_state(self, conversation_id: str) -> tuple[int, str] | None:
        return self._states.get(conversation_id)

    def _put_state(self, conversation_id: str, state: str, after: int) -> bool:
        with self._lock:
            held = self._states.get(conversation_id)
            if (held[0] if held is not None else 0) != after:
                return False
            self._states[conversation_id] = (after + 1, state)
            return True

    def _put_summary(self, key: str, text: str) -> None:
        with self._lock:
            self._summaries[key] = text

    def _put_original(self, conversation_id: str, handle: str, text: str) -> None:
        with self._lock:
            self._originals[conversation_id, handle] = text

    def _get_original(self, conversation_id: str, handle: str) -> str | None:
        return self._originals.get((conversation_id, handle))


def _copy(message: Message) -> Message:
    """An equal message with the same id and what is cached on it, as another object: the
    store's messages and its callers' are never the same objects."""
    return _with_id(message, message.id)


def _text(kind: SearchKind, message: Message) -> str:
    if kind == "reasoning":
        return message.reasoning or ""
    return message.text if kind == "broadcasts" else search_text(message)


_STEMMER = snowballstemmer.stemmer("porter")
_STEM_LOCK = threading.Lock()  # a snowball stemmer keeps state between calls


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    folded = "".join(c for c in unicodedata.normalize("NFKD", word.lower())
                     if not unicodedata.combining(c))  # as FTS5's remove_diacritics
    with _STEM_LOCK:
        return str(_STEMMER.stemWord(folded))


def _stems(text: str) -> list[str]:
    return [_stem(w) for w in _WORDS.findall(text)]


def _has_phrase(tokens: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(tokens[k:k + n] == phrase for k in range(len(tokens) - n + 1)
               if tokens[k] == phrase[0])


def _bm25(texts: list[str], phrases: list[list[str]], k1: float = 1.2, b: float = 0.75
          ) -> list[tuple[int, float]]:
    """``(index, score)`` of the texts holding every phrase (of stems), scored with BM25
    over the phrases' stems."""
    phrases = [p for p in phrases if p]
    if not phrases:
        return []
    tokens = [_stems(t) for t in texts]
    docs = [Counter(d) for d in tokens]
    lengths = [len(d) for d in tokens]
    average = (sum(lengths) / len(docs)) if docs else 0.0
    wanted = {w for p in phrases for w in p}
    frequency = {w: sum(1 for d in docs if w in d) for w in wanted}
    out = []
    for i, doc in enumerate(docs):
        if not all(w in doc for w in wanted):
            continue
        if not all(len(p) == 1 or _has_phrase(tokens[i], p) for p in phrases):
            continue
        score = 0.0
        for w in wanted:
            idf = math.log(1 + (len(docs) - frequency[w] + 0.5) / (frequency[w] + 0.5))
            tf = doc[w]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / (average or 1)))
        out.append((i, score))
    return out
