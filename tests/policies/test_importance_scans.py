"""The importance scans' shortcuts find what their plain definitions find."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from contextfold import Message
from contextfold._policies.importance import (
    DECISION_RE,
    TASK_RE,
    _mentions,
    identifiers,
    score_importance,
)

_TOKEN_RE = re.compile(r"[\w.@:/#+-]+")

# Words of the patterns, their case variants, the characters that case folding treats
# specially (long s, dotted and dotless I, Kelvin sign), digits of other scripts, and the
# separators and punctuation the scans cut at.
_PIECES = st.sampled_from([
    "decided", "DECIDED", "Concluded", "agreed", "will do", "WILL DO", "won't do", "wOn'T dO",
    "determined", "reſolved", "resolved", "task", "TASK", "Objective", "objectives",
    "decİded", "tasK", "taſk", "İ", "ı", "K", "ſ", "x", "A", "9", "٣", "12", "AB-1234", "_",
    " ", "\n", "\t", "\x1c", "\x7f", "\x00", "=", ".", ":", "/", "#", "+", "-", "@", ",", ";",
    "'", "é", "\u00a0",
])
_TEXTS = st.lists(_PIECES, max_size=30).map("".join) | st.text(max_size=60)


def _plain_identifiers(text: str) -> set[str]:
    """The definition: every maximal token run holding a digit, stripped, of 4+ chars."""
    found = set()
    for token in _TOKEN_RE.findall(text):
        if re.search(r"\d", token):
            token = token.strip(".:,;/#-+")
            if len(token) >= 4:
                found.add(token)
    return found


@settings(max_examples=400)
@given(_TEXTS)
@example("".join(f"AB-{n}{chr(n)}" for n in range(128)))  # every ASCII separator
@example("order 12345\u00a0ref 9876")  # a space outside ASCII
def test_identifiers_are_the_digit_runs_of_the_text(text: str) -> None:
    assert identifiers(text) == _plain_identifiers(text)


@given(_TEXTS)
def test_the_word_test_never_hides_a_match(text: str) -> None:
    lowered = text.lower()
    assert _mentions(text, lowered, DECISION_RE, ("decided", "concluded", "agreed", "will do",
                                                  "won't do", "determined", "resolved")) is (
        DECISION_RE.search(text) is not None)
    assert _mentions(text, lowered, TASK_RE, ("task", "objective")) is (
        TASK_RE.search(text) is not None)


@given(_TEXTS, st.sampled_from(["user", "assistant", "tool"]))
def test_scores_follow_the_patterns(text: str, role: str) -> None:
    message = Message(role="tool", content=text, tool_call_id="c1") if role == "tool" else (
        Message(role=role, content=text))  # type: ignore[arg-type]
    factors = score_importance(message).factors
    assert ("decision_language" in factors) is (DECISION_RE.search(text) is not None)
    assert ("task_related" in factors) is (TASK_RE.search(text) is not None)
