"""Deduplicate superseded tool results (the loop-slice design's note on the old snapshot
compaction).

An agent that polls state (``get_status``, ``get_cargo``, ``read_file`` of the same path)
accumulates snapshots of which only the newest is current. The loop-slice design's earlier
compaction "deduplicated redundant ``get_*`` tool results";
[`DedupeSupersededPass`][contextfold.DedupeSupersededPass] does it
losslessly: an earlier successful result of the same tool called with the same arguments
becomes a one-line pointer to the latest result, carrying a ``ctx_`` handle to its own
original (kept by the driver, readable with ``read_original``).

Invariants: the latest result of each (tool, arguments) is never changed; neither are
error results (a failure is not superseded by a later success of the same call, nor does
it supersede anything), pinned results, or results already turned into pointers.
Arguments are compared as parsed JSON (key order and spacing do not matter).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Annotated

from .._config import Ge, check_fields
from .._contract.policy import CompactionContext, PolicyOutcome, Target
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from ..errors import ConfigurationError
from .simple import SimplePolicy

__all__ = ["SUPERSEDED_PREFIX", "DedupeSupersededPass"]

SUPERSEDED_PREFIX = "[Superseded"
"""How every pointer starts."""


@dataclass(frozen=True)
class DedupeSupersededPass(SimplePolicy):
    """Earlier results of the same call (tool and arguments) become pointers to the latest.

    Args:
        tools: only these tool names (``None``: every tool).
        min_chars: results shorter than this are left alone (a pointer would not save).

    Raises:
        ConfigurationError: ``tools`` given as one string, or a negative ``min_chars``.
    """

    tools: Collection[str] | None = None
    min_chars: Annotated[int, Ge(0)] = 0
    name = "dedupe_superseded"

    def __post_init__(self) -> None:
        if isinstance(self.tools, str):
            raise ConfigurationError("tools must be a collection of names, not a string")
        if self.tools is not None:
            object.__setattr__(self, "tools", frozenset(self.tools))
        check_fields(self)

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Point superseded results at the latest; the input itself when none is."""
        latest: dict[tuple[str, str], int] = {}
        keys: dict[int, tuple[str, str]] = {}
        for i, key in self._results(messages):
            keys[i] = key
            latest[key] = i
        count = context.counter.count_message
        out: list[Message] | None = None
        targets: list[Target] = []
        for i, key in keys.items():
            last = latest[key]
            m = messages[i]
            if i == last or len(m.text) < self.min_chars:
                continue
            handle = handle_for(m)
            text = (f"{SUPERSEDED_PREFIX} by a later {key[0]} call with the same arguments "
                    f"(result of call {messages[last].tool_call_id}); this earlier result: "
                    f"{handle_text(handle, context)}]")
            pointer = replace(m, content=text)
            if count(pointer) >= count(m):  # a pointer is not always smaller
                continue
            out = out if out is not None else list(messages)
            out[i] = pointer
            targets.append(Target(i, "tool", "superseded", count(m), count(pointer), m.name,
                                  handle))
        if out is None:
            return PolicyOutcome(messages=messages)
        return PolicyOutcome(messages=out, method=self.name, targets=tuple(targets),
                             details={"superseded": len(targets)})

    def _results(self, messages: Sequence[Message]) -> list[tuple[int, tuple[str, str]]]:
        """(index, (tool, canonical arguments)) of every result that may take part."""
        calls = {c.id: c for m in messages if m.role == "assistant" for c in m.tool_calls}
        found = []
        for i, m in enumerate(messages):
            call = calls.get(m.tool_call_id or "") if m.role == "tool" else None
            if call is None or m.is_error or m.is_pinned:
                continue
            if self.tools is not None and call.name not in self.tools:
                continue
            if m.text.startswith(SUPERSEDED_PREFIX):
                continue
            found.append((i, (call.name, _canonical(call.arguments))))
        return found


def _canonical(arguments: str) -> str:
    """The arguments in one spelling (key order and spacing aside); the text itself when it
    is not JSON or nests deeper than the parser goes."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return arguments.strip()
