"""Sample agent transcripts shipped with contextfold, so every example runs in a fresh clone.

The samples are generated, not recorded: deterministic code in this package writes them
(``python -m contextfold.samples`` writes them again; a test checks that the shipped files
are exactly what it writes). They are in OpenAI chat format, in the shapes of two public
data sets of real agent runs, with the defects those runs have:

* ``airline``: six customer-service runs in the style of tau-bench's airline domain (user
  ids, reservation codes, flight numbers, dates, payment ids; a long policy as system
  prompt; gold actions in ``info.task.actions``); three of them reuse a tool call id.
* ``coding``: two coding-agent runs in the style of OpenHands on SWE-Gym (file paths,
  function names, tracebacks, numbered file listings and a pytest log of tens of thousands
  of characters); each ends on a ``finish`` call that has no result.
* ``assistant_first``: a support chat whose assistant speaks before the user (a chat
  widget's greeting), with tool calls.

On the command line a sample is named ``sample:NAME`` wherever a transcript file is
expected: ``contextfold inspect sample:airline``, ``contextfold eval sample:coding``.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigurationError

__all__ = ["SAMPLES", "sample_path"]

SAMPLES: dict[str, str] = {
    "airline": "six tau-bench-style airline customer-service runs (a data set of records)",
    "coding": "two OpenHands-style coding-agent runs with long tool outputs",
    "assistant_first": "a support chat whose assistant speaks first (one transcript)",
}
"""The shipped samples by name, with what each holds."""

_HERE = Path(__file__).resolve().parent


def sample_path(name: str) -> Path:
    """The file of the sample ``name`` (a key of `SAMPLES`).

    Raises:
        ConfigurationError: no sample has that name.
    """
    if name not in SAMPLES:
        raise ConfigurationError(
            f"unknown sample {name!r}; the samples are: {', '.join(SAMPLES)}")
    return _HERE / f"{name}.json"
