"""The compaction ledger: what compaction takes out of view stays listed, item by item with
the handle of its original, merged across compactions (never re-summarized), within its
share of the budget, the least used shed first; and every policy gives every removal a
handle."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.ledger import LEDGER_HEADER, ledger_entries
from contextfold.policy import HANDLE_RE
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories


def reading(n: int, size: int = 2_000) -> list[cf.Message]:
    out = [cf.Message(role="system", content="You read documents."),
           cf.Message(role="user", content="Read documents 1 to N and list their codes.")]
    for k in range(1, n + 1):
        call = cf.ToolCall(f"c{k}", "read_document", json.dumps({"number": k}))
        out += [cf.Message(role="assistant", tool_calls=(call,)),
                cf.Message(role="tool", tool_call_id=f"c{k}", name="read_document",
                           content=f"Document {k}. " + "plain words " * (size // 12)
                           + f" Code REF-AB{k:02d}-{k:04d} filed at /srv/docs/{k}.txt.")]
    return out


def ledger_of(messages: list[cf.Message]) -> cf.Message:
    found = [m for m in messages if m.source == "ledger"]
    assert len(found) == 1, [m.source for m in messages]
    return found[0]


POLICIES = [cf.ThresholdPolicy(), cf.TieredPolicy(), cf.TurnAwarePolicy(ledger=cf.Ledger()),
            cf.TruncationPolicy(ledger=cf.Ledger()), cf.LoopSlicePolicy(ledger=cf.Ledger()),
            cf.SummaryPolicy(ledger=cf.Ledger())]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_what_is_taken_out_of_view_is_listed_with_its_handle(
    policy: cf.Policy, counter: cf.TokenCounter
) -> None:
    history = reading(30)
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.4))
    result = cf.compact(history, policy=policy, budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    ledger = ledger_of(result.messages)
    assert ledger.role == "user" and ledger.text.startswith(LEDGER_HEADER)
    view = "\n".join(m.text for m in result.messages)
    # Every code of a document whose result left the view in full is in the ledger (or
    # the summary), unless the ledger says it shed entries.
    gone = [k for k in range(1, 31) if f"REF-AB{k:02d}-{k:04d}" not in view]
    shed = ledger.metadata["contextfold_ledger"]["shed"]
    assert len(gone) <= shed
    for handle in HANDLE_RE.findall(ledger.text):
        assert any(t.handle == handle for t in result.report.targets)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_every_removal_has_a_handle_in_the_report(policy: cf.Policy,
                                                  counter: cf.TokenCounter) -> None:
    history = reading(30)
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.4))
    result = cf.compact(history, policy=policy, budget=budget, counter=counter)
    kept = {id(m) for m in result.messages}
    reported = {t.index for t in result.report.targets if t.handle}
    missing = [i for i, m in enumerate(history) if id(m) not in kept and i not in reported]
    assert missing == []


@pytest.mark.parametrize("rolling", [False, True], ids=["consolidating", "rolling"])
def test_the_ledger_merges_across_compactions_and_is_never_summarized(
    counter: cf.TokenCounter, rolling: bool,
) -> None:
    # Consolidating, one ledger merges every compaction's entries; rolling, each pass adds
    # a ledger of its new entries beside the earlier ones until a consolidation merges
    # them. Either way, an entry leaves the view only when shed.
    summarizer = ScriptedSummarizer(default="TASK: t\nDATA: none")
    budget = cf.Budget(context_window=9_000, prepare=None)
    compactor = cf.Compactor(cf.ThresholdPolicy(ledger=cf.Ledger(share=0.2), rolling=rolling),
                             budget, counter, summarizer)
    history = reading(2)
    views: list[tuple[set[str], int]] = []
    for k in range(3, 60):
        history += reading(k)[-2:]
        result = compactor.compact(history)
        if result.report.method == "none":
            continue
        found = [m for m in result.messages if m.source == "ledger"]
        keys = {e["key"] for m in found for e in ledger_entries(m)}
        views.append((keys, sum(m.metadata["contextfold_ledger"]["shed"] for m in found)))
        if not rolling:
            assert len(found) == 1
    assert len(views) >= 3
    for (before, _), (after, shed) in itertools.pairwise(views):
        assert len(before - after) <= shed  # merged: an entry leaves only when shed
        assert after - before  # and each compaction adds what it took out
    for request in summarizer.requests:  # the ledger never goes into a summary
        assert all(m.source != "ledger" for m in request.messages)


def test_the_least_salient_identifiers_are_left_out_first_and_counted(
    counter: cf.TokenCounter,
) -> None:
    history = reading(40, size=600)
    budget = cf.Budget(context_window=3_000)
    ledger_settings = cf.Ledger(share=0.05, max_share=0.08)
    result = cf.compact(history, policy=cf.TruncationPolicy(ledger=ledger_settings),
                        budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    ledger = ledger_of(result.messages)
    figures = result.report.details["ledger"]
    left_out = figures["identifiers_shed"]
    assert left_out > 0 and f"[{left_out} less salient identifiers left out" in ledger.text
    assert counter.count_message(ledger) <= figures["room"]
    # What the run wrote into its calls (the document numbers) outranks what the results
    # printed (the codes): no code is listed while a number of a removed call is not.
    listed = set(ledger.text.replace(" -> ", "; ").replace("\n", "; ").split("; "))
    view = "\n".join(m.text for m in result.messages if m.source != "ledger")
    removed = [k for k in range(10, 41) if f"/srv/docs/{k}.txt" not in view]
    if any(f"REF-AB{k:02d}-{k:04d}" in listed for k in removed):
        assert all(str(k) in listed for k in removed)


def test_a_ledger_short_of_room_lists_identifiers_side_by_side_without_tool_names(
    counter: cf.TokenCounter,
) -> None:
    history = reading(40, size=600)
    budget = cf.Budget(context_window=3_000)
    result = cf.compact(history, policy=cf.TruncationPolicy(
        ledger=cf.Ledger(share=0.05, max_share=0.08)), budget=budget, counter=counter)
    ledger = ledger_of(result.messages)
    assert result.report.details["ledger"]["identifiers_shed"] > 0  # short of room
    lines = [ln for ln in ledger.text.splitlines() if ln.startswith("- [ctx_")]
    assert lines and all("read_document" not in ln for ln in lines)
    listed = [ln.split("] -> ", 1)[1] for ln in lines if "] -> " in ln]
    assert listed and all(";" not in values for values in listed)  # codes a space apart
    codes = [v for values in listed for v in values.split()]
    assert codes and all(v in {f"REF-AB{k:02d}-{k:04d}" for k in range(41)}
                         | {f"/srv/docs/{k}.txt" for k in range(41)} | {str(k) for k in range(41)}
                         for v in codes)


def test_the_least_used_entries_are_shed_when_no_identifier_fits(
    counter: cf.TokenCounter,
) -> None:
    history = reading(40, size=600)
    # One code is mentioned again at the end: its entry is used, the others are not.
    history.append(cf.Message(role="user", content="Check REF-AB01-0001 again."))
    budget = cf.Budget(context_window=3_000)
    ledger_settings = cf.Ledger(share=0.018, max_share=0.018, min_tokens=0)
    result = cf.compact(history, policy=cf.TruncationPolicy(ledger=ledger_settings),
                        budget=budget, counter=counter)
    assert_valid_within(result.messages, budget, counter)
    ledger = ledger_of(result.messages)
    shed = ledger.metadata["contextfold_ledger"]["shed"]
    assert shed > 0 and f"[{shed} older entries shed" in ledger.text
    kept = ledger_entries(ledger)
    assert any(e["key"] == 'call:read_document:{"number": 1}' for e in kept)  # used: last
    assert counter.count_message(ledger) <= result.report.details["ledger"]["room"]


def test_nothing_to_compact_keeps_the_input_and_no_ledger(counter: cf.TokenCounter) -> None:
    history = reading(2)
    result = cf.compact(history, policy=cf.ThresholdPolicy(),
                        budget=cf.Budget(context_window=100_000), counter=counter)
    assert result.messages is history


@settings(max_examples=max(100, settings.default.max_examples))
@given(history=histories(max_turns=6), share=st.floats(0.3, 1.5),
       policy=st.sampled_from(POLICIES))
def test_policies_with_a_ledger_stay_valid_and_within_budget(
    counter: cf.TokenCounter, history: list[cf.Message], share: float, policy: cf.Policy
) -> None:
    budget = cf.Budget(context_window=max(200, int(counter.count_messages(history) * share)))
    try:
        result = cf.compact(history, policy=policy, budget=budget, counter=counter)
    except cf.BudgetExceededError:
        return  # below the policy's stated minimum (its own tests pin that floor)
    assert_valid_within(result.messages, budget, counter)
    assert sum(m.source == "ledger" for m in result.messages) <= 1
