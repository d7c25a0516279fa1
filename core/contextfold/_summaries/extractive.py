"""The extractive summarizer: the threshold design's structured summary without an LLM.

Deterministic and linear in the input. It writes the sections of the threshold design plus the
errors::

    TASK: the latest user request (the conversation's open or latest one when the policy
          names it),
          then the earlier requests as items, newest first (at most three); session
          markers, nudges and other synthetic user messages are never requests
    PROGRESS: numbered completed tool steps, each with the tool and its key result; in a
              span without tool calls (plain chat), the requests and their answers
    REMAINING: what the latest request asks that has no result yet (best effort; says so);
               never "none" while the conversation's latest request is unanswered
    DATA: every identifier of the originals, verbatim
    DECISIONS: sentences with decision language
    ERRORS: failed tool steps

A summary made earlier (by this summarizer or an LLM following the same sections) that is
itself being summarized again is merged section by section, so recursive compaction keeps
the task, the steps and the data of every earlier pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Annotated

from .._config import Ge, check
from .._counting.counters import TokenCounter, head_over
from .._messages.model import Message
from .._policies.contract import SummaryRequest
from .._policies.prompt_source import prompt_kind
from .identifiers import head_and_tail, identifiers_of

__all__ = ["SECTIONS", "ExtractiveSummarizer"]

SECTIONS = ("TASK", "PROGRESS", "REMAINING", "DATA", "DECISIONS", "ERRORS")
"""The section headings, in order."""

DECISION_LANGUAGE = re.compile(
    r"\b(decided|concluded|agreed|will do|won't do|determined|resolved|confirmed)\b", re.I
)
"""The tiered design's decision language (with "confirmed", the threshold design's DECISIONS
example)."""

_ERROR_START = re.compile(r"^\s*(?:error|exception|traceback|failed|fatal)\b", re.I)
_HEADING = re.compile(r"^(TASK|PROGRESS|REMAINING|DATA|DECISIONS|ERRORS):\s?(.*)$")
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NONE = "- none"


_EARLIER_KEPT = 3  # earlier requests listed under TASK


@dataclass
class _Sections:
    task: str | None = None
    earlier: list[str] = field(default_factory=list)  # newest first
    progress: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)
    data: dict[str, None] = field(default_factory=dict)
    decisions: dict[str, None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _short(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (head and tail kept)."""
    line = " ".join(head_and_tail(text, 8 * limit + 64).split())  # a huge text: its ends
    if len(line) <= limit:
        return line
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head - 5, 0)
    return f"{line[:head]} [\u2026] {line[len(line) - tail:]}" if tail else line[:head]


def _is_summary(message: Message) -> bool:
    text = message.text
    return message.source == "summary" or ("TASK:" in text and "PROGRESS:" in text)


class ExtractiveSummarizer:
    """The threshold design's structured summary, made without an LLM.

    The default summarizer when none is given, and the fallback when an LLM summarizer
    fails. A summary over ``request.max_tokens`` (by ``counter``) loses the fewest lines
    that make it fit: PROGRESS's steps first, then DECISIONS, ERRORS, the task and
    REMAINING, then the earlier requests; DATA only when nothing else is left, from its
    last values (so the room left beside what stays holds as many identifiers as fit).

    Args:
        counter: measures ``max_tokens``; default an estimate of 3 characters per token.
        step_chars: the most characters shown of one tool step's arguments and result.
        task_chars: the most characters shown of the task.
    """

    def __init__(
        self, *, counter: TokenCounter | None = None, step_chars: int = 160, task_chars: int = 1200
    ) -> None:
        check("ExtractiveSummarizer", "step_chars", step_chars, Annotated[int, Ge(20)])
        check("ExtractiveSummarizer", "task_chars", task_chars, Annotated[int, Ge(20)])
        self.counter = counter
        self.step_chars = step_chars
        self.task_chars = task_chars

    def summarize(self, request: SummaryRequest) -> str:
        """The structured summary of ``request.messages``."""
        sections = self._scan(request.messages, request.open_request, request.latest_request)
        if request.max_tokens is None:
            return self._render(sections)
        return _Fitting(sections, request.max_tokens, self.counter).text()

    async def asummarize(self, request: SummaryRequest) -> str:
        """Same as :meth:`summarize` (no I/O)."""
        return self.summarize(request)

    # -- reading ---------------------------------------------------------------------

    def _scan(
        self, messages: Sequence[Message], open_request: str | None = None,
        latest_request: str | None = None,
    ) -> _Sections:
        s = _Sections()
        calls: dict[str, tuple[str, str]] = {}
        answered: set[str] = set()
        last_request: int | None = None
        steps_since = 0
        answered_since = False
        exchanges: list[tuple[int, str]] = []  # (where in PROGRESS, the step)
        for i, m in enumerate(messages):
            if _is_summary(m) and m.role != "tool":
                self._merge(s, m.text)
                continue
            for value in identifiers_of(m):
                s.data.setdefault(value, None)
            for call in m.tool_calls:
                calls[call.id] = (call.name, call.arguments)
            if prompt_kind(m) is not None:  # a real prompt, not a marker or a nudge
                self._new_task(s, m.text)
                last_request, steps_since, answered_since = i, 0, False
            if m.role in ("user", "assistant"):
                self._decisions(s, m.text)
            if m.role == "assistant":  # answered when the latest assistant turn is final text
                if (not answered_since and not steps_since and last_request is not None
                        and not m.tool_calls and m.text.strip()):
                    exchanges.append((len(s.progress), self._exchange(messages[last_request], m)))
                answered_since = not m.tool_calls and bool(m.text.strip())
            if m.role == "tool":
                answered.add(m.tool_call_id or "")
                steps_since += 1
                self._step(s, m, calls.get(m.tool_call_id or ""))
        if not calls:  # plain chat: what was asked and answered is the progress, in order
            for at, step in reversed(exchanges):
                s.progress.insert(at, step)
        self._remaining(s, messages, last_request, steps_since, answered_since)
        if latest_request and not open_request:  # answered, after the span: still the task
            self._new_task(s, latest_request)
        self._open(s, open_request)
        for call_id, (name, args) in calls.items():
            if call_id not in answered:
                s.remaining.append(f"- pending tool call: {name}({_short(args, 80)})")
        return s

    def _step(self, s: _Sections, result: Message, call: tuple[str, str] | None) -> None:
        name = call[0] if call else (result.name or "tool")
        args = f"({_short(call[1], self.step_chars // 2)})" if call and call[1] != "{}" else ""
        first = next((ln for ln in result.text.splitlines() if ln.strip()), "")
        if result.is_error or _ERROR_START.match(first):
            s.errors.append(f"- {name}{args}: {_short(result.text, self.step_chars)}")
            return
        body = _short(result.text, self.step_chars) or "(no output)"
        s.progress.append(f"{name}{args} \u2192 {body}")

    def _exchange(self, request: Message, answer: Message) -> str:
        """A request answered without tools, a completed step of a plain chat: what the
        user said (often the facts later turns need) and the head of the answer."""
        said = _short(request.text, self.step_chars)
        return f"asked: {said} \u2192 {_short(answer.text, self.step_chars // 2)}"

    def _decisions(self, s: _Sections, text: str) -> None:
        if not DECISION_LANGUAGE.search(text):
            return
        for sentence in _SENTENCE_END.split(text):
            if DECISION_LANGUAGE.search(sentence):
                s.decisions.setdefault(f"- {_short(sentence, 300)}", None)

    def _remaining(
        self, s: _Sections, messages: Sequence[Message], last: int | None, steps: int,
        answered: bool,
    ) -> None:
        if last is None:
            if not s.remaining:
                s.remaining.append("- unknown (no user request in the summarized messages)")
            return
        request = _short(messages[last].text, 300)
        if last == len(messages) - 1:
            s.remaining.append(f"- respond to the last request: {request}")
        elif answered:
            s.remaining.append(f"- none recorded: the last request was answered ({request})")
        else:
            s.remaining.append(
                f"- finish the last request: {request} ({steps} tool step(s) done since it "
                "was asked; which items remain is unknown)"
            )

    def _new_task(self, s: _Sections, text: str) -> None:
        """``text`` is the latest request; the one it replaces joins the earlier ones."""
        task = _short(text, self.task_chars)
        if s.task is not None and s.task != task:
            earlier = _short(s.task, self.step_chars)
            s.earlier = [earlier, *(e for e in s.earlier if e != earlier)][:_EARLIER_KEPT]
        s.task = task

    def _open(self, s: _Sections, open_request: str | None) -> None:
        """The conversation's latest request is unanswered: it is the task and it remains,
        whatever the summarized span says about its own last request."""
        if not open_request:
            return
        self._new_task(s, open_request)
        s.remaining = [r for r in s.remaining if not r.startswith("- none recorded")]
        s.remaining.insert(0, f"- respond to the latest request: {_short(open_request, 300)}")

    def _merge(self, s: _Sections, text: str) -> None:
        """Fold an earlier structured summary into ``s``."""
        current: str | None = None
        for line in text.splitlines():
            heading = _HEADING.match(line)
            if heading:
                current, rest = heading.group(1), heading.group(2).strip()
                if current == "TASK" and rest:
                    self._new_task(s, rest)
                continue
            item = _ITEM.sub("", line).strip()
            if current == "TASK" and item.startswith("earlier request: "):
                earlier = item[len("earlier request: "):]
                if earlier not in s.earlier and earlier != s.task:
                    s.earlier = [*s.earlier, earlier][:_EARLIER_KEPT]
                continue
            if not item or item.startswith("[") or current in (None, "TASK", "REMAINING"):
                continue
            if item == "none" or item.startswith("none "):
                continue
            if current == "PROGRESS":
                s.progress.append(item)
            elif current == "DATA":
                s.data.setdefault(item, None)
            elif current == "DECISIONS":
                s.decisions.setdefault(f"- {item}", None)
            elif current == "ERRORS":
                s.errors.append(f"- {item}")

    # -- writing ---------------------------------------------------------------------

    def _render(self, s: _Sections) -> str:
        return "\n".join(_lines(_Kept.whole(s)))


_TASK_CHARS = 200  # a task or remaining item longer than this is shortened to it
_DATA_OMITTED = "- [more identifier(s) omitted to fit]"


@dataclass
class _Kept:
    """What a summary keeps of its sections after some removals (see :class:`_Fitting`)."""

    s: _Sections
    progress: list[str]
    omitted_steps: int
    decisions: list[str]
    errors: list[str]
    task: str | None
    remaining: list[str]
    earlier: list[str]
    data: int  # how many of ``s.data``'s first values
    data_omitted: bool

    @classmethod
    def whole(cls, s: _Sections) -> _Kept:
        return cls(s, s.progress, 0, list(s.decisions), s.errors, s.task, s.remaining,
                   s.earlier, len(s.data), False)


def _lines(k: _Kept) -> Iterator[str]:
    """The summary's lines, in order, made as they are read."""
    yield f"TASK: {k.task or 'unknown (not in the summarized messages)'}"
    for e in k.earlier:
        yield f"- earlier request: {e}"
    yield "PROGRESS:"
    for n, step in enumerate(k.progress, 1):
        if n == 2 and k.omitted_steps:
            yield f"- [{k.omitted_steps} earlier step(s) omitted]"
        yield f"{n}. {step}"
    if k.omitted_steps and len(k.progress) < 2:
        yield f"- [{k.omitted_steps} earlier step(s) omitted]"
    elif not k.progress:
        yield _NONE
    yield "REMAINING:"
    yield from k.remaining or [_NONE]
    yield "DATA:"
    values = islice(k.s.data, k.data)
    first = next(values, None)
    if first is None and not k.data_omitted:
        yield _NONE
    if first is not None:
        yield f"- {first}"
        for value in values:
            yield f"- {value}"
    if k.data_omitted:
        yield _DATA_OMITTED
    yield "DECISIONS:"
    yield from k.decisions or [_NONE]
    yield "ERRORS:"
    yield from k.errors or [_NONE]


class _Fitting:
    """A summary over its size hint, with the fewest removals that fit it, counted exactly.

    Removals go in the documented order: the steps of PROGRESS after its first and before
    its latest, oldest first; DECISIONS; ERRORS; the task, then each long REMAINING item,
    shortened to 200 characters; the REMAINING items after the first; the first and the
    latest step; the earlier requests, oldest first; DATA's values, the last found first
    (a line says that more were left out). The first state that fits is found by bisection
    over that order; a text is counted only as far as deciding it needs (the start of a
    long text that is over on its own, :func:`head_over`). When not even everything
    removed fits, that is the summary (the caller cuts it further)."""

    def __init__(self, s: _Sections, max_tokens: int, counter: TokenCounter | None) -> None:
        self.s, self.max_tokens, self.counter = s, max_tokens, counter
        self.cap = max(4096, 8 * max_tokens)  # characters rendered before a first look
        middle = max(len(s.progress) - 2, 0)
        long_items = [i for i, item in enumerate(s.remaining) if len(item) > _TASK_CHARS]
        self.long_items = long_items
        # (removals of each kind, in order); DATA's are counted apart.
        self.kinds = (
            middle, len(s.decisions), len(s.errors),
            int(bool(s.task) and len(s.task or "") > _TASK_CHARS), len(long_items),
            max(len(s.remaining) - 1, 0), min(len(s.progress), 2), len(s.earlier),
        )

    def text(self) -> str:
        whole = self._state(0)
        if self._fits(whole):
            return self._render(whole)
        last = sum(self.kinds)
        if self._fits(self._state(last)):  # DATA whole fits once the rest is gone
            lo, hi = 0, last  # lo never fits, hi fits
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._fits(self._state(mid)):
                    hi = mid
                else:
                    lo = mid
            return self._render(self._state(hi))
        return self._render(self._state(last, self._data_kept(last)))

    def _data_kept(self, last: int) -> int:
        """The most leading DATA values that fit beside everything else removed: sizes
        tried doubling from one, then bisected, so that only as many values are looked at
        as the tries need (the last size tried is known not to fit)."""
        if not self._fits(self._state(last, 0)):
            return 0
        lo, k = 0, 1  # lo fits
        while True:
            found = len(self.s.data) if len(self.s.data) < k else k
            if found < k:  # all of DATA is fewer: all of it was found not to fit
                hi = found
                break
            if not self._fits(self._state(last, k)):
                hi = k
                break
            lo, k = k, k * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(self._state(last, mid)):
                lo = mid
            else:
                hi = mid
        return lo

    def _state(self, r: int, data: int | None = None) -> _Kept:
        """What is kept after the first ``r`` removals (of every kind but DATA's), with the
        first ``data`` DATA values when given (all of them otherwise)."""
        s = self.s
        taken = []
        for n in self.kinds:
            taken.append(min(r, n))
            r -= taken[-1]
        middle, decisions, errors, task, shortened, dropped, ends, earlier = taken
        progress = s.progress
        if middle:
            progress = [progress[0], *progress[1 + middle:]]
        progress = progress[ends:]
        remaining = list(s.remaining)
        for i in self.long_items[:shortened]:
            remaining[i] = _short(remaining[i], _TASK_CHARS)
        if dropped:
            del remaining[1:1 + dropped]
        kept = len(s.data) if data is None else data
        return _Kept(
            s, progress, middle + ends, list(s.decisions)[decisions:], s.errors[errors:],
            _short(s.task, _TASK_CHARS) if task and s.task else s.task, remaining,
            s.earlier[: len(s.earlier) - earlier], kept, kept < len(s.data),
        )

    def _render(self, kept: _Kept) -> str:
        return "\n".join(_lines(kept))

    def _fits(self, kept: _Kept) -> bool:
        cap = self.cap
        while True:
            text, whole = _head(_lines(kept), cap)
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


def _head(lines: Iterator[str], cap: int) -> tuple[str, bool]:
    """The text of ``lines`` joined, once it runs past ``cap`` characters (``False``), or
    whole (``True``)."""
    taken: list[str] = []
    size = 0
    for line in lines:
        taken.append(line)
        size += len(line) + 1
        if size > cap:
            return "\n".join(taken), False
    return "\n".join(taken), True
