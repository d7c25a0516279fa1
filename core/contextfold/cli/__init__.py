"""The ``contextfold`` command: demo, inspect, eval, bench.

    contextfold demo                      offline agent run, per-step table and HTML report
    contextfold inspect FILE [--step N]   replay a transcript under a policy and budget
    contextfold eval [FILES...] [--chats N]  fidelity of each policy beside the peers
    contextfold bench [NAME...] [--quick] the benchmark suite (from a source checkout)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .._contract.policy import Policy
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, counter_for_model
from .._optional import require
from ..errors import ConfigurationError, ContextfoldError
from .progress import Progress

if TYPE_CHECKING:
    from .eval import Contender, EvalRow, Seen
    from .eval_recall import RecallRow
    from .transcripts import Transcript

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


def _usage_error(command: str, message: str) -> int:
    """A bad value found after parsing (it needed the file read): one line, status 2."""
    sys.stderr.write(f"contextfold {command}: error: {message}\n")
    return 2


def _counter(args: argparse.Namespace) -> TokenCounter:
    return counter_for_model(args.model or "gpt-4o")


def _budget(args: argparse.Namespace) -> Budget:
    if args.budget is not None:
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
    from .replay import replay, step_boundaries
    from .report import write_html
    from .transcripts import load_transcripts

    transcripts = load_transcripts(args.transcript)
    if args.record >= len(transcripts):
        return _usage_error("inspect", f"--record {args.record}: {args.transcript} holds "
                            f"records 0 to {len(transcripts) - 1}")
    transcript = transcripts[args.record]
    steps = len(step_boundaries(transcript.messages))
    if args.step is not None and args.step > steps:
        return _usage_error("inspect", f"--step {args.step}: the replay has steps 1 to {steps}")
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
    from .eval_recall import evaluate_recall, in_split, prepare, with_opening_turn
    from .transcripts import generated_chats, load_transcripts

    transcripts = [t for path in args.transcripts for t in load_transcripts(path)]
    transcripts += generated_chats(args.chats, sessions=args.chat_sessions)
    transcripts = [with_opening_turn(t) for t in transcripts if in_split(t.name, args.split)]
    if not transcripts:
        return _usage_error("eval", "nothing to evaluate: give transcript files (or "
                            "sample:airline), --chats N, or both"
                            + (f" (none is in --split {args.split})" if args.split != "all"
                               else ""))
    if args.limit:
        transcripts = transcripts[: args.limit]
    counter = _counter(args)
    table = _policies()
    contenders = [our_contender(name, table[name]) for name in args.policies]
    left_out: list[str] = []
    if not args.no_peers:
        peers, left_out = peer_contenders()
        contenders += peers
    fractions = args.fractions
    runs = len(fractions) * len(contenders) * len(transcripts)
    progress = Progress(runs * (1 if args.recall_only else 2), "eval")
    try:
        prepared = [prepare(t, counter) for t in transcripts]
        recall = evaluate_recall(
            prepared, contenders, fractions=fractions, counter=counter,
            on_done=lambda c, p: progress.advance(f"{c.name}: {p.transcript.name}"))
        rows = [] if args.recall_only else evaluate(
            transcripts, [_reporting(c, progress) for c in contenders], fractions=fractions,
            counter=counter)
    finally:
        progress.close()
    out.write(f"{len(transcripts)} transcript(s) (split {args.split}), "
              f"{sum(len(p.cuts) for p in prepared)} cut(s), "
              f"{len({p.source for p in prepared})} source(s); counter {counter.name}\n")
    for line in left_out:
        out.write(f"peer left out: {line}\n")
    old = {(r.contender, r.fraction): r for r in rows}
    _print_table([_eval_line(r, old.get((r.contender, r.fraction))) for r in recall],
                 _EVAL_HEADERS[: None if rows else 8], out)
    for r in recall:
        for e in r.errors[:3]:
            out.write(f"  {r.contender}: {e}\n")
    for o in rows:
        for e in o.errors[:3]:
            out.write(f"  {o.contender}: {e}\n")
    if args.json:
        summary = [{"contender": r.contender, "ours": r.ours, "fraction": r.fraction,
                    "needed_from_memory": r.to_dict()}
                   | (_old_figures(old[(r.contender, r.fraction)]) if rows else {})
                   for r in recall]
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


_EVAL_HEADERS = ["contender", "", "allowance", "from memory", "memory recoverable",
                 "tokens used", "within", "oracle", "probes kept", "needed next", "gold kept",
                 "facts recalled", "context used", "recoverable", "cached prefix",
                 "tokens saved", "over budget", "invalid", "errors"]


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{value:.1%}"


def _eval_line(r: RecallRow, o: EvalRow | None) -> list[Any]:
    """One table line: the needed-from-memory figures, then the older ones when run."""
    line: list[Any] = [r.contender, "ours" if r.ours else "peer", f"{r.fraction:.0%}",
                       _pct(r.figure("in_view")), _pct(r.figure("recoverable")),
                       _pct(r.figure("tokens_used")), _pct(r.figure("within")),
                       _pct(r.figure("oracle"))]
    if o is None:
        return line
    return [
        *line, f"{o.score:.1%}", "n/a" if o.needed == 0 else f"{o.needed_score:.1%}",
        "n/a" if o.gold == 0 else f"{o.gold_score:.1%}",
        "n/a" if o.asked == 0 else f"{o.recall_score:.1%}",
        "n/a" if not o.fills else f"{o.fill:.0%}", f"{o.recoverable_score:.1%}",
        "n/a" if o.prefix_pairs == 0 else f"{o.cached_score:.1%}", f"{o.saved:.1%}",
        o.over_budget, o.invalid, len(o.errors)]


def _old_figures(o: EvalRow) -> dict[str, Any]:
    """The older figures of a row, as the JSON carried them before."""
    return {k: v for k, v in o.__dict__.items() if k not in ("contender", "ours", "fraction")
            } | {"score": o.score, "fill": o.fill, "recall": o.recall_score,
                 "recoverable_share": o.recoverable_score, "cached_prefix": o.cached_score}


def _reporting(contender: Contender, progress: Progress) -> Contender:
    """``contender`` advancing ``progress`` each time it has run on a transcript."""

    def contexts(transcript: Transcript, allowance: int, counter: TokenCounter,
                 cuts: Sequence[int]) -> Seen:
        seen = contender.contexts_at(transcript, allowance, counter, cuts)
        progress.advance(f"{contender.name}: {transcript.name}")
        return seen

    return dataclasses.replace(contender, contexts=contexts)


def _cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    runner = Path.cwd() / "benchmarks" / "run.py"
    if not runner.is_file():
        return _usage_error("bench", "it runs from a source checkout: benchmarks/run.py not "
                            "found in the current directory")
    modules = [p.stem.removeprefix("bench_") for p in runner.parent.glob("bench_*.py")]
    unknown = [n for n in args.names if not any(n in m for m in modules)]
    if unknown:
        return _usage_error("bench", f"no benchmark matches {', '.join(map(repr, unknown))}; "
                            f"the benchmarks are: {', '.join(sorted(modules))}")
    cmd = [sys.executable, str(runner), *args.names] + (["--quick"] if args.quick else [])
    return subprocess.call(cmd)


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    require("langchain_core", extra="langchain", feature="contextfold demo",
            package="langchain-core")
    from .demo import run_demo

    if args.model is not None and not args.real:
        return _usage_error("demo", "--model chooses the model of --real; the offline demo's "
                            "model is scripted")
    return run_demo(data_dir=args.data_dir, emails=args.emails, real=args.real,
                    model=args.model, out=out)


def _parser() -> argparse.ArgumentParser:
    from .options import (
        Parser,
        comma_list,
        data_directory,
        fraction_list,
        int_in,
        output_file,
        transcript_source,
    )

    p = Parser(prog="contextfold", description=(__doc__ or "").replace("``", ""),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="offline agent run with a per-step table and an HTML report")
    d.add_argument("--data-dir", type=data_directory,
                   default=os.environ.get("CONTEXTFOLD_DATA_DIR", "contextfold-data"),
                   help="where the history database and the report go, made when missing "
                   "(default: %(default)s)")
    d.add_argument("--emails", type=int_in(1, 500), default=43,
                   help="how many e-mails the scripted agent reads, 1 to 500 "
                   "(default: %(default)s)")
    d.add_argument("--real", action="store_true",
                   help="use a real OpenAI model (needs OPENAI_API_KEY and langchain-openai)")
    d.add_argument("--model", default=None, help="the model of --real (default: gpt-4o-mini)")
    sources = ("a transcript file (OpenAI or Anthropic format, JSON or JSONL) or sample:NAME, "
               f"a shipped sample ({', '.join('sample:' + n for n in _sample_names())})")
    i = sub.add_parser("inspect", help="replay a transcript step by step under a policy")
    i.add_argument("transcript", type=transcript_source, help=sources)
    i.add_argument("--policy", default="threshold", choices=POLICIES)
    i.add_argument("--budget", type=int_in(1), metavar="TOKENS",
                   help="context window in tokens (default: the model's)")
    i.add_argument("--model", default=None, help="model name for the budget and the counter")
    i.add_argument("--step", type=int_in(1), help="print what the model sees at this step")
    i.add_argument("--record", type=int_in(0), default=0,
                   help="record of a data-set file, from 0 (default: %(default)s)")
    i.add_argument("--html", type=output_file, help="write the HTML report here")
    i.add_argument("--max-chars", type=int_in(1), default=20_000,
                   help="characters of --step's request shown (default: %(default)s)")
    e = sub.add_parser("eval", help="fidelity of each policy beside the peers",
                       description="Scores each policy beside the peers. On a terminal a "
                       "progress bar is drawn on standard error; piped, only the table is "
                       "printed.")
    e.add_argument("transcripts", nargs="*", type=transcript_source, help=sources)
    e.add_argument("--chats", type=int_in(0), default=0, metavar="N",
                   help="also N generated long chats with planted facts asked late "
                   "(the 'facts recalled' column)")
    e.add_argument("--chat-sessions", type=int_in(3, 200), default=12, metavar="S",
                   help="sessions per generated chat, 3 to 200 (default: %(default)s)")
    e.add_argument("--policies", type=comma_list(POLICIES),
                   default="threshold,tiered,truncation,turn-aware",
                   help=f"comma-separated, from: {', '.join(POLICIES)} (default: %(default)s)")
    e.add_argument("--fractions", type=fraction_list, default="0.5,0.25",
                   help="allowances: the system prompt plus this share of the rest, above 0 "
                   "and at most 1, comma-separated (default: %(default)s)")
    e.add_argument("--split", choices=("dev", "test", "all"), default="all",
                   help="a fixed half of the transcripts by the hash of their names: dev to "
                   "tune on, test to report (default: %(default)s)")
    e.add_argument("--recall-only", action="store_true",
                   help="only the needed-from-memory figures (skips the call-by-call replay "
                   "the older columns need; several times faster)")
    e.add_argument("--model", default=None, help="model name for the counter")
    e.add_argument("--limit", type=int_in(1), help="at most this many transcripts")
    e.add_argument("--no-peers", action="store_true", help="our policies only")
    e.add_argument("--json", type=output_file, help="write the rows as JSON here (its folder "
                   "must exist)")
    b = sub.add_parser("bench", help="run the benchmark suite")
    b.add_argument("names", nargs="*", help="run only the modules whose name contains one")
    b.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats "
                   "(under a minute)")
    return p


def _sample_names() -> list[str]:
    from ..samples import SAMPLES

    return list(SAMPLES)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    stream = out or sys.stdout
    handlers = {"inspect": _cmd_inspect, "eval": _cmd_eval, "bench": _cmd_bench,
                "demo": _cmd_demo}
    try:
        return handlers[args.command](args, stream)
    except ContextfoldError as exc:
        return _usage_error(args.command, str(exc))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
