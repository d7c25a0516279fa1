"""contextfold: keep an LLM agent's context small, valid and complete.

A framework-free core of compaction policies; the LangChain and LlamaIndex adapters
live in ``langchain_contextfold`` and ``llama_index.memory.contextfold``.

    >>> import contextfold as cf
    >>> msgs = cf.from_openai([{"role": "user", "content": "hi"}])
    >>> cf.validate(msgs)
    []

The root holds what users call. The rest is grouped by who needs it:

* [`contextfold.policy`][contextfold.policy]: writing a policy (the contract, structure and cutting
  helpers);
* [`contextfold.stores`][contextfold.stores]: history stores, their protocols, search and read-back
  tools;
* [`contextfold.prompts`][contextfold.prompts]: layered system prompts, temporal context, prompt
  segments;
* [`contextfold.errors`][contextfold.errors]: the exception hierarchy;
* [`contextfold.testing`][contextfold.testing]: test doubles, history generators, ``run_policy``;
* [`contextfold.integration`][contextfold.integration]: connecting a framework or a provider (the
  call loop).
"""

from ._contract.report import CompactionReport, CompactionResult
from ._counting.budget import Budget
from ._counting.counters import EstimatingCounter, TiktokenCounter, TokenCounter, counter_for_model
from ._counting.endpoint import EndpointCounter
from ._counting.usage import UsageBreakdown
from ._engine.compactor import Compactor, acompact, compact
from ._engine.events import CompactionApplied, CompactionStarted, ConversationIdle
from ._lossless.ledger import Ledger
from ._messages.anthropic import from_anthropic, to_anthropic
from ._messages.model import ImagePart, Message, TextPart, ToolCall
from ._messages.openai import from_openai, to_openai
from ._messages.validation import repair, validate
from ._policies.clearing import ClearToolResultsPass
from ._policies.dedupe import DedupeSupersededPass
from ._policies.loop_slice import LoopSlicePolicy
from ._policies.passes import StripImagesPass
from ._policies.pipeline import Pipeline
from ._policies.summary import SummaryPolicy
from ._policies.threshold import ThresholdPolicy
from ._policies.tiered import TieredPolicy
from ._policies.truncation import TruncationPolicy
from ._policies.turn_aware import TurnAwarePolicy
from ._summaries.extractive import ExtractiveSummarizer
from ._summaries.service import RetryPolicy
from ._summaries.summarizer import Summarizer
from .errors import BudgetExceededError, ContextfoldError, ConversionError
from .stores import MemoryStore, PostgresStore, SQLiteStore

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "BudgetExceededError",
    "ClearToolResultsPass",
    "CompactionApplied",
    "CompactionReport",
    "CompactionResult",
    "CompactionStarted",
    "Compactor",
    "ContextfoldError",
    "ConversationIdle",
    "ConversionError",
    "DedupeSupersededPass",
    "EndpointCounter",
    "EstimatingCounter",
    "ExtractiveSummarizer",
    "ImagePart",
    "Ledger",
    "LoopSlicePolicy",
    "MemoryStore",
    "Message",
    "Pipeline",
    "PostgresStore",
    "RetryPolicy",
    "SQLiteStore",
    "StripImagesPass",
    "Summarizer",
    "SummaryPolicy",
    "TextPart",
    "ThresholdPolicy",
    "TieredPolicy",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "TruncationPolicy",
    "TurnAwarePolicy",
    "UsageBreakdown",
    "acompact",
    "compact",
    "counter_for_model",
    "from_anthropic",
    "from_openai",
    "repair",
    "to_anthropic",
    "to_openai",
    "validate",
]
