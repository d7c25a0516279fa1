"""The ``contextfold`` command: demo, inspect, eval, bench.

    contextfold demo                      offline agent run, per-step table and HTML report
    contextfold inspect FILE [--step N]   replay a transcript under a policy and budget
    contextfold eval [FILES...] [--chats N]  fidelity of each policy beside the peers
    contextfold bench [NAME...] [--quick] the benchmark suite (from a source checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._contract.policy import Policy
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, counter_for_model
from .._optional import require
from ..errors import ConfigurationError, ContextfoldError

__all__ = ["POLICIES", "main", "policy_from_name"]


def _policies() -> dict[str, Callable[[], Policy]]:
    import contextfold as cf

    return {
        "threshold": lambda: cf.ThresholdPolicy(),
        "tiered": lambda: cf.TieredPolicy(),
        "truncation": lambda: cf.TruncationPolicy(),
        "truncation-middle-out": lambda: cf.TruncationPolicy(strategy="middle_out"),
        "turn-aware": lambda: cf.TurnAwarePolicy(),
        "loop-slice": lambda: cf.LoopSlicePolicy(),
        "summary": lambda: cf.SummaryPolicy(),
    }


POLICIES = ("threshold", "tiered", "truncation", "truncation-middle-out", "turn-aware",
            "loop-slice", "summary")
"""Policy names the command line accepts."""


def policy_from_name(name: str) -> Policy:
    """A default-configured policy by its command-line name."""
    table = _policies()
    if name not in table:
        raise SystemExit(f"unknown policy {name!r}; choose from: {', '.join(POLICIES)}")
    return table[name]()


def _counter(args: argparse.Namespace) -> TokenCounter:
    return counter_for_model(args.model or "gpt-4o")


def _budget(args: argparse.Namespace) -> Budget:
    if args.budget:
        return Budget(context_window=args.budget, model=args.model)
    try:
        return Budget.for_model(args.model or "gpt-4o")
    except ConfigurationError:
        raise ConfigurationError(
            f"unknown model {args.model!r}: give its context window with --budget TOKENS"
        ) from None


def _print_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: TextIO) -> None:
    from .report import text_table

    out.write(text_table(rows, headers))


def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    from .._messages.openai import to_openai
    from .._messages.validation import validate
    from .replay import replay
    from .report import write_html
    from .transcripts import load_transcripts

    transcripts = load_transcripts(args.transcript)
    if not 0 <= args.record < len(transcripts):
        out.write(f"--record {args.record}: {args.transcript} holds records 0 to "
                  f"{len(transcripts) - 1}\n")
        return 2
    transcript = transcripts[args.record]
    counter, budget = _counter(args), _budget(args)
    problems = validate(transcript.messages)
    out.write(f"{transcript.name}: {len(transcript.messages)} messages, "
              f"{counter.count_messages(transcript.messages):,} tokens; budget "
              f"{budget.input_budget:,} (trigger {budget.trigger_tokens:,}, target "
              f"{budget.target_tokens:,}); counter {counter.name}\n")
    verdict = "clean" if not problems else f"{len(problems)} problem(s)"
    out.write(f"input validation: {verdict}\n")
    for p in problems:
        out.write(f"  {p}\n")
    run = replay(transcript.messages, policy=policy_from_name(args.policy), budget=budget,
                 counter=counter, title=transcript.name,
                 capture=(args.step,) if args.step is not None else ())
    rows = [(s.step, s.history_messages, f"{s.history_tokens:,}", s.sent_messages,
             f"{s.sent_tokens:,}", s.method if s.compacted else "", s.llm_calls)
            for s in run.steps]
    _print_table(rows, ["step", "history msgs", "history tokens", "sent msgs", "sent tokens",
                        "compaction", "llm calls"], out)
    last = run.steps[-1]
    saved = 1 - last.sent_tokens / last.history_tokens if last.history_tokens else 0.0
    # Repairs of an invalid input (an answer for a dangling call) can add a few tokens.
    effect = f"{saved:.0%} saved" if saved >= 0 else "repairs added tokens"
    out.write(f"\n{run.compactions} compaction(s); at the last step the model sees "
              f"{last.sent_tokens:,} of {last.history_tokens:,} tokens ({effect})\n")
    if args.step is not None:
        if args.step not in run.sent_at:
            out.write(f"\n--step {args.step}: the replay has steps 1 to {len(run.steps)}\n")
            return 2
        out.write(f"\nwhat the model sees at step {args.step}:\n")
        text = json.dumps(to_openai(run.sent_at[args.step]), indent=2, ensure_ascii=False)
        if len(text) > args.max_chars:
            text = (f"{text[: args.max_chars]}\n[... {len(text) - args.max_chars:,} more "
                    "characters; raise --max-chars to see them]")
        out.write(text + "\n")
    if args.html:
        out.write(f"report written to {write_html(run, args.html)}\n")
    return 0


def _cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from .eval import evaluate, our_contender
    from .eval_peers import peer_contenders
    from .transcripts import generated_chats, load_transcripts

    transcripts = [t for path in args.transcripts for t in load_transcripts(path)]
    transcripts += generated_chats(args.chats, sessions=args.chat_sessions)
    if not transcripts:
        out.write("nothing to evaluate: give transcript files, --chats N, or both\n")
        return 2
    if args.limit:
        transcripts = transcripts[: args.limit]
    counter = _counter(args)
    table = _policies()
    contenders = [our_contender(name, table[name]) for name in args.policies.split(",")]
    left_out: list[str] = []
    if not args.no_peers:
        peers, left_out = peer_contenders()
        contenders += peers
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = evaluate(transcripts, contenders, fractions=fractions, counter=counter)
    out.write(f"{len(transcripts)} transcript(s); counter {counter.name}\n")
    for line in left_out:
        out.write(f"peer left out: {line}\n")
    _print_table(
        [(r.contender, "ours" if r.ours else "peer", f"{r.fraction:.0%}", f"{r.score:.1%}",
          "n/a" if r.needed == 0 else f"{r.needed_score:.1%}",
          "n/a" if r.gold == 0 else f"{r.gold_score:.1%}",
          "n/a" if r.asked == 0 else f"{r.recall_score:.1%}",
          "n/a" if not r.fills else f"{r.fill:.0%}", f"{r.recoverable_score:.1%}",
          "n/a" if r.prefix_pairs == 0 else f"{r.cached_score:.1%}", f"{r.saved:.1%}",
          r.over_budget, r.invalid, len(r.errors)) for r in rows],
        ["contender", "", "allowance", "probes kept", "needed next", "gold kept",
         "facts recalled", "context used", "recoverable", "cached prefix", "tokens saved",
         "over budget", "invalid", "errors"], out)
    for r in rows:
        for e in r.errors[:3]:
            out.write(f"  {r.contender}: {e}\n")
    if args.json:
        summary = [r.__dict__ | {"score": r.score, "fill": r.fill, "recall": r.recall_score,
                                 "recoverable_share": r.recoverable_score,
                                 "cached_prefix": r.cached_score} for r in rows]
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    return 0


def _cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    runner = Path.cwd() / "benchmarks" / "run.py"
    if not runner.is_file():
        out.write("contextfold bench runs from a source checkout: benchmarks/run.py not found "
                  "in the current directory\n")
        return 2
    cmd = [sys.executable, str(runner), *args.names] + (["--quick"] if args.quick else [])
    return subprocess.call(cmd)


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    require("langchain_core", extra="langchain", feature="contextfold demo",
            package="langchain-core")
    from .demo import run_demo

    return run_demo(data_dir=Path(args.data_dir), emails=args.emails, real=args.real,
                    model=args.model, out=out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contextfold", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="offline agent run with a per-step table and an HTML report")
    d.add_argument("--data-dir", default=os.environ.get("CONTEXTFOLD_DATA_DIR", "contextfold-data"),
                   help="where the history database and the report go (default: %(default)s)")
    d.add_argument("--emails", type=int, default=43,
                   help="how many e-mails the scripted agent reads (default: %(default)s)")
    d.add_argument("--real", action="store_true",
                   help="use a real OpenAI model (needs OPENAI_API_KEY and langchain-openai)")
    d.add_argument("--model", default=None, help="the model of --real (default: gpt-4o-mini)")
    i = sub.add_parser("inspect", help="replay a transcript step by step under a policy")
    i.add_argument("transcript")
    i.add_argument("--policy", default="threshold", choices=POLICIES)
    i.add_argument("--budget", type=int, help="context window in tokens (default: the model's)")
    i.add_argument("--model", default=None, help="model name for the budget and the counter")
    i.add_argument("--step", type=int, help="print what the model sees at this step")
    i.add_argument("--record", type=int, default=0, help="record of a data-set file")
    i.add_argument("--html", help="write the HTML report here")
    i.add_argument("--max-chars", type=int, default=20_000)
    e = sub.add_parser("eval", help="fidelity of each policy beside the peers")
    e.add_argument("transcripts", nargs="*", help="transcript files (OpenAI or Anthropic "
                   "format, JSON or JSONL)")
    e.add_argument("--chats", type=int, default=0, metavar="N",
                   help="also N generated long chats with planted facts asked late "
                   "(the 'facts recalled' column)")
    e.add_argument("--chat-sessions", type=int, default=12, metavar="S",
                   help="sessions per generated chat (default: %(default)s)")
    e.add_argument("--policies", default="threshold,tiered,truncation,turn-aware")
    e.add_argument("--fractions", default="0.5", help="allowances as shares of each transcript")
    e.add_argument("--model", default=None)
    e.add_argument("--limit", type=int, help="at most this many transcripts")
    e.add_argument("--no-peers", action="store_true")
    e.add_argument("--json", help="write the rows as JSON here")
    b = sub.add_parser("bench", help="run the benchmark suite")
    b.add_argument("names", nargs="*", help="run only the modules whose name contains one")
    b.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    stream = out or sys.stdout
    handlers = {"inspect": _cmd_inspect, "eval": _cmd_eval, "bench": _cmd_bench,
                "demo": _cmd_demo}
    try:
        return handlers[args.command](args, stream)
    except ContextfoldError as exc:
        sys.stderr.write(f"contextfold: error: {exc}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
