"""Provider-native compaction behind the policy contract.

Providers compact on their side too. Anthropic's server-side compaction (the
``compact_20260112`` edit of the ``context_management`` request field, beta
``compact-2026-01-12``; Anthropic, "Compaction") summarizes the conversation once its input
passes a trigger and returns the summary as a ``compaction`` block at the start of the
reply; the client sends that block back unchanged in its assistant turn, and the API drops
everything before it from then on. Anthropic's context editing (``clear_tool_uses_20250919``
and ``clear_thinking_20251015``, beta ``context-management-2025-06-27``; Anthropic,
"Context editing") clears old tool results and thinking on the server before the model
sees the request, while the client keeps sending its full history.

Alone, either keeps no originals, shows no ledger and reports nothing. The passes here add
what contextfold promises, around the provider's own mechanism:

* they send the provider's request fields (:attr:`request_fields`, merged over a
  pipeline's passes by :func:`request_fields`; the adapters add them to every call);
* they keep the provider's block exactly as it came, where the provider needs it;
* what the provider took out of view (or will, by its documented rule) gets a handle, its
  original kept by the Compactor like any policy's, and a ledger line beside it;
* the report says what was compacted, with tokens before and after.

Both run on every call (``always_run``): the provider acts on every request, so the view
must follow it on every request too. Put them first in a :class:`~contextfold.Pipeline`,
before a local policy: the local policy then works on what the provider kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from .._config import Ge, check_fields
from .._lossless.ledger import Ledger, _fit, _insert, _is_ledger, _merged, _new_entries
from .._lossless.references import handle_for
from .._messages.model import Message, OpaquePart
from .._messages.structure import leading_system_count
from .contract import CompactionContext, Policy, PolicyOutcome, PolicyRun, Target

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "AnthropicCompaction",
    "request_fields",
]

ANTHROPIC_COMPACTION_BETA = "compact-2026-01-12"
ANTHROPIC_CONTEXT_EDITING_BETA = "context-management-2025-06-27"


def request_fields(policy: Policy) -> dict[str, Any]:
    """The provider request fields ``policy`` sends with every call: its own
    ``request_fields``, or those of a pipeline's passes merged (``betas`` joined,
    ``context_management`` edits concatenated). Empty for a policy that sends none."""
    passes: Sequence[Any] = getattr(policy, "passes", (policy,))
    betas: list[str] = []
    edits: list[Any] = []
    other: dict[str, Any] = {}
    for p in passes:
        fields: Mapping[str, Any] = getattr(p, "request_fields", None) or {}
        for name, value in fields.items():
            if name == "betas":
                betas.extend(b for b in value if b not in betas)
            elif name == "context_management":
                edits.extend(value.get("edits", ()))
            else:
                other[name] = value
    if betas:
        other["betas"] = betas
    if edits:
        other["context_management"] = {"edits": edits}
    return other


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
        replaced = [i for i in range(start, at) if not _is_ledger(messages[i])]
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
            entries = _merged((), _new_entries(messages, targets[:len(replaced)], self.ledger),
                              out)
            room = max(0, min(self.ledger.room(context),
                              context.available - context.counter.count_messages(out)))
            message, shed = _fit(entries, room, context, self.ledger)
            if message is not None:
                out = _insert(out, message, after=[start])
            ledger_figures = {"ledger": {"entries": len(entries) - shed, "shed": shed,
                                         "room": room}}
        before, after = context.measure(messages), context.measure(out)
        summary = _block_of(block).get("content")
        details = {"provider": {
            "name": "anthropic", "edit": "compact_20260112", "replaced": len(replaced),
            "handle": handle, "summary_chars": len(summary) if isinstance(summary, str) else 0,
            "tokens_before": before, "tokens_after": after,
        }, **ledger_figures}
        return PolicyOutcome(messages=out, method=self.name, targets=targets, details=details)

