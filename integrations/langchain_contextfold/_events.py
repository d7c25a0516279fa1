"""Compaction events for LangChain callbacks and LangGraph streams.

Each compaction that changed the model's input is sent as a custom event named
[`COMPACTION_EVENT`][langchain_contextfold.COMPACTION_EVENT] whose data is the report as a JSON-safe
dict, so it shows in ``astream_events`` (``event == "on_custom_event"``) and in LangSmith traces; an
idle conversation is sent as [`IDLE_EVENT`][langchain_contextfold.IDLE_EVENT]. Inside a LangGraph
graph the same payload is also written to the ``"custom"`` stream as ``{COMPACTION_EVENT:
payload}``.

Outside a run with callbacks there is nobody to tell: emitting is then a no-op, never an
error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)

from contextfold import CompactionReport

__all__ = ["COMPACTION_EVENT", "IDLE_EVENT", "Payload", "aemit", "emit", "report_payload"]

COMPACTION_EVENT = "contextfold_compaction"
"""The custom event name of a compaction."""

IDLE_EVENT = "contextfold_idle"
"""The custom event name of a conversation that went idle."""

logger = logging.getLogger("contextfold")

Writer = Callable[[Any], None]
RunManager = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun


def report_payload(report: CompactionReport, conversation_id: str | None) -> dict[str, Any]:
    """The report as a JSON-safe dict, with the conversation id and the tokens saved."""
    data = dataclasses.asdict(report)
    data["tokens_saved"] = report.tokens_saved
    data["conversation_id"] = conversation_id
    safe: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return safe


def _stream_writer() -> Writer | None:
    try:
        from langgraph.config import get_stream_writer

        writer: Writer = get_stream_writer()
    except (ImportError, RuntimeError, KeyError, AttributeError):
        return None
    return writer


def _write(name: str, payload: Callable[[], dict[str, Any]], writer: Writer | None) -> None:
    writer = writer or _stream_writer()
    if writer is None:
        return
    try:
        writer({name: payload()})
    except Exception:  # a stream consumer's failure must not fail the model call
        logger.debug("contextfold: stream writer failed", exc_info=True)


Payload = dict[str, Any] | Callable[[], dict[str, Any]]
"""An event's data, or a function that makes it: called once, only when someone receives
the event (a report's payload reads every figure and target, which on a long history
costs more than the compaction decided from bounds)."""


def _once(data: Payload) -> Callable[[], dict[str, Any]]:
    made: list[dict[str, Any]] = []

    def payload() -> dict[str, Any]:
        if not made:
            made.append(data() if callable(data) else data)
        return made[0]

    return payload


def emit(
    name: str,
    data: Payload,
    *,
    config: RunnableConfig | None = None,
    run_manager: RunManager | None = None,
    writer: Writer | None = None,
) -> None:
    """Send one event to the callbacks of the current run and to LangGraph's stream.

    Args:
        name: the event name ([`COMPACTION_EVENT`][langchain_contextfold.COMPACTION_EVENT],
            [`IDLE_EVENT`][langchain_contextfold.IDLE_EVENT]).
        data: the payload (`report_payload`), or a function making it, called only
            when a callback handler or a stream writer is there to receive it.
        config: the run's config; by default the one of the enclosing runnable.
        run_manager: a chat model's run manager, inside ``_generate``: the event is
            attached to that model run.
        writer: LangGraph's stream writer, when the caller has it (middleware).
    """
    payload = _once(data)
    receiver = _receiver(CallbackManager, run_manager, config)
    if receiver is not None:
        manager, run_id = receiver
        manager.on_custom_event(name, payload(), run_id=run_id)
    _write(name, payload, writer)


async def aemit(
    name: str,
    data: Payload,
    *,
    config: RunnableConfig | None = None,
    run_manager: RunManager | None = None,
    writer: Writer | None = None,
) -> None:
    """The async form of `emit`."""
    payload = _once(data)
    receiver = _receiver(AsyncCallbackManager, run_manager, config)
    if receiver is not None:
        manager, run_id = receiver
        await manager.on_custom_event(name, payload(), run_id=run_id)
    _write(name, payload, writer)


Manager = TypeVar("Manager", CallbackManager, AsyncCallbackManager)


def _receiver(
    kind: type[Manager], run_manager: RunManager | None, config: RunnableConfig | None,
) -> tuple[Manager, UUID] | None:
    """The callback manager an event goes to and the run it is attached to: the chat
    model's run when there is a run manager, else the parent run of the current config (as
    ``dispatch_custom_event`` finds it); ``None`` when no handler would receive it."""
    if run_manager is not None:
        manager = kind(
            handlers=run_manager.handlers,
            inheritable_handlers=run_manager.inheritable_handlers,
            parent_run_id=run_manager.parent_run_id,
            tags=run_manager.tags,
            inheritable_tags=run_manager.inheritable_tags,
            metadata=run_manager.metadata,
            inheritable_metadata=run_manager.inheritable_metadata,
        )
        run_id: UUID | None = run_manager.run_id
    else:
        found = (get_callback_manager_for_config if kind is CallbackManager
                 else get_async_callback_manager_for_config)(ensure_config(config))
        manager, run_id = cast(Manager, found), found.parent_run_id
    if run_id is None or not manager.handlers:
        return None
    return manager, run_id
