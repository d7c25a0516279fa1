"""The model-call loop: overflow recovery below the stated limit, typed errors, calibration,
idle, persistence with stable identity, conversation keys. The framework's message type
here is a plain dict (OpenAI's), so the loop is exercised without any framework."""

from __future__ import annotations

import copy
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
from spy_counting import spy_counter


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
    # Calibration scales what each call adds by the provider's ratio, so the run may never
    # reach the window; if it does, once is all.
    assert model.rejected <= 1
    first_rejected = next((i for i, tokens in enumerate(model.sent) if tokens > 12_000), -1)
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


def _process(path: Any, policy: Policy, raw: list[dict[str, Any]], *, budget: cf.Budget,
             persist: bool = True) -> list[cf.Message]:
    """One call in a new process: a new store object on the file, a new compactor and
    counter, the checkpoint's messages converted again. The stored messages it tokenized."""
    counter, spy = spy_counter()
    store = cf.SQLiteStore(path)
    compactor = cf.Compactor(policy, budget, counter, store=store, conversation_id="conv")
    loop = CallLoop(compactor, to_core=to_core, from_core=from_core, persist=persist)
    loop.call(copy.deepcopy(raw), Model(cf.EstimatingCounter(), 10**9).send)
    store.close()
    return spy.tokenized(to_core(m, i) for i, m in enumerate(raw))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_a_resumed_thread_tokenizes_nothing_it_counted(policy: Policy, tmp_path: Any) -> None:
    path, raw = tmp_path / "h.db", history(24, size=40)
    budget = cf.Budget(context_window=6_000)  # the thread is over it: compaction counts
    first = _process(path, policy, raw[:30], budget=budget)
    assert first  # messages were counted (and their counts kept)
    resumed = _process(path, policy, raw, budget=budget)  # resumed with more messages
    assert [m for m in resumed if m in first] == []
    assert resumed  # the new ones were counted
    assert _process(path, policy, raw, budget=budget) == []  # all of it counted by now
    # Without the store's counts, the same call tokenizes them again.
    assert _process(path, policy, raw, budget=budget, persist=False)


def _recording(into: list[cf.Message]) -> Any:
    def convert(raw: dict[str, Any], position: int) -> cf.Message:
        into.append(to_core(raw, position))
        return into[-1]
    return convert


def test_a_message_replaced_under_its_id_gets_no_count_of_the_old_one(tmp_path: Any) -> None:
    """A framework may replace a message keeping its id (LangGraph's reducer does): the
    count kept for the old content is not reused for the new one."""
    path, raw = tmp_path / "h.db", history(12, size=40)
    for i, message in enumerate(raw):
        message["id"] = f"msg-{i}"
    budget = cf.Budget(context_window=3_000)
    first = _process(path, cf.TruncationPolicy(), raw, budget=budget)
    assert to_core(raw[-1], len(raw) - 1) in first  # the old content was counted, and kept
    replaced = copy.deepcopy(raw)
    replaced[-1]["content"] = "document 11, replaced"
    converted: list[cf.Message] = []
    counter, _ = spy_counter()
    compactor = cf.Compactor(cf.TruncationPolicy(), budget, counter, store=cf.SQLiteStore(path),
                             conversation_id="conv")
    loop = CallLoop(compactor, from_core=from_core, to_core=_recording(converted))
    loop.call(replaced, Model(cf.EstimatingCounter(), 10**9).send)
    key = "tokens:" + counter.name
    assert all(m.has_derived(key) for m in converted[:-1] if m in first)  # kept, reused
    assert counter.count_message(converted[-1]) == counter.count_message(
        to_core(replaced[-1], len(raw) - 1))  # its own count, whether kept or not


def test_an_input_that_does_not_extend_the_last_reuses_the_kept_counts(tmp_path: Any) -> None:
    """Messages converted anew in the same process (the input was not an extension of the
    previous one) take the counts the store kept for them."""
    counter, spy = spy_counter()
    store = cf.SQLiteStore(tmp_path / "h.db")
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=6_000), counter,
                             store=store, conversation_id="conv")
    loop = CallLoop(compactor, to_core=to_core, from_core=from_core)
    raw = history(24, size=40)
    model = Model(cf.EstimatingCounter(), 10**9)
    loop.call(raw, model.send)
    counted = spy.tokenized(to_core(m, i) for i, m in enumerate(raw))
    spy.texts.clear()
    edited = copy.deepcopy(raw)  # new objects, and not an extension: the task was edited
    edited[1]["content"] = "Read every document, twice."
    loop.call(edited, model.send)
    again = spy.tokenized(to_core(m, i) for i, m in enumerate(edited))
    assert counted and [m for m in again if m in counted] == []


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
