"""TieredPolicy: scoring, residuals, tiers, budget allocation, env configuration."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.references import handle_for, handle_text
from contextfold._messages.structure import leading_system_count
from contextfold._policies.budget_allocation import allocate_budget
from contextfold._policies.fitting import shrink_message
from contextfold._policies.importance import keyword_truncate
from contextfold._policies.tier_spans import Recency
from contextfold._policies.tiered import TIER_INSTRUCTIONS
from contextfold._summaries.sections import IN_VIEW_TASK
from contextfold.errors import ConfigurationError
from contextfold.policy import (
    CompactionContext,
    HeadTail,
    ImportanceScore,
    Policy,
    PolicyOutcome,
    SummaryRequest,
    score_importance,
    split_groups,
)
from contextfold.testing import (
    ScriptedSummarizer,
    assert_valid_within,
    generate_chat,
    histories,
    run_policy,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def chatter(n: int, size: int = 400) -> list[cf.Message]:
    """``n`` alternating user/assistant messages with no scoring factor at all."""
    body = ("plain words here again " * (size // 23 + 1))[:size]
    return [cf.Message(role="user" if k % 2 == 0 else "assistant", content=f"{body} {'x' * k}")
            for k in range(n)]


def context_for(
    counter: cf.TokenCounter, window: int, *, force: bool = False
) -> CompactionContext:
    return CompactionContext(budget=cf.Budget(context_window=window), counter=counter,
                                force=force, now=NOW)


def drive(
    policy: Policy, messages: Sequence[cf.Message], context: CompactionContext,
    answer: str | None = "short summary",
) -> tuple[PolicyOutcome, list[SummaryRequest]]:
    return run_policy(policy, messages, context, reply=answer)


# -- importance scoring --------------------------------------------------------------


def test_seed_examples_score_as_documented() -> None:
    decision = cf.Message(
        role="assistant", content="We decided to implement authentication using OAuth 2.0.",
        metadata={"importance": "high"}, created_at=NOW - timedelta(seconds=30),
    )
    score = score_importance(decision, now=NOW)
    # the tiered design: 50 + 40 + 15 = 105 (its example says 110 with +20 for recency), capped at
    # 100
    assert score.score == 100 and score.is_residual
    assert score.factors == ("decision_language", "explicit_high_importance", "very_recent")
    hello = cf.Message(role="user", content="Hello, how are you?",
                       created_at=NOW - timedelta(hours=2))
    assert score_importance(hello, now=NOW) == ImportanceScore(0, (), False)


@pytest.mark.parametrize(
    ("message", "factor", "points"),
    [
        (cf.Message(role="tool", tool_call_id="c", content="ok", metadata={"is_error": True}),
         "tool_error", 40),
        (cf.Message(role="tool", tool_call_id="c", content="Error: the tool failed"),
         "tool_error", 40),
        (cf.Message(role="tool", tool_call_id="c", content="42 rows"), "tool_success", 30),
        (cf.Message(role="user", content="hi", metadata={"importance": "medium"}),
         "explicit_medium_importance", 20),
        (cf.Message(role="user", content="Your objective: ship it"), "task_related", 20),
        (cf.Message(role="user", content="hi", created_at=NOW - timedelta(minutes=20)),
         "recent", 5),
    ],
)
def test_each_factor_adds_its_weight(message: cf.Message, factor: str, points: int) -> None:
    score = score_importance(message, now=NOW)
    assert score.factors == (factor,) and score.score == points


def test_references_count_later_mentions_of_identifiers() -> None:
    result = cf.Message(role="tool", tool_call_id="c", content="Reservation 8JX2Q1 is booked")
    later = [cf.Message(role="assistant", tool_calls=(
                 cf.ToolCall("d", "cancel", '{"reservation_id": "8JX2Q1"}'),)),
             cf.Message(role="tool", tool_call_id="d", content="cancelled 8JX2Q1")]
    once = score_importance(result, [result, later[0]])
    twice = score_importance(result, [result, *later])
    assert "referenced" not in once.factors
    assert "referenced" in twice.factors and twice.score == 30 + 20


def test_keyword_truncation_keeps_keyword_sentences_in_order() -> None:
    text = ("The weather was fine. Order KT-9284 shipped today. We had lunch. "
            "It is important to note the refund. Nothing else happened at all today.")
    short = keyword_truncate(text, 70, ["KT-9284"])
    assert short == "Order KT-9284 shipped today. It is important to note the refund."
    assert len(short) <= 70
    assert keyword_truncate("x" * 50, 10) == "x" * 7 + "..."
    assert keyword_truncate(text, 1_000) == text


# -- budget allocation ---------------------------------------------------------------


def test_seed_budget_example_is_reproduced() -> None:
    fixed = {"systemPrompt": 500, "agentIdentity": 200, "taskPrompt": 150, "actions": 100,
             "systemLLM": 50, "currentMessage": 50}
    allocation = allocate_budget(4_000, fixed=fixed, residual_tokens=400)
    assert allocation.residuals == 400
    assert allocation.tiers == (1715, 490, 171, 73)
    assert allocation.remaining == 101
    assert round(allocation.utilization_percent, 1) == 97.5


def test_residuals_are_capped_and_unused_tier_budget_goes_to_tier0() -> None:
    allocation = allocate_budget(10_000, fixed={"system": 0}, residual_tokens=5_000,
                                 tier_needs=(100, 0, 50))
    assert allocation.residuals == 2_000  # 20% of the total
    remaining = 10_000 - 100 - 2_000
    shares = [int(remaining * s) for s in (0.7, 0.2, 0.07, 0.03)]
    surplus = (shares[1] - 100) + shares[2] + (shares[3] - 50)
    assert allocation.tiers == (shares[0] + surplus, 100, 0, 50)
    assert allocation.as_dict()["surplus_to_tier0"] == surplus


# -- tiers ---------------------------------------------------------------------------


def full_summary(request: SummaryRequest) -> str:
    """A summary that takes all the room it is given, as an LLM told the size would."""
    return "word " * (request.max_tokens or 10)


def header_tokens(counter: cf.TokenCounter) -> int:
    """Tokens of a tier summary's header without a summary."""
    return counter.count_message(cf.Message(role="user", content=(
        "[Compacted history — tier 3: 10 earlier messages; full text: "
        "ctx_000000000000 (read_original)]")))


def tiers_aim(budget: cf.Budget) -> int:
    """What the tiers fill: the target less the ledger's share of the budget, so that the
    ledger beside them lands under the target too."""
    return budget.target_tokens - int(budget.input_budget * cf.Ledger().share)


def test_tier0_holds_the_newest_messages_its_allocation_holds(counter: cf.TokenCounter) -> None:
    # Short messages: the design's 10 raw messages would leave most of tier 0's 70% unused,
    # so tier 0 takes the newest messages its tokens hold; tiers 1 and 2 keep their 15 and
    # 25 messages, right before it, and tier 3 holds the rest.
    history = chatter(90)
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(cf.TieredPolicy(), history, context_for(counter, window),
                              answer=full_summary)
    n0 = outcome.details["tiers"]["tier0"]
    assert n0 > 10
    assert outcome.details["tiers"] == {"tier0": n0, "tier1": 15, "tier2": 25, "tier3": 50 - n0}
    # oldest tier first: what an older summary leaves unused can still widen tier 0
    assert [r.purpose for r in requests] == ["tier3", "tier2", "tier1"]
    assert [r.instructions for r in requests] == list(TIER_INSTRUCTIONS)[::-1]
    assert requests[0].messages == tuple(history[: 50 - n0])
    assert requests[1].messages == tuple(history[50 - n0 : 75 - n0])
    assert requests[2].messages == tuple(history[75 - n0 : 90 - n0])
    kinds = [m.metadata.get("tier") for m in outcome.messages]
    assert kinds[:3] == [3, 2, 1]
    assert all(m.source == "summary" and m.role == "user" for m in outcome.messages[:3])
    assert outcome.messages[3].source == "ledger"  # what the tiers took out, item by item
    assert outcome.messages[4:] == history[-n0:]
    allocated = outcome.details["budget"]["allocated"]["tier0"]
    assert counter.count_messages(history[-n0:]) <= allocated
    budget = cf.Budget(context_window=window)
    tiered = [m for m in outcome.messages if m.source != "ledger"]
    assert 0.9 * tiers_aim(budget) <= counter.count_messages(tiered) <= tiers_aim(budget)
    assert counter.count_messages(outcome.messages) <= budget.target_tokens


def test_room_older_summaries_leave_unused_goes_to_the_newest_messages(
    counter: cf.TokenCounter,
) -> None:
    history = chatter(90)
    context = context_for(counter, window=int(counter.count_messages(history) / 0.8))
    planned, _ = drive(cf.TieredPolicy(), history, context, answer=full_summary)
    outcome, requests = drive(cf.TieredPolicy(), history, context, answer="short summary")
    # The short summaries of tiers 3 and 2 left their room unused: tier 1's messages took
    # it, raw, instead of a summary of them.
    assert [r.purpose for r in requests] == ["tier3", "tier2"]
    assert outcome.details["tiers"]["tier0"] == planned.details["tiers"]["tier0"] + 15
    summarized = {id(m) for r in requests for m in r.messages}
    assert not any(id(m) in summarized for m in outcome.messages)  # never both
    tiered = [m for m in outcome.messages if m.source != "ledger"]
    assert counter.count_messages(tiered) >= 0.9 * tiers_aim(context.budget)
    assert cf.validate(outcome.messages) == []


def test_messages_over_tier0s_allocation_keep_the_designs_tier_boundaries(
    counter: cf.TokenCounter,
) -> None:
    history = chatter(60, size=1_500)
    window = int(counter.count_messages(history) / 4)
    outcome, requests = drive(cf.TieredPolicy(), history, context_for(counter, window),
                              answer=full_summary)
    n0 = outcome.details["tiers"]["tier0"]
    assert 1 <= n0 < 10  # the design's 10 do not fit: its oldest join tier 1
    # Tier 3's share (50 tokens) holds little beyond its header: its 10 messages join tier 2,
    # one header instead of two.
    assert outcome.details["budget"]["allocated"]["tier3"] < 32 + header_tokens(counter)
    assert outcome.details["tiers"] == {"tier0": n0, "tier1": 25 - n0, "tier2": 35, "tier3": 0}
    assert [len(r.messages) for r in requests] == [35, 25 - n0]


@pytest.mark.parametrize("answer_words", [100, 600])
def test_the_latest_request_stays_verbatim_when_tier0_cannot_hold_it(
    counter: cf.TokenCounter, answer_words: int,
) -> None:
    request = cf.Message(role="user", content="Write up the report in one page, please.")
    answer = cf.Message(role="assistant", content="A long answer. " * answer_words)
    history = [*chatter(40), request, answer]
    window = counter.count_message(answer) * 3 // 2  # the answer fills tier 0 alone
    outcome, requests = drive(cf.TieredPolicy(), history, context_for(counter, window))
    assert outcome.messages[-2:] == [request, answer]
    assert outcome.messages[-2] is request
    assert not any(request in r.messages for r in requests)
    assert counter.count_messages(outcome.messages) <= window


def test_residuals_stay_in_place_and_keep_their_call(counter: cf.TokenCounter) -> None:
    history = chatter(30)
    decision = cf.Message(role="assistant", content="We decided to refund order KT-1.",
                          metadata={"importance": "high"})
    call = cf.Message(role="assistant", tool_calls=(cf.ToolCall("c1", "lookup"),))
    result = cf.Message(role="tool", tool_call_id="c1", content="Error: tool crashed",
                        metadata={"is_error": True, "importance": "high"})
    history[4:4] = [decision, call, result]
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.TieredPolicy(), history, context_for(counter, window))
    out = list(outcome.messages)
    assert decision in out and call in out and result in out
    assert out.index(call) + 1 == out.index(result)
    assert out.index(decision) < out.index(call)
    residual = {r["index"] for r in outcome.details["residuals"]}
    assert residual == {4, 6}
    assert cf.validate(out) == []


def test_residual_cap_demotes_the_lowest_scores(counter: cf.TokenCounter) -> None:
    history = chatter(20)
    high = cf.Message(role="user", content="We decided: task one.", metadata={"importance": "high"})
    low = [cf.Message(role="user", content=f"We agreed on item {k}.",
                      metadata={"importance": "medium"}) for k in range(6)]
    history[2:2] = [*low[:3], high, *low[3:]]
    window = int(counter.count_messages(history) / 0.8)
    policy = cf.TieredPolicy(residual_max_percent=0.1)  # ceil(27 * 0.1) = 3 messages
    outcome, _ = drive(policy, history, context_for(counter, window))
    kept = [r["index"] for r in outcome.details["residuals"]]
    assert len(kept) == 3 and history.index(high) in kept
    scores = {r["score"] for r in outcome.details["residuals"]}
    assert max(scores) == 100 and outcome.details["residual_count"] == 3


def test_failed_summary_falls_back_to_keyword_truncation(counter: cf.TokenCounter) -> None:
    history = chatter(60, size=1_500)
    history[3] = cf.Message(role="assistant", content="Shipment KT-4242 must go out on Monday.")
    window = int(counter.count_messages(history) / 2)
    outcome, requests = drive(cf.TieredPolicy(), history, context_for(counter, window),
                              answer=None)
    assert len(requests) == 3
    tier3 = next(m for m in outcome.messages if m.metadata.get("tier") == 3)
    assert "KT-4242" in tier3.text  # an identifier of the tier is a keyword
    assert cf.validate(outcome.messages) == []
    assert counter.count_messages(outcome.messages) <= window


def test_metrics_and_budget_report(counter: cf.TokenCounter) -> None:
    history = chatter(60)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.TieredPolicy(), history, context_for(counter, window))
    d = outcome.details
    assert d["original_tokens"] == counter.count_messages(history)
    # The tiers' metrics describe the tiered part; the ledger beside it is reported apart.
    tiered = [m for m in outcome.messages if m.source != "ledger"]
    assert d["compressed_tokens"] == counter.count_messages(tiered)
    assert outcome.details["ledger"]["entries"] >= 1
    assert d["ratio"] == round(d["compressed_tokens"] / d["original_tokens"], 4) < 1
    budget = d["budget"]
    assert budget["total"] == tiers_aim(cf.Budget(context_window=window))
    assert budget["safety_margin"] == 100 and budget["allocated"]["current_message"] == 50
    assert 0 < budget["utilization_percent"] <= 100
    assert budget["used_tokens"] <= budget["total"]


def test_below_the_trigger_the_input_object_comes_back(counter: cf.TokenCounter) -> None:
    history = chatter(60)
    outcome, requests = drive(cf.TieredPolicy(), history,
                              context_for(counter, counter.count_messages(history) * 2))
    assert outcome.messages is history and requests == []


# -- configuration -------------------------------------------------------------------


def test_from_env_reads_seed_variables() -> None:
    policy = cf.TieredPolicy.from_env({
        "PROMPT_COMPACTION_RESIDUALS_ENABLED": "false",
        "PROMPT_COMPACTION_RESIDUAL_THRESHOLD": "70",
        "PROMPT_COMPACTION_RESIDUAL_MAX_PERCENT": "0.1",
        "PROMPT_COMPACTION_BUDGET_ENABLED": "true",
        "PROMPT_COMPACTION_TIER0_SIZE": "4",
    })
    assert (policy.residuals_enabled, policy.residual_threshold) == (False, 70)
    assert (policy.residual_max_percent, policy.tier0_size) == (0.1, 4)
    assert cf.TieredPolicy.from_env({}) == cf.TieredPolicy()


def test_tiering_disabled_by_env_gives_one_summary(counter: cf.TokenCounter) -> None:
    policy = cf.TieredPolicy.from_env({"PROMPT_COMPACTION_TIERED_ENABLED": "false"})
    history = chatter(60)
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(policy, history, context_for(counter, window))
    kept = outcome.details["tiers"]["tier0"]
    # One tier; a summary that leaves most of its room unused is made again (once) for the
    # span left after the newest groups joined tier 0 in that room.
    assert [r.purpose for r in requests] in (["tier1"], ["tier1", "tier1"])
    assert len(requests[-1].messages) == 60 - kept
    assert outcome.messages[-kept:] == history[-kept:]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PROMPT_COMPACTION_RESIDUAL_THRESHOLD": "high"}, "PROMPT_COMPACTION_RESIDUAL_THRESHOLD"),
        ({"PROMPT_COMPACTION_RESIDUALS_ENABLED": "maybe"}, "expected true or false"),
        ({"PROMPT_COMPACTION_RESIDUAL_MAX_PERCENT": "2"},
         r"TieredPolicy.residual_max_percent must be a number in \[0, 1\], got 2.0"),
    ],
)
def test_bad_env_values_are_configuration_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        cf.TieredPolicy.from_env(env)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tier0_size": 30}, "tier0_size <= tier1_size <= tier2_size, got \\(30, 25, 50\\)"),
        ({"preservation": (0.7, 0.4, 0.0)}, "preservation must be 3 values"),
        ({"tier_shares": (0.7, 0.3, 0.2, 0.1)}, "tier_shares must sum to at most 1"),
        ({"residual_threshold": -5}, "TieredPolicy.residual_threshold must be an int >= 0, got -5"),
    ],
)
def test_configuration_is_validated(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        cf.TieredPolicy(**kwargs)  # type: ignore[arg-type]


# -- properties ----------------------------------------------------------------------


def test_the_newest_group_is_cut_head_tail_before_failing(counter: cf.TokenCounter) -> None:
    call = cf.ToolCall("big", "read_page")
    newest = [cf.Message(role="assistant", tool_calls=(call,)),
              cf.Message(role="tool", tool_call_id="big", name="read_page",
                         content="page head " + "body text " * 3_000 + " page tail")]
    history = [*chatter(20), *newest]
    window = counter.count_messages(history) // 3  # the newest group alone is too big
    assert counter.count_messages(newest) > window
    outcome, _ = drive(cf.TieredPolicy(), history, context_for(counter, window))
    assert cf.validate(outcome.messages) == []
    assert counter.count_messages(outcome.messages) <= window
    assert outcome.messages[-2] is newest[0]  # the call stays whole
    result = outcome.messages[-1]
    assert result.id == newest[1].id and result.text.startswith("page head")
    assert result.text.endswith("page tail") and "TRUNCATED" in result.text
    assert handle_for(newest[1]) in result.text  # the cut names what reads it back
    # and reports it, so the driver keeps the original that handle reads
    assert any(t.method == "truncated" and t.index == len(history) - 1
               and t.handle == handle_for(newest[1]) for t in outcome.targets)


def test_a_request_is_never_cut_to_a_label_without_its_handle(counter: cf.TokenCounter) -> None:
    # Rooms from the request whole up to it beside the tier header: where the header and a
    # cut request fit, the cut names its handle; else the engine's floor sends the request.
    system = cf.Message(role="system", content="You book flights. " * 40)
    request = cf.Message(role="user", content="Cancel reservation 3RK2T9, I am sick. " * 3)
    history = [system, *chatter(6), request]
    pair = counter.count_messages([system, request])
    for extra in range(0, 60, 2):
        budget = cf.Budget(context_window=pair + extra)
        result = cf.compact(history, policy=cf.TieredPolicy(), budget=budget, counter=counter,
                            summarizer=ScriptedSummarizer(default="DATA: none"), now=NOW)
        last = result.messages[-1]
        assert last is request or handle_for(request) in last.text, extra
        assert_valid_within(result.messages, budget, counter)


def test_budget_tier0_cannot_use_goes_to_the_tier_summaries(counter: cf.TokenCounter) -> None:
    # Tier 0 takes the newest messages while they fit; the next one is too big for what is
    # left, and that rest goes to the tier-1 summary, up to the share tier 1 preserves.
    history = [*chatter(20, size=1_500), *chatter(10, size=60)]
    window = int(counter.count_messages(history) / 0.8)
    policy = cf.TieredPolicy(residuals_enabled=False)
    outcome, requests = drive(policy, history, context_for(counter, window, force=True),
                              answer=full_summary)
    tier1 = next(r for r in requests if r.purpose == "tier1")
    allocated = outcome.details["budget"]["allocated"]["tier1"]
    header = counter.count_message(next(m for m in outcome.messages
                                        if m.metadata.get("tier") == 1 and m.source == "summary"))
    assert tier1.max_tokens is not None and tier1.max_tokens + header > allocated
    assert tier1.max_tokens <= 0.7 * counter.count_messages(tier1.messages)
    assert outcome.details["tiers"]["tier0"] > 10


@settings(max_examples=max(200, settings.default.max_examples))  # central invariant
@given(history=histories(max_turns=8), share=st.floats(0.02, 0.6), force=st.booleans())
def test_tiered_tiny_budgets_cut_the_newest_group_or_fail_below_the_floor(
    counter: cf.TokenCounter, history: list[cf.Message], share: float, force: bool
) -> None:
    budget = cf.Budget(context_window=max(20, int(counter.count_messages(history) * share)))
    try:
        result = cf.compact(history, policy=cf.TieredPolicy(), budget=budget, counter=counter,
                            summarizer=ScriptedSummarizer(default="DATA: KT-1"), force=force,
                            now=NOW)
    except cf.BudgetExceededError:
        # Necessary condition: the system messages, the newest group cut to its labels and
        # one tier header do not fit.
        sent, _ = cf.repair(history)  # what the policy saw
        lead = [m for m in sent if m.role == "system"]
        groups = split_groups(sent, leading_system_count(sent))
        # a request is cut only with its handle (the bare one, when the labels are tight)
        handles = any(m.role == "user" for m in groups[-1].messages)
        newest = []
        for m in groups[-1].messages:
            cut = shrink_message(m, HeadTail(), max_chars=0,
                                 handle=handle_for(m) if handles else None)
            if handles and cut is not m and handle_for(m) not in cut.text:
                cut = m  # a cut that would not name its handle (images gone) is not taken
            newest.append(cut)
        older = [m for g in groups[:-1] for m in g.messages]
        context = CompactionContext(budget=budget, counter=counter)
        header = [cf.Message(role="user", source="summary", content=(
            f"[Compacted history — tier 1: {len(older)} earlier messages; full "
            f"text: {handle_text(handle_for(older), context)}]"))] if older else []
        assert counter.count_messages([*lead, *newest, *header]) > budget.input_budget
        event("budget exceeded")
        return
    assert_valid_within(result.messages, budget, counter)
    if result.report.method == "floor":  # the policy refused; the engine's floor answered
        return
    out_ids = {m.id for m in result.messages}
    assert {m.id for m in split_groups(history)[-1].messages} <= out_ids


@settings(max_examples=max(150, settings.default.max_examples))  # central invariant
@given(history=histories(max_turns=12), share=st.floats(0.5, 2.5), force=st.booleans())
def test_tiered_output_is_valid_within_budget_and_keeps_residuals(
    counter: cf.TokenCounter, history: list[cf.Message], share: float, force: bool
) -> None:
    size = counter.count_messages(history)
    budget = cf.Budget(context_window=max(50, int(size * share)))
    summarizer = ScriptedSummarizer(default=lambda r: "summary " * (r.max_tokens or 10),
                                       max_input_tokens=10**9)  # one call per tier
    try:
        result = cf.compact(history, policy=cf.TieredPolicy(), budget=budget, counter=counter,
                            summarizer=summarizer, force=force, now=NOW)
    except cf.BudgetExceededError:
        # Necessary condition: the system prompt and the newest group, cut to its labels,
        # do not fit.
        lead = [m for m in history if m.role == "system"]
        newest = [shrink_message(m, HeadTail(), max_chars=0)
                  for m in split_groups(history)[-1].messages]
        context = CompactionContext(budget=budget, counter=counter)
        header = cf.Message(role="user", source="summary", content=(
            "[Compacted history — tier 3: 1000000 earlier messages; full text: "
            f"{handle_text('ctx_' + '0' * 12, context)}]"))
        floor = counter.count_messages([*lead, *newest]) + 3 * counter.count_message(header)
        assert floor > budget.input_budget
        event("budget exceeded")
        return
    event(f"method {result.report.method}")
    assert_valid_within(result.messages, budget, counter)
    out_ids = [id(m) for m in result.messages]
    residuals = result.report.details.get("residuals", [])
    for r in residuals:
        assert id(history[r["index"]]) in out_ids, "a residual was changed or dropped"
    if result.report.method == "tiered":
        cap = math.ceil(sum(m.role != "system" for m in history) * 0.2)
        assert result.report.details["residual_count"] <= cap
        # Original order is kept: messages carried over (the newest group possibly cut
        # head+tail, same id) appear in input order.
        ids = [m.id for m in history]
        positions = [ids.index(m.id) for m in result.messages if m.id in ids]
        assert positions == sorted(positions)
        cut = [m for m in result.messages if m.id in ids and all(m is not h for h in history)]
        newest = {m.id for m in split_groups(history)[-1].messages}
        assert all(m.id in newest for m in cut), "only the newest group may be cut"
    assert {r.purpose for r in summarizer.requests} <= {"tier1", "tier2", "tier3"}
    assert len(summarizer.requests) <= 3


def test_a_group_straddling_a_tier_boundary_joins_the_recent_tier(
    counter: cf.TokenCounter,
) -> None:
    calls = tuple(cf.ToolCall(f"c{k}", "fetch") for k in range(3))
    loop = [cf.Message(role="assistant", tool_calls=calls),
            *(cf.Message(role="tool", tool_call_id=c.id, content="plain text result")
              for c in calls)]
    # The loop holds positions 9-12 from the end; the message before it is too big for tier
    # 0's allocation, so tier 0 ends at the loop.
    big = cf.Message(role="user", content="too big to keep raw " * 2_000)
    history = [*chatter(40), big, *loop, *chatter(8)]
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(cf.TieredPolicy(residuals_enabled=False), history,
                              context_for(counter, window))
    assert all(m in outcome.messages for m in loop)  # kept raw, whole
    assert not any(m in r.messages for r in requests for m in loop)
    assert outcome.details["tiers"]["tier0"] == 12
    assert cf.validate(outcome.messages) == []


def test_tier_spans_by_tokens_and_by_the_designs_message_counts() -> None:
    # Newest first: eight single messages, then a loop of four (it starts 8 messages from
    # the end, within the design's 10, so it joins tier 0 whole), then single messages.
    sizes = [1] * 8 + [4] + [1] * 60
    recency = Recency.of(range(len(sizes)), sizes, [10] * len(sizes), [0] * len(sizes),
                         (10, 25, 50))
    assert recency.by_count == 9
    at = recency.sizes(9)
    assert (at.groups, at.tokens[0]) == ({0: 9, 1: 13, 2: 25, 3: 22}, 90)
    # a tier 0 of 20 groups (23 messages) pushes tiers 1 and 2 back by what it grew
    assert recency.sizes(20).groups == {0: 20, 1: 13, 2: 25, 3: 11}
    # a tier 0 shorter than the design's leaves the design's boundaries in place
    assert recency.sizes(3).groups == {0: 3, 1: 19, 2: 25, 3: 22}
    assert recency.tier_of(3)[2] == 0 and recency.tier_of(3)[3] == 1


@pytest.mark.parametrize("answered", [False, True])
def test_every_tier_summary_names_the_latest_request_as_its_task(
    counter: cf.TokenCounter, answered: bool,
) -> None:
    chat = generate_chat(2, sessions=6).messages
    end = next(i for i in range(len(chat) - 1, 0, -1) if chat[i].role == "user"
               and chat[i].source is None) + (2 if answered else 1)
    history = chat[:end]
    latest = history[-2] if answered else history[-1]
    window = int(counter.count_messages(history) / 0.8)
    summarizer = cf.ExtractiveSummarizer(counter=counter)
    _, requests = drive(cf.TieredPolicy(), history, context_for(counter, window),
                        answer=summarizer.summarize)
    assert len(requests) >= 2
    for r in requests:
        # the request itself, or, in a summary cut to its size, a pointer to it when the
        # model sees it verbatim beside the summary
        task = summarizer.summarize(r).split("\n", 1)[0]
        assert task == f"TASK: {latest.text}" or (
            task == f"TASK: {IN_VIEW_TASK}" and latest.text in r.shown)
        assert r.open_request == (None if answered else latest.text)
