"""Threshold compaction: truncate stale content, add one structured summary.

When the input passes ``budget.trigger`` (75%) the policy compacts it towards
``budget.target`` (50%) in five steps:

1. strip images from tool results the model has already analysed (a marker says so);
2. pick targets in three passes until the projected savings cover the excess: tool
   results largest first, then assistant messages oldest first, then user messages
   oldest first. Never targeted: system messages, the task prompt, the latest request,
   the last ``protect_recent`` messages of each role, error results, pinned messages and
   messages under ``min_compaction_chars``. Earlier summaries are *not* protected, so
   compaction is recursive;
3. save the originals, then cut each target to its head and tail with the threshold design's label;
   truncated assistant messages lose their reasoning but keep their tool calls;
4. ask for one summary of the originals (TASK, PROGRESS, REMAINING, DATA, DECISIONS),
   whose TASK is the latest request, answered or not;
5. add a user message with the summary and the continuation nudge, or, when the summary
   failed, the threshold design's compaction notice.

Degradation, when the threshold design's protections do not leave room for the target (they assume a
window of a million tokens), in this order, each step only when the one before it does not
reach the target with the summary's room:

1. the recency protection is relaxed one message at a time, ``protect_recent`` down to 0;
   errors and pinned messages stay protected, and so does the newest group (its last
   message of each role verbatim);
2. error and pinned messages become targets too (cut head+tail like any other);
3. groups holding them may be dropped, after every other group.

(Pinned messages come back verbatim whatever the policy did: the ``Compactor`` runs every
policy within the pin guarantee, reserving their room when a level needed theirs.)

The threshold design protects "the first user message (original task prompt)". Here that
is the *task prompt*: the first real prompt ([`prompt_kind`][contextfold.policy.prompt_kind]), since
a session marker, an earlier summary or a nudge before it is not the task, else the first
user message. The *latest request* (the latest real prompt) is protected the same way:
it is what the model must answer, and on a long chat it is neither the first user message
nor, once answered, in the newest group.

Dropping takes whole groups (a call with its results, or a standalone message), oldest
first, never the task prompt, the latest request or the newest group; their full text
goes into the summary request with the truncated targets, so the summary's DATA keeps
their identifiers, and the store keeps the full history. When no step reaches the target
with the summary's room, the least degraded one that reaches it with a short summary's
room is used (the summary then takes what is left under the target); else the
least degraded one whose output fits the input budget with the summary's room, else with
the notice's. When none fits, the task prompt
and the newest group are cut head+tail (their tool calls kept) to the largest common size
that fits, with the threshold design's notice or, when not even that fits, a
`SHORT_NOTICE`. The latest request stays verbatim while it fits the budget beside
the system messages: when not even the labels of the others fit beside it, they are
dropped too and the output is the system messages, the latest request and a notice (the
``request_only`` degradation). [`BudgetExceededError`][contextfold.BudgetExceededError] is raised
only when that does not fit with the short notice, or, when the latest request does not fit
beside the system messages, when they, the task prompt, the newest group and the latest
request cut to their labels and the short notice do not fit.

The summary takes what is left under the target (at least its reserved room, within the
input budget); a longer one (an LLM past its hint, or verification appending missing
identifiers) is cut section by section, DATA last and least salient first, values the
kept messages show before any other (`fit_sections`); the headings of the sections the
cut emptied go too (TASK, REMAINING and DATA stay), and the notice replaces it only when
not even those fit.

Where the summary goes: the threshold design pushes it onto the end. So do we, with two exceptions:
a trailing user prompt (not a summary) stays last, with the summary just before it, so the
model answers the user rather than the notice; and when a later prompt than the first
started the current turn, the summary of the earlier turns goes right before that prompt,
so the current instruction is never followed by a restatement of older ones. Every place
is after a complete tool group, never between a call and its result. A user message after
tool results is valid for every provider; the model reads it as "continue", which is the
nudge's purpose.

The threshold design's constants map as follows: ``CHARS_PER_TOKEN`` is the counter's
(``EstimatingCounter(1.5)``), ``COMPACTION_THRESHOLD`` and ``COMPACTION_TARGET`` are the
budget's ``trigger`` and ``target``, ``PROTECT_RECENT`` and ``MIN_COMPACTION_SIZE`` are
``protect_recent`` and ``min_compaction_chars``, and ``HEAD_RATIO``/``HEAD_CAP``/
``TAIL_RATIO``/``TAIL_CAP`` are ``head_tail``. ``COMPACTION_RATIO`` (the expected retention)
is not needed: projected savings are measured with the counter on the truncated text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated

from .._config import Ge, Gt, Le, NonBlank, check_fields
from .._contract.policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryReply,
    SummaryRequest,
)
from .._head_tail import HeadTail, truncate_head_tail
from .._identifiers.salience import salience
from .._identifiers.values import appears_in_text, scanned_text
from .._lossless.ledger import Ledger, run_with_ledger
from .._lossless.references import handle_for, handle_text
from .._messages.model import ContentPart, Message, TextPart
from .._messages.prompt_kinds import (
    LEDGER_SOURCE,
    open_request,
)
from .._messages.structure import (
    SYSTEM_ROLES,
    Group,
    newest_group,
    open_loop_call,
)
from ..errors import BudgetExceededError
from .learning import learned_in
from .passes import strip_images
from .reach import drop_beyond_reach, drop_groups
from .rolling import frozen_prefix
from .salience import cut_identifiers
from .threshold_plan import (
    PASSES,
    Level,
    Plan,
    cut_to_fit,
    fold_blocks,
    note_dropped,
    plan_details,
    plan_originals,
    plan_targets,
    protected_at,
    requests,
    verbatim_request,
)
from .threshold_summary import (
    SUMMARY_HEADER,
    data_lost,
    dropped_note,
    fallback_notes,
    fit_sections,
    point_to_view,
    removed_lines,
    summary_message,
)

__all__ = [
    "COMPACTION_NOTICE",
    "CONTINUATION_NUDGE",
    "SHORT_NOTICE",
    "SHORT_NUDGE",
    "SUMMARY_HEADER",
    "THRESHOLD_INSTRUCTIONS",
    "ThresholdPolicy",
]


THRESHOLD_INSTRUCTIONS = """\
Summarize the conversation below into a structured conversation state with exactly these \
five sections:

TASK: The user's latest request, then their earlier requests as items under it
PROGRESS: Numbered list of completed steps with key results
REMAINING: What still needs to be done (exact items, counts, IDs)
DATA: Key values — names, emails, dates, IDs, numbers, URLs, errors
DECISIONS: Any decisions or confirmations made

Copy every identifier, reference number, name and amount exactly as written."""

"""The threshold design's five-section summary prompt."""

CONTINUATION_NUDGE = (
    "[Status: Context was compacted. Older messages are summarized here or shown as truncated "
    "versions of their content. This summary captures the full conversation state. Continue "
    "where you left off. Do NOT produce final output until ALL steps are complete. Do NOT "
    "re-do completed work.]"
)

"""The threshold design's continuation nudge, after the summary (worded for either place the
summary goes: after the truncated messages, or before them when compaction rolls)."""

COMPACTION_NOTICE = (
    "[Compaction Notice: Context was compacted by truncating older messages (showing first and "
    "last portions of each). A conversation summary could not be generated. Review the "
    "truncated content carefully to reconstruct what has been completed and what remains. "
    "Continue where you left off. Do NOT produce final output until ALL steps are complete.]"
)

"""The threshold design's notice, used when no summary could be made."""

SHORT_NOTICE = (
    "[Older messages dropped to fit. Continue; do NOT finish before ALL steps are done.]"
)
"""The last resort, when not even the threshold design's notice fits beside the messages
kept: what happened and the nudge's two points (continue; no final output before the end)."""

SHORT_NUDGE = "[Context compacted. Continue; do NOT finish before ALL steps are done.]"
"""The nudge of a summary on a budget too tight for `CONTINUATION_NUDGE`: the nudge's
two points (continue; no final output before the end)."""


_PASS_OF = {role: name for name, role in PASSES}

SHORT_SUMMARY_TOKENS = 64
"""The room of a short summary (TASK, a few DATA values), tried before the notice when the
summary's full room does not fit."""

@dataclass(frozen=True)
class ThresholdPolicy:
    """The threshold design's threshold compaction: head+tail truncation plus one structured
    summary.

    Args:
        protect_recent: messages of each role (tool, assistant, user) kept verbatim at the end.
        min_compaction_chars: messages with less text than this are not worth truncating.
        head_tail: the head and tail sizes of a truncated message.
        summary_max_tokens: the largest summary asked for.
        summary_max_share: the room reserved for the summary is at most this share of the
            target (what the plan leaves under the target is offered too, up to
            ``summary_max_tokens``).
        strip_images: remove analysed images from tool results first.
        instructions: the summary prompt (the threshold design's five sections).
        nudge: the text after the summary.
        notice: the message used when the summary failed.
        short_notice: the notice used when not even ``notice`` fits (tiny budgets).
        short_nudge: the nudge of a summary that does not fit with ``nudge``, or where
            ``nudge`` would take over a twentieth of the room beside the system messages
            (tight budgets): a short summary is tried before any notice.
        ledger: the compaction ledger's settings; ``None`` keeps no ledger.
        rolling: cache-stable compaction: each pass freezes what earlier passes wrote (up to
            the last summary block), compacts only what came after it and appends its own
            block there, so the request keeps the previous one's prefix for the provider's
            prompt cache (the README's "Prompt caching and summaries ahead of time").
        rolling_share: the frozen part (after the first user message) may take at most this
            share of the target (or twice its oldest block, when a consolidation left that
            block larger: consolidating again would only rewrite it); past it, when the
            ledgers have no room for another block's
            entries, or when compacting only what follows it cannot land within that share
            above the target and under the trigger, the pass consolidates (a full
            compaction, earlier summaries summarized again).

    Raises:
        ConfigurationError: a value is out of range.
    """

    protect_recent: Annotated[int, Ge(0)] = 3
    min_compaction_chars: Annotated[int, Ge(0)] = 500
    head_tail: HeadTail = field(default_factory=HeadTail)
    summary_max_tokens: Annotated[int, Ge(1)] = 2_000
    summary_max_share: Annotated[float, Gt(0), Le(1)] = 0.2
    strip_images: bool = True
    instructions: Annotated[str, NonBlank] = THRESHOLD_INSTRUCTIONS
    nudge: Annotated[str, NonBlank] = CONTINUATION_NUDGE
    notice: Annotated[str, NonBlank] = COMPACTION_NOTICE
    short_notice: Annotated[str, NonBlank] = SHORT_NOTICE
    short_nudge: Annotated[str, NonBlank] = SHORT_NUDGE
    ledger: Ledger | None = field(default_factory=Ledger)
    rolling: bool = True
    rolling_share: Annotated[float, Gt(0), Le(1)] = 0.5
    name = "threshold"
    always_run = False

    def __post_init__(self) -> None:
        check_fields(self)

    # -- the policy ------------------------------------------------------------------

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Compact when the input passes the trigger (or ``context.force``), recording what
        was cut or dropped in the compaction ledger (unless ``ledger`` is ``None``).

        Whether this pass rolls (appends a block after the frozen part) or consolidates is
        decided first: a rolling pass keeps the earlier ledgers where they are and adds
        one with the new entries; a consolidating pass merges them into one."""
        rolling = self._rolling_plan(messages, context)

        def planned(work: Sequence[Message], ctx: CompactionContext) -> PolicyRun:
            return (yield from self._run(work, ctx, rolling))

        if self.ledger is None:
            return (yield from planned(messages, context))
        # Its target leaves half the ledger's room when rolling (so the rolling passes after
        # a consolidation find room under the target for their blocks); the ledger may grow
        # to its whole room from what the pass left under the target.
        return (yield from run_with_ledger(
            planned, messages, context, self.ledger, reserve=False,
            frozen=rolling.stable if rolling is not None else 0,
            aim=0.5 if self.rolling else 1.0))

    def _run(
        self, messages: Sequence[Message], context: CompactionContext, rolling: Plan | None,
    ) -> PolicyRun:
        if not context.force and not context.exceeds(messages, context.budget.trigger_tokens):
            return PolicyOutcome(messages=messages)
        plan = rolling if rolling is not None else self._plan(messages, context)
        if not plan.chosen and not plan.dropped:
            return self._without_summary(messages, plan, context)
        originals, latest = plan_originals(plan)
        request = SummaryRequest(
            messages=originals,
            instructions=self.instructions,
            max_tokens=self._request_tokens(plan, context),
            purpose="threshold",
            open_request=open_request(messages),
            latest_request=latest,
            shown="\n".join(scanned_text(m) for m in plan.kept()),
        )
        reply = yield request
        return self._finish(messages, plan, reply, context, request.shown)

    # -- planning --------------------------------------------------------------------

    def _levels(self) -> list[Level]:
        """The threshold design's protections first, then the documented degradation, in order."""
        levels = [Level(f"protect_recent={r}" if r < self.protect_recent else "none", r)
                  for r in range(self.protect_recent, -1, -1)]
        levels.append(Level("cut_protected", 0, cut_protected=True))
        levels.append(Level("drop_protected", 0, cut_protected=True, drop_protected=True))
        return levels

    def _margins(self, messages: Sequence[Message], context: CompactionContext) -> tuple[int, int]:
        """(what the provider counts beyond our estimate, the summary's reserved room)."""
        if context.known_tokens is None and not context.force:
            return 0, self._reserve(context)  # (nothing to compare the estimate with)
        estimate = context.measure(messages)
        offset = max(0, (context.known_tokens or 0) - estimate)
        if context.force:  # the provider said the input overflowed: it is at least the budget
            offset = max(offset, context.budget.input_budget + 1 - estimate)
        return offset, self._reserve(context)

    def _rolling_plan(self, messages: Sequence[Message], context: CompactionContext
                      ) -> Plan | None:
        """The plan of a rolling pass, or ``None`` when this pass consolidates (or does
        not compact).

        A rolling plan compacts only what follows the frozen part, relaxing the recency
        protection as the full plan does. The frozen part (what earlier passes left after
        the first user message) rides on top of what a full compaction could reach (the
        target, or the system prompt, the task prompt, the latest request and the newest
        group with a summary when those alone pass it), up to ``rolling_share`` of the
        target: a plan is taken when it lands within that and under the trigger, its
        summary reckoned at the size of the last block's (a block summarizes one span, not
        the conversation). Past that share, when the ledgers have no room for another
        block's entries, or when no plan lands within it, the pass consolidates."""
        budget = context.budget
        if not self.rolling:
            return None
        stable = frozen_prefix(messages)
        if not stable or (not context.force
                          and not context.exceeds(messages, budget.trigger_tokens)):
            return None
        first = next((i for i, m in enumerate(messages) if m.role == "user"), 0)
        count = context.counter.count_message
        blocks = messages[first + 1: stable]
        sizes = [count(m) for m in blocks]
        frozen = sum(sizes)
        # A consolidated block (a summary of the whole run, its ledger) may itself pass the
        # share: consolidating again would only rewrite it, and lose the provider's cache
        # at every pass. New blocks then go after it until the frozen part doubles.
        oldest = sum(sizes[:2] if len(blocks) > 1 and blocks[1].source == LEDGER_SOURCE
                     else sizes[:1])
        if frozen > max(self.rolling_share * budget.target_tokens, 2 * oldest):
            return None  # the blocks have had their share: consolidate
        if self.ledger is not None:
            # The next block's entries, at the size of the last block's (a consolidated
            # ledger alone says nothing of one block's), within what a ledger may grow to.
            ledgers = [count(m) for m in blocks if m.source == LEDGER_SOURCE]
            wanted = sum(ledgers) + (ledgers[-1] if len(ledgers) > 1 else 0)
            if ledgers and wanted > self.ledger.room(context, wanted):
                return None  # no room for another block's entries: merge (least used shed)
        offset, reserve = self._margins(messages, context)
        newest = newest_group(messages, stable)
        if newest is None:
            return None  # nothing after the frozen part: only consolidating can help
        asked = set(requests(messages))
        essential = [m for i, m in enumerate(messages)
                     if i <= first or i in asked or newest.start <= i < newest.end]
        reachable = max(budget.target_tokens, context.measure(essential) + offset + reserve)
        summaries = [count(m) for m in blocks if m.metadata.get("compaction") == "threshold"]
        if summaries:  # a new block's summary, at the size the last one came to
            short = self._wrapper_tokens(context, short=True) + SHORT_SUMMARY_TOKENS
            reserve = min(reserve, max(short, self._notice_tokens(context),
                                       summaries[-1] * 5 // 4))
        ceiling = min(reachable + frozen, budget.trigger_tokens)
        groups = None
        for level in self._levels()[: self.protect_recent + 1]:
            plan = self._plan_at(level, messages, context, offset, reserve, stable=stable,
                                 groups=groups)
            groups = plan.groups if plan.work is messages else groups
            if (plan.chosen or plan.dropped) and (context.measure(plan.kept()) + offset
                                                  + reserve <= ceiling):
                return plan
        return None

    def _plan(self, messages: Sequence[Message], context: CompactionContext) -> Plan:
        """The least degraded plan that reaches the target, else fits the budget."""
        offset, reserve = self._margins(messages, context)
        target, limit = context.budget.target_tokens, context.budget.input_budget
        tried: list[tuple[Plan, int]] = []
        groups = None
        for level in self._levels():
            plan = self._plan_at(level, messages, context, offset, reserve, groups=groups)
            groups = plan.groups if plan.work is messages else groups
            size = context.measure(plan.kept())
            if size + offset + reserve <= target:
                return plan
            tried.append((plan, size))
        # None reaches the target with the summary's room: the least degraded that reaches it
        # with a short summary's (an output under the target beats a longer summary over
        # it); else the least degraded that fits the budget with the summary's room, a short
        # summary's (its TASK and DATA lines keep more than the notice), the notice's.
        short = self._wrapper_tokens(context, short=True) + SHORT_SUMMARY_TOKENS
        notice = self._notice_tokens(context)
        for ceiling, rooms in ((target - offset, (reserve, short)),
                               (limit, (reserve, short, notice))):
            for room in rooms:
                for plan, size in tried:
                    if size + room <= ceiling:
                        if ceiling < limit:  # the summary then takes what is left under it
                            plan.reserve = min(plan.reserve, ceiling - size)
                        return plan
        return self._to_the_bone(tried[-1][0], context)

    def _plan_at(
        self, level: Level, messages: Sequence[Message], context: CompactionContext,
        offset: int, reserve: int, stable: int = 0, groups: list[Group] | None = None,
    ) -> Plan:
        """The plan at ``level``; ``groups`` are ``split_groups(messages)`` when an earlier
        level's plan split them (each level's plan on a long history would split it again)."""
        frozen, anchored = protected_at(messages, level, stable)
        work, strip_targets = (
            strip_images(messages, context, keep=frozen) if self.strip_images else (messages, ())
        )
        plan = Plan(work=work, strip_targets=strip_targets, frozen=frozen, anchored=anchored,
                    offset=offset, reserve=reserve,
                    level=f"rolling, {level.name}" if stable else level.name,
                    stable=stable, rolling=self.rolling,
                    groups=groups if work is messages else None)
        folded = 0
        if self.rolling and not stable:  # consolidating: the earlier blocks fold into one
            folded = fold_blocks(plan, context)
        target = context.budget.target_tokens
        open_call = open_loop_call(work)
        if drop_beyond_reach(plan, context, target - offset - reserve,
                             lambda i: self._cut(plan, context, i, open_call)):
            note_dropped(plan, context)  # (decided without counting what it dropped)
            return plan
        projected = context.measure(work) + offset + reserve - folded
        saved = self._select(plan, context, projected - target)
        excess = projected - saved - target
        if excess > 0:
            drop_groups(plan, context, excess)
        return plan

    def _eligible(self, m: Message) -> bool:
        return len(m.text) + len(m.reasoning or "") >= self.min_compaction_chars

    def _cut(self, plan: Plan, context: CompactionContext, i: int, open_call: int | None
             ) -> tuple[Message, str] | None:
        """What `_select` would make of ``plan.work[i]`` when it comes to it: the cut
        copy and its pass, ``None`` for a message no pass targets."""
        m = plan.work[i]
        pass_name = _PASS_OF.get(m.role)
        if (pass_name is None or i in plan.frozen or i in plan.dropped
                or not self._eligible(m)):
            return None
        return self._truncate(m, context, keep_reasoning=i == open_call), pass_name

    def _select(self, plan: Plan, context: CompactionContext, need: int) -> int:
        """Pick targets pass by pass until ``need`` tokens are saved; the tokens saved."""
        count = context.counter.count_message
        learned = learned_in(context.state)
        saved = 0
        for pass_name, role in PASSES:
            if saved >= need:
                break
            order = [
                i for i, m in enumerate(plan.work)
                if m.role == role and i not in plan.frozen and i not in plan.dropped
                and self._eligible(m)
            ]
            if role == "tool":  # largest first; oldest first among equals
                order.sort(key=lambda i: -count(plan.work[i]))
            if learned is not None:  # content like what was read back goes last
                order.sort(key=lambda i: learned.points(plan.work[i]) > 0)
            open_call = open_loop_call(plan.work)
            for i in order:
                if saved >= need:
                    break
                new = self._truncate(plan.work[i], context, keep_reasoning=i == open_call)
                gain = count(plan.work[i]) - count(new)
                if gain > 0:
                    plan.chosen[i] = new
                    plan.pass_of[i] = pass_name
                    saved += gain
        return saved

    def _to_the_bone(self, plan: Plan, context: CompactionContext) -> Plan:
        """Every group that may go dropped; then the task prompt and the newest group cut
        head+tail to fit (`cut_to_fit`), the latest request too when not even it fits
        beside the system messages; when it does and their labels do not, the request alone
        (`_request_only`). Raises when even that does not fit with the short notice."""
        drop_groups(plan, context, 10**18)
        plan.level = "cut_to_fit"
        latest = verbatim_request(plan, context)
        notices, room = self._notices(plan, context), self._notice_tokens(context)
        # While the request alone is a way out, a cut whose label cannot name its original's
        # handle is not taken: the request with a notice naming everything else's is.
        floor = cut_to_fit(plan, context, self.head_tail, notices, room, keep=latest,
                           handles=latest is not None)
        if floor is None:
            return plan
        if latest is None:
            raise self._too_big(floor, context)
        return self._request_only(plan, latest, context)

    def _request_only(self, plan: Plan, latest: int, context: CompactionContext) -> Plan:
        """Everything but the system messages and the latest request dropped (their full
        text goes to the summary, the notice names their handle), with the request verbatim
        where it was: what the library promises while that pair fits. Raises when not even
        the short notice fits beside them (the engine's floor may still send the pair)."""
        plan.dropped.update(i for i, m in enumerate(plan.work)
                            if m.role not in SYSTEM_ROLES and i != latest)
        note_dropped(plan, context)
        plan.level = "request_only"
        kept = plan.kept()
        notices = [plan.place(kept, n) for n in self._notices(plan, context)]
        if any(context.measure(out) <= context.budget.input_budget for out in notices):
            return plan
        raise self._too_big(notices[-1], context, "the latest request")

    def _notices(self, plan: Plan, context: CompactionContext) -> list[Message]:
        """The threshold design's notice naming the dropped messages' handle, then with the handle
        alone, then bare; then the short notice with the handle, the handle alone, and the
        bare short notice, the last resort. The handle goes before the nudge: it is what
        makes the dropped messages recoverable."""
        notes = fallback_notes(plan.note)
        short = [summary_message(None, context, nudge=self.nudge, notice=self.short_notice,
                                 note=n) for n in notes[1:] or notes]
        if len(notes) > 2:  # ("[n dropped ...]", "[dropped: ctx_...]", "")
            short.insert(-1, summary_message(None, context, nudge=self.nudge, notice=notes[1]))
        return [*(self._summary_message(None, context, n) for n in notes), *short]

    def _truncate(
        self, m: Message, context: CompactionContext, *, keep_reasoning: bool = False
    ) -> Message:
        """``m`` cut head+tail with its handle; an assistant message loses its reasoning
        (spent once the reply was made), except the call of the loop still under way, whose
        signed reasoning a provider requires back (Anthropic's thinking blocks)."""
        text = truncate_head_tail(m.text, self.head_tail,
                                  handle=handle_text(handle_for(m), context),
                                  identifiers=cut_identifiers(m))
        others: tuple[ContentPart, ...] = ()
        if not isinstance(m.content, str):
            others = tuple(p for p in m.content if not isinstance(p, TextPart))
        content: str | tuple[ContentPart, ...] = (TextPart(text), *others) if others else text
        if m.role == "assistant" and not keep_reasoning:
            return replace(m, content=content, reasoning=None)
        return replace(m, content=content)

    def _reserve(self, context: CompactionContext) -> int:
        """Tokens the summary message will take, at its size hint (never less than the
        notice's)."""
        summary = self._wrapper_tokens(context) + self._summary_tokens(context)
        return max(summary, self._notice_tokens(context))

    def _wrapper_tokens(self, context: CompactionContext, *, short: bool = False) -> int:
        """Tokens of the summary message around the summary's text (``short``: with the
        short nudge and the dropped messages' handle alone)."""
        note = dropped_note("ctx_" + "0" * 12, 999, context)
        note, nudge = (fallback_notes(note)[1], self.short_nudge) if short else (note, self.nudge)
        return context.counter.count_message(Message(
            role="user", content=f"{SUMMARY_HEADER}\n\n{note}\n\n{nudge}", source="summary"))

    def _notice_tokens(self, context: CompactionContext) -> int:
        note = dropped_note("ctx_" + "0" * 12, 999, context)
        return context.counter.count_message(self._summary_message(None, context, note))

    def _request_tokens(self, plan: Plan, context: CompactionContext) -> int:
        """The summary's size hint: its reserved room, or what the plan left under the
        target when that is more (dropping whole groups overshoots), up to
        ``summary_max_tokens``; a rolling block's, the room its plan reserved."""
        hint = self._summary_tokens(context)
        if plan.stable:
            return max(1, min(hint, plan.reserve - self._wrapper_tokens(context)))
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
        context: CompactionContext, shown: str,
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
            # The summary with the nudge and the dropped note, else (tight budgets) with the
            # short nudge and the handle alone, whichever keeps more of the summary's lines:
            # a summary keeps more than any notice, and its lines more than the nudge's
            # words. Its DATA lines go least salient first.
            weight = _data_weight(plan.work, shown)
            texts = [reply.text]
            if not self._fits(reply.text, plan, kept, context, ceiling):
                # The requests it restates that stay in view after it pointed to instead,
                # taken when that keeps more of its DATA lines.
                pointed = point_to_view(reply.text, _requests_after(plan, kept, context))
                texts += [pointed] if pointed != reply.text else []
            best: tuple[tuple[int, int], str, str, str] | None = None
            forms = [(self.nudge, plan.note),
                     (self.short_nudge, fallback_notes(plan.note)[-2:][0])]
            system = context.measure([m for m in kept if m.role in SYSTEM_ROLES])
            if context.counter.count_text(self.nudge) > _NUDGE_SHARE * (ceiling - system):
                forms.reverse()
            for nudge, note in forms:
                def fits(text: str, nudge: str = nudge, note: str = note) -> bool:
                    message = summary_message(text, context, nudge=nudge, notice=self.notice,
                                              note=note)
                    return context.measure(plan.place(kept, message)) <= ceiling
                for full in texts:
                    text = fit_sections(full, fits, weight)
                    if text is None:
                        continue
                    lost = (data_lost(reply.text, text), removed_lines(text))
                    if best is None or lost < best[0]:
                        best = (lost, text, nudge, note)
                if best is not None and best[0] == (0, 0):
                    break
            if best is not None:
                _, text, nudge, note = best
                summary = summary_message(text, context, nudge=nudge, notice=self.notice,
                                          note=note)
                if text != reply.text or nudge != self.nudge:
                    notes.append("threshold: summary cut to fit the budget")
        if summary is None:  # the first notice that fits, the short one last
            for summary in self._notices(plan, context):
                if context.measure(plan.place(kept, summary)) <= limit:
                    break
        assert summary is not None
        out = plan.place(kept, summary)
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

    def _fits(self, text: str, plan: Plan, kept: list[Message], context: CompactionContext,
              ceiling: int) -> bool:
        """Whether the summary ``text``, with the nudge and the dropped note, fits."""
        message = summary_message(text, context, nudge=self.nudge, notice=self.notice,
                                  note=plan.note)
        return context.measure(plan.place(kept, message)) <= ceiling

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

    def _too_big(
        self, out: Sequence[Message], context: CompactionContext,
        kept: str = "the task prompt, the latest request and the newest group cut head+tail "
                    "to their labels",
    ) -> BudgetExceededError:
        return BudgetExceededError(
            f"threshold compaction: the system messages, {kept}, and the short compaction "
            f"notice ({len(out)} messages)",
            needed=context.measure(out),
            available=context.budget.input_budget,
        )


def _data_weight(messages: Sequence[Message], shown: str) -> Callable[[str], float]:
    """The salience of a summary's DATA line (its identifier's, the highest of its words'
    otherwise), scored over ``messages`` when first asked (most summaries fit uncut); a
    value ``shown`` (the text of the messages kept) holds anyway weighs least: it is in
    view without the line."""
    scores: dict[str, float] = {}
    in_shown = appears_in_text(shown)

    def weight(line: str) -> float:
        if not scores:
            scores.update(salience(messages))
            scores.setdefault("", 0.0)
        value = line.strip().removeprefix("- ").strip()
        if in_shown(value):
            return -100.0  # (below any salience)
        if value in scores:
            return scores[value]
        return max((scores.get(w.strip(".,;:()[]\"'"), 0.0) for w in value.split()),
                   default=0.0)
    return weight


_NUDGE_SHARE = 0.05
"""The most of the room beside the system messages the continuation nudge may take; past
it the short nudge goes first (a summary on a small room keeps its identifiers)."""


def _requests_after(plan: Plan, kept: list[Message], context: CompactionContext) -> list[str]:
    """The text of the user's messages that follow the summary where it goes."""
    marker = Message(role="user", content="", source="summary", created_at=context.now)
    out = plan.place(kept, marker)
    at = next(i for i, m in enumerate(out) if m is marker)
    return [m.text for m in out[at + 1:] if m.role == "user" and m.source is None]

