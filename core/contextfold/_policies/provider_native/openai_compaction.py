"""OpenAI's ``responses.compact`` behind the policy contract
([`OpenAIResponsesCompaction`][contextfold.providers.OpenAIResponsesCompaction])."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._contract.policy import CompactionContext, PolicyOutcome, PolicyRun, Target
from ..._lossless.ledger import Ledger
from ..._lossless.ledger_payload import is_ledger
from ..._lossless.references import handle_for
from ..._messages.model import Message, OpaquePart
from ..._messages.structure import leading_system_count
from .calls import ProviderReply, ProviderRequest, ledger_after

__all__ = ["OpenAIResponsesCompaction", "openai_responses_compact"]


def openai_responses_compact(
    client: Any, model: str, **kwargs: Any
) -> Callable[[Sequence[Message]], list[Message]]:
    """The call [`OpenAIResponsesCompaction`][contextfold.providers.OpenAIResponsesCompaction]
    makes, through an ``openai.OpenAI``
    client: the messages as Responses API items to ``client.responses.compact`` (OpenAI,
    "Compact a response": the output is the conversation's user messages followed by one
    ``compaction`` item whose ``encrypted_content`` only OpenAI reads), read back as
    messages, the item kept whole."""
    from ..._messages.responses import from_responses, to_responses

    def compact(messages: Sequence[Message]) -> list[Message]:
        instructions, items = to_responses(messages)
        extra = {"instructions": instructions} if instructions else {}
        # The items as they came over the wire: the SDK's models would read the returned
        # user messages as output messages and write them back changed.
        raw = client.responses.with_raw_response.compact(model=model, input=items, **extra,
                                                         **kwargs)
        return from_responses(raw.http_response.json()["output"])

    return compact


@dataclass(frozen=True)
class OpenAIResponsesCompaction:
    """OpenAI's ``responses.compact`` behind the policy contract.

    Over the budget's trigger (or forced), the conversation after the system messages goes
    to the provider's compaction endpoint (``compact``, made by
    [`openai_responses_compact`][contextfold.providers.openai_responses_compact]), as a request the
    driver makes. What comes back, the user messages and one opaque ``compaction`` item, replaces
    the conversation: the item exactly as returned (its ``encrypted_content`` is OpenAI's to read),
    the user messages as the caller's own objects. Everything else it replaced gets one handle, its
    original kept by the Compactor, with a ledger line per item after the compaction item. The
    output is the prefix of the next calls, so the item is sent back with every request,
    as the Responses API requires, until the next compaction replaces it.

    A failed endpoint call leaves the history as it is (a note says why) to the engine's
    budget check and floor.

    Args:
        compact: the provider call, from a list of messages to the compacted messages.
        ledger: the ledger of what the compaction replaced; ``None`` for none.
    """

    compact: Callable[[Sequence[Message]], Sequence[Message]]
    ledger: Ledger | None = field(default_factory=Ledger)
    name = "openai_responses_compaction"
    always_run = False

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Compact through the provider when over the trigger (see the class docstring)."""
        if not context.force and not context.exceeds(messages, context.budget.trigger_tokens):
            return PolicyOutcome(messages=messages)
        lead = leading_system_count(messages)
        previous = [m for m in messages[lead:] if is_ledger(m)]
        body = [m for m in messages[lead:] if not is_ledger(m)]
        if not body:
            return PolicyOutcome(messages=messages)
        compact = self.compact
        reply = yield ProviderRequest(messages=tuple(body), instructions="",
                                      purpose="openai_compact",
                                      perform=lambda: list(compact(body)))
        payload = reply.payload if isinstance(reply, ProviderReply) else None
        if not payload:
            return PolicyOutcome(messages=messages, notes=(
                f"responses.compact failed ({getattr(reply, 'error', None)}); the history "
                "went on as it was",))
        return self._outcome(messages, context, lead, previous, list(payload))

    def _outcome(self, messages: Sequence[Message], context: CompactionContext, lead: int,
                 previous: list[Message], compacted: list[Message]) -> PolicyOutcome:
        own = {(m.role, m.text): m for m in messages[lead:] if m.role == "user"
               and not is_ledger(m)}
        kept = [own.get((m.role, m.text), m) if m.role == "user" else m for m in compacted]
        present = {id(m) for m in kept}
        replaced = [i for i in range(lead, len(messages))
                    if id(messages[i]) not in present and not is_ledger(messages[i])]
        handle = handle_for([messages[i] for i in replaced]) if replaced else None
        count = context.counter.count_message
        targets = tuple(Target(i, messages[i].role, "summarized", count(messages[i]), 0,
                               messages[i].name if messages[i].role == "tool" else None,
                               handle) for i in replaced)
        out = [*messages[:lead], *kept]
        at = next((lead + k for k in range(len(kept) - 1, -1, -1) if kept[k].role == "assistant"
                   and any(isinstance(p, OpaquePart) for p in _opaque(kept[k]))), len(out) - 1)
        figures: dict[str, Any] = {}
        if self.ledger is not None and targets:
            out, figures = ledger_after(messages, targets, out, context, self.ledger, after=at,
                                        previous=previous)
        details = {"provider": {
            "name": "openai", "endpoint": "responses.compact", "replaced": len(replaced),
            "handle": handle, "tokens_before": context.measure(messages),
            "tokens_after": context.measure(out),
        }, **figures}
        return PolicyOutcome(messages=out, method=self.name, targets=targets, details=details)


def _opaque(message: Message) -> tuple[Any, ...]:
    return () if isinstance(message.content, str) else message.content
