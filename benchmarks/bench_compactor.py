"""The Compactor's per-step cost in a long agent loop, beside LangChain's per-step hooks.

A simulated agent loop appends 3 messages per step (an assistant message with two parallel
tool calls and their two results) to one growing list and asks for the context to send on
every step. contextfold runs ``Compactor(SummaryPolicy(), Budget.for_model("gpt-4o"))``
with exact tiktoken counting; every ~60 steps the trigger is crossed and one summary is
made (by a counting wrapper around the extractive summarizer, standing in for an LLM).

Measured, in the same process on the same history:

* the median per-step time of the steps where nothing triggers, at 10k and at 50k messages
  of history (it should stay flat: only the new messages are counted);
* the same step for LangChain: ``SummarizationMiddleware.before_model`` (not triggered; a
  fake chat model) and ``trim_messages`` with ``count_tokens_approximately``, both on the
  LangChain form of the same history at 10k messages;
* the share of steps whose output starts with the previous step's output, byte for byte
  (the provider's prompt cache keeps hitting);
* summarizer calls per compaction pass.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.policy import SummaryRequest
from contextfold.testing import generate_history

BUDGET = cf.Budget.for_model("gpt-4o")
"""111,616 input tokens: triggers at 83,712, compacts to 55,808."""
WINDOW = 240
"""Steps measured around each history size (the ones where nothing triggers)."""


class CountingSummarizer:
    """Stands in for an LLM summarizer: the extractive summary, with every call counted."""

    def __init__(self, counter: cf.TokenCounter) -> None:
        self.inner = cf.ExtractiveSummarizer(counter=counter)
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        return self.inner.summarize(request)


def loop_history(n: int) -> list[cf.Message]:
    """System, one user request, then steps of 3 messages (a call pair and two results)."""
    steps = (n - 2) // 3 + 1
    history = generate_history(11, turns=1, tools_per_turn=steps, parallel_calls=2,
                               tool_chars=400)
    return history[:-1]  # drop the final answer: every step ends with tool results


def run_ours(history: list[cf.Message], sizes: Sequence[int]) -> dict[str, Any]:
    """Drive the Compactor over the whole history, step by step."""
    from bench_counting import exact_counter

    counter = exact_counter()
    summarizer = CountingSummarizer(counter)
    compactor = cf.Compactor(cf.SummaryPolicy(), BUDGET, counter=counter,
                             summarizer=summarizer, conversation_id="bench")
    caller = list(history[:2])
    times: dict[int, list[float]] = {n: [] for n in sizes}
    pass_times: list[float] = []
    stable = steps = passes = splits = 0
    previous: list[str] | None = None
    for end in range(5, len(history) + 1, 3):
        caller.extend(history[end - 3 : end])
        started = time.perf_counter()
        result = compactor.compact(caller)
        elapsed = time.perf_counter() - started
        compactor.observe_usage(result.report.tokens_after)
        current = [m.fingerprint for m in result.messages]
        steps += 1
        if previous is not None and current[: len(previous)] == previous:
            stable += 1
        previous = current
        if result.report.method != "none":
            passes += 1
            splits += result.report.details.get("summary", {}).get("splits", 0)
            pass_times.append(elapsed)
            continue
        for n in sizes:
            if n - WINDOW * 3 < len(caller) <= n:
                times[n].append(elapsed)
    return {
        "median_ms": {n: statistics.median(t) * 1000 for n, t in times.items() if t},
        "stable_pct": 100 * stable / max(steps - 1, 1),
        "steps": steps,
        "passes": passes,
        "calls": summarizer.calls,
        "splits": splits,
        "pass_ms": statistics.median(pass_times) * 1000 if pass_times else 0.0,
        "tokens_after_last": result.report.tokens_after,
    }


def run_peers(history: list[cf.Message], n: int, repeat: int) -> dict[str, float]:
    """Median per-step time of LangChain's hooks on the first ``n`` messages, growing."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from bench_counting import to_langchain

    middleware = SummarizationMiddleware(
        model=GenericFakeChatModel(messages=iter(["summary"])), trigger=("tokens", 10**12)
    )
    lc = to_langchain(history[: n + 3 * repeat])
    state_messages = list(lc[: n - 3 * repeat])
    mw_times: list[float] = []
    trim_times: list[float] = []
    for k in range(repeat):
        state_messages.extend(lc[n - 3 * repeat + 3 * k : n - 3 * repeat + 3 * k + 3])
        started = time.perf_counter()
        assert middleware.before_model({"messages": state_messages}, None) is None  # type: ignore[arg-type]
        mw_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        trim_messages(state_messages, max_tokens=BUDGET.input_budget,
                      token_counter=count_tokens_approximately, strategy="last",
                      start_on="human", include_system=True)
        trim_times.append(time.perf_counter() - started)
    return {
        "middleware_ms": statistics.median(mw_times) * 1000,
        "trim_ms": statistics.median(trim_times) * 1000,
    }


def prefix_check_ms(history: list[cf.Message], n: int) -> float:
    """The part of a step that grows with history: checking that the input still starts
    with the previous input (one C-level pass over two lists of the same objects)."""
    from run import best_of

    snapshot, current = list(history[:n]), list(history[:n])
    return best_of(lambda: snapshot == current, repeat=20)


def run(quick: bool) -> list[dict[str, Any]]:
    """The compactor rows (see the module docstring)."""
    small, large = (1_000, 2_000) if quick else (10_000, 50_000)
    history = loop_history(large)
    ours = run_ours(history, (small, large))
    peers = run_peers(history, small, 3 if quick else 15)
    step_small, step_large = ours["median_ms"][small], ours["median_ms"][large]
    faster = min(peers["middleware_ms"], peers["trim_ms"])
    per_pass = ours["calls"] / max(ours["passes"], 1)
    check_small, check_large = prefix_check_ms(history, small), prefix_check_ms(history, large)
    return [
        {"name": f"step, no trigger, {small // 1000}k msgs (median)", "ours": step_small,
         "peer": faster, "unit": "ms",
         "notes": "peer: the faster of the two LangChain hooks below (target: ratio >= 30x)"},
        {"name": f"  SummarizationMiddleware.before_model, {small // 1000}k",
         "ours": step_small, "peer": peers["middleware_ms"], "unit": "ms",
         "notes": "not triggered; fake chat model; count_tokens_approximately"},
        {"name": f"  trim_messages(count_tokens_approximately), {small // 1000}k",
         "ours": step_small, "peer": peers["trim_ms"], "unit": "ms",
         "notes": "strategy=last, start_on=human, include_system"},
        {"name": f"step, no trigger, {large // 1000}k msgs (median)", "ours": step_large,
         "peer": step_small, "ratio": step_small / step_large if step_large else None,
         "unit": "ms", "notes": f"flatness: peer column is our {small // 1000}k figure "
         f"({step_large / step_small:.2f}x the {small // 1000}k step)"},
        {"name": f"  of which the prefix identity check, {large // 1000}k", "ours": check_large,
         "unit": "ms", "notes": f"{check_small:.3f} ms at {small // 1000}k: the only part "
         "that grows with history"},
        {"name": "steps keeping the previous prefix byte-identical", "ours": ours["stable_pct"],
         "unit": "%", "notes": f"{ours['steps']} steps, {ours['passes']} compaction passes "
         "(target >= 90%)"},
        {"name": "summarizer calls per compaction pass", "ours": per_pass, "unit": "calls",
         "notes": f"{ours['calls']} calls in {ours['passes']} passes, {ours['splits']} split"},
        {"name": "compaction pass (median)", "ours": ours["pass_ms"], "unit": "ms",
         "notes": "SummaryPolicy: one summary of the older part, recent 25% kept"},
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["compactor", *sys.argv[1:]]))
