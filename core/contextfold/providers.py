"""The providers' own compaction, behind the policy contract (see
`contextfold._policies.provider_native`).

::

    import contextfold as cf
    from contextfold.providers import AnthropicCompaction, request_fields

    policy = cf.Pipeline(AnthropicCompaction(trigger=120_000), cf.ThresholdPolicy())
    compactor = cf.Compactor(policy=policy, budget=cf.Budget.for_model("claude-sonnet-4-6"))
    system, messages = cf.to_anthropic(compactor.compact(history).messages)
    reply = client.beta.messages.create(model=..., max_tokens=..., system=system,
                                        messages=messages, **request_fields(policy))

The adapters (``with_compaction``, ``CompactionMiddleware``) add
[`request_fields`][contextfold.providers.request_fields] to every call themselves. OpenAI's
``responses.compact`` is a call of its own, which
[`OpenAIResponsesCompaction`][contextfold.providers.OpenAIResponsesCompaction] asks the driver to
make ([`openai_responses_compact`][contextfold.providers.openai_responses_compact]);
[`to_responses`][contextfold.providers.to_responses] and
[`from_responses`][contextfold.providers.from_responses] convert to and from Responses API items.
"""

from ._messages.responses import from_responses, to_responses
from ._policies.provider_native import (
    ANTHROPIC_COMPACTION_BETA,
    ANTHROPIC_CONTEXT_EDITING_BETA,
    AnthropicCompaction,
    AnthropicContextEditing,
    OpenAIResponsesCompaction,
    ProviderReply,
    ProviderRequest,
    openai_responses_compact,
    request_fields,
)

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "AnthropicCompaction",
    "AnthropicContextEditing",
    "OpenAIResponsesCompaction",
    "ProviderReply",
    "ProviderRequest",
    "from_responses",
    "openai_responses_compact",
    "request_fields",
    "to_responses",
]
