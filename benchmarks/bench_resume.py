"""The first call of a resumed 10k-message thread, with and without the counts its store kept.

A thread of 10,000 agent messages (``generate_history``: a system prompt, user prompts, tool
calls with ~400-character results, answers; about 720k tokens) was stored by an earlier
process, which compacted it once and so counted it (untimed). A new process resumes it:
a new ``SQLiteStore`` object on the same file, a new memory or middleware with a new exact
counter (cl100k_base), the messages read again. Timed, in the same run:

* LlamaIndex: ``CompactingMemory``'s first ``get()`` (the session loaded from the store,
  compacted under a 30,000-token limit with ``ThresholdPolicy``), beside LlamaIndex
  ``Memory``'s first ``get()`` of the same history under the same limit and tokenizer,
  resumed the same way (a new ``Memory`` on the SQLite file its earlier process filled
  with ``set``, as ``bench_llamaindex`` loads it: ``Memory`` trims its queue only on
  ``put``, so this ``get`` reads and tokenizes the whole history and returns it whole);
* LangChain: ``CompactionMiddleware.wrap_model_call`` on the thread as a checkpoint holds
  it (LangChain messages with ids, copied), truncating to a 28,000-token input budget
  (``TruncationPolicy``, then ``ThresholdPolicy``), beside ``trim_messages`` of the same
  messages to the same budget with LangChain's tiktoken message counter over the same
  encoding.

Then a thread compacted with an LLM summarizer (``ThresholdPolicy``, a scripted summarizer
that counts its requests; the earlier process served it call by call, 24 messages a call):
the new process's first call, with the compaction state the store kept beside the messages
and without it, in summary requests and milliseconds (one run each: a second would find the
summaries in the store's cache).

Each contextfold figure of the first part is taken with the counts the store kept
("stored counts") and on a copy of the file whose kept counts were deleted ("no stored
counts": every message is tokenized again, as before counts were kept). Fastest of
``REPEAT`` runs, each on a fresh copy of the file. Ratios are peer / ours (above 1:
contextfold is faster).

    .venv/bin/python benchmarks/run.py resume
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import sqlite3
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.testing import generate_history

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import settle

N = 10_000
QUICK_N = 1_000
REPEAT = 3
QUICK_REPEAT = 2
SUMMARIZED_N = 2_000
SUMMARIZED_QUICK_N = 480
"""The thread of the LLM-summary rows, grown call by call in the earlier process."""
ENCODING = "cl100k_base"
TOKEN_LIMIT = 30_000
"""The LlamaIndex memories' limit (as in ``bench_llamaindex``)."""
BUDGET = cf.Budget(context_window=32_000, output_reserve=4_000)
"""28,000 input tokens, the LangChain rows' budget (as in ``bench_truncation``)."""
UNPREPARED = cf.Budget(context_window=32_000, output_reserve=4_000, prepare=None)
"""The same, preparing nothing ahead (a compaction prepared in the background is not part
of the kept state, so a restart between the preparation and its use would change it)."""


def thread(n: int) -> list[cf.Message]:
    """The ``n``-message thread (the ``bench_llamaindex`` history)."""
    return generate_history(11, turns=n // 8 + 1, tools_per_turn=3, tool_chars=400)[:n]


def counter() -> cf.TiktokenCounter:
    """A new process's exact counter: nothing counted yet."""
    return cf.TiktokenCounter(ENCODING)


def _copy(source: Path, kept: bool) -> Path:
    """A fresh copy of a store file (its WAL too), without its kept counts unless ``kept``."""
    target = source.with_name(f"{source.stem}-{'kept' if kept else 'bare'}.db")
    for suffix in ("", "-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
        if Path(str(source) + suffix).exists():
            shutil.copyfile(str(source) + suffix, str(target) + suffix)
    if not kept:
        with sqlite3.connect(target) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'contextfold_token_counts'"
                            ).fetchall():  # (a release that keeps no counts has no table)
                conn.execute('DELETE FROM "contextfold_token_counts"')
    return target


def _fastest(run: Callable[[], float], repeat: int) -> float:
    return min(run() for _ in range(repeat))


def _timed(fn: Callable[[], object]) -> float:
    settle()
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


# -- LlamaIndex ----------------------------------------------------------------------------


def llama_rows(folder: Path, repeat: int, n: int) -> list[dict[str, Any]]:
    from llama_index.memory.contextfold import CompactingMemory, to_llama_index

    history = to_llama_index(thread(n))
    source = folder / "llama.db"

    def memory(path: Path) -> Any:
        return CompactingMemory.from_defaults(
            policy=cf.ThresholdPolicy(), budget=cf.Budget(context_window=TOKEN_LIMIT),
            store=cf.SQLiteStore(path), session_id="resumed", counter=counter())

    earlier = memory(source)  # the earlier process: stores the thread, counts it once
    earlier.set(history)
    earlier.get()
    earlier.store.close()

    def resumed(kept: bool) -> float:
        first = memory(_copy(source, kept))
        took = _timed(first.get)
        first.store.close()
        return took

    ours = {kept: _fastest(partial(resumed, kept), repeat) for kept in (True, False)}
    peer = _fastest(lambda: _llama_memory_first_get(folder, history), repeat)
    return _rows("CompactingMemory first get", n, ours, peer,
                 "LlamaIndex Memory's first get of the same history (resumed from SQLite)")


def _llama_memory_first_get(folder: Path, history: list[Any]) -> float:
    """LlamaIndex ``Memory``'s first ``get`` in a new process: a new ``Memory`` on the
    SQLite file an earlier one filled (untimed)."""
    from llama_index.core.memory import Memory

    encoding = counter().encoding
    path = folder / "llama-memory.db"
    path.unlink(missing_ok=True)
    uri = f"sqlite+aiosqlite:///{path}"

    def tokenizer(text: str) -> list[int]:
        return encoding.encode(text, disallowed_special=())

    def memory() -> Any:
        return Memory.from_defaults(session_id="resumed", token_limit=TOKEN_LIMIT,
                                    tokenizer_fn=tokenizer, async_database_uri=uri)

    memory().set(history)
    resumed = memory()
    took = _timed(resumed.get)
    _dispose(resumed)
    return took


def _dispose(memory: Any) -> None:
    """Close the aiosqlite engine a ``Memory`` opened (its pool would outlive the run)."""
    engine = getattr(getattr(memory, "sql_store", None), "_async_engine", None)
    if engine is not None:
        asyncio.run(engine.dispose())


# -- LangChain -----------------------------------------------------------------------------


def langchain_rows(folder: Path, repeat: int, n: int) -> list[dict[str, Any]]:
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, trim_messages

    from bench_counting import langchain_tiktoken_counter
    from langchain_contextfold import CompactionMiddleware, from_core

    checkpoint = from_core(thread(n))  # LangChain messages with ids, as a checkpoint holds them
    model = GenericFakeChatModel(messages=iter(["ok"] * 100))
    reply = ModelResponse(result=[AIMessage("ok")])

    def call(path: Path, policy: cf.policy.Policy, messages: list[Any]) -> Callable[[], object]:
        store = cf.SQLiteStore(path)
        hook = CompactionMiddleware(policy=policy, budget=BUDGET, counter=counter(),
                                    summarizer=cf.ExtractiveSummarizer(), store=store)
        request = ModelRequest(model=model, messages=messages, system_message=None, tools=[],
                               state={"messages": messages})
        def first() -> None:
            hook.wrap_model_call(request, lambda r: reply)
            store.close()

        return first

    count = langchain_tiktoken_counter(counter().encoding)

    def trim() -> float:
        fresh = copy.deepcopy(checkpoint)
        return _timed(lambda: trim_messages(
            fresh, max_tokens=BUDGET.input_budget, token_counter=count, strategy="last",
            start_on="human", include_system=True))

    peer = _fastest(trim, repeat)
    rows = []
    for policy in (cf.TruncationPolicy(), cf.ThresholdPolicy()):
        source = folder / f"langchain-{policy.name}.db"
        call(source, policy, copy.deepcopy(checkpoint))()  # the earlier process

        def resumed(kept: bool, policy: cf.policy.Policy = policy, source: Path = source) -> float:
            first = call(_copy(source, kept), policy, copy.deepcopy(checkpoint))
            return _timed(first)

        ours = {kept: _fastest(partial(resumed, kept), repeat) for kept in (True, False)}
        rows += _rows(f"CompactionMiddleware first call, {policy.name}", n, ours, peer,
                      f"trim_messages, {ENCODING} counter, same budget")
    return rows


def summarized_rows(folder: Path, n: int) -> list[dict[str, Any]]:
    """A thread compacted with an LLM summarizer, resumed by a new process: its first call's
    summary requests and time, with the compaction state the store kept beside the messages
    and on a copy of the file without it (the new process compacts the raw thread again)."""
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables.config import var_child_runnable_config

    from contextfold.testing import ScriptedSummarizer
    from langchain_contextfold import CompactionMiddleware, from_core

    checkpoint = from_core(thread(n))
    model = GenericFakeChatModel(messages=iter(["ok"] * 100_000))
    reply = ModelResponse(result=[AIMessage("ok")])
    token = var_child_runnable_config.set({"configurable": {"thread_id": "resumed"}})

    def process(path: Path) -> tuple[Callable[[int], None], ScriptedSummarizer, Any]:
        store = cf.SQLiteStore(path)
        summarizer = ScriptedSummarizer(default="TASK: the user's task\nDATA: what was found")
        hook = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=UNPREPARED,
                                    counter=counter(), summarizer=summarizer, store=store)

        def call(k: int) -> None:
            messages: list[Any] = checkpoint[:k]
            request = ModelRequest(model=model, messages=messages, system_message=None,
                                   tools=[], state={"messages": messages})
            hook.wrap_model_call(request, lambda r: reply)

        return call, summarizer, store

    try:
        source = folder / "summarized.db"
        call, summarizer, store = process(source)  # the earlier process, call by call
        for k in range(24, n - 24 + 1, 24):
            call(k)
        earlier = len(summarizer.requests)
        store.close()
        rows = []
        whole = _copy(source, True)  # the earlier process had it gone on: the same call
        call, summarizer, store = process(whole)
        for k in range(24, n - 24 + 1, 24):
            call(k)
        before = len(summarizer.requests)
        took = _timed(lambda: call(n))
        store.close()
        rows.append({"name": f"CompactionMiddleware next call without a restart, "
                             f"{n // 1000}k thread, LLM summaries", "ours": took, "unit": "ms",
                     "notes": f"{len(summarizer.requests) - before} summary requests"})
        for kept in (True, False):
            path = _copy(source, True)
            if not kept:
                with sqlite3.connect(path) as conn:
                    conn.execute('DELETE FROM "contextfold_compaction_states"')
            first, summarizer, store = process(path)
            took = _timed(partial(first, n))  # the next call, in the new process
            store.close()
            state = "kept compaction state" if kept else "no kept compaction state"
            rows.append({"name": f"CompactionMiddleware first call after resume, "
                                 f"{n // 1000}k thread, LLM summaries, {state}",
                         "ours": took, "unit": "ms",
                         "notes": f"{len(summarizer.requests)} summary requests in the new "
                                  f"process (the earlier one made {earlier})"})
        return rows
    finally:
        var_child_runnable_config.reset(token)


def _rows(what: str, n: int, ours: dict[bool, float], peer: float, notes: str
          ) -> list[dict[str, Any]]:
    saved = ours[False] / ours[True]
    return [
        {"name": f"{what}, resumed {n // 1000}k thread, stored counts", "ours": ours[True],
         "peer": peer, "unit": "ms",
         "notes": f"{notes}; {saved:.2f}x faster than without stored counts"},
        {"name": f"{what}, resumed {n // 1000}k thread, no stored counts", "ours": ours[False],
         "peer": peer, "unit": "ms", "notes": notes},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for ``benchmarks/run.py``: each first call with and without stored counts,
    beside its peer's first read, in the same process."""
    warnings.simplefilter("ignore", DeprecationWarning)
    repeat = QUICK_REPEAT if quick else REPEAT
    with tempfile.TemporaryDirectory() as folder:
        n = QUICK_N if quick else N
        return [*llama_rows(Path(folder), repeat, n), *langchain_rows(Path(folder), repeat, n),
                *summarized_rows(Path(folder), SUMMARIZED_QUICK_N if quick else SUMMARIZED_N)]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["resume", *sys.argv[1:]]))
