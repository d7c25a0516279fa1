"""Fitting a composed context into the budget by shrinking tool results head+tail.

Shared by the loop-slice, turn-aware and summary policies. Everything works on a fresh
list the policy built (never on its input) and keeps every message in place: a tool result
is shortened, never removed, so a loop is never split. Pinned messages are never shrunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

from .._contract.policy import CompactionContext, Target
from .._head_tail import HeadTail, truncate_head_tail
from .._lossless.references import handle_for, handle_text
from .._messages.model import Message, TextPart
from .salience import cut_identifiers

__all__ = [
    "BudgetFit",
    "Fits",
    "fits_budget",
    "originals",
    "same",
    "shrink_if_fewer_tokens",
    "shrink_largest_first",
    "shrink_message",
    "squeeze",
    "targets",
]

Fits = Callable[[Sequence[Message]], bool]
"""True when a candidate output fits the budget."""


class BudgetFit:
    """The budget check every policy output must pass (messages plus fixed parts), which
    also tells by how many tokens a candidate is over, so that a loop shrinking messages
    one by one can keep a running total instead of recounting the output at every step."""

    def __init__(self, context: CompactionContext) -> None:
        self.context = context
        self.limit = context.budget.input_budget

    def __call__(self, candidate: Sequence[Message]) -> bool:
        return self.context.measure(candidate) <= self.limit

    def over(self, candidate: Sequence[Message]) -> int:
        """Tokens ``candidate`` takes beyond the budget (zero or less when it fits)."""
        return self.context.measure(candidate) - self.limit

    def count(self, message: Message) -> int:
        return self.context.counter.count_message(message)


def fits_budget(context: CompactionContext) -> BudgetFit:
    """The budget check every policy output must pass: messages plus fixed parts."""
    return BudgetFit(context)


def shrink_message(
    message: Message, shape: HeadTail, max_chars: int | None = None, handle: str | None = None,
) -> Message:
    """``message`` with its text cut head+tail (the threshold design's label, naming ``handle`` when
    given); non-text parts are replaced by a one-line note. Returns ``message`` itself when
    nothing would shrink.

    Without ``max_chars`` the cut copy is kept on the original, so a policy that rebuilds
    its output at every call gets the same copy (its count already known) every time.
    """
    if message.is_pinned:
        return message
    if max_chars is None:
        return message.derived(_shrunk_key(shape, handle),
                               lambda m: _shrunk(m, shape, None, handle))
    return _shrunk(message, shape, max_chars, handle)


@lru_cache(maxsize=256)
def _shrunk_key(shape: HeadTail, handle: str | None) -> str:
    """The key a cut copy is kept under on its original (made once per shape)."""
    return f"shrunk:{shape!r}:{handle}"


def _shrunk(
    message: Message, shape: HeadTail, max_chars: int | None, handle: str | None,
) -> Message:
    text = message.text
    # The middle's lines naming the message's identifiers stay, within the same length.
    cut = truncate_head_tail(text, shape, max_chars=max_chars, handle=handle,
                             identifiers=cut_identifiers(message))
    if isinstance(message.content, str):
        return message if cut == text else replace(message, content=cut)
    others = sum(1 for p in message.content if not isinstance(p, TextPart))
    if not others and cut == text:
        return message
    if others:
        cut = f"[{others} non-text part(s) omitted from context]\n{cut}"
    return replace(message, content=cut)


def shrink_if_fewer_tokens(
    message: Message, shape: HeadTail, count: Callable[[Message], int],
    handle: str | None = None,
) -> Message:
    """[`shrink_message`][contextfold.policy.shrink_message]'s cut of ``message`` when ``count``
    finds it smaller, else ``message`` itself.

    A cut is always shorter in characters, but its label (``[TRUNCATED — 123 chars
    original, ...]``: digits and punctuation) can take more tokens than the words it stands
    for in a short result; kept, such a cut would grow the output it was made to shrink.
    """
    cut = shrink_message(message, shape, handle=handle)
    if cut is message or count(cut) >= count(message):
        return message
    return cut


def shrink_largest_first(
    out: list[Message], positions: Sequence[int], fits: BudgetFit, shape: HeadTail,
    context: CompactionContext | None = None,
) -> bool:
    """Shrink the messages at ``positions`` of ``out`` (in place) with ``shape``, largest
    first, until ``out`` fits; a message whose cut would take more tokens stays whole.
    Shrunk messages stay shrunk when it still does not fit. With ``context`` each label
    names the original's ``ctx_`` handle."""
    # The tokens over the budget are kept as a running total and the output is measured
    # again only once that total says it fits (a counter that is not additive may
    # disagree; the exact check then goes on at every step).
    over = fits.over(out)
    for k in sorted(positions, key=lambda k: _size(out[k]), reverse=True):
        if over <= 0 and fits(out):
            return True
        new = shrink_if_fewer_tokens(out[k], shape, fits.count, handle=_ref(out[k], context))
        over -= fits.count(out[k]) - fits.count(new)
        out[k] = new
    return fits(out)


def _ref(original: Message, context: CompactionContext | None) -> str | None:
    """How the label names ``original``'s handle (``None`` without a context)."""
    if context is None:
        return None
    return handle_text(handle_for(original), context)


def squeeze(
    out: list[Message],
    positions: Sequence[int],
    originals: Sequence[Message],
    fits: Fits,
    shape: HeadTail,
    context: CompactionContext | None = None,
    *,
    handles: bool = False,
) -> bool:
    """Cut every message at ``positions`` from its original (``originals``, same order) to
    the largest common head+tail size that fits, found by bisection. With ``context`` each
    label names the original's ``ctx_`` handle (bare when the labels with the tool's name do not
    fit, left out when not even those fit, unless ``handles`` requires them).

    Returns False, leaving ``out`` unchanged, when even labels alone do not fit, or when
    ``handles`` requires them and a cut would not name its handle (a text shorter than a
    label whose other parts go: their note names no handle).
    """
    refs = [_ref(original, context) for original in originals]

    def build(cap: int) -> list[Message]:
        candidate = list(out)
        for k, original, ref in zip(positions, originals, refs, strict=True):
            candidate[k] = shrink_message(original, shape, max_chars=cap, handle=ref)
        return candidate

    if positions and context is not None and not fits(build(0)):
        refs = [handle_for(original) for original in originals]  # the bare handles
        if not fits(build(0)):
            if handles:
                return False  # a cut the model could not read back is not taken
            refs = [None] * len(originals)  # no room even for those: plain labels
    if not positions or not fits(build(0)):
        return False
    lo, hi = 0, max(sum(shape.sizes(len(m.text))) for m in originals)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(build(mid)):
            lo = mid
        else:
            hi = mid - 1
    cut = build(lo)
    if handles and context is not None and any(
            cut[k] is not original and handle_for(original) not in cut[k].text
            for k, original in zip(positions, originals, strict=True)):
        return False  # a cut the model could not read back is not taken
    out[:] = cut
    return True


def targets(
    before: Sequence[Message],
    after: Sequence[Message],
    origins: Sequence[int | None],
    context: CompactionContext,
) -> list[Target]:
    """A ``"truncated"`` target for each position where ``after`` replaced ``before``, with
    the handle of the original (the driver keeps it readable)."""
    found: list[Target] = []
    count = context.counter.count_message
    name = getattr(context.counter, "name", "")
    for old, new, origin in zip(before, after, origins, strict=False):
        if new is old or origin is None:
            continue

        def made(new: Message, old: Message = old, origin: int = origin) -> Target:
            return Target(
                index=origin,
                role=old.role,
                method="truncated",
                original_tokens=count(old),
                new_tokens=count(new),
                tool_name=old.name if old.role == "tool" else None,
                handle=handle_for(old),
            )

        # A cut copy is kept on its original, so a policy that rebuilds its output at every
        # call meets the same copy at the same place again: its target is kept on it too.
        found.append(new.derived(f"truncated:{origin}:{name}", made))
    return found


def originals(
    messages: Sequence[Message], out: Sequence[Message], origins: Sequence[int | None]
) -> list[Message]:
    """What each output position held in the input (the output message when synthetic)."""
    return [messages[o] if o is not None else m for m, o in zip(out, origins, strict=True)]


def same(out: Sequence[Message], messages: Sequence[Message]) -> bool:
    """True when ``out`` holds exactly the message objects of ``messages``, in order."""
    return len(out) == len(messages) and all(
        a is b for a, b in zip(out, messages, strict=True)
    )


def _size(message: Message) -> int:
    return len(message.text) + 2_000 * len(message.images)
