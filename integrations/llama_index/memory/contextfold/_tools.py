"""Search tools over the history store as LlamaIndex ``FunctionTool``s.

The framework-neutral specs from [`contextfold.search_tools`][contextfold.stores.search_tools]
(name, description, JSON schema, callable) become ``FunctionTool``s whose argument schema is the
spec's schema, so the model sees exactly what the core promises. Each tool reads one session only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from llama_index.core.tools import FunctionTool, ToolMetadata
from pydantic import BaseModel, ConfigDict, Field, create_model

from contextfold import Compactor
from contextfold.errors import ConfigurationError
from contextfold.integration import compact_context_tool
from contextfold.stores import (
    BaseStore,
    SearchToolSpec,
    read_original_tool,
    search_tools,
)

__all__ = ["compact_context_tool_for", "read_original_tool_for", "search_tools_for",
           "tool_definitions", "tool_from_spec"]

_TYPES: Mapping[str, Any] = {
    "string": str, "integer": int, "number": float, "boolean": bool, "array": list,
    "object": dict,
}


def search_tools_for(
    store: BaseStore | Any,
    session_id: str,
    *,
    swarm_id: str | None = None,
    allow_conversations: Sequence[str] = (),
) -> list[FunctionTool]:
    """The search tools of one session (``search_messages``, ``search_reasoning``,
    ``read_message``; ``search_broadcasts`` with a ``swarm_id``) as ``FunctionTool``s.

    ``store`` may be a store or a ``CompactingMemory`` (its store and ``session_id`` are
    used when ``session_id`` is the memory's). Other sessions stay unreadable unless
    granted with ``allow_conversations``.

    Example::

        memory = CompactingMemory.from_defaults(policy=..., budget=..., store="sqlite")
        agent = FunctionAgent(tools=[*my_tools, *search_tools_for(memory.store,
                                                                  memory.session_id)], ...)
    """
    specs = search_tools(store, session_id, swarm_id=swarm_id,
                            allow_conversations=allow_conversations)
    return [tool_from_spec(spec) for spec in specs]


def read_original_tool_for(source: Any, session_id: str | None = None) -> FunctionTool:
    """The ``read_original`` tool of one session: the full original behind a ``ctx_`` handle
    that compaction left in the context (a truncation label, a cleared result, a summary).

    ``source`` is the store the memory or LLM wrapper keeps history in (``session_id`` the
    conversation), a ``CompactingMemory`` (its store and session), or a ``cf.Compactor`` /
    ``ReferenceCache`` when no store keeps the originals. Handles of other sessions are
    refused. Put ``READ_ORIGINAL_GUIDANCE`` in the system prompt.
    """
    if session_id is None and isinstance(getattr(source, "session_id", None), str):
        session_id = source.session_id
        source = getattr(source, "store", source)
    return tool_from_spec(read_original_tool(source, session_id))


def tool_from_spec(spec: SearchToolSpec) -> FunctionTool:
    """One framework-neutral tool spec as a ``FunctionTool`` returning JSON text."""
    model = _model_from_schema(spec.name, spec.parameters)

    def run(**arguments: Any) -> str:
        return json.dumps(spec(**arguments), ensure_ascii=False)

    run.__name__ = spec.name
    metadata = ToolMetadata(name=spec.name, description=spec.description, fn_schema=model)
    return FunctionTool.from_defaults(fn=run, tool_metadata=metadata)


def _model_from_schema(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A pydantic model whose JSON schema matches a flat ``object`` schema."""
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for key, prop in dict(schema.get("properties", {})).items():
        annotation: Any = _TYPES.get(prop.get("type", ""), Any)
        if "enum" in prop:
            annotation = Literal[tuple(prop["enum"])]
        constraints = {k: prop[k] for k in ("minimum", "maximum") if k in prop}
        info = Field(
            default=... if key in required else prop.get("default"),
            description=prop.get("description"),
            ge=constraints.get("minimum"),
            le=constraints.get("maximum"),
        )
        optional = key not in required and prop.get("default") is None
        fields[key] = (annotation | None if optional else annotation, info)
    extra: Literal["forbid", "ignore"] = (
        "forbid" if schema.get("additionalProperties") is False else "ignore"
    )
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        "".join(part.title() for part in name.split("_")) + "Arguments",
        __config__=ConfigDict(extra=extra),
        **fields,
    )
    return model


def tool_definitions(tools: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Tool definitions as OpenAI ``tools`` entries, for counting their tokens.

    Accepts what LlamaIndex passes around: ``BaseTool`` objects (their metadata's OpenAI
    form) and ready dicts (the OpenAI integration's prepared ``tools``).
    """
    out: list[dict[str, Any]] = []
    for tool in tools or ():
        if isinstance(tool, Mapping):
            out.append(dict(tool))
            continue
        metadata = getattr(tool, "metadata", None)
        if metadata is not None and hasattr(metadata, "to_openai_tool"):
            out.append(metadata.to_openai_tool(skip_length_check=True))
        else:
            out.append({"name": str(getattr(tool, "name", tool))})
    return out


def compact_context_tool_for(source: Any) -> FunctionTool:
    """The ``compact_context`` tool: the model asks for a compaction before its next step,
    naming what must be kept above all (``focus``); that compaction's summaries are asked
    to keep it word for word.

    ``source`` is the ``CompactingMemory`` or ``CompactingLLM`` that serves the agent, or a
    ``cf.Compactor``. The request rides in the conversation itself (the tool's call and its
    result): the next compaction of that conversation, and of no other, honours it, however
    many conversations ``source`` serves.
    """
    if not (isinstance(source, Compactor) or isinstance(getattr(source, "compactor", None),
                                                        Compactor)
            or hasattr(source, "conversations")):
        raise ConfigurationError(
            "compact_context_tool_for takes the CompactingMemory or CompactingLLM that serves "
            f"the agent, or a Compactor; got {type(source).__name__}")
    return tool_from_spec(compact_context_tool())
