"""The agent traces the tests read: the samples shipped in the package, always, and the
real traces in ``../shared/traces`` beside the checkout, when they are there.

Tests take the ``traces`` fixture (tests/conftest.py), which runs them once per set found:
a fresh clone runs them on the samples (nothing is skipped), a checkout with ``shared/``
beside it on both. ``CONTEXTFOLD_SHARED_TRACES`` names another folder of the real traces
(a git worktree has no ``shared/`` beside it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from contextfold.samples import sample_path

SHARED = Path(os.environ.get("CONTEXTFOLD_SHARED_TRACES")
              or Path(__file__).resolve().parents[2] / "shared" / "traces")


@dataclass(frozen=True)
class TraceSet:
    """A customer-service data set (tau-bench's shape) and a coding-agent one (OpenHands')."""

    name: str
    """``sample`` or ``shared``."""
    airline: Path
    """tau-bench-style records (``traj``, ``info.task.actions``)."""
    coding: Path
    """OpenHands-style records (``messages``, ``tools``)."""
    airline_records: int
    """Records in :attr:`airline`."""
    coding_records: int
    """Records in :attr:`coding`."""


SAMPLE = TraceSet("sample", sample_path("airline"), sample_path("coding"), 6, 2)
REAL = TraceSet("shared", SHARED / "tau-bench-airline" / "gpt-4o-airline.json",
                SHARED / "swe-gym-openhands" / "sample_raw.json", 200, 5)
TRACE_SETS = [SAMPLE, REAL] if SHARED.is_dir() else [SAMPLE]
"""The sets a test runs on here."""
