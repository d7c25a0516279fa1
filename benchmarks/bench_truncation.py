"""Truncating 1k / 10k / 50k-message agent histories to one budget.

contextfold's ``compact(..., policy=TruncationPolicy())`` (the full driver: input checks,
validation, truncation over atomic groups, output checks, report) beside LangChain's
``trim_messages(strategy="last", start_on="human", include_system=True)`` with the tiktoken
message counter of LangChain's guide over the same encoding, on the same history and the
same token budget, in the same process.

* "cold": nothing counted yet (fresh message objects): both sides pay for tokenizing.
* "next call": the history an agent loop sends on its next call (the previous call's
  messages plus a new user message). contextfold's counts are cached on the messages;
  ``trim_messages`` has no cache and counts again, so its figure is the same as cold.

Every figure is the fastest of several runs (``run.best_of``: garbage collected before each
run, the collector paused during it), the same number for both sides of a ratio, at least
``MIN_RUNS`` even with ``--quick``: one run of each is a draw of the noise of a shared
machine, not a ratio.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import contextfold as cf

SIZES = (1_000, 10_000, 50_000)
QUICK_SIZES = (1_000, 2_000)
MIN_RUNS = 3
"""The fewest runs a figure is the best of."""
BUDGET = cf.Budget(context_window=32_000, output_reserve=4_000)
"""28,000 input tokens: every history size is over it (a 1k history is ~70k tokens)."""


def trim(lc_messages: list[Any], counter: Any) -> list[Any]:
    from langchain_core.messages import trim_messages

    result: list[Any] = trim_messages(
        lc_messages,
        max_tokens=BUDGET.input_budget,
        token_counter=counter,
        strategy="last",
        start_on="human",
        include_system=True,
    )
    return result


def ours(
    messages: Sequence[cf.Message], counter: cf.TokenCounter, strategy: str
) -> list[cf.Message]:
    policy = cf.TruncationPolicy(strategy)  # type: ignore[arg-type]
    return cf.compact(messages, policy=policy, budget=BUDGET, counter=counter).messages


def rows_for(n: int, repeat: int) -> list[dict[str, Any]]:
    import dataclasses

    from bench_counting import (
        exact_counter,
        fresh,
        history,
        langchain_tiktoken_counter,
        to_langchain,
    )
    from run import best_of

    counter = exact_counter()
    base = history(n)
    lc = to_langchain(base)
    lc_count = langchain_tiktoken_counter(counter.encoding)
    label = f"{n // 1000}k msgs"
    extra = cf.Message(role="user", content="Next item, please.")

    current: list[list[cf.Message]] = [base]

    def renew() -> None:  # fresh objects: nothing cached (only the last list is kept)
        current[0] = fresh(base)

    runs = max(MIN_RUNS, repeat)
    cold = best_of(lambda: ours(current[0], counter, "oldest_first"), runs, renew)
    warm_base = current[0]

    def grow() -> None:  # an agent loop: the previous call's list plus one new message
        current[0] = [*current[0], dataclasses.replace(extra)]

    def on_current(strategy: str) -> Callable[[], object]:
        return lambda: ours(current[0], counter, strategy)

    warm = {
        strategy: best_of(on_current(strategy), runs * 2, grow)
        for strategy in ("oldest_first", "middle_out")
    }
    peer = best_of(lambda: trim(lc, lc_count), runs)

    kept_ours = ours(warm_base, counter, "oldest_first")
    kept_peer = trim(lc, lc_count)
    fit = (
        f"kept {len(kept_ours)} msgs / {counter.count_messages(kept_ours):,} tok vs "
        f"{len(kept_peer)} / {lc_count(kept_peer):,}"
    )
    enc = counter.encoding.name
    return [
        {
            "name": f"truncate {label}, cold",
            "ours": cold,
            "peer": peer,
            "unit": "ms",
            "notes": f"vs trim_messages({enc} counter), best of {runs} each; {fit}",
        },
        {
            "name": f"truncate {label}, next call",
            "ours": warm["oldest_first"],
            "peer": peer,
            "unit": "ms",
            "notes": f"oldest_first vs trim_messages (no cache), best of {runs * 2} / {runs}",
        },
        {
            "name": f"truncate {label}, next call, middle_out",
            "ours": warm["middle_out"],
            "peer": peer,
            "unit": "ms",
            "notes": "middle_out vs trim_messages (last)",
        },
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Truncation rows for each history size."""
    rows: list[dict[str, Any]] = []
    for n in QUICK_SIZES if quick else SIZES:
        rows.extend(rows_for(n, repeat=2 if quick else 4))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import main

    raise SystemExit(main(["truncation", *sys.argv[1:]]))
