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

Degradation, when seed 004's protections do not leave room for the target (they assume a
window of a million tokens), in this order, each step only when the one before it does not
reach the target with the summary's room:

1. the recency protection is relaxed one message at a time, ``protect_recent`` down to 0;
   errors and pinned messages stay protected, and so does the newest group (its last
   message of each role verbatim);
2. error and pinned messages become targets too (cut head+tail like any other);
3. groups holding them may be dropped, after every other group.

Dropping takes whole groups (a call with its results, or a standalone message), oldest
first, never the group of the first user message or the newest group; their full text
goes into the summary request with the truncated targets, so the summary's DATA keeps
their identifiers, and the store keeps the full history. When no step reaches the target,
the least degraded one whose output fits the input budget with the summary's room is used,
else the least degraded one that fits with the notice. When none fits, the first user
message and the newest group are cut head+tail (their tool calls kept) to the largest
common size that fits, with seed 004's notice or, when not even that fits, a
:data:`SHORT_NOTICE`: :class:`~contextfold.BudgetExceededError` is raised only when the
system messages, those messages cut to their labels and the short notice do not fit.

The summary takes what is left under the target (at least its reserved room, within the
input budget); a longer one (an LLM past its hint, or verification appending missing
identifiers) is cut section by section, DATA last (:mod:`.threshold_fit`), and replaced by
the notice only when not even its headings fit.

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

from .._lossless.learning import learned_in
from .._lossless.references import handle_for, handle_text
from .._messages.model import ContentPart, Message, TextPart
from ..errors import BudgetExceededError, ConfigurationError
from .contract import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
)
from .head_tail import HeadTail, truncate_head_tail
from .passes import strip_images
from .prompt_source import open_request
from .threshold_fit import (
    SUMMARY_HEADER,
    dropped_note,
    fallback_notes,
    fit_sections,
    insert_summary,
    summary_message,
)
from .threshold_plan import (
    Level,
    Plan,
    cut_to_fit,
    drop_groups,
    plan_details,
    plan_originals,
    plan_targets,
    protected_at,
)

__all__ = [
    "COMPACTION_NOTICE",
    "CONTINUATION_NUDGE",
    "SHORT_NOTICE",
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

SHORT_NOTICE = (
    "[Older messages dropped to fit. Continue; do NOT finish before ALL steps are done.]"
)
"""The last resort, when not even seed 004's notice fits beside the messages kept: what
happened and the nudge's two points (continue; no final output before the end)."""

_PASSES = (("tool_results", "tool"), ("assistant", "assistant"), ("user", "user"))


@dataclass(frozen=True)
class ThresholdPolicy:
    """Seed 004's threshold compaction: head+tail truncation plus one structured summary.

    Args:
        protect_recent: messages of each role (tool, assistant, user) kept verbatim at the end.
        min_compaction_chars: messages with less text than this are not worth truncating.
        head_tail: the head and tail sizes of a truncated message.
        summary_max_tokens: the largest summary asked for.
        summary_max_share: the room reserved for the summary is at most this share of the
            target (what the plan leaves under the target is offered too, up to
            ``summary_max_tokens``).
        strip_images: remove analysed images from tool results first.
        instructions: the summary prompt (seed 004's five sections).
        nudge: the text after the summary.
        notice: the message used when the summary failed.
        short_notice: the notice used when not even ``notice`` fits (tiny budgets).

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
    short_notice: str = SHORT_NOTICE
    name = "threshold"
    always_run = False

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
        for attr in ("instructions", "nudge", "notice", "short_notice"):
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
            messages=plan_originals(plan),
            instructions=self.instructions,
            max_tokens=self._request_tokens(plan, context),
            purpose="threshold",
            open_request=open_request(messages),
        )
        reply = yield request
        return self._finish(messages, plan, reply, context)

    # -- planning --------------------------------------------------------------------

    def _levels(self) -> list[Level]:
        """Seed 004's protections first, then the documented degradation, in order."""
        levels = [Level(f"protect_recent={r}" if r < self.protect_recent else "none", r)
                  for r in range(self.protect_recent, -1, -1)]
        levels.append(Level("cut_protected", 0, cut_protected=True))
        levels.append(Level("drop_protected", 0, cut_protected=True, drop_protected=True))
        return levels

    def _plan(self, messages: Sequence[Message], context: CompactionContext) -> Plan:
        """The least degraded plan that reaches the target, else fits the budget."""
        estimate = context.measure(messages)
        offset = max(0, (context.known_tokens or 0) - estimate)
        if context.force:  # the provider said the input overflowed: it is at least the budget
            offset = max(offset, context.budget.input_budget + 1 - estimate)
        reserve = self._reserve(context)
        target, limit = context.budget.target_tokens, context.budget.input_budget
        tried: list[tuple[Plan, int]] = []
        for level in self._levels():
            plan = self._plan_at(level, messages, context, offset, reserve)
            size = context.measure(plan.kept())
            if size + offset + reserve <= target:
                return plan
            tried.append((plan, size))
        notice = self._notice_tokens(context)
        for room in (reserve, notice):  # no step reaches the target: the least degraded fit
            for plan, size in tried:
                if size + room <= limit:
                    return plan
        return self._to_the_bone(tried[-1][0], context)

    def _plan_at(
        self, level: Level, messages: Sequence[Message], context: CompactionContext,
        offset: int, reserve: int,
    ) -> Plan:
        frozen, anchored = protected_at(messages, level)
        work, strip_targets = (
            strip_images(messages, context, keep=frozen) if self.strip_images else (messages, ())
        )
        plan = Plan(work=work, strip_targets=strip_targets, frozen=frozen, anchored=anchored,
                     offset=offset, reserve=reserve, level=level.name)
        projected = context.measure(work) + offset + reserve
        saved = self._select(plan, context, projected - context.budget.target_tokens)
        excess = projected - saved - context.budget.target_tokens
        if excess > 0:
            drop_groups(plan, context, excess)
        return plan

    def _eligible(self, m: Message) -> bool:
        return len(m.text) + len(m.reasoning or "") >= self.min_compaction_chars

    def _select(self, plan: Plan, context: CompactionContext, need: int) -> int:
        """Pick targets pass by pass until ``need`` tokens are saved; the tokens saved."""
        count = context.counter.count_message
        learned = learned_in(context.state)
        saved = 0
        for pass_name, role in _PASSES:
            if saved >= need:
                break
            order = [
                i for i, m in enumerate(plan.work)
                if m.role == role and i not in plan.frozen and self._eligible(m)
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

    def _to_the_bone(self, plan: Plan, context: CompactionContext) -> Plan:
        """Every group that may go dropped; then the first user message and the newest group
        cut head+tail to fit (:func:`.threshold_plan.cut_to_fit`). Raises when even their
        labels and the short notice do not fit."""
        drop_groups(plan, context, 10**18)
        plan.level = "cut_to_fit"
        floor = cut_to_fit(plan, context, self.head_tail, self._notices(plan, context),
                           self._notice_tokens(context))
        if floor is not None:
            raise self._too_big(floor, context)
        return plan

    def _notices(self, plan: Plan, context: CompactionContext) -> list[Message]:
        """Seed 004's notice naming the dropped messages' handle, then with the handle alone,
        then bare; then the short notice the same way, the last resort."""
        notes = fallback_notes(plan.note)
        return [*(self._summary_message(None, context, n) for n in notes),
                *(summary_message(None, context, nudge=self.nudge, notice=self.short_notice,
                                  note=n) for n in notes[1:] or notes)]

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
        """Tokens the summary message will take, at its size hint (never less than the
        notice's)."""
        note = dropped_note("ctx_" + "0" * 12, 999, context)
        wrapper = Message(role="user", content=f"{SUMMARY_HEADER}\n\n{note}\n\n{self.nudge}",
                          source="summary")
        summary = context.counter.count_message(wrapper) + self._summary_tokens(context)
        return max(summary, self._notice_tokens(context))

    def _notice_tokens(self, context: CompactionContext) -> int:
        note = dropped_note("ctx_" + "0" * 12, 999, context)
        return context.counter.count_message(self._summary_message(None, context, note))

    def _request_tokens(self, plan: Plan, context: CompactionContext) -> int:
        """The summary's size hint: its reserved room, or what the plan left under the
        target when that is more (dropping whole groups overshoots), up to
        ``summary_max_tokens``."""
        hint = self._summary_tokens(context)
        wrapper = max(0, plan.reserve - hint)
        left = (context.budget.target_tokens - plan.offset - context.measure(plan.kept())
                - wrapper)
        return max(hint, min(self.summary_max_tokens, left))

    def _summary_tokens(self, context: CompactionContext) -> int:
        share = int(context.budget.target_tokens * self.summary_max_share)
        return max(1, min(self.summary_max_tokens, share))

    # -- finishing -------------------------------------------------------------------

    def _without_summary(
        self, messages: Sequence[Message], plan: Plan, context: CompactionContext
    ) -> PolicyOutcome:
        """Nothing to truncate or drop: images stripped at most, or nothing to do."""
        if context.measure(plan.work) > context.budget.input_budget:
            raise self._too_big(plan.work, context)
        if not plan.strip_targets:
            return PolicyOutcome(
                messages=messages, notes=("threshold: nothing eligible for compaction",),
                details=plan_details(messages, plan, context, summary="none"),
            )
        return PolicyOutcome(
            messages=plan.work, method=self.name, targets=plan.strip_targets,
            details=plan_details(messages, plan, context, summary="none"),
        )

    def _finish(
        self, messages: Sequence[Message], plan: Plan, reply: SummaryReply,
        context: CompactionContext,
    ) -> PolicyOutcome:
        """The kept messages with the summary, which takes what is left under the target
        (at least its reserve, within the budget), cut section by section when longer."""
        kept = plan.kept()
        limit = context.budget.input_budget
        base = context.measure(kept)
        ceiling = min(limit, max(context.budget.target_tokens - plan.offset, base + plan.reserve))
        notes: list[str] = []
        summary: Message | None = None
        if reply.text is not None:
            def fits(text: str) -> bool:
                message = self._summary_message(text, context, plan.note)
                return context.measure(insert_summary(kept, message)) <= ceiling
            text = fit_sections(reply.text, fits)
            if text is not None:
                summary = self._summary_message(text, context, plan.note)
                if text != reply.text:
                    notes.append("threshold: summary cut to fit the budget")
        if summary is None:  # the first notice that fits, the short one last
            for summary in self._notices(plan, context):
                if context.measure(insert_summary(kept, summary)) <= limit:
                    break
        assert summary is not None
        out = insert_summary(kept, summary)
        if context.measure(out) > limit:
            return self._no_room(messages, plan, out, context)
        used = "notice" if summary.metadata.get("compaction") == "notice" else "summary"
        if reply.text is None:
            notes.append(f"threshold: summary failed ({reply.error}); used the compaction notice")
        elif used == "notice":
            notes.append("threshold: the summary did not fit; used the compaction notice")
        return PolicyOutcome(
            messages=out, method=self.name, targets=plan_targets(plan, context),
            notes=tuple(notes), details=plan_details(messages, plan, context, summary=used,
                                                      origin=reply.origin),
        )

    def _no_room(
        self, messages: Sequence[Message], plan: Plan, out: list[Message],
        context: CompactionContext,
    ) -> PolicyOutcome:
        """Not even the notice fits beside what compaction kept (planning leaves room for
        it, so only a summary message larger than planned gets here): the input with images
        stripped if that fits, else the error."""
        if context.measure(plan.work) <= context.budget.input_budget:
            outcome = self._without_summary(messages, plan, context)
            return replace(outcome, notes=(
                *outcome.notes, "threshold: compaction saved less than its summary would cost"))
        raise self._too_big(out, context)

    def _summary_message(
        self, text: str | None, context: CompactionContext, note: str = ""
    ) -> Message:
        """The summary (or the notice), with ``note`` naming the handle of what was dropped."""
        return summary_message(text, context, nudge=self.nudge, notice=self.notice, note=note)

    def _too_big(self, out: Sequence[Message], context: CompactionContext) -> BudgetExceededError:
        return BudgetExceededError(
            "threshold compaction: the system messages, the first user message and the "
            "newest group cut head+tail to their labels, and the short compaction notice "
            f"({len(out)} messages)",
            needed=context.measure(out),
            available=context.budget.input_budget,
        )
