"""The cold path: the first compaction of a long history nobody counted, against the
tokenizer itself and against ``trim_messages``.

One agent-loop history (``bench_compactor.loop_history``: a system prompt, one request,
then steps of an assistant message calling two tools and their two ~400-character
results) of 10,000 messages, as OpenAI message dicts, as a resumed thread or a first call
hands it over. Every contender uses tiktoken's ``cl100k_base`` and a GPT-4o budget
(111,616 input tokens, far below the history). Measured side by side in one process, each
the fastest of ``REPEAT`` runs (``run.best_of``):

* **the tokenizer pass**: ``encode_ordinary`` of every text the counters count, one after
  the other on one thread: what counting the history once costs at the tokenizer's speed;
* **first compact()**: ``from_openai`` of the dicts (new message objects each run: nothing
  counted, converted or scanned yet) and a new ``Compactor``'s first ``compact``, per
  policy, with the extractive summarizer;
* **with_compaction's first invoke**: a LangChain chat model (``GenericFakeChatModel``,
  which answers at once) wrapped by ``with_compaction`` with ThresholdPolicy, invoked once
  on the LangChain form of the history: conversion both ways, the decision, the compaction;
* **trim_messages**: ``trim_messages(strategy="last")`` of the LangChain form to the same
  budget with the tiktoken message counter of LangChain's guide (``bench_counting``).

Rows give ratios with the peer's time over ours (above 1: contextfold is faster); the
tokenizer rows say "within 1.0x a pass" when the ratio is 1 or more. In the full run the
100k-message rows compare every policy's first ``compact()`` with ``trim_messages`` (one
run each: a run takes tens of seconds). The machine's load average is in every row's
notes: on a shared machine the threads that count in parallel have no free core. Every
row's notes also give the process's CPU time per run (``timed``): unlike the wall time,
it does not grow with the waits for a core, so runs on a busy machine stay comparable.

    .venv/bin/python benchmarks/run.py cold [--quick]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.policy import Policy

N = 10_000
QUICK_N = 2_000
LARGE_N = 100_000
REPEAT = 3
ENCODING = "cl100k_base"
BUDGET = cf.Budget.for_model("gpt-4o")
POLICIES: dict[str, Callable[[], Policy]] = {
    "threshold": cf.ThresholdPolicy,
    "tiered": cf.TieredPolicy,
    "summary": cf.SummaryPolicy,
    "truncation": cf.TruncationPolicy,
    "loop_slice": cf.LoopSlicePolicy,
    "turn_aware": cf.TurnAwarePolicy,
}


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
        return f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count() or 1} cores"
    except OSError:  # pragma: no cover - no load average on this platform
        return "load unknown"


def history(n: int) -> list[cf.Message]:
    """Whole loop steps of about ``n`` messages (a cut between two results would leave a
    call unanswered)."""
    from bench_compactor import loop_history

    return loop_history(n)[: n - (n - 2) % 3]


def tokenizer_pass(texts: list[str], encoding: Any) -> None:
    """Every text encoded once, one after the other, on this thread."""
    encode = encoding.encode_ordinary
    for text in texts:
        encode(text)


def first_compact(raw: list[dict[str, Any]], policy: str) -> cf.CompactionResult:
    """``from_openai`` and a new Compactor's first ``compact``: nothing counted yet."""
    counter = cf.TiktokenCounter(ENCODING)
    compactor = cf.Compactor(policy=POLICIES[policy](), budget=BUDGET, counter=counter,
                             summarizer=cf.ExtractiveSummarizer(counter=counter))
    return compactor.compact(cf.from_openai(raw))


def first_invoke(lc: list[Any]) -> None:
    """``with_compaction``'s first invoke of a model that answers at once."""
    from langchain_core.language_models import GenericFakeChatModel

    from langchain_contextfold import with_compaction

    model = GenericFakeChatModel(messages=iter(["ok"]))
    runnable = with_compaction(model, policy=cf.ThresholdPolicy(), budget=BUDGET,
                               counter=cf.TiktokenCounter(ENCODING),
                               summarizer=cf.ExtractiveSummarizer())
    runnable.invoke(lc)


def trim(lc: list[Any], count: Callable[[list[Any]], int]) -> None:
    from langchain_core.messages import trim_messages

    trim_messages(lc, max_tokens=BUDGET.input_budget, token_counter=count, strategy="last",
                  include_system=True, start_on="human")


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, str]:
    """``run.best_of(fn, repeat)`` and a note of the process's CPU time per run. On a busy
    machine the wall time takes in the waits for a core; the CPU time does not, so the
    note keeps runs on a loaded and an idle machine comparable (it adds the counting
    threads' time: unloaded, it can exceed the wall time)."""
    from run import best_of

    started = time.process_time()
    wall = best_of(fn, repeat)
    cpu = (time.process_time() - started) * 1000 / max(1, repeat)
    return wall, f"CPU {cpu:,.0f} ms/run"


def _texts(messages: list[cf.Message]) -> list[str]:
    """The texts a counter encodes: content, reasoning, call arguments, the call id."""
    out = []
    for m in messages:
        out.append(m.text)
        out.extend(t for t in (m.reasoning, m.tool_call_id) if t)
        out.extend(call.arguments for call in m.tool_calls)
    return [t for t in out if t]


def rows_at(n: int, policies: list[str], repeat: int) -> list[dict[str, Any]]:
    """The 10k rows: each contender against the tokenizer pass and ``trim_messages``."""
    from bench_counting import langchain_tiktoken_counter, to_langchain

    base = history(n)
    raw = cf.to_openai(base)
    lc = to_langchain(base)
    encoding = cf.TiktokenCounter(ENCODING).encoding
    texts = _texts(base)
    lc_count = langchain_tiktoken_counter(encoding)
    label = f"{n // 1000}k msgs"
    single, single_cpu = timed(lambda: tokenizer_pass(texts, encoding), repeat)
    tokens = sum(len(encoding.encode_ordinary(t)) for t in texts)
    peer, peer_cpu = timed(lambda: trim(lc, lc_count), repeat)
    rows: list[dict[str, Any]] = [{
        "name": f"tokenizer pass, {label} (reference)", "ours": single, "unit": "ms",
        "notes": f"{tokens:,} tokens in {len(texts):,} texts, one thread; {single_cpu}; "
                 f"{_load()}",
    }, {
        "name": f"trim_messages, {label} (peer)", "ours": peer, "unit": "ms",
        "notes": f"{peer / single:.1f}x the tokenizer pass; {peer_cpu}; {_load()}",
    }]
    for policy in policies:
        ours, cpu = timed(partial(first_compact, raw, policy), repeat)
        rows.append({
            "name": f"first compact(), {label}: {policy} vs a tokenizer pass", "ours": ours,
            "peer": single, "unit": "ms",
            "notes": f"conversion included; target: ratio >= 1.0; {cpu}; {_load()}",
        })
        rows.append({
            "name": f"first compact(), {label}: {policy} vs trim_messages", "ours": ours,
            "peer": peer, "unit": "ms", "notes": f"target: ratio >= 10; {cpu}; {_load()}",
        })
    invoke, cpu = timed(lambda: first_invoke(lc), repeat)
    rows.append({
        "name": f"with_compaction first invoke, {label} vs a tokenizer pass", "ours": invoke,
        "peer": single, "unit": "ms",
        "notes": f"ThresholdPolicy; target: ratio >= 0.67 (within 1.5x); {cpu}; {_load()}",
    })
    return rows


def rows_large(n: int) -> list[dict[str, Any]]:
    """Every policy's first ``compact()`` at ``n`` messages against ``trim_messages``."""
    from bench_counting import langchain_tiktoken_counter, to_langchain

    base = history(n)
    raw = cf.to_openai(base)
    lc = to_langchain(base)
    del base
    peer, peer_cpu = timed(lambda: trim(lc, langchain_tiktoken_counter(
        cf.TiktokenCounter(ENCODING).encoding)), 1)
    label = f"{n // 1000}k msgs"
    rows = []
    for policy in POLICIES:
        ours, cpu = timed(partial(first_compact, raw, policy), 1)
        rows.append({
            "name": f"first compact(), {label}: {policy} vs trim_messages", "ours": ours,
            "peer": peer, "unit": "ms",
            "notes": f"conversion included; target: ratio >= 1.0; one run; {cpu} "
                     f"(trim_messages {peer_cpu}); {_load()}",
        })
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """The 10k rows (2k with ``quick``), then the 100k rows in the full run."""
    if quick:
        return rows_at(QUICK_N, ["threshold", "tiered"], 2)
    return rows_at(N, list(POLICIES), REPEAT) + rows_large(LARGE_N)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["cold", *sys.argv[1:]]))
