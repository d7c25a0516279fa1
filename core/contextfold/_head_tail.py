"""Head+tail truncation of long text with a visible label.

Shared by every policy that shrinks a message instead of dropping it, so the label the
model sees is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from ._config import Ge, Lt, check_fields, config_error

__all__ = ["HeadTail", "truncate_head_tail", "truncation_label"]


@dataclass(frozen=True, slots=True)
class HeadTail:
    """Proportional head and tail sizes (the threshold design: 15% up to 6,000 chars, 8% up to
    3,000)."""

    head_ratio: Annotated[float, Ge(0), Lt(1)] = 0.15
    """Share of the original kept at the start."""
    head_cap: Annotated[int, Ge(0)] = 6_000
    """Most characters kept at the start."""
    tail_ratio: Annotated[float, Ge(0), Lt(1)] = 0.08
    """Share of the original kept at the end."""
    tail_cap: Annotated[int, Ge(0)] = 3_000
    """Most characters kept at the end."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.head_ratio + self.tail_ratio >= 1:
            raise config_error("HeadTail", "head_ratio + tail_ratio", "< 1",
                               self.head_ratio + self.tail_ratio)

    def sizes(self, length: int) -> tuple[int, int]:
        """Characters kept at the head and at the tail of a text of ``length`` characters."""
        return (
            min(int(length * self.head_ratio), self.head_cap),
            min(int(length * self.tail_ratio), self.tail_cap),
        )


def truncation_label(original: int, head: int, tail: int, handle: str | None = None) -> str:
    """The label placed between head and tail, with a read-back handle if any."""
    omitted = original - head - tail
    label = (
        f"[TRUNCATED — {original:,} chars original, {omitted:,} chars omitted, "
        f"showing first {head:,} + last {tail:,} chars]"
    )
    if handle:
        label = label[:-1] + f"; full text: {handle}]"
    return label


def truncate_head_tail(
    text: str, shape: HeadTail | None = None, *, handle: str | None = None,
    max_chars: int | None = None,
) -> str:
    """``text`` cut to its head and tail with a label between them.

    ``max_chars`` caps head+tail further (both shrink in proportion) for callers that must
    reach a size. Text that would not get shorter is returned unchanged.
    """
    shape = shape or HeadTail()
    head, tail = shape.sizes(len(text))
    if max_chars is not None and head + tail > max_chars:
        total = head + tail
        head = head * max_chars // total if total else 0
        tail = max_chars - head if total else 0
    label = truncation_label(len(text), head, tail, handle)
    if head + tail + len(label) + 2 >= len(text):
        return text
    return f"{text[:head]}\n{label}\n{text[len(text) - tail:] if tail else ''}"
