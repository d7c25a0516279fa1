"""SummaryPolicy: one LLM summary of the older part, a preserved recent tail."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._policies.summary import SUMMARY_PREFIX
from contextfold.errors import ConfigurationError
from contextfold.policy import CompactionContext, SummaryReply, SummaryRequest, handle_for
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories, run_policy

M, TC = cf.Message, cf.ToolCall
NOW = datetime(2026, 1, 13, 14, 30, tzinfo=timezone.utc)


def loop(call_id: str, result: str) -> list[cf.Message]:
    return [M("assistant", "", tool_calls=(TC(call_id, "read_file", "{}"),)),
            M("tool", result, tool_call_id=call_id, name="read_file")]


def history(turns: int = 10, size: int = 400) -> list[cf.Message]:
    out = [M("system", "You are a coder.")]
    for t in range(turns):
        out += [M("user", f"task {t}"), *loop(f"c{t}", f"file {t} " * size),
                M("assistant", f"done {t}")]
    return out


def drive(policy, messages, context, reply):
    """Run the policy's generator, answering each request with ``reply(request)``."""
    return run_policy(policy, messages, context, reply=reply)


def context_for(messages, counter, window=None, force=False):
    window = window or int(counter.count_messages(messages) * 1.1)
    return CompactionContext(budget=cf.Budget(context_window=window), counter=counter,
                                force=force, now=NOW)


def test_below_the_trigger_returns_the_input_itself(counter):
    msgs = history(3)
    summarizer = ScriptedSummarizer(default="never")
    result = cf.compact(msgs, policy=cf.SummaryPolicy(), summarizer=summarizer,
                        budget=cf.Budget(context_window=100_000), counter=counter)
    assert result.messages is msgs
    assert summarizer.calls == 0


def test_one_request_for_the_older_part_and_a_stamped_summary(counter):
    msgs = history(10)
    context = context_for(msgs, counter)
    policy = cf.SummaryPolicy(tz=timezone.utc)
    outcome, requests = drive(policy, msgs, context, lambda r: SummaryReply("The summary."))
    assert len(requests) == 1 and requests[0].purpose == "summary"
    out = list(outcome.messages)
    summary = out[1]
    assert (summary.role, summary.source, summary.created_at) == ("user", "summary", NOW)
    folded = list(requests[0].messages)
    # the handle of what it summarizes is in view, and reads back their full text
    span = handle_for(folded)
    assert summary.text == (SUMMARY_PREFIX + "[Summary generated: 2026-01-13 14:30 (UTC)]\n"
                            f"[Full text of the {len(folded)} messages this replaces: {span}]"
                            "\n\nThe summary.")
    assert {t.handle for t in outcome.targets if t.method == "summarized"} == {span}
    preserved = out[2:]
    assert folded + preserved == msgs[1:]  # nothing lost, nothing duplicated
    room = context.available - counter.count_messages(msgs[:1])
    assert sum(map(counter.count_message, preserved)) <= room * 0.25
    assert cf.validate(out) == []


def test_groups_are_never_split_and_the_last_group_is_always_kept(counter):
    msgs = [M("user", "go"), *loop("a", "x " * 50), *loop("b", "y " * 3000)]
    context = context_for(msgs, counter, window=counter.count_messages(msgs) + 400,
                          force=True)
    outcome, requests = drive(cf.SummaryPolicy(), msgs, context, lambda r: SummaryReply("s"))
    assert list(requests[0].messages) == msgs[1:3]
    # the request stays verbatim, before the summary of the work that followed it
    assert outcome.messages[0] is msgs[0] and outcome.messages[1].source == "summary"
    assert list(outcome.messages[2:]) == msgs[3:]


def test_force_compacts_below_the_trigger(counter):
    msgs = history(6)
    window = counter.count_messages(msgs) * 2  # at 50%: below the 75% trigger
    outcome, requests = drive(cf.SummaryPolicy(), msgs, context_for(msgs, counter, window),
                              lambda r: SummaryReply("s"))
    assert requests == [] and outcome.messages is msgs
    context = context_for(msgs, counter, window=window, force=True)
    outcome, requests = drive(cf.SummaryPolicy(), msgs, context, lambda r: SummaryReply("s"))
    assert len(requests) == 1 and outcome.method == "summary"


def test_reload_system_prompt_on_compaction(counter):
    msgs = history(10)
    policy = cf.SummaryPolicy(reload_system_prompt=lambda: "Fresh prompt.")
    outcome, _ = drive(policy, msgs, context_for(msgs, counter), lambda r: SummaryReply("s"))
    assert outcome.messages[0].text == "Fresh prompt."
    assert outcome.messages[0].id == msgs[0].id
    assert "system prompt reloaded" in outcome.notes

    def broken() -> str:
        raise OSError("NEXUS.md vanished")

    outcome, _ = drive(cf.SummaryPolicy(reload_system_prompt=broken), msgs,
                       context_for(msgs, counter), lambda r: SummaryReply("s"))
    assert outcome.messages[0] is msgs[0]
    assert any("reload failed" in n and "NEXUS.md vanished" in n for n in outcome.notes)


def test_pinned_older_messages_stay_verbatim(counter):
    msgs = history(10)
    msgs[5] = M("user", "task 1 (pinned)", metadata={"pinned": True})
    outcome, requests = drive(cf.SummaryPolicy(), msgs, context_for(msgs, counter),
                              lambda r: SummaryReply("s"))
    assert msgs[5] not in requests[0].messages
    assert outcome.messages[2] is msgs[5]


def test_failed_summary_keeps_the_newest_groups_and_says_so(counter):
    msgs = history(10)
    context = context_for(msgs, counter)
    outcome, _ = drive(cf.SummaryPolicy(), msgs, context,
                       lambda r: SummaryReply(None, origin="failed", error="TimeoutError"))
    out = list(outcome.messages)
    assert out[1].text.startswith("[CONTEXT NOTICE]")
    dropped = [t for t in outcome.targets if t.method == "dropped"]
    assert f"({len(dropped)} of them)" in out[1].text
    assert out[2:] == msgs[len(msgs) - len(out) + 2:]  # the newest groups, verbatim
    assert context.measure(out) <= context.budget.target_tokens
    assert any("summary failed (TimeoutError)" in n for n in outcome.notes)


def test_an_oversized_summary_is_cut_to_fit(counter):
    msgs = history(10)
    context = context_for(msgs, counter)
    huge = "fact " * 20_000
    outcome, _ = drive(cf.SummaryPolicy(), msgs, context, lambda r: SummaryReply(huge))
    out = list(outcome.messages)
    assert out[1].text.startswith(SUMMARY_PREFIX)
    assert "[TRUNCATED" in out[1].text
    assert_valid_within(out, context.budget, counter)


def test_through_compact_with_a_scripted_summarizer(counter):
    msgs = history(10)
    summarizer = ScriptedSummarizer(["Tasks 0-7 done."], max_input_tokens=10**9)
    budget = cf.Budget(context_window=int(counter.count_messages(msgs) * 1.1))
    result = cf.compact(msgs, policy=cf.SummaryPolicy(), summarizer=summarizer, budget=budget,
                        counter=counter, now=NOW)
    assert summarizer.calls == 1
    assert "Tasks 0-7 done." in result.messages[1].text
    assert result.report.tokens_after < result.report.tokens_before / 2
    assert_valid_within(result.messages, budget, counter)


@pytest.mark.parametrize("ratio", [0, 1, 1.5, -0.1])
def test_bad_ratio_fails_at_construction(ratio):
    with pytest.raises(ConfigurationError, match="recent_preserve_ratio"):
        cf.SummaryPolicy(recent_preserve_ratio=ratio)


# -- invariants -------------------------------------------------------------------------

_ALLOWED = {
    "the system prompt, the summary label and the preserved messages",
    "the system prompt, the notice and the newest group",
    "the system prompt and the newest group",
}


@settings(max_examples=max(150, settings.default.max_examples))
@given(
    st.one_of(histories(max_turns=8, max_tool_chars=8_000),
              histories(max_turns=8, max_tool_chars=8_000, imperfect=True)),
    st.integers(300, 20_000),
    st.one_of(st.none(), st.integers(0, 30_000)),
    st.floats(0.05, 0.9),
    st.booleans(),
)
def test_valid_within_budget(counter, messages, window, summary_chars, ratio, force):
    view = cf.repair(messages)[0]
    context = CompactionContext(budget=cf.Budget(context_window=window), counter=counter,
                                   force=force, now=NOW)

    def reply(request: SummaryRequest) -> SummaryReply:
        if summary_chars is None:
            return SummaryReply(None, origin="failed", error="down")
        return SummaryReply("s" * summary_chars)

    try:
        outcome, requests = drive(cf.SummaryPolicy(ratio), view, context, reply)
    except cf.BudgetExceededError as exc:
        assert exc.what in _ALLOWED and exc.needed > exc.available
        return
    assert len(requests) <= 1
    event(f"method={outcome.method}, requests={len(requests)}")
    out = list(outcome.messages)
    if outcome.messages is view:
        return  # below the trigger, or nothing to do (the driver checks the budget)
    assert_valid_within(out, context.budget, counter)
    if requests:  # every request holds whole groups: each call is answered inside it
        folded = list(requests[0].messages)
        calls = {c.id for m in folded for c in m.tool_calls}
        assert calls == {m.tool_call_id for m in folded if m.role == "tool"}


async def test_async_driver_and_compactor_resummarize_the_previous_summary(counter):
    msgs = history(10)
    budget = cf.Budget(context_window=int(counter.count_messages(msgs) * 1.1))
    summarizer = ScriptedSummarizer(["First summary.", "Second summary."],
                                       max_input_tokens=10**9)
    compactor = cf.Compactor(cf.SummaryPolicy(), budget, counter, summarizer=summarizer)
    first = await compactor.acompact(msgs)
    assert "First summary." in first.messages[1].text
    grown = [*msgs, *(m for t in range(10, 20) for m in (
        M("user", f"task {t}"), *loop(f"c{t}", f"file {t} " * 400), M("assistant", f"done {t}")))]
    second = await compactor.acompact(grown)
    assert summarizer.calls == 2
    folded = "".join(m.text for m in summarizer.requests[1].messages)
    assert "First summary." in folded  # the old summary was folded into the new one
    assert "Second summary." in second.messages[1].text
    assert [m.source for m in second.messages].count("summary") == 1
    assert_valid_within(second.messages, budget, counter)


def test_the_summary_names_the_latest_request_when_it_was_answered(counter):
    msgs = history(10)  # ends with the answer to "task 9"
    context = context_for(msgs, counter)
    _, requests = drive(cf.SummaryPolicy(), msgs, context, lambda r: SummaryReply("s"))
    [request] = requests
    assert request.open_request is None and request.latest_request == "task 9"
    text = cf.ExtractiveSummarizer().summarize(request)
    assert text.startswith("TASK: task 9\n- earlier request: task ")


def test_a_high_target_keeps_the_tail_it_leaves_beside_the_summary(counter):
    msgs = history(16)
    budget = cf.Budget(context_window=int(counter.count_messages(msgs) * 0.8), trigger=1.0,
                       target=0.9)
    context = CompactionContext(budget=budget, counter=counter, now=NOW)
    outcome, [request] = drive(cf.SummaryPolicy(), msgs, context,
                               lambda r: "word " * (r.max_tokens or 10))
    room = context.available - counter.count_messages(msgs[:1])
    preserved = list(outcome.messages[2:])
    assert sum(map(counter.count_message, preserved)) > 0.25 * room  # more than the ratio
    assert request.max_tokens is not None and request.max_tokens <= 0.25 * room
    used = counter.count_messages(outcome.messages)
    assert 0.8 * budget.target_tokens <= used <= budget.input_budget
    assert list(request.messages) + preserved == msgs[1:]
