"""Token counting of 1k / 10k / 50k-message agent histories.

contextfold's ``TiktokenCounter`` beside two LangChain counters run on the same history
(converted to LangChain messages once, outside the timings):

* a tiktoken counter function over messages as LangChain's ``trim_messages`` guide writes
  it (OpenAI's per-message recipe), with the same encoding and tool calls counted;
* ``langchain_core.messages.utils.count_tokens_approximately`` (characters / 4).

"cold" counts fresh message objects (nothing cached); "warm" recounts the unchanged
history, "grown" counts the previous call's list plus one new message: what an agent loop does
on every call.
LangChain's counters keep no cache, so their cold and warm figures are the same.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold.testing import generate_history

SIZES = (1_000, 10_000, 50_000)
QUICK_SIZES = (1_000, 3_000)


def exact_counter() -> cf.TiktokenCounter:
    """o200k_base (GPT-4o) when a local copy loads, else cl100k (llama-index-core ships a copy)."""
    counter = cf.counter_for_model("gpt-4o")
    if isinstance(counter, cf.TiktokenCounter):
        return counter
    return cf.TiktokenCounter("cl100k_base")


def history(n: int, seed: int = 7) -> list[cf.Message]:
    """A valid agent history of about ``n`` messages: per turn a prompt, two tool steps
    and an answer (6 messages), tool results of 200-600 characters."""
    return generate_history(seed, turns=max(1, (n - 1) // 6), tools_per_turn=2, tool_chars=400)


def fresh(messages: Sequence[cf.Message]) -> list[cf.Message]:
    """Equal messages as new objects, so no count is cached on them."""
    return [dataclasses.replace(m) for m in messages]


def to_langchain(messages: Sequence[cf.Message]) -> list[Any]:
    """The history as LangChain messages (the project's own adapter)."""
    from langchain_contextfold import from_core

    return from_core(messages)


def langchain_tiktoken_counter(encoding: Any) -> Callable[[list[Any]], int]:
    """The tiktoken message counter of LangChain's ``trim_messages`` guide, for ``encoding``
    (3 tokens per message, 1 per name, 3 priming), with tool calls and call ids counted."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    roles: dict[type, str] = {
        HumanMessage: "user",
        AIMessage: "assistant",
        ToolMessage: "tool",
        SystemMessage: "system",
    }

    def tokens(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    def count(messages: list[Any]) -> int:
        total = 3
        for m in messages:
            content = m.content if isinstance(m.content, str) else json.dumps(m.content)
            total += 3 + tokens(roles.get(type(m), "user")) + tokens(content)
            if m.name:
                total += 1 + tokens(m.name)
            for call in getattr(m, "tool_calls", ()) or ():
                total += 7 + tokens(call["name"]) + tokens(json.dumps(call["args"]))
            if isinstance(m, ToolMessage):
                total += tokens(m.tool_call_id)
        return total

    return count


def rows_for(n: int, repeat: int) -> list[dict[str, Any]]:
    from langchain_core.messages.utils import count_tokens_approximately

    from run import best_of

    counter = exact_counter()
    base = history(n)
    lc = to_langchain(base)
    lc_count = langchain_tiktoken_counter(counter.encoding)
    label = f"{n // 1000}k msgs"

    current: list[list[cf.Message]] = [base]

    def renew() -> None:  # fresh objects: nothing cached (only the last list is kept)
        current[0] = fresh(base)

    cold = best_of(lambda: counter.count_messages(current[0]), max(1, repeat // 3), renew)
    warm_history = current[0]
    counter.count_messages(warm_history)
    warm = best_of(lambda: counter.count_messages(warm_history), repeat=repeat * 4)
    extra = cf.Message(role="user", content="And the next item, please.")

    def grow() -> None:  # an agent loop: the previous call's list plus one new message
        current[0] = [*current[0], dataclasses.replace(extra)]

    grown = best_of(lambda: counter.count_messages(current[0]), repeat * 4, grow)
    peer = best_of(lambda: lc_count(lc), repeat=max(1, repeat // 3))
    approx = best_of(lambda: count_tokens_approximately(lc), repeat=repeat)
    ours_total, peer_total = counter.count_messages(warm_history), lc_count(lc)
    enc = counter.encoding.name
    return [
        {
            "name": f"count {label}, cold",
            "ours": cold,
            "peer": peer,
            "unit": "ms",
            "notes": f"vs LangChain tiktoken counter ({enc}); totals {ours_total:,} / "
            f"{peer_total:,} tokens",
        },
        {
            "name": f"count {label}, warm (unchanged)",
            "ours": warm,
            "peer": peer,
            "unit": "ms",
            "notes": "vs LangChain tiktoken counter (no cache)"
            + ("; target < 1 ms" if n == 10_000 else ""),
        },
        {
            "name": f"count {label}, grown by one",
            "ours": grown,
            "peer": peer,
            "unit": "ms",
            "notes": "vs LangChain tiktoken counter (no cache)",
        },
        {
            "name": f"count {label}, warm vs approximate",
            "ours": warm,
            "peer": approx,
            "unit": "ms",
            "notes": "vs count_tokens_approximately (chars/4, inexact)",
        },
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Counting rows for each history size."""
    rows: list[dict[str, Any]] = []
    for n in QUICK_SIZES if quick else SIZES:
        rows.extend(rows_for(n, repeat=3 if quick else 6))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["counting", *sys.argv[1:]]))
