"""The long-chat generator: deterministic, valid, facts planted early and asked late."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import chats, generate_chat


def test_the_same_seed_gives_the_same_chat_and_another_seed_another() -> None:
    a, b, c = generate_chat(7), generate_chat(7), generate_chat(8)
    assert a.messages == b.messages and [m.id for m in a.messages] == [m.id for m in b.messages]
    assert a.facts == b.facts
    assert a.messages != c.messages


def test_a_chat_is_plain_multi_session_conversation() -> None:
    chat = generate_chat(0, sessions=6)
    assert cf.validate(chat.messages) == []
    assert chat.messages[0].role == "system"
    assert not any(m.tool_calls or m.role == "tool" for m in chat.messages)
    markers = [m for m in chat.messages if m.source == "session"]
    assert len(markers) == 6 and all(m.role == "user" for m in markers)
    assert all(m.text.startswith(f"[Session {k} started: ") for k, m in enumerate(markers, 1))


@given(seed=st.integers(0, 10_000), sessions=st.integers(3, 14), facts=st.integers(0, 16))
def test_facts_are_planted_then_corrected_then_asked_for_their_latest_value(
    seed: int, sessions: int, facts: int
) -> None:
    chat = generate_chat(seed, sessions=sessions, facts=facts)
    messages = chat.messages
    assert len(chat.facts) == facts
    values = [v for f in chat.facts for v in (*f.earlier, f.value)]
    # every value is unique and no value holds another: "in the context" is a substring test
    assert all(a == b or a not in b for a in values for b in values)
    for f in chat.facts:
        assert f.asked_at is not None
        question, answer = messages[f.asked_at - 1], messages[f.asked_at]
        assert question.role == "user" and f.key in question.text
        assert f.value not in question.text and answer.role == "assistant"
        assert f.value in answer.text
        first = messages[f.planted_at]
        assert first.role == "user" and (f.earlier or (f.value,))[0] in first.text
        # each value first appears in a user message, in order, all before the question
        seen = [next(i for i, m in enumerate(messages) if v in m.text)
                for v in (*f.earlier, f.value)]
        assert seen == sorted(seen) and seen[-1] < f.asked_at - 1
        assert all(messages[i].role == "user" for i in seen)
    assert chat.questions == {f.asked_at: (f.value,) for f in chat.facts}


def test_questions_come_in_the_last_sessions_and_facts_in_the_first() -> None:
    chat = generate_chat(3, sessions=12)
    starts = [i for i, m in enumerate(chat.messages) if m.source == "session"]
    session_of = {i: sum(1 for s in starts if s <= i) for i in range(len(chat.messages))}
    assert all(session_of[f.planted_at] <= 4 for f in chat.facts)
    assert all(f.asked_at is not None and session_of[f.asked_at] >= 10 for f in chat.facts)
    assert any(f.earlier for f in chat.facts)


@pytest.mark.parametrize("kwargs", [{"sessions": 2}, {"facts": 17}, {"exchanges": (0, 3)},
                                    {"corrected": 1.5}])
def test_arguments_out_of_range_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        generate_chat(0, **kwargs)  # type: ignore[arg-type]


@given(chats(max_sessions=5))
def test_the_strategy_draws_valid_chats(messages: list[cf.Message]) -> None:
    assert cf.validate(messages) == []
    assert messages[0].role == "system" and messages[-1].role == "assistant"
