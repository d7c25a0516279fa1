"""Tiered residual compaction: important messages verbatim, older chatter shrinks.

When the input passes ``budget.trigger`` (or ``context.force``) the policy compacts it
towards ``budget.target``:

1. score every message 0-100 ([`score_importance`][contextfold.policy.score_importance]); messages
   at or above ``residual_threshold`` are *residuals* and bypass compression, at most
   ``residual_max_percent`` of the messages and ``residual_budget_share`` of the budget,
   the lowest-scoring demoted first. A residual keeps its whole atomic group (a tool result
   keeps its call and the call's other results); pinned messages are kept the same way,
   and so is the latest user request, which stays verbatim in place;
2. the other groups go to tiers by recency, sized by the budget
   (`contextfold._policies.tier_spans`): tier 0 holds the newest groups raw, as many as fit the
   allocation it gets once tiers 1-3 took what they need of the rest (at least the newest group; the
   design's last ``tier0_size`` messages when they fit, and more when the budget holds more); tier 1
   (70% of the detail) and tier 2 (40%) keep the design's widths in messages (up to
   ``tier1_size`` and ``tier2_size`` from the end) and start where tier 0 ends; the rest
   is tier 3 (15%). A group that straddles a boundary joins the more recent tier, so a
   call is never split from its results;
3. the budget is allocated (`allocate_budget`): fixed parts, safety margin, residuals,
   then tiers 70/20/7/3 with the unused budget of tiers 1-3 given to tier 0. A tier needs
   its header and its preserved share, and carries the summaries of earlier passes it
   holds whole (condensing them again by its preservation would shrink old history
   geometrically, pass after pass);
4. each non-empty tier is summarized with its own instructions (one request per tier,
   ``purpose`` ``"tier1"``..``"tier3"``, through the summary cache), oldest tier first:
   the room tiers 3 and 2 leave unused (a summary shorter than its allocation) goes to the
   most recent messages, tier 1's newest groups joining tier 0 raw before tier 1 is
   summarized (all of them when that costs no more than its summary's room); a summary
   larger than its allocation, or a failed one, is shrunk by keyword-preserving
   truncation, no LLM;
5. the output keeps the original order: system messages, then each tier's summary (a user
   message, ``source="summary"``) where the tier's first message was, residuals in place,
   tier 0 raw at the end.

Budget the plan leaves under the target (the next group is too big for what tier 0 has
left) goes to the tier summaries, most recent tier first, each up to what it needs.

When even that does not fit the input budget, residual groups are demoted (lowest score
first) into their tiers; then one tier holds every group but the newest and the latest
request (one header, its summary sized to what the budget leaves); then the newest group is
cut head+tail (its tool calls kept) to the largest common size that fits.
[`BudgetExceededError`][contextfold.BudgetExceededError] is raised only when the system messages,
pinned messages, the latest request, the newest group cut to its labels and one tier header do
not fit (the engine then sends the system prompt and the latest request, when those fit);
a request that does not fit beside the system prompt at all joins the tier.
"""

from __future__ import annotations

import math
import os
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Annotated, Any

from .._config import Ge, Le, check_fields, config_error
from .._contract.policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    SummaryRequest,
    Target,
)
from .._head_tail import HeadTail
from .._identifiers.values import scanned_text
from .._lossless.ledger import Ledger, run_with_ledger
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message
from .._messages.prompt_kinds import find_prompt, open_request
from .._messages.structure import leading_system_count, split_groups
from ..errors import BudgetExceededError, ConfigurationError
from .budget_allocation import DEFAULT_TIER_SHARES, allocate_budget
from .fitting import shrink_message
from .importance import (
    DEFAULT_WEIGHTS,
    ImportanceWeights,
    estimated_chars,
    id_tokens,
    score_messages,
)
from .learning import apply_learning, learned_in
from .salience import cut_identifiers
from .tier_ledger import ledger_aim
from .tier_plan import (
    FixedParts,
    TierPlan,
    cut_newest,
    cut_targets,
    fit_lines,
    header_message,
    tier_details,
    tier_targets,
)
from .tier_spans import Recency, TierSizes

__all__ = ["ENV_PREFIX", "TIER_INSTRUCTIONS", "TieredPolicy"]

ENV_PREFIX = "PROMPT_COMPACTION_"
"""The tiered design's prefix of every variable."""

_EXACT = "Copy identifiers, reference numbers, names and amounts exactly as written."

TIER_INSTRUCTIONS = (
    "Summarize these messages, keeping about 70% of their detail. Preserve:\n"
    "- participants and their roles\n- actions taken and their outcomes\n"
    "- important decisions or conclusions\n- key technical details or data\n" + _EXACT,
    "Summarize these messages, keeping about 40% of their detail. Preserve:\n"
    "- main topics discussed\n- important decisions made\n"
    "- unresolved items or open questions\n- critical context for future reference\n" + _EXACT,
    "Summarize these messages briefly, keeping about 15% of their detail. Answer:\n"
    "- What was this conversation about?\n- What was concluded or decided?\n"
    "- Any critical outcomes?\n" + _EXACT,
)
"""The tiered design's summarization strategy of tiers 1, 2 and 3."""


@dataclass(frozen=True)
class TieredPolicy:
    """The tiered design's importance-aware tiered compaction.

    Args:
        residual_threshold: score at which a message is a residual (the tiered design: 60).
        residual_max_percent: most messages that may be residuals, as a share (0.20).
        residuals_enabled: extract residuals at all.
        tier0_size: recent messages kept raw at least, when they fit tier 0's allocation
            (10); tier 0 holds more when its allocation does.
        tier1_size: messages from the end up to which tier 1 reaches (25), counted from
            where tier 0 ends when tier 0 holds more than ``tier0_size``.
        tier2_size: the same for tier 2 (50); older is tier 3.
        preservation: share of detail kept by tiers 1-3 (0.70, 0.40, 0.15).
        budget_allocation: allocate the budget between residuals and tiers;
            when off, summaries are sized by ``preservation`` alone and only the input
            budget is enforced.
        tier_shares: the split of the conversation budget between tiers 0-3 (70/20/7/3).
        residual_budget_share: the residuals' cap as a share of the budget (0.20).
        safety_margin: tokens left free in the allocation (100).
        current_message_reserve: tokens reserved for the next message (50).
        weights: the importance factors' points.
        keywords: words the no-LLM truncation must try to keep (identifiers of the tier
            are always added).
        instructions: the summary prompts of tiers 1-3.
        ledger: the compaction ledger's settings; ``None`` keeps no ledger.

    Raises:
        ConfigurationError: a value is out of range.
    """

    residual_threshold: Annotated[int, Ge(0)] = 60
    residual_max_percent: Annotated[float, Ge(0), Le(1)] = 0.20
    residuals_enabled: bool = True
    tier0_size: Annotated[int, Ge(0)] = 10
    tier1_size: Annotated[int, Ge(0)] = 25
    tier2_size: Annotated[int, Ge(0)] = 50
    preservation: tuple[float, float, float] = (0.70, 0.40, 0.15)
    budget_allocation: bool = True
    tier_shares: tuple[float, float, float, float] = DEFAULT_TIER_SHARES
    residual_budget_share: Annotated[float, Ge(0), Le(1)] = 0.20
    safety_margin: Annotated[int, Ge(0)] = 100
    current_message_reserve: Annotated[int, Ge(0)] = 50
    weights: ImportanceWeights = DEFAULT_WEIGHTS
    keywords: tuple[str, ...] = ()
    instructions: tuple[str, str, str] = TIER_INSTRUCTIONS
    ledger: Ledger | None = field(default_factory=Ledger)
    name = "tiered"
    always_run = False

    def __post_init__(self) -> None:
        check_fields(self)
        sizes = (self.tier0_size, self.tier1_size, self.tier2_size)
        if not self.tier0_size <= self.tier1_size <= self.tier2_size:
            raise config_error("TieredPolicy", "tier0_size, tier1_size, tier2_size",
                               "ordered: tier0_size <= tier1_size <= tier2_size", sizes)
        if len(self.preservation) != 3 or any(not 0 < p <= 1 for p in self.preservation):
            raise config_error("TieredPolicy", "preservation", "3 values in (0, 1]",
                               self.preservation)
        if len(self.instructions) != 3 or not all(str(i).strip() for i in self.instructions):
            raise config_error("TieredPolicy", "instructions",
                               "3 non-blank prompts (tiers 1-3)", self.instructions)
        allocate_budget(0, fixed={}, residual_tokens=0, tier_shares=self.tier_shares,
                        residual_share=self.residual_budget_share)  # validates the shares
        object.__setattr__(self, "keywords", tuple(self.keywords))

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> TieredPolicy:
        """A policy configured from the tiered design's environment variables, then ``overrides``.

        ``PROMPT_COMPACTION_RESIDUALS_ENABLED``, ``..._RESIDUAL_THRESHOLD``,
        ``..._RESIDUAL_MAX_PERCENT``, ``..._TIERED_ENABLED`` (false: every message older than
        tier 0 goes to one tier-1 summary), ``..._BUDGET_ENABLED``, and our
        ``..._TIER0_SIZE``, ``..._TIER1_SIZE``, ``..._TIER2_SIZE``. Unset variables keep
        the defaults (the tiered design reads an unset flag as false; here it means "default").

        Raises:
            ConfigurationError: a variable holds a value that does not parse or is out of
                range (the message names the variable).
        """
        kwargs = env_kwargs(os.environ if environ is None else environ)
        kwargs.update(overrides)
        return cls(**kwargs)

    # -- the policy ------------------------------------------------------------------

    def run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        """Compact when the input passes the trigger (or ``context.force``), recording what
        was cut, dropped or summarized in the compaction ledger (unless ``ledger`` is
        ``None``)."""
        if self.ledger is None:
            return (yield from self._run(messages, context))
        ledger = self.ledger

        def aimed(rest: Sequence[Message], inner: CompactionContext) -> PolicyRun:
            # The wrapper lowers the target by a line per removed message; this pass writes
            # a line per tier, so it aims lower only by what its ledger takes (tier_ledger).
            return (yield from self._run(rest, ledger_aim(rest, context, inner, ledger)))

        return (yield from run_with_ledger(aimed, messages, context, ledger,
                                          reserve=False))  # its target leaves the room

    def _run(self, messages: Sequence[Message], context: CompactionContext) -> PolicyRun:
        if not context.force and context.input_tokens(messages) <= context.budget.trigger_tokens:
            return PolicyOutcome(messages=messages)
        plan = self._plan(messages, context)
        _fold_bare_tiers(plan)
        if not plan.tier_of or all(t == 0 for t in plan.tier_of.values()):
            return self._unchanged(messages, plan, context)
        summaries: dict[int, Message] = {}
        for tier in (3, 2, 1):  # oldest first: what they leave unused widens tier 0
            if tier == 1:
                self._widen_tier0(plan, summaries, context)
            message = yield from self._summarized(tier, messages, plan, context)
            if message is None:
                continue
            summaries[tier] = message
            if tier == 1 and self._regrow_tier0(plan, message, context):
                # The summary came back well under its room: tier 1's newest groups went
                # raw into that room, and the rest is summarized again (once), so the
                # output fills its target instead of leaving the room unused.
                again = yield from self._summarized(1, messages, plan, context)
                if again is None:
                    del summaries[1]
                else:
                    summaries[1] = again
        return self._finish(messages, plan, summaries, context)

    def _summarized(
        self, tier: int, messages: Sequence[Message], plan: TierPlan, context: CompactionContext,
    ) -> Generator[SummaryRequest, Any, Message | None]:
        """Tier ``tier``'s summary message (``None`` when the tier holds nothing)."""
        members = plan.members(tier)
        if not members:
            return None
        latest = find_prompt(messages, plan.lead)  # the task of every tier's summary
        originals = tuple(m for g in members for m in plan.groups[g].messages)
        task = (messages[latest].text
                if latest is not None and latest >= plan.groups[members[-1]].end else None)
        reply = yield SummaryRequest(
            messages=originals, instructions=self.instructions[tier - 1],
            max_tokens=max(1, plan.rooms[tier] - plan.headers[tier]), purpose=f"tier{tier}",
            open_request=open_request(messages),
            latest_request=task,
            shown="\n".join(scanned_text(m) for m in _raw(messages, plan)),
        )
        return self._tier_message(tier, originals, reply.text, plan, context)

    def _regrow_tier0(self, plan: TierPlan, summary: Message, context: CompactionContext
                      ) -> bool:
        """Tier 1's newest groups join tier 0 raw while they fit in the room its summary
        left unused; its room shrinks by what they take. True when any moved."""
        unused = plan.rooms[1] - context.counter.count_message(summary)
        members = plan.members(1)
        moved = 0
        while members:
            size = self._group_tokens(plan, members[-1], context)
            if moved + size > unused:
                break
            plan.tier_of[members.pop()] = 0
            moved += size
        if members and unused - moved >= _MIN_CUT_ROOM:
            # The next group alone is larger than the room left (a long tool result): it
            # joins tier 0 with its results cut head+tail to that room, its lines naming
            # identifiers kept, rather than the room staying empty.
            cut = _cut_group(plan.groups[members[-1]].messages, unused - moved, context)
            if cut is not None:
                plan.cut_groups[members[-1]] = cut
                plan.tier_of[members.pop()] = 0
                moved += sum(map(context.counter.count_message, cut))
        plan.rooms[1] -= moved
        return moved > 0

    # -- planning --------------------------------------------------------------------

    def _plan(self, messages: Sequence[Message], context: CompactionContext) -> TierPlan:
        estimate = context.measure(messages)
        offset = max(0, (context.known_tokens or 0) - estimate)
        if context.force:
            offset = max(offset, context.budget.input_budget + 1 - estimate)
        lead = leading_system_count(messages)
        plan = TierPlan(
            groups=split_groups(messages, lead),
            scores=apply_learning(  # content like what was read back scores higher
                score_messages(messages, now=context.now, threshold=self.residual_threshold,
                               weights=self.weights),
                messages, learned_in(context.state), self.residual_threshold),
            lead=lead, offset=offset, target=context.budget.target_tokens,
        )
        plan.pinned = {g for g, grp in enumerate(plan.groups)
                       if any(m.is_pinned for m in grp.messages)}
        latest = find_prompt(messages, lead)
        plan.latest = next((g for g, grp in enumerate(plan.groups) if latest is not None
                            and grp.start <= latest < grp.end and g not in plan.pinned), None)
        self._pick_residuals(plan, messages, context)
        while True:
            self._assign_tiers(plan, context, messages)
            if plan.latest is not None and plan.tier_of.get(plan.latest, 0) != 0:
                # The latest request fell out of tier 0: it stays verbatim in place instead.
                plan.request = {plan.latest}
                self._assign_tiers(plan, context, messages)
            planned = self._plan_tokens(plan, messages, context)
            if planned <= context.budget.input_budget:
                self._share_slack(plan, context.budget.target_tokens - planned)
                return plan
            if not plan.kept:
                if planned - plan.offset <= context.budget.input_budget:
                    return plan  # only the calibrated size is over: the best that can be done
                return self._last_resort(plan, messages, context)
            plan.kept.discard(min(plan.kept, key=lambda g: (self._group_score(plan, g), g)))

    def _share_slack(self, plan: TierPlan, slack: int) -> None:
        """Budget left under the target once tier 0 took the groups that fit goes to the
        tier summaries, most recent tier first, each up to what it needs."""
        for t in (1, 2, 3):
            if slack <= 0:
                return
            more = min(slack, max(0, plan.needs.get(t, 0) - plan.rooms.get(t, 0)))
            if t in set(plan.tier_of.values()) and more > 0:
                plan.rooms[t] += more
                slack -= more

    def _last_resort(
        self, plan: TierPlan, messages: Sequence[Message], context: CompactionContext
    ) -> TierPlan:
        """Every residual demoted and still too big: one tier (one header) holds every group
        but the newest and the latest request, its summary gets what the budget leaves, and
        the newest group is cut head+tail when that is still needed. Raises when not even
        that fits (the engine then sends the system prompt and the latest request); a
        request that does not fit beside the system prompt at all joins the tier."""
        newest = len(plan.groups) - 1
        if plan.latest is not None and plan.latest != newest and plan.latest in plan.tier_of:
            del plan.tier_of[plan.latest]
            plan.request = {plan.latest}
        request = [m for g in plan.request for m in plan.groups[g].messages]
        if context.measure([*messages[: plan.lead], *request]) > context.budget.input_budget:
            plan.tier_of.update(dict.fromkeys(plan.request, 1))
            plan.request.clear()
        for g in plan.tier_of:
            plan.tier_of[g] = 0 if g == newest else 1
        members = [m for g in plan.members(1) for m in plan.groups[g].messages]
        exact = header_message(1, len(members), ref=handle_text(handle_for(members), context))
        plan.rooms[1] = plan.needs[1] = plan.headers[1] = context.counter.count_message(exact)
        planned = self._plan_tokens(plan, messages, context)
        limit = context.budget.input_budget
        if planned <= limit:
            plan.needs[1] = plan.headers[1] + limit  # no preservation cap: what is left
            self._share_slack(plan, min(context.budget.target_tokens, limit) - planned)
            return plan
        if self._newest_cut_fits(plan, messages, context):
            plan.cut_newest = True
            return plan
        raise self._too_big(plan, messages, context)

    def _newest_cut_fits(
        self, plan: TierPlan, messages: Sequence[Message], context: CompactionContext
    ) -> bool:
        """True when the plan fits with the newest group's messages cut to their labels."""
        newest = plan.groups[-1].messages if plan.groups else ()
        last = len(plan.groups) - 1
        if not newest or (plan.tier_of.get(last, -1) != 0 and last not in plan.request):
            return False
        floor = [shrink_message(m, HeadTail(), max_chars=0) for m in newest]
        saved = context.counter.count_messages(newest) - context.counter.count_messages(floor)
        planned = self._plan_tokens(plan, messages, context) - plan.offset
        return planned - saved <= context.budget.input_budget

    def _group_score(self, plan: TierPlan, g: int) -> int:
        group = plan.groups[g]
        return max(plan.scores[i].score for i in range(group.start, group.end))

    def _group_tokens(self, plan: TierPlan, g: int, context: CompactionContext) -> int:
        return sum(map(context.counter.count_message, plan.groups[g].messages))

    def _pick_residuals(
        self, plan: TierPlan, messages: Sequence[Message], context: CompactionContext
    ) -> None:
        """Residual groups by score, within the message cap and the token cap."""
        if not self.residuals_enabled:
            return
        group_of = {i: g for g, grp in enumerate(plan.groups) for i in range(grp.start, grp.end)}
        candidates = [i for i in group_of if plan.scores[i].is_residual]
        candidates.sort(key=lambda i: (-plan.scores[i].score, -i))  # ties: newer first
        max_messages = math.ceil((len(messages) - plan.lead) * self.residual_max_percent)
        max_tokens = (
            int(context.budget.target_tokens * self.residual_budget_share)
            if self.budget_allocation else math.inf
        )
        used_messages = used_tokens = 0
        for i in candidates:
            g = group_of[i]
            if g in plan.kept or g in plan.pinned or g in plan.request:
                continue
            size, tokens = len(plan.groups[g]), self._group_tokens(plan, g, context)
            if used_messages + size <= max_messages and used_tokens + tokens <= max_tokens:
                plan.kept.add(g)
                used_messages += size
                used_tokens += tokens

    def _assign_tiers(
        self, plan: TierPlan, context: CompactionContext, messages: Sequence[Message]
    ) -> None:
        """Tiers by recency among the groups not kept (`contextfold._policies.tier_spans`): tier 0
        holds the newest groups that fit the allocation it gets once tiers 1-3 took what they
        need of the rest, at least the newest group."""
        free = [g for g in range(len(plan.groups) - 1, -1, -1)
                if g not in plan.kept and g not in plan.pinned and g not in plan.request]
        count = context.counter.count_message
        recency = Recency.of(
            free, [len(plan.groups[g]) for g in free],
            [self._group_tokens(plan, g, context) for g in free],
            [sum(count(m) for m in plan.groups[g].messages if m.source == "summary")
             for g in free],
            (self.tier0_size, self.tier1_size, self.tier2_size))
        newest_kept = bool(plan.groups) and (not free or free[0] != len(plan.groups) - 1)
        least = 0 if newest_kept or not free else 1
        fixed = self._fixed_parts(plan, context, messages)
        listed = list(accumulate((_listed_tokens(plan.groups[g].messages) for g in free),
                                 initial=0))

        def ids(extent: int) -> dict[int, int]:
            """What a list of each tier's identifiers takes (about)."""
            cuts = (0, extent, *recency.ends(extent), len(free))
            return {t: listed[cuts[t + 1]] - listed[cuts[t]] for t in (1, 2, 3)}

        def fits(extent: int) -> bool:
            sizes = recency.sizes(extent)
            self._allocate(plan, sizes, fixed, ids(extent))
            if plan.allocation is not None:
                return sizes.tokens[0] <= plan.allocation.tiers[0]
            if extent <= recency.by_count:  # the design's tier 0: the input budget binds
                plan.tier_of = recency.tier_of(extent)
                return self._plan_tokens(plan, messages, context) <= context.budget.input_budget
            summaries = sum(plan.rooms[t] for t in (1, 2, 3) if sizes.groups[t])
            return (sum(fixed.parts.values()) - self.current_message_reserve + fixed.residuals
                    + sizes.tokens[0] + summaries <= context.budget.target_tokens)

        extent = max(least, recency.by_count)
        if fits(extent):
            while extent < len(recency) and fits(extent + 1):
                extent += 1
        else:  # the design's tier 0 is over its allocation: its oldest groups join tier 1
            while extent > least:
                extent -= 1
                if fits(extent):
                    break
        plan.tier_of = recency.tier_of(extent)
        self._allocate(plan, recency.sizes(extent), fixed, ids(extent))

    def _fixed_parts(
        self, plan: TierPlan, context: CompactionContext, messages: Sequence[Message]
    ) -> FixedParts:
        """What the allocation takes before the tiers, and the largest tier header."""
        # The header at its largest: a real handle's 12 hex digits may take a token each,
        # where the zeros used to measure it take fewer.
        zeros = "0" * 12
        header = context.counter.count_message(
            header_message(1, 10**6, ref=handle_text("ctx_" + zeros, context))
        ) + 12 - context.counter.count_text(zeros)
        return FixedParts(
            parts={
                "system_prompt": context.counter.count_messages(messages[: plan.lead]),
                "tools": context.fixed_tokens,
                "calibration": plan.offset,
                # the design's measured task prompt: the latest request, kept verbatim
                "task_prompt": sum(self._group_tokens(plan, g, context) for g in plan.request),
                "current_message": self.current_message_reserve,
            },
            residuals=sum(self._group_tokens(plan, g, context) for g in plan.kept | plan.pinned),
            header=header,
        )

    def _allocate(self, plan: TierPlan, sizes: TierSizes, fixed: FixedParts,
                  ids: Mapping[int, int] | None = None) -> None:
        """The allocation for tiers of ``sizes``: each tier 1-3 needs its header, its
        preserved share and the earlier summaries it carries, capped by its share of the
        budget; and room for the list of its identifiers (``ids``), taken from tier 0, up to
        an eighth of the target for all tiers together."""
        needs = []
        for t in (1, 2, 3):
            plan.headers[t] = fixed.header
            fresh = sizes.tokens[t] - sizes.carried[t]
            need = plan.headers[t] + math.ceil(self.preservation[t - 1] * fresh)
            needs.append(need + sizes.carried[t] if sizes.groups[t] else 0)
            plan.needs[t] = needs[-1]
        allocation = allocate_budget(
            plan.target, fixed=fixed.parts, residual_tokens=fixed.residuals, tier_needs=needs,
            safety_margin=self.safety_margin, residual_share=self.residual_budget_share,
            tier_shares=self.tier_shares,
        )
        plan.allocation = allocation if self.budget_allocation else None
        for t in (1, 2, 3):
            room = allocation.tiers[t] if self.budget_allocation else needs[t - 1]
            plan.rooms[t] = max(room, plan.headers[t])
        if ids is not None and plan.allocation is not None:
            self._room_for_identifiers(plan, sizes, ids)

    def _room_for_identifiers(self, plan: TierPlan, sizes: TierSizes, ids: Mapping[int, int]
                              ) -> None:
        """Each tier's room grows to hold the list of its identifiers (within what it
        needs), taken from tier 0's allocation: a summary's data list keeps a reference
        code in a few tokens where a raw message spends a hundred per code. All tiers
        together take at most an eighth of the target this way (the compaction ledger
        holds identifiers of what was compacted too)."""
        allocation = plan.allocation
        assert allocation is not None
        cap = plan.target // 8
        tiers = list(allocation.tiers)
        for t in (1, 2, 3):
            if not sizes.groups[t] or cap <= 0:
                continue
            want = min(plan.headers[t] + ids[t], plan.needs[t])
            more = min(max(0, want - plan.rooms[t]), cap, tiers[0])
            plan.rooms[t] += more
            tiers[t] += more
            tiers[0] -= more
            cap -= more
        if tiers != list(allocation.tiers):
            plan.allocation = replace(allocation, tiers=(tiers[0], tiers[1], tiers[2], tiers[3]))

    def _plan_tokens(
        self, plan: TierPlan, messages: Sequence[Message], context: CompactionContext
    ) -> int:
        """Tokens of the output at the planned summary sizes, calibration included."""
        kept = list(messages[: plan.lead])
        for g, grp in enumerate(plan.groups):
            if plan.tier_of.get(g, 0) == 0:
                kept.extend(grp.messages)
        summaries = sum(plan.rooms[t] for t in {t for t in plan.tier_of.values() if t})
        return context.measure(kept) + summaries + plan.offset

    # -- summaries and output --------------------------------------------------------

    def _widen_tier0(
        self, plan: TierPlan, summaries: dict[int, Message], context: CompactionContext
    ) -> None:
        """The room tiers 2 and 3 planned for and their summaries left unused goes to the
        most recent messages: tier 1's newest groups join tier 0 while they fit in it
        (before tier 1 is summarized, so nothing is both summarized and kept)."""
        unused = sum(plan.rooms[t] - context.counter.count_message(m)
                     for t, m in summaries.items())
        members = plan.members(1)
        sizes = [self._group_tokens(plan, g, context) for g in members]
        if members and sum(sizes) <= unused + plan.rooms[1]:  # raw costs no more than a summary
            plan.tier_of.update(dict.fromkeys(members, 0))
            return
        while members and sizes[-1] <= unused:
            plan.tier_of[members.pop()] = 0
            unused -= sizes.pop()

    def _tier_message(
        self, tier: int, originals: tuple[Message, ...], text: str | None, plan: TierPlan,
        context: CompactionContext,
    ) -> Message:
        """The tier's summary message, shrunk to its room by keyword-preserving truncation
        that keeps its lines and sections (also the whole summary when ``text`` is
        ``None``: the summarizer failed)."""
        keywords = set(self.keywords)
        ref = handle_text(handle_for(originals), context)
        for m in originals:
            keywords |= id_tokens(m)
        if text is None:
            text = "\n".join(f"{m.role}{f' ({m.name})' if m.name else ''}: {m.text}"
                             for m in originals if m.text)
        room = plan.rooms[tier]
        for _ in range(8):
            message = header_message(tier, len(originals), text.strip(), ref)
            size = context.counter.count_message(message)
            if size <= room or not text:
                break
            target = estimated_chars(text, room - plan.headers[tier],
                                     context.counter.count_text(text))
            text = fit_lines(text, min(len(text) - 1, int(target * 0.95)), keywords)
        else:
            message = header_message(tier, len(originals), ref=ref)
        if context.counter.count_message(message) > room:
            message = header_message(tier, len(originals), ref=ref)
        return message

    def _finish(
        self, messages: Sequence[Message], plan: TierPlan, summaries: dict[int, Message],
        context: CompactionContext,
    ) -> PolicyOutcome:
        out = list(messages[: plan.lead])
        placed: set[int] = set()
        for g, grp in enumerate(plan.groups):
            tier = plan.tier_of.get(g, 0)
            if tier == 0:
                out.extend(plan.cut_groups.get(g, grp.messages))
            elif tier not in placed:
                placed.add(tier)
                out.append(summaries[tier])
        cut_groups = dict(plan.cut_groups)
        if context.measure(out) > context.budget.input_budget:
            if not cut_newest(out, plan, context):
                raise self._too_big(plan, messages, context)
            # The newest group's cut copies are reported like every other cut: the driver
            # keeps the originals their labels name.
            newest = len(plan.groups) - 1
            cut_groups[newest] = tuple(out[len(out) - len(plan.groups[newest].messages):])
        cut = tuple(
            Target(index=i, role=old.role, method="truncated",
                   original_tokens=context.counter.count_message(old),
                   new_tokens=context.counter.count_message(new),
                   tool_name=old.name if old.role == "tool" else None, handle=handle_for(old))
            for g, group in sorted(cut_groups.items())
            for i, old, new in zip(range(plan.groups[g].start, plan.groups[g].end),
                                   plan.groups[g].messages, group, strict=True)
            if new is not old)
        return PolicyOutcome(
            messages=out, method=self.name,
            targets=tuple(sorted((*tier_targets(plan, context), *cut), key=lambda t: t.index)),
            details=tier_details(messages, out, plan, context),
        )

    def _unchanged(
        self, messages: Sequence[Message], plan: TierPlan, context: CompactionContext
    ) -> PolicyOutcome:
        """Nothing to summarize: the input, or, when it does not fit (one group too big),
        its newest group cut head+tail."""
        if context.measure(messages) <= context.budget.input_budget:
            return PolicyOutcome(
                messages=messages, notes=("tiered: everything is recent or residual",),
                details=tier_details(messages, messages, plan, context),
            )
        out = list(messages)
        if not cut_newest(out, plan, context):
            raise self._too_big(plan, messages, context)
        return PolicyOutcome(
            messages=out, method=self.name, targets=cut_targets(messages, out, context),
            notes=("tiered: the newest group alone does not fit; cut head+tail",),
            details=tier_details(messages, out, plan, context),
        )

    def _too_big(
        self, plan: TierPlan, messages: Sequence[Message], context: CompactionContext
    ) -> BudgetExceededError:
        return BudgetExceededError(
            "tiered compaction: the system messages, pinned messages, the newest group and "
            "the tier summary headers",
            needed=self._plan_tokens(plan, messages, context) - plan.offset,
            available=context.budget.input_budget,
        )

_MIN_BODY = 32
"""The least room (tokens) past its header worth a tier summary of its own: less holds a
line or none, and the header alone costs about as much."""


def _raw(messages: Sequence[Message], plan: TierPlan) -> list[Message]:
    """The messages the plan keeps as they are (or cut): the system messages, the
    residuals and tier 0."""
    out = list(messages[: plan.lead])
    for g, group in enumerate(plan.groups):
        if plan.tier_of.get(g, 0) == 0:
            out.extend(plan.cut_groups.get(g, group.messages))
    return out


def _fold_bare_tiers(plan: TierPlan) -> None:
    """An older tier whose room holds little beyond its header joins the next more recent
    tier, its room too: one header instead of two, the room it frees going to the summary
    (or, when that comes back short, to the ledger)."""
    for t in (3, 2):
        members, newer = plan.members(t), plan.members(t - 1)
        if not members or not newer or plan.rooms[t] - plan.headers[t] >= _MIN_BODY:
            continue
        plan.tier_of.update(dict.fromkeys(members, t - 1))
        plan.rooms[t - 1] += plan.rooms.pop(t)
        plan.needs[t - 1] = plan.needs.get(t - 1, 0) + plan.needs.pop(t, 0)


_MIN_CUT_ROOM = 200
"""The least room (tokens) worth filling with a cut group: less holds little beyond the
labels."""


def _cut_group(
    group: Sequence[Message], room: int, context: CompactionContext,
) -> tuple[Message, ...] | None:
    """``group`` with its tool results cut head+tail to the largest common size that keeps
    it within ``room`` tokens, each label naming its original's handle; ``None`` when not
    even the labels fit or there is nothing to cut."""
    count = context.counter.count_message
    spots = [k for k, m in enumerate(group) if m.role == "tool" and not m.is_pinned]
    if not spots:
        return None
    refs = {k: handle_text(handle_for(group[k]), context) for k in spots}

    def build(cap: int) -> tuple[Message, ...]:
        return tuple(shrink_message(m, HeadTail(), max_chars=cap, handle=refs[k])
                     if k in refs else m for k, m in enumerate(group))

    if sum(map(count, build(0))) > room:
        return None
    lo, hi = 0, max(sum(HeadTail().sizes(len(group[k].text))) for k in spots)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(map(count, build(mid))) <= room:
            lo = mid
        else:
            hi = mid - 1
    return build(lo)


def _listed_tokens(group: Sequence[Message]) -> int:
    """About what a summary's data list of ``group``'s identifiers takes: a token per three
    characters of each, and two for its line."""
    return sum(len(v) // 3 + 2 for v in {v for m in group for v in cut_identifiers(m)})


# -- configuration from the environment ------------------------------------------------

def env_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """``TieredPolicy`` keyword arguments from ``env`` (see ``TieredPolicy.from_env``).

    Raises:
        ConfigurationError: a variable does not parse; the message names it.
    """
    kwargs: dict[str, Any] = {}
    parsers: tuple[tuple[str, str, Any], ...] = (
        ("RESIDUALS_ENABLED", "residuals_enabled", _parse_bool),
        ("RESIDUAL_THRESHOLD", "residual_threshold", int),
        ("RESIDUAL_MAX_PERCENT", "residual_max_percent", float),
        ("BUDGET_ENABLED", "budget_allocation", _parse_bool),
        ("TIER0_SIZE", "tier0_size", int),
        ("TIER1_SIZE", "tier1_size", int),
        ("TIER2_SIZE", "tier2_size", int),
        ("TIERED_ENABLED", "tiered", _parse_bool),
    )
    for suffix, attr, parse in parsers:
        raw = env.get(ENV_PREFIX + suffix)
        if raw is None or not raw.strip():
            continue
        try:
            kwargs[attr] = parse(raw.strip())
        except ValueError as exc:
            raise ConfigurationError(f"{ENV_PREFIX}{suffix}={raw!r}: {exc}") from None
    if kwargs.pop("tiered", True) is False:
        kwargs["tier1_size"] = kwargs["tier2_size"] = 2**62
    return kwargs

def _parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")
