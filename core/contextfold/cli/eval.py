"""Fidelity evaluation: what share of a transcript's facts survives compaction.

The headline figure, *needed from memory* (what a later assistant message writes that only
the compacted part held, at cuts mid-run), is measured in `contextfold.cli.eval_recall`; this module
holds the contender type and the older, call-by-call figures kept beside it.

The probes are found independently of any summarizer: `independent_identifiers`
takes every token that looks like a reference (it holds a digit, ``@``, a slash, or joins
words with ``_``) with rules of its own, not the extractor the extractive summary and the
ledger copy from, so a contender cannot score by copying what the grader looks for.

* **probes kept**: the transcript's probes (every message but the system prompt, which
  every contender keeps) present in the context the contender would send at the last step;
* **needed next**: at every model call, the probes of the message the model wrote next
  (its text and tool-call arguments) that it could only have taken from earlier in the
  conversation, present in the context it was given for that call: whether the model had
  what its next action used;
* **gold kept**: where the data gives them, the values the final action needs (tau-bench's
  gold action arguments that occur in the conversation);
* **facts recalled**: where the transcript asks for facts (the generated long chats of
  `generated_chats`), the share of asked facts whose
  latest value is in the context given to the call that answers the question. The facts
  are the ones the generator planted, known by construction, not found by any extractor;
* **context used**: at the measured calls whose history exceeds the allowance, the median
  share of the allowance the contender sent (how much of its room it put to use);
* **recoverable**: the probes present at the last step, or in an original the model can
  read back through a handle in view (``read_original``, following the handles inside what
  it reads), with the contender's originals in a store. Peers keep no originals: theirs is
  what they keep in view;
* **cached prefix**: of the measured calls, the share whose request starts with the whole
  request of the model call before it (message for message, as the provider receives it):
  what a provider's prompt cache can reuse.

A context a provider would reject (invalid sequence) or that exceeds the allowance keeps
nothing: that request fails, so its probes count as lost. A contender that raises (for
example ``BudgetExceededError``) keeps nothing either; the table counts each case.

The allowance at a fraction ``f`` is the system prompt plus ``f`` of the rest of the
transcript: every contender keeps the system prompt whole, and on short transcripts with
long system prompts (tau-bench's airline policy is ~1,300 tokens) ``f`` of the whole
transcript would not even hold the system prompt.

Our policies run through a ``Compactor`` call by call, exactly as in an agent loop; the
peers (``_eval_peers``) run in the same process on the same probes, on each call's history.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from .._contract.policy import Policy
from .._counting.budget import Budget
from .._counting.counters import TokenCounter
from .._lossless.originals import OriginalsSource, read_original
from .._lossless.references import HANDLE_RE
from .._messages.model import Message
from .._messages.structure import SYSTEM_ROLES
from .._summaries.summarizer import AnySummarizer
from .transcripts import Transcript

__all__ = ["Contender", "EvalRow", "Seen", "cached_prefixes", "context_text", "evaluate",
           "independent_identifiers", "needed_next", "our_contender", "probes_of",
           "recoverable_text"]

Compact = Callable[[Transcript, int, TokenCounter], list[Message]]
"""A contender: (transcript, token allowance, counter) -> the context it would send."""


@dataclass
class Seen:
    """What a contender sent at some calls of one transcript, and what it can give back."""

    sent: dict[int, list[Message]]
    """The context sent for the call with the history ``messages[:n]``, by ``n``."""
    originals: Callable[[str], str] = lambda text: ""
    """The originals reachable from the handles in a context's text (none for peers)."""


def _no_originals(text: str) -> str:
    """A peer keeps no originals: nothing is reachable beyond what it keeps in view."""
    return ""


Contexts = Callable[[Transcript, int, TokenCounter, Sequence[int]], Seen]
"""(transcript, allowance, counter, history lengths) -> the context sent at each of those
calls (a call with the history ``messages[:n]``)."""

AtCut = Callable[[Transcript, int, TokenCounter], tuple[list[Message], Callable[[str], str]]]
"""(a transcript cut mid-run, allowance, counter) -> (the context one compaction of it
sends, the originals reachable from the handles in a text)."""


@dataclass(frozen=True)
class Contender:
    """Something that shrinks a history: one of our policies or a peer."""

    name: str
    """Shown in the table."""
    compact: Compact
    """Produces the final context."""
    ours: bool = True
    """False for peers."""
    contexts: Contexts | None = None
    """The context at several calls in one run; by default [`compact`][contextfold.compact] on each
    call's history."""
    at_cut: AtCut | None = None
    """One compaction of a history cut mid-run (the needed-from-memory metric); by default
    [`compact`][contextfold.compact] on it, with no originals."""

    def compact_cut(self, transcript: Transcript, allowance: int, counter: TokenCounter
                    ) -> tuple[list[Message], Callable[[str], str]]:
        """The context this contender sends for ``transcript`` (a history cut mid-run) at
        ``allowance``, and the originals its handles reach."""
        if self.at_cut is not None:
            return self.at_cut(transcript, allowance, counter)
        return self.compact(transcript, allowance, counter), _no_originals

    def contexts_at(self, transcript: Transcript, allowance: int, counter: TokenCounter,
                    cuts: Sequence[int]) -> Seen:
        """The context this contender sends for the calls with ``messages[:n]``, n in
        ``cuts``."""
        if self.contexts is not None:
            return self.contexts(transcript, allowance, counter, cuts)
        return Seen({n: self.compact(replace(transcript, messages=transcript.messages[:n]),
                                     allowance, counter) for n in cuts})


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
    needed: int = 0
    """Probes the model's next messages used from earlier in the conversation."""
    needed_kept: int = 0
    """Of those, present in the context of the call that wrote them."""
    asked: int = 0
    """Facts the transcripts ask for (generated chats)."""
    asked_kept: int = 0
    """Of those, present in the context of the call that answers the question."""
    recoverable: int = 0
    """Probes present in the final contexts or in the originals their handles reach."""
    prefix_pairs: int = 0
    """Consecutive model calls compared."""
    prefix_kept: int = 0
    """Of those, calls whose request starts with the whole previous request."""
    fills: list[float] = field(default_factory=list)
    """Tokens sent as a share of the allowance, at each measured call whose history
    exceeds the allowance."""
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
    def recoverable_score(self) -> float:
        """Share of identifier probes in view or recoverable through a handle in view."""
        return self.recoverable / self.probes if self.probes else 1.0

    @property
    def cached_score(self) -> float:
        """Share of consecutive calls whose request starts with the previous request."""
        return self.prefix_kept / self.prefix_pairs if self.prefix_pairs else float("nan")

    @property
    def gold_score(self) -> float:
        """Share of gold-value probes kept."""
        return self.gold_kept / self.gold if self.gold else float("nan")

    @property
    def needed_score(self) -> float:
        """Share of needed-next probes the model had in view when it used them."""
        return self.needed_kept / self.needed if self.needed else float("nan")

    @property
    def recall_score(self) -> float:
        """Share of asked facts whose value was in the context of the call that answers."""
        return self.asked_kept / self.asked if self.asked else float("nan")

    @property
    def fill(self) -> float:
        """Median share of the allowance sent where the history exceeded it."""
        return statistics.median(self.fills) if self.fills else float("nan")

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


_TOKEN = re.compile(r"[^\s\"'`<>()\[\]{},;=|]+")
_EDGES = ".:!?*#-+"


def independent_identifiers(text: str) -> list[str]:
    """The reference-like tokens of ``text``, in order, once each: whitespace- and
    bracket-separated tokens, stripped of edge punctuation, of at least 4 characters, that
    hold a digit, ``@``, a slash or backslash, or an ``_`` between letters. Deliberately
    simpler than, and separate from, the summarizer's identifier extraction."""
    found: dict[str, None] = {}
    for raw in _TOKEN.findall(text):
        token = raw.strip(_EDGES)
        if len(token) < 4:
            continue
        if (any(c.isdigit() for c in token) or "@" in token or "/" in token
                or "\\" in token or re.search(r"[A-Za-z]_[A-Za-z]", token)):
            found.setdefault(token, None)
    return list(found)


def recoverable_text(source: OriginalsSource, conversation_id: str, text: str) -> str:
    """Every original reachable from the handles in ``text`` through ``read_original``
    (each read page by page and joined as it was written, then the handles inside it
    followed), one after another."""
    seen: set[str] = set()
    todo = list(dict.fromkeys(HANDLE_RE.findall(text)))
    out: list[str] = []
    while todo:
        handle = todo.pop()
        if handle in seen:
            continue
        seen.add(handle)
        offset: int | None = 0
        pages: list[str] = []
        while offset is not None:
            page = read_original(source, conversation_id, handle, offset=offset, limit=20_000)
            if "error" in page:
                break
            pages.append(page["content"])
            offset = page["next_offset"]
        original = "".join(pages)
        out.append(original)
        todo.extend(h for h in HANDLE_RE.findall(original) if h not in seen)
    return "\n".join(out)


def cached_prefixes(requests: Sequence[Sequence[Message]]) -> tuple[int, int]:
    """(consecutive pairs, pairs whose later request starts with the whole earlier one),
    comparing the messages as the provider receives them (chat-completions JSON)."""
    from .._messages.openai import to_openai

    forms = [[json.dumps(m, sort_keys=True) for m in to_openai(r)] for r in requests]
    kept = sum(1 for before, after in itertools.pairwise(forms)
               if after[: len(before)] == before)
    return max(0, len(forms) - 1), kept


def _with_previous_call(measured: Sequence[int], calls: Sequence[int]
                        ) -> list[tuple[int, int]]:
    """Each measured call paired with the model call before it (the cached prefix is taken
    over these pairs: a sample of the conversation's calls, at no more than twice the cost
    of the calls measured anyway)."""
    out = []
    for n in measured:
        before = [c for c in calls if c < n]
        if before:
            out.append((before[-1], n))
    return out


def probes_of(transcript: Transcript) -> tuple[list[str], list[str]]:
    """(identifier probes, gold-value probes) of a transcript, each present in its text."""
    body = [m for m in transcript.messages if m.role not in SYSTEM_ROLES]
    system_text = context_text([m for m in transcript.messages if m.role in SYSTEM_ROLES])
    text = context_text(body)
    idents = [p for p in independent_identifiers(text) if p not in system_text]
    gold = [g for g in transcript.gold_values if g in text and g not in system_text]
    return idents, gold


def needed_next(transcript: Transcript) -> dict[int, list[str]]:
    """For each model call (the history ``messages[:n]`` before an assistant message ``n``),
    the probes of that message that occur earlier in the conversation but not in the
    system prompt: what the model's next action took from its context."""
    messages = transcript.messages
    system_text = context_text([m for m in messages if m.role in SYSTEM_ROLES])
    seen: set[str] = set()
    out: dict[int, list[str]] = {}
    for n, m in enumerate(messages):
        found = independent_identifiers(context_text([m]))
        if m.role == "assistant" and n > 0:
            used = [p for p in found if p in seen and p not in system_text]
            if used:
                out[n] = used
        if m.role not in SYSTEM_ROLES:
            seen.update(found)
    return out


def our_contender(
    name: str, make_policy: Callable[[], Policy], summarizer: AnySummarizer | None = None
) -> Contender:
    """One of our policies, replayed call by call through a ``Compactor``.

    The allowance is the input budget; compaction triggers when it would be exceeded and
    shrinks to 90% of it, so every contender may use the same number of tokens.
    """

    def run(transcript: Transcript, allowance: int, counter: TokenCounter) -> list[Message]:
        return contexts(transcript, allowance, counter, ()).sent[len(transcript.messages)]

    def contexts(transcript: Transcript, allowance: int, counter: TokenCounter,
                 cuts: Sequence[int]) -> Seen:
        from .._stores.memory import MemoryStore
        from .replay import replay, step_boundaries

        budget = Budget(context_window=allowance, trigger=1.0, target=0.9)
        boundaries = step_boundaries(transcript.messages)
        steps = [k + 1 for k, n in enumerate(boundaries) if n in set(cuts)]
        store = MemoryStore()
        result = replay(
            transcript.messages, policy=make_policy(), budget=budget, counter=counter,
            summarizer=summarizer, title=transcript.name, capture=steps, store=store,
        )
        found = {boundaries[k - 1]: sent for k, sent in result.sent_at.items()}
        found[len(transcript.messages)] = result.final_messages
        return Seen(found, lambda text: recoverable_text(store, transcript.name, text))

    def at_cut(transcript: Transcript, allowance: int, counter: TokenCounter
               ) -> tuple[list[Message], Callable[[str], str]]:
        from .._engine.compactor import Compactor
        from .._stores.memory import MemoryStore

        # One compaction of the whole cut history, as an agent loop's compactor would run
        # at that call once the history passed the trigger.
        store = MemoryStore()
        compactor = Compactor(
            policy=make_policy(), budget=Budget(context_window=allowance, trigger=1.0,
                                                target=0.9),
            counter=counter, summarizer=summarizer, store=store,
            conversation_id=transcript.name,
        )
        sent = compactor.compact(list(transcript.messages)).messages
        return sent, lambda text: recoverable_text(store, transcript.name, text)

    return Contender(name=name, compact=run, ours=True, contexts=contexts, at_cut=at_cut)


def evaluate(
    transcripts: Sequence[Transcript],
    contenders: Sequence[Contender],
    *,
    fractions: Sequence[float] = (0.5,),
    counter: TokenCounter,
) -> list[EvalRow]:
    """Score every contender on every transcript at each allowance fraction."""
    from .._messages.validation import validate
    from .replay import step_boundaries

    rows: list[EvalRow] = []
    probes = [probes_of(t) for t in transcripts]
    needs = [needed_next(t) for t in transcripts]
    totals = [counter.count_messages(t.messages) for t in transcripts]
    systems = [counter.count_messages([m for m in t.messages if m.role in SYSTEM_ROLES])
               for t in transcripts]
    for fraction in fractions:
        for contender in contenders:
            row = EvalRow(contender=contender.name, ours=contender.ours, fraction=fraction)
            for t, (idents, gold), need, total, system in zip(
                transcripts, probes, needs, totals, systems, strict=True
            ):
                allowance = system + max(int((total - system) * fraction), 1)
                row.needed += sum(map(len, need.values()))
                row.asked += sum(map(len, t.asked.values()))
                measured = sorted({*need, *t.asked, len(t.messages)})
                pairs = _with_previous_call(measured, step_boundaries(t.messages))
                cuts = sorted({n for pair in pairs for n in pair} | set(measured))
                try:
                    seen_at = contender.contexts_at(t, allowance, counter, cuts)
                    at = seen_at.sent
                    sent = at[len(t.messages)]
                except Exception as exc:  # a contender's failure is a result, not a crash
                    row.errors.append(f"{t.name}: {type(exc).__name__}: {exc}")
                    row.probes += len(idents)
                    row.gold += len(gold)
                    row.prefix_pairs += len(pairs)
                    row.tokens_before += total
                    row.tokens_after += total
                    continue
                views: dict[int, str] = {}
                for n in cuts:
                    seen = at.get(n, [])
                    used = counter.count_messages(seen)
                    if counter.count_messages(t.messages[:n]) > allowance:
                        row.fills.append(used / allowance)
                    # A request the provider rejects, or one over the allowance, fails.
                    ok = used <= allowance and not validate(seen)
                    views[n] = context_text(seen) if ok else ""
                for n, used_next in need.items():
                    row.needed_kept += sum(1 for p in used_next if p in views[n])
                for n, values in t.asked.items():
                    row.asked_kept += sum(1 for v in values if v in views[n])
                used = counter.count_messages(sent)
                over, invalid = used > allowance, bool(validate(sent))
                # A request the provider rejects keeps nothing.
                text = "" if over or invalid else context_text(sent)
                row.probes += len(idents)
                row.kept += sum(1 for p in idents if p in text)
                back = seen_at.originals(text) if text else ""
                row.recoverable += sum(1 for p in idents if p in text or p in back)
                row.prefix_pairs += len(pairs)
                row.prefix_kept += sum(cached_prefixes([at[a], at[b]])[1] for a, b in pairs)
                row.gold += len(gold)
                row.gold_kept += sum(1 for g in gold if g in text)
                row.tokens_before += total
                row.tokens_after += used
                row.over_budget += over
                row.invalid += invalid
            rows.append(row)
    return rows
