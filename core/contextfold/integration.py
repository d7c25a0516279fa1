"""For code that connects contextfold to a framework or a provider: the adapters use it.

An adapter converts messages and sends them; everything else about a model call is the
[`CallLoop`][contextfold.integration.CallLoop] (one per conversation, kept by
[`Conversations`][contextfold.integration.Conversations]): compaction with every fixed cost counted,
the overflow retry below the provider's stated limit, calibration from the reported
[`Usage`][contextfold.integration.Usage], the idle decision and persistence with
[`stable_id`][contextfold.integration.stable_id]
([`with_stable_id`][contextfold.integration.with_stable_id] gives a converted message that id), the
token counts kept beside the stored messages included
([`CountKeeper`][contextfold.integration.CountKeeper], which an adapter that stores messages itself
uses directly). Provider errors are read with [`overflow_of`][contextfold.integration.overflow_of]
and [`error_kind`][contextfold.integration.error_kind]; LLM summarizers build their prompt with
[`summary_prompt`][contextfold.integration.summary_prompt], or repeat the agent's previous request
with [`cache_true_messages`][contextfold.integration.cache_true_messages] (cache-true requests,
[`SentRequest`][contextfold.integration.SentRequest]).
[`message_to_dict`][contextfold.integration.message_to_dict] and
[`message_from_dict`][contextfold.integration.message_from_dict] are the stores' JSON form of a
message (a framework's own serialization can embed it).
"""

from ._contract.policy import SentRequest
from ._counting.budget import MODEL_LIMITS, ModelLimits
from ._counting.counters import encoding_for_model
from ._engine.calls import (
    CallLoop,
    Conversations,
    Usage,
    View,
    opening_key,
    stable_id,
    with_stable_id,
)
from ._engine.controls import COMPACT_CONTEXT_DESCRIPTION, compact_context_tool
from ._engine.kept_counts import CountKeeper
from ._messages.model import at_index
from ._optional import require as require_extra
from ._provider_errors import (
    OVERFLOW_PHRASES,
    ErrorKind,
    Overflow,
    error_kind,
    is_context_overflow,
    overflow_figures,
    overflow_of,
)
from ._stores.codec import decode as message_from_dict
from ._stores.codec import encode as message_to_dict
from ._summaries.prompt import (
    SUMMARY_INSTRUCTION_OPENING,
    SUMMARY_SYSTEM_PROMPT,
    cache_true_messages,
    positions_hold,
    render_transcript,
    span_ranges,
    summary_instruction,
    summary_prompt,
)
from ._summaries.summarizer import AnySummarizer, AsyncSummarizer

__all__ = [
    "COMPACT_CONTEXT_DESCRIPTION",
    "MODEL_LIMITS",
    "OVERFLOW_PHRASES",
    "SUMMARY_INSTRUCTION_OPENING",
    "SUMMARY_SYSTEM_PROMPT",
    "AnySummarizer",
    "AsyncSummarizer",
    "CallLoop",
    "Conversations",
    "CountKeeper",
    "ErrorKind",
    "ModelLimits",
    "Overflow",
    "SentRequest",
    "Usage",
    "View",
    "at_index",
    "cache_true_messages",
    "compact_context_tool",
    "encoding_for_model",
    "error_kind",
    "is_context_overflow",
    "message_from_dict",
    "message_to_dict",
    "opening_key",
    "overflow_figures",
    "overflow_of",
    "positions_hold",
    "render_transcript",
    "require_extra",
    "span_ranges",
    "stable_id",
    "summary_instruction",
    "summary_prompt",
    "with_stable_id",
]
