"""The known failures of LangChain's own trimming and summarizing do not happen here.

Each test first shows the peer's failure on the same input (so the test would notice if
the peer changed), then shows that what the model receives through contextfold is valid.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import tool
from lc_fakes import COUNTER, ToolCallingFakeModel, big_result

import contextfold as cf
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories
from langchain_contextfold import CompactionMiddleware, from_core, to_core, with_compaction

BUDGET = cf.Budget(context_window=6_000, output_reserve=1_000)


def call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"name": name, "args": {"q": call_id}, "id": call_id, "type": "tool_call"}


def result(call_id: str, size: int = 3000) -> ToolMessage:
    return ToolMessage(big_result(int(call_id[1:]), 0, size), tool_call_id=call_id, name="lookup")


def send(messages: list[BaseMessage], policy: Any = None, **options: Any) -> list[cf.Message]:
    """What the model receives when ``messages`` go through ``with_compaction``."""
    fake = ToolCallingFakeModel(rounds=0, check_sequence=False)
    options.setdefault("summarizer", cf.ExtractiveSummarizer())
    model = with_compaction(fake, policy=policy or cf.ThresholdPolicy(), budget=BUDGET,
                            counter=COUNTER, **options)
    model.invoke(messages)
    request = fake.requests[-1]
    assert_valid_within(request.core, BUDGET, COUNTER)
    return request.core


def test_no_leading_orphaned_tool_message() -> None:
    history: list[BaseMessage] = [HumanMessage("Look these up")]
    for i in range(6):
        history += [AIMessage("", tool_calls=[call(f"c{i}")]), result(f"c{i}")]
    history.append(AIMessage("Here is what I found."))
    room = count_tokens_approximately(history[-2:])  # the last result and the answer
    trimmed = trim_messages(history, max_tokens=room, strategy="last",
                            token_counter=count_tokens_approximately)
    assert isinstance(trimmed[0], ToolMessage)  # the peer: a leading orphaned result
    assert any(p.code == "orphan_tool_result" for p in cf.validate(to_core(trimmed)))
    for policy in (cf.ThresholdPolicy(), cf.TruncationPolicy(), cf.TurnAwarePolicy()):
        sent = send(history, policy)
        first = next(m for m in sent if m.role != "system")
        assert first.role == "user"


def test_no_orphan_when_results_of_different_ai_messages_sit_together() -> None:
    """Fan-out (parallel branches) leaves two calls before both results."""
    history: list[BaseMessage] = [HumanMessage("Compare a and b")]
    for i in range(4):
        history += [AIMessage("", tool_calls=[call(f"c{i}")]), result(f"c{i}")]
    history += [AIMessage("", tool_calls=[call("c7")]), AIMessage("", tool_calls=[call("c8")]),
                result("c7"), result("c8")]
    cutoff = SummarizationMiddleware._find_safe_cutoff_point(history, len(history) - 1)
    kept = history[cutoff:]
    assert any(p.code == "orphan_tool_result" for p in cf.validate(to_core(kept)))  # the peer
    for policy in (cf.ThresholdPolicy(), cf.TruncationPolicy(), cf.TurnAwarePolicy()):
        sent = send(history, policy)
        ids = [m.tool_call_id for m in sent if m.role == "tool"]
        assert "c8" in ids and len(ids) == len(set(ids))


def test_a_failed_summary_never_deletes_history_or_becomes_the_summary() -> None:
    failing = ScriptedSummarizer(default=lambda request: (_ for _ in ()).throw(
        RuntimeError("summary backend down: HTTP 503")))
    history: list[BaseMessage] = [SystemMessage("You research."), HumanMessage("Go")]
    for i in range(8):
        history += [AIMessage("", tool_calls=[call(f"c{i}")]), result(f"c{i}")]
    before = list(history)
    sent = send(history, cf.ThresholdPolicy(), summarizer=failing)
    assert failing.calls >= 1
    assert all("503" not in m.text and "backend down" not in m.text for m in sent)
    assert history == before and all(a is b for a, b in zip(history, before, strict=True))
    assert any(m.tool_call_id == "c7" for m in sent)  # the newest loop is still there


def _lookup(page: int, part: int = 0) -> str:
    return big_result(page, part, 1200)


lookup = tool("lookup", description="Look something up. " + "Returns a long report. " * 150)(
    _lookup)


def test_system_prompt_and_tools_are_counted() -> None:
    """At some call the messages alone fit the budget but the request with the system
    prompt and the tool definitions does not: the peer (which counts the state's messages)
    would not act; the request the model receives still fits."""
    system = "You are a careful analyst. " * 300  # about 1,500 tokens
    WIDER = cf.Budget(context_window=8_000, output_reserve=1_000)
    model = ToolCallingFakeModel(rounds=12, tool_name="lookup")
    mw = CompactionMiddleware(policy=cf.ThresholdPolicy(), budget=WIDER, counter=COUNTER,
                              summarizer=cf.ExtractiveSummarizer())
    agent = create_agent(model, [lookup], system_prompt=system, middleware=[mw])
    state = agent.invoke({"messages": [HumanMessage("Look up everything")]},
                         config={"recursion_limit": 200})
    assert state["messages"][-1].content.startswith("Done after 12")
    assert all(r.tokens <= WIDER.input_budget for r in model.requests)
    fixed = COUNTER.count_tools(model.requests[0].tools) + COUNTER.count_message(
        to_core([SystemMessage(system)])[0])
    assert fixed > WIDER.input_budget // 3  # the prompt and the tools are a big share

    def count(messages: list[BaseMessage]) -> int:
        return COUNTER.count_messages(to_core(messages))

    peer = SummarizationMiddleware(model, trigger=("tokens", WIDER.input_budget),
                                   token_counter=count)
    full = state["messages"]
    starts = [i for i, m in enumerate(full) if isinstance(m, AIMessage)]
    hidden = [i for i in starts if count(full[:i]) <= WIDER.input_budget < count(full[:i]) + fixed]
    assert hidden, "no call where only the system prompt and tools made the difference"
    assert peer.before_model({"messages": full[:hidden[0]]}, None) is None  # type: ignore[arg-type]


def test_parallel_tool_calls_are_never_split_or_duplicated() -> None:
    history: list[BaseMessage] = [HumanMessage("Fan out")]
    for i in range(5):
        ids = [f"c{i * 10 + k}" for k in range(3)]
        history += [AIMessage("", tool_calls=[call(c) for c in ids]),
                    *[result(c, 1200) for c in ids]]
    for policy in (cf.ThresholdPolicy(), cf.TruncationPolicy(), cf.TurnAwarePolicy()):
        sent = send(history, policy)
        _assert_whole_groups(sent)


def _assert_whole_groups(sent: list[cf.Message]) -> None:
    for i, m in enumerate(sent):
        if m.tool_calls:
            answered = [r.tool_call_id for r in sent[i + 1:i + 1 + len(m.tool_calls)]]
            assert sorted(answered) == sorted(c.id for c in m.tool_calls)
    results = [m.tool_call_id for m in sent if m.role == "tool"]
    assert len(results) == len(set(results))


@given(histories(max_turns=5, max_tool_chars=12_000, images=False))
def test_any_history_reaches_the_model_valid_and_within_budget(
    history: list[cf.Message],
) -> None:
    try:
        sent = send(from_core(history))
    except cf.BudgetExceededError:
        return  # the protected minimum does not fit: said so, nothing invalid was sent
    _assert_whole_groups(sent)


@given(histories(max_turns=4, max_tool_chars=8_000, images=False, imperfect=True))
def test_defective_histories_are_repaired_in_flight(history: list[cf.Message]) -> None:
    lc = from_core(history)
    snapshot = [m.model_copy(deep=True) for m in lc]
    try:
        send(lc, cf.TruncationPolicy())
    except cf.BudgetExceededError:
        return
    assert lc == snapshot  # the caller's messages are untouched
