"""Snippets: a window of text around the first matched word, matched words in brackets.

Shared by the stores that do not get snippets from their database (the in-memory store,
and SQLite, where FTS5's ``snippet()`` costs as much as the ranking itself). A query word
matches the words that start with its stem (a light suffix strip), so "mining" highlights
"mined" the way the Porter-stemmed index matched it; words under four letters match whole.
"""

from __future__ import annotations

import re

__all__ = ["make_snippet", "snippet_pattern"]

_WORDS = re.compile(r"\w+", re.UNICODE)
_SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ies", "ied", "ers", "er",
             "ed", "es", "ly", "s", "e")


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in _SUFFIXES:
        if len(word) - len(suffix) >= 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def snippet_pattern(terms: list[str]) -> re.Pattern[str] | None:
    """The regular expression finding the query's words in a text (``None``: no words)."""
    words = {w for t in terms for w in _WORDS.findall(t)}
    options = sorted(
        {re.escape(_stem(w)) + r"\w*" if len(w) >= 4 else re.escape(w.lower()) + r"\b"
         for w in words}, key=len, reverse=True)
    if not options:
        return None
    return re.compile(r"\b(?:" + "|".join(options) + ")", re.IGNORECASE)


def make_snippet(text: str, terms: list[str] | re.Pattern[str] | None, width: int = 160) -> str:
    """Up to ``width`` characters of ``text`` around the first match, matches bracketed."""
    pattern = terms if isinstance(terms, re.Pattern) or terms is None else \
        snippet_pattern(terms)
    first = pattern.search(text) if pattern is not None else None
    if pattern is None or first is None:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(0, first.start() - width // 3)
    end = min(len(text), start + width)
    out, cursor = [], start
    for match in pattern.finditer(text, start, end):
        out.append(text[cursor:match.start()] + "[" + match.group() + "]")
        cursor = match.end()
    out.append(text[cursor:end])
    return ("…" if start > 0 else "") + "".join(out) + ("…" if end < len(text) else "")
