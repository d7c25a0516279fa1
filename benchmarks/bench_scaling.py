"""How cost grows with the history: every policy and LangChain's trimming, 1k to 100k messages.

One agent-loop history (a system prompt, one request, then steps of an assistant message
with two parallel tool calls and their two ~400-character results; ``bench_compactor``'s)
is cut at each size and given to a new ``Compactor`` per policy, with exact tiktoken
counting, the extractive summarizer and a GPT-4o budget (111,616 input tokens: every size
from 3k messages up is over it). Measured, in one process:

* **cold**: the first ``compact`` of the history on fresh message objects (nothing counted,
  scanned or converted yet): what resuming a long thread costs;
* **per step**: the median of the next steps, each appending one loop step (3 messages) to
  the previous call's list, as an agent loop does;
* **an agent loop**: each policy's total over 2,000 loop steps under a 16k window, asked
  at every call point, beside ThresholdPolicy's (which compacts to a target below its
  trigger and then appends until the trigger again);
* the peers on the LangChain form of the same history: ``trim_messages(strategy="last")``
  with LangChain's tiktoken counter over the same encoding (no cache: its every call is
  cold) and with ``count_tokens_approximately``.

The rows give each contender's time at each size and its growth from the smallest to the
largest size; the chart (``benchmarks/results/scaling.svg``, log-log) draws both panels.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import contextfold as cf

SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
QUICK_SIZES = (1_000, 2_000)
BUDGET = cf.Budget.for_model("gpt-4o")
POLICIES: dict[str, Callable[[], cf.policy.Policy]] = {
    "threshold": cf.ThresholdPolicy,
    "tiered": cf.TieredPolicy,
    "summary": cf.SummaryPolicy,
    "truncation": cf.TruncationPolicy,
    "loop_slice": cf.LoopSlicePolicy,
    "turn_aware": cf.TurnAwarePolicy,
}
CHART = Path(__file__).resolve().parent / "results" / "scaling.svg"


def steps(n: int, count: int) -> list[list[cf.Message]]:
    """``count`` loop steps (an assistant message calling two tools, their results)."""
    out = []
    for i in range(count):
        ids = (f"scale_{n}_{i}_a", f"scale_{n}_{i}_b")
        call = cf.Message(role="assistant", content="", tool_calls=tuple(
            cf.ToolCall(id=c, name="lookup", arguments=f'{{"query": "q{i}"}}') for c in ids))
        results = [cf.Message(role="tool", content=f"record {i}: " + "status confirmed. " * 20,
                              tool_call_id=c, name="lookup") for c in ids]
        out.append([call, *results])
    return out


def ours(policy: str, history: list[cf.Message], counter: cf.TokenCounter,
         step_count: int) -> tuple[float, float]:
    """Cold first call and median next step of one policy, in ms."""
    compactor = cf.Compactor(policy=POLICIES[policy](), budget=BUDGET, counter=counter,
                             summarizer=cf.ExtractiveSummarizer(counter=counter))
    messages = [dataclasses.replace(m) for m in history]  # fresh: nothing cached on them
    started = time.perf_counter()
    compactor.compact(messages)
    cold = time.perf_counter() - started
    times = []
    for step in steps(len(history), step_count):
        messages = [*messages, *step]
        started = time.perf_counter()
        compactor.compact(messages)
        times.append(time.perf_counter() - started)
    return cold * 1e3, statistics.median(times) * 1e3


def trimmed(lc: list[Any], count: Callable[[list[Any]], int]) -> float:
    """One ``trim_messages`` call to the same input budget, in ms."""
    from langchain_core.messages import trim_messages

    started = time.perf_counter()
    trim_messages(lc, max_tokens=BUDGET.input_budget, token_counter=count, strategy="last",
                  include_system=True, start_on="human")
    return (time.perf_counter() - started) * 1e3


def measure(sizes: Sequence[int]) -> dict[str, dict[str, dict[int, float]]]:
    """``{"cold" | "per step": {contender: {size: ms}}}``."""
    from langchain_core.messages.utils import count_tokens_approximately

    from bench_compactor import loop_history
    from bench_counting import exact_counter, langchain_tiktoken_counter, to_langchain

    counter = exact_counter()
    full = loop_history(max(sizes))
    found: dict[str, dict[str, dict[int, float]]] = {"cold": {}, "per step": {}}
    for n in sizes:
        # Whole steps: a loop calls the model after a step's last result (a cut between
        # the two results would leave a call unanswered, and every call would repair it).
        history = full[: n - (n - 2) % 3]
        step_count = 5 if n >= 30_000 else 15
        for policy in POLICIES:
            cold, step = ours(policy, history, counter, step_count)
            found["cold"].setdefault(policy, {})[n] = cold
            found["per step"].setdefault(policy, {})[n] = step
        lc = to_langchain(history)
        exact = langchain_tiktoken_counter(counter.encoding)
        for name, count in (("trim_messages, tiktoken", exact),
                            ("trim_messages, approximate", count_tokens_approximately)):
            ms = min(trimmed(lc, count) for _ in range(1 if n >= 30_000 else 2))
            found["cold"].setdefault(name, {})[n] = ms
            found["per step"].setdefault(name, {})[n] = ms  # no cache: every call is cold
    return found


LOOP_BUDGET = cf.Budget(context_window=16_000)


def loop_totals(step_count: int) -> dict[str, float]:
    """Seconds each policy's ``Compactor`` takes in total over an agent loop of
    ``step_count`` steps (3 messages each) under a 16k window, asked at every point where
    an agent calls the model (after the request, then after each step's results)."""
    from bench_compactor import loop_history
    from bench_counting import exact_counter

    counter = exact_counter()
    history = loop_history(2 + 3 * step_count)
    calls = [i + 1 for i in range(1, len(history))
             if history[i].role == "user" or (history[i].role == "tool" and (
                 i + 1 == len(history) or history[i + 1].role != "tool"))]
    totals = {}
    for policy, make in POLICIES.items():
        compactor = cf.Compactor(policy=make(), budget=LOOP_BUDGET, counter=counter,
                                 summarizer=cf.ExtractiveSummarizer(counter=counter))
        messages = [dataclasses.replace(m) for m in history]
        started = time.perf_counter()
        for end in calls:
            compactor.compact(messages[:end])
        totals[policy] = time.perf_counter() - started
    return totals


# -- the chart -----------------------------------------------------------------------

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f",
           "#bcbd22")


def chart(found: dict[str, dict[str, dict[int, float]]]) -> str:
    """Both panels as one SVG: messages (log) across, milliseconds (log) up."""
    import math

    width, height, pad = 460, 320, 56
    panels = []
    contenders = list(next(iter(found.values())))
    for p, (panel, series) in enumerate(found.items()):
        xs = sorted({n for values in series.values() for n in values})
        ys = [ms for values in series.values() for ms in values.values() if ms > 0]
        x0, x1 = math.log10(xs[0]), math.log10(xs[-1]) if len(xs) > 1 else math.log10(xs[0]) + 1
        y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        y1 = max(y1, y0 + 1)

        def at(n: float, ms: float, x0: float = x0, x1: float = x1, y0: float = y0,
               y1: float = y1, left: int = p * width) -> tuple[float, float]:
            x = left + pad + (math.log10(n) - x0) / (x1 - x0) * (width - 2 * pad)
            y = height - pad - (math.log10(max(ms, 10**y0)) - y0) / (y1 - y0) * (height - 2 * pad)
            return x, y

        parts = [f'<text x="{p * width + width / 2}" y="20" text-anchor="middle" '
                 f'font-weight="bold">{panel}</text>']
        for k in range(y0, y1 + 1):
            _, y = at(xs[0], 10**k)
            label = f"{10**k:g} ms" if k >= 0 else f"{10**k:.{-k}f} ms"
            parts.append(f'<line x1="{p * width + pad}" x2="{p * width + width - pad}" '
                         f'y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                         f'<text x="{p * width + pad - 4}" y="{y + 4:.1f}" '
                         f'text-anchor="end" font-size="10">{label}</text>')
        for n in xs:
            x, _ = at(n, 10**y0)
            parts.append(f'<text x="{x:.1f}" y="{height - pad + 16}" text-anchor="middle" '
                         f'font-size="10">{n // 1000}k</text>')
        parts.append(f'<text x="{p * width + width / 2}" y="{height - 14}" '
                     'text-anchor="middle" font-size="11">messages in the history</text>')
        for c, name in enumerate(contenders):
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in
                              (at(n, ms) for n, ms in sorted(series[name].items())))
            dash = ' stroke-dasharray="5,3"' if name.startswith("trim") else ""
            parts.append(f'<polyline points="{points}" fill="none" stroke-width="2" '
                         f'stroke="{_COLORS[c % len(_COLORS)]}"{dash}/>')
        panels.append("".join(parts))
    legend = "".join(
        f'<text x="{2 * width + 8}" y="{48 + 18 * c}" font-size="11" '
        f'fill="{_COLORS[c % len(_COLORS)]}">{name}</text>' for c, name in enumerate(contenders))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width + 200}" '
            f'height="{height}" font-family="sans-serif">{"".join(panels)}{legend}</svg>\n')


def run(quick: bool) -> list[dict[str, Any]]:
    """A row per contender and panel: the time at the largest size, its growth from the
    smallest, and every size's figure in the notes; the chart is written beside."""
    sizes = QUICK_SIZES if quick else SIZES
    found = measure(sizes)
    CHART.parent.mkdir(exist_ok=True)
    CHART.write_text(chart(found), encoding="utf-8")
    rows = []
    small, large = sizes[0], sizes[-1]
    for panel, series in found.items():
        peer = series["trim_messages, tiktoken"][large]
        for name, values in series.items():
            if name.startswith("trim"):
                continue
            rows.append({
                "name": f"{panel}, {large // 1000}k msgs: {name}", "ours": values[large],
                "peer": peer, "unit": "ms",
                "notes": (f"{values[large] / values[small]:.1f}x the {small // 1000}k figure; "
                          + ", ".join(f"{n // 1000}k {ms:,.1f}" for n, ms in values.items())
                          + "; vs trim_messages (tiktoken)"),
            })
        for name in ("trim_messages, tiktoken", "trim_messages, approximate"):
            values = series[name]
            rows.append({
                "name": f"{panel}, {large // 1000}k msgs: {name} (peer)", "ours": values[large],
                "unit": "ms",
                "notes": (f"{values[large] / values[small]:.1f}x the {small // 1000}k figure; "
                          + ", ".join(f"{n // 1000}k {ms:,.1f}" for n, ms in values.items())),
            })
    step_count = 50 if quick else 2_000
    totals = loop_totals(step_count)
    for policy, seconds in totals.items():
        rows.append({
            "name": f"{step_count:,}-step agent loop, total: {policy}", "ours": seconds,
            "unit": "s", "notes": (f"{seconds / totals['threshold']:.1f}x ThresholdPolicy's "
                                   f"total; 16k window, a call after each step"),
        })
    rows.append({"name": "chart", "ours": len(sizes), "unit": "sizes",
                 "notes": str(CHART.relative_to(CHART.parents[2]))})
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["scaling", *sys.argv[1:]]))
