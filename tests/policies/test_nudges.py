"""Nudges, the encouragement counter, idle and sliding-window protection,
through the ``Compactor`` that keeps the conversation's state."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import contextfold as cf
from contextfold._policies.prompt_source import FIRM, GENTLE, URGENT

M, TC = cf.Message, cf.ToolCall
BUDGET = cf.Budget(context_window=50_000)
IDLE_REASON = "failed to respond after 3 encouragements"


def loop(call_id: str, result: str = "ok") -> list[cf.Message]:
    return [M("assistant", "", tool_calls=(TC(call_id, "get_status", "{}"),)),
            M("tool", result, tool_call_id=call_id, name="get_status")]


def compactor(counter, policy=None, store=None, conversation_id="mysis-1"):
    events: list[object] = []
    c = cf.Compactor(policy or cf.LoopSlicePolicy(), BUDGET, counter, store=store,
                     conversation_id=conversation_id, listeners=[events.append])
    return c, events


def idle_events(events):
    return [e for e in events if isinstance(e, cf.ConversationIdle)]


# -- the message-format guarantee's truth table
# ----------------------------------------------------------


@dataclass(frozen=True)
class Row:
    state: str  # "running" | "idle"
    count: int  # the counter before the call
    user_message: str | None  # "broadcast" | "direct" | None
    action: str  # "real" | "synthetic" | "none"
    counter_after: int
    next_state: str


TRUTH_TABLE = [
    Row("running", 0, "broadcast", "real", 0, "running"),
    Row("running", 2, "direct", "real", 0, "running"),
    Row("running", 0, None, "synthetic", 1, "running"),
    Row("running", 1, None, "synthetic", 2, "running"),
    Row("running", 2, None, "synthetic", 3, "idle"),
    Row("idle", 3, "broadcast", "real", 0, "running"),
    Row("idle", 3, "direct", "real", 0, "running"),
    Row("idle", 3, None, "none", 3, "idle"),
]

USER = {
    "broadcast": M("user", "Explore the universe!", source="broadcast", sender_id=""),
    "direct": M("user", "Mine iron ore.", source="direct"),
}


@pytest.mark.parametrize("policy_cls", [cf.LoopSlicePolicy, cf.TurnAwarePolicy])
@pytest.mark.parametrize("row", TRUTH_TABLE, ids=lambda r: f"{r.state}-{r.count}-{r.user_message}")
def test_truth_table(counter, row, policy_cls):
    c, events = compactor(counter, policy_cls())
    c.state.encouragement_count = row.count
    c.state.idle = row.state == "idle"
    c.state.idle_reason = IDLE_REASON if c.state.idle else None
    history = [M("system", "You are a mysis."), *loop("c1")]
    if row.user_message:
        history.insert(1, USER[row.user_message])
    result = c.compact(history)
    prompt = result.messages[1]
    if row.action == "real":
        assert prompt is USER[row.user_message]
    else:
        assert prompt.source == "nudge"
    assert c.state.encouragement_count == row.counter_after
    assert c.state.idle is (row.next_state == "idle")
    became_idle = row.state == "running" and row.next_state == "idle"
    assert [e.reason for e in idle_events(events)] == ([IDLE_REASON] if became_idle else [])
    assert cf.validate(result.messages) == []


def test_three_unanswered_nudges_escalate_then_idle(counter):
    c, events = compactor(counter)
    history = [M("system", "s"), *loop("c1")]
    texts = [c.compact(history).messages[1].text for _ in range(3)]
    assert texts == [GENTLE, FIRM, URGENT]
    assert (c.state.idle, c.state.idle_reason) == (True, IDLE_REASON)
    assert len(idle_events(events)) == 1
    c.compact(history)  # idle, still no prompt: no new count, no second event
    assert c.state.encouragement_count == 3
    assert len(idle_events(events)) == 1


def test_a_model_response_resets_the_counter(counter):
    c, events = compactor(counter)
    history = [M("system", "s"), *loop("c1")]
    for _ in range(5):
        assert c.compact(history).messages[1].text == GENTLE
        c.record_response()
    assert not c.state.idle
    assert idle_events(events) == []


def test_a_new_broadcast_wakes_an_idle_conversation(counter):
    c, _ = compactor(counter)
    history = [M("system", "s"), *loop("c1")]
    for _ in range(3):
        c.compact(history)
    assert c.state.idle
    history = [*history, M("user", "Mine iron ore", source="broadcast", sender_id=""), *loop("c2")]
    assert c.compact(history).messages[1].text == "Mine iron ore"
    assert (c.state.idle, c.state.encouragement_count, c.state.idle_reason) == (False, 0, None)


def test_nudges_are_never_stored_nor_added_to_the_input(counter):
    store = cf.MemoryStore()
    history = [M("system", "s"), *loop("c1")]
    store.append("mysis-1", history)
    c, _ = compactor(counter, store=store)
    snapshot = list(history)
    out = c.compact(history).messages
    assert out[1].source == "nudge"
    assert history == snapshot
    assert all(m.source != "nudge" for m in store.load("mysis-1"))


# -- sliding-window protection ----------------------------------------------------------


def _mission_then_work(store: cf.MemoryStore, conv: str) -> None:
    """The message-format guarantee's example: a broadcast, then 8 iterations of 3 messages (24 in
    all)."""
    store.append(conv, [M("system", "You are a mysis.")])
    store.broadcast("swarm-1", "Explore the universe!", recipients=[conv])
    for k in range(8):
        store.append(conv, [*loop(f"{conv}-{k}", f"sector {k} scanned"),
                            M("assistant", f"Moving on from sector {k}.")])


def test_broadcast_pushed_out_of_the_window_by_24_messages(counter):
    store = cf.MemoryStore()
    _mission_then_work(store, "mysis-1")
    full = store.load("mysis-1")
    assert len(full) == 26
    # the loop-slice design: the system prompt + the recent 20
    recent = [full[0], *store.load_recent("mysis-1", 20)]
    assert all(m.source != "broadcast" for m in recent)
    c, events = compactor(counter, store=store)
    for _ in range(4):
        out = c.compact(recent).messages
        assert out[1].text == "Explore the universe!"
        assert out[1].source == "broadcast"
    assert (c.state.encouragement_count, c.state.idle) == (0, False)
    assert idle_events(events) == []


def test_without_the_store_the_same_window_goes_idle(counter):
    store = cf.MemoryStore()
    _mission_then_work(store, "mysis-1")
    full = store.load("mysis-1")
    recent = [full[0], *store.load_recent("mysis-1", 20)]
    c, events = compactor(counter)  # the bug the message-format guarantee describes
    for _ in range(3):
        c.compact(recent)
    assert c.state.idle
    assert len(idle_events(events)) == 1


def test_full_history_finds_the_broadcast_outside_the_window_without_a_store(counter):
    store = cf.MemoryStore()
    _mission_then_work(store, "mysis-1")
    c, _ = compactor(counter)
    out = c.compact(store.load("mysis-1")).messages
    assert out[1].text == "Explore the universe!"
    assert c.state.encouragement_count == 0


@pytest.mark.parametrize("swarm_id", [None, "swarm-1"])
def test_new_agent_inherits_the_swarm_commander_broadcast(counter, swarm_id):
    store = cf.MemoryStore()
    store.join_swarm("mysis-1", "swarm-1")
    store.broadcast("swarm-1", "Hold the line at Sol.", sender_id="")
    store.broadcast("swarm-1", "I found ore at Vega.", sender_id="mysis-1")  # not commander
    store.join_swarm("mysis-2", "swarm-1")  # created after the broadcast
    store.append("mysis-2", [M("system", "You are a mysis.")])
    policy = cf.LoopSlicePolicy(swarm_id=swarm_id)
    c, events = compactor(counter, policy, store=store, conversation_id="mysis-2")
    out = c.compact(store.load("mysis-2")).messages
    assert [m.role for m in out] == ["system", "user"]
    assert out[1].text == "Hold the line at Sol."
    assert (c.state.encouragement_count, c.state.idle) == (0, False)
    assert idle_events(events) == []


# -- a user's task keeps the agent running until it is answered -------------------------


def test_an_unanswered_task_outside_the_window_stays_the_prompt(counter) -> None:
    # A create_agent run: one human task, then tool loop after tool loop with no answer.
    # The task leaves the 20-message scan window after ten rounds; it must still drive
    # every request, and no nudge may replace it (nudges would idle the run).
    c, events = compactor(counter)
    task = M("user", "Read all 60 documents and list their codes.")
    history = [M("system", "You read documents."), task]
    for k in range(40):
        history += loop(f"c{k}", f"document {k}")
        out = c.compact(history).messages
        assert task in out and not any(m.source == "nudge" for m in out)
    assert c.state.encouragement_count == 0 and not idle_events(events)


def test_once_the_task_is_answered_an_autonomous_agent_is_nudged(counter) -> None:
    c, _ = compactor(counter)
    history = [M("system", "You mine."), M("user", "Report your cargo."), *loop("c0"),
               M("assistant", "Cargo: 12 t of iron ore.")]
    for k in range(1, 15):
        history += loop(f"c{k}")
    out = c.compact(history).messages
    assert out[1].source == "nudge" and c.state.encouragement_count == 1
