"""A swarm: commander broadcasts, loop slices, nudges and the idle breaker (seeds 000/001).

Run: python cookbook/swarm_broadcasts.py

Each agent's context is system + its current prompt source + its latest tool loop. When no
prompt is in its scan window, the most recent broadcast in the store is used (a new agent
inherits the swarm's mission); with none at all, one synthetic nudge is added (never
stored); after 3 consecutive nudges the conversation goes idle and says so.
"""

from __future__ import annotations

import contextfold as cf

store = cf.MemoryStore()  # cf.SQLiteStore("swarm.db") to keep it on disk
budget = cf.Budget(context_window=8_000)
system = cf.Message("system", "You are a mining drone. Context is limited: use search tools.")

for agent in ("drone-1", "drone-2"):
    store.join_swarm(agent, "fleet")
    store.append(agent, [system])
store.broadcast("fleet", "Mine iron ore in sector 7 and report yields.")  # the commander

# drone-1 works: 24 messages of tool loops push the broadcast out of its 20-message window.
loops = []
for i in range(8):
    call = cf.ToolCall(id=f"c{i}", name="mine", arguments='{"sector": 7}')
    loops += [cf.Message("assistant", tool_calls=(call,)),
              cf.Message("tool", f"mined {10 + i} t of iron ore", tool_call_id=f"c{i}"),
              cf.Message("assistant", f"Yield so far: {sum(range(10, 11 + i))} t.")]
store.append("drone-1", loops)

policy = cf.LoopSlicePolicy(max_context_messages=20, swarm_id="fleet")
one = cf.Compactor(policy=policy, budget=budget, store=store, conversation_id="drone-1")
seen = one.compact(store.load("drone-1")).messages
print("drone-1 sees:", [f"{m.role}:{m.source or ''}" for m in seen])
assert any(m.source == "broadcast" for m in seen), "the mission survives the window"

# A drone that joins later inherits the mission.
store.join_swarm("drone-3", "fleet")
store.append("drone-3", [system])
three = cf.Compactor(policy=policy, budget=budget, store=store, conversation_id="drone-3")
print("drone-3 sees:", [m.text[:40] for m in three.compact(store.load("drone-3")).messages])

# An agent with no prompt anywhere gets nudged, then goes idle.
lonely = cf.Compactor(policy=cf.LoopSlicePolicy(), budget=budget, conversation_id="lonely")


@lonely.add_listener
def on_event(event: object) -> None:
    if isinstance(event, cf.ConversationIdle):
        print("lonely went idle:", event.reason)


for attempt in range(3):
    nudge = lonely.compact([system]).messages[-1]
    print(f"nudge {attempt + 1}: {nudge.text}")
assert lonely.state.idle
