"""Recipe: a swarm of autonomous agents with loop-slice contexts and idle detection.

Each agent runs the same loop: load its full history from the shared store, let its
``Compactor`` build the context (``LoopSlicePolicy``: system prompt, one prompt source, the
latest tool loop), call the model, store the reply and the tool results. Nothing but the
store holds history, so the context stays a handful of messages however long the agent
runs, and the full history stays searchable.

What it shows:

* the commander's broadcast keeps an agent running long after it left the 20-message scan
  window (the policy finds it again: sliding-window protection);
* an agent that joins the swarm later, with an empty history, inherits the mission from the
  store's swarm broadcast;
* an agent with no mission gets escalating nudges (never stored); when it does not respond
  to three of them it goes idle, and its loop stops on the ``ConversationIdle`` event.

Run it with ``python cookbook/swarm_agents.py``. The model is scripted, so it runs offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import contextfold as cf

BUDGET = cf.Budget(context_window=8_000, output_reserve=1_000)
SYSTEM = "You are a survey drone. Context is limited: search your memory for older facts."


@dataclass
class AgentRun:
    """What happened to one agent."""

    name: str
    steps: int = 0
    tool_calls: int = 0
    largest_context: int = 0
    prompts_seen: list[str] = field(default_factory=list)
    idle_reason: str | None = None


def scripted_model(context: list[cf.Message], step: int) -> cf.Message | None:
    """Scans a sector when it has a mission; gives no response when it is only nudged."""
    prompt = next(m for m in context if m.role == "user")
    if prompt.source == "nudge":
        return None  # a model that fails to respond (the loop-slice design: "failed to respond")
    call = cf.ToolCall(f"scan-{step}", "scan_sector", json.dumps({"sector": step}))
    return cf.Message("assistant", f"Scanning sector {step}.", tool_calls=(call,))


def run_agent(store: cf.MemoryStore, name: str, swarm: str, steps: int) -> AgentRun:
    """The agent loop: compact, call the model, store, until done or idle."""
    record = AgentRun(name)
    idle: list[cf.ConversationIdle] = []
    compactor = cf.Compactor(
        cf.LoopSlicePolicy(swarm_id=swarm), BUDGET, cf.EstimatingCounter(),
        store=store, conversation_id=name,
    )
    compactor.add_listener(lambda e: idle.append(e) if isinstance(e, cf.ConversationIdle) else None)
    for step in range(steps):
        context = compactor.compact(store.load(name)).messages
        record.largest_context = max(record.largest_context, len(context))
        record.prompts_seen.append(next(m.source or "" for m in context if m.role == "user"))
        reply = scripted_model(context, step)
        if reply is None:
            if idle:  # the adapter's cue to stop the loop
                record.idle_reason = idle[0].reason
                break
            continue
        compactor.record_response()
        results = [cf.Message("tool", f"sector {step}: 3 asteroids, iron ore", name="scan_sector",
                              tool_call_id=c.id) for c in reply.tool_calls]
        store.append(name, [reply, *results])
        record.steps += 1
        record.tool_calls += len(reply.tool_calls)
    return record


def main() -> dict[str, AgentRun]:
    """Run three agents and print what each did."""
    store = cf.MemoryStore()
    for name in ("drone-1", "drone-2", "drone-3"):
        store.append(name, [cf.Message("system", SYSTEM)])
    store.join_swarm("drone-1", "survey")
    store.broadcast("survey", "Scan every sector you can reach.", sender_id="")
    runs = {"drone-1": run_agent(store, "drone-1", "survey", steps=30)}
    store.join_swarm("drone-2", "survey")  # joins after the broadcast, history empty
    runs["drone-2"] = run_agent(store, "drone-2", "survey", steps=5)
    runs["drone-3"] = run_agent(store, "drone-3", "mining", steps=10)  # no mission at all
    for run in runs.values():
        stored = len(store.load(run.name))
        print(f"{run.name}: {run.steps} steps, {stored} messages stored, at most "
              f"{run.largest_context} in context, idle: {run.idle_reason or 'no'}")
    return runs


if __name__ == "__main__":
    main()
