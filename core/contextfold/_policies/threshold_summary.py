"""The threshold policy's summary message: its text, where it goes, and how it is fitted."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .._contract.policy import CompactionContext
from .._head_tail import HeadTail, truncate_head_tail
from .._lossless.references import HANDLE_RE, handle_text
from .._messages.model import Message
from .._messages.prompt_kinds import prompt_kind
from .._messages.structure import SYSTEM_ROLES
from .._summaries.sections import IN_VIEW_TASK, in_view, one_a_line, repacked

__all__ = [
    "SUMMARY_HEADER",
    "data_lost",
    "dropped_note",
    "fallback_notes",
    "fit_sections",
    "insert_summary",
    "point_to_view",
    "removed_lines",
    "summary_message",
]

SUMMARY_HEADER = "[Compaction Summary]\n\n"

"""The first line of the summary message."""

_HEADING = re.compile(r"^(TASK|PROGRESS|REMAINING|DATA|DECISIONS|ERRORS):")

# Removal rank of a line by section (lower goes first); headings and TASK's first line (the
# latest request) are never removed here; the earlier requests under it go after the
# progress and decisions (their text is in the originals), before what remains and the data.
# PROGRESS's first and last steps rank with REMAINING.
_RANK = {"PROGRESS": 0, "DECISIONS": 1, "ERRORS": 1, None: 1, "TASK": 2, "REMAINING": 3,
         "DATA": 4}


def summary_message(
    text: str | None, context: CompactionContext, *, nudge: str, notice: str, note: str = ""
) -> Message:
    """The summary (or, for ``None``, the notice), with ``note`` naming the handle of what
    was dropped, then the continuation nudge."""
    note = f"\n\n{note}" if note else ""
    if text is None:
        return Message(role="user", content=notice + note, source="summary",
                       created_at=context.now, metadata={"compaction": "notice"})
    return Message(
        role="user", content=f"{SUMMARY_HEADER}{text.strip()}{note}\n\n{nudge}",
        source="summary", created_at=context.now, metadata={"compaction": "threshold"},
    )


def fit_sections(text: str, fits: Callable[[str], bool],
                 weight: Callable[[str], float] | None = None) -> str | None:
    """``text`` with the fewest lines removed (in the module's order) so ``fits`` holds,
    with a line saying how many went; ``None`` when not even the headings fit. ``weight``
    ranks the DATA lines: the lightest go first (the latest first among equals)."""
    if fits(text):
        return text
    lines = _value_lines(text)
    order = _removal_order(lines, weight)
    if not order:
        return _head_tail(text, fits)

    def render(k: int) -> str:
        gone = set(order[:k])
        kept = [line for i, line in enumerate(lines) if i not in gone]
        return "\n".join([*repacked(_without_empty_sections(kept)),
                          f"[{k} line(s) of the summary omitted to fit]"])

    if not fits(render(len(order))):
        return None
    lo, hi = 1, len(order)
    while lo < hi:  # the fewest removals that fit
        mid = (lo + hi) // 2
        if fits(render(mid)):
            hi = mid
        else:
            lo = mid + 1
    return render(lo)


def _value_lines(text: str) -> list[str]:
    """``text``'s lines with each DATA line of several codes one line per code: the cut
    goes value by value (`repacked` puts them side by side again)."""
    out: list[str] = []
    section: str | None = None
    for line in text.strip().splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1)
        out.extend(one_a_line(line) if section == "DATA" and not heading else [line])
    return out


def _without_empty_sections(lines: list[str]) -> list[str]:
    """``lines`` without the headings of the sections a cut left empty (TASK, REMAINING and
    DATA stay): on a tight budget an empty heading costs what a DATA value needs."""
    out: list[str] = []
    for i, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading and heading.group(1) not in ("TASK", "REMAINING", "DATA"):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            if not following.strip() or _HEADING.match(following):
                continue
        out.append(line)
    return out


def removed_lines(text: str) -> int:
    """How many lines `fit_sections` left out of ``text`` (0 when none)."""
    found = _OMITTED.search(text)
    return int(found.group(1)) if found else 0


_OMITTED = re.compile(r"^\[(\d+) line\(s\) of the summary omitted to fit\]$", re.MULTILINE)


def _removal_order(lines: list[str], weight: Callable[[str], float] | None = None
                   ) -> list[int]:
    """Indices of removable lines, first to go first; empty when there are no headings."""
    section: str | None = None
    ranked: list[tuple[int, float, int]] = []
    progress: list[int] = []
    seen_heading = False
    for i, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading:
            section, seen_heading = heading.group(1), True
            continue
        if not line.strip():
            continue
        if section == "PROGRESS":
            progress.append(i)
        rank = _RANK.get(section, 1)
        if section == "DATA" and weight is not None:
            # by weight, the latest first among equals (a tie breaks on the position)
            ranked.append((rank, weight(line) - i / (len(lines) + 1) / 1e6, i))
            continue
        ranked.append((rank, -i if section in ("DATA", "TASK") else i, i))
    if not seen_heading:
        return []
    if len(progress) > 2:  # the first and the latest step stay with REMAINING
        ends = {progress[0], progress[-1]}
        ranked = [(2 if i in ends else r, k, i) for r, k, i in ranked]
    return [i for _, _, i in sorted(ranked)]


def _head_tail(text: str, fits: Callable[[str], bool]) -> str | None:
    """A free-form summary cut head+tail to the largest size that fits."""
    shape = HeadTail(0.6, 10**9, 0.3, 10**9)
    if not fits(truncate_head_tail(text, shape, max_chars=0)):
        return None
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(truncate_head_tail(text, shape, max_chars=mid)):
            lo = mid
        else:
            hi = mid - 1
    return truncate_head_tail(text, shape, max_chars=lo)


def fallback_notes(note: str) -> tuple[str, ...]:
    """``note``, then its handle alone (``[dropped: ctx_...]``, when even the note does not
    fit beside what was kept), then nothing: the order a notice tries them in."""
    found = HANDLE_RE.search(note)
    short = f"[dropped: {found.group(0)}]" if found else ""
    return tuple(dict.fromkeys((note, short, "")))


def dropped_note(span: str, count: int, context: CompactionContext) -> str:
    """The line of the summary that names the handle of the dropped messages."""
    return f"[{count} dropped messages, full text: {handle_text(span, context)}]"


def insert_summary(kept: list[Message], summary: Message) -> list[Message]:
    """``kept`` with ``summary`` before the current turn when a later prompt than the first
    started it (a multi-turn conversation: the summary of earlier turns must not follow the
    current instruction), else at the end, before a trailing run of user prompts."""
    prompts = [i for i, m in enumerate(kept) if prompt_kind(m) is not None]
    if len(prompts) > 1:
        return [*kept[: prompts[-1]], summary, *kept[prompts[-1]:]]
    at = len(kept)
    while at > 0 and kept[at - 1].role == "user" and kept[at - 1].source != "summary":
        at -= 1
    if at == 0 or kept[at - 1].role in SYSTEM_ROLES:
        at = len(kept)  # only prompts after the system: the summary goes last
    return [*kept[:at], summary, *kept[at:]]


_REQUEST_LINES = re.compile(
    r"^(?P<lead>TASK: |- respond to the latest request: |- respond to the last request: )"
    r"(?P<text>.+)$", re.MULTILINE)


def point_to_view(text: str, requests: Sequence[str]) -> str:
    """``text`` with its TASK line and its "respond to the latest request" line pointing
    to the request instead of restating it, when that request is in view verbatim (one of
    ``requests``): on a tight budget the restatement costs what the DATA lines need."""
    flat = [" ".join(r.split()) for r in requests]  # the summary's lines are on one line

    def shorter(match: re.Match[str]) -> str:
        if any(in_view(match.group("text"), r) for r in flat):
            lead = match.group("lead")
            if lead == "TASK: ":
                return f"TASK: {IN_VIEW_TASK}"
            return lead.rstrip(": ") + " (in view)"
        return match.group()
    return _REQUEST_LINES.sub(shorter, text)


def data_lost(original: str, fitted: str) -> int:
    """How many DATA lines of the summary ``original`` its ``fitted`` version lacks."""
    kept = set(_value_lines(fitted))
    section: str | None = None
    lost = 0
    for line in _value_lines(original):
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1)
        elif section == "DATA" and line.strip() and line not in kept:
            lost += 1
    return lost
