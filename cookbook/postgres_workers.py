"""PostgreSQL for many workers: one shared history, appended from several processes.

Run: CONTEXTFOLD_POSTGRES_URL=postgresql+psycopg://user@host/db python cookbook/postgres_workers.py
     (needs `pip install "contextfold[postgres]"`)

Each worker process runs its own agents and appends their steps; every append is one
transaction, positions are assigned without races, and search sees every worker's rows,
scoped per conversation. Without a URL the recipe uses a SQLite file, which is right for
one machine (several processes may share it too).
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import contextfold as cf
from contextfold.stores import BaseStore

URL = os.environ.get("CONTEXTFOLD_POSTGRES_URL") or os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL")
WORKERS, AGENTS, STEPS = 4, 3, 25


def open_store(where: str) -> BaseStore:
    return cf.PostgresStore(where) if where.startswith("postgresql") else cf.SQLiteStore(where)


def worker(where: str, worker_id: int) -> int:
    store = open_store(where)
    try:
        for agent in range(AGENTS):
            conversation = f"recipe-w{worker_id}-a{agent}"
            store.clear(conversation)
            store.append(conversation, [cf.Message("user", f"Survey sector {worker_id}.{agent}")])
            for step in range(STEPS):
                call = cf.ToolCall(id=f"s{step}", name="scan", arguments="{}")
                found = "cobalt" if step == 7 else "rock"
                result = f"sector {worker_id}.{agent} step {step}: {found}"
                store.append(conversation, [  # one agent step = one transaction
                    cf.Message("assistant", tool_calls=(call,)),
                    cf.Message("tool", result, tool_call_id=f"s{step}"),
                ])
        return AGENTS * (1 + 2 * STEPS)
    finally:
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = URL or str(Path(tmp) / "shared.db")
        print("store:", "PostgreSQL" if URL else "SQLite file (set CONTEXTFOLD_POSTGRES_URL for "
                                                   "PostgreSQL)")
        with ProcessPoolExecutor(WORKERS) as pool:
            written = sum(pool.map(worker, [where] * WORKERS, range(WORKERS)))
        store = open_store(where)
        try:
            stored = sum(len(store.load(f"recipe-w{w}-a{a}"))
                         for w in range(WORKERS) for a in range(AGENTS))
            print(f"{WORKERS} workers wrote {written} messages; {stored} are stored")
            assert stored == written
            hits = store.search_messages("recipe-w2-a1", "cobalt", limit=5)
            print("search in recipe-w2-a1 for 'cobalt':", [h.message.text for h in hits])
            assert len(hits) == 1 and hits[0].conversation_id == "recipe-w2-a1"
        finally:
            store.close()


if __name__ == "__main__":
    main()
