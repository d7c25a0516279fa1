"""Bounds: a message nothing has counted yet need not be tokenized to know it fits.

`token_bound` is a cheap upper bound of a message's count (its cached count when it
has one): for tiktoken's byte-level BPE encodings every token covers at least one byte of
UTF-8, so a text's count is at most its byte length (scaled like the count for an
`ApproximateCounter`); an
[`EstimatingCounter`][contextfold.EstimatingCounter] is cheap, so its bound is its count, and so is
that of any other counter (no bound is known for it). `count_within` uses them to decide
whether a history fits a limit while tokenizing only as much of it, newest first, as the
decision needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._messages.model import Message
from .counters import (
    _SAFE_CUT,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    EstimatingCounter,
    TiktokenCounter,
    TokenCounter,
    _BaseCounter,
    _shared_prefix,
    _utf8_length,
)

__all__ = ["count_within", "head_over", "text_over", "token_bound", "token_bounds"]

def _bound_function(counter: TokenCounter) -> Callable[[Message], int] | None:
    """The per-message bound of a counter of ours whose message arithmetic is its own
    (made once per counter)."""
    if not isinstance(counter, _BaseCounter):
        return None
    made = counter.__dict__.get("_bound")
    if made is None:
        made = counter.__dict__["_bound"] = (_make_bound(counter),)
    bound: Callable[[Message], int] | None = made[0]
    return bound


def _make_bound(counter: _BaseCounter) -> Callable[[Message], int] | None:
    cls = type(counter)
    if (cls.count_message is not _BaseCounter.count_message
            or cls.count_messages is not _BaseCounter.count_messages
            or cls._count_uncached is not _BaseCounter._count_uncached):
        return None
    text = counter._text_bound()
    if text is None:
        return None
    general = counter._count_with
    labels: dict[str, int] = {}  # this bound's own memo of the counter's label counts

    def label(name: str) -> int:
        n = labels.get(name)
        if n is None:
            n = labels[name] = counter._count_label(name)
        return n

    def bound(m: Message) -> int:
        # The arithmetic of ``_count_with``, unrolled for the common plain-text message.
        content = m.content
        if content.__class__ is not str:
            return general(m, text)
        role = labels.get(m.role)
        n = TOKENS_PER_MESSAGE + (label(m.role) if role is None else role) + text(content)
        if m.reasoning:
            n += text(m.reasoning)
        for call in m.tool_calls:
            n += TOKENS_PER_TOOL_CALL + label(call.name) + text(call.arguments)
        if m.tool_call_id:
            n += text(m.tool_call_id)
        if m.name:
            n += TOKENS_PER_NAME + label(m.name)
        return n

    def utf8_bound(m: Message) -> int:
        # ``bound`` with the UTF-8 length written inline (the unscaled tiktoken case, the
        # hot loop of a cold call).
        d = m.__dict__
        content = d["content"]
        if content.__class__ is not str:
            return general(m, text)
        role = labels.get(d["role"])
        n = TOKENS_PER_MESSAGE + (label(d["role"]) if role is None else role) + (
            len(content) if content.isascii() else _utf8_length(content))
        extra = d["reasoning"]
        if extra:
            n += len(extra) if extra.isascii() else _utf8_length(extra)
        for call in d["tool_calls"]:
            n += TOKENS_PER_TOOL_CALL + label(call.name) + _utf8_length(call.arguments)
        extra = d["tool_call_id"]
        if extra:
            n += len(extra) if extra.isascii() else _utf8_length(extra)
        extra = d["name"]
        if extra:
            named = labels.get(extra)
            n += TOKENS_PER_NAME + (label(extra) if named is None else named)
        return n

    return utf8_bound if text is _utf8_length else bound


def token_bound(counter: TokenCounter, message: Message) -> int:
    """An upper bound of ``counter.count_message(message)``, cheap: the cached count when
    the message has one, else the bound of the module docstring (without tokenizing);
    counters with no known bound are asked for the count."""
    known = _cached_count(counter, message)
    if known is not None:
        return known
    bound = _bound_function(counter)
    return counter.count_message(message) if bound is None else bound(message)


def _cached_count(counter: TokenCounter, message: Message) -> int | None:
    memo: dict[str, Any] | None = message.__dict__.get("_derived")
    if memo is None:
        return None
    value: int | None = memo.get("tokens:" + counter.name)
    return value


def token_bounds(counter: TokenCounter, messages: Sequence[Message]) -> list[int]:
    """`token_bound` of each message (from the figures `count_within` last
    made for the same messages, when it did)."""
    bound = _bound_function(counter)
    if bound is None:
        return [counter.count_message(m) for m in messages]
    return _figures(counter, messages, bound)[0]


def _figures(
    counter: TokenCounter, messages: Sequence[Message], bound: Callable[[Message], int]
) -> tuple[list[int], list[int]]:
    """Each message's cached count or bound, and the positions that have a bound. The
    counter remembers the figures of the last sequence that needed a bound (holding its
    messages until another replaces it), so the driver's decision and the policy's check
    of the same input bound it once."""
    key = "tokens:" + counter.name
    last: tuple[tuple[Message, ...], list[int]] | None = counter.__dict__.get("_within")
    figures: list[int] = []
    open_: list[int] = []  # positions whose figure is a bound
    add, mark = figures.append, open_.append
    if last is not None and len(last[0]) == len(messages) and (
            _shared_prefix(last[0], messages) == len(messages)):
        # The same messages as the last call (a policy checking what the driver just
        # decided): their bounds again, and the counts made since.
        for i, (m, figure) in enumerate(zip(messages, last[1], strict=True)):
            memo: dict[str, Any] | None = m.__dict__.get("_derived")
            if memo is not None and key in memo:
                add(memo[key])
            else:
                mark(i)
                add(figure)
    else:
        for i, m in enumerate(messages):
            memo = m.__dict__.get("_derived")
            if memo is not None and key in memo:
                add(memo[key])
            else:
                mark(i)
                add(bound(m))
        if open_:  # worth remembering: a bound was needed
            counter.__dict__["_within"] = (tuple(messages), list(figures))
    return figures, open_


def text_over(counter: TokenCounter, text: str, limit: int) -> int | None:
    """For a long text plainly over ``limit``: an estimate of ``counter.count_text(text)``
    made without counting it whole, else ``None`` (count it).

    A prefix of ``text`` cut where no token spans the cut is counted exactly; the counts
    of the two pieces add up to the whole's, so when the prefix alone is over ``limit``
    the text is too (that much is certain). The estimate is the prefix's count scaled by
    the text's length, never below it. For a caller that needs to know whether a text is
    over ``limit`` and about how far (a summary trimmed to fit, which then counts what it
    keeps). ``None`` too for counters not known to count pieces that way."""
    if not isinstance(counter, TiktokenCounter) or counter._text_bound() is None:
        return None
    size = max(4096, limit * 8)  # characters: several times ``limit`` tokens of any text
    if len(text) < 2 * size:
        return None
    cut = _SAFE_CUT.search(text, size)
    if cut is None:
        return None
    head = counter.count_text(text[:cut.start()])
    if head <= limit:
        return None
    return max(head, head * len(text) // max(cut.start(), 1))


def head_over(counter: TokenCounter, text: str, limit: int) -> bool:
    """True when the start of ``text`` alone already counts over ``limit``, so that
    ``text`` and every text that starts with it do too; False when that does not show.

    For a counter whose count of a text cut where no token spans the cut is the sum of the
    pieces' (tiktoken's byte-level encodings, their approximations) the prefix up to the
    last such cut is counted; an [`EstimatingCounter`][contextfold.EstimatingCounter] counts
    ``text`` itself (its count never shrinks as a text grows). Other counters are never decided this
    way."""
    if isinstance(counter, EstimatingCounter):
        return counter.count_text(text) > limit
    if not isinstance(counter, TiktokenCounter) or counter._text_bound() is None:
        return False
    cut, end, step = 0, len(text), 4096
    while not cut and end > 0:  # the last safe cut, looked for from the end
        start = max(0, end - step)
        cut = max((m.start() for m in _SAFE_CUT.finditer(text, start, end)), default=0)
        end, step = start + 1, step * 4
    return cut > 0 and counter.count_text(text[:cut]) > limit


def count_within(
    counter: TokenCounter, messages: Sequence[Message], limit: int
) -> tuple[int, bool]:
    """Whether ``messages`` fit ``limit`` tokens (reply priming included), tokenizing as
    little as that takes: ``(figure, exact)``.

    ``exact`` is True when ``figure`` is ``counter.count_messages(messages)``; otherwise
    ``figure`` is an upper bound of that count, and the messages fit ``limit`` exactly when
    ``figure <= limit`` (over it, the messages counted exactly are already over ``limit``
    on their own). Messages are counted exactly, newest first, only while the bound is
    over ``limit`` and what was counted exactly is not.
    """
    bound = _bound_function(counter)
    if bound is None:
        return counter.count_messages(messages), True
    figures, open_ = _figures(counter, messages, bound)
    total = REPLY_PRIMING + sum(figures)
    counted = total - sum([figures[i] for i in open_])  # the exact part
    count_each = counter.count_each if isinstance(counter, _BaseCounter) else None
    while open_ and total > limit >= counted:
        # Counting a message moves its bound ``b`` into ``counted`` (its count ``n <= b``)
        # and takes ``b - n`` off ``total``. Until the bounds of the messages counted add
        # up to the smaller of the two distances left, neither test can change: so the
        # newest open messages up to that point are all counted one by one would count
        # before stopping, and are counted together (on parallel threads, for a long run).
        need = min(limit + 1 - counted, total - limit)
        take, covered = len(open_), 0
        while take and covered < need:
            take -= 1
            covered += figures[open_[take]]
        batch = open_[take:]
        del open_[take:]
        counts = (count_each([messages[i] for i in batch]) if count_each is not None
                  and len(batch) > 1 else [counter.count_message(messages[i]) for i in batch])
        for i, n in zip(batch, counts, strict=True):
            total += n - figures[i]
            counted += n
    return total, not open_


