"""The names code and customer-service runs use, which the reference values miss.

A coding agent later writes ``ReviewTokenStore``, ``_trim_end``, ``cache.get_or_load`` or
``conftest.py``; a customer-service agent writes the card's last four digits (``9725``),
a quoted code (``"SDZQKO"``) or the value it passed to a tool (``"gold"``). None of these
holds a digit next to a letter, a slash or an "@", so `contextfold._identifiers.values` does not see
them::

    >>> names_in('def _trim_end(self): return ReviewTokenStore.open("gold", 9725)')
    ['_trim_end', 'ReviewTokenStore.open', 'ReviewTokenStore', 'gold', '9725']

Kinds, in the order tried at one position: dotted names (``os.path.join``, a file name
``conftest.py``), CamelCase names (``ReviewTokenStore``, ``getUser``), snake_case and
SCREAMING_CASE names (``_trim_end``, ``MAX_RETRIES``), numbers of four or more digits, times
of day (``07:00``) and quoted values (a JSON key is not one; three characters are enough
for a code, ``"PHL"``, that is not a plain word); then function and method names, from their
definitions and calls. Every repeat is bounded and runs of identifier characters too long
to be one are skipped (`.values.pieces`), so a scan is linear in the text.

A name written as a JSON object's key (``"user_id":``) is none of these: it names a field of
a tool's schema, which every call and result repeats and the model writes from the tool's
definition, not from memory. Kept, it outranked every value (written in a tool call), and
ledger lines filled with ``user_id; first_name; payment_methods``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from .._messages.model import Message
from .values import pieces, scanned_text

__all__ = ["argument_values", "call_argument_values", "names_in", "names_of", "plain_word"]

_WORD = r"[A-Za-z_][A-Za-z0-9_]{0,63}+"
_NAMES = re.compile(
    r"(?!(?<=\w)\w)(?:"
    # a dotted name, or a file name without its directory (not a sentence's end: the
    # part after the dot starts right after it)
    rf"(?P<dotted>\b{_WORD}(?:\.{_WORD}){{1,8}}\b(?!\.\w))"
    r"|(?P<camel>\b(?:[A-Z][a-z0-9]{1,32}+|[a-z][a-z0-9]{0,32}+)(?:[A-Z][a-z0-9]{0,32}+){1,12}\b)"
    r"|(?P<snake>\b_{0,2}[A-Za-z][A-Za-z0-9]{0,32}+(?:_[A-Za-z0-9]{1,32}+){1,12}\b)"
    # a number on its own (not a piece of "REF-AB01-0001", "1.5" or "12:30")
    r"|(?P<number>(?<![\w.,/:#$-])\d{4,64}+(?![\w/:-]|[.,]\d))"
    # a time of day on the 24-hour clock ("07:00", "21:30:05"), not a piece of a longer run
    r"|(?P<clock>(?<![\w.:-])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?![\w:]|[.,]\d))"
    # a quoted value; a quote inside a word is an apostrophe ("I'll", "you're"), no quote
    r"|(?P<quoted>(?<!\w)[\"'`](?P<value>[^\"'`\\\s:,{}\[\]()][^\"'`\\\n]{0,62}+)[\"'`]"
    r"(?!\w)(?![ \t]{0,8}+:))"
    r")"
)
# A definition or a call: ``def name(``, ``class Name``, ``function name``, ``name(``.
_DEFINITION = (r"\b(?:def|class|function|func|fn|async def)[ \t]{1,8}+"
               r"(?P<defined>[A-Za-z_]\w{0,63}+)")
_CALLED = re.compile(rf"{_DEFINITION}|\b(?P<called>[A-Za-z_]\w{{2,63}}+)\((?!\))")
# `_CALLED` where no "(" is, so no call can be: the same matches, without reading every
# word to the "(" that is not after it (a quarter of the names' scan of prose and JSON).
_DEFINED = re.compile(_DEFINITION)
# Words of code and prose that name nothing particular to a run.
_COMMON = frozenset([
    "self", "super", "print", "float", "bool", "list", "dict", "tuple", "range", "open",
    "return", "while", "with", "else", "elif", "except", "raise", "import", "from", "assert",
    "lambda", "yield", "none", "true", "false", "null", "undefined", "const", "async",
    "await", "function", "this", "string", "number", "object", "value", "data", "text",
])
_MIN = 4  # a shorter name ("id", "x.y") names too little to be worth keeping


def names_in(text: str) -> list[str]:
    """The names of ``text``, verbatim, each once, in order of first appearance (a dotted
    name before its parts, which follow it)."""
    seen: dict[str, None] = {}
    for start, end in pieces(text):
        for match in _NAMES.finditer(text, start, end):
            kind = match.lastgroup
            if kind != "quoted" and _is_key(text, match.start(), match.end()):
                continue  # a JSON key names a field of a schema, not something the run used
            value = match.group("value") if kind in ("quoted", "value") else match.group()
            if kind == "dotted":
                for part in (value, *value.split(".")):
                    _keep(seen, part)
                continue
            _keep(seen, value, short=kind in ("quoted", "clock"))
        called = _CALLED if text.find("(", start, end) >= 0 else _DEFINED
        for match in called.finditer(text, start, end):
            _keep(seen, match.group("defined") or match.group("called"))
    return list(seen)


def _is_key(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is quoted and followed by a colon: a JSON object's key."""
    if start == 0 or text[start - 1] != '"' or text[end:end + 1] != '"':
        return False
    after = text[end + 1:end + 9].lstrip(" \t")
    return after[:1] == ":"


def _keep(seen: dict[str, None], value: str, *, short: bool = False) -> None:
    """Keep ``value`` when it is long enough to name something; ``short``: a quoted value
    or a time of three or more characters that is not a plain word ("PHL", "v2", "9:30")."""
    value = value.strip()
    if value.lower() in _COMMON:
        return
    if len(value) >= _MIN or (short and len(value) >= 3 and not plain_word(value)):
        seen.setdefault(value, None)


def plain_word(value: str) -> bool:
    """Letters only, lowercase or with one leading capital: a word, not a code."""
    return value.isalpha() and (value.islower() or value[1:].islower())


def names_of(message: Message) -> tuple[str, ...]:
    """`names_in` of a message's text and tool-call arguments, with the values it
    passed to tools (computed once per message)."""
    return message.derived("names", _names_of)


def _names_of(message: Message) -> tuple[str, ...]:
    found = dict.fromkeys(names_in(scanned_text(message)))
    for values in call_argument_values(message):
        found.update(dict.fromkeys(values))
    return tuple(found)


def call_argument_values(message: Message) -> tuple[tuple[str, ...], ...]:
    """`argument_values` of each of ``message``'s tool calls, in order (computed once per
    message: its names and what its calls wrote both read them)."""
    return message.derived("call_argument_values", lambda m: tuple(
        tuple(argument_values(call.arguments)) for call in m.tool_calls))


def argument_values(arguments: str, limit: int = 64) -> list[str]:
    """The scalar values of a tool call's JSON arguments (strings and numbers of 2 to 64
    characters, numbers as written), in order; ``[]`` when the arguments are not JSON.
    These are what a run acted on and writes again: the reservation it changed, the file
    it opened."""
    if len(arguments) > 64_000 or arguments.lstrip()[:1] not in ("{", "["):
        return []
    try:
        data = json.loads(arguments)
    except (ValueError, RecursionError):
        return []
    return list(_scalars(data, limit))


def _scalars(data: object, limit: int) -> Iterator[str]:
    stack = [data]
    taken = 0
    while stack and taken < 200:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            value = item.strip()
            if 2 <= len(value) <= limit and "\n" not in value:
                taken += 1
                yield value
        elif isinstance(item, (int, float)) and not isinstance(item, bool) \
                and len(str(item)) >= 2:
            taken += 1
            yield str(item)
