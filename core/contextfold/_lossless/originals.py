"""Originals kept behind handles, and read back by the agent.

The *driver* keeps the originals after each pass (`persist_originals`): in the
store when it has ``put_original`` (``MemoryStore``, ``SQLiteStore``, ``PostgresStore``;
kept until the conversation is cleared), else in a bounded in-memory
[`ReferenceCache`][contextfold.stores.ReferenceCache] (the tiered design's LRU), one per
``Compactor`` and one module-level cache for plain ``compact()`` calls. Targets that share a handle
(the members of one summary) are stored together as one transcript.

Expiry without a store: the label then says so ("kept in memory for the last N
originals"), since the capacity is known when the label is written; when an original has
been evicted, [`read_original`][contextfold.stores.read_original] answers that it expired and can no
longer be read back (the cache remembers the handles it evicted), never silently "not found".

The agent reads originals back with the ``read_original`` tool
([`read_original_tool`][contextfold.stores.read_original_tool], wrapped by both adapters): the whole
text, a window (``offset``/``limit`` characters) or the lines matching a regular expression. Reads
are scoped to one conversation: a handle from another conversation reads exactly as an unknown
handle, even from a cache several conversations share (handles are content hashes: any other answer
would confirm a guess about another conversation's content).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, Union, runtime_checkable

import regex

from .._contract.policy import Target
from .._messages.model import Message
from .._stores.protocols import HistoryStore, ReferenceStore
from .._stores.reference_cache import ReferenceCache, default_references
from .._stores.tools import SearchToolSpec
from .handles import Block
from .references import keeps_originals, original_text

__all__ = [
    "READ_ORIGINAL_GUIDANCE",
    "OriginalsHolder",
    "OriginalsSource",
    "ReadBackLog",
    "persist_originals",
    "read_original",
    "read_original_tool",
]


@runtime_checkable
class ReadBackLog(Protocol):
    """What records the originals the agent reads back (importance that learns:
    [`LearnedImportance`][contextfold.policy.LearnedImportance])."""

    def note_handle(self, handle: str, tool_name: str | None) -> None:
        """Remember which tool the original behind ``handle`` came from."""
        ...

    def record_read(self, handle: str, text: str) -> None:
        """The agent read ``text`` of the original behind ``handle``."""
        ...


@runtime_checkable
class OriginalsHolder(Protocol):
    """What reading originals back needs of a compactor: where it keeps them, for which
    conversation, and what records the reads ([`Compactor`][contextfold.Compactor])."""

    @property
    def store(self) -> HistoryStore | None:
        """The history store; it keeps the originals when it is a ``ReferenceStore``."""
        ...

    @property
    def references(self) -> ReferenceCache:
        """Where originals are kept when the store does not keep them."""
        ...

    @property
    def conversation_id(self) -> str | None:
        """The conversation whose originals these are."""
        ...

    @property
    def learning(self) -> ReadBackLog:
        """What records the reads."""
        ...


OriginalsSource = Union[HistoryStore, ReferenceStore, ReferenceCache, OriginalsHolder]
"""Where ``read_original`` looks: a store that keeps originals, a ``ReferenceCache``, or a
``Compactor`` (its store when that keeps originals, else its cache)."""

_EXACT = re.compile(r"^ctx_[0-9a-f]{12}$")
_MAX_LIMIT = 20_000

READ_ORIGINAL_GUIDANCE = (
    "Older content was compacted without loss: wherever you see a handle (ctx_ and 12 hex digits) "
    "in a truncation label, a cleared tool result or a summary, call read_original with it "
    "to read the full original; use offset/limit to page through it or pattern to get the "
    "matching lines only."
)
"""System-prompt text telling the model that handles can be read back."""


def persist_originals(
    view: Sequence[Message], targets: Iterable[Target], *, store: HistoryStore | None = None,
    cache: ReferenceCache | None = None, conversation_id: str | None = None,
    learning: ReadBackLog | None = None, kept: set[str] | None = None,
    blocks: Sequence[Block] = (), settled: int = 0,
) -> dict[str, Any]:
    """Keep the original behind every target's handle (the driver's step after a pass).

    ``view`` is the policy's input (targets index it). Targets sharing a handle are kept as
    one transcript. Originals go to ``store`` when it keeps them for ``conversation_id``,
    else to ``cache`` (default: [`default_references`][contextfold.stores.default_references]).
    ``kept`` names handles this caller already kept (a handle is a content hash, so its original is
    the same) and receives the new ones. Returns figures for the report.

    ``blocks`` are left-out runs that ``with_handles`` gave one handle per block (their
    ``"dropped"`` targets, not repeated in ``targets``), read block by block. An original
    kept before whose messages all lie within ``view[:settled]`` (the caller checked that
    it is the previous call's view, which kept them) is not kept again when the memory
    cache has evicted it since: with more such originals than the cache holds, each call
    would otherwise put them all back.
    """
    sink: ReferenceStore | ReferenceCache = (
        store if keeps_originals(store, conversation_id)
        else cache if cache is not None else default_references()
    )
    # The targets and blocks of each handle, in the order the handles first come.
    parts: dict[str, list[Target | Block]] = {}
    for t in targets:
        if t.handle and 0 <= t.index < len(view):
            parts.setdefault(t.handle, []).append(t)
    for b in blocks:
        if b.dropped:
            parts.setdefault(b.handle, []).append(b)
    known = [h for h in parts if h in kept] if kept is not None else []
    # Kept by an earlier call and still there: nothing to gather (the cache marks them used).
    already = (sink.held(conversation_id, known) if isinstance(sink, ReferenceCache)
               else set(known))
    spans: dict[str, list[Message]] = {}
    tools: dict[str, str | None] = {}
    for handle, found in parts.items():
        if handle in already:
            continue
        if kept is not None and handle in kept and all(
                (p.index if isinstance(p, Target) else p.end - 1) < settled for p in found):
            continue  # settled originals the cache evicted stay out
        members = [view[t.index] for p in found
                   for t in ((p,) if isinstance(p, Target) else p.dropped)]
        spans[handle] = members
        first = found[0]
        tools[handle] = (first if isinstance(first, Target) else first.dropped[0]).tool_name
    if not spans and not already:
        return {}
    chars = 0
    for handle, members in spans.items():
        text = original_text(members)
        sink.put_original(conversation_id or "", handle, text)
        if kept is not None:
            kept.add(handle)
        chars += len(text)
        if learning is not None:
            learning.note_handle(handle, tools[handle])
    where = "memory" if isinstance(sink, ReferenceCache) else "store"
    return {"originals_kept": len(spans) + len(already), "original_chars": chars,
            "kept_in": where}


def _source_parts(
    source: OriginalsSource,
) -> tuple[HistoryStore | ReferenceStore | None, ReferenceCache | None]:
    """(store or None, cache or None) of a store, a cache or a ``Compactor``."""
    if isinstance(source, ReferenceCache):
        return None, source
    if isinstance(source, OriginalsHolder):
        return source.store, source.references
    return source, None


def read_original(
    source: OriginalsSource, conversation_id: str | None, handle: Any, *, offset: Any = 0,
    limit: Any = 4000, pattern: Any = None, learning: ReadBackLog | None = None,
) -> dict[str, Any]:
    """Read the original behind ``handle`` in ``conversation_id``, as a tool result.

    Args:
        source: a store with ``get_original``, a
            [`ReferenceCache`][contextfold.stores.ReferenceCache], or a ``Compactor`` (its store
            when that keeps originals, else its cache).
        conversation_id: the conversation whose handles may be read.
        handle: a ``ctx_<12 hex>`` handle from the context.
        offset: the first character of the window.
        limit: the most characters returned (1 to 20,000).
        pattern: a regular expression; when given, only the matching lines come back.
        learning: records what was read (importance that learns).

    Returns a JSON-safe dict; problems come back as ``{"error": ...}`` for the model.
    """
    problem = _check_read(handle, offset, limit, pattern)
    if problem:
        return {"error": problem}
    store, cache = _source_parts(source)
    text = None
    if conversation_id and isinstance(store, ReferenceStore):
        text = store.get_original(conversation_id, handle)
    if text is None and cache is not None:
        text = cache.get_original(conversation_id, handle)
    if text is None:
        return {"error": _missing(cache, conversation_id, handle)}
    result = _lines(text, pattern, limit) if pattern else _window(text, offset, limit)
    if learning is not None:
        learning.record_read(handle, str(result.get("content", "")))
    return {"handle": handle, "total_chars": len(text), **result}


def _check_read(handle: Any, offset: Any, limit: Any, pattern: Any) -> str | None:
    if not isinstance(handle, str) or not _EXACT.match(handle.strip()):
        return f"{handle!r} is not a handle; a handle is ctx_ followed by 12 hex digits"
    for name, value, low in (("offset", offset, 0), ("limit", limit, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            return f"{name} must be an integer >= {low}, got {value!r}"
    if pattern is not None and not isinstance(pattern, str):
        return f"pattern must be a string (a regular expression), got {pattern!r}"
    if pattern:
        try:
            regex.compile(pattern)
        except (regex.error, ValueError, OverflowError) as exc:
            return f"pattern {pattern!r} is not a valid regular expression: {exc}"
    return None


def _missing(cache: ReferenceCache | None, conversation_id: str | None, handle: str) -> str:
    if cache is not None and cache.expired(conversation_id, handle):
        return (f"the original behind {handle} has expired: it was evicted from the in-memory "
                f"reference cache (which keeps the last {cache.capacity} originals) and can no "
                "longer be read back; search the history instead if a store is configured")
    return (f"no original with handle {handle} in this conversation (handles of other "
            "conversations cannot be read)")


def _window(text: str, offset: int, limit: int) -> dict[str, Any]:
    limit = min(limit, _MAX_LIMIT)
    content = text[offset: offset + limit]
    end = offset + len(content)
    return {"offset": offset, "returned_chars": len(content), "content": content,
            "next_offset": end if end < len(text) else None}


PATTERN_SECONDS = 0.5
"""The longest a ``read_original`` pattern search may run. The pattern comes from the
model: one that backtracks without end (``(a+)+$``) is stopped, and the lines matched so
far come back with a note, instead of freezing the threads and the event loop."""


def _lines(text: str, pattern: str, limit: int) -> dict[str, Any]:
    """The lines matching ``pattern``; a line longer than `_LONG_LINE` characters
    comes back as an excerpt around each match instead (``column`` says where).

    Matching runs with the GIL released and a deadline of `PATTERN_SECONDS` over the
    whole search (the ``regex`` engine's timeout)."""
    compiled = regex.compile(pattern)
    deadline = time.monotonic() + PATTERN_SECONDS
    limit = min(limit, _MAX_LIMIT)
    matches: list[dict[str, Any]] = []
    used = total = 0
    stopped = None
    for number, line in enumerate(text.splitlines(), 1):
        try:
            pieces = _pieces(compiled, line, deadline)
        except TimeoutError:
            stopped = number
            break
        for column, piece in pieces:
            total += 1
            if used + len(piece) <= limit:
                matches.append({"line": number, "column": column, "text": piece})
                used += len(piece)
    content = "\n".join(m["text"] for m in matches)
    found: dict[str, Any] = {"pattern": pattern, "match_count": total,
                             "returned": len(matches), "matches": matches, "content": content}
    if stopped is not None:
        found["note"] = (f"the pattern took too long and was stopped at line {stopped}; "
                         "use a simpler pattern (a word or a literal id)")
    return found


_LONG_LINE = 400
_AROUND = 200
_MAX_PER_LINE = 200  # excerpts (and counted matches) per long line


def _pieces(compiled: Any, line: str, deadline: float) -> list[tuple[int, str]]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if len(line) <= _LONG_LINE:
        return [(0, line)] if compiled.search(line, timeout=left, concurrent=True) else []
    out = []
    for found in compiled.finditer(line, timeout=left, concurrent=True):
        start, end = max(0, found.start() - _AROUND), min(len(line), found.end() + _AROUND)
        head, tail = ("…" if start else ""), ("…" if end < len(line) else "")
        out.append((found.start(), f"{head}{line[start:end]}{tail}"))
        if len(out) >= _MAX_PER_LINE:
            break
    return out


def read_original_tool(
    source: OriginalsSource, conversation_id: str | None = None, *,
    learning: ReadBackLog | None = None,
) -> SearchToolSpec:
    """The framework-neutral ``read_original`` tool for one conversation.

    ``source`` is a store, a [`ReferenceCache`][contextfold.stores.ReferenceCache] or a
    ``Compactor`` (then ``conversation_id`` and ``learning`` default to the compactor's). The
    adapters wrap it as their own tool type; put
    [`READ_ORIGINAL_GUIDANCE`][langchain_contextfold.READ_ORIGINAL_GUIDANCE] in the system prompt.
    """
    if isinstance(source, OriginalsHolder):
        if conversation_id is None:
            conversation_id = source.conversation_id
        if learning is None:
            learning = source.learning
    scope, learned = conversation_id, learning

    def run(handle: Any = None, offset: Any = 0, limit: Any = 4000,
            pattern: Any = None) -> dict[str, Any]:
        return read_original(source, scope, handle, offset=offset, limit=limit,
                             pattern=pattern, learning=learned)

    return SearchToolSpec("read_original", _DESCRIPTION, _SCHEMA, run)


_DESCRIPTION = (
    "Read the full original of compacted content: pass the ctx_... handle shown in a "
    "truncation label, a cleared tool result or a summary. Returns a window of the text "
    "(offset/limit characters; next_offset pages on) or, with pattern (a regular "
    "expression), only the matching lines."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["handle"],
    "additionalProperties": False,
    "properties": {
        "handle": {"type": "string", "description": "The handle: ctx_ and 12 hex digits."},
        "offset": {"type": "integer", "minimum": 0, "default": 0,
                   "description": "First character to return."},
        "limit": {"type": "integer", "minimum": 1, "maximum": _MAX_LIMIT, "default": 4000,
                  "description": "Most characters to return."},
        "pattern": {"type": "string",
                    "description": "A regular expression: return only the matching lines."},
    },
}
