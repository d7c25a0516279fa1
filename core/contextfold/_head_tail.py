"""Head+tail truncation of long text with a visible label.

Shared by every policy that shrinks a message instead of dropping it, so the label the
model sees is the same everywhere.

Given the identifiers the caller found salient in the text, a cut also keeps the lines of
the omitted middle that name them (a record id, an order number, a function name that
only the middle held), within the characters today's cut takes: the head and the tail
give up what the kept lines and the longer label need, and every cut then ends at a line
or word boundary. An identifier whose line no longer fits that room is named alone, on one
bracketed line after the kept ones (``[also in the middle: HAT006; 2024-05-11]``), and so is
every identifier of a middle that is one long line (a JSON record), where the "line" around
a value would be the record's other fields. The text
layer does not recognise identifiers itself; the policies' layer passes them in.
"""

from __future__ import annotations

from collections.abc import Sequence
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


_LINE_CHARS = 160  # the most kept of one middle line, around the identifier it names
_LINES_SHARE = 0.5  # the most of head+tail the kept lines may take
_BOUND_SHARE = 0.25  # how far a cut moves back to reach a line or word boundary
_NAMED = "also in the middle: "  # the line naming identifiers whose own line did not fit


def truncation_label(original: int, head: int, tail: int, handle: str | None = None,
                     lines: int = 0) -> str:
    """The label placed between head and tail, with a read-back handle if any, and how
    many lines of the middle follow it."""
    omitted = original - head - tail
    kept = f" and {lines} line{'s' if lines > 1 else ''} of the middle naming identifiers" \
        if lines else ""
    if head or tail or lines:
        label = (
            f"[TRUNCATED — {original:,} chars original, {omitted:,} chars omitted, "
            f"showing first {head:,} + last {tail:,} chars{kept}]"
        )
    else:  # nothing shown: the short form leaves the room to the handle
        label = f"[TRUNCATED — {original:,} chars original, all omitted]"
    if handle:
        label = label[:-1] + f"; full text: {handle}]"
    return label


def truncate_head_tail(
    text: str, shape: HeadTail | None = None, *, handle: str | None = None,
    max_chars: int | None = None, identifiers: Sequence[str] | None = None,
) -> str:
    """``text`` cut to its head and tail with a label between them.

    ``max_chars`` caps head+tail further (both shrink in proportion) for callers that must
    reach a size. Text that would not get shorter is returned unchanged.

    ``identifiers`` (most salient first) are the values the cut must not lose: the lines
    of the omitted middle naming those the head and tail do not show are kept after the
    label, the head and tail shrinking so that the whole takes no more characters than the
    cut without them; the head then ends and the tail starts at a line or word boundary.
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
    if identifiers is not None:
        kept = _with_lines(text, head, tail, len(label), handle, identifiers)
        if kept is not None:
            return kept
    return f"{text[:head]}\n{label}\n{text[len(text) - tail:] if tail else ''}"


def _with_lines(text: str, head: int, tail: int, label: int, handle: str | None,
                identifiers: Sequence[str]) -> str | None:
    """The cut keeping the middle's lines that name ``identifiers``, in the characters of
    the plain cut (head + tail + ``label`` + 2); ``None`` when there is nothing to keep."""
    room = head + tail + label + 2
    end = len(text) - tail
    shown = text[:head] + "\n" + text[end:]
    lines: list[str] = []
    named: list[str] = []  # identifiers whose line does not fit: named alone
    taken: set[tuple[int, int]] = set()
    budget = int((head + tail) * _LINES_SHARE)
    used = 0
    lined = "\n" in text[head:end]  # one long line (a JSON record): its values named alone
    for value in identifiers:
        if (not value or value in shown or any(value in line for line in lines)
                or value in named):
            continue
        at = text.find(value, head, end)
        if at < 0:
            continue
        span = _line_around(text, at, len(value), head, end)
        if span in taken:
            continue
        if lined and used + span[1] - span[0] + 1 <= budget:
            taken.add(span)
            lines.append(text[span[0]:span[1]].strip())
            used += span[1] - span[0] + 1
        elif used + len(value) + 1 <= budget + len(_NAMED) + 2:
            named.append(value)  # named a space apart
            used += len(value) + 1
    lines = [line for line in lines if line]
    if not lines and not named:
        return None
    block = "\n".join([*(f"… {line}" for line in lines),
                       *([f"[{_NAMED}{' '.join(named)}]"] if named else [])])
    # The head and tail give up, in proportion, what the lines and the longer label take.
    new_label = truncation_label(len(text), head, tail, handle, len(lines))
    left = room - len(new_label) - len(block) - 3
    if left <= 0 or head + tail == 0:
        return None
    h = min(head, head * left // (head + tail))
    t = min(tail, left - h)
    h, t = _bounded_head(text, h), _bounded_tail(text, t)
    new_label = truncation_label(len(text), h, t, handle, len(lines))
    cut = f"{text[:h]}\n{new_label}\n{block}\n{text[len(text) - t:] if t else ''}"
    return cut if len(cut) <= room else None


def _line_around(text: str, at: int, size: int, lo: int, hi: int) -> tuple[int, int]:
    """The line of ``text[lo:hi]`` holding ``text[at:at + size]``, at most ``_LINE_CHARS``
    around it, cut at word boundaries."""
    start = max(text.rfind("\n", lo, at) + 1, lo)
    stop = text.find("\n", at + size, hi)
    stop = hi if stop < 0 else stop
    if stop - start > _LINE_CHARS:
        side = max(0, (_LINE_CHARS - size) // 2)
        a, b = max(start, at - side), min(stop, at + size + side)
        space = text.find(" ", a, at)
        start = space + 1 if a > start and space >= 0 else a
        space = text.rfind(" ", at + size, b)
        stop = space if b < stop and space >= 0 else b
    return start, stop


def _bounded_head(text: str, head: int) -> int:
    """``head`` moved back to just after a line or word boundary, when one is near."""
    if head <= 0 or head >= len(text) or text[head].isspace() or text[head - 1].isspace():
        return head
    floor = head - int(head * _BOUND_SHARE)
    for sep in ("\n", " "):
        at = text.rfind(sep, floor, head)
        if at >= 0:
            return at + 1
    return head


def _bounded_tail(text: str, tail: int) -> int:
    """``tail`` shortened to start at a line or word boundary, when one is near."""
    start = len(text) - tail
    if tail <= 0 or start <= 0 or text[start - 1].isspace() or text[start].isspace():
        return tail
    ceiling = start + int(tail * _BOUND_SHARE)
    for sep in ("\n", " "):
        at = text.find(sep, start, ceiling)
        if at >= 0:
            return len(text) - at - 1
    return tail
