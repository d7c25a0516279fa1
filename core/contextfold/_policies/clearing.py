"""Clear old tool results: the context editing the providers ship, as a lossless pass.

Anthropic's ``clear_tool_uses`` edit and LangChain's ``ContextEditingMiddleware`` replace
tool results older than the last few with a placeholder. So does
[`ClearToolResultsPass`][contextfold.ClearToolResultsPass], with one difference: the placeholder
carries a ``ctx_`` handle, and the driver keeps the original, so the agent can read it back with
``read_original``.

Batching, for the provider's prompt cache: every cleared result changes the prompt
prefix, so clearing one result per step would miss the cache on every step. The pass acts
only when the input is over its trigger (default: the budget's ``trigger_tokens``) and
only when at least ``clear_at_least`` tokens would be freed; it then clears every eligible
result at once, which brings the context well under the trigger for many steps.

Never cleared: pinned results, error results (short, and they tell the model what not to
try again), results of ``exclude_tools``, the last ``keep_last`` tool results, results the
model has not seen yet (those after the last assistant message) and results already
cleared. With ``clear_tool_inputs`` the arguments of the cleared calls are replaced too, by
``{"cleared": "<handle>"}`` (still valid JSON), the call's handle keeping the original.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated

from .._config import Ge, check_fields
from .._contract.policy import CompactionContext, PolicyOutcome, Target
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from ..errors import ConfigurationError
from .simple import SimplePolicy

__all__ = ["CLEARED_PREFIX", "ClearToolResultsPass"]

CLEARED_PREFIX = "[Tool result cleared"
"""How every placeholder starts (a cleared result is never cleared twice)."""


@dataclass(frozen=True)
class ClearToolResultsPass(SimplePolicy):
    """Replace tool results older than the last ``keep_last`` with a placeholder + handle.

    Args:
        keep_last: the most recent tool results kept whole.
        exclude_tools: tool names whose results are never cleared.
        clear_at_least: act only when clearing frees at least this many tokens.
        clear_tool_inputs: also replace the arguments of the cleared calls.
        trigger_tokens: act only when the input is over this many tokens; ``None`` uses
            the budget's ``trigger_tokens``, ``0`` clears whenever something is eligible.

    Raises:
        ConfigurationError: a negative number, or ``exclude_tools`` given as one string.
    """

    keep_last: Annotated[int, Ge(0)] = 3
    exclude_tools: Collection[str] = field(default_factory=tuple)
    clear_at_least: Annotated[int, Ge(0)] = 0
    clear_tool_inputs: bool = False
    trigger_tokens: Annotated[int, Ge(0)] | None = None
    name = "clear_tool_results"

    def __post_init__(self) -> None:
        check_fields(self)
        if isinstance(self.exclude_tools, str):
            raise ConfigurationError("exclude_tools must be a collection of names, not a string")
        object.__setattr__(self, "exclude_tools", frozenset(self.exclude_tools))

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Clear the eligible results when over the trigger and worth it; else the input."""
        trigger = context.budget.trigger_tokens if self.trigger_tokens is None \
            else self.trigger_tokens
        if not context.force and context.input_tokens(messages) <= trigger:
            return PolicyOutcome(messages=messages)
        eligible = self.eligible(messages)
        if not eligible:
            return PolicyOutcome(messages=messages)
        count = context.counter.count_message
        out = list(messages)
        targets: list[Target] = []
        for i in eligible:
            handle = handle_for(messages[i])
            new = self._placeholder(messages[i], handle, context)
            if count(new) < count(messages[i]):  # a placeholder is not always smaller
                out[i] = new
                targets.append(Target(i, "tool", "cleared", count(messages[i]), count(new),
                                      messages[i].name, handle))
        if self.clear_tool_inputs:
            targets.extend(self._clear_inputs(messages, out, eligible, context))
        freed = sum(t.original_tokens - t.new_tokens for t in targets)
        if freed <= 0 or freed < self.clear_at_least:
            return PolicyOutcome(messages=messages, notes=(
                f"clear_tool_results: deferred ({freed} tokens freeable, "
                f"clear_at_least={self.clear_at_least})",))
        cleared = sum(1 for t in targets if t.method == "cleared")
        return PolicyOutcome(messages=out, method=self.name, targets=tuple(targets),
                             details={"cleared": cleared, "tokens_freed": freed})

    def eligible(self, messages: Sequence[Message]) -> list[int]:
        """Indices of the tool results this pass may clear (see the module docstring)."""
        last_assistant = max((i for i, m in enumerate(messages) if m.role == "assistant"),
                             default=-1)
        results = [i for i, m in enumerate(messages) if m.role == "tool" and i < last_assistant]
        recent = {i for i, m in enumerate(messages) if m.role == "tool"}
        recent = set(sorted(recent)[len(recent) - self.keep_last:]) if self.keep_last else set()
        return [
            i for i in results
            if i not in recent and not messages[i].is_pinned and not messages[i].is_error
            and messages[i].name not in self.exclude_tools
            and not messages[i].text.startswith(CLEARED_PREFIX)
        ]

    def _placeholder(self, m: Message, handle: str, context: CompactionContext) -> Message:
        text = (f"{CLEARED_PREFIX} to save context — {len(m.text):,} chars from "
                f"{m.name or 'a tool'}; full text: {handle_text(handle, context)}]")
        return replace(m, content=text)

    def _clear_inputs(
        self, messages: Sequence[Message], out: list[Message], cleared: list[int],
        context: CompactionContext,
    ) -> list[Target]:
        """Replace the arguments of the calls whose results were cleared, in ``out``."""
        ids = {messages[i].tool_call_id for i in cleared if out[i] is not messages[i]}
        count = context.counter.count_message
        targets = []
        for i, m in enumerate(messages):
            if m.role != "assistant" or m.is_pinned or not any(c.id in ids for c in m.tool_calls):
                continue
            handle = handle_for(m)
            calls = tuple(
                replace(c, arguments=json.dumps({"cleared": handle}))
                if c.id in ids and len(c.arguments) > 40 else c
                for c in m.tool_calls
            )
            new = replace(m, tool_calls=calls)
            if calls == m.tool_calls or count(new) >= count(m):
                continue
            out[i] = new
            targets.append(Target(i, "assistant", "inputs_cleared", count(m), count(out[i]),
                                  None, handle))
        return targets

