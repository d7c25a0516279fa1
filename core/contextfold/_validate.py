"""The format guarantee (seed 001, made general): what a provider would reject.

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

from ._messages import Message
from ._structure import SYSTEM_ROLES, leading_system_count

__all__ = ["INTERRUPTED_RESULT", "Problem", "repair", "validate"]

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
    problems: list[Problem] = []
    if not messages:
        return [Problem(-1, "empty", "no messages")]
    seen_non_system = False
    seen_user = False
    seen_ids: set[str] = set()
    pending: dict[str, int] = {}  # call id -> index of the assistant message awaiting it
    open_calls = False  # the last non-tool message was an assistant with tool calls
    for i, m in enumerate(messages):
        if m.role in SYSTEM_ROLES:
            if seen_non_system:
                problems.append(Problem(i, "system_not_first", f"{m.role} message after the start"))
        else:
            seen_non_system = True
        if m.role != "tool":
            for call_id, at in pending.items():
                problems.append(Problem(at, "unanswered_call", f"call {call_id!r} has no result"))
            pending.clear()
            open_calls = False
        if m.role == "user":
            seen_user = True
        elif m.role == "assistant":
            if not seen_user:
                problems.append(
                    Problem(i, "assistant_before_user", "assistant message before any user message")
                )
            for call in m.tool_calls:
                if call.id in seen_ids:
                    problems.append(Problem(i, "duplicate_call_id", f"call id {call.id!r} reused"))
                seen_ids.add(call.id)
                pending[call.id] = i
            open_calls = bool(m.tool_calls)
        elif m.role == "tool":
            if not m.tool_call_id:
                problems.append(Problem(i, "tool_without_id", "tool result without tool_call_id"))
            elif not open_calls or m.tool_call_id not in pending:
                problems.append(
                    Problem(i, "orphan_tool_result", f"no open call {m.tool_call_id!r} before it")
                )
            else:
                del pending[m.tool_call_id]
    for call_id, at in pending.items():
        problems.append(Problem(at, "unanswered_call", f"call {call_id!r} has no result"))
    if not seen_user:
        problems.append(Problem(-1, "no_user", "no user message"))
    return problems


def repair(messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """A valid copy of ``messages`` and a description of each change.

    Moves system messages to the front; moves a tool result that was separated from its
    call (a message interjected between them) back behind the call; drops orphaned and
    id-less tool results and reused call ids; answers dangling calls with an
    ``interrupted`` result; drops assistant messages (with their results) that come before
    the first user message. The input is not modified. A valid input comes back as an
    equal list with no notes.
    """
    if not validate(messages):
        return list(messages), []
    notes: list[str] = []
    systems = [m for m in messages if m.role in SYSTEM_ROLES]
    late = len(systems) - leading_system_count(messages)
    if late:
        notes.append(f"moved {late} system message(s) to the front")
    rest = [m for m in messages if m.role not in SYSTEM_ROLES]
    # The first result for each call id, wherever it sits after its call.
    first_result: dict[str, int] = {}
    for k, m in enumerate(rest):
        if m.role == "tool" and m.tool_call_id and m.tool_call_id not in first_result:
            first_result[m.tool_call_id] = k
    used: set[int] = set()
    out: list[Message] = list(systems)
    seen_ids: set[str] = set()
    seen_user = False
    for k, m in enumerate(rest):
        if m.role == "tool":
            if k not in used:
                notes.append(f"dropped orphaned tool result {m.tool_call_id!r}")
            continue
        if m.role == "user":
            seen_user = True
        if m.role == "assistant" and not seen_user:
            notes.append("dropped an assistant message that came before any user message")
            used.update(first_result[c.id] for c in m.tool_calls if c.id in first_result)
            continue
        if not m.tool_calls:
            out.append(m)
            continue
        calls = tuple(c for c in m.tool_calls if c.id not in seen_ids)
        if len(calls) != len(m.tool_calls):
            notes.append("dropped reused tool call ids")
        if not calls:
            if m.text or m.reasoning:
                out.append(replace(m, tool_calls=()))
            continue
        out.append(m if len(calls) == len(m.tool_calls) else replace(m, tool_calls=calls))
        for c in calls:
            seen_ids.add(c.id)
            at = first_result.get(c.id)
            if at is not None and at > k and at not in used:
                used.add(at)
                if at != k + 1 + calls.index(c):
                    notes.append(f"moved the result of call {c.id!r} behind its call")
                out.append(rest[at])
            else:
                notes.append(f"answered dangling call {c.id!r} with an interrupted result")
                out.append(
                    Message(
                        role="tool",
                        content=INTERRUPTED_RESULT,
                        tool_call_id=c.id,
                        name=c.name,
                        metadata={"is_error": True, "synthetic": True},
                    )
                )
    if not seen_user:
        notes.append("no user message: the sequence still needs a prompt")
    return out, notes
