"""The policy contract: pure, sans-IO compaction steps.

A policy is a pure function of (messages, context) to an outcome. When it needs a
summary it does not call an LLM: it *yields* a [`SummaryRequest`][contextfold.policy.SummaryRequest]
and receives a [`SummaryReply`][contextfold.policy.SummaryReply]. Thin drivers (``compact`` and
``acompact``, the ``Compactor``)
run the requests with a sync or async summarizer, so every policy is written once::

    def run(self, messages, context):
        reply = yield SummaryRequest(messages=old, instructions="...")
        return PolicyOutcome(messages=[summary_message(reply.text), *recent], method="summary")

A policy that never needs a summary subclasses
[`SimplePolicy`][contextfold.policy.SimplePolicy] and implements ``apply``. Policies never mutate
their input and return the input object itself when nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, runtime_checkable

from .._counting.bounds import count_within
from .._counting.budget import Budget
from .._messages.model import Message

if TYPE_CHECKING:
    from .._counting.counters import TokenCounter
    from .._stores.protocols import HistoryStore
    from .._stores.reference_cache import ReferenceCache

__all__ = [
    "CompactionContext",
    "ConversationState",
    "Lineage",
    "Policy",
    "PolicyOutcome",
    "PolicyRun",
    "SentRequest",
    "SummaryReply",
    "SummaryRequest",
    "Target",
    "dropped_targets",
    "on_read",
    "resolved",
]


@dataclass(frozen=True, slots=True)
class SentRequest:
    """The request the agent's model last received, extended to reach a summary's span:
    what a cache-true summary request repeats, byte for byte, before its instruction.

    A provider caches the prefix of the requests it served; a summary request that starts
    with the agent's previous request (the same messages and tool definitions) is served
    mostly from that cache. The engine fills it in; the policy never sees it."""

    messages: tuple[Message, ...]
    """The messages last sent, in order (the system prompt included), followed by those
    appended since when the span reaches into them."""
    positions: tuple[int, ...]
    """Where the span's messages are in [`messages`][contextfold.integration.SentRequest.messages]
    (0-based, increasing). A policy may leave messages inside its range out of the span (earlier
    summaries it keeps as they were written), so the span is named message by message, as ranges."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The tool definitions sent with that request (OpenAI's tool dicts), in order."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """A policy's request for one summary."""

    messages: tuple[Message, ...]
    """The originals to summarize (full content, before any truncation)."""
    instructions: str
    """What the summary must contain (sections, focus)."""
    max_tokens: int | None = None
    """A size hint for the summary, when the policy has a budget for it."""
    purpose: str = "summary"
    """A label for reports and caches: ``"threshold"``, ``"tier1"``, ``"summary"``..."""
    max_input_tokens: int | None = None
    """The summarizer's input window for this request, when the policy knows it; a longer
    input is split into parts whose summaries are merged (a summarizer's own
    ``max_input_tokens`` attribute applies when this is ``None``)."""
    open_request: str | None = None
    """The conversation's latest user request when nothing has answered it yet, also when
    it lies after the summarized span: TASK names it and REMAINING keeps it open."""
    latest_request: str | None = None
    """The conversation's latest user request, answered or not, when the policy names it:
    TASK names it (the span's own requests are earlier ones); REMAINING is left to what
    the span and ``open_request`` say."""
    shown: str = ""
    """The text the model reads beside the summary (the messages the policy keeps), when
    the policy knows it: a value it already shows needs no room in the summary, so a
    summary cut to ``max_tokens`` leaves such values out first."""
    sent: SentRequest | None = None
    """The agent's previous request this summary may repeat (filled in by the engine for a
    summarizer that asks for cache-true requests; ``None`` for today's form). It does not
    change what the summary is of, so the cache key leaves it out."""

    @property
    def cache_key(self) -> str:
        """A content hash of the request: the same span with the same instructions."""
        import hashlib

        h = hashlib.blake2b(digest_size=16)
        h.update(self.instructions.encode("utf-8"))
        h.update(str(self.max_tokens).encode())
        h.update((self.open_request or "").encode("utf-8", "surrogatepass"))
        h.update(b"\x00" + (self.latest_request or "").encode("utf-8", "surrogatepass"))
        if self.shown:
            h.update(b"\x01" + self.shown.encode("utf-8", "surrogatepass"))
        for m in self.messages:
            h.update(m.fingerprint.encode())
        return h.hexdigest()


@dataclass(frozen=True, slots=True)
class SummaryReply:
    """What the driver sends back for a [`SummaryRequest`][contextfold.policy.SummaryRequest].

    ``text`` is ``None`` only when summarizing failed and no fallback was configured; the
    policy then uses its failure notice. A failed summarizer's error text never
    becomes ``text``.
    """

    text: str | None
    """The summary, or ``None`` when it could not be made."""
    origin: Literal["summarizer", "cache", "fallback", "failed"] = "summarizer"
    """Where the text came from: the summarizer, the cache, the extractive fallback, or nothing."""
    error: str | None = None
    """The failure that led to a fallback or to ``None``, for the report."""


@dataclass(frozen=True, slots=True)
class Target:
    """One message a policy changed, for reports and events (the threshold design's compaction
    card)."""

    index: int
    """Position of the original in the policy's input."""
    role: str
    """Role of the original."""
    method: str
    """What was done: ``"truncated"``, ``"summarized"``, ``"dropped"``, ``"image_stripped"``..."""
    original_tokens: int
    """Tokens of the original. A policy may give an upper bound for a message it dropped
    without counting it (``TruncationPolicy`` does, for a history nothing had counted);
    the Compactor's report counts every original exactly."""
    new_tokens: int
    """Tokens of what replaced it (0 when it was dropped or folded into a summary)."""
    tool_name: str | None = None
    """The tool whose result this was, for tool results."""
    handle: str | None = None
    """A handle to read the original back, when one was made."""


def dropped_targets(
    messages: Sequence[Message], indices: Iterable[int], tokens: Sequence[int],
    handle: str | None = None,
) -> list[Target]:
    """A ``"dropped"`` target for each of ``messages[i]`` in ``indices``, with
    ``tokens[i]`` as its original size: equal to ``Target(i, m.role, "dropped",
    tokens[i], 0, m.name if m.role == "tool" else None, handle)``, made without the
    frozen dataclass's checked ``__init__`` (a long history drops thousands at once)."""
    new = object.__new__
    index, role, method, original, fresh, tool, handled = _TARGET_SETTERS
    out = []
    for i in indices:
        m = messages[i]
        t = new(Target)
        index(t, i)
        role(t, m.role)
        method(t, "dropped")
        original(t, tokens[i])
        fresh(t, 0)
        tool(t, m.name if m.role == "tool" else None)
        handled(t, handle)
        out.append(t)
    return out


_TARGET_SETTERS = tuple(getattr(Target, name).__set__ for name in (
    "index", "role", "method", "original_tokens", "new_tokens", "tool_name", "handle"))


@dataclass
class ConversationState:
    """Per-conversation state a policy may read and update through the driver.

    Lives in the ``Compactor`` (one per conversation); pure ``compact()`` calls get a fresh one.
    """

    encouragement_count: int = 0
    """Consecutive synthetic nudges sent without a real user prompt."""
    idle: bool = False
    """True once the conversation went idle after too many nudges."""
    idle_reason: str | None = None
    """Why it went idle."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Policy-specific state, keyed by policy name."""


T = TypeVar("T")


class _Later:
    """A figure computed on first read (see `on_read`)."""

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], Any]) -> None:
        self.compute = compute


def on_read(compute: Callable[[], T]) -> T:
    """A figure computed by ``compute`` when first read (then kept): for the fields of
    [`CompactionReport`][contextfold.CompactionReport] that say so (``tokens_before``,
    ``tokens_after``, ``targets``, ``details``), and for values of
    [`PolicyOutcome.details`][contextfold.policy.PolicyOutcome.details], which the report (and
    ``run_policy``) compute when its details are first read. A policy that decided without counting
    its whole input reports what it did not count this way."""
    return cast(T, _Later(compute))


def resolved(value: Any, *, compute: bool = True) -> Any:
    """``value`` with every `on_read` figure in it computed: the value itself, or in
    the values of dicts and the items of lists and tuples (copies are made only where one
    was found). With ``compute=False``, ``value`` itself when it holds none, else an
    object that is not it (nothing is computed)."""
    if isinstance(value, _Later):
        return resolved(value.compute()) if compute else _FOUND
    if isinstance(value, dict):
        done = {k: resolved(v, compute=compute) for k, v in value.items()}
        return done if any(done[k] is not v for k, v in value.items()) else value
    if isinstance(value, (list, tuple)):
        items = [resolved(v, compute=compute) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


_FOUND = object()


@dataclass(frozen=True, eq=False)
class Lineage:
    """What a policy may remember between the calls of one conversation whose history grows
    by appends (an agent loop). The driver passes it while the policy's input extends,
    message for message (equal messages), its input at the previous calls; so a fact a
    policy derived from the first ``k`` messages of an earlier input (where the prompts
    are, where the groups start) still holds for the first ``k`` messages now, and only
    what was appended needs reading.

    A cache: a policy that ignores it returns the same outcome, only slower.
    """

    messages: Sequence[Message]
    """The input it describes: the policy's ``messages``, the same object."""
    memo: dict[str, Any] = field(default_factory=dict)
    """Slots by key, kept across the calls. A slot describes a prefix of ``messages`` and
    must say how long (the driver empties them all when the input stops extending)."""

    def slot(self, messages: Sequence[Message], key: str, make: Callable[[], T]) -> T | None:
        """The slot ``key`` (``make()`` the first time), or ``None`` when ``messages`` is
        not the input this lineage describes (a pass of a pipeline, a list a wrapper
        rebuilt): a slot must never describe another list."""
        if messages is not self.messages:
            return None
        found: T | None = self.memo.get(key)
        if found is None:
            found = self.memo[key] = make()
        return found


@dataclass(frozen=True)
class CompactionContext:
    """Everything a policy may look at besides the messages. Read-only."""

    budget: Budget
    """The token budget the output must fit."""
    counter: TokenCounter
    """The token counter to measure with."""
    force: bool = False
    """Compact even below the trigger (the overflow-retry path)."""
    known_tokens: int | None = None
    """The calibrated input size (provider-reported usage plus new messages), when known."""
    fixed_tokens: int = 0
    """Tokens outside the messages that count against the budget (tool definitions)."""
    now: datetime | None = None
    """The time to stamp summaries and temporal context with."""
    state: ConversationState = field(default_factory=ConversationState)
    """The conversation's state (nudge counter, idle flag)."""
    store: HistoryStore | None = None
    """The history store, when one is configured (sliding-window lookups)."""
    conversation_id: str | None = None
    """The conversation's key in the store."""
    references: ReferenceCache | None = None
    """The in-memory ``ReferenceCache`` that keeps originals behind handles when the store
    does not (labels then say how many originals stay readable)."""
    lineage: Lineage | None = None
    """What the policy may remember from earlier calls of the conversation, when its input
    grows by appends (a cache; ``None`` outside a ``Compactor``'s agent loop)."""

    @property
    def available(self) -> int:
        """Tokens the messages may take: the input budget less the fixed parts."""
        return self.budget.input_budget - self.fixed_tokens

    def measure(self, messages: Sequence[Message]) -> int:
        """Estimated tokens of ``messages`` plus the fixed parts."""
        return self.counter.count_messages(messages) + self.fixed_tokens

    def input_tokens(self, messages: Sequence[Message]) -> int:
        """The decision figure for the policy's *input*: the larger of the estimate and the
        calibrated ``known_tokens`` (the threshold design, layer 2)."""
        estimate = self.measure(messages)
        return max(estimate, self.known_tokens) if self.known_tokens is not None else estimate

    def exceeds(self, messages: Sequence[Message], limit: int) -> bool:
        """``input_tokens(messages) > limit``, tokenizing only what the decision needs:
        messages nothing counted yet are bounded (see
        `count_within`) and counted, newest first,
        only while the bound says nothing."""
        if self.known_tokens is not None and self.known_tokens > limit:
            return True
        figure, _ = count_within(self.counter, messages, limit - self.fixed_tokens)
        return figure + self.fixed_tokens > limit


@dataclass(frozen=True)
class PolicyOutcome:
    """What a policy returns: the new list and what it did."""

    messages: Sequence[Message]
    """The compacted messages; the input object itself when nothing changed."""
    method: str = "none"
    """A short name of what was done (``"none"``, ``"truncation"``, ``"threshold"``...)."""
    targets: tuple[Target, ...] = ()
    """The messages that were changed."""
    notes: tuple[str, ...] = ()
    """Human-readable remarks (``"summary failed; used notice"``)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Policy-specific figures for the report (tier budgets, residual counts...). A figure
    the policy did not need may be given as `on_read` (counted when the report's
    details are first read)."""


PolicyRun = Generator[SummaryRequest, SummaryReply, PolicyOutcome]
"""The generator a policy's ``run`` returns."""


@runtime_checkable
class Policy(Protocol):
    """A compaction policy. ``run`` must not mutate ``messages``."""

    name: str
    """A short name for reports and errors."""

    @property
    def always_run(self) -> bool:
        """True when the output must be rebuilt from the full input on every call (a loop
        slice, a nudge): the Compactor then never reuses the previous output as a prefix."""
        ...

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Yield summary requests, receive replies, return the outcome."""
        ...
