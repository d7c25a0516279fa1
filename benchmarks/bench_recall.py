"""Needed from memory on agent traces, and why each lost probe was lost.

The measurement of ``contextfold eval`` (``contextfold.cli.eval_recall``): at the model
calls nearest 40-70% of each run, the history is compacted once to the system prompt plus
1/2 or 1/4 of the rest; a probe is an identifier a later assistant message writes that only
the compacted part held. Traces: ``../shared/traces`` (200 tau-bench airline, 5 SWE-Gym
OpenHands runs) or the shipped samples (see ``_traces.py``).

As a runner module (``contextfold bench recall``) it gives, for ThresholdPolicy and
TieredPolicy, the share of probes in view beside LangChain ``trim_messages`` (the peer)
at each allowance.

Run directly with ``--table`` it is a tuning aid: the figures per policy and allowance,
then, for our policies, why each probe not in view was lost:

* **(a) not an identifier to our extractor**: the summarizer's and ledger's extractor does
  not find it in the messages that held it, so neither can copy it;
* **(b) in the omitted middle of a head+tail cut**: a message that held it is in view cut
  head+tail, and the probe was in the part left out;
* **(c) recognised but shed**: the extractor finds it, a summary or ledger is in view, but
  the probe is not in it (no room, or cut to fit);
* **(d) no mark in view**: what held it was removed and nothing in view (no handle, no
  summary or ledger) says so;
* **(e) other**: anything else, the call failing included (an output over the allowance,
  invalid, or a policy error: "failed" counts those apart).

    python benchmarks/bench_recall.py --table --policies threshold --split dev --limit 60
    python benchmarks/bench_recall.py --table --examples 5   # a few lost probes per reason
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.cli import POLICIES, _policies
from contextfold.cli.eval import Contender, context_text, our_contender
from contextfold.cli.eval_recall import (
    CutResult,
    Prepared,
    RecallRow,
    SourceTally,
    in_split,
    prepare,
    score_cut,
)
from contextfold.cli.transcripts import Transcript, load_transcripts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _traces import TRACES

COUNTER = cf.TiktokenCounter("o200k_base")
REASONS = {
    "a": "not an identifier to our extractor",
    "b": "in the omitted middle of a head+tail cut",
    "c": "recognised but shed (not in the summary/ledger in view)",
    "d": "no mark in view for the removal",
    "e": "other",
}
_LABEL = "\n[TRUNCATED"
_INSERTED = ("summary", "ledger")


def _extractor() -> Callable[[str], list[str]]:
    """What our summarizer and ledger recognise in a text: reference values, then names."""
    from contextfold.policy import identifiers_and_names

    return lambda text: list(identifiers_and_names(cf.Message("user", text)))


def why_lost(probe: str, prepared: Prepared, result: CutResult,
             extract: Callable[[str], list[str]]) -> str:
    """The reason (a key of :data:`REASONS`) ``probe`` is not in view after ``result``."""
    if not result.ok:
        return "e"
    holders = [m for m in prepared.transcript.messages[:result.cut.at]
               if m.role != "system" and probe in context_text([m])]
    if not any(probe in found for m in holders for found in extract(context_text([m]))):
        return "a"
    for sent in result.sent:
        head, cut, _ = sent.text.partition(_LABEL)
        if not cut:
            continue
        for m in holders:
            same = m.tool_call_id is not None and m.tool_call_id == sent.tool_call_id
            if same or (head and m.text.startswith(head)):
                return "b"
    if any(m.source in _INSERTED for m in result.sent):
        return "c"
    from contextfold.policy import HANDLE_RE

    if not HANDLE_RE.search(result.view):
        return "d"
    return "e"


def measure(prepared: Sequence[Prepared], contender: Contender, fraction: float,
            explain: bool) -> tuple[RecallRow, Counter[str], dict[str, list[str]], float]:
    """One contender at one allowance: its figures, the reasons of its losses (when
    ``explain``), a few examples per reason, and the seconds it took."""
    extract = _extractor()
    row = RecallRow(contender.name, contender.ours, fraction)
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {k: [] for k in REASONS}
    started = time.perf_counter()
    for p in prepared:
        tally = row.sources.setdefault(p.source, SourceTally())
        for cut in p.cuts:
            result, error = score_cut(p, cut, contender, fraction, COUNTER, tally)
            if error is not None:
                row.errors.append(error)
            if not explain:
                continue
            reasons["failed"] += 0 if result.ok else len(cut.probes)
            for probe in cut.probes:
                if probe in result.kept:
                    continue
                why = why_lost(probe, p, result, extract)
                reasons[why] += 1
                examples[why].append(f"{probe} ({p.transcript.name} at {cut.at})")
    return row, reasons, examples, time.perf_counter() - started


def _load(split: str, limit: int | None) -> list[Prepared]:
    transcripts: list[Transcript] = [
        t for path in (TRACES.airline, TRACES.coding) for t in load_transcripts(path)
        if in_split(t.name, split)  # type: ignore[arg-type]
    ]
    if limit:
        transcripts = transcripts[:limit]
    return [prepare(t, COUNTER) for t in transcripts]


def _peer() -> Contender | None:
    from contextfold.cli.eval_peers import peer_contenders

    peers, _ = peer_contenders()
    return next((p for p in peers if p.name == "langchain trim_messages"), None)


def run(quick: bool) -> list[dict[str, Any]]:
    """In view for ThresholdPolicy and TieredPolicy beside ``trim_messages``, at 1/2 and
    1/4, on every trace (the first 40 with ``quick``)."""
    prepared = _load("all", 40 if quick else None)
    peer = _peer()
    table = _policies()
    rows: list[dict[str, Any]] = []
    for fraction in (0.5, 0.25):
        theirs = measure(prepared, peer, fraction, False)[0] if peer else None
        for name in ("threshold", "tiered"):
            ours, _, _, seconds = measure(prepared, our_contender(name, table[name]),
                                          fraction, False)
            mine = 100 * ours.figure("in_view")
            other = 100 * theirs.figure("in_view") if theirs else None
            rows.append({
                "name": f"needed from memory in view, {name} at {fraction:.0%}",
                "ours": round(mine, 2),
                "peer": round(other, 2) if other is not None else None,
                "ratio": mine / other if other else None,  # higher is better
                "unit": "% probes",
                "notes": (f"peer = trim_messages; {ours.probes} probes at {ours.cuts} cuts; "
                          f"recoverable {100 * ours.figure('recoverable'):.1f}%, tokens used "
                          f"{100 * ours.figure('tokens_used'):.1f}%, within "
                          f"{100 * ours.figure('within'):.1f}%, oracle "
                          f"{100 * ours.figure('oracle'):.1f}% of the room; "
                          f"{1000 * seconds / max(1, ours.cuts):.0f} ms/cut"),
            })
    return rows


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{value:.1%}"


def table(policies: Sequence[str], fractions: Sequence[float], split: str,
          limit: int | None, peers: bool, examples: int) -> None:
    """Print the figures and, for our policies, the reasons of the losses."""
    prepared = _load(split, limit)
    cuts = sum(len(p.cuts) for p in prepared)
    print(f"{len(prepared)} transcripts (split {split}), {cuts} cuts, "
          f"{sum(len(c.probes) for p in prepared for c in p.cuts)} probes; {TRACES.airline_label}"
          f" + {TRACES.coding_label}")
    contenders = [our_contender(n, _policies()[n]) for n in policies]
    if peers:
        from contextfold.cli.eval_peers import peer_contenders

        contenders += peer_contenders()[0]
    for fraction in fractions:
        for contender in contenders:
            row, reasons, found, seconds = measure(prepared, contender, fraction,
                                                   contender.ours)
            print(f"\n{contender.name} at {fraction:.0%}: in view "
                  f"{_pct(row.figure('in_view'))}, recoverable "
                  f"{_pct(row.figure('recoverable'))}, tokens used "
                  f"{_pct(row.figure('tokens_used'))}, within {_pct(row.figure('within'))}, "
                  f"oracle {_pct(row.figure('oracle'))} ({seconds:.1f} s)")
            for source, tally in row.sources.items():
                f = tally.figures()
                print(f"  {source}: {tally.probes} probes, in view {_pct(f['in_view'])}, "
                      f"recoverable {_pct(f['recoverable'])}, oracle {_pct(f['oracle'])}")
            lost = sum(reasons[k] for k in REASONS)
            if not contender.ours or not lost:
                continue
            print(f"  {lost} lost ({reasons['failed']} in calls that failed):")
            for key, words in REASONS.items():
                print(f"    ({key}) {words}: {reasons[key]} ({reasons[key] / lost:.0%})")
                for example in found[key][:examples]:
                    print(f"        {example}")


def main(argv: Sequence[str] | None = None) -> int:
    """``--table`` prints the tuning table; otherwise the benchmark runner runs this
    module."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="figures and loss reasons")
    p.add_argument("--policies", default="threshold,tiered",
                   help=f"comma-separated, from: {', '.join(POLICIES)}")
    p.add_argument("--fractions", default="0.5,0.25")
    p.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    p.add_argument("--limit", type=int, help="at most this many transcripts")
    p.add_argument("--peers", action="store_true", help="the peers too (no breakdown)")
    p.add_argument("--examples", type=int, default=0, help="lost probes shown per reason")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if not args.table:
        from run import main as run_main

        return int(run_main(["recall", *(["--quick"] if args.quick else [])]))
    table(args.policies.split(","), [float(f) for f in args.fractions.split(",")],
          args.split, args.limit, args.peers, args.examples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
