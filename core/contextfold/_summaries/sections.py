"""The extractive summary's sections, made as they are read, and fitted to a size.

A summary of a long span keeps a small part of what it could say: the steps of thousands
of tool calls go first, and DATA keeps the identifiers the run is likeliest to need again
(by salience: written in a tool call or by the user, repeated), as many as fit, listed in
the order they first appeared. So the scan (`contextfold._summaries.extractive`) records
where each line comes from and the text is made only when a line is read: a step's line
(`Line`), the decisions of a message, the identifiers of a message (`Data`, looked for
in order, only as far as the values read need while they all fit, and all of them once
they must be ranked). `Fitting` reads only what the states it tries show, and only as
much of each as deciding whether it fits needs: the summary is the same as with every
line made first.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._counting.bounds import head_over
from .._counting.counters import TokenCounter
from .._identifiers.names import plain_word
from .._identifiers.salience import salience
from .._identifiers.values import appears_in_text, head_and_tail, identifiers_of
from .._messages.model import Message

__all__ = ["Data", "Fitting", "Line", "Sections", "in_view", "lines", "one_a_line", "packed",
           "repacked", "short", "unpacked"]

NONE = "- none"
TASK_CHARS = 200
"""A task or REMAINING item longer than this is shortened to it when the summary must fit."""
DATA_OMITTED = "[more identifier(s) omitted to fit]"

DECISION_LANGUAGE = re.compile(
    r"\b(decided|concluded|agreed|will do|won't do|determined|resolved|confirmed)\b", re.I
)
"""The tiered design's decision language (with "confirmed", the threshold design's DECISIONS
example)."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def short(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (head and tail kept)."""
    line = " ".join(head_and_tail(text, 8 * limit + 64).split())  # a huge text: its ends
    if len(line) <= limit:
        return line
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head - 5, 0)
    return f"{line[:head]} [\u2026] {line[len(line) - tail:]}" if tail else line[:head]


class Line:
    """A line of a section, ``make(*args)`` when first read (``str(line)``)."""

    __slots__ = ("_args", "_make", "_text")

    def __init__(self, make: Callable[..., str], *args: Any) -> None:
        self._make: Callable[..., str] | None = make
        self._args = args
        self._text = ""

    def __str__(self) -> str:
        if self._make is not None:
            self._text, self._make, self._args = self._make(*self._args), None, ()
        return self._text


class Data:
    """DATA's values: every identifier of the sources, verbatim, once, in order of first
    appearance. A source is a message (its identifiers are looked for when the values
    before them have been read) or a value an earlier summary listed. When not all of
    them fit, `top` keeps the most salient."""

    def __init__(self) -> None:
        self.sources: list[Message | str] = []
        self._values: list[str] = []
        self._seen: set[str] = set()
        self._read = 0  # sources looked at
        self._order: list[int] | None = None  # the values' places, the most salient first
        self.shown = ""  # what the model reads beside the summary: values in it go last

    def _more(self) -> bool:
        """Look at the next source; ``False`` when none is left."""
        if self._read == len(self.sources):
            return False
        source = self.sources[self._read]
        self._read += 1
        for value in (source,) if isinstance(source, str) else identifiers_of(source):
            if value not in self._seen:
                self._seen.add(value)
                self._values.append(value)
        return True

    def at_least(self, k: int) -> int:
        """``k``, or how many values there are when fewer."""
        while len(self._values) < k and self._more():
            pass
        return min(k, len(self._values))

    def __iter__(self) -> Iterator[str]:
        i = 0
        while i < len(self._values) or self._more():
            if i < len(self._values):
                yield self._values[i]
                i += 1

    def top(self, k: int) -> list[str]:
        """The ``k`` most salient values (`contextfold._identifiers.salience`; among
        equals the later), in order of first appearance. A value an earlier summary listed
        scores as one an assistant wrote (that summary chose to keep it), unless its messages
        here say more; a value `shown` beside the summary ranks below every other."""
        if self._order is None:
            while self._more():
                pass
            messages = [m for m in self.sources if not isinstance(m, str)]
            scores = salience(messages, only=self._seen) if messages else {}
            listed = {v for v in self.sources if isinstance(v, str)}
            shown = appears_in_text(self.shown)
            self._order = sorted(range(len(self._values)), key=lambda i: (
                shown(self._values[i]),
                -max(scores.get(self._values[i], 0.0),
                     _LISTED if self._values[i] in listed else 0.0), -i))
        # The first k by rank, back in order of appearance: a fitting asks for many k.
        return [self._values[i] for i in sorted(self._order[:k])]


_LISTED = 2.0
"""The salience of a value an earlier summary's DATA listed: an assistant's writing."""


@dataclass
class Sections:
    """What a scan found, for the six sections. Steps, errors, decisions and DATA are
    made when read."""

    task: str | None = None
    earlier: list[str] = field(default_factory=list)  # newest first
    progress: list[str | Line] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)
    data: Data = field(default_factory=Data)
    decision_sources: list[tuple[bool, str]] = field(default_factory=list)
    """In order: ``(True, text)`` a message's text to find decisions in, ``(False, line)``
    a line an earlier summary listed."""
    errors: list[str | Line] = field(default_factory=list)
    _decisions: list[str] | None = None

    def decisions(self) -> list[str]:
        """DECISIONS' lines (sentences with decision language, once each, in order)."""
        if self._decisions is None:
            found: dict[str, None] = {}
            for in_text, value in self.decision_sources:
                if not in_text:
                    found.setdefault(value, None)
                elif DECISION_LANGUAGE.search(value):
                    for sentence in _SENTENCE_END.split(value):
                        if DECISION_LANGUAGE.search(sentence):
                            found.setdefault(f"- {short(sentence, 300)}", None)
            self._decisions = list(found)
        return self._decisions


@dataclass
class Kept:
    """What a summary keeps of its sections after some removals (see `Fitting`)."""

    s: Sections
    progress: Sequence[str | Line]
    omitted_steps: int
    decisions: Sequence[str] | None  # None: all of them
    errors: Sequence[str | Line]
    task: str | None
    remaining: list[str]
    earlier: list[str]
    data: int | None  # how many of DATA's first values; None: all of them
    data_omitted: bool

    @classmethod
    def whole(cls, s: Sections) -> Kept:
        return cls(s, s.progress, 0, None, s.errors, s.task, s.remaining, s.earlier, None,
                   False)


def lines(k: Kept) -> Iterator[str]:
    """The summary's lines, in order, made as they are read. A summary whose DATA is cut
    (every other removal made) leaves out the sections the removals emptied (PROGRESS,
    DECISIONS, ERRORS): their headings cost what DATA values need."""
    bare = k.data is not None
    yield f"TASK: {k.task or 'unknown (not in the summarized messages)'}"
    for e in k.earlier:
        yield f"- earlier request: {e}"
    if not (bare and not k.progress):
        yield from _progress(k)
    yield "REMAINING:"
    yield from k.remaining or [NONE]
    yield "DATA:"
    values = iter(k.s.data) if k.data is None else iter(k.s.data.top(k.data))
    first = next(values, None)
    if first is None and not k.data_omitted:
        yield NONE
    if first is not None:
        yield from packed(itertools.chain((first,), values))
    if k.data_omitted:
        yield DATA_OMITTED
    decisions = k.s.decisions() if k.decisions is None else k.decisions
    if decisions or not bare:
        yield "DECISIONS:"
        yield from decisions or [NONE]
    if k.errors or not bare:
        yield "ERRORS:"
        yield from map(str, k.errors) if k.errors else [NONE]


def _progress(k: Kept) -> Iterator[str]:
    yield "PROGRESS:"
    for n, step in enumerate(k.progress, 1):
        if n == 2 and k.omitted_steps:
            yield f"- [{k.omitted_steps} earlier step(s) omitted]"
        yield f"{n}. {step}"
    if k.omitted_steps and len(k.progress) < 2:
        yield f"- [{k.omitted_steps} earlier step(s) omitted]"
    elif not k.progress:
        yield NONE


_WRAP = 160
"""Characters of a DATA line of codes, about (a longer line costs no more tokens; this
keeps it readable)."""


def packed(values: Iterable[str]) -> Iterator[str]:
    """DATA's ``values`` as its lines, in their order: codes side by side a space apart (a
    line or a dash of its own would cost a token more per value, a fifth to a third of
    what a code takes), wrapped at about `_WRAP` characters; a value that is not one code
    (a word, a phrase) on a line of its own, quoted when it is codes a space apart, so
    each line reads back as the values it lists (`unpacked`)."""
    line = ""
    for value in values:
        if not _code(value):
            if line:
                yield line
                line = ""
            words = value.split()
            # a phrase of codes ("2:43 AM") would read back as codes side by side: quoted
            yield f'"{value}"' if len(words) > 1 and all(map(_code, words)) else value
        elif line and len(line) + 1 + len(value) > _WRAP:
            yield line
            line = value
        else:
            line = f"{line} {value}" if line else value
    if line:
        yield line


def unpacked(line: str) -> list[str]:
    """The values a DATA line lists: its codes when it holds only codes (`packed`), else
    the line itself (a phrase, a word, a summarizer's sentence)."""
    words = line.split()
    if len(words) > 1 and all(map(_code, words)):
        if line.startswith('"') and line.endswith('"'):
            return [line.strip()[1:-1]]
        return words
    return [line.strip()]


def one_a_line(line: str) -> list[str]:
    """A DATA line as one line per value it lists, each as `packed` writes it alone."""
    return [alone for value in unpacked(line) for alone in packed((value,))]


def repacked(lines: Sequence[str]) -> list[str]:
    """``lines`` of a summary with the runs of its DATA lines that list codes packed
    anew (after lines went, fewer lines hold what is left)."""
    out: list[str] = []
    run: list[str] = []
    data = False
    for line in [*lines, ""]:
        heading = _SECTION.match(line)
        if heading:
            data = heading.group(1) == "DATA"
        codes = unpacked(line) if data and not heading else []
        if codes and all(map(_code, codes)):
            run.extend(codes)
            continue
        out.extend(packed(run))
        run = []
        out.append(line)
    return out[:-1]


_SECTION = re.compile(r"^(TASK|PROGRESS|REMAINING|DATA|DECISIONS|ERRORS):")


def _code(value: str) -> bool:
    """One code a DATA line can list beside others: no space, not a plain word, not
    starting like a list item or a note."""
    return (bool(value) and not any(c.isspace() for c in value) and not plain_word(value)
            and value[0] not in "-*[•")


def render(k: Kept) -> str:
    """The summary's text."""
    return "\n".join(lines(k))


class Fitting:
    """A summary over its size hint, with the fewest removals that fit it, counted exactly.

    Removals go in the documented order: the steps of PROGRESS after its first and before
    its latest, oldest first; DECISIONS; ERRORS; the task, then each long REMAINING item,
    shortened to 200 characters; the REMAINING items after the first; the first and the
    latest step; the earlier requests, oldest first; DATA's values, the least salient first
    (a line says that more were left out). The first state that fits is found by bisection
    over that order; a text is counted only as far as deciding it needs (the start of a
    long text that is over on its own, `head_over`). When not even everything
    removed fits, that is the summary (the caller cuts it further).

    Every other removal is tried before DATA's: whether DATA whole fits beside what cannot
    go is asked first, and when it does not, how many of its first values fit is found by
    trying sizes doubling from one and bisecting (the values are read only as far as the
    sizes tried, so the answer does not depend on how many there are beyond)."""

    def __init__(self, s: Sections, max_tokens: int, counter: TokenCounter | None) -> None:
        self.s, self.max_tokens, self.counter = s, max_tokens, counter
        self.cap = max(2048, 5 * max_tokens)  # characters made before a first look
        self.long_items = [i for i, item in enumerate(s.remaining) if len(item) > TASK_CHARS]
        self._flat: str | None = None  # the shown text on one line, once needed

    def text(self) -> str:
        if self._fits(Kept.whole(self.s)):
            return render(Kept.whole(self.s))
        if not self._fits(self._bare()):
            return render(self._bare(self._data_kept()))
        kinds = self._kinds()  # DATA whole fits once the rest is gone: what else fits?
        lo, hi = 0, sum(kinds)  # lo never fits, hi fits
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(self._state(kinds, mid)):
                hi = mid
            else:
                lo = mid
        return render(self._state(kinds, hi))

    def _kinds(self) -> tuple[int, ...]:
        """How many removals of each kind, in order (DATA's apart)."""
        s = self.s
        return (max(len(s.progress) - 2, 0), len(s.decisions()), len(s.errors),
                int(len(s.task or "") > TASK_CHARS), len(self.long_items),
                max(len(s.remaining) - 1, 0), min(len(s.progress), 2), len(s.earlier))

    def _data_kept(self) -> int:
        """The most leading DATA values that fit beside everything else removed."""
        if not self._fits(self._bare(0)):
            return 0
        lo, k = 0, 1  # lo fits
        while True:
            found = self.s.data.at_least(k)
            if found < k:  # fewer values than that: all of them do not fit
                hi = found
                break
            if not self._fits(self._bare(k)):
                hi = k
                break
            lo, k = k, k * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(self._bare(mid)):
                lo = mid
            else:
                hi = mid
        return lo

    def _bare(self, data: int | None = None) -> Kept:
        """Every removal but DATA's made, with the first ``data`` values (all: None); the
        task and the request REMAINING names point to it when the model sees it verbatim
        beside the summary (`Data.shown`)."""
        s = self.s
        remaining = [short(item, TASK_CHARS) if len(item) > TASK_CHARS else item
                     for item in s.remaining[:1]]
        task = short(s.task, TASK_CHARS) if s.task and len(s.task) > TASK_CHARS else s.task
        if s.data.shown:
            if self._flat is None:
                self._flat = " ".join(s.data.shown.split())
            if s.task and in_view(s.task, self._flat):
                task = IN_VIEW_TASK
            found = _RESPOND.match(s.remaining[0]) if s.remaining else None
            if found and in_view(found.group(2), self._flat):
                remaining = [IN_VIEW_REMAINING if task == IN_VIEW_TASK
                             else f"{found.group(1)} (in view)"]
        omitted = data is not None and s.data.at_least(data + 1) > data
        return Kept(s, (), len(s.progress), (), (), task, remaining, [], data, omitted)

    def _state(self, kinds: tuple[int, ...], r: int) -> Kept:
        """What is kept after the first ``r`` removals (DATA whole)."""
        s = self.s
        taken = []
        for n in kinds:
            taken.append(min(r, n))
            r -= taken[-1]
        middle, decisions, errors, task, shortened, dropped, ends, earlier = taken
        progress = s.progress
        if middle:
            progress = [progress[0], *progress[1 + middle:]]
        progress = progress[ends:]
        remaining = list(s.remaining)
        for i in self.long_items[:shortened]:
            remaining[i] = short(remaining[i], TASK_CHARS)
        if dropped:
            del remaining[1:1 + dropped]
        return Kept(
            s, progress, middle + ends, s.decisions()[decisions:], s.errors[errors:],
            short(s.task, TASK_CHARS) if task and s.task else s.task, remaining,
            s.earlier[: len(s.earlier) - earlier], None, False,
        )

    def _fits(self, kept: Kept) -> bool:
        cap = self.cap
        while True:
            text, whole = _head(lines(kept), cap)
            if whole:
                return self._size(text) <= self.max_tokens
            if self.counter is None:
                if math.ceil(len(text) / 3) > self.max_tokens:
                    return False
            elif head_over(self.counter, text, self.max_tokens):
                return False
            cap *= 4

    def _size(self, text: str) -> int:
        if self.counter is not None:
            return self.counter.count_text(text)
        return math.ceil(len(text) / 3)


IN_VIEW_TASK = "the latest request (in view)"
"""TASK in a cut summary when the model sees the request itself, verbatim, beside it."""
IN_VIEW_REMAINING = "- respond to it"
"""REMAINING's item in a cut summary whose TASK is `IN_VIEW_TASK` and whose open request
is that one."""
_RESPOND = re.compile(r"^(- respond to the (?:latest|last) request): (.+)$", re.DOTALL)
_CUT_MARK = re.compile(r"\s*\[\u2026\]\s*")


def in_view(line: str, flat: str) -> bool:
    """Whether the one-line ``line`` (perhaps cut head and tail by `short`) is in
    ``flat``, a text on one line."""
    pieces = [p.strip() for p in _CUT_MARK.split(line) if p.strip()]
    return bool(pieces) and all(p in flat for p in pieces)


def _head(made: Iterator[str], cap: int) -> tuple[str, bool]:
    """The lines joined, once they run past ``cap`` characters (``False``), or all of
    them (``True``)."""
    taken: list[str] = []
    size = 0
    for line in made:
        taken.append(line)
        size += len(line) + 1
        if size > cap:
            return "\n".join(taken), False
    return "\n".join(taken), True
