"""The message-format guarantee, made general: what a provider would reject.

A valid sequence is ``[system...][user][assistant?][tool?]...``:

* system and developer messages only at the start;
* at least one user message, and one before the first assistant message;
* every tool result directly after the assistant message that called it (only tool
  results between them), answering one of its calls;
* every call answered, no call id used twice.

``validate`` lists every problem; ``repair`` fixes them explicitly and is never applied
silently to stored history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .model import Message, ToolCall
from .structure import SYSTEM_ROLES, leading_system_count

__all__ = ["INTERRUPTED_RESULT", "NO_USER_NOTE", "Problem", "Validation", "repair", "validate"]

INTERRUPTED_RESULT = "[interrupted: this tool call did not return a result]"
"""The text of a synthetic result that answers a dangling call in ``repair``."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a provider would reject the sequence."""

    index: int
    """The offending message's position (-1 for the sequence as a whole)."""
    code: str
    """A stable code: ``empty``, ``system_not_first``, ``no_user``, ``assistant_before_user``,
    ``orphan_tool_result``, ``unanswered_call``, ``duplicate_call_id``, ``tool_without_id``."""
    detail: str
    """A human-readable explanation."""

    def __str__(self) -> str:
        where = f"message {self.index}" if self.index >= 0 else "sequence"
        return f"{where}: {self.code}: {self.detail}"


def validate(messages: Sequence[Message]) -> list[Problem]:
    """Every problem in ``messages``; an empty list means a provider would accept them."""
    return Validation().feed(messages).problems()


class Validation:
    """[`validate`][contextfold.validate] as a scan that can go on: `feed` reads messages as they
    are appended, `problems` lists the problems of everything read so far. A history that
    grows by appends is checked once per message, not once per call."""

    def __init__(self) -> None:
        self.length = 0
        self._found: list[Problem] = []  # problems found inside the scan, in order
        self._seen_non_system = False
        self._seen_user = False
        self._seen_ids: set[str] = set()
        self._pending: dict[str, int] = {}  # call id -> index of the assistant awaiting it
        self._open_calls = False  # the last non-tool message was an assistant with calls

    def feed(self, messages: Sequence[Message]) -> Validation:
        """Read ``messages[self.length:]``: ``messages`` extends what was read before."""
        problems, pending, seen_ids = self._found, self._pending, self._seen_ids
        seen_non_system, seen_user = self._seen_non_system, self._seen_user
        open_calls = self._open_calls
        for i in range(self.length, len(messages)):
            m = messages[i]
            if m.role in SYSTEM_ROLES:
                if seen_non_system:
                    problems.append(
                        Problem(i, "system_not_first", f"{m.role} message after the start"))
            else:
                seen_non_system = True
            if m.role != "tool":
                for call_id, at in pending.items():
                    problems.append(Problem(at, "unanswered_call",
                                            f"call {call_id!r} has no result"))
                pending.clear()
                open_calls = False
            if m.role == "user":
                seen_user = True
            elif m.role == "assistant":
                if not seen_user:
                    problems.append(Problem(i, "assistant_before_user",
                                            "assistant message before any user message"))
                for call in m.tool_calls:
                    if call.id in seen_ids:
                        problems.append(
                            Problem(i, "duplicate_call_id", f"call id {call.id!r} reused"))
                    seen_ids.add(call.id)
                    pending[call.id] = i
                open_calls = bool(m.tool_calls)
            elif m.role == "tool":
                if not m.tool_call_id:
                    problems.append(
                        Problem(i, "tool_without_id", "tool result without tool_call_id"))
                elif not open_calls or m.tool_call_id not in pending:
                    problems.append(Problem(i, "orphan_tool_result",
                                            f"no open call {m.tool_call_id!r} before it"))
                else:
                    del pending[m.tool_call_id]
        self.length = max(self.length, len(messages))
        self._seen_non_system, self._seen_user = seen_non_system, seen_user
        self._open_calls = open_calls
        return self

    def problems(self) -> list[Problem]:
        """Every problem of the messages read so far (as [`validate`][contextfold.validate] lists
        them)."""
        if not self.length:
            return [Problem(-1, "empty", "no messages")]
        problems = list(self._found)
        problems.extend(Problem(at, "unanswered_call", f"call {call_id!r} has no result")
                        for call_id, at in self._pending.items())
        if not self._seen_user:
            problems.append(Problem(-1, "no_user", "no user message"))
        return problems

    def unprompted_only(self) -> bool:
        """True when the only problem is that no user message was read yet (an autonomous
        agent's history): [`repair`][contextfold.repair] then gives back an equal list of the same
        messages, with the one note `NO_USER_NOTE`."""
        return not self._seen_user and not self._pending and all(
            p.code == "assistant_before_user" for p in self._found)


NO_USER_NOTE = "no user message: the sequence still needs a prompt"
"""The note of [`repair`][contextfold.repair] for a history with no user message."""


def repair(messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """A valid copy of ``messages`` and a description of each change.

    Moves system messages to the front; moves a tool result that was separated from its
    call (a message interjected between them) back behind the call; gives a reused call id
    (and the result that answers it) a fresh id; drops orphaned and id-less tool results;
    answers dangling calls with an ``interrupted`` result; drops assistant messages (with
    their results) that come before the first user message. Every other message is kept,
    in order. The input is not modified. A valid input comes back as an equal list with no
    notes.

    A history with no user message at all keeps its assistant messages: no repair can
    supply the prompt, and an autonomous agent's history (the message-format guarantee: nudges are
    never stored) would otherwise lose all its work; a policy that supplies the prompt
    (loop-slice's nudge) makes it valid.
    """
    if not validate(messages):
        return list(messages), []
    notes: list[str] = []
    systems = [m for m in messages if m.role in SYSTEM_ROLES]
    late = len(systems) - leading_system_count(messages)
    if late:
        notes.append(f"moved {late} system message(s) to the front")
    rest = [m for m in messages if m.role not in SYSTEM_ROLES]
    matcher = _Matcher(rest)
    out: list[Message] = list(systems)
    has_user = any(m.role == "user" for m in rest)
    seen_user = not has_user
    for k, m in enumerate(rest):
        if m.role == "tool":
            if k not in matcher.used:
                notes.append(f"dropped orphaned tool result {m.tool_call_id!r}")
            continue
        if m.role == "user":
            seen_user = True
        if m.role == "assistant" and not seen_user:
            notes.append("dropped an assistant message that came before any user message")
            for c in m.tool_calls:
                matcher.take(c.id, k)
            continue
        if m.tool_calls:
            out.extend(matcher.answer(m, k, notes))
        else:
            out.append(m)
    if not has_user:
        notes.append(NO_USER_NOTE)
    return out, notes


class _Matcher:
    """Pairs each call with its result in ``rest`` (non-system messages) for ``repair``."""

    def __init__(self, rest: list[Message]) -> None:
        self.rest = rest
        self.used: set[int] = set()
        self.results: dict[str, list[int]] = {}
        self.calls: dict[str, list[int]] = {}
        for k, m in enumerate(rest):
            if m.role == "tool" and m.tool_call_id:
                self.results.setdefault(m.tool_call_id, []).append(k)
            for c in m.tool_calls:
                self.calls.setdefault(c.id, []).append(k)
        self.ids = set(self.calls) | set(self.results)
        self.seen: set[str] = set()

    def take(self, call_id: str, k: int) -> int | None:
        """The first unused result for ``call_id`` after ``k`` and before the id's next call."""
        bound = next((p for p in self.calls.get(call_id, ()) if p > k), len(self.rest))
        for pos in self.results.get(call_id, ()):
            if k < pos < bound and pos not in self.used:
                self.used.add(pos)
                return pos
        return None

    def fresh(self, call_id: str) -> str:
        """An unused id derived from ``call_id``, in the characters Anthropic accepts."""
        n = 2
        while f"{call_id}_{n}" in self.ids:
            n += 1
        new = f"{call_id}_{n}"
        self.ids.add(new)
        return new

    def answer(self, m: Message, k: int, notes: list[str]) -> list[Message]:
        """``m`` (an assistant message with calls at ``k``) followed by one result per call."""
        block_end = k + 1
        while block_end < len(self.rest) and self.rest[block_end].role == "tool":
            block_end += 1
        calls: list[ToolCall] = []
        found: list[tuple[int, Message]] = []
        missing: list[Message] = []
        for c in m.tool_calls:
            pos = self.take(c.id, k)
            call = c
            if c.id in self.seen:
                call = replace(c, id=self.fresh(c.id))
                notes.append(f"gave reused call id {c.id!r} the fresh id {call.id!r}")
            self.seen.add(call.id)
            calls.append(call)
            if pos is None:
                notes.append(f"answered dangling call {call.id!r} with an interrupted result")
                missing.append(_interrupted(call))
                continue
            if pos >= block_end:
                notes.append(f"moved the result of call {call.id!r} behind its call")
            result = self.rest[pos]
            if call.id != c.id:
                result = replace(result, tool_call_id=call.id)
            found.append((pos, result))
        head = m if calls == list(m.tool_calls) else replace(m, tool_calls=tuple(calls))
        return [head, *(r for _, r in sorted(found, key=lambda x: x[0])), *missing]


def _interrupted(call: ToolCall) -> Message:
    return Message(
        role="tool",
        content=INTERRUPTED_RESULT,
        tool_call_id=call.id,
        name=call.name,
        metadata={"is_error": True, "synthetic": True},
    )
