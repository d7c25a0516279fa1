"""Importance scoring and keyword-preserving truncation.

Each message gets a score from 0 to 100 and the list of factors that made it, so a
reviewer can see why a message was kept verbatim::

    >>> score_importance(Message(role="assistant", content="We decided to use OAuth 2.0."))
    ImportanceScore(score=50, factors=('decision_language',), is_residual=False)

The factors and their default weights are the tiered design's: decision language +50, tool error
+40, tool success +30, explicit importance high +40 / medium +20, two or more later
references +20, age under 5 minutes +15 (under an hour +5), task content +20. The tiered design's
own example adds up to 110; the score is capped at 100 so it stays on its scale (the
residual decision is unaffected).

A *reference* is a later message (text or tool-call arguments) that repeats one of this
message's identifiers: a token of at least four characters holding a digit (order numbers,
ids, dates, e-mails, URLs). That is what "referred to again" means in a tool-using agent's
history: a reservation id read from a result and then passed to the next call.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated

from .._config import Ge, check_fields, config_error
from .._identifiers.values import head_and_tail, scanned_text
from .._messages.model import Message

__all__ = [
    "ImportanceScore",
    "ImportanceWeights",
    "id_tokens",
    "identifiers",
    "keyword_truncate",
    "score_importance",
    "score_messages",
]

DECISION_RE = re.compile(
    r"\b(decided|concluded|agreed|will do|won't do|determined|resolved)\b", re.IGNORECASE
)
TASK_RE = re.compile(r"\b(task|objective)", re.IGNORECASE)
_TOKEN_RE = re.compile(r"[\w.@:/#+-]+")
_DIGIT_RE = re.compile(r"\d")
# For an ASCII text: every character outside `_TOKEN_RE`'s class turned into a space, so
# that ``split()`` finds the same runs as the pattern, several times faster.
_NON_TOKEN_TO_SPACE = str.maketrans({
    chr(c): " " for c in range(128) if not re.fullmatch(r"[\w.@:/#+-]", chr(c))})
# The words the two patterns below need, lowercased. A case-insensitive pattern cannot
# skip ahead to a literal and costs more than the rest of a message's score; in an ASCII
# text it can only match where one of its words appears in the lowered text, which a
# substring test finds far faster. (Outside ASCII, case folding has exceptions such as
# the long s and the dotted I, so such texts go to the pattern directly.)
_DECISION_WORDS = ("decided", "concluded", "agreed", "will do", "won't do", "determined",
                   "resolved")
_TASK_WORDS = ("task", "objective")
_SENTENCE_DECISION_RE = re.compile(
    r"\b(decided|concluded|agreed|will|won't|must|should)\b", re.IGNORECASE
)
_SENTENCE_IMPORTANT_RE = re.compile(r"\b(important|critical|key|essential|note)\b", re.IGNORECASE)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, slots=True)
class ImportanceScore:
    """How important a message is, and why."""

    score: int
    """0 to 100."""
    factors: tuple[str, ...]
    """The contributing factors, in the order they were found (for debugging and reports)."""
    is_residual: bool
    """True when the score reaches the residual threshold: the message bypasses compression."""


@dataclass(frozen=True, slots=True)
class ImportanceWeights:
    """Points per factor (the tiered design's defaults) and the time windows of the recency
    factor."""

    decision_language: Annotated[int, Ge(0)] = 50
    tool_error: Annotated[int, Ge(0)] = 40
    tool_success: Annotated[int, Ge(0)] = 30
    explicit_high: Annotated[int, Ge(0)] = 40
    explicit_medium: Annotated[int, Ge(0)] = 20
    references: Annotated[int, Ge(0)] = 20
    very_recent: Annotated[int, Ge(0)] = 15
    recent: Annotated[int, Ge(0)] = 5
    task_content: Annotated[int, Ge(0)] = 20
    min_references: Annotated[int, Ge(1)] = 2
    """Later messages that must refer to a message for the references factor."""
    very_recent_seconds: Annotated[float, Ge(0)] = 300.0
    recent_seconds: Annotated[float, Ge(0)] = 3600.0

    def __post_init__(self) -> None:
        check_fields(self)
        if self.very_recent_seconds > self.recent_seconds:
            raise config_error("ImportanceWeights", "very_recent_seconds",
                               f"<= recent_seconds ({self.recent_seconds})",
                               self.very_recent_seconds)


DEFAULT_WEIGHTS = ImportanceWeights()


def identifiers(text: str) -> set[str]:
    """The identifier-like tokens of ``text`` (at least 4 characters, at least one digit)."""
    found = set()
    tokens = (text.translate(_NON_TOKEN_TO_SPACE).split() if text.isascii()
              else _TOKEN_RE.findall(text))
    for token in filter(_DIGIT_RE.search, tokens):  # tested in C
        token = token.strip(".:,;/#-+")
        if len(token) >= 4:
            found.add(token)
    return found


def id_tokens(message: Message) -> frozenset[str]:
    """`identifiers` of a message's text and call arguments, computed once."""
    return message.derived("id_tokens", lambda m: frozenset(identifiers(scanned_text(m))))


def _reference_counts(messages: Sequence[Message], cap: int) -> list[int]:
    """For each message, how many later messages share one of its identifiers (up to
    ``cap``)."""
    ids = [id_tokens(m) for m in messages]
    where: dict[str, list[int]] = {}
    for i, found in enumerate(ids):
        for token in found:
            where.setdefault(token, []).append(i)
    counts = []
    for i, found in enumerate(ids):
        later: set[int] = set()
        for token in found:
            positions = where[token]
            start = bisect_right(positions, i)
            later.update(positions[start : start + cap])
            if len(later) >= cap:
                break
        counts.append(min(len(later), cap))
    return counts


def _mentions(text: str, lowered: str, pattern: re.Pattern[str], words: tuple[str, ...]) -> bool:
    """``pattern.search(text)``, skipped when ``text`` is ASCII and its lowered form
    ``lowered`` holds none of ``words`` (the pattern's words): it cannot match then."""
    if text.isascii() and not any(word in lowered for word in words):
        return False
    return pattern.search(text) is not None


def _age_seconds(message: Message, now: datetime | None) -> float | None:
    if now is None or message.created_at is None:
        return None
    created, current = message.created_at, now
    if (created.tzinfo is None) != (current.tzinfo is None):
        created = created.replace(tzinfo=created.tzinfo or timezone.utc)
        current = current.replace(tzinfo=current.tzinfo or timezone.utc)
    return (current - created).total_seconds()


def _score(
    message: Message, references: int, now: datetime | None, threshold: int,
    weights: ImportanceWeights,
) -> ImportanceScore:
    points: list[tuple[str, int]] = []
    text = head_and_tail(message.text)
    lowered = text.lower()
    if _mentions(text, lowered, DECISION_RE, _DECISION_WORDS):
        points.append(("decision_language", weights.decision_language))
    failed = message.is_error or (
        message.role == "tool" and "error" in lowered and ("tool" in lowered or "failed" in lowered)
    )
    if failed:
        points.append(("tool_error", weights.tool_error))
    elif message.role == "tool":
        points.append(("tool_success", weights.tool_success))
    importance = str(message.metadata.get("importance", "")).lower()
    if importance in ("high", "critical"):
        points.append(("explicit_high_importance", weights.explicit_high))
    elif importance == "medium":
        points.append(("explicit_medium_importance", weights.explicit_medium))
    if references >= weights.min_references:
        points.append(("referenced", weights.references))
    age = _age_seconds(message, now)
    if age is not None and 0 <= age < weights.very_recent_seconds:
        points.append(("very_recent", weights.very_recent))
    elif age is not None and 0 <= age < weights.recent_seconds:
        points.append(("recent", weights.recent))
    if message.metadata.get("type") == "task" or _mentions(text, lowered, TASK_RE, _TASK_WORDS):
        points.append(("task_related", weights.task_content))
    points = [(name, value) for name, value in points if value > 0]
    score = min(100, sum(value for _, value in points))
    return ImportanceScore(score, tuple(name for name, _ in points), score >= threshold)


def score_messages(
    messages: Sequence[Message],
    *,
    now: datetime | None = None,
    threshold: int = 60,
    weights: ImportanceWeights = DEFAULT_WEIGHTS,
) -> list[ImportanceScore]:
    """The importance of every message of a conversation, in one pass."""
    refs = _reference_counts(messages, weights.min_references)
    return [_score(m, r, now, threshold, weights) for m, r in zip(messages, refs, strict=True)]


def score_importance(
    message: Message,
    conversation: Sequence[Message] = (),
    *,
    now: datetime | None = None,
    threshold: int = 60,
    weights: ImportanceWeights = DEFAULT_WEIGHTS,
) -> ImportanceScore:
    """The importance of one ``message`` (the tiered design's ``scoreMessageImportance``).

    Args:
        message: the message to score.
        conversation: the whole conversation, for the references factor (the message is
            found in it by identity, else by equality; absent, it counts no references).
        now: the time for the recency factor; without it recency is not scored.
        threshold: the score at which a message is a residual (the tiered design: 60).
        weights: the points per factor.
    """
    index = next((i for i, m in enumerate(conversation) if m is message), None)
    if index is None:
        index = next((i for i, m in enumerate(conversation) if m == message), None)
    references = 0
    if index is not None:
        mine = id_tokens(message)
        references = sum(
            1 for later in conversation[index + 1 :] if mine & id_tokens(later)
        )
    return _score(message, references, now, threshold, weights)


def keyword_truncate(text: str, max_chars: int, keywords: Iterable[str] = ()) -> str:
    """``text`` shortened to at most ``max_chars`` by keeping its best sentences.

    Sentences (split at ``.``, ``!``, ``?`` and line breaks) score +10 per keyword they
    contain, +5 for decision language and +3 for importance markers; the best are kept,
    in their original order (the tiered design keeps score order, which scrambles the text). When no
    sentence fits, the start of the text is kept with ``...``.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars}")
    if len(text) <= max_chars:
        return text
    words = [k.lower() for k in keywords if k]
    sentences = [s.strip() for s in _SENTENCE_SPLIT_RE.split(text) if s and s.strip()]
    scores = []
    for sentence in sentences:
        lowered = sentence.lower()
        score = 10 * sum(1 for k in words if k in lowered)
        score += 5 if _SENTENCE_DECISION_RE.search(sentence) else 0
        score += 3 if _SENTENCE_IMPORTANT_RE.search(sentence) else 0
        scores.append(score)
    chosen: list[int] = []
    used = 0
    for k in sorted(range(len(sentences)), key=lambda k: (-scores[k], k)):
        cost = len(sentences[k]) + (1 if chosen else 0)
        if used + cost <= max_chars:
            chosen.append(k)
            used += cost
    if not chosen:
        return text[: max(0, max_chars - 3)] + "..." if max_chars >= 3 else text[:max_chars]
    return " ".join(sentences[k] for k in sorted(chosen))


def estimated_chars(text: str, tokens: int, count_text_tokens: int) -> int:
    """Characters of ``text`` that hold about ``tokens`` tokens, given its token count."""
    if count_text_tokens <= 0:
        return len(text)
    return max(0, math.floor(len(text) * tokens / count_text_tokens))
