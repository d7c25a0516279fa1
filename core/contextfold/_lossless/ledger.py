"""The compaction ledger: a compact, deterministic record of what compaction took out of view.

Summaries lose the artifact trail first (which tools ran with which arguments, which ids,
codes, paths and amounts came back, what the user corrected). The ledger keeps it without an
LLM: an index of the identifiers of everything compacted, one line per removed or cut
item with the handle of its original, in one user message that every later compaction
merges into, never re-summarizes::

    [Compaction ledger: what was taken out of view; read_original(handle) returns the full text]
    - [ctx_1a2b3c4d5e6f] read_document({"number": 5}) -> REF-7Q2K-0005; 2026-03-01; parse_header
    - [ctx_0f9e8d7c6b5a] user: Use the corporate card ending in 9725, not the personal one. -> 9725
    - [ctx_9a8b7c6d5e4f] decided: We will ship the order on Monday.

A line lists every identifier of its item (values and names, `_identifiers`)
most salient first, each once across the ledger and none that is still in view. The room
adapts to what the compacted part holds: at least `Ledger.share` of the budget, up to
`Ledger.max_share` of the target when the span is dense with identifiers; the policy it
wraps compacts into the rest. When the lines outgrow the room, the least salient
identifiers go first, then whole entries, the least used first (an entry is used when its
identifiers appear again in what stays in view); a line says how many, and the originals
behind the handles still hold them.

`run_with_ledger` wraps any policy's run: it takes the previous ledger out of the
input, runs the policy with the ledger's room reserved, records what the policy removed or
cut, and puts the merged ledger back just before the newest group.
"""

from __future__ import annotations

import contextlib
import json
import re
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
from .._identifiers.salience import identifiers_and_names, salience, written_in_each_call
from .._identifiers.values import extract_identifiers, field_values
from .._messages.model import Message
from .._messages.prompt_kinds import LEDGER_SOURCE
from .._messages.structure import leading_system_count, split_groups
from .._summaries.sections import Line
from ..errors import BudgetExceededError
from .handles import with_handles
from .ledger_payload import LEDGER_META, is_ledger, payload_entries

__all__ = [
    "LEDGER_HEADER",
    "Ledger",
    "identifiers_to_compact",
    "ledger_beside",
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
        share: the ledger's least share of the input budget (the policy compacts into the
            rest).
        max_share: the most its room grows to, as a share of the target, when what is
            compacted is dense with identifiers.
        min_tokens: the least room it gets on small budgets (when the budget allows).
        identifiers: the most identifiers recorded per entry.
        chars: the most characters of text recorded per entry (requests, decisions).
    """

    share: Annotated[float, Gt(0), Le(0.5)] = 0.05
    max_share: Annotated[float, Gt(0), Le(0.5)] = 0.25
    min_tokens: Annotated[int, Ge(0)] = 128
    identifiers: Annotated[int, Ge(1)] = 200
    chars: Annotated[int, Ge(20)] = 160

    def __post_init__(self) -> None:
        check_fields(self)

    def room(self, context: CompactionContext, wanted: int = 0, *, floor: bool = True) -> int:
        """Tokens reserved for the ledger under ``context``'s budget: its share, grown to
        ``wanted`` (what the identifiers to record take) up to ``max_share`` of the target;
        ``floor`` applies ``min_tokens``."""
        budget = context.budget.input_budget
        base = int(budget * self.share)
        grown = min(max(base, wanted), max(base, int(context.budget.target_tokens
                                                     * self.max_share)))
        if floor:
            grown = max(grown, self.min_tokens)
        return min(grown, budget // 4)


@dataclass(frozen=True, slots=True)
class _Entry:
    key: str
    text: str | Line  # a new entry's is made when read: most are shed unread
    handle: str | None
    uses: int = 0
    values: tuple[str, ...] = ()  # the identifiers it records

    def what(self) -> str:
        """What the entry records, in short: a call's tool name, "user" for a request (its
        identifiers say more per token than its words), a decision's sentence."""
        kind, _, rest = self.key.partition(":")
        if kind == "call":
            return rest.partition(":")[0]
        return "user" if kind == "user" else str(self.text)

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
    aim: float = 1.0,
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
    rolling passes that follow it). ``aim`` is the part of that room a policy that compacts
    to its target aims below it by: the ledger grows past it only into what the policy
    left under the target (the room is an estimate that errs large; aiming below by all of
    it leaves a policy short of its target when the ledger needs less).
    """
    if frozen:
        return (yield from _run_rolling(run, messages, context, ledger, frozen))
    positions = [i for i, m in enumerate(messages) if not is_ledger(m)]
    previous = [m for m in messages if is_ledger(m)]
    rest = [messages[i] for i in positions] if previous else messages
    wanted = _wanted(rest, context)
    room = int(ledger.room(context, wanted) * share)
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
        share_of_budget = int(ledger.room(context, wanted, floor=False) * share)
        inner = _target_lowered(replace(context, fixed_tokens=context.fixed_tokens + held),
                                int(min(room, share_of_budget) * aim) - held)
        outcome = yield from run(rest, inner)
        used = context.counter.count_messages(outcome.messages)
        left = context.available - used
        # Past its share, the ledger grows only under the target: it never takes an
        # output over the target that its share alone would have left under it.
        under_target = context.budget.target_tokens - context.fixed_tokens - used
        room = max(0, min(room, left, max(int(ledger.room(context) * share), under_target)))
    if outcome.messages is rest:
        return PolicyOutcome(messages=messages, method=outcome.method, notes=outcome.notes,
                             details=outcome.details)
    targets = outcome.targets if not previous else tuple(
        replace(t, index=positions[t.index] if 0 <= t.index < len(positions) else t.index)
        for t in outcome.targets)
    out = list(outcome.messages)
    targets = with_handles(messages, out, targets, context.counter)
    new = _new_entries(messages, targets, ledger)
    entries, in_view = _merged(previous, new, out)
    # A ledger that leaves room for the rolling passes after it sheds more than the others:
    # what this pass just took out goes last, or it would be the first to go.
    fresh = {e.key for e in new} if share < 1 else frozenset()
    fitted = _fit(entries, room, context, ledger, _Ranks(messages, in_view), fresh=fresh)
    if fitted.message is not None:
        out = _insert(out, fitted.message)
    details = {**outcome.details, "ledger": fitted.figures(len(entries), room)}
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
    merged, in_view = _merged((), _new_entries(messages, targets, ledger), out)
    entries = [e for e in merged if e.key not in known]
    count = context.counter.count_message
    held = sum(map(count, previous))
    left = context.available - context.counter.count_messages(out)
    # The earlier ledgers keep what they hold: this pass's room grows with what it must
    # record, never below what the earlier ones left of the ledger's room.
    room = max(0, min(ledger.room(context, held + _wanted(messages, context)) - held, left))
    shown = {v for m in previous for e in _held_entries(m) or () for v in e.values}
    fitted = _fit(entries, room, context, ledger, _Ranks(messages, in_view | shown))
    if fitted.message is not None:
        present = {id(m) for m in messages}
        out = _insert(out, fitted.message,
                      after=[i for i, m in enumerate(out) if id(m) not in present])
    details = {**outcome.details, "ledger": {**fitted.figures(len(entries), room),
                                             "earlier_ledgers": len(previous)}}
    return PolicyOutcome(messages=out, method=outcome.method, targets=targets,
                         notes=outcome.notes, details=details)


def ledger_beside(
    messages: Sequence[Message], targets: Sequence[Target], out: list[Message],
    context: CompactionContext, ledger: Ledger, *, after: int | None = None,
    previous: Sequence[Message] = (),
) -> tuple[list[Message], dict[str, Any]]:
    """``out`` with a ledger of what ``targets`` took out of ``messages`` (merged with the
    ``previous`` ledgers), for a pass that compacts by other means than a policy run (a
    provider's own compaction): right after ``out[after]`` and its tool results, or else
    just before the newest group; and the ledger's figures for the report."""
    entries, in_view = _merged(previous, _new_entries(messages, targets, ledger), out)
    room = max(0, min(ledger.room(context, _wanted(messages, context)),
                      context.available - context.counter.count_messages(out)))
    fitted = _fit(entries, room, context, ledger, _Ranks(messages, in_view))
    if fitted.message is not None:
        out = _insert(out, fitted.message, after=None if after is None else [after])
    return out, {"ledger": fitted.figures(len(entries), room)}


def identifiers_to_compact(messages: Sequence[Message], context: CompactionContext
                           ) -> tuple[list[str], int] | None:
    """What a ledger of ``messages`` would list: the distinct identifiers of the messages
    older than the newest ones that fill the target (those a policy compacts first), less
    those the newer ones still show; and how many messages hold them (a line each).
    ``None`` when the newest messages alone fill the target. Only those newer messages are
    counted (a long history's older part is scanned, never counted), and the older part
    only as far as the largest room."""
    count = context.counter.count_message
    target = context.budget.target_tokens
    start = leading_system_count(messages)
    end, kept = len(messages), sum(count(m) for m in messages[:start])
    while end > start and kept < target:
        end -= 1
        kept += count(messages[end])
    if end <= start:
        return None
    later = {v for m in messages[end:] for v in identifiers_and_names(m)}
    most = 4 * max(target, 1)  # characters: beyond them, the room is at its largest
    values: dict[str, None] = {}
    chars = lines = 0
    for m in messages[start:end]:
        if chars > most:
            break
        if is_ledger(m):
            continue
        lines += 1
        for v in identifiers_and_names(m):
            if v not in later and v not in values:
                values[v] = None
                chars += len(v) + 2
    return list(values), lines


def _wanted(messages: Sequence[Message], context: CompactionContext) -> int:
    """About the tokens a ledger of what compaction will take out of ``messages`` needs:
    its identifiers (`identifiers_to_compact`) and a handle per message."""
    values, lines = identifiers_to_compact(messages, context) or ([], 0)
    if not values:
        return 0
    # Generous: a room a little large costs the policy a few messages, one too small
    # costs identifiers the summary then holds less densely (measured on tau-bench-style
    # runs at a quarter of the tokens: a tight estimate kept a third fewer in view).
    return 2 * context.counter.count_text("; ".join(values)) + 14 * lines


def _new_entries(
    messages: Sequence[Message], targets: Sequence[Target], ledger: Ledger
) -> list[_Entry]:
    """One entry per item the policy removed or cut, in the order of the conversation,
    with every identifier it holds (a call with those of its result)."""
    handles = {t.index: t.handle for t in targets if t.handle and 0 <= t.index < len(messages)}
    results = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "tool"}
    calls = _calls_before(messages, handles.keys())
    cap = ledger.identifiers
    out: list[_Entry] = []
    for i in sorted(handles):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            for call, written in zip(m.tool_calls, written_in_each_call(m), strict=True):
                j = results.get(call.id)
                found = identifiers_and_names(messages[j]) if j is not None else ()
                values = tuple(dict.fromkeys((*written, *found)))[:cap]
                text = Line(_call_text, call.name, call.arguments, ledger)
                out.append(_Entry(f"call:{call.name}:{call.arguments}", text,
                                  handles.get(j, handles[i]) if j is not None else handles[i],
                                  values=values))
            if m.text.strip():
                out.extend(_said(m, handles[i], ledger))
        elif m.role == "tool":
            call_index = calls.get(i)
            if call_index is not None and call_index in handles:
                continue  # recorded with its call
            found = identifiers_and_names(m)[:cap]
            out.append(_Entry(f"result:{m.tool_call_id}:{m.fingerprint}",
                              Line(_result_line, m), handles[i], values=found))
        elif m.role == "user" and m.source not in ("nudge", "summary", LEDGER_SOURCE):
            out.append(_Entry(f"user:{m.fingerprint}",
                              Line(_user_line, m.text, ledger.chars), handles[i],
                              values=identifiers_and_names(m)[:cap]))
        elif m.role == "assistant":
            out.extend(_said(m, handles[i], ledger))
    return out


def _calls_before(messages: Sequence[Message], wanted: AbstractSet[int]) -> dict[int, int]:
    """For each tool result at a ``wanted`` index, the index of the nearest earlier message
    that made its call (none when no earlier message did), in one pass."""
    last: dict[str | None, int] = {}
    found: dict[int, int] = {}
    for i, m in enumerate(messages):
        if i in wanted and m.role == "tool" and m.tool_call_id in last:
            found[i] = last[m.tool_call_id]
        for call in m.tool_calls:
            last[call.id] = i
    return found


def _said(m: Message, handle: str, ledger: Ledger) -> list[_Entry]:
    """The entries of an assistant's text: its decisions, or else what it named."""
    values = identifiers_and_names(replace(m, tool_calls=()))[:ledger.identifiers]
    decisions = _decisions(m.text, ledger.chars)
    if not decisions:
        return [_Entry(f"said:{m.fingerprint}", "assistant", handle, values=values)] \
            if values else []
    return [_Entry(f"decision:{sentence}", "decided: " + sentence, handle,
                   values=values if k == 0 else ())
            for k, sentence in enumerate(decisions)]


def _merged(previous: Sequence[Message], new: Sequence[_Entry],
            kept: Sequence[Message]) -> tuple[list[_Entry], set[str]]:
    """The previous ledger's entries (their uses updated) followed by the new ones, once,
    and the identifiers still in view. An entry is used when one of its identifiers is in
    view again."""
    in_view = {value for m in kept if m.source != LEDGER_SOURCE
               for value in identifiers_and_names(m)}
    entries: dict[str, _Entry] = {}
    for message in previous:
        for entry in _held_entries(message) or ():
            entries[entry.key] = entry
    for entry in new:
        entries.setdefault(entry.key, entry)
    return [replace(e, uses=e.uses + 1) if in_view.intersection(e.values) else e
            for e in entries.values()], in_view


class _Ranks:
    """What the lines show: each identifier once, none still in view (or in an earlier
    ledger), the most salient first; and the order in which they are shed."""

    def __init__(self, messages: Sequence[Message], hidden: AbstractSet[str]) -> None:
        self._messages = messages
        self.hidden = hidden
        self._scores: dict[str, float] | None = None
        self._scored_only: AbstractSet[str] | None = None  # what ``_scores`` covers

    def score(self, value: str) -> float:
        # A value `shown` scored already scores the same among all (`salience`'s ``only``):
        # the lines' identifiers are ranked without a second pass over the history.
        covered = self._scored_only
        if self._scores is not None and covered is not None and value in covered:
            return self._scores.get(value, 0.0)
        return self._scored(None).get(value, 0.0)

    def _scored(self, only: AbstractSet[str] | None) -> dict[str, float]:
        """The salience of ``only`` (of every identifier when ``None``), scored once."""
        covered = self._scored_only
        if self._scores is None or (covered is not None
                                    and (only is None or not only <= covered)):
            self._scores = salience((m for m in self._messages if not is_ledger(m)), only)
            self._scored_only = only
        return self._scores

    def shown(self, entries: Sequence[_Entry]) -> list[list[str]]:
        seen = set(self.hidden)
        picked = []
        for entry in entries:
            values = [v for v in dict.fromkeys(entry.values) if v not in seen]
            seen.update(values)
            picked.append(values)
        # Only what the lines show is ever scored: the rest of the history's identifiers
        # count where these appear, never for themselves.
        get = self._scored({v for values in picked for v in values}).get
        return [sorted(values, key=lambda v: get(v, 0.0), reverse=True) for values in picked]


@dataclass(frozen=True, slots=True)
class _Fitted:
    message: Message | None
    shed: int = 0  # entries
    left_out: int = 0  # identifiers of the entries kept

    def figures(self, entries: int, room: int) -> dict[str, int]:
        return {"entries": entries - self.shed, "shed": self.shed,
                "identifiers_shed": self.left_out, "room": room}


def _fit(
    entries: list[_Entry], room: int, context: CompactionContext, ledger: Ledger,
    ranks: _Ranks, fresh: AbstractSet[str] = frozenset(),
) -> _Fitted:
    """The ledger message within ``room``: every line with all its identifiers when they
    fit; else the least salient identifiers left out of the lines (as few as fit, found by
    halving); else, with none, the least used entries shed (the oldest first among equals;
    what this pass just took out, ``fresh``, after every earlier entry: it has had no
    chance to be used yet, and is what the next steps most likely need). ``None`` when
    there is nothing to record or no room at all."""
    if not entries or room <= 0:
        return _Fitted(None)
    shown = ranks.shown(entries)
    fits = context.counter.count_message
    searchable = context.store is not None
    # The entries are the same at every step of the search: their records and their
    # lines' grouping are made once.
    records = [e.as_dict() for e in entries]
    full = _message(entries, shown, 0, 0, records=records)
    if fits(full) <= room:
        return _Fitted(full)
    # Short of room, the identifiers outrank the words saying what each original was: the
    # lines keep their handles, tool names and identifiers only; then the tool names go
    # (a line's identifiers say more per token than its calls' names) and the least
    # salient identifiers, as few as fit.
    grouped = _grouped(entries, terse=True)
    terse = _message(entries, shown, 0, 0, terse=True, records=records, grouped=grouped)
    if fits(terse) <= room:
        return _Fitted(terse)
    nameless: list[tuple[str | None, dict[str, int], list[int]]] = [
        (handle, {}, members) for handle, _, members in grouped]
    by_salience = sorted(((ranks.score(v), -k, n) for k, values in enumerate(shown)
                          for n, v in enumerate(values)))
    bare = _message(entries, [[] for _ in entries], 0, len(by_salience), searchable,
                    terse=True, records=records, grouped=grouped)
    if fits(bare) <= room:
        low, high = 1, len(by_salience)  # the fewest left out that fit
        best, best_out = bare, len(by_salience)
        order = _ranked(shown, by_salience)
        bounds = [(min(ranks), max(ranks)) if ranks else (len(by_salience),) * 2
                  for ranks in order]
        while low <= high:
            middle = (low + high) // 2
            message = _message(entries, _without(shown, order, bounds, middle), 0, middle,
                               searchable, terse=True, records=records, grouped=nameless)
            if fits(message) <= room:
                best, best_out, high = message, middle, middle - 1
            else:
                low = middle + 1
        return _Fitted(best, 0, best_out)
    return _shed_entries(entries, room, context, fresh, len(by_salience))


def _ranked(shown: list[list[str]], by_salience: Sequence[tuple[float, int, int]]
            ) -> list[list[int]]:
    """Each shown identifier's place in ``by_salience`` ((score, -entry, position) each,
    the first to be left out first), in the shape of ``shown``."""
    order = [[0] * len(values) for values in shown]
    for rank, (_, negated, n) in enumerate(by_salience):
        order[-negated][n] = rank
    return order


def _without(shown: list[list[str]], order: list[list[int]],
             bounds: Sequence[tuple[int, int]], dropped: int) -> list[list[str]]:
    """``shown`` less its ``dropped`` least salient identifiers (``order``: `_ranked`;
    ``bounds``: each entry's lowest and highest place in it). Only an entry that keeps
    some of its identifiers and leaves out others is looked at one by one."""
    return [values if low >= dropped else [] if high < dropped
            else [v for v, rank in zip(values, ranks, strict=True) if rank >= dropped]
            for values, ranks, (low, high) in zip(shown, order, bounds, strict=True)]


def _shed_entries(entries: list[_Entry], room: int, context: CompactionContext,
                  fresh: AbstractSet[str], identifiers: int) -> _Fitted:
    """Entries without identifiers, the least used shed until they fit. Entries are
    counted once each (about what they add to their handle's line), from the last to be
    shed, only until they fill the room; the message is counted once it should fit."""
    count = context.counter.count_text
    searchable = context.store is not None
    frame = context.counter.count_message(_message([], [], 1, identifiers, searchable))
    order = sorted(range(len(entries)),
                   key=lambda k: (entries[k].key in fresh, entries[k].uses, k))
    total, shed = frame, len(entries)
    while shed:
        size = count(entries[order[shed - 1]].what()) + 2
        if total + size > room:
            break
        total, shed = total + size, shed - 1
    while shed < len(entries):
        dropped = set(order[:shed])
        kept = [e for k, e in enumerate(entries) if k not in dropped]
        message = _message(kept, [[] for _ in kept], shed, identifiers, searchable)
        if context.counter.count_message(message) <= room:
            return _Fitted(message, shed, identifiers)
        shed += 1  # the per-line estimate was a little short
    return _Fitted(None, shed, identifiers)


def _grouped(entries: Sequence[_Entry], *, terse: bool = False
             ) -> list[tuple[str | None, dict[str, int], list[int]]]:
    """The ledger's lines before their identifiers: one per handle (an entry without one
    has its own), with what its originals hold (`_named` when ``terse``) and the entries
    whose identifiers it lists, in the order of the conversation."""
    groups: dict[str | int, tuple[str | None, dict[str, int], list[int]]] = {}
    for k, entry in enumerate(entries):
        _, whats, members = groups.setdefault(entry.handle or k, (entry.handle, {}, []))
        what = entry.what()
        whats[what] = whats.get(what, 0) + 1
        members.append(k)
    return [(handle, _named(whats) if terse else whats, members)
            for handle, whats, members in groups.values()]


def _message(entries: Sequence[_Entry], shown: Sequence[Sequence[str]], shed: int,
             left_out: int, searchable: bool = False, *, terse: bool = False,
             records: list[dict[str, Any]] | None = None,
             grouped: list[tuple[str | None, dict[str, int], list[int]]] | None = None,
             ) -> Message:
    """The ledger message: one line per handle (what its original holds, in short, unless
    ``terse``, and the identifiers shown for it), in the order of the conversation; a line
    with nothing to say (no handle, no names, no identifiers) is left out.
    ``records``: the entries' `_Entry.as_dict`; ``grouped``: their `_grouped` (with the
    same ``terse``, or without what they hold), when already made."""
    if len(shown) != len(entries):
        raise ValueError("one list of shown identifiers per entry")
    if grouped is None:
        grouped = _grouped(entries, terse=terse)
    lines = [LEDGER_HEADER, *(line for handle, whats, members in grouped
                              if (line := _line(handle, whats,
                                                [v for k in members for v in shown[k]])) != "-")]
    # With a store, the search tools (search_messages) find what is left out by its text.
    # (Few words: on a tight budget this line costs what listed identifiers need.)
    found = "; search_messages finds them" if searchable else ""
    if left_out and not shed:
        lines.append(f"[{left_out} less salient identifiers left out; their originals "
                     f"hold them{found}]")
    if shed:
        lines.append(f"[{shed} older entries shed; the full history holds them{found}]")
    return Message(role="user", content="\n".join(lines), source=LEDGER_SOURCE,
                   metadata={LEDGER_META: {"entries": records if records is not None
                                           else [e.as_dict() for e in entries],
                                           "shed": shed}})


def _named(whats: dict[str, int]) -> dict[str, int]:
    """The tool names among ``whats`` (a name is an identifier a later call may write
    again; "user", "assistant" and a decision's sentence are not), with their counts."""
    return {w: n for w, n in whats.items() if " " not in w and w not in ("user", "assistant")}


def _line(handle: str | None, whats: dict[str, int], listed: Sequence[str]) -> str:
    head = f"- [{handle}] " if handle else "- "
    what = "; ".join(w if n == 1 else f"{w} x{n}" for w, n in whats.items())
    values = _joined(listed)
    return (head + what + (f"-> {values}" if not what and listed
                           else f" -> {values}" if listed else "")).rstrip()


_SPACE = re.compile(r"\s")


def _joined(values: Sequence[str]) -> str:
    """``values`` as one list: words apart by a space (a separator of its own costs a
    token per value), then each phrase after a semicolon."""
    phrases = [v for v in values if _SPACE.search(v)]
    if not phrases:
        return " ".join(values)
    spaced = set(phrases)
    words = " ".join(v for v in values if v not in spaced)
    return "; ".join([words, *phrases] if words else phrases)


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


def _result_line(m: Message) -> str:
    status = "error: " if m.is_error else ""
    return f"{m.name or 'tool'} result: {status}" + _short(m.text, 60)


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
    kept = values[:12]
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
