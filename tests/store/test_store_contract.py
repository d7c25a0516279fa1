"""The store contract, run on every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_strategies import messages

import contextfold as cf
from contextfold._counting.counters import ApproximateCounter
from contextfold.errors import ConfigurationError, StoreError
from contextfold.integration import message_to_dict
from contextfold.stores import BaseStore, CountStore
from spy_counting import again, spy_counter

_FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def _conv() -> str:
    return "c-" + uuid.uuid4().hex


def _turn(i: int) -> list[cf.Message]:
    """One agent iteration (the message-format guarantee's example): a tool call, its result, a
    remark."""
    call = cf.ToolCall(id=f"call-{i}", name="navigate", arguments=f'{{"step": {i}}}')
    return [
        cf.Message("assistant", "", tool_calls=(call,), reasoning=f"step {i} of the route"),
        cf.Message("tool", f"arrived at waypoint {i}", tool_call_id=f"call-{i}"),
        cf.Message("assistant", f"waypoint {i} reached"),
    ]


# -- history ------------------------------------------------------------------------------


def test_append_and_load_keep_order_across_batches(store: BaseStore) -> None:
    conv = _conv()
    batches = [[cf.Message("user", f"u{i}"), cf.Message("assistant", f"a{i}")] for i in range(5)]
    for batch in batches:
        store.append(conv, batch)
    loaded = store.load(conv)
    assert [m.text for m in loaded] == [m.text for b in batches for m in b]
    assert [m.id for m in loaded] == [m.id for b in batches for m in b]


def test_load_recent_returns_the_last_n_in_order(store: BaseStore) -> None:
    conv = _conv()
    store.append(conv, [cf.Message("user", str(i)) for i in range(30)])
    assert [m.text for m in store.load_recent(conv, 20)] == [str(i) for i in range(10, 30)]
    assert [m.text for m in store.load_recent(conv, 100)] == [str(i) for i in range(30)]
    assert store.load_recent(conv, 0) == []
    with pytest.raises(ConfigurationError, match="limit"):
        store.load_recent(conv, -1)


def test_unknown_conversation_is_empty(store: BaseStore) -> None:
    conv = _conv()
    assert store.load(conv) == []
    assert store.load_recent(conv, 5) == []
    assert store.system_message(conv) is None
    assert store.most_recent_broadcast(conv) is None


def test_system_message_is_the_first_system_message(store: BaseStore) -> None:
    conv = _conv()
    store.append(conv, [cf.Message("user", "before")])
    store.append(conv, [cf.Message("system", "first prompt"), cf.Message("user", "go")])
    store.append(conv, [cf.Message("system", "second prompt")])
    found = store.system_message(conv)
    assert found is not None and found.text == "first prompt"


def test_clear_removes_only_that_conversation(store: BaseStore) -> None:
    a, b = _conv(), _conv()
    store.append(a, [cf.Message("user", "iron ore in a")])
    store.append(b, [cf.Message("user", "iron ore in b")])
    store.put_original(a, "h1", "original text")
    store.clear(a)
    assert store.load(a) == []
    assert store.search_messages(a, "iron") == []
    assert store.get_original(a, "h1") is None
    assert [m.text for m in store.load(b)] == ["iron ore in b"]
    store.append(a, [cf.Message("user", "after clear")])
    assert [m.text for m in store.load(a)] == ["after clear"]
    assert store.search_messages(a, "clear")[0].position == 0


def test_bad_arguments_are_configuration_errors(store: BaseStore) -> None:
    with pytest.raises(ConfigurationError, match="conversation_id"):
        store.append("", [cf.Message("user", "x")])
    with pytest.raises(ConfigurationError, match="Message"):
        store.append(_conv(), [{"role": "user", "content": "x"}])  # type: ignore[list-item]
    store.append(_conv(), [])  # nothing to do, no error


def test_unstorable_metadata_is_refused_not_changed(store: BaseStore) -> None:
    conv = _conv()
    with pytest.raises(StoreError, match="tuple"):
        store.append(conv, [cf.Message("user", "x", metadata={"pair": (1, 2)})])
    assert store.load(conv) == []


@_FIXTURE_OK
@given(batch=st.lists(messages, min_size=1, max_size=4))
def test_every_message_round_trips(store: BaseStore, batch: list[cf.Message]) -> None:
    conv = _conv()
    store.append(conv, batch)
    loaded = store.load(conv)
    assert loaded == batch
    assert [m.id for m in loaded] == [m.id for m in batch]
    for got, sent in zip(loaded, batch, strict=True):
        assert got.created_at == sent.created_at
        assert dict(got.metadata) == dict(sent.metadata)


# -- token counts kept with the messages ---------------------------------------------------


def _thread(n: int = 6) -> list[cf.Message]:
    """Messages whose texts are unique to them (the spy encoding tells them apart)."""
    out = [cf.Message("system", "You route cargo ships.")]
    for i in range(n):
        out += _turn(i)[:2]
        out.append(cf.Message("user", f"next leg {i} of {uuid.uuid4().hex}"))
    return out


def _key(counter: cf.TokenCounter) -> str:
    return "tokens:" + counter.name


def test_counts_held_when_appended_are_loaded_with_the_messages(open_store: Any) -> None:
    conv, thread = _conv(), _thread()
    counter, _ = spy_counter()
    store = open_store()
    assert isinstance(store, CountStore)
    store.append(conv, thread[:5], counter=counter)  # counted on the way in
    counter.count_messages(thread[5:])
    store.append(conv, thread[5:])  # counted before: the counts they hold are kept
    resumed, spy = spy_counter()  # a new process: a new store object and a new counter
    loaded = open_store().load(conv)
    assert loaded == thread
    assert resumed.count_messages(loaded) == counter.count_messages(thread)
    assert spy.tokenized(loaded) == []
    recent = open_store().load_recent(conv, 4)
    assert all(m.has_derived(_key(resumed)) for m in recent)


def test_counts_made_later_are_kept_for_the_same_id_and_content(open_store: Any) -> None:
    conv, thread = _conv(), _thread()
    store = open_store()
    store.append(conv, thread)  # nothing counted yet
    assert not any(m.has_derived("tokens:tiktoken:cl100k_base") for m in store.load(conv))
    converted = again(thread)  # a later process converts the checkpoint again
    counter, _ = spy_counter()
    store.put_counts(conv, converted[::2], counter=counter)  # counted, then kept
    counter.count_messages(converted)
    store.put_counts(conv, converted)  # the counts they hold are kept
    resumed, spy = spy_counter()
    loaded = open_store().load(conv)
    assert resumed.count_messages(loaded) == counter.count_messages(thread)
    assert spy.tokenized(loaded) == []
    stored = open_store().stored_counts(conv)
    assert stored.ids == {m.id for m in thread} and len(stored) == len(thread)
    fresh = again(thread)
    assert stored.fill(fresh) == len(thread)
    assert [m.has_derived(_key(resumed)) for m in fresh] == [True] * len(thread)


def test_a_count_is_kept_only_for_the_content_it_was_made_from(open_store: Any) -> None:
    conv = _conv()
    stored = cf.Message("tool", "fuel at 40%", tool_call_id="c1")
    store = open_store()
    store.append(conv, [cf.Message("user", "check the fuel"), stored])
    counter, _ = spy_counter()
    # Same id, other content (a framework replaced the message): no count is kept for it.
    replaced = cf.Message("tool", "fuel at 95% after refuelling", tool_call_id="c1",
                          id=stored.id)
    counter.count_message(replaced)
    store.put_counts(conv, [replaced])
    # Same content, an id the conversation does not hold, or another conversation.
    elsewhere = cf.Message("tool", "fuel at 40%", tool_call_id="c1")
    counter.count_message(elsewhere)
    store.put_counts(conv, [elsewhere])
    store.put_counts(_conv(), again([stored]), counter=counter)
    again_store = open_store()
    assert len(again_store.stored_counts(conv)) == 0
    assert again_store.stored_counts(conv).counts_of(replaced) == {}
    resumed, spy = spy_counter()
    loaded = again_store.load(conv)
    resumed.count_messages(loaded)
    assert spy.tokenized(loaded) == loaded  # nothing was kept: every message is counted


def test_counts_never_cross_counter_names(open_store: Any) -> None:
    conv, thread = _conv(), _thread()
    counter, _ = spy_counter()
    open_store().append(conv, thread, counter=counter)
    encoding = spy_counter()[1]
    approximate = ApproximateCounter("claude", encoding, 1.3, "a stated factor")  # type: ignore[arg-type]
    loaded = open_store().load(conv)
    approximate.count_messages(loaded)
    assert encoding.tokenized(loaded) == loaded  # kept under another name: counted anew
    stored = open_store().stored_counts(conv)
    assert {name for m in again(thread) for name in stored.counts_of(m)} == {counter.name}


def test_keeping_counts_leaves_the_stored_history_as_it_was(open_store: Any) -> None:
    conv, thread = _conv(), _thread()
    store = open_store()
    store.append(conv, thread)
    before = [message_to_dict(m) for m in store.load(conv)]
    hits = [h.handle for h in store.search_messages(conv, "waypoint")]
    store.put_counts(conv, again(thread), counter=spy_counter()[0])
    assert [message_to_dict(m) for m in open_store().load(conv)] == before
    assert [h.handle for h in open_store().search_messages(conv, "waypoint")] == hits
    # and the caller's messages are not touched: ``thread`` holds no count
    assert not any(m.has_derived(_key(spy_counter()[0])) for m in thread)


def test_clear_drops_the_kept_counts(open_store: Any) -> None:
    conv, thread = _conv(), _thread()
    store = open_store()
    store.append(conv, thread, counter=spy_counter()[0])
    store.clear(conv)
    store.append(conv, again(thread))  # the same ids and content, stored anew uncounted
    assert len(open_store().stored_counts(conv)) == 0
    resumed, spy = spy_counter()
    loaded = open_store().load(conv)
    resumed.count_messages(loaded)
    assert spy.tokenized(loaded) == loaded


def test_stored_ids_are_exact_even_where_a_column_cannot_hold_them(open_store: Any) -> None:
    """A call loop tells what is stored by id: an id PostgreSQL text cannot hold (NUL) or
    that is not UTF-8 (a lone surrogate) is read from the message itself."""
    conv = _conv()
    ids = ["nul\x00id", "nul id", "lone\ud800", "lone\ufffd", "plain"]
    counter, _ = spy_counter()
    open_store().append(conv, [cf.Message("user", f"m{i}", id=x) for i, x in enumerate(ids)],
                        counter=counter)
    stored = open_store().stored_counts(conv)
    assert stored.ids == set(ids)
    fresh = [cf.Message("user", f"m{i}", id=x) for i, x in enumerate(ids)]
    assert stored.fill(fresh) == len(ids)


@_FIXTURE_OK
@given(batch=st.lists(messages, min_size=1, max_size=4))
def test_restored_counts_equal_fresh_counts(
    store: BaseStore, counter: cf.TokenCounter, batch: list[cf.Message]
) -> None:
    conv = _conv()
    store.append(conv, batch, counter=counter)
    for got, sent in zip(store.load(conv), batch, strict=True):
        # A count comes back for every message that reads back as it was sent, and it is
        # the count of a copy nothing has counted.
        assert got.has_derived(_key(counter)) or got != sent
        assert counter.count_message(got) == counter.count_message(again([got])[0])


# -- search -------------------------------------------------------------------------------


def test_search_ranks_the_best_match_first_and_needs_every_word(store: BaseStore) -> None:
    conv = _conv()
    filler = " ".join(f"filler{i}" for i in range(60))
    store.append(conv, [
        cf.Message("user", f"{filler} iron somewhere and ore later {filler}"),
        cf.Message("tool", "iron ore iron ore: iron ore deposits", tool_call_id="t"),
        cf.Message("user", "only ore here"),
        cf.Message("assistant", "nothing relevant"),
    ])
    hits = store.search_messages(conv, "iron ore")
    assert [h.position for h in hits] == [1, 0]
    assert hits[0].score > hits[1].score
    best = hits[0]
    assert best.role == "tool" and best.conversation_id == conv
    assert "[iron]" in best.snippet.lower() or "[iron" in best.snippet.lower()
    assert store.get_message(best.handle) == best.message
    assert len(store.search_messages(conv, "iron ore", limit=1)) == 1


def test_search_finds_tool_call_names_and_arguments(store: BaseStore) -> None:
    conv = _conv()
    store.append(conv, _turn(7))
    hits = store.search_messages(conv, "navigate")
    assert [h.position for h in hits] == [0]
    assert hits[0].message.tool_calls[0].name == "navigate"


def test_search_reasoning_looks_only_at_reasoning(store: BaseStore) -> None:
    conv = _conv()
    store.append(conv, [
        cf.Message("assistant", "travel now", reasoning="the travel cooldown is 30 seconds"),
        cf.Message("assistant", "cooldown mentioned in content only"),
    ])
    hits = store.search_reasoning(conv, "cooldown")
    assert [h.position for h in hits] == [0]
    assert "cooldown" in hits[0].snippet.lower()
    assert [h.position for h in store.search_messages(conv, "cooldown")] == [1]


LITERAL_QUERIES = [
    '"', '""', "'", "*", "-", ":", "(", ")", "^iron", "iron*", "-iron", '"iron ore"',
    "iron AND ore", "iron OR nothing", "NOT iron", "NEAR(iron ore)", "content:iron",
    "search_text:iron", "'; DROP TABLE contextfold_messages; --", "1=1 OR", "\\", "%", "_",
    "iron\x00ore", "   ", "",
]


@pytest.mark.parametrize("query", LITERAL_QUERIES)
def test_operators_and_sql_are_searched_literally(store: BaseStore, query: str) -> None:
    conv = _conv()
    store.append(conv, [cf.Message("user", "iron ore; DROP TABLE contextfold_messages")])
    hits = store.search_messages(conv, query)
    assert all(h.conversation_id == conv for h in hits)
    assert store.search_reasoning(conv, query) == []
    assert len(store.load(conv)) == 1  # nothing was executed


def test_sql_text_in_a_query_matches_as_words(store: BaseStore) -> None:
    conv = _conv()
    store.append(conv, [cf.Message("user", "please DROP TABLE users now"),
                        cf.Message("user", "unrelated")])
    hits = store.search_messages(conv, "'; DROP TABLE users; --")
    assert [h.position for h in hits] == [0]
    assert store.search_messages(conv, "iron OR unrelated") == []  # OR is a word, not logic


@_FIXTURE_OK
@given(query=st.text(max_size=30))
def test_any_query_returns_a_list_never_an_error(store: BaseStore, query: str) -> None:
    conv = "fuzz"
    if not store.load_recent(conv, 1):
        store.append(conv, [cf.Message("user", "iron ore \"quoted\" NEAR(x) * -y",
                                       reasoning="thinking AND more")])
    for search in (store.search_messages, store.search_reasoning):
        hits = search(conv, query)
        assert isinstance(hits, list)
        assert all(h.conversation_id == conv for h in hits)
    assert isinstance(store.search_broadcasts("fuzz-swarm", query), list)


# -- isolation ----------------------------------------------------------------------------


def test_search_and_handles_never_cross_conversations(store: BaseStore) -> None:
    mine, other = _conv(), _conv()
    store.append(mine, [cf.Message("user", "my iron ore", reasoning="my secret plan")])
    store.append(other, [cf.Message("user", "their iron ore", reasoning="their secret plan")])
    hits = store.search_messages(mine, "iron ore")
    assert [h.message.text for h in hits] == ["my iron ore"]
    assert [h.message.reasoning for h in store.search_reasoning(mine, "secret")] == [
        "my secret plan"]
    theirs = store.search_messages(other, "iron")[0].handle
    assert store.get_message(theirs, scope=[mine]) is None
    assert store.get_message(theirs, scope=[mine, other]) is not None
    for bad in ("m:999999999", "x:1", "m:-1", "", "m:1; DROP", "b:" + "9" * 30):
        assert store.get_message(bad) is None


def test_originals_are_scoped_to_their_conversation(store: BaseStore) -> None:
    a, b = _conv(), _conv()
    store.put_original(a, "ref-1", "the full tool output")
    assert store.get_original(a, "ref-1") == "the full tool output"
    assert store.get_original(b, "ref-1") is None
    store.put_original(a, "ref-1", "replaced")
    assert store.get_original(a, "ref-1") == "replaced"


def test_summary_cache_round_trips_and_replaces(store: BaseStore) -> None:
    key = "sha:" + uuid.uuid4().hex
    assert store.get_summary(key) is None
    store.put_summary(key, "first")
    store.put_summary(key, "second")
    assert store.get_summary(key) == "second"


# -- broadcasts ------------------------------------------------------------------


def test_broadcast_is_stored_per_recipient_as_a_user_message(store: BaseStore) -> None:
    swarm, a, b = _conv(), _conv(), _conv()
    store.join_swarm(a, swarm)
    store.join_swarm(b, swarm)
    sent = store.broadcast(swarm, "Mine iron ore")
    assert sent.role == "user" and sent.source == "broadcast" and sent.sender_id == ""
    for conv in (a, b):
        assert store.load(conv) == [sent]
        assert store.most_recent_broadcast(conv) == sent
    hits = store.search_broadcasts(swarm, "iron")
    assert [h.message for h in hits] == [sent]
    assert hits[0].conversation_id == swarm
    assert store.get_message(hits[0].handle, scope=[swarm]) == sent
    assert store.get_message(hits[0].handle, scope=[a]) is None
    assert store.search_broadcasts(_conv(), "iron") == []


def test_broadcast_pushed_out_of_the_window_is_still_found(store: BaseStore) -> None:
    """The message-format guarantee ``TestBroadcastSlidingWindowBug``: 1 broadcast + 24 messages,
    window 20."""
    swarm, agent = _conv(), _conv()
    store.join_swarm(agent, swarm)
    sent = store.broadcast(swarm, "Explore the universe!")
    for i in range(8):
        store.append(agent, _turn(i))
    assert len(store.load(agent)) == 25
    window = store.load_recent(agent, 20)
    assert all(m.source != "broadcast" for m in window)
    assert store.most_recent_broadcast(agent) == sent


def test_new_agent_inherits_the_swarm_commander_broadcast(store: BaseStore) -> None:
    """The message-format guarantee ``TestNewMysisInheritsGlobalBroadcast``."""
    swarm, old, late = _conv(), _conv(), _conv()
    store.join_swarm(old, swarm)
    mission = store.broadcast(swarm, "Explore the universe!")
    store.broadcast(swarm, "found a nebula", sender_id=old, recipients=[old])
    store.join_swarm(late, swarm)
    assert store.load(late) == []
    assert store.most_recent_broadcast(late) == mission  # the commander's, not the agent's
    stranger = _conv()
    assert store.most_recent_broadcast(stranger) is None
    assert store.most_recent_broadcast(stranger, swarm) == mission
    assert store.most_recent_broadcast(stranger, _conv()) is None


def test_own_broadcast_wins_over_the_swarm_fallback(store: BaseStore) -> None:
    swarm, a = _conv(), _conv()
    store.broadcast(swarm, "old commander order", recipients=[a])
    newer = store.broadcast(swarm, "swarm chatter", sender_id="b", recipients=[a])
    assert store.most_recent_broadcast(a) == newer
    assert store.most_recent_broadcast(a, swarm) == newer


def test_threads_sharing_one_store_lose_nothing(store: BaseStore) -> None:
    conv = _conv()

    def write(worker: int) -> None:
        for i in range(25):
            store.append(conv, [cf.Message("user", f"{worker}-{i}-a", id=f"{worker}-{i}-a"),
                                cf.Message("user", f"{worker}-{i}-b", id=f"{worker}-{i}-b")])

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [m.id for m in store.load(conv)]
    assert len(ids) == len(set(ids)) == 200
    for k in range(4):
        assert [i for i in ids if i.startswith(f"{k}-")] == [
            f"{k}-{i}-{s}" for i in range(25) for s in "ab"]
    assert all(ids[j][:-1] == ids[j + 1][:-1] for j in range(0, 200, 2))  # batches whole


# -- one search semantics ---------------------------------------------------------------------

_CORPUS = [
    "Your reservation HAT001 is confirmed for May 20.",
    "Two reservations were cancelled yesterday.",
    "I reserved seat 14C on flight UA 880.",
    "Refund of 120 dollars issued to the card.",
    "NEAR(flight delay) is not an operator here",
    "flight delayed by two hours",
]

_QUERIES = {
    "reservation": {0, 1, 2},           # stems: reservation, reservations, reserved
    "cancelled reservations": {1},      # every term required
    '"UA 880"': {2},                    # quotes are text: the words UA and 880
    "NEAR(flight delay)": {4},          # operators are text; NEAR(flight is a phrase
    "flight delay": {4, 5},             # delayed stems to delay
    "delay flight": {4, 5},             # terms in any order
    "refund card": {3},
    "seat 14C": {2},
    "HAT001": {0},
    "hours flight": {5},
    "nothing matches": set(),
}


def test_every_store_finds_the_same_messages(tmp_path: Any, pg_schema: Any) -> None:
    """The memory, SQLite and PostgreSQL stores return the same hits for the same query:
    each term a phrase of its words, all required, words matched by their stems."""
    stores = {"memory": cf.MemoryStore(), "sqlite": cf.SQLiteStore(tmp_path / "h.db"),
              "postgres": pg_schema.open()}
    messages = [cf.Message("user", text) for text in _CORPUS]
    try:
        for store in stores.values():
            store.append("c", messages)
        for query, expected in _QUERIES.items():
            found = {name: {h.position for h in store.search_messages("c", query, limit=20)}
                     for name, store in stores.items()}
            assert found == dict.fromkeys(stores, expected), query
    finally:
        for store in stores.values():
            store.close()
