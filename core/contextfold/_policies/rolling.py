"""Cache-stable ("rolling") compaction: a compaction appends instead of rewriting.

Providers cache a prompt by its prefix: a request that repeats the previous request's
leading tokens byte for byte pays full price for the rest only (OpenAI from 1,024 tokens,
Anthropic's cache breakpoints, Gemini's implicit caching). A compaction that rewrites
everything after the first user message throws that away at every pass. Rolling
compaction keeps it::

    [system][task][block 1][block 2] ... [block n][messages kept or cut][new messages]
    └──────────── frozen: byte-identical ─────────┘

* A *block* is what one compaction put in view (its summary and its ledger entries). It
  goes where the first thing that compaction cut or dropped was, right after the earlier
  blocks: what follows it (messages kept verbatim, or cut head+tail) stays open, so the next
  compaction can cut or drop those without touching any block.
* The next compaction freezes everything up to the last block and compacts only what came
  after it, appending its own block. The request it produces repeats the previous request
  up to that block.
* When the frozen part outgrows its share of the target, the blocks are consolidated: one
  full compaction summarizes the earlier summaries again and merges the ledgers, and a new
  series of blocks starts after it.

The frozen part costs headroom, not correctness: every output still fits the budget, and
a pass that cannot get near the target without rewriting the blocks consolidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._messages.model import Message
from .._messages.structure import split_groups

__all__ = ["BLOCK_SOURCES", "block_position", "frozen_prefix", "is_block"]

BLOCK_SOURCES = frozenset({"summary", "ledger"})
"""The ``source`` of the messages a compaction writes into the conversation."""


def is_block(message: Message) -> bool:
    """True for a message an earlier compaction wrote (a summary, a notice, a ledger)."""
    return message.role == "user" and message.source in BLOCK_SOURCES


def frozen_prefix(messages: Sequence[Message]) -> int:
    """The index just past the last block, when the newest group comes after it (there is
    something to compact besides what the blocks froze); else 0: nothing is frozen."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if is_block(messages[i])), None)
    if last is None:
        return 0
    groups = split_groups(messages, last + 1)
    return last + 1 if len(groups) >= 2 else 0


def block_position(work: Sequence[Message], changed: Iterable[int], start: int) -> int:
    """Where a new block goes in ``work``: before the first message this pass cut or dropped
    (at the start of its tool group, never between a call and its results), at ``start``
    at the earliest (the end of the frozen part), and before a trailing run of user
    prompts, which stay last so the model answers the user rather than the summary.

    Everything after the block may change again at the next pass: what this pass cut stays
    in the open part, and only the blocks before it are frozen."""
    at = max(min(changed, default=start), start)
    while at > start and work[at].role == "tool":
        at -= 1  # back to the call whose results these are
    prompts = len(work)
    while prompts > start and work[prompts - 1].role == "user" and \
            not is_block(work[prompts - 1]):
        prompts -= 1
    return min(at, prompts) if prompts > start else at
