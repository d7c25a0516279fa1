"""Replaying a transcript step by step through a Compactor, as an agent loop would.

A *step* is one model call: the history up to (not including) each assistant message.
The record of each step says what the model would have seen and what compaction did, for
the command line, the HTML report and the fidelity evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._contract.policy import Policy, Target
from .._contract.report import CompactionReport
from .._counting.budget import Budget
from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._stores.protocols import HistoryStore
from .._summaries.summarizer import AnySummarizer

__all__ = ["Replay", "StepRecord", "inserted_texts", "replay", "step_boundaries"]

_INSERTED_SOURCES = ("summary", "ledger")


def inserted_texts(sent: Sequence[Message]) -> tuple[str, ...]:
    """The text of each message compaction put in the model's view (summaries, the ledger,
    notices), in order."""
    return tuple(m.text for m in sent if m.source in _INSERTED_SOURCES)


@dataclass(frozen=True)
class StepRecord:
    """One model call of a replay."""

    step: int
    """1-based number of the model call."""
    history_messages: int
    """Messages in the full history at this call."""
    history_tokens: int
    """Tokens of the full history (what an agent without compaction would send)."""
    sent_messages: int
    """Messages the model sees after compaction."""
    sent_tokens: int
    """Tokens the model sees after compaction."""
    compacted: bool
    """True when a compaction pass ran at this call."""
    llm_calls: int = 0
    """Summarizer calls made at this call."""
    method: str = "none"
    """The policy's method when it ran."""
    targets: tuple[Target, ...] = ()
    """What the pass changed."""
    duration: float = 0.0
    """Seconds the compaction took."""
    inserted: tuple[str, ...] = ()
    """Text of the summaries, ledger and notices in view after the compaction."""
    tokens_before: int = 0
    """Input tokens the compactor counted before it compacted (messages and tool
    definitions): what it compared with the trigger."""
    forced: bool = False
    """True when the compaction ran whatever the trigger said (a provider's overflow)."""


@dataclass
class Replay:
    """The records of a whole replay, plus the budget they ran under."""

    title: str
    """What was replayed (file name, demo name)."""
    budget: Budget
    """The budget of the run."""
    policy: str
    """The policy's name."""
    steps: list[StepRecord] = field(default_factory=list)
    """One record per model call."""
    final_messages: list[Message] = field(default_factory=list)
    """What the model saw at the last step."""
    sent_at: dict[int, list[Message]] = field(default_factory=dict)
    """What the model saw at the steps named in ``replay(capture=...)``."""
    conversation_id: str | None = None
    """The conversation id under which the originals behind the handles are kept, when a
    store keeps them (``read_original`` needs it)."""
    originals: str = ""
    """Where the originals behind the handles are, in words ("the SQLite store ...")."""

    @property
    def compactions(self) -> int:
        """Number of steps where a compaction pass ran."""
        return sum(1 for s in self.steps if s.compacted)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form for reports and benchmark files."""
        return {
            "title": self.title,
            "policy": self.policy,
            "conversation_id": self.conversation_id,
            "originals": self.originals,
            "budget": {
                "input_budget": self.budget.input_budget,
                "trigger_tokens": self.budget.trigger_tokens,
                "target_tokens": self.budget.target_tokens,
            },
            "steps": [
                {
                    "step": s.step,
                    "history_messages": s.history_messages,
                    "history_tokens": s.history_tokens,
                    "sent_messages": s.sent_messages,
                    "sent_tokens": s.sent_tokens,
                    "compacted": s.compacted,
                    "llm_calls": s.llm_calls,
                    "method": s.method,
                    "tokens_before": s.tokens_before,
                    "forced": s.forced,
                    "duration_ms": round(s.duration * 1000, 3),
                    "inserted": list(s.inserted),
                    "targets": [
                        {
                            "index": t.index,
                            "role": t.role,
                            "tool": t.tool_name,
                            "method": t.method,
                            "original_tokens": t.original_tokens,
                            "new_tokens": t.new_tokens,
                            "handle": t.handle,
                        }
                        for t in s.targets
                    ],
                }
                for s in self.steps
            ],
        }


def step_boundaries(messages: Sequence[Message]) -> list[int]:
    """Lengths of the prefixes a model was called with: the index of every assistant message
    (the model wrote it from what came before), plus the whole history at the end.

    An assistant message before the first user message (a greeting: the assistant spoke
    first) is not a step: a request without a user message is not one a provider accepts,
    so there is nothing to compact for it.
    """
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    cuts = [i for i, m in enumerate(messages) if m.role == "assistant" and i > first_user]
    if not cuts or cuts[-1] != len(messages):
        cuts.append(len(messages))
    return cuts


def replay(
    messages: Sequence[Message],
    *,
    policy: Policy,
    budget: Budget,
    counter: TokenCounter | None = None,
    summarizer: AnySummarizer | None = None,
    title: str = "transcript",
    on_step: Callable[[StepRecord], None] | None = None,
    capture: Sequence[int] = (),
    store: HistoryStore | None = None,
) -> Replay:
    """Feed ``messages`` to a fresh ``Compactor`` one model call at a time.

    The compactor sees each call's full history (as an agent loop passes it), so its
    incremental path is exercised exactly as in production. ``capture`` names steps whose
    sent messages are kept in ``Replay.sent_at`` (the last step is always kept). With a
    ``store`` the originals of what is compacted are kept in it under the conversation id
    ``title``.
    """
    from .._counting.counters import counter_for_model
    from .._engine.compactor import Compactor

    counter = counter or counter_for_model(budget.model)
    compactor = Compactor(policy=policy, budget=budget, counter=counter, summarizer=summarizer,
                          store=store, conversation_id=title if store is not None else None)
    run = Replay(title=title, budget=budget, policy=getattr(policy, "name", type(policy).__name__),
                 conversation_id=title if store is not None else None,
                 originals=f"the store ({type(store).__name__})" if store is not None else
                 "the replay's in-memory cache only (gone when it ended)")
    sent: list[Message] = []
    for number, cut in enumerate(step_boundaries(messages), start=1):
        history = list(messages[:cut])
        result = compactor.compact(history)
        report: CompactionReport = result.report
        sent = result.messages
        record = StepRecord(
            step=number,
            history_messages=len(history),
            history_tokens=counter.count_messages(history),
            sent_messages=len(sent),
            sent_tokens=counter.count_messages(sent),
            compacted=report.method != "none",
            llm_calls=report.llm_calls,
            method=report.method,
            targets=report.targets,
            duration=report.duration,
            inserted=inserted_texts(sent) if report.method != "none" else (),
            tokens_before=report.tokens_before,
            forced=report.forced,
        )
        run.steps.append(record)
        if number in capture:
            run.sent_at[number] = list(sent)
        if on_step is not None:
            on_step(record)
    run.final_messages = list(sent)
    return run
