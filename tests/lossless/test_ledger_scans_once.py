"""What the ledger and the identifier scans read once (cached on the message, scored only
for what the lines show) equals what reading it again gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._identifiers.salience import (
    identifiers_and_names,
    salience,
    written_in,
    written_in_calls,
    written_in_each_call,
)
from contextfold._lossless.ledger import _calls_before
from contextfold.testing import histories


@given(histories(max_turns=5, max_tool_chars=2_000), st.data())
def test_scoring_some_identifiers_scores_them_as_among_all(
    messages: list[cf.Message], data: st.DataObject
) -> None:
    every = salience(messages)
    known = sorted({v for m in messages for v in (*identifiers_and_names(m),
                                                  *written_in_calls(m))})
    some = set(data.draw(st.lists(st.sampled_from(known), unique=True))) if known else set()
    some.add("not-an-identifier-of-the-history")
    assert salience(messages, some) == {v: s for v, s in every.items() if v in some}


@given(histories(max_turns=5, max_tool_chars=2_000))
def test_each_call_wrote_what_its_arguments_hold(messages: list[cf.Message]) -> None:
    for m in messages:
        each = written_in_each_call(m)
        assert each == tuple(written_in(call.arguments) for call in m.tool_calls)
        assert written_in_calls(m) == tuple(dict.fromkeys(v for w in each for v in w))


def _nearest_call_scanning_back(messages: list[cf.Message], i: int) -> int | None:
    call_id = messages[i].tool_call_id
    return next((k for k in range(i - 1, -1, -1)
                 if any(c.id == call_id for c in messages[k].tool_calls)), None)


@given(histories(max_turns=5, max_tool_chars=200), st.integers(0, 3))
def test_a_result_finds_the_nearest_earlier_call(messages: list[cf.Message],
                                                 repeats: int) -> None:
    # Histories joined end to end repeat their call ids: the nearest earlier call wins.
    history = messages * (repeats + 1)
    wanted = set(range(0, len(history), 2))
    found = _calls_before(history, wanted)
    for i in wanted:
        if history[i].role == "tool":
            assert found.get(i) == _nearest_call_scanning_back(history, i)
        else:
            assert i not in found
