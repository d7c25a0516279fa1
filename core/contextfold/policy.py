"""For policy authors: the policy contract and the helpers the built-in policies use.

A policy is a pure function of (messages, context) to an outcome; when it needs a summary
it yields a [`SummaryRequest`][contextfold.policy.SummaryRequest] and receives a
[`SummaryReply`][contextfold.policy.SummaryReply] (sans-IO), so the
same policy runs under ``compact``, ``acompact`` and the ``Compactor``::

    from contextfold.policy import CompactionContext, PolicyOutcome, PolicyRun, SummaryRequest

    class KeepLastTen:
        name = "keep_last_ten"
        always_run = False

        def run(self, messages, context: CompactionContext) -> PolicyRun:
            old, recent = messages[:-10], messages[-10:]
            if not old:
                return PolicyOutcome(messages=messages)  # the input itself: nothing changed
            reply = yield SummaryRequest(messages=tuple(old), instructions="Summarize.")
            ...

Helpers: the structure of a history (groups, turns, tool loops), head+tail cutting with a
handle to the original, importance scoring, identifier extraction, prompt kinds and nudges.
``contextfold.testing.run_policy`` drives a policy by hand in tests.
"""

from ._contract.policy import (
    CompactionContext,
    ConversationState,
    Lineage,
    Policy,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
    Target,
)
from ._head_tail import HeadTail, truncate_head_tail
from ._identifiers.salience import identifiers_and_names
from ._identifiers.values import extract_identifiers
from ._lossless.references import HANDLE_RE, handle_for, handle_text
from ._messages.model import ContentPart, OpaquePart, Role
from ._messages.prompt_kinds import prompt_kind
from ._messages.structure import (
    SYSTEM_ROLES,
    Group,
    Turn,
    leading_system_count,
    split_groups,
    split_turns,
    tool_loops,
)
from ._policies.fitting import shrink_message
from ._policies.importance import ImportanceScore, score_importance
from ._policies.learning import LearnedImportance, learning_of
from ._policies.prompt_source import NudgeConfig
from ._policies.simple import SimplePolicy

__all__ = [
    "HANDLE_RE",
    "SYSTEM_ROLES",
    "CompactionContext",
    "ContentPart",
    "ConversationState",
    "Group",
    "HeadTail",
    "ImportanceScore",
    "LearnedImportance",
    "Lineage",
    "NudgeConfig",
    "OpaquePart",
    "Policy",
    "PolicyOutcome",
    "PolicyRun",
    "Role",
    "SimplePolicy",
    "SummaryReply",
    "SummaryRequest",
    "Target",
    "Turn",
    "extract_identifiers",
    "handle_for",
    "handle_text",
    "identifiers_and_names",
    "leading_system_count",
    "learning_of",
    "prompt_kind",
    "score_importance",
    "shrink_message",
    "split_groups",
    "split_turns",
    "tool_loops",
    "truncate_head_tail",
]
