"""CompactingLLM: every model call of a long agent run is valid and within budget."""

from __future__ import annotations

from typing import Any

import pytest
from li_fakes import COUNTER, EventCollector, Overflow, Request, ScriptedAgentLLM, page_text
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool

import contextfold as cf
from contextfold.testing import ScriptedSummarizer
from llama_index.memory.contextfold import (
    CompactingLLM,
    CompactionAppliedEvent,
    CompactionStartedEvent,
    from_llama_index,
    is_context_overflow,
)

BUDGET = cf.Budget(context_window=6000, output_reserve=500)
SYSTEM = "You are a careful analyst. Read every page before answering."


def fetch_page(page: int) -> str:
    """Fetch one page of the quarterly report."""
    return page_text(page, words=240)


TOOL = FunctionTool.from_defaults(fn=fetch_page, name="fetch_page")


def _assert_every_request_fits(inner: ScriptedAgentLLM, limit: int) -> None:
    assert inner.requests, "the model was never called"
    for i, request in enumerate(inner.requests):
        assert cf.validate(request.core) == [], f"request {i} is invalid"
        assert request.tokens <= limit, f"request {i}: {request.tokens} > {limit}"


def _policies() -> list[Any]:
    return [cf.ThresholdPolicy(), cf.TruncationPolicy(), cf.TurnAwarePolicy()]


# -- one long FunctionAgent run ----------------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "no-stream"])
@pytest.mark.parametrize("policy", _policies(), ids=lambda p: type(p).__name__)
async def test_long_function_agent_run_stays_valid_and_within_budget(
    streaming: bool, policy: Any
) -> None:
    inner = ScriptedAgentLLM(rounds=32)
    llm = CompactingLLM(llm=inner, policy=policy, budget=BUDGET, counter=COUNTER)
    agent = FunctionAgent(tools=[TOOL], llm=llm, system_prompt=SYSTEM, streaming=streaming)
    result = await agent.run("Summarize the report.", max_iterations=200)
    assert inner.calls == 33  # 32 tool rounds and the answer
    assert "Done. Last result seen: PAGE" in str(result)
    _assert_every_request_fits(inner, BUDGET.input_budget)
    results = sum(COUNTER.count_text(fetch_page(n)) for n in range(10, 330, 10))
    assert results > 3 * BUDGET.input_budget  # without compaction this could never fit
    last = inner.requests[-1].core
    assert last[0].role == "system" and last[0].text == SYSTEM  # never evicted
    assert last[1].role == "user" and last[1].text == "Summarize the report."


async def test_without_the_wrapper_memory_alone_cannot_bound_a_run() -> None:
    # The scratchpad bypasses memory: this is why CompactingLLM exists.
    inner = ScriptedAgentLLM(rounds=30)
    agent = FunctionAgent(tools=[TOOL], llm=inner, system_prompt=SYSTEM)
    memory = ChatMemoryBuffer.from_defaults(token_limit=1000)
    await agent.run("Summarize the report.", memory=memory, max_iterations=200)
    assert max(r.tokens for r in inner.requests) > 10 * 1000


# -- sync and async calls ----------------------------------------------------------------


def _grow(history: list[ChatMessage], response: Any, llm: CompactingLLM,
          words: int = 240) -> None:
    """Append the response and run its tool calls, as an agent loop does."""
    history.append(response.message)
    for call in llm.get_tool_calls_from_response(response, error_on_no_tool_call=False):
        text = page_text(call.tool_kwargs["page"], words=words)
        history.append(ChatMessage(role="tool", content=text,
                                   additional_kwargs={"tool_call_id": call.tool_id}))


def test_sync_chat_with_tools_loop_stays_within_budget() -> None:
    inner = ScriptedAgentLLM(rounds=30)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    history = [ChatMessage(role="system", content=SYSTEM),
               ChatMessage(role="user", content="Summarize the report.")]
    for _ in range(31):
        before = [m.model_dump() for m in history]
        response = llm.chat_with_tools([TOOL], chat_history=history)
        assert [m.model_dump() for m in history] == before  # the caller's list is untouched
        _grow(history, response, llm)
    assert inner.calls == 31
    _assert_every_request_fits(inner, BUDGET.input_budget)


def test_sync_stream_chat_with_tools_loop_stays_within_budget() -> None:
    inner = ScriptedAgentLLM(rounds=30)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    history = [ChatMessage(role="user", content="Summarize the report.")]
    for _ in range(31):
        *_, last = llm.stream_chat_with_tools([TOOL], chat_history=history)
        _grow(history, last, llm)
    _assert_every_request_fits(inner, BUDGET.input_budget)


async def test_async_chat_and_stream_stay_within_budget() -> None:
    inner = ScriptedAgentLLM(rounds=30)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    history = [ChatMessage(role="user", content="Summarize the report.")]
    for i in range(31):
        if i % 2:
            response = await llm.achat_with_tools([TOOL], chat_history=history)
        else:
            stream = await llm.astream_chat_with_tools([TOOL], chat_history=history)
            async for response in stream:  # noqa: B007 - the last chunk is the response
                pass
        _grow(history, response, llm)
    _assert_every_request_fits(inner, BUDGET.input_budget)


# -- tool calling is the wrapped LLM's ---------------------------------------------------


def test_function_calling_metadata_and_tool_calls_pass_through() -> None:
    inner = MockFunctionCallingLLM()
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    assert llm.metadata.is_function_calling_model
    response = llm.chat_with_tools([TOOL], user_msg="go")
    calls = llm.get_tool_calls_from_response(response)
    assert [c.tool_name for c in calls] == ["fetch_page"]
    out = llm.predict_and_call([TOOL], user_msg="go", error_on_no_tool_call=False)
    assert "PAGE" in str(out) or out.sources


def test_tool_definitions_count_against_the_budget() -> None:
    inner = ScriptedAgentLLM(rounds=1)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    llm.chat_with_tools([TOOL], user_msg="go")
    assert inner.requests[0].tools and llm.compactor.usage(inner.requests[0].core).total > 0


# -- overflow retry and calibration ------------------------------------------------------


def test_context_overflow_is_retried_once_with_forced_compaction() -> None:
    # The provider counts 1.5x our estimate and there is no usage yet to calibrate with:
    # the estimate says "under the trigger", the provider says "too long" (layer 3).
    inner = ScriptedAgentLLM(rounds=5, usage_scale=1.5, window=BUDGET.input_budget)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    history = [ChatMessage(role="user", content="Summarize the report.")]
    n = 0
    while COUNTER.count_messages(from_llama_index(history)) < 3750:
        n += 1
        history += [
            ChatMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id=f"call_{n}", tool_name="fetch_page", tool_kwargs={"page": n})]),
            ChatMessage(role="tool", content=page_text(n, words=60),
                        additional_kwargs={"tool_call_id": f"call_{n}"}),
        ]
    estimate = COUNTER.count_messages(from_llama_index(history))
    assert estimate < BUDGET.trigger_tokens and estimate * 1.5 > BUDGET.input_budget
    response = llm.chat(history)
    assert inner.overflows == 1 and inner.calls == 1 and response.message.blocks
    first, retry = inner.requests
    assert retry.tokens < first.tokens and cf.validate(retry.core) == []
    assert int(retry.tokens * 1.5) <= BUDGET.input_budget


def test_an_overflow_that_cannot_shrink_is_raised() -> None:
    inner = ScriptedAgentLLM(rounds=3, window=20)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    with pytest.raises(cf.errors.ContextOverflowError) as caught:
        llm.chat([ChatMessage(role="user", content="hello " * 30)])
    assert isinstance(caught.value.provider_error, Overflow)
    assert inner.overflows == 1  # nothing fits under the stated 20 tokens: no second try


def test_other_errors_are_not_retried() -> None:
    class Broken(ScriptedAgentLLM):
        def chat(self, messages: Any, **kwargs: Any) -> Any:
            self.calls += 1
            raise RuntimeError("network down")

    inner = Broken()
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER)
    with pytest.raises(RuntimeError, match="network down"):
        llm.chat([ChatMessage(role="user", content="hi")])
    assert inner.calls == 1


def _second_request(report_usage: bool) -> tuple[Request, Request, int]:
    """Two calls on a history our estimate puts under the trigger and the provider (1.6x)
    over it; returns both requests and the second's full history size by our estimate."""
    inner = ScriptedAgentLLM(rounds=5, usage_scale=1.6, report_usage=report_usage)
    llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER, conversation_id="c1")
    history = [ChatMessage(role="user", content="Summarize the report.")]
    while COUNTER.count_messages(from_llama_index(history)) < 3000:
        _grow(history, llm.llm.chat_with_tools([TOOL], chat_history=history), llm, words=120)
    inner.requests.clear()
    _grow(history, llm.chat_with_tools([TOOL], chat_history=history), llm, words=20)
    _grow(history, llm.chat_with_tools([TOOL], chat_history=history), llm, words=20)
    return inner.requests[0], inner.requests[1], COUNTER.count_messages(
        from_llama_index(history[:-1]))


def test_reported_usage_calibrates_the_next_decision() -> None:
    # The provider counts 1.6x our estimate. Its reported prompt_tokens make the next
    # request compact although our own estimate of it is still under the trigger.
    first, second, estimate = _second_request(report_usage=True)
    assert estimate < BUDGET.trigger_tokens < first.tokens * 1.6
    assert len(second.core) < len(first.core)  # compacted on the reported figure
    assert cf.validate(second.core) == []
    _, blind_second, _ = _second_request(report_usage=False)
    assert len(blind_second.core) > len(first.core)  # no usage: sent whole


def test_overflow_errors_are_recognised() -> None:
    assert is_context_overflow(Overflow("x"))
    assert is_context_overflow(ValueError("prompt is too long: 210000 tokens > 200000 maximum"))
    wrapped = RuntimeError("call failed")
    wrapped.__cause__ = Overflow("x")
    assert is_context_overflow(wrapped)
    assert not is_context_overflow(ValueError("rate limited"))


# -- instrumentation ---------------------------------------------------------------------


async def test_each_compaction_emits_an_event_inside_a_span() -> None:
    root = get_dispatcher()
    collector = EventCollector(events=[])
    root.add_event_handler(collector)
    try:
        inner = ScriptedAgentLLM(rounds=20)
        llm = CompactingLLM(llm=inner, budget=BUDGET, counter=COUNTER, conversation_id="run-1")
        agent = FunctionAgent(tools=[TOOL], llm=llm, system_prompt=SYSTEM)
        await agent.run("Summarize the report.", max_iterations=100)
    finally:
        root.event_handlers.remove(collector)
    applied = [e for e in collector.events if isinstance(e, CompactionAppliedEvent)]
    started = [e for e in collector.events if isinstance(e, CompactionStartedEvent)]
    assert applied and len(started) >= len(applied)
    for event in applied:
        assert event.conversation_id == "run-1"
        assert event.span_id and event.span_id.startswith("CompactingLLM.")  # the call's
        assert event.report["tokens_after"] < event.report["tokens_before"]
        assert event.tokens_saved == event.report["tokens_saved"] > 0
        assert event.llm_calls == event.report["llm_calls"] == 0  # extractive: no model


async def test_summary_calls_are_counted_in_the_events_and_listeners() -> None:
    root = get_dispatcher()
    collector = EventCollector(events=[])
    root.add_event_handler(collector)
    summarizer = ScriptedSummarizer(default="TASK: summarize the report.\nDONE: pages read.")
    heard: list[cf.CompactionApplied] = []
    try:
        # Without preparing ahead: a preparation never used is a call no report counts.
        budget = cf.Budget(context_window=6000, output_reserve=500, prepare=None)
        llm = CompactingLLM(llm=ScriptedAgentLLM(rounds=20), budget=budget, counter=COUNTER,
                            summarizer=summarizer)
        llm.add_listener(lambda e: heard.append(e) if isinstance(e, cf.CompactionApplied)
                         else None)
        agent = FunctionAgent(tools=[TOOL], llm=llm, system_prompt=SYSTEM)
        await agent.run("Summarize the report.", max_iterations=100)
    finally:
        root.event_handlers.remove(collector)
    applied = [e for e in collector.events if isinstance(e, CompactionAppliedEvent)]
    assert summarizer.calls >= 1 and applied and len(heard) == len(applied)
    assert sum(e.llm_calls for e in applied) == summarizer.calls
    assert sum(e.llm_calls for e in heard) == summarizer.calls
