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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from .._config import Ge, check
from .._counting.counters import TokenCounter, text_over
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
    fails. ``request.max_tokens`` is respected roughly: PROGRESS is trimmed first, then
    DECISIONS, ERRORS, the task and REMAINING, then the earlier requests; DATA only when
    nothing else is left.

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
        text = self._render(sections)
        if request.max_tokens is None:
            return text
        # A text far over the size is not counted whole: an exact count of its start shows
        # it is over, and the trimming only needs to know by about how much (it counts
        # what it keeps).
        over = None if self.counter is None else text_over(self.counter, text,
                                                            request.max_tokens)
        size = over if over is not None else self._size(text)
        return text if size <= request.max_tokens else self._fit(
            sections, request.max_tokens, text, size
        )

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

    def _render(self, s: _Sections, omitted_steps: int = 0, omitted_data: int = 0) -> str:
        progress = [f"{k}. {step}" for k, step in enumerate(s.progress, 1)]
        if omitted_steps:
            progress.insert(min(1, len(progress)), f"- [{omitted_steps} earlier step(s) omitted]")
        data = [f"- {value}" for value in s.data]
        if omitted_data:
            data.append(f"- [{omitted_data} more identifier(s) omitted]")
        lines = [f"TASK: {s.task or 'unknown (not in the summarized messages)'}"]
        lines.extend(f"- earlier request: {e}" for e in s.earlier)
        for heading, items in (
            ("PROGRESS", progress), ("REMAINING", s.remaining), ("DATA", data),
            ("DECISIONS", list(s.decisions)), ("ERRORS", s.errors),
        ):
            lines.append(f"{heading}:")
            lines.extend(items or [_NONE])
        return "\n".join(lines)

    def _size(self, text: str) -> int:
        if self.counter is not None:
            return self.counter.count_text(text)
        return math.ceil(len(text) / 3)

    def _fit(self, s: _Sections, max_tokens: int, text: str, size: int) -> str:
        """Trim PROGRESS, then DECISIONS, ERRORS, the task and REMAINING, then the earlier
        requests, then DATA, to fit."""
        steps = data = 0
        margin = 0.97
        for _ in range(4):  # the first pass nearly always fits: sizes scale with characters
            chars = int(len(text) * max_tokens / max(size, 1) * margin)
            more_steps, more_data = _trim(s, len(text) - chars)
            steps, data = steps + more_steps, data + more_data
            text = self._render(s, steps, data)
            size = self._size(text)
            if size <= max_tokens:
                break
            margin *= 0.9
        return text


def _trim(s: _Sections, excess: int) -> tuple[int, int]:
    """Drop about ``excess`` characters in the documented order; return what was omitted."""
    omitted_steps, excess = _drop(s.progress, excess, keep_first=1, keep_last=1)
    for key in list(s.decisions):
        if excess <= 0:
            break
        excess -= len(key) + 1
        del s.decisions[key]
    _, excess = _drop(s.errors, excess)
    if excess > 0 and s.task and len(s.task) > 200:
        excess -= len(s.task) - 200
        s.task = _short(s.task, 200)
    for i, item in enumerate(s.remaining):  # identifiers outlive the to-do list's wording
        if excess <= 0:
            break
        if len(item) > 200:
            excess -= len(item) - 200
            s.remaining[i] = _short(item, 200)
    _, excess = _drop(s.remaining, excess, keep_first=1)
    more_steps, excess = _drop(s.progress, excess)
    # Earlier requests were asked and answered; the identifiers are what cannot be recovered
    # from the words of the conversation that stays in view.
    while excess > 0 and s.earlier:
        excess -= len(s.earlier.pop()) + 20
    omitted_data = 0
    while excess > 0 and s.data:
        excess -= len(s.data.popitem()[0]) + 3
        omitted_data += 1
    return omitted_steps + more_steps, omitted_data


def _drop(
    items: list[str], excess: int, keep_first: int = 0, keep_last: int = 0
) -> tuple[int, int]:
    """Delete items after the first ``keep_first``, oldest first, until about ``excess``
    characters are gone (the last ``keep_last`` stay); return the count and what is left."""
    k, end = keep_first, len(items) - keep_last
    while excess > 0 and k < end:
        excess -= len(items[k]) + 4
        k += 1
    del items[keep_first:k]
    return k - keep_first, excess
