"""Test utilities for contextfold and its users: random agent histories and assertions.

* [`histories`][contextfold.testing.histories] is a Hypothesis strategy of agent histories (system
  prompt, many turns, parallel tool calls, errors, images, huge tool outputs, identifiers in the
  text), valid by default or with the defects real histories have (``imperfect=True``).
* [`generate_history`][contextfold.testing.generate_history] builds a valid history of a requested
  size from a seed, fast and without Hypothesis, for benchmarks.
* [`generate_chat`][contextfold.testing.generate_chat] builds a long multi-session chat (no tool
  calls) with facts planted early, some corrected, and asked for late
  ([`GeneratedChat`][contextfold.testing.GeneratedChat]); [`chats`][contextfold.testing.chats] is
  its Hypothesis strategy.
* [`assert_valid_within`][contextfold.testing.assert_valid_within] checks the two promises every
  policy makes: the output passes [`contextfold.validate`][contextfold.validate] and fits the
  budget.
* [`run_policy`][contextfold.testing.run_policy] drives a policy's generator by hand, answering its
  summary requests.
* [`ScriptedSummarizer`][contextfold.testing.ScriptedSummarizer] answers summary requests from a
  script and records them.

``import contextfold`` does not import this module; Hypothesis is only needed by
[`histories`][contextfold.testing.histories] (``pip install "contextfold[dev]"``)::

    from hypothesis import given
    from contextfold.testing import histories, assert_valid_within

    @given(histories(imperfect=True))
    def test_my_policy(messages): ...
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union

from ._chats import GeneratedChat, PlantedFact, generate_chat
from ._contract.policy import (
    CompactionContext,
    Policy,
    PolicyOutcome,
    SummaryReply,
    SummaryRequest,
    resolved,
)
from ._counting.budget import Budget
from ._counting.counters import TokenCounter
from ._messages.model import ContentPart, ImagePart, Message, TextPart, ToolCall
from ._messages.validation import validate
from ._summaries.summarizer import ScriptedSummarizer
from .errors import MissingExtraError

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "DEFECTS",
    "GeneratedChat",
    "PlantedFact",
    "ScriptedSummarizer",
    "SummaryAnswer",
    "assert_valid_within",
    "chats",
    "generate_chat",
    "generate_history",
    "histories",
    "run_policy",
]

T = TypeVar("T")

DEFECTS = ("interjected", "unanswered", "greeting", "stray_system", "orphan")
"""The defects ``histories(imperfect=True)`` injects (at least one per history):

* ``interjected``: a user message between an assistant's tool calls and their results;
* ``unanswered``: a tool call left without a result at the end;
* ``greeting``: an assistant greeting before any user message;
* ``stray_system``: a system message in the middle of the history;
* ``orphan``: a tool result whose call is nowhere in the history.
"""

_WORDS = (
    "the", "agent", "checked", "inventory", "shipment", "order", "account", "balance", "flight",
    "reservation", "cabin", "passenger", "baggage", "refund", "policy", "error", "retry",
    "timeout", "status", "pending", "confirmed", "cancelled", "update", "result", "file", "line",
    "function", "test", "failed", "passed", "config", "value", "request", "response", "user",
    "customer", "ticket", "price", "total", "iron", "ore", "cargo", "station", "route", "fuel",
    "market", "trade", "report", "note",
)
_TOOLS = (
    "get_reservation_details", "search_flights", "read_file", "run_shell", "send_email",
    "browse_url", "update_order", "query_database",
)
_NAMES = ("ana", "bo", "chen", "dara", "eli", "fatima", "goran", "hana")
_EPOCH = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)


def _corpus() -> str:
    rnd = random.Random(20250106)
    return " ".join(rnd.choice(_WORDS) for _ in range(40_000))


_CORPUS = _corpus()


class _Source(Protocol):
    """Where a builder takes its choices from: a seeded RNG or Hypothesis draws."""

    def integer(self, lo: int, hi: int) -> int: ...

    def chance(self, percent: int) -> bool: ...


class _RandomSource:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return lo + int(self.rnd.random() * (hi - lo + 1))

    def chance(self, percent: int) -> bool:
        return self.rnd.random() * 100 < percent


class _DrawSource:
    def __init__(self, draw: DrawFn) -> None:
        from hypothesis import strategies as st

        self._draw = draw
        self._st = st

    def integer(self, lo: int, hi: int) -> int:
        return int(self._draw(self._st.integers(lo, hi)))

    def chance(self, percent: int) -> bool:
        return int(self._draw(self._st.integers(0, 99))) < percent


@dataclass
class _Shape:
    """What a history should look like; every field has a reasonable default."""

    min_turns: int = 1
    max_turns: int = 8
    max_steps: int = 3  # tool steps per turn (0..max_steps)
    max_parallel: int = 3  # calls per assistant message (1..max_parallel)
    min_tool_chars: int = 0
    max_tool_chars: int = 20_000
    images: bool = True
    system: bool | None = None  # None: sometimes
    fixed_steps: int | None = None  # exact tool steps per turn (generate_history)
    fixed_parallel: int | None = None
    timestamps: bool = True
    errors_percent: int = 15


@dataclass
class _Builder:
    plan: _Source  # the shape: turns, steps, parallel calls, big outputs, defects
    src: _Source  # the content: texts, ids, images, errors
    shape: _Shape
    prefix: str = "h"
    out: list[Message] = field(default_factory=list)
    calls: int = 0
    clock: int = 0

    # -- small pieces -------------------------------------------------------------

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.src.integer(0, len(seq) - 1)]

    def text(self, n_chars: int) -> str:
        """About ``n_chars`` of prose with identifiers (ids, emails, urls, dates, amounts)."""
        k = self.src.integer(0, 10**6)
        ident = _identifiers(k)
        if n_chars <= len(ident):
            start = _CORPUS.index(" ", k % 100_000) + 1
            return _CORPUS[start : start + max(n_chars, 1)]
        body: list[str] = [ident]
        need = n_chars - len(ident)
        while need > 0:
            start = _CORPUS.index(" ", (k * 7919 + need) % (len(_CORPUS) - 2000)) + 1
            piece = _CORPUS[start : start + min(need, 60_000)]
            body.append(piece)
            need -= len(piece) + 1
        return " ".join(body)

    def add(self, message: Message) -> None:
        self.out.append(message)

    def msg(self, **kw: Any) -> Message:
        self.clock += 1
        when = _EPOCH + timedelta(seconds=7 * self.clock) if self.shape.timestamps else None
        return Message(id=f"{self.prefix}-{self.clock}", created_at=when, **kw)

    def image(self) -> ImagePart:
        w, h = self.pick(((512, 512), (1024, 768), (1920, 1080), (200, 3000), (64, 64)))
        if self.src.chance(50):
            return ImagePart(url=f"https://img.example.com/{self.src.integer(1, 99999)}.png",
                             detail=self.pick(("low", "high", "auto", None)), width=w, height=h)
        return ImagePart(url="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB",
                         width=w, height=h, media_type="image/png")

    # -- history pieces -----------------------------------------------------------

    def user(self) -> Message:
        source = self.pick(("direct", "direct", "broadcast", "nudge", None))
        sender = self.pick(("", "agent-2", "ops")) if source == "broadcast" else None
        text = self.text(self.src.integer(5, 300))
        content: str | tuple[ContentPart, ...] = text
        if self.shape.images and self.src.chance(10):
            content = (TextPart(text), self.image())
        return self.msg(role="user", content=content, source=source, sender_id=sender)

    def call(self) -> ToolCall:
        self.calls += 1
        name = self.pick(_TOOLS)
        args: dict[str, Any] = {
            "id": f"ORD-{self.src.integer(1000, 99999)}",
            "query": self.text(self.src.integer(3, 60)),
        }
        if self.src.chance(30):
            args["limit"] = self.src.integer(1, 50)
        return ToolCall(id=f"call_{self.prefix}_{self.calls}", name=name,
                        arguments=json.dumps(args))

    def result(self, call: ToolCall) -> Message:
        s = self.shape
        big = self.plan.chance(10)
        hi = s.max_tool_chars if big else min(s.max_tool_chars, max(s.min_tool_chars, 800))
        text = self.text(self.src.integer(s.min_tool_chars, hi))
        content: str | tuple[ContentPart, ...] = text
        if s.images and self.src.chance(8):
            content = (TextPart(text), self.image())
        meta = {"is_error": True} if self.src.chance(s.errors_percent) else {}
        return self.msg(role="tool", content=content, tool_call_id=call.id, name=call.name,
                        metadata=meta)

    def tool_step(self) -> None:
        s = self.shape
        n = s.fixed_parallel or self.plan.integer(1, s.max_parallel)
        calls = tuple(self.call() for _ in range(n))
        text = self.text(self.src.integer(5, 120)) if self.src.chance(30) else ""
        reasoning = self.text(self.src.integer(10, 400)) if self.src.chance(25) else None
        self.add(self.msg(role="assistant", content=text, tool_calls=calls, reasoning=reasoning))
        order = list(calls)
        if n > 1 and s.fixed_parallel is None and self.src.chance(30):
            order.reverse()  # parallel results may come back in any order
        for c in order:
            self.add(self.result(c))

    def turn(self, last: bool) -> None:
        s = self.shape
        self.add(self.user())
        steps = s.fixed_steps if s.fixed_steps is not None else self.plan.integer(0, s.max_steps)
        for _ in range(steps):
            self.tool_step()
        if s.fixed_steps is not None or not last or self.plan.chance(60):
            reasoning = self.text(self.src.integer(10, 300)) if self.src.chance(20) else None
            self.add(self.msg(role="assistant", content=self.text(self.src.integer(5, 600)),
                              reasoning=reasoning))

    def history(self) -> list[Message]:
        s = self.shape
        has_system = s.system if s.system is not None else self.plan.chance(80)
        if has_system:
            self.add(self.msg(role="system", content="You are a careful agent. "
                              + self.text(self.src.integer(20, 400))))
        turns = self.plan.integer(s.min_turns, s.max_turns)
        for t in range(turns):
            self.turn(last=t == turns - 1)
        return self.out

    # -- defects ------------------------------------------------------------------

    def spoil(self) -> None:
        """Inject at least one of ``DEFECTS`` into the built history."""
        chosen = [d for d in DEFECTS if self.plan.chance(35)]
        if not chosen:
            chosen = [self.pick(DEFECTS)]
        for defect in chosen:
            getattr(self, f"_defect_{defect}")()

    def _lead(self) -> int:
        n = 0
        while n < len(self.out) and self.out[n].role in ("system", "developer"):
            n += 1
        return n

    def _defect_interjected(self) -> None:
        spots = [i for i, m in enumerate(self.out)
                 if m.tool_calls and i + 1 < len(self.out) and self.out[i + 1].role == "tool"]
        if not spots:
            spots = [len(self.out)]
            self.tool_step()
        i = self.pick(spots)
        j = i + 1
        while j < len(self.out) and self.out[j].role == "tool":
            j += 1
        at = self.plan.integer(i + 1, j - 1)
        self.out.insert(at, self.msg(role="user", content="[broadcast] " + self.text(80),
                                     source="broadcast", sender_id="agent-2"))

    def _defect_unanswered(self) -> None:
        self.add(self.msg(role="assistant", content="", tool_calls=(self.call(),)))

    def _defect_greeting(self) -> None:
        self.out.insert(self._lead(), self.msg(role="assistant",
                                               content="Hello! How can I help you today?"))

    def _defect_stray_system(self) -> None:
        at = self.plan.integer(self._lead() + 1, len(self.out))
        self.out.insert(at, self.msg(role="system", content="Reminder: " + self.text(60)))

    def _defect_orphan(self) -> None:
        at = self.plan.integer(self._lead(), len(self.out))
        self.out.insert(at, self.msg(role="tool", content=self.text(40),
                                     tool_call_id=f"call_gone_{self.src.integer(0, 10**6)}",
                                     name="lost_tool"))


def _identifiers(k: int) -> str:
    """A sentence with identifiers an extractive summary should keep."""
    name = _NAMES[k % len(_NAMES)]
    return (
        f"Ticket TKT-{k % 99991:05d} for {name}.{k % 97}@example.com, see "
        f"https://app.example.com/r/{k % 7919} on 2025-{k % 12 + 1:02d}-{k % 28 + 1:02d}: "
        f"${k % 9973},{k % 1000:03d}.{k % 100:02d} via /srv/data/{name}_{k % 313}.json."
    )


def histories(
    *,
    min_turns: int = 1,
    max_turns: int = 8,
    max_tool_chars: int = 20_000,
    images: bool = True,
    imperfect: bool = False,
) -> SearchStrategy[list[Message]]:
    """A Hypothesis strategy of agent histories (``list[Message]``).

    A history has an optional system prompt and ``min_turns``..``max_turns`` turns. A turn
    is a user prompt (``source`` direct, broadcast with a ``sender_id``, nudge), tool steps
    (an assistant message with one or several parallel calls, then their results, some
    marked ``is_error``, some with images of known size, now and then up to
    ``max_tool_chars`` characters) and usually a final assistant answer, some with reasoning.
    Text carries identifiers: ticket ids, emails, urls, dates, amounts, paths.

    With ``imperfect=False`` every history passes [`contextfold.validate`][contextfold.validate].
    With ``imperfect=True`` each history has at least one of
    [`DEFECTS`][contextfold.testing.DEFECTS].

    Raises:
        MissingExtraError: Hypothesis is not installed.
    """
    try:
        from hypothesis import strategies as st
    except ImportError as exc:  # pragma: no cover - hypothesis is a dev dependency
        raise MissingExtraError("hypothesis", "dev", "contextfold.testing.histories") from exc
    if not 1 <= min_turns <= max_turns:
        raise ValueError(f"need 1 <= min_turns <= max_turns, got {min_turns}, {max_turns}")
    shape = _Shape(min_turns=min_turns, max_turns=max_turns,
                   max_tool_chars=max(max_tool_chars, 1), images=images)

    @st.composite
    def build(draw: DrawFn) -> list[Message]:
        # Hypothesis draws (and shrinks) the shape; the content comes from a drawn seed,
        # which keeps generation fast.
        seed = draw(st.integers(0, 2**32 - 1))
        builder = _Builder(_DrawSource(draw), _RandomSource(seed), shape)
        builder.history()
        if imperfect:
            builder.spoil()
        return builder.out

    strategy: SearchStrategy[list[Message]] = build()
    return strategy


def chats(*, min_sessions: int = 3, max_sessions: int = 8) -> SearchStrategy[list[Message]]:
    """A Hypothesis strategy of long multi-session chats
    ([`generate_chat`][contextfold.testing.generate_chat]): the number of sessions, exchanges per
    session, facts, corrections and the share of tasks are drawn; the text comes from a drawn seed.

    Raises:
        MissingExtraError: Hypothesis is not installed.
    """
    try:
        from hypothesis import strategies as st
    except ImportError as exc:  # pragma: no cover - hypothesis is a dev dependency
        raise MissingExtraError("hypothesis", "dev", "contextfold.testing.chats") from exc
    if not 3 <= min_sessions <= max_sessions:
        raise ValueError(f"need 3 <= min_sessions <= max_sessions, got {min_sessions}, "
                         f"{max_sessions}")

    @st.composite
    def build(draw: DrawFn) -> list[Message]:
        low = draw(st.integers(1, 12))
        seed = draw(st.integers(0, 2**32 - 1))
        kwargs: dict[str, Any] = {
            "sessions": draw(st.integers(min_sessions, max_sessions)),
            "exchanges": (low, low + draw(st.integers(0, 12))),
            "facts": draw(st.integers(0, 16)),
            "corrected": draw(st.sampled_from((0.0, 0.4, 1.0))),
            "task_share": draw(st.sampled_from((0.0, 0.35, 0.8))),
        }
        call = ", ".join([str(seed), *(f"{k}={v!r}" for k, v in kwargs.items())])
        return _Drawn(generate_chat(seed, **kwargs).messages, f"generate_chat({call}).messages")

    strategy: SearchStrategy[list[Message]] = build()
    return strategy


class _Drawn(list[Message]):
    """A drawn history whose repr is the call that makes it again (a failing example then
    reads as one line, not hundreds of messages)."""

    def __init__(self, messages: Sequence[Message], call: str) -> None:
        super().__init__(messages)
        self.call = call

    def __repr__(self) -> str:
        return self.call


def generate_history(
    seed: int,
    *,
    turns: int,
    tools_per_turn: int = 2,
    parallel_calls: int = 1,
    tool_chars: int = 400,
    images: bool = False,
    system: bool = True,
    imperfect: bool = False,
) -> list[Message]:
    """A deterministic agent history built from ``seed``, without Hypothesis.

    Each turn is a user prompt, ``tools_per_turn`` tool steps of ``parallel_calls`` calls
    each (the assistant message plus one result per call, results between ``tool_chars / 2``
    and ``tool_chars * 3 / 2`` characters) and a final assistant answer, so the history has
    exactly ``system + turns * (2 + tools_per_turn * (1 + parallel_calls))`` messages
    (``imperfect=True`` adds a few defective ones). The same arguments give equal messages
    with equal ids. 50,000 messages take well under a second or two.
    """
    if turns < 1 or tools_per_turn < 0 or parallel_calls < 1 or tool_chars < 1:
        raise ValueError("need turns >= 1, tools_per_turn >= 0, parallel_calls >= 1, "
                         "tool_chars >= 1")
    shape = _Shape(min_turns=turns, max_turns=turns, fixed_steps=tools_per_turn,
                   fixed_parallel=parallel_calls, min_tool_chars=max(tool_chars // 2, 1),
                   max_tool_chars=tool_chars * 3 // 2 + 1, images=images, system=system)
    source = _RandomSource(seed)
    builder = _Builder(source, source, shape, prefix=f"s{seed}")
    builder.history()
    if imperfect:
        builder.spoil()
    return builder.out


def assert_valid_within(
    messages: Sequence[Message],
    budget: Budget | int,
    counter: TokenCounter,
    fixed_tokens: int = 0,
) -> None:
    """Assert that ``messages`` pass ``validate`` and fit ``budget`` under ``counter``.

    ``budget`` is a [`Budget`][contextfold.Budget] (its ``input_budget`` is the limit) or a
    token count; ``fixed_tokens`` (tool definitions, a fixed prompt) count against it.

    Raises:
        AssertionError: listing every format problem and the overflow, if any.
    """
    limit = budget.input_budget if isinstance(budget, Budget) else int(budget)
    failures = [str(p) for p in validate(messages)]
    used = counter.count_messages(messages) + fixed_tokens
    if used > limit:
        failures.append(
            f"over budget: {used} tokens ({used - fixed_tokens} in {len(messages)} messages "
            f"+ {fixed_tokens} fixed) > {limit}"
        )
    if failures:
        raise AssertionError("invalid compaction output:\n  " + "\n  ".join(failures))



SummaryAnswer = Union[
    str, SummaryReply, Callable[[SummaryRequest], "str | SummaryReply | None"], None
]
"""What [`run_policy`][contextfold.testing.run_policy] answers a summary request with: a text,
``None`` (the summary failed), a whole reply, or a callable that makes one of those from the
request."""


def run_policy(
    policy: Policy,
    messages: Sequence[Message],
    context: CompactionContext | None = None,
    *,
    budget: Budget | None = None,
    counter: TokenCounter | None = None,
    reply: SummaryAnswer = "TASK: t\nPROGRESS: p\nREMAINING: r\nDATA: d\nDECISIONS: none",
) -> tuple[PolicyOutcome, list[SummaryRequest]]:
    """Drive ``policy`` by hand, as the engine would, and return its outcome and every
    summary request it made.

    Give a ``context``, or a ``budget`` (and a ``counter``; default an estimating one) to
    build a plain one. Nothing is validated or checked against the budget: this is the
    policy's raw output, for tests of the policy itself.

    Example::

        outcome, requests = run_policy(ThresholdPolicy(), history, budget=Budget(4_000),
                                       reply="TASK: book\\nDATA: HAT001")
        assert len(requests) == 1 and outcome.method == "threshold"
    """
    if context is None:
        if budget is None:
            raise TypeError("run_policy needs a context or a budget")
        from ._counting.counters import EstimatingCounter

        context = CompactionContext(budget=budget, counter=counter or EstimatingCounter())
    requests: list[SummaryRequest] = []
    run = policy.run(messages, context)
    try:
        request = next(run)
        while True:
            requests.append(request)
            request = run.send(_answer(reply, request))
    except StopIteration as stop:
        outcome: PolicyOutcome = stop.value
        details = resolved(outcome.details)  # figures the policy left to be counted when read
        if details is not outcome.details:
            outcome = replace(outcome, details=details)
        return outcome, requests


def _answer(reply: SummaryAnswer, request: SummaryRequest) -> SummaryReply:
    from ._policies.provider_native import ProviderRequest, performed

    if isinstance(request, ProviderRequest):  # a provider call is made as the engine makes it
        return performed(request)
    value = reply(request) if callable(reply) else reply
    if isinstance(value, SummaryReply):
        return value
    if value is None:
        return SummaryReply(text=None, origin="failed", error="scripted failure")
    return SummaryReply(text=value)
