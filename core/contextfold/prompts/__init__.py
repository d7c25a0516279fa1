"""System prompts: layered prompt files, temporal context, and conditional prompt segments
assembled under a token budget."""

from .._policies.temporal import TemporalContext
from ._loader import LoadedPrompt, PromptLoader, session_started_marker
from ._segments import AssembledPrompt, PromptSegment, PromptSegmentRegistry

__all__ = [
    "AssembledPrompt",
    "LoadedPrompt",
    "PromptLoader",
    "PromptSegment",
    "PromptSegmentRegistry",
    "TemporalContext",
    "session_started_marker",
]
