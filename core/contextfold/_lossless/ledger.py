"""The compaction ledger: a compact, deterministic record of what compaction took out of view.

Summaries lose the artifact trail first (which tools ran with which arguments, which ids,
codes, paths and amounts came back, what the user corrected). The ledger keeps it without an
LLM: one line per removed or cut item, each with the handle of its original, in one user
message that every later compaction merges into, never re-summarizes::

    [Compaction ledger: what was taken out of view; read_original(handle) returns the full text]
    - read_document({"number": 5}) -> REF-7Q2K-0005, 2026-03-01 [ctx_1a2b3c4d5e6f]
    - user: Use the corporate card ending in 9725, not the personal one. [ctx_0f9e8d7c6b5a]
    - decided: We will ship the order on Monday. [ctx_9a8b7c6d5e4f]

It has its own share of the budget (`Ledger.share`, 5% by default); the policy it
wraps compacts into the rest. When the entries outgrow that share, the least used go first
(an entry is used when its identifiers appear again in what stays in view): a count says
how many were shed, and the full history still holds them (searchable in the store).

`run_with_ledger` wraps any policy's run: it takes the previous ledger out of the
input, runs the policy with the ledger's room reserved, records what the policy removed or
cut, and puts the merged ledger back just before the newest group.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Annotated, Any

from .._config import Ge, Gt, Le, check_fields
from .._contract.policy import (
    CompactionContext,
    PolicyOutcome,
    PolicyRun,
    Target,
)
from .._messages.model import Message
from .._messages.prompt_kinds import LEDGER_SOURCE
from .._messages.structure import leading_system_count, split_groups
from .._summaries.identifiers import (
    extract_identifiers,
    field_values,
    identifiers_of,
    leading_identifiers,
)
from .._summaries.sections import Line
from ..errors import BudgetExceededError
from .handles import with_handles
from .ledger_payload import LEDGER_META, is_ledger, payload_entries

__all__ = [
    "LEDGER_HEADER",
    "Ledger",
    "ledger_entries",
    "run_with_ledger",
]

"""The ``source`` of the ledger message (never a prompt, never summarized)."""

LEDGER_HEADER = ("[Compaction ledger: what was taken out of view; read_original(handle) "
                 "returns the full text]")
"""The first line of the ledger message."""

_DECISION_WORDS = ("decided", "concluded", "agreed", "will do", "won't do", "determined",
                   "resolved", "confirmed")


@dataclass(frozen=True)
class Ledger:
    """How much of the budget the ledger may take and how much each entry holds.

    Args:
        share: the ledger's share of the input budget (the policy compacts into the rest).
        min_tokens: the least room it gets on small budgets (when the budget allows).
        identifiers: the most identifiers recorded per entry.
        chars: the most characters of text recorded per entry (requests, decisions).
    """

    share: Annotated[float, Gt(0), Le(0.5)] = 0.05
    min_tokens: Annotated[int, Ge(0)] = 128
    identifiers: Annotated[int, Ge(1)] = 6
    chars: Annotated[int, Ge(20)] = 160

    def __post_init__(self) -> None:
        check_fields(self)

    def room(self, context: CompactionContext) -> int:
        """Tokens reserved for the ledger under ``context``'s budget."""
        budget = context.budget.input_budget
        return min(max(int(budget * self.share), self.min_tokens), budget // 4)


@dataclass(frozen=True, slots=True)
class _Entry:
    key: str
    text: str | Line  # a new entry's is made when read: most are shed unread
    handle: str | None
    uses: int = 0
    values: tuple[str, ...] = ()  # the identifiers it records

    def line(self) -> str:
        return f"- {self.text}" + (f" [{self.handle}]" if self.handle else "")

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "text": str(self.text), "handle": self.handle,
                "uses": self.uses,
                "values": list(self.values)}


def ledger_entries(message: Message) -> list[dict[str, Any]]:
    """The entries a ledger message holds (empty for any other message)."""
    return [e.as_dict() for e in _held_entries(message) or ()]


def _held_entries(message: Message) -> tuple[_Entry, ...] | None:
    """The entries of a ledger message (``None`` when it is not one: a payload of another
    shape makes it ordinary content, `ledger_payload`)."""
    raw = payload_entries(message)
    if raw is None:
        return None
    return tuple(_Entry(e["key"], e["text"], e.get("handle"), e.get("uses", 0),
                        tuple(e.get("values", ()))) for e in raw)


def run_with_ledger(
    run: Callable[[Sequence[Message], CompactionContext], PolicyRun],
    messages: Sequence[Message],
    context: CompactionContext,
    ledger: Ledger,
    *,
    reserve: bool = True,
    frozen: int = 0,
    share: float = 1.0,
) -> PolicyRun:
    """``run`` (a policy's) with the ledger carried: see the module docstring.

    ``reserve`` takes the ledger's room from the policy's budget before it runs (for
    policies that fill the whole budget); a policy that compacts to its target leaves room
    under the hard budget instead, and the ledger takes at most that room after it ran.

    ``frozen`` is the end of the part a rolling pass leaves byte-identical
    (`rolling`): the earlier ledgers in it stay where they are,
    and the new entries (those no earlier ledger holds) go in a ledger of their own right
    after the pass's summary, within what the earlier ones left of the ledger's room.
    ``share`` is the part of its room a merged ledger may fill (the rest is left to the
    rolling passes that follow it).
    """
    if frozen:
        return (yield from _run_rolling(run, messages, context, ledger, frozen))
    positions = [i for i, m in enumerate(messages) if not is_ledger(m)]
    previous = [m for m in messages if is_ledger(m)]
    rest = [messages[i] for i in positions] if previous else messages
    room = int(ledger.room(context) * share)
    if reserve:
        inner = replace(context, fixed_tokens=context.fixed_tokens + room)
        try:
            outcome: PolicyOutcome = yield from run(rest, inner)
        except BudgetExceededError:
            # The ledger's room is taken from the policy's; when the policy's minimum does
            # not fit beside it, the policy gets the whole budget and the ledger waits.
            room = 0
            outcome = yield from run(rest, context)
    else:
        # The previous ledger still counts where the policy decides (its trigger sees the
        # same total as the engine did), and the policy aims below its target by the
        # ledger's share of the budget, so that the two land under the target together; the
        # ledger gets what the policy leaves under the hard budget. (On a budget so small
        # that ``min_tokens`` sets the room, no aim is lowered by that floor: such a room
        # holds one entry or none, and the policy would leave it empty.)
        held = sum(context.counter.count_message(m) for m in previous)
        share_of_budget = int(context.budget.input_budget * ledger.share * share)
        inner = _target_lowered(replace(context, fixed_tokens=context.fixed_tokens + held),
                                min(room, share_of_budget) - held)
        outcome = yield from run(rest, inner)
        left = context.available - context.counter.count_messages(outcome.messages)
        room = max(0, min(room, left))
    if outcome.messages is rest:
        return PolicyOutcome(messages=messages, method=outcome.method, notes=outcome.notes,
                             details=outcome.details)
    targets = outcome.targets if not previous else tuple(
        replace(t, index=positions[t.index] if 0 <= t.index < len(positions) else t.index)
        for t in outcome.targets)
    out = list(outcome.messages)
    targets = with_handles(messages, out, targets, context.counter)
    new = _new_entries(messages, targets, ledger)
    entries = _merged(previous, new, out)
    # A ledger that leaves room for the rolling passes after it sheds more than the others:
    # what this pass just took out goes last, or it would be the first to go.
    fresh = {e.key for e in new} if share < 1 else frozenset()
    message, shed = _fit(entries, room, context, ledger, fresh=fresh)
    if message is not None:
        out = _insert(out, message)
    details = {**outcome.details,
               "ledger": {"entries": len(entries) - shed, "shed": shed, "room": room}}
    return PolicyOutcome(messages=out, method=outcome.method, targets=targets,
                         notes=outcome.notes, details=details)


def _target_lowered(context: CompactionContext, tokens: int) -> CompactionContext:
    """``context`` with its budget's target ``tokens`` lower (unchanged when that leaves
    no target): the trigger and the hard budget stay."""
    budget = context.budget
    lowered = budget.target_tokens - tokens
    if tokens <= 0 or lowered <= 0:
        return context
    return replace(context, budget=replace(budget, target=lowered / budget.input_budget))


def _run_rolling(
    run: Callable[[Sequence[Message], CompactionContext], PolicyRun],
    messages: Sequence[Message], context: CompactionContext, ledger: Ledger, frozen: int,
) -> PolicyRun:
    """`run_with_ledger` for a rolling pass: the ledgers before ``frozen`` stay."""
    outcome: PolicyOutcome = yield from run(messages, context)
    if outcome.messages is messages:
        return outcome
    previous = [m for m in messages[:frozen] if is_ledger(m)]
    out = list(outcome.messages)
    targets = with_handles(messages, out, outcome.targets, context.counter)
    known = {e.key for m in previous for e in _held_entries(m) or ()}
    entries = [e for e in _merged((), _new_entries(messages, targets, ledger), out)
               if e.key not in known]
    count = context.counter.count_message
    held = sum(map(count, previous))
    left = context.available - context.counter.count_messages(out)
    room = max(0, min(ledger.room(context) - held, left))
    message, shed = _fit(entries, room, context, ledger)
    if message is not None:
        present = {id(m) for m in messages}
        out = _insert(out, message, after=[i for i, m in enumerate(out) if id(m) not in present])
    details = {**outcome.details, "ledger": {"entries": len(entries) - shed, "shed": shed,
                                             "room": room, "earlier_ledgers": len(previous)}}
    return PolicyOutcome(messages=out, method=outcome.method, targets=targets,
                         notes=outcome.notes, details=details)


def _new_entries(
    messages: Sequence[Message], targets: Sequence[Target], ledger: Ledger
) -> list[_Entry]:
    """One entry per item the policy removed or cut, in the order of the conversation."""
    handles = {t.index: t.handle for t in targets if t.handle and 0 <= t.index < len(messages)}
    results = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "tool"}
    out: list[_Entry] = []
    for i in sorted(handles):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                j = results.get(call.id)
                found = leading_identifiers(messages[j], ledger.identifiers) \
                    if j is not None else ()
                text = Line(_call_line, call.name, call.arguments, found, ledger)
                out.append(_Entry(f"call:{call.name}:{call.arguments}", text,
                                  handles.get(j, handles[i]) if j is not None else handles[i],
                                  values=found))
        elif m.role == "tool":
            call_index = next((k for k in range(i - 1, -1, -1)
                               if any(c.id == m.tool_call_id for c in messages[k].tool_calls)),
                              None)
            if call_index is not None and call_index in handles:
                continue  # recorded with its call
            found = leading_identifiers(m, ledger.identifiers)
            out.append(_Entry(f"result:{m.tool_call_id}:{m.fingerprint}",
                              Line(_result_line, m, found), handles[i],
                              values=found))
        elif m.role == "user" and m.source not in ("nudge", "summary", LEDGER_SOURCE):
            out.append(_Entry(f"user:{m.fingerprint}",
                              Line(_user_line, m.text, ledger.chars), handles[i]))
        elif m.role == "assistant":
            for sentence in _decisions(m.text, ledger.chars):
                out.append(_Entry(f"decision:{sentence}", "decided: " + sentence, handles[i]))
    return out


def _merged(previous: Sequence[Message], new: Sequence[_Entry],
            kept: Sequence[Message]) -> list[_Entry]:
    """The previous ledger's entries (their uses updated) followed by the new ones, once.
    An entry is used when one of its identifiers is in view again."""
    in_view = {value for m in kept if m.source != LEDGER_SOURCE for value in identifiers_of(m)}
    entries: dict[str, _Entry] = {}
    for message in previous:
        for entry in _held_entries(message) or ():
            entries[entry.key] = entry
    for entry in new:
        entries.setdefault(entry.key, entry)
    return [replace(e, uses=e.uses + 1) if in_view.intersection(e.values) else e
            for e in entries.values()]


def _fit(
    entries: list[_Entry], room: int, context: CompactionContext, ledger: Ledger,
    fresh: AbstractSet[str] = frozenset(),
) -> tuple[Message | None, int]:
    """The ledger message within ``room``, shedding the least used entries (the oldest
    first among equals; what this pass just took out, ``fresh``, after every earlier entry:
    it has had no chance to be used yet, and is what the next steps most likely need);
    ``None`` when there is nothing to record or no room at all. Lines are counted once
    each, from the last to be shed, only until they fill the room (the first entries shed
    are the ones whose lines did not fit beside those); the message is counted once it
    should fit."""
    if not entries or room <= 0:
        return None, 0
    count = context.counter.count_text
    frame = context.counter.count_message(_message([], 1))
    order = sorted(range(len(entries)),
                   key=lambda k: (entries[k].key in fresh, entries[k].uses, k))
    total, shed = frame, len(entries)
    while shed:
        size = count(entries[order[shed - 1]].line()) + 1
        if total + size > room:
            break
        total, shed = total + size, shed - 1
    while shed < len(entries):
        dropped = set(order[:shed])
        message = _message([e for k, e in enumerate(entries) if k not in dropped], shed)
        if context.counter.count_message(message) <= room:
            return message, shed
        shed += 1  # the per-line estimate was a little short
    return None, shed


def _message(entries: Sequence[_Entry], shed: int) -> Message:
    lines = [LEDGER_HEADER, *(e.line() for e in entries)]
    if shed:
        lines.append(f"[{shed} older entries shed; the full history still holds them]")
    return Message(role="user", content="\n".join(lines), source=LEDGER_SOURCE,
                   metadata={LEDGER_META: {"entries": [e.as_dict() for e in entries],
                                     "shed": shed}})


def _insert(out: list[Message], ledger: Message, after: Sequence[int] | None = None
            ) -> list[Message]:
    """``out`` with the ledger beside the summaries the policy wrote: just before a summary
    that closes the sequence (so the summary and its continuation nudge stay last), else
    right after the last summary (history summaries, then the ledger, then what was kept);
    without a summary, just before the newest group. Never inside a tool group.

    ``after`` (positions of what this pass wrote, for a rolling pass) limits the summaries
    to those, and a pass that wrote none puts the ledger after the last thing it wrote."""
    if after is not None:
        summaries = [i for i in after if out[i].source == "summary"]
        if not summaries and after:
            at = max(after) + 1
            while at < len(out) and out[at].role == "tool":
                at += 1
            return [*out[:at], ledger, *out[at:]]
    else:
        summaries = [i for i, m in enumerate(out) if m.source == "summary"]
    if summaries:
        last = summaries[-1]
        closing = all(m.role == "user" for m in out[last:])
        at = last if closing else last + 1
    else:
        groups = split_groups(out, leading_system_count(out))
        at = groups[-1].start if groups else len(out)
    return [*out[:at], ledger, *out[at:]]


def _call_line(name: str, arguments: str, found: Sequence[str], ledger: Ledger) -> str:
    text = _call_text(name, arguments, ledger)
    return f"{text} -> {', '.join(found)}" if found else text


def _result_line(m: Message, found: Sequence[str]) -> str:
    status = "error: " if m.is_error else ""
    return f"{m.name or 'tool'} result: {status}" + (", ".join(found) if found
                                                      else _short(m.text, 60))


def _user_line(text: str, chars: int) -> str:
    return "user: " + _short(text, chars)


def _call_text(name: str, arguments: str, ledger: Ledger) -> str:
    """``name(arguments)``; arguments too long for a line give their identifiers instead
    (the ids, names and dates a call acted on are what a later step needs again)."""
    short = _short(arguments, 80)
    if not short.endswith("\u2026"):
        return f"{name}({short})"
    values = list(dict.fromkeys([*field_values(arguments), *extract_identifiers(arguments)]))
    if not values:
        return f"{name}({short})"
    kept = values[: ledger.identifiers * 2]
    more = ", \u2026" if len(values) > len(kept) else ""
    return f"{name}({', '.join(kept)}{more})"


def _decisions(text: str, limit: int) -> list[str]:
    lowered = text.lower()
    if not any(word in lowered for word in _DECISION_WORDS):
        return []
    found = []
    for sentence in text.replace("\n", " ").split(". "):
        if any(word in sentence.lower() for word in _DECISION_WORDS):
            found.append(_short(sentence.strip().rstrip("."), limit))
    return found[:3]


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    with contextlib.suppress(ValueError, RecursionError):  # compact JSON before cutting it
        line = json.dumps(json.loads(line), separators=(",", ":"))
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"
