"""A LangChain agent (the real ``ChatOpenAI`` over HTTP against the test server, summaries by
the agent's own model, so summary calls reach the server too) killed mid-run and resumed on
the same thread by a new process: a new middleware, a new model and a new store object on
the same SQLite file, nothing of contextfold carried over in memory (the thread's checkpoint
is LangGraph's, kept as a durable checkpointer would keep it). The resumed run asks for no
summary of what was already summarized, and every request it sends is byte for byte the
request an uninterrupted run sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

import contextfold as cf
from langchain_contextfold import CompactionMiddleware
from openai_server import DocumentAgent
from repeatable_runs import number_replies, stop_the_clock

pytestmark = [pytest.mark.http, pytest.mark.slow]

BUDGET = cf.Budget(context_window=16_384, output_reserve=1_024)  # prepares ahead at 60%
SYSTEM = "You read documents with read_document and report their reference codes."
DOCS = 12
CONFIG: dict[str, Any] = {"configurable": {"thread_id": "t1"}, "recursion_limit": 200}


class Crash(BaseException):
    """The process dies (not an error the agent could handle)."""


def _process(server: Any, path: Path, agent: DocumentAgent, checkpointer: Any,
             crash_at: int | None) -> tuple[Any, cf.SQLiteStore]:
    """One process: its own model client, middleware and store object."""

    @tool
    def read_document(number: int) -> str:
        """Read one document by its number."""
        if crash_at is not None and number == crash_at:
            raise Crash(f"killed while reading document {number}")
        return agent.document(number)

    store = cf.SQLiteStore(path)
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="test",
                       max_retries=0)
    middleware = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET, store=store)
    graph = create_agent(model, [read_document], system_prompt=SYSTEM,
                         middleware=[middleware], checkpointer=checkpointer)
    return graph, store


def _run(openai_server_: Any, tmp: Path, crash_at: int | None) -> Any:
    agent = DocumentAgent(DOCS)
    server = openai_server_(window=16_384, responder=agent)
    checkpointer = InMemorySaver()
    graph, store = _process(server, tmp / "h.db", agent, checkpointer, crash_at)
    try:
        graph.invoke({"messages": [("user", agent.task())]}, CONFIG)
    except Crash:
        store.close()
        resumed = len(server.requests)
        graph, store = _process(server, tmp / "h.db", agent, checkpointer, None)
        graph.invoke(None, CONFIG)  # the new process takes the thread up where it stopped
        server.resumed_at = resumed
    store.close()
    return server


def test_a_killed_run_resumes_with_the_requests_of_an_uninterrupted_one(
    openai_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop_the_clock(monkeypatch)
    number_replies(monkeypatch)
    (tmp_path / "whole").mkdir()
    whole = _run(openai_server, tmp_path / "whole", None)
    number_replies(monkeypatch)
    (tmp_path / "killed").mkdir()
    killed = _run(openai_server, tmp_path / "killed", crash_at=8)

    summaries = [r for r in whole.requests if r.summary]
    assert summaries, "the run must summarize for the test to mean anything"
    assert any(r.summary for r in killed.requests[:killed.resumed_at]), \
        "the first process must have summarized before it was killed"
    assert whole.rejected == [] and killed.rejected == []
    after = killed.requests[killed.resumed_at:]
    print(f"\nkilled at request {killed.resumed_at} of {len(whole.requests)}: "
          f"{sum(r.summary for r in after)} summary requests after the resume, "
          f"{len(summaries)} in the whole run")
    # the agent's requests in order; summary requests made while preparing ahead run in
    # the background, so their place among the agent's requests is the scheduler's
    assert [r.raw for r in killed.agent_requests] == [r.raw for r in whole.agent_requests]
    # together the two processes asked for the summaries one process asks for: nothing
    # summarized before the kill was summarized again
    assert sorted(r.raw for r in killed.requests if r.summary) == \
        sorted(r.raw for r in summaries)
