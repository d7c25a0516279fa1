"""The context-management edits the server applies before counting and answering, after
Anthropic's "Context editing" and "Compaction" pages (beta headers
``context-management-2025-06-27`` and ``compact-2026-01-12``):

* ``clear_tool_uses_20250919``: over ``trigger`` input tokens (default 100,000), the oldest
  tool results but the last ``keep`` tool uses (default 3) are replaced by a placeholder
  (``exclude_tools`` spared; ``clear_tool_inputs`` blanks the calls' input too), only when at
  least ``clear_at_least`` tokens go; reported in ``context_management.applied_edits`` as
  ``{"type", "cleared_tool_uses", "cleared_input_tokens"}``;
* ``clear_thinking_20251015``: thinking blocks of all but the last ``keep`` assistant turns
  (``{"type": "thinking_turns", "value": N}``, default 1, or ``"all"``) are removed;
* ``compact_20260112``: everything before the latest ``compaction`` block of the request is
  dropped; then, over ``trigger`` (default 150,000; the API's minimum of 50,000 is not
  enforced, so tests can use small windows), the conversation is summarized into a new
  signed ``compaction`` block that the reply starts with (alone, with ``stop_reason``
  ``"compaction"``, when ``pause_after_compaction``), and the reply answers the compacted
  context. The client must send the block back unchanged in the assistant turn.

The client's request is never changed: the edits make the server's own working copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .wire import as_chat, count_request, sign

__all__ = ["CLEARED", "EDITS_BETAS", "apply_edits"]

EDITS_BETAS = frozenset({"context-management-2025-06-27", "compact-2026-01-12"})
CLEARED = "[cleared to save context]"

Summarize = Callable[[dict[str, Any], "str | None"], str]


def apply_edits(
    body: dict[str, Any], summarize: Summarize | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The request the model answers, and the edits applied to get it. ``summarize`` makes a
    compaction's text (``None``, as for ``count_tokens``: no new compaction is made)."""
    edits = (body.get("context_management") or {}).get("edits") or []
    if not edits and not _has_compaction(body):
        return body, []
    work = copy.deepcopy(body)
    applied: list[dict[str, Any]] = []
    _drop_before_compaction(work)
    for edit in edits:
        kind = edit.get("type")
        if kind == "clear_tool_uses_20250919":
            found = _clear_tool_uses(work, edit)
        elif kind == "clear_thinking_20251015":
            found = _clear_thinking(work, edit)
        elif kind == "compact_20260112" and summarize is not None:
            found = _compact(work, edit, summarize)
        else:
            found = None
        if found is not None:
            applied.append(found)
    return work, applied


def _has_compaction(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) and any(
        b.get("type") == "compaction" for b in m["content"]) for m in body.get("messages") or [])


def _drop_before_compaction(work: dict[str, Any]) -> None:
    messages = work["messages"]
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i]["content"]
        if isinstance(content, list):
            at = max((k for k, b in enumerate(content) if b.get("type") == "compaction"),
                     default=None)
            if at is not None:
                work["messages"] = [{**messages[i], "content": content[at:]}, *messages[i + 1:]]
                return


def _value(spec: Any, default: int) -> int:
    return int(spec["value"]) if isinstance(spec, dict) and "value" in spec else default


def _clear_tool_uses(work: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any] | None:
    before = count_request(work)
    if before <= _value(edit.get("trigger"), 100_000):
        return None
    keep = _value(edit.get("keep"), 3)
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs") or False
    uses = [(m, b) for m in work["messages"] if m["role"] == "assistant"
            and isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
    results = {b["tool_use_id"]: b for m in work["messages"] if m["role"] == "user"
               and isinstance(m["content"], list) for b in m["content"]
               if b["type"] == "tool_result"}
    trial = copy.deepcopy(work)
    cleared = 0
    for _, use in uses[: max(0, len(uses) - keep)]:
        result = results.get(use["id"])
        if use["name"] in excluded or result is None or result.get("content") == CLEARED:
            continue
        result["content"] = CLEARED
        if inputs is True or (isinstance(inputs, list) and use["name"] in inputs):
            use["input"] = {}
        cleared += 1
    freed = before - count_request(work)
    if cleared == 0 or freed < _value(edit.get("clear_at_least"), 0):
        work.clear()
        work.update(trial)
        return None
    return {"type": "clear_tool_uses_20250919", "cleared_tool_uses": cleared,
            "cleared_input_tokens": freed}


def _clear_thinking(work: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any] | None:
    keep = edit.get("keep")
    if keep == "all":
        return None
    turns = [m for m in work["messages"] if m["role"] == "assistant"
             and isinstance(m["content"], list)]
    before = count_request(work)
    cleared = 0
    for m in turns[: max(0, len(turns) - _value(keep, 1))]:
        kept = [b for b in m["content"] if b["type"] not in ("thinking", "redacted_thinking")]
        if len(kept) != len(m["content"]):
            m["content"] = kept or [{"type": "text", "text": "(thinking cleared)"}]
            cleared += 1
    if not cleared:
        return None
    return {"type": "clear_thinking_20251015", "cleared_thinking_turns": cleared,
            "cleared_input_tokens": before - count_request(work)}


def _compact(work: dict[str, Any], edit: dict[str, Any],
             summarize: Summarize) -> dict[str, Any] | None:
    if count_request(work) <= _value(edit.get("trigger"), 150_000):
        return None
    summary = summarize(as_chat(work), edit.get("instructions"))
    block = {"type": "compaction", "content": summary, "signature": sign(summary)}
    work["messages"] = [{"role": "assistant", "content": [block]}]
    return {"type": "compact_20260112", "block": block,
            "paused": bool(edit.get("pause_after_compaction"))}
