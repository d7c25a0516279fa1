"""Threshold compaction (seed 004): truncate stale content, add one structured summary.

When the input passes ``budget.trigger`` (75%) the policy compacts it towards
``budget.target`` (50%) in five steps:

1. strip images from tool results the model has already analysed (a marker says so);
2. pick targets in three passes until the projected savings cover the excess: tool
   results largest first, then assistant messages oldest first, then user messages
   oldest first. Never targeted: system messages, the first user message, the last
   ``protect_recent`` messages of each role, error results, pinned messages and messages
   under ``min_compaction_chars``. Earlier summaries are *not* protected, so compaction
   is recursive;
3. save the originals, then cut each target to its head and tail with seed 004's label;
   truncated assistant messages lose their reasoning but keep their tool calls;
4. ask for one summary of the originals (TASK, PROGRESS, REMAINING, DATA, DECISIONS);
5. add a user message with the summary and the continuation nudge, or, when the summary
   failed, seed 004's compaction notice.

Degradation, when truncating every eligible message is not enough: whole groups
(an assistant message with its tool results, or a standalone message) that hold no
protected message are dropped, oldest first, until the projection reaches the target.
Their full text goes into the summary request with the truncated targets, so the summary
covers them, and the store keeps the full history. Then a summary that does not fit under
the trigger is cut head+tail, then replaced by the notice.
:class:`~contextfold.BudgetExceededError` is raised only when the protected messages and
the notice do not fit the input budget.

Where the summary goes: seed 004 pushes it onto the end. So do we, with one exception: a
trailing user prompt (not a summary) stays last, with the summary just before it, so the
model answers the user rather than the notice. Either place is after a complete tool
group, never between a call and its result. A user message after tool results is valid for
every provider; the model reads it as "continue", which is the nudge's purpose.

Seed 004's constants map as follows: ``CHARS_PER_TOKEN`` is the counter's
(``EstimatingCounter(1.5)``), ``COMPACTION_THRESHOLD`` and ``COMPACTION_TARGET`` are the
budget's ``trigger`` and ``target``, ``PROTECT_RECENT`` and ``MIN_COMPACTION_SIZE`` are
``protect_recent`` and ``min_compaction_chars``, and ``HEAD_RATIO``/``HEAD_CAP``/
``TAIL_RATIO``/``TAIL_CAP`` are ``head_tail``. ``COMPACTION_RATIO`` (the expected retention)
is not needed: projected savings are measured with the counter on the truncated text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .._errors import BudgetExceededError, ConfigurationError
from .._learning import learned_in
from .._messages import ContentPart, Message, TextPart
from .._policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
    Target,
)
from .._references import handle_for, handle_text
from .._shrink import HeadTail, truncate_head_tail
from .._structure import SYSTEM_ROLES, split_groups
from .passes import strip_images

__all__ = [
    "COMPACTION_NOTICE",
    "CONTINUATION_NUDGE",
    "SUMMARY_HEADER",
    "THRESHOLD_INSTRUCTIONS",
    "ThresholdPolicy",
]

THRESHOLD_INSTRUCTIONS = """\
Summarize the conversation below into a structured conversation state with exactly these \
five sections:

TASK: What the user originally asked for
PROGRESS: Numbered list of completed steps with key results
REMAINING: What still needs to be done (exact items, counts, IDs)
DATA: Key values — names, emails, dates, IDs, numbers, URLs, errors
DECISIONS: Any decisions or confirmations made

Copy every identifier, reference number, name and amount exactly as written."""
"""Seed 004's five-section summary prompt."""

SUMMARY_HEADER = "[Compaction Summary]\n\n"
"""The first line of the summary message."""

CONTINUATION_NUDGE = (
    "[Status: Context was compacted. The messages above contain truncated versions of older "
    "content. This summary captures the full conversation state. Continue where you left off. "
    "Do NOT produce final output until ALL steps are complete. Do NOT re-do completed work.]"
)
"""Seed 004's continuation nudge, after the summary."""

COMPACTION_NOTICE = (
    "[Compaction Notice: Context was compacted by truncating older messages (showing first and "
    "last portions of each). A conversation summary could not be generated. Review the "
    "truncated content carefully to reconstruct what has been completed and what remains. "
    "Continue where you left off. Do NOT produce final output until ALL steps are complete.]"
)
"""Seed 004's notice, used when no summary could be made."""

_PASSES = (("tool_results", "tool"), ("assistant", "assistant"), ("user", "user"))


@dataclass
class _Plan:
    """What the policy decided before asking for the summary."""

    work: Sequence[Message]
    strip_targets: tuple[Target, ...]
    protected: frozenset[int]
    offset: int
    reserve: int
    chosen: dict[int, Message] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    passes: dict[str, int] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class ThresholdPolicy:
    """Seed 004's threshold compaction: head+tail truncation plus one structured summary.

    Args:
        protect_recent: messages of each role (tool, assistant, user) kept verbatim at the end.
        min_compaction_chars: messages with less text than this are not worth truncating.
        head_tail: the head and tail sizes of a truncated message.
        summary_max_tokens: the largest summary asked for.
        summary_max_share: the summary's size hint is at most this share of the target.
        strip_images: remove analysed images from tool results first.
        instructions: the summary prompt (seed 004's five sections).
        nudge: the text after the summary.
        notice: the message used when the summary failed.

    Raises:
        ConfigurationError: a value is out of range.
    """

    protect_recent: int = 3
    min_compaction_chars: int = 500
    head_tail: HeadTail = field(default_factory=HeadTail)
    summary_max_tokens: int = 2_000
    summary_max_share: float = 0.2
    strip_images: bool = True
    instructions: str = THRESHOLD_INSTRUCTIONS
    nudge: str = CONTINUATION_NUDGE
    notice: str = COMPACTION_NOTICE
    name = "threshold"

    def __post_init__(self) -> None:
        for attr in ("protect_recent", "min_compaction_chars"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{attr} must be an int >= 0, got {value!r}")
        if not isinstance(self.head_tail, HeadTail):
            raise ConfigurationError(f"head_tail must be a HeadTail, got {self.head_tail!r}")
        if not isinstance(self.summary_max_tokens, int) or self.summary_max_tokens < 1:
            raise ConfigurationError(
                f"summary_max_tokens must be an int >= 1, got {self.summary_max_tokens!r}"
            )
        if not 0 < self.summary_max_share <= 1:
            raise ConfigurationError(
                f"summary_max_share must be in (0, 1], got {self.summary_max_share}"
            )
        for attr in ("instructions", "nudge", "notice"):
            if not str(getattr(self, attr)).strip():
                raise ConfigurationError(f"{attr} must not be empty")

    # -- the policy ------------------------------------------------------------------

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Compact when the input passes the trigger (or ``context.force``)."""
        before = context.input_tokens(messages)
        if not context.force and before <= context.budget.trigger_tokens:
            return PolicyOutcome(messages=messages)
        plan = self._plan(messages, context)
        if not plan.chosen and not plan.dropped:
            return self._without_summary(messages, plan, context)
        request = SummaryRequest(
            messages=self._originals(plan),
            instructions=self.instructions,
            max_tokens=self._summary_tokens(context),
            purpose="threshold",
        )
        reply = yield request
        return self._finish(messages, plan, reply, context)

    # -- planning --------------------------------------------------------------------

    def _plan(self, messages: Sequence[Message], context: CompactionContext) -> _Plan:
        protected = self._protected(messages)
        work, strip_targets = (
            strip_images(messages, context, keep=protected)
            if self.strip_images else (messages, ())
        )
        estimate = context.measure(messages)
        offset = max(0, (context.known_tokens or 0) - estimate)
        if context.force:  # the provider said the input overflowed: it is at least the budget
            offset = max(offset, context.budget.input_budget + 1 - estimate)
        plan = _Plan(
            work=work, strip_targets=strip_targets, protected=protected,
            offset=offset, reserve=self._reserve(context),
        )
        projected = context.measure(work) + offset + plan.reserve
        saved = self._select(plan, context, projected - context.budget.target_tokens)
        excess = projected - saved - context.budget.target_tokens
        if excess > 0:
            self._drop(plan, context, excess)
        return plan

    def _protected(self, work: Sequence[Message]) -> frozenset[int]:
        protected: set[int] = set()
        seen = {"tool": 0, "assistant": 0, "user": 0}
        first_user = None
        for i in range(len(work) - 1, -1, -1):
            m = work[i]
            if m.role in seen:
                if seen[m.role] < self.protect_recent:
                    protected.add(i)
                seen[m.role] += 1
            if m.role == "user":
                first_user = i
            if m.role in SYSTEM_ROLES or m.is_error or m.is_pinned:
                protected.add(i)
        if first_user is not None:
            protected.add(first_user)
        return frozenset(protected)

    def _eligible(self, m: Message) -> bool:
        return len(m.text) + len(m.reasoning or "") >= self.min_compaction_chars

    def _select(self, plan: _Plan, context: CompactionContext, need: int) -> int:
        """Pick targets pass by pass until ``need`` tokens are saved; the tokens saved."""
        count = context.counter.count_message
        learned = learned_in(context.state)
        saved = 0
        for pass_name, role in _PASSES:
            if saved >= need:
                break
            order = [
                i for i, m in enumerate(plan.work)
                if m.role == role and i not in plan.protected and self._eligible(m)
            ]
            if role == "tool":  # largest first; oldest first among equals
                order.sort(key=lambda i: -count(plan.work[i]))
            if learned is not None:  # content like what was read back goes last
                order.sort(key=lambda i: learned.points(plan.work[i]) > 0)
            for i in order:
                if saved >= need:
                    break
                new = self._truncate(plan.work[i], context)
                gain = count(plan.work[i]) - count(new)
                if gain > 0:
                    plan.chosen[i] = new
                    plan.passes[pass_name] = plan.passes.get(pass_name, 0) + 1
                    saved += gain
        return saved

    def _drop(self, plan: _Plan, context: CompactionContext, need: int) -> None:
        """Drop whole unprotected groups, oldest first, until ``need`` tokens are saved."""
        count = context.counter.count_message
        saved = 0
        for group in split_groups(plan.work):
            if saved >= need:
                break
            indices = range(group.start, group.end)
            if any(i in plan.protected for i in indices):
                continue
            saved += sum(count(plan.chosen.get(i, plan.work[i])) for i in indices)
            plan.dropped.update(indices)
        if plan.dropped:
            span = handle_for(plan.work[i] for i in sorted(plan.dropped))
            plan.note = _dropped_note(span, len(plan.dropped), context)

    def _truncate(self, m: Message, context: CompactionContext) -> Message:
        text = truncate_head_tail(m.text, self.head_tail,
                                  handle=handle_text(handle_for(m), context))
        others: tuple[ContentPart, ...] = ()
        if not isinstance(m.content, str):
            others = tuple(p for p in m.content if not isinstance(p, TextPart))
        content: str | tuple[ContentPart, ...] = (TextPart(text), *others) if others else text
        if m.role == "assistant":
            return replace(m, content=content, reasoning=None)
        return replace(m, content=content)

    def _reserve(self, context: CompactionContext) -> int:
        """Tokens the summary message will take, at its size hint."""
        note = _dropped_note("ctx_" + "0" * 12, 999, context)
        wrapper = Message(role="user", content=f"{SUMMARY_HEADER}\n\n{note}\n\n{self.nudge}",
                          source="summary")
        return context.counter.count_message(wrapper) + self._summary_tokens(context)

    def _summary_tokens(self, context: CompactionContext) -> int:
        share = int(context.budget.target_tokens * self.summary_max_share)
        return max(1, min(self.summary_max_tokens, share))

    def _originals(self, plan: _Plan) -> tuple[Message, ...]:
        """The full text of every target and dropped message, in order, after the first user
        message (kept verbatim in the context, sent along so the summary can state the TASK)."""
        picked = sorted(set(plan.chosen) | plan.dropped)
        first_user = next((i for i, m in enumerate(plan.work) if m.role == "user"), None)
        if first_user is not None and first_user not in plan.chosen:
            picked = [first_user, *(i for i in picked if i != first_user)]
        return tuple(plan.work[i] for i in picked)

    # -- finishing -------------------------------------------------------------------

    def _without_summary(
        self, messages: Sequence[Message], plan: _Plan, context: CompactionContext
    ) -> PolicyOutcome:
        """Nothing to truncate or drop: images stripped at most, or nothing to do."""
        if context.measure(plan.work) > context.budget.input_budget:
            raise self._too_big(plan.work, context)
        if not plan.strip_targets:
            return PolicyOutcome(
                messages=messages, notes=("threshold: nothing eligible for compaction",),
                details=self._details(messages, plan, context, summary="none"),
            )
        return PolicyOutcome(
            messages=plan.work, method=self.name, targets=plan.strip_targets,
            details=self._details(messages, plan, context, summary="none"),
        )

    def _finish(
        self, messages: Sequence[Message], plan: _Plan, reply: SummaryReply,
        context: CompactionContext,
    ) -> PolicyOutcome:
        kept = [plan.chosen.get(i, m) for i, m in enumerate(plan.work) if i not in plan.dropped]
        notes: list[str] = []
        summary = self._summary_message(reply.text, context, plan.note)
        out = _insert_summary(kept, summary)
        if context.measure(out) + plan.offset > context.budget.trigger_tokens and reply.text:
            room = context.budget.trigger_tokens - plan.offset - context.measure(kept)
            summary = self._fit_summary(reply.text, room, context, plan.note)
            out = _insert_summary(kept, summary)
            notes.append("threshold: summary cut to fit the budget")
        for note in dict.fromkeys((plan.note, "")):  # the bare notice when the note is too big
            if context.measure(out) > context.budget.input_budget:
                summary = self._summary_message(None, context, note)
                out = _insert_summary(kept, summary)
        if context.measure(out) > context.budget.input_budget:
            return self._no_room(messages, plan, kept, context)
        used = "notice" if summary.metadata.get("compaction") == "notice" else "summary"
        if reply.text is None:
            notes.append(f"threshold: summary failed ({reply.error}); used the compaction notice")
        return PolicyOutcome(
            messages=out, method=self.name, targets=self._targets(plan, context),
            notes=tuple(notes), details=self._details(messages, plan, context, summary=used,
                                                      origin=reply.origin),
        )

    def _no_room(
        self, messages: Sequence[Message], plan: _Plan, kept: list[Message],
        context: CompactionContext,
    ) -> PolicyOutcome:
        """Not even the notice fits beside what compaction kept (it saved less than the
        notice costs): the input with images stripped if that fits, else the truncated
        messages without a summary when nothing was dropped, else the error."""
        limit = context.budget.input_budget
        note = "threshold: compaction saved less than its summary would cost"
        if context.measure(plan.work) <= limit:
            outcome = self._without_summary(messages, plan, context)
            return replace(outcome, notes=(*outcome.notes, note))
        if not plan.dropped and context.measure(kept) <= limit:
            return PolicyOutcome(
                messages=kept, method=self.name, targets=self._targets(plan, context),
                notes=(note + "; sent without one",),
                details=self._details(messages, plan, context, summary="none"),
            )
        self._drop(plan, context, 10**18)  # last resort: every unprotected group goes
        kept = [plan.chosen.get(i, m) for i, m in enumerate(plan.work) if i not in plan.dropped]
        for extra in dict.fromkeys((plan.note, "")):
            out = _insert_summary(kept, self._summary_message(None, context, extra))
            if context.measure(out) <= limit:
                return PolicyOutcome(
                    messages=out, method=self.name, targets=self._targets(plan, context),
                    notes=(note + "; every unprotected group dropped, notice used",),
                    details=self._details(messages, plan, context, summary="notice"),
                )
        raise self._too_big(out, context)

    def _summary_message(
        self, text: str | None, context: CompactionContext, note: str = ""
    ) -> Message:
        """The summary (or the notice), with ``note`` naming the handle of what was dropped."""
        note = f"\n\n{note}" if note else ""
        if text is None:
            return Message(role="user", content=self.notice + note, source="summary",
                           created_at=context.now, metadata={"compaction": "notice"})
        return Message(
            role="user", content=f"{SUMMARY_HEADER}{text.strip()}{note}\n\n{self.nudge}",
            source="summary", created_at=context.now, metadata={"compaction": "threshold"},
        )

    def _fit_summary(
        self, text: str, room: int, context: CompactionContext, note: str = ""
    ) -> Message:
        """The summary message cut head+tail so it takes at most ``room`` tokens, or the
        notice when not even a short summary fits."""
        for _ in range(6):
            message = self._summary_message(text, context, note)
            size = context.counter.count_message(message)
            if size <= room:
                return message
            overhead = size - context.counter.count_text(text)
            keep = (room - overhead) / max(1, size - overhead)
            if keep <= 0.05 or len(text) < 200:
                break
            text = truncate_head_tail(text, HeadTail(0.6, 10**9, 0.3, 10**9),
                                      max_chars=int(len(text) * keep * 0.9))
        return self._summary_message(None, context, note)

    def _targets(self, plan: _Plan, context: CompactionContext) -> tuple[Target, ...]:
        count = context.counter.count_message
        out = list(plan.strip_targets)
        span = handle_for(plan.work[i] for i in sorted(plan.dropped)) if plan.dropped else None
        for i in sorted(set(plan.chosen) | plan.dropped):
            m = plan.work[i]
            dropped = i in plan.dropped
            out.append(Target(
                index=i, role=m.role, method="dropped" if dropped else "truncated",
                original_tokens=count(m), new_tokens=0 if dropped else count(plan.chosen[i]),
                tool_name=m.name if m.role == "tool" else None,
                handle=span if dropped else handle_for(m),
            ))
        return tuple(out)

    def _details(
        self, messages: Sequence[Message], plan: _Plan, context: CompactionContext, *,
        summary: str, origin: str | None = None,
    ) -> dict[str, object]:
        return {
            "estimate_tokens": context.measure(messages),
            "known_tokens": context.known_tokens,
            "effective_tokens": context.measure(messages) + plan.offset,
            "trigger_tokens": context.budget.trigger_tokens,
            "target_tokens": context.budget.target_tokens,
            "forced": context.force,
            "images_stripped": len(plan.strip_targets),
            "truncated": len(plan.chosen) - len(plan.dropped & set(plan.chosen)),
            "passes": dict(plan.passes),
            "dropped": len(plan.dropped),
            "summary_kind": summary,
            "summary_origin": origin,
        }

    def _too_big(self, out: Sequence[Message], context: CompactionContext) -> BudgetExceededError:
        return BudgetExceededError(
            f"threshold compaction: the protected messages (system, first user message, last "
            f"{self.protect_recent} of each role, errors, pinned), the tool groups holding them "
            f"and the compaction notice ({len(out)} messages)",
            needed=context.measure(out),
            available=context.budget.input_budget,
        )


def _dropped_note(span: str, count: int, context: CompactionContext) -> str:
    """The line of the summary that names the handle of the dropped messages."""
    return (f"[Full text of the {count} dropped messages: {handle_text(span, context)}. "
            "Truncated messages name their own handle in their label.]")


def _insert_summary(kept: list[Message], summary: Message) -> list[Message]:
    """``kept`` with ``summary`` at the end, or before a trailing run of user prompts."""
    at = len(kept)
    while at > 0 and kept[at - 1].role == "user" and kept[at - 1].source != "summary":
        at -= 1
    if at == 0 or kept[at - 1].role in SYSTEM_ROLES:
        at = len(kept)  # only prompts after the system: the summary goes last
    return [*kept[:at], summary, *kept[at:]]
