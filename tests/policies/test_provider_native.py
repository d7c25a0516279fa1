"""The provider passes without a provider: their request fields, their configuration checks,
and what they do to a history (the end-to-end tests against the loopback Messages API server
are in ``tests/anthropic_http/test_anthropic_provider_native.py``)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.policy import OpaquePart
from contextfold.providers import (
    ANTHROPIC_COMPACTION_BETA,
    ANTHROPIC_CONTEXT_EDITING_BETA,
    AnthropicCompaction,
    AnthropicContextEditing,
    request_fields,
)
from contextfold.testing import histories, run_policy

BUDGET = cf.Budget(context_window=100_000)


def test_a_pipeline_sends_the_fields_of_its_provider_passes_merged() -> None:
    policy = cf.Pipeline(AnthropicContextEditing(trigger=30_000, keep=2,
                                                 keep_thinking_turns=1),
                         AnthropicCompaction(trigger=60_000, pause_after_compaction=True),
                         cf.ThresholdPolicy())
    fields = request_fields(policy)
    assert fields["betas"] == [ANTHROPIC_CONTEXT_EDITING_BETA, ANTHROPIC_COMPACTION_BETA]
    assert [e["type"] for e in fields["context_management"]["edits"]] == [
        "clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112"]
    assert fields["context_management"]["edits"][2] == {
        "type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 60_000},
        "pause_after_compaction": True}
    assert request_fields(cf.ThresholdPolicy()) == {}
    assert request_fields(cf.Pipeline(cf.TruncationPolicy())) == {}


@pytest.mark.parametrize("make", [
    lambda: AnthropicCompaction(trigger=0),
    lambda: AnthropicContextEditing(keep=-1),
    lambda: AnthropicContextEditing(exclude_tools="search"),
])
def test_bad_configuration_is_refused(make: object) -> None:
    with pytest.raises(ConfigurationError):
        make()  # type: ignore[operator]


def _history(compacted_at: int | None) -> list[cf.Message]:
    out = [cf.Message(role="system", content="You read documents."),
           cf.Message(role="user", content="Read documents 1 to 4.")]
    for k in range(1, 5):
        parts: tuple[OpaquePart, ...] = ()
        if k == compacted_at:
            parts = (OpaquePart(kind="compaction", data={
                "type": "compaction", "content": "Read 1-3: REF-AAAA-0001 ...",
                "signature": "sig"}),)
        out.append(cf.Message(role="assistant", content=parts, tool_calls=(cf.ToolCall(
            id=f"t{k}", name="read_document", arguments=f'{{"number": {k}}}'),)))
        out.append(cf.Message(role="tool", content=f"Document {k}. REF-AAAA-000{k}",
                              tool_call_id=f"t{k}", name="read_document"))
    return out


def test_without_a_compaction_block_the_history_goes_out_as_it_is() -> None:
    history = _history(None)
    assert run_policy(AnthropicCompaction(), history, budget=BUDGET)[0].messages is history


def test_what_the_block_replaced_goes_behind_one_handle_and_the_block_stays() -> None:
    history = _history(3)
    kept = copy.deepcopy(history)
    result, _ = run_policy(AnthropicCompaction(), history, budget=BUDGET)
    out = result.messages
    assert history == kept  # the input is never changed
    assert cf.validate(out) == []
    block = next(m for m in out if not isinstance(m.content, str) and m.content)
    assert block.is_pinned and block.content == history[6].content
    assert [m.role for m in out[:3]] == ["system", "user", "assistant"]
    assert out[2] is block
    dropped = [t for t in result.targets if t.method == "dropped"]
    assert [t.index for t in dropped] == [2, 3, 4, 5] and len({t.handle for t in dropped}) == 1
    ledger = next(m for m in out if m.source == "ledger")
    assert out.index(ledger) == 4  # after the block's turn (its call and result)
    assert str(dropped[0].handle) in ledger.text
    assert result.details["provider"]["replaced"] == 4


def test_a_failed_provider_compaction_leaves_the_history_and_says_why() -> None:
    from contextfold.providers import OpenAIResponsesCompaction

    def down(messages: object) -> list[cf.Message]:
        raise ConnectionError("compaction endpoint down")

    from contextfold.policy import CompactionContext

    history = _history(None)
    context = CompactionContext(budget=BUDGET, counter=cf.counter_for_model(), force=True)
    outcome, _ = run_policy(OpenAIResponsesCompaction(down), history, context)
    assert outcome.messages is history
    assert "compaction endpoint down" in outcome.notes[0]


def test_a_provider_compaction_keeps_the_item_and_the_callers_user_messages() -> None:
    from contextfold.providers import OpenAIResponsesCompaction

    item = OpaquePart(kind="compaction", data={"type": "compaction", "id": "cmp_9",
                                               "encrypted_content": "xyz"})

    def compact(messages: list[cf.Message]) -> list[cf.Message]:
        users = [cf.Message(role="user", content=m.text) for m in messages if m.role == "user"]
        return [*users, cf.Message(role="assistant", content=(item,))]

    history = _history(None)
    from contextfold.policy import CompactionContext

    context = CompactionContext(budget=BUDGET, counter=cf.counter_for_model(), force=True)
    outcome, requests = run_policy(OpenAIResponsesCompaction(compact), history, context)
    out = list(outcome.messages)
    assert out[:2] == history[:2] and out[1] is history[1]  # the caller's own request
    assert out[2].content == (item,)
    assert out[3].source == "ledger" and cf.validate(out) == []
    assert {t.index for t in outcome.targets} == set(range(2, 10))
    assert outcome.details["provider"]["replaced"] == 8
    assert requests[0].purpose == "openai_compact"


@given(histories(max_turns=5, max_tool_chars=2_000), st.data())
def test_a_compaction_block_anywhere_leaves_a_valid_history_and_the_block_verbatim(
    history: list[cf.Message], data: st.DataObject,
) -> None:
    from dataclasses import replace

    from contextfold.policy import CompactionContext

    assistants = [i for i, m in enumerate(history) if m.role == "assistant"]
    if not assistants:
        return
    at = data.draw(st.sampled_from(assistants))
    block = OpaquePart(kind="compaction", data={"type": "compaction", "content": "summary",
                                                "signature": "sig"})
    parts = () if isinstance(history[at].content, str) else history[at].content
    given_history = [*history[:at], replace(history[at], content=(block, *parts)),
                     *history[at + 1:]]
    kept = copy.deepcopy(given_history)
    context = CompactionContext(budget=BUDGET, counter=cf.counter_for_model())
    outcome, _ = run_policy(AnthropicCompaction(), given_history, context)
    out = list(outcome.messages)
    assert given_history == kept  # never mutated
    assert cf.validate(out) == []
    holder = [m for m in out if not isinstance(m.content, str) and block in m.content]
    assert len(holder) == 1 and holder[0].content[0] == block
    handles = {t.handle for t in outcome.targets if t.method == "dropped"}
    assert len(handles) <= 1
