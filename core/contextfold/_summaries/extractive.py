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
    DATA: every identifier of the originals, verbatim: codes side by side, a space
          apart; a word or a phrase on a line of its own
    DECISIONS: sentences with decision language
    ERRORS: failed tool steps

A summary made earlier (by this summarizer or an LLM following the same sections) that is
itself being summarized again is merged section by section, so recursive compaction keeps
the task, the steps and the data of every earlier pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated

from .._config import Ge, check
from .._contract.policy import SummaryRequest
from .._counting.counters import TokenCounter
from .._messages.model import Message
from .._messages.prompt_kinds import prompt_kind
from .sections import Fitting, Kept, Line, Sections, render, short, unpacked

__all__ = ["SECTIONS", "ExtractiveSummarizer"]

SECTIONS = ("TASK", "PROGRESS", "REMAINING", "DATA", "DECISIONS", "ERRORS")
"""The section headings, in order."""

_ERROR_START = re.compile(r"^\s*(?:error|exception|traceback|failed|fatal)\b", re.I)
_HEADING = re.compile(r"^(TASK|PROGRESS|REMAINING|DATA|DECISIONS|ERRORS):\s?(.*)$")
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")


_EARLIER_KEPT = 3  # earlier requests listed under TASK


def _is_summary(message: Message) -> bool:
    text = message.text
    return message.source == "summary" or ("TASK:" in text and "PROGRESS:" in text)


class ExtractiveSummarizer:
    """The threshold design's structured summary, made without an LLM.

    The default summarizer when none is given, and the fallback when an LLM summarizer
    fails. A summary over ``request.max_tokens`` (by ``counter``) loses the fewest lines
    that make it fit: PROGRESS's steps first, then DECISIONS, ERRORS, the task and
    REMAINING, then the earlier requests; DATA only when nothing else is left, its least
    salient values first (so the room left beside what stays holds as many identifiers as
    fit, those the run is likeliest to need).

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
        sections.data.shown = request.shown
        if request.max_tokens is None:
            return render(Kept.whole(sections))
        return Fitting(sections, request.max_tokens, self.counter).text()

    async def asummarize(self, request: SummaryRequest) -> str:
        """Same as [`summarize`][contextfold.ExtractiveSummarizer.summarize] (no I/O)."""
        return self.summarize(request)

    # -- reading ---------------------------------------------------------------------

    def _scan(
        self, messages: Sequence[Message], open_request: str | None = None,
        latest_request: str | None = None,
    ) -> Sections:
        s = Sections()
        calls: dict[str, tuple[str, str]] = {}
        answered: set[str] = set()
        last_request: int | None = None
        steps_since = 0
        answered_since = False
        exchanges: list[tuple[int, Line]] = []  # (where in PROGRESS, the step)
        for i, m in enumerate(messages):
            if _is_summary(m) and m.role != "tool":
                self._merge(s, m.text)
                continue
            s.data.sources.append(m)  # its identifiers: looked for when DATA is read
            for call in m.tool_calls:
                calls[call.id] = (call.name, call.arguments)
            if prompt_kind(m) is not None:  # a real prompt, not a marker or a nudge
                self._new_task(s, m.text)
                last_request, steps_since, answered_since = i, 0, False
            if m.role in ("user", "assistant"):
                s.decision_sources.append((True, m.text))
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
                s.remaining.append(f"- pending tool call: {name}({short(args, 80)})")
        return s

    def _step(self, s: Sections, result: Message, call: tuple[str, str] | None) -> None:
        """The line of a tool step, made when read: PROGRESS's, or ERRORS' for a failed one
        (flagged, or whose first non-blank line starts like an error)."""
        name = call[0] if call else (result.name or "tool")
        arguments = call[1] if call and call[1] != "{}" else None
        if result.is_error or _ERROR_START.match(result.text):
            s.errors.append(Line(_error_line, name, arguments, result, self.step_chars))
            return
        s.progress.append(Line(_step_line, name, arguments, result, self.step_chars))

    def _exchange(self, request: Message, answer: Message) -> Line:
        """A request answered without tools, a completed step of a plain chat: what the
        user said (often the facts later turns need) and the head of the answer."""
        return Line(_exchange_line, request, answer, self.step_chars)

    def _remaining(
        self, s: Sections, messages: Sequence[Message], last: int | None, steps: int,
        answered: bool,
    ) -> None:
        if last is None:
            if not s.remaining:
                s.remaining.append("- unknown (no user request in the summarized messages)")
            return
        request = short(messages[last].text, 300)
        if last == len(messages) - 1:
            s.remaining.append(f"- respond to the last request: {request}")
        elif answered:
            s.remaining.append(f"- none recorded: the last request was answered ({request})")
        else:
            s.remaining.append(
                f"- finish the last request: {request} ({steps} tool step(s) done since it "
                "was asked; which items remain is unknown)"
            )

    def _new_task(self, s: Sections, text: str) -> None:
        """``text`` is the latest request; the one it replaces joins the earlier ones."""
        task = short(text, self.task_chars)
        if s.task is not None and s.task != task:
            earlier = short(s.task, self.step_chars)
            s.earlier = [earlier, *(e for e in s.earlier if e != earlier)][:_EARLIER_KEPT]
        s.task = task

    def _open(self, s: Sections, open_request: str | None) -> None:
        """The conversation's latest request is unanswered: it is the task and it remains,
        whatever the summarized span says about its own last request."""
        if not open_request:
            return
        self._new_task(s, open_request)
        s.remaining = [r for r in s.remaining if not r.startswith("- none recorded")]
        s.remaining.insert(0, f"- respond to the latest request: {short(open_request, 300)}")

    def _merge(self, s: Sections, text: str) -> None:
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
                s.data.sources.extend(unpacked(item))
            elif current == "DECISIONS":
                s.decision_sources.append((False, f"- {item}"))
            elif current == "ERRORS":
                s.errors.append(f"- {item}")


def _args(arguments: str | None, limit: int) -> str:
    return f"({short(arguments, limit // 2)})" if arguments is not None else ""


def _step_line(name: str, arguments: str | None, result: Message, limit: int) -> str:
    return f"{name}{_args(arguments, limit)} \u2192 {short(result.text, limit) or '(no output)'}"


def _error_line(name: str, arguments: str | None, result: Message, limit: int) -> str:
    return f"- {name}{_args(arguments, limit)}: {short(result.text, limit)}"


def _exchange_line(request: Message, answer: Message, limit: int) -> str:
    return f"asked: {short(request.text, limit)} \u2192 {short(answer.text, limit // 2)}"
