"""Anthropic's own compaction behind the policy contract: server-side compaction
([`AnthropicCompaction`][contextfold.providers.AnthropicCompaction]) and context editing
([`AnthropicContextEditing`][contextfold.providers.AnthropicContextEditing])."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from ..._config import Ge, check_fields
from ..._contract.policy import CompactionContext, PolicyOutcome, PolicyRun, Target
from ..._lossless.ledger import Ledger
from ..._lossless.ledger_payload import is_ledger
from ..._lossless.references import handle_for
from ..._messages.model import Message, OpaquePart
from ..._messages.structure import leading_system_count
from ...errors import ConfigurationError
from .calls import ledger_after

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "AnthropicCompaction",
    "AnthropicContextEditing",
]

ANTHROPIC_COMPACTION_BETA = "compact-2026-01-12"
ANTHROPIC_CONTEXT_EDITING_BETA = "context-management-2025-06-27"


def _compaction_at(messages: Sequence[Message]) -> int | None:
    """The position of the latest assistant message holding a ``compaction`` block."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and not isinstance(m.content, str) and any(
                isinstance(p, OpaquePart) and p.kind == "compaction" for p in m.content):
            return i
    return None


def _block_of(message: Message) -> dict[str, Any]:
    assert not isinstance(message.content, str)
    part = next(p for p in message.content if isinstance(p, OpaquePart)
                and p.kind == "compaction")
    return dict(part.data)


@dataclass(frozen=True)
class AnthropicCompaction:
    """Anthropic's server-side compaction, with originals behind handles and a ledger.

    Sends the ``compact_20260112`` edit (``trigger`` in the provider's input tokens,
    ``instructions``, ``pause_after_compaction``) with the beta header. Once a reply
    starts with a ``compaction`` block, every later call sends: the system prompt, the
    opening request (the API wants a user message first; it drops it with the rest), the
    assistant turn holding the block exactly as returned (pinned, so a local pass after
    this one keeps it) and what followed. What lay between is dropped here as the API drops
    it, behind one handle, with a ledger line per item after the block's turn.

    Args:
        trigger: input tokens (the provider's) over which the provider compacts.
        instructions: what the provider's summary must keep, sent as the edit's
            ``instructions``.
        pause_after_compaction: the provider returns the block alone
            (``stop_reason="compaction"``) and the caller sends the next request.
        ledger: the ledger of what the provider's compaction replaced; ``None`` for none.
    """

    trigger: Annotated[int, Ge(1)] = 150_000
    instructions: str | None = None
    pause_after_compaction: bool = False
    ledger: Ledger | None = field(default_factory=Ledger)
    name = "anthropic_compaction"
    always_run = True

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def request_fields(self) -> dict[str, Any]:
        """``betas`` and ``context_management`` for the Messages API request."""
        edit: dict[str, Any] = {"type": "compact_20260112",
                                "trigger": {"type": "input_tokens", "value": self.trigger}}
        if self.instructions:
            edit["instructions"] = self.instructions
        if self.pause_after_compaction:
            edit["pause_after_compaction"] = True
        return {"betas": [ANTHROPIC_COMPACTION_BETA], "context_management": {"edits": [edit]}}

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Drop what the provider's latest compaction replaced (see the class docstring)."""
        return self._outcome(messages, context)
        yield  # pragma: no cover - makes this a generator

    def _outcome(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        at = _compaction_at(messages)
        if at is None:
            return PolicyOutcome(messages=messages)
        lead = leading_system_count(messages)
        opening = next((i for i in range(lead, at) if messages[i].role == "user"), None)
        start = lead if opening is None else opening + 1
        replaced = [i for i in range(start, at) if not is_ledger(messages[i])]
        if not replaced:  # nothing between the opening request and the block
            return PolicyOutcome(messages=messages)
        block = messages[at] if messages[at].is_pinned else messages[at].pin()
        out = [*messages[:start], block, *messages[at + 1:]]
        count = context.counter.count_message
        handle = handle_for([messages[i] for i in replaced])
        targets = tuple(Target(i, messages[i].role, "dropped", count(messages[i]), 0,
                               messages[i].name if messages[i].role == "tool" else None,
                               handle) for i in replaced)
        if block is not messages[at]:  # the pinned copy stands for it: kept, not dropped
            size = count(messages[at])
            targets += (Target(at, "assistant", "pinned", size, count(block), None,
                               handle_for(messages[at])),)
        ledger_figures: dict[str, Any] = {}
        if self.ledger is not None:
            out, ledger_figures = ledger_after(messages, targets[:len(replaced)], out, context,
                                               self.ledger, after=start)
        before, after = context.measure(messages), context.measure(out)
        summary = _block_of(block).get("content")
        details = {"provider": {
            "name": "anthropic", "edit": "compact_20260112", "replaced": len(replaced),
            "handle": handle, "summary_chars": len(summary) if isinstance(summary, str) else 0,
            "tokens_before": before, "tokens_after": after,
        }, **ledger_figures}
        return PolicyOutcome(messages=out, method=self.name, targets=targets, details=details)



@dataclass(frozen=True)
class AnthropicContextEditing:
    """Anthropic's context editing: the provider clears old tool results (and thinking) on
    its side; this pass names what it clears, keeps the originals and writes the ledger.

    Sends the ``clear_tool_uses_20250919`` edit (``trigger``, ``keep``, ``clear_at_least``,
    ``exclude_tools``, ``clear_tool_inputs``) and, with ``keep_thinking_turns``, the
    ``clear_thinking_20251015`` edit, with the beta header. The messages go out as they
    are: the provider clears them, and the client keeps its full history, as Anthropic's
    documentation asks. On every call the pass applies the provider's documented rule to
    the request (over ``trigger`` input tokens, the oldest tool results but the last
    ``keep`` tool uses, ``exclude_tools`` spared, only when at least ``clear_at_least``
    tokens go) to know which results the model will see as cleared: their originals get
    handles (targets ``"cleared_by_provider"``) and a ledger before the newest group names
    them, so the model can read them back; the report gives the provider's figures.

    The rule is applied to the counter's figure of the request: exact with
    [`EndpointCounter`][contextfold.EndpointCounter]; an approximation that counts high (Claude's)
    names results as cleared a little before the provider clears them, never after.

    Args:
        trigger: input tokens (the provider's) over which tool results are cleared.
        keep: the most recent tool uses kept.
        clear_at_least: clear only when at least this many tokens go; ``None`` for any.
        exclude_tools: tools whose results are never cleared.
        clear_tool_inputs: the provider also clears the cleared calls' inputs.
        keep_thinking_turns: also send ``clear_thinking_20251015`` keeping the thinking of
            this many recent assistant turns (``None``: not sent).
        ledger: the ledger of what the provider clears; ``None`` for none.
    """

    trigger: Annotated[int, Ge(1)] = 100_000
    keep: Annotated[int, Ge(0)] = 3
    clear_at_least: Annotated[int, Ge(0)] | None = None
    exclude_tools: Collection[str] = ()
    clear_tool_inputs: bool = False
    keep_thinking_turns: Annotated[int, Ge(1)] | None = None
    ledger: Ledger | None = field(default_factory=Ledger)
    name = "anthropic_context_editing"
    always_run = True

    def __post_init__(self) -> None:
        check_fields(self)
        if isinstance(self.exclude_tools, str):
            raise ConfigurationError("exclude_tools must be a collection of names, not a string")
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))

    @property
    def request_fields(self) -> dict[str, Any]:
        """``betas`` and ``context_management`` for the Messages API request."""
        edit: dict[str, Any] = {"type": "clear_tool_uses_20250919",
                                "trigger": {"type": "input_tokens", "value": self.trigger},
                                "keep": {"type": "tool_uses", "value": self.keep}}
        if self.clear_at_least is not None:
            edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least}
        if self.exclude_tools:
            edit["exclude_tools"] = list(self.exclude_tools)
        if self.clear_tool_inputs:
            edit["clear_tool_inputs"] = True
        edits = [edit]
        if self.keep_thinking_turns is not None:
            edits.append({"type": "clear_thinking_20251015", "keep": {
                "type": "thinking_turns", "value": self.keep_thinking_turns}})
        return {"betas": [ANTHROPIC_CONTEXT_EDITING_BETA],
                "context_management": {"edits": edits}}

    def cleared(self, messages: Sequence[Message], context: CompactionContext) -> list[int]:
        """Positions of the tool results the provider clears in this request."""
        before = context.input_tokens(messages)
        if before <= self.trigger:
            return []
        calls = [(i, c) for i, m in enumerate(messages) if m.role == "assistant"
                 for c in m.tool_calls]
        results = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "tool"}
        old = calls[: max(0, len(calls) - self.keep)]
        out = [results[c.id] for _, c in old if c.name not in self.exclude_tools
               and c.id in results and not messages[results[c.id]].is_pinned]
        if self.clear_at_least is not None:
            freed = sum(context.counter.count_message(messages[i]) for i in out)
            if freed < self.clear_at_least:
                return []
        return out

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Name what the provider clears in this request (see the class docstring)."""
        return self._outcome(messages, context)
        yield  # pragma: no cover - makes this a generator

    def _outcome(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        cleared = self.cleared(messages, context)
        if not cleared:
            return PolicyOutcome(messages=messages)
        count = context.counter.count_message
        targets = tuple(Target(i, "tool", "cleared_by_provider", count(messages[i]), 0,
                               messages[i].name, handle_for(messages[i])) for i in cleared)
        out: list[Message] = list(messages)
        ledger_figures: dict[str, Any] = {}
        if self.ledger is not None:
            out, ledger_figures = ledger_after(messages, targets, out, context, self.ledger)
        before = context.measure(messages)
        freed = sum(t.original_tokens for t in targets)
        details = {"provider": {
            "name": "anthropic", "edit": "clear_tool_uses_20250919",
            "cleared_tool_uses": len(cleared), "tokens_before": before,
            "tokens_after": before - freed,
        }, **ledger_figures}
        return PolicyOutcome(messages=out, method=self.name, targets=targets, details=details)
