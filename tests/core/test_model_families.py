"""Counting for every model family in the budget table: the family's own tokenizer where a
package ships it, else a stated approximation; then the provider's reported usage corrects
the decision."""

from __future__ import annotations

import json
import math

import pytest

import contextfold as cf
from contextfold._counting import counters
from contextfold._counting.budget import MODEL_LIMITS
from contextfold._counting.counters import (
    APPROXIMATIONS,
    TOKENIZERS,
    ApproximateCounter,
    encoding_for_model,
)
from contextfold._counting.encodings import load_encoding
from contextfold.testing import generate_history
from trace_sets import REAL, TRACE_SETS, TraceSet

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


OTHER_FAMILIES = sorted(m for m in MODEL_LIMITS if encoding_for_model(m) is None)


@pytest.mark.parametrize("model", OTHER_FAMILIES)
def test_every_model_in_the_budget_table_counts_by_tokenizer_or_stated_approximation(
        model: str) -> None:
    counter = cf.counter_for_model(model)
    assert not isinstance(counter, cf.EstimatingCounter), counter.name
    if isinstance(counter, ApproximateCounter):
        encoding, factor, source = APPROXIMATIONS[counter.family]
        assert counter.name == f"approx:{counter.family}={encoding}*{factor}"
        assert counter.source == source and len(source) > 40  # a reason, not a label
    else:
        assert isinstance(counter, cf.TiktokenCounter)
        packaged = {name for pairs in TOKENIZERS.values() for _, name in pairs}
        assert counter.encoding.name in packaged


@pytest.mark.parametrize(("model", "encoding"), [
    ("llama-3.3-70b-versatile", "llama3"), ("meta-llama/Llama-4-Maverick", "llama4"),
    ("mistral-large-latest", "tekken"), ("codestral-2501", "tekken"),
])
def test_families_with_a_packaged_tokenizer_count_with_it(model: str, encoding: str) -> None:
    counter = cf.counter_for_model(model)
    assert isinstance(counter, cf.TiktokenCounter) and counter.name == f"tiktoken:{encoding}"


def test_tekken_splits_numbers_into_digits_where_cl100k_groups_three() -> None:
    # Tells the real Tekken vocabulary apart from a renamed cl100k: Mistral splits digits.
    tekken = cf.counter_for_model("mistral-small-latest")
    assert tekken.count_text("1234567") == 7
    assert cf.TiktokenCounter("cl100k_base").count_text("1234567") == 3


def test_without_the_package_a_family_falls_back_to_its_approximation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = {name for pairs in TOKENIZERS.values() for _, name in pairs}
    monkeypatch.setattr(counters, "load_encoding",
                        lambda name: None if name in packaged else load_encoding(name))
    for model, family in [("llama-3.1-8b", "llama"), ("mistral-large-2411", "mistral")]:
        counter = cf.counter_for_model(model)
        assert isinstance(counter, ApproximateCounter) and counter.family == family


def _trace_texts(traces: TraceSet) -> list[str]:
    texts: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in (traces.airline, traces.coding):
        with open(path, encoding="utf-8") as f:
            walk(json.load(f))
    return texts


# The factors are measurements of real agent text, so they are checked on the real traces
# only (collected when ../shared/traces is there). The shipped samples are generated, with
# more digits than real runs: Tekken, which splits digits, measures 1.17 on them.
if REAL in TRACE_SETS:

    def test_the_stated_factors_match_the_packaged_tokenizers_on_the_traces() -> None:
        """The approximations used without the packages say what these tokenizers measure."""
        texts = _trace_texts(REAL)
        base = cf.TiktokenCounter("cl100k_base")
        cl100k = sum(base.count_text(t) for t in texts)
        for model, family in [("llama-3.1-8b", "llama"), ("mistral-large-2411", "mistral")]:
            own = cf.counter_for_model(model)
            ratio = sum(own.count_text(t) for t in texts) / cl100k
            factor = APPROXIMATIONS[family][1]
            assert ratio <= factor + 0.005, (family, ratio)  # never undercounts by over 0.5%
            assert factor - ratio < 0.05, (family, ratio)  # and is close to what it approximates


@pytest.mark.parametrize("model", ["gemini-2.5-pro", "qwen3-32b", "deepseek-chat", "grok-4.3"])
def test_every_approximated_family_is_corrected_by_reported_usage(model: str) -> None:
    counter = cf.counter_for_model(model)
    assert isinstance(counter, ApproximateCounter)
    true_factor = counter.factor * 1.12  # the provider counts more than the approximation
    exact = cf.TiktokenCounter("cl100k_base")
    history = generate_history(5, turns=6, tool_chars=1_500)
    cuts = [i + 1 for i, m in enumerate(history) if m.role == "tool"]
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget.for_model(model), counter)
    first = compactor.compact(history[: cuts[0]])
    compactor.observe_usage(input_tokens=math.ceil(exact.count_messages(first.messages)
                                                   * true_factor))
    for cut in cuts[1:]:
        result = compactor.compact(history[:cut])
        truth = math.ceil(exact.count_messages(result.messages) * true_factor)
        known = result.report.details["known_tokens"]
        assert known is not None and abs(known - truth) / truth <= 0.05, (cut, known, truth)
        compactor.observe_usage(input_tokens=truth)


def test_a_model_of_no_known_family_keeps_the_conservative_estimate() -> None:
    assert isinstance(cf.counter_for_model("acme-frontier-7"), cf.EstimatingCounter)
