"""Prompt sources, synthetic nudges and the encouragement counter.

Every request needs a user message that drives the model: the *prompt source*. This
module finds it and, when there is none, makes the one synthetic nudge. It is the only
place in contextfold that creates nudges (the message-format guarantee: "one place, one time").

Prompt kinds, highest priority first:

1. ``direct``: a commander's direct message (``source="direct"``; a plain user message
   with no ``source`` counts as direct);
2. ``commander_broadcast``: ``source="broadcast"`` with an empty (or missing) ``sender_id``;
3. ``swarm_broadcast``: ``source="broadcast"`` from another agent (non-empty ``sender_id``);
4. ``nudge``: synthetic, made here when nothing else exists; never stored.

User messages whose ``source`` is in `NON_PROMPT_SOURCES` (earlier nudges, summaries,
session markers) are context, not prompts.

The search order of `choose_prompt` (the message-format guarantee's sliding-window
protection):

1. the scan window (the last ``max_context_messages`` of the history);
2. the most recent real prompt before the window when nothing has answered it yet (a task
   pushed out of the window by the agent's own tool calls keeps the agent running until it
   answers), else the most recent broadcast anywhere in the given history (a mission stays
   a mission after it was acknowledged);
3. the store: ``store.most_recent_broadcast(conversation_id, swarm_id)`` (this
   conversation's broadcast, else the swarm's commander broadcast, so a new agent inherits
   the swarm's mission);
4. a synthetic nudge whose text escalates with the counter.

Finding a real prompt resets ``state.encouragement_count`` to 0 and wakes an idle
conversation; adding a nudge increments it, and at ``NudgeConfig.max_encouragements``
consecutive nudges the conversation turns idle (``state.idle``, ``state.idle_reason``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from .._config import Ge, check_fields
from .._contract.policy import CompactionContext, ConversationState
from .._messages.model import Message
from .._messages.prompt_kinds import (
    PromptKind,
    find_prompt,
    latest_broadcast,
    prompt_kind,
    unanswered_prompt,
)
from .._stores.protocols import BroadcastStore
from ..errors import ConfigurationError

__all__ = [
    "FIRM",
    "GENTLE",
    "URGENT",
    "NudgeConfig",
    "PromptChoice",
    "choose_prompt",
    "prompt_notes",
    "restored_on_error",
]

GENTLE = "Continue your mission. Check notifications and coordinate with the swarm."
"""The loop-slice design's first nudge."""
FIRM = "You need to respond. Check your notifications and status."
"""The loop-slice design's second nudge."""
URGENT = "URGENT: Respond immediately. Check your system status."
"""The loop-slice design's third nudge."""

@dataclass(frozen=True)
class NudgeConfig:
    """The synthetic nudge and the encouragement counter.

    Example::

        NudgeConfig(texts=("Keep going.", "Please answer.", "Answer now."))
    """

    texts: tuple[str, ...] = (GENTLE, FIRM, URGENT)
    """Nudge texts by attempt: the first for the first nudge and so on; the last repeats."""
    max_encouragements: Annotated[int, Ge(1)] = 3
    """Consecutive nudges after which the conversation turns idle."""
    search_guidance: str = "Context is limited - use search tools for older information."
    """Appended to the nudge when a policy enables ``include_search_guidance``."""

    def __post_init__(self) -> None:
        if isinstance(self.texts, str) or not self.texts:
            raise ConfigurationError("texts must be a non-empty tuple of strings")
        if not all(isinstance(t, str) and t.strip() for t in self.texts):
            raise ConfigurationError(
                f"every nudge text must be a non-empty string, got {self.texts!r}"
            )
        object.__setattr__(self, "texts", tuple(self.texts))
        check_fields(self)

    @property
    def idle_reason(self) -> str:
        """The reason recorded when the conversation turns idle."""
        return f"failed to respond after {self.max_encouragements} encouragements"

    def text_for(self, attempt: int) -> str:
        """The nudge text for the ``attempt``-th consecutive nudge (1-based)."""
        return self.texts[min(max(attempt, 1), len(self.texts)) - 1]


@dataclass(frozen=True)
class PromptChoice:
    """The prompt source a policy builds on."""

    message: Message
    """The prompt itself (a real user message, a stored broadcast, or a fresh nudge)."""
    kind: PromptKind
    """Which kind of prompt it is."""
    origin: Literal["window", "history", "store", "nudge"]
    """Where it was found."""
    index: int | None = None
    """Its position in the policy's input; ``None`` when it came from the store or is a nudge."""


def stored_broadcast(context: CompactionContext, swarm_id: str | None) -> Message | None:
    """The store's most recent broadcast for this conversation, else the swarm's.

    Used only when the store offers ``most_recent_broadcast`` and the context names the
    conversation (``swarm_id=None`` lets the store look in every swarm the conversation
    joined). A store error propagates
    (a lookup that silently failed would idle a running agent).
    """
    store = context.store
    if not isinstance(store, BroadcastStore) or not context.conversation_id:
        return None
    found = store.most_recent_broadcast(context.conversation_id, swarm_id=swarm_id)
    if not isinstance(found, Message) or found.role != "user":
        return None
    return found


def make_nudge(
    state: ConversationState,
    config: NudgeConfig,
    *,
    now: datetime | None,
    search_guidance: bool,
) -> Message:
    """The one synthetic nudge, and the counter update that goes with it.

    Increments ``state.encouragement_count`` and turns the conversation idle at
    ``config.max_encouragements``. An idle conversation keeps its count and gets the last
    text again (the message-format guarantee: idle with no prompt means no further action); the
    adapter is expected to stop its loop on the idle event.
    """
    if not state.idle:
        state.encouragement_count += 1
        if state.encouragement_count >= config.max_encouragements:
            state.idle = True
            state.idle_reason = config.idle_reason
    text = config.text_for(state.encouragement_count)
    if search_guidance:
        text = f"{text}\n{config.search_guidance}"
    return Message(
        role="user",
        content=text,
        source="nudge",
        created_at=now,
        metadata={"synthetic": True, "encouragement": state.encouragement_count},
    )


def reset(state: ConversationState) -> None:
    """A real prompt was found: the counter restarts and an idle conversation runs again."""
    state.encouragement_count = 0
    state.idle = False
    state.idle_reason = None


def choose_prompt(
    messages: Sequence[Message],
    window_start: int,
    context: CompactionContext,
    *,
    nudges: NudgeConfig,
    swarm_id: str | None = None,
    selection: Literal["recency", "priority"] = "recency",
    search_guidance: bool = False,
) -> PromptChoice:
    """The prompt source for the next request, updating ``context.state`` (module docstring).

    This mutates ``context.state``, the one mutable, per-conversation object a policy sees.
    """
    from .scans import PromptScan  # the scan reads prompt kinds from this module

    # Through the conversation's lineage, the positions found by earlier calls: only what
    # was appended is read (an agent's long turn would be walked back at every call).
    scan = PromptScan.of(messages, context)
    if scan is None:
        index = find_prompt(messages, window_start, selection=selection)
    else:
        index = scan.find_prompt(window_start, len(messages), selection)
    if index is None:
        index = (unanswered_prompt(messages, window_start) if scan is None
                 else scan.unanswered_prompt(window_start))
        if index is None:
            index = (latest_broadcast(messages, window_start) if scan is None
                     else scan.latest_broadcast(window_start))
        origin: Literal["window", "history"] = "history"
    else:
        origin = "window"
    if index is not None:
        reset(context.state)
        kind = prompt_kind(messages[index])
        assert kind is not None
        return PromptChoice(messages[index], kind, origin, index)
    stored = stored_broadcast(context, swarm_id)
    if stored is not None:
        reset(context.state)
        return PromptChoice(stored, prompt_kind(stored) or "direct", "store")
    nudge = make_nudge(context.state, nudges, now=context.now, search_guidance=search_guidance)
    return PromptChoice(nudge, "nudge", "nudge")


def prompt_notes(
    choice: PromptChoice, state: ConversationState, nudges: NudgeConfig
) -> tuple[str, ...]:
    """Report lines about where the prompt source came from."""
    if choice.origin == "nudge":
        note = (
            f"no prompt source found; added nudge {state.encouragement_count}"
            f"/{nudges.max_encouragements}"
        )
        return (note, f"conversation is idle: {state.idle_reason}") if state.idle else (note,)
    if choice.origin == "store":
        return ("prompt source outside the history: used the store's latest broadcast",)
    if choice.origin == "history":
        what = "broadcast" if choice.message.source == "broadcast" else "unanswered prompt"
        return (f"prompt source outside the scan window: used the latest {what}",)
    return ()


@contextmanager
def restored_on_error(state: ConversationState) -> Iterator[None]:
    """Undo the counter update when the policy fails after choosing its prompt: a nudge
    that is never sent must not count toward idle."""
    saved = (state.encouragement_count, state.idle, state.idle_reason)
    try:
        yield
    except BaseException:
        state.encouragement_count, state.idle, state.idle_reason = saved
        raise
