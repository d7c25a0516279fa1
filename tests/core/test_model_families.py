"""Counting for model families without a local tokenizer: a stated approximation first,
then the provider's reported usage corrects the decision."""

from __future__ import annotations

import math

import pytest

import contextfold as cf
from contextfold._counting.counters import APPROXIMATIONS, ApproximateCounter
from contextfold.testing import generate_history

TRUE_FACTOR = 1.45
"""What the simulated provider counts, against cl100k: inside the published 20-50% range but
not the factor the approximation uses, so calibration has something to correct."""


def _provider_count(messages: list[cf.Message]) -> int:
    """The replayed provider's ``input_tokens`` for a request."""
    exact = cf.TiktokenCounter("cl100k_base")
    return math.ceil(exact.count_messages(messages) * TRUE_FACTOR)


@pytest.mark.parametrize("model", ["claude-sonnet-4", "claude-3-5-haiku-latest",
                                   "anthropic/claude-opus-4-1"])
def test_a_claude_model_gets_the_stated_approximation(model: str) -> None:
    counter = cf.counter_for_model(model)
    assert isinstance(counter, ApproximateCounter)
    encoding, factor, source = APPROXIMATIONS["claude"]
    assert counter.name == f"approx:claude={encoding}*{factor}"  # in every report
    assert "20-50%" in counter.source and source == counter.source
    text = "Reservation HAT001 moved to 2024-05-20; refund of $1,280.50 to card ending 4412."
    exact = cf.TiktokenCounter(encoding).count_text(text)
    assert counter.count_text(text) == math.ceil(exact * factor)


def test_the_approximation_is_far_closer_than_the_character_estimate() -> None:
    history = generate_history(3, turns=4, tool_chars=2_000)
    truth = _provider_count(history)
    approx = cf.counter_for_model("claude-sonnet-4").count_messages(history)
    chars = cf.EstimatingCounter().count_messages(history)
    assert abs(approx - truth) / truth < 0.15
    assert abs(chars - truth) / truth > 0.5


def test_after_one_reply_with_usage_the_estimate_is_within_five_percent() -> None:
    history = generate_history(5, turns=6, tool_chars=1_500)
    cuts = [i + 1 for i, m in enumerate(history) if m.role == "tool"]
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget.for_model("claude-sonnet-4"),
                             cf.counter_for_model("claude-sonnet-4"))
    first = compactor.compact(history[: cuts[0]])
    truth = _provider_count(first.messages)
    assert abs(first.report.tokens_after - truth) / truth < 0.15  # before any usage
    compactor.observe_usage(input_tokens=truth)  # the reply's usage, replayed
    for cut in cuts[1:]:
        result = compactor.compact(history[:cut])
        truth = _provider_count(result.messages)
        known = result.report.details["known_tokens"]
        assert known is not None
        assert abs(known - truth) / truth <= 0.05, (cut, known, truth)
        compactor.observe_usage(input_tokens=truth)


def test_other_families_keep_the_conservative_estimate() -> None:
    assert isinstance(cf.counter_for_model("gemini-2.0-flash"), cf.EstimatingCounter)
