"""Atomic groups, turns and tool loops: the units policies keep or drop whole."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._messages.structure import is_prompt, leading_system_count
from contextfold.policy import split_groups, split_turns, tool_loops
from contextfold.testing import histories

SYS = cf.Message(role="system", content="rules")
USER = cf.Message(role="user", content="go")
ANSWER = cf.Message(role="assistant", content="done")


def call(*ids: str) -> cf.Message:
    return cf.Message(role="assistant", tool_calls=tuple(cf.ToolCall(i, "f") for i in ids))


def result(call_id: str) -> cf.Message:
    return cf.Message(role="tool", content="r", tool_call_id=call_id)


def test_groups_of_a_small_history() -> None:
    seq = [SYS, USER, call("a", "b"), result("a"), result("b"), ANSWER, USER]
    groups = split_groups(seq)
    assert [(g.start, g.end) for g in groups] == [(0, 1), (1, 2), (2, 5), (5, 6), (6, 7)]
    loop = groups[2]
    assert loop.is_tool_loop and loop.head is seq[2] and len(loop) == 3
    assert loop.messages == tuple(seq[2:5])
    assert not groups[1].is_tool_loop
    assert split_groups(seq, start=2)[0].start == 2


def test_orphan_result_is_a_group_of_its_own() -> None:
    seq = [USER, result("x"), ANSWER]
    assert [(g.start, g.end) for g in split_groups(seq)] == [(0, 1), (1, 2), (2, 3)]


def test_turns_start_at_user_prompts() -> None:
    seq = [SYS, USER, call("a"), result("a"), ANSWER, USER, ANSWER]
    turns = split_turns(seq)
    assert [(t.start, t.end) for t in turns] == [(1, 5), (5, 7)]
    assert turns[0].prompt is seq[1]
    assert [len(t.groups) for t in turns] == [3, 2]


def test_a_greeting_before_the_first_prompt_is_a_turn_without_prompt() -> None:
    turns = split_turns([SYS, ANSWER, USER, ANSWER])
    assert [(t.start, t.end) for t in turns] == [(1, 2), (2, 4)]
    assert turns[0].prompt is None and turns[1].prompt is not None


def test_tool_loops_and_system_count() -> None:
    seq = [SYS, SYS, USER, call("a"), result("a"), call("b"), result("b"), ANSWER]
    assert [(g.start, g.end) for g in tool_loops(seq)] == [(3, 5), (5, 7)]
    assert leading_system_count(seq) == 2
    assert leading_system_count([USER, SYS]) == 0
    assert split_turns([SYS]) == []


@given(histories(max_turns=6, max_tool_chars=300))
def test_groups_partition_and_never_split_a_pair(history: list[cf.Message]) -> None:
    groups = split_groups(history)
    assert [m for g in groups for m in g.messages] == history
    assert all(a.end == b.start for a, b in pairwise(groups))
    for g in groups:
        if g.is_tool_loop:
            calls = {c.id for c in g.head.tool_calls}
            results = [m.tool_call_id for m in g.messages[1:]]
            assert all(m.role == "tool" for m in g.messages[1:])
            assert sorted(results) == sorted(calls)  # every call answered inside its group
        else:
            assert len(g) == 1 and g.head.role != "tool"
    assert tool_loops(history) == [g for g in groups if g.is_tool_loop]


@given(histories(max_turns=6, max_tool_chars=300))
def test_turns_cover_the_conversation(history: list[cf.Message]) -> None:
    turns = split_turns(history)
    lead = leading_system_count(history)
    assert [m for t in turns for g in t.groups for m in g.messages] == history[lead:]
    assert [t.start for t in turns] == [i for i, m in enumerate(history) if is_prompt(m)]
    assert all(t.prompt is not None and t.prompt.role == "user" for t in turns)
    assert all(a.end == b.start for a, b in pairwise(turns))


@given(histories(imperfect=True, max_turns=4, max_tool_chars=300))
def test_structure_of_imperfect_histories_still_partitions(history: list[cf.Message]) -> None:
    groups = split_groups(history)
    assert [m for g in groups for m in g.messages] == history
    turns = split_turns(history)
    assert sum(t.end - t.start for t in turns) == len(history) - leading_system_count(history)


@given(histories(max_turns=4, max_tool_chars=200, images=False, imperfect=True),
       st.integers(0, 6))
def test_the_newest_group_is_the_last_of_split_groups(
    history: list[cf.Message], start: int,
) -> None:
    from contextfold._messages.structure import newest_group

    groups = split_groups(history, start)
    assert newest_group(history, start) == (groups[-1] if groups else None)
