"""The agent traces the benchmarks read.

``../shared/traces`` beside the checkout when it is there (``CONTEXTFOLD_SHARED_TRACES``
names another folder): 200 tau-bench airline runs and 5 SWE-Gym OpenHands runs. Otherwise
the samples shipped in the package (``contextfold.samples``: 6 tau-bench-style and 2
OpenHands-style generated runs), so every benchmark runs in a fresh clone; its rows then
say "sample", and their figures describe the samples, not the real traces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from contextfold.samples import sample_path

__all__ = ["TRACES", "Traces"]


@dataclass(frozen=True)
class Traces:
    """Where the two data sets are, and how the rows name them."""

    airline: Path
    """tau-bench airline records (``traj``, ``info.task.actions``)."""
    coding: Path
    """SWE-Gym OpenHands records (``messages``, ``tools``)."""
    airline_label: str
    """The airline set's name in row names."""
    coding_label: str
    """The coding set's name in row names."""
    real: bool
    """True for the real traces, False for the shipped samples."""


_SHARED = Path(os.environ.get("CONTEXTFOLD_SHARED_TRACES")
               or Path(__file__).resolve().parents[2] / "shared" / "traces")

TRACES = (
    Traces(_SHARED / "tau-bench-airline" / "gpt-4o-airline.json",
           _SHARED / "swe-gym-openhands" / "sample_raw.json",
           "tau-bench airline", "SWE-Gym OpenHands", real=True)
    if _SHARED.is_dir() else
    Traces(sample_path("airline"), sample_path("coding"),
           "sample airline (tau-bench style)", "sample coding (OpenHands style)", real=False)
)
"""The traces this run reads."""
