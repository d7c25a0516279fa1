"""Fidelity evaluation: what share of a transcript's facts survives compaction.

Probes are the identifiers of the transcript (ids, numbers, e-mails, URLs, dates, paths,
found in every message but the system prompt, which every contender keeps) and, where the
data gives them, the values the final action needs (tau-bench's gold action arguments
that occur in the conversation). A contender's score is the share of probes present in
the context it would send at the last step, under the same token allowance for all.

A context a provider would reject (invalid sequence) or that exceeds the allowance keeps
nothing: that request fails, so its probes count as lost. A contender that raises (for
example ``BudgetExceededError``) keeps nothing either; the table counts each case.

The allowance at a fraction ``f`` is the system prompt plus ``f`` of the rest of the
transcript: every contender keeps the system prompt whole, and on short transcripts with
long system prompts (tau-bench's airline policy is ~1,300 tokens) ``f`` of the whole
transcript would not even hold the system prompt.

Our policies run through a ``Compactor`` call by call, exactly as in an agent loop; the
peers (``_eval_peers``) run in the same process on the same probes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._counting.budget import Budget
from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.structure import SYSTEM_ROLES
from .._policies.contract import Policy
from .._summaries.summarizer import AnySummarizer
from .transcripts import Transcript

__all__ = ["Contender", "EvalRow", "context_text", "evaluate", "our_contender", "probes_of"]

Compact = Callable[[Transcript, int, TokenCounter], list[Message]]
"""A contender: (transcript, token allowance, counter) -> the context it would send."""


@dataclass(frozen=True)
class Contender:
    """Something that shrinks a history: one of our policies or a peer."""

    name: str
    """Shown in the table."""
    compact: Compact
    """Produces the final context."""
    ours: bool = True
    """False for peers."""


@dataclass
class EvalRow:
    """The result of one contender on a set of transcripts at one allowance."""

    contender: str
    """The contender's name."""
    ours: bool
    """True for our policies."""
    fraction: float
    """The allowance as a share of each transcript's tokens."""
    probes: int = 0
    """Probes checked, over all transcripts."""
    kept: int = 0
    """Probes present in the final contexts."""
    gold: int = 0
    """Gold-value probes checked."""
    gold_kept: int = 0
    """Gold-value probes present."""
    tokens_before: int = 0
    """Tokens of the full transcripts."""
    tokens_after: int = 0
    """Tokens of the final contexts."""
    over_budget: int = 0
    """Transcripts whose final context exceeded the allowance."""
    invalid: int = 0
    """Transcripts whose final context a provider would reject."""
    errors: list[str] = field(default_factory=list)
    """Failures, one line each."""

    @property
    def score(self) -> float:
        """Share of identifier probes kept."""
        return self.kept / self.probes if self.probes else 1.0

    @property
    def gold_score(self) -> float:
        """Share of gold-value probes kept."""
        return self.gold_kept / self.gold if self.gold else float("nan")

    @property
    def saved(self) -> float:
        """Share of tokens removed."""
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0


def context_text(messages: Sequence[Message]) -> str:
    """All text a model sees in ``messages``: content, reasoning, tool names and arguments."""
    parts: list[str] = []
    for m in messages:
        parts.append(m.text)
        if m.reasoning:
            parts.append(m.reasoning)
        for call in m.tool_calls:
            parts.append(call.name)
            parts.append(call.arguments)
    return "\n".join(parts)


def probes_of(transcript: Transcript) -> tuple[list[str], list[str]]:
    """(identifier probes, gold-value probes) of a transcript, each present in its text."""
    from .._summaries.identifiers import extract_identifiers

    body = [m for m in transcript.messages if m.role not in SYSTEM_ROLES]
    system_text = context_text([m for m in transcript.messages if m.role in SYSTEM_ROLES])
    text = context_text(body)
    idents = [p for p in dict.fromkeys(extract_identifiers(text)) if p not in system_text]
    gold = [g for g in transcript.gold_values if g in text and g not in system_text]
    return idents, gold


def our_contender(
    name: str, make_policy: Callable[[], Policy], summarizer: AnySummarizer | None = None
) -> Contender:
    """One of our policies, replayed call by call through a ``Compactor``.

    The allowance is the input budget; compaction triggers when it would be exceeded and
    shrinks to 90% of it, so every contender may use the same number of tokens.
    """

    def run(transcript: Transcript, allowance: int, counter: TokenCounter) -> list[Message]:
        from .replay import replay

        budget = Budget(context_window=allowance, trigger=1.0, target=0.9)
        result = replay(
            transcript.messages, policy=make_policy(), budget=budget, counter=counter,
            summarizer=summarizer, title=transcript.name,
        )
        return result.final_messages

    return Contender(name=name, compact=run, ours=True)


def evaluate(
    transcripts: Sequence[Transcript],
    contenders: Sequence[Contender],
    *,
    fractions: Sequence[float] = (0.5,),
    counter: TokenCounter,
) -> list[EvalRow]:
    """Score every contender on every transcript at each allowance fraction."""
    from .._messages.validation import validate

    rows: list[EvalRow] = []
    probes = [probes_of(t) for t in transcripts]
    totals = [counter.count_messages(t.messages) for t in transcripts]
    systems = [counter.count_messages([m for m in t.messages if m.role in SYSTEM_ROLES])
               for t in transcripts]
    for fraction in fractions:
        for contender in contenders:
            row = EvalRow(contender=contender.name, ours=contender.ours, fraction=fraction)
            for t, (idents, gold), total, system in zip(
                transcripts, probes, totals, systems, strict=True
            ):
                allowance = system + max(int((total - system) * fraction), 1)
                try:
                    sent = contender.compact(t, allowance, counter)
                except Exception as exc:  # a contender's failure is a result, not a crash
                    row.errors.append(f"{t.name}: {type(exc).__name__}: {exc}")
                    row.probes += len(idents)
                    row.gold += len(gold)
                    row.tokens_before += total
                    row.tokens_after += total
                    continue
                used = counter.count_messages(sent)
                over, invalid = used > allowance, bool(validate(sent))
                # A request the provider rejects keeps nothing.
                text = "" if over or invalid else context_text(sent)
                row.probes += len(idents)
                row.kept += sum(1 for p in idents if p in text)
                row.gold += len(gold)
                row.gold_kept += sum(1 for g in gold if g in text)
                row.tokens_before += total
                row.tokens_after += used
                row.over_budget += over
                row.invalid += invalid
            rows.append(row)
    return rows
