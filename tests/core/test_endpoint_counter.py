"""Exact counts through a provider's token-counting endpoint: the real Anthropic client
replays a cassette written from the documented wire format."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import anthropic
import pytest
import vcr

import contextfold as cf
from contextfold.errors import ConfigurationError

CASSETTES = os.path.join(os.path.dirname(__file__), "..", "cassettes", "anthropic")


def _same_text(r1: Any, r2: Any) -> None:
    assert json.loads(r1.body)["messages"] == json.loads(r2.body)["messages"]


_VCR = vcr.VCR(cassette_library_dir=CASSETTES, record_mode="none",
               match_on=["method", "host", "path", "counted_text"])
_VCR.register_matcher("counted_text", _same_text)

HISTORY = [
    cf.Message(role="system", content="You are a travel agent."),
    cf.Message(role="user", content="Move reservation HAT001 to 2024-05-20."),
    cf.Message(role="assistant", content="Done: HAT001 now departs 2024-05-20."),
]


@pytest.mark.cassette
def test_anthropic_count_tokens_counts_each_message_once_and_falls_back_where_it_fails() -> None:
    client = anthropic.Anthropic(api_key="sk-ant-test", max_retries=0)
    counter = cf.EndpointCounter.anthropic(client, "claude-sonnet-4-5", workers=1)
    assert counter.name == "endpoint:anthropic:claude-sonnet-4-5"
    with _VCR.use_cassette("count_tokens.yaml") as cassette, \
            pytest.warns(RuntimeWarning, match="token-counting endpoint"):
        total = counter.count_messages(HISTORY)
        again = counter.count_messages(HISTORY)  # cached on the messages: no new request
        assert cassette.all_played and cassette.play_count == 4
    # The probe's request ("a", 8 tokens) measures 7 tokens of framing; each message counts
    # its text plus 3 of overhead; the overloaded request is counted by the approximation.
    fallback = cf.counter_for_model("claude-sonnet-4-5").count_message(HISTORY[2])
    assert total == again == (3 + 13 - 7) + (3 + 22 - 7) + fallback + 3


def test_cold_histories_are_counted_several_requests_at_a_time() -> None:
    in_flight = peak = 0
    lock = threading.Lock()
    gate = threading.Barrier(4, timeout=5)

    def count(text: str) -> int:
        nonlocal in_flight, peak
        if text == "a":
            return 1
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        gate.wait()  # four requests must be in flight together, or this times out
        with lock:
            in_flight -= 1
        return len(text.split())

    counter = cf.EndpointCounter(count, name="endpoint:test", model="claude-sonnet-4", workers=4)
    history = [cf.Message(role="user", content=f"message number {i}") for i in range(8)]
    assert counter.count_messages(history) == 8 * (3 + 4) + 3
    assert peak == 4


def test_workers_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        cf.EndpointCounter(len, name="x", workers=0)
