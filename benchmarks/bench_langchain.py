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
process. Also the first ``invoke`` of ``with_compaction(model)`` on the same thread beside
the fake model's own. Run it with ``python benchmarks/run.py langchain [--quick]``.
"""

from __future__ import annotations

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
from langchain_contextfold import CompactionMiddleware, from_core, with_compaction

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import settle

NEVER = 10**9
"""A trigger no history here reaches."""
SYSTEM = SystemMessage("You are a support agent. Use the tools; answer precisely.")
REPLY = ModelResponse(result=[AIMessage("ok")])


@tool
def lookup(query: str) -> str:
    """Look a record up by id or keywords."""
    return query


def state_history(n: int) -> list[BaseMessage]:
    """``n`` LangChain messages (``n`` even): a task, tool steps and the answer, a valid
    thread as a checkpoint holds it (no system message: it is the agent's
    ``system_prompt``)."""
    core = generate_history(7, turns=1, tools_per_turn=(n - 2) // 2, tool_chars=400,
                            system=False)
    return from_core(core[:n])


def step(i: int) -> list[BaseMessage]:
    call_id = f"bench_{i}"
    return [AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": f"q{i}"},
                                       "id": call_id}]),
            ToolMessage(f"record {i}: " + "status confirmed, total 12.50. " * 12,
                        tool_call_id=call_id, name="lookup")]


def handler(request: ModelRequest) -> ModelResponse[Any]:
    return REPLY


def request_for(messages: list[Any], model: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages, system_message=SYSTEM, tools=[lookup],
                        state={"messages": messages})


def measure(call: Callable[[list[BaseMessage]], Any], base: list[BaseMessage],
            calls: int) -> dict[str, float]:
    """Time the first call on ``base`` and ``calls`` more, each one step longer. The
    garbage of building the inputs is collected first, so its collection is not charged
    to whichever contender runs first."""
    messages = list(base)
    settle()
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
                                counter=cf.TiktokenCounter("cl100k_base"),
                                summarizer=cf.ExtractiveSummarizer())
    summarization = SummarizationMiddleware(model, trigger=("tokens", NEVER))
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=NEVER)])
    return {
        "contextfold CompactionMiddleware": lambda m: ours.wrap_model_call(
            request_for(m, model), handler),
        "langchain SummarizationMiddleware": lambda m: summarization.before_model(
            {"messages": m}, None),  # type: ignore[arg-type, typeddict-item]
        "langchain ContextEditingMiddleware": lambda m: editing.wrap_model_call(
            request_for(m, model), handler),
    }


def runnable_first_calls(base: list[BaseMessage]) -> dict[str, float]:
    """The first ``invoke`` of ``with_compaction(model)`` on the whole thread (a system
    prompt, then ``base``) beside the same model's own ``invoke``: conversion, the
    trigger decision and the conversion back, with a budget the thread does not reach."""
    messages: list[BaseMessage] = [SYSTEM, *base]
    times = {}
    for name in ("plain", "with_compaction"):
        model = GenericFakeChatModel(messages=iter(["ok"] * 10))
        runnable: Any = model if name == "plain" else with_compaction(
            model, policy=cf.ThresholdPolicy(), budget=cf.Budget(context_window=NEVER),
            counter=cf.TiktokenCounter("cl100k_base"), summarizer=cf.ExtractiveSummarizer())
        settle()
        started = time.perf_counter()
        runnable.invoke(messages)
        times[name] = (time.perf_counter() - started) * 1e3
    return times


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for ``benchmarks/run.py``: the first call and the median following call of each
    LangChain middleware beside ``CompactionMiddleware``, in the same process."""
    n, calls = (2_000, 10) if quick else (10_000, 30)
    base = state_history(n)
    model = GenericFakeChatModel(messages=iter(["ok"] * 10))
    results = {name: measure(call, base, calls) for name, call in contenders(model).items()}
    ours = results.pop("contextfold CompactionMiddleware")
    rows: list[dict[str, Any]] = []
    for what, key in (("first call", "first_ms"), ("per call, median", "median_ms")):
        for k, (peer, r) in enumerate(results.items()):
            rows.append({
                "name": f"{'' if not k else '  '}{what}, {n // 1000}k msgs",
                "ours": round(ours[key], 3), "peer": round(r[key], 3),
                "unit": "ms", "notes": f"peer: {peer.removeprefix('langchain ')}",
            })
    runnable = runnable_first_calls(base)
    rows.append({"name": f"with_compaction first invoke, {n // 1000}k msgs",
                 "ours": round(runnable["with_compaction"], 3),
                 "peer": round(runnable["plain"], 3), "unit": "ms",
                 "notes": "peer: the same fake model's own invoke (ours includes it)"})
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["langchain", *sys.argv[1:]]))
