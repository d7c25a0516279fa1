"""Framework-neutral search tools over a store (the loop-slice design's ``zoea_search_*`` tools).

``search_tools(store, conversation_id)`` returns one ``SearchToolSpec`` per tool: a name,
a description for the model, a JSON schema of the arguments and a plain callable returning
JSON-safe dicts. The LangChain and LlamaIndex adapters wrap these as their own tool types.

Scope: the tools read only ``conversation_id`` (and, for broadcasts, ``swarm_id``). Reading
other conversations needs an explicit grant, ``allow_conversations=("other-id", ...)``;
their ids then become the allowed values of an optional ``conversation_id`` argument.
``read_message`` refuses handles from anywhere else. Bad arguments from the model come
back as ``{"error": ...}`` so the model can correct itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._head_tail import truncate_head_tail
from .._messages.model import Message
from ..errors import ConfigurationError
from .base import BaseStore, SearchHit, parse_handle

__all__ = ["SEARCH_GUIDANCE", "SearchToolSpec", "search_tools"]

SEARCH_GUIDANCE = (
    "Context is limited - use search tools for older information. Your full history is "
    "kept: call search_messages (what was said or returned by tools) or search_reasoning "
    "(your earlier thinking) with a few keywords, then read_message with a result's handle "
    "to see the whole message."
)
"""System-prompt text telling the model the search tools exist."""

MAX_LIMIT = 50
"""The most results one tool call returns."""

PREVIEW_CHARS = 600
"""Characters of each hit's content shown in a result (head and tail kept)."""


@dataclass(frozen=True, slots=True)
class SearchToolSpec:
    """One tool, ready to wrap for any framework."""

    name: str
    """The tool's name as the model sees it."""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any]
    """JSON schema (an ``object``) of the keyword arguments."""
    function: Callable[..., dict[str, Any]] = field(repr=False)
    """Runs the tool with keyword arguments; returns a JSON-safe dict."""

    def __call__(self, **arguments: Any) -> dict[str, Any]:
        """Run the tool."""
        return self.function(**arguments)


def search_tools(
    store: BaseStore, conversation_id: str, *, swarm_id: str | None = None,
    allow_conversations: Sequence[str] = (),
) -> list[SearchToolSpec]:
    """The search tools for one conversation.

    Args:
        store: a store with search (``MemoryStore``, ``SQLiteStore``, ``PostgresStore``).
        conversation_id: the conversation the tools read by default.
        swarm_id: adds ``search_broadcasts`` over this swarm's broadcasts.
        allow_conversations: other conversations the model may search and read (a grant).
    """
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ConfigurationError(f"conversation_id must be a non-empty string, "
                                 f"got {conversation_id!r}")
    if isinstance(allow_conversations, str):
        raise ConfigurationError("allow_conversations must be a sequence of ids, not a string")
    allowed = tuple(dict.fromkeys([conversation_id, *allow_conversations]))
    tools = [
        _search_tool(store, "search_messages", "messages", allowed,
                     "Search your past messages and tool results (older than what you see "
                     "now) by keywords. Every word must match. Returns role, source, "
                     "timestamp, a snippet and a handle for read_message."),
        _search_tool(store, "search_reasoning", "reasoning", allowed,
                     "Search your past reasoning by keywords. Every word must match. "
                     "Returns the matching reasoning passages and a handle for read_message."),
    ]
    if swarm_id is not None:
        tools.append(_broadcast_tool(store, swarm_id))
    tools.append(_read_tool(store, allowed, swarm_id))
    return tools


def _schema(allowed: tuple[str, ...]) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "query": {"type": "string", "description": "Keywords to look for."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20,
                  "description": "Most results to return."},
    }
    if len(allowed) > 1:
        properties["conversation_id"] = {
            "type": "string", "enum": list(allowed), "default": allowed[0],
            "description": "Which conversation to search (default: your own).",
        }
    return {"type": "object", "properties": properties, "required": ["query"],
            "additionalProperties": False}


def _search_tool(store: BaseStore, name: str, kind: str, allowed: tuple[str, ...],
                 description: str) -> SearchToolSpec:
    def run(query: Any = None, limit: Any = 20,
            conversation_id: Any = None) -> dict[str, Any]:
        target = allowed[0] if conversation_id is None else conversation_id
        if target not in allowed:
            return {"error": f"conversation {target!r} is not available to this tool"}
        problem = _check_query(query, limit)
        if problem:
            return {"error": problem}
        search = store.search_messages if kind == "messages" else store.search_reasoning
        hits = search(target, query, _clamp(limit))
        return _results(query, hits, reasoning=kind == "reasoning")

    return SearchToolSpec(name, description, _schema(allowed), run)


def _broadcast_tool(store: BaseStore, swarm_id: str) -> SearchToolSpec:
    def run(query: Any = None, limit: Any = 20) -> dict[str, Any]:
        problem = _check_query(query, limit)
        if problem:
            return {"error": problem}
        return _results(query, store.search_broadcasts(swarm_id, query, _clamp(limit)))

    return SearchToolSpec(
        "search_broadcasts",
        "Search the swarm's past broadcasts (orders from the commander and other agents) by "
        "keywords. Every word must match.",
        _schema((swarm_id,)), run,
    )


def _read_tool(store: BaseStore, allowed: tuple[str, ...],
               swarm_id: str | None) -> SearchToolSpec:
    def run(handle: Any = None) -> dict[str, Any]:
        parsed = parse_handle(handle) if isinstance(handle, str) else None
        scope: tuple[str, ...] = ()
        if parsed is not None:
            scope = allowed if parsed[0] == "m" else ((swarm_id,) if swarm_id else ())
        message = store.get_message(handle, scope=scope) if scope else None
        if message is None:
            return {"error": f"no message with handle {handle!r} is available"}
        return {"handle": handle, **_message_dict(message)}

    return SearchToolSpec(
        "read_message",
        "Read the whole message behind a handle returned by a search tool.",
        {"type": "object", "required": ["handle"], "additionalProperties": False,
         "properties": {"handle": {"type": "string", "description": "A result's handle."}}},
        run,
    )


def _check_query(query: Any, limit: Any) -> str | None:
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string"
    if not isinstance(limit, int) or isinstance(limit, bool):
        return f"limit must be an integer between 1 and {MAX_LIMIT}"
    return None


def _clamp(limit: int) -> int:
    return max(1, min(MAX_LIMIT, limit))


def _results(query: str, hits: list[SearchHit], *, reasoning: bool = False) -> dict[str, Any]:
    results = []
    for hit in hits:
        item = hit.to_dict()
        text = (hit.message.reasoning or "") if reasoning else hit.message.text
        item["content"] = truncate_head_tail(text, max_chars=PREVIEW_CHARS) \
            if len(text) > PREVIEW_CHARS else text
        results.append(item)
    return {"query": query, "count": len(results), "results": results}


def _message_dict(message: Message) -> dict[str, Any]:
    return {
        "role": message.role,
        "source": message.source,
        "sender_id": message.sender_id,
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "content": message.text,
        "reasoning": message.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                       for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }
