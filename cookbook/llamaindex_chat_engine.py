"""A LlamaIndex chat engine with CompactingMemory: swap one class.

Run: python cookbook/llamaindex_chat_engine.py

`CompactingMemory` works wherever `ChatMemoryBuffer` or `Memory` does. `get()` returns a
compacted, valid view (the first message after the system prompt is a user message, no
orphaned tool results); the full history stays in the store, searchable. Offline a
scripted LLM answers; with OPENAI_API_KEY set, gpt-4o-mini does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from llama_index.core.chat_engine import SimpleChatEngine

import contextfold as cf
from _scripted import llama_index_llm
from llama_index.memory.contextfold import CompactingMemory

with tempfile.TemporaryDirectory() as tmp:
    store = cf.SQLiteStore(Path(tmp) / "chat.db")
    memory = CompactingMemory.from_defaults(
        policy=cf.TruncationPolicy(), budget=cf.Budget(context_window=1_500),
        store=store, session_id="customer-42",
    )
    engine = SimpleChatEngine.from_defaults(llm=llama_index_llm(), memory=memory,
                                            system_prompt="You are a concise support agent.")
    for n in range(25):
        question = f"Question {n}: what is the status of order ORD-{7000 + n}? "
        engine.chat(question + "Details. " * 20)

    view = memory.get()
    print(f"the store holds {len(store.load('customer-42'))} messages; the model sees "
          f"{len(view)} of them")
    print("first message the model sees:", view[0].role.value, "-", (view[0].content or "")[:50])
    hits = store.search_messages("customer-42", "ORD-7003")
    print("the oldest orders stay searchable:", [h.message.text[:40] for h in hits][:1])
    assert hits and all(m.role.value != "tool" for m in view[:1])
    store.close()
