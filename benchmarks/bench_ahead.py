"""What the call that crosses the trigger waits for, with a summarizer that takes seconds.

An agent loop grows its history gradually (one tool step of ~1% of the budget per call)
under a 16k window; each step "calls the model" (a pause standing in for the model's own
latency), and every summary takes ``SUMMARY_SECONDS`` (an LLM summarizer's latency, slept
before the extractive summary is returned). Measured, in one process:

* contextfold's ``Compactor(ThresholdPolicy())`` as configured by default: past 60% of the
  budget the next compaction is prepared in the background, so the call that crosses the
  trigger sends the prepared output;
* the same with ``Budget(prepare=None)``: that call makes the summary itself;
* LangChain's ``SummarizationMiddleware.before_model`` on the same history, its model
  taking the same time per summary.

Reported: the time the crossing calls took (the slowest one), and the median of the
other calls, for each.

Then when the preparation starts (:func:`starts`): with a 2 s summarizer, the share of
compactions whose call added under 50 ms, preparing from the growth of recent calls (the
default) against not preparing (``prepare=None``), for histories growing by ~1% tool steps and by
full-size documents (3-8k tokens under a 16k window, as in the 60-document HTTP run), at
several model latencies. A preparation hides the summary only when the calls between its
start and the crossing take at least the summary's time: with a model that answers at
once (0 s, nothing between calls) no start point can, and the rows show it.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.policy import SummaryRequest

COUNTER = cf.TiktokenCounter("cl100k_base")
WINDOW = 16_384
SUMMARY_SECONDS = 2.0


class SlowSummarizer:
    """An LLM's latency in front of the extractive summary."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.inner = cf.ExtractiveSummarizer(counter=COUNTER)

    def summarize(self, request: SummaryRequest) -> str:
        time.sleep(self.seconds)
        return self.inner.summarize(request)


def steps(count: int) -> list[list[cf.Message]]:
    """Loop steps of ~150 tokens: a call and its result."""
    out = []
    for k in range(count):
        call = cf.Message("assistant", "", tool_calls=(
            cf.ToolCall(f"s{k}", "lookup", f'{{"record": {k}}}'),))
        result = cf.Message("tool", f"record {k}: REF-{k:05d} " + "status confirmed. " * 30,
                            tool_call_id=f"s{k}", name="lookup")
        out.append([call, result])
    return out


def loop(call: Callable[[list[Any]], bool], convert: Callable[[list[cf.Message]], list[Any]],
         count: int, model_seconds: float) -> tuple[list[float], list[float]]:
    """Durations of the calls that compacted and of the others, in ms."""
    history = convert([cf.Message("system", "You look records up."),
                       cf.Message("user", "Look up every record and list the refs.")])
    crossing: list[float] = []
    others: list[float] = []
    for step in steps(count):
        history = [*history, *convert(step)]
        started = time.perf_counter()
        compacted = call(history)
        (crossing if compacted else others).append((time.perf_counter() - started) * 1e3)
        time.sleep(model_seconds)  # the model answers
    return crossing, others


def ours(prepare: float | None, summary_seconds: float, count: int,
         model_seconds: float) -> tuple[list[float], list[float]]:
    budget = cf.Budget(context_window=WINDOW, prepare=prepare)
    compactor = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER,
                             SlowSummarizer(summary_seconds))
    return loop(lambda h: compactor.compact(h).report.method != "none", list, count,
                model_seconds)


def langchain(summary_seconds: float, count: int,
              model_seconds: float) -> tuple[list[float], list[float]]:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models import GenericFakeChatModel

    from bench_counting import to_langchain

    class SlowModel(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(summary_seconds)
            return super()._generate(*args, **kwargs)

    budget = cf.Budget(context_window=WINDOW)
    middleware = SummarizationMiddleware(
        model=SlowModel(messages=iter(["summary of the records"] * 100)),
        trigger=("tokens", budget.trigger_tokens), keep=("tokens", budget.target_tokens // 2))

    def call(history: list[Any]) -> bool:
        update = middleware.before_model({"messages": history}, None)  # type: ignore[arg-type]
        return update is not None

    return loop(call, to_langchain, count, model_seconds)


def middleware(summary_seconds: float, count: int,
               model_seconds: float) -> tuple[list[float], list[float]]:
    """contextfold's ``CompactionMiddleware`` as ``create_agent`` runs it, its summaries made
    by a chat model that takes ``summary_seconds``; the agent's model answers at once (its
    own latency is the loop's pause), so the time is the hook's."""
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from bench_counting import to_langchain
    from langchain_contextfold import ChatModelSummarizer, CompactionMiddleware

    class SlowModel(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(summary_seconds)
            return super()._generate(*args, **kwargs)

    summaries = SlowModel(messages=iter(["TASK: list the refs\nDATA: see the ledger"] * 100))
    hook = CompactionMiddleware(policy=cf.ThresholdPolicy(),
                                budget=cf.Budget(context_window=WINDOW), counter=COUNTER,
                                summarizer=ChatModelSummarizer(summaries,
                                                               max_input_tokens=None))
    reply = ModelResponse(result=[AIMessage("ok")])
    agent = GenericFakeChatModel(messages=iter(["ok"]))
    compacted: list[bool] = []

    def handler(request: ModelRequest) -> ModelResponse[Any]:
        compacted.append(len(request.messages) < len(request.state["messages"]))
        return reply

    def call(history: list[Any]) -> bool:
        hook.wrap_model_call(ModelRequest(model=agent, messages=history[1:],
                                          system_message=history[0], tools=[],
                                          state={"messages": history[1:]}), handler)
        return compacted[-1] and not (len(compacted) > 1 and compacted[-2])

    return loop(call, to_langchain, count, model_seconds)


WORDS = ["ledger", "contract", "review", "quarterly", "figure", "audit", "supplier", "margin",
         "forecast", "risk", "schedule", "vendor", "invoice", "region", "policy", "transfer",
         "balance", "account", "report"]


def documents(count: int, low: int = 3_000, high: int = 8_000,
              seed: int = 7) -> list[list[cf.Message]]:
    """Loop steps that each read a full-size document (``low``-``high`` tokens) with its
    reference code."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        size = rng.randint(low, high)
        text = " ".join(rng.choice(WORDS) for _ in range(size))
        call = cf.Message("assistant", "", tool_calls=(
            cf.ToolCall(f"d{k}", "read_document", f'{{"number": {k}}}'),))
        result = cf.Message("tool", f"Document {k}. Reference code: REF-{k:04d}. {text}",
                            tool_call_id=f"d{k}", name="read_document")
        out.append([call, result])
    return out


def compaction_calls(step_list: list[list[cf.Message]], budget: cf.Budget,
                     summary_seconds: float, model_seconds: float) -> list[float]:
    """Milliseconds of each call that sent a compaction, in an agent loop over
    ``step_list`` whose model takes ``model_seconds`` a call."""
    compactor = cf.Compactor(cf.ThresholdPolicy(), budget, COUNTER,
                             SlowSummarizer(summary_seconds))
    history = [cf.Message("system", "You read documents and report their codes."),
               cf.Message("user", "Read every document and list the reference codes.")]
    times = []
    for step in step_list:
        history = [*history, *step]
        started = time.perf_counter()
        result = compactor.compact(history)
        if result.report.method != "none":
            times.append((time.perf_counter() - started) * 1e3)
        time.sleep(model_seconds)  # the model answers
    compactor.settle(30)
    return times


def starts(quick: bool) -> list[dict[str, Any]]:
    """Rows: the share of compactions whose call added under 50 ms, preparing ahead (ours:
    from the projected growth or past ``budget.prepare``) and without preparing (peer:
    ``prepare=None``), in one process."""
    summary_seconds = 0.2 if quick else SUMMARY_SECONDS
    scenarios: list[tuple[str, list[list[cf.Message]], cf.Budget, tuple[float, ...]]] = [
        ("~1% tool steps", steps(120 if quick else 160), cf.Budget(context_window=WINDOW),
         (0.0, 0.02) if quick else (0.0, 0.05, 0.1, 0.2)),
        ("full-size documents", documents(10 if quick else 12),
         cf.Budget(context_window=WINDOW, output_reserve=1_024),
         (0.0, 0.3) if quick else (0.0, 0.5, 2.5)),
    ]
    rows: list[dict[str, Any]] = []
    for label, step_list, budget, latencies in scenarios:
        for model_seconds in latencies:
            projected = compaction_calls(step_list, budget, summary_seconds, model_seconds)
            fixed = compaction_calls(step_list, replace(budget, prepare=None),
                                     summary_seconds, model_seconds)
            share = [100 * sum(t < 50 for t in ts) / max(len(ts), 1) for ts in (projected,
                                                                                 fixed)]
            rows.append({
                "name": f"compactions whose call added < 50 ms, {label}, model "
                        f"{model_seconds:g} s a call, summary {summary_seconds:g} s",
                "ours": round(share[0]), "peer": round(share[1]), "unit": "%",
                "ratio": share[0] / share[1] if share[1] else None,
                "notes": f"{len(projected)} compactions, crossing calls median "
                         f"{statistics.median(projected or [0]):.0f} ms, max "
                         f"{max(projected or [0]):.0f} ms; peer: prepare=None "
                         f"(median {statistics.median(fixed or [0]):.0f} ms, max "
                         f"{max(fixed or [0]):.0f} ms)",
            })
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for ``benchmarks/run.py``: the slowest crossing call and the median other call,
    prepared ahead, made on the spot, and LangChain's, in the same process."""
    summary_seconds = 0.05 if quick else SUMMARY_SECONDS
    model_seconds = 0.01 if quick else 0.2
    count = 100 if quick else 140
    prepared = ours(0.6, summary_seconds, count, model_seconds)
    on_the_spot = ours(None, summary_seconds, count, model_seconds)
    through_langchain = middleware(summary_seconds, count, model_seconds)
    peer = langchain(summary_seconds, count, model_seconds)
    label = f"summary takes {summary_seconds:g} s"
    rows: list[dict[str, Any]] = []
    for name, (crossing, _) in (("prepared ahead (default)", prepared),
                                ("without preparing (prepare=None)", on_the_spot),
                                ("CompactionMiddleware, prepared ahead", through_langchain)):
        rows.append({"name": f"call crossing the trigger, {name}, {label}",
                     "ours": round(max(crossing), 1), "peer": round(max(peer[0]), 1),
                     "unit": "ms", "notes": f"{len(crossing)} crossing calls; peer: "
                     "SummarizationMiddleware.before_model"})
    rows.append({"name": "other calls, median (prepared ahead)",
                 "ours": round(statistics.median(prepared[1]), 3),
                 "peer": round(statistics.median(peer[1]), 3), "unit": "ms",
                 "notes": "peer: SummarizationMiddleware.before_model"})
    return rows + starts(quick)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["ahead", *sys.argv[1:]]))
