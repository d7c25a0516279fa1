"""Identifiers a run writes again: the names code and customer-service runs use, ranked by
where they were written rather than by position, and the ledger that indexes them."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold._identifiers.names import argument_values, names_in, names_of
from contextfold._identifiers.salience import salience


def test_names_that_hold_no_digit_are_found() -> None:
    text = ("I moved _trim_end into ReviewTokenStore (see store/review.py and conftest.py); "
            "cache.get_or_load now calls flushPending(). MAX_RETRIES stays 3. "
            "The card ends in 9725; the code is \"SDZQKO\" and the cabin 'business'.")
    found = names_in(text)
    for name in ["_trim_end", "ReviewTokenStore", "conftest.py", "cache.get_or_load",
                 "get_or_load", "flushPending", "MAX_RETRIES", "9725", "SDZQKO", "business"]:
        assert name in found, name


def test_prose_and_common_words_are_not_names() -> None:
    text = ("The agent checked the order. Then it wrote back, e.g. to the user, and the "
            "status was fine. print(len(self))")
    assert names_in(text) == []


def test_definitions_and_calls_name_functions() -> None:
    found = names_in("def refund_order(order):\n    return compute_total(order)\n"
                     "class Ledger:\n    pass\nfunction renderPage() {}")
    assert {"refund_order", "compute_total", "Ledger", "renderPage"} <= set(found)


def test_a_json_key_is_not_a_quoted_value() -> None:
    assert names_in('{"reservation_code": "XKQZ", "cabin": "economy"}') == [
        "reservation_code", "XKQZ", "economy"]


def test_tool_call_values_are_names_of_the_call() -> None:
    call = cf.ToolCall("c1", "update_reservation",
                       json.dumps({"reservation_id": "SDZQKO", "cabin": "business",
                                   "passengers": [{"first_name": "Omar"}], "count": 2,
                                   "amount": 1204}))
    message = cf.Message("assistant", "", tool_calls=(call,))
    assert argument_values(call.arguments) == ["SDZQKO", "business", "Omar", "1204"]
    assert {"SDZQKO", "business", "Omar"} <= set(names_of(message))
    assert argument_values("not json") == []


@given(st.lists(st.sampled_from(["Store", "get", "_x", "a.b", "9725", '"v"', " ", "\n",
                                 "(", ")", ".", "_", "-", "def ", "x"]), max_size=80))
def test_names_are_distinct_and_verbatim(pieces: list[str]) -> None:
    text = "".join(pieces)
    found = names_in(text)
    assert len(found) == len(set(found))
    assert all(name in text for name in found)


def test_what_the_run_wrote_outranks_what_a_result_printed_whatever_the_position() -> None:
    call = cf.ToolCall("c1", "get_order", '{"order_id": "W8320"}')
    history = [
        cf.Message("system", "Help with orders."),
        cf.Message("user", "My order is W8320, card ending 9725."),
        cf.Message("assistant", "", tool_calls=(call,)),
        cf.Message("tool", "order W8320 item 55012 warehouse 77120", tool_call_id="c1"),
        cf.Message("assistant", "Found item 55012."),
        cf.Message("tool", "log line 88001", tool_call_id="c1"),
    ]
    ranks = salience(history)
    assert ranks["W8320"] > ranks["55012"] > ranks["77120"]
    assert ranks["9725"] > ranks["88001"]


def test_boilerplate_in_every_turn_ranks_below_a_reference() -> None:
    reminder = "<system-reminder>Use TodoWrite and keep ReminderBlock short</system-reminder>"
    history = []
    for k in range(10):
        history += [cf.Message("user", f"{reminder} step {k}"),
                    cf.Message("assistant", f"Done step {k}.")]
    history.append(cf.Message("user", "Now fix parse_header in http_utils.py"))
    ranks = salience(history)
    assert ranks["parse_header"] > ranks["TodoWrite"]
