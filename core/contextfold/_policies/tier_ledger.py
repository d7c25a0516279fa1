"""How far below its target a [`TieredPolicy`][contextfold.TieredPolicy] pass aims, so that
its output and the compaction ledger land under the target together.

The ledger wrapper (`contextfold._lossless.ledger.run_with_ledger`) lowers the target of
the policy it runs by the ledger's room, sized for a policy that removes messages one by one:
a line per removed message. A tiered pass writes one ledger line per tier summary (its
handle) and one per group it cuts, so that room is mostly lines it never writes: on a plain
chat (few identifiers, many messages) the ledger took 87 of the 584 tokens set aside and
the output filled 79% of its target. The pass aims below the target by what its own ledger
takes, about: the identifiers of what it compacts, counted as the ledger counts them, and
a few lines; never by less than the ledger's least share of the budget (the room it takes
past the policy's aim), never by more than the wrapper asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .._contract.policy import CompactionContext
from .._lossless.ledger import Ledger, identifiers_to_compact
from .._messages.model import Message

__all__ = ["ledger_aim"]

_LINES = 6
"""Ledger lines a tiered pass writes, about: one per tier summary, a few cut groups, and
the notice of what was left out."""
_LINE_TOKENS = 14
"""Tokens of a ledger line without its identifiers (its handle, what its original holds)."""


def ledger_aim(
    messages: Sequence[Message], outer: CompactionContext, inner: CompactionContext,
    ledger: Ledger,
) -> CompactionContext:
    """``inner`` (the context the ledger wrapper runs the pass in, under ``outer``) with its
    target lowered only by what the pass's ledger takes, about (see the module docstring):
    ``inner`` itself when the wrapper asked no more than that."""
    lowered = outer.budget.target_tokens - inner.budget.target_tokens
    if lowered <= 0:
        return inner
    held = inner.fixed_tokens - outer.fixed_tokens  # the earlier ledgers, counted as fixed
    need = max(ledger.room(outer, floor=False), _estimate(messages, outer)) - held
    aim = max(0, min(lowered, need))
    if aim >= lowered:
        return inner
    budget = inner.budget
    target = outer.budget.target_tokens - aim
    # ``target_tokens`` floors the product: half a token above keeps the whole number.
    return replace(inner, budget=replace(budget, target=(target + 0.5) / budget.input_budget))


def _estimate(messages: Sequence[Message], context: CompactionContext) -> int:
    """About the tokens of the ledger of a tiered pass over ``messages``: the distinct
    identifiers of the messages older than the newest ones that fill the target (what the
    pass compacts first), less those the newer ones show, twice over, and its lines. A room
    a little large costs the pass a message, one too small costs identifiers (the ledger
    still grows into what the pass leaves under the target): on the airline and SWE-Gym
    traces (dev half) twice keeps 93.9% of the needed-from-memory identifiers in view at half
    the tokens where three times kept 94.1% (65.0% at a quarter either way), and three times
    left small budgets' outputs at 78-80% of their target on plain chats. The older part is
    scanned only as far as the largest room (`identifiers_to_compact`)."""
    target = context.budget.target_tokens
    found = identifiers_to_compact(messages, context)
    if found is None:
        return 0
    values, _ = found
    listed = 2 * context.counter.count_text("; ".join(values)) if values else 0
    # On a small budget the older tiers fold into one summary (one line), so the lines take
    # at most a twentieth of the target there.
    return listed + min(_LINE_TOKENS * _LINES, target // 20)
