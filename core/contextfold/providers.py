"""The providers' own compaction, behind the policy contract (see
:mod:`contextfold._policies.provider_native`).

::

    import contextfold as cf
    from contextfold.providers import AnthropicCompaction, request_fields

    policy = cf.Pipeline(AnthropicCompaction(trigger=120_000), cf.ThresholdPolicy())
    compactor = cf.Compactor(policy=policy, budget=cf.Budget.for_model("claude-sonnet-4-6"))
    system, messages = cf.to_anthropic(compactor.compact(history).messages)
    reply = client.beta.messages.create(model=..., max_tokens=..., system=system,
                                        messages=messages, **request_fields(policy))

The adapters (``with_compaction``, ``CompactionMiddleware``) add :func:`request_fields` to
every call themselves.
"""

from ._policies.provider_native import (
    ANTHROPIC_COMPACTION_BETA,
    ANTHROPIC_CONTEXT_EDITING_BETA,
    AnthropicCompaction,
    AnthropicContextEditing,
    request_fields,
)

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "ANTHROPIC_CONTEXT_EDITING_BETA",
    "AnthropicCompaction",
    "AnthropicContextEditing",
    "request_fields",
]
