"""Snippets: a window of text around the first matched word, matched words in brackets.

Shared by the stores that do not get snippets from their database (the in-memory store,
and SQLite, where FTS5's ``snippet()`` costs as much as the ranking itself). Words match a
query word when they are equal after a light suffix strip, so "mining" highlights "mined"
the way the Porter-stemmed index matched it.
"""

from __future__ import annotations

import re

__all__ = ["make_snippet"]

_WORDS = re.compile(r"\w+", re.UNICODE)
_SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ies", "ied", "ers", "er",
             "ed", "es", "ly", "s", "e")


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in _SUFFIXES:
        if len(word) - len(suffix) >= 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def make_snippet(text: str, terms: list[str], width: int = 160) -> str:
    """Up to ``width`` characters of ``text`` around the first match, matches bracketed."""
    wanted = {_stem(w) for t in terms for w in _WORDS.findall(t)}
    spans = [m.span() for m in _WORDS.finditer(text) if _stem(m.group()) in wanted]
    if not spans:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(0, spans[0][0] - width // 3)
    end = min(len(text), start + width)
    out, cursor = [], start
    for s, e in spans:
        if s < cursor or e > end:
            continue
        out.append(text[cursor:s] + "[" + text[s:e] + "]")
        cursor = e
    out.append(text[cursor:end])
    return ("…" if start > 0 else "") + "".join(out) + ("…" if end < len(text) else "")
