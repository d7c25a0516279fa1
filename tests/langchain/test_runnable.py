"""with_compaction: conversations, calibration, overflow retry, idle, events, binding."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableBinding, RunnableLambda, RunnableSequence
from langchain_core.tools import tool
from lc_fakes import COUNTER, Request, ToolCallingFakeModel, big_result, tool_round
from pydantic import BaseModel, Field

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.integration import SUMMARY_INSTRUCTION_OPENING, SUMMARY_SYSTEM_PROMPT
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer
from langchain_contextfold import (
    COMPACTION_EVENT,
    IDLE_EVENT,
    CompactingChatModel,
    to_core,
    with_compaction,
)
from langchain_contextfold._events import aemit, emit
from langchain_contextfold._runnable import _swap

BUDGET = cf.Budget(context_window=16_000, output_reserve=2_000)


@tool
def fetch_page(page: int, part: int = 0) -> str:
    """Fetch one part of a page (large)."""
    return big_result(page, part)


class Events(BaseCallbackHandler):
    """Collects contextfold's custom events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))


def wrapped(fake: ToolCallingFakeModel, policy: Any = None, **options: Any) -> Any:
    options.setdefault("summarizer", cf.ExtractiveSummarizer())
    return with_compaction(fake, policy=policy or cf.ThresholdPolicy(), budget=BUDGET,
                           counter=COUNTER, **options).bind_tools([fetch_page])


THREAD: dict[str, Any] = {"configurable": {"thread_id": "t1"}}
"""The config of a conversation kept across calls (a call without an id is its own)."""


def run_loop(model: Any, rounds: int, config: dict[str, Any] | None = None,
             inputs: list[list[BaseMessage]] | None = None, size: int = 6000,
             ) -> list[BaseMessage]:
    history: list[BaseMessage] = [SystemMessage("Fetch pages."), HumanMessage("Fetch them all")]
    for _ in range(rounds + 1):
        if inputs is not None:
            inputs.append(list(history))
        reply = model.invoke(history, config=config)
        history.append(reply)
        if not reply.tool_calls:
            break
        history.extend(tool_round(reply, size))
    return history


def first_compacted(fake: ToolCallingFakeModel) -> int:
    """Index of the first request the model received compacted."""
    for i, request in enumerate(fake.requests):
        if any("TRUNCATED" in m.text or m.source == "summary" for m in request.core):
            return i
    return len(fake.requests)


def test_bind_tools_puts_the_wrapper_in_front() -> None:
    model = wrapped(ToolCallingFakeModel())
    assert isinstance(model, RunnableBinding)
    assert isinstance(model.bound, CompactingChatModel)
    assert model.kwargs["tools"][0]["function"]["name"] == "fetch_page"
    rebound = model.bound.bind_tools([fetch_page])
    assert rebound.bound is model.bound  # the same conversations behind every binding


def test_chains_and_bound_models_are_wrapped_inside() -> None:
    fake = ToolCallingFakeModel(rounds=0)
    prompt = ChatPromptTemplate.from_messages([("system", "s"), MessagesPlaceholder("history")])
    chain = with_compaction(prompt | fake, policy=cf.ThresholdPolicy(), budget=BUDGET,
                            counter=COUNTER)
    assert isinstance(chain, RunnableSequence) and isinstance(chain.last, CompactingChatModel)
    reply = chain.invoke({"history": [HumanMessage("hi")]})
    assert reply.content.startswith("Done") and len(fake.requests) == 1
    bound = with_compaction(fake.bind_tools([fetch_page]), policy=cf.ThresholdPolicy(),
                            budget=BUDGET, counter=COUNTER)
    assert isinstance(bound.bound, CompactingChatModel) and bound.kwargs["tools"]


def test_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        with_compaction(ChatPromptTemplate.from_messages([("human", "x")]),
                        policy=cf.ThresholdPolicy(), budget=BUDGET)
    model = with_compaction(ToolCallingFakeModel(), policy=cf.ThresholdPolicy(), budget=BUDGET)
    with pytest.raises(ConfigurationError):
        with_compaction(model, policy=cf.ThresholdPolicy(), budget=BUDGET)
    with pytest.raises(ConfigurationError):
        with_compaction(ToolCallingFakeModel(), policy=cf.ThresholdPolicy(), budget=16_000)


def test_one_compactor_per_thread() -> None:
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake)
    for thread in ("a", "b", "a"):
        model.invoke([HumanMessage(f"task {thread}")],
                     config={"configurable": {"thread_id": thread}})
    model.invoke([HumanMessage("session")], config={"configurable": {"session_id": "s"}})
    model.invoke([HumanMessage("no key")])  # a conversation of its own, not kept
    assert model.bound.engine.conversations.keys() == ["b", "a", "s"]


def test_bounded_number_of_conversations() -> None:
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake, max_conversations=2)
    for thread in ("a", "b", "c"):
        model.invoke([HumanMessage("x")], config={"configurable": {"thread_id": thread}})
    assert model.bound.engine.conversations.keys() == ["b", "c"]


def test_reported_usage_calibrates_the_trigger() -> None:
    """A provider that counts 60% more than our estimate gets compacted earlier: at the
    first compaction our own estimate of the full input was still under the trigger."""
    exact = ToolCallingFakeModel(rounds=40)
    heavy = ToolCallingFakeModel(rounds=40, usage_scale=1.6)
    inputs: list[list[BaseMessage]] = []
    run_loop(wrapped(exact), 40, config=THREAD, size=1000)
    run_loop(wrapped(heavy), 40, config=THREAD, inputs=inputs, size=1000)
    i = first_compacted(heavy)
    assert i < first_compacted(exact) < len(exact.requests)
    tools = heavy.requests[0].tools
    estimate = COUNTER.count_messages(to_core(inputs[i])) + COUNTER.count_tools(tools)
    assert estimate <= BUDGET.trigger_tokens < estimate * 1.6


def test_overflow_compacts_with_force_and_retries() -> None:
    """The provider's real window is smaller than the budget says: every overflow is
    followed by a forced compaction and a successful retry."""
    fake = ToolCallingFakeModel(rounds=30, context_window=9_000)
    events = Events()
    history = run_loop(wrapped(fake, policy=cf.TruncationPolicy()), 30,
                       config={"callbacks": [events]})
    assert fake.overflows >= 1
    assert history[-1].content.startswith("Done after 30")
    accepted = [r for r in fake.requests if r.tokens <= 9_000]
    assert len(accepted) == 31
    forced = [d for name, d in events.events if name == COMPACTION_EVENT and d["forced"]]
    assert len(forced) >= fake.overflows


class AlwaysOverflow(ToolCallingFakeModel):
    error: str = "overflow"

    def _decide(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        super()._decide(messages, tools)  # records the request
        if self.error == "overflow":
            raise ContextOverflowError("input too long for this model")
        raise ValueError("some other failure")


def test_an_overflow_is_retried_once_then_raised_as_a_typed_error() -> None:
    fake = AlwaysOverflow(check_sequence=False)
    call = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": 0}, "id": "c0"}])
    history = [SystemMessage("Fetch pages."), HumanMessage("Fetch them all"), call,
               *tool_round(call, 6000)]
    with pytest.raises(cf.errors.ContextOverflowError) as info:
        wrapped(fake, policy=cf.TruncationPolicy()).invoke(history)
    assert len(fake.requests) == 2  # the call and one retry, compacted below the first
    assert isinstance(info.value.provider_error, ContextOverflowError)


def test_an_overflow_that_compaction_cannot_fix_says_so() -> None:
    fake = ToolCallingFakeModel(rounds=30, context_window=100)
    with pytest.raises(cf.errors.ContextOverflowError,
                       match="rejected the input as too long") as info:
        run_loop(wrapped(fake, policy=cf.TruncationPolicy()), 30)
    assert isinstance(info.value.__cause__, ContextOverflowError)


def test_other_errors_are_not_retried() -> None:
    fake = AlwaysOverflow(check_sequence=False, error="other")
    with pytest.raises(ValueError, match="some other failure"):
        run_loop(wrapped(fake), 0)
    assert len(fake.requests) == 1


def test_idle_conversation_ends_the_loop_without_calling_the_model() -> None:
    """No prompt at all (an autonomous agent): three nudges, then idle."""
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake, policy=cf.LoopSlicePolicy(max_context_messages=4))
    events = Events()
    history: list[BaseMessage] = [SystemMessage("Fetch pages on your own.")]
    for _ in range(20):
        reply = model.invoke(history, config={"callbacks": [events], **THREAD})
        history.append(reply)
        if not reply.tool_calls:
            break
        history.extend(tool_round(reply, 600))
    assert "idle" in str(history[-1].content) and not history[-1].tool_calls
    idle = [d for name, d in events.events if name == IDLE_EVENT]
    assert idle and idle[0]["conversation_id"] == "t1"
    nudged = [r for r in fake.requests if any(m.source == "nudge" for m in r.core)]
    assert len(nudged) == 2  # the third nudge turned the conversation idle
    replies = [m for m in history if isinstance(m, AIMessage)]
    assert len(fake.requests) == len(replies) - 1  # the idle reply is not a model call


def test_events_inside_and_outside_runs() -> None:
    fake = ToolCallingFakeModel(rounds=12)
    events = Events()
    run_loop(wrapped(fake), 12, config={"callbacks": [events]})
    reports = [d for name, d in events.events if name == COMPACTION_EVENT]
    assert reports, "compactions must be announced"
    for report in reports:
        assert report["conversation_id"].startswith("run-")  # no thread id: the call's own
        assert report["tokens_after"] <= BUDGET.input_budget
        assert {"method", "tokens_before", "messages_after", "targets", "duration"} <= set(report)
    run_loop(wrapped(ToolCallingFakeModel(rounds=12)), 12)  # no callbacks: nothing fails


async def test_events_in_astream_events() -> None:
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake)
    history: list[BaseMessage] = [HumanMessage("go")]
    for page in range(6):
        reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"c{page}"}])
        history += [reply, *tool_round(reply)]
    names = [e["name"] async for e in model.astream_events(history, version="v2")
             if e["event"] == "on_custom_event"]
    assert names == [COMPACTION_EVENT]


def test_store_keeps_every_message_once() -> None:
    store = cf.MemoryStore()
    fake = ToolCallingFakeModel(rounds=15)
    history = run_loop(wrapped(fake, store=store), 15,
                       config={"configurable": {"thread_id": "t1"}})
    stored = store.load("t1")
    assert [m.text for m in stored] == [m.text for m in to_core(history[:-1])]
    assert len({m.id for m in stored}) == len(stored)


class Answer(BaseModel):
    """The final answer."""

    text: str


class StructuredFake(ToolCallingFakeModel):
    """Answers every request with an ``Answer`` tool call."""

    def _decide(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        self.requests.append(Request(list(messages), tools))
        return AIMessage("", tool_calls=[{"name": "Answer", "args": {"text": "pages 0-19"},
                                          "id": f"a{len(self.requests)}"}])


def _contains(runnable: Any, kind: type) -> bool:
    found: list[Any] = []
    _swap(runnable, None, lambda m: found.append(m) or m)
    return any(isinstance(m, kind) for m in found)


def test_structured_output_goes_through_the_wrapper() -> None:
    fake = StructuredFake(check_sequence=False)
    model = with_compaction(fake, policy=cf.ThresholdPolicy(), budget=BUDGET, counter=COUNTER,
                            summarizer=cf.ExtractiveSummarizer())
    structured = model.with_structured_output(Answer)
    history = run_loop(wrapped(ToolCallingFakeModel(rounds=20)), 20)
    assert structured.invoke(history) == Answer(text="pages 0-19")
    assert fake.requests[-1].tokens <= BUDGET.input_budget
    assert fake.requests[-1].tools[0]["function"]["name"] == "Answer"


def test_provider_structured_output_keeps_the_provider_binding() -> None:
    from langchain_openai import ChatOpenAI

    openai = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")  # type: ignore[arg-type]
    model = with_compaction(openai, policy=cf.ThresholdPolicy(), budget=BUDGET)
    structured = model.with_structured_output(Answer)  # json_schema: a response_format binding
    assert _contains(structured, CompactingChatModel)
    binding = structured.first if isinstance(structured, RunnableSequence) else structured
    assert isinstance(binding, RunnableBinding) and "response_format" in binding.kwargs


def _task(i: int) -> list[BaseMessage]:
    history: list[BaseMessage] = [HumanMessage(f"task {i}")]
    for page in range(25):
        reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"page": page},
                                           "id": f"t{i}_c{page}"}])
        history += [reply, *tool_round(reply, 1500)]
    return history


async def test_concurrent_calls_on_one_conversation_never_mix_histories() -> None:
    """batch/abatch without thread ids share the default conversation: each request must
    still be built from its own input only."""
    def slow(request: SummaryRequest) -> str:
        time.sleep(0.005)  # lets another call run in the middle of this compaction
        return "summary of " + request.messages[0].text

    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake, summarizer=ScriptedSummarizer(default=slow))
    inputs = [_task(i) for i in range(8)]
    model.batch(inputs, config={"max_concurrency": 8})
    await model.abatch(inputs)
    assert len(fake.requests) == 16
    for request in fake.requests:
        task = next(m.text for m in request.core if m.role == "user" and m.text.startswith("task"))
        owner = task.split()[1]
        ids = {m.tool_call_id for m in request.core if m.role == "tool"}
        assert ids and all(i.startswith(f"t{owner}_") for i in ids)
        assert cf.validate(request.core) == []


async def test_idle_reply_when_streaming() -> None:
    fake = ToolCallingFakeModel(rounds=1000, check_sequence=False)
    model = wrapped(fake, policy=cf.LoopSlicePolicy(max_context_messages=2))
    history: list[BaseMessage] = [SystemMessage("Work alone.")]
    chunks: list[Any] = []
    for _ in range(3):  # two nudged calls reach the model, the third nudge goes idle
        chunks = [c async for c in model.astream(history, config=THREAD)]
        history.append(AIMessage("working"))
    assert len(fake.requests) == 2
    assert "idle" in "".join(str(c.content) for c in chunks)
    assert not any(c.tool_call_chunks for c in chunks)
    assert "idle" in str(next(iter(model.stream(history, config=THREAD))).content)


def test_an_event_payload_is_made_only_for_someone_who_receives_it() -> None:
    made: list[int] = []

    def payload() -> dict[str, Any]:
        made.append(1)
        return {"n": len(made)}

    emit(COMPACTION_EVENT, payload)  # outside any run, no stream writer
    emit(COMPACTION_EVENT, payload, config={"callbacks": []})
    assert made == []
    RunnableLambda(lambda x: emit(COMPACTION_EVENT, payload)).invoke(1)  # a run, no handler
    assert made == []

    events = Events()
    RunnableLambda(lambda x: emit(COMPACTION_EVENT, payload)).invoke(
        1, config={"callbacks": [events]})
    written: list[Any] = []
    emit(COMPACTION_EVENT, payload, writer=written.append)
    assert made == [1, 1]  # once per event, the same data for every receiver
    assert events.events == [(COMPACTION_EVENT, {"n": 1})]
    assert written == [{COMPACTION_EVENT: {"n": 2}}]

    async def inside(x: int) -> None:
        await aemit(COMPACTION_EVENT, payload)

    asyncio.run(RunnableLambda(inside).ainvoke(1))
    assert made == [1, 1]
    asyncio.run(RunnableLambda(inside).ainvoke(1, config={"callbacks": [events]}))
    assert made == [1, 1, 1] and events.events[-1] == (COMPACTION_EVENT, {"n": 3})


class PaidModel(ToolCallingFakeModel):
    """The agent's model, which also answers summary requests (and counts them): what
    with_compaction summarizes with when no summarizer is given."""

    summaries: int = 0
    cache_true: list[tuple[list[BaseMessage], list[dict[str, Any]], Any]] = Field(
        default_factory=list)
    """Cache-true summary requests: their messages, tools, and the agent request before."""

    def _decide(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        cache_true = bool(messages) and str(messages[-1].content).startswith(
            SUMMARY_INSTRUCTION_OPENING)
        if messages and (messages[0].content == SUMMARY_SYSTEM_PROMPT or cache_true):
            self.summaries += 1
            if cache_true:
                self.cache_true.append((list(messages), tools, self.requests[-1]))
            return AIMessage("TASK: fetch every page.\nDONE: pages fetched so far.")
        return super()._decide(messages, tools)


def test_summaries_are_written_by_the_wrapped_model_and_every_call_is_counted() -> None:
    fake = PaidModel(rounds=12)
    events = Events()
    # Without preparing ahead: a preparation the run never uses is a call no report counts.
    budget = cf.Budget(context_window=16_000, output_reserve=2_000, prepare=None)
    model = with_compaction(fake, policy=cf.ThresholdPolicy(), budget=budget,
                            counter=COUNTER).bind_tools([fetch_page])  # no summarizer given
    # One conversation across calls (a thread id): a call without one is a conversation of
    # its own, with no previous request to repeat.
    run_loop(model, 12, config={"callbacks": [events], "configurable": {"thread_id": "t"}})
    reports = [d for name, d in events.events if name == COMPACTION_EVENT]
    assert fake.summaries >= 1  # the paid model wrote the summaries
    assert sum(r["llm_calls"] for r in reports) == fake.summaries
    assert fake.calls == 13  # and the agent's own calls are apart from them
    # Each summary request repeated the agent's previous request (messages and tools, as
    # the provider received them) with the instruction appended: cache-true.
    assert fake.cache_true  # today's form only where the whole request would not fit
    for messages, tools, previous in fake.cache_true:
        assert tools == previous.tools
        n = len(previous.messages)
        assert [m.model_dump() for m in messages[:n]] == [m.model_dump()
                                                          for m in previous.messages]
        assert len(messages) >= n + 1
