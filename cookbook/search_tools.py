"""Search tools: the agent looks up what compaction left out.

Run: python cookbook/search_tools.py

Every message stays in the store; the tools search it, scoped to the agent's own
conversation. The same specs become LangChain tools (`langchain_contextfold.search_tools_for`)
or LlamaIndex tools (`llama_index.memory.contextfold.search_tools_for`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import contextfold as cf
from contextfold.stores import SEARCH_GUIDANCE, search_tools
from langchain_contextfold import search_tools_for

with tempfile.TemporaryDirectory() as tmp:
    store = cf.SQLiteStore(Path(tmp) / "history.db")
    store.append("agent-7", [
        cf.Message("system", "You are a trader. " + SEARCH_GUIDANCE),
        cf.Message("user", "Sell the iron ore at the best station."),
        cf.Message("assistant", "Station Kepler pays 41 credits per ton of iron ore."),
        cf.Message("user", "And copper?"),
        cf.Message("assistant", "Copper sells best at Vega: 77 credits."),
    ])
    store.append("agent-8", [cf.Message("user", "iron ore prices at Kepler are secret")])

    specs = search_tools(store, "agent-7")
    print("tools:", [spec.name for spec in specs])
    search = next(spec for spec in specs if spec.name == "search_messages")
    hits = search.function(query='iron ore "Kepler"', limit=5)
    print(json.dumps(hits, indent=2)[:600])

    lc_tools = search_tools_for(store, "agent-7")
    answer = lc_tools[0].invoke({"query": "copper"})
    print("langchain tool says:", str(answer)[:200])
    assert "agent-8" not in json.dumps(hits) and "secret" not in json.dumps(hits)
    store.close()
