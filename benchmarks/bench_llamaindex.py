"""LlamaIndex memory: ``get``/``aget`` and ``put``/``aput`` at 100, 1k and 10k messages,
``CompactingMemory`` beside LlamaIndex's ``ChatMemoryBuffer`` and ``Memory``.

Each memory holds a history of ``n`` agent messages (a system prompt, user prompts, tool
calls with ~400-character results, answers; contextfold's ``generate_history``), loaded
untimed with ``set``, under the same 30,000-token limit and the same cl100k tokenizer.
Then, at that size:

* ``put``: the median time of one more message (a tool round, alternating call and
  result);
* ``get``: the median time of ``get()`` right after each such put, as an agent loop calls it
  (contextfold's first ``get`` after loading, which compacts the whole history once, is
  shown apart as ``get (first)``);
* the same with ``aput`` / ``aget`` in an event loop.

And, for a 10k-message thread (2k with ``--quick``): the cold first reads (``cold_rows``).

A cell stops after ``CELL_SECONDS`` (``QUICK_CELL_SECONDS`` with ``--quick``; at least 3
operations); one operation that runs past
``OP_SECONDS`` is aborted and shown as a lower bound (``ChatMemoryBuffer.get`` recounts
the remaining history once per message it drops, so its cost grows with the square of
the history). Ratios are peer / contextfold: above 1 means contextfold is faster.
Results go to ``benchmarks/results/llamaindex.json`` through ``run.py``.

    /work/venv/bin/python benchmarks/bench_llamaindex.py [--quick]
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer, Memory

import contextfold as cf
from contextfold.testing import generate_history
from llama_index.memory.contextfold import CompactingLLM, CompactingMemory, to_llama_index

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import settle

SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 300)
TOKEN_LIMIT = 30_000
OPS = 40
CELL_SECONDS = 6.0
QUICK_CELL_SECONDS = 0.5
OP_SECONDS = 20.0
COUNTER = cf.TiktokenCounter("cl100k_base")
MemoryFactory = Callable[[], Any]


class _TooSlow(Exception):
    """One operation ran past ``OP_SECONDS``."""


def _alarm(signum: int, frame: Any) -> None:
    raise _TooSlow


def history(n: int) -> list[ChatMessage]:
    """``n`` LlamaIndex messages of an agent conversation."""
    core = generate_history(11, turns=max(1, n // 8 + 1), tools_per_turn=3, tool_chars=400)
    return to_llama_index(core[:n])


def step(i: int) -> ChatMessage:
    """One more message: a tool call, or the result answering the previous one."""
    if i % 2 == 0:
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id=f"bench_{i}", tool_name="lookup", tool_kwargs={"query": f"q{i}"})])
    return ChatMessage(role="tool", content=f"record {i}: " + "status confirmed. " * 20,
                       additional_kwargs={"tool_call_id": f"bench_{i - 1}"})


def tokenizer(text: str) -> list[int]:
    return COUNTER.encoding.encode(text, disallowed_special=())


def factories() -> dict[str, MemoryFactory]:
    """The three memories under the same limit and tokenizer."""
    budget = cf.Budget(context_window=TOKEN_LIMIT)
    return {
        "CompactingMemory": lambda: CompactingMemory.from_defaults(
            policy=cf.ThresholdPolicy(), budget=budget, counter=COUNTER),
        "ChatMemoryBuffer": lambda: ChatMemoryBuffer.from_defaults(
            token_limit=TOKEN_LIMIT, tokenizer_fn=tokenizer),
        "Memory": lambda: Memory.from_defaults(token_limit=TOKEN_LIMIT, tokenizer_fn=tokenizer),
    }


def _timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` takes; raises ``_TooSlow`` past ``OP_SECONDS``."""
    settle()
    signal.setitimer(signal.ITIMER_REAL, OP_SECONDS)
    try:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def measure_sync(factory: MemoryFactory, n: int, cell: float = CELL_SECONDS
                 ) -> dict[str, float | str]:
    """Mean ms of put, and of get after each put, at ``n`` messages (sync API)."""
    memory = factory()
    memory.set(history(n))
    out: dict[str, float | str] = {}
    op = "get (first)"
    try:
        out[op] = _timed(memory.get) * 1000
        times: dict[str, list[float]] = {"put": [], "get": []}
        started = time.perf_counter()
        for i in range(OPS):
            message = step(i)
            op = "put"
            times["put"].append(_timed(partial(memory.put, message)))
            op = "get"
            times["get"].append(_timed(memory.get))
            if time.perf_counter() - started > cell and i >= 2:
                break
        out.update({k: statistics.median(v) * 1000 for k, v in times.items()})
    except _TooSlow:
        out[op] = f">{OP_SECONDS * 1000:,.0f}"
        if op == "get (first)":  # puts do not depend on gets: measure them on their own
            out["put"] = _puts_only(memory)
        for key in ("get (first)", "put", "get"):
            out.setdefault(key, "not measured")
    return out


def _puts_only(memory: Any) -> float | str:
    """Median ms of puts alone (for a memory whose first get passed the cap)."""
    try:
        messages = [step(i) for i in range(10)]
        times = [_timed(partial(memory.put, m)) for m in messages]
    except _TooSlow:
        return f">{OP_SECONDS * 1000:,.0f}"
    return statistics.median(times) * 1000


def measure_async(factory: MemoryFactory, n: int, cell: float = CELL_SECONDS
                  ) -> dict[str, float | str]:
    """Mean ms of aput, and of aget after each aput, at ``n`` messages."""

    async def timed(fn: Callable[[], Awaitable[object]]) -> float:
        settle()
        started = time.perf_counter()
        await asyncio.wait_for(fn(), OP_SECONDS)
        return time.perf_counter() - started

    async def main() -> dict[str, float | str]:
        memory = factory()
        await memory.aset(history(n))
        out: dict[str, float | str] = {"aget (first)": await timed(memory.aget) * 1000}
        times: dict[str, list[float]] = {"aput": [], "aget": []}
        started = time.perf_counter()
        for i in range(OPS):
            message = step(i)
            times["aput"].append(await timed(partial(memory.aput, message)))
            times["aget"].append(await timed(memory.aget))
            if time.perf_counter() - started > cell and i >= 2:
                break
        out.update({k: statistics.median(v) * 1000 for k, v in times.items()})
        return out

    try:
        return asyncio.run(main())
    except TimeoutError:
        bound = f">{OP_SECONDS * 1000:,.0f}"
        return {"aget (first)": bound, "aput": bound, "aget": bound}


def rows_for(n: int, cell: float = CELL_SECONDS) -> list[dict[str, Any]]:
    """One row per peer and operation at ``n`` messages. A peer whose sync operations ran
    past the cap is not run async at that size (an ``asyncio.to_thread`` cannot be
    interrupted, and ``ChatMemoryBuffer.aget`` is its ``get`` in a thread)."""
    figures: dict[str, dict[str, float | str]] = {}
    for name, factory in factories().items():
        figures[name] = measure_sync(factory, n, cell)
        if any(isinstance(v, str) for v in figures[name].values()):
            skipped = "not run (a sync operation passed the cap)"
            figures[name].update({k: skipped for k in ("aget (first)", "aput", "aget")})
        else:
            figures[name].update(measure_async(factory, n, cell))
    ours = figures.pop("CompactingMemory")
    rows = []
    for op in ("put", "get", "get (first)", "aput", "aget", "aget (first)"):
        for peer, theirs in figures.items():
            mine, other = ours[op], theirs.get(op)
            row: dict[str, Any] = {"name": f"{op} at {n:,} msgs", "ours": mine, "unit": "ms",
                                   "notes": peer}
            if isinstance(other, float) and isinstance(mine, float):
                row["peer"] = other
            elif isinstance(other, str):
                row["notes"] = f"{peer}: {other}" + (" ms" if other.startswith(">") else "")
                if other.startswith(">") and isinstance(mine, float):
                    row["ratio"] = float(other[1:].replace(",", "")) / mine
                    row["notes"] += " (aborted; ratio is a lower bound)"
            rows.append(row)
    return rows


class _InstantLLM(MockFunctionCallingLLM):
    """A chat model that answers at once, whatever it is sent (the time is the wrapper's)."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True, is_chat_model=True,
                           context_window=10**9, num_output=256, model_name="instant")

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role="assistant", content="ok"))


def cold_rows(n: int) -> list[dict[str, Any]]:
    """The first read of a resumed ``n``-message thread, nothing converted or counted yet,
    beside ``Memory``'s first ``get`` of the same history: ``CompactingMemory``'s first
    ``get`` (loaded with ``set``, which converts; the history is over the 30k limit, so
    the get compacts), and a ``CompactingLLM``'s first ``chat`` over the whole history
    (the model's window holds it: nothing to compact; conversion included)."""
    messages = history(n)
    times: dict[str, float] = {}
    for name in ("CompactingMemory", "Memory"):
        memory = factories()[name]()
        memory.set(messages)
        settle()
        started = time.perf_counter()
        memory.get()
        times[name] = (time.perf_counter() - started) * 1000
    llm = CompactingLLM(llm=_InstantLLM(), budget=cf.Budget(10**9), counter=COUNTER)
    settle()
    started = time.perf_counter()
    llm.chat(list(messages))
    chat = (time.perf_counter() - started) * 1000
    return [
        {"name": f"get (first, cold) at {n:,} msgs", "ours": times["CompactingMemory"],
         "peer": times["Memory"], "unit": "ms",
         "notes": "Memory's first get of the same history"},
        {"name": f"CompactingLLM first chat at {n:,} msgs", "ours": chat,
         "peer": times["Memory"], "unit": "ms",
         "notes": "Memory's first get; the LLM converts the whole history, no compaction"},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for each size, then the cold first reads of a 10k-message thread."""
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore", DeprecationWarning)
    rows: list[dict[str, Any]] = []
    for n in QUICK_SIZES if quick else SIZES:
        rows.extend(rows_for(n, QUICK_CELL_SECONDS if quick else CELL_SECONDS))
    rows.extend(cold_rows(2_000 if quick else 10_000))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["llamaindex", *sys.argv[1:]]))
