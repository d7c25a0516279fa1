"""Lossless compaction on agent traces: probes present, and probes recoverable.

Every trajectory (tau-bench airline ``traj``, 200 GPT-4o runs; SWE-Gym OpenHands
``messages``, 5 runs with their tool definitions; without ``../shared/traces`` the shipped
samples, see ``_traces.py``; converted with ``contextfold.from_openai``
through ``load_transcripts``, which drops ``function_call: null``) is replayed one model
call at a time through a ``Compactor`` with ``ThresholdPolicy``, at an allowance of the
system prompt plus a fraction of the rest (as ``contextfold eval`` does).

Probes are ``contextfold.cli.eval.probes_of``'s identifiers and tau-bench's gold values. For the
final context of each run:

* **present**: the probe is in the context's text (``context_text``), what every
  compaction benchmark measures;
* **recoverable**: present, or readable with ``read_original`` from a ``ctx_`` handle in the
  context (following handles found inside originals too: a summary of a summary).

Three places for the originals: a ``MemoryStore`` (kept until the conversation is
cleared: recoverable must be 100%), the Compactor's default in-memory ``ReferenceCache``
(256 originals), and a deliberately tiny cache (4 originals) to show what LRU expiry
costs. The "peer" column is the share present in the same run (the runner's ratio is
peer / ours: present / recoverable). Runs whose compaction raised (the allowance cannot
hold even the protected messages) send nothing; they are counted apart, not as losses.

Run: ``python benchmarks/bench_lossless.py [--quick]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.cli.eval import context_text, probes_of, recoverable_text
from contextfold.cli.replay import step_boundaries
from contextfold.cli.transcripts import Transcript, load_transcripts
from contextfold.policy import HANDLE_RE, SYSTEM_ROLES
from contextfold.stores import ReferenceCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _traces import TRACES

COUNTER = cf.TiktokenCounter("cl100k_base")
PLACES = ("store", "cache-256", "cache-4")


@dataclass
class Tally:
    """Probes over every transcript of one (data set, fraction, place)."""

    probes: int = 0
    failed_probes: int = 0
    present: int = 0
    recoverable: int = 0
    handles: int = 0
    runs: int = 0
    failed: int = 0
    seconds: float = 0.0


def compactor_for(place: str, budget: cf.Budget, name: str) -> tuple[cf.Compactor, Any]:
    """A Compactor keeping originals in ``place``, and the source ``read_original`` reads."""
    policy = cf.ThresholdPolicy()
    if place == "store":
        store = cf.MemoryStore()
        return cf.Compactor(policy, budget, COUNTER, store=store, conversation_id=name), store
    cache = ReferenceCache(capacity=256 if place == "cache-256" else 4)
    return cf.Compactor(policy, budget, COUNTER, references=cache, conversation_id=name), cache


def final_context(t: Transcript, compactor: cf.Compactor) -> list[cf.Message]:
    """The context the last model call would get, replayed call by call."""
    sent: list[cf.Message] = []
    for cut in step_boundaries(t.messages):
        sent = compactor.compact(t.messages[:cut], tools=t.tools or None).messages
    return sent


def measure(transcripts: Sequence[Transcript], fraction: float, place: str) -> Tally:
    """One (fraction, place) over ``transcripts``."""
    tally = Tally()
    for t in transcripts:
        idents, gold = probes_of(t)
        probes = list(dict.fromkeys([*idents, *gold]))
        total = COUNTER.count_messages(t.messages)
        system = COUNTER.count_messages([m for m in t.messages if m.role in SYSTEM_ROLES])
        tools = COUNTER.count_tools(t.tools) if t.tools else 0
        allowance = system + tools + max(int((total - system) * fraction), 1)
        budget = cf.Budget(context_window=allowance, output_reserve=0, trigger=1.0, target=0.9)
        compactor, source = compactor_for(place, budget, t.name)
        tally.runs += 1
        started = time.perf_counter()
        try:
            sent = final_context(t, compactor)
        except cf.ContextfoldError:  # nothing sent: not a matter of losing or keeping
            tally.failed += 1
            tally.failed_probes += len(probes)
            continue
        finally:
            tally.seconds += time.perf_counter() - started
        tally.probes += len(probes)
        text = context_text(sent)
        back = recoverable_text(source, t.name, text)
        tally.handles += len(set(HANDLE_RE.findall(text + back)))
        tally.present += sum(1 for p in probes if p in text)
        tally.recoverable += sum(1 for p in probes if p in text or p in back)
    return tally


def rows_for(label: str, transcripts: Sequence[Transcript], fraction: float
             ) -> list[dict[str, Any]]:
    rows = []
    for place in PLACES:
        tally = measure(transcripts, fraction, place)
        present = 100 * tally.present / tally.probes if tally.probes else 100.0
        recoverable = 100 * tally.recoverable / tally.probes if tally.probes else 100.0
        rows.append({
            "name": f"{label} at {fraction:.0%}, originals in {place}: recoverable",
            "ours": round(recoverable, 2),
            "peer": round(present, 2),
            "ratio": recoverable / present if present else None,  # higher is better
            "unit": "% probes",
            "notes": (f"peer = present in the context; {tally.probes} probes in "
                      f"{tally.runs - tally.failed}/{tally.runs} runs that fit "
                      f"({tally.failed_probes} probes in runs that raised "
                      f"BudgetExceededError, not counted); {tally.handles} handles reached; "
                      f"{1000 * tally.seconds / max(1, tally.runs):.0f} ms/run"),
        })
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for both data sets at two allowances."""
    airline = load_transcripts(TRACES.airline)
    swe = load_transcripts(TRACES.coding)
    if quick:
        airline = airline[:40]
    rows: list[dict[str, Any]] = []
    for fraction in (0.25, 0.5):
        rows.extend(rows_for(TRACES.airline_label, airline, fraction))
        rows.extend(rows_for(TRACES.coding_label, swe, fraction))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["lossless", *sys.argv[1:]]))
