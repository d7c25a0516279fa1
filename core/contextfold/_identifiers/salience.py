"""How likely a run is to need an identifier again, from where and how often it was written.

What a run writes into a tool call's arguments it acted on (the reservation it changed,
the file it edited); what the user wrote is what the task is about; what comes back in
tool results is mostly context, of which the part the run repeats matters. So an
identifier scores by the most telling place it was written (tool-call arguments above the
user, above the assistant's text, above tool results, above the system prompt; in a tool
result's JSON record, a value its field says identifies something, ``reservation_id`` or a
code in a list, a step above the record's other values: a zip code, a timestamp), plus a
little for each further message that repeats it, minus when it is everywhere (the same
reminder in every turn is boilerplate, not a reference), and minus for plain words
(``"gold"``, ``"New York"``: a run can say them again in other words, not a code)::

    >>> ranks = salience([Message("user", "Refund order 83920"),
    ...                   Message("tool", "order 83920 item 55012", tool_call_id="c")])
    >>> ranks["83920"] > ranks["55012"]
    True

Position plays no part: the oldest identifier the user gave outranks the newest a log
printed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from .._messages.model import Message
from .names import argument_values, call_argument_values, names_in, names_of, plain_word
from .values import (
    call_field_values,
    extract_identifiers,
    field_values,
    identifiers_of,
    record_field_set,
)

__all__ = ["identifiers_and_names", "salience", "written_in", "written_in_calls",
           "written_in_each_call"]

_FIELD = 0.5
"""Added to a tool result's value when its record's field says it identifies something
(``reservation_id``, ``origin``) or it is a code in a list, over its other values (a zip
code, a timestamp)."""
_PLACE = {"call": 4.0, "user": 3.0, "assistant": 2.0, "tool": 1.0, "system": 0.5}
"""The score of an identifier by the most telling place it was written."""


def identifiers_and_names(message: Message) -> tuple[str, ...]:
    """Every identifier of ``message``: its reference values, then its names."""
    return message.derived(
        "identifiers_and_names",
        lambda m: tuple(dict.fromkeys((*identifiers_of(m), *names_of(m)))))


def written_in_calls(message: Message) -> tuple[str, ...]:
    """What ``message`` wrote into its tool calls' arguments (computed once)."""
    return message.derived("written_in_calls", lambda m: tuple(dict.fromkeys(
        v for written in written_in_each_call(m) for v in written)))


def written_in_each_call(message: Message) -> tuple[tuple[str, ...], ...]:
    """`written_in` of each of ``message``'s tool calls, in order (computed once)."""
    return message.derived("written_in_each_call", lambda m: tuple(
        _written(call.arguments, values, fields) for call, values, fields
        in zip(m.tool_calls, call_argument_values(m), call_field_values(m), strict=True)))


def written_in(arguments: str) -> tuple[str, ...]:
    """What one tool call's ``arguments`` hold: its values, identifiers and names."""
    return _written(arguments, argument_values(arguments), field_values(arguments))


def _written(arguments: str, values: Sequence[str], fields: Sequence[str]
             ) -> tuple[str, ...]:
    """`written_in` with the arguments' values and field values already read."""
    return tuple(dict.fromkeys((*values, *fields, *extract_identifiers(arguments),
                                *names_in(arguments))))


def salience(messages: Sequence[Message] | Iterable[Message],
             only: AbstractSet[str] | None = None) -> dict[str, float]:
    """A score for every identifier of ``messages``: higher is more likely needed again.
    ``only``: score these alone (each scores as it would among all)."""
    place: dict[str, float] = {}
    seen_in: dict[str, int] = {}
    total = 0
    # (The loop runs once per identifier of a long history: its lookups are bound once.)
    seen, placed, call = seen_in.get, place.get, _PLACE["call"]
    for m in messages:
        total += 1
        where = _PLACE.get(m.role, 1.0) if m.source != "ledger" else 0.0
        found = identifiers_and_names(m)
        fields = record_field_set(m) if m.role == "tool" else frozenset()
        for value in found if only is None else [v for v in found if v in only]:
            seen_in[value] = seen(value, 0) + 1
            here = where + _FIELD if value in fields else where
            if placed(value, -1.0) < here:
                place[value] = here
        if not m.tool_calls:
            continue  # nothing written into calls
        written = written_in_calls(m)
        for value in written if only is None else [v for v in written if v in only]:
            seen_in.setdefault(value, 1)
            place[value] = call
    everywhere = max(4, total // 3)
    scores = {}
    for value, best in place.items():
        count = seen_in[value]
        score = best + 0.5 * math.log2(1 + min(count - 1, 8))
        if count >= everywhere:
            score -= 2.0  # in most messages: boilerplate, not a reference
        if " " in value.strip() or all(plain_word(w) for w in value.split()):
            # words ("gold") and phrases ("New York", "May 24, 2024", "(404 + 202) * 3"):
            # said again in other words, unlike a code that must be copied
            score -= 1.0
        scores[value] = score
    return scores
