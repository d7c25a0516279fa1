"""Needed from memory: does what the run will need stay in view after a mid-run compaction?

The question an agent's context must answer is not "how much of the transcript survives"
but "when the model later writes an identifier that only the compacted part held, can it
still see it". This module measures exactly that:

* **cuts**: for each transcript, the model calls nearest 40%, 50%, 60% and 70% of its
  messages (a call is an assistant message, whose history ``messages[:c]`` went to the
  model). At each cut the contender compacts ``messages[:c]`` once to an *allowance* of the
  system prompt plus ``f`` of the tokens of the rest of ``messages[:c]``;
* **probes** of a cut: identifiers (by the evaluation's own rule,
  `eval_identifiers`) that an assistant message
  after the cut writes (its text or tool-call arguments), that occur in the compacted part
  (``messages[:c]`` without the system prompt) but not in the system prompt, and that no
  tool result or user message after the cut gave again before that assistant wrote it.
  Those the model can only have taken from memory;
* **in view**: share of the probes present in the text of the compacted context;
* **recoverable**: in view, or in an original reachable through a handle in view (with the
  contender's originals in a store; peers keep none);
* **tokens used**: the compacted context's tokens as a share of the allowance;
* **within**: share of cuts whose output fits the allowance and is a valid request. An
  output over the allowance, invalid, or a contender's error keeps nothing: the call fails;
* **oracle**: the tokens of a plain comma-separated list of every distinct identifier of
  the compacted part that is no longer in view, as a share of the *room* (the allowance
  minus the system prompt): what keeping all of them in view would have cost.

Every figure is first taken per *source* (one input file or data set: probes pooled over
its cuts, tokens used and within averaged over its cuts, the oracle's median), then
averaged over the sources, so one large data set does not drown the others.

A transcript whose assistant speaks before any user message gets a neutral user turn
(`OPENING_TURN`) inserted before that first assistant message, for every contender
alike: a request without a user message is one providers reject and our compactor refuses,
and the inserted turn carries no identifier, so it changes no probe.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.structure import SYSTEM_ROLES
from .eval import Contender, context_text
from .eval_identifiers import eval_identifiers
from .transcripts import Transcript

__all__ = ["CUT_SHARES", "OPENING_TURN", "Cut", "CutResult", "Prepared", "RecallRow",
           "SourceTally", "Split", "cut_points", "evaluate_recall", "in_split", "memory_probes",
           "prepare", "score_cut", "with_opening_turn", "written_text"]

CUT_SHARES = (0.4, 0.5, 0.6, 0.7)
"""Where the cuts fall, as shares of a transcript's messages."""

OPENING_TURN = "(The conversation begins.)"
"""The neutral user turn put before an assistant that speaks first."""

Split = Literal["dev", "test", "all"]
"""A fixed half of the transcripts (by name), or all of them."""


def in_split(name: str, split: Split) -> bool:
    """Whether the transcript called ``name`` is in ``split``: a fixed half by the hash of
    its name (``dev`` for tuning, ``test`` for the figures reported), or ``all``."""
    if split == "all":
        return True
    half = "dev" if hashlib.sha256(name.encode("utf-8")).digest()[0] % 2 == 0 else "test"
    return half == split


def with_opening_turn(transcript: Transcript) -> Transcript:
    """``transcript`` with `OPENING_TURN` before its first assistant message when no
    user message comes before it; the transcript itself otherwise."""
    messages = transcript.messages
    for i, m in enumerate(messages):
        if m.role == "user":
            return transcript
        if m.role == "assistant":
            opened = [*messages[:i], Message("user", OPENING_TURN), *messages[i:]]
            shifted = {n + (n >= i): v for n, v in transcript.asked.items()}
            return replace(transcript, messages=opened, asked=shifted)
    return transcript


def written_text(message: Message) -> str:
    """What a model wrote in ``message``: its text and its tool calls' arguments."""
    return "\n".join([message.text, *(call.arguments for call in message.tool_calls)])


def cut_points(messages: Sequence[Message], shares: Sequence[float] = CUT_SHARES) -> list[int]:
    """The model calls nearest each share of the messages, once each, in order: a call is
    an assistant message after the first user message (its history went to the model)."""
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    calls = [i for i, m in enumerate(messages) if m.role == "assistant" and i > first_user]
    if not calls:
        return []
    return sorted({min(calls, key=lambda c: (abs(c - share * len(messages)), c))
                   for share in shares})


def memory_probes(messages: Sequence[Message], cut: int) -> list[str]:
    """The identifiers assistant messages after ``cut`` write that only ``messages[:cut]``
    held: present in its non-system messages, absent from the system prompt, and not given
    again by a tool result or user message after the cut before the assistant wrote them."""
    system = context_text([m for m in messages[:cut] if m.role in SYSTEM_ROLES])
    body = context_text([m for m in messages[:cut] if m.role not in SYSTEM_ROLES])
    given: list[str] = []  # texts of tool results and user messages since the cut
    probes: dict[str, None] = {}
    for m in messages[cut:]:
        if m.role != "assistant":
            if m.role not in SYSTEM_ROLES:
                given.append(context_text([m]))
            continue
        for p in eval_identifiers(written_text(m)):
            if (p not in probes and p in body and p not in system
                    and not any(p in g for g in given)):
                probes[p] = None
    return list(probes)


@dataclass(frozen=True)
class Cut:
    """One cut of one transcript, with what the metric needs that no contender changes."""

    at: int
    """The history ``messages[:at]`` is compacted."""
    probes: tuple[str, ...]
    """The needed-from-memory identifiers of this cut."""
    body_ids: frozenset[str]
    """Distinct identifiers of the compacted part that are not in the system prompt."""
    system_tokens: int
    """Tokens of the system prompt."""
    prefix_tokens: int
    """Tokens of ``messages[:at]``."""

    def allowance(self, fraction: float) -> int:
        """The system prompt plus ``fraction`` of the rest of the cut history."""
        return self.system_tokens + max(int((self.prefix_tokens - self.system_tokens)
                                            * fraction), 1)


@dataclass(frozen=True)
class Prepared:
    """A transcript with its cuts worked out once for every contender and fraction."""

    transcript: Transcript
    """The transcript, with the opening turn where its assistant speaks first."""
    source: str
    """The file or data set it came from."""
    cuts: tuple[Cut, ...]
    """Its cuts."""


def prepare(transcript: Transcript, counter: TokenCounter) -> Prepared:
    """The cuts, probes and token counts of ``transcript``, worked out once."""
    t = with_opening_turn(transcript)
    system_messages = [m for m in t.messages if m.role in SYSTEM_ROLES]
    system_tokens = counter.count_messages(system_messages)
    system_text = context_text(system_messages)
    cuts = []
    for at in cut_points(t.messages):
        body = context_text([m for m in t.messages[:at] if m.role not in SYSTEM_ROLES])
        cuts.append(Cut(
            at=at, probes=tuple(memory_probes(t.messages, at)),
            body_ids=frozenset(p for p in eval_identifiers(body) if p not in system_text),
            system_tokens=system_tokens, prefix_tokens=counter.count_messages(t.messages[:at]),
        ))
    return Prepared(t, transcript.source or transcript.name.split("#")[0], tuple(cuts))


@dataclass
class SourceTally:
    """One contender at one fraction on the cuts of one source."""

    cuts: int = 0
    """Cuts measured."""
    probes: int = 0
    """Needed-from-memory probes over those cuts."""
    in_view: int = 0
    """Of those, present in the compacted context."""
    recoverable: int = 0
    """Of those, in view or behind a handle in view."""
    within: int = 0
    """Cuts whose output fits the allowance and is valid."""
    used: list[float] = field(default_factory=list)
    """Tokens sent as a share of the allowance, per cut that did not raise."""
    oracle: list[float] = field(default_factory=list)
    """Per cut: tokens of a list of the identifiers gone from view, as a share of the room."""

    def figures(self) -> dict[str, float]:
        """The source's figures (NaN where nothing was measured)."""
        nan = float("nan")
        return {
            "in_view": self.in_view / self.probes if self.probes else nan,
            "recoverable": self.recoverable / self.probes if self.probes else nan,
            "tokens_used": statistics.fmean(self.used) if self.used else nan,
            "within": self.within / self.cuts if self.cuts else nan,
            "oracle": statistics.median(self.oracle) if self.oracle else nan,
        }


@dataclass
class RecallRow:
    """One contender at one fraction: the needed-from-memory figures."""

    contender: str
    """The contender's name."""
    ours: bool
    """True for our policies."""
    fraction: float
    """``f``: the allowance is the system prompt plus ``f`` of the rest of the cut history."""
    sources: dict[str, SourceTally] = field(default_factory=dict)
    """Per source (input file or data set)."""
    errors: list[str] = field(default_factory=list)
    """A contender's failures, one line each (that cut keeps nothing)."""

    def figure(self, name: str) -> float:
        """The mean over sources of one figure (``in_view``, ``recoverable``,
        ``tokens_used``, ``within``, ``oracle``), over the sources where it is defined."""
        values = [v for s in self.sources.values() if (v := s.figures()[name]) == v]
        return statistics.fmean(values) if values else float("nan")

    @property
    def probes(self) -> int:
        """Probes over every source."""
        return sum(s.probes for s in self.sources.values())

    @property
    def cuts(self) -> int:
        """Cuts over every source."""
        return sum(s.cuts for s in self.sources.values())

    def to_dict(self) -> dict[str, Any]:
        """Every figure, the per-source ones included, JSON-ready."""
        names = ("in_view", "recoverable", "tokens_used", "within", "oracle")
        return {
            "in_view": self.figure("in_view"), "recoverable": self.figure("recoverable"),
            "tokens_used": self.figure("tokens_used"), "within": self.figure("within"),
            "oracle": self.figure("oracle"), "probes": self.probes, "cuts": self.cuts,
            "errors": list(self.errors),
            "sources": {name: {"cuts": s.cuts, "probes": s.probes, "in_view_count": s.in_view,
                               "recoverable_count": s.recoverable, "within_count": s.within}
                        | {k: s.figures()[k] for k in names}
                        for name, s in self.sources.items()},
        }


@dataclass(frozen=True)
class CutResult:
    """What one contender did at one cut (for the loss breakdown of the benchmark)."""

    cut: Cut
    """The cut."""
    allowance: int
    """Its allowance."""
    sent: list[Message]
    """The compacted context (empty when the contender raised)."""
    ok: bool
    """Within the allowance and valid."""
    view: str
    """The text in view ("" when not ``ok``)."""
    kept: frozenset[str]
    """Probes in view."""
    recoverable: frozenset[str]
    """Probes in view or behind a handle in view."""


def score_cut(prepared: Prepared, cut: Cut, contender: Contender, fraction: float,
              counter: TokenCounter, tally: SourceTally) -> tuple[CutResult, str | None]:
    """Run ``contender`` at ``cut`` and add what it kept to ``tally``; returns the cut's
    result and the error line when the contender raised."""
    from .._messages.validation import validate

    t = prepared.transcript
    allowance = cut.allowance(fraction)
    tally.cuts += 1
    tally.probes += len(cut.probes)
    history = replace(t, messages=t.messages[:cut.at], asked={})
    error = None
    try:
        sent, originals = contender.compact_cut(history, allowance, counter)
    except Exception as exc:  # a contender's failure is a result, not a crash
        sent, originals = [], (lambda text: "")
        error = f"{t.name} at {cut.at}: {type(exc).__name__}: {exc}"
    used = counter.count_messages(sent)
    ok = error is None and used <= allowance and not validate(sent)
    view = context_text(sent) if ok else ""
    kept = frozenset(p for p in cut.probes if p in view)
    back = originals(view) if ok and len(kept) < len(cut.probes) else ""
    recoverable = kept | {p for p in cut.probes if p in back}
    tally.in_view += len(kept)
    tally.recoverable += len(recoverable)
    tally.within += ok
    if error is None:
        tally.used.append(used / allowance)
    room = max(allowance - cut.system_tokens, 1)
    gone = cut.body_ids - set(eval_identifiers(view))
    tally.oracle.append(counter.count_text(", ".join(sorted(gone))) / room if gone else 0.0)
    return CutResult(cut, allowance, sent, ok, view, kept, frozenset(recoverable)), error


def evaluate_recall(
    prepared: Sequence[Prepared],
    contenders: Sequence[Contender],
    *,
    fractions: Sequence[float] = (0.5, 0.25),
    counter: TokenCounter,
    on_done: Callable[[Contender, Prepared], None] | None = None,
) -> list[RecallRow]:
    """The needed-from-memory figures of every contender at each fraction.

    ``on_done`` is called after each contender has run on every cut of a transcript (a
    progress bar)."""
    rows: list[RecallRow] = []
    for fraction in fractions:
        for contender in contenders:
            row = RecallRow(contender.name, contender.ours, fraction)
            for p in prepared:
                tally = row.sources.setdefault(p.source, SourceTally())
                for cut in p.cuts:
                    _, error = score_cut(p, cut, contender, fraction, counter, tally)
                    if error is not None:
                        row.errors.append(error)
                if on_done is not None:
                    on_done(contender, p)
            rows.append(row)
    return rows
