"""CompactionMiddleware and the LangGraph hooks: idle, overflow retry, stream events."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import tool
from lc_fakes import COUNTER, Request, ToolCallingFakeModel, big_result, tool_round

import contextfold as cf
from contextfold.testing import ScriptedSummarizer, assert_valid_within
from langchain_contextfold import (
    COMPACTION_EVENT,
    CompactionHook,
    CompactionMiddleware,
    compact_context_tool_for,
    pin,
    to_core,
)
from langchain_contextfold._middleware import RUN_FIELD
from spy_counting import spy_counter

BUDGET = cf.Budget(context_window=12_000, output_reserve=2_000)


@tool
def fetch_page(page: int, part: int = 0) -> str:
    """Fetch one part of a page (large)."""
    return big_result(page, part, 1500)


def middleware(policy: Any = None) -> CompactionMiddleware:
    return CompactionMiddleware(policy=policy or cf.ThresholdPolicy(), budget=BUDGET,
                                counter=COUNTER, summarizer=cf.ExtractiveSummarizer())


def loop_history(rounds: int, prompt: bool = True) -> list[BaseMessage]:
    history: list[BaseMessage] = [HumanMessage("Fetch the pages")] if prompt else []
    for page in range(rounds):
        reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"c{page}"}])
        history += [reply, *tool_round(reply, 800)]
    return history


class Handler:
    """Plays the model behind the middleware: records requests, fails on demand."""

    def __init__(self, failures: list[Exception] | None = None) -> None:
        self.requests: list[ModelRequest] = []
        self.failures = list(failures or [])

    def __call__(self, request: ModelRequest) -> ModelResponse[Any]:
        self.requests.append(request)
        if self.failures:
            raise self.failures.pop(0)
        return ModelResponse(result=[AIMessage("ok", usage_metadata={
            "input_tokens": 100, "output_tokens": 1, "total_tokens": 101})])

    def tokens(self, i: int) -> int:
        request = self.requests[i]
        messages = [request.system_message, *request.messages] if request.system_message \
            else request.messages
        return COUNTER.count_messages(to_core(messages))


def request_for(messages: list[BaseMessage], system: str | None = "You fetch pages.",
                run: str = "run-test") -> Any:
    """A model request of an agent run without a thread id (``before_agent`` gave the run
    the key ``run``)."""
    return ModelRequest(model=ToolCallingFakeModel(), messages=messages,
                        system_message=SystemMessage(system) if system else None,
                        tools=[fetch_page], state={"messages": messages, RUN_FIELD: run})


@contextmanager
def in_thread(thread_id: str) -> Iterator[None]:
    """Hooks called here see a run config naming ``thread_id``, as inside an agent run."""
    token = var_child_runnable_config.set({"configurable": {"thread_id": thread_id}})
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def test_request_is_compacted_and_the_state_is_not() -> None:
    history = loop_history(30)
    request = request_for(history)
    handler = Handler()
    result = middleware().wrap_model_call(request, handler)
    assert result.result[0].content == "ok"
    sent = handler.requests[0]
    assert sent.system_message is request.system_message  # the prompt is kept as is
    assert request.messages is history and len(history) == 61  # the state is untouched
    sent_tokens = COUNTER.count_messages(to_core(sent.messages))
    assert sent_tokens < COUNTER.count_messages(to_core(history))
    assert_valid_within(to_core([sent.system_message, *sent.messages]), BUDGET,
                                   COUNTER, COUNTER.count_tools(
                                       middleware().engine.tool_dicts([fetch_page])))


def test_a_resumed_thread_tokenizes_nothing_it_counted(tmp_path: Any) -> None:
    """A new process resumes a thread from its checkpoint (the same messages and ids,
    converted again) with a new middleware and store object on the same file: the first
    call reuses the counts the store kept and tokenizes none of those messages."""
    history = loop_history(30)
    for i, message in enumerate(history):
        message.id = f"lc-{i}"  # as LangGraph's reducer ids them

    def process(messages: list[BaseMessage]) -> list[cf.Message]:
        counter, spy = spy_counter()
        store = cf.SQLiteStore(tmp_path / "h.db")
        hook = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET,
                                    counter=counter, summarizer=cf.ExtractiveSummarizer(),
                                    store=store)
        with in_thread("t1"):
            hook.wrap_model_call(request_for([m.model_copy(deep=True) for m in messages]),
                                 Handler())
        store.close()
        return spy.tokenized(to_core(messages))

    first = process(history[:41])
    assert len(first) > 10
    resumed = process(history)
    assert resumed and [m for m in resumed if m in first] == []


def test_overflow_is_retried_with_forced_compaction() -> None:
    history = loop_history(6)
    handler = Handler([ContextOverflowError("prompt is too long: 9000 tokens > 4000 maximum")])
    result = middleware(cf.TruncationPolicy()).wrap_model_call(request_for(history), handler)
    assert result.result[0].content == "ok"
    assert len(handler.requests) == 2 and handler.tokens(1) < handler.tokens(0)


async def test_async_overflow_is_retried() -> None:
    history = loop_history(6)
    handler = Handler([ContextOverflowError("context window exceeded")])

    async def ahandler(request: ModelRequest) -> ModelResponse[Any]:
        return handler(request)

    mw = middleware(cf.TruncationPolicy())
    result = await mw.awrap_model_call(request_for(history), ahandler)
    assert result.result[0].content == "ok" and len(handler.requests) == 2


def test_idle_conversation_ends_the_agent_loop() -> None:
    """No real prompt in sight: two nudged calls, then the loop ends."""
    mw = middleware(cf.LoopSlicePolicy(max_context_messages=3))
    handler = Handler()
    history = loop_history(3, prompt=False)
    results = []
    for _ in range(4):
        results.append(mw.wrap_model_call(request_for(history), handler))
        history = [*history, AIMessage("still working")]
    assert len(handler.requests) == 2
    # (the slice's one-line notices of what it left out are human messages too)
    nudges = [m for r in handler.requests for m in r.messages if isinstance(m, HumanMessage)
              and " removed" not in str(m.content)]
    assert len(nudges) == 2
    idle = results[2]
    assert isinstance(idle, AIMessage) and not idle.tool_calls and "idle" in str(idle.content)


def test_compaction_events_reach_the_custom_stream() -> None:
    model = ToolCallingFakeModel(rounds=12)
    agent = create_agent(model, [fetch_page], system_prompt="You fetch pages.",
                         middleware=[middleware()])
    custom = [chunk for mode, chunk in agent.stream(
        {"messages": [HumanMessage("Fetch")]}, config={"recursion_limit": 100},
        stream_mode=["custom", "values"]) if mode == "custom"]
    reports = [c[COMPACTION_EVENT] for c in custom if COMPACTION_EVENT in c]
    assert reports and all(r["tokens_after"] <= BUDGET.input_budget for r in reports)


async def test_compaction_events_reach_astream_events() -> None:
    model = ToolCallingFakeModel(rounds=12)
    agent = create_agent(model, [fetch_page], system_prompt="You fetch pages.",
                         middleware=[middleware()])
    names = [e["name"] async for e in agent.astream_events(
        {"messages": [HumanMessage("Fetch")]}, config={"recursion_limit": 100}, version="v2")
        if e["event"] == "on_custom_event"]
    assert names and set(names) == {COMPACTION_EVENT}


def test_threads_are_compacted_apart() -> None:
    model = ToolCallingFakeModel(rounds=0, check_sequence=False)
    mw = middleware()
    agent = create_agent(model, [fetch_page], middleware=[mw])
    for thread in ("a", "b"):
        agent.invoke({"messages": [HumanMessage("x")]},
                     config={"configurable": {"thread_id": thread}})
    assert {"a", "b"} <= set(mw.engine.conversations.keys())


def test_pre_model_hook_never_returns_an_empty_list() -> None:
    hook = CompactionHook(policy=cf.TruncationPolicy(), budget=BUDGET, counter=COUNTER,
                          tools=[], system_prompt=None)
    assert hook._pre({"messages": []}, {}) == {"llm_input_messages": []}
    out = hook._pre({"messages": loop_history(20)}, {})["llm_input_messages"]
    assert out and cf.validate(to_core(out)) == []


def test_post_model_hook_calibrates() -> None:
    hook = CompactionHook(policy=cf.TruncationPolicy(), budget=BUDGET, counter=COUNTER,
                          tools=[], system_prompt=None)
    history = loop_history(2)
    hook._pre({"messages": history}, {"configurable": {"thread_id": "t"}})
    reply = AIMessage("x", usage_metadata={"input_tokens": 9_999, "output_tokens": 5,
                                           "total_tokens": 10_004})
    hook._post({"messages": [*history, reply]}, {"configurable": {"thread_id": "t"}})
    compactor = hook.engine.conversations.get("t").compactor
    assert compactor._known == 9_999 and compactor.last_output_tokens == 5


def test_react_agent_idle_and_deprecation_are_handled() -> None:
    from langgraph.prebuilt import create_react_agent

    hook = CompactionHook(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                          summarizer=cf.ExtractiveSummarizer(), tools=[fetch_page],
                          system_prompt=None)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        agent = create_react_agent(ToolCallingFakeModel(rounds=3), [fetch_page],
                                   pre_model_hook=hook.pre_model_hook)
    state = agent.invoke({"messages": [HumanMessage("go")]})
    assert state["messages"][-1].content.startswith("Done after 3")


@pytest.mark.parametrize("system", [None, "Be brief."])
def test_system_prompt_variants(system: str | None) -> None:
    handler = Handler()
    middleware().wrap_model_call(request_for(loop_history(25), system), handler)
    sent = handler.requests[0]
    assert (sent.system_message is None) == (system is None)
    assert not isinstance(sent.messages[0], SystemMessage)


def test_hook_compactions_reach_the_custom_stream() -> None:
    from langgraph.prebuilt import create_react_agent

    hook = CompactionHook(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                          summarizer=cf.ExtractiveSummarizer(), tools=[fetch_page],
                          system_prompt=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(ToolCallingFakeModel(rounds=12), [fetch_page],
                                   pre_model_hook=hook.pre_model_hook)
    custom = [chunk for mode, chunk in agent.stream(
        {"messages": [HumanMessage("Fetch")]}, config={"recursion_limit": 100},
        stream_mode=["custom", "values"]) if mode == "custom"]
    reports = [c[COMPACTION_EVENT] for c in custom if COMPACTION_EVENT in c]
    assert reports and all(r["tokens_after"] <= BUDGET.input_budget for r in reports)


class SummarizingFake(ToolCallingFakeModel):
    """Answers summary prompts with a summary; records them."""

    def _decide(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        from langchain_contextfold._summarizer import SUMMARY_SYSTEM_PROMPT

        assert messages[0].content == SUMMARY_SYSTEM_PROMPT
        self.requests.append(Request(list(messages), tools))
        return AIMessage("TASK: fetch the pages. PROGRESS: pages 0-29 fetched.")


def test_summaries_come_from_the_agents_model_by_default() -> None:
    model = SummarizingFake(check_sequence=False)
    mw = CompactionMiddleware(policy=cf.SummaryPolicy(), budget=BUDGET, counter=COUNTER)
    handler = Handler()
    request = request_for(loop_history(30)).override(model=model)
    mw.wrap_model_call(request, handler)
    assert model.requests, "the agent's model was asked for the summary"
    sent = "\n".join(str(m.content) for m in handler.requests[0].messages)
    assert "PROGRESS: pages 0-29 fetched." in sent


@pytest.mark.parametrize("policy", [cf.ThresholdPolicy(), cf.TruncationPolicy(),
                                    cf.LoopSlicePolicy()], ids=lambda p: p.name)
def test_a_pinned_message_reaches_the_model_verbatim(policy: cf.Policy) -> None:
    rule = pin(HumanMessage("House rule: quote case CASE-77120 in every answer."))
    history = loop_history(30)
    history.insert(1, rule)
    history.insert(2, AIMessage("Understood."))
    handler = Handler()
    middleware(policy).wrap_model_call(request_for(history), handler)
    sent = handler.requests[0].messages
    assert COUNTER.count_messages(to_core(sent)) < COUNTER.count_messages(to_core(history))
    assert [m.content for m in sent if to_core([m])[0].is_pinned] == [rule.content]
    assert not to_core([HumanMessage("plain")])[0].is_pinned
    assert pin(rule) == rule and "contextfold" not in HumanMessage("x").additional_kwargs


def test_the_model_can_ask_for_a_compaction_with_a_focus() -> None:
    summarizer = ScriptedSummarizer(default="TASK: fetch pages\nDATA: page 3")
    mw = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                              summarizer=summarizer)
    history = loop_history(6)  # well below the trigger
    handler = Handler()
    mw.wrap_model_call(request_for(history), handler)
    tool = compact_context_tool_for(mw)
    assert tool.name == "compact_context" and list(tool.args) == ["focus"]
    # The agent calls the tool: its call and result join the conversation.
    call = {"name": "compact_context", "args": {"focus": "what page 3 said"}, "id": "cc"}
    answer = tool.invoke({"focus": "what page 3 said"})
    assert "page 3" in answer
    history += [AIMessage("", tool_calls=[call]),
                ToolMessage(answer, tool_call_id="cc", name="compact_context")]
    mw.wrap_model_call(request_for(history), handler)
    first, second = (handler.tokens(i) for i in range(2))
    assert second < first
    assert [("what page 3 said" in r.instructions) for r in summarizer.requests] == [True]
    mw.wrap_model_call(request_for(history), handler)  # served once: no compaction again
    assert len(summarizer.requests) == 1
    with pytest.raises(cf.errors.ConfigurationError):
        compact_context_tool_for(object())
