"""Identifier extraction: the reference values a summary must never drop.

Ids, order and reference numbers, emails, URLs, dates and times, money amounts and file
paths, found verbatim and in order of first appearance. Shared by the extractive
summarizer (its DATA section), summary verification (what an LLM summary left out) and
the fidelity evaluation.

One compiled pattern, scanned once left to right, so extraction is linear in the text.
At any position the more specific kind wins (a URL before the path or id inside it)::

    >>> extract_identifiers("Order #KT-9284 for ana@example.com ships 2026-07-09, $1,204.50")
    ['#KT-9284', 'ana@example.com', '2026-07-09', '$1,204.50']
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

from .._messages.model import Message

__all__ = ["SCAN_CHARS", "appears_in", "appears_in_text", "extract_identifiers", "head_and_tail",
           "identifiers_of", "leading_identifiers", "message_identifiers", "pieces",
           "scanned_text"]

_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_CURRENCY_WORDS = r"(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|dollars?|euros?|pounds?)"

# Order matters: at one position the first alternative that matches is taken.
# Every repeat is bounded (a URL's tail aside: it starts only after "://" and never fails
# once started), so no attempt reads more than a few hundred characters past where it
# starts: with runs of identifier characters over _LONG_RUN long skipped (see _windows),
# a scan is linear in the text whatever it holds. Unbounded, one token of "a-" repeated
# and ending in "@" made the e-mail and id patterns read to its end from every "-"
# (quadratic: half an hour for 250 kB). The bounds are above anything these kinds hold:
# an e-mail's local part holds at most 64 characters, a domain label 63, a file name 255.
# A repeat is possessive ("++") where giving characters back can never let the rest match
# (what must follow is not of the repeated class): a failed attempt then fails at once.
_KINDS: tuple[tuple[str, str], ...] = (
    ("url", r"\b(?:https?|ftp|s3|file)://[^\s<>\"'`)\]}]+"),
    ("email", r"\b[\w.+-]{1,64}+@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,16}\b"),
    (
        "date",
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?)?\b"
        r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
        rf"|\b{_MONTHS}\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b"
        rf"|\b\d{{1,2}} {_MONTHS} \d{{4}}\b"
        r"|\b\d{1,2}:\d{2}(?::\d{2})? ?(?:[AaPp][Mm]\b|[ap]\.m\.)",
    ),
    (
        "amount",
        r"[$€£¥]\s?\d[\d,]{0,64}+(?:\.\d{1,64}+)?(?:\s?(?:[kKmM]|bn|million|billion)\b)?"
        rf"|\b\d[\d,]{{0,64}}+(?:\.\d{{1,64}}+)?\s?{_CURRENCY_WORDS}\b",
    ),
    (
        "path",
        r"(?<![\w/.:-])(?:[A-Za-z]:\\(?:[\w .-]{1,255}\\){0,64}[\w.-]{1,255}"
        r"|(?:~|\.{1,2})?/(?:[\w.@+-]{1,256}/){0,64}[\w.@+-]{1,256}"
        r"|(?:[\w.@+-]{1,256}/){1,64}[\w@+-]{1,256}\.[A-Za-z0-9]{1,8})(?![\w/])",
    ),
    (
        "ref",
        r"#[A-Za-z0-9][\w-]{0,128}\d[\w-]{0,128}|#\d{1,64}"
        r"|\b[A-Z]{1,6}-\d{2,64}(?:-[A-Z0-9]{1,64}){0,16}\b"
        r"|(?<=ending in )\d{3,64}\b",  # "the card ending in 9725"
    ),
    # Tokens that mix letters and digits (HAT001, 4WQ150, mia_li_3668, a UUID, a hash),
    # or digit runs of four or more (order and phone numbers, a card's last four, a price).
    (
        "id",
        r"\b(?=[\w-]{0,128}\d)(?=[\w-]{0,128}[A-Za-z])"
        r"[A-Za-z0-9][\w-]{3,126}[A-Za-z0-9]\b"
        r"|\b\d{4,64}\b",
    ),
)

_ALTERNATIVES = "|".join(f"(?P<{kind}>{rx})" for kind, rx in _KINDS)
# No kind can start between two word characters (each starts at a word boundary, after a
# character that is not a word's, or with a currency sign or "#"): a position inside a word
# fails on one test instead of on every alternative.
_PATTERN = re.compile(rf"(?!(?<=\w)\w)(?:{_ALTERNATIVES})")
_TRAILING = ".,;:!?"
# Tokens of the id kind that are words of the trade or numbered field names ("address1"),
# not references.
_NOISE = re.compile(
    r"(?i)^(?:utf-?8|utf-?16|sha-?\d+|md5|base64|x86_64|amd64|arm64|ipv[46]|http[s2]?|"
    r"mp[34]|h26[45]|gpt-[\w.-]+|o\d(?:-\w+)?|[a-z]+\d?d|[a-z]+_?\d)$"
)


# Every kind above holds at least one of these characters (a digit, a slash or backslash,
# "@", "#" or a currency sign), so text without them holds no identifier. The full
# pattern tries about twenty alternatives at every position (3-4 MB/s); a search for these
# characters skips to the next candidate at C speed (over 100 MB/s), so prose and logs with
# few identifiers scan ten times faster, and dense JSON no slower.
_KEY = r"\d/\\@#$€£¥"
# A token from its first key character, any tokens after it that hold one too, and the
# next token ("12:30 PM", "5 million"): one window per run of such tokens.
_KEY_RUN = re.compile(rf"[{_KEY}]\S*(?:\s+[^\s{_KEY}]*[{_KEY}]\S*)*(?:\s+\S+)?")
# How far before its token a match may start: a month name ("Sept. 5", "September 5").
_WORD_BEFORE = 11
_WHOLE_SCAN_BELOW = 64


def _token_start(text: str, near: int) -> int:
    """Where the token holding position ``near`` starts, for a token longer than the 64
    characters searched for a space: walked once, as such a token is one match."""
    while near and not text[near - 1].isspace():
        near -= 1
    return near


def _candidate_windows(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` that hold every match of the full pattern.

    Each key character's token, with the token after it ("12:30 PM", "5 million") and a
    month name before it, and from a drive letter (``C:\\``) to the end of its line (a
    Windows path's folder names may hold spaced words), overlapping windows merged.
    Scanning the windows with the full pattern finds exactly what a scan of the whole text
    finds.
    """
    return list(_windows(text))


# A run of identifier characters longer than this is no identifier (the longest kinds, a
# file name or a path's segment, hold 255) but a pasted blob, a minified bundle or a hostile
# token: it is skipped, as the patterns' bounds would only find pieces of it.
_LONG = 256
_LONG_RUN = re.compile(rf"(?<![\w.+@-])[\w.+@-]{{{_LONG + 1},}}")


def _windows(text: str) -> Iterator[tuple[int, int]]:
    """`_candidate_windows`, made as they are read, without the runs of identifier
    characters longer than ``_LONG`` (each read once, from its start)."""
    for start, end in _merged_windows(text):
        if end - start <= _LONG:
            yield start, end
            continue
        at = start
        for run in _LONG_RUN.finditer(text, start, end):
            if run.start() > at:
                yield at, run.start()
            at = run.end()
        if at < end:
            yield at, end


def pieces(text: str) -> Iterator[tuple[int, int]]:
    """The spans of ``text`` between its runs of identifier characters longer than
    ``_LONG`` (the whole text when it has none): what a linear scan for names reads."""
    at = 0
    if len(text) > _LONG:
        for run in _LONG_RUN.finditer(text):
            if run.start() > at:
                yield at, run.start()
            at = run.end()
    if at < len(text):
        yield at, len(text)


def _merged_windows(text: str) -> Iterator[tuple[int, int]]:
    """The windows of the key characters, merged: a window is given once the next one
    starts after it ends."""
    if len(text) < _WHOLE_SCAN_BELOW:
        yield 0, len(text)
        return
    drives = [(at, _line_end(text, at)) for at in _drive_starts(text)]
    if not drives:
        yield from _key_windows(text)
        return
    start = end = -1
    for a, b in heapq.merge(_key_windows(text), drives):
        if start >= 0 and a <= end:
            end = max(end, b)
            continue
        if start >= 0:
            yield start, end
        start, end = a, b
    if start >= 0:
        yield start, end


_DRIVE_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _drive_starts(text: str) -> list[int]:
    """Where ``[A-Za-z]:\\`` matches in ``text`` (as ``re.finditer`` finds it): each ``:\\``
    found by ``str.find``, which skips to it at C speed, with a letter before it. A search
    for the pattern itself starts a match at every letter, ten times slower on prose."""
    found = []
    find = text.find
    at = find(":\\", 1)
    while at > 0:
        if text[at - 1] in _DRIVE_LETTERS:
            found.append(at - 1)
        at = find(":\\", at + 1)
    return found


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def _key_windows(text: str) -> Iterator[tuple[int, int]]:
    """The windows of the key characters' tokens (see `_candidate_windows`)."""
    start = end = -1
    rfind = text.rfind
    for match in _KEY_RUN.finditer(text):
        key, key_end = match.span()
        if key and text[key - 1] in " \n":
            token = key  # the usual case: the key character starts its token
        else:
            near = key - 64 if key > 64 else 0
            token = max(rfind(" ", near, key), rfind("\n", near, key),
                        rfind("\t", near, key)) + 1
            if not token:
                token = _token_start(text, near)
        token = token - _WORD_BEFORE if token > _WORD_BEFORE else 0
        if token > end:
            if end >= 0:
                yield start, end
            start = token
        end = key_end
    if end >= 0:
        yield start, end


def extract_identifiers(text: str) -> list[str]:
    """Every identifier in ``text``, verbatim, deduplicated, in order of first appearance.

    Finds URLs, emails, dates and times, money amounts, file paths, reference numbers
    (``#KT-9284``, ``ABC-123``) and ids that mix letters and digits (``HAT001``,
    ``mia_li_3668``, UUIDs, hashes) or are long digit runs (``4155550123``).
    """
    return list(_distinct(text))


def _distinct(text: str) -> Iterator[str]:
    """[`extract_identifiers`][contextfold.policy.extract_identifiers], found as they are read (the
    text is scanned only as far as the values taken)."""
    seen: set[str] = set()
    scan = _PATTERN.finditer
    for start, end in _windows(text):
        for match in scan(text, start, end):
            value = match.group()
            kind = match.lastgroup
            if kind in ("url", "path"):
                value = value.rstrip(_TRAILING)
            if kind == "id" and _NOISE.match(value):
                continue
            if kind == "path" and "/" not in value.strip("/") and "\\" not in value:
                continue  # "/" alone or "/usr": a single segment is too vague to be a path
            if value and value not in seen:
                seen.add(value)
                yield value


def message_identifiers(messages: Sequence[Message] | Iterable[Message]) -> list[str]:
    """The identifiers of several messages (text and tool-call arguments), in order."""
    seen: dict[str, None] = {}
    for m in messages:
        for value in identifiers_of(m):
            seen.setdefault(value, None)
    return list(seen)


def identifiers_of(message: Message) -> tuple[str, ...]:
    """The identifiers of one message's text and tool-call arguments (computed once per
    message)."""
    return message.derived("identifiers", _identifiers_of)


def leading_identifiers(message: Message, k: int) -> tuple[str, ...]:
    """``identifiers_of(message)[:k]``, scanning the message only as far as its first ``k``
    identifiers when they are found before its end (a record's field values come after
    what the patterns find, so fewer found means the whole list is made)."""
    if message.has_derived("identifiers"):
        return identifiers_of(message)[:k]
    found = tuple(islice(_distinct(scanned_text(message)), k))
    return found if len(found) == k else identifiers_of(message)[:k]


def record_fields(message: Message) -> tuple[str, ...]:
    """`field_values` of ``message``'s text (computed once per message)."""
    return message.derived("field_values", lambda m: tuple(field_values(m.text)))


def record_field_set(message: Message) -> frozenset[str]:
    """`record_fields` as a set, for the salience pass's lookups (made once per message,
    not at every pass)."""
    return message.derived("field_value_set", lambda m: frozenset(record_fields(m)))


def _identifiers_of(message: Message) -> tuple[str, ...]:
    found = dict.fromkeys(extract_identifiers(scanned_text(message)))
    found.update(dict.fromkeys(record_fields(message)))
    for values in call_field_values(message):
        found.update(dict.fromkeys(values))
    return tuple(found)


def call_field_values(message: Message) -> tuple[tuple[str, ...], ...]:
    """`field_values` of each of ``message``'s tool calls' arguments, in order (computed
    once per message: the message's identifiers and what its calls wrote both read them)."""
    return message.derived("call_field_values", lambda m: tuple(
        tuple(field_values(call.arguments)) for call in m.tool_calls))


# Fields of a structured record whose string values identify something even when they look
# like plain words: a reservation code of letters ("SDZQKO"), a passenger's name, an airport.
_IDENTIFYING_FIELD = re.compile(
    r"(?:^|_)(?:id|ids|name|code|number|email|city|airport|origin|destination|type|cabin"
    r"|method|date|sku|ref|reference)$", re.IGNORECASE)
_FIELD_VALUES = 200  # at most this many values from one record
# A code as records hold them, whatever its field: 5 to 12 capitals and digits with a
# capital ("SDZQKO" in a list of reservations); shorter ones are words as often as codes.
_CODE = re.compile(r"(?=[0-9]*[A-Z])[A-Z0-9]{5,12}")
# A quick look for such a key before parsing: most records have none.
_IDENTIFYING_KEY = re.compile(
    r'"(?:[^"\\]*_)?(?:id|ids|name|code|number|email|city|airport|origin|destination|type'
    r'|cabin|method|date|sku|ref|reference)"\s*:', re.IGNORECASE)


def field_values(text: str) -> list[str]:
    """The string values of identifying fields (``reservation_id``, ``first_name``,
    ``origin``...) in ``text`` when it is a JSON record (a tool result, call arguments),
    in order; ``[]`` for any other text. These are what identifier patterns miss: codes and
    names made of letters only."""
    start = text.lstrip()[:1]
    if start not in ("{", "[") or len(text) > SCAN_CHARS or not _IDENTIFYING_KEY.search(text):
        return []
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return []
    out: list[str] = []
    stack: list[object] = [data]
    while stack and len(out) < _FIELD_VALUES:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if isinstance(value, str):
                    value = value.strip()
                    if 2 <= len(value) <= 64 and (_IDENTIFYING_FIELD.search(str(key))
                                                  or _CODE.fullmatch(value)):
                        out.append(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            for value in reversed(item):
                if isinstance(value, str):
                    if _CODE.fullmatch(value.strip()):
                        out.append(value.strip())
                else:
                    stack.append(value)
    return out


SCAN_CHARS = 256_000
"""Of a longer message only the first and last half of this many characters are scanned."""


def scanned_text(message: Message) -> str:
    """What scans of a message (for identifiers, references) read: its text and tool-call
    arguments, and of a huge one (a dumped log, a whole file) its head and tail only.

    A message that large is cut head+tail before a model sees it, and its original stays
    readable through its handle; reading its middle would cost more than the compaction.
    """
    text = message.text
    if message.tool_calls:
        text = "\n".join([text, *(c.arguments for c in message.tool_calls)])
    return head_and_tail(text)


def head_and_tail(text: str, limit: int = SCAN_CHARS) -> str:
    """``text`` when it holds at most ``limit`` characters, else its first and last
    ``limit // 2`` joined by a newline."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n{text[-half:]}"


def appears_in(value: str, text: str) -> bool:
    """Whether ``text`` shows ``value`` whole: not as a piece of a longer identifier
    (``OLD-1`` is not shown by ``OLD-100``, nor ``card_7`` by ``gift_card_7``)."""
    if len(value) < 3:
        return False
    at = text.find(value)
    while at >= 0:
        end = at + len(value)
        if not (at and _joins(text[at - 1])) and not (end < len(text) and _joins(text[end])):
            return True
        at = text.find(value, at + 1)
    return False


def _joins(c: str) -> bool:
    return c.isalnum() or c in "_-"


# A run of the characters `_joins` holds (``\w`` is ``str.isalnum`` and "_", code point
# for code point).
_JOINED = re.compile(r"[\w-]+")


def appears_in_text(text: str) -> Callable[[str], bool]:
    """`appears_in` of many values against one long ``text``, the same answers, without a
    search of the whole text per value (that made ranking a long summary's DATA quadratic).

    Where a value shows whole, each run of joining characters in it is bounded by
    characters that do not join (the value's own, or the text's around it), so it is one
    of the text's maximal runs, a set made once. A value with a run the text lacks is not
    shown; a value that is one run (most identifiers: ``ORD-63358``, ``_trim_end``) is
    shown when the text has it; any other is searched for."""
    runs: set[str] | None = None

    def test(value: str) -> bool:
        nonlocal runs
        if len(value) < 3:
            return False
        if runs is None:
            runs = set(_JOINED.findall(text))
        parts = _JOINED.findall(value)
        if not all(part in runs for part in parts):
            return False
        if len(parts) == 1 and parts[0] == value:
            return True
        return appears_in(value, text)
    return test
