"""The model-call loop: overflow recovery below the stated limit, typed errors, calibration,
idle, persistence with stable identity, conversation keys. The framework's message type
here is a plain dict (OpenAI's), so the loop is exercised without any framework."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import contextfold as cf
from contextfold._engine.calls import (
    CallLoop,
    Conversations,
    Usage,
    View,
    opening_key,
    stable_id,
)
from contextfold.errors import ContextOverflowError, NoProgressError
from contextfold.policy import Policy


class Overflow(Exception):
    """An OpenAI-like 400 with the real message text."""

    code = "context_length_exceeded"
    status_code = 400


def openai_overflow(limit: int, prompt: int) -> Overflow:
    return Overflow(
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {prompt} tokens. Please reduce the length of the messages."
    )


def to_core(raw: dict[str, Any], position: int) -> cf.Message:
    message = cf.from_openai([raw])[0]
    return replace(message, id=raw["id"]) if "id" in raw else replace(
        message, id=stable_id(position, message))


def from_core(message: cf.Message) -> dict[str, Any]:
    return cf.to_openai([message])[0]


def history(n: int, size: int = 400) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You read documents."},
                                 {"role": "user", "content": "Read every document."}]
    for k in range(n):
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "read", "arguments": f'{{"n": {k}}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"c{k}",
                    "content": f"document {k} CODE-{k:04d} " + "lorem ipsum dolor " * size})
    return out


class Model:
    """A provider with a real window: counts like our counter times ``ratio``."""

    def __init__(self, counter: cf.TokenCounter, window: int, ratio: float = 1.0) -> None:
        self.counter, self.window, self.ratio = counter, window, ratio
        self.sent: list[int] = []
        self.rejected = 0

    def send(self, view: View[dict[str, Any]]) -> dict[str, Any]:
        tokens = int(self.counter.count_messages(cf.from_openai(view.messages)) * self.ratio)
        self.sent.append(tokens)
        if tokens > self.window:
            self.rejected += 1
            raise openai_overflow(self.window, tokens)
        return {"role": "assistant", "content": "ok", "usage": tokens}

    async def asend(self, view: View[dict[str, Any]]) -> dict[str, Any]:
        return self.send(view)


def usage(reply: dict[str, Any]) -> Usage:
    return Usage(reply["usage"], 5)


def loop_for(policy: Policy, budget: cf.Budget, counter: cf.TokenCounter,
             store: Any = None, key: str = "conv") -> CallLoop[dict[str, Any]]:
    compactor = cf.Compactor(policy, budget, counter, store=store, conversation_id=key)
    return CallLoop(compactor, to_core=to_core, from_core=from_core)


POLICIES = [cf.ThresholdPolicy(), cf.TurnAwarePolicy(), cf.TruncationPolicy(),
            cf.TieredPolicy()]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_a_budget_larger_than_the_real_window_costs_one_rejection(
    policy: Policy, counter: cf.TokenCounter
) -> None:
    # Configured for 16k, the model takes 10k: the first overflow states the limit, the
    # loop compacts below it and keeps the lowered budget for the rest of the run.
    model = Model(counter, window=10_000)
    loop = loop_for(policy, cf.Budget(context_window=16_384, output_reserve=1_024), counter)
    for n in range(1, 40):
        reply = loop.call(history(n), model.send, usage=usage)
        assert reply["content"] == "ok"
    assert model.rejected == 1
    assert loop.budget.input_budget < 10_000 - 1_024


def test_a_provider_that_counts_more_than_the_counter_is_scaled_for(
    counter: cf.TokenCounter,
) -> None:
    model = Model(counter, window=12_000, ratio=1.3)
    loop = loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=16_384), counter)
    for n in range(1, 30):
        loop.call(history(n), model.send, usage=usage)
    assert model.rejected <= 1
    first_rejected = next(i for i, tokens in enumerate(model.sent) if tokens > 12_000)
    assert all(tokens <= 12_000 for tokens in model.sent[first_rejected + 1:])


async def test_async_calls_recover_the_same_way(counter: cf.TokenCounter) -> None:
    model = Model(counter, window=10_000)
    loop = loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=16_384), counter)
    for n in range(1, 30):
        await loop.acall(history(n), model.asend, usage=usage)
    assert model.rejected == 1


def test_a_second_overflow_raises_a_typed_error_wrapping_the_providers(
    counter: cf.TokenCounter,
) -> None:
    calls = []

    def always_too_long(view: View[dict[str, Any]]) -> dict[str, Any]:
        calls.append(view.retry)
        tokens = counter.count_messages(cf.from_openai(view.messages))
        raise openai_overflow(tokens - 10, tokens)  # whatever comes, a little too long

    loop = loop_for(cf.TruncationPolicy(), cf.Budget(context_window=16_384), counter)
    with pytest.raises(ContextOverflowError) as caught:
        loop.call(history(8), always_too_long, usage=usage)
    assert calls == [False, True]  # one retry, never more
    assert isinstance(caught.value.provider_error, Overflow)
    assert isinstance(caught.value, cf.ContextfoldError)


def test_other_provider_errors_pass_through_untouched(counter: cf.TokenCounter) -> None:
    def refuses(view: View[dict[str, Any]]) -> dict[str, Any]:
        raise PermissionError("invalid api key")

    loop = loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=16_384), counter)
    with pytest.raises(PermissionError):
        loop.call(history(1), refuses, usage=usage)


def test_usage_calibrates_and_resets_the_forced_guard(counter: cf.TokenCounter) -> None:
    loop = loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=100_000), counter)
    model = Model(counter, window=100_000)
    loop.call(history(1), model.send, usage=usage)
    assert loop.compactor._known == model.sent[-1]


def test_an_idle_conversation_is_answered_without_calling_the_model(
    counter: cf.TokenCounter,
) -> None:
    # No user prompt at all: the loop slice nudges, and after its nudges the conversation
    # goes idle; from then on the loop answers without calling the model.
    raw = [{"role": "system", "content": "You mine asteroids."}]
    loop = loop_for(cf.LoopSlicePolicy(), cf.Budget(context_window=16_384), counter)
    sent: list[View[dict[str, Any]]] = []

    def send(view: View[dict[str, Any]]) -> dict[str, Any]:
        sent.append(view)
        return {"role": "assistant", "content": "mining", "usage": 10}

    replies = [loop.call(raw, send, usage=usage,
                         idle=lambda reason, view: {"role": "assistant", "idle": reason})
               for _ in range(6)]
    nudged = len(sent)
    assert 1 <= nudged < 6
    assert all("idle" in r for r in replies[nudged:])
    assert loop.idle_reason is not None
    with pytest.raises(cf.ContextfoldError, match="idle"):
        loop.call(raw, send, usage=usage)  # no idle reply given: a clear error


def test_restarts_never_duplicate_the_stored_history(tmp_path: Any,
                                                       counter: cf.TokenCounter) -> None:
    path = tmp_path / "h.db"
    raw = history(2)
    for _restart in range(3):  # a new process each time: new loop, new store object
        store = cf.SQLiteStore(path)
        loop = loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=100_000), counter,
                        store=store)
        loop.call(raw, Model(counter, 100_000).send, usage=usage)
        store.close()
    assert len(cf.SQLiteStore(path).load("conv")) == len(raw)


def test_stable_ids_depend_on_content_and_position() -> None:
    a, b = cf.Message(role="user", content="ok"), cf.Message(role="user", content="ok")
    assert stable_id(3, a) == stable_id(3, b)
    assert stable_id(3, a) != stable_id(4, a)
    assert stable_id(3, a) != stable_id(3, cf.Message(role="user", content="no"))


def test_unnamed_conversations_are_keyed_by_their_opening() -> None:
    one = cf.from_openai(history(1))
    same_later = cf.from_openai(history(3))
    other = cf.from_openai([history(1)[0], {"role": "user", "content": "Another task."}])
    assert opening_key(one) == opening_key(same_later)
    assert opening_key(one) != opening_key(other)


def test_conversations_keep_the_most_recent(counter: cf.TokenCounter) -> None:
    made: list[str] = []

    def make(key: str) -> CallLoop[dict[str, Any]]:
        made.append(key)
        return loop_for(cf.ThresholdPolicy(), cf.Budget(context_window=1_000), counter, key=key)

    loops = Conversations(make, max_conversations=2)
    first = loops.get("a")
    loops.get("b")
    assert loops.get("a") is first
    loops.get("c")  # drops "b", the least recently used
    assert "b" not in loops and "a" in loops and len(loops) == 2
    with pytest.raises(cf.ContextfoldError):
        Conversations(make, max_conversations=0)


def test_a_limit_below_the_protected_minimum_is_a_context_overflow_error(
    counter: cf.TokenCounter,
) -> None:
    # The rejected input is only the system prompt and one short prompt: nothing to cut.
    raw = history(0)
    loop = loop_for(cf.TruncationPolicy(), cf.Budget(context_window=16_384), counter)

    def too_long(view: View[dict[str, Any]]) -> dict[str, Any]:
        raise openai_overflow(5, 40)

    with pytest.raises(ContextOverflowError) as caught:
        loop.call(raw, too_long, usage=usage)
    assert isinstance(caught.value.__cause__, Overflow)
    assert not isinstance(caught.value, NoProgressError)
