"""Provider-native compaction behind the policy contract.

Providers compact on their side too. Anthropic's server-side compaction (the
``compact_20260112`` edit of the ``context_management`` request field, beta
``compact-2026-01-12``; Anthropic, "Compaction") summarizes the conversation once its input
passes a trigger and returns the summary as a ``compaction`` block at the start of the
reply; the client sends that block back unchanged in its assistant turn, and the API drops
everything before it from then on. Anthropic's context editing (``clear_tool_uses_20250919``
and ``clear_thinking_20251015``, beta ``context-management-2025-06-27``; Anthropic,
"Context editing") clears old tool results and thinking on the server before the model
sees the request, while the client keeps sending its full history. OpenAI's
``responses.compact`` (OpenAI, "Compact a response") returns the conversation's user
messages and one opaque ``compaction`` item that the following requests carry instead of
what it replaced.

Alone, none keeps the originals, shows a ledger or reports anything. The passes here add
what contextfold promises, around the provider's own mechanism:

* they send the provider's request fields (``request_fields``, merged over a pipeline's
  passes by [`request_fields`][contextfold.providers.request_fields]; the adapters add them to every
  call), or ask the driver to call the provider's endpoint (a
  [`ProviderRequest`][contextfold.providers.ProviderRequest],
  `contextfold._policies.provider_native.calls`);
* they keep the provider's block exactly as it came, where the provider needs it;
* what the provider took out of view (or will, by its documented rule) gets a handle, its
  original kept by the Compactor like any policy's, and a ledger line beside it;
* the report says what was compacted, with tokens before and after.

The Anthropic passes run on every call (``always_run``): the provider acts on every
request, so the view must follow it on every request too. Put them first in a
[`Pipeline`][contextfold.Pipeline], before a local policy: the local policy then works on what
the provider kept. OpenAI's compaction runs at the budget's trigger like a local policy:
its output is the prefix of the next calls.
"""

from .anthropic_passes import (
    ANTHROPIC_COMPACTION_BETA,
    ANTHROPIC_CONTEXT_EDITING_BETA,
    AnthropicCompaction,
    AnthropicContextEditing,
)
from .calls import ProviderReply, ProviderRequest, performed, request_fields
from .openai_compaction import OpenAIResponsesCompaction, openai_responses_compact

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "AnthropicCompaction",
    "AnthropicContextEditing",
    "OpenAIResponsesCompaction",
    "ProviderReply",
    "ProviderRequest",
    "openai_responses_compact",
    "performed",
    "request_fields",
]
