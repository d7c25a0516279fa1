"""ThresholdPolicy: trigger, target passes, truncation, summary, nudge, degradation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._head_tail import truncation_label
from contextfold._lossless.ledger import LEDGER_HEADER
from contextfold._messages.prompt_kinds import NON_PROMPT_SOURCES
from contextfold._policies.fitting import shrink_message
from contextfold._policies.threshold import (
    COMPACTION_NOTICE,
    CONTINUATION_NUDGE,
    SHORT_NOTICE,
    SUMMARY_HEADER,
)
from contextfold.errors import ConfigurationError
from contextfold.policy import (
    CompactionContext,
    HeadTail,
    Policy,
    PolicyOutcome,
    SummaryRequest,
    split_groups,
)
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories, run_policy

MARKER = "[Screenshot analyzed — image omitted from context]"


def words(n: int, tag: str = "w") -> str:
    """About ``n`` characters of text without identifiers."""
    return (f"{tag} lorem ipsum dolor sit amet " * (n // 28 + 1))[:n]


def tool_step(
    call_id: str, size: int, *, error: bool = False, name: str = "read"
) -> list[cf.Message]:
    return [
        cf.Message(role="assistant", tool_calls=(cf.ToolCall(call_id, name, "{}"),)),
        cf.Message(role="tool", content=words(size, call_id), tool_call_id=call_id, name=name,
                   metadata={"is_error": True} if error else {}),
    ]


def context_for(
    counter: cf.TokenCounter, window: int, *, force: bool = False, known: int | None = None
) -> CompactionContext:
    return CompactionContext(budget=cf.Budget(context_window=window), counter=counter,
                                force=force, known_tokens=known)


def drive(
    policy: Policy, messages: Sequence[cf.Message], context: CompactionContext,
    reply: str | None = "TASK: t\nPROGRESS: p\nREMAINING: r\nDATA: d\nDECISIONS: none",
) -> tuple[PolicyOutcome, list[SummaryRequest]]:
    """Run a policy by hand, answering every request with ``reply``."""
    return run_policy(policy, messages, context, reply=reply)


def email_history(n_results: int = 8, size: int = 6_000) -> list[cf.Message]:
    history = [cf.Message(role="system", content="You read e-mail."),
               cf.Message(role="user", content="Read every unread e-mail. " + words(600, "task"))]
    for k in range(n_results):
        history += tool_step(f"c{k}", size + 100 * k)
    return history


# -- trigger -------------------------------------------------------------------------


def test_below_the_trigger_the_input_object_comes_back(counter: cf.TokenCounter) -> None:
    history = email_history(3)
    context = context_for(counter, counter.count_messages(history) * 2)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context)
    assert outcome.messages is history
    assert requests == []


def test_calibrated_tokens_trigger_when_the_estimate_does_not(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    size = counter.count_messages(history)
    window = size * 2  # the estimate is at 50%, under the 75% trigger
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert outcome.messages is history
    outcome, requests = drive(cf.ThresholdPolicy(), history,
                              context_for(counter, window, known=int(window * 0.8)))
    assert outcome.method == "threshold" and len(requests) == 1


def test_force_compacts_below_the_trigger(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    window = counter.count_messages(history) * 2
    outcome, requests = drive(cf.ThresholdPolicy(), history,
                              context_for(counter, window, force=True))
    assert outcome.method == "threshold" and len(requests) == 1
    assert counter.count_messages(outcome.messages) <= window // 2


# -- target selection ----------------------------------------------------------------


def test_pass_one_takes_the_largest_results_and_skips_errors_and_recent(
    counter: cf.TokenCounter,
) -> None:
    history = [cf.Message(role="user", content="task")]
    history += tool_step("small", 3_000) + tool_step("huge", 80_000)
    history += tool_step("err", 20_000, error=True) + tool_step("mid", 9_000)
    history += tool_step("r1", 900) + tool_step("r2", 900) + tool_step("r3", 900)
    size = counter.count_messages(history)
    # Just over the trigger: truncating the huge result (to 9,000 of 80,000 chars) is enough.
    window = int(size / 0.76)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    truncated = [t for t in outcome.targets if t.method == "truncated"]
    assert [history[t.index].tool_call_id for t in truncated] == ["huge"]
    assert requests[0].messages[-1] is history[4]  # the original, not the truncated text


def test_passes_two_and_three_go_oldest_first_and_spare_the_first_user(
    counter: cf.TokenCounter,
) -> None:
    history: list[cf.Message] = []
    for k in range(6):
        history.append(cf.Message(role="user", content=words(4_000, f"u{k}")))
        history.append(cf.Message(role="assistant", content=words(4_000, f"a{k}"),
                                  reasoning=words(2_000, f"why{k}")))
    window = int(counter.count_messages(history) / 0.8)
    policy = cf.ThresholdPolicy(protect_recent=1, summary_max_share=0.05)
    outcome, _ = drive(policy, history, context_for(counter, window))
    assert not [t for t in outcome.targets if t.method == "dropped"]
    truncated = sorted(t.index for t in outcome.targets if t.method == "truncated")
    assistants = [i for i in truncated if history[i].role == "assistant"]
    users = [i for i in truncated if history[i].role == "user"]
    assert assistants == [1, 3, 5, 7, 9]  # pass 2 took every older assistant message
    assert users and users == [2, 4, 6, 8][: len(users)]  # then pass 3, oldest first
    assert outcome.details["passes"] == {"assistant": 5, "user": len(users)}
    assert 0 not in truncated and 10 not in truncated and 11 not in truncated
    for i in assistants:
        new = next(m for m in outcome.messages if m.id == history[i].id)
        assert new.reasoning is None


def test_short_messages_are_never_truncated(counter: cf.TokenCounter) -> None:
    history = [cf.Message(role="user", content="task")]
    for k in range(40):
        history += tool_step(f"s{k}", 450)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window, force=True))
    assert not [t for t in outcome.targets if t.method == "truncated"]


# -- truncation, summary, nudge ------------------------------------------------------


def test_truncation_keeps_head_and_tail_with_seed_label(counter: cf.TokenCounter) -> None:
    history = email_history(8, size=45_000)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    target = next(t for t in outcome.targets if t.method == "truncated")
    original = history[target.index].text
    new = next(m for m in outcome.messages if m.id == history[target.index].id).text
    head, tail = min(int(len(original) * 0.15), 6_000), min(int(len(original) * 0.08), 3_000)
    assert new.startswith(original[:head]) and new.endswith(original[-tail:])
    assert target.handle is not None and target.handle.startswith("ctx_")
    label = truncation_label(len(original), head, tail, target.handle)
    assert label[:-1] in new  # the handle is followed by how to read it back
    assert "[TRUNCATED — " in new and f"{len(original):,} chars original" in new


def test_one_request_with_five_sections_and_originals(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert len(requests) == 1
    request = requests[0]
    assert request.purpose == "threshold"
    for section in ("TASK:", "PROGRESS:", "REMAINING:", "DATA:", "DECISIONS:"):
        assert section in request.instructions
    targeted = {history[t.index].id for t in outcome.targets if t.method == "truncated"}
    sent = {m.id for m in request.messages}
    assert targeted <= sent
    for m in request.messages:  # full originals, never the truncated text
        assert m in history


def test_the_summary_is_offered_what_the_plan_left_under_the_target(
    counter: cf.TokenCounter,
) -> None:
    # One huge old message: truncating it overshoots the target by far, and the summary
    # (which carries the identifiers of what was cut) is offered that room, not only the
    # reserved 20% of the target.
    history = [cf.Message(role="user", content="Read the log."),
               cf.Message(role="assistant", content=words(40_000, "log"))]
    for k in range(4):
        history += tool_step(f"c{k}", 600)
    window = counter.count_messages(history)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    budget = cf.Budget(context_window=window)
    hint = int(budget.target_tokens * 0.2)
    asked = requests[0].max_tokens
    assert asked is not None and hint < asked <= 2_000
    assert counter.count_messages(outcome.messages) <= budget.input_budget


@pytest.mark.parametrize("share", [0.3, 0.2, 0.15])
def test_a_cut_summary_gives_up_first_the_values_shown_beside_it(
    counter: cf.TokenCounter, share: float,
) -> None:
    history = [cf.Message("system", "You check orders."), cf.Message("user", "Check them all.")]
    for k in range(8):
        refs = " ".join(f"OLD-{100 * k + j}" for j in range(5))
        history += [cf.Message("assistant", tool_calls=(cf.ToolCall(f"c{k}", "get", "{}"),)),
                    cf.Message("tool", f"{refs} " + words(3000, f"r{k}"), tool_call_id=f"c{k}")]
    newest = [f"NEW-{j:03d}" for j in range(30)]
    history += [cf.Message("assistant", tool_calls=(cf.ToolCall("c9", "get", "{}"),)),
                cf.Message("tool", " ".join(newest), tool_call_id="c9")]
    data = [*newest, *(f"OLD-{100 * k + j}" for k in range(8) for j in range(5))]
    reply = "TASK: t\nPROGRESS:\n- p\nREMAINING:\n- r\nDATA:\n" + "\n".join(data)
    window = int(counter.count_messages(history) * share)
    outcome, _ = drive(cf.ThresholdPolicy(ledger=None), history, context_for(counter, window),
                       reply=reply)
    summary = next(m for m in outcome.messages if m.source == "summary")
    beside = {w for m in outcome.messages if m.source != "summary" for w in m.text.split()}
    listed = set(summary.text.splitlines())
    kept, left_out = [v for v in data if v in listed], [v for v in data if v not in listed]
    assert left_out and "NEW-000" in beside  # cut, with the newest result in view
    # nothing in view elsewhere keeps its line while a value out of view lost its own
    assert not ([v for v in kept if v in beside] and [v for v in left_out if v not in beside])
    assert counter.count_messages(outcome.messages) <= cf.Budget(context_window=window).input_budget


def test_summary_message_goes_last_with_the_nudge(counter: cf.TokenCounter) -> None:
    # The threshold design's placement, kept when rolling compaction is off.
    history = email_history(8)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(rolling=False), history, context_for(counter, window),
                       reply="S1")
    last = outcome.messages[-1]
    assert last.role == "user" and last.source == "summary"
    assert last.text.startswith(f"{SUMMARY_HEADER}S1\n\n")
    assert last.text.endswith(f"\n\n{CONTINUATION_NUDGE}")
    dropped = {t.handle for t in outcome.targets if t.method == "dropped"}
    assert len(dropped) <= 1 and all(h is not None and h in last.text for h in dropped)
    # The ledger of what was cut sits just before the summary, after the newest group.
    ledger = outcome.messages[-2]
    assert ledger.source == "ledger" and ledger.text.startswith(LEDGER_HEADER)
    assert outcome.messages[-3].role == "tool"
    assert cf.validate(outcome.messages) == []


def test_a_rolling_summary_goes_where_the_first_cut_was(counter: cf.TokenCounter) -> None:
    # Rolling (the default): the summary block goes before the first message cut or
    # dropped, the ledger after it; everything after them is the input's own messages or
    # their cut versions, which the next pass may cut again without rewriting the block.
    history = email_history(8)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window), reply="S1")
    at = next(i for i, m in enumerate(outcome.messages) if m.source == "summary")
    summary = outcome.messages[at]
    assert summary.text.startswith(f"{SUMMARY_HEADER}S1\n\n")
    assert summary.text.endswith(f"\n\n{CONTINUATION_NUDGE}")
    assert outcome.messages[at + 1].source == "ledger"
    first_change = min(t.index for t in outcome.targets)
    assert outcome.messages[:at] == history[:at] and at <= first_change
    after = outcome.messages[at + 2:]
    originals = {id(m) for m in history}
    cut = [m for m in after if id(m) not in originals]
    assert cut and all(m.tool_call_id or m.tool_calls for m in cut)  # cut tool steps
    assert cf.validate(outcome.messages) == []


@pytest.mark.parametrize("rolling", [True, False])
def test_a_trailing_user_prompt_stays_last(counter: cf.TokenCounter, rolling: bool) -> None:
    prompt = cf.Message(role="user", content="Now write the briefing.")
    history = [*email_history(8), prompt]
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(rolling=rolling), history,
                       context_for(counter, window))
    assert outcome.messages[-1] is prompt
    if not rolling:
        assert outcome.messages[-2].source == "summary"
    else:
        assert any(m.source == "summary" for m in outcome.messages[:-1])


def test_failed_summary_gives_the_notice(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window), reply=None)
    notices = [m for m in outcome.messages if m.metadata.get("compaction") == "notice"]
    assert len(notices) == 1 and notices[0].text.startswith(COMPACTION_NOTICE)
    assert any("summary failed" in note for note in outcome.notes)


@pytest.mark.parametrize("rolling", [False, True])
def test_earlier_summaries_are_recompacted(counter: cf.TokenCounter, rolling: bool) -> None:
    # The threshold design's recursion cuts an earlier summary like any message; a
    # consolidating rolling pass folds it whole into the new summary.
    old = cf.Message(role="user", content=SUMMARY_HEADER + words(8_000, "old"), source="summary")
    history = [cf.Message(role="user", content="task"), old]
    for k in range(3):
        history += [cf.Message(role="user", content=f"go {k}")]
        history += [cf.Message(role="assistant", content=f"ok {k}")]
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(cf.ThresholdPolicy(rolling=rolling), history,
                              context_for(counter, window))
    method = "dropped" if rolling else "truncated"
    assert any(t.index == 1 and t.method == method for t in outcome.targets)
    assert old in requests[0].messages
    if rolling:
        assert sum(m.source == "summary" for m in outcome.messages) == 1


# -- the task prompt and the latest request ------------------------------------------


def session_chat() -> list[cf.Message]:
    """Three sessions of a chat, each opened by a marker; the latest request is answered."""
    def marker(k: int) -> cf.Message:
        return cf.Message(role="user", content=f"[Session {k} started: 2026-01-0{k} 09:00]",
                          source="session")

    return [cf.Message(role="system", content="You are a travel assistant."),
            marker(1),
            cf.Message(role="user", content="Plan my May trip to Lisbon; booking KX4821."),
            cf.Message(role="assistant", content=words(1_500, "plan")),
            marker(2),
            cf.Message(role="user", content="Find me a hotel near the river."),
            cf.Message(role="assistant", content=words(1_500, "hotel")),
            marker(3),
            cf.Message(role="user", content="What was my booking reference again?"),
            cf.Message(role="assistant", content="It is KX4821.")]


def test_a_chat_keeps_its_task_prompt_and_latest_request_not_its_first_marker(
    counter: cf.TokenCounter,
) -> None:
    # The first user message is a session marker: the task prompt is the first real
    # prompt, and the latest request stays verbatim in its place, before its answer.
    history = session_chat()
    window = int(counter.count_messages(history) * 0.3)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    out = [m for m in outcome.messages if m.source != "ledger"]  # (beside it when it fits)
    assert [m.source for m in out] == [None, "summary", None, None, None]
    assert out[0] is history[0]
    assert out[2:] == [history[2], history[8], history[9]]
    assert all(a is b for a, b in zip(out[2:], [history[2], history[8], history[9]],
                                      strict=True))
    assert counter.count_messages(out) <= window
    # The summary sees the span in order, the task prompt with it; its TASK is the latest
    # request, answered after the span.
    assert requests[0].messages == tuple(history[1:8])
    assert requests[0].latest_request == "What was my booking reference again?"
    assert requests[0].open_request is None


def test_with_room_for_nothing_else_the_latest_request_comes_with_a_notice(
    counter: cf.TokenCounter,
) -> None:
    history = session_chat()
    pair = [history[0], history[8]]
    dropped_mark = cf.Message(role="user", content="[dropped: ctx_0123456789ab]",
                              source="summary")
    window = counter.count_messages([*pair, dropped_mark]) + 1
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    out = outcome.messages
    assert outcome.details["degradation"] == "request_only"
    assert [m.source for m in out] == [None, "summary", None]
    assert out[0] is history[0] and out[2] is history[8]
    dropped = [t for t in outcome.targets if t.method == "dropped"]
    assert [t.index for t in dropped] == [1, 2, 3, 4, 5, 6, 7, 9]
    # the one line left names the handle that reads every dropped message back
    assert out[1].text == f"[dropped: {dropped[0].handle}]"
    assert {t.handle for t in dropped} == {dropped[0].handle}
    assert counter.count_messages(out) <= window


def test_the_dropped_handle_goes_before_the_nudge(counter: cf.TokenCounter) -> None:
    # Where the short notice with the handle does not fit, the handle alone does (it is
    # what makes the dropped messages recoverable), and the messages it leaves room for stay.
    history = session_chat()
    pair = [history[0], history[8]]
    window = counter.count_messages(pair) + counter.count_text(SHORT_NOTICE) + 30
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    out = outcome.messages
    assert counter.count_messages(out) <= window and cf.validate(out) == []
    notice = next(m for m in out if m.source == "summary")
    dropped = [t for t in outcome.targets if t.method == "dropped"]
    assert dropped and notice.text == f"[dropped: {dropped[0].handle}]"
    assert history[8] in out and len(out) > 3  # more than the request kept
    with_nudge = cf.Message(role="user", content=f"{SHORT_NOTICE}\n\n{notice.text}",
                            source="summary")
    assert counter.count_messages([*out[:1], with_nudge, *out[2:]]) > window


def test_the_summary_task_of_a_chat_is_its_latest_request(counter: cf.TokenCounter) -> None:
    history = session_chat()
    budget = cf.Budget(context_window=counter.count_messages(history))
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter)
    summary = next(m for m in result.messages if m.source == "summary")
    assert "TASK: What was my booking reference again?" in summary.text
    assert "earlier request: Find me a hotel near the river." in summary.text


def test_a_latest_request_inside_the_span_goes_to_the_summary_in_its_place(
    counter: cf.TokenCounter,
) -> None:
    # A second request between the steps compacted: it stays in view, and the summary
    # sees it where it was, so its TASK is that request, not the first.
    first = cf.Message(role="user", content="Read the March reports.")
    second = cf.Message(role="user", content="Now the April ones.")
    history = [first, *tool_step("a", 6_000), *tool_step("b", 6_000), second,
               *tool_step("c", 6_000), *tool_step("d", 6_000)]
    for k in range(3):
        history += tool_step(f"r{k}", 600)
    window = int(counter.count_messages(history) / 0.8)
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert second in outcome.messages
    sent = requests[0].messages
    assert sent[0] is first and second in sent
    assert [history.index(m) for m in sent] == sorted(history.index(m) for m in sent)
    assert any(history.index(m) > history.index(second) for m in sent)
    assert requests[0].latest_request is None


# -- images --------------------------------------------------------------------------


def test_analysed_images_are_stripped_with_one_marker(counter: cf.TokenCounter) -> None:
    shot = cf.ImagePart(url="data:image/png;base64,AAAA", width=1920, height=1080)
    history = [cf.Message(role="user", content="task")]
    history += [cf.Message(role="assistant", tool_calls=(cf.ToolCall("s0", "screenshot"),)),
                cf.Message(role="tool", tool_call_id="s0", name="screenshot",
                           content=(cf.TextPart("page"), shot))]
    for k in range(4):
        history += tool_step(f"r{k}", 300)
    history.append(cf.Message(role="assistant", content="done"))
    window = int(counter.count_messages(history) / 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    stripped = next(m for m in outcome.messages if m.tool_call_id == "s0")
    assert stripped.images == () and stripped.text == f"{MARKER}\npage"
    again, _ = drive(cf.StripImagesPass(), outcome.messages, context_for(counter, window))
    assert again.messages is outcome.messages  # nothing left to strip, marker not repeated


def test_strip_images_pass_keeps_unseen_images(counter: cf.TokenCounter) -> None:
    shot = cf.ImagePart(url="https://x.example/a.png")
    history = [cf.Message(role="user", content="task"),
               cf.Message(role="assistant", tool_calls=(cf.ToolCall("s0", "screenshot"),)),
               cf.Message(role="tool", tool_call_id="s0", content=(shot,))]
    outcome, _ = drive(cf.StripImagesPass(), history, context_for(counter, 10_000))
    assert outcome.messages is history
    seen = [*history, cf.Message(role="assistant", content="I see a login page.")]
    outcome, _ = drive(cf.StripImagesPass(), seen, context_for(counter, 10_000))
    assert outcome.messages[2].text == MARKER and outcome.messages[2].images == ()
    assert outcome.targets[0].method == "image_stripped"


# -- degradation and errors ----------------------------------------------------------


def test_drops_oldest_unprotected_groups_when_truncation_is_not_enough(
    counter: cf.TokenCounter,
) -> None:
    history = [cf.Message(role="user", content="task")]
    for k in range(30):
        history += tool_step(f"c{k}", 2_000)
    tight = cf.ThresholdPolicy(head_tail=HeadTail(0.4, 10_000, 0.4, 10_000))
    window = int(counter.count_messages(history) * 0.5)
    outcome, requests = drive(tight, history, context_for(counter, window))
    dropped = [t.index for t in outcome.targets if t.method == "dropped"]
    assert dropped and dropped == sorted(dropped)
    assert dropped[0] == 1  # oldest first
    assert cf.validate(outcome.messages) == []
    assert counter.count_messages(outcome.messages) <= window
    assert {m.id for m in requests[0].messages} >= {history[i].id for i in dropped}


def test_protections_degrade_in_order_when_they_do_not_fit(counter: cf.TokenCounter) -> None:
    # A huge task, a huge result, a follow-up and another huge result in half their size:
    # the threshold design's protections (the task prompt, the latest request, last 3 of
    # each role) cannot fit, so the policy degrades to cutting the task prompt and the
    # newest group head+tail instead of failing. The latest request stays verbatim.
    history = [cf.Message(role="user", content=words(20_000, "task"))]
    history += tool_step("a", 20_000)
    history += [cf.Message(role="user", content="Now the second one.")]
    history += tool_step("b", 20_000)
    window = counter.count_messages(history) // 2
    outcome, requests = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert cf.validate(outcome.messages) == []
    assert counter.count_messages(outcome.messages) <= window
    assert outcome.details["degradation"] == "cut_to_fit"
    ids = [m.id for m in outcome.messages]
    assert history[0].id in ids and history[-2].id in ids and history[-1].id in ids
    first = next(m for m in outcome.messages if m.id == history[0].id)
    assert first.text.startswith("task lorem") and "TRUNCATED" in first.text
    assert history[3] in outcome.messages  # the latest request, the same object
    assert history[0] in requests[0].messages  # its full text goes to the summary


def test_a_task_that_is_the_latest_request_stays_verbatim(counter: cf.TokenCounter) -> None:
    # One huge request and two huge results in half their size: the request is the latest
    # one and fits the budget, so the newest group is cut to make room, never the request.
    history = [cf.Message(role="user", content=words(20_000, "task"))]
    history += tool_step("a", 20_000) + tool_step("b", 20_000)
    window = counter.count_messages(history) // 2
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert counter.count_messages(outcome.messages) <= window
    assert outcome.details["degradation"] == "cut_to_fit"
    assert outcome.messages[0] is history[0]
    result = next(m for m in outcome.messages if m.id == history[-1].id)
    assert "TRUNCATED" in result.text


def test_recency_is_relaxed_before_errors_are_touched(counter: cf.TokenCounter) -> None:
    history = [cf.Message(role="user", content="Read them all.")]
    history += tool_step("e", 3_000, error=True)
    for k in range(3):
        history += tool_step(f"c{k}", 3_000)
    error = history[2]
    window = int((counter.count_messages(history) - counter.count_message(history[4])) * 0.8)
    outcome, _ = drive(cf.ThresholdPolicy(summary_max_share=0.05), history,
                       context_for(counter, window))
    assert counter.count_messages(outcome.messages) <= window
    assert outcome.details["degradation"].startswith("protect_recent=")
    assert error in outcome.messages  # verbatim: recency went first
    assert history[-1] in outcome.messages  # the newest group is never dropped


def test_the_short_notice_comes_with_the_handle_of_what_was_dropped(
    counter: cf.TokenCounter,
) -> None:
    history = [cf.Message(role="system", content=words(2_000, "sys")),
               cf.Message(role="user", content="Rebook my flight.")]
    for k in range(6):
        history += [cf.Message(role="assistant", content=words(800, f"a{k}")),
                    cf.Message(role="user", content=words(800, f"u{k}"))]
    history.append(cf.Message(role="user", content="Go on."))
    floor = [history[0], history[1], history[-1]]
    short = cf.Message(role="user", content=SHORT_NOTICE + "\n\n[dropped: ctx_0123456789ab]",
                       source="summary")
    seed = cf.Message(role="user", content=COMPACTION_NOTICE, source="summary")
    window = counter.count_messages([*floor, short]) + 5
    # the threshold design's notice cannot fit
    assert counter.count_messages([*floor, seed]) > window
    outcome, _ = drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert counter.count_messages(outcome.messages) <= window
    assert cf.validate(outcome.messages) == []
    notice = next(m for m in outcome.messages if m.source == "summary")
    dropped = [t for t in outcome.targets if t.method == "dropped"]
    assert notice.text == f"{SHORT_NOTICE}\n\n[dropped: {dropped[0].handle}]"
    assert history[-1] in outcome.messages and history[1] in outcome.messages


def test_budget_error_only_when_the_stated_minimum_cannot_fit(counter: cf.TokenCounter) -> None:
    history = [cf.Message(role="system", content=words(4_000, "sys")),
               cf.Message(role="user", content=words(20_000, "task"))]
    history += tool_step("a", 20_000) + tool_step("b", 20_000)
    window = counter.count_messages(history[:1]) + 12  # the short notice alone takes more
    assert counter.count_text(SHORT_NOTICE) > 12
    with pytest.raises(cf.BudgetExceededError, match="cut head\\+tail to their labels") as info:
        drive(cf.ThresholdPolicy(), history, context_for(counter, window))
    assert info.value.needed > info.value.available == window


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protect_recent": -1}, "ThresholdPolicy.protect_recent must be an int >= 0, got -1"),
        ({"min_compaction_chars": 1.5},
         "ThresholdPolicy.min_compaction_chars must be an int >= 0, got 1.5"),
        ({"summary_max_share": 1.5},
         "ThresholdPolicy.summary_max_share must be a number in (0, 1], got 1.5"),
        ({"summary_max_tokens": 0},
         "ThresholdPolicy.summary_max_tokens must be an int >= 1, got 0"),
        ({"nudge": "  "}, "ThresholdPolicy.nudge must be a non-blank string, got '  '"),
        ({"head_tail": (0.1, 10, 0.1, 10)},
         "ThresholdPolicy.head_tail must be a HeadTail, got (0.1, 10, 0.1, 10)"),
    ],
)
def test_configuration_is_validated(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(
            ")", r"\)").replace("[", r"\[")):
        cf.ThresholdPolicy(**kwargs)  # type: ignore[arg-type]


def test_constants_are_configurable(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    window = int(counter.count_messages(history) / 0.8)
    policy = cf.ThresholdPolicy(protect_recent=1, head_tail=HeadTail(0.05, 100, 0.05, 100))
    outcome, _ = drive(policy, history, context_for(counter, window))
    truncated = {t.index for t in outcome.targets if t.method == "truncated"}
    assert len(history) - 1 not in truncated and len(history) - 3 in truncated
    new = next(m for m in outcome.messages if m.id == history[len(history) - 3].id)
    assert "showing first 100 + last 100 chars" in new.text


# -- properties ----------------------------------------------------------------------


def task_and_latest(messages: Sequence[cf.Message]) -> list[cf.Message]:
    """The task prompt (the first real prompt, else the first user message) and the latest
    request (the latest real prompt), computed independently of the policy."""
    users = [m for m in messages if m.role == "user"]
    real = [m for m in users if m.source not in NON_PROMPT_SOURCES]
    return [*(real or users)[:1], *real[-1:]]


def pair_fits(history: Sequence[cf.Message], budget: cf.Budget,
              counter: cf.TokenCounter) -> cf.Message | None:
    """The latest request when it fits the budget beside the system messages."""
    history, _ = cf.repair(history)  # what the policy saw
    real = [m for m in history if m.role == "user" and m.source not in NON_PROMPT_SOURCES]
    if not real:
        return None
    pair = [*(m for m in history if m.role == "system"), real[-1]]
    return real[-1] if counter.count_messages(pair) <= budget.input_budget else None


def protected_ids(messages: Sequence[cf.Message], recent: int = 3) -> set[str]:
    """The threshold design's protections, computed independently of the policy."""
    ids = {m.id for m in task_and_latest(messages)}
    for role in ("tool", "assistant", "user"):
        ids.update(m.id for m in [m for m in messages if m.role == role][-recent:])
    ids.update(m.id for m in messages if m.is_error)
    return ids


def newest_group(messages: Sequence[cf.Message]) -> list[cf.Message]:
    return list(split_groups(messages)[-1].messages)


def bare_floor(history: Sequence[cf.Message]) -> list[cf.Message]:
    """The stated minimum when the latest request does not fit beside the system messages:
    system messages, the task prompt, the latest request and the newest group cut to their
    labels, and the short notice."""
    history, _ = cf.repair(history)  # what the policy saw
    keep = {m.id for m in [*newest_group(history), *task_and_latest(history)]}
    floor = [m if m.role == "system" else shrink_message(m, HeadTail(), max_chars=0)
             for m in history if m.role == "system" or m.id in keep]
    return [*floor, cf.Message(role="user", content=SHORT_NOTICE, source="summary")]


@settings(max_examples=max(200, settings.default.max_examples))  # central invariant
@given(history=histories(max_turns=10), share=st.floats(0.6, 2.5), force=st.booleans(),
       known=st.none() | st.floats(0.5, 1.2))
def test_threshold_output_is_valid_within_budget_and_keeps_the_protected(
    counter: cf.TokenCounter, history: list[cf.Message], share: float, force: bool,
    known: float | None,
) -> None:
    size = counter.count_messages(history)
    budget = cf.Budget(context_window=max(50, int(size * share)))
    known_tokens = None if known is None else int(size * known)
    # A window that holds any request: then a pass makes one summary call (the one summary).
    summarizer = ScriptedSummarizer(default="TASK: t\nPROGRESS: p\nDATA: KT-1234",
                                       max_input_tokens=10**9)
    try:
        result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                            summarizer=summarizer, force=force, known_tokens=known_tokens)
    except cf.BudgetExceededError:
        assert pair_fits(history, budget, counter) is None
        assert counter.count_messages(bare_floor(history)) > budget.input_budget
        event("budget exceeded")
        return
    degradation = result.report.details.get("degradation", "none")
    event(f"method {result.report.method}, degradation {degradation}")
    assert_valid_within(result.messages, budget, counter)
    assert_keeps_the_requests(history, result, budget, counter)
    if result.report.method == "floor":
        return
    out = {id(m) for m in result.messages}
    if result.report.method != "none" and degradation == "none":
        for m in history:
            if m.id in protected_ids(history):
                assert id(m) in out, f"protected {m.role} message changed or dropped"
    assert summarizer.calls <= 1


@given(history=histories(max_turns=10), share=st.floats(0.3, 1.3))
def test_protections_degrade_only_when_they_do_not_fit(
    counter: cf.TokenCounter, history: list[cf.Message], share: float
) -> None:
    # Sufficient condition for the threshold design's behaviour: when the protected messages alone
    # (their groups hold nothing else), plus generous room for the summary message, fit
    # the target, nothing protected is touched.
    keep = protected_ids(history)
    groups = [g for g in split_groups(history) if any(m.id in keep for m in g.messages)]
    if any(m.id not in keep and m.role != "system" for g in groups for m in g.messages):
        return
    budget = cf.Budget(context_window=max(50, int(counter.count_messages(history) * share)))
    room = (counter.count_text(COMPACTION_NOTICE) + counter.count_text(CONTINUATION_NUDGE)
            + 120 + min(2_000, int(budget.target_tokens * 0.2)))
    floor = [m for m in history if m.role == "system" or m.id in keep]
    if counter.count_messages(floor) + room > budget.target_tokens:
        return
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                        summarizer=ScriptedSummarizer(default="TASK: t\nDATA: KT-1"))
    if result.report.method != "none":
        assert result.report.details.get("degradation", "none") == "none"
        kept = {id(m) for m in result.messages}
        assert all(id(m) in kept for m in history if m.id in keep)


@settings(max_examples=max(200, settings.default.max_examples))  # central invariant
@given(history=histories(max_turns=8), share=st.floats(0.02, 0.6), force=st.booleans())
def test_tiny_budgets_degrade_or_fail_only_below_the_stated_minimum(
    counter: cf.TokenCounter, history: list[cf.Message], share: float, force: bool
) -> None:
    budget = cf.Budget(context_window=max(20, int(counter.count_messages(history) * share)))
    try:
        result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                            summarizer=ScriptedSummarizer(default="TASK: t\nDATA: KT-1"),
                            force=force)
    except cf.BudgetExceededError as exc:
        assert pair_fits(history, budget, counter) is None
        assert counter.count_messages(bare_floor(history)) > budget.input_budget
        assert exc.needed > exc.available
        event("budget exceeded")
        return
    event(f"degradation {result.report.details.get('degradation', 'none')}")
    assert_valid_within(result.messages, budget, counter)
    assert_keeps_the_requests(history, result, budget, counter)


def assert_keeps_the_requests(
    history: Sequence[cf.Message], result: cf.CompactionResult, budget: cf.Budget,
    counter: cf.TokenCounter,
) -> None:
    """The latest request, verbatim, whenever it fits beside the system messages; the task
    prompt and the newest group (cut at most) unless only that pair had room."""
    latest = pair_fits(history, budget, counter)
    if latest is not None:
        assert any(m is latest for m in result.messages), "the latest request was cut or left out"
    if result.report.method == "floor":  # the policy refused; the engine's floor answered
        return
    if result.report.details.get("degradation") == "request_only":
        assert latest is not None
        return
    out_ids = {m.id for m in result.messages}
    assert {m.id for m in newest_group(history)} <= out_ids
    assert {m.id for m in task_and_latest(history)} <= out_ids


@given(history=histories(max_turns=6, imperfect=True), share=st.floats(0.3, 1.2))
def test_threshold_repairs_imperfect_histories(
    counter: cf.TokenCounter, history: list[cf.Message], share: float
) -> None:
    size = counter.count_messages(history)
    budget = cf.Budget(context_window=max(50, int(size * share)))
    try:
        result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                            summarizer=ScriptedSummarizer(default="TASK: t"))
    except cf.BudgetExceededError as exc:
        assert exc.needed > exc.available
        return
    assert_valid_within(result.messages, budget, counter)


async def test_async_driver_gives_the_same_result(counter: cf.TokenCounter) -> None:
    history = email_history(8)
    budget = cf.Budget(context_window=int(counter.count_messages(history) / 0.8))
    sync = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                      summarizer=ScriptedSummarizer(default="TASK: t"))
    result = await cf.acompact(history, policy=cf.ThresholdPolicy(), budget=budget,
                               counter=counter,
                               summarizer=ScriptedSummarizer(default="TASK: t"))
    assert [m.text for m in result.messages] == [m.text for m in sync.messages]
    assert result.report.targets == sync.report.targets


def test_a_multi_turn_summary_sits_before_the_current_turn(counter: cf.TokenCounter) -> None:
    # Three earlier turns, then the current instruction with a tool step under way: the
    # summary of the earlier turns goes before the current instruction, and its TASK is the
    # current (unanswered) instruction, never the first turn's.
    history = [cf.Message(role="system", content="You help with travel.")]
    for k in range(3):
        history += [cf.Message(role="user", content=f"Question {k}: " + words(3_000, f"q{k}")),
                    cf.Message(role="assistant", content=f"Answer {k}: " + words(3_000, f"a{k}"))]
    current = cf.Message(role="user", content="Now book flight HAT001 for Ana.")
    history += [current, *tool_step("c9", 400, name="search")]
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.9))
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter)
    out = result.messages
    summary = next(i for i, m in enumerate(out) if m.source == "summary")
    assert summary < out.index(current)
    assert "TASK: Now book flight HAT001 for Ana." in out[summary].text


def test_a_cut_summary_leaves_out_the_headings_of_the_sections_it_emptied() -> None:
    from contextfold._policies.threshold_summary import fit_sections

    text = ("TASK: refund the order\nPROGRESS:\n1. read it\n2. checked it\nREMAINING:\n- refund\n"
            "DATA:\n" + "\n".join(f"ORD-{k}" for k in range(40)) + "\nDECISIONS:\n- none\n"
            "ERRORS:\n- none")
    cut = fit_sections(text, lambda t: len(t) <= 300)
    assert cut is not None and len(cut) <= 300
    headings = [ln.split(":")[0] for ln in cut.splitlines() if ln.endswith(":") or
                ln.startswith("TASK:")]
    assert headings == ["TASK", "REMAINING", "DATA"]  # the emptied ones went, these stay
    assert "ORD-39" in cut or "ORD-0" in cut
    assert fit_sections(text, lambda t: True) == text  # a summary that fits keeps them all


def test_a_cut_summary_gives_up_data_value_by_value_and_keeps_the_rest_side_by_side() -> None:
    from contextfold._policies.threshold_summary import fit_sections

    codes = [f"ORD-{k}" for k in range(60)]
    text = ("TASK: refund the order\nREMAINING:\n- refund\nDATA:\n"
            + " ".join(codes[:30]) + "\n" + " ".join(codes[30:]))
    cut = fit_sections(text, lambda t: len(t) <= 260,
                       weight=lambda line: -int(line.removeprefix("ORD-")))  # ORD-59 lightest
    assert cut is not None and len(cut) <= 260
    data = cut.split("DATA:\n", 1)[1].splitlines()[:-1]  # the omitted-lines note last
    kept = [v for line in data for v in line.split()]
    assert kept == codes[: len(kept)] and 10 < len(kept) < 60  # the lightest went, one by one
    assert len(data) < len(kept)  # what is left still shares lines


@pytest.mark.parametrize("room", [700, 4_000])
def test_the_short_nudge_goes_first_where_the_long_one_would_crowd_a_small_room(
    counter: cf.TokenCounter, room: int,
) -> None:
    from contextfold._policies.threshold import SHORT_NUDGE

    history = [cf.Message(role="system", content=words(6_000, "sys")),
               cf.Message(role="user", content="Look up the orders ORD-1 to ORD-40.")]
    for k in range(40):
        history += tool_step(f"c{k}", 600)
    history.append(cf.Message(role="user", content="Which one shipped?"))
    system = counter.count_messages(history[:1])
    budget = cf.Budget(context_window=system + room + 4_096, output_reserve=4_096)
    result = cf.compact(history, policy=cf.ThresholdPolicy(ledger=None), budget=budget,
                        counter=counter)
    summary = next(m for m in result.messages if m.source == "summary")
    assert_valid_within(result.messages, budget, counter)
    if room < 20 * counter.count_text(CONTINUATION_NUDGE):  # over a twentieth of the room
        assert summary.text.endswith(SHORT_NUDGE)
    else:
        assert summary.text.endswith(CONTINUATION_NUDGE)
