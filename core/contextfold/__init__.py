"""contextfold: keep an LLM agent's context small, valid and complete.

A framework-free core of compaction policies; the LangChain and LlamaIndex adapters
live in ``langchain_contextfold`` and ``llama_index.memory.contextfold``.

    >>> import contextfold as cf
    >>> msgs = cf.from_openai([{"role": "user", "content": "hi"}])
    >>> cf.validate(msgs)
    []
"""

from ._counting.budget import MODEL_LIMITS, Budget, ModelLimits
from ._counting.counters import (
    EstimatingCounter,
    TiktokenCounter,
    TokenCounter,
    counter_for_model,
    encoding_for_model,
)
from ._counting.usage import UsageBreakdown
from ._engine.compactor import Compactor, acompact, compact
from ._engine.events import CompactionApplied, CompactionStarted, ConversationIdle
from ._engine.result import CompactionReport, CompactionResult
from ._lossless.clearing import ClearToolResultsPass
from ._lossless.dedupe import DedupeSupersededPass
from ._lossless.learning import LearnedImportance, learning_of, record_searches
from ._lossless.references import (
    READ_ORIGINAL_GUIDANCE,
    ReferenceCache,
    default_references,
    handle_for,
    read_original,
    read_original_tool,
)
from ._messages.anthropic import from_anthropic, to_anthropic
from ._messages.model import ContentPart, ImagePart, Message, OpaquePart, Role, TextPart, ToolCall
from ._messages.openai import from_openai, to_openai
from ._messages.structure import Group, Turn, split_groups, split_turns, tool_loops
from ._messages.validation import Problem, repair, validate
from ._policies.head_tail import HeadTail
from ._policies.importance import ImportanceScore, score_importance
from ._policies.loop_slice import LoopSlicePolicy
from ._policies.passes import StripImagesPass
from ._policies.pipeline import Pipeline
from ._policies.prompt_source import NudgeConfig
from ._policies.summary import SummaryPolicy
from ._policies.threshold import ThresholdPolicy
from ._policies.tiered import TieredPolicy
from ._policies.truncation import TruncationPolicy
from ._policies.turn_aware import TurnAwarePolicy
from ._summaries.cache import LRUSummaryCache, SummaryCache
from ._summaries.extractive import ExtractiveSummarizer
from ._summaries.identifiers import extract_identifiers
from ._summaries.service import RetryPolicy
from ._summaries.summarizer import AsyncSummarizer, ScriptedSummarizer, Summarizer
from .errors import (
    BudgetExceededError,
    CompactionError,
    ConfigurationError,
    ContextfoldError,
    ConversionError,
    CorruptRowError,
    MissingExtraError,
    NoProgressError,
    SchemaVersionError,
    StoreError,
    SummarizerError,
    TranscriptError,
)
from .policy import (
    CompactionContext,
    ConversationState,
    Policy,
    PolicyOutcome,
    SimplePolicy,
    SummaryReply,
    SummaryRequest,
    Target,
)
from .prompts._loader import LoadedPrompt, PromptLoader, TemporalContext, session_started_marker
from .prompts._segments import AssembledPrompt, PromptSegment, PromptSegmentRegistry
from .stores import (
    SEARCH_GUIDANCE,
    BaseStore,
    BroadcastStore,
    HistoryStore,
    MemoryStore,
    PostgresStore,
    ReferenceStore,
    SearchableStore,
    SearchHit,
    SearchToolSpec,
    SQLiteStore,
    SummaryStore,
    search_tools,
)

# -- converters (issue: foundation) -------------------------------------------------
# -- policies ------------------------------------------------------------------------
# -- compactor, summarizers, events --------------------------------------------------
# -- stores ---------------------------------------------------------------------------
# -- lossless (handles, read-back, clearing, dedupe, segments, learning) -------------

__version__ = "0.1.0"

__all__ = [
    "MODEL_LIMITS",
    "READ_ORIGINAL_GUIDANCE",
    "SEARCH_GUIDANCE",
    "AssembledPrompt",
    "AsyncSummarizer",
    "BaseStore",
    "BroadcastStore",
    "Budget",
    "BudgetExceededError",
    "ClearToolResultsPass",
    "CompactionApplied",
    "CompactionContext",
    "CompactionError",
    "CompactionReport",
    "CompactionResult",
    "CompactionStarted",
    "Compactor",
    "ConfigurationError",
    "ContentPart",
    "ContextfoldError",
    "ConversationIdle",
    "ConversationState",
    "ConversionError",
    "CorruptRowError",
    "DedupeSupersededPass",
    "EstimatingCounter",
    "ExtractiveSummarizer",
    "Group",
    "HeadTail",
    "HistoryStore",
    "ImagePart",
    "ImportanceScore",
    "LRUSummaryCache",
    "LearnedImportance",
    "LoadedPrompt",
    "LoopSlicePolicy",
    "MemoryStore",
    "Message",
    "MissingExtraError",
    "ModelLimits",
    "NoProgressError",
    "NudgeConfig",
    "OpaquePart",
    "Pipeline",
    "Policy",
    "PolicyOutcome",
    "PostgresStore",
    "Problem",
    "PromptLoader",
    "PromptSegment",
    "PromptSegmentRegistry",
    "ReferenceCache",
    "ReferenceStore",
    "RetryPolicy",
    "Role",
    "SQLiteStore",
    "SchemaVersionError",
    "ScriptedSummarizer",
    "SearchHit",
    "SearchToolSpec",
    "SearchableStore",
    "SimplePolicy",
    "StoreError",
    "StripImagesPass",
    "Summarizer",
    "SummarizerError",
    "SummaryCache",
    "SummaryPolicy",
    "SummaryReply",
    "SummaryRequest",
    "SummaryStore",
    "Target",
    "TemporalContext",
    "TextPart",
    "ThresholdPolicy",
    "TieredPolicy",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "TranscriptError",
    "TruncationPolicy",
    "Turn",
    "TurnAwarePolicy",
    "UsageBreakdown",
    "acompact",
    "compact",
    "counter_for_model",
    "default_references",
    "encoding_for_model",
    "extract_identifiers",
    "from_anthropic",
    "from_openai",
    "handle_for",
    "learning_of",
    "read_original",
    "read_original_tool",
    "record_searches",
    "repair",
    "score_importance",
    "search_tools",
    "session_started_marker",
    "split_groups",
    "split_turns",
    "to_anthropic",
    "to_openai",
    "tool_loops",
    "validate",
]
