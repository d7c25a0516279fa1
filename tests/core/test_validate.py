"""validate() names every format problem; repair() fixes them and keeps what was not broken.

Also checks the history generators of ``contextfold.testing`` that every property test
relies on: valid by default, defective on request, deterministic when seeded.
"""

from __future__ import annotations

import operator

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import DEFECTS, assert_valid_within, generate_history, histories

SYS = cf.Message(role="system", content="be brief")
USER = cf.Message(role="user", content="hi")
ANSWER = cf.Message(role="assistant", content="hello")


def call(*ids: str) -> cf.Message:
    return cf.Message(role="assistant", tool_calls=tuple(cf.ToolCall(i, "f") for i in ids))


def result(call_id: str | None, text: str = "ok") -> cf.Message:
    return cf.Message(role="tool", content=text, tool_call_id=call_id)


# -- one minimal example per problem code --------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], [("empty", -1)]),
        ([USER, SYS], [("system_not_first", 1)]),
        ([SYS], [("no_user", -1)]),
        ([SYS, ANSWER, USER], [("assistant_before_user", 1)]),
        ([USER, result("x")], [("orphan_tool_result", 1)]),
        ([USER, ANSWER, result("x")], [("orphan_tool_result", 2)]),
        ([USER, call("a")], [("unanswered_call", 1)]),
        ([USER, call("a", "b"), result("a"), USER], [("unanswered_call", 1)]),
        ([USER, call("a"), result("a"), call("a"), result("a")], [("duplicate_call_id", 3)]),
        ([USER, call("a"), result(None)], [("tool_without_id", 2), ("unanswered_call", 1)]),
        ([USER, call("a"), USER, result("a")],
         [("unanswered_call", 1), ("orphan_tool_result", 3)]),
    ],
)
def test_each_problem_code(messages: list[cf.Message], expected: list[tuple[str, int]]) -> None:
    problems = cf.validate(messages)
    assert [(p.code, p.index) for p in problems] == expected
    assert all(p.detail for p in problems)


def test_valid_sequences_have_no_problems() -> None:
    seq = [SYS, USER, call("a", "b"), result("b"), result("a"), ANSWER]
    assert cf.validate(seq) == []
    assert cf.validate([USER]) == []
    assert cf.validate([cf.Message(role="developer", content="d"), USER]) == []


def test_problem_str_names_the_place() -> None:
    (problem,) = cf.validate([USER, result("x")])
    assert str(problem).startswith("message 1: orphan_tool_result")


# -- repair: explicit fixes ----------------------------------------------------------------


def test_repair_moves_a_separated_result_back_behind_its_call() -> None:
    interjected = cf.Message(role="user", content="[broadcast] status?", source="broadcast")
    seq = [USER, call("a", "b"), result("a"), interjected, result("b"), ANSWER]
    fixed, notes = cf.repair(seq)
    assert fixed == [USER, seq[1], seq[2], seq[4], interjected, ANSWER]
    assert notes == ["moved the result of call 'b' behind its call"]


def test_repair_answers_a_dangling_call_as_interrupted() -> None:
    fixed, notes = cf.repair([USER, call("a")])
    assert cf.validate(fixed) == []
    assert fixed[2].tool_call_id == "a" and fixed[2].is_error and "interrupted" in fixed[2].text
    assert notes == ["answered dangling call 'a' with an interrupted result"]


def test_repair_moves_system_messages_to_the_front() -> None:
    late = cf.Message(role="system", content="reminder")
    fixed, notes = cf.repair([SYS, USER, late, ANSWER])
    assert fixed == [SYS, late, USER, ANSWER]
    assert notes == ["moved 1 system message(s) to the front"]


def test_repair_drops_orphans_and_a_greeting() -> None:
    greeting = cf.Message(role="assistant", content="Hello! How can I help?")
    fixed, notes = cf.repair([SYS, greeting, USER, result("gone"), ANSWER])
    assert fixed == [SYS, USER, ANSWER]
    assert len(notes) == 2


def test_repair_renames_a_reused_call_id_and_its_result() -> None:
    seq = [USER, call("a"), result("a", "1"), call("a"), result("a", "2")]
    fixed, notes = cf.repair(seq)
    assert cf.validate(fixed) == []
    assert [m.text for m in fixed] == ["hi", "", "1", "", "2"]
    assert fixed[3].tool_calls[0].id == fixed[4].tool_call_id == "a_2"
    assert [m.id for m in fixed] == [m.id for m in seq]
    assert len(notes) == 1


def test_repair_without_a_user_says_so() -> None:
    fixed, notes = cf.repair([SYS])
    assert fixed == [SYS]
    assert notes == ["no user message: the sequence still needs a prompt"]


# -- repair: properties --------------------------------------------------------------------


def _broken_ids(messages: list[cf.Message]) -> set[str]:
    """Messages repair may drop: results of no call at all, and greetings before any user."""
    call_ids = {c.id for m in messages for c in m.tool_calls}
    broken = {m.id for m in messages if m.role == "tool" and m.tool_call_id not in call_ids}
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    for m in messages[:first_user]:
        if m.role == "assistant":
            broken.add(m.id)
            answered = {c.id for c in m.tool_calls}
            broken |= {r.id for r in messages if r.role == "tool" and r.tool_call_id in answered}
    return broken


@given(histories(imperfect=True, max_turns=5, max_tool_chars=300))
def test_repair_fixes_every_imperfect_history(history: list[cf.Message]) -> None:
    before = list(history)
    fingerprints = [m.fingerprint for m in history]
    assert cf.validate(history) != []
    fixed, notes = cf.repair(history)
    assert cf.validate(fixed) == []
    assert notes
    # The input is untouched.
    assert history == before and [m.fingerprint for m in history] == fingerprints
    # Every message that was not broken is kept, and non-tool messages keep their order.
    kept = {m.id for m in fixed}
    assert {m.id for m in history} - _broken_ids(history) <= kept
    order = [m.id for m in history if m.role not in ("tool", "system", "developer")]
    assert [m.id for m in fixed if m.role not in ("tool", "system", "developer")] == [
        i for i in order if i in kept]
    # Repair is idempotent.
    assert cf.repair(fixed) == (fixed, [])


@given(histories(max_turns=5, max_tool_chars=300))
def test_repair_leaves_valid_histories_alone(history: list[cf.Message]) -> None:
    assert cf.validate(history) == []
    fixed, notes = cf.repair(history)
    assert fixed == history and notes == []
    assert all(a is b for a, b in zip(fixed, history, strict=True))


# -- the generators of contextfold.testing -------------------------------------------------


@given(histories(max_turns=4, max_tool_chars=2000))
def test_histories_are_valid_by_default(history: list[cf.Message]) -> None:
    assert cf.validate(history) == []
    assert all(len(m.text) <= 2000 + 200 for m in history if m.role == "tool")


def test_histories_cover_what_policies_must_handle() -> None:
    """Across generated histories, every feature the docs promise shows up."""
    seen: set[str] = set()

    @settings(max_examples=100, phases=[Phase.generate], derandomize=True, database=None)
    @given(histories(max_turns=6))
    def collect(history: list[cf.Message]) -> None:
        for m in history:
            seen.update(name for name, hit in [
                ("parallel", len(m.tool_calls) > 1), ("error", m.is_error),
                ("image", bool(m.images)), ("reasoning", bool(m.reasoning)),
                ("broadcast", m.source == "broadcast"), ("system", m.role == "system"),
                ("huge", len(m.text) > 5000), ("many turns", sum(
                    x.role == "user" for x in history) >= 5),
            ] if hit)

    collect()
    assert seen == {"parallel", "error", "image", "reasoning", "broadcast", "system", "huge",
                    "many turns"}


@given(histories(imperfect=True, max_turns=3))
def test_imperfect_histories_have_a_defect(history: list[cf.Message]) -> None:
    assert cf.validate(history)


def test_defects_are_documented() -> None:
    assert set(DEFECTS) == {"interjected", "unanswered", "greeting", "stray_system", "orphan"}


@pytest.mark.parametrize(("turns", "tools", "parallel"), [(1, 0, 1), (10, 2, 1), (25, 3, 2)])
def test_generate_history_has_the_promised_size(turns: int, tools: int, parallel: int) -> None:
    h = generate_history(7, turns=turns, tools_per_turn=tools, parallel_calls=parallel)
    assert len(h) == 1 + turns * (2 + tools * (1 + parallel))
    assert cf.validate(h) == []


def test_generate_history_is_deterministic() -> None:
    a = generate_history(3, turns=20, images=True)
    b = generate_history(3, turns=20, images=True)
    assert a == b and [m.id for m in a] == [m.id for m in b]
    assert generate_history(4, turns=20) != a


@pytest.mark.parametrize("seed", range(5))
def test_generate_history_imperfect_repairs(seed: int) -> None:
    h = generate_history(seed, turns=8, imperfect=True)
    assert cf.validate(h)
    assert cf.validate(cf.repair(h)[0]) == []


def test_assert_valid_within(counter: cf.TokenCounter) -> None:
    h = generate_history(1, turns=3)
    used = counter.count_messages(h)
    assert_valid_within(h, used, counter)
    assert_valid_within(h, cf.Budget(context_window=used + 10, output_reserve=10), counter)
    with pytest.raises(AssertionError, match="over budget"):
        assert_valid_within(h, used + 5, counter, fixed_tokens=6)
    with pytest.raises(AssertionError, match="unanswered_call"):
        assert_valid_within([*h, call("dangling")], 10**9, counter)


@given(histories(imperfect=True, max_turns=4, max_tool_chars=300),
       st.lists(st.integers(0, 40), max_size=6), st.booleans())
def test_a_validation_fed_as_the_history_grows_finds_what_validate_finds(
    history: list[cf.Message], cuts: list[int], unprompted: bool,
) -> None:
    from contextfold._messages.validation import NO_USER_NOTE, Validation

    if unprompted:  # an autonomous agent's history: no user message at all
        history = [m for m in history if m.role != "user"]
    scan = Validation()
    for end in [*sorted(min(c, len(history)) for c in cuts), len(history)]:
        part = history[:end]
        assert scan.feed(part).problems() == cf.validate(part)
        if scan.unprompted_only():  # repair then gives back the same messages, one note
            fixed, notes = cf.repair(part)
            assert len(fixed) == len(part) and all(map(operator.is_, fixed, part))
            assert notes == [NO_USER_NOTE]
