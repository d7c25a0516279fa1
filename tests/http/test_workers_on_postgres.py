"""Three workers take the model calls of one thread in turn, as behind a load balancer: each
its own ``with_compaction`` model over the real ``ChatOpenAI`` (HTTP, the test server) and
its own ``PostgresStore`` object on one database. Each takes up the compaction state the
previous worker wrote beside the messages: the requests are byte for byte those of a single
worker, and no summary is asked for twice.

The PostgreSQL server is the one ``.ci/run`` starts (``.ci/services/postgres.sh`` exports
``CONTEXTFOLD_TEST_POSTGRES_URL``); without it the test skips locally and fails in CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI

import contextfold as cf
from langchain_contextfold import with_compaction
from openai_server import DocumentAgent
from pg_scratch import scratch_schema
from repeatable_runs import number_replies, stop_the_clock

pytestmark = [pytest.mark.http, pytest.mark.slow, pytest.mark.postgres]

BUDGET = cf.Budget(context_window=16_384, output_reserve=1_024)  # prepares ahead at 60%
SYSTEM = "You read documents with read_document and report their reference codes."
THREAD: dict[str, Any] = {"configurable": {"thread_id": "t1"}}


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CONTEXTFOLD_TEST_POSTGRES_URL is not set in CI")
        pytest.skip("no PostgreSQL server: source .ci/services/postgres.sh to start one")
    with scratch_schema(url) as scoped:
        yield scoped


def _run(openai_server: Any, url: str, workers: int) -> Any:
    """An agent loop whose model calls go to ``workers`` workers in turn."""
    agent = DocumentAgent(10)
    server = openai_server(window=16_384, responder=agent)
    stores = [cf.PostgresStore(url) for _ in range(workers)]
    models = [with_compaction(ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url,
                                         api_key="test", max_retries=0),
                              policy=cf.ThresholdPolicy(), budget=BUDGET, store=store)
              .bind_tools([DocumentAgent.TOOL]) for store in stores]
    history: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage(agent.task())]
    for call in range(40):
        reply = models[call % workers].invoke(history, config=THREAD)
        history.append(reply)
        if not reply.tool_calls:
            break
        history += [ToolMessage(agent.document(c["args"]["number"]), tool_call_id=c["id"])
                    for c in reply.tool_calls]
    assert "Codes found" in str(history[-1].content)
    server.stored = stores[0].load("t1")
    for store in stores:
        store.close()
    return server


def test_three_workers_in_turn_send_what_one_worker_sends(
    openai_server: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop_the_clock(monkeypatch)
    number_replies(monkeypatch)
    with scratch_schema(pg_url.split("?")[0]) as one:
        single = _run(openai_server, one, 1)
    number_replies(monkeypatch)
    three = _run(openai_server, pg_url, 3)
    summaries = [r.raw for r in single.requests if r.summary]
    assert summaries, "the run must summarize for the test to mean anything"
    assert single.rejected == [] and three.rejected == []
    # the agent's requests in order; summary requests made while preparing ahead run in
    # the background, so their place among the agent's requests is the scheduler's
    assert [r.raw for r in three.agent_requests] == [r.raw for r in single.agent_requests]
    assert sorted(r.raw for r in three.requests if r.summary) == sorted(summaries)
    assert [m.text for m in three.stored] == [m.text for m in single.stored]
