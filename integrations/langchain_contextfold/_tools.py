"""The history store's search tools as LangChain tools (the loop-slice design's searchable memory).

Compaction hides old messages from the model; these tools let it find them again::

    store = cf.SQLiteStore("history.db")
    tools = [*my_tools, *search_tools_for(store, "thread-1")]
    agent = create_agent(model, tools, system_prompt=prompt + "\\n\\n" + SEARCH_GUIDANCE,
                         middleware=[CompactionMiddleware(policy=..., budget=..., store=store)])

The conversation id must be the one the history is stored under: the run's ``thread_id``
(a run that names none stores nothing: see the conversations guide).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import StructuredTool

from contextfold.errors import ConfigurationError
from contextfold.integration import COMPACT_CONTEXT_DESCRIPTION, compact_context_tool
from contextfold.stores import (
    READ_ORIGINAL_GUIDANCE,
    SEARCH_GUIDANCE,
    SearchToolSpec,
    read_original_tool,
    search_tools,
)

__all__ = [
    "READ_ORIGINAL_GUIDANCE",
    "SEARCH_GUIDANCE",
    "compact_context_tool_for",
    "read_original_tool_for",
    "search_tools_for",
    "tool_from_spec",
]


def _runner(spec: SearchToolSpec) -> Callable[..., str]:
    def run(**arguments: Any) -> str:
        return json.dumps(spec(**arguments), ensure_ascii=False, default=str)

    return run


def tool_from_spec(spec: SearchToolSpec) -> StructuredTool:
    """One framework-neutral search tool as a LangChain ``StructuredTool``."""
    return StructuredTool.from_function(
        func=_runner(spec), name=spec.name, description=spec.description,
        args_schema=dict(spec.parameters),
    )


def search_tools_for(
    store: Any, conversation_id: str, *, swarm_id: str | None = None,
    allow_conversations: Sequence[str] = (),
) -> list[StructuredTool]:
    """The search tools over ``store``, scoped to ``conversation_id`` (and the conversations
    in ``allow_conversations``; ``swarm_id`` adds the broadcast search).

    Results are JSON text: hits with a snippet and a ``handle`` for ``read_message``.
    Put [`SEARCH_GUIDANCE`][langchain_contextfold.SEARCH_GUIDANCE] in the system prompt so the model
    knows to use them.
    """
    specs = search_tools(store, conversation_id, swarm_id=swarm_id,
                         allow_conversations=allow_conversations)
    return [tool_from_spec(spec) for spec in specs]


def read_original_tool_for(source: Any, conversation_id: str | None = None) -> StructuredTool:
    """The ``read_original`` tool: the full original behind a ``ctx_`` handle that
    compaction left in the context (a truncation label, a cleared result, a summary).

    ``source`` is the store given to the middleware (``conversation_id`` the run's
    ``thread_id``), or a ``cf.Compactor`` / ``ReferenceCache`` when no store keeps the
    originals. Handles of other conversations are refused. Put
    [`READ_ORIGINAL_GUIDANCE`][langchain_contextfold.READ_ORIGINAL_GUIDANCE] in the system prompt so
    the model knows to use it.
    """
    return tool_from_spec(read_original_tool(source, conversation_id))


def compact_context_tool_for(source: Any) -> StructuredTool:
    """The ``compact_context`` tool: the model asks for a compaction before its next step,
    naming what must be kept above all (``focus``); that compaction's summaries are asked
    to keep it word for word.

    ``source`` is the ``CompactionMiddleware`` or ``with_compaction`` model that serves the
    agent. The request rides in the conversation itself (the tool's call and its result):
    the next model call of that conversation, and of no other, compacts, with or without a
    thread id.
    """
    engine = getattr(source, "engine", None)
    if engine is None or not hasattr(engine, "conversations"):
        raise ConfigurationError(
            "compact_context_tool_for takes the CompactionMiddleware or the with_compaction "
            f"model that serves the agent, got {type(source).__name__}")
    spec = compact_context_tool()

    def compact_context(focus: str = "") -> str:
        return json.dumps(spec(focus=focus), ensure_ascii=False)

    return StructuredTool.from_function(
        func=compact_context, name="compact_context", description=COMPACT_CONTEXT_DESCRIPTION)
